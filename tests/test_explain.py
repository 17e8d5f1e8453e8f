"""`sweep explain` (issue 13, item 3): one point's derivation with the formulas of
docs/model.md and its numbers, in the terminal and in the report.

References: the seed's worked example (grids/seed-gpt3.toml) to its printed precision, and
the engine's own columns: every number the derivation recomputes from the inputs in plain
float arithmetic equals the kernel's to 1e-9 (full batches, with and without service noise).
"""

from __future__ import annotations

import math

import pytest

import sweep
from sweep.cli import main
from sweep.errors import GridError
from sweep.models.base import ServingModel
from sweep.models.dynamic.derive import recompute


def test_the_seed_point_step_by_step(root, capsys):
    assert main(["explain", str(root / "grids" / "seed-gpt3.toml"), "--point", "2"]) == 0
    text = capsys.readouterr().out
    for fragment in ("T_svc(B) = T_fixed + t_req B", "50 + 0.5 x 8", "54 ms", "148.1 requests/s",
                     "5.263 requests -> smallest stable integer batch 6", "7.143 requests -> 8",
                     "(8 - 1) / (2 x 100)", "35 ms", "rho = 0.675", "56.08 ms", "56.08 + 35 + 54", "145.1 ms",
                     "z_q = 2.3263", "325.9 ms", "668.1 ms", "misses the SLO", "14.51 requests",
                     "9.664 GB", "floor(290 / 9.664)", "30 requests", "The action: slo_violated",
                     "docs/model.md#3-queue-the-mg1-batch-proxy"):
        assert fragment in text, fragment


def test_filters_choose_the_point(root):
    spec = sweep.load_grid(root / "grids" / "seed-gpt3.toml")
    assert sweep.explain(spec, filters={"batch_size": "16"}).point_id == 3
    with pytest.raises(GridError, match="not one of the grid's values"):
        sweep.explain(spec, filters={"batch_size": "17"})
    with pytest.raises(GridError, match="not an axis"):
        sweep.explain(spec, filters={"colour": "red"})
    with pytest.raises(GridError, match="point_id range"):
        sweep.explain(spec, point_id=5)


