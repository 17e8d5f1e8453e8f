"""The report's HTML pieces other than figures: header, controls, tables, sections, each
table's columns and answers' wording from the serving model's views (`sweep.models.views`).

Numbers are formatted as the terminal summary formats them (`sweep.cli.summary`): latencies
in ms with one decimal, rho in per cent, unbounded values (+inf or NULL) as `inf`, and an
answer that does not exist (cap 0 or NULL) as `none`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sweep.decide.layouts import CARD_TITLE, VERDICT_COLUMN, card_text
from sweep.decide.recommend import PREFIXES, answer_name, band_columns, shown_columns
from sweep.models import ServingModel
from sweep.models.views import Cell
from sweep.reporting.data import Run, Sample, answer_column, no_answer, row_keys, unbounded
from sweep.reporting.figures import (
    ACTION_COLOURS,
    ACTION_LABELS,
    Figure,
    fmt,
)
from sweep.reporting.html import checkboxes, esc, facts

#: Rows of a per-point table before it is thinned to powers of two and the answers.
SEED_TABLE_ROWS = 80
#: Rows of the replica-plan table.
PLAN_TABLE_ROWS = 60

_AXIS_LABEL = {
    "gpus_per_replica": "{:g} GPU/replica",
    "arrival_rps": "{:,.4g} req/s",
    "slo_ms": "SLO {:g} ms",
}


def _axis_label(a: str, v: Any, labels: Mapping[str, str]) -> str:
    if a == "replicas" and isinstance(v, float):
        return f"{v:g} replica" + ("s" if v != 1 else "")
    template = labels.get(a) or _AXIS_LABEL.get(a)
    if isinstance(v, float):
        return template.format(v) if template else f"{a} {v:g}"
    return f"{a} {v}"


def scenario_labels(rows: list[dict[str, Any]], varying: list[str], model: ServingModel) -> list[str]:
    """'llama-3.1-8b · h100-sxm · 2 GPU/replica · 100 req/s · 4 replicas' (the axes that vary;
    the model's own axes as its views label them, e.g. `S_max 4096`)."""
    labels = model.views.labels
    out = []
    for r in rows:
        parts = [str(r.get("model")), str(r.get("gpu"))]
        for a in varying:
            if a in ("model", "gpu") or a not in r:
                continue
            parts.append(_axis_label(a, r[a], labels))
        for a in ("arrival_rps", "replicas"):
            if a not in varying and a in r and isinstance(r[a], float) and math.isfinite(r[a]):
                parts.append(_axis_label(a, r[a], labels))
        out.append(" · ".join(parts))
    return out


def _get(r: Mapping[str, Any], model: ServingModel, prefix: str, column: str) -> Any:
    """Answer `prefix`'s value of point column `column` in optimum row `r` (None: not carried)."""
    name = answer_column(model, prefix, column)
    return r.get(name) if name else None


def _answer_text(r: dict[str, Any], prefix: str, model: ServingModel) -> str:
    """`B = 8, window 5 ms: 120.3 ms, 148.1 req/s per replica, rho 67.5%` (the model's
    `Answers.values`), or `none`."""
    d, views = model.decisions, model.views
    b = _get(r, model, prefix, d.cap)
    if no_answer(b):
        return "none"
    knobs = ""
    for k in d.knobs:
        w = _get(r, model, prefix, k)
        if w is not None:
            ax = views.axis(k)
            knobs += ", " + (ax.inf_text if unbounded(w) else ax.value.format(w))
    parts = []
    for value in views.answers.values:
        x = _get(r, model, prefix, value.column)
        text = fmt(100 * x if x is not None and not unbounded(x) else x) if value.percent else fmt(x, value.digits)
        parts.append(value.text.format(text))
    return f"{views.axis(d.cap).symbol} = {b:g}{knobs}: {', '.join(parts)}"


def _slo_head(r: dict[str, Any], model: ServingModel) -> str:
    """`SLO: P99 <= 200 ms` (one check), `SLOs: TTFT P99 <= 500 ms, TPOT P99 <= 40 ms` (those set)."""
    q = r.get("percentile", 0.99)
    if len(model.slo_checks) == 1:
        return f"SLO: P{100 * q:g} <= {fmt(r.get(model.slo_checks[0][1]), 0)} ms"
    slos = [f"{model.views.check_name(lat)} P{100 * q:g} <= {fmt(r.get(slo), 0)} ms" for lat, slo in model.slo_checks
            if r.get(slo) is not None and not unbounded(r.get(slo))]
    return f"SLOs: {', '.join(slos) or 'none'}"


def answers_html(r: dict[str, Any], model: ServingModel) -> str:
    """A scenario row's answers (the model's `Answers` cards), its SLOs, counts and cost."""
    views = model.views
    items = [(card.title, _answer_text(r, card.prefix, model)) for card in views.answers.cards]
    answer = recommendation_text(r, model)
    rm = r.get("replicas_min")
    if rm is not None:
        cost = r.get("replicas_min_cost_usd_per_hour")
        items.append((views.answers.replicas,
                      "none in the grid's replicas axis" if unbounded(rm) else
                      f"{rm:g} replica{'s' if rm != 1 else ''}, {_answer_text(r, 'replicas_min', model)}, "
                      f"${fmt(cost, 2)}/h"))
    if VERDICT_COLUMN in r:  # a layout verdict (sweep.decide.layouts): the recommended layout against the other
        items.append((CARD_TITLE, card_text(r)))
    head = (f"{_slo_head(r, model)}; "
            f"{int(r.get('n_feasible', 0)) if not unbounded(r.get('n_feasible', 0)) else 0:,} of "
            f"{int(r.get('n_points', 0)) if not unbounded(r.get('n_points', 0)) else 0:,} points feasible; "
            f"reason: {r.get('reason')}; cost {fmt(r.get('cost_usd_per_hour'), 2)} USD/h at these replicas")
    the = ("" if answer is None else
           f"<div class='the-answer'><b>THE ANSWER: the recommendation (cheapest meeting every SLO with "
           f"{esc(model.decisions.utilisation)} &lt;= rho_max)</b>{esc(answer)}</div>")
    return (f"<p class='scenario-head'>{esc(head)}</p>{the}<div class='answers'>"
            + "".join(f"<div><b>{esc(k)}</b>{esc(v)}</div>" for k, v in items) + "</div>")


def recommendation_text(r: dict[str, Any], model: ServingModel) -> str | None:
    """The scenario group's recommendation in one line: its answer text, group-axis values,
    GPUs, prices, the planning columns, and the runner-up; `none (<binding constraint>)`
    where the group has none; None for a run without the recommendation columns."""
    if "group_reason" not in r:
        return None
    text = _answer_text(r, PREFIXES[0], model)
    if text == "none":
        return f"none: {r.get('group_reason')} binds"
    d = model.decisions
    parts = [f"{fmt(r.get(answer_name(PREFIXES[0], '_' + g)), 0)} {g}" for g in d.group_axes
             if r.get(answer_name(PREFIXES[0], '_' + g)) is not None]
    names = list(r)
    for role, col, label in shown_columns(model, PREFIXES[0], names):
        x = r.get(col)
        if role == "gpus":
            parts.append(f"{fmt(x, 0)} GPUs")
        else:
            parts.append(f"{label} {fmt(x, 2 if label == 'USD/h' else 3)}")
    for lat, lo, hi in band_columns(model, PREFIXES[0], names):
        parts.append(f"{model.views.check_name(lat)} p5-p95 {fmt(r.get(lo))}-{fmt(r.get(hi))} ms")
    runner = _answer_text(r, PREFIXES[1], model)
    cost = r.get(answer_name(PREFIXES[1], "_cost_usd_per_hour"))
    tail = f"; runner-up: {runner}" + (f", USD/h {fmt(cost, 2)}" if runner != "none" else "")
    return f"{text}; {', '.join(parts)}{tail}"


def _cell_html(cell: Cell, p: Mapping[str, np.ndarray], i: int) -> str:
    v = p[cell.column][i]
    if cell.percent:
        text = fmt(100 * v if not unbounded(v) else v) + "%"
    elif unbounded(v):
        text = cell.undefined or fmt(v)
    elif cell.fmt:
        text = cell.fmt.format(v)
    else:
        text = fmt(v, cell.digits)
    if cell.flag and cell.flag in p and not p[cell.flag][i]:
        text += cell.flag_text
    return f"<td class='l'>{esc(text)}</td>" if cell.left else f"<td>{esc(text)}</td>"


LEFT = " class='l'"


def _title(text: str) -> str:
    return f" title='{esc(text)}'" if text else ""


def _varies(v: np.ndarray) -> bool:
    return len(np.unique(np.where(np.isfinite(v), v, -1))) > 1


def point_table(r: dict[str, Any], pts: dict[str, np.ndarray], source: str, model: ServingModel) -> str:
    """Every point of one scenario row (the model's `Views.report_table`), sorted by the row
    axes, the answers' rows in bold; beyond SEED_TABLE_ROWS points, the caps that are powers
    of two and the answers' (`thin`) or the first points."""
    table = model.views.report_table
    if table is None:
        return ""
    d = model.decisions
    qlabel = f"P{100 * r.get('percentile', 0.99):g}" if not unbounded(r.get("percentile", 0.99)) else "P(q)"
    keys = [np.where(np.isfinite(pts[a]), pts[a], np.inf) for a in reversed(d.row_axes) if a in pts]
    order = np.lexsort(keys) if keys else np.arange(len(pts[d.cap]))
    p = {k: v[order] for k, v in pts.items()}
    n = len(p[d.cap])
    if table.mark_points:
        ids = (_get(r, model, k, "point_id") for k in table.marks)
        marked = {int(x) for x in ids if x is not None and not unbounded(x)}
        is_marked = np.isin(p["point_id"], list(marked)) if "point_id" in p else np.zeros(n, bool)
    else:
        caps = {float(r[k]) for k in table.marks if k in r and not unbounded(r[k]) and r[k] > 0}
        is_marked = np.isin(p[d.cap], list(caps))
    keep = np.ones(n, bool)
    note = ""
    if n > SEED_TABLE_ROWS:
        if table.thin:
            b = p[d.cap]
            keep = ((b > 0) & (np.log2(np.maximum(b, 1)) % 1 == 0)) | is_marked
            note = (f"{int(keep.sum())} of {n} rows: powers of two and the answers' batch sizes; "
                    f"every row is in {source}")
        else:
            keep = np.arange(n) < SEED_TABLE_ROWS
            note = f"the first {SEED_TABLE_ROWS} of {n} points"
    cells = [c for c in table.cells if c.column in p and (not c.varies or _varies(p[c.column]))]
    engine = {a: model.views.axis(a).engine for a in d.row_axes}  # a knob's name in the serving engine: a tooltip
    head = "".join(f"<th{LEFT if c.left else ''}{_title(engine.get(c.column, ''))}>"
                   f"{esc(c.header.format(q=qlabel))}</th>"
                   for c in cells)
    head += "<th class='l'>action</th>" if "action" in p else ""
    body = []
    for i in np.flatnonzero(keep):
        row = [_cell_html(c, p, int(i)) for c in cells]
        if "action" in p:
            a = str(p["action"][i])
            row.append(f"<td class='l'><span class='chip' style='background:{ACTION_COLOURS.get(a, '#666')}'>"
                       f"{esc(ACTION_LABELS.get(a, a))}</span></td>")
        cls = " class='marked'" if is_marked[i] else ""
        body.append(f"<tr{cls}>" + "".join(row) + "</tr>")
    line = f"<p class='note'>{esc(table.note.text(r))}</p>" if table.note is not None else ""
    return (f"<div class='scroll'><table class='data seed'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>{line}"
            f"<p class='note'>{esc(table.legend.format(source=source))}</p>"
            + (f"<p class='note'>{esc(note)}</p>" if note else ""))


def plan_table(plan: dict[str, np.ndarray], varying: list[str], model: ServingModel) -> str:
    """The cheapest configuration meeting the SLO per model, workload (the model's
    `Plan.workload`) and arrival rate, its answer columns as the model's `Plan.cells`."""
    view = model.views.plan
    cost = plan["replicas_min_cost_usd_per_hour"]
    ok = np.isfinite(cost)
    if not ok.any():
        return ""
    p = {k: v[ok] for k, v in plan.items()}
    group_cols = [c for c in ("model", *view.workload, "arrival_rps") if c in p]
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
    show = [c for c in ("model", *(c for c, _ in view.shown), "arrival_rps", "gpu", "gpus_per_replica")
            if c in p and (c in varying or c in ("model", "gpu"))]
    heads = {"model": "model", "arrival_rps": "arrival req/s", "gpu": "GPU", "gpus_per_replica": "GPUs/replica",
             **dict(view.shown)}
    nan = np.full(len(p["group_id"]), math.nan)
    answers = [(c, p.get(answer_column(model, "replicas_min", c.column) or "", nan)) for c in view.cells]
    rows = []
    for i in best:
        cells = []
        for c in show:
            v = p[c][i]
            cells.append(f"<td class='l'>{esc(v)}</td>" if isinstance(v, str) else
                         f"<td>{v:,.0f}</td>" if float(v).is_integer() else f"<td>{v:,.4g}</td>")
        cells.append(f"<td>{p['replicas_min'][i]:g}</td>")
        for cell, values in answers:
            v = values[i]
            if cell.column == model.decisions.cap:
                text = "none" if no_answer(v) else cell.fmt.format(v) if cell.fmt else fmt(v, cell.digits)
            else:
                text = "inf" if unbounded(v) else cell.fmt.format(v) if cell.fmt else fmt(v, cell.digits)
            cells.append(f"<td>{esc(text)}</td>")
        cells.append(f"<td>${p['replicas_min_cost_usd_per_hour'][i]:,.2f}</td>")
        rows.append(f"<tr data-model='{esc(p['model'][i])}'>{''.join(cells)}</tr>")
    head = "".join(f"<th class='l'>{esc(heads[c])}</th>" if c in ("model", "gpu") else f"<th>{esc(heads[c])}</th>"
                   for c in show)
    head += "<th>replicas</th>" + "".join(f"<th>{esc(c.header)}</th>" for c in view.cells) + "<th>USD/h</th>"
    choices = ", ".join(x for x in ("GPU, GPUs per replica, replicas", view.choices) if x)
    note = (f"The cheapest configuration ({choices}) per "
            f"{', '.join(group_cols)}, over every GPU of the grid: {len(best)} of {total} rows"
            + (" (arrival rates spread over the grid's)" if len(best) < total else "")
            + ". The model filter applies to this table; the GPU filter to the figure only.")
    return (f"<h3>Cheapest plan</h3><div class='scroll'><table class='data plan'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div><p class='note'>{esc(note)}</p>")


def search_table(s: dict[str, np.ndarray], model: ServingModel) -> str:
    """Each study's best trials (search.parquet): the searched configuration, the cap and
    the SLO latencies (headed as in the plan table), cost, constraints, gap to exact."""
    plan = {c.column: c.header for c in model.views.plan.cells}
    cap = model.decisions.cap
    latencies = [lat for lat, _ in model.slo_checks]
    cols = [("study", "study_name"), ("objective", "objective"), ("rank", "rank"), ("GPU", "gpu"),
            ("GPUs/replica", "gpus_per_replica"), ("replicas", "replicas"), (plan.get(cap, cap), cap),
            ("arrival req/s", "arrival_rps"),
            *((plan.get(lat, f"{model.views.check_name(lat)} ms"), lat) for lat in latencies),
            ("USD/h", "cost_usd_per_hour"), ("meets constraints", "meets_constraints"), ("trials", "trials"),
            ("gap to exact", "gap_rel")]
    cols = [(h, c) for h, c in cols if c in s]
    two = {*latencies, "cost_usd_per_hour"}
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
                txt = fmt(v, 2) if c in two else f"{v:,.6g}"
            else:
                txt = str(v)
            cells.append(f"<td class='l'>{esc(txt)}</td>" if c in ("study_name", "objective", "gpu") else
                         f"<td>{esc(txt)}</td>")
        name = s["model"][i] if "model" in s else ""
        gpu = s["gpu"][i] if "gpu" in s else ""
        rows.append(f"<tr data-model='{esc(name)}' data-gpu='{esc(gpu)}'>{''.join(cells)}</tr>")
    head = "".join(f"<th class='l'>{esc(h)}</th>" if c in ("study_name", "objective", "gpu") else f"<th>{esc(h)}</th>"
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
            + facts(items)
            + (f"<p class='note'>Actions over every point: {esc(action_line)}</p>" if action_line else "")
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


def body_html(figs: list[Figure], plan_table: str, search_table: str, scen: Sample, model: ServingModel) -> str:
    """The sections: the scenario's answers and table, its derivation, then one per figure in
    `figs`' order (the replica plan with the plan and search tables)."""
    notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in scen.notes)
    docs = model.views.explain.docs
    parts = [
        ("<section class='block long' id='sec-scenario'><h2>Scenario: answers and every point</h2>"
        "<p class='caption'>The decisions of optimum.parquet for the selected scenario row, and every point of it "
        "with the columns its serving mode declares.</p>"
        f"{notes}<div data-scenario-html='answers'></div><div data-scenario-html='table'></div></section>"),
        ("<section class='block long' id='sec-explain'><h2>How the answer was derived</h2>"
         "<p class='caption'>The chosen point of the selected scenario row (the recommendation, else b_max_slo, "
         "else the knee, else the lowest "
         f"{esc(model.views.mean_name)}) derived step by step"
         + (f" with the formulas of {esc(docs)}" if docs else "") + ", as <code>sweep explain</code> prints it."
         "</p><div data-scenario-html='explain'></div></section>"),
    ]
    for f in figs:
        if f.id == "replica-plan":
            parts.append(_section(f, plan_table + search_table).replace("class='block'", "class='block long'", 1))
        else:
            parts.append(_section(f))
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
