"""The distribution of a sum of two independent sojourns (`sweep.models.shared.sojourn`).

References: the hypoexponential CDF of two independent exponentials with rates a1 != a2,
1 - (a2 e^{-a1 t} - a1 e^{-a2 t}) / (a2 - a1) (written without cancellation below), and the
Erlang-2 quantile in closed form, 1 + a t = -W_{-1}(-(1 - q) / e) (W the Lambert function);
for a deterministic-service stage, an independent adaptive quadrature (scipy `quad`, told
where the density jumps) of Crommelin's M/D/1 waiting-time CDF.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.optimize import brentq
from scipy.special import gammainc, lambertw

from sweep.models.shared import sojourn as sj
from sweep.testing.toy import MD1Queue

#: Rate pairs (per ms), equal to extreme ratios: one stage 1e7 times faster than the other
RATES = [(0.5, 0.5), (1.0, 2.0), (1.0, 1.0001), (1.0, 100.0), (100.0, 1.0), (1.0, 1e4), (1e4, 1.0), (3.0, 1e-3),
         (1.0, 1e7), (1e7, 1.0)]
LEVELS = [0.5, 0.9, 0.99, 0.999999]


def hypo_cdf(t: float, a1: float, a2: float) -> float:
    """P(X1 + X2 <= t), Xi ~ Exp(ai): 1 - e^{-a t} (1 + a (1 - e^{-(b - a) t}) / (b - a)),
    a = min, b = max (the textbook form, rearranged so that a1 ~ a2 does not cancel)."""
    a, b = min(a1, a2), max(a1, a2)
    if a == b:
        return 1.0 - math.exp(-a * t) * (1.0 + a * t)
    return 1.0 - math.exp(-a * t) * (1.0 + a * -math.expm1(-(b - a) * t) / (b - a))


def exps(a1: float, a2: float) -> tuple[sj.Sojourn, sj.Sojourn]:
    yes = jnp.bool_(True)
    return sj.exponential(jnp.float64(a1), yes), sj.exponential(jnp.float64(a2), yes)


@jax.jit
@jax.vmap
def _exp_sum(a1, a2, t, q):
    """(P(X1 + X2 <= t), the q-quantile of X1 + X2) for Xi ~ Exp(ai): one compilation."""
    yes = jnp.bool_(True)
    first, second = sj.exponential(a1, yes), sj.exponential(a2, yes)
    return sj.sum_cdf(first, second, t), sj.sum_quantile(first, second, q)


def test_sum_of_exponentials_is_the_hypoexponential():
    cases = [(a1, a2, q) for a1, a2 in RATES for q in LEVELS]
    a1, a2, q = (np.array(c) for c in zip(*cases))
    t = np.array([brentq(lambda t, a=a, b=b, q=q: hypo_cdf(t, a, b) - q, 0.0, 50.0 / min(a, b), xtol=1e-300, rtol=1e-15)
                  for a, b, q in cases])
    cdf, quantile = (np.asarray(v) for v in _exp_sum(a1, a2, t, q))
    # the CDF to a few roundings of 1 - F (largest error measured: 3.3e-16 with JAX 0.10, 1.4e-15
    # with JAX 0.4.35 at the declared floors, both at six nines); the quantile to 1e-12, and
    # 5e-10 at six nines (an error of 1e-16 in F moves it by 1e-16 / f(t), 6e-12 relative for
    # Erlang-2 there: measured 1.2e-10 at the floors, where F's error is 1.4e-15)
    assert np.abs(cdf - q).max() <= 5e-15
    rel = np.abs(quantile / t - 1.0)
    assert rel[q < 0.9999].max() <= 1e-12 and rel.max() <= 5e-10


def test_erlang_two_quantile_in_closed_form():
    q = np.array(LEVELS)
    exact = (-lambertw(-(1.0 - q) / math.e, k=-1).real - 1.0) / 0.5
    _, quantile = _exp_sum(np.full(4, 0.5), np.full(4, 0.5), exact, q)
    rel = np.abs(np.asarray(quantile) / exact - 1.0)
    assert rel[:3].max() <= 1e-12 and rel.max() <= 1e-10


@functools.cache
def _md1_q(rho: float, n: int = 200) -> np.ndarray:
    """Q_0 .. Q_n of the M/D/1 queue from the level-crossing recursion (sweep.testing.toy
    docstring), with SciPy's incomplete gamma for P(A >= j)."""
    abar = [1.0, *(gammainc(j, rho) for j in range(1, n + 2))]
    pi = [1.0 - rho]
    for j in range(1, n + 1):
        pi.append((pi[0] * abar[j] + sum(pi[k] * abar[j - k + 1] for k in range(1, j))) / math.exp(-rho))
    return np.cumsum(pi)


