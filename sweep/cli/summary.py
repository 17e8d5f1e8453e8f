"""The terminal summary `sweep run` prints (rich tables; plain text when not a terminal), and
the same from a finished run folder (`sweep show`).

A run ends with its answers, whatever its size: the counts; for a grid of at most 64 points
(or a `sweep show` selection that small) the per-point table of the dynamic batcher, with the
latency the SLO was checked against beside both proxy estimates; the decisions per scenario
group (`sweep.cli.answers`); a search's best trials; and where the full tables are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.cli.answers import TOP, RunFolder, fmt, latency_label, print_answers, to_host
from sweep.decide.verdict import ACTIONS
from sweep.grid.spec import GridSpec
from sweep.runner.run import RunResult

#: Columns continuous serving's per-point table reads.
CONTINUOUS_TABLE_COLUMNS = ("batch_size", "max_batched_tokens", "mean_running", "step_mean_ms", "ttft_p_ms",
                            "tpot_p_ms", "e2e_p_ms", "tok_s_per_gpu", "tok_s_per_user", "rho", "stable", "action")
#: Columns the per-point table reads (the dynamic batcher's); a model without them has none.
POINT_TABLE_COLUMNS = ("batch_size", "t_svc_ms", "capacity_rps", "rho", "stable", "e_wait_ms", "e_batch_ms",
                       "e_svc_ms", "e_resp_ms", "p_gauss_ms", "p_exp_ms", "latency_ms", "little_l", "in_service",
                       "in_queue", "action")


def _fmt(x: float, digits: int = 1) -> str:
    x = float(x)  # Python floats: arithmetic and formatting never raise a NumPy RuntimeWarning
    if math.isnan(x):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def make_console(console: Console | None = None) -> Console:
    if console is None:
        console = Console(highlight=False)
        if not console.is_terminal:  # logs and pipes: never truncate the table
            console = Console(highlight=False, width=200)
    return console


def print_summary(spec: GridSpec, result: RunResult, console: Console | None = None, top: int = TOP) -> None:
    console = make_console(console)
    m = result.manifest
    if result.skipped:
        console.print(f"[bold]{escape(spec.name)}[/bold]: already complete in {escape(str(result.out_dir))} "
                      f"(same grid, version and settings); nothing to do. --force runs it again.")
    else:
        console.print(_headline(spec.name, m, result.feasible, str(result.out_dir), spec.service_source,
                                spec.options.latency_model))
        if result.rows is not None:
            rows = _decoded(spec, result.rows)
            q = spec.axis("percentile").values if "percentile" in {a.key for a in spec.axes} else []
            row_axes = (spec.model.decisions.cap,) if spec.model.serving == "dynamic" else spec.model.row_axes
            varying = [a.key for a in spec.axes if len(a) > 1 and a.key not in row_axes]
            point_table(rows, varying, q, spec.options.latency_model, console)
    _answers(result.out_dir, console, top)
    counts = ", ".join(f"{a} {result.action_counts[a]:,}" for a in ACTIONS if result.action_counts.get(a))
    console.print(f"actions: {counts}")


def _headline(name: str, m: dict[str, Any], feasible: int, out_dir: str, service_source: str, latency_model: str) -> str:
    rows = m["rows"]
    shard = m.get("shard", {})
    points = rows.get("shard_points", rows["grid_points"])
    of = f" (shard {shard['index']} of {shard['count']} of a {rows['grid_points']:,}-point grid)" if shard.get("count", 1) > 1 else ""
    t = m.get("timings_s", {})
    return (f"[bold]{escape(name)}[/bold]: {points:,} points{of}, {feasible:,} feasible, "
            f"{rows['points_written']:,} written to {escape(out_dir)}/points in {t.get('total', 0.0):.2f} s "
            f"({t.get('points_per_s', 0.0):,.0f} points/s; service times {service_source}, latency {latency_model})")


def _answers(out_dir: Any, console: Console, top: int) -> None:
    try:  # the run is finished and published: printing its answers must not fail it
        print_answers(RunFolder.open(out_dir), console, top)
    except Exception as exc:
        console.print(f"(the answers could not be printed: {exc}; `sweep show {out_dir}` reads them)", markup=False)


def _decoded(spec: GridSpec, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """In-memory rows with their names: model, gpu and action codes -> strings."""
    out = dict(rows)
    names = {"model": [m.name for m in spec.models], "gpu": [g.name for g in spec.gpus], "action": list(ACTIONS)}
    for key, table in names.items():
        if key in out:
            out[key] = np.asarray(table, dtype=object)[np.asarray(out[key], dtype=np.int64)]
    return out


def show_run(run: RunFolder, console: Console | None = None, top: int = TOP) -> None:
    """`sweep show`: the same summary, read from a finished run's files."""
    console = make_console(console)
    m = run.manifest
    rows = m["rows"]
    name = m.get("grid_name", run.path.name)
    console.print(_headline(name, m, rows.get("feasible", 0), str(run.path), m.get("service_source", "-"),
                            run.latency_model).replace(" in ", " (a finished run) in ", 1))
    if run.filters:
        console.print("filters: " + ", ".join(f"{k}={v}" for k, v in run.filters.items()), markup=False)
    points = run.points()
    if points is not None and points.num_rows:
        host = to_host(points)
        q: Any = np.unique(host["percentile"]) if "percentile" in host else []
        shown = ("replicas", *run.model.decisions.knobs) if run.model.serving == "dynamic" else ("replicas",)
        varying = [k for k in run.varying if k in host] + [k for k in shown if k in host and len(np.unique(host[k])) > 1]
        point_table(host, varying, q, run.latency_model, console)
    print_answers(run, console, top)
    actions = rows.get("actions", {})
    console.print("actions (whole run): " + ", ".join(f"{a} {actions[a]:,}" for a in ACTIONS if actions.get(a)))


