"""LLM serving as it runs today (`[options] serving = "continuous"`): iteration-level
(continuous) batching with TTFT and TPOT targets, the scheduler of vLLM, SGLang,
TensorRT-LLM and TGI (docs/continuous.md).

Each replica runs one engine: every step carries one decode token per running sequence and
prompt tokens of admitted ones up to a token budget; a step with `n_tok` new tokens and
`n_ctx` cached ones takes `t_fixed + t_token n_tok + t_ctx n_ctx`. The knobs are the cap on
running sequences `batch_size` (vLLM's max_num_seqs) and the token budget
`max_batched_tokens` (max_num_batched_tokens); the KV capacity in tokens is what the HBM
holds beside the weights (`kv_allocation = "paged"`: whole `block_tokens` blocks).

Two latency models: `analytic` (default; `sweep.models.continuous.analytic`, a fixed point inside
the jitted kernel) and `simulated` (`sweep.models.continuous.sim`, the iteration-level simulator as
a host pass, whose percentiles then decide). A `[simulation]` table adds the `sim_*`
columns beside the analytic ones.

Decisions: the row axes are (`max_batched_tokens`, `batch_size`); `b_max_slo` is the
largest cap meeting every SLO (TTFT, TPOT and E2E at `percentile`, each optional), and the
frontier runs over (`tok_s_per_gpu` up, `tok_s_per_user` up): throughput against
interactivity, with its knee and `slo_opt` (the most tokens/s per GPU meeting every SLO).
Like `capacity_rps` in dynamic serving, `tok_s_per_gpu` is what a configuration sustains
(its capacity in output tokens/s per GPU), while `tok_s_per_user` is what a user sees at the
grid's load: at a fixed arrival rate every stable configuration delivers the same output
tokens/s (`output_tok_s`, the offered load), so the trade-off a row can show is capacity
against interactivity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from sweep._lazy import lazy_module
from sweep.errors import GridError
from sweep.models import base
from sweep.models.base import (
    ANALYTIC_UNBOUNDED,
    SERVICE_SOURCES,
    UNLIMITED,
    WHEN_ROOFLINE,
    WHEN_SIMULATION,
    Column,
    Decisions,
    Domain,
    HostPass,
    Param,
    ServingModel,
    planning_columns,
)
from sweep.models.continuous import confidence
from sweep.models.continuous.confidence import (
    analytic_trusted,
    closed_loop_trusted,
    reservations_never_block,
)
from sweep.models.continuous.slos import SLO_CHECKS, SLO_KEYS
from sweep.models.continuous.views import VIEWS
from sweep.models.shared import columns as shared
from sweep.models.shared import roofline as rl
from sweep.models.views import Views

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array

    from sweep.grid.spec import GridSpec, SimulationOptions
    from sweep.models.continuous import analytic, itl
    from sweep.models.continuous import closed as closed_model
else:
    jnp = lazy_module("jax.numpy")
    analytic = lazy_module("sweep.models.continuous.analytic")
    closed_model = lazy_module("sweep.models.continuous.closed")
    itl = lazy_module("sweep.models.continuous.itl")

INF = math.inf
MS = 1e3

DOMAINS: dict[str, Domain] = {
    **shared.DOMAINS,
    # token lengths: one token to 1e7 (the longest contexts); a mean, so fractional
    "prompt_tokens": Domain(1, 1e7, "tokens"),
    "output_tokens": Domain(1, 1e7, "tokens"),
    # lognormal spreads of the lengths; beyond 10 the mean says nothing
    "prompt_cv": Domain(0, 10),
    "output_cv": Domain(0, 10),
    # step-time coefficients: up to 1e7 ms a step, 1e3 ms a token, 1e3 ms a cached token
    "t_token_ms": Domain(0, 1e3, "ms"),
    "t_ctx_ms": Domain(0, 1e3, "ms"),
    # objectives up to 11.6 days; inf = no such SLO
    "ttft_slo_ms": Domain(0, 1e9, "ms", lo_open=True, inf=True),
    "tpot_slo_ms": Domain(0, 1e9, "ms", lo_open=True, inf=True),
    "slo_ms": Domain(0, 1e9, "ms", lo_open=True, inf=True),
    # running sequences per replica (max_num_seqs): up to 1e5
    "batch_size": Domain(1, 1e5, "sequences"),
    # tokens per step (max_num_batched_tokens): up to 1e8, or inf (whole prompts in one step)
    "max_batched_tokens": Domain(1, 1e8, "tokens", inf=True),
    # the engine's host time per running sequence a step: up to 10 ms
    "t_seq_us": Domain(0, 1e4, "us"),
    # a request's fixed latency outside the engine's steps: up to 1000 s
    "request_latency_ms": Domain(0, 1e6, "ms"),
    # workload = "closed": clients over the fleet (inf: an open loop), and their mean think time
    "clients": Domain(1, 1e7, "clients", inf=True),
    "think_time_s": Domain(0, 1e6, "s"),
}

PARAMS: tuple[Param, ...] = (
    Param("model", "name", None, example='model = "llama-3.1-70b"'),
    Param("gpu", "name", None, example='gpu = "h100-sxm"',
          search_example='gpu = ["a100-80gb", "h100-sxm"]'),
    Param("gpus_per_replica", "int", 1, DOMAINS["gpus_per_replica"], example="gpus_per_replica = [1, 2, 4, 8]",
          search_example="gpus_per_replica = [1, 2, 4, 8]"),
    Param("arrival_rps", "float", None, DOMAINS["arrival_rps"], example="arrival_rps = [5, 10, 20]"),
    # no example: the contract's grids are open loops, where the kernel reads neither
    Param("clients", "int", math.inf, DOMAINS["clients"]),
    Param("think_time_s", "float", 0.0, DOMAINS["think_time_s"]),
    Param("prompt_tokens", "float", None, DOMAINS["prompt_tokens"], example="prompt_tokens = 1000"),
    Param("prompt_cv", "float", 0.0, DOMAINS["prompt_cv"], example="prompt_cv = 1.0"),
    Param("output_tokens", "float", None, DOMAINS["output_tokens"], example="output_tokens = 200"),
    Param("output_cv", "float", 0.0, DOMAINS["output_cv"], example="output_cv = 1.0"),
    Param("t_fixed_ms", "float", None, DOMAINS["t_fixed_ms"], example="t_fixed_ms = 12.0"),
    Param("t_token_ms", "float", None, DOMAINS["t_token_ms"], example="t_token_ms = 0.05"),
    Param("t_ctx_ms", "float", None, DOMAINS["t_ctx_ms"], example="t_ctx_ms = 1e-5"),
    # default: the GPU entry's calibrated value (sweep calibrate), else SPEC 13's 0.7 / 0.6
    Param("eta_bw", "float", None, DOMAINS["eta_bw"], example="eta_bw = 0.7"),
    Param("eta_flops", "float", None, DOMAINS["eta_flops"], example="eta_flops = 0.6"),
    # the engine's per-sequence cost a step; 0: none (docs/roofline.md, "Per-sequence cost")
    Param("t_seq_us", "float", 0.0, DOMAINS["t_seq_us"], example="t_seq_us = 45"),
    # the server's own latency per request outside the steps; 0: none (docs/continuous.md)
    Param("request_latency_ms", "float", 0.0, DOMAINS["request_latency_ms"], example="request_latency_ms = 12"),
    Param("weight_bytes_per_param", "float", 2.0, DOMAINS["weight_bytes_per_param"],
          example='weight_bytes_per_param = "fp8"'),
    Param("kv_bytes_per_elem", "float", 2.0, DOMAINS["kv_bytes_per_elem"], example='kv_bytes_per_elem = "fp8"'),
    Param("ttft_slo_ms", "float", math.inf, DOMAINS["ttft_slo_ms"], example="ttft_slo_ms = 2000"),
    Param("tpot_slo_ms", "float", math.inf, DOMAINS["tpot_slo_ms"], example="tpot_slo_ms = 50"),
    Param("slo_ms", "float", math.inf, DOMAINS["slo_ms"], example="slo_ms = 30000  # end to end"),
    Param("percentile", "float", 0.99, DOMAINS["percentile"], example="percentile = 0.99"),
    Param("rho_max", "float", 0.85, DOMAINS["rho_max"], example="rho_max = 0.85"),
    Param("rho_min", "float", 0.5, DOMAINS["rho_min"], example="rho_min = 0.5"),
    Param("queue_capacity", "int", math.inf, DOMAINS["queue_capacity"], example="queue_capacity = 1000  # or inf"),
    Param("service_cv", "float", 0.0, DOMAINS["service_cv"], example="service_cv = 0.1"),
    Param("replicas", "int", 1, DOMAINS["replicas"], example="replicas = [1, 2, 4, 8]",
          search_example="replicas = {low = 1, high = 64}"),
    Param("max_batched_tokens", "int", math.inf, DOMAINS["max_batched_tokens"],
          example="max_batched_tokens = [2048, 8192, inf]",
          search_example="max_batched_tokens = [2048, 8192]"),
    Param("batch_size", "int", None, DOMAINS["batch_size"], example="batch_size = [16, 64, 256]",
          search_example="batch_size = {low = 1, high = 512, log = true}", ascending=True),
)
REQUIRED: tuple[str, ...] = ("arrival_rps", "prompt_tokens", "output_tokens", "batch_size", "model", "gpu")
STEP_KEYS: tuple[str, ...] = ("t_fixed_ms", "t_token_ms", "t_ctx_ms")
ROOFLINE_KEYS: tuple[str, ...] = ("eta_bw", "eta_flops", "t_seq_us")

_R, _S = WHEN_ROOFLINE, WHEN_SIMULATION

#: The verdicts in continuous serving's terms (`sweep.decide.verdict` computes them).
SLO_OK = Column("slo_ok", "bool", "-",
                "Every SLO the grid sets holds at `percentile`: ttft_p_ms <= ttft_slo_ms, tpot_p_ms <= tpot_slo_ms, "
                "e2e_p_ms <= slo_ms (an absent SLO holds; an unbounded latency fails).")
FEASIBLE = Column("feasible", "bool", "-",
                  "stable and mem_ok and TTFT, TPOT and E2E at `percentile` bounded: considered by every decision.")

COLUMNS: tuple[Column, ...] = (
    base.POINT_ID,
    shared.MODEL,
    shared.GPU,
    shared.GPUS_PER_REPLICA,
    Column("arrival_rps", "float64", "requests/s",
           "Total arrival rate for the fleet; under workload = closed the rate at which requests become due "
           "(vllm bench serve --request-rate), NULL (no limit) for a pure closed loop.", null_when=UNLIMITED),
    shared.REPLICAS,
    Column("clients", "int64", "clients",
           "workload = closed: the clients over the fleet (each replica gets clients / replicas; the simulator "
           "runs that rounded, at least 1), each sending its next request when the last finished; NULL (no "
           "limit) in an open loop.", null_when=UNLIMITED),
    Column("think_time_s", "float64", "s",
           "workload = closed: a client's mean think time between a finish and its next request (exponential); "
           "0 in an open loop."),
    Column("lambda_per_replica_rps", "float64", "requests/s",
           "Per-replica arrival rate arrival_rps / replicas; NULL (no limit) for a pure closed loop.",
           null_when=UNLIMITED),
    Column("prompt_tokens", "float64", "tokens", "Mean prompt length P (lognormal, rounded, at least 1)."),
    Column("prompt_cv", "float64", "-", "Coefficient of variation of the prompt length."),
    Column("output_tokens", "float64", "tokens", "Mean output length O (lognormal, rounded, at least 1)."),
    Column("output_cv", "float64", "-", "Coefficient of variation of the output length."),
    Column("batch_size", "int64", "sequences", "The cap N on running sequences (vLLM max_num_seqs)."),
    Column("max_batched_tokens", "int64", "tokens",
           "The token budget M of one step (max_num_batched_tokens); NULL (the grid's inf) = no budget: "
           "a whole prompt in one step.",
           null_when=UNLIMITED),
    Column("t_step_fixed_ms", "float64", "ms",
           "Fixed time of one step (weights read, launch), T = t_fixed + t_token n_tok + t_ctx n_ctx. "
           "Roofline: the refined step linearized at the point's load: the line through the decode step of the "
           "r sequences a sequence sees (1 + the mean running count, at most the slots; 1 at light load) and the "
           "step where one of them prefills its chunk min(prompt_tokens, max_batched_tokens), so it varies with "
           "the load, batch_size and max_batched_tokens; optimum.parquet repeats the row's first point's."),
    Column("t_token_ms", "float64", "ms", "Time per new token in a step (roofline: see t_step_fixed_ms)."),
    Column("t_ctx_ms", "float64", "ms",
           "Time per cached token a step's sequences hold (roofline: its KV bytes over g bw eta_bw)."),
    Column("service_source", "dict", "-", "Where the step-time coefficients came from: given | fitted | roofline."),
    shared.ETA_BW,
    shared.ETA_FLOPS,
    Column("t_seq_us", "float64", "us",
           "The engine's host time per sequence a step carries (the grid's t_seq_us, 0 by default), in "
           "t_step_fixed_ms at the point's running count.", _R),
    Column("request_latency_ms", "float64", "ms",
           "The server's fixed latency per request outside the engine's steps (HTTP, chat template and "
           "tokenization, streaming; the grid's request_latency_ms, 0 by default), included in every TTFT and E2E "
           "column and, under workload = closed, in each client's cycle."),
    Column("weight_bytes_per_param", "float64", "bytes", "Weights dtype size."),
    shared.KV_BYTES_PER_ELEM,
    Column("ttft_slo_ms", "float64", "ms",
           "TTFT SLO at `percentile`; NULL (the grid's inf, the default) = no TTFT SLO.",
           null_when=UNLIMITED),
    Column("tpot_slo_ms", "float64", "ms",
           "TPOT SLO at `percentile`; NULL (the grid's inf, the default) = no TPOT SLO.",
           null_when=UNLIMITED),
    Column("slo_ms", "float64", "ms",
           "End-to-end latency SLO at `percentile`; NULL (the grid's inf, the default) = no end-to-end SLO.",
           null_when=UNLIMITED),
    Column("percentile", "float64", "-", "Percentile q of the SLOs."),
    Column("rho_max", "float64", "-", "Near-saturation threshold on rho (action, replicas_min)."),
    Column("rho_min", "float64", "-", "Over-provisioning threshold on rho (action)."),
    Column("queue_capacity", "int64", "requests",
           "Waiting requests before arrivals are dropped (simulator); NULL (the grid's inf) = unbounded.",
           null_when=UNLIMITED),
    Column("service_cv", "float64", "-", "Coefficient of variation of multiplicative per-step noise."),
    Column("kv_capacity_tokens", "float64", "tokens",
           "KV capacity C: free HBM / KV bytes per token (paged: whole blocks)."),
    shared.WEIGHTS_GB,
    shared.FREE_GB,
    shared.WEIGHTS_FIT,
    Column("mem_ok", "bool", "-",
           "The weights fit and a mean request's reservation (P + O tokens, paged: in blocks) fits in C."),
    Column("capacity_rps", "float64", "requests/s",
           "The largest sustainable per-replica arrival rate at this cap and budget (the analytic model's)."),
    Column("rho", "float64", "-",
           "Load: lambda_per_replica_rps / capacity_rps (drives the operating rules); "
           "NULL where the weights or a mean request do not fit (no capacity).",
           null_when="mem_ok"),
    Column("stable", "bool", "-", "The load is sustainable at the cap and the KV capacity (rho < 1)."),
    Column("mean_running", "float64", "sequences", "Mean running sequences (admitted, not finished)."),
    Column("step_mean_ms", "float64", "ms", "Mean step time; NULL (unbounded) where not stable.", null_when="stable"),
    Column("ttft_mean_ms", "float64", "ms",
           "Mean time to first token; NULL (unbounded) where not stable.",
           null_when="stable"),
    Column("ttft_p_ms", "float64", "ms",
           "TTFT at `percentile`; NULL (unbounded) where not stable.",
           null_when="stable"),
    Column("tpot_mean_ms", "float64", "ms",
           "Mean time per output token after the first; NULL (unbounded) where not stable.",
           null_when="stable"),
    Column("tpot_p_ms", "float64", "ms",
           "TPOT at `percentile`; NULL (unbounded) where not stable.",
           null_when="stable"),
    Column("itl_p_ms", "float64", "ms",
           "ITL at `percentile`: the gap between two consecutive tokens of a request, every gap pooled (what "
           "`vllm bench serve` prints as ITL; TPOT is a request's mean gap), from the per-token gap law "
           "(sweep.models.continuous.itl; its one-part inversion, exact without step noise); NULL (unbounded) "
           "where not stable.",
           null_when="stable"),
    Column("e2e_mean_ms", "float64", "ms",
           "Mean end-to-end latency (arrival to last token); NULL (unbounded) where not stable.",
           null_when="stable"),
    Column("e2e_p_ms", "float64", "ms", "E2E at `percentile`; NULL (unbounded) where not stable.", null_when="stable"),
    Column("output_tok_s", "float64", "tokens/s",
           "Output tokens per second of one replica: throughput_rps x O."),
    Column("throughput_rps", "float64", "requests/s",
           "Requests per second one replica serves: lambda_per_replica_rps when stable, capacity_rps when "
           "saturated (open loop); under workload = closed the rate its clients send at, the closed loop's "
           "throughput (mean value analysis; the simulator's measured send rate where it decides)."),
    Column("tok_s_per_gpu", "float64", "tokens/s",
           "Output tokens/s per GPU this cap and budget sustain: capacity_rps x output_tokens / gpus_per_replica "
           "(the frontier's throughput axis, as capacity_rps is in dynamic serving)."),
    Column("tok_s_per_user", "float64", "tokens/s",
           "1000 / tpot_mean_ms: the speed one user sees; NULL (undefined: no steady state, TPOT unbounded) "
           "where not stable.",
           null_when="stable"),
    Column("kv_util", "float64", "-", "Time-average share of C reserved by running sequences."),
    Column("analytic_trusted", "bool", "-",
           "The point lies inside the region where the analytic model was shown accurate "
           "(sweep.models.continuous.confidence): false where mean_running >= "
           f"{confidence.RUNNING_SHARE_MAX:g} x the slots (a saturated cap), lambda_per_replica_rps >= "
           f"{confidence.LOAD_MAX:g} x capacity_rps (near saturation; every unstable point); "
           "true where mem_ok is false (a closed form). Where false, check the point with the simulator "
           "(latency_model = \"simulated\", or a [simulation] table)."),
    SLO_OK,
    FEASIBLE,
    base.ACTION,
    shared.COST_USD_PER_HOUR,
    Column("cost_usd_per_mtok", "float64", "USD",
           "Cost per million output tokens at this load: cost_usd_per_hour / (output_tok_s x replicas x 3600) x 1e6; "
           "NULL (unbounded) where not stable.",
           null_when="stable"),
    # ---- the simulator (a [simulation] table, or latency_model = simulated)
    *(Column(f"sim_{m}_{k}_ms", "float64", "ms",
             f"Simulated {what} {m.upper()}{' (95% half-width across replications)' if hw else ''}; "
             "NULL (unbounded) where not steady.", _S, "sim_steady")
      for m in ("ttft", "tpot", "e2e") for k, what, hw in (("mean", "mean", False), ("mean_hw", "mean", True),
                                                            ("p", "percentile", False), ("p_hw", "percentile", True))),
    Column("sim_mean_running", "float64", "sequences", "Simulated mean running sequences.", _S),
    Column("sim_step_mean_ms", "float64", "ms", "Simulated mean step time.", _S),
    Column("sim_output_tok_s", "float64", "tokens/s", "Simulated output tokens per second of one replica.", _S),
    Column("sim_kv_util", "float64", "-", "Simulated time-average share of C reserved.", _S),
    Column("sim_drop_rate", "float64", "-",
           "Simulated share of arrivals dropped (full queue, or a reservation larger than C).", _S),
    Column("sim_preempt", "float64", "-",
           "Simulated preemptions per admitted request (kv_admission = on_demand: the most recently admitted "
           "sequence is preempted when a step's tokens find no free KV block; 0 under reserve, which never "
           "preempts).", _S),
    Column("sim_recomputed_tok", "float64", "tokens",
           "Simulated cached tokens freed by preemption, per admitted request: the prompt and output tokens "
           "recomputed when the preempted sequence is readmitted (0 under kv_admission = reserve).", _S),
    Column("sim_steady", "bool", "-",
           "Every replication reached a steady state (its last quarter's mean TTFT at most twice its first's); "
           "where false the sim_* latencies are unbounded (NULL).", _S),
    Column("ttft_rel_err", "float64", "-",
           "(analytic mean TTFT - sim_ttft_mean_ms) / sim_ttft_mean_ms; NULL where either is unbounded.",
           _S, "stable, sim_steady"),
    Column("tpot_rel_err", "float64", "-",
           "(analytic mean TPOT - sim_tpot_mean_ms) / sim_tpot_mean_ms; NULL where either is unbounded.",
           _S, "stable, sim_steady"),
)

ROW_CONSTANT: tuple[str, ...] = (
    "model", "gpu", "gpus_per_replica", "arrival_rps", "replicas", "clients", "think_time_s",
    "lambda_per_replica_rps", "prompt_tokens", "prompt_cv", "output_tokens", "output_cv", "t_step_fixed_ms",
    "t_token_ms", "t_ctx_ms", "service_source",
    "eta_bw", "eta_flops", "t_seq_us", "request_latency_ms", "weight_bytes_per_param", "kv_bytes_per_elem",
    "ttft_slo_ms", "tpot_slo_ms", "slo_ms", "percentile", "rho_max", "rho_min", "queue_capacity", "service_cv",
    "kv_capacity_tokens", "weights_gb", "free_gb", "weights_fit", "cost_usd_per_hour",
)

DECISIONS = Decisions(
    row_axes=("max_batched_tokens", "batch_size"),
    capacity="tok_s_per_gpu",
    latency="tok_s_per_user",
    latency_sign=-1.0,  # both frontier objectives rise: minimise -tok_s_per_user
    mean_latency="e2e_mean_ms",
    utilisation="rho",
    answer_fields=(
        ("", "batch_size", "int64", "sequences"),
        ("_max_batched_tokens", "max_batched_tokens", "int64", "tokens"),
        ("_ttft_p_ms", "ttft_p_ms", "float64", "ms"),
        ("_tpot_p_ms", "tpot_p_ms", "float64", "ms"),
        ("_e2e_p_ms", "e2e_p_ms", "float64", "ms"),
        ("_e2e_mean_ms", "e2e_mean_ms", "float64", "ms"),
        ("_tok_s_per_gpu", "tok_s_per_gpu", "float64", "tokens/s"),
        ("_tok_s_per_user", "tok_s_per_user", "float64", "tokens/s"),
        ("_rho", "rho", "float64", "-"),
        ("_analytic_trusted", "analytic_trusted", "bool", "-"),
        ("_point_id", "point_id", "int64", "-"),
    ),
)


def kv_capacity_tokens(free_bytes: Array, kv_bytes_per_token: Array, block_tokens: Array | float, *,
                       paged: bool) -> Array:
    """C = floor(free HBM / KV bytes per token), in whole blocks when paged; 0 where the
    weights do not fit."""
    tokens = jnp.floor(jnp.maximum(free_bytes, 0.0) / kv_bytes_per_token)
    return jnp.floor(tokens / block_tokens) * block_tokens if paged else tokens


#: `presolve`'s keys: the fixed point a point's inputs carry into `point` under `[sensitivity]`
STATE_TD, STATE_TP = "_cb_state_td", "_cb_state_tp"




def fill_keys(model: ServingModel, values: dict[str, list[Any]], where: Callable[[str], str], source: str,
              required: Sequence[str], slo_keys: Sequence[str] = ()) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Continuous serving's rules for a grid's keys (also each pool's of disaggregated serving):
    the `required` ones present, the step coefficients all given or none (then the roofline,
    and no roofline input beside given coefficients), at least one of `slo_keys` when any are
    named, defaults filled. Returns the values and the static `service_source`."""
    for key in required:
        if key not in values:
            # the example in the grid's own name for the key (a pool's key carries the pool's name)
            example, named = model.param_by_key[key].example, where(key).rpartition(".")[2]
            if example.startswith(f"{key} "):
                example = named + example[len(key):]
            raise GridError(source, where(key), None, f"is required, e.g. {example}")
    given = [k for k in STEP_KEYS if k in values]
    if given and len(given) != len(STEP_KEYS):
        missing = [k for k in STEP_KEYS if k not in values]
        raise GridError(source, where(missing[0]), None,
                        "give all of t_fixed_ms, t_token_ms and t_ctx_ms, or none "
                        "(roofline estimate from the catalogs)")
    if given:
        for key in ROOFLINE_KEYS:
            if key in values:
                raise GridError(source, where(key), values[key][0],
                                "roofline input given, but the step-time coefficients are given too; drop one")
    if slo_keys and not any(k in values for k in slo_keys):
        raise GridError(source, where("ttft_slo_ms"), None,
                        "continuous serving needs at least one SLO: ttft_slo_ms, tpot_slo_ms or slo_ms "
                        "(end to end)")
    out = dict(values)
    for p in model.params:
        if p.key not in out and p.default is not None and not (given and p.key in ROOFLINE_KEYS):
            out[p.key] = [p.default]
    return out, {"service_source": "given" if given else "roofline"}


