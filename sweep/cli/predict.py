"""`sweep predict-benchmark`: what `vllm bench serve` would print for one configuration.

The configuration (one replica: model, GPU, GPUs per replica, `max_num_seqs`,
`max_num_batched_tokens`, mean input and output lengths) comes from a finished run's point
(`RUN_DIR --point ID`) or from flags like `sweep ask`'s, which build a one-point
continuous-serving grid and evaluate it (`sweep.api.explain`): either way the step-time
coefficients, the KV capacity and the length laws are the grid's.

The benchmark: `--num-prompts` requests sent at `--request-rate` (Poisson; `inf`: all at
once), at most `--max-concurrency` in flight (the benchmark's semaphore: a request is sent
when it is due and a slot is free, so with `--request-rate inf` a closed loop of that many
clients), measured from the first request sent to the last completion. Two predictions:

* simulated: replications of that finite run through the reference scheduler
  (`sweep.testing.cb_reference`, which the JAX simulator matches request by request, with
  completion-driven arrivals for the concurrency limit), the same lengths and step noise the
  simulator draws; each figure is the mean over replications with its 95% Student-t
  half-width (the model's uncertainty), ITL pooled over every token gap
  (`sweep.models.continuous.benchrun`);
* analytic: the open-loop model (`analytic.cb_point`) at the request rate, or, where the
  concurrency limit binds, the closed loop of `closed.cb_closed` (mean value analysis); the
  duration is the prompts over the throughput plus one request's E2E (the drain).

`--measurement-interval MS` measures the run as GenAI-Perf does instead (its perf_analyzer in
time-windows mode, `measured_windows`): no prompt count; the load runs from t = 0 in windows of
1.2 x the interval, each window's requests are those whose last token arrives in it, and the
run stops at the first window after which the last three each hold a request and agree within
`--stability-percentage` in request throughput and mean latency (at most `--max-trials`
windows). The figures are those of every measured request, the throughput over the span from
the first send to the last completion among them.

`--calibrate-from FILE` first calibrates the configuration on a light-load run the user
measured (`vllm bench serve --save-result` JSON, SGLang `bench_serving` JSONL or GenAI-Perf's
profile export, read by `sweep.grid.bench_results`; the lightest run of the file): that run is
simulated as it ran (its load, its mean lengths), and `eta_bw` and `request_latency_ms` are
moved until its simulated mean TPOT and mean TTFT are the measured ones (`calibrate`, a fixed
point of `CAL_ITERATIONS` steps of `calibration_update`); the benchmark asked for is then
predicted with both.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sweep.cli.tools import eta_value, finite_number, int_at_least_one, request_latency_ms, seq_us
from sweep.errors import GridError

#: The engine variants the simulated run takes (`sweep.testing.cb_reference`'s names).
POLICIES = ("chunked", "prefill_first")
KV_ADMISSIONS = ("on_demand", "reserve")
#: The benchmark's figures as it prints them: (label, our figure key, unit scale).
METRIC_NAMES = {"ttft": ("TTFT", "Time to First Token"), "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
                "itl": ("ITL", "Inter-token Latency"), "e2e": ("E2EL", "End-to-end Latency")}
#: How many times a preempting run may draw its step noise again, doubling it each time
_NOISE_REDRAWS = 8
#: Replications of the finite run (the half-width's degrees of freedom: replications - 1).
REPLICATIONS = 5
#: GenAI-Perf's measurement (perf_analyzer's time-windows mode, inference_profiler.cc): a window
#: lasts this many times --measurement-interval (the profiler sleeps 1.2 x the interval), stability is
#: judged over the last `STABILITY_WINDOWS` windows, GenAI-Perf passes --stability-percentage 999 and
#: perf_analyzer stops after --max-trials 10 windows.
WINDOW_STRETCH = 1.2
STABILITY_WINDOWS = 3
STABILITY_PERCENTAGE = 999.0
MAX_TRIALS = 10
#: How many times a windowed run may double its prompts until it is still sending when the windows end
_WINDOW_DOUBLINGS = 12
#: The light-load calibration (`calibrate`): fixed-point steps, and at most this many of the
#: measured run's requests simulated (a light load's means settle within a few dozen)
CAL_ITERATIONS = 6
CAL_PROMPTS = 200


class PredictBenchmarkError(GridError):
    """A predict-benchmark argument or configuration is invalid."""


@dataclass(frozen=True)
class BenchConfig:
    """One replica's engine and workload, SI units (the arguments of the models)."""

    prompt_mean: float
    prompt_cv: float
    output_mean: float
    output_cv: float
    cap: float
    max_batched_tokens: float
    kv_capacity_tokens: float
    block_tokens: float
    t_fixed: float
    t_token: float
    t_ctx: float
    service_cv: float
    label: str
    #: the engine's scheduler (docs/continuous.md, "Engine variants"); defaults: vLLM V1's
    scheduler_policy: str = "chunked"
    scheduler_steps: int = 1
    kv_admission: str = "on_demand"
    #: the server's fixed latency per request outside the steps (s; the grid's request_latency_ms):
    #: on every TTFT and E2E, and in a closed loop part of each client's cycle
    request_latency: float = 0.0
    #: the step's compute-bound line (s; `roofline.compute_line`): the simulated run's step costs
    #: the larger of t_fixed + t_token n_tok + t_ctx n_ctx and t_fixed_compute + t_token_compute
    #: n_tok + t_ctx n_ctx; 0, 0: the first line alone (a point without a roofline)
    t_fixed_compute: float = 0.0
    t_token_compute: float = 0.0

    def kwargs(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("prompt_mean", "prompt_cv", "output_mean", "output_cv", "cap",
                                              "max_batched_tokens", "kv_capacity_tokens", "block_tokens", "t_fixed",
                                              "t_token", "t_ctx", "service_cv")}


def _num(row: Mapping[str, Any], key: str, source: str, *, none: float | None = None) -> float:
    v = row.get(key)
    if v is None:
        if none is not None:
            return none
        raise PredictBenchmarkError(source, key, None, "the point has no value here: predict-benchmark needs a "
                                                       "continuous-serving point (serving = \"continuous\")")
    return float(v)


