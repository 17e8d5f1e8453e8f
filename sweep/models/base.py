"""The serving-model contract: what a model declares, and what the engine calls.

A serving model is one module that declares

* its **grid parameters** (`Param`: key, type, default, domain rule, example) in the
  canonical axis order, the decision axes innermost, and its cross-field rules (`check`);
* its **columns** (`Column`: name, dtype, unit, meaning) in file order: the output dict of
  `point`, the Parquet schema and the README's column reference all come from this list;
* a pure **per-point function** `point(x, **static)` in `jax.numpy`: `x` maps every grid
  key to one scalar (file units, as in the grid file) plus the catalog figures of the
  point's model and GPU (`CATALOG_FIELDS`); it returns every column it computes (file
  units) and any private value the engine needs (names starting with `_`). The engine
  vmaps it, adds the columns that echo grid keys, the ids and the verdicts;
* optionally a **host pass** (`HostPass`, e.g. the simulator), run on the evaluated columns
  of a chunk before the verdicts and decisions;
* the **decision columns** (`Decisions`): which columns the exact reductions read;
* its **views** (`sweep.models.views.Views`): how its results read in the terminal and the
  report.

`sweep.models` keeps the registry that maps `[options]` names to models.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from sweep._domain import Domain
from sweep.catalog import Gpu, Model
from sweep.catalog._efficiency import TP_BINS, packaged_efficiencies
from sweep.models.shared.roofline import PCIE_ALPHA_S, PCIE_LINK_BYTES_PER_S
from sweep.models.views import Views

if TYPE_CHECKING:
    from jax import Array

if TYPE_CHECKING:  # the grid layer builds specs from models; models only read them
    from sweep.grid.spec import GridSpec

DType = Literal["float64", "int64", "bool", "dict"]
Kind = Literal["float", "int", "name"]
#: Conditions under which a declared column is written ("" = always).
WHEN_ROOFLINE = "roofline"
WHEN_SIMULATION = "simulation"
WHEN_UNCERTAINTY = "uncertainty"
WHEN_SENSITIVITY = "sensitivity"
#: sensitivity to a service-time coefficient: only where the coefficient is an input
WHEN_SENSITIVITY_COEF = "sensitivity_coef"
#: a part of the fleet runs on a GPU of its own (`ServingModel.part_gpu_keys` in the grid)
WHEN_PART_GPU = "part_gpu"
WHEN_TEXT = {
    WHEN_ROOFLINE: "service_source = roofline",
    WHEN_SIMULATION: "the grid simulates (latency_model = simulated, or a [simulation] table)",
    WHEN_UNCERTAINTY: "the grid has an [uncertainty] table (docs/uncertainty.md)",
    WHEN_SENSITIVITY: "the grid has a [sensitivity] table (docs/uncertainty.md)",
    WHEN_SENSITIVITY_COEF: "the grid has a [sensitivity] table and its service times are given or fitted "
                           "(not roofline)",
    WHEN_PART_GPU: "the grid names a pool's own GPU (prefill_gpu or decode_gpu)",
}
#: Conditions the engine computes after the model's per-point function (sweep.engine.plan).
PLANNING_WHEN: tuple[str, ...] = (WHEN_UNCERTAINTY, WHEN_SENSITIVITY, WHEN_SENSITIVITY_COEF)

#: Catalog figures gathered for every point (name -> which axis indexes its table);
#: `model_figures` and `gpu_figures` compute them from catalog entries.
CATALOG_FIELDS: dict[str, str] = {
    "kv_elems_per_token": "model",  # KV elements cached per token over all layers
    "n_params": "model",
    "active_params": "model",
    "dense_params": "model",  # read every step whatever the routing (SPEC 13)
    "expert_params": "model",  # in routed experts (0: dense)
    "n_experts": "model",
    "experts_per_token": "model",
    "n_layers": "model",
    "hidden": "model",
    "attn_width": "model",  # n_heads * head_dim: the attention FLOPs' width
    "hbm_bytes": "gpu",
    "hbm_bw": "gpu",  # bytes/s
    "flops": "gpu",  # dense bf16 FLOP/s
    "fp8_flops": "gpu",  # dense FP8 FLOP/s; 0 where the part has none
    "link_bw": "gpu",  # tensor-parallel interconnect, bytes/s per GPU one way (PCIe 4.0 x16 if unknown)
    "alpha": "gpu",  # seconds per all-reduce (PCIe's 50 us if unknown)
    # the roofline's efficiencies and per-step overhead (sweep.catalog._efficiency): the GPU's
    # level here; the engine replaces them by the point's (gpu, size class, tp) cell
    "gpu_eta_bw": "gpu",
    "gpu_eta_flops": "gpu",
    "gpu_t_overhead": "gpu",  # seconds, a step that carries prompt tokens
    "gpu_t_decode_overhead": "gpu",  # seconds, a step of decode tokens only
    "usd_per_gpu_hour": "gpu",
}


def part_figure(key: str, figure: str) -> str:
    """The name of a fleet part's GPU figure in `point`'s x (`ServingModel.part_gpu_keys`):
    (`prefill_gpu`, `hbm_bytes`) -> `prefill_hbm_bytes`."""
    return key.removesuffix("gpu") + figure


def model_figures(m: Model) -> dict[str, float]:
    """The model half of `CATALOG_FIELDS` for one catalog entry."""
    return {
        "kv_elems_per_token": m.n_layers * m.kv_elems_per_token_per_layer,
        "n_params": m.n_params,
        "active_params": m.active_params,
        "dense_params": m.dense_params,
        "expert_params": m.expert_params,
        "n_experts": float(m.n_experts),
        "experts_per_token": float(m.experts_per_token),
        "n_layers": float(m.n_layers),
        "hidden": float(m.hidden),
        "attn_width": float(m.n_heads * m.head_dim),
    }


def figure_arrays(models: Sequence[Model], gpus: Sequence[Gpu],
                  tensor_parallel: Sequence[float] | None = None) -> dict[str, np.ndarray]:
    """Every `CATALOG_FIELDS` figure for the (model, gpu) pairs zip(models, gpus), one pair
    per element (for evaluating explicit points, e.g. `sweep.engine.evaluate_points`); with
    `tensor_parallel` (one degree per pair) the efficiencies are the pair's cell
    (`efficiency_figures`), as the engine gives a grid point."""
    rows = [{**model_figures(m), **gpu_figures(g)} for m, g in zip(models, gpus, strict=True)]
    if tensor_parallel is not None:
        for r, m, g, tp in zip(rows, models, gpus, tensor_parallel, strict=True):
            r.update(efficiency_figures(m, g, tp))
    return {name: np.array([r[name] for r in rows], dtype=np.float64) for name in CATALOG_FIELDS}


#: The figures the engine takes from the point's (gpu, size class, tp) cell.
CELL_FIELDS: tuple[str, ...] = ("gpu_eta_bw", "gpu_eta_flops", "gpu_t_overhead", "gpu_t_decode_overhead")


def efficiency_figures(m: Model, g: Gpu, tensor_parallel: float) -> dict[str, float]:
    """`CELL_FIELDS` for `m` on `tensor_parallel` x `g` (the packaged efficiency table)."""
    e = packaged_efficiencies().lookup(m, g, tensor_parallel)
    return {"gpu_eta_bw": e.eta_bw, "gpu_eta_flops": e.eta_flops, "gpu_t_overhead": e.t_overhead_s,
            "gpu_t_decode_overhead": e.t_decode_overhead_s}


def efficiency_cells(models: Sequence[Model], gpus: Sequence[Gpu]) -> dict[str, np.ndarray]:
    """`CELL_FIELDS` as arrays [model, gpu, log2 tp] (`TP_BINS` degrees 1, 2, 4, ... 4096),
    which `cell_index` indexes by a point's `gpus_per_replica`."""
    out = {name: np.empty((len(models), len(gpus), TP_BINS)) for name in CELL_FIELDS}
    for i, m in enumerate(models):
        for j, g in enumerate(gpus):
            for b in range(TP_BINS):
                for name, value in efficiency_figures(m, g, 2 ** b).items():
                    out[name][i, j, b] = value
    return out


