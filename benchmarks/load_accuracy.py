"""The continuous-serving model against published measurements of real servers under load
(tests/data/load_measurements.csv; docs/accuracy-load.md).

For every figure: the continuous-batching point as the engine builds it from the default
catalog (`serving = "continuous"`, `latency_model = "analytic"`, the refined roofline's step
times with the catalog's efficiency cells, paged KV in 16-token blocks; nothing is fitted
to these figures), the metric it predicts, the measurement and their ratio; then the share
of figures within 20% and 50%, overall and by workload, engine and metric, with the
direction of the misses, and per figure the engine behaviour expected to close its miss.
Beside it, the same prediction with one calibration per setup (`calibrate`: the HBM
bandwidth efficiency `eta_bw` fitted to the setup's lightest-load TPOT, the request latency
`request_latency_ms` to its TTFT; the rule of `sweep predict-benchmark --calibrate-from`),
and its share over the figures not used to calibrate.

How a row becomes a point (every choice here is the script's, not the source's):

* open loop at a finite rate r: the open-loop steady state at ``arrival_rps = r``. Medians
  are the model's percentile at q = 0.5 (``ttft_p_ms``, ``tpot_p_ms``, ``e2e_p_ms``); a
  median ITL (every token gap, pooled) is the per-token gap law's median ``itl_p_ms`` (at
  ``scheduler_steps = k`` the gap between a client's messages, k steps).
* open loop at rate inf (all requests at once): the run's throughput is the engine's
  saturation throughput, predicted by ``capacity_rps`` (and ``capacity_rps`` x O tokens/s).
* closed loop at concurrency N (no think time): the grid's closed loop (``workload =
  "closed"``, ``clients = N``, no due rate: mean value analysis over the open model,
  docs/continuous.md "Closed loops"); TTFT, TPOT and E2E are its means, output tokens/s its
  ``output_tok_s``. Closed-loop rows are reported apart from the open-loop ones.
* lengths: the row's means; where the source gives no CV (ShareGPT rows) ``ASSUMED_CV``.
* engine limits the sources leave unstated: cap ``CAP`` running sequences, token budget
  ``BUDGET[engine]`` (vLLM 0.6 without chunked prefill: max_model_len 4096; SGLang and
  TensorRT-LLM: 8192), as the rows' settings column says.

Beside the analytic prediction, each figure is also **simulated as run** (`simulate_run`):
the benchmark the source ran (its prompts at its rate, all at once for rate inf, or its
clients starting together, then the drain) through the reference scheduler with the
engine's variants (`ENGINES`: SGLang 0.3 and vLLM 0.6 run prompts first in steps of their
own and take KV on demand; vLLM 0.6 decides every ``--num-scheduler-steps`` steps and
streams a window's tokens at its end; TensorRT-LLM mixes prompts into the decode step and
reserves KV, but the older NIM of the second set ran its prompts in steps of their own:
`ENGINE_VERSIONS`), `sweep predict-benchmark`'s simulated column, mean over ``--replications``.
A closed-loop source that gives no prompt count is run for `CLOSED_PROMPTS_PER_CLIENT`
requests a client. Step coefficients come from the same continuous point, linearised at
the run's load.

    .venv/bin/python benchmarks/load_accuracy.py [--smoke] [--replications N] [--no-simulate]
    .venv/bin/python benchmarks/load_accuracy.py --data tests/data/load_measurements_dli.csv --no-simulate

Ablations (the results file gets the suffix ``_ablation``): ``--scheduler-policy P`` runs
every engine under policy P instead of its own (its KV admission kept), ``--prompts-per-client
N`` sends N requests a client where a closed loop's source states no prompt count
(``--measurement-interval MS`` measures such a loop in GenAI-Perf's time windows instead), and
``--setups N --setup-seed S`` keeps N setups drawn at random with all their figures (the
engine's per-sequence cost then comes from the drawn setups alone).

(``--smoke``: three figures, one of each kind, tiny runs, nothing written: the test suite's
check; with ``--data``, the file's first run.) The full run writes
benchmarks/results/load_accuracy.csv (one row per figure; with ``--data``,
load_accuracy_<the data file's suffix>.csv). About three minutes on two cores: one
compilation of the continuous point (~40 s), ~30 ms a point, and the simulated runs.
The second set (``--data tests/data/load_measurements_dli.csv``, 3,148 figures of 787 closed
loops): about fifteen minutes with ``--replications 1`` (fixed lengths and no step noise:
every replication of a run is the same run), three without simulation.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import random
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sweep
from sweep.catalog import load_catalog
from sweep.cli.predict import (
    CAL_ITERATIONS,
    WINDOW_STRETCH,
    Benchmark,
    calibration_update,
    config_from_row,
    simulate,
)

DATA = ROOT / "tests" / "data" / "load_measurements.csv"
RESULTS = ROOT / "benchmarks" / "results" / "load_accuracy.csv"

ASSUMED_CV = 1.0  # prompt and output length CV where the source gives none (ShareGPT rows)
CAP = 256  # max running sequences (vLLM max_num_seqs default; the others' unstated limits)
BUDGET = {"vllm": 4096, "sglang": 8192, "tensorrt-llm": 8192}  # tokens per step (module docstring)
#: metric -> (model column, percentile q) for open-loop rows at a finite rate
OPEN_COLUMNS = {"ttft_p50_ms": ("ttft_p_ms", 0.5), "tpot_p50_ms": ("tpot_p_ms", 0.5),
                "itl_p50_ms": ("itl_p_ms", 0.5), "e2e_p50_ms": ("e2e_p_ms", 0.5),
                "ttft_mean_ms": ("ttft_mean_ms", 0.5), "tpot_mean_ms": ("tpot_mean_ms", 0.5),
                "e2e_mean_ms": ("e2e_mean_ms", 0.5)}
#: How each engine ran in its source (docs/accuracy-load.md, "Simulated as run"): scheduler policy and KV
#: admission (`sweep predict-benchmark`'s --scheduler-policy and --kv-admission); decode steps per scheduling
#: decision are read from the row's settings (--num-scheduler-steps), else 1.
#: SGLang 0.3: prefill batches run as steps of their own (mixed chunks are opt-in), KV taken token by
#: token with retraction. vLLM 0.6 (V0): no chunked prefill at --max_model_len 4096, so prompts run
#: first in steps of their own; paged blocks with recompute preemption. TensorRT-LLM (NIM): in-flight
#: batching mixes context and generation in one step; GUARANTEED_NO_EVICT reserves the whole request.
ENGINES = {"sglang": ("prefill_first", "on_demand"), "vllm": ("prefill_first", "on_demand"),
           "tensorrt-llm": ("chunked", "reserve")}
#: (engine, engine_version) that ran otherwise than its engine's entry. The older NIM of the second set
#: (the DLI course's sheet): the course's own GenAI-Perf per-request export of that NIM (five clients,
#: 200-token prompts, 50 tokens) shows a prompt step that pauses the running decodes: the two requests
#: prefilled first get their first token at 38 ms, the three behind them at 89 ms, and all five their
#: next token at 103 ms (docs/accuracy-load.md, "A second, larger set").
ENGINE_VERSIONS = {("tensorrt-llm", "NIM (TensorRT-LLM backend; version not stated)"): ("prefill_first", "reserve")}


#: An ablation (`--scheduler-policy`): every engine simulated, and evaluated as run, under this
#: policy instead of its own (its KV admission kept); None: each engine's own.
POLICY_OVERRIDE: str | None = None


def scheduler_of(row: dict[str, str]) -> tuple[str, str]:
    """(scheduler policy, KV admission) of the engine as the row's source ran it (the policy
    `POLICY_OVERRIDE`'s where an ablation sets one)."""
    policy, kv = ENGINE_VERSIONS.get((row["engine"], row["engine_version"]), ENGINES[row["engine"]])
    return POLICY_OVERRIDE or policy, kv
