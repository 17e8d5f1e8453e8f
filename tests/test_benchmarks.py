"""Every benchmark script, smoke-run in this process at a tiny size, so that none can rot.

Each script in `benchmarks/` (not the `_`-prefixed helpers; a new script is covered as soon
as it exists) is loaded from its path and its `main(["--smoke"])` called: it must return
what it printed, the agreement checks it makes must hold, and it must write nothing into
the repository (its real runs write `benchmarks/results/*.json` and `docs/*.png`). Nothing
here depends on time: the speed figures are the scripts' business, not the tests'.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
WATCHED = (BENCH / "results", BENCH.parent / "docs")
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def _listing() -> dict[Path, tuple[int, int]]:
    """Every file under the folders a real run writes to, with its size and mtime."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for d in WATCHED if d.exists()
            for p in d.rglob("*") if p.is_file()}


def _load(path: Path):
    """The script as a module (not `__main__`), with `benchmarks/` importable for `_helpers`."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


# What each script's answers must satisfy (the agreement checks the scripts print, and the
# line naming the baseline and the ratio ours / baseline).


def _kernel(out, text):
    assert set(out) == {"full", "windowed", "roofline"}
    roof = out.pop("roofline")
    assert roof["points"] == 256 and roof["cost_ratio"] > 0  # SPEC 13 against the linear roofline
    assert "cost SPEC 13/linear" in text
    for row in out.values():
        assert row["points"] == 256
        assert row["max_rel_diff"] < 1e-9  # JAX against the NumPy/SciPy twin, every column
        assert row["speedup"] > 0
    assert "JAX/NumPy" in text


def _gamma(out, text):
    assert {r["workload"] for r in out["rows"]} == {"uniform", "transition"}
    assert len(out["rows"]) == 6
    for err in out["max_rel_diff"].values():  # against SciPy where SciPy is accurate
        assert err < 1e-10
    assert "vs scipy" in text


def _batcher(out, text):
    assert out["points"] == 144
    assert 100 <= out["steady_points"] <= 144  # near saturation a smoke-sized run may not settle
    assert out["table"]["all points"]["batcher mean"]["n"] == out["steady_points"]
    # the batcher model is finite wherever the simulated system is stable (every point here)
    assert out["table"]["all points"]["batcher mean"]["inf"] == 0
    assert out["table"]["all points"]["batcher P99 (p_q)"]["inf"] == 0
    # a few hundred requests a point: only a loose agreement on the median
    assert 0.7 < out["median_ratio"]["batcher model mean"] < 1.3
    assert "baseline: the simulator" in text


def _proxy_vs_sim(out, text):
    assert out["points"] == 117
    assert out["figure"] is not None and len(out["figure"].axes) == 9
    assert 0.7 < out["median_ratio"]["batcher model E[T]"] < 1.3
    assert "baseline: the simulator" in text


def _roofline_accuracy(out, text):
    assert len(out["rows"]) >= 20
    for row in out["rows"]:
        assert np.isfinite(row["spec13_ms"]) and row["spec13_ms"] > 0 and row["linear_ms"] > 0
    # the summary lines docs/roofline.md quotes
    assert "refined, all" in text and "linear roofline, all figures" in text
    assert "listed misses" in text
    assert "baseline: the published measurements" in text


def _load_accuracy(out, text):
    """The smoke run's three figures (one open loop at a rate, one at rate inf, one closed
    loop) are each predicted, positive and finite; the summary lines docs/accuracy-load.md quotes."""
    assert out["n"] == 3 and out["n_predicted"] == 3
    assert {r["workload"] for r in out["rows"]} == {"open", "closed"}
    for row in out["rows"]:
        assert np.isfinite(row["predicted"]) and row["predicted"] > 0 and row["fixed_by"]
    assert 0 <= out["within_20"] <= out["within_50"] <= 3
    assert "all predicted figures: 3 of 3" in text and "expected to be fixed by" in text
    # each figure also simulated as its benchmark ran (the reference scheduler, tiny runs here)
    for row in out["rows"]:
        assert np.isfinite(row["simulated"]) and row["simulated"] > 0 and row["simulated_half_width"] >= 0
    assert 0 <= out["within_20_simulated"] <= out["within_50_simulated"] <= 3
    # and by the analytic model under the engine's scheduler as run (its policy and steps)
    for row in out["rows"]:
        assert np.isfinite(row["analytic_as_run"]) and row["analytic_as_run"] > 0
    assert "analytic as run, default catalog: within 20%" in text
    assert "simulated as run, default catalog" in text and "simulated: expected to be fixed by" in text
    # the closed-loop figure is its setup's only TPOT, so it calibrates eta_bw and reproduces
    # itself (fixed-point iteration to within 1%), and is left out of the calibrated share
    (closed,) = [r for r in out["rows"] if r["workload"] == "closed"]
    assert closed["calibration_figure"] and 1e-3 <= closed["eta_bw"] <= 1.0
    assert closed["predicted_calibrated"] == pytest.approx(closed["measured"], rel=0.01) or closed["eta_bw"] == 1.0
    # the open loop's lightest-load TTFT calibrates the request latency (the model's TTFT is below
    # it, so the latency is positive) and reproduces itself; the rate-inf figure is held out
    (ttft,) = [r for r in out["rows"] if r["metric"] == "ttft_p50_ms"]
    assert ttft["calibration_figure"] and ttft["predicted_calibrated"] == pytest.approx(ttft["measured"], rel=0.01)
    assert out["n_held_out"] == 1 and "calibrated, the 2 calibration figures left out" in text


def _efficiency_fit(out, text):
    assert len(out["rows"]) >= 80 and out["within_20"]["loo_figures"] == 4
    for row in out["rows"]:
        assert row["before"] > 0 and row["after"] > 0
    assert sum(r["loo"] is not None for r in out["rows"]) == 4
    assert out["within_20"]["after"] > out["within_20"]["before"]  # the table beats the single set
    assert "BEFORE" in text and "AFTER" in text and "leave-one-out" in text
    assert "baseline: the published measurements" in text


def _scale(out, text):
    assert [r["regime"] for r in out["part1"]] == ["full"]
    for r in out["part1"]:
        assert r["rows"] > 0 and r["frontier_rows"] > 0 and r["ratio_points"] > 0
    (row,) = out["part2"]
    assert row["points"] > 0 and row["frontier"] > 0 and row["rss_mb"] > 0
    assert "against raw pyarrow" in text and "engine/(a)" in text


def _search(out, text):
    assert out["part1"]["agree"] is True  # JAX decisions identical to the NumPy version's
    (row,) = out["part2"]
    assert row["groups"] == 2 and row["points"] == 2 * 1024 and row["frontier"] > 0
    assert "answers identical: True" in text


def _simulate(out, text):
    assert out["max_latency_diff_s"] < 1e-9  # JAX simulator against the Python event loop
    assert out["python_lanes"] > 0 and out["speedup"] > 0
    assert np.all(np.isfinite(out["p99_s"]))
    assert "speed-up JAX / Python" in text


def _cluster(out, text):
    r1 = out["part1"]
    assert r1["points"] > 0 and r1["in_process_s"] > 0 and r1["dask_1_s"] > 0
    assert r1["in_process_cpu_s"] > 0 and r1["dask_1_cpu_s"] > 0  # the workers counted too
    assert out["part2"]["tasks_per_s"] > 0 and out["part2"]["segments"] >= 2 and out["part2"]["idle_cpu_s_per_s"] >= 0
    assert len(out["part3"]) == 1 and all(r["trials_per_s"] > 0 for r in out["part3"])
    r4 = out["part4"]
    # the study's 10,000 points in 250 scenario groups of 40: one group a task (sweep.runner.cluster)
    assert r4["study_points"] == 10_000 and r4["tasks"] == 250 and r4["points_per_task"] == 40
    assert r4["per_point_s"] > 0 and r4["compile_s"] >= 0 and r4["projected_s"] > 0
    assert "overhead" in text and "trials/s" in text and "64 workers" in text
    r5 = out["part5"]  # seed-gpt3 (5 points, one scenario group: one task) in process and on 1 worker, cold
    assert [(r["workers"], r["cache"]) for r in r5] == [(0, "cold"), (1, "cold")]
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 and r["tasks"] == 1 and r["points"] == 5 for r in r5)


def _uncertainty(out, text):
    rows = out["rows"]
    assert set(rows) == {"plain", "S=64", "latency only", "derivatives", "plain + derivatives", "sensitivity"}
    assert "XLA ops/point" in text and all(r["xla_ops_per_point"] > 0 for r in rows.values())
    # S = 64 evaluates the model 64 times per point: at least 64x the latency alone's arithmetic
    assert rows["S=64"]["xla_ops_per_point"] >= 64 * rows["latency only"]["xla_ops_per_point"]
    assert np.isfinite(rows["derivatives"]["marginal_cost"]) and "marginal cost" in text
    assert all(r["points_per_s"] > 0 and np.isfinite(r["cost_ratio"]) for r in rows.values())
    assert rows["plain"]["cost_ratio"] == 1.0 and "cost / plain" in text
    cont = out["continuous"]  # the smoke run leaves out the continuous derivatives (8 s to compile)
    assert set(cont) == {"plain", "S=64", "latency only"} and "continuous batching" in text
    assert all(r["points_per_s"] > 0 and np.isfinite(r["cost_ratio"]) for r in cont.values())


def _cb_accuracy(out, text):
    assert out["points"] == 6 and 0 <= out["region"] <= 6
    assert 0.0 <= out["share"] <= 1.0 and out["judged"] == sum(t["judged"] for t in out["table"].values())
    assert len(out["table"]) == 12  # 3 means and P50/P90/P99 of TTFT, TPOT and E2E
    assert "of comparisons within target" in text and "By region" in text


def _search_workers(out, text):
    assert [r["workers"] for r in out["rows"]] == [1, 2]
    for r in out["rows"]:  # the budget exact, shared, and the answer compared with the exact optimum
        assert r["trials"] == r["complete"] == 16 and 1 <= r["owners"] <= r["workers"]
        assert r["trials_per_s"] > 0 and r["exact"] > 0 and r["value"] >= r["exact"]
    assert set(out["table"]) == {1, 2} and all(0.0 <= t["found_exact"] <= 1.0 for t in out["table"].values())
    assert "trials/s" in text and "exact optimum" in text and "none twice (True)" in text


def _disagg_accuracy(out, text):
    assert out["points"] == 3 and out["steady"] == 3  # 3 configurations at a load of 0.3: all steady
    assert set(out["summary"]) == {"ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99", "e2e_mean", "e2e_p99"}
    judged = sum(r["judged"] for r in out["summary"].values())
    assert judged > 0 and all(0.0 <= r["within_20"] <= 1.0 for r in out["summary"].values() if r["judged"])
    # the decode pool's TPOT at light load: the analytic model within 20% of the simulator
    assert out["summary"]["tpot_mean"]["judged"] > 0 and out["summary"]["tpot_mean"]["within_20"] == 1.0
    assert "worst cases" in text and "| metric |" in text


def _itl_accuracy(out, text):
    """Two light-load configurations: the analytic gap law's median and P99 within the 25%
    target of the simulated finite run (light load: few mixed steps, a narrow law)."""
    assert len(out["rows"]) == 2
    for key in ("itl_q0.5", "itl_q0.99"):
        assert out["summary"][key]["judged"] == 2 and out["summary"][key]["within_25"] == 2
    assert "worst P99" in text


def _closed_accuracy(out, text):
    """Three small closed loops; the first is one client without think time, a lone request
    after another: its mean TTFT and TPOT are the open model's at zero load, closed forms
    the simulator reproduces (within SPEC 10's targets)."""
    assert len(out["rows"]) == 3 and out["rows"][0]["clients"] == 1
    first = out["rows"][0]
    assert abs(first["tpot_mean_err"]) <= 0.05 and abs(first["ttft_mean_err"]) <= 0.15
    assert ("trusted", "throughput") in out["summary"] and "judged comparisons within target" in text


CHECKS = {"cb_accuracy": _cb_accuracy, "itl_accuracy": _itl_accuracy, "closed_accuracy": _closed_accuracy,
          "disagg_accuracy": _disagg_accuracy,
          "search_workers": _search_workers,
          "cluster": _cluster, "kernel": _kernel, "uncertainty": _uncertainty, "gamma": _gamma, "batcher": _batcher,
          "proxy_vs_sim": _proxy_vs_sim, "roofline_accuracy": _roofline_accuracy, "load_accuracy": _load_accuracy,
          "efficiency_fit": _efficiency_fit, "scale": _scale, "search": _search,
          "simulate": _simulate}


def test_checks_name_existing_scripts():
    assert SCRIPTS, "no benchmark script found"
    assert set(CHECKS) <= {p.stem for p in SCRIPTS}, "checks for a benchmark script that is gone"


#: Smoke runs that start real processes (a Dask cluster, PostgreSQL servers, worker processes)
#: and take 25-95 s on 2 cores, load_accuracy (one compilation of the continuous grid
#: point, ~50 s on 2 busy cores) and disagg_accuracy (the disaggregated kernel and both
#: pools' simulators compiled, ~50 s of CPU): run by `pytest -m slow`, the rest by the default suite.
SLOW_SMOKE = {"cluster", "search_workers", "load_accuracy", "disagg_accuracy"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW_SMOKE else p
                                  for p in SCRIPTS], ids=lambda p: p.stem)
