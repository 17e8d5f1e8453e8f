"""Disaggregated prefill and decode (`[options] serving = "disaggregated"`, SPEC 11): a
prefill pool and a decode pool in series, the KV cache crossing a link between them.

    tandem(Stage("prefill", PrefillPool()), Stage("decode", DecodePool()), link=KvTransfer())

* The prefill pool (`sweep.models.disaggregated.prefill`) is the seed's dynamic batcher
  whose batch is a prefill of B prompts; it emits the first token:
  TTFT = prefill wait + batching delay + prefill service.
* The KV cache of the prompt then crosses the link (`KvTransfer`):
  transfer = kv_bytes_per_token x P / link_bytes_per_s + link_latency_s, a fixed delay.
* The decode pool (`sweep.models.disaggregated.decode`) is continuous batching with the
  prompts already cached; it sets TPOT. E2E = TTFT + transfer + the decode sojourn (wait
  for a slot, then O - 1 steps).

Keys of one pool carry its name (`prefill_replicas`, `decode_gpus_per_replica`,
`decode_batch_size`, `prefill_batch_window_ms`); the workload, the step coefficients and the
SLOs are shared. `gpu` is both pools' GPU; `prefill_gpu` or `decode_gpu` (one of them, each
may be an axis) moves one pool to a GPU of its own, whose figures (memory, bandwidth, FLOPs,
efficiencies, price) the engine gathers under the pool's prefix (`ServingModel.part_gpu_keys`).
Decisions: the group axes are (`prefill_replicas`, `decode_replicas`) and the size is
`total_gpus`, so `replicas_min` is the split with the fewest GPUs meeting every SLO at
`arrival_rps`.

Assumptions (docs/disaggregated.md): the decode pool sees Poisson arrivals at
`arrival_rps` (the prefill pool's departures, spread at random over decode replicas, are
taken as Poisson); the transfer is a fixed delay per request (no contention on the link);
the end-to-end percentile adds the pools' excesses of the percentile over the mean in
quadrature (`QuadratureSum`; benchmarks/disagg_accuracy.py: 100% of 59 P99s within 10% of the
simulator, where the union bound was +18% at the median).

`latency_model = "simulated"` (`SimulatedDisaggregated`): the simulator of both pools
decides, as a host pass (`sweep.models.disaggregated.simulation`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from sweep._lazy import lazy_module
from sweep.errors import GridError
from sweep.models.base import (
    ANALYTIC_UNBOUNDED,
    SERVICE_SOURCES,
    WHEN_PART_GPU,
    Column,
    Decisions,
    Domain,
    HostPass,
    Param,
    Step,
    num,
    part_figure,
)
from sweep.models.compose import SHARED, Link, QuadratureSum, Stage, Tandem, tandem
from sweep.models.disaggregated.decode import DecodePool
from sweep.models.disaggregated.links import LINKS, NVLINK
from sweep.models.disaggregated.prefill import PrefillPool
from sweep.models.disaggregated.simulation import DECIDED, KV_BYTES_PER_TOKEN, SIM_COLUMNS, DisaggSimulation
from sweep.models.views import Check, Views

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array

    from sweep.grid.spec import GridSpec
else:
    jnp = lazy_module("jax.numpy")

MS = 1e3
INF = math.inf
SERVING = "disaggregated"
#: The default link: one InfiniBand NDR port per GPU, the usual fabric between the nodes of two pools.
DEFAULT_LINK = "ib-ndr"

#: Keys and columns both pools name alike: the workload, the step coefficients, the SLOs and
#: the latencies each pool alone sets (TTFT the prefill pool's, TPOT the decode pool's).
POOL_SHARED: tuple[str, ...] = (
    *SHARED, "prompt_tokens", "prompt_cv", "output_tokens", "output_cv", "t_fixed_ms", "t_token_ms", "t_ctx_ms",
    "eta_bw", "eta_flops", "weight_bytes_per_param", "kv_bytes_per_elem", "service_cv", "ttft_slo_ms",
    "tpot_slo_ms", "ttft_mean_ms", "ttft_p_ms", "tpot_mean_ms", "tpot_p_ms")
#: The keys that give one pool a GPU of its own (else it runs on `gpu`): at most one per grid.
POOL_GPU_KEYS: tuple[str, ...] = ("prefill_gpu", "decode_gpu")


@dataclass(frozen=True)
class KvTransfer(Link):
    """The prompt's KV cache crossing from a prefill replica to a decode replica: a fixed
    delay of kv_bytes_per_token x P / link_bytes_per_s + link_latency_s per request.
    `link_bytes_per_s` absent (the `nvlink` link): the GPU entry's interconnect figure."""

    delay_key: str | None = None

    @property
    def params(self) -> tuple[Param, ...]:
        return (
            # default DEFAULT_LINK; `DisaggregatedModel.fill` turns the name into the two figures
            Param("link", "name", None, example=f'link = "{DEFAULT_LINK}"  # {", ".join(LINKS)}'),
            # 1 kB/s to 1 PB/s
            Param("link_bytes_per_s", "float", None, Domain(1e3, 1e15, "bytes/s"), example="link_bytes_per_s = 50e9"),
            # up to 10 s of fixed cost per transfer
            Param("link_latency_s", "float", None, Domain(0, 10, "s"), example="link_latency_s = 10e-6"),
        )

    @property
    def columns(self) -> tuple[Column, ...]:
        return (
            Column("link_bytes_per_s", "float64", "bytes/s",
                   "Bandwidth of the KV transfer between a prefill and a decode replica, one direction: the grid's "
                   "link_bytes_per_s, else the link's (nvlink: the GPU entry's interconnect, the slower of the "
                   "two pools' GPUs)."),
            Column("link_latency_s", "float64", "s", "Fixed cost of one KV transfer: the grid's, else the link's."),
            Column("transfer_ms", "float64", "ms",
                   "KV transfer of one request: kv_bytes_per_token x prompt_tokens / link_bytes_per_s + link_latency_s "
                   "(added to E2E, not to TTFT)."),
        )

    def bandwidth(self, x: Mapping[str, Array]) -> Array:
        """The grid's `link_bytes_per_s`, else (`nvlink`) the GPU entries' interconnect: the
        slower of the two pools' GPUs where they differ (a transfer runs at its slower end)."""
        if "link_bytes_per_s" in x:
            return x["link_bytes_per_s"]
        ends = [x.get(part_figure(key, "link_bw"), x["link_bw"]) for key in POOL_GPU_KEYS]
        return jnp.minimum(ends[0], ends[1])

    def delay_ms(self, x: Mapping[str, Array]) -> Array:
        kv_per_token = x["kv_elems_per_token"] * x["kv_bytes_per_elem"]
        return (kv_per_token * x["prompt_tokens"] / self.bandwidth(x) + x["link_latency_s"]) * MS


