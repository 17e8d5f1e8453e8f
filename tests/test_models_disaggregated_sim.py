"""Tests of the disaggregated-serving simulator (`sweep.models.disaggregated.sim`): the light-load
closed form, request identity through both pools, agreement with the two existing simulators
run separately on the same arrival stream, the batched driver against the per-request one, and
bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sweep.models.continuous import sim as cb_sim
from sweep.models.disaggregated import sim as ds
from sweep.models.dynamic import batch_sim

SYSTEM = dict(
    prefill_replicas=2.0, decode_replicas=3.0, prefill_b_max=4.0, prefill_t_max_s=0.02,
    prefill_t_fixed_s=0.03, prefill_t_req_s=0.01, prefill_service_cv=0.0,
    kv_bytes_per_token=2.0e5, link_bytes_per_s=5.0e10, link_latency_s=0.002,
    decode_cap=6.0, decode_max_batched_tokens=np.inf, decode_kv_capacity_tokens=np.inf,
    decode_block_tokens=1.0, decode_queue_capacity=np.inf, decode_t_fixed=0.01, decode_t_token=2e-4,
    decode_t_ctx=1e-7, decode_service_cv=0.0,
)
N = 256  # requests per hand case (one compiled shape per pool)


def _stream(seed, n=N, gap=0.04, o_lo=1, o_hi=40):
    rng = np.random.default_rng(seed)
    a = np.cumsum(rng.exponential(gap, n))
    p = rng.integers(1, 800, n).astype(float)
    o = rng.integers(o_lo, o_hi, n).astype(float)
    return a, p, o, rng.uniform(size=n), rng.uniform(size=n), rng.standard_normal(n)


def test_light_load_closed_form():
    """Arrivals 1000 s apart: every request is alone in both pools. Its window closes after
    T_max with only itself in it, and its batch takes T_svc(1) = t_fixed + t_req, so
    TTFT = T_max + T_svc(1) (SPEC 2 with no follower) -- except the last request, whose
    window is flushed at the end of input (its own arrival): TTFT = T_svc(1). It then moves
    its KV in link_latency + kv_bytes_per_token P / link_bytes_per_s, and decode step
    i = 1..O-1 carries one token with P + i cached (SPEC 10 rule 4, the prompt cached), so
    E2E = TTFT + transfer + (O-1)(t_f + t_t + t_c P) + t_c O (O-1) / 2; O = 1: E2E = TTFT."""
    a, p, o, up, ud, _ = _stream(1)
    a = 1000.0 * np.arange(N)
    r = ds.simulate_disaggregated_requests(a, p, o, up, ud, SYSTEM)
    s = SYSTEM
    svc1 = s["prefill_t_fixed_s"] + s["prefill_t_req_s"]
    ttft = np.full(N, s["prefill_t_max_s"] + svc1)
    ttft[-1] = svc1
    np.testing.assert_allclose(r["ttft_s"], ttft, rtol=1e-9)
    np.testing.assert_allclose(r["prefill_service_s"], svc1, rtol=1e-9)
    xfer = s["link_latency_s"] + s["kv_bytes_per_token"] * p / s["link_bytes_per_s"]
    dec = (o - 1) * (s["decode_t_fixed"] + s["decode_t_token"] + s["decode_t_ctx"] * p) \
        + s["decode_t_ctx"] * o * (o - 1) / 2
    e2e = np.where(o >= 2, ttft + xfer + dec, ttft)
    assert np.any(o == 1) and np.any(o >= 2)
    np.testing.assert_allclose(r["e2e_s"], e2e, rtol=1e-9)
    np.testing.assert_allclose(r["transfer_s"][o >= 2], xfer[o >= 2], rtol=1e-12)
    assert np.all(np.isnan(r["transfer_s"][o == 1])) and np.all(r["decode_replica"][o == 1] == -1)
    np.testing.assert_array_equal(r["decode_wait_s"][o >= 2], 0.0)
    go = o >= 2  # (finish - first token) of times near 2.6e5 s: one ulp is 6e-11 s
    np.testing.assert_allclose(r["client_tpot_s"][go], (xfer + dec)[go] / (o[go] - 1), rtol=1e-9, atol=2e-10)
    # the decode pool's interval: its own steps only (no transfer, no wait: admitted on arrival)
    np.testing.assert_allclose(r["tpot_s"][go], dec[go] / (o[go] - 1), rtol=1e-9, atol=2e-10)
    np.testing.assert_allclose(r["decode_sojourn_s"][go], dec[go], rtol=1e-9, atol=2e-10)
    # a lone request's batch never fills (B_max = 4): all of its wait is the batching delay
    np.testing.assert_array_equal(r["prefill_wait_s"], 0.0)
    np.testing.assert_allclose(r["prefill_batching_s"], ttft - svc1, rtol=1e-9, atol=1e-12)


def test_requests_keep_their_identity():
    """Loaded (batches form, decode slots are contended), noisy prefill, varying lengths:
    every request's decode arrival is its own first-token time plus its own transfer, its
    routes are floor(u R), and its times are ordered arrival <= dispatch <= first token <
    decode arrival <= admission < finish."""
    a, p, o, up, ud, z = _stream(2, gap=0.01)
    sysp = dict(SYSTEM, prefill_service_cv=0.5, decode_cap=2.0)
    r = ds.simulate_disaggregated_requests(a, p, o, up, ud, sysp, batch_z=z)
    go = o >= 2
    xfer = sysp["link_latency_s"] + sysp["kv_bytes_per_token"] * p / sysp["link_bytes_per_s"]
    np.testing.assert_array_equal(r["decode_arrival_s"][go], r["first_s"][go] + xfer[go])
    np.testing.assert_array_equal(r["prefill_replica"], np.floor(up * 2).astype(int))
    np.testing.assert_array_equal(r["decode_replica"][go], np.floor(ud[go] * 3).astype(int))
    assert np.all(r["status"] == 0) and r["drained"]
    assert np.all(a <= r["dispatch_s"] + 1e-12) and np.all(r["dispatch_s"] < r["first_s"])
    assert np.all(r["decode_arrival_s"][go] <= r["admit_s"][go])
    assert np.all(r["admit_s"][go] < r["finish_s"][go])
    np.testing.assert_allclose(r["ttft_s"], r["prefill_batching_s"] + r["prefill_wait_s"] + r["prefill_service_s"],
                               rtol=1e-12, atol=1e-12)
    assert np.all(r["prefill_batching_s"] >= 0) and np.all(r["prefill_wait_s"] >= -1e-12)
    full_waits = r["prefill_wait_s"] > 1e-9  # a full batch waiting for the worker
    assert np.any(full_waits)
    np.testing.assert_allclose(r["e2e_s"][go], (r["ttft_s"] + r["transfer_s"] + r["decode_wait_s"]
                                                + (o - 1) * r["tpot_s"])[go], rtol=1e-12)
    np.testing.assert_allclose(r["decode_sojourn_s"][go], (r["decode_wait_s"] + (o - 1) * r["tpot_s"])[go],
                               rtol=1e-12)
    np.testing.assert_allclose(r["client_tpot_s"][go], (r["e2e_s"] - r["ttft_s"])[go] / (o[go] - 1), rtol=1e-12)
    assert np.sum(r["decode_wait_s"][go] > 0) > 10  # slots were contended
    assert np.mean(r["prefill_service_s"] > 0.05) > 0.1  # batches of several formed
    # batch-mates share one first-token time exactly (ties at decode go in request order)
    _, size = np.unique(r["first_s"], return_counts=True)
    np.testing.assert_array_equal(np.sort(size)[::-1][:3], 4)  # full batches of B_max = 4


def _pad_cb(a, p, o, n):
    """Pad a decode replica's stream with requests long after it drained (one shape)."""
    k = n - a.size
    return (np.concatenate([a, 1e6 + np.arange(k)]), np.concatenate([p, np.ones(k)]),
            np.concatenate([o, np.full(k, 2.0)]))


