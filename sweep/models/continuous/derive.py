"""The derivation of one continuous-batching point, step by step (`sweep explain`, the report).

`derivation(row, figures, options)` takes one evaluated point's columns (file units: ms,
tokens, requests/s, GB; `+inf` or None where unbounded), the catalog figures of its model
and GPU when known, and the grid's KV options, and returns the steps of docs/continuous.md
with the point's numbers: the step time, the KV capacity and admission, the load against
the capacity, TTFT as slot wait + residual step + prefill, TPOT, E2E, throughput and cost,
the SLOs and the action, and the simulator where it ran.

Closed forms are recomputed here in plain float arithmetic (the step roofline, the KV
capacity and reservation, both capacity bounds, E2E, tokens/s, cost); the fixed point of
`sweep.models.continuous.analytic` is not re-derived by hand: its parts (slots, slot wait,
residual step, prefill phase, the decode step a sequence sees) are the kernel's own,
evaluated for this one point by `cb_point`. `tests/test_explain.py` checks that the
recomputed numbers are the engine's and that the parts add up to its TTFT.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

from sweep.models.base import Step, num
from sweep.models.continuous.slos import SLOS

INF = math.inf
DOC = "docs/continuous.md"
SECTION = {
    "step": f"{DOC}#step-times-given-fitted-or-from-the-roofline",
    "analytic": f"{DOC}#the-analytic-model-sweepmodelscb_analyticpy",
    "scheduler": f"{DOC}#the-scheduler-rule-by-rule-the-simulators-exact-semantics",
    "decisions": "docs/model.md#7-decisions",
    "simulator": f"{DOC}#the-simulator-sweepmodelscb_simpy",
}


def _f(row: Mapping[str, Any], key: str, default: float = INF) -> float:
    v = row.get(key)
    return default if v is None else float(v)


def closed_clients(row: Mapping[str, Any]) -> float | None:
    """The clients one replica serves in a closed loop (`workload = "closed"`), else None."""
    c = row.get("clients")
    if c is None or not math.isfinite(float(c)):
        return None
    return float(c) / _f(row, "replicas", 1.0)


@functools.lru_cache(maxsize=16)
def _jitted(fn: Any, prefill_first: bool, steps: int) -> Any:
    """``fn`` (`cb_point` or `cb_closed`) under one engine variant, compiled once per variant."""
    import jax

    return jax.jit(functools.partial(fn, prefill_first=prefill_first, steps=steps))


def model_parts(row: Mapping[str, Any], block_tokens: float, *, prefill_first: bool = False,
                steps: int = 1) -> dict[str, float]:
    """The analytic model's quantities for this point (`cb_point`, the kernel's own code, on
    one point; a closed loop's `cb_closed`), in seconds and tokens, under the grid's engine
    variant (``prefill_first``, ``steps``: `scheduler_policy`, `scheduler_steps`); {} where
    the point's memory leaves no KV capacity."""
    if not row.get("mem_ok", True) or _f(row, "kv_capacity_tokens", 0.0) <= 0:
        return {}

    from sweep.models.continuous.analytic import cb_point
    from sweep.models.continuous.closed import cb_closed

    args = (_f(row, "lambda_per_replica_rps"), _f(row, "prompt_tokens"), _f(row, "prompt_cv", 0.0),
            _f(row, "output_tokens"), _f(row, "output_cv", 0.0), _f(row, "batch_size"), _f(row, "max_batched_tokens"),
            _f(row, "kv_capacity_tokens"), block_tokens, _f(row, "t_step_fixed_ms") * 1e-3,
            _f(row, "t_token_ms") * 1e-3, _f(row, "t_ctx_ms") * 1e-3, _f(row, "service_cv", 0.0),
            _f(row, "percentile", 0.99))
    n = closed_clients(row)
    latency = _f(row, "request_latency_ms", 0.0) * 1e-3  # outside the steps: a closed loop's clients wait it out
    if n is None:
        out = _jitted(cb_point, prefill_first, int(steps))(*args)
    else:
        out = _jitted(cb_closed, prefill_first, int(steps))(n, _f(row, "think_time_s", 0.0) + latency, *args[1:],
                                                            rate=args[0])
    parts = {k: float(v) for k, v in out.items()}
    parts["request_latency"] = latency
    for k in ("ttft_mean", "ttft_p", "e2e_mean", "e2e_p"):  # the client's view, as the grid's columns
        parts[k] += latency
    return parts


