"""The reference scheduler's engine variants (docs/continuous.md, "Engine variants"), traced by
hand: `scheduler_policy = "prefill_first"`, `scheduler_steps = k` and `kv_admission =
"on_demand"` with preemption. Each case's expected times are worked out step by step in its
docstring from the rules (step time t_fixed + t_token n_tok + t_ctx n_ctx), nothing else."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sweep.testing import cb_reference as ref


def test_prefill_first_pauses_the_decoders() -> None:
    """t_fixed 1, t_token 0.1, t_ctx 0; r0 at 0 (P 10, O 3), r1 at 0.5 (P 5, O 2).

    prefill_first: step 0 [0, 2.0] prefills r0 (1 + 10 x 0.1), first token 2.0. Step 1 starts
    at 2.0 with r1 admitted: it carries r1's 5 prompt tokens only, r0 paused: [2.0, 3.5], r1's
    first token 3.5. Step 2 decodes both: [3.5, 4.7], r1 done. Step 3 decodes r0: [4.7, 5.8].
    chunked instead: step 1 mixes r0's decode token and r1's prompt, [2.0, 3.6]; step 2
    decodes both, [3.6, 4.8], and both finish."""
    kw = dict(cap=4, t_fixed=1.0, t_token=0.1)
    r = ref.simulate([0.0, 0.5], [10, 5], [3, 2], scheduler_policy="prefill_first", **kw)
    assert r.first_s == pytest.approx([2.0, 3.5]) and r.finish_s == pytest.approx([5.8, 4.7])
    assert r.step_tok == [10, 5, 2, 1] and r.step_prefill == [10, 5, 0, 0]
    assert r.tpot_s == pytest.approx([1.9, 1.2])
    c = ref.simulate([0.0, 0.5], [10, 5], [3, 2], **kw)
    assert c.first_s == pytest.approx([2.0, 3.6]) and c.finish_s == pytest.approx([4.8, 4.8])
    assert c.step_tok == [10, 6, 2]


def test_multi_step_windows_delay_admission_and_burst_tokens() -> None:
    """scheduler_steps 3, chunked; t_fixed 1, t_token 0.1; r0 at 0 (P 2, O 4), r1 at 0.5 (P 2, O 2).

    Step 0 (a decision) [0, 1.2] prefills r0: token 1. Steps 1 and 2 finish its window, decode
    only, no admission although r1 waits: [1.2, 2.3], [2.3, 3.4], tokens 2 and 3. Step 3 (a
    decision) admits r1 and mixes r0's decode with r1's prompt: [3.4, 4.7], r0's token 4 (done)
    and r1's first. Step 4 (its window) decodes r1: [4.7, 5.8], done; the window has nothing
    left to decode, and the run ends."""
    r = ref.simulate([0.0, 0.5], [2, 2], [4, 2], cap=4, t_fixed=1.0, t_token=0.1, scheduler_steps=3)
    assert r.step_start == pytest.approx([0.0, 1.2, 2.3, 3.4, 4.7])
    assert r.admit_s == pytest.approx([0.0, 3.4])
    assert r.first_s == pytest.approx([1.2, 4.7]) and r.finish_s == pytest.approx([4.7, 5.8])
    assert r.ttft_s == pytest.approx([1.2, 4.2])
    assert np.diff(r.token_s[0]) == pytest.approx([1.1, 1.1, 1.3])  # ITL: every gap
    assert r.tpot_s == pytest.approx([3.5 / 3, 1.1])
    # what a streaming client receives: a message a window at its end (the module's "Delivery"): the
    # first window ends at 3.4 with r0's tokens 1-3; the second ends early, at 5.8 when nothing is
    # left to decode, with r0's token 4 and both of r1's
    assert r.delivered_s == [pytest.approx([3.4, 5.8]), pytest.approx([5.8])]


def test_on_demand_preempts_the_most_recent_and_recomputes() -> None:
    """kv_admission on_demand, C = 10 tokens in blocks of 1, t_fixed 1, t_token 0; r0 and r1
    at 0, each P 4, O 4 (8 <= 10: neither is rejected).

    Step 0: both admitted (first chunks 4 + 4 <= 10), both prefilled, first tokens at 1.
    Step 1 needs 5 + 5 = 10 blocks: fits; tokens 2 at 2. Step 2 needs 6 + 6 = 12 > 10: r1 (the
    most recent) is preempted, freeing its 5 cached tokens (4 prompt + token 1; token 2 is not
    cached yet) and returning to the queue to recompute P + g = 6; r0 decodes alone, token 3 at
    3. Step 3: r1's first chunk (6 blocks) does not fit beside r0's 6; r0's token 4 at 4, done.
    Step 4: r1 readmitted, re-prefills 6 tokens, which emits its token 3 at 5 (tokens 1 and 2 are
    not emitted again; its TTFT keeps 1). Step 5: token 4 at 6."""
    r = ref.simulate([0.0, 0.0], [4, 4], [4, 4], cap=4, kv_capacity=10, t_fixed=1.0, t_token=0.0,
                     kv_admission="on_demand")
    assert r.finish_s == pytest.approx([4.0, 6.0]) and r.first_s == pytest.approx([1.0, 1.0])
    assert r.preempted == [0, 1] and r.recomputed == [0, 5]
    assert r.token_s[1] == pytest.approx([1.0, 2.0, 5.0, 6.0])
    assert r.step_prefill == [8, 0, 0, 0, 6, 0]
    assert r.tpot_s == pytest.approx([1.0, 5.0 / 3])
    # reserve mode on the same requests: P + O = 8 each, 16 > 10, so r1 waits for r0 instead
    s = ref.simulate([0.0, 0.0], [4, 4], [4, 4], cap=4, kv_capacity=10, t_fixed=1.0, t_token=0.0)
    assert s.admit_s == pytest.approx([0.0, 4.0]) and s.preempted == [0, 0]


def test_defaults_are_the_base_scheduler_and_bad_variants_are_refused() -> None:
    """Explicit defaults change nothing (a random case against the call without them)."""
    rng = np.random.default_rng(7)
    a = np.cumsum(rng.exponential(0.05, 200)).tolist()
    p, o = rng.integers(1, 300, 200).tolist(), rng.integers(1, 60, 200).tolist()
    kw = dict(cap=16, max_batched_tokens=512, kv_capacity=4096, block_tokens=16, t_fixed=0.01, t_token=1e-4,
              t_ctx=1e-6)
    x = ref.simulate(a, p, o, **kw)
    y = ref.simulate(a, p, o, scheduler_policy="chunked", scheduler_steps=1, kv_admission="reserve", **kw)
    assert x.finish_s == y.finish_s and x.step_ctx == y.step_ctx
    for bad in (dict(scheduler_policy="fcfs"), dict(kv_admission="lazy"), dict(scheduler_steps=0)):
        with pytest.raises(ValueError):
            ref.simulate(a, p, o, **kw, **bad)


@pytest.mark.parametrize("variant", [dict(scheduler_policy="prefill_first"), dict(scheduler_steps=4),
                                     dict(kv_admission="on_demand"),
                                     dict(kv_admission="on_demand", scheduler_policy="prefill_first")])
def test_every_request_finishes_with_its_tokens(variant: dict) -> None:
    """Random loads near the KV limit: every admitted request emits exactly O tokens, in time
    order, its first at its first-token time and its last at its finish; no step holds more KV
    than C (on demand: blocks held), and preemptions happen only on demand."""
    rng = np.random.default_rng(11)
    n = 300
    a = np.cumsum(rng.exponential(0.02, n)).tolist()
    p, o = rng.integers(16, 400, n).tolist(), rng.integers(1, 80, n).tolist()
    r = ref.simulate(a, p, o, cap=32, max_batched_tokens=1024, kv_capacity=3000, block_tokens=16, t_fixed=0.01,
                     t_token=5e-5, t_ctx=1e-6, **variant)
    for j in range(n):
        if r.status[j] != ref.ADMITTED:
            continue
        times = r.token_s[j]
        assert len(times) == o[j] and times == sorted(times)
        assert times[0] == r.first_s[j] and times[-1] == r.finish_s[j]
        got = r.delivered_s[j]  # messages: at or after the tokens they carry, never more than the tokens
        if variant.get("scheduler_steps", 1) == 1:
            assert got == times
        else:
            assert got == sorted(got) and 1 <= len(got) <= len(times) and got[0] >= times[0] and got[-1] >= times[-1]
            assert set(got) <= {s + d for s, d in zip(r.step_start, r.step_dur)}
    assert max(r.step_reserved) <= 3000
    if variant.get("kv_admission") != "on_demand":
        assert sum(r.preempted) == 0
    else:
        assert sum(r.preempted) > 0 and all(math.isfinite(x) for x in r.finish_s if x != math.inf)