#: figure -> (the simulated benchmark's figure, scale to the row's unit)
SIM_FIGURES = {"ttft_p50_ms": ("ttft_q0.5", 1e3), "tpot_p50_ms": ("tpot_q0.5", 1e3), "itl_p50_ms": ("itl_q0.5", 1e3),
               "e2e_p50_ms": ("e2e_q0.5", 1e3), "ttft_mean_ms": ("ttft_mean", 1e3),
               "tpot_mean_ms": ("tpot_mean", 1e3), "e2e_mean_ms": ("e2e_mean", 1e3),
               "throughput_rps": ("request_rps", 1.0), "output_tok_s": ("output_tok_s", 1.0)}
#: A closed-loop run whose source states no prompt count: this many requests a client (at least
#: `CLOSED_MIN_PROMPTS`), the clients starting together as GenAI-Perf's do
CLOSED_PROMPTS_PER_CLIENT = 5
CLOSED_MIN_PROMPTS = 50
REPLICATIONS = 3
MAX_PROMPTS = 10**9  # a run's prompts are capped here (--smoke only)
SMOKE_IDS = ("sgl060-llama-3.1-8b-a100-80gb-tp1-sglang-r4-ttft_p50",
             "sgl060-llama-3.1-8b-a100-80gb-tp1-sglang-rinf-throughput_rps",
             "nim180-llama-3.1-8b-h100-sxm-tp1-in1000-out1000-c25-tpot_mean")