def cell_index(gpus_per_replica):
    """The tp bin of `gpus_per_replica` (traced): log2 of the nearest power of two, clipped."""
    import jax.numpy as jnp

    b = jnp.round(jnp.log2(jnp.maximum(gpus_per_replica, 1.0)))
    return jnp.clip(b, 0, TP_BINS - 1).astype(jnp.int32)


def gpu_figures(g: Gpu) -> dict[str, float]:
    """The GPU half of `CATALOG_FIELDS` for one catalog entry (SPEC 13 defaults where the
    entry leaves a figure out; `sweep.models.shared.roofline`). The efficiencies are the GPU's
    level of the efficiency table (`sweep.catalog._efficiency`: its own, else the table's
    GPU-wide row, else the defaults); `efficiency_figures` gives a replica's cell."""
    gpu_level = packaged_efficiencies().gpu_level(g)
    return {
        "hbm_bytes": g.hbm_bytes,
        "hbm_bw": g.hbm_bandwidth_bytes_per_s,
        "flops": g.bf16_dense_flops,
        "fp8_flops": g.fp8_dense_flops or 0.0,
        "link_bw": g.interconnect_bytes_per_s or PCIE_LINK_BYTES_PER_S,
        "alpha": g.collective_latency_s if g.collective_latency_s is not None else PCIE_ALPHA_S,
        "gpu_eta_bw": gpu_level.eta_bw,
        "gpu_eta_flops": gpu_level.eta_flops,
        "gpu_t_overhead": gpu_level.t_overhead_s,
        "gpu_t_decode_overhead": gpu_level.t_decode_overhead_s,
        "usd_per_gpu_hour": g.usd_per_gpu_hour,
    }

