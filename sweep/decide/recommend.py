"""The recommendation of each scenario group: one configuration a planner can act on, its
price, and the runner-up (host side, NumPy).

A *scenario group* is every point that differs only in the decision axes (the group axes,
e.g. `replicas`, and the row axes: the cap and its knobs); `optimum.parquet` has one row per
(group, group-axis value). Of the group's points that meet every SLO with utilisation
<= rho_max (`counts_for_replicas_min`; with `[uncertainty] risk`, `slo_ok` already needs
`p_slo_breach <= risk`), the **recommendation** is the first in the order

    cost_usd_per_hour, size (replicas), the larger cap, the better SLO-frontier latency,
    point_id

and the **runner-up** the second: the next cheapest distinct configuration (the same price
with a smaller cap, or the next price up). Across groups (one answer over several hardware
choices) `group_order` ranks the recommendations: the cheaper, then at the same price the
one with more room under its SLOs (`slo_use`), then the group order. With one pool, cost
rises with replicas, so the recommendation is the point `replicas_min` reports. `group_reason` says why a group has
none: the furthest any of its rows got through the rules (`REASONS`), so `near_saturation`
where some point meets every SLO but only above rho_max.

`recommendation_columns` declares the columns (on every row of the group, like
`replicas_min`), `recommend_rows` computes them for a chunk of whole groups, and
`recommendation` reads one group's answer back from optimum.parquet's columns (what
`sweep.api.recommendation` returns for a run folder).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sweep.decide.reduce import REASONS
from sweep.decide.verdict import counts_for_replicas_min
from sweep.models.base import NO_ANSWER, UNBOUNDED, Column, DType, ServingModel, band_stem

#: The two answers, as column prefixes.
PREFIXES: tuple[str, ...] = ("recommended", "runner_up")
#: Seconds per hour and tokens (or requests) per million, for the prices.
_HOUR_S = 3600.0
_MILLION = 1e6


def answer_name(prefix: str, suffix: str) -> str:
    """An answer's column: prefix + the answer field's suffix; the cap's own field (suffix "")
    of replicas_min and the recommendation reads `<prefix>_batch`."""
    return prefix + suffix if (prefix, suffix) not in {(p, "") for p in ("replicas_min", *PREFIXES)} \
        else prefix + "_batch"


def _present(point_columns: Sequence[Column]) -> dict[str, Column]:
    return {c.name: c for c in point_columns}


def fields(model: ServingModel, point_columns: Sequence[Column]) -> tuple[tuple[str, str, DType, str, str, str], ...]:
    """What each answer carries: (suffix, source, dtype, unit, meaning, when). `source` is a
    point column copied from the chosen point, or one of the derived prices (`_price_*`)."""
    d, have = model.decisions, _present(point_columns)
    out: list[tuple[str, str, DType, str, str, str]] = []
    for suffix, src, dtype, unit in d.answer_fields:
        out.append((suffix, src, dtype, unit, src, ""))
    for axis in d.group_axes:
        if axis in have:
            out.append((f"_{axis}", axis, have[axis].dtype, have[axis].unit, axis, ""))
    if "replicas" in have and "gpus_per_replica" in have:
        out.append(("_gpus", "_gpus", "int64", "GPUs", "GPUs of the fleet: replicas x gpus_per_replica", ""))
    out.append(("_cost_usd_per_hour", "cost_usd_per_hour", "float64", "USD/h", "cost_usd_per_hour", ""))
    if "arrival_rps" in have:
        out.append(("_cost_usd_per_m_requests", "_price_requests", "float64", "USD",
                    "price per million requests served: cost_usd_per_hour / (arrival_rps x 3600) x 1e6", ""))
    if "cost_usd_per_mtok" in have and "prompt_tokens" in have and "output_tokens" in have:
        out.append(("_cost_usd_per_m_output_tok", "cost_usd_per_mtok", "float64", "USD",
                    "price per million output tokens: cost_usd_per_mtok (cost_usd_per_hour / (output_tok_s x "
                    "replicas x 3600) x 1e6)", ""))
        out.append(("_cost_usd_per_m_total_tok", "_price_total_tok", "float64", "USD",
                    "price per million prompt + output tokens: cost_usd_per_mtok x output_tokens / "
                    "(prompt_tokens + output_tokens) (the same load, counted in every token it moves)", ""))
    for name in ("p_slo_breach", *(f"{band_stem(lat)}_p{q}_ms" for lat, _ in model.slo_checks for q in (5, 50, 95)),
                 "headroom_rps"):
        if name in have:
            c = have[name]
            out.append((f"_{name}", name, c.dtype, c.unit, name, c.when))
    return tuple(out)


def recommendation_columns(model: ServingModel, point_columns: Sequence[Column]) -> tuple[Column, ...]:
    """optimum.parquet's recommendation columns: `is_recommended`, `group_reason`, and each
    answer's fields (docs/outputs.md, the recommendation)."""
    rule = ("the cheapest point of the scenario group meeting every SLO with "
            f"{model.decisions.utilisation} <= rho_max (ties: fewer {model.decisions.size}, the larger "
            f"{model.decisions.cap}, the better {model.decisions.latency})")
    what = {"recommended": f"the recommendation: {rule}",
            "runner_up": "the runner-up: the next point in the recommendation's order (the next cheapest "
                         "distinct configuration)"}
    out = [
        Column("is_recommended", "bool", "-", "This row holds its scenario group's recommendation."),
        Column("group_reason", "dict", "-",
               "ok when the scenario group has a recommendation, else the constraint that binds: the furthest "
               "any of its rows got through the rules (reason): out_of_memory < unstable < proxy_invalid < "
               "slo_violated < near_saturation (some point meets every SLO, but only with "
               f"{model.decisions.utilisation} > rho_max). On every row of the group."),
    ]
    for prefix in PREFIXES:
        for suffix, _src, dtype, unit, meaning, when in fields(model, point_columns):
            nulls = NO_ANSWER if suffix not in {"_headroom_rps"} and not suffix.endswith(("_p5_ms", "_p50_ms",
                                                                                           "_p95_ms")) \
                else f"{NO_ANSWER}, {UNBOUNDED}"
            out.append(Column(answer_name(prefix, suffix), dtype, unit,
                              f"{meaning} of {what[prefix]}; on every row of the group; NULL when there is none.",
                              when, null_when=nulls))
    return tuple(out)