def compute_line_of(row: Mapping[str, Any], catalog: Any) -> tuple[float, float]:
    """The point's compute-bound step line (`roofline.compute_line`, seconds): the replica's
    `roofline.StepParams` from its model, GPU, tensor-parallel degree, weight bytes and
    `eta_flops` with the catalog's figures and the efficiency table's cell (as the grid builds
    them); (0, 0) where the point has no roofline (given step coefficients: no `eta_flops`)."""
    from sweep.models.base import efficiency_figures, gpu_figures, model_figures
    from sweep.models.shared.roofline import compute_line, replica_params

    if row.get("eta_flops") is None or row.get("model") is None or row.get("gpu") is None:
        return 0.0, 0.0
    m, g = catalog.model(row["model"]), catalog.gpu(row["gpu"])
    tp = float(row["gpus_per_replica"])
    x = {**model_figures(m), **gpu_figures(g), **efficiency_figures(m, g, tp), "gpus_per_replica": tp,
         "weight_bytes_per_param": float(row["weight_bytes_per_param"])}
    t_fixed, t_token = compute_line(replica_params(x, x["gpu_eta_bw"], float(row["eta_flops"])))
    return float(t_fixed), float(t_token)


def config_from_row(row: Mapping[str, Any], block_tokens: float, source: str, catalog: Any) -> BenchConfig:
    """The configuration of a continuous-serving point's columns (NULL budget or KV: unbounded),
    with the step's compute-bound line from `catalog`'s figures (`compute_line_of`)."""
    f = {k: _num(row, k, source) for k in ("prompt_tokens", "output_tokens", "batch_size", "t_step_fixed_ms",
                                           "t_token_ms", "t_ctx_ms")}
    kv = _num(row, "kv_capacity_tokens", source, none=math.inf)
    if not (kv > 0.0):
        raise PredictBenchmarkError(source, "kv_capacity_tokens", kv, "the weights leave no KV cache on this "
                                                                      "configuration: nothing to benchmark")
    keys = ("model", "gpu", "gpus_per_replica", "batch_size", "max_batched_tokens")
    label = ", ".join(f"{k} {row[k]:g}" if isinstance(row[k], float) else f"{k} {row[k]}"
                      for k in keys if row.get(k) is not None)
    t_fixed_c, t_token_c = compute_line_of(row, catalog)
    return BenchConfig(
        prompt_mean=f["prompt_tokens"], prompt_cv=_num(row, "prompt_cv", source, none=0.0),
        output_mean=f["output_tokens"], output_cv=_num(row, "output_cv", source, none=0.0), cap=f["batch_size"],
        max_batched_tokens=_num(row, "max_batched_tokens", source, none=math.inf), kv_capacity_tokens=kv,
        block_tokens=block_tokens, t_fixed=f["t_step_fixed_ms"] * 1e-3, t_token=f["t_token_ms"] * 1e-3,
        t_ctx=f["t_ctx_ms"] * 1e-3, service_cv=_num(row, "service_cv", source, none=0.0), label=label,
        request_latency=_num(row, "request_latency_ms", source, none=0.0) * 1e-3,
        t_fixed_compute=t_fixed_c, t_token_compute=t_token_c)


def _block(spec: Any) -> float:
    return float(spec.options.block_tokens) if spec.options.kv_allocation == "paged" else 1.0


def config_from_run(run_dir: Path, point: int, catalog: Any) -> BenchConfig:
    """A finished run's point (its points/ row, else evaluated again)."""
    from sweep.cli.answers import RunFolder, run_grid_spec
    from sweep.cli.deploy import _row

    spec = run_grid_spec(run_dir, catalog)
    if not 0 <= point < spec.n_points:
        raise PredictBenchmarkError(str(run_dir), "--point", point,
                                    f"must lie in [0, {spec.n_points - 1}] (the run's point_id range)")
    from sweep.catalog import load_catalog

    return config_from_row(_row(RunFolder.open(run_dir, {}), spec, point), _block(spec), str(run_dir),
                           catalog if catalog is not None else load_catalog())


def config_from_flags(args: argparse.Namespace, catalog: Any, rate_rps: float) -> BenchConfig:
    """A one-point continuous grid from the flags (vLLM's defaults where a flag is absent),
    evaluated at `rate_rps` (the step coefficients of a roofline are linearised at the load)."""
    row, block = flags_row(args, catalog, rate_rps)
    return config_from_row(row, block, "sweep predict-benchmark", catalog)


def flags_row(args: argparse.Namespace, catalog: Any, rate_rps: float) -> tuple[Mapping[str, Any], float]:
    """The one-point grid of `config_from_flags`: its row (every column) and its KV block."""
    import tomllib

    from sweep.api import explain
    from sweep.cli.ask import RESERVE_FRACTION, _dtype_bytes, to_toml
    from sweep.grid.load import build

    _dtype_bytes(args.weights, "--weights")
    _dtype_bytes(args.kv_dtype, "--kv-dtype")
    grid: dict[str, Any] = {
        "model": [args.model], "gpu": [args.gpu], "gpus_per_replica": [args.tp], "arrival_rps": rate_rps,
        "replicas": [1], "prompt_tokens": args.input_len, "output_tokens": args.output_len,
        "prompt_cv": args.input_cv, "output_cv": args.output_cv, "batch_size": [args.max_num_seqs],
        "max_batched_tokens": [args.max_num_batched_tokens], "weight_bytes_per_param": args.weights.lower(),
        "kv_bytes_per_elem": args.kv_dtype.lower(), "t_seq_us": args.t_seq_us or 0.0,
        "request_latency_ms": args.request_latency_ms or 0.0,
        **({"eta_bw": args.eta_bw} if getattr(args, "eta_bw", None) is not None else {}),
        # a continuous grid needs an SLO; a benchmark asks none, so one that nothing misses (an hour)
        "ttft_slo_ms": 3.6e6,
    }
    doc = {"name": "predict-benchmark", "grid": grid,
           "options": {"serving": "continuous", "kv_allocation": "paged", "block_tokens": 16,
                       "reserve_fraction": RESERVE_FRACTION}}
    text = to_toml(doc)
    spec = build(tomllib.loads(text), source="sweep predict-benchmark", text=text, catalog=catalog)
    row = explain(spec, point_id=0).row
    if not row.get("weights_fit", True):
        raise PredictBenchmarkError("sweep predict-benchmark", "--tp", args.tp,
                                    f"{args.model}'s weights do not fit {args.tp} x {args.gpu} with room for a KV "
                                    "cache; use a larger --tp, --weights fp8 or a larger GPU")
    return row, _block(spec)


# --------------------------------------------------------------------------- predictions


@dataclass(frozen=True)
class Benchmark:
    """The benchmark's own settings. ``window_s`` (a GenAI-Perf run: 1.2 x its
    --measurement-interval) measures the run in perf_analyzer's time windows instead of
    ``num_prompts`` requests (which is then only the first guess at how many to send)."""

    num_prompts: int
    request_rate: float  # inf: all at once
    max_concurrency: int | None
    think_s: float = 0.0
    quantile: float = 0.99
    window_s: float | None = None
    stability_percentage: float = STABILITY_PERCENTAGE
    max_trials: int = MAX_TRIALS

    @property
    def quantiles(self) -> tuple[float, float]:
        return (0.5, self.quantile)


