"""`Domain`: where a number a user gives is valid, and the one-line rule when it is not.

Every numeric `[grid]` key (`sweep.models.base.Param`) and every catalog figure
(`sweep.catalog`) declares one. It lives below both layers so that the catalog, which the
models build on, checks its figures with the same ranges, texts and messages as the grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Domain"]


@dataclass(frozen=True)
class Domain:
    """Where a numeric `[grid]` parameter or catalog figure is valid: `lo` to `hi` in `unit`
    (each end closed unless `lo_open` / `hi_open`), and `+inf` too where `inf`.

    Every domain is a range a planner can mean, checked by `tests/test_domains.py` (grid keys)
    and `tests/test_catalog_domains.py` (catalog figures): over the whole box, its bounds and
    the values just inside them included, every output column of every registered model is
    finite or +inf, never NaN. Values outside are refused before any work (`rule`), in
    `[grid]`, range tables, `[search.params]`, the CLI flags and catalog entries alike.
    """

    lo: float
    hi: float
    unit: str = ""
    lo_open: bool = False
    hi_open: bool = False
    inf: bool = False

    def contains(self, x: float) -> bool:
        if self.inf and x == math.inf:
            return True
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below

    def text(self, integer: bool = False) -> str:
        """The range as messages and the README write it, e.g. `[1e-06, 1e+09] requests/s`."""
        show = _int_text if integer else _float_text
        box = f"{'(' if self.lo_open else '['}{show(self.lo)}, {show(self.hi)}{')' if self.hi_open else ']'}"
        return box + (f" {self.unit}" if self.unit else "")

    def rule(self, x: float, integer: bool = False) -> str | None:
        """None when `x` lies in the domain (NaN never does), else the rule it breaks."""
        return None if self.contains(x) else self.refusal(integer)

    def refusal(self, integer: bool = False) -> str:
        """The rule as a message: `must lie in [1e-06, 1e+09] requests/s`."""
        what = "be an integer in" if integer else "lie in"
        return f"must {what} {self.text(integer)}" + (" or be inf" if self.inf else "")


def _float_text(x: float) -> str:
    return f"{x:g}"


def _int_text(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() and abs(x) < 1e5 else f"{x:g}"
