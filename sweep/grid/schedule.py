"""`[schedule]` (SPEC 12, time of day): an arrival profile and the fleet's change rules.

The table gives one mean arrival rate per hour of a repeating period, in one of three forms:

    [schedule]
    hourly_rps = [40, 30, ..., 90]        # 24 values: a day (hour 0 = 00:00-01:00)
    # hourly_rps = [168 values]           # a week, hour 0 = Monday 00:00
    # hourly_rps = [[24 values], x 7]     # the same week, a row per day (Monday first)
    # trace = "traces/requests.csv"       # a CSV of request times, binned by hour
    # period = "day"                      # trace only: "day" (default) or "week"
    ramp = 4                              # optional: replicas change by at most 4 per hour
    warmup_hours = 0.25                   # optional: a started replica is paid this long before it serves

The trace CSV holds one line per request (`timestamp`) or per count (`timestamp,requests`),
timestamps in seconds since the Unix epoch (UTC) or since any midnight; a header line and
`#` comments are allowed. Hour `floor(t / 3600)` goes to hour of day `mod 24` (or hour of
week, Monday 00:00 first, for `period = "week"`); an hour's rate is the requests binned to
it divided by 3600 s times the number of times that hour of the period occurs in the trace's
whole-hour span (so hours without requests count as zero traffic). The span is at most
`MAX_TRACE_HOURS` (ten years); the file lies beside the grid (`sweep.grid.files`).

The profile's distinct positive rates become the grid's `arrival_rps` axis (the table
replaces `[grid] arrival_rps`), so the run evaluates the model at every hourly rate with
the same kernels; the planner (`sweep.decide.schedule`) then reads each rate's rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweep.errors import GridError, did_you_mean
from sweep.grid.files import InputFileError, read_text, resolve_in_grid

if TYPE_CHECKING:
    from sweep.models.base import ServingModel

SCHEDULE_KEYS = ("hourly_rps", "trace", "period", "ramp", "warmup_hours")
PERIODS = {"day": 24, "week": 168}
#: The hourly rates accepted besides 0 (the `arrival_rps` domain).
MIN_RPS, MAX_RPS = 1e-6, 1e9
_EXAMPLE = "hourly_rps = [40.0, 35.0, ...] (24 values)"
#: The longest span a trace may cover, first request to last: ten years of hours (3,660
#: days, leap days included). A planner's profile needs weeks to a year or two of history;
#: binning walks every hour of the span, so a mistaken unit (milliseconds read as seconds
#: is a factor 1000) or a stray timestamp would otherwise cost minutes to days.
MAX_TRACE_HOURS = 3660 * 24


@dataclass(frozen=True)
class ScheduleSpec:
    """A validated `[schedule]`: the profile and the fleet's change rules.

    `hourly_rps[h]` is hour h's mean rate (requests/s, >= 0), h = 0 .. hours - 1 (24 or 168);
    `rates` the distinct positive ones in ascending order (the run's `arrival_rps` axis) and
    `rate_index[h]` the position of hour h's rate in it (-1 for an hour without traffic).
    """

    hourly_rps: tuple[float, ...]
    rates: tuple[float, ...]
    rate_index: tuple[int, ...]
    ramp: int | None = None  # replicas may change by at most this much from one hour to the next
    warmup_hours: float = 0.0  # a started replica is paid this long before the hour it serves
    source: str = "hourly_rps"  # hourly_rps, or the trace file as written in the grid

    @property
    def hours(self) -> int:
        return len(self.hourly_rps)

    @property
    def days(self) -> int:
        return self.hours // 24


def parse_schedule(raw: Any, source: str, allow_outside: Sequence[str | Path] = ()) -> ScheduleSpec:
    """Check every key of `[schedule]` and build the spec; a `GridError` names the first problem.
    A trace may lie outside the grid's folder only under a folder of `allow_outside`."""
    if not isinstance(raw, Mapping):
        raise GridError(source, "schedule", raw, f"must be a table, e.g. [schedule] {_EXAMPLE}")
    for k in raw:
        if k not in SCHEDULE_KEYS:
            raise GridError(source, f"schedule.{k}", raw[k],
                            f"unknown schedule key{did_you_mean(k, SCHEDULE_KEYS)}; "
                            f"expected one of {', '.join(SCHEDULE_KEYS)}")
    has_rates, has_trace = "hourly_rps" in raw, "trace" in raw
    if has_rates == has_trace:
        raise GridError(source, "schedule", "both" if has_rates else "neither",
                        f'needs exactly one of hourly_rps or trace, e.g. {_EXAMPLE} or trace = "traces/day.csv"')
    if "period" in raw and not has_trace:
        raise GridError(source, "schedule.period", raw["period"],
                        "applies to a trace only; hourly_rps gives the period by its length (24 or 168)")
    if has_rates:
        hourly = _hourly_rps(raw["hourly_rps"], source)
        label = "hourly_rps"
    else:
        period = raw.get("period", "day")
        if period not in PERIODS:
            raise GridError(source, "schedule.period", period, 'must be "day" or "week", e.g. period = "day"')
        hourly = bin_trace(raw["trace"], source, PERIODS[period], allow_outside)
        label = str(raw["trace"])
    ramp = raw.get("ramp")
    if ramp is not None and (isinstance(ramp, bool) or not isinstance(ramp, int) or ramp < 1):
        raise GridError(source, "schedule.ramp", ramp,
                        "must be an integer >= 1 (most replicas added or removed from one hour to the next), "
                        "e.g. ramp = 4")
    warm = raw.get("warmup_hours", 0.0)
    if isinstance(warm, bool) or not isinstance(warm, (int, float)) or not (0.0 <= warm <= 24.0):
        raise GridError(source, "schedule.warmup_hours", warm,
                        "must be a number of hours in [0, 24] (a started replica is paid this long before it serves), "
                        "e.g. warmup_hours = 0.25")
    rates = tuple(sorted({r for r in hourly if r > 0}))
    position = {r: i for i, r in enumerate(rates)}
    return ScheduleSpec(
        hourly_rps=hourly,
        rates=rates,
        rate_index=tuple(position.get(r, -1) for r in hourly),
        ramp=ramp,
        warmup_hours=float(warm),
        source=label,
    )


#: Replica counts a ramped or warmed-up plan may choose among: the exact plan costs
#: O(hours x counts^3) time (128 counts: about 1 s for a day, 6 s for a week on one core).
MAX_PLAN_COUNTS = 128


def check_schedule_replicas(schedule: ScheduleSpec, model: ServingModel, values: Mapping[str, list[Any]],
                            source: str) -> None:
    """The group axis a plan chooses from (the replicas): one axis, bounded when the hours
    are coupled."""
    axes = model.decisions.group_axes
    if len(axes) != 1:
        raise GridError(source, "schedule", "[schedule]",
                        f"plans one fleet-size axis per hour; serving = {model.serving!r} has {len(axes)} "
                        f"({', '.join(axes)}): plan each hour's rate as its own grid instead")
    key = axes[0]
    counts = values.get(key, [1])
    coupled = schedule.ramp is not None or schedule.warmup_hours > 0
    if coupled and len(counts) > MAX_PLAN_COUNTS:
        raise GridError(source, f"grid.{key}", counts,
                        f"has {len(counts)} values; a [schedule] with ramp or warmup_hours plans over at most "
                        f"{MAX_PLAN_COUNTS} counts; use a coarser axis, "
                        f"e.g. {key} = {{start = 2, stop = 256, step = 2}}")


def _hourly_rps(raw: Any, source: str) -> tuple[float, ...]:
    key = "schedule.hourly_rps"
    if isinstance(raw, list) and raw and all(isinstance(day, list) for day in raw):
        if len(raw) != 7 or any(len(day) != 24 for day in raw):
            raise GridError(source, key, f"{len(raw)} lists",
                            "a week as lists needs 7 lists of 24 rates (Monday first)")
        raw = [r for day in raw for r in day]
    if not isinstance(raw, list) or len(raw) not in PERIODS.values():
        got = f"has {len(raw)} values; " if isinstance(raw, list) else ""
        raise GridError(source, key, raw,
                        f"{got}must be a list of 24 hourly rates (a day) or 168 (a week, Monday 00:00 first), "
                        f"e.g. {_EXAMPLE}")
    out = []
    for h, r in enumerate(raw):
        if (isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r)
                or not (r == 0 or MIN_RPS <= r <= MAX_RPS)):
            raise GridError(source, f"{key}[{h}]", r,
                            f"must be a rate in requests/s, 0 (no traffic that hour) or in [{MIN_RPS:g}, {MAX_RPS:g}]")
        out.append(float(r))
    _check_positive(out, source, key)
    return tuple(out)


