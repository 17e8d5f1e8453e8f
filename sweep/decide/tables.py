"""The reduced outputs: the columns of optimum.parquet and frontier.parquet (SPEC 6, 9),
and their rows gathered from one evaluated chunk (host side).

The decisions themselves are computed on the device (`sweep.decide.reduce`, fused into the
chunk function); this module declares the answer columns and gathers the chosen points'
columns into table rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sweep.decide.layouts import LAYOUT_COLUMNS, has_layouts
from sweep.decide.recommend import answer_name, recommend_rows, recommendation_columns
from sweep.decide.reduce import REASONS, REPLICAS_BANDS
from sweep.decide.verdict import ACTIONS
from sweep.models.base import NO_ANSWER, SERVICE_SOURCES, WHEN_UNCERTAINTY, Column, Decisions, ServingModel


def dictionaries(model_names: Sequence[str], gpu_names: Sequence[str], *,
                 decisions: bool = True, gpu_keys: Sequence[str] = ()) -> dict[str, list[str]]:
    """The values of the dictionary-encoded columns the engine writes: the catalog names a
    grid uses (`gpu` and each of `gpu_keys`, a pool's own GPU, code into `gpu_names`) and
    the point columns' fixed vocabularies, plus (`decisions`) those of optimum.parquet
    (`reason`, `method`; a search's answers carry their own `method`)."""
    out = {
        "model": list(model_names),
        "gpu": list(gpu_names),
        **{key: list(gpu_names) for key in gpu_keys},
        "action": list(ACTIONS),
        "service_source": list(SERVICE_SOURCES),
    }
    if decisions:
        out.update({"reason": list(REASONS), "group_reason": list(REASONS), "method": ["exact"]})
    return out


#: The answers of optimum.parquet, by prefix; each gets the model's answer fields, and
#: `answer_texts` words them in the model's own columns.
ANSWERS: tuple[str, ...] = ("b_max_slo", "b_latency_opt", "slo_opt", "knee", "replicas_min")
_ANSWER_INDEX = {
    "b_max_slo": "b_max_slo_idx",
    "b_latency_opt": "b_latency_opt_idx",
    "slo_opt": "slo_opt_idx",
    "knee": "knee_idx",
}
#: The dynamic batcher's SLO check, the default of `ServingModel.slo_checks`.
_DEFAULT_CHECKS: tuple[tuple[str, str], ...] = (("latency_ms", "slo_ms"),)


def slo_text(checks: tuple[tuple[str, str], ...]) -> str:
    """The SLO test a decision applies, in column names: `latency_ms <= slo_ms`, or for
    several checks `every SLO met (ttft_p_ms <= ttft_slo_ms, ...; an absent one holds)`."""
    tests = ", ".join(f"{lat} <= {slo}" for lat, slo in checks)
    return tests if len(checks) == 1 else f"every SLO met ({tests}; an absent one holds)"


def answer_texts(d: Decisions, checks: tuple[tuple[str, str], ...] = _DEFAULT_CHECKS) -> dict[str, str]:
    """What each answer of optimum.parquet is, in the model's own columns (the decision
    rules of `sweep.decide.reduce`: ties of the SLO answers go to the better second
    frontier objective, of b_latency_opt to the smaller cap)."""
    slo = slo_text(checks)
    better = "lowest" if d.latency_sign > 0 else "highest"
    direction = "down" if d.latency_sign > 0 else "up"
    return {
        "b_max_slo": f"the point with the largest {d.cap} among those with {slo} and {d.utilisation} <= rho_max "
                     f"(docs/model.md, decisions); ties: {better} {d.latency}",
        "b_latency_opt": f"the feasible point with the smallest {d.mean_latency}; ties: smallest {d.cap}",
        "slo_opt": f"the point with the most {d.capacity} among those with {slo} (the SLO-optimal point); "
                   f"ties: {better} {d.latency}",
        "knee": f"the knee of the row's frontier ({d.capacity} up, {d.latency} {direction}; docs/model.md, decisions)",
        "replicas_min": f"the point at replicas_min: the largest {d.cap} with {slo} and {d.utilisation} <= rho_max",
    }


def answer_columns(model: ServingModel, point_columns: tuple[Column, ...] = ()) -> tuple[Column, ...]:
    """Each answer's fields. Every one is NULL where the row has no such answer (`reason`
    says why); a field whose point column can be NULL is also NULL where that point's is
    (its flags are the point's: join on the answer's point_id to read them)."""
    source = {c.name: c for c in (point_columns or model.columns)}
    # An answer is a feasible point: stable, mem_ok and its checked latencies bounded, so
    # those flags never explain an answer's NULL; any other NULL rule of its point column
    # carries over (join on the answer's point_id to read the flag).
    implied = {"stable", "mem_ok"}
    checked = {model.decisions.latency, *(lat for lat, _ in model.slo_checks)}
    texts = answer_texts(model.decisions, model.slo_checks)
    out = []
    for prefix in ANSWERS:
        for suffix, name, dtype, unit in model.decisions.answer_fields:
            col = source.get(name)
            inherited = () if col is None or name in checked else tuple(w for w in col.null_reasons if w not in implied)
            numeric = dtype in ("float64", "int64")
            null_when = ", ".join((NO_ANSWER, *inherited)) if numeric else NO_ANSWER if dtype == "bool" else ""
            out.append(Column(answer_name(prefix, suffix), dtype, unit,
                              f"{name} of {texts[prefix]}; NULL when there is none.", null_when=null_when))
    return tuple(out)


def optimum_columns(model: ServingModel, point_columns: tuple[Column, ...], *,
                    layouts: bool = True) -> tuple[Column, ...]:
    """optimum.parquet: one row per row: a scenario group and one value of every group axis
    (docs/model.md, decisions). A disaggregated grid's table ends with the layout verdict
    (`sweep.decide.layouts`), added once the whole table is known (`layouts` False: without)."""
    present = {c.name: c for c in point_columns}
    d, slo = model.decisions, slo_text(model.slo_checks)
    groups, rows = " and ".join(d.group_axes), ", ".join(("scenario group", *d.group_axes))
    return (
        Column("group_id", "int64", "-",
               f"Scenario group: flat index over every axis except {groups} and the row axes."),
        Column("row_id", "int64", "-", f"({rows}) row: point_id // points per row."),
        *(present[n] for n in model.row_constant if n in present),
        Column("n_points", "int64", "points", "Points in the row (the product of the row axes)."),
        Column("n_feasible", "int64", "points", "Feasible points in the row."),
        Column("n_frontier", "int64", "points", "Pareto points of the row (rows of frontier.parquet)."),
        Column("reason", "dict", "-",
               f"ok, or the first constraint that left no {d.cap} to answer: out_of_memory | unstable | "
               "proxy_invalid (stable, but the latency estimate is unbounded) | "
               f"slo_violated (no feasible point with {slo}) | "
               f"near_saturation (some point meets it, but none with {d.utilisation} <= rho_max)."),
        Column("replicas_min", "int64", size_unit(model),
               f"Per scenario group: the fewest {d.size} of the grid's {' x '.join(d.group_axes)} axis for which "
               f"some {d.cap} has {slo} and {d.utilisation} <= rho_max; NULL when none does. "
               "On every row of the group.",
               null_when=NO_ANSWER),
        Column("is_replicas_min", "bool", "-", "This row is at replicas_min."),
        Column("replicas_min_cost_usd_per_hour", "float64", "USD/h",
               "cost_usd_per_hour at replicas_min (on every row of the group); NULL when there is none.",
               null_when=NO_ANSWER),
        *(replicas_band_columns(d, slo, size_unit(model)) if "p_slo_breach" in present else ()),
        *answer_columns(model, point_columns),
        *recommendation_columns(model, point_columns),
        Column("method", "dict", "-", "How the answers were found: exact (every point evaluated)."),
        *(LAYOUT_COLUMNS if layouts and has_layouts(model.serving) else ()),
    )


def size_unit(model: ServingModel) -> str:
    """The unit of the column replicas_min counts (`Decisions.size`)."""
    return next((c.unit for c in model.columns if c.name == model.decisions.size), "-")


def replicas_band_columns(d: Decisions, slo: str, unit: str = "replicas") -> tuple[Column, ...]:
    """With `[uncertainty]`: the bands of replicas_min over the S scenarios."""
    return tuple(
        Column(f"replicas_min_p{q}", "int64", unit,
               f"{q}th percentile over the [uncertainty] scenarios of the {d.size} each one needs: "
               f"in each scenario, the fewest {d.size} of the grid's {' x '.join(d.group_axes)} axis for which "
               f"some {d.cap} has {slo} and {d.utilisation} <= rho_max in that scenario (nearest rank); "
               f"on every row of the group. NULL when more than {100 - q}% of "
               f"the scenarios need more {d.size} than the axis offers.",
               WHEN_UNCERTAINTY, null_when=NO_ANSWER)
        for q in REPLICAS_BANDS)


def frontier_extra(d: Decisions | None = None,
                   checks: tuple[tuple[str, str], ...] = _DEFAULT_CHECKS) -> tuple[Column, ...]:
    """The columns frontier.parquet adds to a point's, worded in the model's objectives."""
    d = d or Decisions()
    if d.latency_sign > 0:
        knee = f"largest {d.capacity}_norm - {d.latency}_norm over the frontier, each normalised to [0, 1]"
    else:
        knee = f"largest {d.capacity}_norm + {d.latency}_norm over the frontier, each normalised to [0, 1]"
    return (
        Column("group_id", "int64", "-", "Scenario group (see optimum.parquet)."),
        Column("row_id", "int64", "-",
               f"({', '.join(('scenario group', *d.group_axes))}) row this frontier belongs to."),
        Column("is_knee", "bool", "-", f"The row's knee: {knee} (docs/model.md, decisions)."),
        Column("is_slo_opt", "bool", "-",
               f"The row's SLO-optimal point: the most {d.capacity} with {slo_text(checks)}."),
    )


#: frontier.parquet's own columns for the dynamic batcher.
FRONTIER_EXTRA: tuple[Column, ...] = frontier_extra()


def frontier_columns(point_columns: tuple[Column, ...], model: ServingModel | None = None) -> tuple[Column, ...]:
    """frontier.parquet: every point column of the Pareto points, and the row's flags."""
    extra = frontier_extra(model.decisions, model.slo_checks) if model is not None else FRONTIER_EXTRA
    return (*point_columns, *extra)


def optimum_rows(model: ServingModel, cols: Mapping[str, np.ndarray], rows: Mapping[str, np.ndarray],
                 row_size: int, rows_per_group: int) -> dict[str, np.ndarray]:
    """One row per row of a chunk (a scenario and one value of every group axis; `cols` per
    point, `rows` per row)."""
    n_rows = len(rows["reason"])
    starts = np.arange(n_rows) * row_size
    pid = cols["point_id"][starts]
    out: dict[str, np.ndarray] = {
        "group_id": pid // (row_size * rows_per_group),
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
    is_min = rows["is_replicas_min"].reshape(-1, rows_per_group)
    min_row = np.argmax(is_min, axis=1) + np.arange(is_min.shape[0]) * rows_per_group
    group_has = is_min.any(axis=1)
    at_min_row = np.repeat(min_row, rows_per_group)
    has_min = np.repeat(group_has, rows_per_group)
    cost = cols["cost_usd_per_hour"][starts]
    out["replicas_min_cost_usd_per_hour"] = np.where(has_min, cost[at_min_row], np.inf)
    for q in REPLICAS_BANDS:
        if f"replicas_min_p{q}" in rows:
            out[f"replicas_min_p{q}"] = rows[f"replicas_min_p{q}"]
    picks = {prefix: rows[key] for prefix, key in _ANSWER_INDEX.items()}
    picks["replicas_min"] = np.where(has_min, rows["replicas_ok_idx"][at_min_row], -1)
    pick_start = {prefix: starts for prefix in _ANSWER_INDEX}
    pick_start["replicas_min"] = starts[at_min_row]
    for prefix in ANSWERS:
        idx = picks[prefix]
        has = idx >= 0
        point = np.where(has, pick_start[prefix] + idx, 0)
        for suffix, source, dtype, _unit in model.decisions.answer_fields:
            value = cols[source][point]
            if dtype in ("float64", "int64", "bool"):  # +inf in memory where there is none: NULL in the files
                out[answer_name(prefix, suffix)] = np.where(has, value.astype(np.float64), np.inf)
            else:  # a flag or a name: false / the first name where there is none
                out[answer_name(prefix, suffix)] = np.where(has, value, np.zeros_like(value))
    out.update(recommend_rows(model, cols, rows["reason"], row_size, rows_per_group,
                              [c.name for c in model.columns if c.name in cols]))
    out["method"] = np.zeros(n_rows, dtype=np.int32)
    return out


def frontier_rows(cols: Mapping[str, np.ndarray], row_size: int, rows_per_group: int) -> dict[str, np.ndarray]:
    """Every Pareto point of a chunk's rows, with all point columns and the row's flags."""
    mask = cols["on_frontier"]
    out = {k: v[mask] for k, v in cols.items()}
    out["group_id"] = out["point_id"] // (row_size * rows_per_group)
    out["row_id"] = out["point_id"] // row_size
    return out
