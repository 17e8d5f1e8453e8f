"""The benchmark that checks a prediction, and the figures it should print.

One replica is benchmarked at its share of the load, `lambda_per_replica_rps` (replicas share
the load evenly, as the model assumes), with `vllm bench serve` (vLLM 0.34.0,
vllm/benchmarks/serve.py), which drives any OpenAI-compatible server: `--backend vllm` for
vLLM, `--backend openai` (the /v1/completions endpoint) for SGLang and TensorRT-LLM, so the
three engines are measured by one client that prints one set of figures.

Requests: Poisson arrivals at the rate (`--request-rate`, `--burstiness 1`), random prompts of
`--random-input-len` tokens and `--random-output-len` output tokens forced with `--ignore-eos`.
Its lengths are uniform on `[L (1 - r), L (1 + r)]` (`--random-range-ratio`, r < 1), whose CV
is `r / sqrt(3)`: `r = sqrt(3) cv` matches the grid's mean and CV where `cv < 1 / sqrt(3)`
(0.577); the shape differs (the grid's lengths are lognormal, with a longer right tail), and a
wider grid spread cannot be matched, which the deployment says.

What the figures mean: the model's are the *steady state* of an open-loop Poisson stream,
an infinitely long run. A finite run of N prompts starts on an empty engine (the first
requests wait less) and drains at the end (the last decode with fewer companions): its
figures converge to the steady state as N grows past the relaxation span `W = R / (1 - rho)`
arrivals (R the mean running count; docs/continuous.md, "Accuracy against the simulator").
N is chosen as the largest of 1,000 prompts, 20 W and 300 s of arrivals, so the transient
touches about a tenth of the requests at most; with a `[simulation]` table the simulated
columns are finite runs with a warm-up discarded, the nearest thing to the benchmark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweep.deploy.engines import PORTS

#: The shortest benchmark: enough prompts for a P99 (about 10 above it).
MIN_PROMPTS = 1000
#: Arrivals of the relaxation span W per benchmark (the transient then touches ~1/10 of it).
SPANS = 20
#: Seconds of arrivals per benchmark at least.
MIN_SECONDS = 300.0
#: The widest length spread `vllm bench serve` draws: range ratio < 1.
MAX_RANGE_RATIO = 0.99


@dataclass(frozen=True)
class Figure:
    """One figure the benchmark prints, with the prediction to hold it against.

    `value_ms` None: no prediction (`why` says why); never a made-up number."""

    metric: str  # TTFT | TPOT | ITL | E2EL (the benchmark's names)
    stat: str  # Mean | Median | P99 (the benchmark's words)
    value_ms: float | None
    source: str  # the row column it comes from, or ""
    why: str  # what it is (steady state, ...) or why there is none
    simulated_ms: float | None = None  # the [simulation] columns' figure, where the grid has them


@dataclass(frozen=True)
class Lengths:
    mean: int
    ratio: float  # the benchmark's range ratio
    cv_bench: float  # the CV that ratio gives
    cv_grid: float


def lengths(mean: float, cv: float) -> Lengths:
    """The benchmark's uniform length law with the grid's mean and (where it can) CV."""
    ratio = min(math.sqrt(3.0) * cv, MAX_RANGE_RATIO)
    ratio = math.floor(ratio * 1e4) / 1e4
    return Lengths(max(1, round(mean)), ratio, ratio / math.sqrt(3.0), cv)


def prompts(lam: float, mean_running: float | None, rho: float | None) -> tuple[int, float | None]:
    """(N, W): the benchmark's prompt count and the relaxation span in arrivals (None unknown)."""
    span = None
    if mean_running is not None and rho is not None and 0.0 <= rho < 1.0:
        span = mean_running / (1.0 - rho)
    n = max(MIN_PROMPTS, math.ceil(lam * MIN_SECONDS), math.ceil(SPANS * span) if span is not None else 0)
    return n, span


def closed_clients(row: Mapping[str, Any]) -> int | None:
    """A closed loop's clients a replica (`workload = "closed"`: clients / replicas, rounded, at
    least one, as the simulator runs them), else None."""
    c = _num(row, "clients")
    if c is None:
        return None
    return max(1, round(c / float(row.get("replicas") or 1)))


def closed_prompts(clients: int) -> int:
    """A closed loop's prompt count: at least `MIN_PROMPTS`, and `SPANS` requests a client (the
    opening wave of every client's prompt at once touches a twentieth of the run)."""
    return max(MIN_PROMPTS, SPANS * clients)


