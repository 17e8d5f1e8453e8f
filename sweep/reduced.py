"""Rows of optimum.parquet and frontier.parquet from one evaluated chunk (host side).

The decisions themselves are computed on the device (`sweep.decide`, fused into the chunk
function); this module only gathers the chosen points' columns into table rows.
"""

from __future__ import annotations

import numpy as np

from sweep.columns import ANSWER_FIELDS, ANSWER_MISSING, ANSWERS, ROW_CONSTANT
from sweep.evaluate import Chunk

_ANSWER_INDEX = {
    "b_max_slo": "b_max_slo_idx",
    "b_latency_opt": "b_latency_opt_idx",
    "slo_opt": "slo_opt_idx",
    "knee": "knee_idx",
}


def optimum_rows(chunk: Chunk, row_size: int, n_replicas: int) -> dict[str, np.ndarray]:
    """One row per (scenario group, replicas) row of the chunk."""
    cols, rows = chunk.columns, chunk.rows
    n_rows = len(rows["reason"])
    starts = np.arange(n_rows) * row_size
    pid = cols["point_id"][starts]
    out: dict[str, np.ndarray] = {
        "group_id": pid // (row_size * n_replicas),
        "row_id": pid // row_size,
    }
    for name in ROW_CONSTANT:
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
        for suffix, source, _dtype, _unit in ANSWER_FIELDS:
            name = prefix + suffix if (prefix, suffix) != ("replicas_min", "") else "replicas_min_batch"
            out[name] = np.where(has, cols[source][point], ANSWER_MISSING[source])
    out["method"] = np.zeros(n_rows, dtype=np.int32)
    return out


def frontier_rows(chunk: Chunk, row_size: int, n_replicas: int) -> dict[str, np.ndarray]:
    """Every Pareto point of the chunk's rows, with all point columns and the row's flags."""
    mask = chunk.columns["on_frontier"]
    out = {k: v[mask] for k, v in chunk.columns.items()}
    out["group_id"] = out["point_id"] // (row_size * n_replicas)
    out["row_id"] = out["point_id"] // row_size
    return out
