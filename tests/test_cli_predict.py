"""`sweep predict-benchmark`: its refusals (one line, exit 2, nothing on stdout), and end to end
from flags and from a finished run's point, the printed figures checked against the library
functions that make them (`simulate`, `analytic`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from sweep.cli import main
from sweep.cli.predict import Benchmark, analytic, config_from_row, simulate

FLAGS = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-num-seqs", "16", "--max-num-batched-tokens", "2048",
         "--input-len", "500", "--output-len", "40", "--input-cv", "0.3", "--output-cv", "0.3"]


@pytest.mark.parametrize(("argv", "needle"), [
    ([*FLAGS, "--request-rate", "4", "--replications", "1"], "--replications"),
    ([*FLAGS, "--request-rate", "4", "--think-ms", "100"], "--think-ms"),
    ([*FLAGS, "--request-rate", "0"], "--request-rate"),
    ([*FLAGS, "--request-rate", "nan"], "--request-rate"),
    ([*FLAGS, "--request-rate", "4", "--percentile", "1"], "--percentile"),
    ([*FLAGS[:-4], "--request-rate", "4", "--max-num-seqs", "4096"], "--max-num-batched-tokens"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--request-rate", "4"], "--input-len"),
    (["runs/x", "--model", "llama-3.1-8b", "--request-rate", "4"], "not both"),
    (["runs/x", "--request-rate", "4"], "--point"),
    ([*FLAGS[:2], "--gpu", "h100-sxm", "--input-len", "0", "--output-len", "4", "--request-rate", "4"], "--input-len"),
    ([*FLAGS, "--request-rate", "4", "--measurement-interval", "10000", "--num-prompts", "60"], "--num-prompts"),
    ([*FLAGS, "--request-rate", "inf", "--measurement-interval", "10000"], "--request-rate"),
    ([*FLAGS, "--request-rate", "4", "--measurement-interval", "0"], "--measurement-interval"),
    ([*FLAGS, "--request-rate", "4", "--measurement-interval", "10000", "--max-trials", "2"], "--max-trials"),
    ([*FLAGS, "--request-rate", "4", "--measurement-interval", "10000", "--stability-percentage", "-5"],
     "--stability-percentage"),
    ([*FLAGS, "--request-rate", "4", "--t-seq-us", "-1"], "--t-seq-us"),
    ([*FLAGS, "--request-rate", "4", "--t-seq-us", "20000"], "--t-seq-us"),
    (["runs/x", "--point", "0", "--request-rate", "4", "--t-seq-us", "40"], "not both"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict-benchmark", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and needle in err, err


def test_unknown_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "llama-9", "--gpu", "h100-sxm", "--input-len", "500", "--output-len", "40",
            "--request-rate", "4"]
    assert main(["predict-benchmark", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "llama-9" in err


def _figure(text: str, label: str) -> tuple[str, str]:
    """(simulated, analytic) cells of a printed line."""
    line = next(x for x in text.splitlines() if x.startswith(label + ":"))
    cells = re.split(r"\s{2,}", line[len(label) + 1:].strip())
    return cells[0], cells[-1]


def _num(cell: str) -> float:
    return float(cell.split(" +- ")[0].replace(",", ""))


@pytest.mark.slow
def test_from_flags_open_and_closed(capsys: pytest.CaptureFixture[str]) -> None:
    runs = ((["--request-rate", "4"], False), (["--request-rate", "inf", "--max-concurrency", "4"], True))
    for extra, closed in runs:
        assert main(["predict-benchmark", *FLAGS, *extra, "--num-prompts", "60", "--replications", "2"]) == 0
        text = capsys.readouterr().out
        assert "Serving Benchmark Result" in text
        for label in ("Request throughput (req/s)", "Mean TTFT (ms)", "P99 TPOT (ms)", "Median ITL (ms)"):
            sim, _ = _figure(text, label)
            assert math.isfinite(_num(sim)) and " +- " in sim
        assert ("closed loop of 4 clients" in text) == closed
        assert _figure(text, "Successful requests")[0].startswith("60")


@pytest.mark.slow
def test_from_a_run_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A finished run's point: its row's coefficients, and the printed figures are `simulate`'s
    and `analytic`'s for that configuration."""
    from sweep.catalog import load_catalog
    from sweep.cli.answers import RunFolder, run_grid_spec
    from sweep.cli.deploy import _row

    grid = tmp_path / "chat.toml"
    grid.write_text("""name = "chat"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
gpus_per_replica = 1
arrival_rps = 4.0
replicas = 1
prompt_tokens = 800
output_tokens = 60
prompt_cv = 0.4
output_cv = 0.4
batch_size = [8, 32]
max_batched_tokens = 2048
ttft_slo_ms = 1000
[options]
serving = "continuous"
kv_allocation = "paged"
""")
    out = tmp_path / "run"
    assert main(["run", str(grid), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    argv = ["predict-benchmark", str(out), "--point", "1", "--request-rate", "3", "--num-prompts", "80",
            "--replications", "3", "--seed", "4"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "batch_size 32" in text
    spec = run_grid_spec(out, None)
    cfg = config_from_row(_row(RunFolder.open(out, {}), spec, 1), 16.0, "test", load_catalog())
    assert cfg.t_token_compute > 0.0  # a roofline point: the simulated run's compute-bound step line
    bench = Benchmark(80, 3.0, None)
    sim = simulate(cfg, bench, 3, 4)
    model, basis = analytic(cfg, bench)
    assert basis in text
    for label, key, scale in (("Request throughput (req/s)", "request_rps", 1.0), ("Mean TTFT (ms)", "ttft_mean", 1e3),
                              ("P99 ITL (ms)", "itl_q0.99", 1e3), ("Median TPOT (ms)", "tpot_q0.5", 1e3)):
        s, a = _figure(text, label)
        assert _num(s) == pytest.approx(sim[key][0] * scale, abs=0.006)  # printed to 2 decimals
        if key != "itl_q0.99":
            assert _num(a) == pytest.approx(model[key] * scale, abs=0.006)
    assert _num(_figure(text, "P99 ITL (ms)")[1]) == pytest.approx(model["itl_q0.99"] * 1e3, abs=0.006)
    assert main([*argv[:3], "99", *argv[4:]]) == 2
    assert "--point" in capsys.readouterr().err


def test_a_burst_without_a_limit_has_no_analytic_figure() -> None:
    """All prompts at once and no concurrency limit: no steady state, so no analytic figure
    (never a made-up number), and the reason says so."""
    from sweep.cli.predict import BenchConfig

    cfg = BenchConfig(prompt_mean=500.0, prompt_cv=0.0, output_mean=40.0, output_cv=0.0, cap=16.0,
                      max_batched_tokens=2048.0, kv_capacity_tokens=math.inf, block_tokens=16.0, t_fixed=0.01,
                      t_token=3e-5, t_ctx=1e-7, service_cv=0.0, label="test")
    model, basis = analytic(cfg, Benchmark(100, math.inf, None))
    assert model == {} and "burst" in basis


def _small(**engine: object) -> object:
    from sweep.cli.predict import BenchConfig

    return BenchConfig(prompt_mean=300.0, prompt_cv=0.5, output_mean=30.0, output_cv=0.5, cap=16.0,
                       max_batched_tokens=1024.0, kv_capacity_tokens=math.inf, block_tokens=16.0, t_fixed=0.01,
                       t_token=3e-5, t_ctx=1e-7, service_cv=0.2, label="test", **engine)


def test_engine_variants_reach_the_simulated_run() -> None:
    """The scheduler flags change the simulated run as the reference scheduler's variants do:
    with a KV cache that never binds, on-demand allocation admits and steps exactly as a
    reservation does (every figure equal); multi-step windows deliver tokens in bursts, so the
    client's median gap between messages (ITL) is several steps while its mean TPOT barely
    moves; the analytic model's windows lengthen TTFT and the message gaps alike (open loop;
    under a concurrency limit it gives no figure rather than a one-step one)."""
    bench = Benchmark(120, 6.0, None)
    on_demand = simulate(_small(kv_admission="on_demand"), bench, 2, 3)
    reserve = simulate(_small(kv_admission="reserve"), bench, 2, 3)
    assert on_demand == reserve
    windows = simulate(_small(scheduler_steps=4), bench, 2, 3)
    assert windows["itl_q0.5"][0] > 2.5 * on_demand["itl_q0.5"][0]
    assert windows["tpot_mean"][0] == pytest.approx(on_demand["tpot_mean"][0], rel=0.5)
    model, basis = analytic(_small(scheduler_steps=4), bench)
    one, _ = analytic(_small(), bench)
    assert "windows of 4 steps" in basis and model["ttft_mean"] > one["ttft_mean"]
    assert model["itl_q0.5"] > 2.5 * one["itl_q0.5"]  # a message a window, as simulated above
    chunked_k = model
    model, basis = analytic(_small(scheduler_steps=4), Benchmark(120, 6.0, 8))
    assert model == {} and "open loop only" in basis
    first = simulate(_small(scheduler_policy="prefill_first"), bench, 2, 3)
    assert first != on_demand  # prompts in steps of their own pause the decodes
    # prefill_first has windows too: the first token comes with its prompt step, so the TTFT
    # waits for the window in progress but not for a window after it
    pf_k, basis = analytic(_small(scheduler_policy="prefill_first", scheduler_steps=4), bench)
    pf_1, _ = analytic(_small(scheduler_policy="prefill_first"), bench)
    assert "windows of 4 steps" in basis and pf_1["ttft_mean"] < pf_k["ttft_mean"] < chunked_k["ttft_mean"]


def test_the_engines_per_sequence_cost_reaches_the_benchmark() -> None:
    """`--t-seq-us` is the grid's `t_seq_us`: the step line drawn at the closed loop's 16
    clients (the cap) gains 16 x 50 us in its fixed part and nothing else (closed form), and
    the analytic mean TPOT of the closed loop rises by about that."""
    import argparse

    from sweep.catalog import load_catalog
    from sweep.cli.predict import config_from_flags

    keys = ("model", "gpu", "tp", "max_num_seqs", "max_num_batched_tokens", "input_len", "output_len", "input_cv",
            "output_cv", "weights", "kv_dtype", "request_latency_ms", "t_seq_us")
    vals = ("llama-3.1-8b", "h100-sxm", 1, 16, 2048, 500.0, 40.0, 0.0, 0.0, "bf16", "bf16", None)
    cat = load_catalog()
    rate = 1e4  # far above the capacity: the line at the cap's 16 sequences
    none = config_from_flags(argparse.Namespace(**dict(zip(keys, (*vals, None)))), cat, rate)
    some = config_from_flags(argparse.Namespace(**dict(zip(keys, (*vals, 50.0)))), cat, rate)
    assert some.t_fixed - none.t_fixed == pytest.approx(16 * 50e-6, rel=1e-9)
    assert some.t_token == pytest.approx(none.t_token, rel=1e-12) and some.t_ctx == none.t_ctx
    bench = Benchmark(200, math.inf, 16)
    a, b = analytic(none, bench)[0], analytic(some, bench)[0]
    assert 0.8 * 16 * 50e-6 < b["tpot_mean"] - a["tpot_mean"] < 1.2 * 16 * 50e-6


def test_on_demand_kv_runs_more_sequences_and_preempts() -> None:
    """A KV cache of 2,000 tokens holds about six 330-token reservations (P + O): reserved at
    admission, the running count stays under that and nothing is preempted; allocated on demand
    a sequence holds only what it has cached, so more run at once, the cache fills, and the
    newest are preempted and recompute (the reference scheduler's vLLM rule)."""
    from dataclasses import replace

    bench = Benchmark(150, 20.0, None)
    small = replace(_small(), kv_capacity_tokens=2000.0, service_cv=0.0)
    reserve = simulate(replace(small, kv_admission="reserve"), bench, 2, 5)
    on_demand = simulate(replace(small, kv_admission="on_demand"), bench, 2, 5)
    assert reserve["preemptions_per_request"][0] == 0.0 and reserve["recomputed_per_request"][0] == 0.0
    assert reserve["mean_running"][0] <= 2000 / 330
    assert on_demand["mean_running"][0] > reserve["mean_running"][0]
    assert on_demand["preemptions_per_request"][0] > 0.0 and on_demand["recomputed_per_request"][0] > 0.0
    assert 0.9 < on_demand["kv_peak_share"][0] <= 1.0


def test_a_bad_engine_flag_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for flag, value in (("--scheduler-policy", "fcfs"), ("--kv-admission", "lazy"), ("--num-scheduler-steps", "0"),
                        ("--kv-cache-tokens", "0")):
        assert main(["predict-benchmark", *FLAGS, "--request-rate", "4", flag, value]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1 and flag in err, err


def test_itl_law_closed_forms() -> None:
    """`benchrun.itl_quantiles` against its closed forms. Without step noise: T = 20 ms,
    lambda = 5/s, P = 500 tokens (one chunk under a budget of 1024 with 10 running), t_token =
    10 us: the prompts with a chunk in a step are Poisson with mean m = 0.1, so e^-0.1 = 90.5%
    of the steps are decode-only, T (1 - t_token lambda P) = 19.5 ms (the median), and 9.05%
    carry one prompt, 19.5 + 5 = 24.5 ms (the P99: 0.905 + 0.0905 > 0.99). With a budget no
    mixture reaches, the law's mean is T. With no arrivals the law is the step's lognormal:
    its median exp(-s^2 / 2) T."""
    from sweep.models.continuous.benchrun import itl_quantiles

    kw = dict(step_mean=0.02, mean_running=10.0, rate_rps=5.0, prompt_mean=500.0, max_batched_tokens=1024.0,
              t_token=1e-5)
    assert itl_quantiles((0.5, 0.99), service_cv=0.0, **kw) == pytest.approx([0.0195, 0.0245], rel=1e-12)
    # the mean, from the quantiles of a fine grid (a step law: its mean is the average quantile)
    grid = [(i + 0.5) / 4000 for i in range(4000)]
    law = itl_quantiles(grid, service_cv=0.0, **{**kw, "max_batched_tokens": 1e9})
    assert sum(law) / len(law) == pytest.approx(0.02, rel=1e-3)
    s2 = math.log1p(0.3 ** 2)
    (median,) = itl_quantiles((0.5,), service_cv=0.3, **{**kw, "rate_rps": 0.0})
    assert median == pytest.approx(0.02 * math.exp(-s2 / 2), rel=1e-9)
    qs = itl_quantiles((0.1, 0.5, 0.9, 0.99), service_cv=0.3, **kw)  # noise spreads every part
    assert qs == sorted(qs) and qs[0] < 0.0195 < qs[-1]


def test_engine_flag_choices_are_the_reference_schedulers_names() -> None:
    """The flags offer exactly the variants the reference scheduler runs (and the grid's
    policy names), so a choice can never reach it unknown."""
    from sweep.cli.predict import KV_ADMISSIONS, POLICIES
    from sweep.grid.load import SCHEDULER_POLICIES
    from sweep.testing import cb_reference

    assert set(POLICIES) == set(cb_reference.POLICIES) == set(SCHEDULER_POLICIES)
    assert set(KV_ADMISSIONS) == set(cb_reference.KV_ADMISSIONS)


def test_measured_windows_follow_perf_analyzer() -> None:
    """perf_analyzer's time windows (inference_profiler.cc, as `measured_windows` documents it),
    on hand-made runs whose answers are read off the rule: windows of 1 s from t = 0, a request
    in the window its last token arrives in; stop at the first window after which the last three
    each hold a request and agree within the percentage; at most `max_trials` windows."""
    from sweep.cli.predict import measured_windows

    # one request a window, each 0.5 s long: stable after the third window; the fourth's request is not measured
    send, end = np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.5, 1.5, 2.5, 3.5])
    keep, k, stable = measured_windows(send, end, 1.0, 10.0)
    assert (list(keep), k, stable) == ([True, True, True, False], 3, True)
    # nothing ends in the first window: windows 1-3 are the first three that each hold a request
    keep, k, stable = measured_windows(send + 1.0, end + 1.0, 1.0, 10.0)
    assert (list(keep), k, stable) == ([True, True, True, False], 4, True)
    # 1, 1, 3, 3, 3 requests in windows 0-4: at 10% the counts agree only over windows 2-4; at
    # GenAI-Perf's 999% (max / min <= 10.99) already over windows 0-2
    end = np.array([0.5, 1.5, 2.2, 2.5, 2.8, 3.2, 3.5, 3.8, 4.2, 4.5, 4.8, 5.5])
    send = end - 0.1
    keep, k, stable = measured_windows(send, end, 1.0, 10.0)
    assert (k, stable, int(keep.sum())) == (5, True, 11)
    keep, k, stable = measured_windows(send, end, 1.0)
    assert (k, stable, int(keep.sum())) == (3, True, 5)
    # the latencies must agree too: 2 s in window 2 against 0.1 s elsewhere (20x) keeps every three
    # windows that include window 2 unstable, so the run stops after windows 3-5, with all twelve
    send = end - np.where((end >= 2.0) & (end < 3.0), 2.0, 0.1)
    keep, k, stable = measured_windows(send, end, 1.0)
    assert (k, stable, int(keep.sum())) == (6, True, 12)
    # a request every other window never gives three windows in a row: max_trials, unstable
    end = np.array([0.5, 2.5, 4.5, 6.5, 8.5, 10.5, 12.5])
    keep, k, stable = measured_windows(end - 0.2, end, 1.0, max_trials=10)
    assert (k, stable, int(keep.sum())) == (10, False, 5)
    # a request that never finished is in no window
    keep, _, _ = measured_windows(np.zeros(4), np.array([0.5, 1.5, 2.5, math.inf]), 1.0)
    assert not keep[3]


def test_a_windowed_run_measures_what_ends_in_its_windows() -> None:
    """One client, fixed lengths, no step noise: every request takes the same E2E and the next
    is sent at its finish, so the k-th ends at k E2E and the windows hold floor(3 L / E2E)
    requests when each window holds one (L >= E2E), over a duration of that many E2Es. With
    windows shorter than a request, some are empty, the run goes on past three, and the
    requests measured are those ending before the last window's end."""
    from sweep.cli.predict import BenchConfig

    cfg = BenchConfig(prompt_mean=200.0, prompt_cv=0.0, output_mean=50.0, output_cv=0.0, cap=16.0,
                      max_batched_tokens=2048.0, kv_capacity_tokens=math.inf, block_tokens=16.0, t_fixed=0.01,
                      t_token=3e-5, t_ctx=1e-7, service_cv=0.0, label="test")
    one = simulate(cfg, Benchmark(40, math.inf, 1), 2, 0)
    e2e = one["e2e_mean"][0]
    for window in (1.2, 2.0 * e2e + 0.01):
        sim = simulate(cfg, Benchmark(64, math.inf, 1, window_s=window), 2, 0)
        assert sim["e2e_mean"][0] == pytest.approx(e2e, rel=1e-9)
        assert sim["completed"][0] == math.floor(3 * window / e2e)
        assert sim["duration_s"][0] == pytest.approx(sim["completed"][0] * e2e, rel=1e-9)
        assert (sim["windows"][0], sim["stable"][0]) == (3.0, 1.0)
    window = 0.75 * e2e  # shorter than a request: one window in four is empty
    sim = simulate(cfg, Benchmark(64, math.inf, 1, window_s=window), 2, 0)
    k = sim["windows"][0]
    assert k > 3 and sim["completed"][0] == math.floor(k * window / e2e)


@pytest.mark.slow
def test_a_windowed_run_from_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """`--measurement-interval` end to end: the GenAI-Perf header, the windows' lines, and the
    prompts found by doubling until the load outlasts the windows."""
    assert main(["predict-benchmark", *FLAGS, "--request-rate", "inf", "--max-concurrency", "4",
                 "--measurement-interval", "2000", "--replications", "2"]) == 0
    text = capsys.readouterr().out
    assert "GenAI-Perf --concurrency 4 --measurement-interval 2000 (windows of 2.4 s)" in text
    assert _num(_figure(text, "Measurement windows")[0]) >= 3
    assert _num(_figure(text, "Stable (share of runs)")[0]) == 1.0
    sim, model = _figure(text, "Benchmark duration (s)")
    assert 0.0 < _num(sim) <= 3 * 2.4 and _num(model) == pytest.approx(7.2)


def _genai_perf_export(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(window boundaries s, sent s, last response s) of a stored GenAI-Perf export extract."""
    text = path.read_text()
    bounds = next(line for line in text.splitlines() if line.startswith("# ms from the first:"))
    data = np.loadtxt(path, delimiter=",", comments="#", skiprows=1 + sum(x.startswith("#") for x in text.splitlines()))
    return np.array([float(x) for x in bounds.split(":")[1].split(",")]) / 1e3, data[:, 0] / 1e3, data[:, 1] / 1e3


@pytest.mark.parametrize(("clients", "measured"), [(1, 53), (5, 235)])
def test_windows_match_a_real_genai_perf_export(clients: int, measured: int) -> None:
    """A real GenAI-Perf run (tests/data/genai_perf_windows_c*.csv: the per-request export of a
    NIM at --measurement-interval 10000 and GenAI-Perf's --stability-percentage 999, from the
    DLI course; the file says where) against `measured_windows`: its windows are 1.2 x the
    interval apart (12.000-12.002 s), the load starts at its first boundary, it stopped after
    three windows, and every request it exported ends inside them, as the rule has it. With one
    client each request is sent as the last ends, so the three windows hold floor(36 s / the
    cycle) requests: 53."""
    from sweep.cli.predict import STABILITY_WINDOWS, WINDOW_STRETCH, measured_windows

    bounds, sent, last = _genai_perf_export(Path(__file__).parent / "data" / f"genai_perf_windows_c{clients}.csv")
    window = WINDOW_STRETCH * 10.0
    assert len(bounds) == STABILITY_WINDOWS + 1 and np.allclose(np.diff(bounds), window, atol=5e-3)
    assert len(sent) == measured and 0.0 <= sent.min() < 0.01
    keep, k, stable = measured_windows(sent, last, window)
    assert keep.all() and (k, stable) == (STABILITY_WINDOWS, True)
    if clients == 1:
        cycle = (sent[-1] - sent[0]) / (len(sent) - 1)
        assert math.floor(STABILITY_WINDOWS * window / cycle) == measured
