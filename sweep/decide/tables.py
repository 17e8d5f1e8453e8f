"""The reduced outputs: the columns of optimum.parquet and frontier.parquet (SPEC 6, 9),
and their rows gathered from one evaluated chunk (host side).

The decisions themselves are computed on the device (`sweep.decide.reduce`, fused into the
chunk function); this module declares the answer columns and gathers the chosen points'
columns into table rows.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sweep.models.base import NO_ANSWER, Column, ServingModel

#: The answers of optimum.parquet: (prefix, what it is). Each gets the model's answer fields.
ANSWERS: tuple[tuple[str, str], ...] = (
    ("b_max_slo", "the largest batch with latency_ms <= slo_ms (docs/model.md, decisions); ties: lowest latency"),
    ("b_latency_opt", "the batch minimising e_resp_ms; ties: smallest batch"),
    ("slo_opt", "the most capacity with latency_ms <= slo_ms (the SLO-optimal point); ties: lowest latency"),
    ("knee", "the frontier's knee (docs/model.md, decisions)"),
    ("replicas_min", "at replicas_min: the largest batch meeting the SLO with rho <= rho_max"),
)
_ANSWER_INDEX = {
    "b_max_slo": "b_max_slo_idx",
    "b_latency_opt": "b_latency_opt_idx",
    "slo_opt": "slo_opt_idx",
    "knee": "knee_idx",
}


def answer_name(prefix: str, suffix: str) -> str:
    return prefix + suffix if (prefix, suffix) != ("replicas_min", "") else "replicas_min_batch"


def answer_columns(model: ServingModel, point_columns: tuple[Column, ...] = ()) -> tuple[Column, ...]:
    """Each answer's fields. Every one is NULL where the row has no such answer (`reason`
    says why); a field whose point column can be NULL is also NULL where that point's is
    (its flags are the point's: join on the answer's point_id to read them)."""
    source_null = {c.name: c.null_when for c in (point_columns or model.columns)}
    source_null[model.decisions.latency] = ""  # an answer is feasible: its latency is bounded
    out = []
    for prefix, what in ANSWERS:
        for suffix, source, dtype, unit in model.decisions.answer_fields:
            numeric = dtype in ("float64", "int64")
            null_when = ", ".join(w for w in (NO_ANSWER, source_null.get(source, "")) if w) if numeric else ""
            out.append(Column(answer_name(prefix, suffix), dtype, unit,
                              f"{source} of {what}; NULL when there is none.", null_when=null_when))
    return tuple(out)


def optimum_columns(model: ServingModel, point_columns: tuple[Column, ...]) -> tuple[Column, ...]:
    """optimum.parquet: one row per (scenario group, replicas) (docs/model.md, decisions)."""
    present = {c.name: c for c in point_columns}
    return (
        Column("group_id", "int64", "-", "Scenario group: flat index over every axis except replicas and the row axes."),
        Column("row_id", "int64", "-", "(scenario group, replicas) row: point_id // points per row."),
        *(present[n] for n in model.row_constant if n in present),
        Column("n_points", "int64", "points", "Points in the row (the product of the row axes)."),
        Column("n_feasible", "int64", "points", "Feasible points in the row."),
        Column("n_frontier", "int64", "points", "Pareto points of the row (rows of frontier.parquet)."),
        Column("reason", "dict", "-", "ok, or the first constraint that left no feasible batch: out_of_memory | unstable | proxy_invalid (stable, but the latency estimate is unbounded) | slo_violated."),
        Column("replicas_min", "int64", "replicas", "Per scenario group: the fewest replicas of the grid's replicas axis for which some batch meets the SLO with rho <= rho_max; NULL when none does. On every row of the group.", null_when=NO_ANSWER),
        Column("is_replicas_min", "bool", "-", "This row is at replicas_min."),
        Column("replicas_min_cost_usd_per_hour", "float64", "USD/h", "cost_usd_per_hour at replicas_min (on every row of the group); NULL when there is none.", null_when=NO_ANSWER),
        *answer_columns(model, point_columns),
        Column("method", "dict", "-", "How the answers were found: exact (every point evaluated)."),
    )


FRONTIER_EXTRA: tuple[Column, ...] = (
    Column("group_id", "int64", "-", "Scenario group (see optimum.parquet)."),
    Column("row_id", "int64", "-", "(scenario group, replicas) row this frontier belongs to."),
    Column("is_knee", "bool", "-", "The row's knee: largest capacity_norm - latency_norm over the frontier (docs/model.md, decisions)."),
    Column("is_slo_opt", "bool", "-", "The row's SLO-optimal point: most capacity with latency_ms <= slo_ms."),
)


def frontier_columns(point_columns: tuple[Column, ...]) -> tuple[Column, ...]:
    """frontier.parquet: every point column of the Pareto points, and the row's flags."""
    return (*point_columns, *FRONTIER_EXTRA)


