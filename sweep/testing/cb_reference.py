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

Step time: ``(t_fixed + t_token n_tok + t_ctx n_ctx) * exp(mu + sigma z[k])`` (with
``compute_line``, the larger of that line and its compute-bound twin, before the noise) with
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

Engine variants (docs/continuous.md, "Engine variants"): ``scheduler_policy =
"prefill_first"`` (a step with prompt tokens pauses every decoder), ``scheduler_steps = k``
(decisions every k steps; decode-only steps in between; the finished leave at the next
decision) and ``kv_admission = "on_demand"`` (blocks as tokens are cached; the most recently
admitted sequence is preempted and recomputes its prompt plus its generated tokens). The
defaults are the base scheduler above.

Delivery (what a streaming client sees): ``token_s`` is when each token is computed (its
step's end); ``delivered_s`` is when the client receives each message. At one step a
decision they are the same, one message a token. With ``scheduler_steps = k > 1`` an engine
hands a window's outputs over when the window ends (vLLM 0.6's multi-step scheduling streams
tokens in bursts of up to k): a request gets one message a window it has tokens in, at the
end of the window's last step (the window's early end, when nothing is left to decode, at
the last step that ran). A benchmark client times messages, not tokens: its TTFT is the
first message, its E2E the last, and its ITL the gaps between messages.

Prompts already cached (``cached=True``; the decode pool of disaggregated serving,
SPEC 11): a request arrives with its first token emitted and its ``P`` prompt tokens in
KV. Queueing, admission and its reservation ``P + O`` are rules 1-2 unchanged; once
admitted it is a decoding sequence (``prefilled = P``, ``emitted = 1``), so rule 3 gives
it one token per step from its admission step, rule 4 counts ``P`` plus the tokens emitted
before the step, and rule 5 makes it leave at the end of the step that emits token ``O``.
Every ``O`` must be >= 2 (an O = 1 request never reaches a decode pool). Its ``first_s``
(and its first ``token_s``) is its arrival (the first token is in hand when it arrives), so
``ttft_s`` is 0 and ``tpot_s`` = (finish - arrival) / (O - 1). Defined with
``kv_admission = "reserve"`` only.

Measurement (SPEC 10, "Measurement conventions") is in :func:`measure`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

ADMITTED, DROPPED, REJECTED = 0, 1, 2


@dataclass(eq=False)  # a sequence is itself (identity), so membership tests are cheap
class _Seq:
    req: int
    prompt: int  # P
    output: int  # O
    reserve: int  # KV tokens reserved at admission (reserve mode)
    order: int  # admission order of its first admission (preempted sequences keep it)
    prefilled: int = 0  # prompt tokens cached of `target`
    emitted: int = 0  # tokens emitted so far (kept across a preemption)
    target: int = 0  # tokens to prefill: P, or P + g when it recomputes after a preemption at g tokens
    base: int = 0  # tokens emitted when `target` was set (0, or g)
    finished: bool = False

    def decoding(self) -> bool:
        return self.prefilled == self.target and not self.finished

    def cached(self) -> int:
        """KV tokens it holds between steps (rule 4: the last emitted token is not cached yet)."""
        if self.prefilled < self.target:
            return self.prefilled
        return self.target + self.emitted - self.base - 1

    def need(self, chunk: int) -> int:
        """KV tokens it holds once a step giving it `chunk` prompt tokens (or, decoding, one
        decode token when `chunk` is 0) has written them."""
        if self.prefilled < self.target:
            return self.prefilled + chunk
        return self.target + self.emitted - self.base


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
    preempted: list[int] = field(default_factory=list)  # times preempted (kv_admission = "on_demand")
    recomputed: list[int] = field(default_factory=list)  # cached tokens freed by its preemptions
    token_s: list[list[float]] = field(default_factory=list)  # each emitted token's time (ITL = their gaps)
    step_start: list[float] = field(default_factory=list)
    step_dur: list[float] = field(default_factory=list)
    step_tok: list[int] = field(default_factory=list)  # n_tok
    step_prefill: list[int] = field(default_factory=list)  # prompt tokens in n_tok
    step_ctx: list[int] = field(default_factory=list)  # n_ctx
    step_running: list[int] = field(default_factory=list)  # running after admission
    step_reserved: list[int] = field(default_factory=list)  # reserved KV tokens (on demand: held blocks' tokens)
    step_emitted: list[int] = field(default_factory=list)  # tokens emitted at its end
    arrival_s: list[float] = field(default_factory=list)  # when each request was sent (closed loop: set by the run)
    #: when the client receives each streamed message of a request (module docstring, "Delivery"): every
    #: token's step end at one step a decision; the end of the window that computed them otherwise
    delivered_s: list[list[float]] = field(default_factory=list)


