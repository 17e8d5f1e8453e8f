"""The prefill pool of disaggregated serving (SPEC 11): the seed's dynamic batcher (SPEC
2-4, 7) whose service time is the prefill of a batch of prompts.

A replica collects prompts into batches (`batch_size`, `batch_window_ms`) and prefills a
batch of B prompts of P tokens in one forward pass, which also emits each request's first
token. With the step coefficients of continuous serving (given or roofline) that pass
carries n_tok = B P new tokens and, once written, n_ctx = B P cached ones:

    T_svc(B) = t_fixed + (t_token + t_ctx) P B        (given coefficients)

and from the SPEC 13 roofline, the secant of the refined step of B prompts through B = 1 and
B = batch_size (`prefill_line`, as the dynamic batcher's `service_line`). The queue is the
greedy batcher of `sweep.models.dynamic.batcher` (the dynamic mode's `batcher` model): its
wait, batching delay and service are the three parts of TTFT.

Memory: the weights, plus a batch's prompts (B P tokens of KV, paged: whole blocks) until
they are handed to the decode pool.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from sweep._lazy import lazy_module
from sweep.errors import GridError
from sweep.models.base import Column, Decisions, Param, ServingModel
from sweep.models.disaggregated import _pools
from sweep.models.dynamic import model as dyn
from sweep.models.dynamic.batcher import batcher_point
from sweep.models.shared import columns as shared
from sweep.models.shared import roofline as rl

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array

    from sweep.grid.spec import GridSpec
else:
    jnp = lazy_module("jax.numpy")

MS, INF = _pools.MS, _pools.INF
_DYN = {p.key: p for p in dyn.PARAMS}

PARAMS: tuple[Param, ...] = _pools.params(
    "model", "gpu", "gpus_per_replica", "arrival_rps", "prompt_tokens", "t_fixed_ms", "t_token_ms", "t_ctx_ms",
    "eta_bw", "eta_flops", "weight_bytes_per_param", "kv_bytes_per_elem", "ttft_slo_ms", "percentile", "rho_max",
    "rho_min", "service_cv", "replicas", "batch_window_ms", "batch_size",
    batch_window_ms=_DYN["batch_window_ms"], batch_size=_DYN["batch_size"])
REQUIRED: tuple[str, ...] = ("model", "gpu", "arrival_rps", "prompt_tokens", "batch_size")


def prefill_line(p: rl.StepParams, batch: Array, prompt_tokens: Array, kv_bytes_per_token: Array,
                 attn_width: Array, n_layers: Array) -> tuple[Array, Array]:
    """(T_fixed, t_req) seconds of T_svc(B) = T_fixed + t_req B: the secant of the SPEC 13
    step that prefills B prompts of `prompt_tokens` (`rl.prefill_work`) through B = 1 and
    B = `batch` (2 when `batch` is 1), exact at both ends."""
    hi = jnp.maximum(batch, 2.0)
    t1, _ = rl.step_time(rl.prefill_work(1.0, prompt_tokens, kv_bytes_per_token, attn_width, n_layers), p)
    th, _ = rl.step_time(rl.prefill_work(hi, prompt_tokens, kv_bytes_per_token, attn_width, n_layers), p)
    t_req = jnp.maximum((th - t1) / (hi - 1.0), 0.0)
    return jnp.maximum(t1 - t_req, 0.0), t_req


COLUMNS: tuple[Column, ...] = (
    shared.MODEL, shared.GPU, shared.GPUS_PER_REPLICA, shared.ARRIVAL_RPS, shared.REPLICAS,
    Column("prompt_tokens", "float64", "tokens", "Mean prompt length P (lognormal, rounded, at least 1)."),
    Column("batch_size", "int64", "prompts", "B: the batch cap of the prefill batcher."),
    Column("batch_window_ms", "float64", "ms",
           "The batcher's window T_max; NULL (the grid's inf) = full batches only.", null_when="unlimited"),
    Column("ttft_slo_ms", "float64", "ms", "TTFT SLO at `percentile`; NULL (the grid's inf, the default) = none.",
           null_when="unlimited"),
    Column("percentile", "float64", "-", "Percentile q of the SLOs."),
    Column("rho_max", "float64", "-", "Near-saturation threshold on rho (action, replicas_min)."),
    Column("rho_min", "float64", "-", "Over-provisioning threshold on rho (action)."),
    Column("service_cv", "float64", "-", "Coefficient of variation of multiplicative per-step noise."),
    Column("weight_bytes_per_param", "float64", "bytes", "Weights dtype size."),
    shared.KV_BYTES_PER_ELEM,
    Column("lambda_per_replica_rps", "float64", "requests/s", "Per-replica arrival rate arrival_rps / replicas."),
    Column("t_svc_fixed_ms", "float64", "ms",
           "T_fixed of the prefill batch's T_svc(B) = T_fixed + t_req B: t_fixed_ms (roofline: the secant's)."),
    Column("t_svc_per_prompt_ms", "float64", "ms",
           "t_req of T_svc(B): (t_token_ms + t_ctx_ms) x prompt_tokens (roofline: the secant's)."),
    Column("t_svc_ms", "float64", "ms", "T_svc(B) at the batch cap: one full batch's prefill."),
    Column("capacity_rps", "float64", "requests/s", "Per-replica capacity B / T_svc(B)."),
    Column("rho", "float64", "-", "The batcher's utilisation lambda T_svc(b*) / b* at its mean batch b*."),
    Column("stable", "bool", "-", "lambda < B / T_svc(B): the batcher keeps up."),
    Column("mean_batch", "float64", "prompts", "Mean prompts per prefill batch (the batcher's fixed point)."),
    Column("wait_mean_ms", "float64", "ms", "Mean wait in the prefill queue before a batch starts.",
           null_when="stable"),
    Column("batching_mean_ms", "float64", "ms", "Mean batching delay (accumulation in the batcher).",
           null_when="stable"),
    Column("service_mean_ms", "float64", "ms", "Mean prefill service time (request-weighted)."),
    Column("ttft_mean_ms", "float64", "ms",
           "Mean time to first token: prefill wait + batching delay + prefill service.", null_when="stable"),
    Column("ttft_p_ms", "float64", "ms", "TTFT at `percentile` (the greedy batcher's estimate).",
           null_when="stable"),
    shared.WEIGHTS_GB,
    shared.FREE_GB,
    Column("mem_ok", "bool", "-", "The weights and one full batch's prompts (B P tokens of KV) fit."),
    _pools.GPUS,
    shared.COST_USD_PER_HOUR,
)


class PrefillPool(ServingModel):
    """The prefill pool: the dynamic batcher serving prompts (module docstring)."""

    serving: ClassVar[str] = "prefill-pool"
    name: ClassVar[str] = "batcher"
    params: ClassVar[tuple[Param, ...]] = PARAMS
    columns: ClassVar[tuple[Column, ...]] = COLUMNS
    echo: ClassVar[tuple[str, ...]] = (
        "model", "gpu", "gpus_per_replica", "arrival_rps", "replicas", "prompt_tokens", "batch_size",
        "batch_window_ms", "ttft_slo_ms", "percentile", "rho_max", "rho_min", "service_cv", "weight_bytes_per_param",
        "kv_bytes_per_elem")
    decisions: ClassVar[Decisions] = Decisions(
        row_axes=("batch_window_ms", "batch_size"), group_axes=("replicas",), size="gpus",
        capacity="capacity_rps", latency="ttft_p_ms", mean_latency="ttft_mean_ms", utilisation="rho")
    row_constant: ClassVar[tuple[str, ...]] = (
        "model", "gpu", "gpus_per_replica", "arrival_rps", "replicas", "prompt_tokens", "ttft_slo_ms", "percentile",
        "rho_max", "rho_min", "service_cv", "weight_bytes_per_param", "kv_bytes_per_elem", "lambda_per_replica_rps",
        "weights_gb", "free_gb", "gpus", "cost_usd_per_hour")
    slo_checks: ClassVar[tuple[tuple[str, str], ...]] = (("ttft_p_ms", "ttft_slo_ms"),)
    coefficient_keys: ClassVar[tuple[str, ...]] = ()
    monotone_in_load: ClassVar[tuple[str, ...]] = ("lambda_per_replica_rps",)

    def fill(self, values: dict[str, list[Any]], where: Callable[[str], str],
             source: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        return _pools.fill(self, values, where, source, REQUIRED)

    def check(self, values: Mapping[str, Sequence[Any]], options: Any, where: Callable[[str], str],
              source: str) -> None:
        _pools.check_rho(values, where, source)
        windowed = any(math.isfinite(w) for w in values["batch_window_ms"])
        if windowed and max(values["batch_size"]) > dyn.MAX_WINDOWED_BATCH:
            raise GridError(source, where("batch_size"), max(values["batch_size"]),
                            f"must be <= {dyn.MAX_WINDOWED_BATCH} with a finite batch_window_ms "
                            "(the windowed closed forms are validated up to there)")

    def static(self, spec: GridSpec) -> dict[str, Any]:
        return dict(service_source=spec.service_source, paged=spec.options.kv_allocation == "paged",
                    block_tokens=float(spec.options.block_tokens), reserve_fraction=spec.options.reserve_fraction)

    def point(self, x: Mapping[str, Array], *args: Any, service_source: str = "given", paged: bool = False,
              block_tokens: float = 16.0, reserve_fraction: float = 0.0) -> dict[str, Array]:
        p1, b_max = x["prompt_tokens"], x["batch_size"]
        kv_per_token, weights, free = _pools.memory(x, reserve_fraction)
        if service_source == "roofline":
            eta_bw, eta_flops = _pools.efficiencies(x)
            t_fixed, t_req = prefill_line(rl.replica_params(x, eta_bw, eta_flops), b_max, p1, kv_per_token,
                                          x["attn_width"], x["n_layers"])
        else:
            t_fixed, t_req = x["t_fixed_ms"] / MS, (x["t_token_ms"] + x["t_ctx_ms"]) / MS * p1
        lam = x["arrival_rps"] / x["replicas"]
        bt = batcher_point(lam, b_max, x["batch_window_ms"] / MS, t_fixed, t_req, x["service_cv"], x["percentile"])
        block = block_tokens if paged else 1.0
        batch_kv = b_max * jnp.ceil(p1 / block) * block * kv_per_token
        stable = bt["stable"]
        gpus = x["replicas"] * x["gpus_per_replica"]
        return {
            "lambda_per_replica_rps": lam,
            "t_svc_fixed_ms": t_fixed * MS,
            "t_svc_per_prompt_ms": t_req * MS,
            "t_svc_ms": (t_fixed + t_req * b_max) * MS,
            "capacity_rps": b_max / (t_fixed + t_req * b_max),
            "rho": bt["rho"],
            "stable": stable,
            "mean_batch": bt["mean_batch"],
            "wait_mean_ms": bt["e_wait"] * MS,
            "batching_mean_ms": bt["e_batch"] * MS,
            "service_mean_ms": bt["e_svc"] * MS,
            "ttft_mean_ms": bt["e_resp"] * MS,
            "ttft_p_ms": bt["p_q"] * MS,
            "weights_gb": weights * 1e-9,
            "free_gb": free * 1e-9,
            "mem_ok": (free >= 0.0) & (batch_kv <= free),
            "gpus": gpus,
            "cost_usd_per_hour": gpus * x["usd_per_gpu_hour"],
            "_rho_rules": jnp.where(stable, bt["rho"], INF),
        }
