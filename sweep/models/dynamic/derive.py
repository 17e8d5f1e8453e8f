"""The derivation of one dynamic-batching point, step by step (`sweep explain`, the report).

`derivation(row, figures, options)` takes one evaluated point's columns (file units: ms,
requests/s, GB; `+inf` or None where unbounded), the catalog figures of its model and GPU
when known, and the grid's KV options, and returns the steps of docs/model.md with the
point's numbers substituted: service time, stability and B_min, the batch, the queue, the
response-time decomposition, the percentile, Little's law, KV memory and the action.

Every number is recomputed here in plain float arithmetic from the inputs where a closed
form exists (all of it for full batches), and taken from the engine's columns otherwise
(the windowed batch moments, whose closed forms go through the incomplete gamma function).
`tests/test_explain.py` checks that the recomputed numbers are the engine's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import Any

from sweep.models.base import Step, num

INF = math.inf
SECTION = {
    "service": "docs/model.md#1-service-time",
    "batching": "docs/model.md#2-dynamic-batching",
    "queue": "docs/model.md#3-queue-the-mg1-batch-proxy",
    "sizing": "docs/model.md#4-sizing-and-littles-law",
    "tail": "docs/model.md#5-tail-latency",
    "memory": "docs/model.md#6-kv-cache-memory",
    "decisions": "docs/model.md#7-decisions",
    "batcher": "docs/model.md#8-the-greedy-batcher-model",
    "simulator": "docs/model.md#9-the-simulator",
}


def _f(row: Mapping[str, Any], key: str, default: float = INF) -> float:
    v = row.get(key)
    return default if v is None else float(v)


def roofline_secant(row: Mapping[str, Any], figures: Mapping[str, float]) -> dict[str, float]:
    """A roofline point's service line (seconds): the refined roofline's step time at one
    request and at the point's batch (`sweep.models.shared.roofline.step_time`), and the secant
    through them, as `sweep.models.shared.roofline.service_line` draws it."""
    from sweep.models.shared import roofline as rl

    x = {**figures, "gpus_per_replica": _f(row, "gpus_per_replica", 1.0),
         "weight_bytes_per_param": _f(row, "weight_bytes_per_param", 2.0)}
    p = rl.replica_params(x, _f(row, "eta_bw"), _f(row, "eta_flops"))
    kv_tok = figures["kv_elems_per_token"] * _f(row, "kv_bytes_per_elem", 2.0)
    tokens, ctx = _f(row, "tokens_per_request", 1.0), _f(row, "mean_seq_len")
    hi = max(_f(row, "batch_size"), 2.0)
    t1, one = rl.step_time(rl.batch_work(1.0, tokens, ctx, kv_tok, figures["attn_width"], figures["n_layers"]), p)
    th, _ = rl.step_time(rl.batch_work(hi, tokens, ctx, kv_tok, figures["attn_width"], figures["n_layers"]), p)
    t1, th = float(t1), float(th)
    t_req = max((th - t1) / (hi - 1.0), 0.0)
    return {"hi": hi, "t1": t1, "th": th, "t_req": t_req, "t_fixed": max(t1 - t_req, 0.0),
            "overhead": float(one.t_overhead)}


def recompute(row: Mapping[str, Any]) -> dict[str, float]:
    """The point's numbers recomputed from its inputs (seconds inside, file units out).

    Full batches: everything in closed form. With a window: the batch moments come from the
    row (E[B], E[T_batch]); the rest follows."""
    lam = _f(row, "arrival_rps") / _f(row, "replicas", 1.0)
    b = _f(row, "batch_size")
    t_fixed, t_req = _f(row, "t_fixed_ms") * 1e-3, _f(row, "t_req_ms") * 1e-3
    t_svc = t_fixed + t_req * b
    cv2 = _f(row, "service_cv", 0.0) ** 2
    q = _f(row, "percentile", 0.99)
    full = math.isinf(_f(row, "batch_window_ms"))
    out: dict[str, float] = {"lam": lam, "t_svc_ms": t_svc * 1e3, "capacity_rps": b / t_svc}
    out["stable"] = float(lam * t_svc < b)
    for name, rho in (("b_min_stable", 1.0), ("b_min_rho_target", _f(row, "rho_target", 0.75))):
        out[name] = lam * t_fixed / (rho - lam * t_req) if rho > lam * t_req else INF
    if full:
        eb, etb = b, (b - 1.0) / (2.0 * lam)
        var_tb = (b - 1.0) * (b + 7.0) / (12.0 * lam * lam)
        es, es2, es3 = t_svc, t_svc**2 * (1.0 + cv2), t_svc**3 * (1.0 + cv2) ** 3
        e_svc = t_svc
        var_svc = cv2 * t_svc**2
        out.update(mean_batch=eb, e_batch_ms=etb * 1e3)
        lam_b = lam / eb
        rho = lam_b * es
        out["rho"] = rho
        if rho < 1.0:
            e_w = lam_b * es2 / (2.0 * (1.0 - rho))
            e_w2 = 2.0 * e_w**2 + lam_b * es3 / (3.0 * (1.0 - rho))
            var_w = max(e_w2 - e_w**2, 0.0)
            e_t = e_w + etb + e_svc
            sd = math.sqrt(var_w + var_tb + var_svc)
            out.update(e_wait_ms=e_w * 1e3, e_resp_ms=e_t * 1e3, sd_resp_ms=sd * 1e3,
                       p_gauss_ms=(e_t + NormalDist().inv_cdf(q) * sd) * 1e3, p_exp_ms=-math.log1p(-q) * e_t * 1e3)
        else:
            out.update(e_wait_ms=INF, e_resp_ms=INF, sd_resp_ms=INF, p_gauss_ms=INF, p_exp_ms=INF)
        out["e_svc_ms"] = e_svc * 1e3
    else:
        e_w, etb, e_svc = _f(row, "e_wait_ms") * 1e-3, _f(row, "e_batch_ms") * 1e-3, _f(row, "e_svc_ms") * 1e-3
        out["e_resp_ms"] = (e_w + etb + e_svc) * 1e3 if math.isfinite(e_w) else INF
        sd = _f(row, "sd_resp_ms") * 1e-3
        e_t = out["e_resp_ms"] * 1e-3
        out["p_gauss_ms"] = (e_t + NormalDist().inv_cdf(q) * sd) * 1e3 if math.isfinite(e_t) else INF
        out["p_exp_ms"] = -math.log1p(-q) * e_t * 1e3 if math.isfinite(e_t) else INF
    e_t = out["e_resp_ms"] * 1e-3
    out["little_l"] = lam * e_t
    out["in_service"] = lam * _f(row, "e_svc_ms") * 1e-3
    out["in_queue"] = out["little_l"] - out["in_service"] if math.isfinite(out["little_l"]) else INF
    kv = _f(row, "kv_gb_per_req")
    free = _f(row, "free_gb")
    out["b_mem_max"] = float(math.floor(free / kv)) if free >= 0 and kv > 0 else 0.0
    return out


def derivation(row: Mapping[str, Any], figures: Mapping[str, float] | None = None,
               options: Mapping[str, Any] | None = None, latency_model: str = "gaussian") -> list[Step]:
    figures = figures or {}
    options = options or {}
    r = recompute(row)
    lam = r["lam"]
    b = _f(row, "batch_size")
    window = _f(row, "batch_window_ms")
    t_fixed, t_req = _f(row, "t_fixed_ms"), _f(row, "t_req_ms")
    q = _f(row, "percentile", 0.99)
    steps: list[Step] = []

    # 1. the load and the service time
    lines = [("lambda = arrival_rps / replicas", f"{num(row.get('arrival_rps'))} / {num(row.get('replicas'))}",
              num(lam, "requests/s per replica"))]
    source = str(row.get("service_source", "given"))
    if source == "roofline" and figures:
        sec = roofline_secant(row, figures)
        lines += [
            ("T_step(1): one request's forward pass on the refined roofline (max(memory, compute) + "
             "collectives + overhead: a decode-only step's at one new token a request, a prompt-carrying "
             "step's at more; docs/roofline.md)",
             f"g = {num(row.get('gpus_per_replica'))}, eta_bw {_f(row, 'eta_bw'):g}, "
             f"eta_flops {_f(row, 'eta_flops'):g}, "
             f"{num(row.get('tokens_per_request'))} new tokens, {num(row.get('mean_seq_len'))} cached, "
             f"overhead {num(sec['overhead'] * 1e3)} ms",
             num(sec["t1"] * 1e3, "ms")),
            (f"T_step({num(sec['hi'])}): a pass of this point's batch", "", num(sec["th"] * 1e3, "ms")),
            ("t_req = (T_step(B) - T_step(1)) / (B - 1): the secant through both",
             f"({num(sec['th'] * 1e3)} - {num(sec['t1'] * 1e3)}) / ({num(sec['hi'])} - 1)",
             num(sec["t_req"] * 1e3, "ms")),
            ("T_fixed = T_step(1) - t_req", f"{num(sec['t1'] * 1e3)} - {num(sec['t_req'] * 1e3)}",
             num(sec["t_fixed"] * 1e3, "ms")),
        ]
    else:
        lines.append(("T_fixed, t_req",
                      f"{source} ({'roofline from the catalogs' if source == 'roofline' else 'the grid' if source == 'given' else 'a profile fit'})",  # noqa: E501
                      f"{num(t_fixed, 'ms')}, {num(t_req, 'ms')}"))
    lines += [("T_svc(B) = T_fixed + t_req B", f"{num(t_fixed)} + {num(t_req)} x {num(b)}", num(r["t_svc_ms"], "ms")),
              ("capacity = B / T_svc(B)", f"{num(b)} / {num(r['t_svc_ms'] * 1e-3)} s",
               num(r["capacity_rps"], "requests/s"))]
    steps.append(Step("Service time", SECTION["service"], tuple(lines)))

    # 2. stability and B_min
    rt = _f(row, "rho_target", 0.75)
    lines = [("stable: lambda < B / T_svc(B)", f"{num(lam)} < {num(r['capacity_rps'])}",
              "yes" if r["stable"] else "no: the batcher cannot keep up"),
             ("B_min(1) = lambda T_fixed / (1 - lambda t_req)",
              f"{num(lam)} x {num(t_fixed * 1e-3)} / (1 - {num(lam)} x {num(t_req * 1e-3)})",
              f"{num(r['b_min_stable'], 'requests')} -> "
              f"smallest stable integer batch {num(row.get('b_min_stable_int'))}"),
             (f"B_min(rho_target) = lambda T_fixed / (rho_target - lambda t_req), rho_target = {num(rt)}",
              f"{num(lam)} x {num(t_fixed * 1e-3)} / ({num(rt)} - {num(lam * t_req * 1e-3)})",
              f"{num(r['b_min_rho_target'], 'requests')} -> {num(row.get('b_min_rho_target_int'))}")]
    steps.append(Step("Stability and the smallest batch (B_min)", SECTION["sizing"], tuple(lines)))

    # 3. the batch
    if math.isinf(window):
        lines = [("full batches (no window): E[B] = B", "", num(b, "requests")),
                 ("E[T_batch] = (B - 1) / (2 lambda)", f"({num(b)} - 1) / (2 x {num(lam)})",
                  num(r["e_batch_ms"], "ms"))]
    else:
        mu = lam * window * 1e-3
        lines = [("mu = lambda T_max (followers expected in the window)", f"{num(lam)} x {num(window * 1e-3)} s",
                  num(mu)),
                 ("E[B] = sum_{n<k} (n+1) P(N=n) + B_max P(N>=k), k = B_max - 1",
                  "closed form through the incomplete gamma P(k, mu)", num(row.get("mean_batch"), "requests")),
                 ("E[T_batch] (request-weighted: timeouts and full batches)", "closed form through P(k, mu)",
                  num(row.get("e_batch_ms"), "ms"))]
    steps.append(Step("The batch", SECTION["batching"], tuple(lines)))

    # 4. the queue and the response time
    eb = _f(row, "mean_batch")
    rho = _f(row, "rho")
    lines = [("lambda_b = lambda / E[B]; rho = lambda_b E[S]", f"{num(lam)} / {num(eb)} x E[S]",
              f"rho = {num(rho)} "
              f"({'proxy valid' if row.get('proxy_ok') else 'rho >= 1: the proxy cannot bound the wait'})")]
    if math.isinf(window):
        lines.append(("E[W] = lambda_b E[S^2] / (2 (1 - rho)), E[S^2] = T_svc^2 (1 + cv^2)",
                      f"{num(lam / b)} x {num(r['t_svc_ms'] * 1e-3)}^2 x {num(1 + _f(row, 'service_cv', 0.0) ** 2)} "
                      f"/ (2 x (1 - {num(rho)}))",
                      num(row.get("e_wait_ms"), "ms")))
    else:
        lines.append(("E[W] = lambda_b E[S^2] / (2 (1 - rho)) (Pollaczek-Khinchine)",
                      "E[S^2] over the window's batch sizes", num(row.get("e_wait_ms"), "ms")))
    lines += [("E[T_svc] = T_fixed + t_req E[B^2] / E[B]", "request-weighted service time",
               num(row.get("e_svc_ms"), "ms")),
              ("E[T] = E[W] + E[T_batch] + E[T_svc]",
               f"{num(row.get('e_wait_ms'))} + {num(row.get('e_batch_ms'))} + {num(row.get('e_svc_ms'))}",
               num(r["e_resp_ms"], "ms"))]
    steps.append(Step("The queue and the response time (M/G/1 batch proxy)", SECTION["queue"], tuple(lines)))

    # 5. the percentile
    z = NormalDist().inv_cdf(q)
    lines = [("sigma_T = sqrt(Var W + Var T_batch + Var T_svc)", "", num(row.get("sd_resp_ms"), "ms")),
             (f"gaussian: E[T] + z_q sigma_T, z_q = {num(z, digits=5)}",
              f"{num(r['e_resp_ms'])} + {num(z, digits=5)} x {num(row.get('sd_resp_ms'))}",
              num(r["p_gauss_ms"], "ms")),
             (f"exponential: -ln(1 - q) E[T], -ln(1 - q) = {num(-math.log1p(-q), digits=5)}",
              f"{num(-math.log1p(-q), digits=5)} x {num(r['e_resp_ms'])}", num(r["p_exp_ms"], "ms"))]
    if latency_model == "batcher":
        lines.append(("batcher model: the greedy batcher's percentile (fixed point, KLB backlog wait)",
                      f"mean batch {num(row.get('batcher_mean_batch'))}, utilisation {num(row.get('batcher_rho'))}",
                      num(row.get("batcher_p_ms"), "ms")))
    if row.get("sim_p_ms") is not None or latency_model == "simulated":
        lines.append(("simulated percentile (mean of replications; 95% half-width)",
                      f"+- {num(row.get('sim_p_hw_ms'))} ms; steady: {'yes' if row.get('sim_steady') else 'no'}",
                      num(row.get("sim_p_ms"), "ms")))
    slo = _f(row, "slo_ms")
    lat = _f(row, "latency_ms")
    lines.append((f"checked against the SLO ({latency_model}): latency_ms <= slo_ms", f"{num(lat)} <= {num(slo)}",
                  "meets the SLO" if lat <= slo else "misses the SLO"))
    steps.append(Step(f"The P{100 * q:g} latency", SECTION["tail"], tuple(lines)))

    # 6. Little's law
    lines = [("L = lambda E[T]", f"{num(lam)} x {num(r['e_resp_ms'] * 1e-3)} s", num(r["little_l"], "requests")),
             ("in service = lambda E[T_svc]", f"{num(lam)} x {num(_f(row, 'e_svc_ms') * 1e-3)} s",
              num(r["in_service"], "requests")),
             ("waiting or accumulating = L - in service", "", num(r["in_queue"], "requests"))]
    steps.append(Step("Little's law", SECTION["sizing"], tuple(lines)))

    # 7. KV memory
    paged = options.get("kv_allocation") == "paged"
    s_alloc = _f(row, "seq_len")
    if paged:
        block = float(options.get("block_tokens", 16))
        s_alloc = math.ceil(_f(row, "mean_seq_len") / block) * block
    lines = []
    if figures:
        kv_tok = figures["kv_elems_per_token"] * _f(row, "kv_bytes_per_elem")
        lines.append(("KV bytes per token = n_layers x d_kv x kv_bytes_per_elem", "from the model catalog",
                      num(kv_tok, "B")))
        lines.append((f"KV per request = bytes per token x S_alloc ({'paged' if paged else 'contiguous'})",
                      f"{num(kv_tok)} x {num(s_alloc)}", num(row.get("kv_gb_per_req"), "GB")))
    else:
        lines.append((f"KV per request = bytes per token x S_alloc ({'paged' if paged else 'contiguous'})",
                      f"S_alloc = {num(s_alloc)} tokens", num(row.get("kv_gb_per_req"), "GB")))
    lines += [("weights = n_params x weight_bytes_per_param", "", num(row.get("weights_gb"), "GB")),
              ("free = g x hbm x (1 - reserve) - weights", "", num(row.get("free_gb"), "GB")),
              ("b_mem_max = floor(free / KV per request)",
               f"floor({num(row.get('free_gb'))} / {num(row.get('kv_gb_per_req'))})",
               num(row.get("b_mem_max"), "requests")),
              ("mem_ok: weights fit and B <= b_mem_max", f"{num(b)} <= {num(row.get('b_mem_max'))}",
               "yes" if row.get("mem_ok") else "no")]
    steps.append(Step("KV-cache memory", SECTION["memory"], tuple(lines)))

    # 8. the action
    rho_rules = {"batcher": row.get("batcher_rho"), "simulated": row.get("sim_utilization")}.get(latency_model, rho)
    rules = [("out_of_memory", "not mem_ok", not row.get("mem_ok")),
             ("unstable", "not stable", not row.get("stable")),
             ("slo_violated", f"latency_ms > slo_ms: {num(lat)} > {num(slo)}", not lat <= slo),
             ("near_saturation", f"rho > rho_max: {num(rho_rules)} > {num(row.get('rho_max'))}",
              rho_rules is not None and float(rho_rules) > _f(row, "rho_max")),
             ("overprovisioned", f"rho < rho_min: {num(rho_rules)} < {num(row.get('rho_min'))}",
              rho_rules is not None and float(rho_rules) < _f(row, "rho_min", 0.0)),
             ("ok", "otherwise", True)]
    lines = []
    for name, test, hit in rules:
        lines.append((name, test, "yes: the action" if hit else "no"))
        if hit:
            break
    steps.append(Step(f"The action: {row.get('action')}", SECTION["decisions"], tuple(lines)))
    return steps
