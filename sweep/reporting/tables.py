"""The report's HTML pieces other than figures: header, controls, tables, sections.

Numbers are formatted as the terminal summary formats them (`sweep.report`): latencies in
ms with one decimal, rho in per cent, unbounded values (+inf or NULL) as `inf`, and an
answer that does not exist (batch 0 or NULL) as `none`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from sweep.reporting.data import Run, Sample, no_answer, row_keys, unbounded
from sweep.reporting.figures import (
    ACTION_COLOURS,
    ACTION_LABELS,
    Figure,
    fmt,
)
from sweep.reporting.html import checkboxes, esc, facts

#: Rows of a seed table before it is thinned to powers of two and the answers.
SEED_TABLE_ROWS = 80
#: Rows of the replica-plan table.
PLAN_TABLE_ROWS = 60

_AXIS_LABEL = {
    "gpus_per_replica": lambda v: f"{v:g} GPU/replica",
    "arrival_rps": lambda v: f"{v:,.4g} req/s",
    "replicas": lambda v: f"{v:g} replica" + ("s" if v != 1 else ""),
    "seq_len": lambda v: f"S_max {v:g}",
    "mean_seq_len": lambda v: f"S_mean {v:g}",
    "slo_ms": lambda v: f"SLO {v:g} ms",
}


def scenario_labels(rows: list[dict[str, Any]], varying: list[str]) -> list[str]:
    """'llama-3.1-8b · h100-sxm · 2 GPU/replica · 100 req/s · 4 replicas' (the axes that vary)."""
    out = []
    for r in rows:
        parts = [str(r.get("model")), str(r.get("gpu"))]
        for a in varying:
            if a in ("model", "gpu") or a not in r:
                continue
            v = r[a]
            label = _AXIS_LABEL.get(a)
            parts.append(label(float(v)) if label and isinstance(v, float) else f"{a} {v:g}" if isinstance(v, float)
                         else f"{a} {v}")
        for a in ("arrival_rps", "replicas"):
            if a not in varying and a in r and isinstance(r[a], float) and math.isfinite(r[a]):
                parts.append(_AXIS_LABEL[a](r[a]))
        out.append(" · ".join(parts))
    return out


def _answer_text(r: dict[str, Any], prefix: str) -> str:
    b = r.get(prefix if prefix != "replicas_min" else "replicas_min_batch")
    if no_answer(b):
        return "none"
    w = r.get(f"{prefix}_window_ms")
    lat = r.get(f"{prefix}_latency_ms")
    cap = r.get(f"{prefix}_capacity_rps")
    rho = r.get(f"{prefix}_rho")
    win = "" if w is None else (", full batches" if unbounded(w) else f", window {w:g} ms")
    return (f"B = {b:g}{win}: {fmt(lat)} ms, {fmt(cap)} req/s per replica, rho "
            f"{fmt(100 * rho if rho is not None and not unbounded(rho) else rho)}%")


def answers_html(r: dict[str, Any]) -> str:
    q = r.get("percentile", 0.99)
    items = [
        ("largest batch under the SLO (b_max_slo)", _answer_text(r, "b_max_slo")),
        ("SLO optimum (most capacity under the SLO)", _answer_text(r, "slo_opt")),
        ("knee of the frontier", _answer_text(r, "knee")),
        ("lowest mean latency (b_latency_opt)", _answer_text(r, "b_latency_opt")),
    ]
    rm = r.get("replicas_min")
    if rm is not None:
        cost = r.get("replicas_min_cost_usd_per_hour")
        items.append(("fewest replicas meeting the SLO (replicas_min)",
                      "none in the grid's replicas axis" if unbounded(rm) else
                      f"{rm:g} replica{'s' if rm != 1 else ''}, {_answer_text(r, 'replicas_min')}, "
                      f"${fmt(cost, 2)}/h"))
    reason = r.get("reason")
    slo = r.get("slo_ms")
    head = (f"SLO: P{100 * q:g} <= {fmt(slo, 0)} ms; "
            f"{int(r.get('n_feasible', 0)) if not unbounded(r.get('n_feasible', 0)) else 0:,} of "
            f"{int(r.get('n_points', 0)) if not unbounded(r.get('n_points', 0)) else 0:,} points feasible; "
            f"reason: {reason}; cost {fmt(r.get('cost_usd_per_hour'), 2)} USD/h at these replicas")
    return (f"<p class='scenario-head'>{esc(head)}</p><div class='answers'>"
            + "".join(f"<div><b>{esc(k)}</b>{esc(v)}</div>" for k, v in items) + "</div>")


def _cb_answer_text(r: dict[str, Any], prefix: str) -> str:
    b = r.get(prefix if prefix != "replicas_min" else "replicas_min_batch")
    if no_answer(b):
        return "none"
    m = r.get(f"{prefix}_max_batched_tokens")
    budget = "" if m is None else (", no token budget" if unbounded(m) else f", budget {m:g} tokens")
    rho = r.get(f"{prefix}_rho")
    return (f"N = {b:g}{budget}: TTFT {fmt(r.get(f'{prefix}_ttft_p_ms'))} ms, TPOT {fmt(r.get(f'{prefix}_tpot_p_ms'), 2)} ms, "
            f"{fmt(r.get(f'{prefix}_tok_s_per_gpu'))} tok/s per GPU, {fmt(r.get(f'{prefix}_tok_s_per_user'))} tok/s per "
            f"user, rho {fmt(100 * rho if rho is not None and not unbounded(rho) else rho)}%")


def cb_answers_html(r: dict[str, Any]) -> str:
    """Continuous serving: the row's answers (caps, budgets, TTFT/TPOT against the SLOs)."""
    q = r.get("percentile", 0.99)
    items = [
        ("largest cap meeting every SLO (b_max_slo)", _cb_answer_text(r, "b_max_slo")),
        ("SLO optimum (most tok/s per GPU meeting every SLO)", _cb_answer_text(r, "slo_opt")),
        ("knee of the frontier", _cb_answer_text(r, "knee")),
        ("lowest mean E2E (b_latency_opt)", _cb_answer_text(r, "b_latency_opt")),
    ]
    rm = r.get("replicas_min")
    if rm is not None:
        cost = r.get("replicas_min_cost_usd_per_hour")
        items.append(("fewest replicas meeting every SLO (replicas_min)",
                      "none in the grid's replicas axis" if unbounded(rm) else
                      f"{rm:g} replica{'s' if rm != 1 else ''}, {_cb_answer_text(r, 'replicas_min')}, "
                      f"${fmt(cost, 2)}/h"))
    slos = [f"{name} P{100 * q:g} <= {fmt(r.get(key), 0)} ms" for name, key in
            (("TTFT", "ttft_slo_ms"), ("TPOT", "tpot_slo_ms"), ("E2E", "slo_ms"))
            if r.get(key) is not None and not unbounded(r.get(key))]
    head = (f"SLOs: {', '.join(slos) or 'none'}; "
            f"{int(r.get('n_feasible', 0)) if not unbounded(r.get('n_feasible', 0)) else 0:,} of "
            f"{int(r.get('n_points', 0)) if not unbounded(r.get('n_points', 0)) else 0:,} points feasible; "
            f"reason: {r.get('reason')}; cost {fmt(r.get('cost_usd_per_hour'), 2)} USD/h at these replicas")
    return (f"<p class='scenario-head'>{esc(head)}</p><div class='answers'>"
            + "".join(f"<div><b>{esc(k)}</b>{esc(v)}</div>" for k, v in items) + "</div>")