@pytest.mark.slow  # compiles the two simulators' per-request kernels for its shapes (~20-30 s)
@pytest.mark.parametrize(("replicas", "t_max"), [(1, 0.02), (2, 0.02), (1, np.inf), (2, np.inf)])
def test_agrees_with_the_two_simulators_composed(replicas, t_max):
    """The same stream through `batch_sim.simulate_requests` (each prefill replica's requests
    alone), first tokens plus transfers sorted per decode replica (ties in request order),
    then `continuous.sim.simulate_requests(cached=True)` per decode replica: the same
    times for every request. With two prefill replicas a replica's input ends at its own
    last arrival in the separate run but at the stream's last arrival here (the flush of
    the last window, module docstring), so each replica's last batch is left out. T_max =
    inf is the full-batch regime (only the end of input closes the last window)."""
    a, p, o, up, ud, z = _stream(3, gap=0.015)
    sysp = dict(SYSTEM, prefill_replicas=float(replicas), prefill_t_max_s=t_max, prefill_service_cv=0.4, decode_cap=3.0,
                decode_kv_capacity_tokens=720.0, decode_block_tokens=16.0, decode_t_ctx=1e-6)
    r = ds.simulate_disaggregated_requests(a, p, o, up, ud, sysp, batch_z=z)
    first = np.full(N, np.nan)
    keep = np.ones(N, bool)
    for q in range(replicas):
        m = np.floor(up * replicas) == q
        b = batch_sim.simulate_requests(a[m], z[m], b_max=sysp["prefill_b_max"], t_max_s=sysp["prefill_t_max_s"],
                                        t_fixed_s=sysp["prefill_t_fixed_s"], t_req_s=sysp["prefill_t_req_s"],
                                        workers=1.0, service_cv=sysp["prefill_service_cv"])
        first[m] = a[m] + b["latency_s"]
        if replicas > 1:
            idx = np.flatnonzero(m)
            keep[idx[b["batch_index"] == b["batch_index"].max()]] = False
    np.testing.assert_allclose(r["first_s"][keep], first[keep], rtol=1e-12)
    assert keep.sum() > N - 2 * sysp["prefill_b_max"]
    go = o >= 2
    xfer = sysp["link_latency_s"] + sysp["kv_bytes_per_token"] * p / sysp["link_bytes_per_s"]
    arr_d = r["first_s"] + xfer  # the simulator's own first tokens: the decode pool alone
    for d in range(3):
        idx = np.flatnonzero(go & (np.floor(ud * 3) == d))
        idx = idx[np.lexsort((idx, arr_d[idx]))]
        c = cb_sim.simulate_requests(*_pad_cb(arr_d[idx], p[idx], o[idx], N), cap=sysp["decode_cap"],
                                     kv_capacity_tokens=sysp["decode_kv_capacity_tokens"],
                                     block_tokens=sysp["decode_block_tokens"], t_fixed=sysp["decode_t_fixed"],
                                     t_token=sysp["decode_t_token"], t_ctx=sysp["decode_t_ctx"], cached=True)
        np.testing.assert_array_equal(r["status"][idx], c["status"][:idx.size])
        ok = c["status"][:idx.size] == 0
        np.testing.assert_allclose(r["admit_s"][idx][ok], c["admit_s"][:idx.size][ok], rtol=1e-12)
        np.testing.assert_allclose(r["finish_s"][idx][ok], c["finish_s"][:idx.size][ok], rtol=1e-12)
    assert np.any(r["status"] == 2)  # P + O above C: rejected at decode, no E2E
    assert np.all(np.isinf(r["e2e_s"][r["status"] == 2]))