_TANDEM = tandem(Stage("prefill", PrefillPool(), shared=POOL_SHARED, latency="ttft_p_ms"),
                 Stage("decode", DecodePool(), shared=POOL_SHARED, latency="sojourn_p_ms"),
                 serving=SERVING, link=KvTransfer(), combine=QuadratureSum())
_LINK_KEYS = tuple(p.key for p in _TANDEM.link.params)


def _pool_gpu_param(pool: str) -> Param:
    other = "decode" if pool == "prefill" else "prefill"
    return Param(f"{pool}_gpu", "name", None,
                 example=f'{pool}_gpu = "a100-80gb"  # the {pool} pool\'s GPU; the {other} pool runs on gpu')


def _pool_gpu_column(pool: str) -> Column:
    return Column(f"{pool}_gpu", "dict", "-",
                  f"The {pool} pool's GPU (catalog name): the grid's {pool}_gpu, else gpu.", WHEN_PART_GPU)


def _after_gpu(items: tuple[Any, ...], new: tuple[Any, ...], name: Callable[[Any], str]) -> tuple[Any, ...]:
    """`items` with `new` right after the one named `gpu` (the pools' GPUs beside the fleet's)."""
    at = next(i for i, item in enumerate(items) if name(item) == "gpu") + 1
    return (*items[:at], *new, *items[at:])


