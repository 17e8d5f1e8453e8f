"""How a serving model's results read: the views `sweep run`'s answers, `sweep show`,
`sweep explain` and `sweep report` draw from.

A model declares its `views` (a `Views`) beside its columns and decisions, in its own column
names: the short name of each SLO latency (`Check`), what the grid's `inf` means on each row
axis (`Axis`), the per-point tables of the terminal and the report (`PointTable`, `Cell`),
the headline and docs page of `sweep explain` (`Explain`), the report's answer cards
(`Answers`), the "Cheapest plan" table (`Plan`), the terminal's caveats on its decisions
(`Caveat`) and the report's figures, each one of a few
generic kinds the report draws once (`CapLines`, `Utilisation`, `KvBudget`, `Frontier`,
`AgainstSimulator`, `Scatter`, `AgainstLoad`). The display code names no column but the ones
every model has (point_id, action, feasible, cost_usd_per_hour, ...) and the declared ones,
so a new serving model's runs print and draw without an edit there.

Text fields are `str.format` templates where they say so: `{q}` is the percentile label
(`P99`), `{checked}` the latency the SLO was checked against (`P99 gaussian`), `{source}` the
file a table's points came from, and a positional `{}` the value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# --------------------------------------------------------------------------- names


@dataclass(frozen=True)
class Axis:
    """How a row axis reads. `symbol` names it in labels (`B = 8`, `N = 64`); `title` is a
    figure axis along it, `short` a compact one (the action map), `hover` its hover label. For
    a knob (a row axis outside the cap) the grid's `inf` reads as `inf` in a table cell
    ("full batch"), `inf_text` in prose ("full batches") and `legend_inf` in a legend ("full
    batches (window inf)"); `value` writes a finite value in prose and legends ("window {:g}
    ms"); `noun` names it in prose ("batching window"). `engine` is the serving engine's name
    for it (vLLM's `max_num_seqs`), if any: the report's per-point table shows it on hover."""

    key: str
    symbol: str = ""
    title: str = ""
    short: str = ""
    hover: str = ""
    inf: str = "inf"
    inf_text: str = "no limit"
    legend_inf: str = "inf"
    value: str = "{:g}"
    noun: str = ""
    engine: str = ""

    def legend(self, v: float) -> str:
        """A value of the axis in a legend: `window 5 ms`, `full batches (window inf)`."""
        return self.legend_inf if not math.isfinite(v) else self.value.format(v)


@dataclass(frozen=True)
class Check:
    """An SLO latency (a column of the model's `slo_checks`) as a header names it (`TTFT`)."""

    latency: str
    name: str


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Cell:
    """One column of a table: its header (a template: `{q}`, `{checked}`), the point column
    it shows, and how: `digits` after the point, or `fmt` (a template for a finite value, e.g.
    "{:g} ms"), or as a percentage (`percent`, one digit). `flag` (a bool column) appends
    `flag_text` where it is false (" (unstable)"). `left`: a left-aligned key column shown
    first (a knob); `varies`: shown only where the column takes more than one value.
    `undefined`: the text where the column is +inf because it has no value there (a rate
    without a steady state, NULL in the files), instead of `inf` (unbounded)."""

    header: str
    column: str
    digits: int = 1
    fmt: str = ""
    percent: bool = False
    flag: str = ""
    flag_text: str = ""
    left: bool = False
    varies: bool = False
    undefined: str = ""


@dataclass(frozen=True)
class Note:
    """A line of text about one row (`text(row)`: the row's values by column name, numbers as
    floats, +inf or NaN where unbounded). It reads the columns `needs` (no line when one is
    missing); rows with equal `key` columns say the same, so a table prints it once for each."""

    text: Callable[[Mapping[str, Any]], str]
    needs: tuple[str, ...] = ()
    key: tuple[str, ...] = ()


@dataclass(frozen=True)
class PointTable:
    """A per-point table: a title, its cells (the action last, added by the display code), and
    the note under it. The report's table sorts its points by the row axes, marks the answers'
    rows (`marks`: answer prefixes or row columns holding a cap value; `mark_points`: mark the
    answers' points instead of their caps), says where the marked rows come from (`legend`, a
    template with `{source}`), and beyond its row limit keeps the caps that are powers of two
    and the marked ones (`thin`) or the first points."""

    title: str = ""
    cells: tuple[Cell, ...] = ()
    note: Note | None = None
    legend: str = "From {source}."
    marks: tuple[str, ...] = ()
    mark_points: bool = False
    thin: bool = False

    def columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for cell in self.cells for c in (cell.column, cell.flag) if c))


# --------------------------------------------------------------------------- answers, plan, explain


@dataclass(frozen=True)
class Card:
    """An answer of optimum.parquet (its prefix) as the report titles it, and `what` it is in
    a phrase (the derivation's heading: "the largest batch meeting the SLO")."""

    prefix: str
    title: str
    what: str = ""


@dataclass(frozen=True)
class Value:
    """One value of an answer's text: a template ("{} ms", "TTFT {} ms", "rho {}%"), the point
    column the answer carries, its digits, as a percentage (`percent`)."""

    text: str
    column: str
    digits: int = 1
    percent: bool = False


@dataclass(frozen=True)
class Answers:
    """The report's answer cards of a scenario row: each answer (`cards`), then the fewest
    replicas (`replicas`, the title of `replicas_min`'s card); an answer reads
    `<cap symbol> = <cap>, <each knob>: <values>`."""

    cards: tuple[Card, ...] = ()
    values: tuple[Value, ...] = ()
    replicas: str = "fewest replicas meeting every SLO (replicas_min)"


@dataclass(frozen=True)
class Plan:
    """The report's "Cheapest plan" table: per model, workload and arrival rate, the cheapest
    configuration at replicas_min. `cells` show its answer columns (by point column: the cap,
    the knobs, the latencies); `workload` are the columns that name what a plan serves
    (besides the model and the arrival rate), `shown` those of them with a column of their own
    when they vary, (column, header); `choices` says in words what a configuration chooses."""

    cells: tuple[Cell, ...] = ()
    workload: tuple[str, ...] = ()
    shown: tuple[tuple[str, str], ...] = ()
    choices: str = ""


@dataclass(frozen=True)
class Explain:
    """`sweep explain`: the inputs its headline names (those the point has), and the page
    whose formulas the derivation follows."""

    headline: tuple[str, ...] = ()
    docs: str = ""


# --------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Figure:
    """A figure of the report: its id (one per kind of content; a figure another serving mode
    draws is listed, not drawn, in this mode's reports), title and caption."""

    id: str
    title: str
    caption: str = ""

    #: "scenario": one per scenario row (the picker chooses); "run": one for the run
    per: Literal["scenario", "run"] = "run"

    def columns(self) -> tuple[str, ...]:
        """The point columns it reads."""
        return ()


@dataclass(frozen=True)
class Panel:
    """One panel of a `CapLines` figure: the point column drawn against the cap (one line per
    knob value), its legend name and y-axis title (templates with `{q}`), its SLO column drawn
    dashed (`slo`, its legend `slo_name`: a template with `{q}` and `{slo}`), the legend suffix
    when the row has one knob value (`alone`; else the knob value names each line), hover
    values (label, column, d3 format, unit), a dotted mean line with one knob value (`mean`:
    column, legend name), and the y range ending at `cap_at_slo` times the SLO where values lie
    far beyond it (0: never)."""

    column: str
    name: str
    axis: str
    slo: str = ""
    slo_name: str = "SLO {slo:g} ms"
    alone: str = ""
    hover: tuple[tuple[str, str, str, str], ...] = ()
    mean: tuple[str, str] | None = None
    cap_at_slo: float = 0.0


@dataclass(frozen=True)
class Mark:
    """Caps marked along the top of a `CapLines` figure: those where every `true` column is
    true, the `false` column (if any) is false and (with `unbounded`) the first panel's value
    is unbounded."""

    name: str
    hover: str
    true: tuple[str, ...] = ()
    false: str = ""
    unbounded: bool = False


@dataclass(frozen=True)
class Regions:
    """Caps shaded from a scenario row's own columns: unstable below `stable_from` (the
    smallest stable cap; unbounded: none is), out of memory above `memory_to` (the largest cap
    that fits); the weights not fitting (`weights_fit` false) shades every cap. `none_stable`
    names the band where no cap is stable, `none_stable_hover` explains it."""

    stable_from: str = ""
    memory_to: str = ""
    none_stable: str = "unstable (no cap keeps up)"
    none_stable_hover: str = "unstable at every cap"


@dataclass(frozen=True)
class CapLines(Figure):
    """Kind "a latency against the cap, one line per knob value": per scenario row, each
    panel's column against the cap with its SLO, the knee and the SLO optimum marked, shaded
    `regions` and top `marks`."""

    panels: tuple[Panel, ...] = ()
    regions: Regions | None = None
    marks: tuple[Mark, ...] = ()
    per: Literal["scenario", "run"] = "scenario"

    def columns(self) -> tuple[str, ...]:
        cols = [c for p in self.panels for c in (p.column, *(h[1] for h in p.hover), *(p.mean[:1] if p.mean else ()))]
        cols += [c for m in self.marks for c in (*m.true, m.false) if c]
        return tuple(dict.fromkeys(cols))


@dataclass(frozen=True)
class Threshold:
    """A horizontal line of the utilisation figure: a row column, its label, and its role
    ("upper": near saturation above, "target", "lower": overprovisioned below)."""

    column: str
    label: str
    role: Literal["upper", "target", "lower"]


@dataclass(frozen=True)
class Utilisation(Figure):
    """Kind "utilisation against the cap": per scenario row, each series (legend name, point
    column) per knob value, the operating thresholds, and the shaded `regions`."""

    series: tuple[tuple[str, str], ...] = ()
    thresholds: tuple[Threshold, ...] = ()
    regions: Regions | None = None
    per: Literal["scenario", "run"] = "scenario"

    def columns(self) -> tuple[str, ...]:
        return tuple(c for _, c in self.series)


@dataclass(frozen=True)
class KvBudget(Figure):
    """Kind "KV memory of one replica": stacked bars of the weights (`weights_gb`), the KV
    cache and what stays free (`free_gb`). With `per_request` (a row column, GB reserved per
    request) the cache is that times the cap, at one request, the answers' caps (`marks`:
    answer prefix, label), the largest cap that fits (`limit`) and the grid's largest cap;
    with `share` (a point column, the share of the KV capacity reserved) it is that share of
    the free memory at the answers' points, the capacity (`capacity`, a row column in tokens)
    written above."""

    per_request: str = ""
    limit: str = ""
    share: str = ""
    capacity: str = ""
    marks: tuple[tuple[str, str], ...] = ()
    #: the bar at the grid's largest cap
    largest: str = "largest cap in the grid"
    per: Literal["scenario", "run"] = "scenario"

    def columns(self) -> tuple[str, ...]:
        return (self.share,) if self.share else ()

    def row_columns(self) -> tuple[str, ...]:
        """The row (optimum.parquet) columns it needs."""
        return ("weights_gb", "free_gb", *((self.per_request,) if self.per_request else ()))


@dataclass(frozen=True)
class Frontier(Figure):
    """Kind "Pareto frontiers": every row's frontier, `x` against `y` (point columns, with axis
    titles), knee and SLO optimum marked; `slo` (an SLO column in `y`'s unit) drawn where the
    run has one value."""

    x: str = ""
    y: str = ""
    x_title: str = ""
    y_title: str = ""
    slo: str = ""

    def columns(self) -> tuple[str, ...]:
        return (self.x, self.y, *((self.slo,) if self.slo else ()))


@dataclass(frozen=True)
class Series:
    """One estimate against its simulated value: the analytic column, the simulator's, the
    legend name (a template with `{q}`), which panel (0: the percentile, 1: the mean) and a
    style index (marker and colour: one per estimate family)."""

    estimate: str
    simulated: str
    name: str
    panel: int = 0
    style: int = 0


@dataclass(frozen=True)
class AgainstSimulator(Figure):
    """Kind "analytic against simulated": every simulated point, each series' estimate
    against the simulator's value on y = x, the percentile panel with the simulator's 95%
    half-width (`half_width`); the run simulated when it has every `needs` column."""

    series: tuple[Series, ...] = ()
    half_width: str = ""
    needs: tuple[str, ...] = ()
    unbounded: str = "estimate unbounded"
    #: why it is not drawn when the run did not simulate
    missing: str = "this run did not simulate"
    panels: tuple[str, str] = ("{q}: estimate against simulated", "mean: estimate against simulated")

    def columns(self) -> tuple[str, ...]:
        cols = [c for s in self.series for c in (s.estimate, s.simulated)]
        return tuple(dict.fromkeys([*cols, *((self.half_width,) if self.half_width else ())]))


@dataclass(frozen=True)
class Scatter(Figure):
    """Kind "x against y, every stable point": one colour per GPU."""

    x: str = ""
    y: str = ""
    x_title: str = ""
    y_title: str = ""

    def columns(self) -> tuple[str, ...]:
        return (self.x, self.y)


@dataclass(frozen=True)
class AgainstLoad(Figure):
    """Kind "latencies against load": each panel (point column, name, SLO column) against the
    per-replica arrival rate `x`, one line per configuration (`config` columns, those the
    points have), unstable points as gaps."""

    panels: tuple[tuple[str, str, str], ...] = ()
    x: str = "lambda_per_replica_rps"
    config: tuple[str, ...] = ()

    def columns(self) -> tuple[str, ...]:
        return tuple(c for col, _, slo in self.panels for c in (col, slo))


@dataclass(frozen=True)
class Caveat:
    """A line the terminal prints under its decisions when an answer it shows rests on a point
    where `flag` is false: `flag` is a bool point column the answers carry
    (`Decisions.answer_fields`), e.g. whether the latency model is trusted there. `text` is a
    template with `{n}` (the answers shown that rest on such a point) and `{shown}` (the
    answers shown); the table marks those answers' cap with `*`. `latency_models` limits it to
    runs whose latency model is one of them (empty: every run)."""

    flag: str
    text: str
    latency_models: tuple[str, ...] = ()


# --------------------------------------------------------------------------- the views


@dataclass(frozen=True)
class Views:
    """Everything a serving model's results read with (see the module's docstring). Every
    field has an empty default: a model without views still runs, shows its decisions and
    reports its generic figures."""

    #: the row axes (`Decisions.row_axes`), how each reads
    axes: tuple[Axis, ...] = ()
    #: the SLO latencies (`ServingModel.slo_checks`), how each is named
    checks: tuple[Check, ...] = ()
    #: the latency models' names in labels (`P99 batcher model`), where not the name itself
    latency_names: Mapping[str, str] = field(default_factory=dict)
    #: the terminal's per-point table (`sweep run` on small grids, `sweep show`)
    point_table: PointTable | None = None
    #: the report's per-point table of a scenario row
    report_table: PointTable | None = None
    explain: Explain = Explain()
    answers: Answers = Answers()
    plan: Plan = Plan()
    figures: tuple[Figure, ...] = ()
    #: scenario labels of axes beyond the generic ones: column -> template ("S_max {:g}")
    labels: Mapping[str, str] = field(default_factory=dict)
    #: the serving engine's flag for a scenario column, where it has one (vLLM's
    #: `tensor_parallel_size`); a row axis names its own (`Axis.engine`)
    engine_names: Mapping[str, str] = field(default_factory=dict)
    #: the mean latency b_latency_opt minimises, in words ("E[T]", "mean E2E")
    mean_name: str = "mean latency"
    #: `Decisions.size` in prose: "no {size_count} of the grid meets ...", "at the {size_most}"
    size_count: str = "replica count"
    size_most: str = "most replicas"
    #: lines the terminal adds when a decision rests on a point a flag marks
    caveats: tuple[Caveat, ...] = ()
    #: the columns that set a run's load, first preferred where the run has values of it:
    #: (column, name, unit) ("clients" for a closed loop, whose arrival rate is NULL)
    loads: tuple[tuple[str, str, str], ...] = (("arrival_rps", "arrival", " req/s"),)

    def axis(self, key: str) -> Axis:
        """How row axis `key` reads (its name throughout, if undeclared)."""
        return next((a for a in self.axes if a.key == key), Axis(key, key, key, key, key))

    def engine(self, key: str) -> str:
        """The serving engine's name for column `key` ("" where it has none)."""
        axis = next((a for a in self.axes if a.key == key), None)
        return axis.engine if axis is not None else self.engine_names.get(key, "")

    def check_name(self, latency: str) -> str:
        return next((c.name for c in self.checks if c.latency == latency), latency)

    def latency_name(self, latency_model: str) -> str:
        """A latency model in labels: `batcher model` for "batcher", else its name."""
        return self.latency_names.get(latency_model, latency_model)

    def figure(self, fid: str) -> Figure | None:
        return next((f for f in self.figures if f.id == fid), None)


# --------------------------------------------------------------------------- formatting helpers


def fixed(x: Any, digits: int = 1) -> str:
    """A number for a report's line: thousands separated, `digits` after the point; unbounded
    (+inf, NULL read as NaN, or None) is `inf`."""
    if x is None:
        return "inf"
    x = float(x)
    if not math.isfinite(x):
        return "inf" if x > 0 or math.isnan(x) else "-inf"
    return f"{x:,.{digits}f}"
