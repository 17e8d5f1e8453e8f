"""`build_report`: run folder in, one HTML file (and with `png_dir` one PNG per figure) out."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sweep.models import SERVING_MODES, ServingModel, get_model
from sweep.models.views import AgainstLoad, AgainstSimulator, CapLines, Frontier, KvBudget, Scatter, Utilisation
from sweep.models.views import Figure as ViewFigure
from sweep.reporting.data import ReportError, Run, Sample, answer_column

EXTRA_HINT = "pip install 'sweep-capacity[report]'"


def _read_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged Parquet file raises: pyarrow's errors (a bad page header is an
    OSError without an errno), DuckDB's."""
    import duckdb
    import pyarrow as pa

    return pa.ArrowException, duckdb.Error, OSError


def require_extra() -> None:
    """The report's optional dependencies, or one line saying how to install them."""
    from importlib.util import find_spec

    missing = [m for m in ("duckdb", "plotly") if find_spec(m) is None]
    if missing:
        raise ReportError(f"sweep report needs {' and '.join(missing)}: {EXTRA_HINT}")


@dataclass
class ReportResult:
    path: Path
    bytes: int
    seconds: float
    figures: list[str]  # ids of the figures drawn
    skipped: dict[str, str]  # id -> why not drawn
    pngs: list[Path] = field(default_factory=list)


def plotly_js() -> tuple[str, str]:
    """(the minified plotly.js bundled with the plotly package, its version). Read as a
    file: importing plotly.offline would import pandas, a second of the 10 s budget."""
    import re
    from importlib import resources

    path = resources.files("plotly") / "package_data" / "plotly.min.js"
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        from plotly.offline import get_plotlyjs

        text = get_plotlyjs()
    found = re.search(r"plotly\.js v([0-9][^\s*]*)", text[:500])
    return text.replace("</script", "<\\/script"), found.group(1) if found else "?"


def build_report(run_dir: str | Path, out: str | Path | None = None, png_dir: str | Path | None = None) -> ReportResult:
    """Write the report of the run in `run_dir` to `out` (default RUN_DIR/report.html)."""
    t0 = time.perf_counter()
    require_extra()
    if png_dir is not None:
        from importlib.util import find_spec

        if find_spec("kaleido") is None:
            raise ReportError(f"--png needs kaleido: {EXTRA_HINT}")
    run = Run(run_dir)  # the folder is checked first: a damaged file is one line
    try:
        out_path = Path(out) if out is not None else run.path / "report.html"
        if out_path.is_dir() or (out_path.exists() and not out_path.is_file()):
            raise ReportError(f"{out_path}: is a folder, not a file the report can replace; remove it or give "
                              "--out FILE")
        return _build(run, out_path, png_dir, t0)
    except _read_errors() as exc:  # a data page the checks do not read (beyond their hash budget)
        if isinstance(exc, OSError) and exc.errno is not None:  # the system's (a full disk writing the page)
            raise
        text = str(exc).strip().splitlines()[0][:100] if str(exc).strip() else ""
        raise ReportError(f"{run.path}: a file cannot be read ({type(exc).__name__}: {text}); rerun the "
                          f"`sweep run GRID --out {run.path}` that made it to compute it again") from None
    finally:
        run.close()


