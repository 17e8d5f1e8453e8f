"""The terminal summary `sweep run` prints (rich tables; plain text when not a terminal), and
the same from a finished run folder (`sweep show`).

A run ends with its answers, whatever its size: the counts; for a grid of at most 64 points
(or a `sweep show` selection that small) the serving model's per-point table
(`Views.point_table`, e.g. the seed's table) and the latency its SLOs were checked against;
the decisions per scenario group
(`sweep.cli.answers`); a search's best trials; and where the full tables are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.cli.answers import TOP, RunFolder, latency_label, print_answers, to_host
from sweep.decide.verdict import ACTIONS
from sweep.grid.spec import GridSpec
from sweep.models import ServingModel
from sweep.models.views import Cell, Note
from sweep.runner.run import RunResult

#: Lines of a per-point table's note (one per distinct scenario) printed at most.
NOTE_LINES = 8


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
            shown = _table_columns(spec.model)
            varying = [a.key for a in spec.axes if len(a) > 1 and a.key not in shown]
            point_table(rows, varying, q, spec.model, spec.model.views.latency_name(spec.options.latency_model),
                        console)
    _answers(result.out_dir, console, top)
    counts = ", ".join(f"{a} {result.action_counts[a]:,}" for a in ACTIONS if result.action_counts.get(a))
    console.print(f"actions: {counts}")


def _headline(name: str, m: dict[str, Any], feasible: int, out_dir: str, service_source: str,
              latency_model: str) -> str:
    rows = m["rows"]
    shard = m.get("shard", {})
    points = rows.get("shard_points", rows["grid_points"])
    of = (f" (shard {shard['index']} of {shard['count']} of a {rows['grid_points']:,}-point grid)"
          if shard.get("count", 1) > 1 else "")
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
    gpus = [g.name for g in spec.gpus]
    names = {"model": [m.name for m in spec.models], "gpu": gpus, **{k: gpus for k in spec.model.part_gpu_keys},
             "action": list(ACTIONS)}
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
        table = _table_columns(run.model)
        shown = [k for k in (*run.model.group_axes, *run.model.row_axes) if k not in table]
        varying = ([k for k in run.varying if k in host]
                   + [k for k in shown if k in host and len(np.unique(host[k])) > 1])
        point_table(host, varying, q, run.model, run.latency_name, console)
    print_answers(run, console, top)
    actions = rows.get("actions", {})
    console.print("actions (whole run): " + ", ".join(f"{a} {actions[a]:,}" for a in ACTIONS if actions.get(a)))


def _table_columns(model: ServingModel) -> set[str]:
    """The columns the model's per-point table shows (an axis among them is no `varying` column)."""
    table = model.views.point_table
    return set(table.columns()) if table is not None else set()


def point_table(rows: dict[str, np.ndarray], varying: Sequence[str], percentile: Any, model: ServingModel,
                latency_name: str, console: Console) -> None:
    """The serving model's per-point table (`Views.point_table`; model, gpu and action as
    names), when the rows have its columns; then which SLOs were checked against which
    estimate, and the table's note once per distinct scenario."""
    table = model.views.point_table
    if table is None or not table.cells or not all(c in rows for c in (*table.columns(), "action")):
        return
    q = [float(v) for v in percentile]
    qlabel = f"P{100 * q[0]:g}" if len(q) == 1 else "P(q)"
    checked = latency_label(latency_name, q)
    t = Table(title=table.title, title_justify="left")
    for name in (*varying, *(c.header.format(q=qlabel, checked=checked) for c in table.cells), "action"):
        t.add_column(name, justify="right")
    n = len(rows[table.cells[0].column])
    order = np.argsort(rows["point_id"], kind="stable") if "point_id" in rows else np.arange(n)
    for i in order:
        cells = [escape(_cell(rows[key][i])) for key in varying]
        cells += [_cell_text(c, rows, int(i)) for c in table.cells]
        t.add_row(*cells, str(rows["action"][i]))
    console.print(t)
    checks = model.slo_checks
    if len(checks) == 1:
        console.print(f"action and SLO checked against {checked} ({checks[0][0]})", markup=False)
    else:
        console.print(f"action and SLOs checked against the {checked} estimates: {slos_text(rows, checks)}",
                      markup=False)
    if table.note is not None:
        _note_lines(rows, n, table.note, console)


def _cell_text(cell: Cell, rows: Mapping[str, np.ndarray], i: int) -> str:
    """One cell of the terminal's per-point table: `inf` where unbounded, `-` where missing."""
    v = float(rows[cell.column][i])  # a Python float: never a NumPy RuntimeWarning
    if cell.percent:
        text = "-" if not math.isfinite(v) else f"{100.0 * v:.1f}%"
    elif not math.isfinite(v):
        text = "-" if math.isnan(v) else (cell.undefined or "inf" if v > 0 else "-inf")
    else:
        text = cell.fmt.format(v) if cell.fmt else f"{v:.{cell.digits}f}"
    if cell.flag and not rows[cell.flag][i]:
        text += cell.flag_text
    return text


def slos_text(rows: Mapping[str, Any], checks: Sequence[tuple[str, str]]) -> str:
    """The SLOs a grid sets (`checks`: the model's (latency, SLO column) pairs), e.g.
    `<latency> <= 1500 ms, <another latency> <= 60, 80 ms` (an SLO of inf is none)."""
    parts = []
    for lat, slo in checks:
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


def _note_lines(rows: Mapping[str, np.ndarray], n: int, note: Note, console: Console) -> None:
    """The table's note, once per distinct scenario (its `key` columns), at most NOTE_LINES."""
    if not all(c in rows for c in note.needs):
        return
    seen = set()
    for i in range(n):
        scenario = tuple(float(rows[k][i]) for k in note.key)
        if scenario in seen:
            continue
        seen.add(scenario)
        console.print(note.text({k: rows[k][i] for k in note.needs}))
        if len(seen) >= NOTE_LINES:
            break
