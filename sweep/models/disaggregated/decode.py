"""The decode pool of disaggregated serving (SPEC 11): continuous batching (SPEC 10) of
requests whose prompts arrive already cached.

A request reaches a decode replica with its prompt's KV in place and its first token
emitted by the prefill pool. It waits for a slot (the cap `batch_size` and a reservation of
P + O tokens of the KV capacity, as in continuous serving), then decodes its O - 1 other
tokens, one per step. `sweep.models.continuous.analytic` with ``prefilled=True`` is that
engine: no step carries prompt tokens, but each sequence's cache holds P plus what it has
generated, so a step of r sequences takes t_fixed + t_token r + t_ctx r (P + generated).

Step coefficients: given (the grid's, as continuous serving), or from the SPEC 13 roofline
as the secant of the refined decode step through 1 and `batch_size` sequences holding
P + O / 2 cached tokens each (`decode_line`): exact for a lone request and at the cap.

Its "sojourn" runs from the request's arrival at the pool to its last token: the wait for a
slot (plus the step in progress) and (O - 1) steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from sweep._lazy import lazy_module
from sweep.errors import GridError
from sweep.models.base import Column, Decisions, Param, ServingModel
from sweep.models.continuous.model import kv_capacity_tokens
from sweep.models.disaggregated import _pools
from sweep.models.shared import columns as shared
from sweep.models.shared import roofline as rl

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array

    from sweep.grid.spec import GridSpec
    from sweep.models.continuous import analytic
else:
    analytic = lazy_module("sweep.models.continuous.analytic")
    jnp = lazy_module("jax.numpy")

MS, INF = _pools.MS, _pools.INF

PARAMS: tuple[Param, ...] = _pools.params(
    "model", "gpu", "gpus_per_replica", "arrival_rps", "prompt_tokens", "prompt_cv", "output_tokens", "output_cv",
    "t_fixed_ms", "t_token_ms", "t_ctx_ms", "eta_bw", "eta_flops", "weight_bytes_per_param", "kv_bytes_per_elem",
    "tpot_slo_ms", "percentile", "rho_max", "rho_min", "service_cv", "replicas", "max_batched_tokens", "batch_size")
REQUIRED: tuple[str, ...] = ("model", "gpu", "arrival_rps", "prompt_tokens", "output_tokens", "batch_size")


def decode_line(p: rl.StepParams, cap: Array, context_tokens: Array, kv_bytes_per_token: Array, attn_width: Array,
                n_layers: Array) -> tuple[Array, Array, Array]:
    """(t_fixed, t_token, t_ctx) seconds of T = t_fixed + t_token n_tok + t_ctx n_ctx for
    decode-only steps: t_ctx is one cached token's read, kv_bytes / (g bw eta_bw); t_fixed and
    t_token make the line exact at the decode steps of 1 and `cap` (2 when 1) sequences of
    `context_tokens` cached tokens each (`rl.decode_work`); where that would need t_fixed < 0
    (compute-bound), t_fixed is 0 and the step of `cap` stays exact."""
    hi = jnp.maximum(cap, 2.0)
    t1, _ = rl.step_time(rl.decode_work(1.0, context_tokens, kv_bytes_per_token, attn_width, n_layers), p)
    th, _ = rl.step_time(rl.decode_work(hi, context_tokens, kv_bytes_per_token, attn_width, n_layers), p)
    t_ctx = kv_bytes_per_token / (p.gpus * p.hbm_bw * p.eta_bw)
    per_seq = (th - t1) / (hi - 1.0)  # t_token + t_ctx context
    t_token = jnp.maximum(per_seq - t_ctx * context_tokens, 0.0)
    t_fixed = t1 - t_token - t_ctx * context_tokens
    t_token = jnp.where(t_fixed < 0.0, (th - hi * context_tokens * t_ctx) / hi, t_token)
    return jnp.maximum(t_fixed, 0.0), t_token, t_ctx


COLUMNS: tuple[Column, ...] = (
    shared.MODEL, shared.GPU, shared.GPUS_PER_REPLICA, shared.ARRIVAL_RPS, shared.REPLICAS,
    Column("prompt_cv", "float64", "-", "Coefficient of variation of the prompt length."),
    Column("output_tokens", "float64", "tokens", "Mean output length O (lognormal, rounded, at least 1)."),
    Column("output_cv", "float64", "-", "Coefficient of variation of the output length."),
    Column("batch_size", "int64", "sequences", "The decode pool's cap N on running sequences (max_num_seqs)."),
    Column("max_batched_tokens", "int64", "tokens",
           "The decode pool's token budget M of one step; NULL (the grid's inf) = no budget.", null_when="unlimited"),
    Column("tpot_slo_ms", "float64", "ms", "TPOT SLO at `percentile`; NULL (the grid's inf, the default) = none.",
           null_when="unlimited"),
    Column("lambda_per_replica_rps", "float64", "requests/s", "Per-replica arrival rate arrival_rps / replicas."),
    Column("step_fixed_ms", "float64", "ms",
           "t_fixed of the decode pool's steps: t_fixed_ms (roofline: the secant through 1 and batch_size "
           "decoding sequences)."),
    Column("step_token_ms", "float64", "ms", "t_token of the decode pool's steps (roofline: see step_fixed_ms)."),
    Column("step_ctx_ms", "float64", "ms", "t_ctx of the decode pool's steps (roofline: KV bytes over g bw eta_bw)."),
    Column("kv_capacity_tokens", "float64", "tokens", "KV capacity C of a replica (paged: whole blocks)."),
    shared.WEIGHTS_GB,
    shared.FREE_GB,
    Column("mem_ok", "bool", "-",
           "The weights fit and a transferred request's reservation (P + O tokens, paged: in blocks) fits in C."),
    Column("capacity_rps", "float64", "requests/s", "The largest sustainable per-replica arrival rate at this cap."),
    Column("rho", "float64", "-", "lambda_per_replica_rps / capacity_rps; NULL where a request does not fit.",
           null_when="mem_ok"),
    Column("stable", "bool", "-", "The load is sustainable at the cap and the KV capacity."),
    Column("mean_running", "float64", "sequences", "Mean running sequences."),
    Column("step_mean_ms", "float64", "ms", "Mean step time.", null_when="stable"),
    Column("wait_mean_ms", "float64", "ms",
           "Mean wait for a slot (and for the step in progress) after the transfer.", null_when="stable"),
    Column("wait_p_ms", "float64", "ms", "The wait for a slot at `percentile`.", null_when="stable"),
    Column("tpot_mean_ms", "float64", "ms", "Mean time per output token after the first.", null_when="stable"),
    Column("tpot_p_ms", "float64", "ms", "TPOT at `percentile`.", null_when="stable"),
    Column("sojourn_mean_ms", "float64", "ms",
           "Mean time from arrival at the pool to the last token: wait + (O - 1) TPOT.", null_when="stable"),
    Column("sojourn_p_ms", "float64", "ms", "That sojourn at `percentile`.", null_when="stable"),
    Column("output_tok_s", "float64", "tokens/s", "Output tokens per second of one replica (lambda x O when stable)."),
    Column("kv_util", "float64", "-", "Time-average share of C reserved by running sequences."),
    _pools.GPUS,
    shared.COST_USD_PER_HOUR,
)


class DecodePool(ServingModel):
    """The decode pool: continuous batching with prompts already cached (module docstring)."""

    serving: ClassVar[str] = "decode-pool"
    name: ClassVar[str] = "analytic"
    params: ClassVar[tuple[Param, ...]] = PARAMS
    columns: ClassVar[tuple[Column, ...]] = COLUMNS
    echo: ClassVar[tuple[str, ...]] = (
        "model", "gpu", "gpus_per_replica", "arrival_rps", "replicas", "prompt_cv", "output_tokens", "output_cv",
        "batch_size", "max_batched_tokens", "tpot_slo_ms")
    decisions: ClassVar[Decisions] = Decisions(
        row_axes=("max_batched_tokens", "batch_size"), group_axes=("replicas",), size="gpus",
        capacity="capacity_rps", latency="sojourn_p_ms", mean_latency="sojourn_mean_ms", utilisation="rho")
    row_constant: ClassVar[tuple[str, ...]] = (
        "gpus_per_replica", "replicas", "prompt_cv", "output_tokens", "output_cv", "tpot_slo_ms",
        "lambda_per_replica_rps", "kv_capacity_tokens", "weights_gb", "free_gb", "gpus", "cost_usd_per_hour")
    slo_checks: ClassVar[tuple[tuple[str, str], ...]] = (("tpot_p_ms", "tpot_slo_ms"),)
    coefficient_keys: ClassVar[tuple[str, ...]] = ()
    monotone_in_load: ClassVar[tuple[str, ...]] = ("lambda_per_replica_rps", "rho")

    def fill(self, values: dict[str, list[Any]], where: Callable[[str], str],
             source: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        return _pools.fill(self, values, where, source, REQUIRED)

    def check(self, values: Mapping[str, Sequence[Any]], options: Any, where: Callable[[str], str],
              source: str) -> None:
        _pools.check_rho(values, where, source)
        if min(values["output_tokens"]) < 2:
            raise GridError(source, where("output_tokens"), min(values["output_tokens"]),
                            "must be >= 2 in disaggregated serving: the prefill pool emits the first token, the "
                            "decode pool the others")
        if min(values["max_batched_tokens"]) < max(values["batch_size"]):
            raise GridError(source, where("max_batched_tokens"), min(values["max_batched_tokens"]),
                            f"must be >= {where('batch_size')} {max(values['batch_size'])} for every combination: "
                            "a step must fit one decode token per running sequence")

    def static(self, spec: GridSpec) -> dict[str, Any]:
        return dict(service_source=spec.service_source, paged=spec.options.kv_allocation == "paged",
                    block_tokens=float(spec.options.block_tokens), reserve_fraction=spec.options.reserve_fraction)

    def point(self, x: Mapping[str, Array], *args: Any, service_source: str = "given", paged: bool = False,
              block_tokens: float = 16.0, reserve_fraction: float = 0.0) -> dict[str, Array]:
        p1, o1 = x["prompt_tokens"], x["output_tokens"]
        kv_per_token, weights, free = _pools.memory(x, reserve_fraction)
        block = block_tokens if paged else 1.0
        c_tok = kv_capacity_tokens(free, kv_per_token, block, paged=paged)
        reservation = jnp.ceil((p1 + o1) / block) * block
        mem_ok = (free >= 0.0) & (reservation <= c_tok)
        if service_source == "roofline":
            eta_bw, eta_flops = _pools.efficiencies(x)
            tf, tt, tc = decode_line(rl.replica_params(x, eta_bw, eta_flops), x["batch_size"], p1 + 0.5 * o1,
                                     kv_per_token, x["attn_width"], x["n_layers"])
        else:
            tf, tt, tc = x["t_fixed_ms"] / MS, x["t_token_ms"] / MS, x["t_ctx_ms"] / MS
        lam = x["arrival_rps"] / x["replicas"]
        r = analytic.cb_point(lam, p1, x["prompt_cv"], o1, x["output_cv"], x["batch_size"], x["max_batched_tokens"],
                              jnp.where(mem_ok, c_tok, 1.0), block, tf, tt, tc, x["service_cv"], x["percentile"],
                              prefilled=True)
        stable = r["stable"] & mem_ok
        cap = jnp.where(mem_ok, r["capacity_rps"], 0.0)
        rho = jnp.where(cap > 0.0, lam / jnp.where(cap > 0.0, cap, 1.0), INF)

        def gate(v: Array) -> Array:
            return jnp.where(stable, v * MS, INF)

        gpus = x["replicas"] * x["gpus_per_replica"]
        return {
            "lambda_per_replica_rps": lam,
            "step_fixed_ms": tf * MS,
            "step_token_ms": tt * MS,
            "step_ctx_ms": tc * MS,
            "kv_capacity_tokens": c_tok,
            "weights_gb": weights * 1e-9,
            "free_gb": free * 1e-9,
            "mem_ok": mem_ok,
            "capacity_rps": cap,
            "rho": jnp.where(mem_ok, rho, INF),
            "stable": stable,
            "mean_running": jnp.where(stable, r["mean_running"], x["batch_size"]),
            "step_mean_ms": gate(r["step_mean"]),
            "wait_mean_ms": gate(r["ttft_mean"]),
            "wait_p_ms": gate(r["ttft_p"]),
            "tpot_mean_ms": gate(r["tpot_mean"]),
            "tpot_p_ms": gate(r["tpot_p"]),
            "sojourn_mean_ms": gate(r["e2e_mean"]),
            "sojourn_p_ms": gate(r["e2e_p"]),
            "output_tok_s": jnp.where(stable, r["output_tok_s"], jnp.minimum(lam, cap) * o1),
            "kv_util": jnp.where(stable, r["kv_util"], 1.0),
            "gpus": gpus,
            "cost_usd_per_hour": gpus * x["usd_per_gpu_hour"],
            "_rho_rules": jnp.where(mem_ok, rho, INF),
        }