def optimum_rows(model: ServingModel, cols: Mapping[str, np.ndarray], rows: Mapping[str, np.ndarray],
                 row_size: int, n_replicas: int) -> dict[str, np.ndarray]:
    """One row per (scenario group, replicas) row of a chunk (`cols` per point, `rows` per row)."""
    n_rows = len(rows["reason"])
    starts = np.arange(n_rows) * row_size
    pid = cols["point_id"][starts]
    out: dict[str, np.ndarray] = {
        "group_id": pid // (row_size * n_replicas),
        "row_id": pid // row_size,
    }
    for name in model.row_constant:
        if name in cols:
            out[name] = cols[name][starts]
    out["n_points"] = np.full(n_rows, row_size, dtype=np.int64)
    out["n_feasible"] = rows["n_feasible"].astype(np.int64)
    out["n_frontier"] = rows["n_frontier"].astype(np.int64)
    out["reason"] = rows["reason"]
    out["replicas_min"] = rows["replicas_min"]
    out["is_replicas_min"] = rows["is_replicas_min"]
    # The answer at replicas_min lives on one row of each group: broadcast it to the group.
    is_min = rows["is_replicas_min"].reshape(-1, n_replicas)
    min_row = np.argmax(is_min, axis=1) + np.arange(is_min.shape[0]) * n_replicas
    group_has = is_min.any(axis=1)
    at_min_row = np.repeat(min_row, n_replicas)
    has_min = np.repeat(group_has, n_replicas)
    cost = cols["cost_usd_per_hour"][starts]
    out["replicas_min_cost_usd_per_hour"] = np.where(has_min, cost[at_min_row], np.inf)
    picks = {prefix: rows[key] for prefix, key in _ANSWER_INDEX.items()}
    picks["replicas_min"] = np.where(has_min, rows["replicas_ok_idx"][at_min_row], -1)
    pick_start = {prefix: starts for prefix in _ANSWER_INDEX}
    pick_start["replicas_min"] = starts[at_min_row]
    for prefix, _ in ANSWERS:
        idx = picks[prefix]
        has = idx >= 0
        point = np.where(has, pick_start[prefix] + idx, 0)
        for suffix, source, dtype, _unit in model.decisions.answer_fields:
            value = cols[source][point]
            if dtype in ("float64", "int64"):  # +inf in memory where there is none: NULL in the files
                out[answer_name(prefix, suffix)] = np.where(has, value.astype(np.float64), np.inf)
            else:  # a flag or a name: false / the first name where there is none
                out[answer_name(prefix, suffix)] = np.where(has, value, np.zeros_like(value))
    out["method"] = np.zeros(n_rows, dtype=np.int32)
    return out


def frontier_rows(cols: Mapping[str, np.ndarray], row_size: int, n_replicas: int) -> dict[str, np.ndarray]:
    """Every Pareto point of a chunk's rows, with all point columns and the row's flags."""
    mask = cols["on_frontier"]
    out = {k: v[mask] for k, v in cols.items()}
    out["group_id"] = out["point_id"] // (row_size * n_replicas)
    out["row_id"] = out["point_id"] // row_size
    return out
