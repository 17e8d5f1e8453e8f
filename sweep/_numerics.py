"""Numerically delicate helpers, kept together; each says why it is safe.

All of them are elementwise `jax.numpy` code with no data-dependent control flow, so they
jit and vmap to straight-line vector code. Branches are `jnp.where` selections, and every
discarded branch is fed a harmless input first (the "double where"), so an infinity or NaN
in a branch that is not taken never leaks into the result or its gradient.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from sweep._gamma import gammainc_pq, poisson_pmf

try:  # JAX >= 0.4.36
    from jax.extend.core import Literal
except ImportError:  # pragma: no cover - the oldest supported JAX (.ci/floors)
    from jax.core import Literal  # type: ignore[attr-defined,no-redef]

__all__ = ["gammainc_pq", "kept_in_memory", "opaque_one", "over_samples", "poisson_pmf", "poisson_tails", "safe_div"]


def safe_div(num: Array, den: Array, ok: Array, fill: float) -> Array:
    """`num / den` where `ok`, else `fill`; the division never sees a bad denominator.

    Safe: the denominator is replaced by 1 where `ok` is false before dividing, so the
    untaken branch computes a finite number that `where` then discards.
    """
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), fill)


def opaque_one(x: Array) -> Array:
    """1.0, NaN where `x` is NaN: a 1 that XLA cannot fold away. Dividing a value by it
    changes nothing (x / 1 == x exactly) and makes XLA:CPU keep the quotient in memory:
    a division is never duplicated into the consumers a fusion would otherwise copy a
    cheap chain of arithmetic into (`sweep._gamma` multiplies by the same 1 inline)."""
    return jnp.where(jnp.isnan(x), x, 1.0)


@jax.custom_vjp
def _keep(x: Array) -> Array:
    """`x`; under reverse-mode differentiation, its value and its cotangent each divided by
    an `opaque_one`, so that XLA keeps both in memory (see `kept_in_memory`)."""
    return x


def _keep_fwd(x: Array) -> tuple[Array, None]:
    return x / opaque_one(x), None


def _keep_bwd(_: None, ct: Array) -> tuple[Array]:
    return (ct / opaque_one(ct),)


_keep.defvjp(_keep_fwd, _keep_bwd)

#: calls whose bodies `kept_in_memory` walks into (the rest, custom-derivative functions and
#: loops included, are bound whole, with their own derivative rules)
_INLINE = frozenset({"pjit", "jit", "closed_call", "core_call"})


def _bind(e: Any, *invals: Any) -> list[Any]:
    """The primitive of the jaxpr equation `e` applied to `invals`: its outputs, as a list."""
    params = e.primitive.get_bind_params(e.params)
    subfuns: tuple[Any, ...] = ()
    if isinstance(params, tuple):  # JAX < 0.5: (subfuns, params)
        subfuns, params = params
    outs = e.primitive.bind(*subfuns, *invals, **params)
    return list(outs) if e.primitive.multiple_results else [outs]


def kept_in_memory(f: Callable[..., Any]) -> Callable[..., Any]:
    """`f` (a function of arrays and pytrees of arrays, for ONE point) with every scalar
    floating-point value it uses more than once passed through an identity whose value and
    cotangent XLA cannot fuse into their consumers: for programs that `jax.vjp`/`jax.jacrev`
    differentiate and XLA:CPU compiles.

    Why: XLA's CPU compiler computes a cheap intermediate (a product, a sum, a selection)
    again in every fused kernel that consumes it rather than keep it in memory. In a reverse
    pass every adjoint feeds each of its operands' adjoints, so a model's backward pass is
    recomputed, nearly whole, for each input it is differentiated in: continuous serving's
    derivative program executed 30,515 operations per point where it asks for 7,997, and
    16,631 through this function (`benchmarks/uncertainty.py`). Kept in memory, each value and each adjoint is
    computed once; the values are unchanged (a division by an exact 1), the derivatives
    move only by the rounding of a different fusion.

    Reverse mode only: the identity's rule is a `custom_vjp` (forward-mode differentiation
    of the result raises). Evaluated without differentiation the result is `f` itself."""

    def run(jaxpr: Any, consts: list[Any], args: list[Any]) -> list[Any]:
        uses: Counter[Any] = Counter(v for e in jaxpr.eqns for v in e.invars if not isinstance(v, Literal))
        uses.update(v for v in jaxpr.outvars if not isinstance(v, Literal))
        env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))

        def read(v: Any) -> Any:
            return v.val if isinstance(v, Literal) else env[v]

        def write(v: Any, value: Any) -> None:
            aval: Any = v.aval
            if uses[v] > 1 and aval.shape == () and jnp.issubdtype(aval.dtype, jnp.floating):
                value = _keep(value)
            env[v] = value

        for v, a in zip(jaxpr.invars, args):
            write(v, a)
        for e in jaxpr.eqns:
            invals = [read(v) for v in e.invars]
            if e.primitive.name in _INLINE and "jaxpr" in e.params:
                inner = e.params["jaxpr"]
                outs = run(inner.jaxpr, list(inner.consts), invals)
            else:
                outs = _bind(e, *invals)
            for v, o in zip(e.outvars, outs):
                write(v, o)
        return [read(v) for v in jaxpr.outvars]

    def g(*args: Any) -> Any:
        flat, tree = jax.tree_util.tree_flatten(args)
        closed, shape = jax.make_jaxpr(lambda *fl: f(*jax.tree_util.tree_unflatten(tree, fl)),
                                       return_shape=True)(*flat)
        outs = run(closed.jaxpr, list(closed.consts), flat)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), outs)

    return g


def over_samples(f: Callable[[dict[str, Any]], Any], shared: dict[str, Any], varying: dict[str, Any]) -> Any:
    """`jax.vmap(f)` over S samples of ONE point's inputs, with the work that depends on the
    `shared` inputs alone done once rather than once per sample. `f` takes one dict (the
    union of `shared`'s keys and `varying`'s); `varying`'s values are (S,) arrays (S >= 1),
    `shared`'s the same in every sample. The result's leaves have a leading S axis.

    Why: the plain form, every input broadcast to (S,) and `jax.vmap` over them, leaves it to
    XLA to see what does not vary, and it sees only part of it: continuous serving with
    S = 64 executed 457,599 operations per point (`benchmarks/uncertainty.py`), 399,535
    through this function. The textbook form, `in_axes=None` for the shared inputs, is worse
    still (1,032,880): JAX's batching rules then carry unbatched values into the fixed
    point's loop and the fused kernels, and XLA:CPU computes their chains again for every
    sample.

    How: `f` is traced for one sample and its equations run one by one (calls inlined). An
    equation none of whose inputs varies runs once, on the shared values; an equation with
    a varying input runs under `jax.vmap` over the samples with every input batched, each
    shared one broadcast to (S,) once per call site. The values are `f`'s (the same
    primitives on the same numbers; XLA may round a fused expression differently in the
    last bit)."""
    merged = {**shared, **{k: v[0] for k, v in varying.items()}}
    flat, tree = jax.tree_util.tree_flatten(merged)
    vary = jax.tree_util.tree_leaves({k: k in varying for k in merged})
    args = jax.tree_util.tree_leaves({k: varying[k] if k in varying else shared[k] for k in merged})
    s = jax.tree_util.tree_leaves(varying)[0].shape[0]
    closed, shape = jax.make_jaxpr(lambda *fl: f(jax.tree_util.tree_unflatten(tree, fl)), return_shape=True)(*flat)

    def run(jaxpr: Any, consts: list[Any], vals: list[Any], flags: list[bool]) -> list[tuple[Any, bool]]:
        # env: each variable's value and whether it varies; `wide`: shared values broadcast
        # to (S,), per call (an inlined call's variables are the same objects at every site)
        env: dict[Any, tuple[Any, bool]] = {v: (c, False) for v, c in zip(jaxpr.constvars, consts)}
        env.update({v: (a, b) for v, a, b in zip(jaxpr.invars, vals, flags)})
        wide: dict[Any, Any] = {}

        def read(v: Any) -> tuple[Any, bool]:
            return (v.val, False) if isinstance(v, Literal) else env[v]

        def widened(v: Any, value: Any) -> Any:
            if isinstance(v, Literal):
                return jnp.broadcast_to(value, (s, *jnp.shape(value)))
            if v not in wide:
                wide[v] = jnp.broadcast_to(value, (s, *jnp.shape(value)))
            return wide[v]

        for e in jaxpr.eqns:
            ins = [read(v) for v in e.invars]
            if e.primitive.name in _INLINE and "jaxpr" in e.params:
                inner = e.params["jaxpr"]
                outs = run(inner.jaxpr, list(inner.consts), [a for a, _ in ins], [b for _, b in ins])
            elif not any(b for _, b in ins):
                outs = [(o, False) for o in _bind(e, *(a for a, _ in ins))]
            else:
                batched = [a if b else widened(v, a) for v, (a, b) in zip(e.invars, ins)]
                outs = [(o, True) for o in jax.vmap(functools.partial(_bind, e))(*batched)]
            for v, o in zip(e.outvars, outs):
                env[v] = o
        return [read(v) for v in jaxpr.outvars]

    outs = [a if b else jnp.broadcast_to(a, (s, *jnp.shape(a)))
            for a, b in run(closed.jaxpr, list(closed.consts), args, vary)]
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), outs)


def poisson_tails(k: Array, mu: Array) -> tuple[Array, Array]:
    """Upper and lower Poisson tails around `k` from ONE incomplete-gamma evaluation.

    For N ~ Poisson(mu) returns two arrays of shape (6,) + k.shape:
        upper[i] = P(N >= k - 3 + i)     for i = 0..5  (indices k-3 .. k+2)
        lower[i] = P(N <= k - 4 + i)     for i = 0..5  (indices k-4 .. k+1)

    Safe: `gammainc_pq(k + 2, mu)` gives both P(N >= k+2) and P(N <= k+1), each accurate
    on its own (the smaller is computed directly, not as 1 minus the larger). The other
    upper tails follow by ADDING pmf terms going down (no cancellation); the lower tails by
    subtracting them going down, which loses relative accuracy only where the lower tail is
    already negligible beside the upper one (mu >> k), so every sum built from both stays
    accurate in absolute terms. Indices below zero are exact constants (P(N >= j) = 1,
    P(N <= j) = 0 for j < 0).
    """
    upper_top, lower_top = gammainc_pq(k + 2.0, mu)  # P(N >= k+2), P(N <= k+1)
    uppers = [upper_top]
    lowers = [lower_top]
    for j in range(1, 6):  # index k+2-j for upper, k+1-j for lower
        idx_u = k + 2.0 - j
        uppers.append(uppers[-1] + poisson_pmf(idx_u, mu))
        idx_l = k + 1.0 - j
        lowers.append(jnp.maximum(lowers[-1] - poisson_pmf(idx_l + 1.0, mu), 0.0))
    upper = jnp.stack(uppers[::-1])  # indices k-3 .. k+2
    lower = jnp.stack(lowers[::-1])  # indices k-4 .. k+1
    offs_u = jnp.arange(-3.0, 3.0).reshape((6,) + (1,) * jnp.ndim(k))
    offs_l = jnp.arange(-4.0, 2.0).reshape((6,) + (1,) * jnp.ndim(k))
    upper = jnp.where(k + offs_u <= 0, 1.0, jnp.minimum(upper, 1.0))
    lower = jnp.where(k + offs_l < 0, 0.0, jnp.minimum(lower, 1.0))
    return upper, lower
