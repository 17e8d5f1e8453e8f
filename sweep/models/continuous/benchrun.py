"""Finite benchmark runs of continuous batching: what `vllm bench serve` measures and prints.

A benchmark is not the steady state the grid predicts: it sends ``n_prompts`` requests (at a
Poisson rate, or all at once with ``--request-rate inf``), possibly under a concurrency
limit (``--max-concurrency``: a closed loop), and measures from the first request sent to
the last completion. It prints, over the completed requests:

* request throughput = completed / duration, output (and total) token throughput likewise;
* TTFT, TPOT and E2E per request (TPOT = (E2E - TTFT) / (O - 1) for O >= 2);
* ITL: *every* gap between consecutive tokens of a request, pooled over all requests (a
  request of O tokens contributes O - 1 gaps), with mean, median and percentiles (numpy's
  linear interpolation, as the benchmark computes them).

The reference scheduler records every token's time, and the gaps are read from them. The
JAX simulator records none; under the base scheduler of SPEC 10 a decoding sequence emits
one token at the end of every step from its first token to its last, so request ``j``'s
gaps are the durations of the steps that end in ``(first_j, finish_j]``: the per-token ITL
follows from the per-request first and last token times and the step log (start, duration).
`run_figures` computes one run's figures from those; `replicate` averages replications with
95% Student-t half-widths; `finite_run` runs replications of an open-loop finite run in the
JAX simulator (`sim.simulate_requests`). Closed loops (completion-driven arrivals) are
simulated by `sweep.testing.cb_reference.simulate(..., clients=)`, whose token times
`run_figures` reads (``token_s``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from sweep.models.continuous.sim import (
    CBSimSettings,
    CBSimulationError,
    replication_draws,
    simulate_requests,
    step_normals,
    student_t975,
)

__all__ = ["FIGURES", "METRICS", "finite_run", "itl_gaps", "itl_quantiles", "replicate", "run_figures"]

#: The per-request and per-token metrics, in the benchmark's order.
METRICS = ("ttft", "tpot", "itl", "e2e")
#: Throughput figures of one run.
FIGURES = ("completed", "duration_s", "request_rps", "output_tok_s", "total_tok_s")
#: Tolerance (s) when matching a token time to the step that emitted it (the simulator's event
#: times agree with a step log's sums to ~1e-14 relative).
_MATCH_S = 1e-9


def itl_gaps(first_s: ArrayLike, finish_s: ArrayLike, output: ArrayLike, step_start: ArrayLike,
             step_dur: ArrayLike) -> np.ndarray:
    """Every inter-token gap (s) of the requests given (those with O >= 2 and a finite first
    token): the durations of the steps ending in ``(first, finish]``, one per decode step.

    Raises `CBSimulationError` when the step log does not account for exactly ``O - 1`` steps
    of every such request (a log cut short, or a scheduler that does not emit one token per
    step)."""
    first, finish, out = (np.asarray(x, np.float64) for x in (first_s, finish_s, output))
    start, dur = np.asarray(step_start, np.float64), np.asarray(step_dur, np.float64)
    ends = start + dur
    keep = np.isfinite(first) & (out >= 2)
    if not np.any(keep):
        return np.empty(0)
    lo = np.searchsorted(ends, first[keep] + _MATCH_S, side="left")
    hi = np.searchsorted(ends, finish[keep] + _MATCH_S, side="left")
    if np.any(hi - lo != out[keep] - 1):
        j = int(np.argmax(hi - lo != out[keep] - 1))
        raise CBSimulationError(f"itl_gaps: request {int(np.flatnonzero(keep)[j])} has {int(hi[j] - lo[j])} steps "
                                f"between its first and last token in the step log, not O - 1 = "
                                f"{int(out[keep][j] - 1)}: the log must cover every step of the run")
    weight = np.zeros(ends.size + 1, np.int64)  # decoding requests per step: a difference array
    np.add.at(weight, lo, 1)
    np.add.at(weight, hi, -1)
    return np.repeat(dur, np.cumsum(weight[:-1]))


def itl_quantiles(quantiles: Sequence[float], *, step_mean: float, mean_running: float, rate_rps: float,
                  prompt_mean: float, max_batched_tokens: float, t_token: float, service_cv: float,
                  tpot_mean: float | None = None, t_fixed: float = 0.0, prefill_first: bool = False,
                  inversion: str = "bisection") -> list[float]:
    """The ``quantiles`` (s) of the per-token gap (ITL) law of `sweep.models.continuous.itl`, on
    the host: a token's gap is its step, with or without prompt work (``chunked``: the chunks of
    a Poisson number of prompts in the step; ``prefill_first``: the prompt steps that pause the
    decoder in between, which needs ``tpot_mean`` and ``t_fixed``). ``inversion``: ``"bisection"``
    (the law's CDF inverted) or ``"grid"`` (the grid column's one-part inversion,
    `itl.itl_quantile_fast`)."""
    from sweep.models.continuous.itl import itl_quantiles_fast_jit, itl_quantiles_jit

    if inversion not in ("bisection", "grid"):
        raise ValueError(f"itl_quantiles: inversion = {inversion!r}: 'bisection' or 'grid'")

    args = (step_mean, step_mean if tpot_mean is None else tpot_mean, mean_running, rate_rps, prompt_mean,
            max_batched_tokens, t_fixed, t_token, service_cv)
    fn = itl_quantiles_jit if inversion == "bisection" else itl_quantiles_fast_jit
    out = fn(np.asarray(quantiles, np.float64), *(np.float64(a) for a in args), prefill_first=bool(prefill_first))
    return [float(v) for v in np.asarray(out)]


def run_figures(arrival_s: ArrayLike, prompt: ArrayLike, output: ArrayLike, first_s: ArrayLike,
                finish_s: ArrayLike, step_start: ArrayLike | None = None, step_dur: ArrayLike | None = None,
                quantiles: Sequence[float] = (0.5, 0.99),
                token_s: Sequence[Sequence[float]] | None = None) -> dict[str, float]:
    """What one finite run prints (SI units): `FIGURES` (duration from the first request sent
    to the last completion; throughputs over it, the total counting prompt tokens), and for
    each metric of `METRICS` its ``{m}_mean`` and ``{m}_q{q}`` per quantile (numpy's linear
    interpolation). A request that was not admitted (``first_s`` infinite) does not count.
    ITL comes from each request's token times (``token_s``, the reference scheduler's, right
    under every engine variant), else from the step log (``step_start``, ``step_dur``;
    `itl_gaps`: one token per decoding sequence per step, the base scheduler); without
    either the ITL figures are absent. A metric with no value (no request of O >= 2) is
    ``+inf``."""
    a, p, o, first, finish = (np.asarray(x, np.float64) for x in (arrival_s, prompt, output, first_s, finish_s))
    done = np.isfinite(first) & np.isfinite(finish)
    duration = float(np.max(finish[done]) - np.min(a)) if np.any(done) else 0.0
    out: dict[str, float] = {"completed": float(np.sum(done)), "duration_s": duration}
    rate = 1.0 / duration if duration > 0.0 else math.inf
    out["request_rps"] = float(np.sum(done)) * rate if np.any(done) else 0.0
    out["output_tok_s"] = float(np.sum(o[done])) * rate if np.any(done) else 0.0
    out["total_tok_s"] = float(np.sum(o[done] + p[done])) * rate if np.any(done) else 0.0
    two = done & (o >= 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = (finish[two] - first[two]) / (o[two] - 1.0)
    values = {"ttft": first[done] - a[done], "tpot": tpot, "e2e": finish[done] - a[done]}
    if token_s is not None:
        gaps = [np.diff(np.asarray(token_s[int(j)], np.float64)) for j in np.flatnonzero(done)]
        values["itl"] = np.concatenate(gaps) if gaps else np.empty(0)
    elif step_start is not None and step_dur is not None:
        values["itl"] = itl_gaps(np.where(done, first, np.inf), finish, o, step_start, step_dur)
    for m in METRICS:
        if m not in values:
            continue
        v = values[m]
        out[f"{m}_mean"] = float(np.mean(v)) if v.size else math.inf
        for q in quantiles:
            out[f"{m}_q{q:g}"] = float(np.percentile(v, 100.0 * q)) if v.size else math.inf
    return out


def replicate(runs: Sequence[Mapping[str, float]]) -> dict[str, tuple[float, float]]:
    """Each figure of `run_figures` over replications: (mean, 95% Student-t half-width;
    ``+inf`` with one replication or where a replication has no finite value)."""
    if not runs:
        raise CBSimulationError("replicate: no replication")
    tq = student_t975(len(runs) - 1)
    out = {}
    for k in runs[0]:
        x = np.array([r[k] for r in runs], np.float64)
        if not np.all(np.isfinite(x)):
            out[k] = (math.inf, math.inf)
            continue
        hw = tq * float(np.std(x, ddof=1)) / math.sqrt(x.size) if x.size > 1 else math.inf
        out[k] = (float(np.mean(x)), hw)
    return out


def finite_run(n_prompts: int, rate_rps: float, *, prompt_mean: float, prompt_cv: float, output_mean: float,
               output_cv: float, cap: float, max_batched_tokens: float, kv_capacity_tokens: float,
               block_tokens: float, t_fixed: float, t_token: float, t_ctx: float, service_cv: float = 0.0,
               replications: int = 5, seed: int = 0, quantiles: Sequence[float] = (0.5, 0.99),
               itl: bool = True) -> dict[str, Any]:
    """Replications of a finite open-loop run in the JAX simulator: ``n_prompts`` arrivals,
    Poisson at ``rate_rps`` (``inf``: all at t = 0, like `vllm bench serve --request-rate
    inf`), lengths and step noise drawn as `simulate_continuous` draws them (scenario 0,
    replication r of ``CBSimSettings(seed=seed)``), then the drain; `run_figures` per
    replication and `replicate` over them: ``{figure: (mean, half-width)}``, and ``runs``, the
    per-replication figures. ``itl = True`` runs each replication a second time with a step
    log (the simulator's per-step record, whose cost grows with its length: seconds for
    ~20,000 steps) for the ITL figures; ``itl = False`` skips them."""
    if int(n_prompts) < 1 or int(replications) < 1:
        raise CBSimulationError(f"finite_run: n_prompts ({n_prompts}) and replications ({replications}) must be >= 1")
    if not (rate_rps > 0.0):
        raise CBSimulationError(f"finite_run: rate_rps = {rate_rps!r} must be > 0 (inf: all at once)")
    settings = CBSimSettings(seed=int(seed))
    runs = []
    for r in range(int(replications)):
        a, p, o = replication_draws(settings, 0, r, lam=rate_rps if math.isfinite(rate_rps) else 1.0,
                                    prompt_mean=prompt_mean, prompt_cv=prompt_cv, output_mean=output_mean,
                                    output_cv=output_cv, n=int(n_prompts))
        if not math.isfinite(rate_rps):
            a = np.zeros_like(a)
        # steps that emit no token carry a full budget of prompt tokens, the others emit at least one
        budget = max_batched_tokens if math.isfinite(max_batched_tokens) else float(np.sum(p))
        bound = int(np.sum(o) + math.ceil(np.sum(p) / max(budget, 1.0)) + 1)
        z = step_normals(settings, 0, r, 1 << bound.bit_length()) if service_cv > 0.0 else None
        kw: dict[str, Any] = dict(cap=cap, max_batched_tokens=max_batched_tokens, kv_capacity_tokens=kv_capacity_tokens,
                  block_tokens=block_tokens, t_fixed=t_fixed, t_token=t_token, t_ctx=t_ctx, service_cv=service_cv,
                  z=z)
        res = simulate_requests(a, p, o, **kw)
        if itl:  # the same run again with a step log just long enough (its cost grows with its length)
            res = simulate_requests(a, p, o, record_steps=1 << res["n_steps"].bit_length(), **kw)
        runs.append(run_figures(a, p, o, np.where(res["status"] == 0, res["first_s"], np.inf), res["finish_s"],
                                res.get("step_start"), res.get("step_dur"), quantiles))
    out: dict[str, Any] = dict(replicate(runs))
    out["runs"] = runs
    return out