def measured_windows(send_s: np.ndarray, finish_s: np.ndarray, window_s: float,
                     stability_percentage: float = STABILITY_PERCENTAGE,
                     max_trials: int = MAX_TRIALS) -> tuple[np.ndarray, int, bool]:
    """What perf_analyzer measures of one run in time-windows mode: (the requests measured,
    the windows run, whether the last windows were stable).

    The load starts at t = 0; window w (0-based) spans [w L, (w + 1) L), ``L = window_s``; a
    request belongs to the window its last token arrives in (``finish_s``; inf: never). After
    each window from the third on, the run stops when the last `STABILITY_WINDOWS` windows
    each hold a request and both their request throughputs and their mean latencies
    (``finish_s - send_s``) have max / min <= 1 + percentage / 100; it stops anyway after
    ``max_trials`` windows, unstable (perf_analyzer then reports no stable measurement). The
    requests measured are those of every window run."""
    send, finish = np.asarray(send_s, np.float64), np.asarray(finish_s, np.float64)
    done = np.isfinite(finish)
    w = np.where(done, np.floor(np.where(done, finish, 0.0) / window_s), -1).astype(np.int64)
    limit = 1.0 + stability_percentage / 100.0
    for k in range(STABILITY_WINDOWS, max_trials + 1):
        last = [w == i for i in range(k - STABILITY_WINDOWS, k)]
        counts = [int(np.sum(m)) for m in last]
        if min(counts) == 0:
            continue
        lat = [float(np.mean(finish[m] - send[m])) for m in last]
        if max(counts) / min(counts) <= limit and max(lat) / min(lat) <= limit:
            return (w >= 0) & (w < k), k, True
    return (w >= 0) & (w < max_trials), max_trials, False


def _reference_run(cfg: BenchConfig, bench: Benchmark, n: int, settings: Any, seed: int,
                   r: int) -> tuple[Any, Any, Any]:
    """Replication ``r`` of the run with ``n`` prompts through the reference scheduler:
    (its `Result`, the prompt lengths, the output lengths)."""
    from sweep.models.continuous.sim import CBSimulationError, replication_draws, step_normals
    from sweep.testing.cb_reference import simulate as reference

    a, p, o = replication_draws(settings, 0, r, lam=bench.request_rate if math.isfinite(bench.request_rate)
                                else 1.0, prompt_mean=cfg.prompt_mean, prompt_cv=cfg.prompt_cv,
                                output_mean=cfg.output_mean, output_cv=cfg.output_cv, n=n)
    if not math.isfinite(bench.request_rate):
        a = np.zeros_like(a)
    budget = cfg.max_batched_tokens if math.isfinite(cfg.max_batched_tokens) else float(np.sum(p))
    # the steps of a run without preemption are at most one a token plus one a prompt chunk; a
    # preempted sequence's recomputation adds more: then the normals are drawn again, twice as
    # many, until the run fits them
    steps = int(np.sum(o) + math.ceil(np.sum(p) / max(budget, 1.0)) + len(o))
    think = (np.random.default_rng([seed, r]).exponential(bench.think_s, len(a)) if bench.think_s > 0.0
             else None)
    if bench.max_concurrency is not None and cfg.request_latency > 0.0:  # the engine sees it as thinking
        think = (np.zeros(len(a)) if think is None else think) + cfg.request_latency
    for _ in range(_NOISE_REDRAWS):
        z = step_normals(settings, 0, r, 1 << steps.bit_length()) if cfg.service_cv > 0.0 else None
        try:
            res = reference(a, p.astype(int), o.astype(int), cap=int(cfg.cap),
                            max_batched_tokens=cfg.max_batched_tokens, kv_capacity=cfg.kv_capacity_tokens,
                            block_tokens=int(cfg.block_tokens), t_fixed=cfg.t_fixed, t_token=cfg.t_token,
                            t_ctx=cfg.t_ctx, service_cv=cfg.service_cv, z=z, clients=bench.max_concurrency,
                            think_s=think, scheduler_policy=cfg.scheduler_policy,
                            scheduler_steps=cfg.scheduler_steps, kv_admission=cfg.kv_admission,
                            compute_line=((cfg.t_fixed_compute, cfg.t_token_compute) if cfg.t_token_compute > 0.0
                                          else None))
            return res, p, o
        except IndexError:
            if z is None:
                raise
            steps *= 2
    # the run outran every draw: not a shortage of normals (a defect), so say so
    raise CBSimulationError(f"predict-benchmark: the run needed more than {steps // 2} steps of noise "
                            f"after {_NOISE_REDRAWS} draws")