def _build(run: Run, out_path: Path, png_dir: str | Path | None, t0: float) -> ReportResult:
    from sweep.decide import layouts as L
    from sweep.reporting import figures as F
    from sweep.reporting import html as H
    from sweep.reporting import tables as T

    scen = run.scenarios()
    rows = _rows(scen.cols)
    for r in rows:
        r["_config"] = ""
    config_keys = run.config_key(scen.cols) if rows else np.array([])
    for r, k in zip(rows, config_keys):
        r["_config"] = str(k)
    detail = run.detail(scen.cols) if rows else Sample({}, 0, 0)
    models = sorted({str(m) for m in run.row_index()["model"]})
    gpus = sorted({str(g) for g in run.row_index()["gpu"]})
    gpu_colour = F.colour_map(gpus)
    labels = T.scenario_labels(rows, run.varying, run.model)
    ids = [f"r{int(r['row_id'])}" for r in rows]
    html_maps: dict[str, dict[str, str]] = {"table": {}, "answers": {}}

    model, views = run.model, run.views
    cap = model.decisions.cap
    specs = _figure_specs(model)
    by_id: dict[str, F.Figure] = {f.id: F.Figure(f.id, f.title, f.caption, per=_per(f)) for f in specs
                                  if views.figure(f.id) is not None}

    # ---- per scenario: the answers, the table, the figures the model declares per scenario row
    scenario_specs = [f for f in views.figures if f.per == "scenario"]
    lines = next((f for f in scenario_specs if isinstance(f, CapLines)), None)
    line_col = lines.panels[0].column if lines is not None and lines.panels else ""
    have_detail = detail.shown > 0 and line_col in detail.cols and cap in detail.cols
    brange = ((float(np.nanmin(detail.cols[cap])), float(np.nanmax(detail.cols[cap])))
              if have_detail else (1.0, 1.0))
    for r, sid in zip(rows, ids):
        m = detail.cols["row_id"] == r["row_id"] if have_detail else None
        pts = {k: v[m] for k, v in detail.cols.items()} if m is not None else None
        html_maps["answers"][sid] = T.answers_html(r, model)
        if pts is not None and len(pts[cap]):
            for f in scenario_specs:
                if isinstance(f, CapLines):
                    by_id[f.id].figs[sid] = F.cap_lines_figure(f, model, r, pts, brange)
                elif isinstance(f, Utilisation) and model.decisions.utilisation in pts:
                    by_id[f.id].figs[sid] = F.utilisation_figure(f, model, r, pts, brange)
            html_maps["table"][sid] = T.point_table(r, pts, detail.source, model)
        else:
            if have_detail and lines is not None:
                by_id[lines.id].figs[sid] = F.cap_lines_figure(
                    lines, model, r, {k: v[:0] for k, v in detail.cols.items()}, brange,
                    f"no feasible point in {detail.source} for this row (reason: {r.get('reason')})")
            html_maps["table"][sid] = (f"<p class='note'>No points of this scenario row in {detail.source} "
                                       f"(reason: {r.get('reason')}).</p>")
        for f in scenario_specs:
            if isinstance(f, KvBudget):
                kfig = F.kv_figure(f, model, r, pts)
                if kfig is not None:
                    by_id[f.id].figs[sid] = kfig
    html_maps["explain"] = _explanations(run, rows, ids, T)
    for f in scenario_specs:
        fig = by_id[f.id]
        if isinstance(f, KvBudget):
            if not rows:
                fig.note = "optimum.parquet has no rows"
            elif not fig.figs:
                fig.note = "optimum.parquet lacks " + " or ".join(f.row_columns())
            continue
        fig.notes = list(detail.notes)
        if not rows:
            fig.note = "optimum.parquet has no rows"
        elif not have_detail:
            fig.note = f"no per-batch latency columns in points/ or frontier.parquet ({run.serving} serving)"

    # ---- action map: per configuration
    knobs = " and ".join(views.axis(k).noun or k for k in model.decisions.knobs)
    action = F.Figure("action-map", "Action map",
                      "The operating rule (the action column) at each arrival rate and "
                      f"{views.axis(cap).noun or cap} for the "
                      "selected scenario's configuration (its model, GPU, GPUs per replica, context and replicas)"
                      + (f", one panel per {knobs}." if knobs else "."), per="config")
    if rows:
        cells = run.action_cells(scen.cols)
        if cells.shown:
            for key in dict.fromkeys(r["_config"] for r in rows):
                m = cells.cols["config"] == key
                if m.any():
                    action.figs[key] = F.action_figure({k: v[m] for k, v in cells.cols.items()}, model)
            action.notes = cells.notes
        else:
            action.note = cells.notes[0] if cells.notes else "no points"

    # ---- across scenarios: the model's run figures, the replica plan, the schedule
    for f in views.figures:
        if f.per == "scenario":
            continue
        fig = by_id[f.id]
        if isinstance(f, Frontier):
            fr = run.frontier()
            if fr.shown:
                fig.fig = F.frontier_figure(fr.cols, f, model, gpu_colour)
                fig.notes = fr.notes or [f"all {fr.shown:,} frontier points of {fr.rows_total:,} rows"]
            else:
                fig.note = (fr.notes[0] if fr.notes else "frontier.parquet is empty: no scenario row has a "
                            "feasible point")
        elif isinstance(f, AgainstSimulator):
            sim = run.simulated(f)
            if sim.shown:
                sf = F.sim_figure(sim.cols, f, model)
                if sf is not None:
                    fig.fig = sf
                    fig.notes = sim.notes
                else:
                    fig.note = "no simulated point has a finite simulated latency"
            else:
                fig.note = sim.notes[0]
        elif isinstance(f, Scatter | AgainstLoad):
            wanted = ("model", "gpu", "arrival_rps", "replicas", "stable", "percentile", *model.row_axes,
                      *(f.config if isinstance(f, AgainstLoad) else ()),
                      *((f.x,) if isinstance(f, AgainstLoad) else ()))
            sample = run.sampled(f.columns(), wanted)
            if sample.shown:
                fig.fig = (F.scatter_figure(sample.cols, f, model, gpu_colour) if isinstance(f, Scatter)
                           else F.load_figure(sample.cols, f, model, gpu_colour))
                fig.notes = sample.notes
                if fig.fig is None:
                    fig.note = ("no stable point with finite values" if isinstance(f, Scatter)
                                else "no load column")
            else:
                fig.note = sample.notes[0]
        else:
            fig.note = f"this report draws no figure of kind {type(f).__name__}"

    plan_fig = F.Figure("replica-plan", "Replica plan and cost",
                        "For every scenario group, the fewest replicas of the grid's replicas axis that meet the "
                        "SLO with rho <= rho_max (replicas_min), and what that fleet costs per hour (illustrative "
                        "catalog prices).")
    plan = run.replica_plan()
    plan_table = ""
    if plan.shown:
        pf = F.plan_figure(plan.cols, model, gpu_colour)
        n_none = int(np.sum(~np.isfinite(plan.cols["replicas_min_cost_usd_per_hour"])))
        if pf is not None:
            plan_fig.fig = pf
        else:
            plan_fig.note = "no scenario group meets the SLO at any replica count of the grid"
        plan_fig.notes = list(plan.notes)
        if n_none:
            plan_fig.notes.append(f"{n_none:,} of {plan.shown:,} scenario groups meet the SLO at no replica "
                                  "count of the grid (not drawn; listed in optimum.parquet with a reason)")
        plan_table = T.plan_table(plan.cols, run.varying, model)
    else:
        plan_fig.note = plan.notes[0] if plan.notes else "no rows"
    sched_fig = None
    sched = run.schedule()
    if sched is not None:  # the grid had a [schedule]
        sched_fig = F.Figure("schedule", "Replica schedule",
                             "Replicas per hour meeting the SLO at each hour's traffic (schedule.parquet): the "
                             "plan (solid; raised where the ramp or the warm-up cost require), the per-hour "
                             "requirement (dotted) and the flat peak-sized fleet (dashed), against the traffic "
                             "(grey, right axis).")
        sched_fig.fig = F.schedule_figure(sched.cols)
        sched_fig.notes = list(sched.notes)
        if sched_fig.fig is None:
            sched_fig.note = "schedule.parquet has no rows"
    layout_fig = None
    lay = run.layouts()
    if lay is not None:  # the run's optimum.parquet carries a layout verdict (sweep.decide.layouts)
        layout_fig = F.Figure(L.FIGURE_ID, L.FIGURE_TITLE, L.FIGURE_CAPTION)
        layout_fig.fig = F.layout_figure(lay.cols, run.varying) if lay.shown else None
        layout_fig.notes = list(lay.notes)
        if layout_fig.fig is None:
            layout_fig.note = ("the grid has one arrival rate: the verdict is in the answers above and in "
                               "optimum.parquet" if lay.shown and "arrival_rps" not in run.varying
                               else "no scenario group has an answer in either layout")
    search = run.search()
    search_table = T.search_table(search.cols, model) if search.shown else ""

    # ---- the order of the page: per scenario, the action map, frontiers, the plan, the rest; a
    # figure another serving mode draws says so, not drawn
    for f in specs:
        if f.id not in by_id:
            modes = [s for s in SERVING_MODES if get_model(s).views.figure(f.id) is not None]
            by_id[f.id] = F.Figure(f.id, f.title, f.caption, per=_per(f), note=(
                f"this run uses {run.serving} batching (serving = \"{run.serving}\"); these figures are for "
                + " or ".join(f"{s} batching (serving = \"{s}\")" for s in modes)))
    figs = [by_id[f.id] for f in specs if f.per == "scenario"] + [action]
    figs += [by_id[f.id] for f in specs if isinstance(f, Frontier)] + [plan_fig]
    figs += [sched_fig] if sched_fig is not None else []
    figs += [layout_fig] if layout_fig is not None else []
    figs += [by_id[f.id] for f in specs if f.per != "scenario" and not isinstance(f, Frontier)]

    # ---- the document
    plotly_text, plotly_version = plotly_js()
    scenario_data = [{"id": sid, "label": lab + ("" if r.get("reason") in (None, "ok") else
                                                 f" (no answer: {r.get('reason')})"),
                      "model": str(r.get("model")), "gpu": str(r.get("gpu")), "config": r["_config"],
                      "ok": r.get("reason") in (None, "ok")} for r, sid, lab in zip(rows, ids, labels)]
    # the page opens on the answered scenario with the longest frontier: the most to see
    ranked = sorted(range(len(rows)), key=lambda i: (not scenario_data[i]["ok"],
                                                     -float(np.nan_to_num(rows[i].get("n_frontier", 0)))))
    if ranked:
        scenario_data[ranked[0]]["default"] = True
    data = {
        "models": models, "gpus": gpus, "scenarios": scenario_data, "html": html_maps,
        "figures": [{"id": f.id, "per": f.per, "fig": f.fig, "figs": f.figs or None} for f in figs if f.drawn],
    }
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    header = T.header_html(run, scen)
    controls = T.controls_html(models, gpus, bool(rows), scen)
    body = T.body_html(figs, plan_table, search_table, scen, run.model)
    footer = (f"Generated {H.esc(generated)} by sweep report from {H.esc(run.path)}. Figures drawn with "
              f"plotly.js {H.esc(plotly_version)}, inlined: this file needs no network.")
    text = H.document(title=f"sweep report: {run.name}", header=header, controls=controls, body=body,
                      footer=footer, data=data, plotly_js=plotly_text)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out_path)
    first = next((d for d in scenario_data if d.get("default")), None)
    pick = {"scenario": first["id"], "config": first["config"]} if first else {}
    pngs = write_pngs(figs, Path(png_dir), pick) if png_dir is not None else []
    return ReportResult(out_path, out_path.stat().st_size, time.perf_counter() - t0,
                        [f.id for f in figs if f.drawn], {f.id: f.note for f in figs if not f.drawn}, pngs)


