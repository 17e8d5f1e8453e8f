"""Profile fitting (SPEC 1, source 2; the seed's decision step 1).

Least-squares fit of the service-time line

    T_svc(B) = T_fixed + t_req * B            (milliseconds here, as in the profile file)

to measured (batch_size, latency_ms) rows. `fit_rows` is the pure function; `read_profile`
parses a CSV profile; `fit_file` does both. Every problem raises `sweep.errors.ProfileError`
with one line naming the file, the row and column, the value and the rule.

Rules (documented in the README, "Models, GPUs and service times"):
- CSV with a header row naming `batch_size` and `latency_ms` (any order); other columns are
  ignored (profilers often add p50/p99/throughput columns); blank lines and lines whose first
  non-blank character is `#` are skipped; rows are numbered as lines of the file (1-based).
- `batch_size` is an integer >= 1 (`8` or `8.0`, not `8.5`); `latency_ms` is a finite
  number >= 0; a missing cell is an error.
- At least two distinct batch sizes (a line through one x is not determined).
- A negative fitted intercept (T_fixed) or slope (t_req) is refused, not clamped: a
  negative T_fixed or t_req is not a service time, and clamping would silently change the
  fit the R^2 and residuals describe. Measure more batch sizes (or smaller ones), or give
  t_fixed_ms / t_req_ms directly in the grid.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sweep.errors import ProfileError

COLUMNS = ("batch_size", "latency_ms")


def _err(source: str, where: str, value: object, rule: str) -> ProfileError:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return ProfileError(f"{source}: {where} = {text}: {rule}")


@dataclass(frozen=True)
class Residual:
    """One distinct batch size: its measurements against the fitted line (ms)."""

    batch_size: int
    n: int
    mean_latency_ms: float
    fitted_ms: float
    residual_ms: float  # mean measured - fitted
    max_abs_residual_ms: float  # largest |measured - fitted| over its rows


@dataclass(frozen=True)
class Fit:
    """A fitted service-time line T_svc(B) = t_fixed_ms + t_req_ms * B (ms)."""

    t_fixed_ms: float
    t_req_ms: float
    r2: float
    n: int  # rows used
    residuals: tuple[Residual, ...]  # one per distinct batch size, ascending
    row_residuals_ms: tuple[float, ...]  # measured - fitted, in row order
    source: str = "<rows>"

    @property
    def rmse_ms(self) -> float:
        r = np.asarray(self.row_residuals_ms)
        return float(np.sqrt(np.mean(r * r)))

    def as_dict(self) -> dict[str, object]:
        """The summary a manifest records (plain JSON types)."""
        return {
            "file": self.source,
            "t_fixed_ms": self.t_fixed_ms,
            "t_req_ms": self.t_req_ms,
            "r2": self.r2,
            "n": self.n,
            "rmse_ms": self.rmse_ms,
            "batch_sizes": [r.batch_size for r in self.residuals],
            "residuals_ms": [r.residual_ms for r in self.residuals],
        }


# --------------------------------------------------------------------------- the pure fit


def fit_rows(
    rows: Iterable[tuple[object, object]], *, source: str = "<rows>", row_numbers: Sequence[int] | None = None
) -> Fit:
    """Least-squares fit of latency_ms = T_fixed + t_req * batch_size to `rows`.

    `rows` are (batch_size, latency_ms) pairs; `row_numbers` (same length) name them in
    error messages (default 1, 2, ...). Raises `ProfileError` on any rule above.
    """
    rows = list(rows)
    numbers = list(row_numbers) if row_numbers is not None else list(range(1, len(rows) + 1))
    bs: list[int] = []
    lat: list[float] = []
    for (b, y), line in zip(rows, numbers):
        bs.append(_check_batch(b, source, f"row {line}, column batch_size"))
        lat.append(_check_latency(y, source, f"row {line}, column latency_ms"))
    if len(set(bs)) < 2:
        shown = bs[0] if bs else None
        raise _err(source, "column batch_size", shown,
                   f"needs at least two distinct batch sizes to fit T_fixed and t_req; got {len(set(bs))} "
                   f"({len(bs)} rows), e.g. measure batch sizes 1, 8 and 32")
    x = np.asarray(bs, dtype=np.float64)
    y = np.asarray(lat, dtype=np.float64)
    xm, ym = x.mean(), y.mean()
    sxx = float(np.sum((x - xm) ** 2))
    slope = float(np.sum((x - xm) * (y - ym)) / sxx)
    intercept = float(ym - slope * xm)
    if slope < 0:
        raise _err(source, "fit t_req_ms", slope,
                   "fitted slope is negative (latency falls as the batch grows): not a service time; "
                   "check the measurements, or give t_fixed_ms and t_req_ms in the grid")
    if intercept < 0:
        raise _err(source, "fit t_fixed_ms", intercept,
                   "fitted intercept is negative: not a service time (refused, not clamped); "
                   "measure smaller batch sizes too (e.g. 1), or give t_fixed_ms and t_req_ms in the grid")
    fitted = intercept + slope * x
    res = y - fitted
    ss_res = float(np.sum(res * res))
    ss_tot = float(np.sum((y - ym) ** 2))
    r2 = 1.0 if ss_tot == 0.0 else 1.0 - ss_res / ss_tot
    table = []
    for b in sorted(set(bs)):
        mask = x == b
        table.append(Residual(
            batch_size=b,
            n=int(mask.sum()),
            mean_latency_ms=float(y[mask].mean()),
            fitted_ms=float(intercept + slope * b),
            residual_ms=float(res[mask].mean()),
            max_abs_residual_ms=float(np.max(np.abs(res[mask]))),
        ))
    return Fit(intercept, slope, r2, len(bs), tuple(table), tuple(float(r) for r in res), source)


def _check_batch(b: object, source: str, where: str) -> int:
    if isinstance(b, bool):
        raise _err(source, where, b, "must be an integer >= 1, e.g. 8")
    if isinstance(b, str):
        text = b.strip()
        if not text:
            raise _err(source, where, b, "is missing; every row needs an integer batch size >= 1")
        try:
            value = float(text)
        except ValueError:
            raise _err(source, where, b, "must be an integer >= 1, e.g. 8") from None
    elif isinstance(b, (int, float, np.integer, np.floating)):
        value = float(b)
    elif b is None:
        raise _err(source, where, b, "is missing; every row needs an integer batch size >= 1")
    else:
        raise _err(source, where, b, "must be an integer >= 1, e.g. 8")
    if not math.isfinite(value) or value != math.floor(value) or value < 1:
        raise _err(source, where, b, "must be an integer >= 1, e.g. 8")
    return int(value)


def _check_latency(y: object, source: str, where: str) -> float:
    if isinstance(y, bool):
        raise _err(source, where, y, "must be a finite number >= 0 (milliseconds)")
    if y is None or (isinstance(y, str) and not y.strip()):
        raise _err(source, where, y, "is missing; every row needs a latency in milliseconds")
    if isinstance(y, str):
        try:
            value = float(y.strip())
        except ValueError:
            raise _err(source, where, y, "must be a finite number >= 0 (milliseconds)") from None
    elif isinstance(y, (int, float, np.integer, np.floating)):
        value = float(y)
    else:
        raise _err(source, where, y, "must be a finite number >= 0 (milliseconds)")
    if math.isnan(value):
        raise _err(source, where, y, "NaN is not a latency; drop the row or re-measure")
    if not math.isfinite(value) or value < 0:
        raise _err(source, where, y, "must be a finite number >= 0 (milliseconds)")
    return value


# --------------------------------------------------------------------------- CSV files


def parse_profile(text: str, source: str = "<profile>") -> tuple[list[tuple[str, str]], list[int]]:
    """CSV text -> ((batch_size, latency_ms) cells as strings, their line numbers)."""
    header: list[str] | None = None
    rows: list[tuple[str, str]] = []
    numbers: list[int] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        cells = next(csv.reader(io.StringIO(line)))
        cells = [c.strip() for c in cells]
        if header is None:
            header = cells
            for col in COLUMNS:
                if col not in header:
                    raise _err(source, f"row {line_no} (header)", line.strip(),
                               f"the header must name column {col!r}; expected e.g. 'batch_size,latency_ms'")
            dup = [c for c in COLUMNS if header.count(c) > 1]
            if dup:
                raise _err(source, f"row {line_no} (header)", dup[0], "column named twice")
            ib, iy = header.index("batch_size"), header.index("latency_ms")
            continue
        if len(cells) != len(header):
            raise _err(source, f"row {line_no}", line.strip(),
                       f"has {len(cells)} cells, the header has {len(header)}")
        rows.append((cells[ib], cells[iy]))
        numbers.append(line_no)
    if header is None:
        raise _err(source, "row 1 (header)", "", "the file is empty; expected a header 'batch_size,latency_ms' and rows")
    return rows, numbers


def read_profile(path: str | Path) -> tuple[list[tuple[str, str]], list[int]]:
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise _err(source, "<file>", source, f"cannot be read ({reason})") from None
    return parse_profile(text, source)


def fit_file(path: str | Path) -> Fit:
    """Read a CSV profile and fit it (see the module docstring for the rules)."""
    rows, numbers = read_profile(path)
    return fit_rows(rows, source=str(path), row_numbers=numbers)