def test_benchmark_smoke(path, capsys):
    before = _listing()
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    module = _load(path)
    out = module.main(["--smoke"])
    text = capsys.readouterr().out
    if cores is not None:  # a smoke run never pins the test process (gamma.py pins real runs)
        assert os.sched_getaffinity(0) == cores
    assert out, f"{path.name}: main returned nothing"
    assert text.strip(), f"{path.name}: printed nothing"
    assert _listing() == before, f"{path.name} --smoke wrote into benchmarks/results/ or docs/"
    if path.stem in CHECKS:  # a new script gets the checks above until it has its own
        CHECKS[path.stem](out, text)


@pytest.mark.slow
def test_load_accuracy_second_set_smoke(capsys):
    """`load_accuracy.py --data` on the second published set (tests/data/load_measurements_dli.csv):
    the smoke run predicts its first run's four figures (a closed loop: TTFT, TPOT, E2E and
    output tokens/s), each positive and finite, and writes nothing."""
    before = _listing()
    data = BENCH.parent / "tests" / "data" / "load_measurements_dli.csv"
    out = _load(BENCH / "load_accuracy.py").main(["--smoke", "--data", str(data)])
    assert _listing() == before
    assert out["n"] == 4 and {r["metric"] for r in out["rows"]} == {
        "ttft_mean_ms", "tpot_mean_ms", "e2e_mean_ms", "output_tok_s"}
    assert {r["workload"] for r in out["rows"]} == {"closed"}
    for row in out["rows"]:
        assert np.isfinite(row["predicted"]) and row["predicted"] > 0
        assert np.isfinite(row["simulated"]) and row["simulated"] > 0
    assert "all predicted figures: 4 of 4" in capsys.readouterr().out


