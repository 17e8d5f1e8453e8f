"""A serving mode built from two stage models in series: a tandem.

Requests arrive at the first stage; each leaves it, crosses a link, and is served by the
second (disaggregated serving: a prefill pool, a KV transfer, a decode pool). Like optax's
`chain` of transforms or diffrax's `MultiTerm`, the composite is itself a `ServingModel`
that the engine evaluates like any other, and each stage is a complete serving model that
knows nothing of the other.

    tandem(Stage("prefill", MD1Queue()), Stage("decode", MM1Queue()),
           serving="toy-tandem", link=Link(), combine=None)

* A `Stage` names a serving model ("prefill") and lists its `shared` keys: those keep their
  name and take one value for both stages (`model`, `arrival_rps`, `percentile`, ...); every
  other key of the stage is its own, prefixed by the stage's name (`prefill_replicas`,
  `decode_service_ms`). Its columns are renamed the same way (`prefill_latency_ms`); its
  NULL rules follow the renaming (`decode_stable`).
* The `Link` says how the first stage's output feeds the second: the arrival rate carries
  over (`arrival_rps` is shared: a stable stage passes every request on), each request then
  waits `transfer_ms` (a grid key, a fixed delay) and goes to a second-stage replica at random.
  The second stage also gets `_arrival_gap_ms`, a lower bound on the time between two
  arrivals at one of its replicas: the first stage's `_departure_gap_ms` (a deterministic
  single server spaces its departures D apart) where the first stage has one replica (random
  routing thins a stream and keeps its gaps; merging several streams does not), else 0.
* A `Combine` rule gives the end-to-end latency from the stages': the mean is always the
  sum of the stages' means plus the transfer (linearity, whatever the dependence);
  `IndependentSum` computes the percentile of the sum of two independent sojourns
  numerically from each stage's declared distribution (`sweep.models.shared.sojourn`);
  `UnionBound` needs only each stage's percentile at (1 + q) / 2 and bounds it above;
  `QuadratureSum` needs only each stage's mean and percentile at q and adds their excesses
  in quadrature (exact for gaussians; disaggregated serving's, measured against its simulator).
  A stage declares its distribution with a method `sojourn(x, out, **static) -> Sojourn`.

The tandem's grid keys, in canonical order: the shared keys, the link's and the tandem's
own (`transfer_ms`, the end-to-end `slo_ms`), each stage's other keys, then every stage's
group axes (`prefill_replicas`, `decode_replicas`: the tandem's `decisions.group_axes`)
and every stage's row axes, innermost. Its columns: the shared ones, each stage's
prefixed, then the end-to-end ones (`ENDPOINT_DOCS`); `decisions.size` is the sum of the
stages' sizes (`total_replicas`).

When is it exact? The end-to-end percentile of `IndependentSum` is exact when the second
stage sees the arrival process it assumes and the two sojourns of a request are
independent: M/M/1 stages (Burke 1956: M/M/1 departures are Poisson; Reich 1957, and
Walrand & Varaiya 1980 for overtake-free paths: a request's sojourns are independent), or a
second stage whose arrivals are spaced at least its service time apart (a deterministic
server that never waits). Elsewhere the second stage treats its arrivals as Poisson and the
sojourns as independent: an approximation (two M/D/1 replicas at rho = 0.2 merged into one
of the same D: +5% on the mean, +4% at P99 against simulation; `tests/test_models_compose.py`).
"""

from __future__ import annotations

import abc
import keyword
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, cast, runtime_checkable

from sweep._lazy import lazy_module
from sweep.errors import GridError
from sweep.models import base
from sweep.models.base import (
    CATALOG_FIELDS,
    ENGINE_KEYS,
    NULL_WORDS,
    PLANNING_WHEN,
    UNLIMITED,
    WHEN_SIMULATION,
    Column,
    Decisions,
    Domain,
    Param,
    ServingModel,
)
from sweep.models.shared.sojourn import Sojourn, sum_quantile, union_bound

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array

    from sweep.grid.spec import GridSpec
