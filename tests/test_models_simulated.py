"""Grids with latency_model = "simulated" (SPEC 4, 7): the simulator's columns beside the
proxy's, the SLO and the decisions on the simulated percentile.

References: for B_max = 1 and deterministic service the proxy is M/D/1, whose mean
(Pollaczek-Khinchine) is exact, so the simulated mean must agree within the simulator's
own confidence interval (5 half-widths: several points are checked at once).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from sweep import grid as spec
from sweep.engine import Evaluator
from sweep.errors import GridError
from sweep.runner import run_grid

GRID = """
name = "sim"
[grid]
arrival_rps = [20.0, 60.0]
batch_size = [1, 4, 16]
batch_window_ms = [5, inf]
seq_len = 2048
model = "llama-3.1-8b"
gpu = "h100-sxm"
t_fixed_ms = 10.0
t_req_ms = 1.0
slo_ms = 80.0
[options]
latency_model = "simulated"
[simulation]
n_requests = 4000
warmup = 500
replications = 4
seed = 7
"""


def load(tmp_path, text=GRID):
    p = tmp_path / "g.toml"
    p.write_text(text)
    return spec.load(p)


def test_simulated_columns_and_slo(tmp_path):
    g = load(tmp_path)
    run_grid(g, tmp_path / "o")
    pts = pq.read_table(tmp_path / "o" / "points").to_pandas()
    for c in ("sim_mean_ms", "sim_p50_ms", "sim_p90_ms", "sim_p99_ms", "sim_p999_ms", "sim_p_ms", "sim_p_hw_ms",
              "sim_mean_batch", "sim_utilization", "sim_drop_rate", "proxy_rel_err"):
        assert c in pts.columns, c
        # NULL only where a flag explains it: the simulated backlog grew, or the proxy's E[T] is unbounded
        bounded = pts.sim_steady & (pts.proxy_ok if c == "proxy_rel_err" else True)
        assert not pts[c][bounded].isna().any(), c
        assert pts[c][~bounded].isna().all() or c in ("sim_mean_batch", "sim_utilization", "sim_drop_rate"), c
    assert (pts.latency_ms == pts.sim_p_ms).all()
    assert (pts.slo_ok == (pts.sim_p_ms <= pts.slo_ms)).all()
    assert (pts.sim_p50_ms <= pts.sim_p90_ms).all() and (pts.sim_p90_ms <= pts.sim_p99_ms).all()
    # M/D/1 points (B = 1, full batches): the proxy's exact mean within the simulated CI.
    md1 = pts[(pts.batch_size == 1) & pts.batch_window_ms.isna() & pts.stable]  # NULL window: the grid's inf
    assert len(md1) == 2
    hw = md1.sim_p_hw_ms  # the CI of the percentile is wider than the mean's; a loose bound
    assert (np.abs(md1.e_resp_ms - md1.sim_mean_ms) <= 5 * np.maximum(hw, 0.02 * md1.sim_mean_ms)).all()
    opt = pq.read_table(tmp_path / "o" / "optimum.parquet").to_pandas()
    for _, row in opt.iterrows():
        sub = pts[(pts.arrival_rps == row.arrival_rps) & pts.feasible & (pts.sim_p_ms <= pts.slo_ms)
                  & (pts.action != "near_saturation")]  # b_max_slo honours rho_max (issue 27)
        assert row.b_max_slo == sub.batch_size.max() if len(sub) else pd.isna(row.b_max_slo)


def test_simulated_results_do_not_depend_on_chunking(tmp_path):
    g = load(tmp_path)
    a = Evaluator(g, chunk_size=6).chunk(0).columns  # one group per chunk
    whole = Evaluator(g, chunk_size=1 << 10).chunk(0).columns
    b = np.concatenate([Evaluator(g, chunk_size=6).chunk(i).columns["sim_p_ms"] for i in range(2)])
    np.testing.assert_array_equal(b, whole["sim_p_ms"])
    np.testing.assert_array_equal(a["sim_mean_ms"], whole["sim_mean_ms"][:6])


def test_workers_allowed_only_when_simulated(tmp_path):
    g = load(tmp_path, GRID.replace("t_req_ms = 1.0", "t_req_ms = 1.0\nworkers = [1, 2]"))
    assert g.axis("workers").values == (1, 2)
    with pytest.raises(GridError, match="one worker per replica"):
        load(tmp_path, GRID.replace('latency_model = "simulated"', 'latency_model = "gaussian"').replace(
            "t_req_ms = 1.0", "t_req_ms = 1.0\nworkers = 2"))


@pytest.mark.parametrize(
    "table,key,rule",
    [
        ("n_requests = 10", "simulation.n_requests", ">= 1000"),
        ("replications = 1", "simulation.replications", ">= 2"),
        ("warmup = -1", "simulation.warmup", ">= 0"),
        ("seed = 1.5", "simulation.seed", "integer"),
        ("speed = 2", "simulation.speed", "unknown"),
        ('trace = "missing.csv"', "simulation.trace", "cannot be read"),
    ],
)
def test_bad_simulation_settings(tmp_path, table, key, rule):
    text = GRID.split("[simulation]")[0] + "[simulation]\n" + table + "\n"
    with pytest.raises(GridError) as info:
        load(tmp_path, text)
    assert key in str(info.value) and rule in str(info.value)


def test_trace_must_be_sorted(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s\n" + "\n".join(str(0.01 * i) for i in range(700)) + "\n0.5\n")
    with pytest.raises(GridError, match="sorted"):
        load(tmp_path, GRID.split("[simulation]")[0] + '[simulation]\ntrace = "t.csv"\nwarmup = 100\n')


def test_trace_replay(tmp_path):
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.exponential(1 / 40.0, 3000))
    (tmp_path / "t.csv").write_text("arrival_s\n" + "\n".join(f"{t:.9f}" for t in times) + "\n")
    text = GRID.replace("arrival_rps = [20.0, 60.0]", "arrival_rps = 40.0").split("[simulation]")[0]
    g = load(tmp_path, text + '[simulation]\ntrace = "t.csv"\nwarmup = 300\nreplications = 2\n')
    assert len(g.simulation.trace_times) == 3000
    cols = Evaluator(g).chunk(0).columns
    assert np.isfinite(cols["sim_mean_ms"]).all()


BATCHER = """
name = "bat"
[grid]
arrival_rps = 100.0
batch_size = [8, 24]
batch_window_ms = [1, inf]
seq_len = 2048
model = "llama-3.1-8b"
gpu = "h100-sxm"
t_fixed_ms = 50.0
t_req_ms = 0.5
slo_ms = 400.0
[options]
latency_model = "batcher"
"""


def test_batcher_latency_model(tmp_path):
    # A 1 ms window at 100 rps: the proxy sees batches of ~1.1 and reports +inf, but the
    # batcher keeps up (24 / 62 ms > 100 rps); the greedy-batcher model sees it (SPEC 2).
    g = load(tmp_path, BATCHER)
    run_grid(g, tmp_path / "o")
    pts = pq.read_table(tmp_path / "o" / "points").to_pandas().set_index(["batch_size", "batch_window_ms"])
    assert (pts.latency_ms == pts.batcher_p_ms).all()
    short = pts.loc[(24, 1.0)]
    assert short.stable and not short.proxy_ok and pd.isna(short.e_resp_ms)  # NULL: unbounded
    assert np.isfinite(short.batcher_e_resp_ms) and short.feasible and short.batcher_mean_batch > 4
    nullable = {f.name for f in pq.read_schema(next((tmp_path / "o" / "points").glob("*.parquet"))) if f.nullable}
    assert not pts.drop(columns=sorted(nullable & set(pts.columns))).isna().any().any()