def reservation(prompt: int, output: int, block_tokens: int) -> int:
    """KV tokens reserved for a request: P + O rounded up to whole blocks."""
    b = int(block_tokens)
    return -(-(int(prompt) + int(output)) // b) * b


def _blocks(tokens: float, block_tokens: int) -> int:
    return -(-int(tokens) // int(block_tokens))


POLICIES = ("chunked", "prefill_first")
KV_ADMISSIONS = ("reserve", "on_demand")


def simulate(
    arrivals, prompt, output, *, cap, max_batched_tokens=math.inf, kv_capacity=math.inf,
    block_tokens=1, queue_capacity=math.inf, t_fixed, t_token, t_ctx=0.0, service_cv=0.0,
    z=None, vllm_admission=False, scheduler_policy="chunked", scheduler_steps=1, kv_admission="reserve",
    clients=None, think_s=None, cached=False, compute_line=None,
) -> Result:
    """Run one replication. ``arrivals`` sorted seconds; ``prompt``/``output`` integers
    >= 1; ``z`` standard normals, one per step (needed only when ``service_cv > 0``).
    ``scheduler_policy``, ``scheduler_steps`` and ``kv_admission`` are the engine variants
    of the module docstring; their defaults are the base scheduler.

    ``clients = c`` (an integer >= 1) makes the arrivals completion-driven (a closed loop,
    SPEC 10.1 ``workload = "closed"``, and `vllm bench serve --max-concurrency c`): request
    ``j`` is sent at ``max(arrivals[j], the time a client is free)``, clients taken in
    request order as they become free (FIFO, like the benchmark's semaphore); a client is
    free at the start, and again ``think_s[j]`` seconds (default 0) after its request ``j``
    finishes, or at once when ``j`` is dropped or rejected. A sent request joins the first
    step that starts after its send; one sent at the very start of a step joins that step
    only when the engine is idle (nothing running or waiting): a busy engine has begun the
    step by the time a client's request reaches it (the client's round trip), so a request
    sent at its predecessor's finish waits for the step that follows. ``arrivals`` are then the earliest
    send times (all 0: a pure closed loop; Poisson times: `--request-rate` under a
    concurrency limit), and ``Result.arrival_s`` the send times. ``cached``: prompts already
    cached (module docstring; every output >= 2, reserve admission only). ``compute_line =
    (t_fixed_c, t_token_c)``: a step costs the larger of its line and t_fixed_c + t_token_c
    n_tok + t_ctx n_ctx (the step's compute-bound regime, `roofline.compute_line`; what
    `sweep predict-benchmark` simulates), before the noise; None: the line alone."""
    if cached and (kv_admission != "reserve" or any(int(x) < 2 for x in output)):
        raise ValueError("cached prompts need kv_admission = 'reserve' and every output >= 2")
    if scheduler_policy not in POLICIES or kv_admission not in KV_ADMISSIONS or int(scheduler_steps) < 1:
        raise ValueError(f"scheduler_policy {scheduler_policy!r}, kv_admission {kv_admission!r}, "
                         f"scheduler_steps {scheduler_steps!r}: see POLICIES, KV_ADMISSIONS, steps >= 1")
    gen = [float(x) for x in arrivals]
    n = len(gen)
    closed = clients is not None
    a = [math.inf] * n if closed else gen
    free: list[float] = [-math.inf] * int(clients) if closed else []  # a heap of the times clients are free
    think = [0.0] * n if think_s is None else [float(x) for x in think_s]
    sent = 0  # requests sent so far (closed loop)

    def send(until: float) -> None:
        """Send, in request order, every request whose send time is <= until: exact, as every
        client free time <= until is known by then (a finish at a step end is known at it)."""
        nonlocal sent
        while closed and sent < n and free and max(gen[sent], free[0]) <= until:
            a[sent] = max(gen[sent], heapq.heappop(free))
            sent += 1

    def next_send() -> float:
        return max(gen[sent], free[0]) if closed and sent < n and free else math.inf

    big_n, big_m = int(cap), float(max_batched_tokens)
    big_c, big_k = float(kv_capacity), float(queue_capacity)
    on_demand, k_steps, b = kv_admission == "on_demand", int(scheduler_steps), int(block_tokens)
    c_blocks = math.floor(big_c / b) if math.isfinite(big_c) else math.inf
    s2 = math.log1p(service_cv * service_cv)
    sig, mu = math.sqrt(s2), -0.5 * s2
    inf = math.inf
    res = Result([ADMITTED] * n, [-1] * n, [inf] * n, [inf] * n, [inf] * n, [inf] * n,
                 [math.nan] * n, [inf] * n, [0] * n, [0] * n, [[] for _ in range(n)],
                 delivered_s=[[] for _ in range(n)])
    undelivered: set[int] = set()  # requests with tokens computed in the current window

    def deliver(when: float) -> None:
        """The window ends at `when`: one message to each request that has tokens in it."""
        for j in sorted(undelivered):
            res.delivered_s[j].append(when)
        undelivered.clear()
    waiting: deque[int | _Seq] = deque()  # request ids, and preempted sequences at the head
    running: list[_Seq] = []  # in admission order
    reserved = 0
    admitted = 0
    window = 0  # steps left in the current multi-step window (0: the next step is a decision)
    t = -inf  # end of the last step
    i = 0  # next arrival to join or drop
    k = 0  # steps so far

    def held_blocks() -> int:
        return sum(_blocks(q.cached(), b) for q in running)

    def compose() -> tuple[dict[int, int], list[_Seq], list[_Seq]]:
        """(prompt chunk per request, decoding sequences in the step, sequences the step pauses)."""
        live = [q for q in running if not q.finished]
        decoding = [q for q in live if q.decoding()]
        prefilling = [q for q in live if q.prefilled < q.target]
        if window > 0:  # inside a multi-step window: decode tokens only, no prompt chunk
            return {}, decoding, prefilling
        if scheduler_policy == "prefill_first" and prefilling:
            budget, paused, decoding = big_m, decoding, []
        else:
            budget, paused = big_m - len(decoding), []
        chunk = {}
        for q in prefilling:
            c = int(min(q.target - q.prefilled, budget))
            budget -= c
            chunk[q.req] = c
        return chunk, decoding, paused

    def lookahead(q: _Seq) -> int:
        """Extra KV tokens a decoding sequence writes in the rest of a window it starts."""
        return min(k_steps, q.output - q.emitted) - 1 if k_steps > 1 else 0

    while True:
        idle = not running and not waiting
        if idle:
            if i >= n:
                break
            nxt = a[i] if i < sent or not closed else next_send()
            if math.isinf(nxt):  # pragma: no cover - a closed loop always has a free client when idle
                break
            s = max(t, nxt)  # idle: the next arrival (or one that came during the last step)
        else:
            s = t
        send(s)
        # arrivals in time for this step join (or are dropped); a closed loop's request sent
        # at the step's start joins only an idle engine (the docstring)
        while i < n and (a[i] < s or (a[i] == s and (idle or not closed))):
            if big_k < inf and sum(1 for w in waiting if isinstance(w, int)) >= big_k:
                res.status[i] = DROPPED
                if closed:
                    heapq.heappush(free, a[i])
            else:
                waiting.append(i)
            i += 1
        if window == 0:  # a decision: the finished leave, then admission from the head, FCFS, no skipping
            for q in running:
                if q.finished:
                    reserved -= q.reserve
            running = [q for q in running if not q.finished]
            claimed = 0  # on demand: blocks of the first chunks admitted in this pass
            while waiting:
                w = waiting[0]
                back, j = (w, w.req) if isinstance(w, _Seq) else (None, w)
                r = reservation(prompt[j], output[j], b)
                if back is None and r > big_c:
                    res.status[j] = REJECTED
                    waiting.popleft()
                    if closed:
                        heapq.heappush(free, s)
                    continue
                if len(running) >= big_n:
                    break
                if on_demand:
                    left = back.target - back.prefilled if back is not None else int(prompt[j])
                    first = _blocks(min(left, big_m), b)
                    if first > c_blocks - held_blocks() - claimed:
                        break
                    claimed += first
                elif r > big_c - reserved:
                    break
                if vllm_admission:
                    n_dec = sum(1 for x in running if x.decoding())
                    pending = sum(x.target - x.prefilled for x in running)
                    if big_m - n_dec - pending <= 0:
                        break
                waiting.popleft()
                if back is None:
                    back = _Seq(j, int(prompt[j]), int(output[j]), 0 if on_demand else r, admitted,
                                target=int(prompt[j]))
                    admitted += 1
                    res.admit_step[j], res.admit_s[j] = k, s
                    if cached:  # prompt in KV, first token emitted before arrival
                        back.prefilled, back.emitted = back.target, 1
                        res.first_s[j] = a[j]
                        res.token_s[j].append(a[j])
                        res.delivered_s[j].append(a[j])
                    reserved += back.reserve
                running.append(back)  # admission order: a readmitted sequence is the most recent
        chunk, decoding, paused = compose()
        if on_demand and window == 0:  # preempt the most recently admitted until the step fits
            while True:
                dec, held = set(decoding), set(paused)
                need = sum(_blocks(q.need(chunk.get(q.req, 0)) + (lookahead(q) if q in dec else 0), b)
                           for q in running if q not in held) + sum(_blocks(q.cached(), b) for q in paused)
                if need <= c_blocks or len(running) <= 1:
                    break
                victim = running.pop()
                res.preempted[victim.req] += 1
                res.recomputed[victim.req] += victim.cached()
                victim.target, victim.base = victim.prompt + victim.emitted, victim.emitted
                victim.prefilled = 0
                pos = 0
                while pos < len(waiting):
                    ahead = waiting[pos]
                    if not isinstance(ahead, _Seq) or ahead.order > victim.order:
                        break
                    pos += 1
                waiting.insert(pos, victim)
                chunk, decoding, paused = compose()
        if not chunk and not decoding:
            if not running:
                t = s
                continue
            if window > 0:  # nothing left to decode in the window: decide now
                window = 0
                deliver(t)
                continue
        # n_ctx (rule 4): cache held once this step's tokens are written, paused sequences apart
        n_prefill = sum(chunk.values())
        n_tok = len(decoding) + n_prefill
        dec, held = set(decoding), set(paused)
        stepping = [q for q in running if q not in held and not q.finished
                    and (q in dec or q.req in chunk or q.prefilled < q.target)]
        n_ctx = sum(q.need(chunk.get(q.req, 0)) for q in stepping)
        mult = math.exp(mu + sig * z[k]) if service_cv > 0.0 else 1.0
        dur = t_fixed + t_token * n_tok + t_ctx * n_ctx
        if compute_line is not None:  # the step's compute-bound line: the larger of the two
            dur = max(dur, compute_line[0] + compute_line[1] * n_tok + t_ctx * n_ctx)
        dur *= mult
        end = s + dur
        res.step_start.append(s)
        res.step_dur.append(dur)
        res.step_tok.append(n_tok)
        res.step_prefill.append(n_prefill)
        res.step_ctx.append(n_ctx)
        res.step_running.append(sum(1 for q in running if not q.finished))
        res.step_reserved.append(held_blocks() * b if on_demand else reserved)
        # rule 5: emissions at the step end; the finished leave at the next decision
        emitted = 0
        window_starts = window == 0
        for q in decoding:
            q.emitted += 1
            emitted += 1
            res.token_s[q.req].append(end)
            undelivered.add(q.req)
        for q in running:
            c = chunk.get(q.req, 0)
            if c:
                q.prefilled += c
                if q.prefilled == q.target:  # prefill (or a recomputation) completed: the next token
                    q.emitted += 1
                    emitted += 1
                    res.token_s[q.req].append(end)
                    undelivered.add(q.req)
                    if res.first_s[q.req] == inf:
                        res.first_s[q.req] = end
        for q in running:
            if not q.finished and q.emitted == q.output:
                q.finished = True
                res.finish_s[q.req] = end
                if closed:
                    heapq.heappush(free, end + think[q.req])
        res.step_emitted.append(emitted)
        if window_starts:
            decode_window = not (scheduler_policy == "prefill_first" and n_prefill > 0)
            window = k_steps - 1 if decode_window else 0
        else:
            window -= 1
        if window == 0:
            deliver(end)
        t = end
        k += 1
    deliver(t)
    res.arrival_s = list(a)
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