else:
    jnp = lazy_module("jax.numpy")

INF = math.inf
#: Private keys of the link: a stage's output (min. time between its departures at one
#: replica) and the second stage's input (min. time between its arrivals at one replica), ms.
DEPARTURE_GAP = "_departure_gap_ms"
ARRIVAL_GAP = "_arrival_gap_ms"
#: Keys a stage shares with the other unless it says otherwise.
SHARED: tuple[str, ...] = ("model", "gpu", "arrival_rps", "percentile", "rho_max", "rho_min")
#: Keys the tandem needs shared: the rate carries over; one percentile for both stages and
#: the end to end; the operating rules' thresholds (`sweep.decide.verdict`).
NEEDS_SHARED: tuple[str, ...] = ("arrival_rps", "percentile", "rho_max", "rho_min")

#: The end-to-end SLO, the tandem's own key.
E2E_SLO = Param("slo_ms", "float", math.inf, Domain(0, 1e9, "ms", lo_open=True, inf=True),
                example="slo_ms = 500  # end to end")
E2E_SLO_COLUMN = Column("slo_ms", "float64", "ms",
                        "End-to-end latency SLO at `percentile`; NULL (the grid's inf, the default) = none.",
                        null_when=UNLIMITED)


@runtime_checkable
class DeclaresSojourn(Protocol):
    """A stage model that knows its sojourn distribution at a point."""

    def sojourn(self, x: Mapping[str, Array], out: Mapping[str, Array], **static: Any) -> Sojourn: ...


# --------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class Stage:
    """One stage of a tandem: a serving model under a name, and the keys it shares.

    `latency` is its sojourn at `percentile` (ms), `mean` its mean sojourn (default: the
    model's `decisions.mean_latency`), `capacity` one replica's capacity (requests/s) and
    `replicas` its replica count key: the columns the tandem reads.
    """

    name: str
    model: ServingModel
    shared: tuple[str, ...] = SHARED
    latency: str = "latency_ms"
    mean: str = ""
    capacity: str = "capacity_rps"
    replicas: str = "replicas"

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or keyword.iskeyword(self.name) or self.name != self.name.lower():
            raise ValueError(f"stage name {self.name!r} must be a lower-case identifier, e.g. 'prefill'")
        columns = {c.name for c in self.model.columns}
        for what, col in (("latency", self.latency), ("mean", self.mean_column), ("capacity", self.capacity)):
            if col not in columns:
                raise ValueError(f"stage {self.name}: {what} column {col!r} is not a column of "
                                 f"{self.model.serving}/{self.model.name}")
        if self.replicas not in self.model.param_by_key:
            raise ValueError(f"stage {self.name}: replicas key {self.replicas!r} is not a parameter of "
                             f"{self.model.serving}")

    @property
    def mean_column(self) -> str:
        return self.mean or self.model.decisions.mean_latency

    def key(self, key: str) -> str:
        """The tandem's name of this stage's key or column: shared ones keep theirs."""
        return key if key in self.shared else f"{self.name}_{key}"

    def inputs(self, x: Mapping[str, Array]) -> dict[str, Array]:
        """This stage's view of a tandem point: its own keys under their own names, and the
        catalog figures: the stage's own where the grid gives the stage a GPU of its own
        (`prefill_hbm_bytes`: `ServingModel.part_gpu_keys`), else the point's."""
        own = {p.key: x[self.key(p.key)] for p in self.model.params if self.key(p.key) in x}
        figures = {k: x[self.key(k)] if self.key(k) in x else x[k] for k in CATALOG_FIELDS if k in x}
        return {**own, **figures}