def roofline_line(row: Mapping[str, Any], figures: Mapping[str, float], block_tokens: float = 1.0) -> dict[str, float]:
    """The step line of a roofline point (seconds): the running count r a sequence sees at
    the point's load (`sweep.models.shared.roofline.operating_running`), the refined roofline's
    decode step of r sequences and the step where one of them prefills its chunk beside r - 1
    decoders (`sweep.models.shared.roofline.step_time`), and the line through them, as
    `sweep.models.shared.roofline.operating_line` draws it. `block_tokens` is the grid's KV
    block (1 when contiguous)."""
    from sweep.models.shared import roofline as rl

    x = {**figures, "gpus_per_replica": _f(row, "gpus_per_replica", 1.0),
         "weight_bytes_per_param": _f(row, "weight_bytes_per_param", 2.0), "t_seq_us": _f(row, "t_seq_us", 0.0)}
    p = rl.replica_params(x, _f(row, "eta_bw"), _f(row, "eta_flops"))
    p1, o1, budget = _f(row, "prompt_tokens"), _f(row, "output_tokens"), _f(row, "max_batched_tokens")
    kv_tok = figures["kv_elems_per_token"] * _f(row, "kv_bytes_per_elem", 2.0)
    width, layers = figures["attn_width"], figures["n_layers"]
    kv_cap = _f(row, "kv_capacity_tokens", 1.0) if row.get("mem_ok", True) else 1.0
    lam, n = _f(row, "lambda_per_replica_rps"), closed_clients(row)
    if n is not None and not math.isfinite(lam):  # a closed loop's stand-in for no due rate, as the kernel's
        lam = 1e12
    running = float(rl.operating_running(p, lam, p1, o1, budget, _f(row, "batch_size"), kv_cap, block_tokens, kv_tok,
                                         width, layers, math.inf if n is None else n))
    ctx = p1 + o1 / 2.0
    chunk = max(min(p1, budget), 2.0)
    t_dec, dec = rl.step_time(rl.decode_work(running, ctx, kv_tok, width, layers), p)
    t_pre, pre = rl.step_time(rl.add_work(rl.decode_work(running - 1.0, ctx, kv_tok, width, layers),
                                          rl.prefill_work(1.0, chunk, kv_tok, width, layers)), p)
    t_ctx = kv_tok / (_f(row, "gpus_per_replica", 1.0) * figures["hbm_bw"] * _f(row, "eta_bw"))
    t_dec, t_pre = float(t_dec), float(t_pre)
    t_token = max((t_pre - t_dec - (chunk - ctx) * t_ctx) / (chunk - 1.0), 0.0)
    t_fixed = t_dec - t_token * running - running * ctx * t_ctx
    if t_fixed < 0.0:  # a compute-bound decode step: t_token keeps it exact
        t_token = (t_dec - running * ctx * t_ctx) / running
    return {"running": running, "ctx": ctx, "chunk": chunk, "kv_tok": kv_tok, "t_dec": t_dec, "t_pre": t_pre,
            "t_ctx": t_ctx, "t_token": t_token, "t_fixed": max(t_fixed, 0.0),
            "overhead_dec": float(dec.t_overhead), "overhead_pre": float(pre.t_overhead)}


