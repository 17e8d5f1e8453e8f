"""Tests of the greedy-batcher approximation (`sweep.models.dynamic.batcher.batcher_point`): its exact
limits, robustness over wide inputs, and agreement with the simulator."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _points import dynamic
from hypothesis import given, settings
from hypothesis import strategies as st

from sweep.models.dynamic.batch_sim import SimSettings, simulate
from sweep.models.dynamic.batcher import batcher_point

_point = jax.jit(batcher_point)


def model(lam, b, t, tf, tr, cv=0.0, q=0.99):
    o = _point(*(jnp.float64(x) for x in (lam, b, t, tf, tr, cv, q)))
    return {k: np.asarray(v) for k, v in o.items()}


def proxy(lam, b, t, tf, tr, cv=0.0, q=0.99):
    """The window proxy's moments (SI units) at the same point, through the grid's model."""
    r = dynamic(arrival_rps=lam, batch_size=b, batch_window_ms=t * 1e3, t_fixed_ms=tf * 1e3, t_req_ms=tr * 1e3,
                service_cv=cv, percentile=q)
    return {"rho": r["rho"][0], "mean_batch": r["mean_batch"][0], "proxy_ok": r["proxy_ok"][0],
            "e_wait": r["e_wait_ms"][0] / 1e3, "e_batch": r["e_batch_ms"][0] / 1e3, "e_resp": r["e_resp_ms"][0] / 1e3}


# ------------------------------------------------------------------------------ limits


@pytest.mark.parametrize("rho", [0.1, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("t_max", [0.0, 0.01, np.inf])
@pytest.mark.parametrize("cv", [0.0, 0.5])
def test_b1_is_pollaczek_khinchine(rho, t_max, cv):
    """B_max = 1: batches of one, the M/G/1 queue; E[T] is P-K exactly, Var[W] Takacs."""
    tf, tr = 0.03, 0.002
    s = tf + tr
    lam = rho / s
    o = model(lam, 1, t_max, tf, tr, cv)
    m2 = 1 + cv**2
    ew = lam * s * s * m2 / (2 * (1 - rho))
    assert o["mean_batch"] == 1.0 and o["e_batch"] == 0.0
    np.testing.assert_allclose(o["e_wait"], ew, rtol=1e-12)
    np.testing.assert_allclose(o["e_resp"], ew + s, rtol=1e-12)
    var_w = ew**2 + lam * s**3 * m2**3 / (3 * (1 - rho))  # Takacs
    var_s = (m2 - 1) * s * s
    np.testing.assert_allclose(o["sd_resp"] ** 2, var_w + var_s, rtol=1e-12)
    np.testing.assert_allclose(o["rho"], rho, rtol=1e-12)


@pytest.mark.parametrize("b", [4, 16, 64])
@pytest.mark.parametrize("rho", [0.1, 0.3])
def test_full_batch_limit(b, rho):
    """T_max = inf: full batches, the proxy's exact batch, accumulation and service terms;
    the wait is the Erlang-arrival GI/D/1 one, below the proxy's Poisson-batch P-K wait, so
    E[T] is within 10% of the full-batch proxy at moderate load (and never above it)."""
    tf, tr = 0.05, 0.0005
    lam = rho * b / (tf + tr * b)
    o, p = model(lam, b, np.inf, tf, tr), proxy(lam, b, np.inf, tf, tr)
    assert o["mean_batch"] == b
    np.testing.assert_allclose(o["e_batch"], (b - 1) / (2 * lam), rtol=1e-12)
    np.testing.assert_allclose(o["e_svc"], tf + tr * b, rtol=1e-12)
    np.testing.assert_allclose(o["rho"], p["rho"], rtol=1e-12)
    assert o["e_wait"] <= p["e_wait"]
    assert o["e_resp"] <= p["e_resp"] <= 1.10 * o["e_resp"]


@pytest.mark.parametrize("b", [4, 16, 64])
@pytest.mark.parametrize("t_max", [0.002, 0.02, 0.2])
def test_light_load_is_window_proxy(b, t_max):
    """lam S -> 0 (here lam T_svc(B_max) = 0.01): the worker is almost always idle when a
    window closes; batch, accumulation and response are the window proxy's to O(lam S)."""
    tf, tr = 0.05, 0.0005
    lam = 0.01 / (tf + tr * b)
    o, p = model(lam, b, t_max, tf, tr), proxy(lam, b, t_max, tf, tr)
    np.testing.assert_allclose(o["mean_batch"], p["mean_batch"], rtol=0.01)
    assert abs(o["e_batch"] - p["e_batch"]) <= 0.01 * p["e_resp"]
    np.testing.assert_allclose(o["e_resp"], p["e_resp"], rtol=0.01)


def test_stays_stable_where_the_proxy_fails():
    """A short window under load: the proxy's rho exceeds 1 (+inf), the batcher is stable
    and the model's batch grows toward B_max with a utilisation below 1."""
    tf, tr, b = 0.05, 0.0005, 64
    lam = 0.8 * b / (tf + tr * b)
    o, p = model(lam, b, 0.002, tf, tr), proxy(lam, b, 0.002, tf, tr)
    assert not p["proxy_ok"] and np.isinf(p["e_resp"])
    assert o["stable"] and np.isfinite(o["e_resp"]) and np.isfinite(o["p_q"])
    assert p["mean_batch"] < 3 < 20 < o["mean_batch"] < b
    assert 0 < o["rho"] <= 1


