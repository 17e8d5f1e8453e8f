"""Serving benchmarks' own result files, read as they are written, and the step time fitted
to them (`sweep fit RESULT.json ...`, `[profile] file = "RESULT.jsonl"` in a continuous grid).

Three tools, recognised by their field names (one run per JSON object; a file holds one
object, or one per line):

| tool | file | fields read |
|---|---|---|
| vLLM `vllm bench serve --save-result` (also `benchmarks/benchmark_serving.py`) | JSON | \
`request_rate` (a number or "inf"), `max_concurrency` (null or an int), `completed`, \
`total_input_tokens`, `total_output_tokens`, `request_throughput`, `mean_ttft_ms`, \
`mean_tpot_ms`, `mean_e2el_ms` |
| SGLang `python -m sglang.bench_serving --output-file` | JSONL, one run a line | the same \
names, `mean_e2e_latency_ms` for the end-to-end mean, and `concurrency` (the mean \
concurrency it measured) where present |
| GenAI-Perf / AIPerf `profile_export_genai_perf.json`, `profile_export_aiperf.json` | JSON | \
`time_to_first_token`, `inter_token_latency`, `request_latency`, `input_sequence_length`, \
`output_sequence_length`, `request_throughput` (each `{"avg": ..., "unit": ...}`), and the \
load from `input_config` (`concurrency` or `request_rate`, at any depth) |

Each run is one row of the request shape of `sweep.grid.step_fit`: its mean prompt and
output lengths (total tokens over completed requests), mean TTFT and mean TPOT, and its load:

- **closed loop** (`--max-concurrency c` with an unlimited rate; GenAI-Perf's
  `--concurrency c`; or a finite rate whose mean concurrency reached the cap): the
  equations of `step_fit.closed_loop_steps` at concurrency c.
- **open loop** (a finite `--request-rate`): the other running sequences a request sees are
  taken from Little's law, L = throughput x mean E2E (Poisson arrivals keep the running count
  Poisson, so a running sequence sees L others on average), which gives the same decode step
  as a closed loop of L + 1 clients. A prompt arrives while a step is running with
  probability u = 1 - exp(-L) and waits for its residual; its prefill step also carries the
  prompts that arrived meanwhile. Both read the length-biased step,
  S = E[T^2] / E[T] = TPOT + lambda (t_token P)^2 (TPOT measured; the variance of a step is
  that of the Poisson number of prompts in it), so

      TTFT = u S / 2 + T_step(n_tok = P + L (1 - 1/O) + u lambda P S, n_ctx = P + d_ctx)

  with d_ctx = L (P + (O - 1) / 2) as in the closed loop. S depends on t_token, so the fit
  iterates (the correction is refitted until t_token moves by less than 1e-9 relative).
  Against an open-loop simulation of the scheduler (whole prompts in one step, no cap,
  output lengths uniform in [O/2, 3O/2]) both means agree within 3%
  (tests/test_grid_bench_results.py).

What it assumes, like the closed-loop rows: every request is admitted as it arrives (the
server's cap and KV capacity do not bind: no queueing inside TTFT), a prompt is prefilled in
one step (P <= the token budget), and lengths that vary little (the variance uses the mean
prompt). A burst (an unlimited rate with no concurrency cap: every prompt at once) has no
steady state and is refused, as is a run with no completed request.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sweep.errors import profile_error as _err
from sweep.grid import step_fit
from sweep.grid.step_fit import StepFit, closed_loop_steps

TOOLS = ("vllm", "sglang", "genai-perf")
#: How close (requests) a finite-rate run's mean concurrency must come to its cap to be read
#: as a closed loop at the cap.
AT_CAP = 0.5
#: The open-loop correction's fixed point stops when t_token moves by less than this (relative).
TOLERANCE = 1e-9
MAX_ITERATIONS = 50
_UNITS_MS = {"ms": 1.0, "s": 1e3, "sec": 1e3, "us": 1e-3, "ns": 1e-6}


@dataclass(frozen=True)
class BenchRun:
    """One benchmark run read from a result file: its load and the means the fit uses."""

    tool: str  # vllm | sglang | genai-perf
    where: str  # the file, and its line for JSONL
    workload: str  # closed | open
    concurrency: float  # closed: the clients; open: 1 + L (the equivalent closed loop's decode step)
    rate_rps: float  # open: the measured request throughput; closed: inf
    mean_concurrency: float  # L, requests in the server on average (Little's law)
    prompt_tokens: float
    output_tokens: float
    ttft_ms: float
    tpot_ms: float  # NaN: the run has no TPOT (one output token)
    completed: int

    def label(self) -> str:
        load = (f"concurrency {self.concurrency:g}" if self.workload == "closed"
                else f"{self.rate_rps:.4g} req/s")
        return f"{self.where} ({self.tool}, {load})"


# --------------------------------------------------------------------------- reading


def is_result_text(text: str) -> bool:
    """Does the text look like JSON (a benchmark result) rather than a CSV profile?"""
    return text.lstrip().startswith("{")


def read_runs(text: str, source: str) -> list[BenchRun]:
    """Every run in a result file's text: one JSON object, or one per line (JSONL)."""
    objects = list(_objects(text, source))
    if not objects:
        raise _err(source, "<file>", "", "holds no benchmark result (an empty file)")
    return [_run(obj, where) for obj, where in objects]


