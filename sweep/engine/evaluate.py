"""Chunked evaluation of a grid: the only place that batches (jit + vmap).

A grid is never materialised. A chunk is `chunk_size` consecutive flat indices; inside one
jitted call each index is decoded into axis coordinates (mixed radix over the axes in the
model's canonical order), the axis values and catalog figures are gathered, the model's
per-point function is vmapped over the chunk, the verdicts are taken and, unless the grid
needs a host pass (the simulator), the decisions are reduced in the same call. Every chunk
has the same shape (the last one is padded by repeating the final index and trimmed on the
host), so a run compiles once. Dispatch is asynchronous: `iter_chunks` queues the next
chunk's compute before handing back the current one, so the caller's writing overlaps it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sweep._lazy import lazy_module
from sweep.decide.reduce import RULES_BY_SAMPLE, reduce_chunk
from sweep.decide.verdict import ACTION_CODE, verdict, within_risk
from sweep.engine.plan import plan_values
from sweep.grid.spec import GridSpec
from sweep.models.base import (
    CATALOG_FIELDS,
    CELL_FIELDS,
    ENGINE_KEYS,
    PLANNING_WHEN,
    WHEN_SIMULATION,
    Column,
    ServingModel,
    cell_index,
    efficiency_cells,
    gpu_figures,
    model_figures,
    part_figure,
)

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    jax = lazy_module("jax")
    jnp = lazy_module("jax.numpy")

DEFAULT_CHUNK = 1 << 16
#: Prefix of the catalog tables that hold the efficiency table's cells (`catalog_tables`).
CELL_TABLE = "cell:"
#: The dtype each declared memory_dtype is stored as (dictionary codes: int32).
_CAST = {"float64": "float64", "int64": "int64", "bool": "bool", "dict": "int32"}


class ModelContractError(Exception):
    """A serving model returned columns other than those it declares (a bug in the model)."""


@dataclass(frozen=True)
class Chunk:
    """One evaluated chunk: rows [start, stop) of the grid, columns in file units."""

    index: int
    start: int
    stop: int
    columns: dict[str, np.ndarray]  # per point, (stop - start,)
    rows: dict[str, np.ndarray]  # per row (scenario, group-axis values), (n_rows,); see sweep.decide.reduce

    def __len__(self) -> int:
        return self.stop - self.start


def jit_columns(spec: GridSpec) -> tuple[Column, ...]:
    """The point columns the jitted evaluation computes (the host pass adds the rest)."""
    return tuple(c for c in spec.point_columns() if c.when != WHEN_SIMULATION and c.when not in PLANNING_WHEN)


def plan_static(spec: GridSpec) -> tuple[Any, ...] | None:
    """What `sweep.engine.plan` needs (hashable), or None when the grid asks for neither
    `[uncertainty]` nor `[sensitivity]`."""
    if spec.uncertainty is None and not spec.sensitivity:
        return None
    return (spec.uncertainty, spec.sensitivity, spec.roofline)


def chunk_points(spec: GridSpec, chunk_size: int) -> int:
    """The points of one chunk of `spec` asked for `chunk_size`: whole scenario groups, so
    every decision reduces inside one chunk (with [uncertainty] a point is S evaluations, so
    a chunk holds chunk_size / S points). Cheap: a finished run is recognised without
    building an `Evaluator`."""
    per_point = spec.uncertainty.samples if spec.uncertainty is not None else 1
    groups = max(1, min(max(1, chunk_size // per_point), spec.n_points) // spec.group_size)
    return groups * spec.group_size


class Evaluator:
    """Evaluates a `GridSpec` chunk by chunk. Build once per run; compiles on first use."""

    def __init__(self, spec: GridSpec, chunk_size: int = DEFAULT_CHUNK) -> None:
        self.spec = spec
        self.model = spec.model
        self.n_points = spec.n_points
        self.row_size = spec.row_size
        self.group_size = spec.group_size
        self.chunk_size = chunk_points(spec, chunk_size)
        self.n_chunks = math.ceil(self.n_points / self.chunk_size)
        self._axes = axis_arrays(spec)
        self._tables = catalog_tables(spec)
        self.host_pass = self.model.host_pass(spec)
        self.rows_per_group = spec.rows_per_group
        self._reduce_static = (("n_cap", len(spec.axis(self.model.decisions.cap))),
                               ("rows_per_group", self.rows_per_group), ("row_size", self.row_size))
        static = dict(
            model=self.model,
            static=tuple(sorted(self.model.static(spec).items())),
            columns=tuple(c.name for c in jit_columns(spec)),
            keys=tuple(a.key for a in spec.axes),
            shape=spec.shape,
            chunk_size=self.chunk_size,
            reduce=None if self.host_pass is not None else self._reduce_static,
            plan=plan_static(spec),
        )
        self._fn = _compiled_chunk(tuple(static.items()))
        if self.host_pass is not None:
            risk = spec.uncertainty.risk if spec.uncertainty is not None else None
            self._finish = _compiled_finish(self.model, self._reduce_static, risk)

    def dispatch(self, start: int, stop: int | None = None) -> dict[str, jax.Array]:
        """Queue the chunk of points [start, min(start + chunk_size, stop)) on the device;
        returns device arrays without waiting. `start` is a multiple of the group size."""
        stop = self.n_points if stop is None else stop
        return self._fn(
            jnp.asarray(start, dtype=jnp.int64), jnp.asarray(stop, dtype=jnp.int64), self._axes, self._tables
        )

    def fetch(self, start: int, stop: int | None, device_out: dict[str, jax.Array]) -> Chunk:
        stop = min(start + self.chunk_size, self.n_points if stop is None else stop)
        index = start // self.chunk_size
        host = jax.device_get(device_out)
        n = stop - start
        if self.host_pass is not None:
            host = {k: np.asarray(v) for k, v in host.items()}
            host.update(self.host_pass(host, n))
            host = jax.device_get(self._finish(host))
        rows = host.pop("_rows")
        n_rows = n // self.row_size
        return Chunk(
            index, start, stop,
            {k: np.asarray(v)[:n] for k, v in host.items()},
            {k: np.asarray(v)[:n_rows] for k, v in rows.items()},
        )

    def chunk(self, index: int) -> Chunk:
        start = index * self.chunk_size
        return self.fetch(start, None, self.dispatch(start))

    def iter_chunks(self, start: int = 0, stop: int | None = None) -> Iterator[Chunk]:
        """Yield the chunks covering points [start, stop) in order, the next one computing
        while the caller handles this one (JAX dispatches asynchronously)."""
        stop = self.n_points if stop is None else stop
        pending: tuple[int, dict[str, jax.Array]] | None = None
        for begin in range(start, stop, self.chunk_size):
            queued = (begin, self.dispatch(begin, stop))
            if pending is not None:
                yield self.fetch(pending[0], stop, pending[1])
            pending = queued
        if pending is not None:
            yield self.fetch(pending[0], stop, pending[1])

    def compile_count(self) -> int:
        """Number of compiled variants of the chunk function (1 after any number of chunks)."""
        return self._fn._cache_size()


# --------------------------------------------------------------------------- compiled


@functools.lru_cache(maxsize=32)
def _compiled_chunk(static: tuple[tuple[str, Any], ...]) -> Any:
    """One jitted chunk function per static configuration, shared by every run in the
    process (a second run of the same grid shape does not compile again)."""
    return jax.jit(functools.partial(_evaluate_chunk, **dict(static)))


@functools.lru_cache(maxsize=32)
def _compiled_finish(model: ServingModel, reduce: tuple[tuple[str, int], ...], risk: float | None) -> Any:
    return jax.jit(functools.partial(_finish, model=model, reduce=reduce, risk=risk))


def _evaluate_chunk(
    offset: jax.Array,
    limit: jax.Array,
    axes: dict[str, jax.Array],
    tables: dict[str, jax.Array],
    *,
    model: ServingModel,
    static: tuple[tuple[str, Any], ...],
    columns: tuple[str, ...],
    keys: tuple[str, ...],
    shape: tuple[int, ...],
    chunk_size: int,
    reduce: tuple[tuple[str, int], ...] | None,
    plan: tuple[Any, ...] | None = None,
) -> dict[str, jax.Array]:
    """One chunk: decode, evaluate, and unless a host pass follows, reduce to the decisions
    in the same call."""
    # Past `limit` (the last chunk of a range) repeat the last point; the host trims it.
    idx = jnp.minimum(offset + jnp.arange(chunk_size, dtype=jnp.int64), limit - 1)
    v = decode(idx, axes, keys=keys, shape=shape)
    out = evaluate_values(v, tables, model=model, static=static, columns=columns, plan=plan)
    out["point_id"] = idx
    if reduce is not None:
        out.update(reduce_chunk(out, model.decisions, **dict(reduce)))
        out.pop(RULES_BY_SAMPLE, None)  # reduced to the bands on the device: never copied to the host
    return out


def _finish(out: dict[str, jax.Array], *, model: ServingModel, reduce: tuple[tuple[str, int], ...],
            risk: float | None = None) -> dict[str, jax.Array]:
    """After a host pass: the verdicts on the updated columns (with `[uncertainty]`'s `risk`,
    as `evaluate_values` applies it), then the decisions."""
    out = dict(out)
    out.update(take_verdict(model, out, risk))
    out.update(reduce_chunk(out, model.decisions, **dict(reduce)))
    out.pop(RULES_BY_SAMPLE, None)
    return out


# --------------------------------------------------------------------------- per point


def take_verdict(model: ServingModel, out: Mapping[str, jax.Array], risk: float | None = None) -> dict[str, jax.Array]:
    """`slo_ok`, `feasible` and `action` of the evaluated columns (`sweep.decide.verdict`);
    with `[uncertainty]`'s `risk`, `slo_ok` also needs `p_slo_breach <= risk`."""
    v = verdict(
        stable=out["stable"], mem_ok=out["mem_ok"],
        checks=[(out[lat], out[slo]) for lat, slo in model.slo_checks],
        rho=out["_rho_rules"], rho_max=out["rho_max"], rho_min=out["rho_min"],
    )
    slo_ok = within_risk(v.slo_ok, out.get("p_slo_breach"), risk)
    # a point that meets its SLO at the grid's values but breaches it in more than `risk` of
    # the scenarios is slo_violated too (below unstable and out_of_memory, as without risk)
    at_risk = v.slo_ok & ~slo_ok
    worse = (v.action == ACTION_CODE["unstable"]) | (v.action == ACTION_CODE["out_of_memory"])
    action = jnp.where(at_risk & ~worse, ACTION_CODE["slo_violated"], v.action)
    return {"slo_ok": slo_ok, "feasible": v.feasible, "action": action}