def _client_view(res: Any, latency: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send, first message, last message) times of each request of a reference run, as the
    client sees them (inf where a request got no message): its messages ``latency`` (the
    server's fixed latency per request outside the steps) after the engine wrote them."""
    first = np.array([d[0] if d else math.inf for d in res.delivered_s]) + latency
    last = np.array([d[-1] if d else math.inf for d in res.delivered_s]) + latency
    return np.asarray(res.arrival_s, np.float64), first, last


def _windowed_run(cfg: BenchConfig, bench: Benchmark, settings: Any, seed: int, r: int) -> tuple[Any, dict[str, float]]:
    """Replication ``r`` measured in GenAI-Perf's windows (`measured_windows`): prompts from
    ``bench.num_prompts``, twice as many again until the run is still sending when its
    windows end; (the reference run, the figures of the requests measured with ``windows``
    and ``stable``)."""
    from sweep.models.continuous.benchrun import run_figures
    from sweep.models.continuous.sim import CBSimulationError

    assert bench.window_s is not None
    n = bench.num_prompts
    for _ in range(_WINDOW_DOUBLINGS):
        res, p, o = _reference_run(cfg, bench, n, settings, seed, r)
        sent, first, last = _client_view(res, cfg.request_latency)
        keep, windows, stable = measured_windows(sent, last, bench.window_s, bench.stability_percentage,
                                                 bench.max_trials)
        if float(np.max(sent)) >= windows * bench.window_s:  # still sending when the windows ended
            idx = np.flatnonzero(keep)
            figures = run_figures(sent[idx], p[idx], o[idx], first[idx], last[idx], quantiles=bench.quantiles,
                                  token_s=[res.delivered_s[j] for j in idx])
            return res, {**figures, "windows": float(windows), "stable": float(stable)}
        n *= 2
    raise CBSimulationError(f"predict-benchmark: the load stopped before its measurement windows ended "
                            f"with {n:,} prompts")


def simulate(cfg: BenchConfig, bench: Benchmark, replications: int = REPLICATIONS,
             seed: int = 0) -> dict[str, tuple[float, float]]:
    """Replications of the finite run (reference scheduler; see the module docstring):
    {figure: (mean, 95% half-width)} as `benchrun.replicate` gives them. A windowed run
    (``bench.window_s``) keeps the requests `measured_windows` measures (`_windowed_run`) and
    adds the figures ``windows`` (windows run) and ``stable`` (1 where the last windows were
    stable)."""
    from sweep.models.continuous.benchrun import replicate, run_figures
    from sweep.models.continuous.sim import CBSimSettings

    settings = CBSimSettings(seed=seed)
    runs = []
    for r in range(replications):
        if bench.window_s is None:
            res, p, o = _reference_run(cfg, bench, bench.num_prompts, settings, seed, r)
            sent, first, last = _client_view(res, cfg.request_latency)
            figures = run_figures(sent, p, o, first, last, quantiles=bench.quantiles, token_s=res.delivered_s)
        else:
            res, figures = _windowed_run(cfg, bench, settings, seed, r)
        runs.append({**figures, **engine_figures(res, cfg.kv_capacity_tokens)})
    return replicate(runs)


#: The engine's own figures of a simulated run (printed below the benchmark's block; `vllm bench
#: serve` does not print them): (key, label).
ENGINE_FIGURES = (("mean_running", "Mean running sequences"),
                  ("preemptions_per_request", "Preemptions per request"),
                  ("recomputed_per_request", "Recomputed tokens per request"),
                  ("kv_peak_share", "Peak KV cache in use (share)"))


def engine_figures(res: Any, kv_capacity_tokens: float) -> dict[str, float]:
    """What the engine did in one reference run: the time-average running count (the
    concurrency the KV cache and the cap allow), preemptions and recomputed tokens per
    completed request (``kv_admission = "on_demand"``; 0 under ``reserve``) and the largest KV
    held (on demand) or reserved, as a share of the cache."""
    dur = np.asarray(res.step_dur, np.float64)
    done = max(1, sum(1 for f in res.finish_s if math.isfinite(f)))
    span = float(np.sum(dur))
    return {"mean_running": float(np.dot(np.asarray(res.step_running, np.float64), dur) / span) if span > 0 else 0.0,
            "preemptions_per_request": sum(res.preempted) / done,
            "recomputed_per_request": sum(res.recomputed) / done,
            "kv_peak_share": (max(res.step_reserved, default=0) / kv_capacity_tokens
                              if math.isfinite(kv_capacity_tokens) else 0.0)}


# --------------------------------------------------------------------------- light-load calibration


def calibration_update(key: str, value: float, predicted: float, measured: float) -> float:
    """One step of the light-load calibration's fixed point for the grid key `key`: a step's
    time is inversely proportional to the efficiency of the resource that bounds it, so an
    efficiency (`eta_bw`, `eta_flops`) becomes value x predicted / measured, clipped to the
    grid's (0.001, 1]; the request latency adds to the TTFT, so `request_latency_ms` becomes
    value + measured - predicted, at least 0 (a TTFT predicted above the measured one is not
    the latency's to close)."""
    if key == "request_latency_ms":
        return max(0.0, value + measured - predicted)
    return min(1.0, max(1e-3, value * predicted / measured))


@dataclass(frozen=True)
class Calibration:
    """What `calibrate` fitted, and to what."""

    run: Any  # the measured run (`bench_results.BenchRun`)
    bench: Benchmark  # that run as simulated
    eta_bw_catalog: float
    eta_bw: float
    request_latency_ms: float
    ttft_ms: float  # the calibrated simulation's mean TTFT and TPOT
    tpot_ms: float

    def lines(self) -> list[str]:
        r = self.run
        load = (f"closed loop of {r.concurrency:g} client{'s' if r.concurrency != 1 else ''}"
                if r.workload == "closed" else f"open loop at {r.rate_rps:.4g} req/s")
        return [f"calibrated on {r.where} ({r.tool}, {load}, lengths {r.prompt_tokens:.5g} in, {r.output_tokens:.5g} "
                f"out; {self.bench.num_prompts} requests simulated as run): measured mean TTFT {r.ttft_ms:.4g} ms, "
                f"mean TPOT {r.tpot_ms:.4g} ms",
                f"  eta_bw {self.eta_bw_catalog:.4g} (catalog) -> {self.eta_bw:.4g}, request_latency_ms 0 -> "
                f"{self.request_latency_ms:.4g}; simulated with them: mean TTFT {self.ttft_ms:.4g} ms, mean TPOT "
                f"{self.tpot_ms:.4g} ms",
                f"  in a grid: eta_bw = {self.eta_bw:.4g}, request_latency_ms = {self.request_latency_ms:.4g}"]


def light_run(path: Path) -> tuple[Any, Benchmark]:
    """The lightest run of a result file (its fewest clients, or the least running count of an
    open loop) and the benchmark that simulates it: its completed requests (at most
    `CAL_PROMPTS`) at its load."""
    from sweep.grid import bench_results

    runs = bench_results.read_file(path)
    run = min(runs, key=lambda r: r.concurrency)
    if math.isnan(run.tpot_ms):
        raise PredictBenchmarkError(str(path), "mean_tpot_ms", "none",
                                    "the run has one output token a request: no TPOT to calibrate eta_bw on")
    n = max(1, min(run.completed, CAL_PROMPTS)) if run.completed > 0 else CAL_PROMPTS
    if run.workload == "closed":
        return run, Benchmark(max(n, int(run.concurrency)), math.inf, int(run.concurrency))
    return run, Benchmark(n, run.rate_rps, None)


def calibrate(args: argparse.Namespace, catalog: Any, run: Any, bench: Benchmark) -> Calibration:
    """`eta_bw` and `request_latency_ms` such that the light-load `run` (`light_run`), simulated
    as it ran (`bench`; the flags' engine and configuration, the run's mean lengths), gives its
    measured mean TPOT and mean TTFT: from the catalog's `eta_bw` and no latency, `CAL_ITERATIONS`
    steps of `calibration_update` (TPOT moves `eta_bw`, then TTFT the latency)."""
    light = argparse.Namespace(**{**vars(args), "input_len": run.prompt_tokens, "output_len": run.output_tokens,
                                  "eta_bw": None, "request_latency_ms": 0.0})
    catalog_eta = float(flags_row(light, catalog, 1e-3)[0]["eta_bw"])
    eta, latency = catalog_eta, 0.0
    for step in range(CAL_ITERATIONS + 1):  # the last pass only measures the calibrated run
        point = argparse.Namespace(**{**vars(light), "eta_bw": eta, "request_latency_ms": latency})
        cfg = _engine(args, config_at_load(point, catalog, bench))
        figures = simulate(cfg, bench, args.replications, args.seed)
        ttft, tpot = figures["ttft_mean"][0] * 1e3, figures["tpot_mean"][0] * 1e3
        if not (math.isfinite(ttft) and math.isfinite(tpot) and tpot > 0):
            raise PredictBenchmarkError(run.where, "calibration", f"TTFT {ttft:g} ms, TPOT {tpot:g} ms",
                                        "the simulated light-load run gave no finite figures to calibrate on")
        if step < CAL_ITERATIONS:
            eta = calibration_update("eta_bw", eta, tpot, run.tpot_ms)
            latency = calibration_update("request_latency_ms", latency, ttft, run.ttft_ms)
    return Calibration(run, bench, catalog_eta, eta, latency, ttft, tpot)


def analytic(cfg: BenchConfig, bench: Benchmark, *, itl_grid: bool = False) -> tuple[dict[str, float], str]:
    """The analytic figures (SI units; a figure absent: not predicted) and what they are;
    ``itl_grid``: also the ITL quantiles as the grid's column inverts the law (``itl_grid_q...``)."""
    from sweep.models.continuous.closed import closed_loop

    kw = cfg.kwargs()
    n, rate, conc = bench.num_prompts, bench.request_rate, bench.max_concurrency
    prefill_first = cfg.scheduler_policy == "prefill_first"
    k = cfg.scheduler_steps
    if k > 1 and conc is not None:
        return {}, (f"no analytic figure: multi-step scheduling ({k} steps a decision) has analytic windows in an "
                    "open loop only; the simulated run is the prediction")
    closed = None
    if conc is not None:  # the request latency outside the steps: the engine sees it as thinking
        closed = closed_loop(conc, bench.think_s + cfg.request_latency, quantiles=bench.quantiles, **kw)
    if conc is None and not math.isfinite(rate):
        return {}, ("no analytic figure: every prompt is sent at once and no concurrency limit holds them back, "
                    "a single burst with no steady state; the simulated run is the prediction")
    if closed is not None and (not math.isfinite(rate) or rate >= closed["throughput_rps"]):
        r, basis = closed, (f"closed loop of {conc} clients (mean value analysis): the limit binds, "
                            f"{closed['throughput_rps']:.4g} req/s <= the rate"
                            + ("; steps composed as under chunked (the closed loop has no prefill_first)"
                               if prefill_first else ""))
    else:
        import jax.numpy as jnp

        from sweep.models.continuous.analytic import cb_point

        params = {k: jnp.float64(v) for k, v in kw.items()}
        res = [{k: float(v) for k, v in cb_point(lam=jnp.float64(rate), q=jnp.float64(q), **params,
                                                  prefill_first=prefill_first, steps=k).items()}
               for q in bench.quantiles]
        if not res[0]["stable"]:
            return {}, (f"no analytic figure: {rate:g} req/s exceeds the configuration's capacity "
                        f"({res[0]['capacity_rps']:.4g} req/s): the queue grows for as long as the run lasts; the "
                        "simulated run is the prediction")
        r = dict(res[0], throughput_rps=rate,
                 **{f"{m}_q": {q: x[f"{m}_p"] for q, x in zip(bench.quantiles, res)} for m in ("ttft", "tpot", "e2e")})
        basis = f"open loop at {rate:g} req/s (steady state)" + (
            f"; windows of {k} steps: ITL is the gap between messages, {k} steps of the per-step law" if k > 1 else "")
    for m in ("ttft", "e2e"):  # the client's view: the request latency outside the steps on both
        r[f"{m}_mean"] += cfg.request_latency
        r[f"{m}_q"] = {q: v + cfg.request_latency for q, v in r[f"{m}_q"].items()}
    x = r["throughput_rps"]
    if bench.window_s is not None:  # GenAI-Perf's windows: the steady state over the first stable three
        span = STABILITY_WINDOWS * bench.window_s
        n, duration = x * span, span
        basis += f"; measured over {STABILITY_WINDOWS} windows of {bench.window_s:g} s, stable at once"
    elif r is closed:
        # the first `conc` requests are sent at once, then one per completion at X: the last of n
        # completes one E2E after the (n - conc)-th send
        duration = max(n - (conc or 0), 0) / x + r["e2e_mean"]
    else:  # the last of n Poisson arrivals at (n - 1) / rate, then its E2E
        duration = (n - 1) / x + r["e2e_mean"]
    out = {"completed": float(n) if bench.window_s is None else float(math.floor(n)), "duration_s": duration,
           "request_rps": n / duration,
           "output_tok_s": n * cfg.output_mean / duration,
           "total_tok_s": n * (cfg.output_mean + cfg.prompt_mean) / duration}
    for m in ("ttft", "tpot", "e2e"):
        out[f"{m}_mean"] = r[f"{m}_mean"]
        for q in bench.quantiles:
            out[f"{m}_q{q:g}"] = r[f"{m}_q"][q]
    # the mean gap a decoding sequence sees (at k steps a decision, between a client's messages)
    out["itl_mean"] = r["tpot_mean"] if k == 1 else k * float(r["step_mean"])
    out["mean_running"] = r["mean_running"]
    # the per-token gap law (sweep.models.continuous.itl); the closed loop composes chunked steps
    from sweep.models.continuous.benchrun import itl_quantiles

    law = dict(step_mean=r["step_mean"], mean_running=r["mean_running"], rate_rps=r.get("lam_seen", x),
               prompt_mean=cfg.prompt_mean, max_batched_tokens=cfg.max_batched_tokens, t_token=cfg.t_token,
               service_cv=cfg.service_cv, tpot_mean=r["tpot_mean"], t_fixed=cfg.t_fixed,
               prefill_first=prefill_first and r is not closed)
    for q, v in zip(bench.quantiles, itl_quantiles(bench.quantiles, **law)):
        out[f"itl_q{q:g}"] = k * v
    if itl_grid:  # the grid column's inversion of the same law, beside it (benchmarks/itl_accuracy.py)
        for q, v in zip(bench.quantiles, itl_quantiles(bench.quantiles, **law, inversion="grid")):
            out[f"itl_grid_q{q:g}"] = v
    if cfg.kv_admission == "on_demand":
        basis += "; KV reserved at admission (equal to on-demand allocation unless the KV cache binds)"
    return out, basis


# --------------------------------------------------------------------------- printing


def render(cfg: BenchConfig, bench: Benchmark, sim: Mapping[str, tuple[float, float]],
           model: Mapping[str, float], basis: str, replications: int) -> list[str]:
    """The benchmark's result block, each figure as simulated (mean +- 95% half-width) and analytic."""
    width = 42

    def fmt(v: float | None, scale: float, digits: int) -> str:
        return "-" if v is None or not math.isfinite(v) else f"{v * scale:,.{digits}f}"

    def line(label: str, key: str, scale: float = 1.0, digits: int = 2) -> str:
        m, hw = sim.get(key, (math.inf, math.inf))
        s = fmt(m, scale, digits) + ("" if not math.isfinite(hw) else f" +- {hw * scale:,.{digits}f}")
        return f"{label + ':':<{width}}{s:>24}{fmt(model.get(key), scale, digits):>14}"

    conc = "none" if bench.max_concurrency is None else str(bench.max_concurrency)
    if bench.window_s is None:
        run = (f"benchmark: --num-prompts {bench.num_prompts} --request-rate {bench.request_rate:g} --max-concurrency "
               f"{conc}")
    else:
        load = (f"--concurrency {conc}" if bench.max_concurrency is not None
                else f"--request-rate {bench.request_rate:g}")
        run = (f"benchmark: GenAI-Perf {load} --measurement-interval {bench.window_s / WINDOW_STRETCH * 1e3:g} "
               f"(windows of {bench.window_s:g} s) --stability-percentage {bench.stability_percentage:g}, at most "
               f"{bench.max_trials} windows")
    out = [f"configuration: {cfg.label}",
           f"  per step: {cfg.t_fixed * 1e3:.4g} ms + {cfg.t_token * 1e3:.4g} ms/token + {cfg.t_ctx * 1e3:.4g} "
           f"ms/cached token; KV capacity {cfg.kv_capacity_tokens:,.0f} tokens; lengths {cfg.prompt_mean:g} "
           f"(cv {cfg.prompt_cv:g}) in, {cfg.output_mean:g} (cv {cfg.output_cv:g}) out",
           *([f"  compute-bound: {cfg.t_fixed_compute * 1e3:.4g} ms + {cfg.t_token_compute * 1e3:.4g} ms/token (+ the "
              "same cached-token term); the simulated run's step takes the larger of the two lines"]
             if cfg.t_token_compute > 0.0 else []),
           f"  engine: scheduler_policy {cfg.scheduler_policy}, {cfg.scheduler_steps} step(s) a scheduling decision, "
           f"KV {cfg.kv_admission.replace('_', '-')}"
           + (f"; request latency outside the steps {cfg.request_latency * 1e3:g} ms"
              if cfg.request_latency > 0 else ""),
           run + (f", think time {bench.think_s * 1e3:g} ms" if bench.think_s > 0 else ""),
           "", "{s:=^{w}}".format(s=" Serving Benchmark Result (predicted) ", w=width + 38),
           f"{'':<{width}}{f'simulated (95%, {replications} runs)':>24}{'analytic':>14}",
           line("Successful requests", "completed", digits=0),
           *([line("Measurement windows", "windows"), line("Stable (share of runs)", "stable")]
             if bench.window_s is not None else []),
           line("Benchmark duration (s)", "duration_s"),
           line("Request throughput (req/s)", "request_rps"),
           line("Output token throughput (tok/s)", "output_tok_s"),
           line("Total Token throughput (tok/s)", "total_tok_s")]
    pw = f"P{bench.quantile * 100:.6g}"
    for m, (short, title) in METRIC_NAMES.items():
        out.append("{s:-^{w}}".format(s=title, w=width + 38))
        out.append(line(f"Mean {short} (ms)", f"{m}_mean", 1e3))
        out.append(line(f"Median {short} (ms)", f"{m}_q0.5", 1e3))
        out.append(line(f"{pw} {short} (ms)", f"{m}_q{bench.quantile:g}", 1e3))
    out.append("{s:-^{w}}".format(s="Engine (not printed by the benchmark)", w=width + 38))
    for key, label in ENGINE_FIGURES:
        out.append(line(label, key, digits=3 if key == "kv_peak_share" else 2))
    out += ["=" * (width + 38),
            f"analytic: {basis}",
            ("simulated: the finite run itself (empty engine at the start, then the drain), through the reference "
             if bench.window_s is None else
             "simulated: the load from t = 0, the requests whose last token arrives in GenAI-Perf's measurement "
             "windows (duration: their first send to their last completion), through the reference ")
            + "scheduler; ITL pools every gap between the messages a client receives (one a token; one a window "
            "under multi-step scheduling), TPOT is each request's mean gap (GenAI-Perf's inter-token latency)"]
    if bench.window_s is not None and sim.get("stable", (1.0, 0.0))[0] < 1.0:
        out.append("warning: some simulated runs had no stable windows within the trials; GenAI-Perf would report "
                   "that it failed to obtain a stable measurement: raise --measurement-interval")
    return out


# --------------------------------------------------------------------------- the command


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (req/s, or inf)") from None
    if not v > 0.0:
        raise argparse.ArgumentTypeError(f"{text} must be > 0 req/s, or inf (all at once)")
    return v


_non_negative = finite_number(0.0, strict=False)


def _quantile(text: str) -> float:
    v = _non_negative(text)
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"{text} must lie strictly between 0 and 1, e.g. 0.99")
    return v


