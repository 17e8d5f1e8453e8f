"""`serving = "disaggregated"`, `latency_model = "simulated"`: the simulator of both pools as the
mode's host pass, through the real CLI on one tiny grid (one compilation of each pool's
simulator for the module), and an analytic grid with a `[simulation]` table.

Reference values, and where they come from:

* Light load (arrival_rps = 0.02: a request every 50 s, each alone in both pools), given step
  coefficients t_f = 10 ms, t_t = 0.05 ms, t_c = 1e-4 ms, P = 1000 and O = 100 (no spread),
  prefill batch_size 4 and batch_window_ms 0 (a lone prompt is dispatched at once):
  - TTFT = T_svc(1) = t_f + (t_t + t_c) P = 60.1 ms (SPEC 2 with no follower);
  - TPOT, the decode pool's interval: steps j = 1..O-1 each take t_f + t_t + t_c (P + j),
    averaging t_f + t_t + t_c (P + O / 2) = 10.155 ms, for every request (no noise);
  - E2E = TTFT + transfer + (O - 1) TPOT = 60.1 + 2.63144 + 99 x 10.155 = 1068.07644 ms
    (the transfer: tests/test_models_disaggregated.py's docstring);
  - client-side TPOT = (transfer + (O - 1) TPOT) / (O - 1) = 10.155 + 2.63144 / 99 ms.
  The analytic model gives the same up to the rare overlap of two requests (its own light-load
  test), so both must agree with these within the simulator's half-width plus 0.5% (the
  overlaps: at 0.02 rps a request finds the prefill worker busy with probability 0.1%, and a
  decode replica busy with probability 2%), the means and the P90s (`percentile = 0.9`: at
  the P99 the 2% of requests that share the decode replica show).
* Overload: prefill_replicas 1, batch_size 4: a replica serves at most 4 / T_svc(4) =
  4 / 0.2104 s = 19 requests/s, so 60 requests/s cannot be kept up with: the simulator's
  queue grows (not steady), `stable` false, the latencies NULL, `action` unstable.
"""

from __future__ import annotations

import contextlib
import io

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest

from sweep.cli import main
from sweep.models import get_model, latency_models
from sweep.models.disaggregated import DisaggregatedModel, SimulatedDisaggregated
from sweep.models.disaggregated.simulation import DECIDED, SIM_COLUMNS

jax.config.update("jax_enable_x64", True)

GRID = """
name = "dgs"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
arrival_rps = [0.02, 60.0]
prompt_tokens = 1000
output_tokens = 100
t_fixed_ms = 10.0
t_token_ms = 0.05
t_ctx_ms = 0.0001
ttft_slo_ms = 400
tpot_slo_ms = 30
link = "ib-ndr"
prefill_replicas = [1, 2]
decode_replicas = 1
prefill_batch_window_ms = 0
prefill_batch_size = 4
decode_batch_size = 64
percentile = 0.9
[options]
serving = "disaggregated"
{options}
[simulation]
n_requests = 1000
warmup = 100
replications = 4
"""

TTFT, TPOT, TRANSFER = 60.1, 10.155, 2.63144
E2E = TTFT + TRANSFER + 99 * TPOT


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _points(base, name: str, options: str) -> tuple[list[dict], list[dict]]:
    """The run's points and its optimum table (one row per group of the split)."""
    grid = base / f"{name}.toml"
    grid.write_text(GRID.format(options=options))
    rc, text, err = _run(["run", str(grid), "--out", str(base / name), "--progress", "none"])
    assert rc == 0, (text, err)
    assert ("latency simulated" in text) == ("simulated" in options)
    return (pq.read_table(base / name / "points").to_pylist(),
            pq.read_table(base / name / "optimum.parquet").to_pylist())


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    return _points(tmp_path_factory.mktemp("dgs"), "sim", 'latency_model = "simulated"')


def test_registered_beside_the_analytic_default():
    assert latency_models("disaggregated") == ("analytic", "simulated")
    assert isinstance(get_model("disaggregated"), DisaggregatedModel)
    assert isinstance(get_model("disaggregated", "simulated"), SimulatedDisaggregated)
    # every column the simulator overwrites is one the analytic model writes
    analytic = {c.name for c in DisaggregatedModel.columns}
    assert set(DECIDED) <= analytic and {c.name for c in SIM_COLUMNS} <= analytic
    for c in SimulatedDisaggregated.columns:
        if c.name in DECIDED:
            assert c.null_when == "sim_steady", c.name


