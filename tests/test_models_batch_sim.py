"""Tests of the JAX batcher simulator (`sweep.simulate`) against an independent
plain-Python event simulation and queueing theory (M/D/1, Little's law)."""

from __future__ import annotations

import decimal
import heapq
import math
from collections import deque
from decimal import Decimal

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import trapezoid
from scipy.optimize import brentq
from scipy.stats import t as student_t

jax.config.update("jax_enable_x64", True)

from sweep.models.dynamic import batch_sim as sim  # noqa: E402
from sweep.models.dynamic.batch_sim import (  # noqa: E402
    SimSettings,
    SimulationError,
    replication_draws,
    simulate,
    simulate_requests,
)

N_REF = 450  # arrivals per reference comparison (one compiled shape for all of them)
C_SLOTS = 4  # worker slots used by every per-request call (one compiled shape)
SMALL = SimSettings(n_requests=400, warmup=50, replications=2, seed=3)


# --------------------------------------------------------------------------------------
# reference: window-by-window event simulation of the rule in the spec, written without
# any of the JAX formulation's shortcuts (explicit FIFO queue, heap of worker free times)
# --------------------------------------------------------------------------------------


def reference(arrivals, z, *, b_max, t_max_s, t_fixed_s, t_req_s, workers,
              queue_capacity=math.inf, service_cv=0.0):
    """Per-request latencies (+inf if dropped) and dropped flags.

    Arrivals at time t are processed before a dispatch at t; a window that can no longer
    fill when the input ends uses the last arrival time as its fill time; the batch
    opened by request i has service multiplier exp(mu + sigma z[i])."""
    a = [float(x) for x in arrivals]
    n = len(a)
    big_b, t_max, cap = int(round(b_max)), float(t_max_s), float(queue_capacity)
    s2 = math.log1p(service_cv**2)
    sig, mu = math.sqrt(s2), -s2 / 2
    free = [0.0] * int(round(workers))  # heap of worker free times
    waiting = deque()  # admitted, not yet dispatched (FIFO)
    lat = [math.inf] * n
    dropped = [False] * n
    i = 0
    d_prev = -math.inf

    def arrive(j):
        if len(waiting) >= cap:
            dropped[j] = True
        else:
            waiting.append(j)

    while True:
        if not waiting:
            if i >= n:
                break
            arrive(i)
            i += 1
            continue
        # a window opens: the oldest waiting request is the opener
        a_o = a[waiting[0]]
        f_min = free[0]
        while True:  # find the fill time: arrival of the B-th waiting request
            if len(waiting) >= big_b:
                t_full = a[waiting[big_b - 1]]
                break
            if i >= n:
                t_full = a[n - 1]  # end of input
                break
            if a[i] > max(d_prev, f_min, a_o + t_max):  # dispatched before that arrival
                t_full = math.inf
                break
            arrive(i)
            i += 1
        d = max(d_prev, f_min, min(t_full, a_o + t_max))
        while i < n and a[i] <= d:  # arrivals up to the dispatch instant
            arrive(i)
            i += 1
        batch = [waiting.popleft() for _ in range(min(big_b, len(waiting)))]
        done = d + (t_fixed_s + t_req_s * len(batch)) * math.exp(mu + sig * z[batch[0]])
        heapq.heapreplace(free, done)
        for j in batch:
            lat[j] = done - a[j]
        d_prev = d
    return np.array(lat), np.array(dropped)


def _scenarios():
    """Small scenarios covering c = 1..3, finite K (incl. 0), T_max finite/0/inf, B 1..16."""
    out = []
    for c in (1, 2, 3):
        for b_max, t_max, cap in [
            (1, 0.0, math.inf), (4, 0.3, math.inf), (16, 2.0, 10.0), (8, math.inf, math.inf),
            (3, 0.5, 3.0), (8, math.inf, 20.0), (2, 1.0, 0.0), (12, 0.2, 40.0),
        ]:
            out.append(dict(b_max=b_max, t_max_s=t_max, t_fixed_s=0.4, t_req_s=0.08 * c,
                            workers=c, queue_capacity=cap, service_cv=0.5 if b_max % 2 else 0.0))
    return out