_CB_COLUMNS = (
    # (header, column, digits)
    ("N", "batch_size", 0),
    ("running", "mean_running", 1),
    ("step", "step_mean_ms", 2),
    ("TTFT {q}", "ttft_p_ms", 1),
    ("TPOT {q}", "tpot_p_ms", 2),
    ("E2E {q}", "e2e_p_ms", 0),
    ("sim TTFT {q}", "sim_ttft_p_ms", 1),
    ("sim TPOT {q}", "sim_tpot_p_ms", 2),
    ("tok/s/GPU", "tok_s_per_gpu", 0),
    ("tok/s/user", "tok_s_per_user", 1),
    ("rho", "rho", None),
    ("KV util", "kv_util", None),
)


def cb_table(r: dict[str, Any], pts: dict[str, np.ndarray], source: str) -> str:
    """Continuous serving: every point of one scenario row (the terminal summary's columns)."""
    q = r.get("percentile", 0.99)
    qlabel = f"P{100 * q:g}" if not unbounded(q) else "P(q)"
    budget = pts.get("max_batched_tokens", np.full(len(pts["batch_size"]), np.inf))
    order = np.lexsort([pts["batch_size"], np.where(np.isfinite(budget), budget, np.inf)])
    p = {k: v[order] for k, v in pts.items()}
    budget = budget[order]
    marked = {int(r[f"{k}_point_id"]) for k in ("b_max_slo", "slo_opt", "knee")
              if r.get(f"{k}_point_id") is not None and not unbounded(r[f"{k}_point_id"])}
    cols = [(h.format(q=qlabel), c, d) for h, c, d in _CB_COLUMNS if c in p]
    head = "<th class='l'>budget M</th>" + "".join(f"<th>{esc(h)}</th>" for h, _, _ in cols)
    head += "<th class='l'>action</th>" if "action" in p else ""
    body = []
    for i in range(min(len(p["batch_size"]), SEED_TABLE_ROWS)):
        cells = [f"<td class='l'>{'inf' if unbounded(budget[i]) else f'{budget[i]:g}'}</td>"]
        for _, c, d in cols:
            v = p[c][i]
            if d is None:
                txt = fmt(100 * v if not unbounded(v) else v) + "%"
                if c == "rho" and "stable" in p and not p["stable"][i]:
                    txt += " (unstable)"
            elif d == 0:
                txt = fmt(v, 0) if unbounded(v) else f"{v:,.0f}"
            else:
                txt = fmt(v, d)
            cells.append(f"<td>{esc(txt)}</td>")
        if "action" in p:
            a = str(p["action"][i])
            cells.append(f"<td class='l'><span class='chip' style='background:{ACTION_COLOURS.get(a, '#666')}'>"
                         f"{esc(ACTION_LABELS.get(a, a))}</span></td>")
        pid = p.get("point_id")
        cls = " class='marked'" if pid is not None and int(pid[i]) in marked else ""
        body.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    line = (f"lambda {fmt(r.get('lambda_per_replica_rps'), 3)} req/s per replica; prompts {fmt(r.get('prompt_tokens'), 0)} "
            f"and outputs {fmt(r.get('output_tokens'), 0)} tokens on average; step t_fixed {fmt(r.get('t_step_fixed_ms'), 3)} ms, "
            f"t_token {fmt(r.get('t_token_ms'), 4)} ms, t_ctx {fmt(r.get('t_ctx_ms'), 6)} ms; KV capacity "
            f"{fmt(r.get('kv_capacity_tokens'), 0)} tokens beside {fmt(r.get('weights_gb'), 0)} GB of weights")
    src = f"From {source}; times in ms; bold rows are the answers' points (b_max_slo, SLO optimum, knee)."
    more = (f"<p class='note'>{esc(f'the first {SEED_TABLE_ROWS} of {len(order)} points')}</p>"
            if len(order) > SEED_TABLE_ROWS else "")
    return (f"<div class='scroll'><table class='data seed'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div><p class='note'>{esc(line)}</p>"
            f"<p class='note'>{esc(src)}</p>{more}")