def percentile_word(q: float) -> str:
    """0.99 -> "99", 0.999 -> "99.9": the benchmark's `--metric-percentiles` and its P-label."""
    return f"{q * 100:.6g}"


def bench_argv(engine: str, model_id: str, lam: float, n: int, prompt: Lengths, output: Lengths, q: float,
               seed: int = 0, clients: int | None = None) -> list[str]:
    """`vllm bench serve` against the engine's server on this host; `clients`: a closed loop
    (`--max-concurrency`, at the due rate `lam`, inf when there is none)."""
    ratio = (f"{prompt.ratio:g}" if prompt.ratio == output.ratio
             else json.dumps({"input": prompt.ratio, "output": output.ratio}))
    rate = f"{lam:.6g}" if math.isfinite(lam) else "inf"
    return ["vllm", "bench", "serve", "--backend", "vllm" if engine == "vllm" else "openai",
            "--host", "127.0.0.1", "--port", str(PORTS[engine]), "--model", model_id,
            "--dataset-name", "random", "--random-input-len", str(prompt.mean),
            "--random-output-len", str(output.mean), "--random-range-ratio", ratio, "--ignore-eos",
            "--request-rate", rate, "--burstiness", "1.0",
            *(("--max-concurrency", str(clients)) if clients is not None else ()), "--num-prompts", str(n),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", percentile_word(q),
            "--seed", str(seed), "--save-result", "--result-filename", f"bench-{engine}.json"]


def _num(row: Mapping[str, Any], key: str) -> float | None:
    """A finite number from a row (NULL, +inf or absent: None)."""
    v = row.get(key)
    if v is None or isinstance(v, bool):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def predicted(row: Mapping[str, Any], latency_model: str, steps: int = 1) -> list[Figure]:
    """The figures `vllm bench serve` prints, each with the row's prediction or why none
    (`steps`: the plan's decode steps per scheduling decision, whose tokens reach the client
    together, so that its ITL is the gap between messages)."""
    q = float(row.get("percentile") or 0.99)
    pw = percentile_word(q)
    stable = bool(row.get("stable"))
    loop = ("a closed loop of its clients (mean value analysis)" if closed_clients(row) is not None
            else "an open-loop Poisson stream")
    basis = ("simulator (latency_model = \"simulated\"): replications of a finite run after a warm-up, the "
             "steady state it estimates" if latency_model == "simulated"
             else f"analytic model: the steady state of {loop}")
    unstable = ("no prediction: the load is not sustainable at this configuration (stable = false), so the queue "
                "grows for as long as the benchmark runs")
    window = (f"; {steps} steps a scheduling decision, whose tokens reach the client together: ITL is the gap "
              f"between messages, {steps} steps" if steps > 1 else "")
    out: list[Figure] = []
    for metric, col in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2EL", "e2e")):
        for stat in ("Mean", "Median", f"P{pw}"):
            if stat == "Median" and q != 0.5:
                out.append(Figure(metric, stat, None, "",
                                  f"not predicted: the grid's percentile is {q:g}; a grid with percentile = 0.5 "
                                  "predicts the median"))
                continue
            if metric == "ITL" and stat == "Mean":
                key, sim_key = "tpot_mean_ms", "sim_tpot_mean_ms"
            else:
                key = f"{col}_mean_ms" if stat == "Mean" else f"{col}_p_ms"
                sim_key = f"sim_{col}_mean_ms" if stat == "Mean" else f"sim_{col}_p_ms"
            sim = _num(row, sim_key) if bool(row.get("sim_steady")) else None
            if not stable:
                out.append(Figure(metric, stat, None, key, unstable, sim))
                continue
            why, value = basis, _num(row, key)
            if metric == "ITL" and stat == "Mean":
                why = (f"{basis}; the mean step a decoding sequence sees (tpot_mean_ms): ITL averages every gap, "
                       "TPOT every request, equal when speed does not depend on the output length" + window)
                value = None if value is None else value * max(steps, 1)
                sim = None if sim is None else sim * max(steps, 1)
            elif metric == "ITL" and value is None:
                why = ("not predicted: the run has no itl_p_ms column (written before it existed); `sweep "
                       "predict-benchmark RUN_DIR --point ID --request-rate R` gives ITL")
            elif metric == "ITL":
                why = (f"{basis}; the per-token gap law (itl_p_ms): every gap between tokens pooled, so its "
                       "tail is a step that carries prompt work" + window)
            out.append(Figure(metric, stat, value, key, why, sim))
    return out
