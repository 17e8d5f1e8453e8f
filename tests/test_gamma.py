"""Tests for sweep._gamma: fixed-cost incomplete gamma P/Q and Poisson pmf.

References:
* scipy.special.gammainc / gammaincc wherever scipy itself is accurate to
  ~1e-13 (a <= 100, or |x - a| <= 0.3 a).  Outside that zone scipy's Cephes
  code forms ``a*log(x) - x - lgamma(a)`` directly and is itself off by up to
  ~5e-12 relative for a ~ 4096 (verified against exact arithmetic), so there
  we compare against
* an exact reference for integer a, computed with ``decimal`` at 40 digits
  from the terminating Poisson sums (Q(a, x) = e^-x sum_{n<a} x^n/n!).
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from functools import cache

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.special as sc  # noqa: E402
import scipy.stats  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sweep._gamma import gammainc_pq, poisson_pmf  # noqa: E402

RTOL = 1e-12
TINY = 1e-280  # below this reference value only the absolute bound applies
ATOL_TINY = 1e-290

INT_A = [1, 2, 3, 5, 10, 20, 21, 30, 50, 64, 100, 200, 500, 1000, 2048, 4096, 4097, 5000]

_pq_jit = jax.jit(gammainc_pq)


def _eval(a, x):
    """Jitted evaluation; inputs padded to a power of two to limit recompiles."""
    a, x = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(x, dtype=np.float64))
    shape = a.shape
    a, x = a.ravel(), x.ravel()
    size = max(256, 1 << max(0, int(a.size - 1).bit_length()))
    pad = size - a.size
    p, q = _pq_jit(np.pad(a, (0, pad), constant_values=1.0), np.pad(x, (0, pad)))
    return np.asarray(p)[: a.size].reshape(shape), np.asarray(q)[: a.size].reshape(shape)


def _rel_err(v, ref):
    """Relative error where ref >= TINY; inf where |v - ref| > ATOL_TINY below it."""
    v = np.asarray(v)
    ref = np.asarray(ref)
    big = ref >= TINY
    rel = np.abs(v - ref) / np.where(big, ref, 1.0)
    small_ok = np.abs(v - ref) <= ATOL_TINY
    return np.where(big, rel, np.where(small_ok, 0.0, np.inf))


def _assert_close(v, ref, a, x, what, rtol=RTOL):
    err = _rel_err(v, ref)
    bad = ~(err <= rtol)
    if bad.any():
        i = int(np.argmax(np.where(np.isnan(err), np.inf, err)))
        raise AssertionError(
            f"{what}: {int(bad.sum())} points exceed rtol={rtol}; worst a={a[i]!r} "
            f"x={x[i]!r} got={v[i]!r} ref={ref[i]!r} err={err[i]:.3e}"
        )


def _scipy_trusted(a, x):
    return (a <= 100) | (np.abs(x - a) <= 0.3 * a)


# ---------------------------------------------------------------- exact reference
@cache
def _log_factorials(nmax: int = 5001):
    with localcontext() as ctx:
        ctx.prec = 40
        out = [Decimal(0)]
        acc = Decimal(0)
        for k in range(1, nmax + 1):
            acc += Decimal(k).ln()
            out.append(acc)
    return out


def _exact_pq(a: int, x: float) -> tuple[float, float]:
    """Exact (40-digit) P(a, x), Q(a, x) for integer a >= 1, x >= 0."""
    if x == 0:
        return 0.0, 1.0
    lf = _log_factorials()
    with localcontext() as ctx:
        ctx.prec = 40
        X = Decimal(float(x))
        if x >= a:  # Q = e^-x sum_{n<a} x^n / n!, summed from the top (largest terms)
            t = (-X + (a - 1) * X.ln() - lf[a - 1]).exp()
            s = Decimal(0)
            for n in range(a - 1, -1, -1):
                s += t
                t = t * n / X
                if n > 0 and t < s * Decimal("1e-38"):
                    break
            q = s
            p = 1 - q
        else:  # P = e^-x sum_{n>=a} x^n / n!
            t = (-X + a * X.ln() - lf[a]).exp()
            s = Decimal(0)
            n = a
            while True:
                s += t
                n += 1
                t = t * X / n
                if t < s * Decimal("1e-38"):
                    break
            p = s
            q = 1 - p
        return float(p), float(q)


# ---------------------------------------------------------------- grids
def _int_grid():
    a_list, x_list = [], []
    logx = np.logspace(-6, 7, 66)
    t = np.linspace(-8.0, 8.0, 33)
    for a in INT_A:
        xs = np.concatenate([logx, a + t * math.sqrt(a)])
        xs = xs[xs >= 0]
        a_list.append(np.full(xs.shape, float(a)))
        x_list.append(xs)
    return np.concatenate(a_list), np.concatenate(x_list)


def test_integer_a_grid_against_scipy_where_scipy_is_accurate():
    a, x = _int_grid()
    p, q = _eval(a, x)
    m = _scipy_trusted(a, x)
    _assert_close(p[m], sc.gammainc(a[m], x[m]), a[m], x[m], "P vs scipy")
    _assert_close(q[m], sc.gammaincc(a[m], x[m]), a[m], x[m], "Q vs scipy")


def test_integer_a_against_exact_reference():
    """Everywhere scipy is not trusted, plus a sample of the transition region."""
    a, x = _int_grid()
    rng = np.random.default_rng(0)
    untrusted = ~_scipy_trusted(a, x)
    # the exact sum is slow for huge x; values there are 0/1 anyway (checked below)
    far = untrusted & (x >= a + 60 * np.sqrt(a) + 800)  # Q < 1e-300 there
    p_far, q_far = _eval(a[far], x[far])
    assert np.all(p_far == 1.0) and np.all(q_far <= ATOL_TINY)
    interesting = untrusted & ~far
    trans = np.flatnonzero(_scipy_trusted(a, x) & (a >= 200))
    idx = np.concatenate([np.flatnonzero(interesting), rng.choice(trans, 60, replace=False)])
    a, x = a[idx], x[idx]
    ref = np.array([_exact_pq(int(ai), float(xi)) for ai, xi in zip(a, x)])
    p, q = _eval(a, x)
    _assert_close(p, ref[:, 0], a, x, "P vs exact")
    _assert_close(q, ref[:, 1], a, x, "Q vs exact")


def test_far_tails_are_exactly_zero_or_one():
    a = np.array([1.0, 20.0, 500.0, 5000.0])
    p, q = _eval(a, a + 60 * np.sqrt(a) + 1e6)
    np.testing.assert_array_equal(p, 1.0)
    np.testing.assert_array_equal(q, 0.0)
    p, q = _eval(a[1:], np.full(3, 1e-300))
    np.testing.assert_array_equal(q, 1.0)
    assert np.all(p <= 1e-290)


def test_random_real_a_against_scipy():
    rng = np.random.default_rng(1)
    n = 20000
    a = np.exp(rng.uniform(0.0, math.log(5000.0), n))
    a[:2000] = rng.uniform(1.0, 25.0, 2000)  # small a: CF switch region
    x = np.concatenate(
        [
            np.abs(a[: n // 2] * (1 + rng.normal(size=n // 2) * 4 / np.sqrt(a[: n // 2]))),
            10 ** rng.uniform(-6, 7, n // 2),
        ]
    )
    p, q = _eval(a, x)
    m = _scipy_trusted(a, x)
    assert m.sum() > n // 2
    _assert_close(p[m], sc.gammainc(a[m], x[m]), a[m], x[m], "P vs scipy (real a)")
    _assert_close(q[m], sc.gammaincc(a[m], x[m]), a[m], x[m], "Q vs scipy (real a)")
    # outside the zone where scipy is accurate, scipy's own error is
    # ~eps * (a |log x| + x + lgamma(a)); allow exactly that much slack.
    o = ~m
    slack = 4e-16 * (a[o] * np.abs(np.log(x[o])) + x[o] + sc.gammaln(a[o])) + RTOL
    for v, ref in ((p[o], sc.gammainc(a[o], x[o])), (q[o], sc.gammaincc(a[o], x[o]))):
        err = _rel_err(v, ref)
        assert np.all(err <= slack)


def test_region_boundaries_dense():
    """Dense sweep across every branch switch for non-integer a."""
    rng = np.random.default_rng(2)
    a_small = rng.uniform(1.0, 18.0, 300)
    xs = np.maximum(3.6, 2.8 + 0.52 * a_small)
    a1 = np.repeat(a_small, 21)
    x1 = (xs[:, None] * np.linspace(0.8, 1.2, 21)[None, :]).ravel()
    a_big = np.exp(rng.uniform(math.log(18.0), math.log(100.0), 300))
    # |eta| = 0.5 edges: lam = 0.5784 and 1.5902 (lam - 1 - log lam = 1/8)
    lam = np.concatenate([np.linspace(0.55, 0.61, 7), np.linspace(1.56, 1.62, 7)])
    a2 = np.repeat(a_big, lam.size)
    x2 = (a_big[:, None] * lam[None, :]).ravel()
    a = np.concatenate([a1, a2])
    x = np.concatenate([x1, x2])
    p, q = _eval(a, x)
    _assert_close(p, sc.gammainc(a, x), a, x, "P near switches")
    _assert_close(q, sc.gammaincc(a, x), a, x, "Q near switches")


# ---------------------------------------------------------------- structure
def test_sum_monotone_and_range():
    a_vals = np.array(INT_A + [1.5, 7.3, 17.9, 18.1, 333.3, 4444.4], dtype=float)
    x = np.concatenate([[0.0], np.logspace(-6, 7, 1500)])
    a = np.repeat(a_vals, x.size)
    xx = np.tile(x, a_vals.size)
    p, q = _eval(a, xx)
    assert np.all(np.isfinite(p)) and np.all(np.isfinite(q))
    assert np.all((p >= 0) & (p <= 1) & (q >= 0) & (q <= 1))
    assert np.max(np.abs(p + q - 1.0)) <= 1e-15
    p = p.reshape(a_vals.size, -1)
    q = q.reshape(a_vals.size, -1)
    # monotone up to the 1e-13-level agreement of adjacent branches
    assert np.all(np.diff(p, axis=1) >= -1e-13 * p[:, 1:])
    assert np.all(np.diff(q, axis=1) <= 1e-13 * q[:, :-1])


def test_edges():
    a = np.array([1.0, 1.5, 2.0, 17.5, 18.0, 100.0, 4096.0, 5000.0])
    p, q = _eval(a, np.zeros_like(a))
    np.testing.assert_array_equal(p, 0.0)
    np.testing.assert_array_equal(q, 1.0)
    p, q = _eval(a, np.full_like(a, np.inf))
    np.testing.assert_array_equal(p, 1.0)
    np.testing.assert_array_equal(q, 0.0)
    p, q = _eval(a, np.full_like(a, 1e7))
    np.testing.assert_array_equal(p, 1.0)
    np.testing.assert_array_equal(q, 0.0)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(1.0, 5000.0, allow_nan=False),
            st.one_of(st.floats(0.0, 1e7, allow_nan=False), st.just(float("inf"))),
        ),
        min_size=64,
        max_size=64,
    )
)
def test_hypothesis_no_nan(pairs):
    a = np.array([t[0] for t in pairs])
    x = np.array([t[1] for t in pairs])
    p, q = _eval(a, x)
    assert not np.isnan(p).any() and not np.isnan(q).any()
    assert np.all((p >= 0) & (p <= 1) & (q >= 0) & (q <= 1))
    assert np.max(np.abs(p + q - 1.0)) <= 1e-15
    fin = np.isfinite(x)
    m = fin & _scipy_trusted(a, x)
    _assert_close(p[m], sc.gammainc(a[m], x[m]), a[m], x[m], "P (hypothesis)")
    _assert_close(q[m], sc.gammaincc(a[m], x[m]), a[m], x[m], "Q (hypothesis)")


# ---------------------------------------------------------------- transforms
@pytest.mark.toolchain  # bit equality under jit + vmap holds for this XLA; JAX 0.4.35 differs by 1 ulp
def test_jit_vmap_and_elementwise_agree():
    rng = np.random.default_rng(3)
    a = rng.integers(1, 4098, 64).astype(np.float64)
    x = 10 ** rng.uniform(-3, 5, 64)
    p_ref, q_ref = _eval(a, x)
    pv, qv = jax.jit(jax.vmap(gammainc_pq))(jnp.asarray(a), jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(pv), p_ref)
    np.testing.assert_array_equal(np.asarray(qv), q_ref)
    # scalar call
    ps, qs = jax.jit(gammainc_pq)(a[17], x[17])
    assert ps.shape == ()
    np.testing.assert_allclose(
        [float(ps), float(qs)], [p_ref[17], q_ref[17]], rtol=1e-12, atol=1e-300
    )
    # broadcasting / 2-D, un-jitted (op by op), nested vmap over a grid
    a2 = a[:8]
    x2 = x[:16]
    P2, Q2 = gammainc_pq(a2[:, None], x2[None, :])
    assert P2.shape == (8, 16)
    Pg, Qg = jax.jit(jax.vmap(jax.vmap(gammainc_pq, (None, 0)), (0, None)))(a2, x2)
    # eager (op-by-op) and fused code may round differently at the 1e-13 level
    np.testing.assert_allclose(np.asarray(Pg), np.asarray(P2), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(np.asarray(Qg), np.asarray(Q2), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(
        np.asarray(P2), sc.gammainc(a2[:, None], x2[None, :]), rtol=1e-11, atol=1e-300
    )


def test_poisson_tail_use_case():
    """P(N >= k + 2) = P(k + 2, mu) for N ~ Poisson(mu)."""
    k = np.arange(0, 4097, 7, dtype=np.float64)
    for mu in (0.5, 30.0, 700.0, 3000.0):
        p, _ = _eval(k + 2, np.full_like(k, mu))
        ref = scipy.stats.poisson.sf(k + 1, mu)
        m = _scipy_trusted(k + 2, np.full_like(k, mu))
        _assert_close(p[m], ref[m], k[m] + 2, np.full(m.sum(), mu), f"Poisson tail mu={mu}")


# ---------------------------------------------------------------- poisson_pmf
def test_poisson_pmf_against_scipy():
    rng = np.random.default_rng(4)
    n = rng.integers(0, 4097, 4000).astype(np.float64)
    x = np.concatenate([rng.uniform(0, 50, 2000), n[2000:] * (1 + rng.normal(size=2000) * 0.05)])
    x = np.abs(x)
    got = np.asarray(jax.jit(poisson_pmf)(n, x))
    ref = scipy.stats.poisson.pmf(n, x)
    # both are exp(<log-space expression>); the exponent is ~n log n in size,
    # so agreement is limited to ~eps * (n |log x| + x + lgamma(n+1)).
    tol = 1e-14 + 4e-16 * (n * np.abs(np.log(np.maximum(x, 1e-300))) + x + sc.gammaln(n + 1))
    big = ref > 1e-280
    assert np.all(np.abs(got - ref)[big] <= tol[big] * ref[big])
    assert np.all(np.abs(got - ref)[~big] <= 1e-280)


def test_poisson_pmf_edges():
    n = jnp.array([-3.0, -1.0, 0.0, 1.0, 2.0, 50.0])
    np.testing.assert_array_equal(np.asarray(poisson_pmf(n, 0.0)), [0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(np.asarray(poisson_pmf(n, jnp.inf)), [0, 0, 0, 0, 0, 0])
    v = np.asarray(poisson_pmf(n, 3.5))
    assert not np.isnan(v).any()
    np.testing.assert_array_equal(v[:2], 0.0)
    np.testing.assert_allclose(v[2:], scipy.stats.poisson.pmf([0, 1, 2, 50], 3.5), rtol=1e-13)
    # integer n accepted, vmappable
    vi = jax.jit(jax.vmap(poisson_pmf, (0, None)))(jnp.arange(5), 2.0)
    ref = scipy.stats.poisson.pmf(np.arange(5), 2.0)
    np.testing.assert_allclose(np.asarray(vi), ref, rtol=1e-13)


def test_derivatives_match_central_differences_and_the_density():
    """The forward-mode rule: dP/dx is the gamma density x^(a-1) e^-x / Gamma(a) (scipy's
    gamma.pdf, a closed form), dP/da the derivative of the computed function (central
    differences in a, step 1e-5 a: relative 1e-6), dQ = -dP; in forward and reverse mode,
    one input at a time (the other's tangent a symbolic zero) and both together."""
    rng = np.random.default_rng(3)
    a = 10 ** rng.uniform(0, 3.5, 400)
    x = a * 10 ** rng.uniform(-0.5, 0.5, 400)

    def p(a, x):
        return gammainc_pq(a, x)[0]

    dpa, dpx = jax.vmap(jax.grad(p, argnums=(0, 1)))(a, x)
    fa, fx = jax.vmap(jax.jacfwd(p, argnums=(0, 1)))(a, x)
    only_x = jax.vmap(jax.grad(p, argnums=1))(a, x)
    only_a = jax.vmap(jax.jacfwd(p, argnums=0))(a, x)
    dq = jax.vmap(jax.grad(lambda a, x: gammainc_pq(a, x)[1], argnums=(0, 1)))(a, x)
    np.testing.assert_allclose(dpx, scipy.stats.gamma.pdf(x, a), rtol=1e-10)
    h = 1e-5 * a
    fd = (np.asarray(p(a + h, x)) - np.asarray(p(a - h, x))) / (2 * h)
    big = np.abs(fd) > 1e-6  # rounding: P's error (2e-13) over the step (>= 1e-5) is < 2e-8 absolute
    np.testing.assert_allclose(np.asarray(dpa)[big], fd[big], rtol=1e-6)
    for u, v in ((fa, dpa), (fx, dpx), (only_x, dpx), (only_a, dpa), (dq[0], -dpa), (dq[1], -dpx)):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-300)
    edge = jax.grad(p, argnums=1)
    assert float(edge(1.0, 0.0)) == 1.0 and float(edge(3.0, 0.0)) == 0.0 and float(edge(3.0, np.inf)) == 0.0