_SEED_COLUMNS = (
    # (header, column, digits or None for special)
    ("B", "batch_size", 0),
    ("T_svc", "t_svc_ms", 1),
    ("req/s", "capacity_rps", 1),
    ("rho", "rho", None),
    ("E[W]", "e_wait_ms", 1),
    ("E[T_batch]", "e_batch_ms", 1),
    ("E[T_svc]", "e_svc_ms", 1),
    ("E[T]", "e_resp_ms", 1),
    ("{q} gauss", "p_gauss_ms", 1),
    ("{q} exp", "p_exp_ms", 1),
    ("{q} batcher", "batcher_p_ms", 1),
    ("{q} simulated", "sim_p_ms", 1),
    ("L", "little_l", 2),
    ("in svc", "in_service", 2),
    ("in queue", "in_queue", 2),
)


def seed_table(r: dict[str, Any], pts: dict[str, np.ndarray], source: str) -> str:
    """The seed's per-point table for one scenario row (the terminal summary's columns)."""
    q = r.get("percentile", 0.99)
    qlabel = f"P{100 * q:g}" if not unbounded(q) else "P(q)"
    order = np.lexsort([pts["batch_size"], np.where(np.isfinite(pts.get("batch_window_ms", pts["batch_size"])),
                                                    pts.get("batch_window_ms", pts["batch_size"]), np.inf)])
    p = {k: v[order] for k, v in pts.items()}
    n = len(p["batch_size"])
    marked = {float(r[k]) for k in ("b_max_slo", "slo_opt", "knee", "b_latency_opt", "b_min_stable_int", "b_mem_max")
              if k in r and not unbounded(r[k]) and r[k] > 0}
    keep = np.ones(n, bool)
    note = ""
    if n > SEED_TABLE_ROWS:
        b = p["batch_size"]
        pow2 = (b > 0) & (np.log2(np.maximum(b, 1)) % 1 == 0)
        keep = pow2 | np.isin(b, list(marked))
        note = (f"{int(keep.sum())} of {n} rows: powers of two and the answers' batch sizes; "
                f"every row is in {source}")
    windows = "batch_window_ms" in p and len(np.unique(np.where(np.isfinite(p["batch_window_ms"]),
                                                                p["batch_window_ms"], -1))) > 1
    cols = [(h.format(q=qlabel), c, d) for h, c, d in _SEED_COLUMNS if c in p]
    head = ("<th class='l'>window</th>" if windows else "") + "".join(f"<th>{esc(h)}</th>" for h, _, _ in cols)
    head += "<th class='l'>action</th>" if "action" in p else ""
    body = []
    for i in np.flatnonzero(keep):
        cells = []
        if windows:
            w = p["batch_window_ms"][i]
            cells.append(f"<td class='l'>{'inf' if unbounded(w) else f'{w:g} ms'}</td>")
        for _, c, d in cols:
            v = p[c][i]
            if c == "rho":
                txt = fmt(100 * v if not unbounded(v) else v) + "%"
                if "stable" in p and not p["stable"][i]:
                    txt += " (unstable)"
            elif d == 0 or d is None:
                txt = f"{v:g}"
            else:
                txt = fmt(v, d)
            cells.append(f"<td>{esc(txt)}</td>")
        if "action" in p:
            a = str(p["action"][i])
            cells.append(f"<td class='l'><span class='chip' style='background:{ACTION_COLOURS.get(a, '#666')}'>"
                         f"{esc(ACTION_LABELS.get(a, a))}</span></td>")
        cls = " class='marked'" if float(p["batch_size"][i]) in marked else ""
        body.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    lam, tf, tr = r.get("lambda_per_replica_rps"), r.get("t_fixed_ms"), r.get("t_req_ms")
    line = (f"lambda {fmt(lam, 3).rstrip('0').rstrip('.')} req/s per replica, T_fixed {fmt(tf, 3)} ms, "
            f"t_req {fmt(tr, 4)} ms: B_min(rho_target={r.get('rho_target', math.nan):g}) = "
            f"{fmt(r.get('b_min_rho_target'), 2)} -> {fmt(r.get('b_min_rho_target_int'), 0)}; "
            f"B_min stable = {fmt(r.get('b_min_stable'), 2)} -> {fmt(r.get('b_min_stable_int'), 0)}; "
            f"KV {fmt(r.get('kv_gb_per_req'), 2)} GB/request, weights {fmt(r.get('weights_gb'), 0)} GB, "
            f"free {fmt(r.get('free_gb'), 0)} GB, at most {fmt(r.get('b_mem_max'), 0)} requests in memory")
    src = f"From {source}; times in ms; bold rows are the answers' batch sizes (and B_min stable, b_mem_max)."
    return (f"<div class='scroll'><table class='data seed'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div><p class='note'>{esc(line)}</p>"
            f"<p class='note'>{esc(src)}</p>" + (f"<p class='note'>{esc(note)}</p>" if note else ""))