def point_table(rows: dict[str, np.ndarray], varying: Sequence[str], percentile: Any,
                latency_model: str, console: Console) -> None:
    """The per-point table (model, gpu and action as names): the dynamic batcher's, or
    continuous serving's when the rows have its columns."""
    if all(c in rows for c in CONTINUOUS_TABLE_COLUMNS):
        continuous_table(rows, varying, percentile, latency_model, console)
        return
    if not all(c in rows for c in POINT_TABLE_COLUMNS):
        return
    q = [float(v) for v in percentile]
    qlabel = f"P{100 * q[0]:g}" if len(q) == 1 else "P(q)"
    checked = latency_label(latency_model, q)
    extra = latency_model not in ("gaussian", "exponential")  # the checked latency is neither proxy estimate
    t = Table(title="per point (times in ms; rho as %)", title_justify="left")
    for key in varying:
        t.add_column(key, justify="right")
    names = ["B", "T_svc", "req/s", "rho", "E[W]", "E[T_batch]", "E[T_svc]", "E[T]", f"{qlabel} gauss", f"{qlabel} exp"]
    if extra:
        names.append(checked)
    for name in (*names, "L", "in svc", "in queue", "action"):
        t.add_column(name, justify="right")
    order = np.argsort(rows["point_id"], kind="stable") if "point_id" in rows else np.arange(len(rows["batch_size"]))
    for i in order:
        cells = [escape(_cell(rows[key][i])) for key in varying]
        rho = float(rows["rho"][i])
        rho_txt = f"{100.0 * rho:.1f}%" + ("" if rows["stable"][i] else " (unstable)")
        cells += [f"{int(rows['batch_size'][i])}", _fmt(rows["t_svc_ms"][i]), _fmt(rows["capacity_rps"][i]), rho_txt,
                  _fmt(rows["e_wait_ms"][i]), _fmt(rows["e_batch_ms"][i]), _fmt(rows["e_svc_ms"][i]),
                  _fmt(rows["e_resp_ms"][i]), _fmt(rows["p_gauss_ms"][i]), _fmt(rows["p_exp_ms"][i])]
        if extra:
            cells.append(_fmt(rows["latency_ms"][i]))
        cells += [_fmt(rows["little_l"][i], 2), _fmt(rows["in_service"][i], 2), _fmt(rows["in_queue"][i], 2),
                  str(rows["action"][i])]
        t.add_row(*cells)
    console.print(t)
    console.print(f"action and SLO checked against {checked} (latency_ms)", markup=False)
    _b_min_lines(rows, console)