@pytest.mark.slow  # simulates 8 x 1100 requests through both pools (compiles both simulators)
def test_simulated_run_light_load_and_overload(simulated):
    rows, optimum = simulated
    assert len(rows) == 4
    light = [r for r in rows if r["arrival_rps"] == 0.02]
    for r in light:
        assert r["stable"] and r["sim_steady"] and r["feasible"]
        for col in (*DECIDED, "e2e_p_ms", "cost_usd_per_mtok"):
            assert r[col] is not None and np.isfinite(r[col]), col
        # the decided columns are the simulator's
        assert r["ttft_p_ms"] == r["sim_ttft_p_ms"] and r["tpot_mean_ms"] == r["sim_tpot_mean_ms"]
        assert r["decode_wait_p_ms"] == r["sim_decode_wait_p_ms"]
        for got, ref, hw in ((r["ttft_mean_ms"], TTFT, r["sim_ttft_mean_hw_ms"]),
                             (r["tpot_mean_ms"], TPOT, r["sim_tpot_mean_hw_ms"]),
                             (r["e2e_mean_ms"], E2E, r["sim_e2e_mean_hw_ms"]),
                             (r["sim_client_tpot_mean_ms"], TPOT + TRANSFER / 99, r["sim_client_tpot_mean_hw_ms"])):
            assert abs(got - ref) <= hw + 0.005 * ref, (got, ref, hw)
        # the P90s: 98% of the requests decode alone, 99.9% are prefilled alone
        for got, ref, hw in ((r["tpot_p_ms"], TPOT, r["sim_tpot_p_hw_ms"]),
                             (r["ttft_p_ms"], TTFT, r["sim_ttft_p_hw_ms"]),
                             (r["e2e_p_ms"], E2E, r["sim_e2e_p_hw_ms"])):
            assert abs(got - ref) <= hw + 0.005 * ref, (got, ref, hw)
        assert r["prefill_wait_mean_ms"] <= 0.01 * TTFT and r["sim_drop_rate"] == 0.0
        # `sweep explain`: the derivation ends with the simulator, which decided
        steps = SimulatedDisaggregated().derivation(r)
        assert steps[-1].title == "The simulator of both pools (it decides: the latencies above are its)"
        # the analytic means against the simulator's (the relative errors it writes)
        for col in ("ttft_rel_err", "tpot_rel_err", "e2e_rel_err"):
            assert abs(r[col]) < 0.01, (col, r[col])
    over = [r for r in rows if r["arrival_rps"] == 60.0 and r["prefill_replicas"] == 1]
    assert len(over) == 1
    r = over[0]
    assert not r["stable"] and not r["sim_steady"] and not r["feasible"] and r["action"] == "unstable"
    for col in (*DECIDED, "e2e_p_ms", "sim_ttft_p_ms", "cost_usd_per_mtok"):
        assert r[col] is None, col  # NULL, never NaN or a made-up number
    # decisions: the split with the fewest GPUs meeting the SLOs at the light load, none at 60 rps
    by_id = {r["point_id"]: r for r in rows}
    for o in optimum:
        if o["arrival_rps"] == 0.02:
            assert (o["replicas_min"], o["recommended_prefill_replicas"], o["recommended_decode_replicas"]) == (2, 1, 1)
            assert o["replicas_min_ttft_p_ms"] == by_id[o["replicas_min_point_id"]]["sim_ttft_p_ms"]
        else:
            assert o["reason"] == "unstable" and o["replicas_min"] is None


@pytest.mark.slow  # a second run of both simulators (same shapes: no new compilation)
def test_a_simulation_table_adds_the_sim_columns_to_the_analytic_model(tmp_path, simulated):
    rows, _ = _points(tmp_path, "analytic", "")
    sim_rows, _ = simulated
    for r, s in zip(sorted(rows, key=lambda r: r["point_id"]), sorted(sim_rows, key=lambda r: r["point_id"])):
        # the same simulation (each point's streams keyed by its id), the analytic values kept
        assert r["sim_e2e_p_ms"] == s["sim_e2e_p_ms"]
        if r["arrival_rps"] == 0.02:
            assert r["stable"] and r["ttft_p_ms"] != r["sim_ttft_p_ms"]
            assert DisaggregatedModel().derivation(r)[-1].title == "The simulator of both pools"
            # the analytic means and TPOT P90 within the simulator's half-width plus 0.5%
            # (module docstring)
            for a, sim, hw in ((r["ttft_mean_ms"], r["sim_ttft_mean_ms"], r["sim_ttft_mean_hw_ms"]),
                               (r["tpot_mean_ms"], r["sim_tpot_mean_ms"], r["sim_tpot_mean_hw_ms"]),
                               (r["e2e_mean_ms"], r["sim_e2e_mean_ms"], r["sim_e2e_mean_hw_ms"]),
                               (r["tpot_p_ms"], r["sim_tpot_p_ms"], r["sim_tpot_p_hw_ms"])):
                assert abs(a - sim) <= hw + 0.005 * sim, (a, sim, hw)
            # the batcher model's TTFT P90 is conservative here: its batching-delay tail takes
            # the window as open for the worker's previous service (S(b) = 60.1 ms) even when
            # the worker is idle, so 2 T_svc(1) = 120.2 ms where every request sees 60.1 ms
            assert r["ttft_p_ms"] == pytest.approx(2 * TTFT, rel=1e-3) and r["sim_ttft_p_ms"] < 1.005 * TTFT
            assert r["ttft_rel_err"] == pytest.approx((r["ttft_mean_ms"] - r["sim_ttft_mean_ms"])
                                                      / r["sim_ttft_mean_ms"], rel=1e-9)


def test_a_simulation_trace_is_refused_in_one_line(tmp_path):
    """The simulator of both pools draws Poisson arrivals: a `[simulation] trace` is bad input
    (exit code 2, one line naming the key, nothing written)."""
    (tmp_path / "trace.csv").write_text("\n".join(f"{0.1 * i:.1f}" for i in range(1200)) + "\n")
    grid = tmp_path / "dgt.toml"
    grid.write_text(GRID.format(options='latency_model = "simulated"') + 'trace = "trace.csv"\n')
    rc, _text, err = _run(["run", str(grid), "--out", str(tmp_path / "run"), "--progress", "none"])
    assert rc == 2 and "simulation.trace" in err and "Poisson" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