@pytest.mark.slow
def test_load_accuracy_ablation_smoke(capsys):
    """The ablation options (docs/accuracy-load.md, "A second, larger set"): --setups draws
    whole setups at random, --scheduler-policy runs every engine under one policy (the older
    NIM's own is prefill_first), --prompts-per-client sets a closed loop's requests a client;
    the smoke run predicts the first drawn run's four figures and writes nothing."""
    before = _listing()
    data = BENCH.parent / "tests" / "data" / "load_measurements_dli.csv"
    la = _load(BENCH / "load_accuracy.py")
    rows = la.read_rows(data)
    import random
    drawn = set(random.Random(5).sample(sorted({la.setup_of(r) for r in rows}), 2))
    out = la.main(["--smoke", "--data", str(data), "--setups", "2", "--setup-seed", "5",
                   "--scheduler-policy", "chunked", "--prompts-per-client", "2"])
    assert _listing() == before
    assert out["n"] == 4 and {la.setup_of(r) for r in rows if r["id"] in {x["id"] for x in out["rows"]}} <= drawn
    assert la.POLICY_OVERRIDE == "chunked" and la.scheduler_of(rows[0]) == ("chunked", "reserve")
    for row in out["rows"]:
        assert np.isfinite(row["simulated"]) and row["simulated"] > 0
    capsys.readouterr()