def test_batched_driver_is_the_per_request_one_on_its_draws():
    """`simulate_disaggregated` with one replication: its mean TTFT / E2E and quantiles are
    those of `simulate_disaggregated_requests` on `replication_draws` (the same lane)."""
    st = ds.DisaggSimSettings(n_requests=200, warmup=56, replications=1, seed=5)
    w = dict(arrival_rps=30.0, prompt_mean=300.0, prompt_cv=0.8, output_mean=12.0, output_cv=1.0)
    sysp = dict(SYSTEM, prefill_service_cv=0.3)
    res = ds.simulate_disaggregated({k: [v] for k, v in {**w, **sysp}.items()}, st, percentile=0.9,
                                    scenario_ids=[7])
    d = ds.replication_draws(st, 7, 0, **w)
    r = ds.simulate_disaggregated_requests(d["arrival_s"], d["prompt"], d["output"], d["route_prefill_u"],
                                           d["route_decode_u"], sysp, batch_z=d["batch_z"], seed=5,
                                           scenario_id=7, replication=0)
    m = slice(st.warmup, None)
    assert res["stable"][0]
    np.testing.assert_allclose(res["ttft_mean_s"][0], np.mean(r["ttft_s"][m]), rtol=1e-12)
    np.testing.assert_allclose(res["ttft_p_s"][0], np.quantile(r["ttft_s"][m], 0.9), rtol=1e-12)
    e2e = r["e2e_s"][m]
    np.testing.assert_allclose(res["e2e_mean_s"][0], np.mean(e2e[np.isfinite(e2e)]), rtol=1e-12)
    tp = r["tpot_s"][m]
    np.testing.assert_allclose(res["tpot_p_s"][0], np.quantile(tp[~np.isnan(tp)], 0.9), rtol=1e-12)
    np.testing.assert_allclose(res["transfer_mean_s"][0], np.nanmean(r["transfer_s"][m]), rtol=1e-12)
    assert math.isinf(res["ttft_p_hw_s"][0])  # one replication: no half-width


