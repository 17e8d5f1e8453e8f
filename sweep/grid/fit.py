"""Every profile shape behind one entry (`sweep fit FILE`, `[profile] file = ...`): the CSV
header names the shape.

| shape | header | fits | module |
|---|---|---|---|
| service | `batch_size,latency_ms` | T_svc(B) = T_fixed + t_req B (dynamic serving) | `sweep.grid.profile` |
| step | `n_tokens,n_ctx,step_ms` | T_step = t_fixed + t_token n_tok + t_ctx n_ctx (continuous) | \
`sweep.grid.step_fit` |
| request | `concurrency,prompt_tokens,output_tokens,ttft_ms,tpot_ms` | the same three coefficients | \
`sweep.grid.step_fit` |

A serving model's `profile_kind` says which it accepts: "service" (the dynamic batcher's
models) or "step" (continuous serving: step or request).

A file whose text is JSON is a serving benchmark's own result file (vLLM `vllm bench serve
--save-result`, SGLang `bench_serving` JSONL, GenAI-Perf's profile export): its runs are
request rows, closed or open loop (`sweep.grid.bench_results`).
"""

from __future__ import annotations

from pathlib import Path

from sweep.errors import ProfileError
from sweep.grid import bench_results, profile, step_fit
from sweep.grid.files import n_cells
from sweep.grid.profile import Fit
from sweep.grid.step_fit import REQUEST_COLUMNS, STEP_COLUMNS, StepFit

SHAPES: dict[str, tuple[str, ...]] = {
    "service": profile.COLUMNS,
    "step": STEP_COLUMNS,
    "request": REQUEST_COLUMNS,
}
#: Columns of which a header needs at least one (a benchmark may print only TPOT).
OPTIONAL: dict[str, tuple[str, ...]] = {"request": ("ttft_ms", "tpot_ms")}
#: The shapes each model family accepts.
KINDS: dict[str, tuple[str, ...]] = {"service": ("service",), "step": ("step", "request")}
#: The [grid] keys a fit of each kind gives (a grid may not give them too).
FILLS: dict[str, tuple[str, ...]] = {"service": ("t_fixed_ms", "t_req_ms"), "step": step_fit.COEFFS}


def detect(text: str, source: str, kind: str | None = None) -> str:
    """The shape whose columns the header names (a model's `kind` limits the choice)."""
    allowed = KINDS[kind] if kind is not None else tuple(SHAPES)
    found = step_fit.read_header(text)
    header = set(found[0]) if found else set()
    line = found[1] if found else 1
    for shape in allowed:
        if _names(shape, header):
            return shape
    wanted = " or ".join(repr(",".join(SHAPES[s])) for s in allowed)
    if found is None:
        raise ProfileError(f"{source}: row 1 (header) = '': the file is empty; expected a header {wanted} and rows")
    shown = n_cells(len(found[0]))  # the header's size, never its text (the file may not be a profile at all)
    other = [s for s in SHAPES if s not in allowed and _names(s, header)]
    if other:
        family = "the dynamic batcher" if other[0] == "service" else "continuous serving"
        why = f"is a {other[0]} profile, which fits {family}; this grid needs {wanted}"
    else:  # the allowed shape the header comes closest to: name what it lacks
        near = max(allowed, key=lambda s: len(set(SHAPES[s]) & header))
        missing = [c for c in SHAPES[near] if c not in header and c not in OPTIONAL.get(near, ())]
        missing = missing or list(OPTIONAL[near][:1])
        why = (f"the header must name column {missing[0]!r} (a {near} profile: {','.join(SHAPES[near])})"
               if header & set(SHAPES[near]) else f"the header must name the columns {wanted}")
    raise ProfileError(f"{source}: row {line} (header) = {shown!r}: {why}")


def _names(shape: str, header: set[str]) -> bool:
    """Does the header name the shape's columns (an optional pair: at least one of them)?"""
    optional = OPTIONAL.get(shape, ())
    required = set(SHAPES[shape]) - set(optional)
    return required <= header and (not optional or bool(header & set(optional)))


def fit_text(text: str, source: str = "<profile>", kind: str | None = None) -> Fit | StepFit:
    if bench_results.is_result_text(text):
        if kind is not None and "request" not in KINDS[kind]:
            raise ProfileError(f"{source}: <file> = 'a serving benchmark result': it fits continuous serving's step "
                               "time; this grid needs a service profile 'batch_size,latency_ms'")
        return bench_results.fit_runs(bench_results.read_runs(text, source), source)
    shape = detect(text, source, kind)
    if shape == "service":
        rows, numbers = profile.parse_profile(text, source)
        return profile.fit_rows(rows, source=source, row_numbers=numbers)
    if shape == "step":
        return step_fit.parse_steps(text, source)
    return step_fit.parse_requests(text, source)


def fit_file(path: str | Path, kind: str | None = None) -> Fit | StepFit:
    """Read a profile CSV of any shape (or one `kind` accepts) and fit it."""
    return fit_text(step_fit.read_text(path), str(path), kind)