def read_rows(path: Path = DATA) -> list[dict[str, str]]:
    """The figures of `path` (comment lines starting with # skipped), as strings."""
    with path.open(newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _num(s: str) -> float:
    return math.inf if s.strip() == "inf" else float(s)


class Predictor:
    """The continuous model at one configuration and any rate: one single-point grid per
    call, evaluated with chunk size 1 so that every call reuses one compiled program."""

    def __init__(self, row: dict[str, str], q: float = 0.5, eta: dict[str, float] | None = None,
                 as_run: bool = False) -> None:
        # as_run: the engine's scheduler as the source ran it (`scheduler_of`'s policy, the row's
        # --num-scheduler-steps) in the analytic model; else the grid's defaults
        self.options = ({"scheduler_policy": scheduler_of(row)[0], "scheduler_steps": scheduler_steps(row)}
                        if as_run else {})
        cv = {k: float(row[k]) if row[k].strip() else ASSUMED_CV for k in ("prompt_tokens_cv", "output_tokens_cv")}
        self.output_tokens = float(row["output_tokens_mean"])
        self.grid = {
            "model": row["model"], "gpu": row["gpu"], "gpus_per_replica": int(row["tensor_parallel"]),
            "prompt_tokens": float(row["prompt_tokens_mean"]), "prompt_cv": cv["prompt_tokens_cv"],
            "output_tokens": self.output_tokens, "output_cv": cv["output_tokens_cv"],
            "batch_size": CAP, "max_batched_tokens": BUDGET[row["engine"]],
            "weight_bytes_per_param": row["weight_dtype"], "kv_bytes_per_elem": row["kv_dtype"],
            "ttft_slo_ms": math.inf, "tpot_slo_ms": math.inf, "slo_ms": 1e9, "percentile": q, **(eta or {}),
        }

    def at(self, rate: float) -> dict[str, float | None]:
        """Every column of the point at `rate` requests/s (None where the model says NULL)."""
        return self._point({"arrival_rps": rate}, {})

    def closed(self, clients: float) -> dict[str, float | None]:
        """Every column of the point as a closed loop of `clients` clients without think time."""
        return self._point({"clients": int(clients)}, {"workload": "closed"})

    def _point(self, load: dict[str, Any], options: dict[str, Any]) -> dict[str, float | None]:
        doc = {"name": "load-accuracy", "grid": {**self.grid, **load},
               "options": {"serving": "continuous", "latency_model": "analytic", "kv_allocation": "paged",
                           "block_tokens": 16, **self.options, **options}}
        return sweep.evaluate(sweep.grid_from_dict(doc), chunk_size=1).to_pylist()[0]


def predict(row: dict[str, str], eta: dict[str, float] | None = None, as_run: bool = False) -> tuple[float | None, str]:
    """The model's value of the row's metric and how it was obtained (`eta`: the grid's
    efficiency keys, `eta_bw` and `eta_flops`, in place of the catalog's; `as_run`: the
    analytic model under the engine's scheduler as run, `Predictor`)."""
    metric = row["metric"]
    if row["workload"] == "open" and _num(row["request_rate_rps"]) == math.inf:
        pt = Predictor(row, eta=eta, as_run=as_run).at(1.0)
        cap = pt["capacity_rps"]
        if metric == "throughput_rps":
            return cap, "capacity_rps"
        if metric == "output_tok_s":
            return cap * float(row["output_tokens_mean"]), "capacity_rps x O"
        return None, f"not predicted (rate inf, {metric})"
    if row["workload"] == "open":
        col, q = OPEN_COLUMNS[metric]
        pt = Predictor(row, q, eta, as_run).at(_num(row["request_rate_rps"]))
        return pt[col], col
    pt = Predictor(row, eta=eta, as_run=as_run).closed(float(row["concurrency"]))
    if not pt["mem_ok"]:
        return None, "not predicted (no capacity)"
    col = {"ttft_mean_ms": "ttft_mean_ms", "tpot_mean_ms": "tpot_mean_ms", "e2e_mean_ms": "e2e_mean_ms",
           "output_tok_s": "output_tok_s"}[metric]
    return pt[col], f"closed loop: {col}"


def scheduler_steps(row: dict[str, str]) -> int:
    """Decode steps per scheduling decision: the row's --num-scheduler-steps, else 1."""
    m = re.search(r"--num-scheduler-steps[ =](\d+)", row["settings"])
    return int(m.group(1)) if m else 1


#: An ablation (`--measurement-interval`): a closed loop whose source states no prompt count is
#: measured in GenAI-Perf's time windows of this many seconds (1.2 x the interval) instead of
#: `CLOSED_PROMPTS_PER_CLIENT` requests a client; None: by prompt count.
WINDOW_S: float | None = None


def run_of(row: dict[str, str]) -> Benchmark:
    """The benchmark run a row was measured in (prompts, rate, concurrency)."""
    conc = int(row["concurrency"]) if row["workload"] == "closed" else None
    n = (int(row["num_prompts"]) if row["num_prompts"].strip()
         else max(CLOSED_MIN_PROMPTS, CLOSED_PROMPTS_PER_CLIENT * (conc or 0)))
    rate = math.inf if row["workload"] == "closed" else _num(row["request_rate_rps"])
    if WINDOW_S is not None and conc is not None and not row["num_prompts"].strip():
        return Benchmark(max(conc, 1), rate, conc, window_s=WINDOW_S)
    return Benchmark(min(n, MAX_PROMPTS), rate, conc)


_SIMULATED: dict[tuple, dict[str, tuple[float, float]]] = {}


@functools.cache
def _catalog() -> Any:
    """The catalog the simulated runs' compute-bound step line reads (`sweep.cli.predict.compute_line_of`)."""
    return load_catalog()


def simulate_run(row: dict[str, str], eta: dict[str, float] | None = None,
                 replications: int = REPLICATIONS) -> dict[str, tuple[float, float]]:
    """The row's benchmark run simulated as run (`sweep.cli.predict.simulate`: the reference
    scheduler with the engine's variants, the finite run and its drain, the closed loop's clients
    starting together), step coefficients from the continuous point linearised at the run's load
    (its rate; the closed loop's point; 0.95 x capacity for rate inf)."""
    bench = run_of(row)
    key = (setup_of(row), bench, tuple(sorted((eta or {}).items())), replications)
    if key not in _SIMULATED:
        p = Predictor(row, eta=eta)
        if bench.max_concurrency is not None:
            pt = p.closed(bench.max_concurrency)
        else:
            rate = bench.request_rate if math.isfinite(bench.request_rate) else 0.95 * p.at(1.0)["capacity_rps"]
            pt = p.at(rate)
        policy, kv = scheduler_of(row)
        cfg = replace(config_from_row(pt, 16.0, row["id"], _catalog()), scheduler_policy=policy,
                      scheduler_steps=scheduler_steps(row), kv_admission=kv)
        _SIMULATED[key] = simulate(cfg, bench, replications=replications, seed=0)
    return _SIMULATED[key]


def predict_simulated(row: dict[str, str], eta: dict[str, float] | None = None,
                      replications: int = REPLICATIONS) -> tuple[float, float]:
    """The row's figure from `simulate_run`: (mean over replications, 95% half-width), its unit."""
    name, scale = SIM_FIGURES[row["metric"]]
    mean, hw = simulate_run(row, eta, replications)[name]
    return mean * scale, hw * scale


def setup_of(row: dict[str, str]) -> tuple[str, ...]:
    """The rows measured on one setup: engine and version, model, GPU, TP, dtypes, lengths and loop."""
    return tuple(row[k] for k in ("engine", "engine_version", "model", "gpu", "tensor_parallel", "weight_dtype",
                                  "kv_dtype", "prompt_tokens_mean", "output_tokens_mean", "workload"))


def _load(row: dict[str, str]) -> float:
    return _num(row["request_rate_rps"]) if row["workload"] == "open" else float(row["concurrency"])


#: metric prefix -> the grid key a light-load figure calibrates: a decode step (TPOT) is bound
#: by memory bandwidth, `eta_bw`; the TTFT's part outside the steps (HTTP, tokenization,
#: streaming) is the server's fixed latency per request, `request_latency_ms`. TTFT does not
#: calibrate a compute rate: fitting `eta_flops` to it drove that to 0.07-0.19 and made every
#: mixed step slow (held-out TPOT 1.69x measured; 17/42 within 20% against 26/57 with bandwidth
#: alone; docs/accuracy-load.md). `--calibrate tpot` calibrates `eta_bw` alone.
CALIBRATES = {"tpot": "eta_bw", "ttft": "request_latency_ms"}


def calibrate(rows: list[dict[str, str]], as_run: bool = False,
              fixed: dict[tuple[str, ...], dict[str, float]] | None = None,
              simulated: int | None = None, calibrates: dict[str, str] | None = None,
              ) -> tuple[dict[tuple[str, ...], dict[str, float]], set[str]]:
    """Per setup, the grid keys of `CALIBRATES` (`eta_bw`, `request_latency_ms`) such that the
    model reproduces the setup's lightest-load TPOT and TTFT figures (its lowest rate, or
    concurrency; a key whose figure the lightest load lacks keeps its default); and the ids of
    those figures (used to calibrate, so left out of the calibrated share). `fixed`: grid keys
    per setup held while calibrating and returned beside the efficiencies (the engine's
    `t_seq_us`, `engine_seq_costs`). The model calibrated is the one that predicts: the
    analytic model (under the grid's default scheduler, or `as_run`), or with `simulated` =
    replications the benchmark simulated as run (`predict_simulated`), so that each
    prediction reproduces the calibration figure itself.

    Fixed-point iteration, `CAL_ITERATIONS` times, from the catalog's efficiency and no
    latency, each step `calibration_update` (the rule `sweep predict-benchmark --calibrate-from`
    follows): eta <- eta x predicted / measured within (0.001, 1], L <- L + measured -
    predicted, at least 0."""
    setups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in rows:
        setups.setdefault(setup_of(row), []).append(row)
    out, used = {}, set()
    keys = CALIBRATES if calibrates is None else calibrates
    for key, group in setups.items():
        light = min(_load(r) for r in group if math.isfinite(_load(r)))
        targets = {keys[r["metric"].split("_")[0]]: r for r in group
                   if _load(r) == light and r["metric"].split("_")[0] in keys}
        if not targets:
            continue
        first = Predictor(next(iter(targets.values()))).at(1.0)
        eta = {name: float(first[name]) if name != "request_latency_ms" else 0.0 for name in targets}
        held = (fixed or {}).get(key, {})
        for _ in range(CAL_ITERATIONS):
            for name, r in targets.items():
                value = (predict(r, {**eta, **held}, as_run)[0] if simulated is None
                         else predict_simulated(r, {**eta, **held}, simulated)[0])
                if value is None:
                    break
                eta[name] = calibration_update(name, eta[name], value, float(r["measured"]))
        out[key] = {**eta, **held}
        used |= {r["id"] for r in targets.values()}
    return out, used


def _engine_key(row: dict[str, str]) -> tuple[str, ...]:
    return row["engine"], row["engine_version"], row["gpu"]


def _running(row: dict[str, str], eta: dict[str, float] | None) -> float:
    """The sequences a TPOT figure's steps carry: a closed loop's clients (at most the cap);
    an open loop's mean running count at the calibrated point as run."""
    if row["workload"] == "closed":
        return min(float(row["concurrency"]), CAP)
    p = Predictor(row, eta=eta, as_run=True)
    return float(p.at(_num(row["request_rate_rps"]))["mean_running"])


def engine_seq_costs(rows: list[dict[str, str]], tpot: dict[str, float],
                     cal: dict[tuple[str, ...], dict[str, float]], used: set[str]) -> dict[tuple[str, ...], float]:
    """Per setup, the engine's per-sequence cost `t_seq_us` (docs/roofline.md, "Per-sequence
    cost") taken from the *other* setups of the same engine version on the same GPU (else 0:
    a cost measured on another GPU is another host's and another kernel's; borrowed across
    GPUs it slowed the first set's rate-inf runs 1.3-2x): the least-squares slope through the
    origin of their TPOT residuals (measured minus `tpot`, the calibrated prediction without it) on their running count,
    sum(n r) / sum(n^2), at least 0. Only held-out TPOT figures enter, so a setup's
    own figures never set its cost."""
    points = []  # (row, n, residual seconds)
    for row in rows:
        if row["metric"].startswith("tpot") and row["id"] in tpot and row["id"] not in used:
            eta = cal.get(setup_of(row))
            points.append((row, _running(row, eta), (float(row["measured"]) - tpot[row["id"]]) * 1e-3))
    out = {}
    for key in {setup_of(r) for r in rows}:
        row = next(r for r in rows if setup_of(r) == key)
        others = [(n, res) for r, n, res in points
                  if setup_of(r) != key and _engine_key(r) == _engine_key(row)]
        den = sum(n * n for n, _ in others)
        slope = sum(n * res for n, res in others) / den if den > 0 else 0.0
        out[key] = min(max(slope * 1e6, 0.0), 1e4)
    return out


def fixed_by(row: dict[str, str]) -> str:
    """What is expected to close this figure's miss: an engine behaviour the model lacked, or something else
    (the rules of docs/accuracy-load.md, "What the misses say")."""
    engine, metric = row["engine"], row["metric"]
    multi = "--num-scheduler-steps" in row["settings"]
    if row["workload"] == "closed":
        return "workload = closed + finite run" if metric.startswith("ttft") else "workload = closed"
    if row["request_rate_rps"].strip() == "inf":
        return "finite run + kv_admission = on_demand"
    if metric.startswith("itl"):
        return "per-token ITL + scheduler_steps" if multi else "per-token ITL"
    if metric.startswith("e2e"):
        return "length distribution + step times"
    if engine == "vllm" and multi and metric.startswith("ttft"):
        return "scheduler_steps"
    return "prefill_first + step times"


def share(errs: list[float], tol: float) -> str:
    n = sum(abs(e) <= tol for e in errs)
    return f"{n}/{len(errs)}"


def summarize(results: list[dict], key: Callable[[dict], str], title: str, column: str = "predicted") -> list[str]:
    """One line per group: figures, share within 20% and 50%, median ratio, misses low/high
    (of `column`: the default catalog's prediction, or the calibrated one)."""
    lines = [f"{title:40s} {'n':>3s} {'<=20%':>7s} {'<=50%':>7s} {'median ratio':>12s} {'low':>4s} {'high':>4s}"]
    groups: dict[str, list[float]] = {}
    for r in results:
        if r[column] is not None:
            groups.setdefault(key(r), []).append(r[column] / r["measured"])
    for g, ratios in sorted(groups.items()):
        errs = [x - 1.0 for x in ratios]
        low = sum(x < 0.8 for x in ratios)
        high = sum(x > 1.2 for x in ratios)
        med = sorted(ratios)[len(ratios) // 2]
        lines.append(f"{g:40s} {len(ratios):3d} {share(errs, 0.2):>7s} {share(errs, 0.5):>7s} {med:12.2f} "
                     f"{low:4d} {high:4d}")
    return lines


def _run_id(row: dict[str, str]) -> str:
    """The id a run's figures share: a figure's id less its metric suffix (`-ttft_mean`, ...)."""
    return row["id"].rsplit("-", 1)[0]


def _band(r: dict) -> str:
    """The load of a result row as a band: request rate (open) or clients (closed)."""
    x = r["load"]
    if not math.isfinite(x):
        return "inf"
    edges = (1, 5, 25, 100) if r["workload"] == "closed" else (2, 4, 8)
    lo = max((e for e in edges if e <= x), default=0)
    hi = min((e for e in edges if e > x), default=None)
    return f"{lo}-{hi}" if hi is not None else f">={lo}"


def _cell(v: float | None, measured: float) -> str:
    return f"{v:9.2f} {v / measured:6.2f}" if v is not None else f"{'-':>9s} {'-':>6s}"


def main(argv: list[str] | None = None) -> dict:
    global CLOSED_MIN_PROMPTS, CLOSED_PROMPTS_PER_CLIENT, MAX_PROMPTS, POLICY_OVERRIDE, WINDOW_S
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="three figures, nothing written (the test suite's check)")
    ap.add_argument("--replications", type=int, default=REPLICATIONS,
                    help=f"simulated runs per benchmark run (default {REPLICATIONS})")
    ap.add_argument("--no-simulate", action="store_true", help="the analytic predictions only")
    ap.add_argument("--data", type=Path, default=DATA, help=f"the figures (default {DATA.relative_to(ROOT)})")
    ap.add_argument("--calibrate", choices=("tpot+ttft", "tpot"), default="tpot+ttft",
                    help="what the light-load run calibrates: eta_bw from its TPOT and the request latency from its "
                         "TTFT (default), or eta_bw alone")
    ab = ap.add_argument_group("ablations (the results file gets the suffix _ablation)")
    ab.add_argument("--scheduler-policy", choices=("chunked", "prefill_first"), default=None,
                    help="simulate and evaluate as run every engine under this policy instead of its own")
    ab.add_argument("--prompts-per-client", type=int, default=CLOSED_PROMPTS_PER_CLIENT, metavar="N",
                    help="requests a client of a closed loop whose source states no prompt count (default "
                         f"{CLOSED_PROMPTS_PER_CLIENT})")
    ab.add_argument("--measurement-interval", type=float, default=None, metavar="MS",
                    help="measure a closed loop whose source states no prompt count in GenAI-Perf's time windows "
                         "(1.2 x MS each, from the first request) instead of by requests a client")
    ab.add_argument("--setups", type=int, default=None, metavar="N",
                    help="N setups drawn at random (--setup-seed) with all their figures, not every setup")
    ab.add_argument("--setup-seed", type=int, default=0, metavar="S", help="the draw of --setups (default 0)")
    args = ap.parse_args(argv)
    ablation = (args.scheduler_policy is not None or args.setups is not None or args.measurement_interval is not None
                or args.prompts_per_client != CLOSED_PROMPTS_PER_CLIENT)
    for flag, n in (("--prompts-per-client", args.prompts_per_client), ("--setups", args.setups)):
        if n is not None and n < 1:
            ap.error(f"{flag} {n}: takes a count >= 1")
    if args.measurement_interval is not None and not (math.isfinite(args.measurement_interval)
                                                      and args.measurement_interval > 0):
        ap.error(f"--measurement-interval {args.measurement_interval}: takes a finite number of ms > 0, e.g. 10000")
    POLICY_OVERRIDE, CLOSED_PROMPTS_PER_CLIENT = args.scheduler_policy, args.prompts_per_client
    WINDOW_S = None if args.measurement_interval is None else args.measurement_interval * 1e-3 * WINDOW_STRETCH
    keys = {k: v for k, v in CALIBRATES.items() if args.calibrate == "tpot+ttft" or k == "tpot"}
    results_path = RESULTS if args.data == DATA else RESULTS.with_name(
        f"load_accuracy_{args.data.stem.removeprefix('load_measurements_')}.csv")
    if args.calibrate == "tpot":
        results_path = results_path.with_name(results_path.stem + "_tpot.csv")
    if ablation:
        results_path = results_path.with_name(results_path.stem + "_ablation.csv")
    reps = 2 if args.smoke else args.replications
    if args.smoke:  # tiny runs: the check is that the script works, not its figures
        CLOSED_MIN_PROMPTS, CLOSED_PROMPTS_PER_CLIENT, MAX_PROMPTS = 20, 1, 60
    rows = read_rows(args.data)
    if args.setups is not None:
        setups = sorted({setup_of(r) for r in rows})
        drawn = set(random.Random(args.setup_seed).sample(setups, min(args.setups, len(setups))))
        rows = [r for r in rows if setup_of(r) in drawn]
    if args.smoke:  # three figures of the default file, one of each kind; of another file, its first run's
        rows = ([r for r in rows if r["id"] in SMOKE_IDS] if args.data == DATA
                else [r for r in rows if _run_id(r) == _run_id(rows[0])])
    cal, used = calibrate(rows, calibrates=keys)
    cal_run, _ = calibrate(rows, as_run=True, calibrates=keys)  # the same lightest-load figures
    cal_sim = {} if args.no_simulate else calibrate(rows, simulated=reps, calibrates=keys)[0]
    results = []
    print(f"{'figure':62s} {'metric':14s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s} {'calib.':>9s} "
          f"{'ratio':>6s} {'simulated':>9s} {'ratio':>6s} {'calib.':>9s} {'ratio':>6s}  how")
    for row in rows:
        value, how = predict(row)
        eta = cal.get(setup_of(row))
        value_cal = predict(row, eta)[0] if eta is not None else None
        eta_run = cal_run.get(setup_of(row))
        as_run = predict(row, as_run=True)[0]
        as_run_cal = predict(row, eta_run, as_run=True)[0] if eta_run is not None else None
        measured = float(row["measured"])
        sim, sim_hw = predict_simulated(row, None, reps) if not args.no_simulate else (None, None)
        eta_sim = cal_sim.get(setup_of(row))
        sim_cal = predict_simulated(row, eta_sim, reps)[0] if eta_sim is not None else None
        results.append({"id": row["id"], "engine": row["engine"], "workload": row["workload"],
                        "metric": row["metric"], "load": _load(row),
                        "setup": f"{row['model']} {row['gpu']} {row['weight_dtype']} tp{row['tensor_parallel']}",
                        "measured": measured, "predicted": value, "how": how,
                        "fixed_by": fixed_by(row), "predicted_calibrated": value_cal,
                        "calibration_figure": row["id"] in used,
                        "eta_bw": None if eta is None else eta.get("eta_bw"),
                        "eta_bw_simulated": None if eta_sim is None else eta_sim.get("eta_bw"),
                        "request_latency_ms_simulated": None if eta_sim is None else eta_sim.get("request_latency_ms"),
                        "eta_flops": None if eta is None else eta.get("eta_flops"),
                        "simulated": sim, "simulated_half_width": sim_hw, "simulated_calibrated": sim_cal,
                        "analytic_as_run": as_run, "analytic_as_run_calibrated": as_run_cal})
        mark = " *" if row["id"] in used else ""
        print(f"{row['id'][:62]:62s} {row['metric']:14s} {measured:9.2f} {_cell(value, measured)} "
              f"{_cell(value_cal, measured)} {_cell(sim, measured)} {_cell(sim_cal, measured)}  {how}{mark}")
    # the engine's per-sequence cost from its other setups, then every figure again with it
    pass1 = {r["id"]: r["simulated_calibrated" if not args.no_simulate else "analytic_as_run_calibrated"]
             for r in results}
    t_seq = engine_seq_costs(rows, {k: v for k, v in pass1.items() if v is not None}, cal, used)
    fixed = {k: {"t_seq_us": v} for k, v in t_seq.items()}
    cal_eng, _ = calibrate(rows, fixed=fixed, calibrates=keys)
    cal_run_eng, _ = calibrate(rows, as_run=True, fixed=fixed, calibrates=keys)
    cal_sim_eng = {} if args.no_simulate else calibrate(rows, fixed=fixed, simulated=reps, calibrates=keys)[0]
    for row, r in zip(rows, results):
        key = setup_of(row)
        r["t_seq_us"] = t_seq[key] if key in cal_eng else None
        r["analytic_as_run_engine"] = predict(row, cal_run_eng[key], as_run=True)[0] if key in cal_run_eng else None
        r["simulated_engine"] = (predict_simulated(row, cal_sim_eng[key], reps)[0]
                                 if key in cal_sim_eng else None)
    predicted = [r for r in results if r["predicted"] is not None]
    errs = [r["predicted"] / r["measured"] - 1.0 for r in predicted]
    held = [r for r in results if r["predicted_calibrated"] is not None and not r["calibration_figure"]]
    errs_cal = [r["predicted_calibrated"] / r["measured"] - 1.0 for r in held]
    print()
    for title, table in (("calibrated efficiencies per setup (from its lightest-load TPOT; * above):", cal),
                         ("calibrated efficiencies per setup, the simulated benchmark's own (the same figures):",
                          cal_sim)):
        if table:
            print(title)
        for key, eta in table.items():
            print(f"  {' '.join(key[:5]):60s} " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(eta.items())))
    print()
    print(f"all predicted figures: {len(predicted)} of {len(results)}; within 20%: {share(errs, 0.2)}, "
          f"within 50%: {share(errs, 0.5)}; too low (< 0.8x): {sum(e < -0.2 for e in errs)}, "
          f"too high (> 1.2x): {sum(e > 0.2 for e in errs)}")
    print(f"calibrated, the {len(used)} calibration figures left out: within 20%: {share(errs_cal, 0.2)}, "
          f"within 50%: {share(errs_cal, 0.5)}; too low: {sum(e < -0.2 for e in errs_cal)}, "
          f"too high: {sum(e > 0.2 for e in errs_cal)}")
    errs_run = [r["analytic_as_run"] / r["measured"] - 1.0 for r in results if r["analytic_as_run"] is not None]
    run_held = [r for r in held if r["analytic_as_run_calibrated"] is not None]
    errs_run_cal = [r["analytic_as_run_calibrated"] / r["measured"] - 1.0 for r in run_held]
    for label, e in (("analytic as run, default catalog", errs_run), ("analytic as run, calibrated (held out)",
                                                                      errs_run_cal)):
        print(f"{label}: within 20%: {share(e, 0.2)}, within 50%: {share(e, 0.5)}; too low: "
              f"{sum(x < -0.2 for x in e)}, too high: {sum(x > 0.2 for x in e)}")
    counts = {"within_20_as_run": sum(abs(e) <= 0.2 for e in errs_run),
              "within_20_as_run_calibrated": sum(abs(e) <= 0.2 for e in errs_run_cal)}
    print("engine per-sequence cost t_seq_us per setup (from the engine's other setups): "
          + ", ".join(f"{k[0]} {' '.join(k[2:5])} {k[7]}/{k[8]} {v:.0f}" for k, v in sorted(t_seq.items())))
    errs_run_eng = [r["analytic_as_run_engine"] / r["measured"] - 1.0 for r in held
                    if r["analytic_as_run_engine"] is not None]
    print(f"analytic as run, calibrated + engine per-sequence cost (held out): within 20%: "
          f"{share(errs_run_eng, 0.2)}, within 50%: {share(errs_run_eng, 0.5)}")
    counts["within_20_as_run_engine"] = sum(abs(e) <= 0.2 for e in errs_run_eng)
    if not args.no_simulate:
        errs_sim = [r["simulated"] / r["measured"] - 1.0 for r in results]
        sim_held = [r for r in held if r["simulated_calibrated"] is not None]
        errs_sim_cal = [r["simulated_calibrated"] / r["measured"] - 1.0 for r in sim_held]
        print(f"simulated as run, default catalog: within 20%: {share(errs_sim, 0.2)}, within 50%: "
              f"{share(errs_sim, 0.5)}; too low: {sum(e < -0.2 for e in errs_sim)}, "
              f"too high: {sum(e > 0.2 for e in errs_sim)}")
        print(f"simulated as run, calibrated (held out): within 20%: {share(errs_sim_cal, 0.2)}, within 50%: "
              f"{share(errs_sim_cal, 0.5)}; too low: {sum(e < -0.2 for e in errs_sim_cal)}, "
              f"too high: {sum(e > 0.2 for e in errs_sim_cal)}")
        errs_sim_eng = [r["simulated_engine"] / r["measured"] - 1.0 for r in held if r["simulated_engine"] is not None]
        print(f"simulated as run, calibrated + engine per-sequence cost (held out): within 20%: "
              f"{share(errs_sim_eng, 0.2)}, within 50%: {share(errs_sim_eng, 0.5)}; too low: "
              f"{sum(e < -0.2 for e in errs_sim_eng)}, too high: {sum(e > 0.2 for e in errs_sim_eng)}")
        counts |= {"within_20_simulated_engine": sum(abs(e) <= 0.2 for e in errs_sim_eng),
                   "n_held_out_simulated_engine": len(errs_sim_eng)}
        counts |= {"within_20_simulated": sum(abs(e) <= 0.2 for e in errs_sim),
                   "within_50_simulated": sum(abs(e) <= 0.5 for e in errs_sim),
                   "n_held_out_simulated": len(sim_held),
                   "within_20_simulated_calibrated": sum(abs(e) <= 0.2 for e in errs_sim_cal),
                   "within_50_simulated_calibrated": sum(abs(e) <= 0.5 for e in errs_sim_cal)}
    tables = [summarize(results, lambda r: r["workload"], "workload"),
              summarize(results, lambda r: f"{r['workload']} {r['engine']}", "workload, engine"),
              summarize(results, lambda r: r["metric"], "metric"),
              summarize(results, lambda r: r["fixed_by"], "expected to be fixed by"),
              summarize(held, lambda r: f"{r['workload']} {r['engine']}", "calibrated: workload, engine",
                        "predicted_calibrated"),
              summarize(held, lambda r: r["metric"], "calibrated: metric", "predicted_calibrated"),
              summarize(held, lambda r: f"{r['workload']} {_band(r)}", "calibrated: load", "predicted_calibrated"),
              summarize(held, lambda r: r["setup"], "calibrated: setup", "predicted_calibrated")]
    if not args.no_simulate:
        tables += [summarize(results, lambda r: f"{r['workload']} {r['engine']}", "simulated: workload, engine",
                             "simulated"),
                   summarize(results, lambda r: r["metric"], "simulated: metric", "simulated"),
                   summarize(results, lambda r: r["fixed_by"], "simulated: expected to be fixed by", "simulated"),
                   summarize(held, lambda r: f"{r['workload']} {r['engine']}",
                             "simulated, calibrated: workload, engine", "simulated_calibrated"),
                   summarize(held, lambda r: r["metric"], "simulated, calibrated: metric", "simulated_calibrated"),
                   summarize([r for r in held if r["simulated_engine"] is not None], lambda r: r["metric"],
                             "simulated, calibrated + engine: metric", "simulated_engine"),
                   summarize([r for r in held if r["simulated_engine"] is not None],
                             lambda r: f"{r['workload']} {_band(r)}", "simulated, calibrated + engine: load",
                             "simulated_engine")]
    for lines in tables:
        print()
        print("\n".join(lines))
    out = {"rows": results, "n": len(results), "n_predicted": len(predicted),
           "within_20": sum(abs(e) <= 0.2 for e in errs), "within_50": sum(abs(e) <= 0.5 for e in errs),
           "calibration": cal, "n_held_out": len(held), "within_20_calibrated": sum(abs(e) <= 0.2 for e in errs_cal),
           "within_50_calibrated": sum(abs(e) <= 0.5 for e in errs_cal), **counts}
    if not args.smoke:
        results_path.parent.mkdir(exist_ok=True)
        with results_path.open("w", newline="") as f:
            w = csv.DictWriter(f, list(results[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(results)
        print(f"\nwrote {results_path.relative_to(ROOT)}")
    return out


if __name__ == "__main__":
    main()