# ------------------------------------------------------------------------------ robustness

_KEYS = ("e_resp", "p_q", "p_gauss", "p_exp", "sd_resp", "e_wait", "e_batch", "e_svc", "mean_batch",
         "rho", "rho_full")


@settings(max_examples=150, deadline=None)
@given(
    lam=st.floats(1e-4, 1e6),
    b=st.integers(1, 4096),
    t_max=st.one_of(st.just(0.0), st.just(np.inf), st.floats(1e-7, 100.0)),
    tf=st.one_of(st.just(0.0), st.floats(1e-7, 1.0)),
    tr=st.one_of(st.just(0.0), st.floats(1e-9, 0.1)),
    cv=st.one_of(st.just(0.0), st.floats(0.0, 3.0)),
    q=st.floats(0.5, 0.9999),
)
def test_never_nan_and_inf_exactly_when_unstable(lam, b, t_max, tf, tr, cv, q):
    o = model(lam, b, t_max, tf, tr, cv, q)
    for k in _KEYS:
        assert not np.isnan(o[k]), k
    stable = lam * (tf + tr * b) < b
    assert bool(o["stable"]) == stable
    times = ("e_resp", "p_q", "p_gauss", "p_exp", "e_wait")
    if stable:
        for k in times:
            assert np.isfinite(o[k]) and o[k] >= 0, k
        assert 1.0 <= o["mean_batch"] <= b * (1 + 1e-12)
        assert o["rho"] <= 1.0 + 1e-9
        assert o["p_q"] >= o["e_resp"] * (1 - 1e-12) or q < 0.5
        assert o["e_resp"] >= tf + tr - 1e-15
    else:
        for k in times:
            assert o[k] == np.inf, k


def test_vmaps_and_inf_boundary():
    """Vectorised use, and the stability edge lam = B / T_svc(B) itself is +inf."""
    tf, tr, b = 0.05, 0.0005, 16.0
    edge = b / (tf + tr * b)
    lam = jnp.array([0.5 * edge, edge, 2 * edge])
    n = lam.shape[0]
    o = jax.vmap(batcher_point)(lam, jnp.full(n, b), jnp.full(n, 0.01), jnp.full(n, tf), jnp.full(n, tr),
                                jnp.zeros(n), jnp.full(n, 0.99))
    stable = np.asarray(lam) * (tf + tr * b) < b  # the same comparison as SPEC 3's `stable`
    assert stable[0] and not stable[2]
    np.testing.assert_array_equal(np.asarray(o["stable"]), stable)
    np.testing.assert_array_equal(np.isinf(np.asarray(o["e_resp"])), ~stable)
    np.testing.assert_array_equal(np.isinf(np.asarray(o["p_q"])), ~stable)


# ------------------------------------------------------------------------------ simulator

# (B_max, T_max s, rho_full, T_fixed s, t_req s): the proxy is +inf at the first two.
SIM_POINTS = [
    (16, 0.002, 0.8, 0.05, 0.0005),
    (64, 0.02, 0.7, 0.02, 0.002),
    (4, 0.02, 0.5, 0.05, 0.0005),
    (64, np.inf, 0.5, 0.05, 0.0005),
]


def test_against_simulator():
    """Tolerance: mean within 8% and P99 within 15% of the simulated values, beyond the
    simulator's own 95% half-width. Justification: over the 144-point benchmark grid
    (benchmarks/results/batcher.md) the model's largest mean error is 9% and the median 1%
    (P99: 25% / 2%), the largest errors at rho_full >= 0.85 or B_max = 4 with a timed-out
    window; at these four points (rho_full <= 0.8) the model is within 5% (mean) and 12%
    (P99, the B_max = 4 point) of this small run, so the bounds leave room for sampling
    error while still failing on a real regression (the window proxy is +inf at three of
    them and 25% high at the fourth)."""
    pts = np.array([(r * b / (tf + tr * b), b, t, tf, tr) for b, t, r, tf, tr in SIM_POINTS]).T
    n = pts.shape[1]
    sim = simulate(
        dict(lam=pts[0], b_max=pts[1], t_max_s=pts[2], t_fixed_s=pts[3], t_req_s=pts[4],
             workers=np.ones(n), queue_capacity=np.full(n, np.inf), service_cv=np.zeros(n)),
        SimSettings(n_requests=20_000, warmup=2_000, replications=4, seed=11), 0.99,
    )
    for i in range(n):
        o = model(*pts[:, i])
        assert abs(o["e_resp"] - sim["mean_s"][i]) <= 0.08 * sim["mean_s"][i] + sim["mean_hw_s"][i], i
        assert abs(o["p_q"] - sim["p_s"][i]) <= 0.15 * sim["p_s"][i] + sim["p_hw_s"][i], i
        assert abs(o["mean_batch"] - sim["mean_batch"][i]) <= 0.05 * sim["mean_batch"][i], i