class ContinuousModel(ServingModel):
    """`serving = "continuous"`, `latency_model = "analytic"`: the fixed-point model of
    `sweep.models.continuous.analytic` decides."""

    serving: ClassVar[str] = "continuous"
    name: ClassVar[str] = "analytic"
    params: ClassVar[tuple[Param, ...]] = PARAMS
    columns: ClassVar[tuple[Column, ...]] = COLUMNS + planning_columns(
        SLO_CHECKS, ("t_fixed_ms", "t_token_ms", "t_ctx_ms"), ("prompt_tokens", "output_tokens"),
        {"arrival_rps": "request/s", "t_fixed_ms": "ms", "t_token_ms": "(ms/token)", "t_ctx_ms": "(ms/context token)",
         "prompt_tokens": "token", "output_tokens": "token"})
    coefficient_keys: ClassVar[tuple[str, ...]] = ("t_fixed_ms", "t_token_ms", "t_ctx_ms")
    length_keys: ClassVar[tuple[str, ...]] = ("prompt_tokens", "output_tokens")
    #: three SLO latencies against six inputs: reverse mode carries three cotangents where
    #: forward mode carries six tangents (benchmarks/uncertainty.py: 3.1-3.5x the plain kernel
    #: on a 2-core EPYC; forward mode measured about as fast with the inputs as one vector,
    #: and 228x as separate scalars, where XLA recomputes the tangents per column)
    derivative_mode: ClassVar[str] = "reverse"
    echo: ClassVar[tuple[str, ...]] = (
        "model", "gpu", "gpus_per_replica", "arrival_rps", "replicas", "clients", "think_time_s", "prompt_tokens",
        "prompt_cv", "output_tokens", "output_cv", "batch_size", "max_batched_tokens", "request_latency_ms",
        "weight_bytes_per_param", "kv_bytes_per_elem", "ttft_slo_ms", "tpot_slo_ms", "slo_ms", "percentile",
        "rho_max", "rho_min", "queue_capacity", "service_cv",
    )
    decisions: ClassVar[Decisions] = DECISIONS
    row_constant: ClassVar[tuple[str, ...]] = ROW_CONSTANT
    slo_checks: ClassVar[tuple[tuple[str, str], ...]] = SLO_CHECKS
    views: ClassVar[Views] = VIEWS
    objectives: ClassVar[dict[str, tuple[str, str]]] = {
        "min_cost": ("cost_usd_per_hour", "minimize"),
        "min_cost_per_mtok": ("cost_usd_per_mtok", "minimize"),
        "max_tok_s_per_gpu": ("tok_s_per_gpu", "maximize"),
        "max_tok_s_per_user": ("tok_s_per_user", "maximize"),
        "min_ttft": ("ttft_p_ms", "minimize"),
        "min_tpot": ("tpot_p_ms", "minimize"),
    }
    profile_kind: ClassVar[str] = "step"
    #: More load: more running sequences, a larger share of the capacity, longer queues.
    monotone_in_load: ClassVar[tuple[str, ...]] = ("lambda_per_replica_rps", "rho", "mean_running", "output_tok_s")
    #: The contract's grids (`ServingModel.contract_variants`): given step times and contiguous
    #: KV; the roofline with paged KV and a reserve.
    contract_variants: ClassVar[tuple[Mapping[str, Any], ...]] = (
        {"grid": {"eta_bw": None, "eta_flops": None, "t_seq_us": None}},
        {"options": {"kv_allocation": "paged", "block_tokens": 16, "reserve_fraction": 0.1},
         "grid": {"t_fixed_ms": None, "t_token_ms": None, "t_ctx_ms": None}},
    )

    # -- validation -----------------------------------------------------------------------

    def fill(self, values: dict[str, list[Any]], where: Callable[[str], str],
             source: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        if "clients" in values and "arrival_rps" not in values:
            # a closed loop without a due rate: every client sends when free (--request-rate inf)
            values = {**values, "arrival_rps": [math.inf]}
        return fill_keys(self, values, where, source, REQUIRED, slo_keys=SLO_KEYS)

    def check(self, values: Mapping[str, Sequence[Any]], options: Any, where: Callable[[str], str],
              source: str) -> None:
        closed = getattr(options, "workload", "open") == "closed"
        if closed and not all(math.isfinite(v) for v in values["clients"]):  # (absent: refused by the loader)
            raise GridError(source, where("clients"), math.inf,
                            'must be finite with workload = "closed" (the clients over the fleet), '
                            'e.g. clients = [64, 256]')
        if not closed:
            for key, idle in (("clients", math.inf), ("think_time_s", 0.0)):
                if any(v != idle for v in values[key]):
                    raise GridError(source, where(key), values[key][0],
                                    'is a closed loop\'s: set workload = "closed" under [options], or drop ' + key)
        if max(values["rho_min"]) >= min(values["rho_max"]):
            raise GridError(source, where("rho_min"), max(values["rho_min"]),
                            f"must be < rho_max for every combination (smallest rho_max is {min(values['rho_max'])})")
        if min(values["max_batched_tokens"]) < max(values["batch_size"]):
            raise GridError(source, where("max_batched_tokens"), min(values["max_batched_tokens"]),
                            f"must be >= {where('batch_size')} {max(values['batch_size'])} for every combination: "
                            "a step must fit one decode token per running sequence")
        if "t_fixed_ms" in values and min(values["t_fixed_ms"]) == 0 and min(values["t_token_ms"]) == 0:
            raise GridError(source, where("t_token_ms"), 0.0,
                            "t_fixed_ms and t_token_ms are both 0: a step would take no time")

    # -- evaluation -------------------------------------------------------------------------

    def static(self, spec: GridSpec) -> dict[str, Any]:
        return dict(
            paged=spec.options.kv_allocation == "paged",
            service_source=spec.service_source,
            block_tokens=float(spec.options.block_tokens),
            reserve_fraction=spec.options.reserve_fraction,
            prefill_first=spec.options.scheduler_policy == "prefill_first",
            # only when set, so that a reserve grid's static arguments stay what they were
            **({"on_demand": True} if spec.options.kv_admission == "on_demand" else {}),
            **({"steps": spec.options.scheduler_steps} if spec.options.scheduler_steps > 1 else {}),
            **({"closed": True} if spec.options.workload == "closed" else {}),
        )

    def _engine(self, x: Mapping[str, Array], *, paged: bool, service_source: str, block_tokens: float,
                reserve_fraction: float, prefill_first: bool = False, closed: bool = False) -> dict[str, Any]:
        """One point's engine before the queueing model: step-time coefficients, arrival
        rate, KV capacity and memory verdict, and the arguments of `cb_point` (`args`).
        ``closed``: ``lam`` is the rate requests become due (inf: a pure closed loop) and
        ``clients`` the clients one replica serves."""
        gpus = x["gpus_per_replica"]
        kv_per_token = x["kv_elems_per_token"] * x["kv_bytes_per_elem"]
        weights = x["n_params"] * x["weight_bytes_per_param"]
        lam = x["arrival_rps"] / x["replicas"]
        clients = x["clients"] / x["replicas"] if closed else jnp.inf
        free = gpus * x["hbm_bytes"] * (1.0 - reserve_fraction) - weights
        block = block_tokens if paged else 1.0
        c_tok = kv_capacity_tokens(free, kv_per_token, block, paged=paged)
        reservation = jnp.ceil((x["prompt_tokens"] + x["output_tokens"]) / block) * block
        mem_ok = (free >= 0.0) & (reservation <= c_tok)
        kv_tokens = jnp.where(mem_ok, c_tok, 1.0)
        roof: dict[str, Array] = {}
        if service_source == "roofline":
            eta_bw = x["eta_bw"] if "eta_bw" in x else x["gpu_eta_bw"]
            eta_flops = x["eta_flops"] if "eta_flops" in x else x["gpu_eta_flops"]
            # the refined step linearized at the occupancy this load produces (docs/roofline.md)
            # (a closed loop: at the occupancy its due rate would make, at most its clients;
            # the flow balance takes a finite stand-in for an unlimited rate)
            line_lam = jnp.where(jnp.isfinite(lam), lam, 1e12) if closed else lam
            tf, tt, tc = rl.operating_line(rl.replica_params(x, eta_bw, eta_flops), line_lam, x["prompt_tokens"],
                                           x["output_tokens"], x["max_batched_tokens"], x["batch_size"], kv_tokens,
                                           block, kv_per_token, x["attn_width"], x["n_layers"], clients)
            roof = {"eta_bw": eta_bw, "eta_flops": eta_flops, "t_seq_us": x["t_seq_us"]}
        else:
            tf, tt, tc = x["t_fixed_ms"] * 1e-3, x["t_token_ms"] * 1e-3, x["t_ctx_ms"] * 1e-3
        args = (lam, x["prompt_tokens"], x["prompt_cv"], x["output_tokens"], x["output_cv"], x["batch_size"],
                x["max_batched_tokens"], kv_tokens, block, tf, tt, tc, x["service_cv"],
                x["percentile"])
        return dict(gpus=gpus, weights=weights, roof=roof, tf=tf, tt=tt, tc=tc, lam=lam, free=free, c_tok=c_tok,
                    mem_ok=mem_ok, reservation=reservation, args=args, clients=clients)

    def presolve(self, x: Mapping[str, Array], **static: Any) -> dict[str, Array]:
        """The step-time fixed point (T_d, T_p) of `sweep.models.continuous.analytic`, solved once
        per point for `[sensitivity]`'s derivative program (see `ServingModel.presolve`)."""
        engine_keys = {k: v for k, v in static.items() if k not in ("on_demand", "steps", "closed")}
        td, tp = analytic.cb_state(*self._engine(x, **engine_keys)["args"],
                                   prefill_first=static.get("prefill_first", False), steps=static.get("steps", 1))
        return {STATE_TD: td, STATE_TP: tp}

    def point(self, x: Mapping[str, Array], *, paged: bool, service_source: str, block_tokens: float,
              reserve_fraction: float, prefill_first: bool = False, on_demand: bool = False,
              steps: int = 1, closed: bool = False) -> dict[str, Array]:
        e = self._engine(x, paged=paged, service_source=service_source, block_tokens=block_tokens,
                         reserve_fraction=reserve_fraction, closed=closed)
        gpus, weights, roof, tf, tt, tc, lam, free, c_tok, mem_ok = (
            e[k] for k in ("gpus", "weights", "roof", "tf", "tt", "tc", "lam", "free", "c_tok", "mem_ok"))
        # the server's fixed latency per request outside the steps: on every TTFT and E2E, and
        # in a closed loop part of each client's cycle, which the engine sees as thinking
        latency = x["request_latency_ms"] * 1e-3
        if closed:  # mean value analysis over the open model (docs/continuous.md, "Closed loops")
            r = closed_model.cb_closed(e["clients"], x["think_time_s"] + latency, *e["args"][1:], rate=lam,
                                       prefill_first=prefill_first, steps=steps)
            seen, through = r["lam_seen"], r["throughput_rps"]
        else:
            state = (x[STATE_TD], x[STATE_TP]) if STATE_TD in x else None
            r = analytic.cb_point(*e["args"], state=state, prefill_first=prefill_first, steps=steps)
            seen, through = lam, lam
        stable = r["stable"] & mem_ok
        rho = jnp.where(r["capacity_rps"] > 0, through / jnp.where(r["capacity_rps"] > 0, r["capacity_rps"], 1.0),
                        INF)

        def gate(v: Array) -> Array:
            return jnp.where(stable, v, INF)

        tpot_ms = gate(r["tpot_mean"] * MS)
        itl_ms = gate(itl.itl_quantile_fast(x["percentile"], r["step_mean"], r["tpot_mean"], r["mean_running"], seen,
                                             x["prompt_tokens"], x["max_batched_tokens"], tf, tt, x["service_cv"],
                                             prefill_first=prefill_first) * MS)
        if steps > 1:  # a client's messages come a window apart (docs/continuous.md, "Engine variants")
            itl_ms = itl_ms * steps
        # a saturated engine delivers its capacity; the rest of the offered load queues
        served = jnp.where(stable, through, jnp.where(mem_ok, jnp.minimum(through, r["capacity_rps"]), 0.0))
        out_tok = jnp.where(stable, r["output_tok_s"], served * x["output_tokens"])
        cost_h = x["replicas"] * gpus * x["usd_per_gpu_hour"]
        per_mtok = jnp.where(stable & (out_tok > 0),
                             cost_h / jnp.where(out_tok > 0, out_tok * x["replicas"], 1.0) / 3600.0 * 1e6, INF)
        if closed:  # the closed loop's own rule (confidence.closed_loop_trusted)
            trusted = ~mem_ok | closed_loop_trusted(
                clients=e["clients"], cap=x["batch_size"], slots=r["slots"], saturated=r["saturated"],
                mean_running=r["mean_running"],
                ttft_served=r["ttft_served"], ttft_lone=r["ttft_lone"], kv_tokens=c_tok,
                prompt_tokens=x["prompt_tokens"], prompt_cv=x["prompt_cv"], output_tokens=x["output_tokens"],
                output_cv=x["output_cv"], block=block_tokens if paged else 1.0, think_s=x["think_time_s"])
        else:
            trusted = analytic_trusted(mean_running=r["mean_running"], slots=r["slots"], lam=lam,
                                       capacity_rps=r["capacity_rps"], mem_ok=mem_ok)
        if on_demand:  # the reserve engine's values hold where its reservations never block
            trusted = trusted & reservations_never_block(
                mean_running=r["mean_running"], cap=x["batch_size"], kv_tokens=c_tok,
                prompt_tokens=x["prompt_tokens"], prompt_cv=x["prompt_cv"], output_tokens=x["output_tokens"],
                output_cv=x["output_cv"], block=block_tokens if paged else 1.0)
        return {
            "lambda_per_replica_rps": lam,
            "t_step_fixed_ms": tf * MS,
            "t_token_ms": tt * MS,
            "t_ctx_ms": tc * MS,
            "service_source": jnp.asarray(SERVICE_SOURCES.index(service_source), dtype=jnp.int32),
            "kv_capacity_tokens": c_tok,
            "weights_gb": weights * 1e-9,
            "free_gb": free * 1e-9,
            "weights_fit": free >= 0.0,
            "mem_ok": mem_ok,
            "capacity_rps": jnp.where(mem_ok, r["capacity_rps"], 0.0),
            "rho": jnp.where(mem_ok, rho, INF),
            "stable": stable,
            "mean_running": jnp.where(stable, r["mean_running"], x["batch_size"]),
            "step_mean_ms": gate(r["step_mean"] * MS),
            "ttft_mean_ms": gate((r["ttft_mean"] + latency) * MS),
            "ttft_p_ms": gate((r["ttft_p"] + latency) * MS),
            "tpot_mean_ms": tpot_ms,
            "tpot_p_ms": gate(r["tpot_p"] * MS),
            "itl_p_ms": itl_ms,
            "e2e_mean_ms": gate((r["e2e_mean"] + latency) * MS),
            "e2e_p_ms": gate((r["e2e_p"] + latency) * MS),
            "output_tok_s": out_tok,
            "throughput_rps": served,
            "tok_s_per_gpu": jnp.where(mem_ok, r["capacity_rps"], 0.0) * x["output_tokens"] / gpus,
            # no steady state, no speed a user sees: +inf is the engine's NULL (never the limit 0)
            "tok_s_per_user": jnp.where(stable, 1e3 / jnp.where(stable, tpot_ms, 1.0), INF),
            "kv_util": jnp.where(stable, r["kv_util"], 1.0),
            "analytic_trusted": trusted,
            "cost_usd_per_hour": cost_h,
            "cost_usd_per_mtok": per_mtok,
            "_rho_rules": jnp.where(mem_ok, rho, INF),
            **roof,
        }

    def derivation(self, row: Mapping[str, Any], figures: Mapping[str, float] | None = None,
                   options: Mapping[str, Any] | None = None) -> list[base.Step] | None:
        """docs/continuous.md's steps with this point's numbers (`sweep.models.continuous.derive`)."""
        from sweep.models.continuous.derive import derivation

        return derivation(row, figures, options)

    def host_pass(self, spec: GridSpec) -> HostPass | None:
        if spec.simulation is None:
            return None
        return ContinuousSimulation(spec.simulation, decides=self.needs_host_pass,
                                    paged=spec.options.kv_allocation == "paged",
                                    block_tokens=float(spec.options.block_tokens),
                                    scheduler_policy=spec.options.scheduler_policy,
                                    scheduler_steps=spec.options.scheduler_steps,
                                    kv_admission=spec.options.kv_admission,
                                    closed=spec.options.workload == "closed")


class SimulatedContinuous(ContinuousModel):
    """`serving = "continuous"`, `latency_model = "simulated"`: the simulator's percentiles
    decide, its steady-state verdict is `stable`."""

    name: ClassVar[str] = "simulated"
    needs_host_pass: ClassVar[bool] = True
    #: `stable` is the simulator's verdict here, so an unbounded analytic estimate (in the
    #: relative errors) is explained by no column: its own NULL word says so.
    columns: ClassVar[tuple[Column, ...]] = tuple(
        c.with_null(f"{ANALYTIC_UNBOUNDED}, sim_steady") if c.name in ("ttft_rel_err", "tpot_rel_err") else c
        for c in COLUMNS)


class ContinuousSimulation(HostPass):
    """The iteration-level simulator (`sweep.models.continuous.sim`) on one chunk's points."""

    def __init__(self, options: SimulationOptions, *, decides: bool, paged: bool, block_tokens: float,
                 scheduler_policy: str = "chunked", scheduler_steps: int = 1, kv_admission: str = "on_demand",
                 closed: bool = False) -> None:
        self.options = options
        self.closed = closed
        self.scheduler_policy = scheduler_policy
        self.scheduler_steps = scheduler_steps
        self.kv_admission = kv_admission
        self.decides = decides
        self.block = block_tokens if paged else 1.0
        self.trace = np.asarray(options.trace_times) if options.trace_times else None

    def __call__(self, cols: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        from sweep.models.continuous.sim import CBSimSettings, simulate_continuous

        o = self.options
        latency = cols["request_latency_ms"] * 1e-3  # (padded like every column; the first n are the points)
        params = {
            "lam": cols["lambda_per_replica_rps"][:n],
            "prompt_mean": cols["prompt_tokens"][:n], "prompt_cv": cols["prompt_cv"][:n],
            "output_mean": cols["output_tokens"][:n], "output_cv": cols["output_cv"][:n],
            "cap": cols["batch_size"][:n].astype(np.float64),
            "max_batched_tokens": cols["max_batched_tokens"][:n],
            "kv_capacity_tokens": np.maximum(cols["kv_capacity_tokens"][:n], 1.0),
            "block_tokens": np.full(n, self.block),
            "queue_capacity": cols["queue_capacity"][:n],
            "t_fixed": cols["t_step_fixed_ms"][:n] * 1e-3, "t_token": cols["t_token_ms"][:n] * 1e-3,
            "t_ctx": cols["t_ctx_ms"][:n] * 1e-3, "service_cv": cols["service_cv"][:n],
        }
        settings = CBSimSettings(n_requests=o.n_requests, warmup=o.warmup, replications=o.replications, seed=o.seed)
        if self.scheduler_steps != 1 or self.kv_admission != "reserve" or self.closed:
            # the variants the JAX simulator has no room for (on-demand KV, the default,
            # multi-step windows, closed loops): the compiled event loop, the same streams and
            # measurement
            from sweep.models.continuous import loop

            closed: dict[str, Any] = {}
            if self.closed:  # each replica's share of the clients, rounded, at least one (lam: the due rate)
                share = np.rint(cols["clients"][:n] / cols["replicas"][:n])
                closed = dict(clients=np.maximum(share, 1).astype(np.int64),
                              think_s=cols["think_time_s"][:n] + latency[:n])
            sim = loop.simulate_continuous(params, settings, percentile=cols["percentile"][:n], trace=self.trace,
                                           scenario_ids=cols["point_id"][:n], scheduler_policy=self.scheduler_policy,
                                           scheduler_steps=self.scheduler_steps, kv_admission=self.kv_admission,
                                           **closed)
        else:
            sim = simulate_continuous(params, settings, percentile=cols["percentile"][:n], trace=self.trace,
                                      scenario_ids=cols["point_id"][:n], scheduler_policy=self.scheduler_policy)
        pad = np.minimum(np.arange(len(cols["point_id"])), n - 1)
        sim = {k: np.asarray(v)[pad] for k, v in sim.items()}
        steady = sim["stable"].astype(bool) & cols["mem_ok"]
        out: dict[str, np.ndarray] = {}
        for m in ("ttft", "tpot", "e2e"):
            for k in ("mean", "mean_hw", "p", "p_hw"):
                # a TTFT or E2E carries the server's fixed latency per request, as the analytic columns do
                shift = latency if m != "tpot" and k in ("mean", "p") else 0.0
                out[f"sim_{m}_{k}_ms"] = np.where(steady, (sim[f"{m}_{k}_s"] + shift) * MS, np.inf)
        out["sim_mean_running"] = sim["mean_running"]
        out["sim_step_mean_ms"] = sim["step_mean_s"] * MS
        out["sim_output_tok_s"] = sim["output_tok_s"]
        out["sim_kv_util"] = sim["kv_util"]
        out["sim_drop_rate"] = sim["drop_rate"]
        out["sim_preempt"] = sim["preempt"]
        out["sim_recomputed_tok"] = sim["recomputed"] if "recomputed" in sim else np.zeros(len(pad))
        out["sim_steady"] = steady
        for m in ("ttft", "tpot"):
            a, s = cols[f"{m}_mean_ms"], out[f"sim_{m}_mean_ms"]
            both = np.isfinite(a) & np.isfinite(s) & (s > 0)
            safe = np.where(both, s, 1.0)
            out[f"{m}_rel_err"] = np.where(both, (a - safe) / safe, np.inf)
        if self.decides:
            out["stable"] = steady
            for m in ("ttft", "tpot", "e2e"):
                out[f"{m}_mean_ms"] = out[f"sim_{m}_mean_ms"]
                out[f"{m}_p_ms"] = out[f"sim_{m}_p_ms"]
            out["step_mean_ms"] = np.where(steady, out["sim_step_mean_ms"], np.inf)
            # the gap law on the simulated step, running count and TPOT
            from sweep.models.continuous.itl import itl_quantile_points

            good = steady & np.isfinite(out["sim_tpot_mean_ms"]) & (out["sim_step_mean_ms"] > 0)
            law = np.asarray(itl_quantile_points(
                cols["percentile"], np.where(good, out["sim_step_mean_ms"], 1.0) * 1e-3,
                np.where(good, out["sim_tpot_mean_ms"], 1.0) * 1e-3, sim["mean_running"],
                sim["rate_rps"] if self.closed else cols["lambda_per_replica_rps"], cols["prompt_tokens"],
                cols["max_batched_tokens"],
                cols["t_step_fixed_ms"] * 1e-3, cols["t_token_ms"] * 1e-3, cols["service_cv"],
                prefill_first=self.scheduler_policy == "prefill_first"))
            out["itl_p_ms"] = np.where(good, law * MS, np.inf)
            out["mean_running"] = out["sim_mean_running"]
            out["output_tok_s"] = sim["output_tok_s"]
            if self.closed:  # the clients' measured send rate is the loop's throughput
                out["throughput_rps"] = sim["rate_rps"]
                cap = cols["capacity_rps"]
                out["rho"] = np.where(cap > 0, sim["rate_rps"] / np.where(cap > 0, cap, 1.0), np.inf)
            tpot = out["tpot_mean_ms"]
            fast = steady & (tpot > 0)
            out["tok_s_per_user"] = np.where(fast, 1e3 / np.where(fast, tpot, 1.0), np.inf)  # NULL where unsteady
            out["kv_util"] = sim["kv_util"]
            rate = out["output_tok_s"] * cols["replicas"]
            ok = steady & (rate > 0)
            out["cost_usd_per_mtok"] = np.where(ok, cols["cost_usd_per_hour"] / np.where(ok, rate, 1.0) / 3600.0 * 1e6,
                                                np.inf)
        return out