def test_explain_errors_are_one_line(root, capsys):
    assert main(["explain", str(root / "grids" / "seed-gpt3.toml"), "batch_size=17"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("cv", [0.0, 0.5])
def test_recomputed_numbers_are_the_engines(cv):
    spec = sweep.grid_from_dict({"name": "x", "grid": {
        "model": "llama-3.1-8b", "gpu": "h100-sxm", "seq_len": 2048, "arrival_rps": [20.0, 150.0, 900.0],
        "batch_size": [1, 3, 8, 32, 128], "replicas": [1, 3], "t_fixed_ms": [4.0, 25.0], "t_req_ms": [0.3, 2.0],
        "slo_ms": 300.0, "service_cv": cv, "percentile": [0.9, 0.999]}})
    table = sweep.evaluate(spec).to_pydict()
    for i in range(len(table["point_id"])):
        row = {k: (math.inf if v[i] is None else v[i]) for k, v in table.items()}
        r = recompute(row)
        for name in ("t_svc_ms", "capacity_rps", "rho", "mean_batch", "e_batch_ms", "e_wait_ms", "e_resp_ms",
                     "sd_resp_ms", "p_gauss_ms", "p_exp_ms", "little_l", "in_service", "in_queue", "b_min_stable",
                     "b_min_rho_target", "b_mem_max"):
            want, got = float(row[name]), r[name]
            assert ((math.isinf(want) and math.isinf(got))
                    or got == pytest.approx(want, rel=1e-9, abs=1e-12)), (name, row)
        assert bool(r["stable"]) == row["stable"]


def test_a_windowed_and_a_simulated_point_explain(root):
    spec = sweep.load_grid(root / "tests" / "golden" / "grids" / "windowed.toml")
    window = next(w for w in spec.axis("batch_window_ms").values if math.isfinite(w))
    e = sweep.explain(spec, filters={"batch_window_ms": str(window)})
    assert any("mu = lambda T_max" in line[0] for step in e.steps for line in step.lines)
    spec = sweep.grid_from_dict({"name": "s", "grid": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "seq_len": 2048,
                                                       "arrival_rps": 50.0, "batch_size": [2, 4], "t_fixed_ms": 10.0,
                                                       "t_req_ms": 1.0, "slo_ms": 100.0},
                                 "options": {"latency_model": "simulated"},
                                 "simulation": {"n_requests": 1000, "warmup": 100, "replications": 2}})
    e = sweep.explain(spec, point_id=1)
    lines = [line for step in e.steps for line in step.lines]
    assert any(line[0].startswith("simulated percentile") for line in lines)
    assert any("checked against the SLO (simulated)" in line[0] for line in lines)


def test_a_model_without_a_derivation_says_so():
    assert ServingModel.derivation(sweep.get_model(), {}) is None  # the base's: a new serving model starts there


def test_the_report_explains_each_scenarios_answer(tmp_path, root):
    pytest.importorskip("plotly")
    from sweep.reporting import build_report

    assert main(["run", str(root / "tests" / "golden" / "grids" / "windowed.toml"), "--out", str(tmp_path / "w"),
                 "--quiet"]) == 0
    html = build_report(tmp_path / "w").path.read_text()
    assert "How the answer was derived" in html and "data-scenario-html='explain'" in html
    # the derivation follows the recommendation (issue 27)
    assert "recommended: the recommendation: the cheapest configuration" in html
    assert "THE ANSWER: the recommendation" in html  # the card the derivation follows, marked
    assert "E[T] = E[W] + E[T_batch] + E[T_svc]" in html


# --------------------------------------------------------------------------- continuous serving

CONTINUOUS = {"name": "cb", "grid": {
    "model": "llama-3.1-8b", "gpu": "h100-sxm", "arrival_rps": [0.001, 8.0, 40.0], "prompt_tokens": 1000,
    "prompt_cv": [0.0, 1.0], "output_tokens": 200, "output_cv": [0.0, 1.0], "batch_size": [8, 64],
    "max_batched_tokens": [512, math.inf], "ttft_slo_ms": 800.0, "tpot_slo_ms": 30.0},
    "options": {"serving": "continuous", "kv_allocation": "paged"}}


def _lines(e) -> dict[str, tuple[str, str]]:
    return {f: (x, r) for step in e.steps for f, x, r in step.lines}


def test_a_continuous_point_recomputes_to_the_engines_numbers():
    """Every closed form the derivation recomputes (step roofline, KV capacity, both capacity
    bounds, rho, E2E, tokens/s, cost per token) equals the kernel's column to 1e-9, and the
    TTFT parts it shows add up to the kernel's TTFT."""
    from sweep.models.continuous.derive import model_parts, recompute

    spec = sweep.grid_from_dict(CONTINUOUS)
    table = sweep.evaluate(spec).to_pydict()
    checked = 0
    for i in range(len(table["point_id"])):
        row = {k: (math.inf if v[i] is None else v[i]) for k, v in table.items()}
        parts = model_parts(row, 16.0)
        r = recompute(row, parts, 16.0)
        for name in ("capacity_rps", "rho", "tok_s_per_gpu"):
            assert r[name] == pytest.approx(row[name], rel=1e-9), (name, i)
        if row["stable"]:
            for name in ("e2e_mean_ms", "tok_s_per_user", "output_tok_s", "cost_usd_per_mtok"):
                assert r[name] == pytest.approx(row[name], rel=1e-9), (name, i)
            parts_ms = (parts["ttft_slot_wait"] + parts["ttft_residual"] + parts["ttft_prefill"]) * 1e3
            assert parts_ms == pytest.approx(row["ttft_mean_ms"], rel=1e-9)
            checked += 1
    assert checked >= 8


def test_a_closed_loop_point_recomputes_to_the_engines_numbers():
    """workload = "closed": the derivation starts from the closed loop (the response-time law
    X (E2E + Z) = n holds on its numbers), shows lambda as the loop's throughput, and its TTFT
    parts add up to the kernel's TTFT, saturated (64 clients on 8 slots) or not."""
    from sweep.models.continuous.derive import model_parts, recompute

    doc = {"name": "cb-closed", "grid": {
        "model": "llama-3.1-8b", "gpu": "h100-sxm", "clients": [4, 64], "think_time_s": [0.0, 1.0],
        "prompt_tokens": 1000, "prompt_cv": 1.0, "output_tokens": 200, "output_cv": 1.0, "batch_size": [8, 64],
        "max_batched_tokens": 2048, "ttft_slo_ms": 800.0},
        "options": {"serving": "continuous", "kv_allocation": "paged", "workload": "closed"}}
    spec = sweep.grid_from_dict(doc)
    table = sweep.evaluate(spec).to_pydict()
    saturated = 0
    for i in range(len(table["point_id"])):
        row = {k: (math.inf if v[i] is None else v[i]) for k, v in table.items()}
        parts = model_parts(row, 16.0)
        r = recompute(row, parts, 16.0)
        assert r["lam"] == pytest.approx(row["throughput_rps"], rel=1e-9)
        for name in ("capacity_rps", "rho", "e2e_mean_ms", "output_tok_s", "cost_usd_per_mtok"):
            assert r[name] == pytest.approx(row[name], rel=1e-9), (name, i)
        # the closed loop's TTFT: its slot wait, its wait for a step (sent at a step's end: at
        # most the random arrival's residual plus half a busy step, never negative) and prefill
        closed_ms = row["ttft_mean_ms"]
        wait_ms = closed_ms - (parts["ttft_slot_wait"] + parts["ttft_prefill"]) * 1e3
        top_ms = (parts["ttft_residual"] + 0.5 * parts["busy_share"] * parts["step_mean"]) * 1e3
        assert -1e-9 * closed_ms <= wait_ms <= top_ms * (1 + 1e-9) + 1e-9 * closed_ms
        x, n, z = row["throughput_rps"], row["clients"], row["think_time_s"]
        assert x * (row["e2e_mean_ms"] * 1e-3 + z) == pytest.approx(n, rel=1e-6)
        saturated += bool(parts["saturated"])
        e = sweep.explain(spec, point_id=row["point_id"])
        lines = _lines(e)
        assert e.steps[0].title == "Closed loop"
        ttft = float(lines["TTFT = W_slot + residual + prefill"][1].split()[0])
        assert ttft == pytest.approx(row["ttft_mean_ms"], rel=1e-3)
    assert saturated >= 2


@pytest.mark.parametrize(("policy", "steps"), [("prefill_first", 1), ("chunked", 4), ("prefill_first", 4)])
def test_an_engine_variant_explains_with_its_own_numbers(policy, steps):
    """`scheduler_policy` and `scheduler_steps` reach the derivation: its capacity, rho, E2E and
    tokens/s are the kernel's columns under that variant, and the TTFT it shows (with the
    windows' own line at k > 1) adds up to the kernel's TTFT."""
    from sweep.models.continuous.derive import model_parts, recompute

    doc = {**CONTINUOUS, "options": {**CONTINUOUS["options"], "scheduler_policy": policy, "scheduler_steps": steps}}
    spec = sweep.grid_from_dict(doc)
    table = sweep.evaluate(spec).to_pydict()
    checked = 0
    for i in range(len(table["point_id"])):
        row = {k: (math.inf if v[i] is None else v[i]) for k, v in table.items()}
        parts = model_parts(row, 16.0, prefill_first=policy == "prefill_first", steps=steps)
        r = recompute(row, parts, 16.0, True)
        for name in ("capacity_rps", "rho", "tok_s_per_gpu"):
            assert r[name] == pytest.approx(row[name], rel=1e-9), (name, i)
        if not row["stable"]:
            continue
        for name in ("e2e_mean_ms", "output_tok_s", "cost_usd_per_mtok"):
            assert r[name] == pytest.approx(row[name], rel=1e-9), (name, i)
        if checked == 0:  # the explanation itself (one: it compiles the kernel for the point)
            lines = _lines(sweep.explain(spec, point_id=row["point_id"]))
            label = next(x for x in lines if x.startswith("TTFT = W_slot + residual + prefill"))
            shown = lines[label][0].split(" + ")
            assert len(shown) == (4 if steps > 1 else 3)
            assert float(lines[label][1].split()[0]) == pytest.approx(row["ttft_mean_ms"], rel=1e-3)
        checked += 1
    assert checked >= 8


def test_a_continuous_point_step_by_step(capsys, tmp_path):
    grid = tmp_path / "cb.toml"
    grid.write_text('name = "cb"\n[grid]\nmodel = "llama-3.1-8b"\ngpu = "h100-sxm"\narrival_rps = 0.001\n'
                    "prompt_tokens = 1000\noutput_tokens = 200\nbatch_size = 8\nttft_slo_ms = 800\ntpot_slo_ms = 30\n"
                    "t_fixed_ms = 8.0\nt_token_ms = 0.05\nt_ctx_ms = 0.0002\n"
                    '[options]\nserving = "continuous"\nkv_allocation = "paged"\n')
    assert main(["explain", str(grid), "--point", "0"]) == 0
    text = capsys.readouterr().out
    for fragment in ("Step time", "KV capacity and admission", "Load against capacity", "Time to first token",
                     "TTFT = W_slot + residual + prefill", "TPOT = T_d", "E2E = TTFT + (O - 1) TPOT",
                     "cost_usd_per_mtok", "The action: overprovisioned", "docs/continuous.md"):
        assert fragment in text, fragment
    # light load, lengths exact, whole prompts in one step (the scheduler's rules, by hand):
    # TTFT = t_f + (t_t + t_c) P = 8 + 0.0502 x 1000 = 58.2 ms; TPOT = t_f + t_t + t_c (P + O/2) = 8.27 ms
    e = sweep.explain(sweep.load_grid(grid), point_id=0)
    lines = _lines(e)
    ttft = float(lines["TTFT = W_slot + residual + prefill"][1].split()[0])
    tpot = float(lines["TPOT = T_d, the decode step a running sequence sees (its token, the other decoders', the "
                       "prompts prefilled meanwhile, their cache)"][1].split()[0])
    assert ttft == pytest.approx(58.2, rel=1e-3) and tpot == pytest.approx(8.27, rel=1e-3)


def test_a_continuous_point_from_the_catalog_and_the_simulator():
    spec = sweep.grid_from_dict({**CONTINUOUS, "grid": {**CONTINUOUS["grid"], "arrival_rps": [8.0, 400.0],
                                                        "prompt_cv": 1.0, "output_cv": 1.0, "batch_size": 64,
                                                        "max_batched_tokens": 2048},
                                 "options": {**CONTINUOUS["options"], "latency_model": "simulated"},
                                 "simulation": {"n_requests": 1000, "warmup": 100, "replications": 2, "seed": 1}})
    e = sweep.explain(spec, point_id=0)
    lines = _lines(e)
    # the step roofline recomputed from the catalog figures is the engine's t_step_fixed_ms, t_token_ms, t_ctx_ms
    from sweep.models.dynamic.derive import num

    for prefix, column in (("t_fixed = ", "t_step_fixed_ms"), ("t_token = ", "t_token_ms"), ("t_ctx = ", "t_ctx_ms")):
        result = next(v[1] for k, v in lines.items() if k.startswith(prefix))
        assert result == num(e.row[column], "ms"), (prefix, result)
    assert lines["TTFT at q <= ttft_slo_ms (simulated)"][0].startswith(f"{e.row['ttft_p_ms']:.4g}")
    assert any(step.title == "The simulator" for step in e.steps)
    overloaded = sweep.explain(spec, point_id=1)  # 400 req/s: far beyond one engine
    assert overloaded.row["stable"] is False and "Time to first token" not in {s.title for s in overloaded.steps}
    assert "The action: unstable" in {r for s in overloaded.steps for *_, r in s.lines}


@pytest.mark.parametrize("serving", ["dynamic", "continuous"])
def test_roofline_lines_recompute_to_the_engines(serving):
    """The step times `sweep explain` shows for a roofline point (the refined step at its two
    anchor steps, and the line through them) equal the kernel's service-time columns to 1e-9:
    the dynamic batcher's secant through B = 1 and B (t_fixed_ms, t_req_ms), continuous
    serving's line through a lone request's decode and prefill steps (t_step_fixed_ms,
    t_token_ms, t_ctx_ms). A dense and a mixture-of-experts model, 1 and 4 GPUs, fp8 and bf16."""
    from sweep.api import explain
    from sweep.models.continuous.derive import roofline_line
    from sweep.models.dynamic.derive import roofline_secant

    grid = {"model": ["llama-3.1-70b", "mixtral-8x7b"], "gpu": "h100-sxm", "gpus_per_replica": [1, 4],
            "weight_bytes_per_param": [1.0, 2.0], "batch_size": [1, 8, 64]}
    if serving == "dynamic":
        doc = {"name": "r", "grid": {**grid, "arrival_rps": 5.0, "seq_len": 4096, "mean_seq_len": 1500,
                                     "slo_ms": 500.0}}
    else:
        doc = {"name": "r", "grid": {**grid, "arrival_rps": 1.0, "prompt_tokens": 1500, "output_tokens": 200,
                                     "max_batched_tokens": [512, math.inf], "tpot_slo_ms": 50.0},
               "options": {"serving": "continuous"}}
    spec = sweep.grid_from_dict(doc)
    for pid in range(spec.n_points):
        e = explain(spec, point_id=pid)
        figures = e.figures  # the catalog figures of the point's model and GPU
        # the overheads it shows are the point's cell's: decode-only on a decode step (one new
        # token a request), the prompt step's where a step carries prompt tokens
        if serving == "dynamic":
            sec = roofline_secant(e.row, figures)
            assert sec["t_fixed"] * 1e3 == pytest.approx(e.row["t_fixed_ms"], rel=1e-9)
            assert sec["t_req"] * 1e3 == pytest.approx(e.row["t_req_ms"], rel=1e-9, abs=1e-15)
            assert sec["overhead"] == figures["gpu_t_decode_overhead"]
        else:
            line = roofline_line(e.row, figures)
            for key, col in (("t_fixed", "t_step_fixed_ms"), ("t_token", "t_token_ms"), ("t_ctx", "t_ctx_ms")):
                assert line[key] * 1e3 == pytest.approx(e.row[col], rel=1e-9, abs=1e-15), (pid, key)
            assert (line["overhead_dec"], line["overhead_pre"]) == (figures["gpu_t_decode_overhead"],
                                                                    figures["gpu_t_overhead"])
            assert figures["gpu_t_decode_overhead"] < figures["gpu_t_overhead"]