class Part(NamedTuple):
    """One evaluated stage of a point, as a `Combine` reads it."""

    stage: Stage
    #: its inputs (its own keys under its own names) and its outputs
    x: Mapping[str, Array]
    out: Mapping[str, Array]
    #: its declared distribution, None where the model declares none
    sojourn: Sojourn | None
    #: its `latency` column re-evaluated at another percentile
    at: Callable[[Array], Array]

    def bounded(self) -> Array:
        return jnp.isfinite(self.out[self.stage.latency]) & jnp.isfinite(self.out[self.stage.mean_column])

    def value(self, name: str) -> Array:
        """A column of the stage, computed or echoed from its inputs."""
        return self.out[name] if name in self.out else self.x[name]


# --------------------------------------------------------------------------- link and combine


@dataclass(frozen=True)
class Link:
    """How the first stage's departures become the second stage's arrivals (module
    docstring): the rate carries over, each request waits `delay_key` ms (a grid key; None:
    no delay) and goes to a second-stage replica at random."""

    delay_key: str | None = "transfer_ms"

    @property
    def params(self) -> tuple[Param, ...]:
        if self.delay_key is None:
            return ()
        # 0 to 1e7 ms = 2.8 hours between the stages
        return (Param(self.delay_key, "float", 0.0, Domain(0, 1e7, "ms"), example=f"{self.delay_key} = 5.0"),)

    @property
    def columns(self) -> tuple[Column, ...]:
        if self.delay_key is None:
            return ()
        return (Column(self.delay_key, "float64", "ms",
                       "Fixed delay between the stages (e.g. the KV transfer), added to every request's latency."),)

    def delay_ms(self, x: Mapping[str, Array]) -> Array:
        return x[self.delay_key] if self.delay_key is not None else jnp.zeros_like(x["arrival_rps"])

    def arrivals(self, first: Stage, x1: Mapping[str, Array], out1: Mapping[str, Array]) -> dict[str, Array]:
        """The second stage's extra inputs: the minimum gap between its arrivals at one
        replica (the first stage's departure gap where it has one replica, else 0)."""
        gap = out1.get(DEPARTURE_GAP)
        if gap is None:
            return {ARRIVAL_GAP: jnp.zeros_like(x1["arrival_rps"])}
        return {ARRIVAL_GAP: jnp.where(x1[first.replicas] == 1.0, gap, 0.0)}


class Combine(abc.ABC):
    """How the end-to-end percentile comes from the stages' (the mean is always the sum)."""

    #: the `e2e_p_ms` column's meaning
    doc: ClassVar[str]
    #: does it need both stages to declare their distribution?
    needs_sojourn: ClassVar[bool] = False

    @abc.abstractmethod
    def percentile(self, first: Part, second: Part, delay_ms: Array, q: Array) -> Array:
        """The end-to-end latency at percentile q (ms), for bounded stages."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class IndependentSum(Combine):
    """The percentile of T1 + transfer + T2 for independent sojourns, computed numerically
    from both stages' declared distributions (`sweep.models.shared.sojourn.sum_quantile`)."""

    doc = ("End-to-end latency at `percentile`: the quantile of the sum of the two stages' sojourns (independent; "
           "each stage's own distribution, numerically) plus the transfer.")
    needs_sojourn = True

    def percentile(self, first: Part, second: Part, delay_ms: Array, q: Array) -> Array:
        assert first.sojourn is not None and second.sojourn is not None
        return sum_quantile(first.sojourn, second.sojourn, q) + delay_ms


class UnionBound(Combine):
    """An upper bound of the percentile whatever the dependence between the stages: each
    stage's latency at (1 + q) / 2, plus the transfer (`sweep.models.shared.sojourn.union_bound`).
    Needs only each stage's percentile column (re-evaluated at (1 + q) / 2)."""

    doc = ("End-to-end latency at `percentile`, bounded above: each stage's latency at (1 + percentile) / 2 plus the "
           "transfer (the union bound, whatever the dependence between the stages).")

    def percentile(self, first: Part, second: Part, delay_ms: Array, q: Array) -> Array:
        r = 0.5 * (1.0 + q)
        return union_bound(first.at(r), second.at(r)) + delay_ms


