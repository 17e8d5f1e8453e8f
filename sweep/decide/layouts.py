"""Disaggregate or not: each scenario group of a disaggregated grid beside the best
aggregated (continuous) configuration of the same workload (host side, NumPy).

A disaggregated grid (`serving = "disaggregated"`) answers, per scenario group, with the
cheapest (prefill, decode) split meeting every SLO (`sweep.decide.recommend`). To say
whether the split is worth it, the engine also plans the same workload on one pool: the
*aggregated companion* grid (`aggregated_grid`) is continuous serving with

* every workload, step and SLO key the two modes share, with the disaggregated grid's values
  (`SHARED_KEYS`; the GPU kind, the arrival rate, the lengths, the SLOs, percentile,
  rho_max, ...);
* `gpus_per_replica` = every GPUs-per-replica value of either pool;
* `replicas` = 1 up to as many replicas as fit in the largest split's GPUs, so the
  companion never gets more GPUs than the disaggregated grid could use;
* `batch_size` = the decode pool's caps, `max_batched_tokens` = 512 to 8,192 tokens
  (`COMPANION_BUDGETS`: small chunks for a tight TPOT up to the budgets engines ship with)
  and the decode pool's finite budgets;
* the KV policy of the grid's `[options]`, continuous serving's analytic latency model.

Its recommendation per workload (the cheapest across its GPUs-per-replica values, then the
fewest GPUs) lands beside every row of the matching disaggregated group as the
`aggregated_*` columns of optimum.parquet, with the verdict:

    disaggregate = the split is strictly cheaper (cost_usd_per_hour), or only the split
                   meets every SLO; false when one pool is as cheap or cheaper (a tie goes
                   to one pool: no KV transfer, one thing to run), or only it meets them;
                   NULL when neither does within the grid's GPUs.

`gpus_saved` and `usd_per_hour_saved` are the aggregated answer's GPUs and price minus the
split's (positive: disaggregation saves).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sweep.models.base import NO_ANSWER, Column

if TYPE_CHECKING:
    import pyarrow as pa

    from sweep.grid.spec import GridSpec

# The companion is planned and joined to optimum.parquet by `sweep.runner.layouts`.

#: The serving mode that carries a verdict.
DISAGGREGATED = "disaggregated"
#: Keys the companion grid copies from the disaggregated one: the workload, the step
#: coefficients, the dtypes, the SLOs and the decision thresholds (each where the grid has it).
SHARED_KEYS: tuple[str, ...] = (
    "model", "gpu", "arrival_rps", "prompt_tokens", "prompt_cv", "output_tokens", "output_cv", "t_fixed_ms",
    "t_token_ms", "t_ctx_ms", "eta_bw", "eta_flops", "weight_bytes_per_param", "kv_bytes_per_elem", "ttft_slo_ms",
    "tpot_slo_ms", "slo_ms", "percentile", "rho_max", "rho_min", "service_cv",
)
#: The token budgets the companion always tries: from small chunks that keep prompt work out of
#: the decode steps (what an operator tunes for a tight TPOT) to vLLM's and SGLang's usual
#: chunked-prefill budgets (2,048 and 8,192 tokens per step).
COMPANION_BUDGETS: tuple[int, ...] = (512, 1024, 2048, 4096, 8192)
#: At most this many replica counts in the companion (a guard on its size).
MAX_COMPANION_REPLICAS = 512
#: Why a group's verdict is what it is (`layout_reason`).
LAYOUT_REASONS: tuple[str, ...] = ("cheaper", "only_layout_meeting_slo", "same_cost", "neither_meets_slo")
#: Relative tolerance of "as cheap" (prices are sums of catalog prices).
_SAME = 1e-9

# Every layout column is NULL where the aggregated side, or one of the two layouts, has no
# answer (no configuration meets every SLO with rho <= rho_max; `layout_reason` says which).
#: (column, dtype, unit, meaning, NULL rule); the aggregated answer's fields come from the
#: companion's `recommended_*` columns of the same name (`_SOURCE`).
LAYOUT_COLUMNS: tuple[Column, ...] = (
    Column("aggregated_gpu", "dict", "-",
           "Best aggregated configuration of the same workload: its GPU kind (the group's gpu, or a pool's own "
           "prefill_gpu or decode_gpu where the grid names one); meaningful where aggregated_gpus is not NULL."),
    Column("aggregated_gpus_per_replica", "int64", "GPUs",
           "Best aggregated configuration of the same workload (continuous serving, one pool, the companion grid "
           "of docs/disaggregated.md): its GPUs per replica. On every row of the group.", null_when=NO_ANSWER),
    Column("aggregated_replicas", "int64", "replicas", "Best aggregated configuration: its replicas.",
           null_when=NO_ANSWER),
    Column("aggregated_gpus", "int64", "GPUs", "Best aggregated configuration: replicas x GPUs per replica.",
           null_when=NO_ANSWER),
    Column("aggregated_batch_size", "int64", "sequences", "Best aggregated configuration: its running-sequence cap.",
           null_when=NO_ANSWER),
    Column("aggregated_max_batched_tokens", "int64", "tokens",
           "Best aggregated configuration: its token budget per step.", null_when=NO_ANSWER),
    Column("aggregated_ttft_p_ms", "float64", "ms", "Best aggregated configuration: TTFT at the percentile.",
           null_when=NO_ANSWER),
    Column("aggregated_tpot_p_ms", "float64", "ms", "Best aggregated configuration: TPOT at the percentile.",
           null_when=NO_ANSWER),
    Column("aggregated_e2e_p_ms", "float64", "ms", "Best aggregated configuration: E2E at the percentile.",
           null_when=NO_ANSWER),
    Column("aggregated_rho", "float64", "-", "Best aggregated configuration: its utilisation.", null_when=NO_ANSWER),
    Column("aggregated_cost_usd_per_hour", "float64", "USD/h", "Best aggregated configuration: its price per hour.",
           null_when=NO_ANSWER),
    Column("aggregated_cost_usd_per_m_output_tok", "float64", "USD/Mtok",
           "Best aggregated configuration: its price per million output tokens.", null_when=NO_ANSWER),
    Column("disaggregate", "bool", "-",
           "The verdict: true when the group's recommended split is strictly cheaper than the best aggregated "
           "configuration, or only the split meets every SLO; false when one pool is as cheap or cheaper (a tie "
           "goes to one pool), or only it meets them. On every row of the group.",
           null_when=NO_ANSWER),
    Column("layout_reason", "dict", "-",
           "Why: cheaper (the chosen layout costs less) | only_layout_meeting_slo | same_cost (a tie: one pool) | "
           "neither_meets_slo."),
    Column("gpus_saved", "int64", "GPUs",
           "aggregated_gpus - recommended_gpus: the GPUs disaggregation saves (negative: it costs more).",
           null_when=NO_ANSWER),
    Column("usd_per_hour_saved", "float64", "USD/h",
           "aggregated_cost_usd_per_hour - recommended_cost_usd_per_hour: the dollars per hour disaggregation saves.",
           null_when=NO_ANSWER),
)
#: Each aggregated field's column in the companion's optimum table.
_SOURCE: dict[str, str] = {
    "aggregated_replicas": "recommended_replicas",
    "aggregated_gpus": "recommended_gpus",
    "aggregated_batch_size": "recommended_batch",
    "aggregated_max_batched_tokens": "recommended_max_batched_tokens",
    "aggregated_ttft_p_ms": "recommended_ttft_p_ms",
    "aggregated_tpot_p_ms": "recommended_tpot_p_ms",
    "aggregated_e2e_p_ms": "recommended_e2e_p_ms",
    "aggregated_rho": "recommended_rho",
    "aggregated_cost_usd_per_hour": "recommended_cost_usd_per_hour",
    "aggregated_cost_usd_per_m_output_tok": "recommended_cost_usd_per_m_output_tok",
}


def has_layouts(spec_or_serving: GridSpec | str) -> bool:
    """A grid (or serving mode) whose optimum.parquet carries the layout verdict."""
    serving = spec_or_serving if isinstance(spec_or_serving, str) else spec_or_serving.model.serving
    return serving == DISAGGREGATED


def _values(spec: GridSpec, key: str) -> list[Any]:
    return list(spec.axis(key).values)


def _grid_value(values: Sequence[Any], kind: str = "float") -> Any:
    """An axis as a grid value of its parameter's `kind`: a scalar when it has one value."""
    def plain(v: Any) -> Any:
        if isinstance(v, str):
            return v
        return int(v) if kind == "int" and math.isfinite(float(v)) else float(v)

    out = [plain(v) for v in values]
    return out[0] if len(out) == 1 else out


