"""`[options] workload = "closed"` in a continuous grid: `clients` over the fleet, each sending its
next request when the last finished (after `think_time_s`), optionally under a due rate
`arrival_rps` (`vllm bench serve --request-rate r --max-concurrency c`).

References:
- the analytic columns are `closed.closed_loop`'s mean value analysis at each replica's share
  of the clients (the same function `sweep predict-benchmark` prints), recomputed point by point;
- one client: the interactive response-time law is exact, X (E2E + Z) = 1, and the engine
  runs X E2E sequences on average (Little's law);
- a due rate below what the clients could send makes the closed loop the open loop at that
  rate, value for value;
- the simulated columns come from the compiled loop's closed loop, which equals the reference
  scheduler request by request (tests/test_models_cb_loop.py); the analytic model is held
  against it within SPEC 10's targets on unsaturated points, judged with the simulator's
  95% half-widths.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow.dataset as ds
import pytest

from sweep import grid as spec
from sweep.cli import main
from sweep.models.continuous.closed import closed_loop
from sweep.runner import run_grid

GRID = """
name = "closed"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
clients = [1, 8, 64]
think_time_s = [0.0, 2.0]
replicas = [1, 2]
prompt_tokens = 512
prompt_cv = 0.5
output_tokens = 128
output_cv = 0.5
batch_size = [16, 256]
max_batched_tokens = 8192
ttft_slo_ms = 2000
[options]
serving = "continuous"
workload = "closed"
"""


def _points(tmp_path, text, name="o"):
    f = tmp_path / f"{name}.toml"
    f.write_text(text)
    run_grid(spec.load(f), tmp_path / name)
    return ds.dataset(tmp_path / name / "points", partitioning="hive").to_table().to_pandas().sort_values(
        "point_id").reset_index(drop=True)


def test_closed_grid_is_mean_value_analysis_point_by_point(tmp_path):
    pts = _points(tmp_path, GRID)
    assert len(pts) == 3 * 2 * 2 * 2
    assert pts.arrival_rps.isna().all() and pts.lambda_per_replica_rps.isna().all()  # no due rate: NULL
    for _, r in pts.iterrows():
        want = closed_loop(r.clients / r.replicas, r.think_time_s, prompt_mean=512.0, prompt_cv=0.5,
                           output_mean=128.0, output_cv=0.5, cap=float(r.batch_size), max_batched_tokens=8192.0,
                           kv_capacity_tokens=r.kv_capacity_tokens, block_tokens=16.0,
                           t_fixed=r.t_step_fixed_ms * 1e-3, t_token=r.t_token_ms * 1e-3, t_ctx=r.t_ctx_ms * 1e-3,
                           quantiles=(0.99,))
        assert r.throughput_rps == pytest.approx(want["throughput_rps"], rel=1e-9)
        assert r.ttft_mean_ms == pytest.approx(want["ttft_mean"] * 1e3, rel=1e-9)
        assert r.e2e_p_ms == pytest.approx(want["e2e_q"][0.99] * 1e3, rel=1e-9)
        assert r.output_tok_s == pytest.approx(r.throughput_rps * 128.0, rel=1e-9)
        assert r.stable and r.rho < 1.0 + 1e-9
    one = pts[pts.clients / pts.replicas == 1]
    assert len(one) == 4
    # one client: the response-time law X (E2E + Z) = 1 and Little's law over the engine
    np.testing.assert_allclose(one.throughput_rps * (one.e2e_mean_ms * 1e-3 + one.think_time_s), 1.0, rtol=1e-9)
    np.testing.assert_allclose(one.mean_running, one.throughput_rps * one.e2e_mean_ms * 1e-3, rtol=1e-9)
    # more clients than slots: the loop runs at the engine's capacity, the rest of the cycle a
    # wait for a slot (the response-time law), a regime the model is trusted in
    many = pts[(pts.clients / pts.replicas == 64) & (pts.batch_size == 16) & (pts.think_time_s == 0)]
    assert len(many) and (many.rho > 1.0 - 1e-9).all() and many.analytic_trusted.all()
    np.testing.assert_allclose(many.throughput_rps * many.e2e_mean_ms * 1e-3, 64.0, rtol=1e-9)


def test_a_due_rate_below_the_loops_throughput_is_the_open_loop(tmp_path):
    base = GRID.replace("clients = [1, 8, 64]\nthink_time_s = [0.0, 2.0]\n", "arrival_rps = [0.5, 3.0]\n")
    open_ = _points(tmp_path, base.replace('workload = "closed"\n', ""), "open")
    closed = _points(tmp_path, base.replace("arrival_rps", "clients = 100000\narrival_rps"), "closed")
    assert len(open_) == len(closed) == 8 and open_.stable.all()
    for col in ("ttft_mean_ms", "ttft_p_ms", "tpot_mean_ms", "e2e_p_ms", "mean_running", "itl_p_ms"):
        np.testing.assert_allclose(closed[col], open_[col], rtol=1e-9, err_msg=col)
    np.testing.assert_allclose(closed.throughput_rps, open_.lambda_per_replica_rps, rtol=1e-12)
    np.testing.assert_allclose(open_.throughput_rps, open_.lambda_per_replica_rps, rtol=1e-12)


def test_simulated_closed_loop_decides_and_agrees_with_the_analytic_model(tmp_path):
    text = GRID.replace("replicas = [1, 2]\n", "").replace("clients = [1, 8, 64]", "clients = [8, 64]").replace(
        "think_time_s = [0.0, 2.0]", "think_time_s = 2.0").replace("batch_size = [16, 256]", "batch_size = 256") + (
        'latency_model = "simulated"\n[simulation]\nn_requests = 1500\nwarmup = 300\nreplications = 4\nseed = 5\n')
    pts = _points(tmp_path, text)
    assert len(pts) == 2 and pts.sim_steady.all()
    assert (pts.ttft_p_ms == pts.sim_ttft_p_ms).all()  # the simulator decides
    # the clients' measured send rate, against the analytic throughput of the same loop
    ana = [closed_loop(r.clients, 2.0, prompt_mean=512.0, prompt_cv=0.5, output_mean=128.0, output_cv=0.5,
                       cap=256.0, max_batched_tokens=8192.0, kv_capacity_tokens=r.kv_capacity_tokens,
                       block_tokens=16.0, t_fixed=r.t_step_fixed_ms * 1e-3, t_token=r.t_token_ms * 1e-3,
                       t_ctx=r.t_ctx_ms * 1e-3) for _, r in pts.iterrows()]
    for r, a in zip(pts.itertuples(), ana, strict=True):
        assert r.throughput_rps == pytest.approx(a["throughput_rps"], rel=0.05)
        # the accuracy targets, widened by the simulator's half-width
        assert abs(a["tpot_mean"] * 1e3 - r.sim_tpot_mean_ms) <= 0.05 * r.sim_tpot_mean_ms + r.sim_tpot_mean_hw_ms
        assert abs(a["ttft_mean"] * 1e3 - r.sim_ttft_mean_ms) <= 0.15 * r.sim_ttft_mean_ms + r.sim_ttft_mean_hw_ms
        assert math.isfinite(r.itl_p_ms) and r.itl_p_ms > 0


@pytest.mark.parametrize("change, key, rule", [
    (('clients = [1, 8, 64]\n', ''), "grid.clients", 'is required with workload = "closed"'),
    (('workload = "closed"\n', ''), "grid.clients", 'is a closed loop\'s: set workload = "closed"'),
    (('workload = "closed"\n', 'workload = "shut"\n'), "options.workload", "must be one of open, closed"),
    (('serving = "continuous"\nworkload = "closed"\n', 'workload = "closed"\n'), "options.workload",
     'set serving = "continuous"'),
    (("[options]", "[schedule]\nhourly_rps = [1.0, 2.0]\n[options]"), "schedule", "assumes an open loop"),
    (("[options]", "[sensitivity]\n[options]"), "sensitivity", "assumes an open loop"),
])
def test_bad_closed_loop_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, change, key, rule):
    f = tmp_path / "g.toml"
    f.write_text(GRID.replace(*change))
    assert main(["run", str(f), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0] and rule in err[0], err
    assert not (tmp_path / "out").exists()


def test_open_loop_refuses_a_think_time(tmp_path, capsys):
    f = tmp_path / "g.toml"
    f.write_text(GRID.replace('workload = "closed"\n', "").replace("clients = [1, 8, 64]\n", "arrival_rps = 2.0\n"))
    assert main(["run", str(f), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "grid.think_time_s" in err and 'set workload = "closed"' in err


def test_a_closed_run_reports_and_deploys_as_a_closed_loop(tmp_path, capsys):
    """`sweep report` draws the action map over the clients (the run has no arrival rate), and
    `sweep deploy` benchmarks one replica with its share of the clients (`--max-concurrency`,
    `--request-rate inf`), saying that `vllm bench serve` cannot think between requests."""
    pts = _points(tmp_path, GRID)
    out = tmp_path / "o"
    assert main(["report", str(out)]) == 0
    assert "clients (fleet)" in (out / "report.html").read_text()
    pick = pts[(pts.clients == 64) & (pts.replicas == 2) & (pts.batch_size == 256)]
    texts = {}
    for _, r in pick.iterrows():
        capsys.readouterr()
        assert main(["deploy", str(out), "--point", str(int(r.point_id))]) == 0
        texts[r.think_time_s] = capsys.readouterr().out
    for text in texts.values():
        assert "--max-concurrency 32" in text and "--request-rate inf" in text  # 64 clients over 2 replicas
        assert "a closed loop of 64 clients in all, 32 a replica" in text
    assert "has no think time" in texts[2.0] and "has no think time" not in texts[0.0]


@pytest.mark.parametrize("eta_bw", [0.66, 0.7039, 0.71])
def test_a_steep_line_closed_loop_stays_physical(eta_bw):
    """Llama 3.1 8B fp16 on one A100, 250 clients of 200/1000 tokens (a run of the DLI sheet,
    tests/data/load_measurements_dli.csv): with the setup's calibrated eta_bw 0.7039 the step
    that adds a 200-token chunk beside 249 decoders is compute-bound (the decode step of 250
    stays memory-bound), so the operating line's secant put t_fixed below 0 and it was
    clipped to 0; the closed loop's root search then found 512 s of TTFT, 0.12 ms of TPOT and
    488 tokens/s (a lone step on that line was 0.05 ms). With the decode step's overhead kept
    as the line's fixed cost (`roofline.line_at`) the loop is continuous in eta_bw: TPOT
    within 10% of its value at 0.66 (32.1 ms, where the secant is not clipped) and above the
    decode step of 200 sequences, TTFT below a second, and the engine runs every client."""
    from sweep import evaluate, grid_from_dict

    doc = {"name": "steep-line-closed", "grid": {
        "model": "llama-3.1-8b", "gpu": "a100-80gb", "gpus_per_replica": 1, "prompt_tokens": 200.0,
        "prompt_cv": 0.0, "output_tokens": 1000.0, "output_cv": 0.0, "batch_size": 256,
        "max_batched_tokens": 8192, "weight_bytes_per_param": "fp16", "kv_bytes_per_elem": "fp16",
        "ttft_slo_ms": math.inf, "tpot_slo_ms": math.inf, "slo_ms": 1e9, "eta_bw": eta_bw, "clients": [200, 250]},
        "options": {"serving": "continuous", "latency_model": "analytic", "kv_allocation": "paged",
                    "block_tokens": 16, "workload": "closed"}}
    at200, at250 = evaluate(grid_from_dict(doc), chunk_size=2).to_pylist()
    # fixed lengths and no think time: a loop in lockstep, which the analytic model does not trust
    assert at250["stable"] and not at250["analytic_trusted"]
    assert at250["tpot_mean_ms"] == pytest.approx(32.1, rel=0.10)
    assert at250["tpot_mean_ms"] > at200["tpot_mean_ms"] > 20.0
    assert at250["ttft_mean_ms"] < 1000.0 and at250["mean_running"] == pytest.approx(250.0, rel=0.01)


def test_a_loop_in_lockstep_is_not_trusted(tmp_path):
    """More than one client, no think time and one output length: the clients start, finish
    and send together (docs/continuous.md, "Closed loops"; seed 31 of
    benchmarks/closed_accuracy.py: TTFT 0.61 s simulated, 0.05 s analytic), so the analytic
    closed loop is not trusted there; think time or spread outputs leave the rule's other
    clauses to decide, as without it."""
    text = GRID.replace("output_cv = 0.5", "output_cv = [0.0, 0.5]").replace("replicas = [1, 2]", "replicas = 1")
    pts = _points(tmp_path, text, "lock")
    lock = (pts.clients > 1) & (pts.think_time_s == 0.0) & (pts.output_cv == 0.0)
    assert lock.any() and not pts.analytic_trusted[lock].any()
    # the same points with spread outputs are trusted somewhere: the rule adds only the lockstep
    twin = pts[(pts.clients > 1) & (pts.think_time_s == 0.0) & (pts.output_cv == 0.5)]
    assert twin.analytic_trusted.any()