class QuadratureSum(Combine):
    """The percentile of T1 + transfer + T2 from each stage's mean and percentile alone: the
    sum of the means, plus the stages' excesses of the percentile over the mean added in
    quadrature, m1 + m2 + sqrt((q1 - m1)^2 + (q2 - m2)^2) + transfer. Exact for independent
    gaussian sojourns; where one stage's spread dominates it tends to that stage's percentile
    plus the other's mean. It lies between max(q1 + m2, m1 + q2) and q1 + q2 (plus the
    transfer); not a bound. The rule SPEC 4 uses for the three terms of a batcher's response
    (`sweep.models.dynamic.batcher`); needs only each stage's mean and percentile columns.
    A tail estimate: for two exponential sojourns (M/M/1 stages) it is within -1.3%..+0.1%
    of the exact quantile at P90 and 0..+7% at P99 (the union bound: +60%), but a percentile
    below a skewed stage's mean has a negative excess, clipped to 0, so at P50 it is the sum
    of the means (+19% to +42% there; `tests/test_models_compose.py`)."""

    doc = ("End-to-end latency at `percentile`: the stages' means plus the transfer, plus their excesses of the "
           "percentile over the mean added in quadrature (exact for independent gaussian sojourns; an approximation).")

    def percentile(self, first: Part, second: Part, delay_ms: Array, q: Array) -> Array:
        def excess(part: Part) -> tuple[Array, Array]:
            m = part.out[part.stage.mean_column]
            d = jnp.maximum(part.out[part.stage.latency] - m, 0.0)
            return m, d

        (m1, d1), (m2, d2) = excess(first), excess(second)
        # hypot without the square root's infinite slope at 0 (both excesses zero: no spread)
        both = (d1 > 0.0) | (d2 > 0.0)
        spread = jnp.where(both, jnp.sqrt(jnp.where(both, d1 * d1 + d2 * d2, 1.0)), 0.0)
        return m1 + m2 + spread + delay_ms


# --------------------------------------------------------------------------- the tandem

#: The end-to-end columns' meanings ({a}, {b}: the stages' columns they read).
ENDPOINT_DOCS: dict[str, str] = {
    "size": "{a} + {b}: the fleet over both stages (replicas_min minimises it).",
    "capacity_rps": "End-to-end capacity of the fleet, requests/s: the smaller of the stages' replicas x capacity_rps.",
    "rho": "The busier stage's utilisation, max({a}, {b}); drives the operating rules.",
    "stable": "Both stages are stable.",
    "mem_ok": "Both stages fit in memory.",
    "e2e_mean_ms": "Mean end-to-end latency: the stages' means plus the transfer (exact whatever the dependence).",
}