@pytest.mark.slow  # a few hundred thousand simulated requests (~20-40 s)
def test_summary_light_load_overload_and_determinism():
    """Three scenarios, four replications: a light one (its mean TTFT is near the closed
    form T_max + T_svc(1) of a lone request, within a batching effect); one whose prefill
    pool is overloaded (one replica serves at most B / T_svc(B) = 4 / 0.07 = 57 rps: 200 rps
    is too many); one whose decode pool is (3 replicas of cap 1, each request holding its
    slot for 19 steps of >= 10 ms: at most 3 / 0.19 = 16 rps, offered 30 rps on 2 prefill
    replicas that keep up): stable = False with infinite latencies for both. The same seed
    repeats the numbers bit for bit."""
    st = ds.DisaggSimSettings(n_requests=2000, warmup=200, replications=4, seed=1)
    base = dict(arrival_rps=1.0, prompt_mean=200.0, prompt_cv=0.0, output_mean=20.0, output_cv=0.0)
    params = {k: [v, v, v] for k, v in {**base, **SYSTEM}.items()}
    params["arrival_rps"] = [1.0, 200.0, 30.0]
    params["prefill_replicas"] = [1.0, 1.0, 2.0]
    params["decode_cap"] = [6.0, 6.0, 1.0]
    res = ds.simulate_disaggregated(params, st, more_percentiles=(0.5,))
    again = ds.simulate_disaggregated(params, st, more_percentiles=(0.5,))
    for k in res:
        np.testing.assert_array_equal(res[k], again[k], err_msg=k)
    assert res["stable"].tolist() == [True, False, False]
    lone = SYSTEM["prefill_t_max_s"] + SYSTEM["prefill_t_fixed_s"] + SYSTEM["prefill_t_req_s"]
    assert abs(res["ttft_mean_s"][0] - lone) < 0.05 * lone
    assert np.isinf(res["e2e_p_s"][1]) and np.isinf(res["ttft_mean_hw_s"][1])
    assert 0 < res["ttft_mean_hw_s"][0] < 0.01 * res["ttft_mean_s"][0]
    assert res["ttft_p50_s"][0] <= res["ttft_p_s"][0]