#: `service_source` values (a dictionary column).
SERVICE_SOURCES: tuple[str, ...] = ("given", "fitted", "roofline")
#: The fleet keys a `[search]` may vary besides a model's decision axes (`ServingModel.fleet_keys`).
FLEET_KEYS: tuple[str, ...] = ("gpu", "gpus_per_replica")


#: `Column.null_when` words that are not flag columns: the row has no such answer (the
#: table's `reason` says why), or the grid said `inf` for this input (no limit).
NO_ANSWER = "no answer"
UNLIMITED = "unlimited"
#: The analytic estimate a simulated value is compared with is unbounded (the analytic
#: model finds the load unsustainable where the simulator decided it was steady).
ANALYTIC_UNBOUNDED = "analytic unbounded"
#: A planning column (band, derivative) of a latency that is unbounded there (unstable samples).
UNBOUNDED = "unbounded"
NULL_WORDS: dict[str, str] = {
    NO_ANSWER: "no answer",
    UNBOUNDED: "the latency it describes is unbounded (unstable samples or point)",
    UNLIMITED: "`inf` in the grid (no limit)",
    ANALYTIC_UNBOUNDED: "the analytic model's estimate is unbounded",
}
#: Integers above this are not exact in float64 (2^53): an integer column holds NULL there.
MAX_EXACT_INT = float(2**53)


@dataclass(frozen=True)
class Column:
    """One output column: name (snake_case with its unit), dtype, unit, meaning.

    Types are BI-safe: float64, int64, bool, and dictionary-encoded strings ("dict", stored
    as int32 codes in memory). `when` names the condition under which it is written.

    `null_when` ("" = never NULL) says what explains a NULL in the files: the flag columns
    (comma-separated) of which at least one is false where the value is NULL, and/or
    `NO_ANSWER` or `UNLIMITED`. The engine keeps `+inf` in memory; the writer turns every
    non-finite value of a nullable column into NULL (`sweep.io.parquet.record_batch`). A
    nullable int64 column is float64 in memory (`memory_dtype`), `+inf` standing for NULL.
    """

    name: str
    dtype: DType
    unit: str
    doc: str
    when: str = ""
    null_when: str = ""

    def present(self, *, roofline: bool, simulation: bool, uncertainty: bool = False,
                sensitivity: bool = False, part_gpu: bool = False) -> bool:
        return (not self.when or (self.when == WHEN_ROOFLINE and roofline)
                or (self.when == WHEN_PART_GPU and part_gpu)
                or (self.when == WHEN_SIMULATION and simulation)
                or (self.when == WHEN_UNCERTAINTY and uncertainty)
                or (self.when == WHEN_SENSITIVITY and sensitivity)
                or (self.when == WHEN_SENSITIVITY_COEF and sensitivity and not roofline))

    @property
    def nullable(self) -> bool:
        return bool(self.null_when)

    @property
    def memory_dtype(self) -> DType:
        """The dtype of the engine's in-memory column (+inf where the file has NULL)."""
        return "float64" if self.dtype == "int64" and self.nullable else self.dtype

    @property
    def null_reasons(self) -> tuple[str, ...]:
        return tuple(w.strip() for w in self.null_when.split(",") if w.strip())

    @property
    def null_flags(self) -> tuple[str, ...]:
        """The flag columns that explain a NULL (one of them is false there)."""
        return tuple(w for w in self.null_reasons if w not in NULL_WORDS)

    def null_text(self) -> str:
        """`null_when` for a reader: "`proxy_ok` false", "no answer", ..."""
        return "; or ".join(NULL_WORDS.get(w, f"`{w}` false") for w in self.null_reasons)

    def with_null(self, null_when: str) -> Column:
        return replace(self, null_when=null_when)