@pytest.mark.parametrize("ties", [False, True])
def test_per_request_latencies_match_reference(ties):
    rng = np.random.default_rng(11 + ties)
    n_drops = 0
    for kw in _scenarios():
        lam = rng.uniform(0.5, 4.0)  # from light to overloaded
        a = np.cumsum(rng.exponential(1.0 / lam, N_REF))
        if ties:
            a = np.round(a, 1)  # simultaneous arrivals, dispatches coinciding with arrivals
        z = rng.standard_normal(N_REF)
        lat_ref, drop_ref = reference(a, z, **kw)
        out = simulate_requests(a, z, **kw, max_workers=C_SLOTS)
        np.testing.assert_array_equal(out["dropped"], drop_ref, err_msg=str(kw))
        ok = ~drop_ref
        np.testing.assert_allclose(out["latency_s"][ok], lat_ref[ok], rtol=0, atol=1e-9,
                                   err_msg=str(kw))
        assert np.all(np.isinf(out["latency_s"][drop_ref]))
        # batches are FIFO and consecutive; completions per batch are consistent
        bid = out["batch_index"][ok]
        assert np.all(np.diff(bid) >= 0) and (bid.size == 0 or bid[0] == 0)
        assert out["completion_s"].shape[0] == (bid.max() + 1 if bid.size else 0)
        n_drops += int(drop_ref.sum())
    assert n_drops > 0  # the finite-K cases did shed load


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    lam=st.floats(0.3, 6.0), b_max=st.integers(1, 16),
    t_max=st.sampled_from([0.0, 0.05, 0.4, 3.0, math.inf]), t_fixed=st.floats(0.0, 1.0),
    t_req=st.floats(0.0, 0.3), workers=st.integers(1, C_SLOTS),
    cap=st.sampled_from([math.inf, 0.0, 1.0, 5.0, 16.0, 100.0]),
    cv=st.sampled_from([0.0, 0.3, 2.0]), grid=st.sampled_from([0.0, 0.05, 0.5]),
    seed=st.integers(0, 2**16),
)
def test_reference_property(lam, b_max, t_max, t_fixed, t_req, workers, cap, cv, grid, seed):
    """Random scenarios (incl. arrivals on a time grid: ties) agree with the reference."""
    if math.isinf(t_max) and cap < b_max:
        cap = math.inf  # a batch could never fill: rejected by callers
    rng = np.random.default_rng(seed)
    a = np.cumsum(rng.exponential(1.0 / lam, N_REF))
    if grid:
        a = np.round(a / grid) * grid
    z = rng.standard_normal(N_REF)
    kw = dict(b_max=b_max, t_max_s=t_max, t_fixed_s=t_fixed, t_req_s=t_req, workers=workers,
              queue_capacity=cap, service_cv=cv)
    lat_ref, drop_ref = reference(a, z, **kw)
    out = simulate_requests(a, z, **kw, max_workers=C_SLOTS)
    np.testing.assert_array_equal(out["dropped"], drop_ref)
    np.testing.assert_allclose(out["latency_s"][~drop_ref], lat_ref[~drop_ref], rtol=0,
                               atol=1e-9)


