"""`build_report`: run folder in, one HTML file (and with `png_dir` one PNG per figure) out."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sweep.reporting.data import ReportError, Run, Sample

EXTRA_HINT = "pip install 'sweep[report]'"


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
    from sweep.reporting import figures as F
    from sweep.reporting import html as H
    from sweep.reporting import tables as T

    run = Run(run_dir)
    try:
        out_path = Path(out) if out is not None else run.path / "report.html"
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
        labels = T.scenario_labels(rows, run.varying)
        ids = [f"r{int(r['row_id'])}" for r in rows]
        figs: list[F.Figure] = []
        html_maps: dict[str, dict[str, str]] = {"table": {}, "answers": {}}

        # ---- per scenario: the seed table, latency, utilisation, KV budget
        latency = F.Figure("latency", "Latency against batch size",
                           "The SLO's estimate (latency_ms) per batching window, the SLO, the knee and the SLO "
                           "optimum of the frontier; shaded: unstable and out-of-memory batch sizes.", per="scenario")
        util = F.Figure("utilisation", "Utilisation against batch size",
                        "The proxy's rho = lambda E[S] / E[B] per window, with the operating thresholds of "
                        "the seed's Table 1.", per="scenario")
        kv = F.Figure("kv-budget", "KV budget of one replica",
                      "HBM per replica: the weights, the KV-cache reservation at the batch sizes that matter, and "
                      "what stays free (usable HBM = weights + free_gb).", per="scenario")
        continuous = run.serving == "continuous"
        if continuous:
            latency.title, latency.caption = ("TTFT and TPOT against the cap",
                                              "TTFT and TPOT at the grid's percentile against the cap on running "
                                              "sequences, one line per token budget, each SLO dashed, the knee and "
                                              "the SLO optimum of the frontier; caps where the engine cannot keep up "
                                              "or out of memory marked along the top.")
            util.title, util.caption = ("Load against the cap",
                                        "rho = lambda / capacity_rps per token budget, with the operating "
                                        "thresholds rho_max and rho_min.")
            kv.caption = ("HBM per replica: the weights, the KV cache reserved on average at the answers' points "
                          "(kv_util x C), and the rest of the KV capacity C.")
        lat_col = "ttft_p_ms" if continuous else "latency_ms"
        have_detail = detail.shown > 0 and lat_col in detail.cols and "batch_size" in detail.cols
        brange = ((float(np.nanmin(detail.cols["batch_size"])), float(np.nanmax(detail.cols["batch_size"])))
                  if have_detail else (1.0, 1.0))
        for r, sid in zip(rows, ids):
            m = detail.cols["row_id"] == r["row_id"] if have_detail else None
            pts = {k: v[m] for k, v in detail.cols.items()} if m is not None else None
            html_maps["answers"][sid] = T.cb_answers_html(r) if continuous else T.answers_html(r)
            if pts is not None and len(pts["batch_size"]):
                latency.figs[sid] = F.cb_latency_figure(r, pts, brange) if continuous else F.latency_figure(r, pts, brange)
                if "rho" in pts:
                    util.figs[sid] = F.utilisation_figure(r, pts, brange)
                html_maps["table"][sid] = (T.cb_table(r, pts, detail.source) if continuous
                                           else T.seed_table(r, pts, detail.source))
            else:
                if have_detail and not continuous:
                    latency.figs[sid] = F.latency_figure(r, {k: v[:0] for k, v in detail.cols.items()}, brange,
                                                         f"no feasible point in {detail.source} for this row "
                                                         f"(reason: {r.get('reason')})")
                html_maps["table"][sid] = (f"<p class='note'>No points of this scenario row in {detail.source} "
                                           f"(reason: {r.get('reason')}).</p>")
            kfig = F.cb_kv_figure(r, pts) if continuous else F.kv_figure(r, pts)
            if kfig is not None:
                kv.figs[sid] = kfig
        html_maps["explain"] = _explanations(run, rows, ids, T)
        latency.notes = util.notes = list(detail.notes)
        if not rows:
            latency.note = util.note = kv.note = "optimum.parquet has no rows"
        elif not have_detail:
            latency.note = util.note = ("no per-batch latency columns in points/ or frontier.parquet "
                                        f"({run.serving} serving)")
        if rows and not kv.figs:
            kv.note = "optimum.parquet lacks weights_gb or free_gb" + ("" if continuous else " or kv_gb_per_req")
        figs += [latency, util]

        # ---- action map: per configuration
        action = F.Figure("action-map", "Action map",
                          "The seed's operating rule at each arrival rate and batch size for the selected scenario's "
                          "configuration (its model, GPU, GPUs per replica, context and replicas), one panel per "
                          "batching window.", per="config")
        if rows:
            cells = run.action_cells(scen.cols)
            if cells.shown:
                for key in dict.fromkeys(r["_config"] for r in rows):
                    m = cells.cols["config"] == key
                    if m.any():
                        action.figs[key] = F.action_figure({k: v[m] for k, v in cells.cols.items()})
                action.notes = cells.notes
            else:
                action.note = cells.notes[0] if cells.notes else "no points"
        figs.append(action)

        # ---- across scenarios: frontier, plan, simulator, continuous
        fx, fy = run.frontier_axes()
        frontier = F.Figure("frontier", "Pareto frontiers",
                            ("Each scenario row's frontier over the batcher's knobs: capacity per replica up, "
                             "latency down" if fx == "capacity_rps" else
                             "Each row's frontier: tok/s per GPU up, tok/s per user up (continuous batching)")
                            + "; the knee (star) and the SLO optimum (diamond) of every row. One colour per GPU; "
                              "hover for the scenario.")
        fr = run.frontier()
        if fr.shown:
            frontier.fig = F.frontier_figure(fr.cols, fx, fy, gpu_colour)
            frontier.notes = fr.notes or [f"all {fr.shown:,} frontier points of {fr.rows_total:,} rows"]
        else:
            frontier.note = (fr.notes[0] if fr.notes else "frontier.parquet is empty: no scenario row has a "
                             "feasible point")
        figs.append(frontier)
        figs.append(kv)

        plan_fig = F.Figure("replica-plan", "Replica plan and cost",
                            "For every scenario group, the fewest replicas of the grid's replicas axis that meet the "
                            "SLO with rho <= rho_max (replicas_min), and what that fleet costs per hour (illustrative "
                            "catalog prices).")
        plan = run.replica_plan()
        plan_table = ""
        if plan.shown:
            pf = F.plan_figure(plan.cols, gpu_colour)
            n_none = int(np.sum(~np.isfinite(plan.cols["replicas_min_cost_usd_per_hour"])))
            if pf is not None:
                plan_fig.fig = pf
            else:
                plan_fig.note = "no scenario group meets the SLO at any replica count of the grid"
            plan_fig.notes = list(plan.notes)
            if n_none:
                plan_fig.notes.append(f"{n_none:,} of {plan.shown:,} scenario groups meet the SLO at no replica "
                                      "count of the grid (not drawn; listed in optimum.parquet with a reason)")
            plan_table = T.plan_table(plan.cols, run.varying)
        else:
            plan_fig.note = plan.notes[0] if plan.notes else "no rows"
        figs.append(plan_fig)
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
            figs.append(sched_fig)
        search = run.search()
        search_table = T.search_table(search.cols) if search.shown else ""

        simfig = F.Figure("proxy-sim", "Proxy against simulator",
                          "The analytic estimates against the simulator's measurements of the same points: the "
                          "percentile (with the simulator's 95% half-width) and the mean; on y = x they agree.")
        sim = run.simulated()
        if sim.shown:
            sf = F.sim_figure(sim.cols)
            if sf is not None:
                simfig.fig = sf
                simfig.notes = sim.notes
            else:
                simfig.note = "no simulated point has a finite simulated latency"
        else:
            simfig.note = sim.notes[0]
        figs.append(simfig)

        thr = F.Figure("throughput", "Throughput per GPU against throughput per user",
                       "Continuous batching: every stable point; up and to the right is better.")
        ttl = F.Figure("ttft-tpot", "TTFT and TPOT against load",
                       "Continuous batching: time to first token and time per output token at the grid's "
                       "percentile against the load per replica, one line per configuration; gaps are unstable.")
        if run.serving == "continuous":
            cont = run.continuous()
            if cont.shown:
                thr.fig = F.throughput_figure(cont.cols, gpu_colour)
                ttl.fig = F.ttft_tpot_figure(cont.cols, gpu_colour)
                thr.notes = ttl.notes = cont.notes
                if thr.fig is None:
                    thr.note = "no stable point with finite throughput"
                if ttl.fig is None:
                    ttl.note = "no load column (lambda_per_replica_rps or arrival_rps)"
            else:
                thr.note = ttl.note = cont.notes[0]
        else:
            thr.note = ttl.note = (f"this run uses {run.serving} batching (serving = \"{run.serving}\"); these "
                                   "figures are for continuous batching (serving = \"continuous\")")
        figs += [thr, ttl]

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
        body = T.body_html(figs, plan_table, search_table, scen)
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
    finally:
        run.close()


#: The point a scenario's derivation shows: the first answer the row has.
EXPLAIN_ANSWERS = (("b_max_slo", "the largest batch meeting the SLO"), ("knee", "the frontier's knee"),
                   ("b_latency_opt", "the lowest mean latency"))


def _explanations(run: Run, rows: list[dict[str, Any]], ids: list[str], T: Any) -> dict[str, str]:
    """Per scenario row: the derivation of its chosen point (`ServingModel.derivation`)."""
    from sweep.models import get_model

    try:
        model = get_model(run.serving, run.manifest.get("latency_model"))
    except KeyError:
        return {}
    chosen: dict[str, tuple[int, str]] = {}
    for r, sid in zip(rows, ids):
        for prefix, what in EXPLAIN_ANSWERS:
            pid = r.get(f"{prefix}_point_id")
            if pid is not None and math.isfinite(float(pid)) and float(pid) >= 0:
                chosen[sid] = (int(pid), f"{prefix}: {what}")
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
    """The KV options of the run's grid file (kept in the manifest): block size and reserve."""
    import tomllib

    text = run.manifest.get("grid", {}).get("toml") or run.manifest.get("grid_toml") or ""
    try:
        opts = tomllib.loads(text).get("options", {})
    except tomllib.TOMLDecodeError:
        return {}
    return {k: opts[k] for k in ("block_tokens", "reserve_fraction") if k in opts}


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
    try:
        kaleido.write_fig_from_object_sync(jobs, kopts={"mathjax": False}, cancel_on_error=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReportError(f"--png: kaleido could not render ({first}); it needs Chrome or Chromium installed "
                          "(Debian: apt-get install chromium)") from None
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise ReportError(f"--png: kaleido wrote no {missing[0].name}")
    return paths
