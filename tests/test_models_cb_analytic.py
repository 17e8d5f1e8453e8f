"""Tests of the continuous-batching analytic model (`sweep.models.continuous.analytic`): never NaN,
+inf where it is not sustainable, exact at light load, monotone in load, and within
SPEC 10's accuracy targets of the simulator on a small fixed sweep."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

from sweep.models.continuous.analytic import cb_point  # noqa: E402
from sweep.models.continuous.sim import CBSimSettings, simulate_continuous  # noqa: E402

KEYS = ("lam", "prompt_mean", "prompt_cv", "output_mean", "output_cv", "cap",
        "max_batched_tokens", "kv_capacity_tokens", "block_tokens", "t_fixed", "t_token",
        "t_ctx", "service_cv")
LATENCIES = ("ttft_mean", "ttft_p", "tpot_mean", "tpot_p", "e2e_mean", "e2e_p")
_batched = jax.jit(jax.vmap(cb_point))


PAD = 4096  # every call is padded to one shape: one compilation for the whole module


def model(p: dict, q=0.99) -> dict[str, np.ndarray]:
    n = max(np.size(v) for v in p.values())
    assert n <= PAD

    def col(k):
        v = np.broadcast_to(np.asarray(p[k], np.float64), (n,))
        return jnp.asarray(np.concatenate([v, np.repeat(v[-1:], PAD - n)]))

    out = _batched(*[col(k) for k in KEYS], jnp.full((PAD,), q))
    return {k: np.asarray(v)[:n] for k, v in out.items()}


def _random(n, seed):
    rng = np.random.default_rng(seed)
    return dict(
        lam=10 ** rng.uniform(-3, 3, n), prompt_mean=10 ** rng.uniform(0, 4, n),
        prompt_cv=rng.choice([0.0, 0.5, 2.0], n), output_mean=10 ** rng.uniform(0, 3.5, n),
        output_cv=rng.choice([0.0, 1.0, 3.0], n), cap=rng.integers(1, 1025, n).astype(float),
        max_batched_tokens=rng.choice([np.inf, 1024.0, 8192.0, 1e6], n),
        kv_capacity_tokens=rng.choice([np.inf, 1e3, 1e5, 1e7], n),
        block_tokens=rng.choice([1.0, 16.0], n), t_fixed=10 ** rng.uniform(-4, -1, n),
        t_token=10 ** rng.uniform(-7, -3, n), t_ctx=rng.choice([0.0, 1e-8, 1e-6], n),
        service_cv=rng.choice([0.0, 0.3], n))


def test_no_nan_and_inf_where_unsustainable():
    p = _random(3000, 0)
    p["max_batched_tokens"] = np.maximum(p["max_batched_tokens"], p["cap"])
    by_q = {}
    for q in (0.5, 0.99):
        r = by_q[q] = model(p, q)
        for k, v in r.items():
            assert not np.any(np.isnan(v)), k
        st = r["stable"]
        assert 0 < st.sum() < st.size  # both regimes are exercised
        for k in LATENCIES:
            assert np.all(np.isinf(r[k][~st])), k
            assert np.all(np.isfinite(r[k][st]) & (r[k][st] > 0)), k
        assert np.all((r["kv_util"] >= 0) & (r["kv_util"] <= 1 + 1e-9))
        assert np.all(r["mean_running"][st] <= r["slots"][st] + 1e-9)
        # the model's own condition: sustainable only below its capacity
        assert np.all(p["lam"][st] < r["capacity_rps"][st])
    # percentiles are quantiles of fitted laws: increasing in q (a median may lie below the
    # mean, and a P99 too where a rare long wait carries the mean)
    st = by_q[0.5]["stable"]
    for k in ("ttft_p", "tpot_p", "e2e_p"):
        assert np.all(by_q[0.99][k][st] >= by_q[0.5][k][st] * (1 - 1e-9)), k


def test_tpot_percentile_never_exceeds_a_full_step():
    """Under the chunked policy a decoder's every gap is one step, and a step carries at most
    the token budget: without cache cost or noise no TPOT can exceed ``t_fixed + t_token B``,
    whatever the quantile (a closed form of the step rule). The model's law (a gamma above the
    shortest step) had no such top: it put the P99 of a short-output engine at 2.2x its
    longest step (`benchmarks/closed_accuracy.py --seed 31`, point 11; its simulated P99 is
    that step: `test_models_cb_closed.py`)."""
    p = _random(3000, 7)
    budget = np.where(np.isinf(p["max_batched_tokens"]), 1024.0, p["max_batched_tokens"])
    p["max_batched_tokens"] = np.maximum(budget, p["cap"])
    p["t_ctx"] = np.zeros(3000)
    p["service_cv"] = np.zeros(3000)
    for q in (0.5, 0.9, 0.99):
        r = model(p, q)
        st = r["stable"]
        assert st.sum() > 500
        top = p["t_fixed"] + p["t_token"] * p["max_batched_tokens"]
        assert np.all(r["tpot_p"][st] <= top[st] * (1 + 1e-12)), q


def test_prefill_first_never_nan_and_quantiles_increase():
    """The prefill_first policy on the same random domain: no NaN, +inf exactly where the model
    says unsustainable, and every percentile finite, positive and increasing in q. (Its TPOT law
    is a mixture whose first component sits at the floor where the chain of prompt steps takes a
    decoder's whole gap: seed 275's point 47 of `benchmarks/cb_accuracy.py --scheduler-policy
    prefill_first` gave NaN there.)"""
    pf = jax.jit(jax.vmap(lambda *a: cb_point(*a, prefill_first=True)))
    p = _random(1000, 1)
    p["max_batched_tokens"] = np.maximum(p["max_batched_tokens"], p["cap"])
    by_q = {}
    for q in (0.5, 0.9, 0.99):
        out = pf(*[jnp.asarray(np.asarray(p[k], np.float64)) for k in KEYS], jnp.full((1000,), q))
        r = by_q[q] = {k: np.asarray(v) for k, v in out.items()}
        for k, v in r.items():
            assert not np.any(np.isnan(v)), k
        st = r["stable"]
        assert 0 < st.sum() < st.size
        for k in LATENCIES:
            assert np.all(np.isinf(r[k][~st])), k
            assert np.all(np.isfinite(r[k][st]) & (r[k][st] > 0)), k
    st = by_q[0.5]["stable"]
    for k in ("ttft_p", "tpot_p", "e2e_p"):
        assert np.all(by_q[0.9][k][st] >= by_q[0.5][k][st] * (1 - 1e-9)), k
        assert np.all(by_q[0.99][k][st] >= by_q[0.9][k][st] * (1 - 1e-9)), k


def test_light_load_is_a_single_request_exactly():
    """lam -> 0, cv = 0: one request alone (M = inf). Its prefill step takes
    t_f + (t_t + t_c) P; decode step i carries 1 token and P + i cached, so
    TTFT = t_f + (t_t + t_c) P, TPOT = t_f + t_t + t_c (P + O / 2) and
    E2E = TTFT + (O - 1) TPOT (= the simulator's hand formula of test_cb_sim)."""
    pm, om, tf, tt, tc = 300.0, 120.0, 0.02, 5e-5, 1e-7
    p = dict(lam=1e-9, prompt_mean=pm, prompt_cv=0.0, output_mean=om, output_cv=0.0, cap=16.0,
             max_batched_tokens=np.inf, kv_capacity_tokens=np.inf, block_tokens=16.0,
             t_fixed=tf, t_token=tt, t_ctx=tc, service_cv=0.0)
    r = model(p)
    ttft = tf + (tt + tc) * pm
    tpot = tf + tt + tc * (pm + om / 2)
    exact_e2e = ttft + (om - 1) * (tf + tt + tc * pm) + tc * om * (om - 1) / 2
    np.testing.assert_allclose(r["ttft_mean"], ttft, rtol=1e-6)
    np.testing.assert_allclose(r["tpot_mean"], tpot, rtol=1e-6)
    np.testing.assert_allclose(r["e2e_mean"], exact_e2e, rtol=1e-6)
    # the engine's steps are that request's O steps: mean = its busy time / O
    np.testing.assert_allclose(r["step_mean"], exact_e2e / om, rtol=1e-3)
    assert r["mean_running"][0] < 1e-6 and r["stable"][0]


def test_monotone_in_load_and_capacity_boundary():
    base = dict(prompt_mean=400.0, prompt_cv=1.0, output_mean=150.0, output_cv=1.0, cap=32.0,
                max_batched_tokens=np.inf, kv_capacity_tokens=np.inf, block_tokens=16.0,
                t_fixed=0.02, t_token=5e-5, t_ctx=1e-7, service_cv=0.0)
    for over in ({}, {"max_batched_tokens": 512.0}, {"cap": 4.0}, {"kv_capacity_tokens": 8000.0}):
        cfg = {**base, **over}
        cap = model({**cfg, "lam": 1.0})["capacity_rps"][0]
        lam = cap * np.linspace(0.02, 0.995, 60)
        r = model({**cfg, "lam": lam})
        assert np.all(r["stable"])
        for k in ("ttft_mean", "tpot_mean", "e2e_mean", "mean_running", "step_mean", "e2e_p"):
            assert np.all(np.diff(r[k]) >= -1e-12 * r[k][1:]), (over, k)
        beyond = model({**cfg, "lam": cap * np.array([1.0, 1.5])})
        assert not np.any(beyond["stable"]) and np.all(np.isinf(beyond["ttft_mean"]))


def test_jits_and_vmaps_without_recompiling():
    p = _random(64, 1)
    p["max_batched_tokens"] = np.maximum(p["max_batched_tokens"], p["cap"])
    model(p)
    size = _batched._cache_size()
    model(_random(64, 2) | {"max_batched_tokens": np.full(64, np.inf)})
    assert _batched._cache_size() == size
    # a single point, unbatched, under plain jit, gives the same numbers
    one = {k: v[3] for k, v in p.items()}
    single = jax.jit(cb_point)(*(one[k] for k in KEYS), 0.99)
    np.testing.assert_allclose(float(single["e2e_p"]), model(p)["e2e_p"][3], rtol=1e-12)


@pytest.mark.slow  # ~20-30 s on two cores: simulates 6 points x 3 replications
def test_accuracy_targets_against_the_simulator():
    """SPEC 10 targets over the stable region (mean running < 0.9 cap), on a small fixed
    sweep where this model is meant to hold (decode-dominated serving, cap and budget,
    loads 0.2-0.7 of its capacity): mean TPOT within 5%, mean TTFT and E2E within 15%,
    percentiles within 25%, judged as benchmarks/cb_accuracy.py judges: a comparison counts
    where the simulated half-width is within a third of its target (the cap-8 point's P90
    TTFT, 0.116 +- 0.028 s over 3 x 3000 requests, is 0.133 +- 0.005 over 8 x 20000; the
    model's 0.147 is 10% above that, 26% above the short run's). The full sweep, with the
    cases where it misses, is in benchmarks/cb_accuracy.py and docs/continuous.md."""
    rows = []
    for over in ({}, {"max_batched_tokens": 256.0}, {"cap": 8.0}):
        cfg = dict(prompt_mean=300.0, prompt_cv=1.0, output_mean=40.0, output_cv=1.0, cap=32.0,
                   max_batched_tokens=np.inf, kv_capacity_tokens=np.inf, block_tokens=16.0,
                   t_fixed=0.02, t_token=5e-5, t_ctx=1e-7, service_cv=0.0) | over
        cap = model({**cfg, "lam": 1.0})["capacity_rps"][0]
        rows += [{**cfg, "lam": f * cap} for f in (0.2, 0.6)]
    p = {k: np.array([r[k] for r in rows]) for k in KEYS}
    a = model(p, 0.9)
    s = simulate_continuous({**p, "queue_capacity": np.full(len(rows), np.inf)},
                            CBSimSettings(n_requests=3000, warmup=300, replications=3, seed=7),
                            percentile=0.9)
    region = s["stable"] & (s["mean_running"] < 0.9 * p["cap"])
    assert region.sum() >= 5
    judged = 0
    for key, tol in (("tpot_mean", 0.05), ("ttft_mean", 0.15), ("e2e_mean", 0.15),
                     ("ttft_p", 0.25), ("tpot_p", 0.25), ("e2e_p", 0.25)):
        sim, hw = s[key + "_s"][region], s[key.replace("_s", "") + "_hw_s"][region]
        narrow = hw <= tol / 3.0 * np.abs(sim)
        err = a[key][region][narrow] / sim[narrow] - 1.0
        judged += int(narrow.sum())
        assert np.all(np.abs(err) <= tol), (key, err)
    assert judged >= 20, judged  # of 6 metrics x the 5 or 6 points in the region (23 when written)
    np.testing.assert_allclose(a["mean_running"][region], s["mean_running"][region], rtol=0.1)
    np.testing.assert_allclose(a["step_mean"][region], s["step_mean_s"][region], rtol=0.05)


def test_mixture_quantile_against_bisection():
    """`_mix_quantile` (three starts, three safeguarded Newton steps) against 200 bisection
    steps on the same mixture CDF in float64 (the reference), over random two-lognormal
    mixtures and levels: the percentiles' root finder, not an approximation of the model.
    Measured on 4,000 mixtures: 99% within 1e-4 relative, 99.9% within 1e-2, at worst 5%
    (a narrow component inside a wide one, where the CDF is nearly flat at the level)."""
    from scipy.stats import norm

    from sweep.models.continuous.analytic import _ln_shape, _mix_quantile

    rng = np.random.default_rng(7)
    n = 400
    ma, mb = 10 ** rng.uniform(-3, 1, n), 10 ** rng.uniform(-3, 2, n)
    va, vb = (ma * rng.uniform(0.0, 2.0, n)) ** 2, (mb * rng.uniform(0.0, 2.0, n)) ** 2
    w = np.where(rng.uniform(size=n) < 0.2, 0.0, rng.uniform(0, 1, n))
    q = rng.choice([0.5, 0.9, 0.99, 0.999], n)
    got = np.asarray(jax.vmap(lambda *a: _mix_quantile(a[0], jax.scipy.special.ndtri(a[0]), a[1], 0.0,
                                                       (a[2], a[3]), (a[4], a[5])))(
        *(jnp.asarray(x) for x in (q, w, ma, va, mb, vb))))
    sa, mua = (np.asarray(x) for x in _ln_shape(jnp.asarray(ma), jnp.asarray(va)))
    sb, mub = (np.asarray(x) for x in _ln_shape(jnp.asarray(mb), jnp.asarray(vb)))
    sa, sb = np.maximum(sa, 1e-9), np.maximum(sb, 1e-9)
    lo, hi = np.full(n, -50.0), np.full(n, 50.0)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        f = (1 - w) * norm.cdf((mid - mua) / sa) + w * norm.cdf((mid - mub) / sb)
        lo, hi = np.where(f < q, mid, lo), np.where(f < q, hi, mid)
    ref = np.exp(0.5 * (lo + hi))
    assert np.all(np.isfinite(got))
    err = np.abs(got / ref - 1.0)
    assert np.mean(err <= 1e-3) >= 0.98 and err.max() <= 0.06, (np.mean(err <= 1e-3), err.max())


def test_node_mixture_quantile_against_bisection():
    """`_node_quantile` (10 bisections in the log of the nodes' own quantiles' range, one
    Newton step) against 200 bisection steps on the same mixture CDF in float64 (the
    reference): random mixtures of 64 nodes ``scale_i (floor + Y_i)``, some of weight 0, at
    random levels. Measured on 300 mixtures: at worst 4e-5 relative."""
    from scipy.stats import norm

    from sweep.models.continuous.analytic import _ln_shape, _node_quantile

    rng = np.random.default_rng(11)
    n, k = 200, 64
    wgt = np.where(rng.uniform(size=(n, k)) < 0.3, 0.0, 1.0)
    wgt[:, 0] = 1.0
    wgt /= wgt.sum(axis=1, keepdims=True)
    scale = rng.uniform(0.3, 16.0, (n, k))
    floor = rng.uniform(0.0, 0.01, n)
    mean_y = 10 ** rng.uniform(-4, -1, n)
    var_y = (mean_y[:, None] * rng.uniform(0.01, 3.0, (n, k))) ** 2
    q = rng.choice([0.5, 0.9, 0.99], n)
    got = np.asarray(jax.vmap(_node_quantile)(*(jnp.asarray(x) for x in (q, wgt, scale, floor, mean_y, var_y))))
    s, mu = (np.asarray(x) for x in _ln_shape(jnp.asarray(mean_y)[:, None], jnp.asarray(var_y)))
    s = np.maximum(s, 1e-9)
    lo, hi = np.full(n, -50.0), np.full(n, 50.0)
    for _ in range(200):
        t = np.exp(0.5 * (lo + hi))[:, None]
        y = t / scale - floor[:, None]
        f = np.sum(np.where(y > 0, wgt * norm.cdf((np.log(np.maximum(y, 1e-300)) - mu) / s), 0.0), axis=1)
        lo, hi = np.where(f < q, 0.5 * (lo + hi), lo), np.where(f < q, hi, 0.5 * (lo + hi))
    ref = np.exp(0.5 * (lo + hi))
    assert np.all(np.isfinite(got))
    err = np.abs(got / ref - 1.0)
    assert err.max() <= 1e-3, err.max()


def test_prefill_first_adds_the_prompt_steps_fixed_cost():
    """Under prefill_first the token work is chunked's, and every prompt step between two of a
    decoder's steps costs t_f more. With t_token = t_ctx = 0 and an unlimited budget a decode
    step takes t_f under chunked, and T = t_f (1 + 1 - e^(-lam T)) under prefill_first (one
    prompt step whenever a prompt arrived in the meantime, Poisson): the closed form's fixed
    point, solved here by iteration, at light load (P(wait) ~ 0)."""
    lam, tf = 5.0, 0.01
    args = (lam, 500.0, 0.5, 100.0, 0.5, 64.0, math.inf, math.inf, 16.0, tf, 0.0, 0.0, 0.0, 0.9)
    chunked = cb_point(*args)
    pf = cb_point(*args, prefill_first=True)
    t = tf
    for _ in range(50):
        t = tf * (2.0 - math.exp(-lam * t))
    assert float(chunked["tpot_mean"]) == pytest.approx(tf, rel=1e-9)
    assert float(pf["tpot_mean"]) == pytest.approx(t, rel=1e-4)
    # sustainability: per request (O - 1) / c decode steps and (1 - e^-mu) / mu prompt steps,
    # mu = c / (O - 1), each of t_f (the token work is 0 here)
    c, o1 = 64.0, 100.0
    mu = c / (o1 - 1.0)
    assert float(pf["capacity_rps"]) == pytest.approx(1.0 / (tf * ((o1 - 1.0) / c + -math.expm1(-mu) / mu)), rel=1e-9)
    assert float(pf["capacity_rps"]) < float(chunked["capacity_rps"])


def test_a_line_without_a_fixed_cost_gets_the_models_floor():
    """A step line with t_fixed = 0 (a fit's non-negative least squares may return it) gave,
    at 1 req/s of 200/1000-token requests with t_token 0.05 ms, a mean TTFT of 23,368 s (the
    residual of a step of 1 ps divided by itself), and a closed loop of 10 clients 10 s:
    the model's time scale is the step's fixed cost. The analytic model takes at least
    MIN_T_FIXED_S (0.1 ms) for it, so t_fixed = 0 answers as 0.1 ms does, and a lone
    request's TTFT is its prefill, P t_token = 10 ms, plus that 0.1 ms."""
    from sweep.models.continuous.analytic import MIN_T_FIXED_S
    from sweep.models.continuous.closed import closed_loop

    args = (200.0, 0.0, 1000.0, 0.0, 256.0, 8192.0, 1e6, 16.0)
    for lam in (1.0, 5.0):
        zero = cb_point(lam, *args, 0.0, 5e-5, 1e-8, 0.0, 0.5)
        floor = cb_point(lam, *args, MIN_T_FIXED_S, 5e-5, 1e-8, 0.0, 0.5)
        for k in ("ttft_mean", "tpot_mean", "e2e_mean", "mean_running"):
            assert float(zero[k]) == float(floor[k]), k
        assert 0.010 < float(zero["ttft_mean"]) < 0.011
    engine = dict(prompt_mean=200.0, prompt_cv=0.0, output_mean=1000.0, output_cv=0.0, cap=256.0,
                  max_batched_tokens=8192.0, kv_capacity_tokens=1e6, block_tokens=16.0, t_token=5e-5, t_ctx=1e-8)
    ttft = [closed_loop(n, 0.0, t_fixed=0.0, **engine)["ttft_mean"] for n in (10, 100, 250)]
    assert ttft == sorted(ttft) and ttft[-1] < 0.05


def test_a_prompt_split_over_many_small_steps_keeps_its_ttft_finite_and_smooth() -> None:
    """Qwen3 30B-A3B on eight A100s with a token budget of 13 (cap 11): a 176-token prompt
    takes 14 steps or more. The fixed point starts from the light-load state, whose occupancy
    put the engine's busy share below its token work (rho_tok / u > 1): the mean step
    t_fixed / (1 - rho_tok / u) had no solution, the companions of the step in progress were
    millions of tokens, and the damped iterations had not come back after 8 steps. The mean
    TTFT jumped from 0.11 s at 1 req/s to 31.5 s at 2 and 61 s at 2.83 (load 0.29), against a
    simulated 128.3 +- 2.3 ms (`benchmarks/cb_accuracy.py --scheduler-policy prefill_first
    --scheduler-steps 2 4 8 16 --points 120 --seed 261`, point 26, prefill_first with windows
    of 2 steps, 16 replications). The engine is busy at least as long as a step a request and
    its tokens take, which bounds the mean step; the TTFT now rises smoothly with the rate."""
    engine = (176.1, 0.377, 2.6, 1.767, 11.0, 13.0, math.inf, 16.0, 0.0017677697287214965, 0.00044888449545184733,
              8.427469683089967e-09, 0.205, 0.5)
    ttft = [float(cb_point(lam, *engine)["ttft_mean"]) for lam in (0.5, 1.0, 2.0, 2.832)]
    assert all(b / a < 1.5 for a, b in itertools.pairwise(ttft)) and ttft == sorted(ttft), ttft
    pf = cb_point(2.832141541675902, *engine, prefill_first=True, steps=2)
    assert abs(float(pf["ttft_mean"]) / 0.1283 - 1.0) < 0.3


def test_a_slot_bound_prefill_first_engine_runs_one_prompt_step_a_cycle() -> None:
    """Llama 2 7B on one H200 under prefill_first with windows of 2 steps, 778 req/s of
    32-token prompts and 4-token outputs on 212 slots (`benchmarks/cb_accuracy.py
    --scheduler-policy prefill_first --scheduler-steps 2 4 8 16 --points 120 --seed 261`,
    point 31, load 0.90): arrivals come every 1.3 ms and a prompt step takes 7 ms or more, so
    a chain of prompt steps that each carries what arrived during the last never ends by
    itself; the slots end it, and the prompts left waiting go into the next decision's one
    step. The model had followed the chain up to the slot bound (about four prompt steps
    between two decode windows, each paying t_fixed): mean TPOT 132 ms and E2E 432 ms against
    a simulated 60.9 +- 1.1 ms and 263.5 +- 1.6 ms (12 replications). A chain the slots cut
    was then the one step that carries a cycle's arrivals (TPOT 61 ms); since it is weighed
    between that step and the chain truncated at the slot bound (`_pf_chain`; the simulator's
    chains here run 3.2 prompt steps, 123 ms, until the slots fill), 65.9 ms and 259.7 ms."""
    engine = (32.5, 0.382, 4.0, 0.134, 212.0, math.inf, math.inf, 16.0, 0.007186163422802019,
              2.631161093617233e-05, 1.8425551057130003e-07, 0.0, 0.5)
    got = cb_point(777.700768981396, *engine, prefill_first=True, steps=2)
    assert abs(float(got["tpot_mean"]) / 0.06093 - 1.0) < 0.15, float(got["tpot_mean"])
    assert abs(float(got["e2e_mean"]) / 0.2635 - 1.0) < 0.15, float(got["e2e_mean"])


def test_prefill_first_tpot_tails_carry_the_chain_of_prompt_steps() -> None:
    """Two configurations of `benchmarks/cb_accuracy.py --scheduler-policy prefill_first --points
    120 --seed 272`: a decoder's gap holds the chain of prompt steps that follows its decode step
    or nothing, and a chain of several steps is what makes the tail. Point 50 (Llama 3.1 70B on
    two H100s, 50 req/s of 184-token prompts and 2.6-token outputs: one or two gaps a request)
    simulated TPOT P90 181.9 +- 12 ms (16 replications); the model's gamma law over one
    all-or-nothing prompt step said 95 ms. Point 94 (Llama 2 70B on eight B200s, 121 req/s,
    77/11.5 tokens) P99 26.9 +- 1.4 ms (12 replications), the model 15.6 ms. Now the chain's
    own variance, and a mixture of the requests none of whose gaps held a pause and the rest:
    within the benchmark's 25% of both."""
    e50 = (183.6, 1.259, 2.6, 0.143, 42.0, 9283.0, math.inf, 16.0, 0.019339060827943944, 2.276913727757185e-05,
           7.763089315328121e-08, 0.0, 0.9)
    p90 = float(cb_point(49.777205552343005, *e50, prefill_first=True)["tpot_p"])
    assert abs(p90 / 0.1819 - 1.0) < 0.25, p90
    e94 = (77.4, 0.823, 11.5, 0.893, 120.0, math.inf, 5520.0, 16.0, 0.00567932206145101, 5.0971487077204435e-06,
           7.314285714285715e-09, 0.097, 0.99)
    p99 = float(cb_point(121.39866435224845, *e94, prefill_first=True)["tpot_p"])
    assert abs(p99 / 0.02693 - 1.0) < 0.25, p99