#: The answers whose point a scenario's derivation shows: the first the row has (the
#: group's recommendation, THE answer, wherever there is one).
EXPLAIN_ANSWERS = ("recommended", "b_max_slo", "knee", "b_latency_opt")
#: How the derivation's heading names the recommendation.
RECOMMENDED_WHAT = "the recommendation: the cheapest configuration meeting every SLO with rho <= rho_max"


def _per(f: ViewFigure) -> str:
    """The report's picker key of a declared figure: "scenario", or "" (one for the run)."""
    return "scenario" if f.per == "scenario" else ""


def _figure_specs(model: ServingModel) -> list[ViewFigure]:
    """The figures of the run's model, then those only other registered serving modes
    declare (listed, not drawn), each id once, in the registry's order."""
    seen: dict[str, ViewFigure] = {f.id: f for f in model.views.figures}
    for serving in SERVING_MODES:
        for f in get_model(serving).views.figures:
            seen.setdefault(f.id, f)
    order = {fid: i for i, fid in enumerate(dict.fromkeys(
        f.id for s in (model.serving, *SERVING_MODES) for f in get_model(s).views.figures))}
    return sorted(seen.values(), key=lambda f: order.get(f.id, len(order)))


def _explanations(run: Run, rows: list[dict[str, Any]], ids: list[str], T: Any) -> dict[str, str]:
    """Per scenario row: the derivation of its chosen point (`ServingModel.derivation`)."""
    model = run.model
    what = {card.prefix: card.what for card in model.views.answers.cards}
    what.setdefault(EXPLAIN_ANSWERS[0], RECOMMENDED_WHAT)
    chosen: dict[str, tuple[int, str]] = {}
    for r, sid in zip(rows, ids):
        for prefix in EXPLAIN_ANSWERS:
            name = answer_column(model, prefix, "point_id")
            pid = r.get(name) if name else None
            if pid is not None and math.isfinite(float(pid)) and float(pid) >= 0:
                chosen[sid] = (int(pid), f"{prefix}: {what.get(prefix) or prefix}")
                break
    if not chosen:
        return {}
    cols = run.points_by_id([pid for pid, _ in chosen.values()])
    if not cols:
        return {}
    at = {int(p): i for i, p in enumerate(cols["point_id"])}
    options = {"kv_allocation": run.manifest.get("kv_allocation", "contiguous"), **_grid_options(run)}
    out: dict[str, str] = {}
    for sid, (pid, which) in chosen.items():
        if pid not in at:
            continue
        i = at[pid]
        row = {k: _plain(v[i]) for k, v in cols.items()}
        out[sid] = T.explain_html(model.derivation(row, None, options), pid, which)
    return out


