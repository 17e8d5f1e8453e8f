"""The seed's serving mode (`[options] serving = "dynamic"`): request-level dynamic batching.

Everything the four dynamic latency models share lives here: the grid parameters and
their rules (SPEC 8), the point columns (SPEC 9), and the per-point function (SPEC 1-6):
service time, the batcher's moments, the M/G/1 batch proxy, both tail rules, B_min,
Little's law and KV memory. A subclass only says which estimate the SLO is checked
against (`estimate`) and what it adds: `proxy` (gaussian, exponential), `batcher` (the
greedy-batcher model), `simulated` (the simulator's percentile, a host pass).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from sweep._lazy import lazy_module
from sweep.errors import GridError
from sweep.models import base
from sweep.models.base import (
    NO_ANSWER,
    SERVICE_SOURCES,
    UNLIMITED,
    WHEN_ROOFLINE,
    WHEN_SIMULATION,
    Column,
    Domain,
    Param,
    ServingModel,
    planning_columns,
)
from sweep.models.dynamic.batching import batch_moments, never_fills
from sweep.models.dynamic.queue import b_min, b_min_stable_int, b_min_target_int, queue_proxy
from sweep.models.dynamic.simulation import Simulation
from sweep.models.dynamic.views import VIEWS
from sweep.models.shared import columns as shared
from sweep.models.shared import roofline as rl
from sweep.models.shared.memory import kv_memory
from sweep.models.shared.service import service_time
from sweep.models.views import Views

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array
    from jax.scipy import special

    from sweep.grid.spec import GridSpec
else:
    special = lazy_module("jax.scipy.special")
    jnp = lazy_module("jax.numpy")

INF = math.inf
MS = 1e3

#: Largest batch cap the windowed closed forms are validated for (SPEC 2).
MAX_WINDOWED_BATCH = 4096
ROOFLINE_KEYS: tuple[str, ...] = ("eta_bw", "eta_flops", "tokens_per_request")
REQUIRED: tuple[str, ...] = ("arrival_rps", "batch_size", "seq_len", "model", "gpu", "slo_ms")

#: T_svc(1) = t_fixed_ms + t_req_ms is at least 1 ns: a batch takes time (a subnormal time would
#: vanish in seconds and give infinite capacities).
MIN_T_SVC_MS = 1e-6

#: Where each numeric `[grid]` key is valid (README, "[grid]"): ranges a planner can mean,
#: inside which `tests/test_domains.py` finds every output finite or +inf, never NaN (the
#: float64 arithmetic first fails orders of magnitude outside, e.g. below 1e-144 requests/s,
#: above 1e97 ms of window or above 1e46 of service CV). One comment says why each ends where it does.
DOMAINS: dict[str, Domain] = {
    **shared.DOMAINS,
    # the longest context windows are ~1e7 tokens (Llama 4 Scout: 10M); 10x headroom
    "seq_len": Domain(1, 1e8, "tokens"),
    # a mean of lengths that are each >= 1 token, and <= seq_len (a cross-field rule)
    "mean_seq_len": Domain(1, 1e8, "tokens"),
    # 0 to 1e7 ms = 2.8 hours for one forward pass (and t_fixed_ms + t_req_ms >= MIN_T_SVC_MS)
    "t_req_ms": Domain(0, 1e7, "ms"),
    # a decode step is 1, a prompt of P tokens is P: at most seq_len's bound; fractions are averages
    "tokens_per_request": Domain(0, 1e8, "tokens", lo_open=True),
    # any positive latency objective up to 1e9 ms = 11.6 days
    "slo_ms": Domain(0, 1e9, "ms", lo_open=True),
    # a share of the worker's time
    "rho_target": Domain(0, 1, lo_open=True),
    # workers sharing one queue (the simulator); beyond a thousand, model them as replicas
    "workers": Domain(1, 1024, "workers"),
    # 0 (dispatch at once) to 1e7 ms = 2.8 hours, or inf (full batches)
    "batch_window_ms": Domain(0, 1e7, "ms", inf=True),
    # up to a million requests per batch (<= 4096 with a finite window, a cross-field rule)
    "batch_size": Domain(1, 1e6, "requests"),
}

#: Every `[grid]` parameter, in the canonical axis order (outermost first). The three
#: decision axes come last, so one (scenario group, replicas) row is a contiguous block.
PARAMS: tuple[Param, ...] = (
    Param("model", "name", None, example='model = "gpt3-175b"'),
    Param("gpu", "name", None, example='gpu = "a100-80gb"',
          search_example='gpu = ["a100-80gb", "h100-sxm"]'),
    Param("gpus_per_replica", "int", 1, DOMAINS["gpus_per_replica"], example="gpus_per_replica = [1, 2, 4, 8]",
          search_example="gpus_per_replica = [1, 2, 4, 8]"),
    Param("seq_len", "int", None, DOMAINS["seq_len"], example="seq_len = 2048"),
    Param("mean_seq_len", "float", None, DOMAINS["mean_seq_len"], example="mean_seq_len = 900"),
    Param("arrival_rps", "float", None, DOMAINS["arrival_rps"], example="arrival_rps = [50, 100, 200]"),
    Param("t_fixed_ms", "float", None, DOMAINS["t_fixed_ms"], example="t_fixed_ms = 50.0"),
    Param("t_req_ms", "float", None, DOMAINS["t_req_ms"], example="t_req_ms = 0.5"),
    # default: the GPU entry's calibrated value (sweep calibrate), else SPEC 13's 0.7 / 0.6
    Param("eta_bw", "float", None, DOMAINS["eta_bw"], example="eta_bw = 0.7"),
    Param("eta_flops", "float", None, DOMAINS["eta_flops"], example="eta_flops = 0.6"),
    Param("tokens_per_request", "float", 1.0, DOMAINS["tokens_per_request"], example="tokens_per_request = 1"),
    Param("weight_bytes_per_param", "float", 2.0, DOMAINS["weight_bytes_per_param"],
          example='weight_bytes_per_param = "fp8"'),
    Param("kv_bytes_per_elem", "float", 2.0, DOMAINS["kv_bytes_per_elem"], example='kv_bytes_per_elem = "fp16"'),
    Param("slo_ms", "float", None, DOMAINS["slo_ms"], example="slo_ms = 200.0"),
    Param("percentile", "float", 0.99, DOMAINS["percentile"], example="percentile = 0.99"),
    Param("rho_target", "float", 0.75, DOMAINS["rho_target"], example="rho_target = 0.75"),
    Param("rho_max", "float", 0.85, DOMAINS["rho_max"], example="rho_max = 0.85"),
    Param("rho_min", "float", 0.5, DOMAINS["rho_min"], example="rho_min = 0.5"),
    Param("workers", "int", 1, DOMAINS["workers"], example="workers = 1"),
    Param("queue_capacity", "int", math.inf, DOMAINS["queue_capacity"], example="queue_capacity = 64  # or inf"),
    Param("service_cv", "float", 0.0, DOMAINS["service_cv"], example="service_cv = 0.1"),
    Param("replicas", "int", 1, DOMAINS["replicas"], example="replicas = [1, 2, 4]",
          search_example="replicas = {low = 1, high = 64}"),
    Param("batch_window_ms", "float", math.inf, DOMAINS["batch_window_ms"], example="batch_window_ms = [5, 20, inf]",
          search_example="batch_window_ms = {low = 0.0, high = 200.0}"),
    Param("batch_size", "int", None, DOMAINS["batch_size"], example="batch_size = [1, 8, 32]",
          search_example="batch_size = {low = 1, high = 512, log = true}", ascending=True),
)

_R, _S = WHEN_ROOFLINE, WHEN_SIMULATION

def latency_nulls(columns: tuple[Column, ...], flag: str) -> tuple[Column, ...]:
    """`columns` with `latency_ms` NULL where `flag` is false: the latency model's own
    condition for an unbounded estimate (proxy_ok, stable, sim_steady)."""
    return tuple(c.with_null(flag) if c.name == "latency_ms" else c for c in columns)


#: Columns up to the verdicts and the cost; a model may add its own after them.
BASE_COLUMNS: tuple[Column, ...] = (
    base.POINT_ID,
    # ---- scenario axes
    shared.MODEL,
    shared.GPU,
    shared.GPUS_PER_REPLICA,
    Column("seq_len", "int64", "tokens", "S_max: sequence length a request may reach (contiguous KV reservation)."),
    Column("mean_seq_len", "float64", "tokens",
           "S_mean: mean sequence length (paged KV reservation; roofline KV read)."),
    shared.ARRIVAL_RPS,
    shared.REPLICAS,
    Column("lambda_per_replica_rps", "float64", "requests/s",
           "Per-replica arrival rate lambda = arrival_rps / replicas; all queueing uses it."),
    Column("batch_size", "int64", "requests", "B, the batch cap B_max when a window is set."),
    Column("batch_window_ms", "float64", "ms",
           "Batching window T_max; NULL (the grid's inf) = no window: the full-batch regime, "
           "every batch waits for batch_size requests.",
           null_when=UNLIMITED),
    Column("t_fixed_ms", "float64", "ms",
           "T_fixed of T_svc(B) = T_fixed + t_req B (docs/model.md, service time). Roofline: "
           "the secant of the step time through B = 1 and this point's batch_size, so it varies with batch_size; "
           "optimum.parquet repeats the row's first point's."),
    Column("t_req_ms", "float64", "ms",
           "t_req, marginal service time per request in a batch (roofline: see t_fixed_ms)."),
    Column("service_source", "dict", "-", "Where T_fixed and t_req came from: given | fitted | roofline."),
    shared.ETA_BW,
    shared.ETA_FLOPS,
    Column("tokens_per_request", "float64", "tokens", "Roofline: new tokens per request in one forward pass.", _R),
    Column("weight_bytes_per_param", "float64", "bytes", "Weights dtype size (fp16 2, fp8 1, int4 0.5)."),
    shared.KV_BYTES_PER_ELEM,
    Column("slo_ms", "float64", "ms", "Latency SLO at `percentile`."),
    Column("percentile", "float64", "-", "Percentile q of the SLO (0.99 = P99)."),
    Column("rho_target", "float64", "-", "Target utilisation for b_min_rho_target (docs/model.md, sizing)."),
    Column("rho_max", "float64", "-", "Near-saturation threshold (action, replicas_min)."),
    Column("rho_min", "float64", "-", "Over-provisioning threshold (action)."),
    Column("workers", "int64", "workers", "Workers sharing one queue per replica (simulator; analytic models use 1)."),
    Column("queue_capacity", "int64", "requests",
           "K, waiting-request capacity (simulator); NULL (the grid's inf) = unbounded.",
           null_when=UNLIMITED),
    Column("service_cv", "float64", "-",
           "Coefficient of variation of multiplicative service-time noise (enters the proxy's E[S^2], E[S^3])."),
    # ---- service and queue
    Column("t_svc_ms", "float64", "ms", "T_svc(B) at the batch cap."),
    Column("capacity_rps", "float64", "requests/s", "Per-replica capacity B / T_svc(B)."),
    Column("fleet_capacity_rps", "float64", "requests/s", "replicas x capacity_rps."),
    Column("rho", "float64", "-", "Proxy utilisation lambda_b E[S] = lambda E[S] / E[B]."),
    Column("proxy_ok", "bool", "-",
           "rho < 1: the M/G/1 proxy's own validity; where false its waits, E[T], "
           "sigma_T and percentiles are unbounded (NULL)."),
    Column("stable", "bool", "-", "lambda < B / T_svc(B): the batcher can keep up at all."),
    Column("mean_batch", "float64", "requests", "E[B], mean actual batch size per batch (= B for full batches)."),
    Column("e_wait_ms", "float64", "ms",
           "E[W], queue wait before the batch starts (Pollaczek-Khinchine).",
           null_when="proxy_ok"),
    Column("e_batch_ms", "float64", "ms", "E[T_batch], request-weighted accumulation delay in the batcher."),
    Column("e_svc_ms", "float64", "ms", "E[T_svc], request-weighted service time."),
    Column("e_resp_ms", "float64", "ms", "E[T] = E[W] + E[T_batch] + E[T_svc].", null_when="proxy_ok"),
    Column("sd_resp_ms", "float64", "ms",
           "sigma_T, sqrt(Var W + Var T_batch + Var T_svc) (independence assumed).",
           null_when="proxy_ok"),
    Column("p_gauss_ms", "float64", "ms", "Gaussian percentile estimate E[T] + z_q sigma_T.", null_when="proxy_ok"),
    Column("p_exp_ms", "float64", "ms", "Exponential percentile estimate -ln(1-q) E[T].", null_when="proxy_ok"),
    Column("latency_ms", "float64", "ms",
           "The estimate the SLO is checked against ([options] latency_model): p_gauss_ms, p_exp_ms, "
           "batcher_p_ms or sim_p_ms.",
           null_when="proxy_ok"),
    base.SLO_OK,
    Column("little_l", "float64", "requests",
           "Little's law L = lambda E[T], requests in the replica (a count of requests).",
           null_when="proxy_ok"),
    Column("in_service", "float64", "requests", "lambda E[T_svc], requests being served (= B rho for full batches)."),
    Column("in_queue", "float64", "requests",
           "L - in_service, requests waiting or accumulating.",
           null_when="proxy_ok"),
    Column("b_min_stable", "float64", "requests",
           "B_min(1) = lambda T_fixed / (1 - lambda t_req) (docs/model.md, sizing); "
           "NULL where no batch is stable (lambda t_req >= 1).",
           null_when=NO_ANSWER),
    Column("b_min_stable_int", "int64", "requests",
           "Smallest integer batch that is strictly stable; NULL where there is none (or it exceeds 2^53).",
           null_when=NO_ANSWER),
    Column("b_min_rho_target", "float64", "requests",
           "B_min(rho_target) = lambda T_fixed / (rho_target - lambda t_req) (docs/model.md, sizing); "
           "NULL where no batch reaches it (lambda t_req >= rho_target).",
           null_when=NO_ANSWER),
    Column("b_min_rho_target_int", "int64", "requests",
           "Smallest integer batch with rho <= rho_target (the GPT-3 worked example: 7.14 -> 8); "
           "NULL where there is none (or it exceeds 2^53).",
           null_when=NO_ANSWER),
    # ---- memory
    Column("kv_gb_per_req", "float64", "GB", "KV reservation per request under the allocation (1 GB = 1e9 bytes)."),
    Column("kv_gb_at_cap", "float64", "GB", "KV reservation for a full batch: kv_gb_per_req x batch_size."),
    Column("kv_waste_frac", "float64", "-", "1 - S_mean / S_alloc: share of the reservation no token uses."),
    shared.WEIGHTS_GB,
    shared.FREE_GB,
    shared.WEIGHTS_FIT,
    Column("b_mem_max", "int64", "requests", "floor(free / per-request reservation); 0 where the weights do not fit."),
    Column("mem_ok", "bool", "-", "weights_fit and batch_size <= b_mem_max."),
    # ---- decisions
    base.FEASIBLE,
    base.ACTION,
    shared.COST_USD_PER_HOUR,
)

#: The simulator's columns (SPEC 7), written when the grid simulates.
#: `[uncertainty]` and `[sensitivity]` columns (sweep.engine.plan; docs/uncertainty.md).
PLAN_COLUMNS: tuple[Column, ...] = planning_columns(
    (("latency_ms", "slo_ms"),), ("t_fixed_ms", "t_req_ms"), ("mean_seq_len",),
    {"arrival_rps": "request/s", "t_fixed_ms": "ms", "t_req_ms": "(ms/request)", "mean_seq_len": "token"})

SIM_COLUMNS: tuple[Column, ...] = (
    Column("sim_mean_ms", "float64", "ms", "Simulated mean latency (mean over replications).", _S, "sim_steady"),
    Column("sim_p50_ms", "float64", "ms", "Simulated median latency.", _S, "sim_steady"),
    Column("sim_p90_ms", "float64", "ms", "Simulated P90 latency.", _S, "sim_steady"),
    Column("sim_p99_ms", "float64", "ms", "Simulated P99 latency.", _S, "sim_steady"),
    Column("sim_p999_ms", "float64", "ms", "Simulated P99.9 latency.", _S, "sim_steady"),
    Column("sim_p_ms", "float64", "ms",
           "Simulated latency at the grid's `percentile` (latency_ms with latency_model = simulated).",
           _S, "sim_steady"),
    Column("sim_p_hw_ms", "float64", "ms",
           "95% half-width of sim_p_ms across replications (Student t).", _S, "sim_steady"),
    Column("sim_mean_batch", "float64", "requests", "Simulated mean batch size per dispatched batch.", _S),
    Column("sim_utilization", "float64", "-", "Simulated busy time / (workers x simulated span).", _S),
    Column("sim_drop_rate", "float64", "-",
           "Simulated share of arrivals dropped at a full queue (queue_capacity).", _S),
    Column("sim_steady", "bool", "-",
           "No replication's backlog grew: the last quarter of measured requests waited on average "
           "at most twice as long as the first. Where false every sim_* latency is unbounded (NULL).", _S),
    Column("proxy_rel_err", "float64", "-",
           "(e_resp_ms - sim_mean_ms) / sim_mean_ms: how far the proxy's E[T] is from the simulated mean; "
           "NULL where either is unbounded.", _S, "proxy_ok, sim_steady"),
)

#: Point columns constant within a (scenario group, replicas) row; optimum.parquet repeats them.
ROW_CONSTANT: tuple[str, ...] = (
    "model", "gpu", "gpus_per_replica", "seq_len", "mean_seq_len", "arrival_rps", "replicas",
    "lambda_per_replica_rps", "t_fixed_ms", "t_req_ms", "service_source", "eta_bw", "eta_flops",
    "tokens_per_request", "weight_bytes_per_param", "kv_bytes_per_elem", "slo_ms", "percentile",
    "rho_target", "rho_max", "rho_min", "workers", "queue_capacity", "service_cv",
    "b_min_stable", "b_min_stable_int", "b_min_rho_target", "b_min_rho_target_int",
    "kv_gb_per_req", "weights_gb", "free_gb", "weights_fit", "b_mem_max", "cost_usd_per_hour",
)


class Estimates(NamedTuple):
    """What a latency model may build its estimate from (one point, SI units)."""

    lam: Array
    b_max: Array
    t_max: Array
    t_fixed: Array
    t_req: Array
    service_cv: Array
    q: Array
    rho: Array  # the proxy's utilisation
    p_gauss: Array
    p_exp: Array


class DynamicModel(ServingModel):
    """Request-level dynamic batching (SPEC 1-7); subclasses choose the SLO estimate."""

    serving: ClassVar[str] = "dynamic"
    params: ClassVar[tuple[Param, ...]] = PARAMS
    columns: ClassVar[tuple[Column, ...]] = BASE_COLUMNS + SIM_COLUMNS + PLAN_COLUMNS
    length_keys: ClassVar[tuple[str, ...]] = ("mean_seq_len",)
    #: mean_seq_len follows seq_len where the grid leaves it out: vary seq_len then
    input_fallback: ClassVar[dict[str, str]] = {"mean_seq_len": "seq_len"}
    echo: ClassVar[tuple[str, ...]] = (
        "model", "gpu", "gpus_per_replica", "seq_len", "arrival_rps", "replicas", "batch_size",
        "batch_window_ms", "tokens_per_request", "weight_bytes_per_param",
        "kv_bytes_per_elem", "slo_ms", "percentile", "rho_target", "rho_max", "rho_min", "workers",
        "queue_capacity", "service_cv",
    )
    row_constant: ClassVar[tuple[str, ...]] = ROW_CONSTANT
    views: ClassVar[Views] = VIEWS
    objectives: ClassVar[dict[str, tuple[str, str]]] = {
        "min_cost": ("cost_usd_per_hour", "minimize"),
        "max_capacity": ("fleet_capacity_rps", "maximize"),
        "min_latency": ("latency_ms", "minimize"),
    }
    #: More load: more followers per window (E[B]), more utilisation, a longer P-K wait,
    #: more requests in service, larger B_min (seed eq. 2 rises in lambda).
    monotone_in_load: ClassVar[tuple[str, ...]] = (
        "lambda_per_replica_rps", "mean_batch", "rho", "e_wait_ms", "in_service", "b_min_stable", "b_min_rho_target")
    #: The contract's grids (`ServingModel.contract_variants`): both batching regimes with given
    #: times and contiguous KV; full batches only, paged KV, the roofline and a reserve.
    contract_variants: ClassVar[tuple[Mapping[str, Any], ...]] = (
        {"grid": {"eta_bw": None, "eta_flops": None, "tokens_per_request": None}},
        {"options": {"kv_allocation": "paged", "block_tokens": 32, "reserve_fraction": 0.1},
         "grid": {"t_fixed_ms": None, "t_req_ms": None, "batch_window_ms": math.inf}},
    )

    # -- the estimate the SLO is checked against -------------------------------------

    def estimate(self, e: Estimates) -> tuple[Array, Array, dict[str, Array]]:
        """(latency in s, utilisation for the operating rules, extra columns)."""
        raise NotImplementedError

    # -- validation -------------------------------------------------------------------

    def fill(self, values: dict[str, list[Any]], where: Callable[[str], str],
             source: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        """Required keys present; the service-time source decided; defaults filled."""
        for key in REQUIRED:
            if key not in values:
                raise GridError(source, where(key), None, f"is required, e.g. {self.param_by_key[key].example}")
        has_fixed, has_req = "t_fixed_ms" in values, "t_req_ms" in values
        if has_fixed != has_req:
            missing = "t_req_ms" if has_fixed else "t_fixed_ms"
            raise GridError(source, where(missing), None,
                            "give both t_fixed_ms and t_req_ms, or neither (roofline estimate from the catalogs)")
        # Roofline inputs mean something only without measured times: one would be ignored.
        if has_fixed:
            for key in ROOFLINE_KEYS:
                if key in values:
                    raise GridError(source, where(key), values[key][0],
                                    "roofline input given, but t_fixed_ms/t_req_ms are given too; drop one")
        out = dict(values)
        for p in self.params:
            if p.key not in out and p.default is not None and not (has_fixed and p.key in ROOFLINE_KEYS):
                out[p.key] = [p.default]
        return out, {"service_source": "given" if has_fixed else "roofline",
                     "mean_follows_seq_len": "mean_seq_len" not in out}

    def check(self, values: Mapping[str, Sequence[Any]], options: Any, where: Callable[[str], str],
              source: str) -> None:
        """Rules that involve several keys; every combination of the axes must be valid."""
        if "mean_seq_len" in values and max(values["mean_seq_len"]) > min(values["seq_len"]):
            raise GridError(source, where("mean_seq_len"), max(values["mean_seq_len"]),
                            f"must be <= seq_len for every combination (smallest seq_len is {min(values['seq_len'])})")
        if max(values["rho_min"]) >= min(values["rho_max"]):
            raise GridError(source, where("rho_min"), max(values["rho_min"]),
                            f"must be < rho_max for every combination (smallest rho_max is {min(values['rho_max'])})")
        if "t_fixed_ms" in values and min(values["t_fixed_ms"]) + min(values["t_req_ms"]) < MIN_T_SVC_MS:
            raise GridError(source, where("t_req_ms"), min(values["t_req_ms"]),
                            f"t_fixed_ms + t_req_ms (T_svc of one request) must be >= {MIN_T_SVC_MS:g} ms (1 ns) "
                            f"for every combination; the smallest t_fixed_ms is {min(values['t_fixed_ms']):g}")
        windows = values["batch_window_ms"]
        if any(math.isfinite(w) for w in windows) and max(values["batch_size"]) > MAX_WINDOWED_BATCH:
            raise GridError(source, where("batch_size"), max(values["batch_size"]),
                            f"must be <= {MAX_WINDOWED_BATCH} with a finite batch_window_ms "
                            "(the windowed closed forms are validated up to there)")
        if max(values["workers"]) > 1 and not self.needs_host_pass:
            raise GridError(source, where("workers"), max(values["workers"]),
                            f'the analytic latency_model "{self.name}" has one worker per replica; '
                            'use workers = 1 or latency_model = "simulated"')
        finite_k = [k for k in values["queue_capacity"] if math.isfinite(k)]
        if finite_k and never_fills(max(windows), min(finite_k), max(values["batch_size"])):
            raise GridError(source, where("queue_capacity"), min(finite_k),
                            f"is below {where('batch_size')} {max(values['batch_size'])} with batch_window_ms = inf: "
                            "a batch could never fill; set a window or raise the capacity")

    # -- evaluation -------------------------------------------------------------------

    def static(self, spec: GridSpec) -> dict[str, Any]:
        windows = spec.axis("batch_window_ms").values
        return dict(
            windowed=any(math.isfinite(v) for v in windows),
            full=any(math.isinf(v) for v in windows),
            paged=spec.options.kv_allocation == "paged",
            service_source=spec.service_source,
            mean_follows=bool(spec.facts.get("mean_follows_seq_len", False)),
            block_tokens=float(spec.options.block_tokens),
            reserve_fraction=spec.options.reserve_fraction,
        )

    def point(self, x: Mapping[str, Array], *, windowed: bool, full: bool, paged: bool, service_source: str,
              mean_follows: bool, block_tokens: float, reserve_fraction: float) -> dict[str, Array]:
        """Every analytic column for one point. Static keywords: `windowed`/`full` say
        which batching regimes the grid holds (a grid of only full batches never traces the
        incomplete-gamma path), `paged` the KV allocation, `service_source` given/fitted/
        roofline, `mean_follows` whether S_mean is S_max."""
        gpus = x["gpus_per_replica"]
        mean_seq = x["seq_len"] if mean_follows else x["mean_seq_len"]
        kv_per_token = x["kv_elems_per_token"] * x["kv_bytes_per_elem"]
        weights = x["n_params"] * x["weight_bytes_per_param"]
        roof: dict[str, Array] = {}
        if service_source == "roofline":
            eta_bw = x["eta_bw"] if "eta_bw" in x else x["gpu_eta_bw"]
            eta_flops = x["eta_flops"] if "eta_flops" in x else x["gpu_eta_flops"]
            t_fixed, t_req = rl.service_line(
                rl.replica_params(x, eta_bw, eta_flops), x["batch_size"], x["tokens_per_request"], mean_seq,
                kv_per_token, x["attn_width"], x["n_layers"])
            roof = {"eta_bw": eta_bw, "eta_flops": eta_flops}
        else:
            t_fixed, t_req = x["t_fixed_ms"] * 1e-3, x["t_req_ms"] * 1e-3
        lam = x["arrival_rps"] / x["replicas"]
        b_max = x["batch_size"]
        t_max = x["batch_window_ms"] * 1e-3
        q = x["percentile"]

        bm = batch_moments(lam, t_max, b_max, windowed=windowed, full=full)
        qu = queue_proxy(lam, b_max, t_fixed, t_req, x["service_cv"], bm, exact_full=not windowed)
        var_tb = jnp.maximum(bm.etb2 - bm.etb * bm.etb, 0.0)
        if not windowed:  # closed form, no cancellation: (B-1)(B+7)/(12 lam^2)
            var_tb = (b_max - 1.0) * (b_max + 7.0) / (12.0 * lam * lam)
        e_resp = jnp.where(qu.proxy_ok, qu.e_wait + bm.etb + qu.e_svc, INF)
        sd_resp = jnp.where(qu.proxy_ok, jnp.sqrt(jnp.where(qu.proxy_ok, qu.var_wait, 0.0) + var_tb + qu.var_svc), INF)
        z = special.ndtri(q)
        p_gauss = jnp.where(qu.proxy_ok, e_resp + z * jnp.where(qu.proxy_ok, sd_resp, 0.0), INF)
        p_exp = -jnp.log1p(-q) * e_resp
        latency, rho_rules, extra = self.estimate(
            Estimates(lam, b_max, t_max, t_fixed, t_req, x["service_cv"], q, qu.rho, p_gauss, p_exp))
        little_l = lam * e_resp
        in_service = lam * qu.e_svc
        raw_stable = b_min(lam, t_fixed, t_req, 1.0)
        raw_target = b_min(lam, t_fixed, t_req, x["rho_target"])
        usable = gpus * x["hbm_bytes"] * (1.0 - reserve_fraction)
        mem = kv_memory(kv_per_token, x["seq_len"], mean_seq, block_tokens, weights, usable, b_max, paged=paged)
        return {
            "mean_seq_len": mean_seq,
            "lambda_per_replica_rps": lam,
            "t_fixed_ms": t_fixed * MS,
            "t_req_ms": t_req * MS,
            "service_source": jnp.asarray(SERVICE_SOURCES.index(service_source), dtype=jnp.int32),
            "t_svc_ms": service_time(t_fixed, t_req, b_max) * MS,
            "capacity_rps": qu.capacity,
            "fleet_capacity_rps": qu.capacity * x["replicas"],
            "rho": qu.rho,
            "proxy_ok": qu.proxy_ok,
            "stable": qu.stable,
            "mean_batch": bm.eb,
            "e_wait_ms": qu.e_wait * MS,
            "e_batch_ms": bm.etb * MS,
            "e_svc_ms": qu.e_svc * MS,
            "e_resp_ms": e_resp * MS,
            "sd_resp_ms": sd_resp * MS,
            "p_gauss_ms": p_gauss * MS,
            "p_exp_ms": p_exp * MS,
            "latency_ms": latency * MS,
            "little_l": little_l,
            "in_service": in_service,
            "in_queue": little_l - in_service,
            "b_min_stable": raw_stable,
            "b_min_stable_int": b_min_stable_int(lam, t_fixed, t_req, raw_stable),
            "b_min_rho_target": raw_target,
            "b_min_rho_target_int": b_min_target_int(lam, t_fixed, t_req, x["rho_target"], raw_target),
            "kv_gb_per_req": mem.kv_bytes_per_req * 1e-9,
            "kv_gb_at_cap": mem.kv_bytes_per_req * b_max * 1e-9,
            "kv_waste_frac": mem.kv_waste_frac,
            "weights_gb": weights * 1e-9,
            "free_gb": mem.free_bytes * 1e-9,
            "weights_fit": mem.weights_fit,
            "b_mem_max": mem.b_mem_max,
            "mem_ok": mem.mem_ok,
            "cost_usd_per_hour": x["replicas"] * gpus * x["usd_per_gpu_hour"],
            "_rho_rules": rho_rules,
            **roof,
            **extra,
        }

    def derivation(self, row: Mapping[str, Any], figures: Mapping[str, float] | None = None,
                   options: Mapping[str, Any] | None = None) -> list[base.Step] | None:
        """docs/model.md's steps with this point's numbers (`sweep.models.dynamic.derive`)."""
        from sweep.models.dynamic.derive import derivation

        return derivation(row, figures, options, latency_model=self.name)

    def host_pass(self, spec: GridSpec) -> base.HostPass | None:
        """The simulator, when the grid simulates (a [simulation] table or latency_model
        = simulated): sim_* columns beside the analytic ones."""
        if spec.simulation is None:
            return None
        return Simulation(spec.simulation, decides=self.needs_host_pass)