def test_invalid_input_is_rejected():
    a, p, o, up, ud, _ = _stream(4, n=8)
    with pytest.raises(ds.DisaggSimulationError, match="missing"):
        ds.simulate_disaggregated_requests(a, p, o, up, ud, {k: v for k, v in SYSTEM.items() if k != "decode_cap"})
    with pytest.raises(ds.DisaggSimulationError, match=r"prefill_replicas\[0\] = 0.0: must be an integer >= 1"):
        ds.simulate_disaggregated_requests(a, p, o, up, ud, dict(SYSTEM, prefill_replicas=0.0))
    with pytest.raises(ds.DisaggSimulationError, match=r"decode_replicas\[0\] = 65536.0: must be < 65536"):
        ds.simulate_disaggregated_requests(a, p, o, up, ud, dict(SYSTEM, decode_replicas=65536.0))
    with pytest.raises(ds.DisaggSimulationError, match="replications must be in"):
        ds.simulate_disaggregated({k: [1.0] for k in ds.PARAM_KEYS}, ds.DisaggSimSettings(replications=0))
    with pytest.raises(ds.DisaggSimulationError, match="decode_max_batched_tokens"):
        ds.simulate_disaggregated_requests(a, p, o, up, ud, dict(SYSTEM, decode_max_batched_tokens=2.0))
    with pytest.raises(ds.DisaggSimulationError, match="link_bytes_per_s"):
        ds.simulate_disaggregated_requests(a, p, o, up, ud, dict(SYSTEM, link_bytes_per_s=0.0))
    with pytest.raises(ds.DisaggSimulationError, match=r"\[0, 1\)"):
        ds.simulate_disaggregated_requests(a, p, o, up + 1.0, ud, SYSTEM)
    with pytest.raises(ds.DisaggSimulationError, match="sorted"):
        ds.simulate_disaggregated_requests(a[::-1], p, o, up, ud, SYSTEM)
    w = dict(arrival_rps=1.0, prompt_mean=10.0, prompt_cv=0.0, output_mean=4.0, output_cv=0.0)
    with pytest.raises(ds.DisaggSimulationError, match=r"arrival_rps\[0\] = inf"):
        ds.simulate_disaggregated({**w, **SYSTEM, "arrival_rps": np.inf})
    empty = ds.simulate_disaggregated({k: np.empty(0) for k in ds.PARAM_KEYS})
    assert all(v.shape == (0,) for v in empty.values())


@pytest.mark.slow  # 4 x 6000 simulated requests, compiled for their own shapes (~20-30 s)
def test_prefill_pool_of_single_batches_is_md1():
    """B_max = 1 on one prefill replica is M/D/1 with S = t_fixed + t_req = 0.05 s: at
    lambda = 10/s (rho = 0.5) Pollaczek-Khinchine gives the mean wait lambda S^2 / (2 (1 -
    rho)) = 0.025 s, so mean TTFT = 0.075 s; the simulated mean must cover it within four
    of its 95% half-widths."""
    st = ds.DisaggSimSettings(n_requests=5000, warmup=1000, replications=4, seed=2)
    w = dict(arrival_rps=10.0, prompt_mean=100.0, prompt_cv=0.5, output_mean=8.0, output_cv=0.5)
    sysp = dict(SYSTEM, prefill_replicas=1.0, prefill_b_max=1.0, prefill_t_fixed_s=0.04, prefill_t_req_s=0.01)
    res = ds.simulate_disaggregated({k: [v] for k, v in {**w, **sysp}.items()}, st)
    assert res["stable"][0]
    hw = res["ttft_mean_hw_s"][0]
    assert 0 < hw < 0.005
    assert abs(res["ttft_mean_s"][0] - 0.075) < 4 * hw
    np.testing.assert_allclose(res["prefill_service_mean_s"][0], 0.05, rtol=1e-12)
    assert abs(res["prefill_wait_mean_s"][0] - 0.025) < 4 * res["prefill_wait_mean_hw_s"][0]