def aggregated_grid(spec: GridSpec) -> dict[str, Any]:
    """The companion grid of a disaggregated `spec`, as a grid document (module docstring)."""
    from sweep.models import get_model

    kinds = {p.key: p.kind for p in get_model("continuous").params}
    keys = {a.key for a in spec.axes}
    grid: dict[str, Any] = {k: _grid_value(_values(spec, k), kinds[k]) for k in SHARED_KEYS if k in keys}
    # one pool may run on any GPU kind either pool of the grid runs on
    kinds_named = [g for k in ("gpu", *spec.model.part_gpu_keys) if k in keys for g in _values(spec, k)]
    grid["gpu"] = _grid_value(list(dict.fromkeys(kinds_named)), "name")
    p_gpus = [int(v) for v in _values(spec, "prefill_gpus_per_replica")]
    d_gpus = [int(v) for v in _values(spec, "decode_gpus_per_replica")]
    most = max(_values(spec, "prefill_replicas")) * max(p_gpus) + max(_values(spec, "decode_replicas")) * max(d_gpus)
    per_replica = sorted(set(p_gpus) | set(d_gpus))
    grid["gpus_per_replica"] = per_replica
    grid["replicas"] = list(range(1, min(int(most) // per_replica[0], MAX_COMPANION_REPLICAS) + 1))
    budgets = {float(b) for b in _values(spec, "decode_max_batched_tokens") if math.isfinite(float(b))}
    grid["max_batched_tokens"] = [int(b) for b in sorted(budgets | {float(b) for b in COMPANION_BUDGETS})]
    grid["batch_size"] = sorted({int(b) for b in _values(spec, "decode_batch_size")})
    o = spec.options
    options = {"serving": "continuous", "kv_allocation": o.kv_allocation, "block_tokens": o.block_tokens,
               "reserve_fraction": o.reserve_fraction}
    return {"name": f"{spec.name}-aggregated", "grid": grid, "options": options,
            "output": {"points": "none"}}


def layout_companion(spec: GridSpec, workload: Mapping[str, Any] | None = None) -> GridSpec:
    """The companion grid, validated (its errors name the disaggregated grid's file);
    `workload` (shared keys -> one value each) narrows it to one workload (`sweep explain`)."""
    from dataclasses import replace

    from sweep.catalog import load_catalog
    from sweep.grid import build
    from sweep.models import get_model

    base = load_catalog()  # with the grid's own entries ([catalog.models.NAME], ...) as resolved
    catalog = replace(base, models={**base.models, **{m.name: m for m in spec.models}},
                      gpus={**base.gpus, **{g.name: g for g in spec.gpus}})
    doc = aggregated_grid(spec)
    if workload:
        kinds = {p.key: p.kind for p in get_model("continuous").params}
        doc["grid"].update({k: _grid_value([v], kinds[k]) for k, v in workload.items() if k in doc["grid"]})
    return build(doc, source=spec.source, text=repr(doc), catalog=catalog)


def _scenario_values(spec: GridSpec, group_id: np.ndarray, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """The value of each of `keys` (scenario axes) for every group id of `spec`."""
    decision = set(spec.model.decisions.decision_axes)
    axes = [a for a in spec.axes if a.key not in decision]
    index = np.unravel_index(np.asarray(group_id, np.int64), [len(a) for a in axes]) if axes else ()
    return {a.key: np.asarray(a.values, dtype=object)[i] for a, i in zip(axes, index) if a.key in keys}


def best_aggregated(companion: GridSpec, optimum: pa.Table) -> dict[tuple[Any, ...], dict[str, float]]:
    """The companion's answer per workload: over its groups' recommendations (one per GPUs
    per replica), the cheapest, then the fewest GPUs, then the cheaper per output token."""
    keys = [k for k in SHARED_KEYS if any(a.key == k for a in companion.axes)]
    rec = optimum.filter(optimum.column("is_recommended"))
    if rec.num_rows == 0:
        return {}
    cols = {name: rec.column(name).to_numpy(zero_copy_only=False) for name in
            ("group_id", "gpus_per_replica", *_SOURCE.values())}
    where = _scenario_values(companion, cols["group_id"], keys)
    best: dict[tuple[Any, ...], dict[str, float]] = {}
    for i in range(rec.num_rows):
        if cols["recommended_cost_usd_per_hour"][i] is None or not np.isfinite(
                float(cols["recommended_cost_usd_per_hour"][i])):
            continue
        key = tuple(where[k][i] for k in keys)
        row = {"aggregated_gpus_per_replica": float(cols["gpus_per_replica"][i])}
        row.update({name: _float(cols[src][i]) for name, src in _SOURCE.items()})
        old = best.get(key)
        if old is None or _order(row) < _order(old):
            best[key] = row
    return best


def _float(v: Any) -> float:
    """A nullable value as float64 (+inf for NULL: no answer, or an unbounded budget)."""
    return math.inf if v is None else float(v)


def _order(row: Mapping[str, float]) -> tuple[float, float, float]:
    """How aggregated answers rank: the cheaper, then the fewer GPUs, then the cheaper per token."""
    return (row["aggregated_cost_usd_per_hour"], row["aggregated_gpus"], row["aggregated_cost_usd_per_m_output_tok"])


def layout_rows(spec: GridSpec, optimum: pa.Table, best: Mapping[tuple[Any, ...], Mapping[str, float]]
                ) -> dict[str, np.ndarray]:
    """The layout columns for every row of a disaggregated optimum table (+inf for NULL;
    `layout_reason` as codes of `LAYOUT_REASONS`, `aggregated_gpu` as codes of the grid's GPU
    names). A group whose pools run on GPU kinds of their own (`prefill_gpu`, `decode_gpu`)
    is compared with the best one pool on any of its kinds."""
    n = optimum.num_rows
    keys = [k for k in SHARED_KEYS if any(a.key == k for a in spec.axes)]
    parts = [k for k in spec.model.part_gpu_keys if any(a.key == k for a in spec.axes)]
    where = _scenario_values(spec, optimum.column("group_id").to_numpy(), [*keys, *parts])
    gpu_code = {g.name: i for i, g in enumerate(spec.gpus)}
    out = {c.name: np.full(n, math.inf) for c in LAYOUT_COLUMNS}
    out["aggregated_gpu"] = np.zeros(n, np.int32)
    reason = np.zeros(n, np.int32)
    rec_cost = np.array([_float(v) for v in optimum.column("recommended_cost_usd_per_hour").to_pylist()])
    rec_gpus = np.array([_float(v) for v in optimum.column("recommended_gpus").to_pylist()])
    at_gpu = keys.index("gpu") if "gpu" in keys else None
    for i in range(n):
        key = [where[k][i] for k in keys]
        agg, agg_gpu = None, None
        kinds = dict.fromkeys([key[at_gpu], *(where[k][i] for k in parts)]) if at_gpu is not None else [None]
        for g in kinds:
            if at_gpu is not None:
                key[at_gpu] = g
            cand = best.get(tuple(key))
            if cand is not None and (agg is None or _order(cand) < _order(agg)):
                agg, agg_gpu = cand, g
        if agg is not None:
            for name, value in agg.items():
                out[name][i] = value
            out["aggregated_gpu"][i] = gpu_code.get(str(agg_gpu), 0)
        split, one = math.isfinite(rec_cost[i]), agg is not None
        if split and one:
            a_cost = agg["aggregated_cost_usd_per_hour"]  # type: ignore[index]
            same = abs(a_cost - rec_cost[i]) <= _SAME * max(a_cost, rec_cost[i])
            out["disaggregate"][i] = float(not same and rec_cost[i] < a_cost)
            reason[i] = LAYOUT_REASONS.index("same_cost" if same else "cheaper")
            out["gpus_saved"][i] = agg["aggregated_gpus"] - rec_gpus[i]  # type: ignore[index]
            out["usd_per_hour_saved"][i] = a_cost - rec_cost[i]
        elif split or one:
            out["disaggregate"][i] = float(split)
            reason[i] = LAYOUT_REASONS.index("only_layout_meeting_slo")
        else:
            reason[i] = LAYOUT_REASONS.index("neither_meets_slo")
    out["layout_reason"] = reason
    return out


# --------------------------------------------------------------------------- display
# What `sweep run`/`show`, `sweep explain` and the report print of the verdict, declared
# here so display code names no serving mode and no column of one mode only.

#: The verdict column: a table that has it carries the layout columns.
VERDICT_COLUMN = "disaggregate"
#: The terminal table's title and its number cells after the verdict and the aggregated
#: configuration: (header, column, digits); "P" in a header becomes the run's percentile.
TABLE_TITLE = ("disaggregate or not, per scenario group: the recommended split against the best aggregated "
               "configuration of the same workload (continuous serving on one pool, within the grid's GPUs)")
TABLE_CELLS: tuple[tuple[str, str, int], ...] = (
    ("aggregated TTFT P ms", "aggregated_ttft_p_ms", 1),
    ("aggregated TPOT P ms", "aggregated_tpot_p_ms", 1),
    ("aggregated USD/h", "aggregated_cost_usd_per_hour", 2),
    ("split USD/h", "recommended_cost_usd_per_hour", 2),
    ("GPUs saved", "gpus_saved", 0),
    ("USD/h saved", "usd_per_hour_saved", 2),
)
#: The text cells' headers (left-aligned): the verdict and the aggregated configuration.
TABLE_TEXT = ("verdict", "aggregated (one pool)")
#: Every column the table reads.
TABLE_COLUMNS: tuple[str, ...] = (
    "group_id", "gpu", "percentile", VERDICT_COLUMN, "layout_reason", "aggregated_gpu", "aggregated_gpus_per_replica",
    "aggregated_replicas",
    "aggregated_batch_size", "aggregated_max_batched_tokens", *(c for _, c, _ in TABLE_CELLS))
#: How `sweep explain` introduces the verdict of a point's group.
EXPLAIN_LEAD = ("disaggregate or not (its scenario group against the best aggregated configuration of the same "
                "workload)")
#: The report: the answers card's title, the figure's id, title and caption, the columns it
#: reads (one row per scenario group) and its two lines (column, name, dash).
CARD_TITLE = "Disaggregate or not (against the best aggregated configuration)"
FIGURE_ID = "layouts"
FIGURE_TITLE = "Disaggregate or not"
FIGURE_CAPTION = ("GPUs needed against the arrival rate: the recommended split of prefill and decode pools "
                  "(solid) and the best aggregated configuration of the same workload, continuous serving on one "
                  "pool (dashed), per workload; a gap is a rate at which that layout meets no SLO within the "
                  "grid's GPUs (optimum.parquet's disaggregate, gpus_saved and aggregated_* columns).")
FIGURE_COLUMNS: tuple[str, ...] = ("recommended_gpus", "recommended_cost_usd_per_hour", "aggregated_gpus",
                                   "aggregated_cost_usd_per_hour", VERDICT_COLUMN, "layout_reason")
FIGURE_LINES: tuple[tuple[str, str, str], ...] = (
    ("recommended_gpus", "split (prefill + decode pools)", "solid"),
    ("aggregated_gpus", "one pool", "dash"),
)


def verdict_cells(row: Mapping[str, Any]) -> list[str]:
    """The terminal table's text cells of one group (`TABLE_TEXT`)."""
    return [verdict_text(row), aggregated_text(row)]


def card_text(row: Mapping[str, Any]) -> str:
    """The report's answers card: the verdict, the aggregated configuration and its price."""
    price = row.get("aggregated_cost_usd_per_hour")
    priced = price is not None and math.isfinite(float(price))
    return f"{verdict_text(row)}; one pool: {aggregated_text(row)}" + (f", ${_num(price, 2)}/h" if priced else "")


def _num(v: Any, digits: int) -> str:
    return f"{float(v):,.{digits}f}"


def verdict_text(row: Mapping[str, Any]) -> str:
    """One group's verdict in words (a row of optimum.parquet with the layout columns): what to
    run, why, and what it saves."""
    reason = str(row["layout_reason"])
    if reason == "neither_meets_slo":
        return "neither layout meets every SLO within the grid's GPUs"
    if not bool(row["disaggregate"]):
        if reason == "only_layout_meeting_slo":
            return "aggregate: only one pool meets every SLO"
        if reason == "same_cost":
            return "aggregate: the split costs the same (one pool is simpler: no KV transfer)"
        if int(row["gpus_saved"]) == 0:
            return f"aggregate: one pool saves {_num(-float(row['usd_per_hour_saved']), 2)} USD/h with as many GPUs"
        return (f"aggregate: one pool saves {_gpus(-int(row['gpus_saved']))}, "
                f"{_num(-float(row['usd_per_hour_saved']), 2)} USD/h")
    if reason == "only_layout_meeting_slo":
        return "disaggregate: only the split meets every SLO"
    if int(row["gpus_saved"]) == 0:  # pools on GPU kinds of their own: cheaper with as many GPUs
        return f"disaggregate: saves {_num(row['usd_per_hour_saved'], 2)} USD/h with as many GPUs"
    return f"disaggregate: saves {_gpus(int(row['gpus_saved']))}, {_num(row['usd_per_hour_saved'], 2)} USD/h"


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def aggregated_text(row: Mapping[str, Any]) -> str:
    """The best aggregated configuration of a row in words, or "none"."""
    gpr = row.get("aggregated_gpus_per_replica")
    if gpr is None or not math.isfinite(float(gpr)):
        return "none"
    budget = row.get("aggregated_max_batched_tokens")
    budget_text = "no limit" if budget is None or not math.isfinite(float(budget)) else f"{int(budget):,}"
    kind = row.get("aggregated_gpu")
    gpu = "GPU" if kind is None or kind == row.get("gpu") else str(kind)
    return (f"{int(row['aggregated_replicas'])} x {int(gpr)} {gpu}, cap {int(row['aggregated_batch_size'])}, "
            f"budget {budget_text}")
