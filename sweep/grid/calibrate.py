"""Calibrating the SPEC 13 roofline from measured steps (`sweep calibrate PROFILE.csv`).

A profile is a CSV of measured steps, one row per figure. Required columns:

    model, gpu, tensor_parallel, phase, batch, prompt_tokens, context_tokens, measured_ms

`model` and `gpu` are catalog names; `tensor_parallel` is g (GPUs per replica); `phase` is

- `prefill`: one step that prefills `batch` prompts of `prompt_tokens` tokens (a TTFT or
  first-token latency at concurrency 1); `context_tokens` is ignored;
- `decode`: one decode step of `batch` sequences holding `context_tokens` cached tokens on
  average (TPOT / ITL);
- `generate`: a whole static batch, one prefill of `batch` x `prompt_tokens` then
  `output_tokens - 1` decode steps whose context grows from `prompt_tokens` (an end-to-end
  latency, e.g. vLLM's `benchmark_latency`).

Optional columns: `output_tokens` (needed by `generate` and by closed-loop decode),
`arrivals` (`none`, the default: decode steps carry only decode tokens; `closed_loop`: a
benchmark at fixed concurrency where each finished request is replaced at once, so on
average every decode step also carries (batch - 1) * prompt_tokens / output_tokens prompt
tokens of newly admitted requests: a share (batch - 1) / output_tokens of the steps carries a
whole prompt), `dtype` (`WEIGHTS/KV`, e.g. `bf16/bf16`, `fp8/fp8`;
default `bf16/bf16`). Other columns are ignored. Blank lines and `#` lines are skipped.

`estimate_ms` evaluates the roofline for rows (vectorized: every step of every row in one
call); `calibrate` fits `eta_bw`, `eta_flops` and the collective latency `alpha` per
(model, gpu, tensor_parallel) group by bounded least squares on relative residuals
(estimate / measured - 1), with t_overhead held at its default; `write_overlay` writes the
fits as a catalog folder that `load_catalog([folder])` and `--catalog folder` read: one GPU
entry per group, named `<gpu>-<model>-tp<g>`, a copy of the packaged GPU with the fitted
`eta_bw`, `eta_flops` and `collective_latency_s`. A grid then plans on the calibrated
replica by naming that GPU (`gpu = "h100-sxm-llama-3.1-70b-tp2"`, `--catalog DIR`).

Every unusable input raises `sweep.errors.ProfileError` with one line naming the file, the
row, the column, the value and the rule. Each number lies in the domain of the grid key it
means (`TENSOR_PARALLEL`, `BATCH`, `TOKENS`, `OUTPUT_TOKENS`, `MEASURED_MS` below), and a fit
that is not finite is refused: no input gives NaN or makes NumPy warn.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from sweep.catalog import Catalog, Gpu, Model, packaged_catalog
from sweep.errors import CatalogError, ProfileError
from sweep.errors import profile_error as _err
from sweep.grid.files import InputFileError, n_cells
from sweep.grid.files import read_text as _read_text
from sweep.models.base import Domain
from sweep.models.dynamic.model import DOMAINS, MIN_T_SVC_MS
from sweep.models.shared import roofline as rl

REQUIRED = ("model", "gpu", "tensor_parallel", "phase", "batch", "prompt_tokens", "context_tokens",
            "measured_ms")
PHASES = ("prefill", "decode", "generate")
ARRIVALS = ("none", "closed_loop")
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5}
ALPHA_MAX_S = 1e-3  # an all-reduce slower than 1 ms is a broken setup, not a latency
#: The columns' domains: the grid's where a column means the same (README, "[grid]"). A
#: measured step lies between 1 ns and the longest forward pass a grid takes (t_fixed_ms);
#: a generate row expands to one step per output token, so a million is ~10 s of setup.
TENSOR_PARALLEL = DOMAINS["gpus_per_replica"]
BATCH = DOMAINS["batch_size"]
TOKENS = Domain(0, DOMAINS["seq_len"].hi, "tokens")
OUTPUT_TOKENS = Domain(0, 1e6, "tokens")
MEASURED_MS = Domain(MIN_T_SVC_MS, DOMAINS["t_fixed_ms"].hi, "ms")


@dataclass(frozen=True)
class StepRow:
    """One measured figure (see the module docstring for the columns)."""

    model: str
    gpu: str
    tensor_parallel: int
    phase: str
    batch: float
    prompt_tokens: float
    context_tokens: float
    measured_ms: float
    output_tokens: float = 0.0
    arrivals: str = "none"
    weight_bytes: float = 2.0
    kv_bytes: float = 2.0
    line: int = 0
    extra: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def group(self) -> tuple[str, str, int]:
        return (self.model, self.gpu, self.tensor_parallel)


# --------------------------------------------------------------------------- parsing


def parse_rows(text: str, source: str = "<profile>") -> list[StepRow]:
    """CSV text -> checked `StepRow`s (every rule in the module docstring)."""
    lines = [(i, line) for i, line in enumerate(text.splitlines(), start=1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise _err(source, "row 1 (header)", "", "the file is empty; expected a header naming "
                   + ", ".join(REQUIRED) + " and one row per measured step")
    reader = csv.reader(io.StringIO("\n".join(line for _, line in lines)))
    rows = list(reader)
    header = [c.strip() for c in rows[0]]
    head_line = lines[0][0]
    for col in REQUIRED:
        if col not in header:
            raise _err(source, f"row {head_line} (header)", n_cells(len(header)),
                       f"the header must name column {col!r}; required: {', '.join(REQUIRED)}")
    out = []
    for (line_no, _), cells in zip(lines[1:], rows[1:]):
        if len(cells) != len(header):
            raise _err(source, f"row {line_no}", n_cells(len(cells)),
                       f"has {len(cells)} cells, the header has {len(header)}")
        cell = dict(zip(header, (c.strip() for c in cells)))
        out.append(_row(cell, source, line_no))
    if not out:
        raise _err(source, f"row {head_line} (header)", n_cells(len(header)),
                   "has no data rows; give one row per measured step")
    return out


def _row(c: Mapping[str, str], source: str, line: int) -> StepRow:
    def where(col: str) -> str:
        return f"row {line}, column {col}"

    model, gpu = c["model"], c["gpu"]
    for col in ("model", "gpu"):
        if not c[col]:
            raise _err(source, where(col), c[col], "is missing; give a catalog name, e.g. llama-3.1-70b / h100-sxm")
    phase = c["phase"].lower()
    if phase not in PHASES:
        raise _err(source, where("phase"), c["phase"], f"must be one of {', '.join(PHASES)}")
    tp = _number(c["tensor_parallel"], source, where("tensor_parallel"), TENSOR_PARALLEL, integer=True)
    batch = _number(c["batch"], source, where("batch"), BATCH, integer=True)
    prompt = _number(c["prompt_tokens"], source, where("prompt_tokens"), TOKENS)
    context = _number(c["context_tokens"] or "0", source, where("context_tokens"), TOKENS)
    measured = _number(c["measured_ms"], source, where("measured_ms"), MEASURED_MS)
    out_tok = _number(c.get("output_tokens") or "0", source, where("output_tokens"), OUTPUT_TOKENS, integer=True)
    arrivals = (c.get("arrivals") or "none").lower()
    if arrivals not in ARRIVALS:
        raise _err(source, where("arrivals"), c.get("arrivals"), f"must be one of {', '.join(ARRIVALS)}")
    if phase == "prefill" and prompt < 1:
        raise _err(source, where("prompt_tokens"), c["prompt_tokens"], "a prefill step needs prompt_tokens >= 1")
    if phase == "decode" and context < 1:
        raise _err(source, where("context_tokens"), c["context_tokens"],
                   "a decode step needs context_tokens >= 1 (the mean cached tokens per sequence)")
    if (phase == "generate" or arrivals == "closed_loop") and out_tok < 1:
        raise _err(source, where("output_tokens"), c.get("output_tokens"),
                   f"phase {phase} with arrivals {arrivals} needs output_tokens >= 1")
    w, kv = _dtype(c.get("dtype") or "bf16/bf16", source, where("dtype"))
    return StepRow(model, gpu, int(tp), phase, batch, prompt, context, measured, out_tok, arrivals, w, kv,
                   line, dict(c))


def _number(text: str, source: str, where: str, domain: Domain, *, integer: bool = False) -> float:
    if not text:
        raise _err(source, where, text, "is missing; every row needs it")
    try:
        v = float(text)
    except ValueError:
        raise _err(source, where, text, "must be a number") from None
    if not math.isfinite(v):
        raise _err(source, where, text, "must be a finite number")
    if not domain.contains(v) or (integer and v != math.floor(v)):
        raise _err(source, where, text, domain.refusal(integer))
    return v


def _dtype(text: str, source: str, where: str) -> tuple[float, float]:
    parts = [p.strip().lower() for p in text.split("/")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or any(p not in DTYPE_BYTES for p in parts):
        raise _err(source, where, text,
                   f"must be WEIGHTS/KV dtypes from {', '.join(DTYPE_BYTES)}, e.g. bf16/bf16 or fp8/fp8")
    return DTYPE_BYTES[parts[0]], DTYPE_BYTES[parts[1]]


def read_rows(path: str | Path) -> list[StepRow]:
    """Read and check a profile CSV (module docstring)."""
    source = str(path)
    try:
        text = _read_text(path)
    except InputFileError as exc:
        raise _err(source, "<file>", source, exc.reason) from None
    return parse_rows(text, source)


# --------------------------------------------------------------------------- the estimate


def step_params(model: Model, gpu: Gpu, tp: int, weight_bytes: float, *, eta_bw: float = rl.ETA_BW,
                eta_flops: float = rl.ETA_FLOPS, alpha: float | None = None,
                t_overhead: float = rl.T_OVERHEAD_S, t_decode_overhead: float | None = None) -> rl.StepParams:
    """The roofline's `StepParams` for `model` on `tp` x `gpu` with weights of `weight_bytes`
    per parameter. GEMMs run in FP8 (and use `fp8_dense_flops`) when the weights are 1 byte
    and the GPU has FP8 tensor cores; otherwise at the bf16 rate (A100 has no FP8: FP8
    weights there are converted and multiplied at 16 bits). `alpha` defaults to the GPU's
    catalog `collective_latency_s`; `t_decode_overhead` None is `t_overhead`."""
    fp8 = weight_bytes <= 1.0 and gpu.fp8_dense_flops is not None
    return rl.StepParams(
        weights_dense_bytes=model.dense_params * weight_bytes,
        expert_bytes=model.expert_params * weight_bytes,
        n_experts=float(model.n_experts),
        k=float(model.experts_per_token),
        active_params=model.active_params,
        n_layers=float(model.n_layers),
        hidden=float(model.hidden),
        gpus=float(tp),
        hbm_bw=gpu.hbm_bandwidth_bytes_per_s,
        flops=(gpu.fp8_dense_flops or gpu.bf16_dense_flops) if fp8 else gpu.bf16_dense_flops,
        link_bw=gpu.interconnect_bytes_per_s or rl.PCIE_LINK_BYTES_PER_S,
        alpha=alpha if alpha is not None else (
            gpu.collective_latency_s if gpu.collective_latency_s is not None else rl.PCIE_ALPHA_S),
        eta_bw=eta_bw, eta_flops=eta_flops, t_overhead=t_overhead,
        t_decode_overhead=t_overhead if t_decode_overhead is None else t_decode_overhead,
    )


def _steps(row: StepRow, model: Model) -> tuple[list[rl.Work], list[float]]:
    """The steps a row's figure spans, and how many times each counts."""
    kvb = model.kv_bytes_per_token(row.kv_bytes)
    width = float(model.n_heads * model.head_dim)
    nl = float(model.n_layers)
    if row.phase == "prefill":
        return [rl.prefill_work(row.batch, row.prompt_tokens, kvb, width, nl)], [1.0]
    if row.phase == "decode":
        w = rl.decode_work(row.batch, row.context_tokens, kvb, width, nl)
        if row.arrivals == "closed_loop":
            # Each of the other batch - 1 requests finishes once in output_tokens steps and
            # is replaced at once, so f = (batch - 1) / output_tokens prompts are admitted
            # per step. Engines prefill a whole prompt in the step that admits it: a share
            # f of steps (f <= 1) carries one prompt besides the decode tokens; for f > 1
            # every step carries f prompts.
            f = (row.batch - 1.0) / row.output_tokens
            prompt = rl.prefill_work(1.0, row.prompt_tokens, kvb, width, nl)
            mixed = rl.add_work(w, rl.scale_work(prompt, max(f, 1.0)))
            return [w, mixed], [1.0 - min(f, 1.0), min(f, 1.0)]
        return [w], [1.0]
    steps = [rl.prefill_work(row.batch, row.prompt_tokens, kvb, width, nl)]
    steps += [rl.decode_work(row.batch, row.prompt_tokens + i, kvb, width, nl)
              for i in range(int(row.output_tokens) - 1)]
    return steps, [1.0] * len(steps)


