"""The terminal view of a replica schedule (`sweep plan`, and `sweep run` on a grid with
[schedule]): per hour the rate, the replicas required and planned, GPU-hours and cost, and
the day's saving against the flat peak-sized fleet."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from sweep.runner.run import SCHEDULE_FILE

#: Schedule groups printed in full; the rest get one line each.
FULL_GROUPS = 2


def _n(x: float | None, digits: int = 0) -> str:
    """A cell: NULL (no plan, no flat fleet) or +inf reads `-` / `inf`."""
    if x is None:
        return "-"
    x = float(x)
    if math.isinf(x):
        return "inf"
    return f"{x:,.{digits}f}"


def _group_label(row: dict) -> str:
    return f"{row['model']} on {row['gpus_per_replica']} x {row['gpu']}"


def schedule_lines(out_dir: str | Path) -> list[dict]:
    """schedule.parquet's rows as dicts (small: one per schedule group and hour)."""
    return pq.read_table(Path(out_dir) / SCHEDULE_FILE).to_pylist()


def saving_line(first: dict) -> str:
    """One group's day: the plan's cost against the flat fleet's."""
    if not first["schedule_ok"]:
        flat = first["flat_replicas"]
        bad = "an hour no replica count of the grid serves" if flat is None or math.isinf(flat) else "the ramp"
        return f"no schedule meets the SLO every hour ({bad}); widen the replicas axis or relax the ramp"
    return (f"plan {_n(first['gpu_hours_per_day'], 1)} GPU-h/day, ${_n(first['cost_usd_per_day'], 2)}/day; "
            f"flat {_n(first['flat_replicas'])} replicas {_n(first['flat_gpu_hours_per_day'], 1)} GPU-h/day, "
            f"${_n(first['flat_cost_usd_per_day'], 2)}/day; saving ${_n(first['saving_usd_per_day'], 2)}/day "
            f"({100 * first['saving_frac']:.1f}%)")


def print_schedule(out_dir: str | Path, console: Console | None = None, full: bool = True) -> None:
    if console is None:
        console = Console(highlight=False)
        if not console.is_terminal:
            console = Console(highlight=False, width=200)
    rows = schedule_lines(out_dir)
    groups: dict[int, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["schedule_group_id"], []).append(r)
    for k, (gid, hours) in enumerate(groups.items()):
        first = hours[0]
        label = f"schedule group {gid}: {_group_label(first)}"
        if not full or k >= FULL_GROUPS:
            console.print(f"{label}: {saving_line(first)}")
            continue
        table = Table(title=label, title_justify="left")
        for name in ("hour", "rate req/s", "required", "replicas", "started", "GPU-h", "cost $"):
            table.add_column(name, justify="right")
        for r in hours:
            hour = f"{r['hour']:d}" if len(hours) == 24 else f"d{r['day']} {r['hour_of_day']:02d}"
            table.add_row(hour, _n(r["arrival_rps"], 1), _n(r["replicas_required"]), _n(r["replicas"]),
                          _n(r["replicas_started"]), _n(r["gpu_hours"], 2), _n(r["cost_usd"], 2))
        console.print(table)
        console.print(saving_line(first))