def test_batched_simulate_matches_reference_on_its_own_draws():
    """simulate() (vmapped, chunked, warm-up, statistics) == reference on the same draws."""
    params = {k: [] for k in sim.PARAM_KEYS}
    scen = [dict(lam=3.0, b_max=4, t_max_s=0.2, t_fixed_s=0.3, t_req_s=0.1, workers=2,
                 queue_capacity=math.inf, service_cv=0.3),
            dict(lam=6.0, b_max=8, t_max_s=math.inf, t_fixed_s=0.5, t_req_s=0.1, workers=1,
                 queue_capacity=12.0, service_cv=0.0),
            dict(lam=2.0, b_max=1, t_max_s=0.0, t_fixed_s=0.9, t_req_s=0.1, workers=3,
                 queue_capacity=5.0, service_cv=1.0)]
    for s in scen:
        for k in sim.PARAM_KEYS:
            params[k].append(s[k])
    res = simulate(params, SMALL, percentile=[0.95, 0.8, 0.5])
    for i, s in enumerate(scen):
        kw = {k: v for k, v in s.items() if k != "lam"}
        means, ps, drops = [], [], []
        for r in range(SMALL.replications):
            a, z = replication_draws(SMALL, i, r, lam=s["lam"])
            lat, dr = reference(a, z, **kw)
            m = lat[SMALL.warmup:][~dr[SMALL.warmup:]]
            means.append(m.mean())
            ps.append(np.quantile(m, [0.5, 0.9, 0.99, 0.999, [0.95, 0.8, 0.5][i]]))
            drops.append(dr[SMALL.warmup:].mean())
        ps = np.mean(ps, axis=0)
        np.testing.assert_allclose(res["mean_s"][i], np.mean(means), rtol=1e-11)
        for j, key in enumerate(["p50_s", "p90_s", "p99_s", "p999_s", "p_s"]):
            np.testing.assert_allclose(res[key][i], ps[j], rtol=1e-11, err_msg=key)
        np.testing.assert_allclose(res["drop_rate"][i], np.mean(drops), rtol=1e-12)
        # mean batch size over the batches holding measured requests (warm-up members
        # of the first such batch included), from the per-request batch indices
        mb = []
        for r in range(SMALL.replications):
            a, z = replication_draws(SMALL, i, r, lam=s["lam"])
            bid = simulate_requests(a, z, **kw, max_workers=C_SLOTS)["batch_index"]
            meas = bid[SMALL.warmup:][bid[SMALL.warmup:] >= 0]
            lo, hi = meas.min(), meas.max()
            mb.append(np.sum((bid >= lo) & (bid <= hi)) / (hi - lo + 1))
        np.testing.assert_allclose(res["mean_batch"][i], np.mean(mb), rtol=1e-12)
        tq = student_t.ppf(0.975, SMALL.replications - 1)
        # half-width of p_s across the two replications
        per_rep = []
        for r in range(SMALL.replications):
            a, z = replication_draws(SMALL, i, r, lam=s["lam"])
            lat, dr = reference(a, z, **kw)
            per_rep.append(np.quantile(lat[SMALL.warmup:][~dr[SMALL.warmup:]], [0.95, 0.8, 0.5][i]))
        hw = tq * np.std(per_rep, ddof=1) / np.sqrt(SMALL.replications)
        np.testing.assert_allclose(res["p_hw_s"][i], hw, rtol=1e-9, atol=1e-12)
    assert res["drop_rate"][1] > 0 and res["drop_rate"][2] > 0


# --------------------------------------------------------------------------------------
# queueing theory
# --------------------------------------------------------------------------------------