#: Columns every model declares (the engine fills `point_id`; `sweep.decide.verdict` the rest).
POINT_ID = Column("point_id", "int64", "-",
                  "Flat index of the point in the grid (row-major over the axes in canonical order); "
                  "stable across runs of the same grid file.")
SLO_OK = Column("slo_ok", "bool", "-", "latency_ms <= slo_ms (an unbounded latency fails).")
FEASIBLE = Column("feasible", "bool", "-",
                  "stable and mem_ok and latency_ms bounded (not NULL): considered by every decision.")
ACTION = Column("action", "dict", "-",
                "The operating rule, first match wins (docs/model.md, decisions): "
                "out_of_memory | unstable | slo_violated | near_saturation | overprovisioned | ok.")
#: Output keys the engine and the verdict add to a model's own (not computed by `point`).
ENGINE_KEYS: tuple[str, ...] = ("point_id", "slo_ok", "feasible", "action")


def band_stem(latency: str) -> str:
    """`latency_ms` -> `latency`, `ttft_p_ms` -> `ttft_p`: the stem of a latency's band columns."""
    return latency[:-3] if latency.endswith("_ms") else latency


def planning_columns(slo_checks: tuple[tuple[str, str], ...], coefficient_keys: tuple[str, ...],
                     length_keys: tuple[str, ...], units: Mapping[str, str]) -> tuple[Column, ...]:
    """The `[uncertainty]` and `[sensitivity]` columns of a model with these SLO checks and
    inputs (docs/uncertainty.md); `units` gives each input's unit."""
    cols = [Column("p_slo_breach", "float64", "-",
                   "Share of the [uncertainty] samples that miss the SLO "
                   "(some SLO latency above its SLO, or unstable).",
                   WHEN_UNCERTAINTY)]
    for lat, _ in slo_checks:
        for q in (5, 50, 95):
            cols.append(Column(f"{band_stem(lat)}_p{q}_ms", "float64", "ms",
                               f"{q}th percentile over the [uncertainty] samples of {lat}; "
                               "NULL where that share of samples is unstable.",
                               WHEN_UNCERTAINTY, null_when=UNBOUNDED))
    for key in ("arrival_rps", *coefficient_keys, *length_keys):
        when = WHEN_SENSITIVITY_COEF if key in coefficient_keys else WHEN_SENSITIVITY
        for lat, _ in slo_checks:
            cols.append(Column(f"d_{band_stem(lat)}_d_{key}", "float64", f"ms per {units[key]}",
                               f"Derivative of {lat} with respect to {key} "
                               f"(jax autodiff at the point; NULL where {lat} is unbounded).",
                               when, null_when=UNBOUNDED))
    cols.append(Column("headroom_rps", "float64", "requests/s",
                       "Largest arrival rate per replica up to which the point keeps meeting its SLO, "
                       "from its own rate up (bisection on the model; the answer evaluated and met); "
                       "0 where it misses at its own rate.",
                       WHEN_SENSITIVITY, null_when=UNBOUNDED))
    return tuple(cols)


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Param:
    """One `[grid]` parameter: its type, default and domain.

    `default` None means required (or derived: see the model's `fill`). `domain` (numeric
    parameters) is the range every value must lie in; `rule(x)` says why `x` is refused.
    """

    key: str
    kind: Kind
    default: Any
    domain: Domain | None = None
    example: str = ""
    #: how `[search.params]` would search it (a key a search may vary), e.g. `replicas = {low = 1, high = 64}`
    search_example: str = ""
    #: the axis is sorted ascending (the cap: ascending caps let the frontier skip a sort)
    ascending: bool = False

    @property
    def allow_inf(self) -> bool:
        return self.domain is not None and self.domain.inf

    def rule(self, x: float) -> str | None:
        """None when `x` is valid, else the rule it breaks (for the message)."""
        return None if self.domain is None else self.domain.rule(x, integer=self.kind == "int")


