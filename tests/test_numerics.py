"""`sweep._numerics.kept_in_memory`: the same function, the same derivatives; and
`over_samples`: the same values as `jax.vmap`, with the shared work done once.

The reference for every figure is the same function without the wrapper (JAX's own
reverse mode, or `jax.vmap` over the samples): `kept_in_memory` only divides values and
cotangents by an exact 1, so values must agree bit for bit and derivatives to rounding;
`over_samples` runs the same primitives on the same numbers, so values agree to rounding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sweep  # noqa: F401  (float64)
from sweep._numerics import _keep, gammainc_pq, kept_in_memory, over_samples, safe_div


def _model(a, b, c):
    """Shared intermediates used many times (the case the wrapper is for), a jnp.where
    (an inlined call), a custom-derivative function (the incomplete gamma function, bound
    whole) and a loop (bound whole)."""
    s = a * b + jnp.sin(a)
    t = s * s + c * s
    u = jnp.where(s > 0.5, t / (1.0 + s), safe_div(c, s, s != 0.0, 0.0))
    p, q = gammainc_pq(1.0 + c, 1.0 + a * a)
    w = jax.lax.fori_loop(0, 3, lambda i, y: 0.5 * (y + t / y), 1.0 + t)
    return {"u": u * p + s, "v": q * t - u * s, "w": w + u}


def test_values_are_unchanged():
    rng = np.random.default_rng(3)
    x = [jnp.asarray(rng.uniform(0.1, 3.0, 64)) for _ in range(3)]
    plain = jax.jit(jax.vmap(_model))(*x)
    kept = jax.jit(jax.vmap(kept_in_memory(_model)))(*x)
    for k in plain:
        np.testing.assert_array_equal(np.asarray(kept[k]), np.asarray(plain[k]))


def test_reverse_mode_derivatives_agree():
    rng = np.random.default_rng(4)
    x = [jnp.asarray(rng.uniform(0.1, 3.0, 64)) for _ in range(3)]

    def jac(f):
        return jax.jit(jax.vmap(jax.jacrev(lambda a, b, c: f(a, b, c), argnums=(0, 1, 2))))(*x)

    plain, kept = jac(_model), jac(kept_in_memory(_model))
    for k in plain:
        for d_plain, d_kept in zip(plain[k], kept[k]):
            np.testing.assert_allclose(np.asarray(d_kept), np.asarray(d_plain), rtol=1e-12, atol=1e-300)


def test_the_identity_keeps_its_value_and_cotangent_exactly():
    x = jnp.asarray([0.0, -2.5, 1e-300, np.inf])
    np.testing.assert_array_equal(np.asarray(jax.vmap(_keep)(x)), np.asarray(x))
    value, pullback = jax.vjp(jax.vmap(_keep), x)
    np.testing.assert_array_equal(np.asarray(value), np.asarray(x))
    ct = jnp.asarray([1.0, -3.0, 1e-300, np.inf])  # (XLA:CPU flushes subnormals, here as anywhere)
    np.testing.assert_array_equal(np.asarray(pullback(ct)[0]), np.asarray(ct))


def test_forward_mode_is_refused():
    """Its identity is a `custom_vjp`: forward mode is not defined (documented), and JAX
    says so rather than returning something wrong."""
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(kept_in_memory(lambda a: a * a + a), (1.5,), (1.0,))


@jax.jit
def _helper(x, y):
    return jnp.exp(-x) * y + x


def _per_sample(q):
    """`_model` plus what `over_samples` must get right: a jitted helper called at two sites
    with different values (an inlined call whose variables are the same objects at both),
    an output that depends on shared inputs alone, and an integer input."""
    out = _model(q["a"], q["b"], q["c"])
    out["h"] = _helper(q["a"], q["b"]) + _helper(q["c"], q["a"]) + _helper(2.0 * q["c"], q["b"])
    out["shared_only"] = jnp.log1p(q["c"]) * q["n"].astype(jnp.float64)
    return out


def test_over_samples_equals_vmap():
    rng = np.random.default_rng(5)
    n, s = 16, 8
    shared = {"c": jnp.asarray(rng.uniform(0.1, 3.0, n)), "n": jnp.arange(n, dtype=jnp.int32)}
    varying = {"a": jnp.asarray(rng.uniform(0.1, 3.0, (n, s))), "b": jnp.asarray(rng.uniform(0.1, 3.0, (n, s)))}

    def plain(sh, va):
        full = {**{k: jnp.broadcast_to(v, (s,)) for k, v in sh.items()}, **va}
        return jax.vmap(_per_sample)(full)

    want = jax.jit(jax.vmap(plain))(shared, varying)
    got = jax.jit(jax.vmap(lambda sh, va: over_samples(_per_sample, sh, va)))(shared, varying)
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == (n, s) == want[k].shape
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-14, atol=0.0)


def test_over_samples_does_shared_work_once():
    """In the traced program an operation on the shared input alone is on a scalar (log1p(c),
    and exp(-c) inside the jitted helper) and one that involves a varying input is on the
    (S,) samples (sin(a), exp(-a))."""
    def f(sh, va):
        return over_samples(_per_sample, sh, va)

    jaxpr = jax.make_jaxpr(f)({"c": jnp.float64(1.5), "n": jnp.int32(2)}, {"a": jnp.ones(8), "b": jnp.ones(8)}).jaxpr
    shapes = {}
    for e in jaxpr.eqns:
        for v in e.outvars:
            shapes.setdefault(e.primitive.name, set()).add(v.aval.shape)
    assert shapes["log1p"] == {()}  # log1p(c): shared only, once
    assert shapes["sin"] == {(8,)}  # sin(a): varying
    assert () in shapes["exp"] and (8,) in shapes["exp"]  # _helper(c, .): exp(-c) once; exp(-a) per sample
