"""Tests of the continuous-batching simulator (`sweep.models.continuous.sim`): request by request
against the plain-Python reference (`sweep/testing/cb_reference.py`) on hand-traced and random
cases, against closed forms (M/D/1, light load), and its engineering properties."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

from sweep.models.continuous import sim as cb_sim  # noqa: E402
from sweep.models.continuous.sim import (  # noqa: E402
    CBSimSettings,
    CBSimulationError,
    replication_draws,
    simulate_continuous,
    simulate_requests,
    step_normals,
)
from sweep.testing import cb_reference as ref  # noqa: E402

N_PAD = 64  # hand cases are padded to one length (one compiled shape)
RECORD = 4096  # per-step records kept by every per-request call (one compiled shape)
SMALL = CBSimSettings(n_requests=400, warmup=40, replications=2, seed=3)


def _pad(a, p, o, n=N_PAD, o_pad=1):
    """Pad a hand case with requests long after everything drained (they cannot change
    the first requests' outcomes) so that every hand case shares one compiled shape."""
    k = n - len(a)
    a = np.concatenate([np.asarray(a, float), 1e6 + np.arange(k, dtype=float)])
    return a, np.concatenate([p, np.ones(k)]), np.concatenate([o, np.full(k, float(o_pad))])


def _jax(a, p, o, **kw):
    if "kv_capacity" in kw:
        kw["kv_capacity_tokens"] = kw.pop("kv_capacity")
    return simulate_requests(a, p, o, record_steps=RECORD, **kw)


def _both(a, p, o, **kw):
    """Reference and JAX results on the same (padded) inputs; asserts they agree."""
    n = len(a)
    a, p, o = _pad(a, p, o, o_pad=2 if kw.get("cached") else 1)
    r = ref.simulate(a, p.astype(int).tolist(), o.astype(int).tolist(), **kw)
    j = _jax(a, p, o, **kw)
    _assert_same(r, j)
    return r, j, n


def _assert_same(r, j, rtol=1e-12):
    st = np.array(r.status)
    np.testing.assert_array_equal(j["status"], st)
    ok = st == ref.ADMITTED
    for key in ("first_s", "finish_s", "admit_s"):
        np.testing.assert_allclose(j[key][ok], np.array(getattr(r, key))[ok], rtol=rtol, atol=0,
                                   err_msg=key)
        assert np.all(np.isinf(j[key][~ok])), key
    np.testing.assert_allclose(j["ttft_s"][ok], np.array(r.ttft_s)[ok], rtol=1e-9, atol=1e-12)
    assert j["n_steps"] == len(r.step_start)
    m = min(RECORD, len(r.step_start))
    for name in ("step_tok", "step_prefill", "step_ctx", "step_running", "step_reserved",
                 "step_emitted"):
        np.testing.assert_array_equal(j[name][:m], np.array(getattr(r, name))[:m], err_msg=name)
    np.testing.assert_allclose(j["step_start"][:m], np.array(r.step_start)[:m], rtol=rtol)
    np.testing.assert_allclose(j["step_dur"][:m], np.array(r.step_dur)[:m], rtol=rtol)


# --------------------------------------------------------------------------------------
# hand-traced cases (every number below is computed by hand in the comments)
# --------------------------------------------------------------------------------------


def test_hand_traced_small_case():
    """N = 2, M = inf, C = inf, T = 1 + 0.1 n_tok + 0.01 n_ctx.
    r0: a = 0,   P = 3, O = 2;  r1: a = 0.5, P = 2, O = 1;  r2: a = 0.6, P = 1, O = 3.

    step 0  start 0 (idle: first arrival). admit r0. prefill r0: 3 tokens.
            n_tok 3, n_ctx 3 (r0's prompt)      T = 1 + 0.3 + 0.03 = 1.33, end 1.33
            r0 first token at 1.33.
    step 1  start 1.33: r1, r2 arrived. admit r1 (2 running = N): r2 waits.
            decode r0 (1) + prefill r1 (2): n_tok 3; n_ctx = r0 (3 + 1 emitted) + r1 2 = 6
            T = 1 + 0.3 + 0.06 = 1.36, end 2.69. r0 emits token 2 = O: leaves at 2.69;
            r1's prefill completes: first token 2.69, O = 1: leaves at 2.69.
    step 2  start 2.69: admit r2. prefill 1: n_tok 1, n_ctx 1: T = 1.11, end 3.80
    step 3  decode r2: n_tok 1, n_ctx 1 + 1 = 2: T = 1.12, end 4.92
    step 4  decode r2: n_ctx 1 + 2 = 3: T = 1.13, end 6.05 = r2's finish (3 tokens).
    """
    _r, j, n = _both([0.0, 0.5, 0.6], np.array([3, 2, 1]), np.array([2, 1, 3]), cap=2,
                    t_fixed=1.0, t_token=0.1, t_ctx=0.01)
    np.testing.assert_allclose(j["first_s"][:n], [1.33, 2.69, 3.80], rtol=1e-12)
    np.testing.assert_allclose(j["finish_s"][:n], [2.69, 2.69, 6.05], rtol=1e-12)
    np.testing.assert_allclose(j["ttft_s"][:n], [1.33, 2.19, 3.20], rtol=1e-12)
    np.testing.assert_allclose(j["tpot_s"][[0, 2]], [1.36, 1.125], rtol=1e-12)
    assert np.isnan(j["tpot_s"][1])  # O = 1: no TPOT
    np.testing.assert_allclose(j["e2e_s"][:n], [2.69, 2.19, 5.45], rtol=1e-12)
    np.testing.assert_array_equal(j["step_tok"][:5], [3, 3, 1, 1, 1])
    np.testing.assert_array_equal(j["step_ctx"][:5], [3, 6, 1, 2, 3])
    np.testing.assert_array_equal(j["step_running"][:5], [1, 2, 1, 1, 1])
    np.testing.assert_array_equal(j["step_emitted"][:5], [1, 2, 1, 1, 1])
    np.testing.assert_allclose(j["admit_s"][:n], [0.0, 1.33, 2.69], rtol=1e-12)


def test_chunked_prefill_hand():
    """M = 4 < a prompt; every step takes 1 s (t_token = t_ctx = 0).
    r0: P = 10, O = 2; r1: P = 3, O = 1; both at 0, N = 2.
    step 0: both admitted; budget 4 -> r0 4 (6 left), r1 0.   n_tok 4, n_ctx 4
    step 1: r0 4 (2 left).                                    n_tok 4, n_ctx 8
    step 2: r0 2 (done: first token at 3), r1 2 (1 left).    n_tok 4, n_ctx 10 + 2 = 12
    step 3: decode r0 (1), budget 3: r1 1 (done).             n_tok 2, n_ctx 10 + 1 + 3 = 14
            end 4: r0's 2nd token (leaves), r1's first and only token (leaves)."""
    _r, j, n = _both([0.0, 0.0], np.array([10, 3]), np.array([2, 1]), cap=2,
                    max_batched_tokens=4, t_fixed=1.0, t_token=0.0)
    np.testing.assert_allclose(j["first_s"][:n], [3.0, 4.0], rtol=1e-12)
    np.testing.assert_allclose(j["finish_s"][:n], [4.0, 4.0], rtol=1e-12)
    np.testing.assert_array_equal(j["step_tok"][:4], [4, 4, 4, 2])
    np.testing.assert_array_equal(j["step_prefill"][:4], [4, 4, 4, 1])
    np.testing.assert_array_equal(j["step_ctx"][:4], [4, 8, 12, 14])
    assert j["n_steps"] == 4 + (N_PAD - n)  # each padding request is one step


def test_kv_blocked_admission_no_skipping():
    """C = 20 tokens, block 1, every step 1 s. r0 (P 10, O 5: 15 tokens) at 0; r1 (P 3, O 3:
    6) at 0.1 does not fit beside r0 (15 + 6 > 20); r2 (P 1, O 1: 2) at 0.2 would fit but
    is behind r1: nobody skips. r0: first token 1, decodes end 2, 3, 4, 5 (finish 5).
    step at 5: r1 and r2 admitted, prefilled: first tokens at 6; r2 leaves at 6; r1
    decodes end 7, 8."""
    _r, j, n = _both([0.0, 0.1, 0.2], np.array([10, 3, 1]), np.array([5, 3, 1]), cap=8,
                    kv_capacity=20.0, t_fixed=1.0, t_token=0.0)
    np.testing.assert_allclose(j["admit_s"][:n], [0.0, 5.0, 5.0])
    np.testing.assert_allclose(j["first_s"][:n], [1.0, 6.0, 6.0])
    np.testing.assert_allclose(j["finish_s"][:n], [5.0, 8.0, 6.0])
    np.testing.assert_allclose(j["ttft_s"][2], 5.8, rtol=1e-12)
    np.testing.assert_array_equal(j["step_reserved"][:6], [15, 15, 15, 15, 15, 8])


def test_oversized_request_rejected_at_the_head():
    """C = 20. r0 (P 2, O 3: 5) runs alone (N = 1) from 0, steps of 1 s, finish 3.
    r1 (P 30, O 1: 31 > C) arrives at 0.5: at the step start 1 it reaches the head and is
    rejected although no slot is free; r2 behind it (P 1, O 1) waits for the slot:
    admitted at 3, first token and finish at 4."""
    _r, j, n = _both([0.0, 0.5, 0.6], np.array([2, 30, 1]), np.array([3, 1, 1]), cap=1,
                    kv_capacity=20.0, t_fixed=1.0, t_token=0.0)
    np.testing.assert_array_equal(j["status"][:n], [0, 2, 0])
    np.testing.assert_allclose(j["finish_s"][[0, 2]], [3.0, 4.0])
    assert math.isinf(j["ttft_s"][1]) and math.isinf(j["e2e_s"][1])


def test_finite_queue_drops_and_the_tie_convention():
    """K = 1 waiting place, N = 1, steps of 1 s. r0 (O 3) runs steps ending 1, 2, 3.
    r1 at 0.1 joins (1 waiting); r2 at 0.2 finds 1 waiting: dropped; r3 at 1.5 joins the
    queue at the step start 2 and finds r1 waiting: dropped; r4 at exactly 3.0 = a step
    start is in time for it, joins before admission, finds r1 still waiting: dropped.
    r1 admitted at 3."""
    _r, j, n = _both([0.0, 0.1, 0.2, 1.5, 3.0], np.array([1, 1, 1, 1, 1]),
                    np.array([3, 1, 1, 1, 1]), cap=1, queue_capacity=1.0, t_fixed=1.0,
                    t_token=0.0)
    np.testing.assert_array_equal(j["status"][:n], [0, 0, 1, 1, 1])
    np.testing.assert_allclose(j["admit_s"][1], 3.0)
    np.testing.assert_allclose(j["finish_s"][1], 4.0)


def test_paged_rounding_changes_admission():
    """C = 32. Block 16: r0 (P 10, O 5) reserves 16, r1 (P 1, O 1) 16, r2 (P 1, O 1) 16 does
    not fit until r1 leaves. Block 1: 15 + 2 + 2 = 19 <= 32, all three run at once."""
    a, p, o = [0.0, 0.0, 0.0], np.array([10, 1, 1]), np.array([5, 1, 1])
    kw = dict(cap=8, kv_capacity=32.0, t_fixed=1.0, t_token=0.0)
    _, paged, _ = _both(a, p, o, block_tokens=16, **kw)
    _, exact, _ = _both(a, p, o, block_tokens=1, **kw)
    assert paged["admit_s"][2] == 1.0 and exact["admit_s"][2] == 0.0
    assert paged["step_reserved"][0] == 32 and exact["step_reserved"][0] == 19


def test_output_of_one_token_leaves_at_its_prefill_step():
    rng = np.random.default_rng(4)
    a = np.sort(rng.uniform(0, 5, 30))
    _r, j, n = _both(a, rng.integers(1, 50, 30), np.ones(30, int), cap=4, max_batched_tokens=32,
                    t_fixed=0.05, t_token=0.01, t_ctx=1e-3)
    ok = j["status"][:n] == 0
    np.testing.assert_array_equal(j["first_s"][:n][ok], j["finish_s"][:n][ok])
    assert np.all(np.isnan(j["tpot_s"][:n]))


def test_service_noise_is_replayed():
    rng = np.random.default_rng(5)
    a = np.sort(rng.uniform(0, 3, 40))
    z = rng.standard_normal(4000)
    kw = dict(cap=3, max_batched_tokens=16, kv_capacity=200.0, block_tokens=4, t_fixed=0.05,
              t_token=0.01, t_ctx=1e-4, service_cv=0.7, z=z)
    r, _j, _n = _both(a, rng.integers(1, 30, 40), rng.integers(1, 20, 40), **kw)
    d = np.array(r.step_dur)
    base = 0.05 + 0.01 * np.array(r.step_tok) + 1e-4 * np.array(r.step_ctx)
    s2 = math.log1p(0.49)
    np.testing.assert_allclose(d, base * np.exp(-s2 / 2 + math.sqrt(s2) * z[:d.size]), rtol=1e-13)


def _random_case(rng, case, min_output=1):
    """One seeded random scenario: 250 Poisson arrivals (on a 0.1 s grid every third case:
    ties), lognormal lengths (outputs at least `min_output`), and every knob drawn: caps,
    budgets, KV, blocks, queue limits, noise. Returns arrivals, prompts, outputs and the
    keyword arguments of both simulators."""
    n = 250
    lam = rng.uniform(0.5, 40.0)
    a = np.cumsum(rng.exponential(1.0 / lam, n))
    if case % 3 == 0:
        a = np.round(a, 1)
    p = np.maximum(1, np.round(rng.lognormal(3.0, 1.0, n)))
    o = np.maximum(min_output, np.round(rng.lognormal(2.5, 0.8, n)))
    cap = int(rng.integers(1, 9))
    kw = dict(cap=cap, max_batched_tokens=max(cap, float(rng.choice([np.inf, 8, 64]))),
              kv_capacity=float(rng.choice([np.inf, 150.0, 600.0])),
              block_tokens=int(rng.choice([1, 16])),
              queue_capacity=float(rng.choice([np.inf, 0.0, 3.0, 20.0])),
              t_fixed=rng.uniform(0.0, 0.03), t_token=rng.uniform(0, 1e-3),
              t_ctx=rng.uniform(0, 1e-5), service_cv=float(rng.choice([0.0, 0.5])),
              z=rng.standard_normal(40_000))
    return a, p, o, kw


def test_random_cases_match_reference():
    """Seeded random scenarios, light to overloaded, with ties (arrivals on a grid), every
    knob: caps, budgets, KV, blocks, queue limits, noise."""
    rng = np.random.default_rng(11)
    seen = {"drop": 0, "reject": 0}
    for case in range(14):
        a, p, o, kw = _random_case(rng, case)
        r = ref.simulate(a, p.astype(int).tolist(), o.astype(int).tolist(), **kw)
        _assert_same(r, _jax(a, p, o, **kw))
        seen["drop"] += r.status.count(ref.DROPPED)
        seen["reject"] += r.status.count(ref.REJECTED)
    assert seen["drop"] > 0 and seen["reject"] > 0  # both paths were exercised


def test_vllm_budget_gated_admission_gives_the_same_times():
    """The convention documented in cb_reference: gating admission on the token budget
    (vLLM v1) changes no request's times, only running counts and reserved KV."""
    rng = np.random.default_rng(8)
    for _ in range(6):
        n = 200
        a = np.cumsum(rng.exponential(0.05, n))
        p = rng.integers(1, 200, n).tolist()
        o = rng.integers(1, 40, n).tolist()
        kw = dict(cap=6, max_batched_tokens=64, kv_capacity=1500.0, block_tokens=16,
                  t_fixed=0.02, t_token=1e-3, t_ctx=1e-5)
        x = ref.simulate(a, p, o, **kw)
        y = ref.simulate(a, p, o, vllm_admission=True, **kw)
        assert x.status == y.status and x.step_dur == y.step_dur
        np.testing.assert_array_equal(x.first_s, y.first_s)
        np.testing.assert_array_equal(x.finish_s, y.finish_s)
        assert sum(x.step_running) >= sum(y.step_running)


# --------------------------------------------------------------------------------------
# prompts already cached (the decode pool of disaggregated serving)
# --------------------------------------------------------------------------------------


def test_cached_prompts_hand_traced():
    """cached=True, N = 2, M = inf, C = inf, T = 1 + 0.1 n_tok + 0.01 n_ctx; every request
    arrives with its first token emitted and its prompt in KV.
    r0: a = 0,   P = 3, O = 3;  r1: a = 0.5, P = 2, O = 2;  r2: a = 0.6, P = 1, O = 2.

    step 0  start 0: admit r0. decode r0: n_tok 1, n_ctx = 3 + 1 (token 1) = 4
            T = 1 + 0.1 + 0.04 = 1.14, end 1.14: r0 emits token 2.
    step 1  start 1.14: r1, r2 arrived; admit r1 (2 running = N), r2 waits.
            decode r0 (3 + 2 = 5) and r1 (2 + 1 = 3): n_tok 2, n_ctx 8
            T = 1 + 0.2 + 0.08 = 1.28, end 2.42: r0 token 3 = O, r1 token 2 = O: both leave.
    step 2  start 2.42: admit r2. decode r2: n_tok 1, n_ctx 1 + 1 = 2: T = 1.12, end 3.54.
    TPOT = (finish - arrival) / (O - 1): 2.42 / 2 = 1.21, 1.92, 2.94."""
    _r, j, n = _both([0.0, 0.5, 0.6], np.array([3, 2, 1]), np.array([3, 2, 2]), cap=2,
                    t_fixed=1.0, t_token=0.1, t_ctx=0.01, cached=True)
    np.testing.assert_allclose(j["admit_s"][:n], [0.0, 1.14, 2.42], rtol=1e-12)
    np.testing.assert_allclose(j["finish_s"][:n], [2.42, 2.42, 3.54], rtol=1e-12)
    np.testing.assert_array_equal(j["first_s"][:n], [0.0, 0.5, 0.6])
    np.testing.assert_array_equal(j["ttft_s"][:n], 0.0)
    np.testing.assert_allclose(j["tpot_s"][:n], [1.21, 1.92, 2.94], rtol=1e-12)
    np.testing.assert_allclose(j["e2e_s"][:n], [2.42, 1.92, 2.94], rtol=1e-12)
    np.testing.assert_array_equal(j["step_tok"][:3], [1, 2, 1])
    np.testing.assert_array_equal(j["step_prefill"][:3], [0, 0, 0])
    np.testing.assert_array_equal(j["step_ctx"][:3], [4, 8, 2])
    np.testing.assert_array_equal(j["step_running"][:3], [1, 2, 1])
    np.testing.assert_array_equal(j["step_emitted"][:3], [1, 2, 1])


def test_cached_prompts_reserve_p_plus_o_paged():
    """cached=True, C = 12, block 4, every step 1 s. r0 (P 5, O 3: 8 -> 8 reserved) at 0;
    r1 (P 2, O 3: 5 -> 8) at 0.5 does not fit beside r0 (16 > 12) although its decode
    writes only 3 tokens: it waits for r0's departure at the end of step 1 (tokens 2, 3 at
    1 and 2), is admitted at 2 and emits tokens 2, 3 at 3 and 4. r2 (P 20, O 2: 24 > C)
    is rejected at the head."""
    _r, j, n = _both([0.0, 0.5, 0.7], np.array([5, 2, 20]), np.array([3, 3, 2]), cap=4,
                    kv_capacity=12.0, block_tokens=4, t_fixed=1.0, t_token=0.0, cached=True)
    np.testing.assert_array_equal(j["status"][:n], [0, 0, 2])
    np.testing.assert_allclose(j["admit_s"][:2], [0.0, 2.0])
    np.testing.assert_allclose(j["finish_s"][:2], [2.0, 4.0])
    np.testing.assert_array_equal(j["step_reserved"][:4], [8, 8, 8, 8])
    np.testing.assert_array_equal(j["step_ctx"][:4], [6, 7, 3, 4])


def test_cached_prompts_random_cases_match_reference():
    """Seeded random scenarios with cached prompts, light to overloaded, ties, every knob."""
    rng = np.random.default_rng(12)
    seen = {"drop": 0, "reject": 0, "wait": 0}
    for case in range(10):
        a, p, o, kw = _random_case(rng, case, min_output=2)
        kw["cached"] = True
        r = ref.simulate(a, p.astype(int).tolist(), o.astype(int).tolist(), **kw)
        _assert_same(r, _jax(a, p, o, **kw))
        assert sum(r.step_prefill) == 0
        seen["drop"] += r.status.count(ref.DROPPED)
        seen["reject"] += r.status.count(ref.REJECTED)
        seen["wait"] += sum(1 for x, y in zip(r.admit_s, a) if math.isfinite(x) and x > y)
    assert seen["drop"] > 0 and seen["reject"] > 0 and seen["wait"] > 0  # every path ran


def test_cached_prompts_light_load_hand_formula():
    """Arrivals 1000 s apart, cached prompts: decode step i = 1..O-1 carries 1 token and
    P + i cached, so finish = a + (O - 1)(t_f + t_t + t_c P) + t_c O (O - 1) / 2."""
    rng = np.random.default_rng(13)
    n = N_PAD
    a = 1000.0 * np.arange(n)
    p, o = rng.integers(1, 500, n).astype(float), rng.integers(2, 300, n).astype(float)
    tf, tt, tc = 0.02, 5e-5, 1e-7
    j = _jax(a, p, o, cap=8, t_fixed=tf, t_token=tt, t_ctx=tc, cached=True)
    e2e = (o - 1) * (tf + tt + tc * p) + tc * o * (o - 1) / 2
    np.testing.assert_allclose(j["e2e_s"], e2e, rtol=1e-9)
    np.testing.assert_array_equal(j["admit_s"], a)


@pytest.mark.slow  # compiles the batched per-request kernel twice (~15-30 s each)
@pytest.mark.parametrize("cached", [False, True])
def test_simulate_jobs_is_simulate_requests_per_job(cached):
    """The batched per-request entry point: each job is `simulate_requests` on its own
    arrivals, lengths and parameters, with the step noise of lane (scenario id,
    replication) (`step_normals`)."""
    rng = np.random.default_rng(14)
    jobs, n = 3, N_PAD
    a = np.cumsum(rng.exponential(0.03, (jobs, n)), axis=1)
    p = rng.integers(1, 200, (jobs, n)).astype(float)
    o = rng.integers(2 if cached else 1, 40, (jobs, n)).astype(float)
    par = dict(cap=np.array([2.0, 4.0, 8.0]), max_batched_tokens=np.array([64.0, np.inf, 256.0]),
               kv_capacity_tokens=np.array([600.0, np.inf, 2000.0]), block_tokens=np.array([16.0, 1.0, 4.0]),
               queue_capacity=np.array([np.inf, 5.0, np.inf]), t_fixed=np.array([0.01, 0.02, 0.005]),
               t_token=np.array([1e-4, 0.0, 5e-4]), t_ctx=np.array([1e-6, 1e-7, 0.0]),
               service_cv=np.array([0.0, 0.5, 0.3]))
    sid, rid = np.array([4, 9, 9]), np.array([0, 1, 70000])
    res = cb_sim.simulate_jobs(a, p, o, par, scenario_ids=sid, replications=rid, seed=3, cached=cached)
    for j in range(jobs):
        z = step_normals(CBSimSettings(seed=3), int(sid[j]), int(rid[j]), 4000)
        one = _jax(a[j], p[j], o[j], z=z, cached=cached, **{k: float(v[j]) for k, v in par.items()})
        np.testing.assert_array_equal(res["status"][j], one["status"])
        for key in ("first_s", "finish_s") + (("admit_s",) if cached else ()):
            np.testing.assert_allclose(res[key][j], one[key], rtol=1e-12, err_msg=key)


def test_cached_prompts_need_two_output_tokens():
    with pytest.raises(CBSimulationError, match=r"output\[1\] = 1"):
        simulate_requests([0.0, 1.0], [4, 4], [2, 1], cap=1, t_fixed=1.0, t_token=0.0, cached=True)


# --------------------------------------------------------------------------------------
# closed forms
# --------------------------------------------------------------------------------------


def test_light_load_hand_formula():
    """Arrivals 1000 s apart: every request is alone. Its prefill step takes
    t_f + (t_t + t_c) P; decode step i = 1..O-1 carries 1 token and P + i cached, so
    finish = a + t_f + (t_t + t_c) P + (O - 1)(t_f + t_t + t_c P) + t_c O (O - 1) / 2."""
    rng = np.random.default_rng(3)
    n = N_PAD
    a = 1000.0 * np.arange(n)
    p, o = rng.integers(1, 500, n).astype(float), rng.integers(1, 300, n).astype(float)
    tf, tt, tc = 0.02, 5e-5, 1e-7
    j = _jax(a, p, o, cap=8, t_fixed=tf, t_token=tt, t_ctx=tc)
    ttft = tf + (tt + tc) * p
    e2e = ttft + (o - 1) * (tf + tt + tc * p) + tc * o * (o - 1) / 2
    np.testing.assert_allclose(j["ttft_s"], ttft, rtol=1e-9)
    np.testing.assert_allclose(j["e2e_s"], e2e, rtol=1e-9)
    np.testing.assert_allclose(j["finish_s"], a + e2e, rtol=1e-12)


@pytest.mark.slow  # compiles the batched kernel for its own shapes (~10-20 s)
def test_md1_limit():
    """O = 1, N = 1, M = inf, t_ctx = 0: each request is ONE step of D = t_f + t_t P (its
    prefill, which emits its only token), steps start when the previous ends or at the
    arrival when idle: a FIFO single server with deterministic service D, i.e. M/D/1, and
    TTFT = E2E = the sojourn, mean D + lam D^2 / (2 (1 - rho)) (Pollaczek-Khinchine).
    The simulated mean (R = 4 replications) must be within its 99% CI of that value."""
    tf, tt, pm = 0.01, 1e-4, 100.0
    d = tf + tt * pm
    lam = 0.6 / d
    st = CBSimSettings(n_requests=4000, warmup=400, replications=4, seed=1)
    p = dict(lam=[lam], prompt_mean=[pm], prompt_cv=[0.0], output_mean=[1.0], output_cv=[0.0],
             cap=[1.0], max_batched_tokens=[np.inf], kv_capacity_tokens=[np.inf],
             block_tokens=[1.0], queue_capacity=[np.inf], t_fixed=[tf], t_token=[tt],
             t_ctx=[0.0], service_cv=[0.0])
    res = simulate_continuous(p, st, percentile=0.5)
    pk = d + lam * d * d / (2.0 * (1.0 - lam * d))
    widen = 5.841 / 3.182  # t_{0.995,3} / t_{0.975,3}: the 99% interval
    assert abs(res["ttft_mean_s"][0] - pk) <= widen * res["ttft_mean_hw_s"][0], (res["ttft_mean_s"], pk)
    assert res["ttft_mean_hw_s"][0] < 0.1 * pk
    np.testing.assert_allclose(res["e2e_mean_s"], res["ttft_mean_s"], rtol=1e-12)
    np.testing.assert_allclose(res["step_mean_s"], d, rtol=1e-12)
    assert res["mean_running"][0] == pytest.approx(lam * d, rel=0.05)  # utilisation
    assert np.isinf(res["tpot_mean_s"][0])  # no request has a second token


# --------------------------------------------------------------------------------------
# the batched driver
# --------------------------------------------------------------------------------------


def _grid(n=4, seed=0, **over):
    rng = np.random.default_rng(seed)
    p = dict(lam=rng.uniform(5.0, 25.0, n), prompt_mean=rng.uniform(20, 200, n),
             prompt_cv=rng.choice([0.0, 0.5, 1.0], n), output_mean=rng.uniform(5, 40, n),
             output_cv=rng.choice([0.0, 0.8], n), cap=rng.integers(2, 16, n).astype(float),
             max_batched_tokens=np.array([np.inf, 256.0, 64.0, 512.0] * n)[:n],
             kv_capacity_tokens=np.array([np.inf, 3000.0, 1500.0, np.inf] * n)[:n],
             block_tokens=np.array([16.0, 1.0] * n)[:n],
             queue_capacity=np.array([np.inf, 50.0] * n)[:n],
             t_fixed=rng.uniform(0.005, 0.02, n), t_token=rng.uniform(1e-5, 2e-4, n),
             t_ctx=rng.uniform(0, 1e-6, n), service_cv=np.array([0.0, 0.3] * n)[:n])
    p.update(over)
    return p


@pytest.mark.slow  # compiles the batched kernel for its own shapes (~10-20 s)
def test_batched_statistics_match_the_reference_on_its_own_draws():
    p = _grid()
    q = np.array([0.9, 0.5, 0.99, 0.75])
    res = simulate_continuous(p, SMALL, percentile=q)
    for i in range(4):
        reps = []
        for r in range(SMALL.replications):
            a, pp, oo = replication_draws(SMALL, i, r, **{k: p[k][i] for k in (
                "lam", "prompt_mean", "prompt_cv", "output_mean", "output_cv")})
            z = step_normals(SMALL, i, r, 20_000)
            o = oo.astype(int).tolist()
            run = ref.simulate(a, pp.astype(int).tolist(), o, cap=p["cap"][i],
                               max_batched_tokens=p["max_batched_tokens"][i],
                               kv_capacity=p["kv_capacity_tokens"][i],
                               block_tokens=p["block_tokens"][i],
                               queue_capacity=p["queue_capacity"][i], t_fixed=p["t_fixed"][i],
                               t_token=p["t_token"][i], t_ctx=p["t_ctx"][i],
                               service_cv=p["service_cv"][i], z=z)
            assert len(run.step_start) < z.size
            reps.append(ref.measure(run, a, o, warmup=SMALL.warmup, q=q[i],
                                    kv_capacity=p["kv_capacity_tokens"][i]))
        m = {k: np.mean([x[k] for x in reps]) for k in reps[0]}
        assert res["stable"][i] == all(x["steady"] for x in reps)
        if not res["stable"][i]:
            continue
        for key, rk in (("ttft_mean_s", "ttft_mean"), ("ttft_p_s", "ttft_p"),
                        ("tpot_mean_s", "tpot_mean"), ("tpot_p_s", "tpot_p"),
                        ("e2e_mean_s", "e2e_mean"), ("e2e_p_s", "e2e_p"),
                        ("mean_running", "mean_running"), ("kv_util", "kv_util"),
                        ("output_tok_s", "output_tok_s"), ("step_mean_s", "step_mean"),
                        ("drop_rate", "drop_rate")):
            np.testing.assert_allclose(res[key][i], m[rk], rtol=1e-9, atol=1e-12, err_msg=key)
        tq = cb_sim.student_t975(SMALL.replications - 1)
        sd = np.std([x["ttft_p"] for x in reps], ddof=1)
        np.testing.assert_allclose(res["ttft_p_hw_s"][i], tq * sd / np.sqrt(2), rtol=1e-9)
    assert res["drop_rate"][1] >= 0 and np.all(res["preempt"] == 0)


def test_student_t_quantile():
    from scipy.stats import t

    # SciPy's t.ppf as the reference: within 3e-10 of the exact quantile in SciPy 1.11 (7 dof:
    # 2.3646242510 against the exact 2.3646242516), closer in later releases
    for dof in (1, 2, 3, 7, 30, 200):
        assert cb_sim.student_t975(dof) == pytest.approx(t.ppf(0.975, dof), rel=1e-9)
    assert math.isinf(cb_sim.student_t975(0))


@pytest.mark.slow  # compiles the batched kernel for its own shapes (~10-20 s)
def test_overload_is_unstable_with_infinite_latencies():
    """lam = 5x what one sequence slot can serve: the queue grows all run long, TTFT of
    the last quarter >> first quarter; the point is not stable and its latencies are +inf,
    never finite numbers."""
    p = _grid(n=2, seed=1, lam=np.array([400.0, 5.0]), cap=np.array([1.0, 8.0]),
              queue_capacity=np.array([np.inf, np.inf]), kv_capacity_tokens=np.full(2, np.inf))
    res = simulate_continuous(p, SMALL)
    assert not res["stable"][0] and res["steady_frac"][0] == 0.0
    for m in ("ttft", "tpot", "e2e"):
        for k in ("mean_s", "p_s", "mean_hw_s", "p_hw_s"):
            assert np.isinf(res[f"{m}_{k}"][0])
    assert res["stable"][1] and np.isfinite(res["ttft_p_s"][1])
    assert res["mean_running"][0] == pytest.approx(1.0, abs=0.01)  # the slot never idles


@pytest.mark.slow  # compiles the batched kernel for its own shapes (~10-20 s)
def test_deterministic_and_independent_of_chunking_and_order():
    p = _grid(n=4, seed=2)
    r1 = simulate_continuous(p, SMALL)
    r2 = simulate_continuous(p, SMALL, max_lanes=SMALL.replications)  # one scenario a chunk
    for k in r1:
        np.testing.assert_allclose(r2[k], r1[k], rtol=1e-12, atol=0, err_msg=k)
    perm = np.array([2, 0, 3, 1])
    r3 = simulate_continuous({k: v[perm] for k, v in p.items()}, SMALL, scenario_ids=perm)
    for k in r1:
        np.testing.assert_allclose(r3[k], r1[k][perm], rtol=1e-12, atol=0, err_msg=k)
    r4 = simulate_continuous(p, CBSimSettings(**{**SMALL.__dict__, "seed": 4}))
    assert not np.array_equal(r4["ttft_mean_s"], r1["ttft_mean_s"])


def test_more_percentiles_are_those_of_separate_runs():
    """`more_percentiles` reads further quantiles off the same runs: each equals the
    `percentile` output of a run asking for that quantile alone, bit for bit."""
    p = _grid(seed=5)
    res = simulate_continuous(p, SMALL, percentile=0.9, more_percentiles=(0.5, 0.99))
    for q in (0.5, 0.99):
        alone = simulate_continuous(p, SMALL, percentile=q)
        tag = cb_sim.percentile_tag(q)
        for m in ("ttft", "tpot", "e2e"):
            np.testing.assert_array_equal(res[f"{m}_p{tag}_s"], alone[f"{m}_p_s"])
            np.testing.assert_array_equal(res[f"{m}_p{tag}_hw_s"], alone[f"{m}_p_hw_s"])
    np.testing.assert_array_equal(res["ttft_mean_s"], alone["ttft_mean_s"])
    assert cb_sim.percentile_tag(0.999) == "99_9"
    with pytest.raises(cb_sim.CBSimulationError, match="more_percentiles"):
        simulate_continuous(p, SMALL, more_percentiles=(1.5,))


def test_second_call_with_same_shapes_does_not_recompile():
    simulate_continuous(_grid(seed=5), SMALL)
    before = cb_sim._TRACES
    simulate_continuous(_grid(seed=6), SMALL, percentile=0.5)
    assert cb_sim._TRACES == before


def test_trace_replay():
    rng = np.random.default_rng(7)
    n = SMALL.warmup + SMALL.n_requests
    tr = {"arrival_s": np.cumsum(rng.exponential(0.1, n)),
          "prompt_tokens": rng.integers(1, 100, n).astype(float),
          "output_tokens": rng.integers(1, 30, n).astype(float)}
    p = _grid(n=2, seed=3, service_cv=np.zeros(2), queue_capacity=np.full(2, np.inf))
    del p["lam"]
    res = simulate_continuous(p, SMALL, percentile=0.9, trace=tr)
    np.testing.assert_array_equal(res["ttft_p_hw_s"], 0.0)  # replications coincide
    for i in range(2):
        run = ref.simulate(tr["arrival_s"], tr["prompt_tokens"].astype(int).tolist(),
                           tr["output_tokens"].astype(int).tolist(), cap=p["cap"][i],
                           max_batched_tokens=p["max_batched_tokens"][i],
                           kv_capacity=p["kv_capacity_tokens"][i],
                           block_tokens=p["block_tokens"][i], t_fixed=p["t_fixed"][i],
                           t_token=p["t_token"][i], t_ctx=p["t_ctx"][i])
        m = ref.measure(run, tr["arrival_s"], tr["output_tokens"].astype(int).tolist(),
                        warmup=SMALL.warmup, q=0.9, kv_capacity=p["kv_capacity_tokens"][i])
        np.testing.assert_allclose(res["ttft_p_s"][i], m["ttft_p"], rtol=1e-10)
        np.testing.assert_allclose(res["e2e_mean_s"][i], m["e2e_mean"], rtol=1e-10)


def test_lengths_follow_the_spec():
    z = np.linspace(-3, 3, 7)
    np.testing.assert_array_equal(cb_sim.lengths(z, 100.4, 0.0), np.full(7, 100.0))
    np.testing.assert_array_equal(cb_sim.lengths(z, 0.2, 0.0), np.ones(7))
    s2 = math.log1p(0.25)
    np.testing.assert_array_equal(cb_sim.lengths(z, 50.0, 0.5),
                                  np.maximum(1, np.round(50 * np.exp(math.sqrt(s2) * z - s2 / 2))))


def test_invalid_input_is_rejected():
    p = _grid()
    with pytest.raises(CBSimulationError, match="missing"):
        simulate_continuous({k: v for k, v in p.items() if k != "cap"}, SMALL)
    with pytest.raises(CBSimulationError, match="differ in length"):
        simulate_continuous({**p, "lam": p["lam"][:2]}, SMALL)
    with pytest.raises(CBSimulationError, match="M >= N"):
        simulate_continuous({**p, "max_batched_tokens": np.full(4, 2.0), "cap": np.full(4, 8.0)}, SMALL)
    with pytest.raises(CBSimulationError, match=r"cap\[0\]"):
        simulate_continuous({**p, "cap": np.full(4, 1.5)}, SMALL)
    with pytest.raises(CBSimulationError, match="percentile"):
        simulate_continuous(p, SMALL, percentile=1.5)
    with pytest.raises(CBSimulationError, match="sorted"):
        simulate_requests([1.0, 0.0], [1, 1], [1, 1], cap=1, t_fixed=1.0, t_token=0.0)
    with pytest.raises(CBSimulationError, match="integers"):
        simulate_requests([0.0, 1.0], [1.5, 1], [1, 1], cap=1, t_fixed=1.0, t_token=0.0)
    empty = simulate_continuous({k: np.empty(0) for k in cb_sim.PARAM_KEYS}, SMALL)
    assert all(v.shape == (0,) for v in empty.values())


# --------------------------------------------------------------------------------------
# scheduler_policy = "prefill_first" (docs/continuous.md, "Engine variants")
# --------------------------------------------------------------------------------------


def test_prefill_first_hand_case_matches_reference():
    """The hand-traced case of tests/test_cb_reference_engines.py (a prompt step pauses the
    decoder: r1's prompt runs alone in [2.0, 3.5]) through the JAX simulator."""
    _, j, n = _both([0.0, 0.5], np.array([10.0, 5.0]), np.array([3.0, 2.0]), cap=4, t_fixed=1.0, t_token=0.1,
                    scheduler_policy="prefill_first")
    np.testing.assert_allclose(j["first_s"][:n], [2.0, 3.5], rtol=1e-12)
    np.testing.assert_allclose(j["finish_s"][:n], [5.8, 4.7], rtol=1e-12)


def test_prefill_first_random_cases_match_reference():
    """Seeded random scenarios under prefill_first, every knob as in the chunked test above:
    request by request and step by step (the step's n_ctx leaves the paused decoders out)."""
    rng = np.random.default_rng(23)
    paused = 0
    for case in range(10):
        a, p, o, kw = _random_case(rng, case)
        kw["scheduler_policy"] = "prefill_first"
        r = ref.simulate(a, p.astype(int).tolist(), o.astype(int).tolist(), **kw)
        _assert_same(r, _jax(a, p, o, **kw))
        # steps that prefill while sequences decode: the policy really paused someone
        paused += sum(1 for pre, run, tok in zip(r.step_prefill, r.step_running, r.step_tok)
                      if pre > 0 and tok == pre and run > 1)
    assert paused > 0


def test_unknown_scheduler_policy_is_refused():
    with pytest.raises(CBSimulationError, match="scheduler_policy = 'fcfs'"):
        simulate_requests([0.0], [1], [1], cap=1, t_fixed=1.0, t_token=0.0, scheduler_policy="fcfs")