def plan_table(plan: dict[str, np.ndarray], varying: list[str]) -> str:
    """The cheapest configuration meeting the SLO per model (and context) and arrival rate."""
    cost = plan["replicas_min_cost_usd_per_hour"]
    ok = np.isfinite(cost)
    if not ok.any():
        return ""
    p = {k: v[ok] for k, v in plan.items()}
    group_cols = [c for c in ("model", "seq_len", "mean_seq_len", "slo_ms", "arrival_rps") if c in p]
    key = row_keys(p, group_cols)
    order = np.lexsort([p["replicas_min_cost_usd_per_hour"], key])
    first = np.ones(len(order), bool)
    first[1:] = key[order][1:] != key[order][:-1]
    best = order[first]
    total = len(best)
    if total > PLAN_TABLE_ROWS and "arrival_rps" in p:
        rates = np.unique(p["arrival_rps"][best])
        n_groups = max(1, total // len(rates))
        keep = max(1, min(len(rates), PLAN_TABLE_ROWS // n_groups))
        pick = rates[np.unique(np.round(np.linspace(0, len(rates) - 1, keep)).astype(int))]
        best = best[np.isin(p["arrival_rps"][best], pick)]
    sort_cols = [p[c][best] for c in reversed(group_cols)]  # numbers sort as numbers
    best = best[np.lexsort(sort_cols)][:PLAN_TABLE_ROWS]
    show = [c for c in ("model", "seq_len", "arrival_rps", "gpu", "gpus_per_replica") if c in p and (c in varying or c in ("model", "gpu"))]
    heads = {"model": "model", "seq_len": "S_max", "arrival_rps": "arrival req/s", "gpu": "GPU",
             "gpus_per_replica": "GPUs/replica"}
    rows = []
    for i in best:
        cells = []
        for c in show:
            v = p[c][i]
            cells.append(f"<td class='l'>{esc(v)}</td>" if isinstance(v, str) else
                         f"<td>{v:,.0f}</td>" if float(v).is_integer() else f"<td>{v:,.4g}</td>")
        nan = np.full(len(p["group_id"]), math.nan)
        w = p.get("replicas_min_window_ms", nan)[i]
        batch = p.get("replicas_min_batch", nan)[i]
        cells += [f"<td>{p['replicas_min'][i]:g}</td>", f"<td>{'none' if no_answer(batch) else f'{batch:g}'}</td>",
                  f"<td>{'inf' if unbounded(w) else f'{w:g}'}</td>",
                  f"<td>{fmt(p.get('replicas_min_latency_ms', nan)[i])}</td>",
                  f"<td>${p['replicas_min_cost_usd_per_hour'][i]:,.2f}</td>"]
        rows.append(f"<tr data-model='{esc(p['model'][i])}'>{''.join(cells)}</tr>")
    head = "".join(f"<th class='l'>{heads[c]}</th>" if c in ("model", "gpu") else f"<th>{heads[c]}</th>" for c in show)
    head += "<th>replicas</th><th>batch</th><th>window ms</th><th>latency ms</th><th>USD/h</th>"
    note = (f"The cheapest configuration (GPU, GPUs per replica, replicas, batch, window) per "
            f"{', '.join(group_cols)}, over every GPU of the grid: {len(best)} of {total} rows"
            + (" (arrival rates spread over the grid's)" if len(best) < total else "")
            + ". The model filter applies to this table; the GPU filter to the figure only.")
    return (f"<h3>Cheapest plan</h3><div class='scroll'><table class='data plan'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div><p class='note'>{esc(note)}</p>")


def search_table(s: dict[str, np.ndarray]) -> str:
    cols = [("study", "study_name"), ("objective", "objective"), ("rank", "rank"), ("GPU", "gpu"),
            ("GPUs/replica", "gpus_per_replica"), ("replicas", "replicas"), ("batch", "batch_size"),
            ("arrival req/s", "arrival_rps"), ("latency ms", "latency_ms"), ("USD/h", "cost_usd_per_hour"),
            ("meets constraints", "meets_constraints"), ("trials", "trials"), ("gap to exact", "gap_rel")]
    cols = [(h, c) for h, c in cols if c in s]
    rows = []
    for i in range(len(s["study_name"])):
        cells = []
        for _, c in cols:
            v = s[c][i]
            if c == "study_name":
                txt = str(v).rsplit("/", 1)[0]
            elif c == "gap_rel":
                txt = "not checked" if unbounded(v) and not bool(s.get("enumerable", [True] * (i + 1))[i]) else \
                    ("inf" if unbounded(v) else f"{100 * v:.2f}%")
            elif isinstance(v, (bool, np.bool_)):
                txt = "yes" if v else "no"
            elif isinstance(v, float):
                txt = fmt(v, 2) if c in ("latency_ms", "cost_usd_per_hour") else f"{v:,.6g}"
            else:
                txt = str(v)
            cells.append(f"<td class='l'>{esc(txt)}</td>" if c in ("study_name", "objective", "gpu") else
                         f"<td>{esc(txt)}</td>")
        model = s["model"][i] if "model" in s else ""
        gpu = s["gpu"][i] if "gpu" in s else ""
        rows.append(f"<tr data-model='{esc(model)}' data-gpu='{esc(gpu)}'>{''.join(cells)}</tr>")
    head = "".join(f"<th class='l'>{h}</th>" if c in ("study_name", "objective", "gpu") else f"<th>{h}</th>"
                   for h, c in cols)
    return ("<h3>Optuna search answers (search.parquet)</h3><div class='scroll'><table class='data search'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def header_html(run: Run, scen: Sample) -> str:
    m = run.manifest
    rows = m.get("rows") or {}
    t = m.get("timings_s") or {}
    acts = rows.get("actions") or {}
    total_acts = sum(int(v) for v in acts.values()) or 1
    items = [
        ("grid", f"{m.get('grid_file', '?')} (sha256 {str(m.get('grid_sha256', ''))[:12]})"),
        ("created", str(m.get("created_utc", "?"))),
        ("sweep", str(m.get("sweep_version", "?"))),
        ("points", f"{int(rows.get('grid_points', 0)):,} evaluated, {int(rows.get('feasible', 0)):,} feasible"),
        ("points/ written", f"{int(rows.get('points_written', 0)):,} ({rows.get('points_mode', '?')})"),
        ("scenario rows", f"{scen.total:,} (optimum.parquet)"),
        ("frontier points", f"{int(rows.get('frontier', 0)):,}"),
        ("service times", str(m.get("service_source", "?"))),
        ("latency model", str(m.get("latency_model", "?"))),
        ("serving", run.serving),
        ("KV allocation", str(m.get("kv_allocation", "?"))),
        ("run time", f"{float(t.get('total', 0)):.1f} s"),
    ]
    action_line = ", ".join(f"{ACTION_LABELS.get(a, a)} {int(v):,} ({100 * int(v) / total_acts:.1f}%)"
                            for a, v in acts.items() if int(v))
    desc = (m.get("grid") or {}).get("toml", "")
    description = ""
    for line in str(desc).splitlines():
        if line.strip().startswith("description"):
            description = line.split("=", 1)[1].strip().strip('"')
            break
    return (f"<header class='top'><h1>Capacity plan: {esc(run.name)}</h1>"
            + (f"<p class='desc'>{esc(description)}</p>" if description else "")
            + facts(items) + (f"<p class='note'>Actions over every point: {esc(action_line)}</p>" if action_line else "")
            + "</header>")


def controls_html(models: list[str], gpus: list[str], has_scenarios: bool, scen: Sample) -> str:
    picker = ""
    if has_scenarios:
        picker = ("<fieldset><legend>Scenario (per-batch figures and table)</legend>"
                  "<select id='scenario' aria-label='scenario'></select></fieldset>")
    return ("<nav class='controls' aria-label='filters'>" + checkboxes("model", "Models", models)
            + checkboxes("gpu", "GPUs", gpus) + picker
            + "<p class='filter-state' id='filter-state'></p></nav>")


def _section(f: Figure, extra: str = "") -> str:
    notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in f.notes)
    if not f.drawn:
        return (f"<section class='block' id='sec-{f.id}' data-figure='{f.id}' data-drawn='0'><h2>{esc(f.title)}</h2>"
                f"<p class='skipped'><strong>Not drawn:</strong> {esc(f.note)}.</p>{extra}</section>")
    empty = ""
    if f.per:
        empty = (f"<p class='skipped' id='empty-{f.id}' style='display:none'>No data for this scenario "
                 f"({'its configuration has no points' if f.per == 'config' else 'nothing to draw'}).</p>")
    return (f"<section class='block' id='sec-{f.id}' data-figure='{f.id}' data-drawn='1'><h2>{esc(f.title)}</h2>"
            f"<p class='caption'>{esc(f.caption)}</p><div class='plot' id='plot-{f.id}'></div>{empty}{notes}{extra}"
            "</section>")


def body_html(figs: list[Figure], plan_table: str, search_table: str, scen: Sample) -> str:
    by_id = {f.id: f for f in figs}
    notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in scen.notes)
    parts = [
        ("<section class='block long' id='sec-scenario'><h2>Scenario: answers and the seed's table</h2>"
        "<p class='caption'>The decisions of optimum.parquet for the selected scenario row, and every point of it "
        "as in the seed's worked example.</p>"
        f"{notes}<div data-scenario-html='answers'></div><div data-scenario-html='table'></div></section>"),
        ("<section class='block long' id='sec-explain'><h2>How the answer was derived</h2>"
         "<p class='caption'>The chosen point of the selected scenario row (b_max_slo, else the knee, else the lowest "
         "E[T]) derived step by step with the formulas of docs/model.md (continuous serving: docs/continuous.md), as "
         "<code>sweep explain</code> prints it."
         "</p><div data-scenario-html='explain'></div></section>"),
    ]
    for fid in ("latency", "utilisation", "kv-budget", "action-map", "frontier"):
        parts.append(_section(by_id[fid]))
    parts.append(_section(by_id["replica-plan"], plan_table + search_table).replace(
        "class='block'", "class='block long'", 1))
    for fid in ("proxy-sim", "throughput", "ttft-tpot"):
        parts.append(_section(by_id[fid]))
    return "\n".join(parts)


def explain_html(steps: Sequence[Any] | None, point_id: int, which: str) -> str:
    """One point's derivation (`ServingModel.derivation`) as tables, one per step."""
    if steps is None:
        return "<p class='note'>This serving model has no step-by-step derivation yet.</p>"
    parts = [f"<p class='scenario-head'>point_id {point_id} ({esc(which)})</p>"]
    for n, step in enumerate(steps, 1):
        rows = "".join(f"<tr><td class='l'>{esc(f)}</td><td class='l'>{esc(x)}</td><td>{esc(r)}</td></tr>"
                       for f, x, r in step.lines)
        parts.append(f"<h3>{n}. {esc(step.title)} <span class='note'>({esc(step.section)})</span></h3>"
                     f"<div class='scroll'><table class='data explain'><tr><th class='l'>formula</th>"
                     f"<th class='l'>with this point's numbers</th><th>result</th></tr>{rows}</table></div>")
    return "".join(parts)