def _check_positive(hourly: list[float], source: str, key: str) -> None:
    if not any(r > 0 for r in hourly):
        raise GridError(source, key, "all 0", "needs at least one hour with traffic (a rate > 0)")


def bin_trace(path_value: Any, source: str, hours: int, allow_outside: Sequence[str | Path] = ()) -> tuple[float, ...]:
    """A request trace -> the mean rate of each hour of a day (`hours` 24) or week (168).
    The file must lie in the grid's folder or one of `allow_outside` (`sweep.grid.files`)."""
    key = "schedule.trace"
    if not isinstance(path_value, str) or not path_value.strip():
        raise GridError(source, key, path_value,
                        'must be a path (string) to a CSV relative to the grid file, e.g. trace = "traces/day.csv"')
    path = resolve_in_grid(path_value, source, key, allow_outside)
    try:
        lines = read_text(path).splitlines()
    except InputFileError as exc:
        raise GridError(source, key, path_value, exc.reason) from None
    counts: dict[int, float] = {}
    width: int | None = None
    for n, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = [f.strip() for f in text.split(",")]
        try:
            values = [float(f) for f in fields]
        except ValueError:
            if width is None and not counts:
                continue  # a header line
            raise GridError(source, key, f"{path_value}:{n}",
                            "is not a line 'timestamp' or 'timestamp,requests' (numbers)") from None
        if len(values) not in (1, 2) or (width is not None and len(values) != width):
            raise GridError(source, key, f"{path_value}:{n}",
                            f"has {len(values)} fields; "
                            "every line is 'timestamp' (one request) or every line 'timestamp,requests'")
        width = len(values)
        t = values[0]
        if not math.isfinite(t) or t < 0:
            raise GridError(source, key, f"{path_value}:{n}",
                            f"timestamp {t} must be finite and >= 0 (seconds since the epoch or a midnight)")
        req = values[1] if width == 2 else 1.0
        if not math.isfinite(req) or req < 0:
            raise GridError(source, key, f"{path_value}:{n}", f"requests {req} must be finite and >= 0")
        hour = int(t // 3600)
        counts[hour] = counts.get(hour, 0.0) + req
    if not counts:
        raise GridError(source, key, path_value, "has no requests; expected lines 'timestamp' or 'timestamp,requests'")
    first, last = min(counts), max(counts)
    span = last - first + 1
    if span > MAX_TRACE_HOURS:
        shown = f"{span:,}" if span < 10**12 else f"{float(span):.3g}"
        raise GridError(source, key, path_value,
                        f"spans {shown} hours from its first request to its last; a [schedule] trace may span at most "
                        f"{MAX_TRACE_HOURS:,} hours (3,660 days, ten years): check the timestamps' unit (seconds) "
                        "and cut the trace to the history to plan from")
    # Hour of week: the epoch (1970-01-01) was a Thursday; Monday 1970-01-05 00:00 is hour 96.
    shift = 96 if hours == 168 else 0
    total = [0.0] * hours
    seen = [0] * hours
    for hour in range(first, last + 1):
        seen[(hour - shift) % hours] += 1
    for hour, c in counts.items():
        total[(hour - shift) % hours] += c
    out = [total[h] / (3600.0 * seen[h]) if seen[h] else 0.0 for h in range(hours)]
    missing = [h for h in range(hours) if seen[h] == 0]
    if missing:
        raise GridError(source, key, path_value,
                        f"covers {last - first + 1} whole hours; a {'day' if hours == 24 else 'week'} profile needs "
                        f"every hour of the period (hour {missing[0]} never occurs): give a longer trace")
    tiny = [h for h, r in enumerate(out) if 0 < r < MIN_RPS]
    if tiny:
        raise GridError(source, key, path_value,
                        f"hour {tiny[0]} averages {out[tiny[0]]:.3g} requests/s, below {MIN_RPS:g}; "
                        "a trace this sparse says little about that hour: give a denser or shorter trace")
    _check_positive(out, source, key)
    return tuple(out)