def evaluate_values(
    v: Mapping[str, jax.Array],
    tables: Mapping[str, jax.Array],
    *,
    model: ServingModel,
    static: tuple[tuple[str, Any], ...],
    columns: tuple[str, ...],
    plan: tuple[Any, ...] | None = None,
) -> dict[str, jax.Array]:
    """Every column in `columns` (file units, declared dtypes) and the model's private values,
    for points given by their parameter values; with `plan` (`plan_static`) the
    `[uncertainty]` / `[sensitivity]` columns too (`sweep.engine.plan`), and with a `risk`
    a point's `slo_ok` also needs `p_slo_breach <= risk`.

    `v` maps each grid key to a 1-D array (model and gpu as catalog-table indices); this is
    what both a grid chunk and a search batch feed the model. Raises `ModelContractError`
    (at trace time) when the model's outputs and its declaration disagree.
    """
    # the [uncertainty] / [sensitivity] columns come from `plan`, never from the model
    planned = {c.name for c in model.columns if c.when in PLANNING_WHEN}
    columns = tuple(c for c in columns if c not in planned)
    x = dict(v)
    for name, axis in CATALOG_FIELDS.items():
        x[name] = tables[name][v[axis]]
    # a part of the fleet on a GPU of its own: that GPU's figures, under the part's prefix
    parts = [k for k in model.part_gpu_keys if k in v]
    for key in parts:
        x.update({part_figure(key, name): tables[name][v[key]] for name, axis in CATALOG_FIELDS.items()
                  if axis == "gpu"})
    if CELL_TABLE + CELL_FIELDS[0] in tables:  # the point's (gpu, size class, tp) efficiencies
        b = cell_index(x["gpus_per_replica"]) if "gpus_per_replica" in x else jnp.zeros_like(v["gpu"])
        for name in CELL_FIELDS:
            x[name] = tables[CELL_TABLE + name][v["model"], v["gpu"], b]
            for key in parts:  # the same tensor-parallel bin as the shared GPU's
                x[part_figure(key, name)] = tables[CELL_TABLE + name][v["model"], v[key], b]
    kw = dict(static)

    def one(point: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return model.point(point, **kw)

    computed = jax.vmap(one)(x)
    declared = {c.name: c for c in model.columns}
    wanted = set(columns) - set(ENGINE_KEYS)
    echoed = {k for k in model.echo if k in wanted}
    produced = {k for k in computed if not k.startswith("_")}
    if produced & echoed or (produced | echoed) != wanted:
        raise ModelContractError(
            f"model {model.serving}/{model.name}: computes {sorted(produced - wanted)} beyond its columns, "
            f"misses {sorted(wanted - produced - echoed)}, echoes and computes {sorted(produced & echoed)}")
    out: dict[str, jax.Array] = {}
    for name in columns:
        if name in ENGINE_KEYS:
            continue
        value = v[name] if name in echoed else computed[name]
        out[name] = value.astype(_CAST[declared[name].memory_dtype])
    out.update({k: val for k, val in computed.items() if k.startswith("_")})
    risk = None
    if plan is not None:
        unc, sens, roofline = plan
        out.update(plan_values(x, model=model, kw=kw, uncertainty=unc, sensitivity=sens, roofline=roofline))
        risk = unc.risk if unc is not None else None
    out.update(take_verdict(model, out, risk))
    return out


def decode(idx: jax.Array, axes: Mapping[str, jax.Array], *,
           keys: tuple[str, ...], shape: tuple[int, ...]) -> dict[str, jax.Array]:
    """Flat indices -> every axis's value (mixed radix, innermost axis fastest)."""
    v: dict[str, jax.Array] = {}
    stride = 1
    for key, n in zip(reversed(keys), reversed(shape)):
        coord = (idx // stride) % n if n > 1 else jnp.zeros_like(idx)
        v[key] = axes[key][coord]
        stride *= n
    return v


def axis_arrays(spec: GridSpec) -> dict[str, jax.Array]:
    """Numeric axis values as float64 device arrays; name axes as their index (a pool's own
    GPU: its index in `spec.gpus`, which starts with `gpu`'s values)."""
    out: dict[str, jax.Array] = {}
    for axis in spec.axes:
        if axis.key in ("model", "gpu"):
            out[axis.key] = jnp.arange(len(axis), dtype=jnp.int32)
        elif axis.key in spec.model.part_gpu_keys:
            out[axis.key] = jnp.asarray([spec.gpu_index(n) for n in axis.values], dtype=jnp.int32)
        else:
            out[axis.key] = jnp.asarray(np.asarray(axis.values, dtype=np.float64))
    return out


def catalog_tables(spec: GridSpec) -> dict[str, jax.Array]:
    """Catalog figures indexed by the model/gpu axis coordinate (`CATALOG_FIELDS`), and the
    efficiency table's cells (`CELL_TABLE` + each of `CELL_FIELDS`) indexed by [model, gpu,
    log2 tp], which replace the GPU-level efficiencies at each point (`evaluate_values`)."""
    def f(xs: list[float]) -> jax.Array:
        return jnp.asarray(np.asarray(xs, dtype=np.float64))

    per_model = [model_figures(m) for m in spec.models]
    per_gpu = [gpu_figures(g) for g in spec.gpus]
    out = {name: f([row[name] for row in (per_model if axis == "model" else per_gpu)])
           for name, axis in CATALOG_FIELDS.items()}
    cells = efficiency_cells(spec.models, spec.gpus)
    out.update({CELL_TABLE + name: jnp.asarray(a) for name, a in cells.items()})
    return out


@functools.lru_cache(maxsize=32)
def _compiled_points(model: ServingModel, static: tuple[tuple[str, Any], ...], columns: tuple[str, ...]) -> Any:
    return jax.jit(functools.partial(evaluate_values, model=model, static=static, columns=columns))


def evaluate_points(
    model: ServingModel,
    params: Mapping[str, Any],
    figures: Mapping[str, Any],
    *,
    static: Mapping[str, Any],
    columns: tuple[str, ...] | None = None,
) -> dict[str, np.ndarray]:
    """Evaluate `model` at explicit points, without a grid: `params` maps every grid key the
    model reads to a scalar or 1-D array (file units; model and gpu are ignored), `figures`
    the catalog figures of `CATALOG_FIELDS` likewise, `static` the model's static keywords.
    Returns every column in `columns` (default: every unconditional one), the verdicts and
    the model's private values, as NumPy arrays (file units)."""
    arrays = {k: np.atleast_1d(np.asarray(v, dtype=np.float64)) for k, v in {**params, **figures}.items()
              if k not in ("model", "gpu")}
    n = max(a.shape[0] for a in arrays.values())
    size = max(8, 1 << (n - 1).bit_length())  # a few padded shapes: few compilations
    take = np.minimum(np.arange(size), n - 1)

    def padded(a: np.ndarray) -> jax.Array:
        return jnp.asarray(np.broadcast_to(a, (n,))[take])

    v = {k: padded(a) for k, a in arrays.items() if k not in CATALOG_FIELDS}
    v["model"] = v["gpu"] = jnp.arange(size, dtype=jnp.int32)
    tables = {k: padded(arrays[k]) for k in CATALOG_FIELDS}
    if columns is None:  # every unconditional column (roofline inputs and sim_* are conditional)
        columns = tuple(c.name for c in model.columns if not c.when and c.name != "point_id")
    fn = _compiled_points(model, tuple(sorted(static.items())), tuple(columns))
    return {k: np.asarray(val)[:n] for k, val in jax.device_get(fn(v, tables)).items()}
