"""The serving-model contract as plain functions, for any `ServingModel` (registered or not).

Everything comes from the model's own declarations, so a new model needs no code here:

* **grids**: the grid of every `Param.example` (TOML lines, parsed with tomllib), merged with
  each of the model's `contract_variants` (`None` removes a key), built by the loader
  (`sweep.api.grid_from_dict`) into a `GridSpec`. The spec gives the static keywords
  (`model.static(spec)`), the input keys (its axes) and the columns (`jit_columns`);
* **points** (`draw_points`): every numeric input drawn from its `Domain` (log-uniform where
  the range spans decades, `inf` at times where the domain allows it, the closed ends now and
  then, integers rounded), catalog names from the packaged catalog; a share of the points
  near the example values instead, so the stable, feasible region is exercised too. Each point
  must pass the model's own `fill` and `check` as a one-point grid and leave the grid's static
  keywords as they are (`misfit`); the key that does not is drawn again (or the point dropped);
* **checks** (`check_*`, `check_model`): the columns as declared, in the declared dtypes; no
  NaN; `+inf` only where the column's `null_when` allows it; every SLO latency `+inf` where
  unstable; feasible implies stable; the `monotone_in_load` claims; one compilation per chunk
  shape; the engine refusing a model that breaks its declaration.

A failed check raises `ContractFailure` (an `AssertionError`) naming the model and the
rule. `sweep.testing.pytest_models` runs these checks as pytest tests over
`sweep.models.REGISTRY`.
"""

from __future__ import annotations

import copy
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from sweep.api import grid_from_dict
from sweep.catalog import packaged_catalog
from sweep.engine.evaluate import Evaluator, ModelContractError, evaluate_points, jit_columns
from sweep.errors import GridError
from sweep.grid.spec import Axis, GridSpec
from sweep.models.base import ENGINE_KEYS, Column, Param, ServingModel, figure_arrays

#: Points each grid of a model is checked on (a power of two: one padded shape to compile).
N_POINTS = 512
#: Share of the points drawn near the example values rather than over the whole domain.
EXAMPLE_SHARE = 0.5
#: Near an example: the value times 10**U(-SPREAD, SPREAD) (a factor of 1/2 to 2).
SPREAD = 0.3
#: Where a domain allows `inf`, the share of values that are `inf`.
INF_SHARE = 0.2
#: The share of values at a closed end of the domain (half at each end).
END_SHARE = 0.04
#: A range spans decades when hi / lo >= this, or, from 0, when hi >= this: drawn
#: log-uniform (from 0: over its top DECADES, and 0 itself among the ends).
LOG_RATIO = 100.0
DECADES = 12
#: A drawn point whose refusals name a key this many times running is dropped.
MAX_REDRAWS = 40
#: The sample must hold at least this share of stable points, and of unstable ones, so that
#: neither kind of check is vacuous.
MIN_STABLE_SHARE = 0.1
MIN_UNSTABLE_SHARE = 0.05
#: The key the load check raises (`ServingModel.monotone_in_load`), and how.
LOAD_KEY = "arrival_rps"
LOAD_FACTOR = 1.5
LOAD_STEPS = 6

SOURCE = "<contract>"
_DTYPES = {"float64": np.float64, "int64": np.int64, "bool": np.bool_, "dict": np.int32}


class ContractFailure(AssertionError):
    """A model breaks the serving-model contract (or its declarations cannot be checked)."""


def require(ok: Any, message: str) -> None:
    if not ok:
        raise ContractFailure(message)


def _where(key: str) -> str:
    return f"grid.{key}"


# --------------------------------------------------------------------------- grids


def example_grid(model: ServingModel) -> dict[str, Any]:
    """The `[grid]` table of every param's `example` (params without one are left out)."""
    grid: dict[str, Any] = {}
    for p in model.params:
        if not p.example:
            continue
        try:
            line = tomllib.loads(p.example)
        except tomllib.TOMLDecodeError as exc:
            raise ContractFailure(f"{_name(model)}: {p.key}'s example {p.example!r} "
                                  f"is not a TOML line: {exc}") from None
        require(set(line) == {p.key}, f"{_name(model)}: {p.key}'s example {p.example!r} sets {sorted(line)}")
        grid[p.key] = line[p.key]
    return grid


def merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`base` updated by `patch`, tables merged key by key; a `None` in `patch` removes the key."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def grid_documents(model: ServingModel) -> list[dict[str, Any]]:
    """One grid document per contract variant: the example grid, merged with the variant."""
    base = {"name": "contract", "options": {"serving": model.serving, "latency_model": model.name},
            "grid": example_grid(model)}
    require(model.contract_variants, f"{_name(model)}: contract_variants is empty")
    return [merge(base, variant) for variant in model.contract_variants]


@dataclass(frozen=True)
class Variant:
    """One contract grid of a model, as the loader validated it."""

    spec: GridSpec

    @property
    def model(self) -> ServingModel:
        return self.spec.model

    @cached_property
    def static(self) -> dict[str, Any]:
        return self.model.static(self.spec)

    @property
    def keys(self) -> tuple[str, ...]:
        """Every input key (the grid's axes, defaults filled)."""
        return tuple(a.key for a in self.spec.axes)

    @property
    def columns(self) -> tuple[Column, ...]:
        """The columns the jitted evaluation computes for this grid."""
        return jit_columns(self.spec)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.name != "point_id")

    def __str__(self) -> str:
        return f"{_name(self.model)} with {self.static}"


def variants(model: ServingModel) -> tuple[Variant, ...]:
    """The model's contract grids (`contract_variants` over its examples) as validated specs."""
    out = []
    for i, doc in enumerate(grid_documents(model)):
        try:
            spec = grid_from_dict(doc, source=f"{SOURCE} {_name(model)} variant {i}")
        except GridError as exc:
            raise ContractFailure(f"{_name(model)}: contract variant {i} (the examples merged with "
                                  f"{model.contract_variants[i]!r}) is not a valid grid: {exc}") from None
        require(spec.model is model, f"{_name(model)}: variant {i} loads as {_name(spec.model)}, not the model itself")
        out.append(Variant(spec))
    return tuple(out)


# --------------------------------------------------------------------------- points


def _catalog_names(key: str) -> list[str] | None:
    cat = packaged_catalog()
    return {"model": sorted(cat.models), "gpu": sorted(cat.gpus)}.get(key)


def _valid(param: Param, x: float) -> bool:
    return not math.isnan(x) and param.rule(x) is None


def _wide(param: Param, rng: np.random.Generator, m: int) -> np.ndarray:
    """`m` values over the whole domain of a numeric param."""
    d = param.domain
    assert d is not None
    lo, hi = d.lo, d.hi
    if (hi / lo if lo > 0 else hi) >= LOG_RATIO:
        bottom = lo if lo > 0 else hi * 10.0 ** -DECADES
        x = 10.0 ** rng.uniform(math.log10(bottom), math.log10(hi), m)
    else:
        x = rng.uniform(lo, hi, m)
    u = rng.random(m)
    if not d.lo_open:
        x = np.where(u < END_SHARE / 2, lo, x)
    if not d.hi_open:
        x = np.where((u >= END_SHARE / 2) & (u < END_SHARE), hi, x)
    if param.kind == "int":
        x = np.clip(np.round(x), math.ceil(lo), math.floor(hi))
    if d.inf:
        x = np.where(rng.random(m) < INF_SHARE, math.inf, x)
    return x


def _near(param: Param, examples: tuple[Any, ...], rng: np.random.Generator, m: int) -> np.ndarray:
    """`m` values near the example values of a numeric param (an example when the spread
    would leave the domain)."""
    base = np.asarray(examples, dtype=np.float64)[rng.integers(0, len(examples), m)]
    x = base * 10.0 ** rng.uniform(-SPREAD, SPREAD, m)  # inf stays inf
    if param.kind == "int":
        x = np.round(x)
    ok = np.array([_valid(param, v) for v in x.tolist()], dtype=bool)
    return np.where(ok, x, base)


def _draw(param: Param, examples: tuple[Any, ...], rng: np.random.Generator, m: int, near: bool) -> np.ndarray:
    """`m` values of one input, valid each on its own (its type and domain)."""
    if param.kind == "name":
        names = _catalog_names(param.key)
        pool = list(examples) if near or names is None else names
        return np.asarray(pool, dtype=object)[rng.integers(0, len(pool), m)]
    if param.domain is None:  # no domain to draw from: the examples
        return np.asarray(examples, dtype=np.float64)[rng.integers(0, len(examples), m)]
    x = _near(param, examples, rng, m) if near else _wide(param, rng, m)
    for _ in range(100):  # a rounded or boundary value outside an open end: draw again
        bad = np.array([not _valid(param, v) for v in x.tolist()], dtype=bool)
        if not bad.any():
            return x
        x[bad] = _wide(param, rng, int(bad.sum()))
    raise ContractFailure(f"{param.key}: cannot draw a value in {param.domain.text(param.kind == 'int')}")