#: The tandem's keys and columns with each pool's own GPU after `gpu`.
PARAMS: tuple[Param, ...] = _after_gpu(_TANDEM.params, tuple(_pool_gpu_param(k) for k in ("prefill", "decode")),
                                       lambda p: p.key)
TANDEM_COLUMNS: tuple[Column, ...] = _after_gpu(
    _TANDEM.columns, tuple(_pool_gpu_column(k) for k in ("prefill", "decode")), lambda c: c.name)

#: The mode's own columns after the tandem's: the fleet's price per token, and the fleet-wide
#: summaries every serving mode reports (the display code reads them whatever the mode).
OWN_COLUMNS: tuple[Column, ...] = (
    Column("replicas", "int64", "replicas", "Replicas over both pools: prefill_replicas + decode_replicas."),
    Column("gpus_per_replica", "float64", "GPUs",
           "GPUs per replica over the fleet, total_gpus / replicas (each pool's own: prefill_gpus_per_replica, "
           "decode_gpus_per_replica)."),
    Column("batch_size", "int64", "sequences", "The fleet's cap: the decode pool's decode_batch_size."),
    Column("service_source", "dict", "-", "Where both pools' step-time coefficients came from: given | roofline."),
    Column("weights_gb", "float64", "GB", "n_params x weight_bytes_per_param: the weights one replica of either pool "
           "holds."),
    Column("free_gb", "float64", "GB",
           "HBM left for the KV cache in a replica of the tighter pool: the smaller of prefill_free_gb and "
           "decode_free_gb (negative: the weights do not fit)."),
    Column("weights_fit", "bool", "-", "The weights fit in a replica of both pools (free_gb >= 0)."),
    Column("output_tok_s", "float64", "tokens/s", "Output tokens per second of the fleet: arrival_rps x output_tokens "
           "when stable, else what the busier pool sustains."),
    Column("cost_usd_per_mtok", "float64", "USD",
           "Cost per million output tokens at this load: cost_usd_per_hour / (output_tok_s x 3600) x 1e6; "
           "NULL (unbounded) where not stable.", null_when="stable"),
)


