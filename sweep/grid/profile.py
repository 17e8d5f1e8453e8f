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
- `batch_size` is an integer in the `batch_size` domain, [1, 1e6] (`8` or `8.0`, not `8.5`);
  `latency_ms` is a finite number in the `t_fixed_ms` domain, [0, 1e7] ms (README, "[grid]");
  a missing cell is an error.
- At least two distinct batch sizes (a line through one x is not determined).
- The fit is finite (T_fixed, t_req, R^2, every residual), its T_fixed and t_req lie in the
  `t_fixed_ms` / `t_req_ms` domains, and T_fixed + t_req >= 1 ns (latencies all 0 are refused).
  Inside these domains the sums cannot overflow: no input makes NumPy warn.
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

from sweep.errors import profile_error as _err
from sweep.grid.files import InputFileError, n_cells
from sweep.grid.files import read_text as _read_text
from sweep.models.dynamic.model import DOMAINS, MIN_T_SVC_MS

COLUMNS = ("batch_size", "latency_ms")
#: The rows' domains: a batch size as in [grid]; a latency as a t_fixed_ms (a whole batch).
BATCH, LATENCY = DOMAINS["batch_size"], DOMAINS["t_fixed_ms"]
BATCH_RULE = f"must be an integer in {BATCH.text(integer=True)}, e.g. 8"
LATENCY_RULE = f"must be a finite number in {LATENCY.text()} (milliseconds)"


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
    #: covariance of (t_fixed_ms, t_req_ms), ms^2: sigma^2 (X'X)^-1 with sigma^2 = SS_res / (n - 2);
    #: None with only two rows (no residual degree of freedom). `[uncertainty.profile]` samples it.
    cov_ms2: tuple[tuple[float, float], tuple[float, float]] | None = None

    @property
    def rmse_ms(self) -> float:
        r = np.asarray(self.row_residuals_ms)
        return float(np.sqrt(np.mean(r * r)))

    def grid_values(self) -> dict[str, float]:
        """The `[grid]` keys this fit gives."""
        return {"t_fixed_ms": self.t_fixed_ms, "t_req_ms": self.t_req_ms}

    @property
    def se_ms(self) -> tuple[float, float] | None:
        """Standard errors of (t_fixed_ms, t_req_ms), or None (see `cov_ms2`)."""
        if self.cov_ms2 is None:
            return None
        return (math.sqrt(max(self.cov_ms2[0][0], 0.0)), math.sqrt(max(self.cov_ms2[1][1], 0.0)))

    def as_dict(self) -> dict[str, object]:
        """The summary a manifest records (plain JSON types)."""
        return {
            "file": self.source,
            "shape": "service",
            "t_fixed_ms": self.t_fixed_ms,
            "t_req_ms": self.t_req_ms,
            "r2": self.r2,
            "n": self.n,
            "rmse_ms": self.rmse_ms,
            "batch_sizes": [r.batch_size for r in self.residuals],
            "residuals_ms": [r.residual_ms for r in self.residuals],
            "cov_ms2": None if self.cov_ms2 is None else [list(r) for r in self.cov_ms2],
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
    if np.all(y == y[0]):  # a flat profile: the line is exact (no 0/0 R^2, no rounding slope)
        slope, intercept, ym = 0.0, float(y[0]), float(y[0])
    else:
        sxx = float(np.sum((x - xm) ** 2))
        slope = float(np.sum((x - xm) * (y - ym)) / sxx)
        intercept = float(ym - slope * xm)
        # An intercept within rounding of 0 (latencies proportional to the batch) is 0, not
        # negative. Its rounding grows with the extrapolation from the batch sizes to B = 0:
        # |ym| + |slope xm|, times (1 + xm / sd(x)).
        spread = math.sqrt(sxx / len(x))
        rounding = 64 * np.finfo(np.float64).eps * (abs(ym) + abs(slope * xm)) * (1.0 + xm / spread)
        if abs(intercept) <= rounding:
            intercept = 0.0
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
    _check_fit(source, intercept, slope, r2, res)
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
    return Fit(intercept, slope, r2, len(bs), tuple(table), tuple(float(r) for r in res), source,
               _ols_covariance(x, ss_res))


def _ols_covariance(x: np.ndarray, ss_res: float) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """Covariance of the OLS (intercept, slope), ms^2: sigma^2 [[1/n + xm^2/Sxx, -xm/Sxx],
    [-xm/Sxx, 1/Sxx]] with sigma^2 = SS_res / (n - 2); None when n = 2 (sigma is not estimable).
    A coefficient the fit set to 0 (rounding) keeps its covariance: it is still uncertain."""
    n = len(x)
    if n <= 2:
        return None
    xm = float(x.mean())
    sxx = float(np.sum((x - xm) ** 2))
    s2 = ss_res / (n - 2)
    c01 = -xm * s2 / sxx
    return ((s2 * (1.0 / n + xm * xm / sxx), c01), (c01, s2 / sxx))


def _check_fit(source: str, intercept: float, slope: float, r2: float, res: np.ndarray) -> None:
    """A fit is a service time: finite, in the t_fixed_ms / t_req_ms domains, >= 1 ns in all."""
    for what, value in (("t_fixed_ms", intercept), ("t_req_ms", slope), ("r2", r2)):
        if not math.isfinite(value):
            raise _err(source, f"fit {what}", value, "the fit is not a finite number; check the measurements")
    if not np.all(np.isfinite(res)):
        raise _err(source, "fit residuals", "non-finite", "the fit is not a finite number; check the measurements")
    for what, value in (("t_fixed_ms", intercept), ("t_req_ms", slope)):
        if not DOMAINS[what].contains(value):
            raise _err(source, f"fit {what}", value, f"must lie in {DOMAINS[what].text()}, as in [grid]")
    if intercept + slope < MIN_T_SVC_MS:
        raise _err(source, "fit t_fixed_ms + t_req_ms", intercept + slope,
                   f"T_svc of one request must be >= {MIN_T_SVC_MS:g} ms (1 ns): are the latencies all 0?")


def _float(x: int | float | np.integer | np.floating) -> float:
    try:
        return float(x)
    except OverflowError:  # an integer beyond float64: outside every domain
        return math.inf


def _check_batch(b: object, source: str, where: str) -> int:
    if isinstance(b, bool):
        raise _err(source, where, b, BATCH_RULE)
    if isinstance(b, str):
        text = b.strip()
        if not text:
            raise _err(source, where, b, "is missing; every row needs an integer batch size >= 1")
        try:
            value = float(text)
        except ValueError:
            raise _err(source, where, b, BATCH_RULE) from None
    elif isinstance(b, (int, float, np.integer, np.floating)):
        value = _float(b)
    elif b is None:
        raise _err(source, where, b, "is missing; every row needs an integer batch size >= 1")
    else:
        raise _err(source, where, b, BATCH_RULE)
    if not math.isfinite(value) or value != math.floor(value) or not BATCH.contains(value):
        raise _err(source, where, b, BATCH_RULE)
    return int(value)


def _check_latency(y: object, source: str, where: str) -> float:
    if isinstance(y, bool):
        raise _err(source, where, y, LATENCY_RULE)
    if y is None or (isinstance(y, str) and not y.strip()):
        raise _err(source, where, y, "is missing; every row needs a latency in milliseconds")
    if isinstance(y, str):
        try:
            value = float(y.strip())
        except ValueError:
            raise _err(source, where, y, LATENCY_RULE) from None
    elif isinstance(y, (int, float, np.integer, np.floating)):
        value = _float(y)
    else:
        raise _err(source, where, y, LATENCY_RULE)
    if math.isnan(value):
        raise _err(source, where, y, "NaN is not a latency; drop the row or re-measure")
    if not math.isfinite(value) or not LATENCY.contains(value):
        raise _err(source, where, y, LATENCY_RULE)
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
                    raise _err(source, f"row {line_no} (header)", n_cells(len(cells)),
                               f"the header must name column {col!r}; expected e.g. 'batch_size,latency_ms'")
            dup = [c for c in COLUMNS if header.count(c) > 1]
            if dup:
                raise _err(source, f"row {line_no} (header)", dup[0], "column named twice")
            ib, iy = header.index("batch_size"), header.index("latency_ms")
            continue
        if len(cells) != len(header):
            raise _err(source, f"row {line_no}", n_cells(len(cells)),
                       f"has {len(cells)} cells, the header has {len(header)}")
        rows.append((cells[ib], cells[iy]))
        numbers.append(line_no)
    if header is None:
        raise _err(source, "row 1 (header)", "",
                   "the file is empty; expected a header 'batch_size,latency_ms' and rows")
    return rows, numbers


def read_profile(path: str | Path) -> tuple[list[tuple[str, str]], list[int]]:
    source = str(path)
    try:
        text = _read_text(path)
    except InputFileError as exc:
        raise _err(source, "<file>", source, exc.reason) from None
    return parse_profile(text, source)


def fit_file(path: str | Path) -> Fit:
    """Read a CSV profile and fit it (see the module docstring for the rules)."""
    rows, numbers = read_profile(path)
    return fit_rows(rows, source=str(path), row_numbers=numbers)
