"""The public column contract of `points/` (SPEC 9): names, types, units, meanings.

This table is the single source of truth: the writer builds the Parquet schema from it,
each field carries its unit and meaning as Parquet field metadata, and the README's column
reference is generated from it (`python -m sweep.columns`). Types are BI-safe: float64,
int64, bool, and dictionary-encoded strings; no unsigned integers, no nested types. `+inf`
stays `+inf`, so integer-valued quantities that can be infinite are float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

DType = Literal["float64", "int64", "bool", "dict"]


@dataclass(frozen=True)
class Column:
    name: str
    dtype: DType
    unit: str
    doc: str
    when: str = ""  # empty: always present; else the condition under which it is written


_ROOFLINE = "service_source = roofline"
_SIM = "the grid simulates (latency_model = simulated, or a [simulation] table)"
_BATCHER = "latency_model = batcher"

POINT_COLUMNS: tuple[Column, ...] = (
    Column("point_id", "int64", "-", "Flat index of the point in the grid (row-major over the axes in canonical order); stable across runs of the same grid file."),
    # ---- scenario axes
    Column("model", "dict", "-", "Model catalog name."),
    Column("gpu", "dict", "-", "GPU catalog name."),
    Column("gpus_per_replica", "int64", "GPUs", "GPUs per replica (tensor parallel degree)."),
    Column("seq_len", "int64", "tokens", "S_max: sequence length a request may reach (contiguous KV reservation)."),
    Column("mean_seq_len", "float64", "tokens", "S_mean: mean sequence length (paged KV reservation; roofline KV read)."),
    Column("arrival_rps", "float64", "requests/s", "Total arrival rate for the fleet."),
    Column("replicas", "int64", "replicas", "Replicas sharing the load (random split)."),
    Column("lambda_per_replica_rps", "float64", "requests/s", "Per-replica arrival rate lambda = arrival_rps / replicas; all queueing uses it."),
    Column("batch_size", "int64", "requests", "B, the batch cap B_max when a window is set."),
    Column("batch_window_ms", "float64", "ms", "Batching window T_max; +inf = full-batch regime."),
    Column("t_fixed_ms", "float64", "ms", "T_fixed of T_svc(B) = T_fixed + t_req B (seed eq. 1)."),
    Column("t_req_ms", "float64", "ms", "t_req, marginal service time per request in a batch."),
    Column("service_source", "dict", "-", "Where T_fixed and t_req came from: given | fitted | roofline."),
    Column("eta_bw", "float64", "-", "Roofline HBM-bandwidth efficiency.", _ROOFLINE),
    Column("eta_flops", "float64", "-", "Roofline compute efficiency.", _ROOFLINE),
    Column("tokens_per_request", "float64", "tokens", "Roofline: new tokens per request in one forward pass.", _ROOFLINE),
    Column("weight_bytes_per_param", "float64", "bytes", "Weights dtype size (fp16 2, fp8 1, int4 0.5)."),
    Column("kv_bytes_per_elem", "float64", "bytes", "KV-cache dtype size."),
    Column("slo_ms", "float64", "ms", "Latency SLO at `percentile`."),
    Column("percentile", "float64", "-", "Percentile q of the SLO (0.99 = P99)."),
    Column("rho_target", "float64", "-", "Target utilisation for b_min_rho_target (seed eq. 2)."),
    Column("rho_max", "float64", "-", "Near-saturation threshold (action, replicas_min)."),
    Column("rho_min", "float64", "-", "Over-provisioning threshold (action)."),
    Column("workers", "int64", "workers", "Workers sharing one queue per replica (simulator; analytic models use 1)."),
    Column("queue_capacity", "float64", "requests", "K, waiting-request capacity (simulator); +inf = unbounded."),
    Column("service_cv", "float64", "-", "Coefficient of variation of multiplicative service-time noise (enters the proxy's E[S^2], E[S^3])."),
    # ---- service and queue
    Column("t_svc_ms", "float64", "ms", "T_svc(B) at the batch cap."),
    Column("capacity_rps", "float64", "requests/s", "Per-replica capacity B / T_svc(B)."),
    Column("fleet_capacity_rps", "float64", "requests/s", "replicas x capacity_rps."),
    Column("rho", "float64", "-", "Proxy utilisation lambda_b E[S] = lambda E[S] / E[B]."),
    Column("proxy_ok", "bool", "-", "rho < 1: the M/G/1 proxy's own validity; where false its waits are +inf."),
    Column("stable", "bool", "-", "lambda < B / T_svc(B): the batcher can keep up at all."),
    Column("mean_batch", "float64", "requests", "E[B], mean actual batch size per batch (= B for full batches)."),
    Column("e_wait_ms", "float64", "ms", "E[W], queue wait before the batch starts (P-K); +inf where not proxy_ok."),
    Column("e_batch_ms", "float64", "ms", "E[T_batch], request-weighted accumulation delay in the batcher."),
    Column("e_svc_ms", "float64", "ms", "E[T_svc], request-weighted service time."),
    Column("e_resp_ms", "float64", "ms", "E[T] = E[W] + E[T_batch] + E[T_svc]."),
    Column("sd_resp_ms", "float64", "ms", "sigma_T, sqrt(Var W + Var T_batch + Var T_svc) (independence assumed)."),
    Column("p_gauss_ms", "float64", "ms", "Gaussian percentile estimate E[T] + z_q sigma_T."),
    Column("p_exp_ms", "float64", "ms", "Exponential percentile estimate -ln(1-q) E[T]."),
    Column("latency_ms", "float64", "ms", "The estimate the SLO is checked against ([options] latency_model)."),
    Column("slo_ok", "bool", "-", "latency_ms <= slo_ms (+inf fails)."),
    Column("little_l", "float64", "requests", "Little's law L = lambda E[T], requests in the replica."),
    Column("in_service", "float64", "requests", "lambda E[T_svc], requests being served (= B rho for full batches)."),
    Column("in_queue", "float64", "requests", "L - in_service, requests waiting or accumulating."),
    Column("b_min_stable", "float64", "requests", "B_min(1) = lambda T_fixed / (1 - lambda t_req) (seed step 2); +inf if infeasible."),
    Column("b_min_stable_int", "float64", "requests", "Smallest integer batch that is strictly stable; +inf if none."),
    Column("b_min_rho_target", "float64", "requests", "B_min(rho_target) (seed eq. 2); +inf if infeasible."),
    Column("b_min_rho_target_int", "float64", "requests", "Smallest integer batch with rho <= rho_target (seed: 7.14 -> 8); +inf if none."),
    # ---- memory
    Column("kv_gb_per_req", "float64", "GB", "KV reservation per request under the allocation (1 GB = 1e9 bytes)."),
    Column("kv_gb_at_cap", "float64", "GB", "KV reservation for a full batch: kv_gb_per_req x batch_size."),
    Column("kv_waste_frac", "float64", "-", "1 - S_mean / S_alloc: share of the reservation no token uses."),
    Column("weights_gb", "float64", "GB", "n_params x weight_bytes_per_param."),
    Column("free_gb", "float64", "GB", "HBM left for the KV cache after weights and reserve (negative: weights do not fit)."),
    Column("weights_fit", "bool", "-", "free_gb >= 0."),
    Column("b_mem_max", "int64", "requests", "floor(free / per-request reservation); 0 where the weights do not fit."),
    Column("mem_ok", "bool", "-", "weights_fit and batch_size <= b_mem_max."),
    # ---- decisions
    Column("feasible", "bool", "-", "stable and mem_ok and latency_ms finite: considered by every decision."),
    Column("action", "dict", "-", "Seed Table 1: out_of_memory | unstable | slo_violated | near_saturation | overprovisioned | ok."),
    Column("cost_usd_per_hour", "float64", "USD/h", "replicas x gpus_per_replica x usd_per_gpu_hour (illustrative prices)."),
    # ---- the greedy-batcher model (latency_model = "batcher")
    Column("batcher_e_resp_ms", "float64", "ms", "E[T] of the greedy-batcher model (sweep/batcher.py); +inf where not stable.", _BATCHER),
    Column("batcher_p_ms", "float64", "ms", "Its percentile estimate at `percentile` (latency_ms with latency_model = batcher).", _BATCHER),
    Column("batcher_mean_batch", "float64", "requests", "Its mean batch size: the fixed point between load and batch size.", _BATCHER),
    Column("batcher_rho", "float64", "-", "Its utilisation lambda T_svc(b*) / b* (drives the operating rules with latency_model = batcher).", _BATCHER),
    # ---- the simulator (SPEC 7)
    Column("sim_mean_ms", "float64", "ms", "Simulated mean latency (mean over replications).", _SIM),
    Column("sim_p50_ms", "float64", "ms", "Simulated median latency.", _SIM),
    Column("sim_p90_ms", "float64", "ms", "Simulated P90 latency.", _SIM),
    Column("sim_p99_ms", "float64", "ms", "Simulated P99 latency.", _SIM),
    Column("sim_p999_ms", "float64", "ms", "Simulated P99.9 latency.", _SIM),
    Column("sim_p_ms", "float64", "ms", "Simulated latency at the grid's `percentile` (latency_ms with latency_model = simulated).", _SIM),
    Column("sim_p_hw_ms", "float64", "ms", "95% half-width of sim_p_ms across replications (Student t).", _SIM),
    Column("sim_mean_batch", "float64", "requests", "Simulated mean batch size per dispatched batch.", _SIM),
    Column("sim_utilization", "float64", "-", "Simulated busy time / (workers x simulated span).", _SIM),
    Column("sim_drop_rate", "float64", "-", "Simulated share of arrivals dropped at a full queue (queue_capacity).", _SIM),
    Column("proxy_rel_err", "float64", "-", "(e_resp_ms - sim_mean_ms) / sim_mean_ms: how far the proxy's E[T] is from the simulated mean; +inf where the proxy is +inf.", _SIM),
)

COLUMN_BY_NAME = {c.name: c for c in POINT_COLUMNS}

#: Point columns that are constant within a (scenario group, replicas) row; optimum.parquet
#: repeats them so each row reads on its own.
ROW_CONSTANT: tuple[str, ...] = (
    "model", "gpu", "gpus_per_replica", "seq_len", "mean_seq_len", "arrival_rps", "replicas",
    "lambda_per_replica_rps", "t_fixed_ms", "t_req_ms", "service_source", "eta_bw", "eta_flops",
    "tokens_per_request", "weight_bytes_per_param", "kv_bytes_per_elem", "slo_ms", "percentile",
    "rho_target", "rho_max", "rho_min", "workers", "queue_capacity", "service_cv",
    "b_min_stable", "b_min_stable_int", "b_min_rho_target", "b_min_rho_target_int",
    "kv_gb_per_req", "weights_gb", "free_gb", "weights_fit", "b_mem_max", "cost_usd_per_hour",
)

#: The answers of optimum.parquet: (prefix, what it is). Each gets the columns of ANSWER_FIELDS.
ANSWERS: tuple[tuple[str, str], ...] = (
    ("b_max_slo", "the largest batch with latency_ms <= slo_ms (seed step 5); ties: lowest latency"),
    ("b_latency_opt", "the batch minimising e_resp_ms; ties: smallest batch"),
    ("slo_opt", "the most capacity with latency_ms <= slo_ms (the SLO-optimal point); ties: lowest latency"),
    ("knee", "the frontier's knee (SPEC 6)"),
    ("replicas_min", "at replicas_min: the largest batch meeting the SLO with rho <= rho_max"),
)
ANSWER_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    # (suffix, point column, dtype, unit)
    ("", "batch_size", "int64", "requests"),
    ("_window_ms", "batch_window_ms", "float64", "ms"),
    ("_latency_ms", "latency_ms", "float64", "ms"),
    ("_e_resp_ms", "e_resp_ms", "float64", "ms"),
    ("_capacity_rps", "capacity_rps", "float64", "requests/s"),
    ("_rho", "rho", "float64", "-"),
    ("_point_id", "point_id", "int64", "-"),
)
#: What an answer's columns hold when there is none (see `reason`).
ANSWER_MISSING = {"batch_size": 0, "batch_window_ms": math.inf, "latency_ms": math.inf,
                  "e_resp_ms": math.inf, "capacity_rps": 0.0, "rho": math.inf, "point_id": -1}


def _answer_columns() -> tuple[Column, ...]:
    out = []
    for prefix, what in ANSWERS:
        for suffix, source, dtype, unit in ANSWER_FIELDS:
            name = prefix + suffix if (prefix, suffix) != ("replicas_min", "") else "replicas_min_batch"
            out.append(Column(name, dtype, unit, f"{source} of {what}; {ANSWER_MISSING[source]} when there is none."))
    return tuple(out)


OPTIMUM_COLUMNS: tuple[Column, ...] = (
    Column("group_id", "int64", "-", "Scenario group: flat index over every axis except replicas, batch_size, batch_window_ms."),
    Column("row_id", "int64", "-", "(scenario group, replicas) row: point_id // (n_windows x n_batch)."),
    *(COLUMN_BY_NAME[n] for n in ROW_CONSTANT),
    Column("n_points", "int64", "points", "Points in the row (n_windows x n_batch)."),
    Column("n_feasible", "int64", "points", "Feasible points in the row."),
    Column("n_frontier", "int64", "points", "Pareto points of the row (rows of frontier.parquet)."),
    Column("reason", "dict", "-", "ok, or the first constraint that left no feasible batch: out_of_memory | unstable | proxy_invalid (stable, but the latency estimate is +inf) | slo_violated."),
    Column("replicas_min", "float64", "replicas", "Per scenario group: the fewest replicas of the grid's replicas axis for which some batch meets the SLO with rho <= rho_max; +inf when none. On every row of the group."),
    Column("is_replicas_min", "bool", "-", "This row is at replicas_min."),
    Column("replicas_min_cost_usd_per_hour", "float64", "USD/h", "cost_usd_per_hour at replicas_min (on every row of the group); +inf when none."),
    *_answer_columns(),
    Column("method", "dict", "-", "How the answers were found: exact (every point evaluated)."),
)

FRONTIER_EXTRA: tuple[Column, ...] = (
    Column("group_id", "int64", "-", "Scenario group (see optimum.parquet)."),
    Column("row_id", "int64", "-", "(scenario group, replicas) row this frontier belongs to."),
    Column("is_knee", "bool", "-", "The row's knee: largest capacity_norm - latency_norm over the frontier (SPEC 6)."),
    Column("is_slo_opt", "bool", "-", "The row's SLO-optimal point: most capacity with latency_ms <= slo_ms."),
)


def optimum_columns(service_source: str, simulated: bool = False, batcher: bool = False) -> tuple[Column, ...]:
    skip = {c.name for c in POINT_COLUMNS if not _present(c, service_source, simulated, batcher)}
    return tuple(c for c in OPTIMUM_COLUMNS if c.name not in skip)


def frontier_columns(service_source: str, simulated: bool = False, batcher: bool = False) -> tuple[Column, ...]:
    return (*point_columns(service_source, simulated, batcher), *FRONTIER_EXTRA)


def _present(c: Column, service_source: str, simulated: bool, batcher: bool = False) -> bool:
    return (not c.when or (c.when == _ROOFLINE and service_source == "roofline")
            or (c.when == _SIM and simulated) or (c.when == _BATCHER and batcher))


def point_columns(service_source: str, simulated: bool = False, batcher: bool = False) -> tuple[Column, ...]:
    """The columns a run writes, in order (roofline inputs only for roofline grids, the
    simulator's only when the grid simulates, the batcher model's only when it is used)."""
    return tuple(c for c in POINT_COLUMNS if _present(c, service_source, simulated, batcher))


def markdown_table(columns: tuple[Column, ...] = POINT_COLUMNS) -> str:
    """The README's column reference."""
    rows = ["| column | type | unit | meaning |", "|---|---|---|---|"]
    for c in columns:
        dtype = "string (dictionary)" if c.dtype == "dict" else c.dtype
        doc = c.doc + (f" Only when {c.when}." if c.when else "")
        rows.append(f"| `{c.name}` | {dtype} | {c.unit} | {doc} |")
    return "\n".join(rows)


if __name__ == "__main__":  # pragma: no cover - docs helper
    import sys

    table = {"points": POINT_COLUMNS, "optimum": OPTIMUM_COLUMNS, "frontier": FRONTIER_EXTRA}
    print(markdown_table(table[sys.argv[1] if len(sys.argv) > 1 else "points"]))