def picks(model: ServingModel, cols: Mapping[str, np.ndarray], group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group of a chunk of whole groups (`cols` per point): the chunk position of the
    recommendation and of the runner-up (-1 where there is none)."""
    d = model.decisions
    n_groups = len(cols["point_id"]) // group_size
    ok = np.asarray(counts_for_replicas_min(cols["feasible"], cols["slo_ok"], cols["_rho_rules"], cols["rho_max"]))
    idx = np.flatnonzero(ok[: n_groups * group_size])
    group = idx // group_size
    keys = (idx, d.latency_sign * cols[d.latency][idx], -cols[d.cap][idx].astype(np.float64),
            cols[d.size][idx].astype(np.float64), cols["cost_usd_per_hour"][idx], group)
    order = idx[np.lexsort(keys)]
    go = order // group_size
    first = np.ones(len(order), dtype=bool)
    first[1:] = go[1:] != go[:-1]
    second = np.zeros(len(order), dtype=bool)
    second[1:] = (go[1:] == go[:-1]) & first[:-1]
    rec = np.full(n_groups, -1, dtype=np.int64)
    run = np.full(n_groups, -1, dtype=np.int64)
    rec[go[first]] = order[first]
    run[go[second]] = order[second]
    return rec, run


def _source(cols: Mapping[str, np.ndarray], src: str, point: np.ndarray) -> np.ndarray:
    """A field's values at the chosen points (the derived prices computed from the point's)."""
    if src == "_gpus":
        return cols["replicas"][point].astype(np.float64) * cols["gpus_per_replica"][point].astype(np.float64)
    if src == "_price_requests":
        return cols["cost_usd_per_hour"][point] / (cols["arrival_rps"][point] * _HOUR_S) * _MILLION
    if src == "_price_total_tok":
        o = cols["output_tokens"][point]
        return cols["cost_usd_per_mtok"][point] * o / (cols["prompt_tokens"][point] + o)
    return cols[src][point]


def recommend_rows(model: ServingModel, cols: Mapping[str, np.ndarray], reasons: np.ndarray, row_size: int,
                   rows_per_group: int, present: Sequence[str]) -> dict[str, np.ndarray]:
    """The recommendation columns for every row of a chunk of whole groups: `cols` per point,
    `reasons` the rows' `reason` codes, `present` the point columns the run writes (the
    planning columns are answered only where present)."""
    group_size = row_size * rows_per_group
    n_rows = len(reasons)
    rec, run = picks(model, cols, group_size)
    out: dict[str, np.ndarray] = {}
    rec_row = np.where(rec >= 0, rec // row_size, -1)
    out["is_recommended"] = np.isin(np.arange(n_rows), rec_row[rec_row >= 0])
    furthest = np.asarray(reasons).reshape(-1, rows_per_group).max(axis=1)
    out["group_reason"] = np.repeat(np.where(rec >= 0, 0, furthest), rows_per_group).astype(np.int32)
    wanted = set(present)
    for prefix, pick in zip(PREFIXES, (rec, run)):
        has = pick >= 0
        point = np.where(has, pick, 0)
        for suffix, src, dtype, _unit, _meaning, _when in fields(model, [c for c in model.columns if c.name in wanted]):
            value = _source(cols, src, point)
            if dtype in ("float64", "int64", "bool"):  # +inf where there is none: NULL in the files
                answer = np.where(has, value.astype(np.float64), np.inf)
            else:
                answer = np.where(has, value, np.zeros_like(value))
            out[answer_name(prefix, suffix)] = np.repeat(answer, rows_per_group)
    return out


# --------------------------------------------------------------------------- reading back


def _plain(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _floats(column: Sequence[Any], rows: np.ndarray) -> np.ndarray:
    """`column` (a list with None for NULL, or a host array) at `rows` as float64, NULL as NaN."""
    if isinstance(column, np.ndarray) and column.dtype != object:
        return column[rows].astype(np.float64)
    return np.asarray([np.nan if column[i] is None else column[i] for i in rows], dtype=np.float64)


def slo_use(table: Mapping[str, Any], model: ServingModel, rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """The recommendation of each of `rows`: its largest latency / SLO ratio over the model's
    SLO checks (how close it runs to its tightest target; 0 where no SLO is set or the answer
    lacks the latency)."""
    at = np.asarray(rows, dtype=np.int64)
    suffix = {src: sfx for sfx, src, *_ in model.decisions.answer_fields}
    worst = np.zeros(len(at))
    for lat, slo in model.slo_checks:
        col = answer_name("recommended", suffix[lat]) if lat in suffix else None
        if col is None or col not in table or slo not in table:
            continue
        v, s = _floats(table[col], at), _floats(table[slo], at)
        ok = np.isfinite(v) & np.isfinite(s) & (s > 0.0)
        worst = np.maximum(worst, np.where(ok, v / np.where(ok, s, 1.0), 0.0))
    return worst


def group_order(table: Mapping[str, Any], model: ServingModel, rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """`rows` (recommendations of different scenario groups) in the order they rank, for the
    answer over several hardware choices and the terminal's "cheapest first": the cheaper, then
    at the same price the one with more room under its SLOs (`slo_use`), then the group order."""
    at = np.asarray(rows, dtype=np.int64)
    cost = _floats(table[answer_name("recommended", "_cost_usd_per_hour")], at)
    cost = np.where(np.isnan(cost), np.inf, cost)
    group = _floats(table["group_id"], at)
    return at[np.lexsort((group, slo_use(table, model, at), cost))]


def recommendation(table: Mapping[str, Sequence[Any]], model: ServingModel,
                   group: int | None = None) -> dict[str, Any] | None:
    """One scenario group's recommendation from optimum.parquet's columns (`table`, e.g.
    `pyarrow.parquet.read_table(path).to_pydict()`; NULL as None): `group` its group_id, or
    None for the cheapest recommendation over every group in `table` (a filtered selection:
    one question over several hardware choices). None when the selection has no such group;
    a named group without a recommendation gives "recommended": None and its `group_reason`.

    Returns {"group_id", "scenario": {row-constant column: value} of the recommendation's row,
    "recommended": {point column: value}, "runner_up": {...} or None, "group_reason"}. Field
    names are point column names (`batch_size`, `max_batched_tokens`, `replicas`, `ttft_p_ms`,
    ...) plus `gpus` and the prices `cost_usd_per_m_requests`, `cost_usd_per_m_output_tok`,
    `cost_usd_per_m_total_tok`. With `group` None the groups rank by `group_order` (the
    cheapest; at the same price the more room under the SLOs), and the runner-up is the next
    group's recommendation (another GPU, tensor-parallel size or model: the alternative a
    planner weighs), with its "group_id"; the best group's own runner-up (often the same
    hardware at the same price with another knob) only where no other group has a
    recommendation.
    """
    names = list(table)
    n = len(table["group_id"]) if "group_id" in table else 0
    flags = table.get("is_recommended", [False] * n)
    at = [i for i in range(n) if flags[i] and (group is None or table["group_id"][i] == group)]
    if not at:
        rows = [i for i in range(n) if table["group_id"][i] == group] if group is not None else []
        if not rows or "group_reason" not in table:
            return None
        return {"group_id": group, "scenario": {k: _plain(table[k][rows[0]]) for k in model.row_constant
                                                if k in names and k not in model.group_axes},
                "recommended": None, "runner_up": None, "group_reason": table["group_reason"][rows[0]]}
    at = [int(i) for i in group_order(table, model, at)]
    best = at[0]

    def answer(prefix: str, i: int) -> dict[str, Any] | None:
        got: dict[str, Any] = {}
        for suffix, src, *_ in fields(model, model.columns):
            col = answer_name(prefix, suffix)
            if col in table:
                key = suffix.lstrip("_") if src.startswith("_") or src == "cost_usd_per_mtok" else src
                got[key] = _plain(table[col][i])
        return None if got.get(model.decisions.cap) is None else got

    scenario = {k: _plain(table[k][best]) for k in model.row_constant if k in names}
    out: dict[str, Any] = {"group_id": _plain(table["group_id"][best]), "scenario": scenario,
                           "recommended": answer("recommended", best), "runner_up": answer("runner_up", best),
                           "group_reason": REASONS[0]}
    if group is None and len(at) > 1:
        other = answer("recommended", at[1])
        if other is not None:
            out["runner_up"] = {**other, "group_id": _plain(table["group_id"][at[1]])}
    return out


#: What the terminal and the report show of an answer beyond its cap, knobs and latencies:
#: role -> (suffix of the answer column, label). A role whose column the run lacks is left out.
SHOWN: tuple[tuple[str, str, str], ...] = (
    ("gpus", "_gpus", "GPUs"),
    ("cost", "_cost_usd_per_hour", "USD/h"),
    ("per_m_output_tok", "_cost_usd_per_m_output_tok", "USD/M out tok"),
    ("per_m_total_tok", "_cost_usd_per_m_total_tok", "USD/M tok"),
    ("per_m_requests", "_cost_usd_per_m_requests", "USD/M req"),
    ("breach", "_p_slo_breach", "P(breach)"),
    ("headroom", "_headroom_rps", "headroom req/s"),
)


def shown_columns(model: ServingModel, prefix: str, names: Sequence[str]) -> list[tuple[str, str, str]]:
    """(role, optimum column, label) of `SHOWN` for answer `prefix` among the columns `names`
    a run wrote; the token prices replace the per-request one where the model counts tokens."""
    have = set(names)
    out = [(role, answer_name(prefix, sfx), label) for role, sfx, label in SHOWN if answer_name(prefix, sfx) in have]
    if any(role == "per_m_output_tok" for role, *_ in out):
        out = [o for o in out if o[0] != "per_m_requests"]
    return out


def band_columns(model: ServingModel, prefix: str, names: Sequence[str]) -> list[tuple[str, str, str]]:
    """(SLO latency, 5th, 95th percentile answer column) of each SLO check whose bands the run wrote."""
    have = set(names)
    out = []
    for lat, _ in model.slo_checks:
        lo, hi = (answer_name(prefix, f"_{band_stem(lat)}_p{q}_ms") for q in (5, 95))
        if lo in have and hi in have:
            out.append((lat, lo, hi))
    return out