def misfit(variant: Variant, point: Mapping[str, Any], suspects: Sequence[str] = ()) -> str | None:
    """The key to draw again for `point` to fit the grid, or None when it fits: the key a
    refusal of the model's own `fill` and `check` names (the point as a one-point grid), or a
    key whose value would change the grid's static keywords (e.g. a finite window in a grid
    of full batches only; the keys in `suspects` are tried first)."""
    model, spec = variant.model, variant.spec
    values = {k: [v] for k, v in point.items()}
    try:
        filled, _ = model.fill(values, _where, SOURCE)
        model.check(filled, spec.options, _where, SOURCE)
    except GridError as exc:
        return exc.key.removeprefix("grid.")

    def static_with(keys: Any) -> dict[str, Any]:
        axes = tuple(Axis(a.key, (*a.values, point[a.key])) if a.key in keys else a for a in spec.axes)
        return model.static(replace(spec, axes=axes))

    if static_with(point) == variant.static:
        return None
    keys = [*(k for k in suspects if k in point), *(k for k in point if k not in suspects)]
    return next((k for k in keys if static_with((k,)) != variant.static), keys[0])


def draw_points(variant: Variant, rng: np.random.Generator, n: int, *,
                example_share: float = EXAMPLE_SHARE) -> dict[str, np.ndarray]:
    """`n` valid points of one contract grid (file units; name keys as names): a share near
    the example values, the rest over every input's domain; each one fits the grid (`misfit`),
    the key that does not drawn again."""
    model, spec = variant.model, variant.spec
    params = model.param_by_key
    examples = {a.key: a.values for a in spec.axes}
    points: list[dict[str, Any]] = []
    suspects: list[str] = []
    for _ in range(100):
        m = 2 * (n - len(points))
        near = rng.random(m) < example_share
        batch = {k: np.where(near, _draw(params[k], examples[k], rng, m, True),
                             _draw(params[k], examples[k], rng, m, False)) for k in variant.keys}
        for i in range(m):
            point = {k: batch[k][i] if params[k].kind == "name" else float(batch[k][i]) for k in variant.keys}
            for tries in range(MAX_REDRAWS):
                key = misfit(variant, point, suspects)
                if key is None:
                    points.append(point)
                    break
                if key not in point:
                    break
                if key not in suspects:
                    suspects.append(key)
                # redraw the key the rule names: as the point was drawn, then near the examples
                again = _draw(params[key], examples[key], rng, 1, bool(near[i]) or tries >= MAX_REDRAWS // 2)[0]
                point[key] = again if params[key].kind == "name" else float(again)
            if len(points) == n:
                return {k: np.asarray([p[k] for p in points], dtype=object if params[k].kind == "name" else np.float64)
                        for k in variant.keys}
    raise ContractFailure(f"{variant}: fewer than {n} points pass its own rules after many draws")


def catalog_figures(points: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The catalog figures (`CATALOG_FIELDS`) of each point's model and GPU."""
    cat = packaged_catalog()
    tps = points["gpus_per_replica"] if "gpus_per_replica" in points else None
    return figure_arrays([cat.model(str(m)) for m in points["model"]], [cat.gpu(str(g)) for g in points["gpu"]],
                         None if tps is None else [float(t) for t in tps])


def evaluate(variant: Variant, points: Mapping[str, np.ndarray], *,
             model: ServingModel | None = None) -> dict[str, np.ndarray]:
    """Every column the grid computes at `points`, the verdicts and the private values
    (`sweep.engine.evaluate_points`), with the grid's static keywords; `model` stands in for
    the variant's own (a broken copy)."""
    params = variant.model.param_by_key
    numeric = {k: v for k, v in points.items() if params[k].kind != "name"}
    return evaluate_points(model or variant.model, numeric, catalog_figures(points), static=variant.static,
                           columns=variant.column_names)


# --------------------------------------------------------------------------- checks


def check_columns(variant: Variant, out: Mapping[str, np.ndarray]) -> None:
    """The columns as declared (names, dtypes); no NaN; +inf only where the column's
    `null_when` allows it, and then with one of its flags false."""
    public = {k for k in out if not k.startswith("_")}
    wanted = set(variant.column_names) | (set(ENGINE_KEYS) - {"point_id"})
    require(public == wanted, f"{variant}: columns {sorted(public ^ wanted)} differ from the declaration")
    check_values(variant.model, out, str(variant))


def check_values(model: ServingModel, out: Mapping[str, np.ndarray], where: str = "") -> None:
    """Every public column of `out` (one model's outputs at some points) in its declared
    dtype, never NaN, and +inf only where its `null_when` allows it, then with one of its
    flags false. `where` names the case in the message (default: the model)."""
    where = where or _name(model)
    declared = {c.name: c for c in model.columns}
    n = len(out["stable"])
    for name, values in out.items():
        if name.startswith("_"):
            continue
        column = declared[name]
        require(values.dtype == _DTYPES[column.memory_dtype],
                f"{where}: {name} is {values.dtype}, declared {column.memory_dtype}")
        as_float = values.astype(np.float64)
        require(not np.isnan(as_float).any(), f"{where}: NaN in {name} at {_first(np.isnan(as_float))}")
        unbounded = np.isinf(as_float)
        if not column.nullable:
            require(not unbounded.any(), f"{where}: {name} is inf at {_first(unbounded)} but declares no null_when")
        elif (column.null_flags and len(column.null_flags) == len(column.null_reasons)
              and all(f in out for f in column.null_flags)):  # flags a host pass computes are not here
            explained = np.zeros(n, bool)
            for flag in column.null_flags:
                explained |= ~out[flag]
            require(explained[unbounded].all(),
                    f"{where}: {name} is inf with every flag of {column.null_when!r} true "
                    f"at {_first(unbounded & ~explained)}")


def check_verdicts(variant: Variant, out: Mapping[str, np.ndarray]) -> None:
    """Where the load is unsustainable some latency an SLO checks is +inf (such a point
    cannot pass); each such latency is +inf wherever one of the flags its column declares
    (`null_when`) is false (a stage's own `stable` in a tandem, `proxy_ok` for the window
    proxy) and finite where the point is feasible; feasible implies stable."""
    unstable = ~out["stable"]
    declared = {c.name: c for c in variant.model.columns}
    some_unbounded = np.zeros(len(unstable), dtype=bool)
    for latency, _ in variant.model.slo_checks:
        values = out[latency]
        some_unbounded |= np.isinf(values) & (values > 0)
        for flag in declared[latency].null_flags:
            if flag in out:  # flags of a host pass (the simulator's) are not computed here
                off = ~np.asarray(out[flag], dtype=bool)
                require((np.isinf(values[off]) & (values[off] > 0)).all(),
                        f"{variant}: {latency} is not +inf where {flag} is false")
        require((np.isfinite(values) | ~out["feasible"]).all(), f"{variant}: {latency} unbounded where feasible")
    require(some_unbounded[unstable].all(), f"{variant}: no SLO latency is +inf where unstable")
    require(not (out["feasible"] & unstable).any(), f"{variant}: feasible where not stable")


def check_sample(variant: Variant, out: Mapping[str, np.ndarray]) -> None:
    """The sample exercises both sides: enough stable and unstable points, some feasible."""
    stable = float(np.mean(out["stable"]))
    require(stable >= MIN_STABLE_SHARE, f"{variant}: only {stable:.1%} of the drawn points are stable "
                                        f"(at least {MIN_STABLE_SHARE:.0%}): are the examples a stable configuration?")
    require(1 - stable >= MIN_UNSTABLE_SHARE, f"{variant}: only {1 - stable:.1%} of the drawn points are unstable")
    require(out["feasible"].any(), f"{variant}: no drawn point is feasible")


def check_points(model: ServingModel, rng: np.random.Generator, n: int = N_POINTS) -> None:
    """`n` drawn points of each contract grid: columns, verdicts, and a sample that is not vacuous."""
    for variant in variants(model):
        out = evaluate(variant, draw_points(variant, rng, n))
        check_columns(variant, out)
        check_verdicts(variant, out)
        check_sample(variant, out)


def check_monotone_in_load(model: ServingModel, rng: np.random.Generator, n: int = N_POINTS // 8) -> None:
    """The columns the model lists in `monotone_in_load` never decrease as the load rises
    (`n` drawn points of its first grid, at LOAD_STEPS rates rising by LOAD_FACTOR); each
    rises somewhere, or the sample does not test the claim."""
    require(model.monotone_in_load, f"{_name(model)} claims no column monotone in load")
    variant = variants(model)[0]
    require(LOAD_KEY in variant.keys, f"{variant}: no {LOAD_KEY} input to raise")
    points = draw_points(variant, rng, n)
    grid = {k: np.tile(v, LOAD_STEPS) for k, v in points.items()}
    grid[LOAD_KEY] = grid[LOAD_KEY] * np.repeat(LOAD_FACTOR ** np.arange(LOAD_STEPS), n)
    out = evaluate(variant, grid)
    for name in model.monotone_in_load:
        x = out[name].astype(np.float64).reshape(LOAD_STEPS, n)
        with np.errstate(invalid="ignore"):
            step = np.diff(x, axis=0)
            down = step < -1e-9 * np.abs(x[:-1])
            up = step > 1e-9 * np.abs(x[:-1])
        require(not down.any(),
                f"{variant}: {name} decreases with load at (step, point) {np.argwhere(down)[:3].tolist()}")
        require(up.any(), f"{variant}: {name} never rises with load in the sample: the claim is untested")


def check_one_compilation(model: ServingModel) -> None:
    """The chunk function of the model's first grid compiles once for all its chunks (one
    scenario group per chunk: at least two chunks)."""
    spec = variants(model)[0].spec
    ev = Evaluator(spec, chunk_size=spec.group_size)
    require(ev.n_chunks >= 2, f"{_name(model)}: its examples make one scenario group; give an axis outside "
                              f"the decision axes {model.decisions.decision_axes} two example values")
    chunks = list(ev.iter_chunks())
    require(len(chunks) == ev.n_chunks, f"{_name(model)}: {len(chunks)} chunks of {ev.n_chunks}")
    require(ev.compile_count() == 1, f"{_name(model)}: {ev.compile_count()} compilations for one chunk shape")


def broken(model: ServingModel, variant: Variant) -> tuple[ServingModel, str]:
    """A copy of `model` whose `point` forgets one column it declares (and computes), and that column."""
    computed = [c for c in variant.column_names if c not in model.echo and c not in ENGINE_KEYS]
    require(computed, f"{_name(model)} computes no column")
    victim = computed[0]
    point = model.point

    def forgetful(x: Mapping[str, Any], *args: Any, **static: Any) -> dict[str, Any]:
        out = dict(point(x, *args, **static))
        del out[victim]
        return out

    clone = copy.copy(model)
    object.__setattr__(clone, "point", forgetful)  # this instance only: a new object for jax.jit
    return clone, victim


def check_refuses_broken(model: ServingModel, rng: np.random.Generator) -> None:
    """The engine refuses (ModelContractError, naming the column) a copy of the model that
    does not compute a column it declares."""
    variant = variants(model)[0]
    clone, victim = broken(model, variant)
    try:
        evaluate(variant, draw_points(variant, rng, 8), model=clone)
    except ModelContractError as exc:
        require(victim in str(exc), f"{_name(model)}: the refusal does not name {victim}: {exc}")
    else:
        raise ContractFailure(f"{_name(model)}: a copy that forgets {victim} was not refused")


def check_model(model: ServingModel, *, seed: int = 0, n: int = N_POINTS) -> None:
    """Every check of the contract on one model."""
    rng = np.random.default_rng(seed)
    check_points(model, rng, n)
    if model.monotone_in_load:
        check_monotone_in_load(model, rng)
    if not model.needs_host_pass:  # a host pass runs at every chunk (the simulator: slow)
        check_one_compilation(model)
    check_refuses_broken(model, rng)


def seed_of(model: ServingModel) -> int:
    """A seed of its own for each model (the same every run)."""
    return sum(map(ord, _name(model)))


def _name(model: ServingModel) -> str:
    return f"{model.serving}/{model.name}"


def _first(mask: np.ndarray) -> list[int]:
    return np.flatnonzero(mask)[:3].tolist()