@dataclass(frozen=True)
class _Batch:
    """Every step of a set of rows, as flat float64 arrays, with the row each belongs to."""

    n_tok: np.ndarray
    kv: np.ndarray
    attn: np.ndarray
    prompt: np.ndarray  # 1 where the step carries prompt tokens
    weight: np.ndarray
    row: np.ndarray
    params: rl.StepParams  # each field an array over steps
    n_rows: int


def _batch(rows: Sequence[StepRow], catalog: Catalog, source: str, *, alphas=None) -> _Batch:
    cols: dict[str, list[float]] = {k: [] for k in ("n_tok", "kv", "attn", "prompt", "weight", "row")}
    pcols: dict[str, list[float]] = {f: [] for f in rl.StepParams._fields}
    for i, r in enumerate(rows):
        try:
            model = catalog.model(r.model, source=source, key=f"row {r.line}, column model")
            gpu = catalog.gpu(r.gpu, source=source, key=f"row {r.line}, column gpu")
        except CatalogError as exc:
            raise ProfileError(str(exc)) from None
        p = step_params(model, gpu, r.tensor_parallel, r.weight_bytes,
                        alpha=None if alphas is None else alphas[i])
        works, mult = _steps(r, model)
        for w, m in zip(works, mult):
            cols["n_tok"].append(w.n_tok)
            cols["kv"].append(w.kv_bytes)
            cols["attn"].append(w.attn_flops)
            cols["prompt"].append(float(w.prompt))
            cols["weight"].append(m)
            cols["row"].append(i)
            for f in rl.StepParams._fields:
                pcols[f].append(getattr(p, f))
    arr = {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}
    params = rl.StepParams(**{f: np.asarray(v, dtype=np.float64) for f, v in pcols.items()})
    return _Batch(arr["n_tok"], arr["kv"], arr["attn"], arr["prompt"], arr["weight"], arr["row"].astype(np.int64),
                  params, len(rows))


