"""Fitting the catalog's efficiency table (`sweep calibrate PROFILE.csv --table FILE`).

The table (`sweep.catalog._efficiency`) holds `eta_bw`, `eta_flops`, `t_overhead_s` (a step
that carries prompt tokens) and `t_decode_overhead_s` (a step of decode tokens only) per
(GPU, model size class, tensor parallel). The method, in two levels:

1. **GPU-wide row.** For each GPU with at least `MIN_GPU_FIGURES` figures, the four
   figures minimise

       sum_i log(estimate_i / measured_i)^2 + PRIOR_WEIGHT * sum_k (theta_k - prior_k)^2

   over theta = (log eta_bw, log eta_flops, log t_overhead_s, log t_decode_overhead_s), the
   prior being the global defaults (0.7, 0.6, 1 ms, 1 ms). Log space because the figures
   span 5 ms to 100 s and an efficiency acts as a factor; the penalty is shrinkage: a
   parameter the rows do not identify (no row is memory-bound, say) stays at its prior
   instead of wandering.
2. **Cell.** For each (GPU, size class, tensor parallel) with at least `MIN_CELL_FIGURES`
   figures, the same objective over the cell's rows with the GPU-wide row as the prior.
   A cell with fewer figures is not written: the lookup falls back to the GPU-wide row.

A row or cell whose figures are all prefills (first-token latencies) keeps its prior's
`eta_bw` and `t_decode_overhead_s` (no figure has a decode step) and fits only `eta_flops`
and `t_overhead_s`: a short prompt's step is near the memory/compute ridge, so three
first-token latencies trade bandwidth against overhead freely, and the bandwidth they
settle on is not the one a decode step streams weights at.
(Fitted freely, the (H100, medium, TP 4) cell's three Llama 70B prefills put eta_bw at 0.35
and every 70B decode step at TP 4 1.5x too slow against the open-loop measurements of
docs/accuracy-load.md.)

Two overheads, because the figures ask for them: fitted with one, every cell's overhead
comes out at 1.3-11.5 ms, set mostly by the first-token latencies, and a decode step of
Llama 3.1 8B on A100 lands 1.2-1.3x above SGLang's and vLLM's measured TPOT; fitted apart,
the decode-only step's is about 1 ms in most cells (engines replay it as a captured CUDA
graph) and the prompt step's 1.7-9.7 ms (docs/roofline.md gives the figures).

PRIOR_WEIGHT = 0.1: moving a parameter by a factor e^0.3 = 1.35 from its prior costs as much
as one figure missed by 9.5%; a cell of two or three figures can move its parameters by tens
of percent, not by factors. Bounds: eta_* in [0.05, 1], t_overhead_s in [10 us, 20 ms], inside
the catalog's domains. The collective latency stays the GPU entry's (cited) value.

The estimate of a row is exactly the refined roofline's (`sweep.grid.calibrate.estimate_ms`):
each step's terms are computed once at eta = 1 and zero overhead (`StepTerms`), then
`sum_steps weight (max(t_mem / eta_bw, t_compute / eta_flops) + t_comm + t_overhead)`,
plain NumPy, so a fit and a leave-one-out pass take seconds. `table_text` writes the table
with four significant digits and a fixed order: the same profile gives the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sweep.catalog import Catalog, packaged_catalog
from sweep.catalog._efficiency import ANY_CLASS, FIGURES, SIZE_CLASSES, EfficiencyTable, size_class, tp_bin
from sweep.errors import profile_error as _err
from sweep.models.shared import roofline as rl

from .calibrate import StepRow, _batch, _step_parts

PRIOR_WEIGHT = 0.1
MIN_GPU_FIGURES = 3
MIN_CELL_FIGURES = 2
ETA_BOUNDS = (0.05, 1.0)
T_OVERHEAD_BOUNDS_S = (1e-5, 2e-2)
DEFAULTS = (rl.ETA_BW, rl.ETA_FLOPS, rl.T_OVERHEAD_S, rl.T_OVERHEAD_S)


@dataclass(frozen=True)
class StepTerms:
    """Every step of a set of rows at eta = 1 and no overhead: memory, compute and
    collective seconds, the step's weight in its row's figure, and the row it belongs to."""

    t_mem: np.ndarray
    t_compute: np.ndarray
    t_comm: np.ndarray
    prompt: np.ndarray  # 1 where the step carries prompt tokens
    weight: np.ndarray
    row: np.ndarray
    n_rows: int

    def estimate_ms(self, eta_bw, eta_flops, t_overhead_s, t_decode_overhead_s) -> np.ndarray:
        """Each row's estimate (ms); the figures are scalars or arrays over rows."""
        def per_step(v):
            return np.broadcast_to(np.asarray(v, dtype=np.float64), (self.n_rows,))[self.row]

        eb, ef, t, td = per_step(eta_bw), per_step(eta_flops), per_step(t_overhead_s), per_step(t_decode_overhead_s)
        step = np.maximum(self.t_mem / eb, self.t_compute / ef) + self.t_comm + np.where(self.prompt > 0, t, td)
        out = np.zeros(self.n_rows)
        np.add.at(out, self.row, step * self.weight)
        return out * 1e3

    def subset(self, keep: np.ndarray) -> StepTerms:
        """The steps of the rows where `keep` (bool over rows) holds, renumbered."""
        new = np.cumsum(keep) - 1
        s = keep[self.row]
        return StepTerms(self.t_mem[s], self.t_compute[s], self.t_comm[s], self.prompt[s], self.weight[s],
                         new[self.row[s]], int(keep.sum()))