def _grid_options(run: Run) -> dict[str, Any]:
    """The KV and engine options of the run's grid file (kept in the manifest): block size,
    reserve, scheduler policy and steps."""
    import tomllib

    text = run.manifest.get("grid", {}).get("toml") or run.manifest.get("grid_toml") or ""
    try:
        opts = tomllib.loads(text).get("options", {})
    except tomllib.TOMLDecodeError:
        return {}
    return {k: opts[k] for k in ("block_tokens", "reserve_fraction", "scheduler_policy", "scheduler_steps")
            if k in opts}


def _plain(v: Any) -> Any:
    """A column value as the derivation reads it: NULL (NaN here) is unbounded (+inf)."""
    if isinstance(v, np.bool_ | bool):
        return bool(v)
    if isinstance(v, np.floating | float):
        return math.inf if math.isnan(float(v)) else float(v)
    return v


def _rows(cols: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Columns -> one dict per row, with Python scalars (NaN stays NaN: unbounded)."""
    if not cols:
        return []
    n = len(next(iter(cols.values())))
    out = []
    for i in range(n):
        row = {}
        for k, v in cols.items():
            x = v[i]
            row[k] = x.item() if isinstance(x, np.generic) else x
        out.append(row)
    return out


PNG_WIDTH = 1100


def write_pngs(figs: list[Any], folder: Path, pick: dict[str, str] | None = None) -> list[Path]:
    """One PNG per drawn figure (per-scenario figures: the scenario the page opens on,
    `pick`), by kaleido
    with the plotly.js of the plotly package and a local Chrome or Chromium; no MathJax,
    so nothing is fetched."""
    try:
        import kaleido
    except ImportError:
        raise ReportError(f"--png needs kaleido: {EXTRA_HINT}") from None
    from sweep.reporting.html import _encode

    folder.mkdir(parents=True, exist_ok=True)
    jobs, paths = [], []
    for f in figs:
        spec = (f.figs.get((pick or {}).get(f.per, "")) or f.default()) if f.drawn else None
        if spec is None:
            continue
        fig = _encode(spec)
        layout = fig.setdefault("layout", {})
        layout.pop("autosize", None)
        path = folder / f"{f.id}.png"
        jobs.append({"fig": fig, "path": str(path),
                     "opts": {"format": "png", "width": PNG_WIDTH, "height": int(layout.get("height", 450)),
                              "scale": 2}})
        paths.append(path)
    if not jobs:
        return []
    for attempt in (1, 2):
        try:
            kaleido.write_fig_from_object_sync(jobs, kopts={"mathjax": False}, cancel_on_error=True)
            break
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            # a browser that ran before kaleido's page script loaded ("kaleido_scopes is not
            # defined", seen on a loaded 2-core machine) renders on a second try
            if attempt == 1 and "kaleido_scopes" in first:
                continue
            raise ReportError(f"--png: kaleido could not render ({first}); it needs Chrome or Chromium installed "
                              "(Debian: apt-get install chromium)") from None
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise ReportError(f"--png: kaleido wrote no {missing[0].name}")
    return paths