@jax.jit
def _step_seconds(n_tok, kv, attn, prompt, params):
    t, _ = rl.step_time(rl.Work(n_tok, kv, attn, prompt), params)
    return t


def _evaluate(b: _Batch, eta_bw, eta_flops, alpha, t_overhead=rl.T_OVERHEAD_S, t_decode_overhead=None):
    """Estimated ms per row, for efficiencies given per step (arrays) or as scalars;
    `t_decode_overhead` None is `t_overhead`."""
    shape = b.n_tok.shape
    t_dec = t_overhead if t_decode_overhead is None else t_decode_overhead
    p = b.params._replace(
        eta_bw=np.broadcast_to(np.asarray(eta_bw, dtype=np.float64), shape),
        eta_flops=np.broadcast_to(np.asarray(eta_flops, dtype=np.float64), shape),
        alpha=b.params.alpha if alpha is None else np.broadcast_to(np.asarray(alpha, dtype=np.float64), shape),
        t_overhead=np.broadcast_to(np.asarray(t_overhead, dtype=np.float64), shape),
        t_decode_overhead=np.broadcast_to(np.asarray(t_dec, dtype=np.float64), shape),
    )
    t = _step_seconds(jnp.asarray(b.n_tok), jnp.asarray(b.kv), jnp.asarray(b.attn), jnp.asarray(b.prompt), p)
    per_row = np.zeros(b.n_rows)
    np.add.at(per_row, b.row, np.asarray(t) * b.weight)
    return per_row * 1e3