def _objects(text: str, source: str) -> Iterator[tuple[dict[str, Any], str]]:
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        yield whole, source
        return
    if whole is not None:
        raise _err(source, "<file>", type(whole).__name__, "must hold a JSON object (one benchmark run) or one "
                                                            "object per line")
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{line_no}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise _err(source, f"line {line_no}", f"column {getattr(exc, 'colno', '?')}",
                       "is not JSON: a result file holds one JSON object, or one per line (SGLang's JSONL)") from None
        if not isinstance(obj, dict):
            raise _err(source, f"line {line_no}", type(obj).__name__, "must be a JSON object (one benchmark run)")
        yield obj, where


def _tool(obj: Mapping[str, Any]) -> str | None:
    ttft = obj.get("time_to_first_token")
    if isinstance(ttft, Mapping) and "avg" in ttft:
        return "genai-perf"
    if "mean_ttft_ms" in obj and "mean_e2e_latency_ms" in obj:
        return "sglang"
    if "mean_ttft_ms" in obj and ("mean_e2el_ms" in obj or "max_concurrency" in obj):
        return "vllm"
    return None


def _run(obj: Mapping[str, Any], where: str) -> BenchRun:
    tool = _tool(obj)
    if tool is None:
        raise _err(where, "<fields>", f"{len(obj)} fields",
                   "is not a benchmark result this reads: expected vLLM's `vllm bench serve --save-result` JSON "
                   "(mean_ttft_ms, mean_e2el_ms), SGLang's bench_serving JSONL (mean_e2e_latency_ms) or "
                   "GenAI-Perf's profile_export_genai_perf.json (time_to_first_token.avg)")
    if tool == "genai-perf":
        return _genai_perf(obj, where)
    return _vllm_like(obj, where, tool)


def _number(obj: Mapping[str, Any], key: str, where: str, *, lo: float = 0.0, lo_open: bool = False,
            optional: bool = False) -> float:
    if key not in obj or obj[key] is None:
        if optional:
            return math.nan
        raise _err(where, key, "missing", "the benchmark result must have it")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _err(where, key, str(v)[:40], "must be a number")
    v = float(v)
    if not math.isfinite(v) or v < lo or (lo_open and v == lo):
        raise _err(where, key, v, f"must be a finite number {'>' if lo_open else '>='} {lo:g}")
    return v


def _rate(value: Any, where: str, key: str) -> float:
    """A request rate: a number, "inf" (vLLM writes the string) or Infinity (SGLang's float)."""
    if value is None:
        return math.inf
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)) or float(value) <= 0:
        raise _err(where, key, str(value)[:40], 'must be a positive number or "inf"')
    return float(value)