def _md1_cdf(w: float, rho: float, d: float) -> float:
    """Crommelin's M/D/1 waiting-time CDF in plain Python (sweep.testing.toy docstring)."""
    q = _md1_q(rho)
    k, m = int(w // d), rho / d * (d - (w - (w // d) * d))
    return sum(q[k + 1 - j] * math.exp(-m) * m**j / math.factorial(j) for j in range(k + 1))


@pytest.mark.parametrize("rho,d,a2", [(0.35, 0.042, 9.36), (0.6, 1.0, 0.5), (0.9, 1.0, 2.0), (0.3, 1.0, 50.0),
                                      (0.95, 1.0, 0.01)])
def test_md1_wait_plus_exponential_against_adaptive_quadrature(rho, d, a2):
    """The quadrature puts panel edges at the M/D/1 density's jumps (Sojourn.breaks_ms);
    without them it was off by 1e-2 (and not monotone)."""
    md1 = MD1Queue().sojourn({"arrival_rps": jnp.float64(rho / d * 1e3), "replicas": jnp.float64(1.0),
                              "service_ms": jnp.float64(d)})
    second = sj.exponential(jnp.float64(a2), jnp.bool_(True))
    cdf = jax.jit(lambda x: sj.sum_cdf(md1, second, x + d))  # W1 + W2 <= x: T1 = D + W1
    for x in (0.3 * d, 1.7 * d, 5.5 * d, 12.2 * d, 30.0 * d):
        jumps = [x - k * d for k in range(1, int(x / d) + 1)]
        ref, _ = quad(lambda v, x=x: _md1_cdf(x - v, rho, d) * a2 * math.exp(-a2 * v), 0.0, x, points=jumps or None,
                      limit=500, epsabs=1e-16, epsrel=1e-13)
        assert float(cdf(jnp.float64(x))) == pytest.approx(ref, abs=2e-15)


def test_a_deterministic_second_stage_shifts_the_first():
    """W2 = 0 surely (atom 1): the sum's quantile is the first's plus the shift."""

    def fixed() -> sj.Sojourn:
        return sj.Sojourn(jnp.float64(7.0), jnp.float64(1.0), jnp.float64(7.0), lambda w: jnp.where(w >= 0.0, 1.0, 0.0),
                          lambda p: jnp.zeros_like(p), jnp.bool_(True))

    @jax.jit
    @jax.vmap
    def quantiles(q):
        first = sj.exponential(jnp.float64(0.2), jnp.bool_(True))
        return sj.sum_quantile(first, fixed(), q), sj.sum_quantile(fixed(), fixed(), q)

    q = np.array(LEVELS)
    shifted, both = quantiles(q)
    np.testing.assert_allclose(shifted, 7.0 - np.log1p(-q) / 0.2, rtol=1e-14)
    assert (np.asarray(both) == 14.0).all()  # both atoms hold q: exactly the shifts


def test_union_bound_is_above_the_independent_sum():
    @jax.jit
    @jax.vmap
    def both(q):
        first, second = (sj.exponential(jnp.float64(a), jnp.bool_(True)) for a in (1.0, 3.0))
        r = 0.5 * (1.0 + q)
        return sj.union_bound(first.quantile(r), second.quantile(r)), sj.sum_quantile(first, second, q)

    bound, exact = both(np.array(LEVELS))
    assert (np.asarray(bound) >= np.asarray(exact)).all()


def test_unbounded_is_inf_never_nan():
    @jax.jit
    def unbounded(q, t):
        first = sj.exponential(jnp.float64(0.0), jnp.bool_(False))  # a zero rate: unstable
        second = sj.exponential(jnp.float64(1.0), jnp.bool_(True))
        grad = jax.grad(lambda t: sj.sum_cdf(first, second, t))(t)
        return sj.sum_quantile(first, second, q), sj.sum_cdf(first, second, t), first.mean(), grad

    quantile, cdf, mean, grad = (float(v) for v in unbounded(jnp.float64(0.99), jnp.float64(3.0)))
    assert quantile == math.inf and mean == math.inf and cdf == 0.0 and not math.isnan(grad)