@jax.jit
def _parts(n_tok, kv, attn, params):
    _, parts = rl.step_time(rl.Work(n_tok, kv, attn), params)
    return parts.t_mem, parts.t_compute, parts.t_comm


def _step_parts(b: _Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each step's (t_mem, t_compute, t_comm) seconds at eta_bw = eta_flops = 1, for fits
    that scale them by the efficiencies outside JAX (`sweep.grid.efficiency_fit`)."""
    ones = np.ones_like(b.n_tok)
    p = b.params._replace(eta_bw=ones, eta_flops=ones, t_overhead=np.zeros_like(b.n_tok),
                          t_decode_overhead=np.zeros_like(b.n_tok))
    out = _parts(jnp.asarray(b.n_tok), jnp.asarray(b.kv), jnp.asarray(b.attn), p)
    return tuple(np.asarray(a, dtype=np.float64) for a in out)  # type: ignore[return-value]


def estimate_ms(rows: Sequence[StepRow], catalog: Catalog | None = None, *, eta_bw: float = rl.ETA_BW,
                eta_flops: float = rl.ETA_FLOPS, alpha: float | None = None,
                t_overhead: float = rl.T_OVERHEAD_S, t_decode_overhead: float | None = None,
                source: str = "<rows>") -> np.ndarray:
    """The roofline's estimate (ms) of each row's figure at the given efficiencies (default:
    the documented defaults; `alpha` None = each GPU's catalog collective latency;
    `t_decode_overhead` None = `t_overhead`, one overhead for every step)."""
    catalog = packaged_catalog() if catalog is None else catalog
    b = _batch(rows, catalog, source)
    return _evaluate(b, eta_bw, eta_flops, alpha, t_overhead, t_decode_overhead)


# --------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class CalibrationFit:
    """One (model, gpu, tensor_parallel) group's fitted efficiencies and residuals.

    `*_se` are standard errors from the Jacobian at the optimum (s^2 (J^T J)^-1 with s^2
    the residual variance), None where the parameter is not identified by these rows (no
    row is bound by that term, or it sits on a bound, or rows <= parameters). `residuals`
    are estimate / measured - 1 per row, in input order."""

    model: str
    gpu: str
    tensor_parallel: int
    eta_bw: float
    eta_flops: float
    alpha_s: float
    eta_bw_se: float | None
    eta_flops_se: float | None
    alpha_se: float | None
    n: int
    lines: tuple[int, ...]
    measured_ms: tuple[float, ...]
    fitted_ms: tuple[float, ...]
    residuals: tuple[float, ...]
    source: str = "<rows>"

    @property
    def rms_rel(self) -> float:
        r = np.asarray(self.residuals)
        return float(np.sqrt(np.mean(r * r)))

    @property
    def overlay_name(self) -> str:
        return f"{self.gpu}-{self.model}-tp{self.tensor_parallel}"


def calibrate(rows: Sequence[StepRow], catalog: Catalog | None = None, *,
              source: str = "<rows>") -> list[CalibrationFit]:
    """Fit eta_bw, eta_flops (in (0, 1]) and alpha (>= 0, tensor_parallel > 1 only) per
    (model, gpu, tensor_parallel) group by least squares on relative residuals."""
    from scipy.optimize import least_squares

    catalog = packaged_catalog() if catalog is None else catalog
    rows = list(rows)
    if not rows:
        raise _err(source, "rows", [], "no rows to calibrate from")
    groups: dict[tuple[str, str, int], list[StepRow]] = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r)
    fits = []
    for (model, gpu, tp), grp in groups.items():
        b = _batch(grp, catalog, source)
        meas = np.asarray([r.measured_ms for r in grp])
        fit_alpha = tp > 1
        alpha0 = catalog.gpu(gpu).collective_latency_s or 0.0

        def unpack(x, fit_alpha=fit_alpha, alpha0=alpha0):
            return x[0], x[1], (x[2] if fit_alpha else alpha0)

        def resid(x, b=b, meas=meas, unpack=unpack):
            eb, ef, a = unpack(x)
            est = _evaluate(b, eb, ef, a)
            return est / meas - 1.0

        x0 = [rl.ETA_BW, rl.ETA_FLOPS] + ([min(alpha0, ALPHA_MAX_S)] if fit_alpha else [])
        lo = [1e-3, 1e-3] + ([0.0] if fit_alpha else [])
        hi = [1.0, 1.0] + ([ALPHA_MAX_S] if fit_alpha else [])
        sol = least_squares(resid, x0, bounds=(lo, hi), x_scale=[0.1, 0.1] + ([1e-5] if fit_alpha else []),
                            diff_step=1e-6, xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=400)
        ses = _standard_errors(sol, lo, hi)
        eb, ef, a = unpack(sol.x)
        est = _evaluate(b, eb, ef, a)
        _check_finite(source, (model, gpu, tp), [eb, ef, a, *(x for x in ses if x is not None), *est])
        fits.append(CalibrationFit(
            model, gpu, tp, float(eb), float(ef), float(a), ses[0], ses[1], ses[2] if fit_alpha else None,
            len(grp), tuple(r.line for r in grp), tuple(float(m) for m in meas),
            tuple(float(e) for e in est), tuple(float(e / m - 1.0) for e, m in zip(est, meas)), source))
    return fits


def _check_finite(source: str, group: tuple[str, str, int], values: Sequence[float]) -> None:
    """A fit whose efficiencies, latency, standard errors or estimates are not all finite is
    refused (in the columns' domains none is; this is the last guard before the overlay)."""
    if not all(math.isfinite(float(v)) for v in values):
        raise _err(source, "fit", "/".join(map(str, group)), "the fit is not a finite number; check the measurements")


def _standard_errors(sol, lo, hi) -> list[float | None]:
    J = np.asarray(sol.jac)
    n, k = J.shape
    out: list[float | None] = [None] * k
    col_norm = np.linalg.norm(J, axis=0)
    free = [j for j in range(k) if col_norm[j] > 1e-9 * max(1.0, col_norm.max())
            and sol.active_mask[j] == 0]
    dof = n - len(free)
    if not free or dof < 1:
        return out
    Jf = J[:, free]
    jtj = Jf.T @ Jf
    if np.linalg.cond(jtj) > 1e12:
        return out
    s2 = float(np.sum(sol.fun ** 2)) / dof
    cov = s2 * np.linalg.inv(jtj)
    for i, j in enumerate(free):
        out[j] = float(np.sqrt(max(cov[i, i], 0.0)))
    return out


# --------------------------------------------------------------------------- the overlay


def overlay_text(fit: CalibrationFit, catalog: Catalog) -> str:
    """The TOML of one calibrated GPU entry: the base GPU's figures plus the fit."""
    g = catalog.gpu(fit.gpu)
    fields: dict[str, object] = {
        "description": f"{g.name} calibrated for {fit.model} at tensor parallel {fit.tensor_parallel} "
                       f"by sweep calibrate ({fit.n} rows of {Path(fit.source).name}, RMS relative residual "
                       f"{fit.rms_rel:.3f})",
        "hbm_bytes": g.hbm_bytes,
        "hbm_bandwidth_bytes_per_s": g.hbm_bandwidth_bytes_per_s,
        "bf16_dense_flops": g.bf16_dense_flops,
        "fp8_dense_flops": g.fp8_dense_flops,
        "interconnect_bytes_per_s": g.interconnect_bytes_per_s,
        "collective_latency_s": fit.alpha_s,
        "eta_bw": fit.eta_bw,
        "eta_flops": fit.eta_flops,
        "usd_per_gpu_hour": g.usd_per_gpu_hour,
        "price_date": g.price_date,
        "price_note": g.price_note,
    }
    lines = [(f"# Written by `sweep calibrate` from {fit.source}; plan on it with "
              f'gpu = "{fit.overlay_name}" and --catalog <this folder>.')]
    for k, v in fields.items():
        if v is None or v == "":
            continue
        lines.append(f"{k} = {_toml_value(v)}")
    lines.append("")
    lines.append("[source]")
    where = f"sweep calibrate, {fit.source}, rows {', '.join(str(x) for x in fit.lines)}"
    for k in ("collective_latency_s", "eta_bw", "eta_flops"):
        lines.append(f'{k} = {_toml_value(f"fitted: {where}")}')
    for k in ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "bf16_dense_flops", "fp8_dense_flops",
              "interconnect_bytes_per_s", "usd_per_gpu_hour"):
        if k in g.source and fields.get(k) is not None:
            lines.append(f"{k} = {_toml_value(g.source[k])}")
    return "\n".join(lines) + "\n"


def _toml_value(v: object) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(float(v)) if isinstance(v, float) else repr(v)


def write_overlay(fits: Iterable[CalibrationFit], folder: str | Path,
                  catalog: Catalog | None = None) -> list[Path]:
    """Write `folder/gpus/<gpu>-<model>-tp<g>.toml`, one per fit; return the paths."""
    catalog = packaged_catalog() if catalog is None else catalog
    gdir = Path(folder) / "gpus"
    gdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fit in fits:
        path = gdir / f"{fit.overlay_name}.toml"
        path.write_text(overlay_text(fit, catalog), encoding="utf-8")
        paths.append(path)
    return paths