#: Named dtypes accepted for `weight_bytes_per_param` and `kv_bytes_per_elem` (bytes per element).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "fp4": 0.5, "int4": 0.5,
}
DTYPE_KEYS: tuple[str, ...] = ("weight_bytes_per_param", "kv_bytes_per_elem")


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Decisions:
    """The decision axes, the columns the exact decisions read, and the answers they report.

    A *row* is every point of one scenario that differs only in the row axes (`row_axes`,
    outermost first; the last is the *cap*, the largest of which `b_max_slo` reports). A
    *group* is every row that differs only in the group axes (`group_axes`, e.g. the
    replicas of each pool): `replicas_min` is the group's row with the smallest `size` (a
    point column constant within a row, e.g. replicas or total GPUs) whose row has an answer
    within `rho_max`. Both sets are the innermost axes of the model's `params`, group axes
    just outside the row axes, so rows and groups are contiguous blocks of the grid.
    `answer_fields` are the point columns copied for each answer of optimum.parquet:
    (suffix, point column, dtype, unit).
    """

    row_axes: tuple[str, ...] = ("batch_window_ms", "batch_size")
    group_axes: tuple[str, ...] = ("replicas",)
    size: str = "replicas"
    capacity: str = "capacity_rps"
    latency: str = "latency_ms"
    #: -1 when the frontier's second objective rises (tokens/s per user): minimise -latency
    latency_sign: float = 1.0
    mean_latency: str = "e_resp_ms"
    utilisation: str = "rho"
    answer_fields: tuple[tuple[str, str, DType, str], ...] = (
        ("", "batch_size", "int64", "requests"),
        ("_window_ms", "batch_window_ms", "float64", "ms"),
        ("_latency_ms", "latency_ms", "float64", "ms"),
        ("_e_resp_ms", "e_resp_ms", "float64", "ms"),
        ("_capacity_rps", "capacity_rps", "float64", "requests/s"),
        ("_rho", "rho", "float64", "-"),
        ("_point_id", "point_id", "int64", "-"),
    )

    @property
    def cap(self) -> str:
        """The innermost row axis: the batch (or running-sequence) cap."""
        return self.row_axes[-1]

    @property
    def knobs(self) -> tuple[str, ...]:
        """The row axes outside the cap (the window, the token budget), outermost first."""
        return self.row_axes[:-1]

    @property
    def decision_axes(self) -> tuple[str, ...]:
        """Every axis a decision chooses: the group axes, then the row axes."""
        return (*self.group_axes, *self.row_axes)


# --------------------------------------------------------------------------- derivations


@dataclass(frozen=True)
class Step:
    """One step of a point's derivation (`sweep explain`): a title, the section of
    docs/model.md it follows, and lines of (formula, the formula with the point's numbers,
    result)."""

    title: str
    section: str
    lines: tuple[tuple[str, str, str], ...]