class DisaggregatedModel(Tandem):
    """`serving = "disaggregated"` (module docstring): the tandem of the two pools, with the
    link's catalog, the validation a split needs, and the fleet's price per token."""

    serving: ClassVar[str] = SERVING
    name: ClassVar[str] = "analytic"
    first: ClassVar[Stage] = _TANDEM.first
    second: ClassVar[Stage] = _TANDEM.second
    link: ClassVar[Link] = _TANDEM.link
    combine = _TANDEM.combine
    params: ClassVar[tuple[Param, ...]] = PARAMS
    columns: ClassVar[tuple[Column, ...]] = TANDEM_COLUMNS + OWN_COLUMNS + SIM_COLUMNS
    part_gpu_keys: ClassVar[tuple[str, ...]] = POOL_GPU_KEYS
    echo: ClassVar[tuple[str, ...]] = tuple(k for k in _TANDEM.echo if k not in _LINK_KEYS)
    #: the tandem's, and the TTFT and TPOT of each answer (the SLOs the answers check)
    decisions: ClassVar[Decisions] = replace(_TANDEM.decisions, answer_fields=(
        *_TANDEM.decisions.answer_fields, ("_ttft_p_ms", "ttft_p_ms", "float64", "ms"),
        ("_tpot_p_ms", "tpot_p_ms", "float64", "ms"), ("_total_gpus", "total_gpus", "int64", "GPUs")))
    views: ClassVar[Views] = Views(checks=(Check("ttft_p_ms", "TTFT"), Check("tpot_p_ms", "TPOT"),
                                           Check("e2e_p_ms", "E2E")))
    row_constant: ClassVar[tuple[str, ...]] = (*POOL_GPU_KEYS, *_TANDEM.row_constant, "slo_ms", "link_bytes_per_s",
                                               "link_latency_s", "transfer_ms")
    monotone_in_load: ClassVar[tuple[str, ...]] = _TANDEM.monotone_in_load
    slo_checks: ClassVar[tuple[tuple[str, str], ...]] = _TANDEM.slo_checks
    objectives: ClassVar[dict[str, tuple[str, str]]] = {
        **_TANDEM.objectives, "min_gpus": ("total_gpus", "minimize"),
        "min_cost_per_mtok": ("cost_usd_per_mtok", "minimize"), "min_ttft": ("ttft_p_ms", "minimize"),
        "min_tpot": ("tpot_p_ms", "minimize")}
    #: the contract's grids: given step coefficients; the roofline over NVLink; both pools on
    #: `gpu` (the contract evaluates explicit points with one GPU's figures each)
    contract_variants: ClassVar[tuple[Mapping[str, Any], ...]] = (
        {"grid": {"eta_bw": None, "eta_flops": None, "link": "ib-ndr", **dict.fromkeys(POOL_GPU_KEYS)}},
        {"grid": {"t_fixed_ms": None, "t_token_ms": None, "t_ctx_ms": None, "link": NVLINK,
                  "link_bytes_per_s": None, "link_latency_s": None, **dict.fromkeys(POOL_GPU_KEYS)}},
    )

    # -- validation -----------------------------------------------------------------------

    def fill(self, values: dict[str, list[Any]], where: Callable[[str], str],
             source: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        """The link's name becomes its figures (the grid's own win); then the pools fill
        theirs; at least one SLO; at most one pool's own GPU (`gpu` names the other's)."""
        out = dict(values)
        if all(k in out for k in POOL_GPU_KEYS):
            raise GridError(source, where("decode_gpu"), out["decode_gpu"][0],
                            "gives a GPU of its own to one pool only (prefill_gpu or decode_gpu, not both): gpu "
                            'names the other pool\'s, e.g. gpu = "h100-sxm" with decode_gpu = "a100-80gb"')
        names = out.pop("link", [DEFAULT_LINK])
        if len(names) != 1:
            raise GridError(source, where("link"), names,
                            "takes one link per grid; compare links with link_bytes_per_s = [...] and link_latency_s")
        entry = LINKS.get(names[0])
        if entry is None:
            raise GridError(source, where("link"), names[0], f"is not a known link; use one of {', '.join(LINKS)}, "
                                                             "or give link_bytes_per_s and link_latency_s")
        if "link_bytes_per_s" not in out and entry.bytes_per_s is not None:
            out["link_bytes_per_s"] = [entry.bytes_per_s]
        out.setdefault("link_latency_s", [entry.latency_s])
        if not any(k in out for k in ("ttft_slo_ms", "tpot_slo_ms", "slo_ms")):
            raise GridError(source, where("ttft_slo_ms"), None,
                            "disaggregated serving needs at least one SLO: ttft_slo_ms, tpot_slo_ms or slo_ms "
                            "(end to end)")
        filled, facts = super().fill(out, where, source)
        return filled, {**facts, "link": entry.name}

    def check_spec(self, spec: GridSpec) -> None:
        """Rules that need the catalog: a decode replica holds one transferred request
        (P + O <= C), and the transfer alone leaves room under the end-to-end SLO (a
        searched key's over its whole searched domain)."""
        check_split(spec)
        if spec.simulation is not None and spec.simulation.trace is not None:
            raise GridError(spec.source, "simulation.trace", spec.simulation.trace,
                            f'is not supported with serving = "{SERVING}" yet (arrivals are Poisson); remove it')

    def derivation(self, row: Mapping[str, Any], figures: Mapping[str, float] | None = None,
                   options: Mapping[str, Any] | None = None) -> list[Step] | None:
        return derivation(row)

    # -- evaluation -----------------------------------------------------------------------

    def point(self, x: Mapping[str, Array], *args: Any, **static: Any) -> dict[str, Array]:
        out = super().point(x, **static)
        link = self.link
        assert isinstance(link, KvTransfer)
        o1 = x["output_tokens"]
        stable = out["stable"]
        fleet = jnp.minimum(x["arrival_rps"], out["capacity_rps"]) * o1
        tok_s = jnp.where(stable, x["arrival_rps"] * o1, fleet)
        ok = stable & (tok_s > 0.0)
        per_mtok = jnp.where(ok, out["cost_usd_per_hour"] / jnp.where(ok, tok_s, 1.0) / 3600.0 * 1e6, INF)
        replicas = x["prefill_replicas"] + x["decode_replicas"]
        free_gb = jnp.minimum(out["prefill_free_gb"], out["decode_free_gb"])
        source = dict(static[self.first.name])["service_source"]
        if any(k in x for k in POOL_GPU_KEYS):  # the WHEN_PART_GPU columns: each pool's GPU
            out.update({k: x[k] if k in x else x["gpu"] for k in POOL_GPU_KEYS})
        return {
            **out,
            "replicas": replicas,
            "gpus_per_replica": out["total_gpus"] / replicas,
            "batch_size": x["decode_batch_size"],
            "service_source": jnp.asarray(SERVICE_SOURCES.index(source), dtype=jnp.int32),
            "weights_gb": out["prefill_weights_gb"],
            "free_gb": free_gb,
            "weights_fit": free_gb >= 0.0,
            "link_bytes_per_s": link.bandwidth(x),
            "link_latency_s": x["link_latency_s"],
            "transfer_ms": link.delay_ms(x),
            "output_tok_s": tok_s,
            "cost_usd_per_mtok": per_mtok,
            KV_BYTES_PER_TOKEN: x["kv_elems_per_token"] * x["kv_bytes_per_elem"],
        }

    def host_pass(self, spec: GridSpec) -> HostPass | None:
        """The simulator of both pools (`simulation.DisaggSimulation`) where the grid simulates."""
        if spec.simulation is None:
            return None
        return DisaggSimulation(spec.simulation, decides=self.needs_host_pass,
                                paged=spec.options.kv_allocation == "paged",
                                block_tokens=float(spec.options.block_tokens))


class SimulatedDisaggregated(DisaggregatedModel):
    """`serving = "disaggregated"`, `latency_model = "simulated"`: the simulator of both pools
    decides (`sweep.models.disaggregated.simulation`): its latencies are the SLO columns and
    its steady-state verdict is `stable`."""

    name: ClassVar[str] = "simulated"
    needs_host_pass: ClassVar[bool] = True
    #: `stable` is the simulator's verdict here (with the memory verdicts): the NULL of every
    #: latency it measures is explained by `sim_steady`, and an unbounded analytic estimate (in
    #: the relative errors) has its own word.
    columns: ClassVar[tuple[Column, ...]] = tuple(
        c.with_null("sim_steady") if c.name in DECIDED else
        c.with_null(f"{ANALYTIC_UNBOUNDED}, sim_steady") if c.name.endswith("_rel_err") else c
        for c in DisaggregatedModel.columns)


def derivation(row: Mapping[str, Any]) -> list[Step]:
    """docs/disaggregated.md's three stages with one point's numbers (`sweep explain`)."""
    g = row.get

    def ms(key: str) -> str:
        return num(g(key), "ms")

    def ms_excess(p: Any, mean: Any) -> str:
        return num(None if p is None or mean is None else float(p) - float(mean), "ms")

    kv_mib = ""
    transfer, latency, bandwidth = g("transfer_ms"), g("link_latency_s"), g("link_bytes_per_s")
    if transfer is not None and latency is not None and bandwidth:
        kv_bytes = (float(transfer) / MS - float(latency)) * float(bandwidth)
        kv_mib = f"{kv_bytes / 2**20:,.1f} MiB"
    steps = [
        Step("Prefill pool: the batcher over prefill batches", "docs/disaggregated.md#what-it-models", (
            ("T_svc(B) = T_fixed + t_req B", f"{num(g('prefill_t_svc_fixed_ms'))} + "
             f"{num(g('prefill_t_svc_per_prompt_ms'))} x {g('prefill_batch_size')}", ms("prefill_t_svc_ms")),
            ("capacity = B / T_svc(B), per replica", f"{g('prefill_batch_size')} / {ms('prefill_t_svc_ms')}",
             num(g("prefill_capacity_rps"), "requests/s")),
            ("TTFT = wait + batching delay + prefill", f"{ms('prefill_wait_mean_ms')} + "
             f"{ms('prefill_batching_mean_ms')} + {ms('prefill_service_mean_ms')}", ms("ttft_mean_ms")),
            ("TTFT at the percentile", f"q = {g('percentile')}", ms("ttft_p_ms")),
        )),
        Step("KV transfer", "docs/disaggregated.md#what-it-models", (
            ("transfer = kv_bytes_per_token P / link_bytes_per_s + link_latency_s",
             f"{kv_mib} / {num(g('link_bytes_per_s'), 'bytes/s')} + {num(g('link_latency_s'), 's')}",
             ms("transfer_ms")),
        )),
        Step("Decode pool: continuous batching, prompts cached", "docs/disaggregated.md#what-it-models", (
            ("T = t_fixed + t_token n_tok + t_ctx n_ctx", f"{num(g('decode_step_fixed_ms'))} + "
             f"{num(g('decode_step_token_ms'))} n_tok + {num(g('decode_step_ctx_ms'))} n_ctx (ms)",
             num(g("decode_capacity_rps"), "requests/s per replica")),
            ("wait for a slot (and the step in progress)", f"rho = {num(g('decode_rho'))}", ms("decode_wait_mean_ms")),
            ("TPOT", f"mean running {num(g('decode_mean_running'))}", ms("tpot_mean_ms")),
            ("decode sojourn = wait + (O - 1) TPOT", f"O = {num(g('output_tokens'))}", ms("decode_sojourn_mean_ms")),
        )),
        Step("End to end", "docs/disaggregated.md#what-it-models", (
            ("E2E = TTFT + transfer + decode sojourn", f"{ms('ttft_mean_ms')} + {ms('transfer_ms')} + "
             f"{ms('decode_sojourn_mean_ms')}", ms("e2e_mean_ms")),
            ("E2E at q = the means and the transfer + the pools' excesses over their means in quadrature",
             f"q = {g('percentile')}: excesses {ms_excess(g('ttft_p_ms'), g('ttft_mean_ms'))} and "
             f"{ms_excess(g('decode_sojourn_p_ms'), g('decode_sojourn_mean_ms'))}", ms("e2e_p_ms")),
            ("GPUs = prefill + decode", f"{g('prefill_gpus')} + {g('decode_gpus')}", num(g("total_gpus"), "GPUs")),
        )),
    ]
    if "sim_ttft_mean_ms" in row:
        steps.append(simulator_step(row))
    return steps


def simulator_step(row: Mapping[str, Any]) -> Step:
    """The simulator's figures of one point (a grid that simulates); with `latency_model =
    "simulated"` they are the columns above."""
    g = row.get
    a, b = g("ttft_p_ms"), g("sim_ttft_p_ms")
    decides = a is not None and b is not None and float(a) == float(b)

    def pair(m: str) -> str:
        return f"{num(g(f'sim_{m}_mean_ms'))} / {num(g(f'sim_{m}_p_ms'))} ms"

    return Step("The simulator of both pools" + (" (it decides: the latencies above are its)" if decides else ""),
                "docs/disaggregated.md#simulated-latencies", (
        ("steady: no replication's mean TTFT or decode side doubled between its quarters", "",
         "yes" if g("sim_steady") else "no: simulated latencies unbounded"),
        ("simulated TTFT mean / at q", "", pair("ttft")),
        ("simulated TPOT (the decode pool's interval) mean / at q", "", pair("tpot")),
        ("simulated client-side TPOT (transfer and slot wait included) mean / at q", "", pair("client_tpot")),
        ("simulated E2E mean / at q", "", pair("e2e")),
        ("analytic against simulated mean: ttft_rel_err, tpot_rel_err, e2e_rel_err", "",
         f"{num(g('ttft_rel_err'))}, {num(g('tpot_rel_err'))}, {num(g('e2e_rel_err'))}"),
    ))


def _values(spec: GridSpec, key: str) -> tuple[Any, ...]:
    """The values `key` takes: its [grid] axis, or the bounds of its searched domain."""
    if spec.search is not None and key in spec.search.keys:
        return tuple(spec.search.param(key).extremes)
    return spec.axis(key).values


def _where(spec: GridSpec, key: str) -> str:
    return f"search.params.{key}" if spec.search is not None and key in spec.search.keys else f"grid.{key}"


def _gpus(spec: GridSpec) -> tuple[Any, ...]:
    """The GPUs `gpu` names: searched, else its axis (`spec.gpus` also holds a pool's own)."""
    if spec.search is not None and "gpu" in spec.search.keys:
        return tuple(spec.search.gpus)
    return tuple(spec.gpus[spec.gpu_index(n)] for n in spec.axis("gpu").values)


def check_split(spec: GridSpec) -> None:
    """The two catalog rules of `DisaggregatedModel.check_spec` (module docstring); raises
    `GridError` naming the grid key and the value that breaks one."""
    src = spec.source
    paged = spec.options.kv_allocation == "paged"
    block = float(spec.options.block_tokens) if paged else 1.0
    reserve = spec.options.reserve_fraction
    # a decode replica must hold one transferred request: P + O <= C for every combination
    decode_gpus = ([spec.gpus[spec.gpu_index(n)] for n in _values(spec, "decode_gpu")]
                   if "decode_gpu" in spec.part_gpu_keys else _gpus(spec))
    for m in spec.models:
        kv_elems = m.n_layers * m.kv_elems_per_token_per_layer
        for g in decode_gpus:
            for gpr in _values(spec, "decode_gpus_per_replica"):
                for wb in _values(spec, "weight_bytes_per_param"):
                    for kb in _values(spec, "kv_bytes_per_elem"):
                        free = gpr * g.hbm_bytes * (1.0 - reserve) - m.n_params * wb
                        c_tok = math.floor(max(free, 0.0) / (kv_elems * kb) / block) * block
                        need = max(math.ceil((p + o) / block) * block for p in _values(spec, "prompt_tokens")
                                   for o in _values(spec, "output_tokens"))
                        if need > c_tok:
                            raise GridError(src, _where(spec, "decode_gpus_per_replica"), gpr,
                                            f"a decode replica of {m.name} on {gpr} x {g.name} holds {c_tok:,.0f} "
                                            f"tokens of KV beside its weights, fewer than one transferred request's "
                                            f"prompt_tokens + output_tokens = {need:,.0f}; give it more GPUs")
    # the transfer alone must leave room under the end-to-end SLO for some point
    slos = [s for s in _values(spec, "slo_ms") if math.isfinite(s)]
    if len(slos) != len(_values(spec, "slo_ms")) or not slos:
        return
    if any(a.key == "link_bytes_per_s" for a in spec.axes):
        bw = max(_values(spec, "link_bytes_per_s"))
    else:
        bw = max(g.interconnect_bytes_per_s or 0.0 for g in (*_gpus(spec), *spec.gpus)) or math.inf
    kv = min(m.n_layers * m.kv_elems_per_token_per_layer for m in spec.models) * min(
        _values(spec, "kv_bytes_per_elem"))
    fastest = (kv * min(_values(spec, "prompt_tokens")) / bw + min(_values(spec, "link_latency_s"))) * MS
    if fastest >= max(slos):
        raise GridError(src, "grid.link_bytes_per_s", bw,
                        f"the KV transfer alone takes {fastest:,.4g} ms for the shortest prompt, at or above every "
                        f"slo_ms (at most {max(slos):g} ms): no split can meet it; use a faster link")


MODELS = (DisaggregatedModel(), SimulatedDisaggregated())