def _vllm_like(obj: Mapping[str, Any], where: str, tool: str) -> BenchRun:
    completed = _number(obj, "completed", where)
    if completed < 1:
        raise _err(where, "completed", int(completed), "no request completed: the run measured nothing")
    prompt = _number(obj, "total_input_tokens", where, lo_open=True) / completed
    output = _number(obj, "total_output_tokens", where, lo_open=True) / completed
    ttft = _number(obj, "mean_ttft_ms", where)
    tpot = _number(obj, "mean_tpot_ms", where, optional=True)
    e2e_key = "mean_e2e_latency_ms" if tool == "sglang" else "mean_e2el_ms"
    e2e = _number(obj, e2e_key, where, optional=True)
    throughput = _number(obj, "request_throughput", where, lo_open=True)
    measured = _number(obj, "concurrency", where, optional=True) if tool == "sglang" else math.nan
    cap = obj.get("max_concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise _err(where, "max_concurrency", str(cap)[:40], "must be null or a positive integer")
    rate = _rate(obj.get("request_rate"), where, "request_rate")
    return _classify(tool, where, rate, cap, throughput, e2e, measured, prompt, output, ttft, tpot, int(completed))


def _stat(obj: Mapping[str, Any], key: str, where: str, *, time: bool, optional: bool = False) -> float:
    """GenAI-Perf's `{"avg": ..., "unit": ...}`, in ms for a time."""
    entry = obj.get(key)
    if not isinstance(entry, Mapping) or entry.get("avg") is None:
        if optional:
            return math.nan
        raise _err(where, f"{key}.avg", "missing", "the benchmark result must have it")
    v = _number(entry, "avg", where + f" {key}")
    if time:
        unit = str(entry.get("unit", "ms")).strip().lower()
        if unit not in _UNITS_MS:
            raise _err(where, f"{key}.unit", unit[:20], f"must be one of {', '.join(_UNITS_MS)}")
        v *= _UNITS_MS[unit]
    return v


def _find(tree: Any, key: str, depth: int = 0) -> Any:
    """The value of `key` nearest the top of a nested input_config (None: absent)."""
    if depth > 8 or not isinstance(tree, Mapping):
        return None
    if tree.get(key) is not None:
        return tree[key]
    for value in tree.values():
        found = _find(value, key, depth + 1)
        if found is not None:
            return found
    return None


def _genai_perf(obj: Mapping[str, Any], where: str) -> BenchRun:
    prompt = _stat(obj, "input_sequence_length", where, time=False)
    output = _stat(obj, "output_sequence_length", where, time=False)
    ttft = _stat(obj, "time_to_first_token", where, time=True)
    tpot = _stat(obj, "inter_token_latency", where, time=True, optional=True)
    e2e = _stat(obj, "request_latency", where, time=True, optional=True)
    throughput = _stat(obj, "request_throughput", where, time=False)
    count = obj.get("request_count")
    completed = _number(count, "avg", where + " request_count") if isinstance(count, Mapping) else (
        _number(obj, "request_count", where, optional=True))
    config = obj.get("input_config")
    concurrency, rate = _find(config, "concurrency"), _find(config, "request_rate")
    if concurrency is None and rate is None:
        raise _err(where, "input_config", "no concurrency or request_rate",
                   "the result must say its load (GenAI-Perf writes --concurrency or --request-rate there)")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise _err(where, "input_config concurrency", str(concurrency)[:40], "must be a positive integer")
    if prompt <= 0 or output <= 0 or throughput <= 0:
        raise _err(where, "input_sequence_length, output_sequence_length, request_throughput",
                   f"{prompt:g}, {output:g}, {throughput:g}", "must be above 0")
    r = _rate(rate, where, "input_config request_rate") if rate is not None else math.inf
    return _classify("genai-perf", where, r, concurrency, throughput, e2e, math.nan, prompt, output, ttft, tpot,
                     int(completed) if math.isfinite(completed) else 0)


def _classify(tool: str, where: str, rate: float, cap: int | None, throughput: float, e2e_ms: float,
              measured_l: float, prompt: float, output: float, ttft: float, tpot: float, completed: int) -> BenchRun:
    """Closed or open loop, and the concurrency its equations use."""
    little = throughput * e2e_ms / 1e3 if math.isfinite(e2e_ms) else math.nan
    mean_l = measured_l if math.isfinite(measured_l) else little
    if output < 2:
        tpot = math.nan  # one output token: no TPOT
    if math.isinf(rate):
        if cap is None:
            raise _err(where, "request_rate", "inf", "with no max_concurrency every prompt is sent at once: a burst "
                       "has no steady state to fit; rerun with --max-concurrency C or a finite --request-rate")
        return BenchRun(tool, where, "closed", float(cap), math.inf, mean_l, prompt, output, ttft, tpot, completed)
    if not math.isfinite(mean_l):
        raise _err(where, "mean_e2el_ms" if tool == "vllm" else "request_latency", "missing",
                   "an open-loop run needs its mean end-to-end latency (Little's law gives the running count)")
    if cap is not None and mean_l >= cap - AT_CAP:
        return BenchRun(tool, where, "closed", float(cap), math.inf, mean_l, prompt, output, ttft, tpot, completed)
    return BenchRun(tool, where, "open", 1.0 + mean_l, throughput, mean_l, prompt, output, ttft, tpot, completed)


def read_file(path: str | Path) -> list[BenchRun]:
    return read_runs(step_fit.read_text(path), str(path))


# --------------------------------------------------------------------------- the fit


def _check_domains(run: BenchRun) -> None:
    dom = step_fit.DOMAINS
    for key, value in (("prompt_tokens", run.prompt_tokens), ("output_tokens", run.output_tokens)):
        if not dom[key].contains(value):
            raise _err(run.where, key, value, f"must lie in {dom[key].text()}, as in [grid]")
    for key, value in (("ttft_ms", run.ttft_ms), ("tpot_ms", run.tpot_ms)):
        if not math.isnan(value) and not (step_fit.TIME.lo <= value <= step_fit.TIME.hi):
            raise _err(run.where, key, value, f"must lie in {step_fit.TIME.text()}")


def equations(runs: Sequence[BenchRun], t_token_ms: float) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The design rows (1, n_tok, n_ctx) and measured times of every run's TTFT and TPOT, the
    open-loop corrections taken at `t_token_ms` (module docstring)."""
    xs: list[tuple[float, float, float]] = []
    ys: list[float] = []
    labels: list[str] = []
    for run in runs:
        c, p, o = np.array([run.concurrency]), np.array([run.prompt_tokens]), np.array([run.output_tokens])
        s = {k: float(v[0]) for k, v in closed_loop_steps(c, p, o).items()}
        ttft_x, ttft_y = (1.0, s["ttft_tok"], s["ttft_ctx"]), run.ttft_ms
        if run.workload == "open":
            lam, big_l = run.rate_rps / 1e3, run.mean_concurrency  # per ms
            u = 1.0 - math.exp(-big_l)
            tpot = run.tpot_ms if not math.isnan(run.tpot_ms) else 0.0
            s_len = tpot + lam * (t_token_ms * run.prompt_tokens) ** 2
            ttft_x = (1.0, run.prompt_tokens + big_l * (1.0 - 1.0 / run.output_tokens)
                      + u * lam * run.prompt_tokens * s_len, s["ttft_ctx"])
            ttft_y = run.ttft_ms - u * s_len / 2.0
        xs.append(ttft_x)
        ys.append(ttft_y)
        labels.append(f"{run.label()} ttft")
        if not math.isnan(run.tpot_ms):
            xs.append((1.0, s["tpot_tok"], s["tpot_ctx"]))
            ys.append(run.tpot_ms)
            labels.append(f"{run.label()} tpot")
    return np.asarray(xs, dtype=np.float64).reshape(-1, 3), np.asarray(ys, dtype=np.float64), labels


def fit_runs(runs: Sequence[BenchRun], source: str) -> StepFit:
    """The step time fitted to benchmark runs (weighted least squares on relative residuals,
    as `step_fit.fit_requests`), iterating the open-loop correction to its fixed point."""
    for run in runs:
        _check_domains(run)
    t_token = 0.0
    fit: StepFit | None = None
    for _ in range(MAX_ITERATIONS):
        x, y, labels = equations(runs, t_token)
        if np.any(y <= 0):
            bad = labels[int(np.argmax(y <= 0))]
            raise _err(source, bad, "", "is shorter than the wait the open-loop model puts before the prefill "
                       "(the residual of the step in progress): are TTFT and TPOT from the same run?")
        w = 1.0 / np.maximum(y, 1e-3) ** 2
        fit = step_fit._solve("request", x, y, w, tuple(labels), len(runs), source,
                              "benchmark runs need TTFT and TPOT, or more than one prompt length, so that t_token "
                              "and t_ctx separate")
        if abs(fit.t_token_ms - t_token) <= TOLERANCE * max(abs(fit.t_token_ms), 1e-12):
            break
        t_token = fit.t_token_ms
    assert fit is not None
    # the residual table shows what was measured: add the open-loop wait back to both sides
    measured = [y for r in runs for y in ((r.ttft_ms,) if math.isnan(r.tpot_ms) else (r.ttft_ms, r.tpot_ms))]
    shift = [m - y for m, y in zip(measured, fit.measured_ms)]
    return replace(fit, measured_ms=tuple(measured), fitted_ms=tuple(f + d for f, d in zip(fit.fitted_ms, shift)))


def fit_paths(paths: Sequence[str | Path]) -> tuple[StepFit, list[BenchRun]]:
    """Read every result file and fit them together."""
    runs = [run for path in paths for run in read_file(path)]
    source = str(paths[0]) if len(paths) == 1 else f"{len(paths)} result files"
    return fit_runs(runs, source), runs