def step_terms(rows: Sequence[StepRow], catalog: Catalog | None = None, source: str = "<rows>") -> StepTerms:
    """The `StepTerms` of `rows` (one roofline evaluation of every step)."""
    catalog = packaged_catalog() if catalog is None else catalog
    b = _batch(rows, catalog, source)
    t_mem, t_compute, t_comm = _step_parts(b)
    return StepTerms(t_mem, t_compute, t_comm, b.prompt, b.weight, b.row, b.n_rows)


@dataclass(frozen=True)
class FittedCell:
    """One fitted row of the table: its key, figures, the profile lines it was fitted to."""

    gpu: str
    size_class: str  # ANY_CLASS for the GPU-wide row
    tensor_parallel: int  # 0 for the GPU-wide row
    eta_bw: float
    eta_flops: float
    t_overhead_s: float
    t_decode_overhead_s: float
    lines: tuple[int, ...]


def _fit(terms: StepTerms, measured: np.ndarray, prior: Sequence[float], *,
         decodes: bool = True) -> tuple[float, float, float, float]:
    """(eta_bw, eta_flops, t_overhead_s, t_decode_overhead_s) minimising the module doc's
    objective; without `decodes` (every figure a prefill), eta_bw and t_decode_overhead_s
    are held at their priors and only the other two move."""
    from scipy.optimize import least_squares

    free = np.asarray([decodes, True, True, decodes])
    p0 = np.log(np.asarray(prior, dtype=np.float64))
    lo = np.log([ETA_BOUNDS[0], ETA_BOUNDS[0], T_OVERHEAD_BOUNDS_S[0], T_OVERHEAD_BOUNDS_S[0]])[free]
    hi = np.log([ETA_BOUNDS[1], ETA_BOUNDS[1], T_OVERHEAD_BOUNDS_S[1], T_OVERHEAD_BOUNDS_S[1]])[free]
    x0 = np.clip(p0[free], lo + 1e-9, hi - 1e-9)
    w = math.sqrt(PRIOR_WEIGHT)

    def full(x: np.ndarray) -> np.ndarray:
        out = p0.copy()
        out[free] = x
        return out

    def resid(x):
        est = terms.estimate_ms(*np.exp(full(x)))
        return np.concatenate([np.log(est / measured), w * (x - p0[free])])

    sol = least_squares(resid, x0, bounds=(lo, hi), xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=500)
    eb, ef, t, td = (float(v) for v in np.exp(full(sol.x)))
    return eb, ef, t, td


def _round(v: float) -> float:
    """Four significant digits: what the table stores and the engine then uses."""
    return float(f"{v:.4g}")


def fit_table(rows: Sequence[StepRow], terms: StepTerms, *, source: str = "<rows>",
              exclude: int | None = None) -> list[FittedCell]:
    """The table's cells fitted to `rows` (module doc), GPU-wide rows first, each level in
    sorted key order; `exclude` leaves row index `exclude` out (leave-one-out)."""
    catalog = packaged_catalog()
    if not rows:
        raise _err(source, "rows", [], "no rows to fit the efficiency table to")
    measured = np.asarray([r.measured_ms for r in rows], dtype=np.float64)
    keys = [(r.gpu, size_class(catalog.model(r.model)), tp_bin(r.tensor_parallel)) for r in rows]
    decodes = np.asarray([r.phase != "prefill" for r in rows])
    use = np.ones(len(rows), dtype=bool)
    if exclude is not None:
        use[exclude] = False
    cells: list[FittedCell] = []
    gpu_prior: dict[str, tuple[float, float, float, float]] = {}
    for gpu in sorted({k[0] for k in keys}):
        keep = use & np.asarray([k[0] == gpu for k in keys])
        if keep.sum() < MIN_GPU_FIGURES:
            continue
        eb, ef, t, td = (_round(v) for v in _fit(terms.subset(keep), measured[keep], DEFAULTS,
                                                 decodes=bool((keep & decodes).any())))
        gpu_prior[gpu] = (eb, ef, t, td)
        cells.append(FittedCell(gpu, ANY_CLASS, 0, eb, ef, t, td, _lines(rows, keep)))
    for key in sorted(set(keys), key=lambda k: (k[0], SIZE_CLASSES.index(k[1]), k[2])):
        keep = use & np.asarray([k == key for k in keys])
        if keep.sum() < MIN_CELL_FIGURES:
            continue
        prior = gpu_prior.get(key[0], DEFAULTS)
        eb, ef, t, td = (_round(v) for v in _fit(terms.subset(keep), measured[keep], prior,
                                                 decodes=bool((keep & decodes).any())))
        cells.append(FittedCell(key[0], key[1], 2 ** key[2], eb, ef, t, td, _lines(rows, keep)))
    for c in cells:
        if not all(math.isfinite(getattr(c, f)) for f in FIGURES):
            raise _err(source, f"cell {c.gpu}/{c.size_class}/tp{c.tensor_parallel}", c, "the fit is not finite")
    return cells