def continuous_table(rows: dict[str, np.ndarray], varying: Sequence[str], percentile: Any,
                     latency_model: str, console: Console) -> None:
    """Continuous serving, per point: the knobs, the step, the percentiles the SLOs check,
    throughput, load and action; then which SLOs were checked against which estimate."""
    q = [float(v) for v in percentile]
    ql = f"P{100 * q[0]:g}" if len(q) == 1 else "P(q)"
    t = Table(title="per point (times in ms; N = cap on running sequences, M = tokens per step)", title_justify="left")
    for key in varying:
        t.add_column(key, justify="right")
    for name in ("N", "M", "running", "step", f"TTFT {ql}", f"TPOT {ql}", f"E2E {ql}", "tok/s/GPU", "tok/s/user",
                 "rho", "action"):
        t.add_column(name, justify="right")
    order = np.argsort(rows["point_id"], kind="stable") if "point_id" in rows else np.arange(len(rows["batch_size"]))
    for i in order:
        cells = [escape(_cell(rows[key][i])) for key in varying]
        budget = float(rows["max_batched_tokens"][i])
        rho = float(rows["rho"][i])
        cells += [f"{int(rows['batch_size'][i])}", "inf" if math.isinf(budget) else f"{budget:.0f}",
                  _fmt(rows["mean_running"][i], 1), _fmt(rows["step_mean_ms"][i], 2), _fmt(rows["ttft_p_ms"][i]),
                  _fmt(rows["tpot_p_ms"][i], 2), _fmt(rows["e2e_p_ms"][i]), _fmt(rows["tok_s_per_gpu"][i]),
                  _fmt(rows["tok_s_per_user"][i]),
                  ("-" if math.isinf(rho) else f"{100.0 * rho:.1f}%") + ("" if rows["stable"][i] else " (unstable)"),
                  str(rows["action"][i])]
        t.add_row(*cells)
    console.print(t)
    console.print(f"action and SLOs checked against the {latency_label(latency_model, q)} estimates: "
                  f"{continuous_slos(rows)}", markup=False)


def continuous_slos(rows: Mapping[str, Any]) -> str:
    """The SLOs a continuous grid sets, e.g. `ttft_p_ms <= 1500 ms, tpot_p_ms <= 60 ms`
    (an SLO of inf is none)."""
    parts = []
    for lat, slo in (("ttft_p_ms", "ttft_slo_ms"), ("tpot_p_ms", "tpot_slo_ms"), ("e2e_p_ms", "slo_ms")):
        if slo not in rows:
            continue
        values = sorted({float(v) for v in np.atleast_1d(rows[slo]) if math.isfinite(float(v))})
        if values:
            parts.append(f"{lat} <= " + ", ".join(f"{v:g}" for v in values[:4]) + (" ..." if len(values) > 4 else "")
                         + " ms")
    return ", ".join(parts) or "none"


def _cell(v: Any) -> str:
    if isinstance(v, str):
        return v
    v = float(v)
    return "inf" if math.isinf(v) else f"{v:g}"


def _b_min_lines(rows: dict[str, np.ndarray], console: Console) -> None:
    """B_min does not depend on the batch size: one line per distinct scenario (at most 8)."""
    needed = ("lambda_per_replica_rps", "t_fixed_ms", "t_req_ms", "rho_target", "b_min_rho_target", "b_min_rho_target_int",
              "b_min_stable", "b_min_stable_int", "kv_gb_per_req", "weights_gb", "free_gb", "b_mem_max")
    if not all(c in rows for c in needed):
        return
    seen = set()
    for i in range(len(rows["batch_size"])):
        scenario = (float(rows["lambda_per_replica_rps"][i]), float(rows["t_fixed_ms"][i]), float(rows["t_req_ms"][i]),
                    float(rows["rho_target"][i]))
        if scenario in seen:
            continue
        seen.add(scenario)
        console.print(
            f"lambda {scenario[0]:g} req/s per replica, T_fixed {scenario[1]:g} ms, t_req {scenario[2]:g} ms: "
            f"B_min(rho_target={scenario[3]:g}) = {_fmt(rows['b_min_rho_target'][i], 2)} -> {fmt(rows['b_min_rho_target_int'][i], 0)}; "
            f"B_min stable = {_fmt(rows['b_min_stable'][i], 2)} -> {fmt(rows['b_min_stable_int'][i], 0)}; "
            f"KV {float(rows['kv_gb_per_req'][i]):.2f} GB/request, weights {float(rows['weights_gb'][i]):.0f} GB, "
            f"free {float(rows['free_gb'][i]):.0f} GB, at most {int(rows['b_mem_max'][i])} requests in memory"
        )
        if len(seen) >= 8:
            break
