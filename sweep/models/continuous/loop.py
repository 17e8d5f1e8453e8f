"""The continuous-batching scheduler as a compiled event loop (Numba), every engine variant.

The same algorithm as :mod:`sweep.testing.cb_reference`, rule for rule and in the same
order (one engine step per loop iteration, the running sequences in admission order, FCFS
admission without skipping), with the engine variants of docs/continuous.md ("Engine
variants"): ``scheduler_policy`` (``"chunked"``, ``"prefill_first"``), ``scheduler_steps``
(k decode steps per decision) and ``kv_admission`` (``"reserve"``, ``"on_demand"`` with
recompute preemption of the most recently admitted sequence), and the reference's closed loop
(``clients``: a request is sent when a client is free, ``think_s`` after its last request
finished, and one sent at a step's start joins it only when the engine is idle;
``workload = "closed"``). Cached prompts stay in the Python reference.

Why it exists: the JAX simulator (:mod:`sweep.models.continuous.sim`) jumps over runs of
decode steps in closed form and runs many lanes at once, a design with no room for a
preempted sequence returning to the queue's head or for multi-step windows; a step-by-step
loop compiled to machine code runs every variant, and is the strongest plain baseline to
measure the JAX design against (``benchmarks/cb_sim.py``). The Python objects of the
reference become arrays: per request its state (prompt tokens cached, tokens emitted,
recompute target, admission order), the running sequences as request ids in admission
order, the waiting queue as the arrivals that joined (a pointer pair) behind the preempted
sequences (kept sorted by admission order, as the reference inserts them). The tests check
it against the reference request by request on random engines of every variant.

Numba is a core dependency: the default engine (``kv_admission = "on_demand"``) is simulated
here. Only a grid that simulates such an engine imports this module. The compiled code is
cached on disk (Numba's ``cache=True``), so only a machine's first run compiles it (about 10 s).
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["simulate"]

ADMITTED, DROPPED, REJECTED = 0, 1, 2
_POLICIES = {"chunked": 0, "prefill_first": 1}
_KV = {"reserve": 0, "on_demand": 1}


@numba.njit(cache=True, nogil=True)
def _blocks(tokens, b):
    return (tokens + b - 1) // b


@numba.njit(cache=True, nogil=True)
def _cached(j, prefilled, target, emitted, base):
    """KV tokens request j holds between steps (the last emitted token is not cached yet)."""
    if prefilled[j] < target[j]:
        return prefilled[j]
    return target[j] + emitted[j] - base[j] - 1


@numba.njit(cache=True, nogil=True)
def _deliver(und_list, n_und, undelivered, first_msg, last_msg, when):
    """A window ends at `when`: one message to each request with tokens in it; returns 0, the
    count of requests left undelivered."""
    for q in range(n_und):
        j = und_list[q]
        if first_msg[j] == np.inf:
            first_msg[j] = when
        last_msg[j] = when
        undelivered[j] = False
    return 0


@numba.njit(cache=True, nogil=True)
def _undelivered(j, und_list, n_und, undelivered):
    """Request j has a token in the current window; returns the new count."""
    if undelivered[j]:
        return n_und
    undelivered[j] = True
    und_list[n_und] = j
    return n_und + 1


@numba.njit(cache=True, nogil=True)
def _compose(run, nr, window, prefill_first, big_m, prefilled, target, finished, role, chunk):
    """Fill role[p] (0 finished, 1 decoding in the step, 2 prefilling, 3 paused) and
    chunk[p] for the running positions; returns (decoders, prompt tokens, prefilling)."""
    n_dec = 0
    n_pre = 0
    for p in range(nr):
        j = run[p]
        chunk[p] = 0
        if finished[j]:
            role[p] = 0
        elif prefilled[j] == target[j]:
            role[p] = 1
            n_dec += 1
        else:
            role[p] = 2
            n_pre += 1
    if window > 0:  # inside a multi-step window: decode tokens only
        for p in range(nr):
            if role[p] == 2:
                role[p] = 3
        return n_dec, 0, n_pre
    if prefill_first and n_pre > 0:
        budget = big_m
        for p in range(nr):
            if role[p] == 1:
                role[p] = 3
        n_dec = 0
    else:
        budget = big_m - n_dec
    n_tok = 0
    for p in range(nr):
        if role[p] == 2:
            j = run[p]
            c = min(float(target[j] - prefilled[j]), budget)
            ci = int(c)
            budget -= ci
            chunk[p] = ci
            n_tok += ci
    return n_dec, n_tok, n_pre


@numba.njit(cache=True, nogil=True)
def _loop(gen, prompt, output, z, big_n, big_m, big_c, b, big_k, t_fixed, t_token, t_ctx, cv,
          prefill_first, k_steps, on_demand, t0, t1, clients, think, warmup):
    n = gen.shape[0]
    # closed loop (clients > 0): request j is sent at max(gen[j], the earliest time a client is
    # free), in request order, as the reference sends it; `a` holds the send times. The
    # statistics' span then runs from the send of request `warmup` to the last send, each end
    # set when it happens (exact when sends fall on step ends, as without think time)
    closed = clients > 0
    a = np.full(n, np.inf) if closed else gen
    free = np.full(max(clients, 1), -np.inf)  # the times clients are free (an unordered pool)
    n_free = clients
    sent = 0
    if closed:
        t0 = np.inf
        t1 = np.inf
    # over [t0, t1]: areas of running, KV reserved (on demand: held blocks), KV held once the
    # step's tokens are written; tokens emitted at step ends; duration sum and count of steps
    # starting in it (the JAX simulator's statistics)
    stats = np.zeros(6)
    inf = np.inf
    status = np.zeros(n, np.int64)
    admit_s = np.full(n, inf)
    first_s = np.full(n, inf)
    finish_s = np.full(n, inf)
    first_msg = np.full(n, inf)  # the first streamed message (a window's end at k > 1)
    last_msg = np.full(n, inf)
    preempted = np.zeros(n, np.int64)
    recomputed = np.zeros(n, np.int64)
    prefilled = np.zeros(n, np.int64)
    emitted = np.zeros(n, np.int64)
    target = np.zeros(n, np.int64)
    base = np.zeros(n, np.int64)
    order = np.zeros(n, np.int64)
    reserve = np.zeros(n, np.int64)
    finished = np.zeros(n, np.bool_)
    undelivered = np.zeros(n, np.bool_)
    und_list = np.zeros(n, np.int64)
    n_und = 0
    wq = np.zeros(n, np.int64)  # arrivals that joined, in order: [wh, wt) waits
    wh = 0
    wt = 0
    pq = np.zeros(n, np.int64)  # preempted, at the queue's head, sorted by admission order
    n_pq = 0
    cap = int(big_n)
    run = np.zeros(cap, np.int64)
    role = np.zeros(cap, np.int64)
    chunk = np.zeros(cap, np.int64)
    nr = 0
    c_blocks = float(math.floor(big_c / b)) if big_c < inf else inf
    s2 = math.log1p(cv * cv)
    sig = math.sqrt(s2)
    mu = -0.5 * s2
    reserved = 0
    admitted = 0
    window = 0
    t = -inf
    i = 0
    k = 0
    while True:
        idle = nr == 0 and n_pq == 0 and wh == wt
        if idle:
            if i >= n:
                break
            if i < sent or not closed:
                nxt = a[i]
            else:
                nxt = inf
                if sent < n and n_free > 0:
                    f = free[0]
                    for q in range(1, n_free):
                        f = min(f, free[q])
                    nxt = max(gen[sent], f)
            if nxt == inf:  # a closed loop always has a free client when idle
                break
            s = max(t, nxt)
        else:
            s = t
        while closed and sent < n and n_free > 0:  # send what is due by s, clients earliest free first
            best = 0
            for q in range(1, n_free):
                if free[q] < free[best]:
                    best = q
            if max(gen[sent], free[best]) > s:
                break
            a[sent] = max(gen[sent], free[best])
            n_free -= 1
            free[best] = free[n_free]
            if sent == warmup:
                t0 = a[sent]
            if sent == n - 1:
                t1 = a[sent]
            sent += 1
        # a closed loop's request sent at the step's start joins only an idle engine (the
        # reference's rule: a busy engine has begun the step by the time the request reaches it)
        while i < n and (a[i] < s or (a[i] == s and (idle or not closed))):
            if big_k < inf and wt - wh >= big_k:
                status[i] = DROPPED
                if closed:
                    free[n_free] = a[i]
                    n_free += 1
            else:
                wq[wt] = i
                wt += 1
            i += 1
        if window == 0:  # a decision: the finished leave, then admission from the head
            keep = 0
            for p in range(nr):
                j = run[p]
                if finished[j]:
                    reserved -= reserve[j]
                else:
                    run[keep] = j
                    keep += 1
            nr = keep
            claimed = 0
            while n_pq > 0 or wh < wt:
                back = n_pq > 0
                j = pq[0] if back else wq[wh]
                r = _blocks(prompt[j] + output[j], b) * b
                if not back and r > big_c:
                    status[j] = REJECTED
                    wh += 1
                    if closed:
                        free[n_free] = s
                        n_free += 1
                    continue
                if nr >= big_n:
                    break
                if on_demand:
                    left = target[j] - prefilled[j] if back else prompt[j]
                    first = _blocks(int(min(float(left), big_m)), b)
                    held = 0
                    for p in range(nr):
                        held += _blocks(_cached(run[p], prefilled, target, emitted, base), b)
                    if first > c_blocks - held - claimed:
                        break
                    claimed += first
                elif r > big_c - reserved:
                    break
                if back:
                    for q in range(n_pq - 1):
                        pq[q] = pq[q + 1]
                    n_pq -= 1
                else:
                    wh += 1
                    reserve[j] = 0 if on_demand else r
                    order[j] = admitted
                    target[j] = prompt[j]
                    admitted += 1
                    admit_s[j] = s
                    reserved += reserve[j]
                run[nr] = j
                nr += 1
        n_dec, n_prefill, n_pre = _compose(run, nr, window, prefill_first, big_m, prefilled, target,
                                           finished, role, chunk)
        if on_demand and window == 0:  # preempt the most recently admitted until the step fits
            while True:
                need = 0
                for p in range(nr):
                    j = run[p]
                    if role[p] == 3:
                        need += _blocks(_cached(j, prefilled, target, emitted, base), b)
                    elif prefilled[j] < target[j]:
                        need += _blocks(prefilled[j] + chunk[p], b)
                    else:
                        look = min(k_steps, output[j] - emitted[j]) - 1 if k_steps > 1 and role[p] == 1 else 0
                        need += _blocks(target[j] + emitted[j] - base[j] + look, b)
                if need <= c_blocks or nr <= 1:
                    break
                nr -= 1
                v = run[nr]
                preempted[v] += 1
                recomputed[v] += _cached(v, prefilled, target, emitted, base)
                target[v] = prompt[v] + emitted[v]
                base[v] = emitted[v]
                prefilled[v] = 0
                pos = 0
                while pos < n_pq and order[pq[pos]] <= order[v]:
                    pos += 1
                for q in range(n_pq, pos, -1):
                    pq[q] = pq[q - 1]
                pq[pos] = v
                n_pq += 1
                n_dec, n_prefill, n_pre = _compose(run, nr, window, prefill_first, big_m, prefilled,
                                                   target, finished, role, chunk)
        has_chunk = window == 0 and n_pre > 0
        if not has_chunk and n_dec == 0:
            if nr == 0:
                t = s
                continue
            if window > 0:  # nothing left to decode in the window: decide now
                window = 0
                n_und = _deliver(und_list, n_und, undelivered, first_msg, last_msg, t)
                continue
        n_tok = n_dec + n_prefill
        n_ctx = 0
        for p in range(nr):
            j = run[p]
            if role[p] == 1:
                n_ctx += target[j] + emitted[j] - base[j]
            elif role[p] == 2:
                n_ctx += prefilled[j] + chunk[p]
        if cv > 0.0 and k >= z.shape[0]:  # the caller's normals ran out: it draws more and runs again
            return status, admit_s, first_s, finish_s, first_msg, last_msg, preempted, recomputed, -1, stats, a
        mult = math.exp(mu + sig * z[k]) if cv > 0.0 else 1.0
        end = s + (t_fixed + t_token * n_tok + t_ctx * n_ctx) * mult
        n_live = 0
        kv_now = 0
        paused_held = 0
        for p in range(nr):
            j = run[p]
            if role[p] != 0:
                n_live += 1
            if role[p] == 3:  # the cache a paused sequence holds (as the JAX simulator counts it)
                paused_held += prefilled[j] if prefilled[j] < target[j] else target[j] + emitted[j] - base[j]
            if on_demand:
                kv_now += _blocks(_cached(j, prefilled, target, emitted, base), b) * b
        if not on_demand:
            kv_now = reserved
        ov = max(0.0, min(end, t1) - max(s, t0))
        stats[0] += n_live * ov
        stats[1] += kv_now * ov
        stats[2] += (n_ctx + paused_held) * ov
        if t0 <= s <= t1:
            stats[4] += end - s
            stats[5] += 1.0
        n_emit = 0
        for p in range(nr):
            j = run[p]
            if role[p] == 1:
                emitted[j] += 1
                n_emit += 1
                n_und = _undelivered(j, und_list, n_und, undelivered)
        for p in range(nr):
            j = run[p]
            if role[p] == 2 and chunk[p] > 0:
                prefilled[j] += chunk[p]
                if prefilled[j] == target[j]:
                    emitted[j] += 1
                    n_emit += 1
                    n_und = _undelivered(j, und_list, n_und, undelivered)
                    if first_s[j] == inf:
                        first_s[j] = end
        if t0 <= end <= t1:
            stats[3] += n_emit
        for p in range(nr):
            j = run[p]
            if not finished[j] and emitted[j] == output[j]:
                finished[j] = True
                finish_s[j] = end
                if closed:
                    free[n_free] = end + think[j]
                    n_free += 1
        if window == 0:
            window = k_steps - 1 if not (prefill_first and n_prefill > 0) else 0
        else:
            window -= 1
        if window == 0:
            n_und = _deliver(und_list, n_und, undelivered, first_msg, last_msg, end)
        t = end
        k += 1
    _deliver(und_list, n_und, undelivered, first_msg, last_msg, t)
    return status, admit_s, first_s, finish_s, first_msg, last_msg, preempted, recomputed, k, stats, a


def simulate(arrivals, prompt, output, *, cap, max_batched_tokens=math.inf, kv_capacity=math.inf,
             block_tokens=1, queue_capacity=math.inf, t_fixed, t_token, t_ctx=0.0, service_cv=0.0,
             z=None, scheduler_policy="chunked", scheduler_steps=1, kv_admission="reserve",
             span=(-math.inf, math.inf), clients=None, think_s=None, warmup=0) -> dict:
    """One replication, as :func:`sweep.testing.cb_reference.simulate` runs it.

    ``clients = c`` (an integer >= 1) runs the reference's closed loop: ``arrivals`` are the
    earliest send times (all 0: every client sends at once), request j is sent when a client
    is free, ``think_s[j]`` (default 0) after its request j finished; the statistics' span
    is then from request ``warmup``'s send to the last send (``span`` is not used).

    Returns per request ``arrival_s`` (the send times; ``arrivals`` in an open loop),
    ``status``, ``admit_s``, ``first_s`` and ``finish_s`` (when the
    first and the last token are computed), ``first_msg_s`` and ``last_msg_s`` (when a
    streaming client receives them), ``preempted``, ``recomputed``, the times ``ttft_s``,
    ``tpot_s`` (NaN for O = 1) and ``e2e_s`` (inf unless admitted), ``n_steps`` (-1 when ``z``
    ran out), and ``stats``, six sums over ``span`` = (t0, t1) (see :func:`_loop`)."""
    if scheduler_policy not in _POLICIES or kv_admission not in _KV or int(scheduler_steps) < 1:
        raise ValueError(f"scheduler_policy {scheduler_policy!r}, kv_admission {kv_admission!r}, "
                         f"scheduler_steps {scheduler_steps!r}")
    # copies: one compiled specialisation (writable, contiguous) whatever the caller passes
    a = np.array(arrivals, dtype=np.float64)
    p = np.array(prompt, dtype=np.int64)
    o = np.array(output, dtype=np.int64)
    zz = np.zeros(1) if z is None or service_cv == 0 else np.array(z, dtype=np.float64)
    if clients is not None and int(clients) < 1:
        raise ValueError(f"clients = {clients!r}: a closed loop needs at least one client")
    th = np.zeros(len(a)) if think_s is None else np.array(think_s, dtype=np.float64)
    out = _loop(a, p, o, zz, float(cap), float(max_batched_tokens), float(kv_capacity), int(block_tokens),
                float(queue_capacity), float(t_fixed), float(t_token), float(t_ctx), float(service_cv),
                _POLICIES[scheduler_policy] == 1, int(scheduler_steps), _KV[kv_admission] == 1,
                float(span[0]), float(span[1]), 0 if clients is None else int(clients), th, int(warmup))
    status, admit_s, first_s, finish_s, first_msg, last_msg, preempted, recomputed, n_steps, stats, a = out
    ok = status == ADMITTED
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(ok & (o >= 2), (finish_s - first_s) / np.maximum(o - 1, 1), np.nan)
    return {"arrival_s": a, "status": status, "admit_s": admit_s, "first_s": first_s, "finish_s": finish_s,
            "first_msg_s": first_msg, "last_msg_s": last_msg, "preempted": preempted,
            "recomputed": recomputed, "ttft_s": np.where(ok, first_s - a, np.inf),
            "tpot_s": tpot, "e2e_s": np.where(ok, finish_s - a, np.inf), "n_steps": int(n_steps),
            "stats": stats}


def simulate_continuous(params, settings, *, percentile=0.99, more_percentiles=(), scenario_ids=None,
                        trace=None, scheduler_policy="chunked", scheduler_steps=1, kv_admission="reserve",
                        clients=None, think_s=None) -> dict:
    """:func:`sweep.models.continuous.sim.simulate_continuous` for every engine variant: the same
    parameters, the same random streams per (scenario id, replication), the same measurement and
    the same outputs, from this loop, one replication after another. Where both run (chunked or
    prefill_first, reserve, one step a decision) they agree to float rounding.

    What a streaming client receives times the requests: TTFT is the first message, E2E the
    last, TPOT their gap over O - 1 (equal to the tokens' times at one step a decision; at
    ``scheduler_steps = k`` a message carries a window's tokens, as vLLM's multi-step
    scheduling streams them). ``preempt`` is preemptions per measured admitted request and
    ``recomputed`` the cached tokens they freed per measured admitted request (each with
    ``_hw``); both 0 under ``kv_admission = "reserve"``. ``trace`` is replayed as the JAX
    simulator replays it (every lane the trace's arrivals, and its lengths where given).

    ``clients`` (one integer >= 1 a point) makes each replication a closed loop
    (``workload = "closed"``): ``params["lam"]`` is then the rate at which requests become due
    (``inf``: all at once, a pure closed loop), each client sends its next request
    ``think_s`` (a point's mean, exponential draws of its own stream; default 0) after its
    last one finished, and latencies count from the send. ``rate_rps`` (with ``_hw``) is the
    measured send rate, the closed loop's throughput: requests sent from request ``warmup``
    to the last, over that span. A closed loop is always steady (``stable``): its clients
    bound what is in the system, so the open loop's test (the last quarter's mean TTFT above
    twice the first's) does not apply."""
    from sweep.models.continuous import sim

    if scheduler_policy not in _POLICIES or kv_admission not in _KV or int(scheduler_steps) < 1:
        raise sim.CBSimulationError(f"simulate_continuous: scheduler_policy {scheduler_policy!r}, kv_admission "
                                    f"{kv_admission!r}, scheduler_steps {scheduler_steps!r}")
    closed = clients is not None
    if closed and trace is not None:
        raise sim.CBSimulationError("simulate_continuous: a trace is an open loop's arrivals; drop clients or trace")
    if closed:  # the due times' rate may be inf (a pure closed loop): validated with a finite stand-in
        lam_due = np.asarray(params["lam"], np.float64)
        params = {**params, "lam": np.where(np.isfinite(lam_due), lam_due, 1.0)}
    p = sim._validate(params, need_lam=trace is None)
    s = p["cap"].shape[0]
    reps = int(settings.replications)
    warmup = int(settings.warmup)
    if reps < 1 or warmup < 0 or (trace is None and settings.n_requests < 4):
        raise sim.CBSimulationError("simulate_continuous: replications >= 1, warmup >= 0 and n_requests >= 4")
    if trace is None:
        n = warmup + int(settings.n_requests)
    else:
        tr_a, tr_p, tr_o = sim.trace_arrays(trace, warmup)
        n = tr_a.shape[0]
    q = np.broadcast_to(np.asarray(percentile, np.float64), (s,))
    more = tuple(float(x) for x in more_percentiles)
    ids = np.arange(s, dtype=np.int64) if scenario_ids is None else np.asarray(scenario_ids, np.int64).reshape(s)
    ids = ids % (1 << 31)
    n_summary = len(sim._SUMMARY)
    per = np.empty((s, reps, n_summary + 3 * (1 + len(more))))
    extra = np.empty((s, reps, 3))
    if closed:
        n_cl = np.broadcast_to(np.asarray(clients, np.int64), (s,))
        z_mean = np.broadcast_to(np.asarray(0.0 if think_s is None else think_s, np.float64), (s,))
        if (n_cl < 1).any() or not (z_mean >= 0).all():
            raise sim.CBSimulationError("simulate_continuous: clients >= 1 and think_s >= 0 a point")
    idx = np.arange(n)
    quarter = (n - warmup) // 4

    def mean(x, msk):
        c = int(msk.sum())
        return float(x[msk].sum() / c) if c else np.inf

    for i in range(s):
        eng = {k: float(p[k][i]) for k in ("cap", "max_batched_tokens", "block_tokens", "queue_capacity",
                                           "t_fixed", "t_token", "t_ctx", "service_cv")}
        kv = float(p["kv_capacity_tokens"][i])
        for r in range(reps):
            a, pp, oo = sim.replication_draws(settings, int(ids[i]), r, lam=float(p["lam"][i]),
                                              prompt_mean=float(p["prompt_mean"][i]),
                                              prompt_cv=float(p["prompt_cv"][i]),
                                              output_mean=float(p["output_mean"][i]),
                                              output_cv=float(p["output_cv"][i]), n=n)
            if trace is not None:
                a, pp, oo = tr_a, np.where(tr_p > 0, tr_p, pp), np.where(tr_o > 0, tr_o, oo)
            loop_kw = {}
            if closed:
                if not np.isfinite(lam_due[i]):
                    a = np.zeros_like(a)
                think = (np.random.default_rng([int(settings.seed), int(ids[i]), r, 1]).exponential(z_mean[i], n)
                         if z_mean[i] > 0 else None)
                loop_kw = dict(clients=int(n_cl[i]), think_s=think, warmup=warmup)
            n_z = int(oo.sum() + pp.sum() / eng["max_batched_tokens"]) + 64
            while True:
                z = sim.step_normals(settings, int(ids[i]), r, n_z) if eng["service_cv"] > 0 else None
                o = simulate(a, pp, oo, kv_capacity=kv, z=z,
                             scheduler_policy=scheduler_policy, scheduler_steps=scheduler_steps,
                             kv_admission=kv_admission, span=(a[warmup], a[-1]), **loop_kw, **eng)
                if o["n_steps"] >= 0:
                    break
                n_z *= 2
            a = o["arrival_s"]
            adm = o["status"] == ADMITTED
            ttft = np.where(adm, o["first_msg_s"] - a, np.inf)
            e2e = np.where(adm, o["last_msg_s"] - a, np.inf)
            has_tpot = adm & (oo >= 2)
            with np.errstate(invalid="ignore"):
                tpot = np.where(has_tpot, (o["last_msg_s"] - o["first_msg_s"]) / np.maximum(oo - 1.0, 1.0), np.inf)
            am = adm & (idx >= warmup)
            tm = has_tpot & (idx >= warmup)
            mf = mean(ttft, am & (idx < warmup + quarter))
            ml = mean(ttft, am & (idx >= n - quarter))
            # (a closed loop's clients bound what is in the system: it is steady whatever its
            # TTFT does between the quarters, as lockstep waves form and break up)
            steady = closed or not (quarter > 0 and np.isfinite(mf) and np.isfinite(ml) and ml > 2.0 * mf)
            span = a[-1] - a[warmup]
            st = o["stats"]
            kv_fin = np.isfinite(kv)
            m = n - warmup
            n_adm = int(am.sum())
            row = [mean(ttft, am), mean(tpot, tm), mean(e2e, am),
                   st[0] / span if span > 0 else 0.0,
                   st[4] / st[5] if st[5] > 0 else 0.0,
                   st[3] / span if span > 0 else 0.0,
                   st[1] / span / kv if span > 0 and kv_fin else 0.0,
                   st[2] / span / kv if span > 0 and kv_fin else 0.0,
                   (m - n_adm) / m, float(n_adm), float(tm.sum()), float(steady), float(o["n_steps"])]
            w = slice(warmup, None)
            cnt_a, cnt_t = np.array([n_adm]), np.array([int(tm.sum())])
            for ql in (q[i], *more):
                qa = np.array([ql])
                row += [sim._sorted_quantiles(np.where(am, ttft, np.inf)[w][None, :], cnt_a, qa)[0],
                        sim._sorted_quantiles(np.where(tm, tpot, np.inf)[w][None, :], cnt_t, qa)[0],
                        sim._sorted_quantiles(np.where(am, e2e, np.inf)[w][None, :], cnt_a, qa)[0]]
            per[i, r] = row
            extra[i, r] = (o["preempted"][am].sum() / max(n_adm, 1), o["recomputed"][am].sum() / max(n_adm, 1),
                           (m - 1) / span if span > 0 else np.inf)
    out = sim._aggregate(per, reps, more)
    tq = sim.student_t975(reps - 1)
    for j, name in enumerate(("preempt", "recomputed", "rate_rps")[:3 if closed else 2]):
        x = extra[:, :, j]
        out[name] = x.mean(axis=1)
        out[name + "_hw"] = (tq * x.std(axis=1, ddof=1) / np.sqrt(reps)) if reps > 1 else np.full(s, np.inf)
    return out