def add_command(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register `sweep predict-benchmark` (`command` as in `sweep.cli.main.command`)."""
    p = command(sub, "predict-benchmark",
                "predict what `vllm bench serve` prints for one configuration: request and token throughput, mean, "
                "median and P99 TTFT, TPOT and ITL, simulated with 95% half-widths and analytic",
                ["sweep predict-benchmark --model llama-3.1-8b --gpu h100-sxm --tp 1 --max-num-seqs 64 "
                 "--input-len 1000 --output-len 200 --request-rate 8 --num-prompts 1000",
                 "sweep predict-benchmark --model llama-3.1-8b --gpu h100-sxm --input-len 1000 --output-len 200 "
                 "--request-rate inf --max-concurrency 32 --num-prompts 500",
                 "sweep predict-benchmark runs/chat --point 13 --request-rate 4 --num-prompts 1000",
                 "sweep predict-benchmark --model llama-3.1-8b --gpu a100-80gb --input-len 200 --output-len 50 "
                 "--request-rate inf --max-concurrency 5 --measurement-interval 10000   # as GenAI-Perf measures"])
    p.add_argument("run_dir", nargs="?", type=Path, default=None,
                   help="a finished continuous-serving run folder (with --point), instead of the configuration flags")
    p.add_argument("--point", type=int, default=None, metavar="ID", help="the run's point_id to benchmark")
    g = p.add_argument_group("configuration (without RUN_DIR)")
    g.add_argument("--model", default=None, help="catalog model name (`sweep catalog` lists them)")
    g.add_argument("--gpu", default=None, help="catalog GPU name")
    g.add_argument("--tp", "--gpus-per-replica", dest="tp", type=int_at_least_one, default=1, metavar="N",
                   help="GPUs per replica (tensor parallel; default 1)")
    g.add_argument("--max-num-seqs", type=int_at_least_one, default=256, metavar="N",
                   help="cap on running sequences (vLLM's default 256)")
    g.add_argument("--max-num-batched-tokens", type=int_at_least_one, default=8192, metavar="N",
                   help="token budget per step (chunked prefill; default 8192)")
    g.add_argument("--input-len", "--isl", dest="input_len", type=float, default=None, metavar="N",
                   help="mean prompt length, tokens (the benchmark's --random-input-len)")
    g.add_argument("--output-len", "--osl", dest="output_len", type=float, default=None, metavar="N",
                   help="mean output length, tokens (--random-output-len, with --ignore-eos)")
    g.add_argument("--input-cv", type=_non_negative, default=0.0, metavar="CV",
                   help="CV of the prompt length (default 0; --random-range-ratio r gives r / sqrt(3))")
    g.add_argument("--output-cv", type=_non_negative, default=0.0, metavar="CV", help="CV of the output length")
    g.add_argument("--weights", default="bf16", metavar="DTYPE", help="weight dtype (default bf16)")
    g.add_argument("--kv-dtype", default="bf16", metavar="DTYPE", help="KV-cache dtype (default bf16)")
    e = p.add_argument_group("the engine's scheduler (default: vLLM V1's; docs/continuous.md, \"Engine variants\")")
    e.add_argument("--scheduler-policy", choices=POLICIES, default="chunked",
                   help="chunked: prompt chunks ride in the decode step (vLLM V1, SGLang --enable-mixed-chunk, "
                        "TensorRT-LLM); prefill_first: prompts take steps of their own that pause the decodes "
                        "(SGLang's default, vLLM V0, TGI)")
    e.add_argument("--num-scheduler-steps", type=int_at_least_one, default=1, metavar="K",
                   help="decode steps per scheduling decision (vLLM 0.6's --num-scheduler-steps; default 1)")
    e.add_argument("--kv-admission", choices=KV_ADMISSIONS, default="on_demand",
                   help="on_demand: KV blocks allocated as tokens are written, the newest sequence preempted and "
                        "recomputed when they run out (vLLM, SGLang); reserve: prompt + output reserved at "
                        "admission (TensorRT-LLM GUARANTEED_NO_EVICT, TGI)")
    e.add_argument("--t-seq-us", type=seq_us, default=None, metavar="US",
                   help="the engine's host time per sequence a step carries, microseconds (the grid's t_seq_us; "
                        "default 0; docs/roofline.md, \"Per-sequence cost\")")
    e.add_argument("--request-latency-ms", type=request_latency_ms, default=None, metavar="MS",
                   help="the server's fixed latency per request outside the engine's steps (HTTP, chat template and "
                        "tokenization, streaming), added to every TTFT and E2E (the grid's request_latency_ms; "
                        "default 0; fit it to a light-load TTFT)")
    e.add_argument("--kv-cache-tokens", type=int_at_least_one, default=None, metavar="N",
                   help="the engine's KV cache in tokens, in place of what the GPUs hold beside the weights "
                        "(what vLLM logs as 'GPU KV cache size'; size it down to see preemptions)")
    e.add_argument("--eta-bw", type=eta_value, default=None, metavar="ETA",
                   help="the HBM bandwidth efficiency of the decode step, in place of the catalog's (the grid's "
                        "eta_bw; what --calibrate-from fits)")
    c = p.add_argument_group("calibration on a light-load run you measured (docs/deploy.md)")
    c.add_argument("--calibrate-from", type=Path, default=None, metavar="FILE",
                   help="a benchmark result file (vllm bench serve --save-result JSON, SGLang bench_serving JSONL, "
                        "GenAI-Perf profile export) of this configuration at a light load: its lightest run, "
                        "simulated as it ran, fits eta_bw to its mean TPOT and request_latency_ms to its mean TTFT; "
                        "the benchmark asked for is predicted with both")
    b = p.add_argument_group("the benchmark (vllm bench serve's flags)")
    b.add_argument("--request-rate", type=_rate, required=True, metavar="RPS",
                   help="Poisson request rate, req/s; inf sends every prompt at once")
    b.add_argument("--max-concurrency", type=int_at_least_one, default=None, metavar="N",
                   help="at most N requests in flight (a closed loop with --request-rate inf)")
    b.add_argument("--num-prompts", type=int_at_least_one, default=None, metavar="N",
                   help="requests sent (default 1000; not with --measurement-interval)")
    b.add_argument("--percentile", type=_quantile, default=0.99, metavar="Q",
                   help="the tail percentile printed beside the mean and median (default 0.99)")
    b.add_argument("--think-ms", type=_non_negative, default=0.0, metavar="MS",
                   help="mean exponential think time between a client's requests (with --max-concurrency; default 0)")
    g2 = p.add_argument_group("GenAI-Perf's measurement (perf_analyzer's time windows; docs/deploy.md)")
    g2.add_argument("--measurement-interval", type=finite_number(0.0, strict=True), default=None, metavar="MS",
                    help="measure as GenAI-Perf does: windows of 1.2 x MS from the load's start, each holding the "
                         "requests that end in it, until three agree (--max-concurrency is its --concurrency)")
    g2.add_argument("--stability-percentage", type=finite_number(0.0, strict=True), default=STABILITY_PERCENTAGE,
                    metavar="P", help=f"how far the last three windows may differ (default {STABILITY_PERCENTAGE:g}, "
                                      "GenAI-Perf's)")
    g2.add_argument("--max-trials", type=int, default=MAX_TRIALS, metavar="N",
                    help=f"windows before giving up (default {MAX_TRIALS}, perf_analyzer's)")
    b.add_argument("--replications", type=int, default=REPLICATIONS, metavar="N",
                   help=f"simulated runs (>= 2 for a half-width; default {REPLICATIONS})")
    b.add_argument("--seed", type=int, default=0, help="random seed of the simulated runs (default 0)")
    p.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                   help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    p.set_defaults(handler=cmd_predict_benchmark)


def _check(args: argparse.Namespace) -> None:
    src = "sweep predict-benchmark"
    if args.replications < 2:
        raise PredictBenchmarkError(src, "--replications", args.replications,
                                    "must be >= 2 (the half-width needs two runs), e.g. 5")
    if args.measurement_interval is not None:
        if args.num_prompts is not None:
            raise PredictBenchmarkError(src, "--num-prompts", args.num_prompts,
                                        "not with --measurement-interval: GenAI-Perf's windows decide which requests "
                                        "are measured; give one or the other")
        if args.max_concurrency is None and not math.isfinite(args.request_rate):
            raise PredictBenchmarkError(src, "--request-rate", args.request_rate,
                                        "a windowed run needs a load: --max-concurrency N (GenAI-Perf's --concurrency) "
                                        "or a finite --request-rate")
        if args.max_trials < STABILITY_WINDOWS:
            raise PredictBenchmarkError(src, "--max-trials", args.max_trials,
                                        f"must be >= {STABILITY_WINDOWS} (stability is judged over the last "
                                        f"{STABILITY_WINDOWS} windows)")
    if args.think_ms > 0 and args.max_concurrency is None:
        raise PredictBenchmarkError(src, "--think-ms", args.think_ms,
                                    "needs --max-concurrency (clients think between their own requests)")
    if args.calibrate_from is not None:
        if args.run_dir is not None:
            raise PredictBenchmarkError(src, "--calibrate-from", str(args.calibrate_from),
                                        "calibrates a configuration given by flags (--model, --gpu, ...), not "
                                        "RUN_DIR's point: put eta_bw and request_latency_ms in its grid instead")
        for flag, v in (("--eta-bw", args.eta_bw), ("--request-latency-ms", args.request_latency_ms)):
            if v is not None:
                raise PredictBenchmarkError(src, flag, v, "not with --calibrate-from, which fits it")
    if args.run_dir is not None:
        flags = [f for f, v in (("--model", args.model), ("--gpu", args.gpu), ("--input-len", args.input_len),
                                ("--output-len", args.output_len), ("--t-seq-us", args.t_seq_us),
                                ("--eta-bw", args.eta_bw)) if v is not None]
        if flags:
            raise PredictBenchmarkError(src, flags[0], getattr(args, flags[0][2:].replace("-", "_")),
                                        "give either RUN_DIR --point ID or the configuration flags, not both")
        if args.point is None:
            raise PredictBenchmarkError(src, "--point", None, f"RUN_DIR needs --point ID, e.g. sweep "
                                                              f"predict-benchmark {args.run_dir} --point 0 ...")
        return
    for flag, v in (("--model", args.model), ("--gpu", args.gpu), ("--input-len", args.input_len),
                    ("--output-len", args.output_len)):
        if v is None:
            raise PredictBenchmarkError(src, flag, None, "required without RUN_DIR (or give RUN_DIR --point ID)")
    for flag, v in (("--input-len", args.input_len), ("--output-len", args.output_len)):
        if not (math.isfinite(v) and v >= 1.0):
            raise PredictBenchmarkError(src, flag, v, "must be a finite number of tokens >= 1, e.g. 1000")
    if args.max_num_batched_tokens < args.max_num_seqs:
        raise PredictBenchmarkError(src, "--max-num-batched-tokens", args.max_num_batched_tokens,
                                    f"must be >= --max-num-seqs ({args.max_num_seqs}): every running sequence "
                                    "decodes a token per step")


def cmd_predict_benchmark(args: argparse.Namespace) -> int:
    from sweep.catalog import load_catalog
    from sweep.runner.progress import compile_cache_dir, enable_compile_cache

    _check(args)
    # the calibration's file is read (and a bad one refused) before any work
    light = light_run(args.calibrate_from) if args.calibrate_from is not None else None
    catalog = load_catalog(args.catalog) if args.catalog else None
    enable_compile_cache(compile_cache_dir())
    windowed = args.measurement_interval is not None
    bench = Benchmark(args.num_prompts or 1000, args.request_rate, args.max_concurrency, args.think_ms * 1e-3,
                      args.percentile, window_s=args.measurement_interval * 1e-3 * WINDOW_STRETCH if windowed else None,
                      stability_percentage=args.stability_percentage, max_trials=args.max_trials)
    calibration = None
    if args.run_dir is not None:
        cfg = _engine(args, config_from_run(args.run_dir, args.point, catalog))
    else:
        catalog = catalog if catalog is not None else load_catalog()
        if light is not None:
            calibration = calibrate(args, catalog, *light)
            args = argparse.Namespace(**{**vars(args), "eta_bw": calibration.eta_bw,
                                         "request_latency_ms": calibration.request_latency_ms})
        cfg = _engine(args, config_at_load(args, catalog, bench))
    reservation = math.ceil((cfg.prompt_mean + cfg.output_mean) / cfg.block_tokens) * cfg.block_tokens
    if reservation > cfg.kv_capacity_tokens:
        raise PredictBenchmarkError("sweep predict-benchmark", "--input-len", cfg.prompt_mean,
                                    f"a request of {cfg.prompt_mean:g} + {cfg.output_mean:g} tokens does not fit the "
                                    f"KV cache ({cfg.kv_capacity_tokens:,.0f} tokens)")
    model, basis = analytic(cfg, bench)
    if bench.window_s is not None:  # the first guess at the prompts the windows need: three at the throughput
        x = model.get("request_rps", 0.0)
        bench = replace(bench, num_prompts=max(64, (args.max_concurrency or 0) + math.ceil(
            1.25 * x * STABILITY_WINDOWS * bench.window_s if math.isfinite(x) else 0)))
    sim = simulate(cfg, bench, args.replications, args.seed)
    for line in [*(calibration.lines() + [""] if calibration is not None else []),
                 *render(cfg, bench, sim, model, basis, args.replications)]:
        print(line)
    return 0


def config_at_load(args: argparse.Namespace, catalog: Any, bench: Benchmark) -> BenchConfig:
    """`config_from_flags` at the load the step coefficients are linearised at: the request
    rate, else (a closed loop or a burst) the capacity's neighbourhood, found by a first
    evaluation at a light load."""
    rate = bench.request_rate
    if not math.isfinite(rate) or bench.max_concurrency is not None:
        from sweep.models.continuous.closed import closed_loop

        light = config_from_flags(args, catalog, 1e-3)
        x = closed_loop(bench.max_concurrency or bench.num_prompts, bench.think_s + light.request_latency,
                        quantiles=(0.5,), **light.kwargs())["throughput_rps"]
        rate = min(rate, x)
    return config_from_flags(args, catalog, rate)


def _engine(args: argparse.Namespace, cfg: BenchConfig) -> BenchConfig:
    """`cfg` with the flags' engine: scheduler, KV admission, request latency and KV cache size."""
    return replace(cfg, scheduler_policy=args.scheduler_policy, scheduler_steps=args.num_scheduler_steps,
                   kv_admission=args.kv_admission,
                   request_latency=(args.request_latency_ms * 1e-3 if args.request_latency_ms is not None
                                    else cfg.request_latency),
                   kv_capacity_tokens=(float(args.kv_cache_tokens) if args.kv_cache_tokens is not None
                                       else cfg.kv_capacity_tokens))
