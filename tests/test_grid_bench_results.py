"""Serving benchmarks' result files (`sweep.grid.bench_results`, `sweep fit RESULT.json ...`,
`[profile] file = "RESULT.jsonl"`).

References:
- the file formats: each test file is built with the field names and layout the tools write,
  read from their sources: vLLM `vllm/benchmarks/serve.py` (`result_json`: `request_rate`
  as a number or the string "inf", `max_concurrency`, then the benchmark's `completed`,
  `total_input_tokens`, `total_output_tokens`, `request_throughput`, `mean_ttft_ms`,
  `mean_tpot_ms`, `mean_itl_ms`, `mean_e2el_ms`, ...); SGLang `python/sglang/bench_serving.py`
  (one JSON line per run appended to `--output-file`, `mean_e2e_latency_ms` and the measured
  `concurrency`, `request_rate` a float that may be Infinity); GenAI-Perf
  `genai_perf/export_data/json_exporter.py` (the statistics, each `{"unit", "avg", "p50", ...}`,
  and the arguments under `input_config`);
- the numbers in them: closed-loop runs simulated by `test_grid_step_fit.closed_loop`, and
  open-loop runs simulated here (`open_loop`: Poisson arrivals, every arrival admitted at the
  next step, whole prompts in one step, output lengths uniform in [O/2, 3O/2]), both by the
  scheduler rules of docs/continuous.md with a known step time `TRUE`; the fit must give it back.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_grid_step_fit import TRUE, closed_loop, step_ms

from sweep.cli import main
from sweep.errors import ProfileError
from sweep.grid import bench_results as br
from sweep.grid.fit import fit_text

MS = 1e3


def open_loop(rate_rps: float, prompt: int, output: int, coef=TRUE, *, n: int = 2500, warmup: int = 500,
              seed: int = 0) -> dict[str, float]:
    """An open-loop benchmark of `n` requests: the means vLLM prints (TTFT, TPOT, E2E, in ms),
    the request throughput (completed / span of the measured requests) and the mean lengths."""
    rng = np.random.default_rng(seed)
    lam = rate_rps / MS
    arrive = np.cumsum(rng.exponential(1.0 / lam, n))
    outs = rng.integers(output // 2, 3 * output // 2 + 1, n)
    t, i, running = 0.0, 0, []
    ttft, tpot, e2e, done = [], [], [], []
    while i < n or running:
        if not running and arrive[i] > t:
            t = arrive[i]  # idle: the next step starts with the next arrival
        while i < n and arrive[i] <= t:
            running.append([i, 0, int(outs[i]), None])  # id, tokens out, output length, first token time
            i += 1
        n_tok = sum(prompt if s[1] == 0 else 1 for s in running)
        n_ctx = sum(prompt + s[1] for s in running)
        t += step_ms(n_tok, n_ctx, coef)
        nxt = []
        for s in running:
            if s[1] == 0:
                s[3] = t
                if s[0] >= warmup:
                    ttft.append(t - arrive[s[0]])
            s[1] += 1
            if s[1] >= s[2]:
                if s[0] >= warmup:
                    tpot.append((t - s[3]) / (s[2] - 1))
                    e2e.append(t - arrive[s[0]])
                    done.append(t)
            else:
                nxt.append(s)
        running = nxt
    span = max(done) - arrive[warmup]
    return {"ttft": float(np.mean(ttft)), "tpot": float(np.mean(tpot)), "e2e": float(np.mean(e2e)),
            "throughput": len(done) / (span / MS), "completed": len(done), "prompt": prompt,
            "output": float(np.mean(outs[warmup:]))}


OPEN = [(0.5, 200, 200), (5, 200, 200), (2, 2000, 200), (5, 2000, 200), (20, 500, 50), (8, 1000, 300)]


@pytest.fixture(scope="module")
def open_runs():
    return {case: open_loop(*case) for case in OPEN}


def _open_run(m: dict[str, float], rate: float, tool: str = "vllm") -> br.BenchRun:
    return br.BenchRun(tool, "<sim>", "open", 1.0 + m["throughput"] * m["e2e"] / MS, m["throughput"],
                       m["throughput"] * m["e2e"] / MS, m["prompt"], m["output"], m["ttft"], m["tpot"],
                       int(m["completed"]))


def test_open_loop_means_are_what_the_fit_assumes(open_runs):
    """The open-loop equations (module docstring of sweep.grid.bench_results) at the true step
    time against the simulation: TTFT and TPOT means within 3% (TTFT without the length-biased
    step, TPOT alone in the step, misses by up to 17% on 2,000-token prompts at 5 req/s)."""
    for case, m in open_runs.items():
        run = _open_run(m, case[0])
        x, y, _ = br.equations([run], TRUE[1])
        fitted = x @ np.asarray(TRUE)
        shift = np.array([m["ttft"] - y[0], 0.0])  # the open-loop wait, moved to the measured side
        np.testing.assert_allclose(fitted + shift, [m["ttft"], m["tpot"]], rtol=0.03, err_msg=str(case))


def _vllm_json(m: dict[str, float], *, rate: float | str, cap: int | None) -> str:
    """A `vllm bench serve --save-result` file (vllm/benchmarks/serve.py's result_json)."""
    completed = int(m["completed"])
    return json.dumps({
        "date": "20261203-041500", "endpoint_type": "openai", "backend": "openai", "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": completed, "request_rate": rate, "burstiness": 1.0, "max_concurrency": cap,
        "duration": completed / m["throughput"], "completed": completed, "failed": 0,
        "total_input_tokens": int(round(m["prompt"] * completed)),
        "total_output_tokens": int(round(m["output"] * completed)),
        "request_throughput": m["throughput"], "request_goodput": None,
        "output_throughput": m["throughput"] * m["output"],
        "total_token_throughput": m["throughput"] * (m["prompt"] + m["output"]),
        "max_output_tokens_per_s": 0.0, "max_concurrent_requests": cap or 0, "rtfx": 0.0,
        "mean_ttft_ms": m["ttft"], "median_ttft_ms": m["ttft"], "std_ttft_ms": 0.0, "p99_ttft_ms": m["ttft"],
        "mean_tpot_ms": m["tpot"], "median_tpot_ms": m["tpot"], "std_tpot_ms": 0.0, "p99_tpot_ms": m["tpot"],
        "mean_itl_ms": m["tpot"], "median_itl_ms": m["tpot"], "std_itl_ms": 0.0, "p99_itl_ms": m["tpot"],
        "mean_e2el_ms": m["e2e"], "median_e2el_ms": m["e2e"], "std_e2el_ms": 0.0, "p99_e2el_ms": m["e2e"],
    })


def _sglang_line(m: dict[str, float], *, rate: float, cap: int | None) -> str:
    """One line of SGLang's bench_serving --output-file (python/sglang/bench_serving.py)."""
    completed = int(m["completed"])
    return json.dumps({
        "backend": "sglang", "dataset_name": "random", "request_rate": rate, "max_concurrency": cap,
        "sharegpt_output_len": None, "random_input_len": int(m["prompt"]), "random_output_len": int(m["output"]),
        "random_range_ratio": 0.0, "duration": completed / m["throughput"], "completed": completed,
        "total_input_tokens": int(round(m["prompt"] * completed)),
        "total_output_tokens": int(round(m["output"] * completed)),
        "total_output_tokens_retokenized": int(round(m["output"] * completed)),
        "request_throughput": m["throughput"], "input_throughput": m["throughput"] * m["prompt"],
        "output_throughput": m["throughput"] * m["output"],
        "mean_e2e_latency_ms": m["e2e"], "median_e2e_latency_ms": m["e2e"], "std_e2e_latency_ms": 0.0,
        "p99_e2e_latency_ms": m["e2e"], "mean_ttft_ms": m["ttft"], "median_ttft_ms": m["ttft"], "std_ttft_ms": 0.0,
        "p99_ttft_ms": m["ttft"], "mean_tpot_ms": m["tpot"], "median_tpot_ms": m["tpot"], "std_tpot_ms": 0.0,
        "p99_tpot_ms": m["tpot"], "mean_itl_ms": m["tpot"], "median_itl_ms": m["tpot"], "std_itl_ms": 0.0,
        "p95_itl_ms": m["tpot"], "p99_itl_ms": m["tpot"], "concurrency": m["throughput"] * m["e2e"] / MS,
        "accept_length": None,
    })  # json.dumps writes a float inf as Infinity, as SGLang's file holds it


def _genai_perf_json(m: dict[str, float], *, concurrency: int | None, rate: float | None) -> str:
    """GenAI-Perf's profile_export_genai_perf.json (genai_perf/export_data/json_exporter.py)."""
    def stat(v: float, unit: str) -> dict[str, float | str]:
        return {"unit": unit, "avg": v, "p50": v, "p90": v, "p99": v, "min": v, "max": v, "std": 0.0}
    return json.dumps({
        "request_throughput": {"unit": "requests/sec", "avg": m["throughput"]},
        "request_latency": stat(m["e2e"], "ms"),
        "time_to_first_token": stat(m["ttft"] / MS, "s") if concurrency == 8 else stat(m["ttft"], "ms"),
        "inter_token_latency": stat(m["tpot"], "ms"),
        "output_token_throughput": {"unit": "tokens/sec", "avg": m["throughput"] * m["output"]},
        "output_sequence_length": stat(m["output"], "tokens"),
        "input_sequence_length": stat(m["prompt"], "tokens"),
        "input_config": {"model": ["llama-3.1-8b"], "backend": "vllm", "endpoint_type": "chat",
                         "concurrency": concurrency, "request_rate": rate, "streaming": True},
    })


def _closed(c: int, p: int, o: int) -> dict[str, float]:
    """A closed-loop run's means from test_grid_step_fit's simulation (throughput from Little's law)."""
    ttft, tpot = closed_loop(c, p, o)
    e2e = ttft + (o - 1) * tpot
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e, "throughput": c / (e2e / MS), "completed": 1000,
            "prompt": p, "output": o}