def test_load_accuracy_policy_ablation_keeps_the_kv_admission(monkeypatch):
    """`scheduler_of`: each engine's own policy and KV admission (the older NIM of the second
    set: prefill_first, reserve; SGLang 0.3: prefill_first, on demand), and under an ablation's
    policy the same admission with that policy."""
    la = _load(BENCH / "load_accuracy.py")
    nim = {"engine": "tensorrt-llm", "engine_version": "NIM (TensorRT-LLM backend; version not stated)"}
    sgl = {"engine": "sglang", "engine_version": "v0.3.0"}
    assert la.scheduler_of(nim) == ("prefill_first", "reserve")
    assert la.scheduler_of(sgl) == ("prefill_first", "on_demand")
    monkeypatch.setattr(la, "POLICY_OVERRIDE", "chunked")
    assert la.scheduler_of(nim) == ("chunked", "reserve")
    assert la.scheduler_of(sgl) == ("chunked", "on_demand")


def test_load_accuracy_windows_ablation_measures_unstated_closed_loops_in_windows(monkeypatch):
    """`run_of` under `--measurement-interval` (WINDOW_S): a closed loop whose source states no
    prompt count is measured in GenAI-Perf's windows (its concurrency as the first guess at the
    prompts); by default, `CLOSED_PROMPTS_PER_CLIENT` requests a client (at least
    `CLOSED_MIN_PROMPTS`); an open loop keeps its stated prompts either way."""
    la = _load(BENCH / "load_accuracy.py")
    closed = {"workload": "closed", "concurrency": "25", "num_prompts": "", "request_rate_rps": ""}
    opened = {"workload": "open", "concurrency": "", "num_prompts": "1200", "request_rate_rps": "4"}
    assert la.run_of(closed) == la.Benchmark(125, math.inf, 25)
    monkeypatch.setattr(la, "WINDOW_S", 12.0)
    assert la.run_of(closed) == la.Benchmark(25, math.inf, 25, window_s=12.0)
    assert la.run_of(opened) == la.Benchmark(1200, 4.0, None)