def _lines(rows: Sequence[StepRow], keep: np.ndarray) -> tuple[int, ...]:
    return tuple(rows[int(i)].line for i in np.flatnonzero(keep))


def as_table(cells: Sequence[FittedCell], origin: str = "<fit>") -> EfficiencyTable:
    """The fitted cells as the catalog's `EfficiencyTable` (the lookup the engine uses)."""
    from sweep.catalog._efficiency import parse_table

    return parse_table(table_text(cells, "<fit>", 0), origin)


def _num(v: float) -> str:
    s = f"{v:.4g}"
    return s if any(ch in s for ch in ".en") else s + ".0"


def table_text(cells: Sequence[FittedCell], profile: str, n_rows: int) -> str:
    """The TOML of the table (fixed order and format: reproducible byte for byte)."""
    name = Path(profile).name
    out = [
        "# The refined roofline's eta_bw, eta_flops and per-step overheads (a step with prompt tokens,",
        "# a step of decode tokens only) per (GPU, model size class, tensor parallel):",
        "# sweep/catalog/_efficiency.py says how the engine looks them up, and",
        "# sweep/grid/efficiency_fit.py how they were fitted. Generated; do not edit. Regenerate with",
        "#   sweep calibrate tests/data/gpu_measurements.csv --table sweep/catalog/efficiency.toml",
        "",
        "[fit]",
        f'profile = "{name}"',
        f"figures = {n_rows}",
        'method = "least squares on log(estimate / measured), shrunk toward the GPU-wide row, then the defaults"',
        f"prior_weight = {_num(PRIOR_WEIGHT)}",
        f"min_gpu_figures = {MIN_GPU_FIGURES}",
        f"min_cell_figures = {MIN_CELL_FIGURES}",
    ]
    for c in cells:
        lines = ", ".join(str(i) for i in c.lines)
        out += [
            "",
            "[[cell]]",
            f'gpu = "{c.gpu}"',
            f'size_class = "{c.size_class}"',
            f"tensor_parallel = {c.tensor_parallel}",
            f"eta_bw = {_num(c.eta_bw)}",
            f"eta_flops = {_num(c.eta_flops)}",
            f"t_overhead_s = {_num(c.t_overhead_s)}",
            f"t_decode_overhead_s = {_num(c.t_decode_overhead_s)}",
            f"figures = {len(c.lines)}",
            f'source = "fitted: sweep calibrate {name} --table, rows {lines}"',
        ]
    return "\n".join(out) + "\n"


def table_estimate_ms(rows: Sequence[StepRow], terms: StepTerms, table: EfficiencyTable) -> np.ndarray:
    """Each row's estimate (ms) with the figures `table` gives its (model, gpu, tp)."""
    catalog = packaged_catalog()
    eff = [table.lookup(catalog.model(r.model), catalog.gpu(r.gpu), r.tensor_parallel) for r in rows]
    return terms.estimate_ms([e.eta_bw for e in eff], [e.eta_flops for e in eff], [e.t_overhead_s for e in eff],
                             [e.t_decode_overhead_s for e in eff])


def leave_one_out_ms(rows: Sequence[StepRow], terms: StepTerms, indices: Sequence[int] | None = None) -> np.ndarray:
    """The estimate (ms) of each row of `indices` (default: every row) from a table fitted to
    all the other rows."""
    which = range(len(rows)) if indices is None else list(indices)
    out = np.empty(len(which))
    catalog = packaged_catalog()
    for k, i in enumerate(which):
        r = rows[i]
        table = as_table(fit_table(rows, terms, exclude=i))
        e = table.lookup(catalog.model(r.model), catalog.gpu(r.gpu), r.tensor_parallel)
        keep = np.zeros(len(rows), dtype=bool)
        keep[i] = True
        out[k] = terms.subset(keep).estimate_ms(e.eta_bw, e.eta_flops, e.t_overhead_s, e.t_decode_overhead_s)[0]
    return out
