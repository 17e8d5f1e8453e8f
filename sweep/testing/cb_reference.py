"""Plain-Python, event-driven reference of SPEC 10's continuous-batching scheduler.

ONE replication, written for obviousness, not speed: a deque of waiting requests, a list
of running sequences in admission order, and a loop that performs one engine step per
iteration exactly as SPEC 10 words it. The JAX simulator (`sweep.models.continuous.sim`) must
reproduce it request by request; nothing here shares code with it.

Rules (SPEC 10, "Scheduler"), as implemented below
--------------------------------------------------
1. A step starts when the previous one ends. When the engine is idle (nothing running,
   nothing waiting, no arrival during the last step) the next step starts at the next
   arrival. Arrivals during a step join the waiting queue after it: an arrival at time
   ``a`` is in time for a step starting at ``s`` iff ``a <= s`` (an arrival exactly at a
   step start is in time; one exactly at a step end is in time for the next step).
2. At a step start, first the arrivals ``a <= s`` join the queue in arrival order (ties
   by index). Then admission, from the head of the queue:
   - the head's reservation ``r = ceil((P + O) / block) * block`` (``block = 1``: exact);
     ``r > C`` -> rejected (counted as dropped) whether or not a slot is free, and the
     next request becomes the head;
   - else if fewer than ``N`` sequences run and ``r <= C - reserved`` ("fits" is ``<=``)
     -> admitted; else admission stops for this step (no skipping).
3. Tokens: one decode token per running sequence whose prefill is done; then prompt
   tokens of prefilling sequences in admission order, each ``min(remaining prompt,
   remaining budget)`` of ``M - decode tokens``. Only the oldest prefilling sequence can
   be part-way through its prompt.
4. ``n_ctx`` = sum over running sequences of (prompt tokens prefilled so far, this
   step's chunk included, + tokens emitted before this step). Sequences admitted but
   given no tokens this step hold nothing and add 0.
5. Step end: a sequence whose prefill completed emits its first token (TTFT ends); a
   decoding sequence emits one token; a sequence that has emitted ``O`` tokens leaves and
   frees its reservation. With ``O = 1`` a sequence leaves at the end of its last
   prefill step.

Step time: ``(t_fixed + t_token n_tok + t_ctx n_ctx) * exp(mu + sigma z[k])`` with
``sigma^2 = ln(1 + cv^2)``, ``mu = -sigma^2 / 2`` (lognormal, mean 1, CV ``service_cv``)
and ``z[k]`` the k-th pre-drawn standard normal, ``k`` counting steps from 0.

Conventions SPEC 10 leaves open, and why
----------------------------------------
* Queue capacity ``K``: "full" means ``K`` requests *waiting* — arrived, not dropped, not
  yet admitted and not yet rejected. Running sequences do not count (SGLang's
  ``max_queued_requests`` counts the same thing; vLLM has no such limit; SPEC 7's
  batcher uses the same definition). An arrival that finds ``K`` waiting is dropped;
  arrivals at a step start join before that step's admission, in index order, so a
  burst of simultaneous arrivals fills the queue then drops the rest. An over-sized
  request occupies a queue place until it is rejected at the head.
* Admission does not look at the token budget: a request can be admitted at a step
  whose budget the sequences ahead of it use up; it then holds its slot and its
  reservation and gets prompt tokens at a later step. vLLM v1 stops admitting once the
  step's token budget is spent (``while waiting and token_budget > 0``). Every
  request's times are the same under both rules (prefill is FCFS under both, and a
  request admitted earlier only occupies a slot nobody behind it could use); only the
  running count and reserved KV of the intervening steps differ. ``vllm_admission=True``
  switches this reference to vLLM's gate, and the tests check the equivalence.
* An iteration that admits nothing runnable (every waiting request was rejected or
  dropped and nothing runs) is not a step: no time passes, no noise draw is used.
* Engine idle at time 0: the first step starts at the first arrival.

Measurement (SPEC 10, "Measurement conventions") is in :func:`measure`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

ADMITTED, DROPPED, REJECTED = 0, 1, 2


@dataclass
class _Seq:
    req: int
    prompt: int
    output: int
    reserve: int
    prefilled: int = 0
    emitted: int = 0


@dataclass
class Result:
    """Per request (lists of length n) and per step (lists of length n_steps)."""

    status: list[int]  # ADMITTED / DROPPED (queue full) / REJECTED (reservation > C)
    admit_step: list[int]  # -1 unless admitted
    admit_s: list[float]  # step start at admission, inf unless admitted
    first_s: list[float]  # first-token time, inf unless admitted
    finish_s: list[float]  # last-token time, inf unless admitted
    ttft_s: list[float]
    tpot_s: list[float]  # nan for O = 1 (no value) and for requests not admitted
    e2e_s: list[float]
    step_start: list[float] = field(default_factory=list)
    step_dur: list[float] = field(default_factory=list)
    step_tok: list[int] = field(default_factory=list)  # n_tok
    step_prefill: list[int] = field(default_factory=list)  # prompt tokens in n_tok
    step_ctx: list[int] = field(default_factory=list)  # n_ctx
    step_running: list[int] = field(default_factory=list)  # running after admission
    step_reserved: list[int] = field(default_factory=list)  # reserved KV tokens
    step_emitted: list[int] = field(default_factory=list)  # tokens emitted at its end


def reservation(prompt: int, output: int, block_tokens: int) -> int:
    """KV tokens reserved for a request: P + O rounded up to whole blocks."""
    b = int(block_tokens)
    return -(-(int(prompt) + int(output)) // b) * b


def simulate(
    arrivals, prompt, output, *, cap, max_batched_tokens=math.inf, kv_capacity=math.inf,
    block_tokens=1, queue_capacity=math.inf, t_fixed, t_token, t_ctx=0.0, service_cv=0.0,
    z=None, vllm_admission=False,
) -> Result:
    """Run one replication. ``arrivals`` sorted seconds; ``prompt``/``output`` integers
    >= 1; ``z`` standard normals, one per step (needed only when ``service_cv > 0``)."""
    a = [float(x) for x in arrivals]
    n = len(a)
    big_n, big_m = int(cap), float(max_batched_tokens)
    big_c, big_k = float(kv_capacity), float(queue_capacity)
    s2 = math.log1p(service_cv * service_cv)
    sig, mu = math.sqrt(s2), -0.5 * s2
    inf = math.inf
    res = Result([ADMITTED] * n, [-1] * n, [inf] * n, [inf] * n, [inf] * n, [inf] * n,
                 [math.nan] * n, [inf] * n)
    waiting: deque[int] = deque()
    running: list[_Seq] = []
    reserved = 0
    t = -inf  # end of the last step
    i = 0  # next arrival to join or drop
    k = 0  # steps so far
    while True:
        if not running and not waiting:
            if i >= n:
                break
            s = max(t, a[i])  # idle: the next arrival (or one that came during the last step)
        else:
            s = t
        while i < n and a[i] <= s:  # arrivals in time for this step join (or are dropped)
            if len(waiting) >= big_k:
                res.status[i] = DROPPED
            else:
                waiting.append(i)
            i += 1
        # admission from the head, FCFS, no skipping
        while waiting:
            j = waiting[0]
            r = reservation(prompt[j], output[j], block_tokens)
            if r > big_c:
                res.status[j] = REJECTED
                waiting.popleft()
                continue
            if len(running) >= big_n or r > big_c - reserved:
                break
            if vllm_admission:
                n_dec = sum(1 for q in running if q.prefilled == q.prompt)
                pending = sum(q.prompt - q.prefilled for q in running)
                if big_m - n_dec - pending <= 0:
                    break
            waiting.popleft()
            running.append(_Seq(j, int(prompt[j]), int(output[j]), r))
            reserved += r
            res.admit_step[j], res.admit_s[j] = k, s
        if not running:
            t = s
            continue
        # tokens of this step (rule 3)
        decoding = [q for q in running if q.prefilled == q.prompt]
        budget = big_m - len(decoding)
        chunk = {}
        for q in running:
            if q.prefilled < q.prompt:
                c = int(min(q.prompt - q.prefilled, budget))
                budget -= c
                chunk[q.req] = c
        n_prefill = sum(chunk.values())
        n_tok = len(decoding) + n_prefill
        # rule 4: cache held once this step's tokens are written
        n_ctx = sum(q.prefilled + chunk.get(q.req, 0) + q.emitted for q in running)
        mult = math.exp(mu + sig * z[k]) if service_cv > 0.0 else 1.0
        dur = (t_fixed + t_token * n_tok + t_ctx * n_ctx) * mult
        end = s + dur
        res.step_start.append(s)
        res.step_dur.append(dur)
        res.step_tok.append(n_tok)
        res.step_prefill.append(n_prefill)
        res.step_ctx.append(n_ctx)
        res.step_running.append(len(running))
        res.step_reserved.append(reserved)
        # rule 5: emissions and departures at the step end
        emitted = 0
        still = []
        for q in running:
            if q.prefilled == q.prompt:  # decoding
                q.emitted += 1
                emitted += 1
            else:
                q.prefilled += chunk[q.req]
                if q.prefilled == q.prompt:  # prefill completed: first token
                    q.emitted = 1
                    emitted += 1
                    res.first_s[q.req] = end
            if q.emitted == q.output:
                res.finish_s[q.req] = end
                reserved -= q.reserve
            else:
                still.append(q)
        running = still
        res.step_emitted.append(emitted)
        t = end
        k += 1
    for j in range(n):
        if res.status[j] == ADMITTED:
            res.ttft_s[j] = res.first_s[j] - a[j]
            res.e2e_s[j] = res.finish_s[j] - a[j]
            if output[j] >= 2:
                res.tpot_s[j] = (res.finish_s[j] - res.first_s[j]) / (output[j] - 1)
    return res


def _quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), by hand."""
    v = sorted(xs)
    h = (len(v) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (h - lo) * (v[hi] - v[lo])


def measure(res: Result, arrivals, output, *, warmup: int, q: float, kv_capacity=math.inf) -> dict:
    """SPEC 10's per-replication statistics of one run (plain Python).

    Requests ``[warmup:]`` are measured. Means and q-quantiles of TTFT, TPOT (O >= 2) and
    E2E over the admitted ones; ``steady`` compares the mean TTFT of the admitted
    requests among the first and the last ``n_measured // 4`` measured arrivals. Over the
    span ``[T0, T1]`` from the first to the last measured arrival: time-average running
    count and reserved KV / C (a step's values hold from its start to its end, idle time
    counts as 0), tokens emitted at step ends inside the span per second, and the mean
    duration of the steps that start inside it. Drop rate: dropped or rejected measured
    arrivals / measured arrivals.
    """
    a = [float(x) for x in arrivals]
    n = len(a)
    meas = range(warmup, n)
    adm = [j for j in meas if res.status[j] == ADMITTED]
    ttft = [res.ttft_s[j] for j in adm]
    tpot = [res.tpot_s[j] for j in adm if output[j] >= 2]
    e2e = [res.e2e_s[j] for j in adm]
    t0, t1 = a[warmup], a[-1]
    span = t1 - t0
    run_area = kv_area = 0.0
    tokens = 0
    durs = []
    for s, d, r, kv, em in zip(res.step_start, res.step_dur, res.step_running,
                               res.step_reserved, res.step_emitted):
        e = s + d
        ov = max(0.0, min(e, t1) - max(s, t0))
        run_area += r * ov
        kv_area += kv * ov
        if t0 <= e <= t1:
            tokens += em
        if t0 <= s <= t1:
            durs.append(d)
    quarter = (n - warmup) // 4

    def mean_ttft(idx):
        v = [res.ttft_s[j] for j in idx if res.status[j] == ADMITTED]
        return sum(v) / len(v) if v else math.nan

    first_q = mean_ttft(range(warmup, warmup + quarter))
    last_q = mean_ttft(range(n - quarter, n))
    steady = not (quarter > 0 and last_q > 2.0 * first_q)

    def mean(v):
        return sum(v) / len(v) if v else math.inf

    def quant(v):
        return _quantile(v, q) if v else math.inf

    return {
        "ttft_mean": mean(ttft), "ttft_p": quant(ttft),
        "tpot_mean": mean(tpot), "tpot_p": quant(tpot),
        "e2e_mean": mean(e2e), "e2e_p": quant(e2e),
        "mean_running": run_area / span if span > 0 else 0.0,
        "kv_util": kv_area / span / kv_capacity if span > 0 and math.isfinite(kv_capacity) else 0.0,
        "output_tok_s": tokens / span if span > 0 else 0.0,
        "step_mean": sum(durs) / len(durs) if durs else 0.0,
        "drop_rate": (n - warmup - len(adm)) / (n - warmup),
        "steady": steady,
    }