@pytest.mark.parametrize("argv", [["--setups", "0"], ["--prompts-per-client", "0"], ["--scheduler-policy", "fcfs"],
                                  ["--measurement-interval", "0"]])
def test_load_accuracy_bad_ablation_is_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        _load(BENCH / "load_accuracy.py").main(argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err.strip().splitlines()[-1]  # the error names the flag


def test_load_accuracy_engine_cost_comes_from_the_engines_other_setups():
    """`load_accuracy.engine_seq_costs` (docs/roofline.md, "Per-sequence cost"): hand-made TPOT
    figures whose residual is exactly n t over the calibrated prediction give each setup the
    slope of the *other* setups of its engine version on its GPU (B's 60 us to A, A's 30 us to
    B), else 0 (C, alone on its GPU, takes nothing from A and B on another GPU), never its own;
    a calibration figure does not enter, and a negative slope is 0."""
    la = _load(BENCH / "load_accuracy.py")
    base = {"engine": "tensorrt-llm", "engine_version": "v1", "model": "llama-3.1-8b", "tensor_parallel": "1",
            "weight_dtype": "fp16", "kv_dtype": "fp16", "prompt_tokens_mean": "200", "output_tokens_mean": "200",
            "workload": "closed", "metric": "tpot_mean_ms"}
    rows, tpot = [], {}
    for setup, gpu, t_us, clients in (("a", "h100-sxm", 30.0, (10, 100)), ("b", "h100-sxm", 60.0, (50, 200)),
                                      ("c", "a100-80gb", 500.0, (100,))):
        for n in clients:
            predicted = 10.0
            rows.append({**base, "id": f"{setup}-{n}", "gpu": gpu, "concurrency": str(n),
                         "prompt_tokens_mean": setup, "measured": str(predicted + n * t_us * 1e-3)})
            tpot[f"{setup}-{n}"] = predicted
    costs = la.engine_seq_costs(rows, tpot, {}, used={"c-100"})
    by = {k[7]: v for k, v in costs.items()}
    assert by["b"] == pytest.approx(30.0, rel=1e-9)
    assert by["a"] == pytest.approx(60.0, rel=1e-9)
    assert by["c"] == 0.0  # no other setup on its GPU
    # a second A100 setup of the version: C now takes its slope (not A's or B's)
    rows += [{**base, "id": f"d-{n}", "gpu": "a100-80gb", "concurrency": str(n), "prompt_tokens_mean": "d",
              "measured": str(10.0 + n * 90.0 * 1e-3)} for n in (20, 80)]
    tpot |= {"d-20": 10.0, "d-80": 10.0}
    assert {k[7]: v for k, v in la.engine_seq_costs(rows, tpot, {}, used={"c-100"}).items()}["c"] == pytest.approx(
        90.0, rel=1e-9)
    fast = [{**r, "measured": "1.0"} if r["id"].startswith("b") else r for r in rows]
    assert {k[7]: v for k, v in la.engine_seq_costs(fast, tpot, {}, set()).items()}["a"] == 0.0


@pytest.mark.parametrize("argv", [["--parts", "4"], ["--parts", "1,6"], ["--repeat", "0"], ["--task-fixed-ms", "x"]])
def test_cluster_bad_arguments_are_one_line_and_exit_2(argv, capsys):
    """Part 4 alone needs part 2's figures from an earlier run: never invented ones."""
    with pytest.raises(SystemExit) as exc:
        _load(BENCH / "cluster.py").main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err


def test_the_worked_cluster_example_is_the_benchmarked_study():
    """docs/cluster.md's worked simulated study is the grid benchmarks/cluster.py projects."""
    study = _load(BENCH / "cluster.py").STUDY.strip()
    assert study in (BENCH.parent / "docs" / "cluster.md").read_text()


def test_executed_ops_counts_what_the_program_computes():
    """`benchmarks/_hlo.py` on programs whose arithmetic per point is known in closed form:
    x * 2 + 1 is 2 operations; 12 iterations of y * y + 1 are 24; `lax.map` in blocks of 100
    runs its body (exp, multiply) once per point; an exp broadcast over a second axis of 3
    and multiplied there is 1 exp (XLA keeps an exp in memory rather than recompute it) and
    3 products; a 1,000-point loop without a known trip count is counted once and reported."""
    import jax
    import jax.numpy as jnp

    hlo = _load(BENCH / "_hlo.py")
    n = 1000
    x = jnp.linspace(0.1, 1.0, n)

    def ops(f):
        return hlo.executed_ops(jax.jit(f).lower(x).compile(), n)

    assert ops(lambda x: x * 2.0 + 1.0).ops_per_point == 2.0
    assert (ops(lambda x: jax.lax.fori_loop(0, 12, lambda i, y: y * y + 1.0, x)).ops_per_point
            == pytest.approx(24.0, abs=0.1))
    assert (ops(lambda x: jax.lax.map(lambda y: jnp.exp(y) * y, x, batch_size=100)).ops_per_point
            == pytest.approx(2.0, abs=0.1))
    outer = ops(lambda x: jnp.exp(x)[:, None] * jnp.array([[1.0, 2.0, 3.0]])).ops_per_point
    assert 4.0 <= outer <= 7.0  # 1 exp + 3 products (+ XLA's own bookkeeping of the constant)
    loop = ops(lambda x: jax.lax.while_loop(lambda y: jnp.sum(y) < 1e6, lambda y: y * 2.0, x))
    assert loop.unknown_loops == 1


def test_cb_points_against_a_revision(capsys):
    """`cb_points.py --against REV` loads `cb_point` from git revision REV and times it beside
    today's: against HEAD, the module itself (or the committed version of one being edited),
    both columns filled and the ratios finite."""
    if shutil.which("git") is None or subprocess.run(["git", "-C", str(BENCH), "rev-parse", "HEAD"],
                                                     capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: --against reads the baseline from git")
    out = _load(BENCH / "cb_points.py").main(["--smoke", "--against", "HEAD"])
    (row,) = out["rows"]
    assert row["now_points_per_s"] > 0 and row["then_points_per_s"] > 0
    assert np.isfinite(row["ratio_best"]) and np.isfinite(row["ratio_median"])
    assert "at HEAD" in capsys.readouterr().out


def test_cb_accuracy_on_demand_smoke(capsys):
    """`cb_accuracy.py --kv-admission on_demand` simulates through the compiled event loop and
    splits the comparisons by the trust rule: the three groups partition the judged ones."""
    out = _load(BENCH / "cb_accuracy.py").main(["--smoke", "--kv-admission", "on_demand"])
    text = capsys.readouterr().out
    _cb_accuracy(out, text)
    split = out["trusted_split"]
    assert len(split) == 3 and "by the trust rule" in text
    trusted, may_block, untrusted = split.values()
    assert trusted[0] + untrusted[0] == out["judged"] and may_block[0] <= untrusted[0]