def recompute(row: Mapping[str, Any], parts: Mapping[str, float], block_tokens: float,
              variant: bool = False) -> dict[str, float]:
    """The closed forms of this point recomputed from its inputs and the model's slots
    (file units: ms, tokens/s, USD). ``variant``: the grid's engine is `prefill_first` or
    multi-step, whose capacity and E2E are the kernel's own (docs/continuous.md, "Engine
    variants"), taken from ``parts``."""
    lam = _f(row, "arrival_rps") / _f(row, "replicas", 1.0)
    if closed_clients(row) is not None:  # a closed loop serves its throughput
        lam = parts["throughput_rps"] if parts else _f(row, "throughput_rps")
    p1, o1 = _f(row, "prompt_tokens"), _f(row, "output_tokens")
    pcv, ocv = _f(row, "prompt_cv", 0.0), _f(row, "output_cv", 0.0)
    g = _f(row, "gpus_per_replica", 1.0)
    tf, tt, tc = (max(_f(row, "t_step_fixed_ms") * 1e-3, 1e-12), _f(row, "t_token_ms") * 1e-3,
                  _f(row, "t_ctx_ms") * 1e-3)
    o2 = o1 * o1 * (1.0 + ocv * ocv)
    a1 = p1 + o1 - 1.0
    a2 = o1 * p1 + 0.5 * (o2 - o1)
    out = {"lam": lam, "a1": a1, "a2": a2, "reservation": math.ceil((p1 + o1) / block_tokens) * block_tokens,
           "p2": p1 * p1 * (1.0 + pcv * pcv)}
    c = parts.get("slots")
    if c is not None:
        budget = _f(row, "max_batched_tokens")
        dec_share = (o1 - 1.0) / o1
        b_sat = max((budget if math.isfinite(budget) else 1e300) - c * dec_share, 1.0)
        e_d = o1 - 1.0 + max(1.0, p1 / b_sat)
        cap_steps = 1.0 / (tf * e_d / c + tt * a1 + tc * a2)
        t_sat = tf + tt * min(budget, c * dec_share + p1 * c / e_d) + tc * c * a2 / e_d
        cap_budget = b_sat / (p1 * t_sat) if math.isfinite(budget) else INF
        out.update(e_d=e_d, b_sat=b_sat, capacity_steps_rps=cap_steps, capacity_budget_rps=cap_budget,
                   capacity_rps=min(cap_steps, cap_budget))
        if variant:
            out.update({k: parts[k] for k in ("capacity_steps_rps", "capacity_budget_rps", "capacity_rps")})
        out["rho"] = lam / out["capacity_rps"]
        out["tok_s_per_gpu"] = out["capacity_rps"] * o1 / g
    # the analytic model's TTFT and TPOT (the row's own, unless the simulator decided)
    ttft = parts["ttft_mean"] * 1e3 if parts else _f(row, "ttft_mean_ms")
    tpot = parts["tpot_mean"] * 1e3 if parts else _f(row, "tpot_mean_ms")
    out["e2e_mean_ms"] = ttft + (o1 - 1.0) * tpot
    if variant:  # windows: E2E is TTFT plus the span of the request's messages
        out["e2e_mean_ms"] = parts["e2e_mean"] * 1e3 if parts else _f(row, "e2e_mean_ms")
    out["tok_s_per_user"] = 1e3 / tpot if math.isfinite(tpot) and tpot > 0 else INF  # NULL: no steady state
    out["output_tok_s"] = lam * o1
    cost_h = _f(row, "cost_usd_per_hour")
    out["cost_usd_per_mtok"] = (cost_h / (lam * o1 * _f(row, "replicas", 1.0)) / 3600.0 * 1e6 if row.get("stable")
                                else INF)
    return out


