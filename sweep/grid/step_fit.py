"""Step-time fits for continuous serving (`sweep fit`, `[profile]` in a continuous grid).

One engine step that carries `n_tok` new tokens and whose sequences hold `n_ctx` cached
tokens takes

    T_step = t_fixed + t_token * n_tok + t_ctx * n_ctx            (milliseconds here)

Two shapes of measurement fit the three coefficients, each with its standard errors:

- **step**: a profiler's per-step log, header `n_tokens,n_ctx,step_ms` (one row a step; what
  vLLM's and SGLang's step timers, or a torch profiler pass, print). Ordinary least squares.
- **request**: what serving benchmarks print (vLLM `benchmark_serving`, SGLang
  `bench_serving`, GenAI-Perf/AIPerf), header `concurrency,prompt_tokens,output_tokens,
  ttft_ms,tpot_ms`: one row a closed-loop run at that concurrency with those mean lengths,
  its mean TTFT and mean TPOT (ITL). A blank `ttft_ms` or `tpot_ms` cell (or a header
  without one of the two columns) drops that equation. Each measured mean is the step time of the \
steps it spans (`closed_loop_steps`):

      TPOT = T_step(n_tok = 1 + d_tok, n_ctx = P + O/2 + d_ctx)
      TTFT = T_step(n_tok = P + d_tok, n_ctx = P + d_ctx)
      d_tok = (c - 1) (1 - 1/O + P/O),   d_ctx = (c - 1) (P + (O - 1)/2)

  where the other c - 1 sequences each carry a decode token, or (once every O steps, when
  one finishes and the client sends the next) its whole prompt, and hold on average
  P + (O - 1)/2 cached tokens. This assumes the benchmark's concurrency is at most the
  server's cap (every request runs: no queueing inside TTFT), a prompt is prefilled in one
  step (P <= the token budget), and requests finish at random phases (lengths that vary a
  little). Against a closed-loop simulation of SPEC 10's scheduler with output lengths
  uniform in [O/2, 3O/2], both means agree within 2% (tests/test_grid_step_fit.py).
  Weighted least squares on relative residuals (a 5 s TTFT and a 20 ms TPOT count alike).

Rules, both shapes (one line naming the file, the row and column, the value and the rule):
- CSV with a header naming the shape's columns (any order; other columns ignored); blank
  lines and `#` lines skipped; rows numbered as lines of the file.
- Token counts and lengths in their `[grid]` domains; times finite in [0, 1e7] ms.
- At least 4 equations (one more than the coefficients, so that the residual variance and
  the standard errors exist) that determine all three coefficients (full rank).
- A step time has no negative coefficient, so the fit is constrained (non-negative least
  squares by active set): a coefficient the unconstrained fit puts below 0 is pinned at 0
  and the others refitted; `pinned` names it and `pinned_z` says how many standard errors
  below 0 it was. Within 2 that is noise; further, the measurements bend away from a
  linear step time (below the roofline's ridge extra tokens are nearly free, for example)
  and `sweep fit` says so beside the residuals.
- The fit lies in the coefficients' `[grid]` domains and t_fixed + t_token > 0.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sweep.errors import profile_error as _err
from sweep.grid.files import InputFileError, n_cells
from sweep.grid.files import read_text as _read_text
from sweep.models.continuous.model import DOMAINS

COEFFS: tuple[str, ...] = ("t_fixed_ms", "t_token_ms", "t_ctx_ms")
STEP_COLUMNS: tuple[str, ...] = ("n_tokens", "n_ctx", "step_ms")
REQUEST_COLUMNS: tuple[str, ...] = ("concurrency", "prompt_tokens", "output_tokens", "ttft_ms", "tpot_ms")
#: A measured time: as a whole step, t_fixed_ms's domain.
TIME = DOMAINS["t_fixed_ms"]
#: Tokens in one step: up to the largest token budget; cached tokens up to 1e5 sequences of 1e7.
N_TOKENS_MAX, N_CTX_MAX = DOMAINS["max_batched_tokens"].hi, DOMAINS["batch_size"].hi * DOMAINS["prompt_tokens"].hi
#: A coefficient this many standard errors below 0 is refused; closer, it is pinned at 0.
PIN_SE = 2.0


@dataclass(frozen=True)
class StepFit:
    """A fitted step time T = t_fixed_ms + t_token_ms n_tok + t_ctx_ms n_ctx (ms), with the
    standard error of each coefficient."""

    shape: str  # step | request
    t_fixed_ms: float
    t_token_ms: float
    t_ctx_ms: float
    se_ms: tuple[float, float, float]  # standard errors, COEFFS order
    pinned: tuple[str, ...]  # coefficients pinned at 0 (the unconstrained fit put them below 0)
    pinned_z: dict[str, float]  # each pinned coefficient's unconstrained value / its standard error
    r2: float
    n: int  # equations used
    rows: int  # CSV rows used
    labels: tuple[str, ...]  # one per equation: "row 4" or "row 4 ttft"
    measured_ms: tuple[float, ...]
    fitted_ms: tuple[float, ...]
    source: str = "<rows>"
    #: covariance of (t_fixed_ms, t_token_ms, t_ctx_ms), ms^2 (COEFFS order): sigma^2 (X'WX)^-1 of
    #: the final (constrained) fit over its free coefficients; a pinned coefficient keeps the
    #: variance of the unconstrained fit (its `se_ms`) and no covariance with the others.
    #: `[uncertainty.profile]` samples it; its diagonal is `se_ms` squared.
    cov_ms2: tuple[tuple[float, float, float], ...] = ()

    @property
    def coefficients(self) -> tuple[float, float, float]:
        return (self.t_fixed_ms, self.t_token_ms, self.t_ctx_ms)

    @property
    def residuals_ms(self) -> tuple[float, ...]:
        return tuple(m - f for m, f in zip(self.measured_ms, self.fitted_ms))

    @property
    def rmse_ms(self) -> float:
        r = np.asarray(self.residuals_ms)
        return float(np.sqrt(np.mean(r * r)))

    def grid_values(self) -> dict[str, float]:
        """The `[grid]` keys this fit gives."""
        return dict(zip(COEFFS, self.coefficients))

    def as_dict(self) -> dict[str, object]:
        """The summary a manifest records (plain JSON types)."""
        return {
            "file": self.source,
            "shape": self.shape,
            **self.grid_values(),
            **{f"{k}_se": s for k, s in zip(COEFFS, self.se_ms)},
            "pinned": list(self.pinned),
            "pinned_z": dict(self.pinned_z),
            "r2": self.r2,
            "n": self.n,
            "rows": self.rows,
            "rmse_ms": self.rmse_ms,
            "cov_ms2": [list(r) for r in self.cov_ms2],
        }


# --------------------------------------------------------------------------- the fits


def closed_loop_steps(concurrency: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> dict[str, np.ndarray]:
    """(n_tok, n_ctx) of the step a closed-loop benchmark's mean TTFT and mean TPOT each
    measure (module docstring)."""
    others = concurrency - 1.0
    d_tok = others * (1.0 - 1.0 / output + prompt / output)
    d_ctx = others * (prompt + (output - 1.0) / 2.0)
    return {
        "ttft_tok": prompt + d_tok, "ttft_ctx": prompt + d_ctx,
        "tpot_tok": 1.0 + d_tok, "tpot_ctx": prompt + output / 2.0 + d_ctx,
    }


def fit_steps(rows: Sequence[tuple[float, float, float]], *, source: str = "<rows>",
              row_numbers: Sequence[int] | None = None) -> StepFit:
    """Least squares over (n_tokens, n_ctx, step_ms) rows (already validated numbers)."""
    numbers = list(row_numbers) if row_numbers is not None else list(range(1, len(rows) + 1))
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    x = np.column_stack([np.ones(len(a)), a[:, 0], a[:, 1]])
    return _solve("step", x, a[:, 2], np.ones(len(a)), tuple(f"row {r}" for r in numbers), len(a), source,
                  "step rows need several token counts and context sizes that do not move together")


def fit_requests(rows: Sequence[tuple[float, float, float, float, float]], *, source: str = "<rows>",
                 row_numbers: Sequence[int] | None = None) -> StepFit:
    """Weighted least squares over (concurrency, prompt, output, ttft_ms, tpot_ms) rows;
    NaN marks a blank cell (that equation is dropped)."""
    numbers = list(row_numbers) if row_numbers is not None else list(range(1, len(rows) + 1))
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 5)
    s = closed_loop_steps(a[:, 0], a[:, 1], a[:, 2])
    xs, ys, labels = [], [], []
    for i, line in enumerate(numbers):
        for what, col in (("ttft", 3), ("tpot", 4)):
            if not math.isnan(a[i, col]):
                xs.append((1.0, s[f"{what}_tok"][i], s[f"{what}_ctx"][i]))
                ys.append(a[i, col])
                labels.append(f"row {line} {what}")
    x = np.asarray(xs, dtype=np.float64).reshape(-1, 3)
    y = np.asarray(ys, dtype=np.float64)
    # relative residuals; a measured 0 ms weighs as 1 us
    w = 1.0 / np.maximum(y, 1e-3) ** 2
    return _solve("request", x, y, w, tuple(labels), len(a), source,
                  "request rows need TTFT and TPOT, or more than one prompt length, so that t_token and t_ctx separate")


def _solve(shape: str, x: np.ndarray, y: np.ndarray, w: np.ndarray, labels: tuple[str, ...], n_rows: int,
           source: str, advice: str) -> StepFit:
    n = len(y)
    if n < len(COEFFS) + 1:
        raise _err(source, "rows", n_rows, f"{n} equations fit 3 coefficients with no residual left for their "
                   f"standard errors: give at least 4 ({'rows' if shape == 'step' else 'TTFT or TPOT cells'})")
    scale = np.max(np.abs(x), axis=0)
    scale[scale == 0] = 1.0
    if np.linalg.matrix_rank(x / scale) < len(COEFFS):
        raise _err(source, "rows", n_rows, f"do not determine all of t_fixed_ms, t_token_ms and t_ctx_ms: {advice}")
    free = [0, 1, 2]
    pinned: list[str] = []
    z_pinned: dict[str, float] = {}
    se_pinned: dict[int, float] = {}
    while True:
        beta, se, r2, cov = _wls(x[:, free], y, w)
        if np.any(~np.isfinite(beta)) or np.any(~np.isfinite(se)) or not math.isfinite(r2):
            raise _err(source, "fit", "non-finite", "the fit is not a finite number; check the measurements")
        worst = int(np.argmin(beta / np.where(se > 0, se, 1.0)))
        if beta[worst] >= 0:
            break
        k = free[worst]
        pinned.append(COEFFS[k])
        z_pinned[COEFFS[k]] = float(beta[worst] / se[worst]) if se[worst] > 0 else -math.inf
        se_pinned[k] = float(se[worst])
        free.remove(k)
        if not free:
            break
    coef = np.zeros(3)
    ses = np.zeros(3)
    cov3 = np.zeros((3, 3))
    if free:
        coef[free] = beta
        ses[free] = se
        cov3[np.ix_(free, free)] = cov
    for k, s in se_pinned.items():
        ses[k] = s
        cov3[k, k] = s * s
    coef = np.where(coef == 0.0, 0.0, coef)  # no -0.0
    fitted = x @ coef
    for name, value in zip(COEFFS, coef):
        if not DOMAINS[name].contains(float(value)):
            raise _err(source, f"fit {name}", float(value), f"must lie in {DOMAINS[name].text()}, as in [grid]")
    if coef[0] + coef[1] <= 0:
        raise _err(source, "fit t_fixed_ms + t_token_ms", float(coef[0] + coef[1]),
                   "a step would take no time: are the times all 0?")
    return StepFit(shape, float(coef[0]), float(coef[1]), float(coef[2]), (float(ses[0]), float(ses[1]), float(ses[2])),
                   tuple(pinned), {k: z_pinned[k] for k in pinned}, float(r2), n, n_rows, labels,
                   tuple(float(v) for v in y), tuple(float(v) for v in fitted), source,
                   tuple((float(r[0]), float(r[1]), float(r[2])) for r in cov3))


def _wls(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """Weighted least squares on column-scaled x: (coefficients, standard errors, R^2, covariance).

    The covariance is the classical one, sigma^2 (X'WX)^-1 with sigma^2 the weighted residual
    variance over n - p degrees of freedom; the standard errors are its diagonal's roots."""
    n, p = x.shape
    sw = np.sqrt(w)
    scale = np.max(np.abs(x), axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale * sw[:, None]
    ys = y * sw
    q, r = np.linalg.qr(xs)
    b = np.linalg.solve(r, q.T @ ys)
    res = ys - xs @ b
    dof = n - p
    sigma2 = float(res @ res) / dof if dof > 0 else 0.0
    rinv = np.linalg.inv(r)
    cov = sigma2 * (rinv @ rinv.T)
    beta = b / scale
    se = np.sqrt(np.maximum(np.diag(cov), 0.0)) / scale
    ybar = float(np.sum(w * y) / np.sum(w))
    ss_tot = float(np.sum(w * (y - ybar) ** 2))
    r2 = 1.0 if ss_tot == 0.0 else 1.0 - float(res @ res) / ss_tot
    return beta, se, r2, cov / np.outer(scale, scale)


# --------------------------------------------------------------------------- CSV files


def read_header(text: str) -> tuple[list[str], int] | None:
    """The first non-blank, non-comment line's cells and its line number (None: no header)."""
    for line_no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return [c.strip() for c in next(csv.reader(io.StringIO(line)))], line_no
    return None


def parse_table(text: str, source: str, columns: Sequence[str], *,
                optional: Sequence[str] = ()) -> tuple[list[dict[str, str]], list[int]]:
    """CSV text -> one dict of cells per row (the named columns only) and the line numbers.
    Columns in `optional` may be blank in a row (but must be in the header)."""
    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    numbers: list[int] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        cells = [c.strip() for c in next(csv.reader(io.StringIO(line)))]
        if header is None:
            header = cells
            for col in columns:
                if col not in header and col not in optional:
                    raise _err(source, f"row {line_no} (header)", n_cells(len(cells)),
                               f"the header must name column {col!r}; expected e.g. {','.join(columns)!r}")
                if header.count(col) > 1:
                    raise _err(source, f"row {line_no} (header)", col, "column named twice")
            continue
        if len(cells) != len(header):
            raise _err(source, f"row {line_no}", n_cells(len(cells)),
                       f"has {len(cells)} cells, the header has {len(header)}")
        rows.append({c: cells[header.index(c)] if c in header else "" for c in columns})
        numbers.append(line_no)
    if header is None:
        raise _err(source, "row 1 (header)", "", f"the file is empty; expected a header {','.join(columns)!r} and rows")
    if not rows:
        raise _err(source, "rows", 0, "the file has a header but no rows")
    return rows, numbers


def _number(cell: str, source: str, where: str, lo: float, hi: float, *, integer: bool = False,
            blank_ok: bool = False, unit: str = "") -> float:
    rule = f"must be {'an integer' if integer else 'a finite number'} in [{lo:g}, {hi:g}]{' ' + unit if unit else ''}"
    if not cell:
        if blank_ok:
            return math.nan
        raise _err(source, where, cell, f"is missing; {rule}")
    try:
        v = float(cell)
    except ValueError:
        raise _err(source, where, cell, rule) from None
    if math.isnan(v):
        raise _err(source, where, cell, "NaN is not a measurement; leave the cell blank or drop the row"
                   if blank_ok else "NaN is not a measurement; drop the row or re-measure")
    if not (lo <= v <= hi) or (integer and v != math.floor(v)):
        raise _err(source, where, cell, rule)
    return v


def parse_steps(text: str, source: str = "<profile>") -> StepFit:
    rows, numbers = parse_table(text, source, STEP_COLUMNS)
    vals = []
    for r, line in zip(rows, numbers):
        vals.append((
            _number(r["n_tokens"], source, f"row {line}, column n_tokens", 0, N_TOKENS_MAX,
                    integer=True, unit="tokens"),
            _number(r["n_ctx"], source, f"row {line}, column n_ctx", 0, N_CTX_MAX, integer=True, unit="tokens"),
            _number(r["step_ms"], source, f"row {line}, column step_ms", TIME.lo, TIME.hi, unit="ms"),
        ))
    return fit_steps(vals, source=source, row_numbers=numbers)


def parse_requests(text: str, source: str = "<profile>") -> StepFit:
    rows, numbers = parse_table(text, source, REQUEST_COLUMNS, optional=("ttft_ms", "tpot_ms"))
    cap, p_dom, o_dom = DOMAINS["batch_size"], DOMAINS["prompt_tokens"], DOMAINS["output_tokens"]
    vals = []
    for r, line in zip(rows, numbers):
        at = f"row {line}, column"
        row = (
            _number(r["concurrency"], source, f"{at} concurrency", cap.lo, cap.hi, integer=True, unit="requests"),
            _number(r["prompt_tokens"], source, f"{at} prompt_tokens", p_dom.lo, p_dom.hi, unit="tokens"),
            _number(r["output_tokens"], source, f"{at} output_tokens", o_dom.lo, o_dom.hi, unit="tokens"),
            _number(r["ttft_ms"], source, f"{at} ttft_ms", TIME.lo, TIME.hi, blank_ok=True, unit="ms"),
            _number(r["tpot_ms"], source, f"{at} tpot_ms", TIME.lo, TIME.hi, blank_ok=True, unit="ms"),
        )
        if math.isnan(row[3]) and math.isnan(row[4]):
            raise _err(source, f"{at}s ttft_ms and tpot_ms", "", "are both blank; a row needs at least one measurement")
        if row[2] < 2 and not math.isnan(row[4]):
            raise _err(source, f"{at} tpot_ms", r["tpot_ms"],
                       "a request of one output token has no TPOT; leave it blank")
        vals.append(row)
    return fit_requests(vals, source=source, row_numbers=numbers)


def read_text(path: str | Path) -> str:
    try:
        return _read_text(path)
    except InputFileError as exc:
        raise _err(str(path), "<file>", str(path), exc.reason) from None