class Tandem(ServingModel):
    """A serving model made of two stages in series (module docstring). Build one with
    `tandem`, which declares its parameters, columns and decisions."""

    first: ClassVar[Stage]
    second: ClassVar[Stage]
    link: ClassVar[Link]
    combine: ClassVar[Combine]
    #: no [uncertainty] / [sensitivity] inputs yet
    coefficient_keys: ClassVar[tuple[str, ...]] = ()
    length_keys: ClassVar[tuple[str, ...]] = ()

    @property
    def stages(self) -> tuple[Stage, Stage]:
        return (self.first, self.second)

    @property
    def fleet_keys(self) -> tuple[str, ...]:
        """Each stage's fleet keys under the tandem's names: a shared `gpu` once, each
        stage's own GPUs per replica (`prefill_gpus_per_replica`)."""
        return _unique([s.key(k) for s in self.stages for k in s.model.fleet_keys])

    # -- validation -------------------------------------------------------------------

    def fill(self, values: dict[str, list[Any]], where: Callable[[str], str],
             source: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        """Each stage fills its own keys (its rules, its defaults, its messages in the
        tandem's names); then the link's and the tandem's defaults."""
        out = dict(values)
        facts: dict[str, dict[str, Any]] = {}
        for stage in self.stages:
            view = {p.key: out[stage.key(p.key)] for p in stage.model.params if stage.key(p.key) in out}
            filled, facts[stage.name] = stage.model.fill(view, _renamed(where, stage), source)
            for key, vals in filled.items():
                if key in stage.shared and stage is self.second:
                    out.setdefault(key, vals)  # the first stage filled it (their defaults agree)
                else:
                    out[stage.key(key)] = vals
        sources = {f.pop("service_source", "given") for f in facts.values()}
        if len(sources) > 1:
            raise GridError(source, "grid", ", ".join(sorted(sources)),
                            "the stages' service times must come from one source (both given or both roofline) for now")
        for p in (*self.link.params, E2E_SLO):
            if p.key not in out and p.default is not None:
                out[p.key] = [p.default]
        return out, {"service_source": sources.pop(), "stages": facts}

    def check(self, values: Mapping[str, Sequence[Any]], options: Any, where: Callable[[str], str],
              source: str) -> None:
        for stage in self.stages:
            view = {p.key: values[stage.key(p.key)] for p in stage.model.params if stage.key(p.key) in values}
            stage.model.check(view, options, _renamed(where, stage), source)

    # -- evaluation -------------------------------------------------------------------

    def static(self, spec: GridSpec) -> dict[str, Any]:
        """Each stage's static keywords, from its view of the grid (its axes under its own
        names), under the stage's name."""
        return {stage.name: tuple(sorted(stage.model.static(self._view(stage, spec)).items())) for stage in self.stages}

    def _view(self, stage: Stage, spec: GridSpec) -> GridSpec:
        names = {stage.key(p.key): p.key for p in stage.model.params}
        axes = tuple(replace(a, key=names[a.key]) for a in spec.axes if a.key in names)
        facts = dict(spec.facts.get("stages", {}).get(stage.name, {}))
        return replace(spec, model=stage.model, axes=axes, facts=facts)

    def _part(self, stage: Stage, x: Mapping[str, Array], static: tuple[tuple[str, Any], ...]) -> Part:
        kw = dict(static)
        out = stage.model.point(x, **kw)
        sojourn = stage.model.sojourn(x, out, **kw) if isinstance(stage.model, DeclaresSojourn) else None

        def at(p: Array) -> Array:
            if sojourn is not None:
                return sojourn.quantile(p)
            return stage.model.point({**x, "percentile": p}, **kw)[stage.latency]

        return Part(stage, x, out, sojourn, at)

    def point(self, x: Mapping[str, Array], *args: Any, **static: Any) -> dict[str, Array]:
        """Both stages at one point (the second fed by the link), their columns renamed,
        and the end-to-end columns."""
        first, second = self.stages
        one = self._part(first, first.inputs(x), static[first.name])
        x2 = {**second.inputs(x), **self.link.arrivals(first, one.x, one.out)}
        two = self._part(second, x2, static[second.name])
        delay = self.link.delay_ms(x)
        bounded = one.bounded() & two.bounded()
        declared = {c.name for c in self.columns}
        out: dict[str, Array] = {}
        for part in (one, two):
            for name, value in part.out.items():
                renamed = part.stage.key(name)
                if not name.startswith("_") and renamed in declared and renamed not in self.echo:
                    out.setdefault(renamed, value)  # a shared column: the first stage's
        size, util = first.model.decisions.size, [p.value(p.stage.model.decisions.utilisation) for p in (one, two)]
        e2e_mean = one.out[first.mean_column] + delay + two.out[second.mean_column]
        e2e_p = self.combine.percentile(one, two, delay, x["percentile"])
        out.update({
            self.decisions.size: one.value(size) + two.value(size),
            "capacity_rps": jnp.minimum(one.value(first.replicas) * one.out[first.capacity],
                                        two.value(second.replicas) * two.out[second.capacity]),
            "rho": jnp.maximum(util[0], util[1]),
            "stable": one.out["stable"] & two.out["stable"],
            "mem_ok": one.out["mem_ok"] & two.out["mem_ok"],
            "e2e_mean_ms": jnp.where(bounded, e2e_mean, INF),
            "e2e_p_ms": jnp.where(bounded, e2e_p, INF),
            "_rho_rules": jnp.maximum(one.out["_rho_rules"], two.out["_rho_rules"]),
        })
        if "cost_usd_per_hour" in declared:
            out["cost_usd_per_hour"] = one.out["cost_usd_per_hour"] + two.out["cost_usd_per_hour"]
        return out


def _renamed(where: Callable[[str], str], stage: Stage) -> Callable[[str], str]:
    """A stage's `where` for messages: its key under the tandem's name."""
    return lambda key: where(stage.key(key))


# --------------------------------------------------------------------------- declarations


def _shared_param(a: Param, b: Param) -> Param:
    """One declaration of a key both stages share: the same kind and default, and the
    values both stages accept (the intersection of their domains)."""
    if (a.kind, a.default) != (b.kind, b.default):
        raise ValueError(f"shared key {a.key!r}: the stages declare it differently ({a.kind}, default {a.default!r} "
                         f"vs {b.kind}, default {b.default!r})")
    if a.domain is None or b.domain is None or a.domain == b.domain:
        return a
    da, db = a.domain, b.domain
    lo = max((da.lo, da.lo_open), (db.lo, db.lo_open))
    hi = min((da.hi, not da.hi_open), (db.hi, not db.hi_open))
    return replace(a, domain=Domain(lo[0], hi[0], da.unit, lo_open=lo[1], hi_open=not hi[1], inf=da.inf and db.inf))


def _own_param(stage: Stage, p: Param) -> Param:
    key = stage.key(p.key)

    def renamed(text: str) -> str:
        return key + text[len(p.key):] if text.startswith(p.key + " ") else text

    return replace(p, key=key, example=renamed(p.example), search_example=renamed(p.search_example))


def _column(stage: Stage, c: Column) -> Column:
    """A stage's column under the tandem's name, its NULL flags renamed with it."""
    nulls = ", ".join(w if w in NULL_WORDS else stage.key(w) for w in c.null_reasons)
    name = stage.key(c.name)
    doc = c.doc if name == c.name else f"{stage.name.capitalize()} stage: {c.doc}"
    return replace(c, name=name, doc=doc, null_when=nulls)


def _stage_columns(stage: Stage) -> list[Column]:
    """The stage's columns a tandem keeps: not the engine's (the tandem has its own
    verdicts), nor the simulator's or the planning ones (no host pass, no [uncertainty] yet)."""
    return [_column(stage, c) for c in stage.model.columns
            if c.name not in ENGINE_KEYS and c.when != WHEN_SIMULATION and c.when not in PLANNING_WHEN]


def _unique(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _nulls(columns: Sequence[Column]) -> str:
    return ", ".join(_unique([w for c in columns for w in c.null_reasons]))


def tandem(first: Stage, second: Stage, *, serving: str, name: str = "analytic", link: Link | None = None,
           combine: Combine | None = None) -> Tandem:
    """The serving model of `first` then `second` (module docstring), registered as
    (`serving`, `name`) when passed to `sweep.models.register`. `combine` defaults to
    `IndependentSum` where both stages declare their distribution, else `UnionBound`.
    Raises ValueError where the stages cannot be composed (the message says why)."""
    link = link if link is not None else Link()
    stages = (first, second)
    declares = all(isinstance(s.model, DeclaresSojourn) for s in stages)
    combine = combine if combine is not None else (IndependentSum() if declares else UnionBound())
    _check_stages(stages, combine)
    params, shared = _params(stages, link)
    columns = _columns(stages, link, combine, shared)
    by_name = {c.name: c for c in columns}
    costs = "cost_usd_per_hour" in by_name
    row_constant = [*(s.key(c) for s in stages for c in s.model.row_constant), f"total_{first.model.decisions.size}"]
    if costs and all("cost_usd_per_hour" in s.model.row_constant for s in stages):
        row_constant.append("cost_usd_per_hour")
    monotone = [s.key(c) for s in stages for c in s.model.monotone_in_load]
    for column, reads in (("rho", lambda s: s.model.decisions.utilisation), ("e2e_mean_ms", lambda s: s.mean_column),
                          ("e2e_p_ms", lambda s: s.latency)):
        if all(reads(s) in s.model.monotone_in_load for s in stages):  # the max and the sums keep it
            monotone.append(column)
    attrs = dict(
        serving=serving, name=name, first=first, second=second, link=link, combine=combine,
        params=params, columns=columns, decisions=_decisions(stages, by_name),
        echo=_unique([*(s.key(k) for s in stages for k in s.model.echo), *(p.key for p in (*link.params, E2E_SLO))]),
        row_constant=_unique(row_constant), monotone_in_load=tuple(monotone),
        slo_checks=(*((s.key(lat), s.key(slo)) for s in stages for lat, slo in s.model.slo_checks),
                    ("e2e_p_ms", E2E_SLO.key)),
        objectives={**({"min_cost": ("cost_usd_per_hour", "minimize")} if costs else {}),
                    "max_capacity": ("capacity_rps", "maximize"), "min_latency": ("e2e_p_ms", "minimize")},
        __doc__=f"Tandem {first.name} ({first.model.serving}/{first.model.name}) -> {second.name} "
                f"({second.model.serving}/{second.model.name}), combined by {combine!r}.",
    )
    cls = type(f"Tandem_{first.name}_{second.name}", (Tandem,), attrs)
    return cast(Tandem, cls())


def _check_stages(stages: tuple[Stage, Stage], combine: Combine) -> None:
    first, second = stages
    if first.name == second.name:
        raise ValueError(f"the stages need two names, got {first.name!r} twice")
    missing = [s.name for s in stages if not isinstance(s.model, DeclaresSojourn)]
    if combine.needs_sojourn and missing:
        raise ValueError(f"{combine!r} needs every stage's sojourn distribution; {', '.join(missing)} declares none "
                         "(use UnionBound())")
    for a, b in (stages, stages[::-1]):
        for key in a.shared:
            if key in a.model.param_by_key and key in b.model.param_by_key and key not in b.shared:
                raise ValueError(f"key {key!r} is shared by stage {a.name} but its own in stage {b.name}; "
                                 "share it in both or neither")
    if first.model.decisions.size != second.model.decisions.size:
        raise ValueError(f"the stages size their fleets in different columns ({first.model.decisions.size}, "
                         f"{second.model.decisions.size})")


def _params(stages: tuple[Stage, Stage], link: Link) -> tuple[tuple[Param, ...], set[str]]:
    """The tandem's keys in canonical order (the shared ones, the link's and the tandem's,
    each stage's own, every stage's group axes, every stage's row axes), and the shared keys."""
    shared: dict[str, Param] = {}
    own: dict[str, Param] = {}
    for s in stages:
        for p in s.model.params:
            key = s.key(p.key)
            if key != p.key:
                own[key] = _own_param(s, p)
            else:
                shared[key] = _shared_param(shared[key], p) if key in shared else p
    for key in NEEDS_SHARED:
        if key not in shared:
            raise ValueError(f"key {key!r} must be shared by the stages (the tandem reads it)")
    group_axes = _unique([s.key(k) for s in stages for k in s.model.decisions.group_axes])
    row_axes = _unique([s.key(k) for s in stages for k in s.model.decisions.row_axes])
    every = {**shared, **own}
    params = (*(p for k, p in shared.items() if k not in group_axes + row_axes), *link.params, E2E_SLO,
              *(p for k, p in own.items() if k not in group_axes + row_axes),
              *(every[k] for k in group_axes), *(every[k] for k in row_axes))
    keys = [p.key for p in params]
    if len(set(keys)) != len(keys):
        raise ValueError(f"the tandem's keys collide: {sorted(k for k in keys if keys.count(k) > 1)}")
    return params, set(shared)


def _columns(stages: tuple[Stage, Stage], link: Link, combine: Combine, shared: set[str]) -> tuple[Column, ...]:
    """The shared columns, the link's and the tandem's, each stage's renamed, the end to end."""
    first, second = stages
    per_stage = [_stage_columns(s) for s in stages]
    by_name: dict[str, Column] = {}
    for cols in per_stage:
        for c in cols:
            by_name.setdefault(c.name, c)  # a shared column: the first stage's declaration
    size = {"a": first.key(first.model.decisions.size), "b": second.key(second.model.decisions.size)}
    util = [by_name[s.key(s.model.decisions.utilisation)] for s in stages]
    latencies = [by_name[s.key(col)] for s in stages for col in (s.latency, s.mean_column)]
    size_col = by_name[size["a"]]
    endpoint = [
        Column(f"total_{first.model.decisions.size}", size_col.dtype, size_col.unit,
               ENDPOINT_DOCS["size"].format(**size)),
        Column("capacity_rps", "float64", "requests/s", ENDPOINT_DOCS["capacity_rps"]),
        Column("rho", "float64", "-", ENDPOINT_DOCS["rho"].format(a=util[0].name, b=util[1].name),
               null_when=_nulls(util)),
        Column("stable", "bool", "-", ENDPOINT_DOCS["stable"]),
        Column("mem_ok", "bool", "-", ENDPOINT_DOCS["mem_ok"]),
        Column("e2e_mean_ms", "float64", "ms", ENDPOINT_DOCS["e2e_mean_ms"], null_when=_nulls(latencies)),
        Column("e2e_p_ms", "float64", "ms", combine.doc, null_when=_nulls(latencies)),
        base.SLO_OK, base.FEASIBLE, base.ACTION,
    ]
    if all(any(c.name == "cost_usd_per_hour" for c in s.model.columns) for s in stages):
        endpoint.append(Column("cost_usd_per_hour", "float64", "USD/h", "The stages' cost_usd_per_hour, summed."))
    common = _unique([c.name for cols in per_stage for c in cols if c.name in shared])
    columns = (base.POINT_ID, *(by_name[n] for n in common), *link.columns, E2E_SLO_COLUMN,
               *(c for cols in per_stage for c in cols if c.name not in shared), *endpoint)
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise ValueError(f"the tandem's columns collide: {sorted(n for n in names if names.count(n) > 1)}")
    return columns


def _decisions(stages: tuple[Stage, Stage], by_name: Mapping[str, Column]) -> Decisions:
    """Every stage's group axes and row axes; the fleet's size is the stages' summed; the
    frontier runs over the end-to-end capacity and percentile."""
    group_axes = _unique([s.key(k) for s in stages for k in s.model.decisions.group_axes])
    row_axes = _unique([s.key(k) for s in stages for k in s.model.decisions.row_axes])
    cap = by_name[row_axes[-1]]
    answer_fields = (
        ("", cap.name, cap.dtype, cap.unit),
        *((f"_{a}", a, by_name[a].dtype, by_name[a].unit) for a in row_axes[:-1]),
        ("_e2e_p_ms", "e2e_p_ms", "float64", "ms"),
        ("_e2e_mean_ms", "e2e_mean_ms", "float64", "ms"),
        ("_capacity_rps", "capacity_rps", "float64", "requests/s"),
        ("_rho", "rho", "float64", "-"),
        ("_point_id", "point_id", "int64", "-"),
    )
    return Decisions(row_axes=row_axes, group_axes=group_axes, size=f"total_{stages[0].model.decisions.size}",
                     capacity="capacity_rps", latency="e2e_p_ms", mean_latency="e2e_mean_ms", utilisation="rho",
                     answer_fields=answer_fields)
