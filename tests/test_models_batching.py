"""The dynamic batcher's moments (SPEC 2) against explicit sums, quadrature and Monte Carlo.

Sources of the reference values:
- explicit Poisson sums and numerical quadrature of the Erlang density (scipy), written
  straight from SPEC 2's conditional definitions — independent of the incomplete-gamma
  identities the kernel uses;
- a Monte Carlo draw of windows with a 5-sigma band from its own standard error;
- the closed forms of the full-batch regime.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from sweep.models.dynamic import batching


@jax.jit
def _window(lam, t_max, b_max):
    return jax.vmap(batching.window_moments)(lam, t_max, b_max)


def window(lam, t_max, b_max) -> batching.BatchMoments:
    arrs = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in (lam, t_max, b_max)))
    return batching.BatchMoments(*(np.asarray(v) for v in _window(*arrs)))


# --------------------------------------------------------------------------- windowed closed forms


def _explicit_window(lam: float, t: float, b: int):
    """SPEC 2 by brute force: explicit Poisson sums and quadrature of the Erlang density."""
    k = b - 1
    mu = lam * t
    n = np.arange(k)
    pn = stats.poisson.pmf(n, mu)
    p_full = stats.poisson.sf(k - 1, mu) if k >= 1 else 1.0
    eb = np.sum((n + 1) * pn) + b * p_full
    eb2 = np.sum((n + 1) ** 2 * pn) + b**2 * p_full
    eb3 = np.sum((n + 1) ** 3 * pn) + b**3 * p_full
    if k >= 1:
        dens = stats.gamma(a=k, scale=1 / lam).pdf
        m1 = integrate.quad(lambda s: s * dens(s), 0, t, epsabs=0, epsrel=1e-13, limit=200)[0]
        m2 = integrate.quad(lambda s: s * s * dens(s), 0, t, epsabs=0, epsrel=1e-13, limit=200)[0]
    else:
        m1 = m2 = 0.0
    timeout = np.sum((n + 1) * pn * (t / 2) * (1 + 1 / (n + 1)))
    etb = (b * m1 / 2 + timeout) / eb
    timeout2 = np.sum(pn * (t * t + n * t * t / 3))
    etb2 = ((k + 2) / 3 * m2 + timeout2) / eb
    return eb, eb2, eb3, etb, etb2


@pytest.mark.parametrize(
    "lam,t_ms,b",
    [(100.0, 50.0, 8), (100.0, 50.0, 2), (10.0, 200.0, 16), (500.0, 20.0, 12), (2.0, 1000.0, 3),
     (1000.0, 5.0, 64), (50.0, 100.0, 1), (300.0, 30.0, 9), (0.1, 10.0, 4)],
)
def test_window_closed_forms_match_explicit_sums(lam, t_ms, b):
    t = t_ms / 1e3
    got = window(lam, t, b)
    want = _explicit_window(lam, t, b)
    for g, w in zip(got, want):
        assert float(g[0]) == pytest.approx(w, rel=1e-10, abs=1e-15)


def test_window_closed_forms_against_monte_carlo():
    rng = np.random.default_rng(20261130)
    lam, t, b = 100.0, 0.05, 8
    n_windows = 200_000
    gaps = rng.exponential(1 / lam, size=(n_windows, b - 1))
    arrivals = np.cumsum(gaps, axis=1)  # followers' arrival times after the opener
    full = arrivals[:, -1] <= t
    close = np.where(full, arrivals[:, -1], t)
    inside = arrivals <= close[:, None]
    size = 1 + inside.sum(axis=1)
    waits_sum = close + np.where(inside, close[:, None] - arrivals, 0.0).sum(axis=1)
    waits_sq = close**2 + np.where(inside, (close[:, None] - arrivals) ** 2, 0.0).sum(axis=1)
    got = window(lam, t, b)
    # Per-batch moments of B; request-weighted moments of T_batch are ratio estimators.
    for power, g in ((1, got.eb), (2, got.eb2), (3, got.eb3)):
        x = size.astype(float) ** power
        assert abs(g[0] - x.mean()) < 5 * x.std() / math.sqrt(n_windows)
    for num, g in ((waits_sum, got.etb), (waits_sq, got.etb2)):
        ratio = num.sum() / size.sum()
        resid = num - ratio * size  # delta method for a ratio of means
        se = resid.std() / size.mean() / math.sqrt(n_windows)
        assert abs(g[0] - ratio) < 5 * se


def test_window_limits():
    lam = np.array([10.0, 10.0, 10.0])
    b = np.array([8.0, 64.0, 4096.0])
    far = window(lam, 1e6, b)  # T_max -> inf: (B-1)/(2 lambda), E[T^2] -> (B^2-1)/(3 lambda^2)
    np.testing.assert_allclose(far.etb, (b - 1) / (2 * lam), rtol=1e-12)
    np.testing.assert_allclose(far.etb2, (b * b - 1) / (3 * lam * lam), rtol=1e-12)
    np.testing.assert_allclose(far.eb, b, rtol=1e-14)
    one = window(np.array([1e-3, 5.0, 1e6]), np.array([0.01, 0.2, 10.0]), 1.0)  # B_max = 1: no wait
    np.testing.assert_array_equal(one.etb, 0.0)
    np.testing.assert_array_equal(one.eb, 1.0)
    slow = window(1e-9, np.array([0.05, 2.0]), 32.0)  # lambda -> 0: the opener waits T_max alone
    np.testing.assert_allclose(slow.etb, [0.05, 2.0], rtol=1e-7)
    np.testing.assert_allclose(slow.eb, 1.0, rtol=1e-7)


def test_window_stable_at_extremes():
    # B up to 4096 and lambda T_max up to 1e5 (SPEC 2): finite, in range, no NaN.
    lam = np.array([1e5, 1e5, 1e3, 4096.0, 1e6, 1e-3])
    t = np.array([1.0, 1e-2, 5.0, 1.0, 1e-1, 10.0])
    b = np.array([4096.0, 4096.0, 2.0, 4096.0, 4096.0, 4096.0])
    m = window(lam, t, b)
    for v in m:
        assert np.isfinite(v).all()
    assert ((m.eb >= 1) & (m.eb <= b)).all()
    # mu = 1e5 >> B: every batch is full, the delay is the full-batch value.
    np.testing.assert_allclose(m.etb[0], (b[0] - 1) / (2 * lam[0]), rtol=1e-12)
    # mu = 4096 = B near the transition: against explicit sums (large-a regime of the gamma).
    want = _explicit_window(4096.0, 1.0, 4096)
    assert m.eb[3] == pytest.approx(want[0], rel=1e-9)
    assert m.etb[3] == pytest.approx(want[3], rel=1e-9)


def test_full_batch_second_moment_closed_form():
    # SPEC 2: m uniform on 0..B-1 Exp(lambda) gaps: E[T^2] = (B^2 - 1) / (3 lambda^2).
    lam, b = 37.0, 11
    m = np.arange(b)
    e2 = np.mean(m / lam**2 + (m / lam) ** 2)  # E[Gamma(m)^2] = m/lam^2 + (m/lam)^2
    fb = batching.full_batch_moments(jnp.float64(lam), jnp.float64(b))
    assert float(fb.etb2) == pytest.approx(e2, rel=1e-14)