def num(x: Any, unit: str = "", digits: int = 4) -> str:
    """A number as a derivation writes it: 4 significant digits, `inf` when unbounded."""
    if x is None:
        return "unbounded"
    x = float(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = f"{x:.{digits}g}"
    if "e" not in text and abs(x) >= 10 ** digits:
        text = f"{x:,.0f}"
    return f"{text} {unit}".rstrip()


# --------------------------------------------------------------------------- host pass


class HostPass(abc.ABC):
    """Work on the host between evaluation and decisions (the simulator).

    `__call__` gets one chunk's evaluated columns (NumPy, the first `n` rows real, the rest
    padding) and returns the columns it adds or replaces, padded to the chunk's length.
    """

    columns: tuple[Column, ...] = ()

    @abc.abstractmethod
    def __call__(self, cols: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]: ...


# --------------------------------------------------------------------------- the model


class ServingModel(abc.ABC):
    """Base of every serving model. Models are stateless singletons (the registry holds one
    of each), hashed by identity, so a model is a valid static argument of `jax.jit`.

    Subclasses set the class attributes and implement `point`. The engine uses nothing
    else, so a new model is one new module plus its registration in `sweep.models`.
    """

    #: `[options] serving` value this model belongs to.
    serving: ClassVar[str]
    #: `[options] latency_model` value that selects it.
    name: ClassVar[str]
    #: Every `[grid]` key, canonical axis order (outermost first, the row axes last).
    params: ClassVar[tuple[Param, ...]]
    #: Every point column, in file order.
    columns: ClassVar[tuple[Column, ...]]
    #: Columns echoed from grid keys of the same name (the engine copies them).
    echo: ClassVar[tuple[str, ...]]
    decisions: ClassVar[Decisions] = Decisions()
    #: Point columns repeated on each optimum.parquet row (constant within a row).
    row_constant: ClassVar[tuple[str, ...]] = ()
    #: The SLO checks: (latency column, SLO column) pairs; a point meets its SLO when every
    #: latency is <= its SLO (+inf fails).
    slo_checks: ClassVar[tuple[tuple[str, str], ...]] = (("latency_ms", "slo_ms"),)
    #: `[uncertainty]` / `[sensitivity]` inputs (docs/uncertainty.md): the arrival rate, the
    #: service-time coefficients (`coefficient_keys`) and the token lengths, in that order.
    coefficient_keys: ClassVar[tuple[str, ...]] = ("t_fixed_ms", "t_req_ms")
    length_keys: ClassVar[tuple[str, ...]] = ()
    #: How `[sensitivity]` differentiates: "forward" (`jax.jacfwd`, one tangent per input) or
    #: "reverse" (`jax.jacrev`, one cotangent per SLO latency); `benchmarks/uncertainty.py`
    #: measures both models' choice.
    derivative_mode: ClassVar[str] = "forward"
    #: an input the grid may leave to another key (which then stands for it)
    input_fallback: ClassVar[dict[str, str]] = {}
    #: Grid keys naming the catalog GPU of one part of the fleet (a pool), `<part>_gpu`, beside
    #: `gpu`. The loader looks each name up (`GridSpec.gpus` holds every GPU the grid names,
    #: `gpu`'s first); where the grid gives one, the engine adds that GPU's figures of
    #: `CATALOG_FIELDS` to `point`'s x as `<part>_<figure>` (`prefill_hbm_bytes`, ...); a part
    #: the grid gives no GPU of its own runs on `gpu`.
    part_gpu_keys: ClassVar[tuple[str, ...]] = ()
    #: Does this model need the host pass to decide (the simulator's percentile)?
    needs_host_pass: ClassVar[bool] = False
    #: Columns that never decrease as arrival_rps rises, all else fixed (+inf counts as the
    #: largest value); the contract tests check the claim.
    monotone_in_load: ClassVar[tuple[str, ...]] = ()
    #: `[search] objective` names -> (point column, "minimize" | "maximize").
    objectives: ClassVar[dict[str, tuple[str, str]]] = {"min_cost": ("cost_usd_per_hour", "minimize")}
    #: What a `[profile]` CSV fits for this model (`sweep.grid.fit`): "service" (T_svc(B) =
    #: T_fixed + t_req B) or "step" (T_step = t_fixed + t_token n_tok + t_ctx n_ctx).
    profile_kind: ClassVar[str] = "service"
    #: Memory XLA needs to compile this model's chunk function beyond the window proxy's,
    #: MB (measured; `sweep.runner.memory` plans --memory-limit with it).
    compile_mb: ClassVar[int] = 0
    #: The grids the contract tests (`sweep.testing.models`) run this model on: partial grid
    #: documents (`options`, `grid`, ...) merged onto the grid of every param's `example`,
    #: `None` removing a key. Each one is a compilation; together they should reach every
    #: static branch of `point` (given and roofline times, contiguous and paged KV, ...).
    contract_variants: ClassVar[tuple[Mapping[str, Any], ...]] = ({},)
    #: How its results read in the terminal and the report (`sweep.models.views`).
    views: ClassVar[Views] = Views()

    # -- declarations -----------------------------------------------------------------

    @property
    def param_by_key(self) -> dict[str, Param]:
        return {p.key: p for p in self.params}

    @property
    def fleet_keys(self) -> tuple[str, ...]:
        """The [grid] keys besides `decisions.decision_axes` that a `[search]` may vary: the
        fleet's GPU and GPUs per replica, those of `FLEET_KEYS` the model has."""
        return tuple(k for k in FLEET_KEYS if k in self.param_by_key)

    @property
    def row_axes(self) -> tuple[str, ...]:
        return self.decisions.row_axes

    @property
    def group_axes(self) -> tuple[str, ...]:
        return self.decisions.group_axes

    def per_replica(self, x: Mapping[str, Array], rate: Array) -> Array:
        """The arrival rate one replica sees when the fleet gets `rate` (`headroom_rps` is
        per replica); a model whose load splits otherwise says so here."""
        return rate / x["replicas"]

    def point_columns(self, *, roofline: bool, simulation: bool, uncertainty: bool = False,
                      sensitivity: bool = False, part_gpu: bool = False) -> tuple[Column, ...]:
        """The columns a run of this model writes, in order."""
        return tuple(c for c in self.columns if c.present(roofline=roofline, simulation=simulation,
                                                          uncertainty=uncertainty, sensitivity=sensitivity,
                                                          part_gpu=part_gpu))

    # -- validation -------------------------------------------------------------------

    def fill(self, values: dict[str, list[Any]], where: Callable[[str], str],
             source: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        """Fill defaults after the per-value checks; returns the values and facts about
        them the model needs later (its static options). Default: plain defaults."""
        out = dict(values)
        for p in self.params:
            if p.key not in out and p.default is not None:
                out[p.key] = [p.default]
        return out, {}

    def check(self, values: Mapping[str, Sequence[Any]], options: Any, where: Callable[[str], str],
              source: str) -> None:
        """Cross-field rules over every combination of the axes (`values` maps each key to
        the values it can take; `where(key)` names the key for the message). Default: none."""
        return None

    def check_spec(self, spec: GridSpec) -> None:
        """Rules on the built spec: those that need the grid's catalog entries (`spec.models`,
        `spec.gpus`) or its tables ([search], ...); raise `GridError` naming the key. Default:
        none."""
        return None

    # -- evaluation -------------------------------------------------------------------

    @abc.abstractmethod
    def static(self, spec: GridSpec) -> dict[str, Any]:
        """The compile-time (hashable) keywords of `point` for a grid."""

    @abc.abstractmethod
    def point(self, x: Mapping[str, Array], *args: Any, **static: Any) -> dict[str, Array]:
        """Every computed column for ONE point (scalars in, scalars out, file units)."""

    def presolve(self, x: Mapping[str, Array], **static: Any) -> dict[str, Array]:
        """Quantities of ONE point that `point` accepts as given among its inputs (keys that
        start with "_"), solved once per point before `[sensitivity]`'s derivative program
        runs `point` in blocks (`sweep.engine.plan.derivative_values`): an iterative solve
        then runs once over the whole chunk rather than once per block. `point` must give
        the same values with or without them, and differentiate them implicitly (their own
        derivatives are never taken). Default: none."""
        return {}

    def host_pass(self, spec: GridSpec) -> HostPass | None:
        """The host pass a grid needs (None: decisions fuse into the jitted chunk)."""
        return None

    # -- explanation ------------------------------------------------------------------

    def derivation(self, row: Mapping[str, Any], figures: Mapping[str, float] | None = None,
                   options: Mapping[str, Any] | None = None) -> list[Step] | None:
        """The step-by-step derivation of one evaluated point (`sweep explain`, the report),
        from its columns (`row`: file units, +inf or None where unbounded), the catalog
        figures when known, and the grid's options. None: this model has none yet."""
        return None