def derivation(row: Mapping[str, Any], figures: Mapping[str, float] | None = None,
               options: Mapping[str, Any] | None = None) -> list[Step]:
    """docs/continuous.md's steps with this point's numbers (see the module docstring)."""
    options = options or {}
    paged = options.get("kv_allocation", "contiguous") == "paged"
    block = float(options.get("block_tokens", 16)) if paged else 1.0
    reserve = float(options.get("reserve_fraction", 0.0))
    policy, k_steps = str(options.get("scheduler_policy", "chunked")), int(options.get("scheduler_steps", 1))
    variant = policy == "prefill_first" or k_steps > 1
    what = f"scheduler_policy = {policy}" + (f", scheduler_steps = {k_steps}" if k_steps > 1 else "")
    parts = model_parts(row, block, prefill_first=policy == "prefill_first", steps=k_steps)
    r = recompute(row, parts, block, variant)
    g = _f(row, "gpus_per_replica", 1.0)
    p1, o1, n_cap = _f(row, "prompt_tokens"), _f(row, "output_tokens"), _f(row, "batch_size")
    budget = _f(row, "max_batched_tokens")
    tf, tt, tc = _f(row, "t_step_fixed_ms"), _f(row, "t_token_ms"), _f(row, "t_ctx_ms")
    steps: list[Step] = []
    n_clients = closed_clients(row)
    if n_clients is not None and parts:
        # 0. the closed loop (mean value analysis over the open model)
        think, due = _f(row, "think_time_s", 0.0), _f(row, "lambda_per_replica_rps")
        lines = [("n, the clients one replica serves = clients / replicas",
                  f"{num(row.get('clients'))} / {num(row.get('replicas'))}", num(n_clients, "clients"))]
        if math.isfinite(due):
            lines.append(("the rate requests become due = arrival_rps / replicas",
                          f"{num(row.get('arrival_rps'))} / {num(row.get('replicas'))}", num(due, "requests/s")))
        lines += [
            ("X solves X (E2E(X (n - 1) / n) + Z) = n (the response-time law; E2E a request's that finds a "
             "slot, with the wait for a step) by bisection, at most the capacity" +
             (" and the due rate" if math.isfinite(due) else ""),
             f"n = {num(n_clients)}, Z = {num(think)} s", num(parts["throughput_rps"], "requests/s")),
            ("the rate the engine sees (arrival theorem): min(due, X (n - 1) / n)",
             f"{num(parts['throughput_rps'])} x ({num(n_clients)} - 1) / {num(n_clients)}",
             num(parts["lam_seen"], "requests/s")),
            ("saturated: more clients than the engine serves at once, the rest of the cycle a wait for a slot, "
             "n / X - Z - E2E",
             f"{num(n_clients)} / {num(parts['throughput_rps'])} - {num(think)} - "
             f"{num(parts['e2e_mean'] - parts['ttft_slot_wait'])} s",
             num(parts["ttft_slot_wait"] * 1e3, "ms") if parts["saturated"] else "no"),
        ]
        steps.append(Step("Closed loop", f"{DOC}#closed-loops", tuple(lines)))

    # 1. the step time
    lines = []
    source = str(row.get("service_source", "given"))
    if source == "roofline" and figures:
        rf = roofline_line(row, figures, block)
        lines += [
            ("r, the running sequences a sequence sees at this load (itself included): 1 + A, A from the flow "
             "balance A = min(c, lambda E[D] S(A)) on the refined step S (docs/roofline.md)",
             (f"a closed loop of {num(closed_clients(row))} clients (at most that many), cap {num(n_cap)}"
              if closed_clients(row) is not None else
              f"lambda {num(_f(row, 'lambda_per_replica_rps'))} requests/s, cap {num(n_cap)}"),
             num(rf["running"], "sequences")),
            ("their decode step (r tokens, P + O/2 cached each) on the refined roofline "
             "(max(memory, compute) + collectives + a decode-only step's overhead; docs/roofline.md)",
             f"g = {g:g}, eta_bw {_f(row, 'eta_bw'):g}, eta_flops {_f(row, 'eta_flops'):g}, "
             f"context {num(rf['ctx'])} tokens, overhead {num(rf['overhead_dec'] * 1e3)} ms",
             num(rf["t_dec"] * 1e3, "ms")),
            ("the step where one of them prefills: r - 1 decode tokens and a chunk of min(P, M) prompt tokens "
             "(a prompt-carrying step's overhead)",
             f"chunk = {num(rf['chunk'])} tokens, overhead {num(rf['overhead_pre'] * 1e3)} ms",
             num(rf["t_pre"] * 1e3, "ms")),
            ("t_ctx = KV bytes per token / (g HBM_bw eta_bw): each cached token read",
             f"{num(rf['kv_tok'])} bytes / ({g:g} x {num(figures['hbm_bw'] / 1e12)} TB/s x {_f(row, 'eta_bw'):g})",
             num(rf["t_ctx"] * 1e3, "ms")),
            ("t_token = (T_prefill - T_decode - (chunk - context) t_ctx) / (chunk - 1): the line through both steps",
             f"({num(rf['t_pre'] * 1e3)} - {num(rf['t_dec'] * 1e3)} - ({num(rf['chunk'])} - {num(rf['ctx'])}) x "
             f"{num(rf['t_ctx'] * 1e3)}) / ({num(rf['chunk'])} - 1)", num(rf["t_token"] * 1e3, "ms")),
            ("t_fixed = T_decode - r t_token - r context t_ctx",
             f"{num(rf['t_dec'] * 1e3)} - {num(rf['running'])} x {num(rf['t_token'] * 1e3)} - {num(rf['running'])} x "
             f"{num(rf['ctx'])} x {num(rf['t_ctx'] * 1e3)}",
             num(rf["t_fixed"] * 1e3, "ms")),
        ]
    else:
        lines.append((f"t_fixed, t_token, t_ctx (service_source = {source})", f"{num(tf)} ms, {num(tt)} ms per token, "
                      f"{num(tc)} ms per cached token", source))
    alone = tf + tt + tc * (p1 + o1 / 2)
    lines += [
        ("T_step = t_fixed + t_token n_tok + t_ctx n_ctx", "a decode step of one sequence alone, its mean "
         f"context P + O/2: {num(tf)} + {num(tt)} x 1 + {num(tc)} x ({num(p1)} + {num(o1)}/2)", num(alone, "ms")),
        ("mean step time at this load (flow balance: every request brings P + O - 1 tokens and "
         "O P + (E[O^2] - O)/2 token-steps of cache)", f"a1 = {num(r['a1'])} tokens, a2 = {num(r['a2'])} token-steps",
         num(row.get("step_mean_ms"), "ms")),
    ]
    steps.append(Step("Step time", SECTION["step"], tuple(lines)))

    # 2. KV capacity and admission
    lines = []
    if figures:
        wbytes = figures["n_params"] * _f(row, "weight_bytes_per_param", 2.0)
        free = g * figures["hbm_bytes"] * (1.0 - reserve) - wbytes
        kv_tok = figures["kv_elems_per_token"] * _f(row, "kv_bytes_per_elem", 2.0)
        lines += [
            ("free HBM = g HBM (1 - reserve) - weights",
             f"{g:g} x {num(figures['hbm_bytes'] / 1e9)} GB x (1 - {reserve:g}) - {num(wbytes / 1e9)} GB",
             num(free / 1e9, "GB")),
            ("KV bytes per token = KV elements per token x bytes per element",
             f"{num(figures['kv_elems_per_token'])} x {_f(row, 'kv_bytes_per_elem', 2.0):g}", num(kv_tok, "bytes")),
            ("C = floor(free / KV bytes per token)" + (f", in whole blocks of {block:g}" if paged else ""),
             f"floor({num(max(free, 0.0) / 1e9)} GB / {num(kv_tok)} bytes)",
             num(row.get("kv_capacity_tokens"), "tokens")),
        ]
    else:
        lines.append(("C, the KV capacity of one replica (free HBM / KV bytes per token)",
                      f"weights {num(row.get('weights_gb'))} GB, free {num(row.get('free_gb'))} GB",
                      num(row.get("kv_capacity_tokens"), "tokens")))
    lines.append(("a request reserves r = ceil((P + O) / block) block tokens at admission (no preemption)",
                  f"ceil(({num(p1)} + {num(o1)}) / {block:g}) x {block:g}", num(r["reservation"], "tokens")))
    lines.append(("mem_ok: the weights fit and a mean request's reservation fits in C",
                  f"free {num(row.get('free_gb'))} GB, "
                  f"r = {num(r['reservation'])} <= C = {num(row.get('kv_capacity_tokens'))}",
                  "yes" if row.get("mem_ok") else "no: out_of_memory"))
    if parts:
        lines.append(("sequences that can run: c = min(N, reservations that fit in C)",
                      f"min({num(n_cap)}, C / mean reservation (less half a large one at the head))",
                      num(parts["slots"], "sequences")))
    steps.append(Step("KV capacity and admission", SECTION["scheduler"], tuple(lines)))

    # 3. load against capacity
    lam = r["lam"]
    if n_clients is not None:
        lines = [("lambda = X, the closed loop's throughput (above)", "", num(lam, "requests/s"))]
    else:
        lines = [("lambda = arrival_rps / replicas", f"{num(row.get('arrival_rps'))} / {num(row.get('replicas'))}",
                  num(lam, "requests/s"))]
    if parts and variant:  # the variant's own capacity (its prompt steps, its windows' slot holds)
        lines += [
            (f"capacity (steps) under {what}: the slots' steps, with the variant's prompt steps and windows "
             "(docs/continuous.md, Engine variants)", f"c = {num(parts['slots'])} slots",
             num(r["capacity_steps_rps"], "requests/s")),
            ("capacity (token budget)", "no budget bound" if not math.isfinite(r["capacity_budget_rps"]) else
             "a decision's prompts must fit M beside the decoders", num(r["capacity_budget_rps"], "requests/s")),
            ("capacity_rps = the smaller; rho = lambda / capacity_rps",
             f"{num(lam)} / {num(r['capacity_rps'])}", f"rho = {num(r['rho'])}"),
        ]
    elif parts:
        lines += [
            ("capacity (steps): 1 / (t_fixed E[D] / c + t_token a1 + t_ctx a2), E[D] = O - 1 + prefill steps",
             f"1 / ({num(tf)} ms x {num(r['e_d'])} / {num(parts['slots'])} + {num(tt)} ms x {num(r['a1'])} + "
             f"{num(tc)} ms x {num(r['a2'])})", num(r["capacity_steps_rps"], "requests/s")),
            ("capacity (token budget): prompts must fit M - decoders per step",
             "no budget (M = inf)" if not math.isfinite(budget) else
             f"({num(budget)} - decoders) / (P x T_step at saturation)", num(r["capacity_budget_rps"], "requests/s")),
            ("capacity_rps = the smaller; rho = lambda / capacity_rps",
             f"{num(lam)} / {num(r['capacity_rps'])}", f"rho = {num(r['rho'])}"),
        ]
    lines.append(("stable: rho < 1 (the load is sustainable at the cap and the KV capacity)",
                  f"rho = {num(row.get('rho'))}", "yes" if row.get("stable") else "no: latencies unbounded"))
    steps.append(Step("Load against capacity", SECTION["analytic"], tuple(lines)))

    if parts and parts["stable"]:
        # 4. TTFT (the analytic model's; the simulator's, where it decided, in its own step)
        w, res, pf = parts["ttft_slot_wait"] * 1e3, parts["ttft_residual"] * 1e3, parts["ttft_prefill"] * 1e3
        ttft_a, tpot_a = parts["ttft_mean"] * 1e3, parts["tpot_mean"] * 1e3
        latency_ms = parts["request_latency"] * 1e3  # the server's fixed latency per request, outside the steps
        if n_clients is None:
            slot = ("W_slot: waiting for a sequence slot (M/G/c, Allen-Cunneen)",
                    f"P(all {num(parts['slots'])} slots busy) = {num(parts['p_wait'])}", num(w, "ms"))
            step = ("residual of the step in progress (u E[T^2] / (2 E[T]))", "length-biased step time",
                    num(res, "ms"))
        else:  # the closed loop's: its slot wait from the law, its wait for the next step
            res = ttft_a - latency_ms - w - pf
            slot = ("W_slot: the closed loop's wait for a slot (above; 0 unless saturated)", "", num(w, "ms"))
            step = ("the wait for a step of a request sent Z after a step's end (a whole step at Z = 0, a random "
                    "arrival's length-biased residual as Z grows)", "the step time, the busy share", num(res, "ms"))
        windows: tuple[tuple[str, str, str], ...] = ()
        if k_steps > 1 and n_clients is None:  # docs/continuous.md, "Engine variants": what the windows add
            # (a closed loop's residual line above already holds everything beyond W_slot and prefill)
            step = (f"residual of the window in progress ({k_steps} steps a decision"
                    + (", or of a prompt step of a chain)" if policy == "prefill_first" else ")"),
                    "length-biased window", num(res, "ms"))
            extra = ttft_a - latency_ms - w - res - pf
            windows = ((("the prompts gathered meanwhile, which the next prompt step carries"
                         if policy == "prefill_first" else
                         "the prompts the window gathered (its decision step carries them), a window per later "
                         "chunk, and the first message's wait for its window's end"),
                        f"scheduler_steps = {k_steps}", num(extra, "ms")),)
        steps.append(Step("Time to first token", SECTION["analytic"], (
            slot,
            step,
            ("prefill phase: the own prompt and the prompts that arrived during the previous step"
             + ("" if not math.isfinite(budget) else ", chunked by the token budget")
             + ("; prompts take steps of their own (prefill_first)" if policy == "prefill_first" else ""),
             f"P = {num(p1)} tokens at {num(tt)} + {num(tc)} ms each, plus t_fixed", num(pf, "ms")),
            *windows,
            *((("the server's fixed latency per request outside the steps (HTTP, tokenization, streaming)",
                "request_latency_ms", num(latency_ms, "ms")),) if latency_ms > 0 else ()),
            ("TTFT = W_slot + residual + prefill" + (" + windows" if windows else "")
             + (" + request latency" if latency_ms > 0 else ""),
             " + ".join(num(x) for x in (w, res, pf, *([extra] if windows else []),
                                         *([latency_ms] if latency_ms > 0 else []))),
             num(ttft_a, "ms")),
            (f"TTFT at q = {_f(row, 'percentile', 0.99):g}: the mean plus the q-quantile excesses of its parts in "
             "quadrature", "prompt length, step in progress, slot wait", num(parts["ttft_p"] * 1e3, "ms")),
        )))
        # 5. TPOT and E2E
        steps.append(Step("Time per output token and end to end", SECTION["analytic"], (
            ("TPOT = T_d, the decode step a running sequence sees (its token, the other decoders', the prompts "
             "prefilled meanwhile, their cache)" + ("" if k_steps == 1 else
                                                    f", times the steps from its first message to its last "
                                                    f"over O - 1 (windows of {k_steps})"),
             f"{num(parts['mean_running'])} sequences running on average", num(tpot_a, "ms")),
            ("tok_s_per_user = 1000 / TPOT", f"1000 / {num(tpot_a)}", num(1e3 / tpot_a, "tokens/s")),
            (f"TPOT at q = {_f(row, 'percentile', 0.99):g} (a gamma law over the request's O - 1 steps)", "",
             num(parts["tpot_p"] * 1e3, "ms")),
            ("E2E = TTFT + (O - 1) TPOT", f"{num(ttft_a)} + ({num(o1)} - 1) x {num(tpot_a)}",
             num(r["e2e_mean_ms"], "ms")) if k_steps == 1 else
            (f"E2E = TTFT + the span of its messages (windows of {k_steps} steps: TPOT is that span over O - 1, "
             "averaged over the output's law)", f"{num(ttft_a)} + ...", num(r["e2e_mean_ms"], "ms")),
            (f"E2E at q = {_f(row, 'percentile', 0.99):g}", "output length, TTFT and TPOT excesses in quadrature",
             num(parts["e2e_p"] * 1e3, "ms")),
        )))
    # 6. throughput and cost
    lines = [("output tokens/s of a replica = lambda O (stable) or capacity_rps O (saturated)",
              f"{num(lam)} x {num(o1)}" if row.get("stable") else f"{num(row.get('capacity_rps'))} x {num(o1)}",
              num(row.get("output_tok_s"), "tokens/s")),
             ("tok_s_per_gpu = capacity_rps O / g (what the cap and budget sustain)",
              f"{num(row.get('capacity_rps'))} x {num(o1)} / {g:g}", num(row.get("tok_s_per_gpu"), "tokens/s")),
             ("cost_usd_per_hour = replicas g usd_per_gpu_hour",
              f"{num(row.get('replicas'))} x {g:g} x {num(figures['usd_per_gpu_hour']) if figures else '...'}",
              num(row.get("cost_usd_per_hour"), "USD/h")),
             ("cost_usd_per_mtok = cost per hour / (output tokens/s x replicas x 3600) x 1e6",
              f"{num(row.get('cost_usd_per_hour'))} / ({num(row.get('output_tok_s'))} x "
              f"{num(row.get('replicas'))} x 3600) x 1e6"
              if row.get("stable") else "unbounded: the engine cannot keep up",
              num(row.get("cost_usd_per_mtok"), "USD"))]
    steps.append(Step("Throughput and cost", SECTION["analytic"], tuple(lines)))

    # 7. SLOs and action
    lines = []
    checked = ("simulated" if row.get("sim_steady") is not None and "sim_ttft_p_ms" in row and _sim_decides(row)
               else "analytic")
    for name, lat, slo in SLOS:
        limit = _f(row, slo)
        if not math.isfinite(limit):
            continue
        value = _f(row, lat)
        lines.append((f"{name} at q <= {slo} ({checked})", f"{num(value)} <= {num(limit)}",
                      "meets it" if value <= limit else "misses it"))
    rho = _f(row, "rho")
    rules = (("out_of_memory", "mem_ok false", not row.get("mem_ok")),
             ("unstable", "stable false", not row.get("stable")),
             ("slo_violated", "an SLO missed", not row.get("slo_ok")),
             ("near_saturation", f"rho {num(rho)} > rho_max {num(row.get('rho_max'))}", rho > _f(row, "rho_max", 0.85)),
             ("overprovisioned", f"rho {num(rho)} < rho_min {num(row.get('rho_min'))}", rho < _f(row, "rho_min", 0.5)))
    first = next(((a, why) for a, why, hit in rules if hit), ("ok", "no rule matched"))
    lines.append(("the operating rules, first match wins: out_of_memory, unstable, slo_violated, near_saturation, "
                  "overprovisioned, ok", first[1], f"The action: {row.get('action', first[0])}"))
    steps.append(Step("SLOs and the action", SECTION["decisions"], tuple(lines)))

    if "sim_ttft_mean_ms" in row:
        steps.append(Step("The simulator", SECTION["simulator"], (
            ("steady: no replication's last-quarter mean TTFT above twice its first quarter's", "",
             "yes" if row.get("sim_steady") else "no: simulated latencies unbounded"),
            ("simulated TTFT mean / at q", "",
             f"{num(row.get('sim_ttft_mean_ms'))} / {num(row.get('sim_ttft_p_ms'))} ms"),
            ("simulated TPOT mean / at q", "",
             f"{num(row.get('sim_tpot_mean_ms'))} / {num(row.get('sim_tpot_p_ms'))} ms"),
            ("analytic against simulated mean: ttft_rel_err, tpot_rel_err", "",
             f"{num(row.get('ttft_rel_err'))}, {num(row.get('tpot_rel_err'))}"),
        )))
    return steps


def _sim_decides(row: Mapping[str, Any]) -> bool:
    """Whether this point's latencies are the simulator's (latency_model = simulated)."""
    a, b = row.get("ttft_p_ms"), row.get("sim_ttft_p_ms")
    return a is not None and b is not None and float(a) == float(b)