def _md1_wait_cdf(t, lam, d):
    """Erlang: P(W <= t) = (1-rho) sum_{k=0}^{floor(t/D)} (lam(kD-t))^k / k! e^{-lam(kD-t)}.

    The alternating sum cancels catastrophically in floats for large t; 60-digit decimals."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        lam_, d_, t_ = Decimal(float(lam)), Decimal(float(d)), Decimal(float(t))
        total = Decimal(0)
        for k in range(int(math.floor(t / d)) + 1):
            x = lam_ * (k * d_ - t_)
            total += (x**k if k else Decimal(1)) / math.factorial(k) * (-x).exp()
        return float((1 - lam_ * d_) * total)


def _md1_latency_quantile(q, lam, d):
    if q <= 1.0 - lam * d:
        return d  # the atom of W at 0
    w = brentq(lambda t: _md1_wait_cdf(t, lam, d) - q, 0.0, 40.0 * d, xtol=1e-10)
    return w + d


def test_md1_mean_and_quantiles():
    """B_max = 1, c = 1, deterministic service D: M/D/1.

    CIs: each of the R = 8 replications (20 000 requests after 2 000 warm-up) gives one
    estimate; the interval is mean +- t_{0.975,7} sd / sqrt(8) (simulate's *_hw_s). The
    mean must fall inside the 95% interval; the quantiles (a quantile of a finite sample
    is slightly biased) inside the 99% one, i.e. hw * t_{0.995,7} / t_{0.975,7}."""
    lam, t_fixed, t_req = 0.7, 0.6, 0.4
    d = t_fixed + t_req
    rho = lam * d
    qs = [0.5, 0.9, 0.99]
    one = dict(lam=lam, b_max=1.0, t_max_s=0.0, t_fixed_s=t_fixed, t_req_s=t_req, workers=1.0,
               queue_capacity=math.inf, service_cv=0.0)
    params = {k: np.full(len(qs), v) for k, v in one.items()}
    res = simulate(params, SimSettings(n_requests=20_000, warmup=2_000, replications=8, seed=0),
                   percentile=qs)
    pk = d + lam * d * d / (2.0 * (1.0 - rho))  # Pollaczek-Khinchine
    for i in range(len(qs)):
        assert abs(res["mean_s"][i] - pk) <= res["mean_hw_s"][i], (res["mean_s"][i], pk)
    widen = student_t.ppf(0.995, 7) / student_t.ppf(0.975, 7)
    for i, q in enumerate(qs):
        exact = _md1_latency_quantile(q, lam, d)
        assert abs(res["p_s"][i] - exact) <= widen * res["p_hw_s"][i], (q, res["p_s"][i], exact)
        assert res["p_hw_s"][i] < 0.05 * exact  # and the interval is informative
    np.testing.assert_allclose(res["utilization"], rho, rtol=0.03)
    np.testing.assert_array_equal(res["mean_batch"], 1.0)
    np.testing.assert_array_equal(res["drop_rate"], 0.0)
    # the fixed quantile outputs agree with p_s where they coincide
    np.testing.assert_array_equal(res["p50_s"][0], res["p_s"][0])
    np.testing.assert_array_equal(res["p99_s"][2], res["p_s"][2])


def test_md1_exact_distribution_helper():
    # sanity of the Erlang formula itself: P(W = 0) = 1 - rho, and mean by integration = PK
    lam, d = 0.7, 1.0
    assert _md1_wait_cdf(0.0, lam, d) == pytest.approx(0.3)
    ts = np.linspace(0.0, 40.0, 801)
    cdf = np.array([_md1_wait_cdf(t, lam, d) for t in ts])
    assert np.all(np.diff(cdf) >= -1e-15) and cdf[-1] == pytest.approx(1.0, abs=1e-9)
    mean_w = trapezoid(1.0 - cdf, ts)  # scipy's: NumPy < 2 has no np.trapezoid
    assert mean_w == pytest.approx(lam * d * d / (2 * (1 - lam * d)), rel=2e-3)


def test_littles_law():
    """Time-average number in system over the measured span == arrival rate x mean latency.

    The number in system is integrated exactly from the per-request (arrival, completion)
    pairs of replication 0; it is compared with lam * mean_s of simulate() for the same
    replication (replications = 1)."""
    settings = SimSettings(n_requests=20_000, warmup=2_000, replications=1, seed=5)
    one = dict(lam=40.0, b_max=8.0, t_max_s=0.05, t_fixed_s=0.04, t_req_s=0.01, workers=2.0,
               queue_capacity=math.inf, service_cv=0.4)
    res = simulate({k: [v] for k, v in one.items()}, settings)
    a, z = replication_draws(settings, 0, 0, lam=one["lam"])
    kw = {k: v for k, v in one.items() if k != "lam"}
    out = simulate_requests(a, z, **kw)
    w = settings.warmup
    arr, dep = a[w:], a[w:] + out["latency_s"][w:]
    assert np.all(np.isfinite(dep))
    t0, t1 = arr[0], arr[-1]
    # exact integral of N(t) over [t0, t1] for the measured requests
    area = np.sum(np.clip(np.minimum(dep, t1) - np.maximum(arr, t0), 0.0, None))
    l_time_avg = area / (t1 - t0)
    assert res["mean_s"][0] == pytest.approx(out["latency_s"][w:].mean(), rel=1e-12)
    assert l_time_avg == pytest.approx(one["lam"] * res["mean_s"][0], rel=0.03)
    # and with the empirical rate the sample-path identity is tight
    lam_hat = (arr.size - 1) / (t1 - t0)
    assert l_time_avg == pytest.approx(lam_hat * res["mean_s"][0], rel=5e-3)


# --------------------------------------------------------------------------------------
# engineering properties
# --------------------------------------------------------------------------------------


def _grid(n=6, seed=0, **over):
    rng = np.random.default_rng(seed)
    p = dict(
        lam=rng.uniform(2.0, 12.0, n), b_max=rng.integers(1, 17, n).astype(float),
        t_max_s=rng.choice([0.0, 0.05, 0.3, np.inf], n), t_fixed_s=rng.uniform(0.05, 0.3, n),
        t_req_s=rng.uniform(0.0, 0.05, n), workers=np.resize([1.0, 2.0, 3.0, 4.0], n),
        queue_capacity=rng.choice([np.inf, 64.0], n), service_cv=rng.uniform(0.0, 1.0, n),
    )
    p.update(over)
    return p


def test_deterministic_and_chunk_independent():
    p = _grid()
    r1 = simulate(p, SMALL)
    r2 = simulate(p, SMALL)
    for k in r1:
        np.testing.assert_array_equal(r1[k], r2[k], err_msg=k)
    # one scenario per chunk instead of all six in one: same numbers
    r3 = simulate(p, SMALL, max_lanes=SMALL.replications)
    for k in r1:
        np.testing.assert_allclose(r3[k], r1[k], rtol=1e-12, atol=0, err_msg=k)
    # a sub-grid keeps the scenario's stream only if it keeps its index: scenario 0 alone
    r4 = simulate({k: v[:1] for k, v in p.items()}, SMALL)
    for k in r1:
        np.testing.assert_allclose(r4[k], r1[k][:1], rtol=1e-12, err_msg=k)
    # another seed changes the draws
    r5 = simulate(p, SimSettings(**{**SMALL.__dict__, "seed": SMALL.seed + 1}))
    assert not np.array_equal(r5["mean_s"], r1["mean_s"])


def test_second_call_with_same_shapes_does_not_recompile():
    simulate(_grid(seed=1), SMALL)
    before = sim._TRACES
    cache = sim._chunk._cache_size()
    # different values (including K finite vs inf, T_max inf, other percentile) same shapes
    simulate(_grid(seed=2, queue_capacity=np.full(6, np.inf)), SMALL, percentile=0.9)
    simulate(_grid(seed=3, t_max_s=np.full(6, np.inf), queue_capacity=np.full(6, 100.0)), SMALL)
    assert sim._TRACES == before
    assert sim._chunk._cache_size() == cache


def test_no_nan_in_extreme_scenarios():
    n = 6
    p = dict(
        lam=np.array([50.0, 5.0, 5.0, 1e-3, 10.0, 400.0]),
        b_max=np.array([1.0, 4.0, 4.0, 8.0, 64.0, 2.0]),
        t_max_s=np.array([0.0, 0.1, 0.1, np.inf, 0.0, 1e-4]),
        t_fixed_s=np.array([1.0, 0.1, 0.1, 0.1, 0.0, 0.5]),
        t_req_s=np.array([0.5, 0.0, 0.0, 0.1, 0.0, 0.5]),
        workers=np.array([1.0, 2.0, 3.0, 4.0, 1.0, 1.0]),
        queue_capacity=np.array([np.inf, 0.0, 2.0, np.inf, np.inf, 3.0]),
        service_cv=np.array([0.0, 0.5, 2.0, 0.0, 0.0, 3.0]),
    )
    res = simulate(p, SMALL)
    for k, v in res.items():
        assert v.shape == (n,) and not np.any(np.isnan(v.astype(float))), k
    # 0: unstable (rho = 75): the backlog grows all run long, so the point is not steady and
    # its latencies are unbounded, not the finite numbers of one horizon (issue 10, item 8)
    assert not res["steady"][0] and np.isinf(res["p99_s"][0]) and np.isinf(res["mean_s"][0])
    assert res["utilization"][0] == pytest.approx(1.0, abs=0.02)
    assert res["steady"][1:].all()  # dropping everything, shedding load, zero service: all bounded
    # 1: K = 0 drops everything: +inf latencies, drop rate 1, half-width inf
    assert res["drop_rate"][1] == 1.0 and np.isinf(res["mean_s"][1]) and np.isinf(res["p_s"][1])
    assert np.isinf(res["p_hw_s"][1]) and res["utilization"][1] == 0.0
    # 2: tiny queue sheds some load
    assert 0.0 < res["drop_rate"][2] < 1.0 and np.isfinite(res["p999_s"][2])
    # 4: zero service time: latency 0
    assert res["mean_s"][4] == 0.0 and res["p999_s"][4] == 0.0
    assert np.all((res["utilization"] >= 0) & (res["utilization"] <= 1 + 1e-9))
    assert np.all((res["drop_rate"] >= 0) & (res["drop_rate"] <= 1))
    # a single replication: no interval (inf), not NaN
    r1 = simulate(p, SimSettings(n_requests=400, warmup=50, replications=1))
    assert np.all(np.isinf(r1["p_hw_s"])) and not np.any(np.isnan(r1["p_s"]))


def test_trace_replay():
    rng = np.random.default_rng(7)
    tr = np.cumsum(rng.exponential(0.25, N_REF))
    one = dict(b_max=4.0, t_max_s=0.2, t_fixed_s=0.3, t_req_s=0.1, workers=2.0,
               queue_capacity=8.0, service_cv=0.0)
    params = {k: [v, v] for k, v in one.items()}  # no lam needed with a trace
    settings = SimSettings(n_requests=1, warmup=50, replications=3)
    res = simulate(params, settings, percentile=0.9, trace=tr)
    lat, dr = reference(tr, np.zeros(N_REF), **one)
    m = lat[50:][~dr[50:]]
    np.testing.assert_allclose(res["mean_s"], m.mean(), rtol=1e-12)
    np.testing.assert_allclose(res["p_s"], np.quantile(m, 0.9), rtol=1e-12)
    np.testing.assert_array_equal(res["p_hw_s"], 0.0)  # cv = 0: replications coincide


def test_invalid_input_is_rejected():
    p = _grid()
    with pytest.raises(SimulationError, match="missing"):
        simulate({k: v for k, v in p.items() if k != "b_max"}, SMALL)
    with pytest.raises(SimulationError, match="differ in length"):
        simulate({**p, "lam": p["lam"][:3]}, SMALL)
    with pytest.raises(SimulationError, match="never fills"):
        simulate({**p, "t_max_s": np.full(6, np.inf), "queue_capacity": np.full(6, 2.0),
                  "b_max": np.full(6, 4.0)}, SMALL)
    with pytest.raises(SimulationError, match="workers"):
        simulate({**p, "workers": np.zeros(6)}, SMALL)
    with pytest.raises(SimulationError, match="percentile"):
        simulate(p, SMALL, percentile=1.5)
    with pytest.raises(SimulationError, match="percentile"):
        simulate(p, SMALL, percentile=[0.5, 0.9])
    with pytest.raises(SimulationError, match="trace"):
        simulate(p, SMALL, trace=np.array([3.0, 1.0] * 100))
    empty = simulate({k: np.empty(0) for k in sim.PARAM_KEYS}, SMALL)
    assert all(v.shape == (0,) for v in empty.values()) and "p_hw_s" in empty


def test_an_overloaded_queue_is_not_steady_and_a_loaded_one_is():
    """Steady-state detection (`steady_lanes`): M/D/1 with deterministic service at rho =
    0.7 is steady in every replication; at rho = 1.2 the backlog grows linearly, so the last
    quarter waits far more than twice the first. The seed grid's B = 1 point (505%) is the
    audit's case: it reported a finite 882,901 ms before."""
    p = {k: np.repeat(v, 2) for k, v in dict(b_max=[1.0], t_max_s=[0.0], t_fixed_s=[0.01], t_req_s=[0.0], workers=[1.0],
                                             queue_capacity=[np.inf], service_cv=[0.0]).items()}
    p["lam"] = np.array([70.0, 120.0])
    res = simulate(p, SimSettings(n_requests=8000, warmup=500, replications=4, seed=1))
    assert res["steady"].tolist() == [True, False]
    assert np.isfinite(res["mean_s"][0]) and np.isinf(res["mean_s"][1]) and np.isinf(res["p_hw_s"][1])
    lat = np.column_stack([np.linspace(1.0, 1.1, 400), np.linspace(1.0, 5.0, 400), np.full(400, np.inf)])
    assert sim.steady_lanes(lat).tolist() == [1.0, 0.0, 1.0]  # flat, growing 5x, all dropped