CLOSED = [(1, 200, 200), (16, 200, 200), (4, 2000, 200), (32, 500, 50)]


@pytest.fixture(scope="module")
def closed_runs():
    return {case: _closed(*case) for case in CLOSED}


def _check(fit, rtol=(0.03, 0.03, 0.15)):
    assert fit.shape == "request" and fit.pinned == ()
    for got, want, tol in zip(fit.coefficients, TRUE, rtol):
        assert got == pytest.approx(want, rel=tol)


def test_vllm_result_files_open_and_closed_recover_the_step_time(tmp_path, open_runs, closed_runs, capsys):
    paths = []
    for (c, p, o), m in closed_runs.items():
        paths.append(tmp_path / f"vllm-inf-concurrency{c}-{p}-{o}.json")
        paths[-1].write_text(_vllm_json(m, rate="inf", cap=c))
    for (r, p, o), m in open_runs.items():
        paths.append(tmp_path / f"vllm-{r}qps-{p}-{o}.json")
        paths[-1].write_text(_vllm_json(m, rate=float(r), cap=None))
    fit, runs = br.fit_paths(paths)
    assert [r.workload for r in runs] == ["closed"] * len(CLOSED) + ["open"] * len(OPEN)
    assert [r.concurrency for r in runs[:len(CLOSED)]] == [float(c) for c, _, _ in CLOSED]
    assert fit.n == 2 * len(paths) and fit.rows == len(paths)
    _check(fit)
    # the residual table shows the measured means, not the open-loop-corrected ones
    assert fit.measured_ms[2 * len(CLOSED)] == pytest.approx(open_runs[OPEN[0]]["ttft"])
    assert main(["fit", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert "open, 0.5" in out and "closed, 16 clients" in out and "t_token_ms" in out


def test_sglang_jsonl_and_genai_perf_files_recover_the_step_time(tmp_path, open_runs, closed_runs):
    lines = [_sglang_line(m, rate=math.inf, cap=c) for (c, _, _), m in closed_runs.items()]
    lines += [_sglang_line(m, rate=float(r), cap=None) for (r, _, _), m in open_runs.items()]
    jsonl = tmp_path / "sglang.jsonl"
    jsonl.write_text("\n".join(lines) + "\n\n")
    assert "Infinity" in lines[0]  # SGLang's float inf, as Python's json writes it
    runs = br.read_file(jsonl)
    assert [r.tool for r in runs] == ["sglang"] * len(lines)
    assert runs[1].where == f"{jsonl}:2"
    _check(br.fit_runs(runs, str(jsonl)))
    # a grid's [profile] file may be the JSONL itself
    fit = fit_text(jsonl.read_text(), str(jsonl), "step")
    assert fit.coefficients == br.fit_runs(runs, str(jsonl)).coefficients
    files = []
    for (c, _, _), m in closed_runs.items():
        files.append(tmp_path / f"gp-c{c}.json")
        files[-1].write_text(_genai_perf_json(m, concurrency=c, rate=None))
    for (r, p, o), m in open_runs.items():
        files.append(tmp_path / f"gp-r{r}-{p}-{o}.json")
        files[-1].write_text(_genai_perf_json(m, concurrency=None, rate=float(r)))
    fit, runs = br.fit_paths(files)
    assert {r.tool for r in runs} == {"genai-perf"}
    _check(fit)


def test_a_finite_rate_that_filled_its_concurrency_cap_is_a_closed_loop(closed_runs):
    """vLLM with --request-rate and --max-concurrency: where the run's mean concurrency reached
    the cap the clients were the limit (a closed loop at the cap); below it, an open loop."""
    m = closed_runs[(16, 200, 200)]
    at_cap = br.read_runs(_vllm_json(m, rate=100.0, cap=16), "a.json")[0]
    assert (at_cap.workload, at_cap.concurrency) == ("closed", 16.0)
    below = br.read_runs(_vllm_json(m, rate=100.0, cap=64), "b.json")[0]
    assert below.workload == "open"
    assert below.concurrency == pytest.approx(1.0 + m["throughput"] * m["e2e"] / MS)


@pytest.mark.parametrize("text, where, rule", [
    ('{"request_rate": "inf", "max_concurrency": null, "completed": 10, "total_input_tokens": 100, '
     '"total_output_tokens": 100, "request_throughput": 1.0, "mean_ttft_ms": 5, "mean_e2el_ms": 9}',
     "request_rate = 'inf'", "a burst has no steady state"),
    ('{"request_rate": 2.0, "max_concurrency": null, "completed": 0, "total_input_tokens": 0, '
     '"total_output_tokens": 0, "request_throughput": 0, "mean_ttft_ms": 5, "mean_e2el_ms": 9}',
     "completed = 0", "no request completed"),
    ('{"request_rate": 2.0, "max_concurrency": null, "completed": 5, "total_input_tokens": 100, '
     '"total_output_tokens": 100, "request_throughput": 1.0, "mean_ttft_ms": "fast", "mean_e2el_ms": 9}',
     "mean_ttft_ms = 'fast'", "must be a number"),
    ('{"request_rate": -1, "max_concurrency": null, "completed": 5, "total_input_tokens": 100, '
     '"total_output_tokens": 100, "request_throughput": 1.0, "mean_ttft_ms": 5, "mean_e2el_ms": 9}',
     "request_rate = '-1'", 'must be a positive number or "inf"'),
    ('{"hello": 1}', "<fields> = '1 fields'", "is not a benchmark result this reads"),
    ('{"time_to_first_token": {"avg": 3, "unit": "ms"}, "input_sequence_length": {"avg": 100}, '
     '"output_sequence_length": {"avg": 10}, "request_throughput": {"avg": 1}, "input_config": {}}',
     "input_config = 'no concurrency or request_rate'", "must say its load"),
    ('{"a": 1}\n[1, 2]\n', "line 2 = 'list'", "must be a JSON object"),
    ('{"a": 1}\n{oops\n', "line 2 = 'column 2'", "is not JSON"),
])
def test_bad_result_files_are_one_line_naming_file_field_and_rule(tmp_path, capsys, text, where, rule):
    path = tmp_path / "result.json"
    path.write_text(text)
    assert main(["fit", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert str(path) in err and where in err and rule in err, err


def test_a_csv_among_result_files_and_a_result_in_a_dynamic_grid_are_refused(tmp_path, capsys, closed_runs):
    result = tmp_path / "r.json"
    result.write_text(_vllm_json(closed_runs[(1, 200, 200)], rate="inf", cap=1))
    csv = tmp_path / "p.csv"
    csv.write_text("batch_size,latency_ms\n1,10\n2,12\n")
    assert main(["fit", str(result), str(csv)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(csv) in err and "only as serving benchmark results" in err
    with pytest.raises(ProfileError, match="it fits continuous serving's step time"):
        fit_text(result.read_text(), str(result), "service")
    # one run gives two equations: too few for three coefficients and their errors
    with pytest.raises(ProfileError, match="give at least 4"):
        br.fit_paths([result])
