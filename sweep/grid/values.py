"""One `[grid]` value or axis: its type, its domain rule, named dtypes, range tables.

Shared by the `[grid]` table and the `[search.params]` table, so a value means the same and
is refused with the same rule in both.

Sizes are checked before anything is built: `axis_size` counts the values an axis will hold
(a range table by arithmetic, never by expanding it), so an axis longer than
`MAX_AXIS_VALUES` (and, in the loader, a grid of more than `MAX_POINTS` points) is refused
at once, with its size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from sweep.errors import GridError, did_you_mean
from sweep.models.base import DTYPE_BYTES, DTYPE_KEYS, Param

#: Values one axis may hold. A million values of one parameter is more than any figure or
#: decision resolves, and already costs about a second to validate and ~100 MB as Python
#: objects; a longer range (10^9..10^12 values) is a typo, refused before it is expanded.
MAX_AXIS_VALUES = 1_000_000


def axis_values(param: Param, raw: Any, source: str) -> list[Any]:
    where = f"grid.{param.key}"
    axis_size(param, raw, source)  # shape and size first: nothing is expanded past the bound
    if isinstance(raw, Mapping):
        items = expand_range(param, raw, source)
    elif isinstance(raw, list):
        items = list(raw)
    else:
        items = [raw]
    values = [check_value(param, v, source, where) for v in items]
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise GridError(source, where, v, "appears twice in the axis; each value once")
        seen.add(v)
    if param.ascending:
        values.sort()  # ascending caps let the frontier skip a sort (sweep.decide.pareto)
    return values


def axis_size(param: Param, raw: Any, source: str) -> int:
    """How many values `raw` (a scalar, a list or a range table) asks for, without building
    them; refuses an empty axis, a malformed range table and more than `MAX_AXIS_VALUES`.
    Exact but for an integer range, whose rounding may then drop repeats."""
    where = f"grid.{param.key}"
    if isinstance(raw, Mapping):
        n = _range_size(param, raw, source)
    elif isinstance(raw, list):
        if not raw:
            raise GridError(source, where, raw, f"an axis must not be empty, e.g. {param.example}")
        n = len(raw)
    else:
        return 1
    if n > MAX_AXIS_VALUES:
        raise GridError(source, where, _shown(raw), _too_long(n, isinstance(raw, Mapping)))
    return n


def _too_long(n: int, table: bool) -> str:
    return (f"{'asks for' if table else 'has'} {n:,} values; an axis holds at most {MAX_AXIS_VALUES:,} "
            "(sweep fewer values, or split the study)")


def check_value(param: Param, v: Any, source: str, where: str, *, finite: bool = False) -> Any:
    """One value of `param`: its type, its domain rule, named dtypes; `finite` refuses inf."""
    if param.kind == "name":
        if not isinstance(v, str):
            raise GridError(source, where, v, f"must be a catalog name (string), e.g. {param.example}")
        return v
    if param.key in DTYPE_KEYS and isinstance(v, str):
        if v.lower() not in DTYPE_BYTES:
            raise GridError(source, where, v, f"unknown dtype{did_you_mean(v.lower(), DTYPE_BYTES)}; "
                                              f"use bytes or one of {', '.join(DTYPE_BYTES)}")
        return DTYPE_BYTES[v.lower()]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        kind = "an integer" if param.kind == "int" else "a number"
        raise GridError(source, where, v, f"must be {kind}, e.g. {param.example}")
    if isinstance(v, float) and math.isnan(v):
        raise GridError(source, where, v, f"NaN is not a value, e.g. {param.example}")
    if isinstance(v, float) and math.isinf(v):
        if param.allow_inf and v > 0 and not finite:
            return math.inf
        raise GridError(source, where, v, f"must be finite, e.g. {param.example}")
    if param.kind == "int" and not isinstance(v, int):
        raise GridError(source, where, v, f"must be an integer (not a float), e.g. {param.example}")
    try:
        x = float(v)
    except OverflowError:  # an integer beyond float64 lies outside every domain
        x = math.nan
    problem = param.rule(x)
    if problem:
        raise GridError(source, where, v, f"{problem}, e.g. {param.example}")
    return int(v) if param.kind == "int" else float(v)


def _shown(raw: Any) -> Any:
    return dict(raw) if isinstance(raw, Mapping) else raw[:32]  # the message shows the start of a long list


def _range_size(param: Param, table: Mapping[str, Any], source: str) -> int:
    """Check a range table's shape, its ends and its count; return the count (before integer
    parameters drop repeats, which only shortens an axis)."""
    where = f"grid.{param.key}"
    if param.kind == "name":
        raise GridError(source, where, dict(table), "catalog names take a list, not a range table")
    allowed = {"start", "stop", "num", "scale", "step"}
    for k in table:
        if k not in allowed:
            raise GridError(source, f"{where}.{k}", table[k],
                            f"unknown range key{did_you_mean(str(k), sorted(allowed))}; "
                            "use {start, stop, num, scale} or {start, stop, step}")
    for k in ("start", "stop"):
        if k not in table:
            raise GridError(source, where, dict(table),
                            f"a range table needs '{k}', e.g. {{start = 1, stop = 64, num = 7, scale = \"log\"}}")
        x = table[k]
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise GridError(source, f"{where}.{k}", x, "must be a finite number")
        if param.kind == "int" and not isinstance(x, int):
            raise GridError(source, f"{where}.{k}", x, "must be an integer for an integer parameter")
        check_value(param, x, source, f"{where}.{k}", finite=True)  # both ends in the domain: every value is
    start, stop = table["start"], table["stop"]
    if stop < start:
        raise GridError(source, f"{where}.stop", stop, f"must be >= start ({start})")
    if ("num" in table) == ("step" in table):
        raise GridError(source, where, dict(table), "give exactly one of 'num' or 'step'")
    if "step" in table:
        step = table["step"]
        if "scale" in table:
            raise GridError(source, f"{where}.scale", table["scale"], "only with 'num', not with 'step'")
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0 or not math.isfinite(step):
            raise GridError(source, f"{where}.step", step, "must be a finite number > 0")
        if param.kind == "int" and not isinstance(step, int):
            raise GridError(source, f"{where}.step", step, "must be an integer for an integer parameter")
        if param.kind == "int":
            return (stop - start) // step + 1
        ratio = (stop - start) / step  # finite ends, step > 0: at worst +inf (a subnormal step)
        if not ratio < MAX_AXIS_VALUES:
            return MAX_AXIS_VALUES + 1 if not math.isfinite(ratio) else int(ratio) + 1
        return int(math.floor(ratio * (1 + 1e-12))) + 1
    num = table["num"]
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise GridError(source, f"{where}.num", num, "must be an integer >= 1")
    scale = table.get("scale", "linear")
    if scale not in ("linear", "log"):
        raise GridError(source, f"{where}.scale", scale, 'must be "linear" or "log"')
    if scale == "log" and start <= 0:
        raise GridError(source, f"{where}.start", start, 'must be > 0 with scale = "log"')
    return num


def expand_range(param: Param, table: Mapping[str, Any], source: str) -> list[Any]:
    """`{start, stop, num, scale}` or `{start, stop, step}` -> explicit values.

    Integer parameters round a linear/log spacing to integers and drop repeats (a log
    range of batch sizes is what a planner means by it); `step` ranges include `stop`.
    Refuses (before building anything) a table that `axis_size` refuses.
    """
    n = _range_size(param, table, source)
    if n > MAX_AXIS_VALUES:
        raise GridError(source, f"grid.{param.key}", dict(table), _too_long(n, True))
    start, stop = table["start"], table["stop"]
    if "step" in table:
        step = table["step"]
        return ([start + i * step for i in range(n)] if param.kind == "int"
                else [float(start + i * step) for i in range(n)])
    if table.get("scale", "linear") == "log":
        xs = np.geomspace(start, stop, n)
    else:
        xs = np.linspace(start, stop, n)
    if param.kind == "int":
        return [int(x) for x in np.unique(np.rint(xs))]  # rounded half to even, as round(), sorted
    return xs.tolist()
