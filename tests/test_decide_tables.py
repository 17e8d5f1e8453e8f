"""optimum.parquet and frontier.parquet end to end (`sweep.decide.tables`): one row per
(group, replicas), the frontier with its knee, reasons, counts."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from test_decide_pareto import brute_pareto

from sweep import grid as spec
from sweep.runner import run_grid

ROWS_GRID = """
name = "d"
[grid]
arrival_rps = [40.0, 400.0]
replicas = [1, 2, 4, 8]
batch_size = [1, 2, 4, 8, 16, 32, 64]
batch_window_ms = [2, 20, inf]
seq_len = 2048
model = "llama-3.1-8b"
gpu = ["l4", "h100-sxm"]
t_fixed_ms = 15.0
t_req_ms = 0.6
slo_ms = 120.0
"""


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("dec")
    p = d / "g.toml"
    p.write_text(ROWS_GRID)
    g = spec.load(p)
    run_grid(g, d / "out", chunk_size=84)  # 84 = one group: many chunks
    return g, d / "out"


def test_optimum_has_one_row_per_group_and_replicas(small_run):
    _g, out = small_run
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    assert len(opt) == 2 * 2 * 4  # arrival x gpu x replicas
    # NULL only where a column may be: an answer's fields where the row has none (reason != ok)
    nullable = {f.name for f in pq.read_schema(out / "optimum.parquet") if f.nullable}
    assert not opt.drop(columns=sorted(nullable)).isna().any().any()
    assert (opt.b_max_slo.isna() == (opt.reason != "ok")).all()
    pts = pq.read_table(out / "points").to_pandas()
    for _, row in opt.iterrows():
        sub = pts[(pts.arrival_rps == row.arrival_rps) & (pts.gpu == row.gpu) & (pts.replicas == row.replicas)]
        meets = sub[sub.feasible & (sub.latency_ms <= sub.slo_ms)]
        ok = meets[meets.rho <= meets.rho_max]  # b_max_slo honours rho_max (issue 27)
        if len(ok):
            assert row.b_max_slo == ok.batch_size.max() and row.reason == "ok"
        else:
            assert pd.isna(row.b_max_slo) and pd.isna(row.b_max_slo_latency_ms) and row.reason != "ok"
            assert (row.reason == "near_saturation") == bool(len(meets))
        if len(meets):
            best = meets.loc[meets.capacity_rps.idxmax()]
            assert row.slo_opt_capacity_rps == best.capacity_rps
        feas = sub[sub.feasible]
        if len(feas):
            assert row.b_latency_opt_e_resp_ms == feas.e_resp_ms.min()
    # replicas_min: the fewest replicas with an SLO batch at rho <= rho_max, on every row.
    for (rate, gpu), grp in opt.groupby(["arrival_rps", "gpu"]):
        sub = pts[(pts.arrival_rps == rate) & (pts.gpu == gpu)]
        good = sub[sub.feasible & (sub.latency_ms <= sub.slo_ms) & (sub.rho <= sub.rho_max)]
        if len(good):
            assert (grp.replicas_min == good.replicas.min()).all()
        else:
            assert grp.replicas_min.isna().all()
        want = good.replicas.min() if len(good) else None
        assert grp.is_replicas_min.sum() == (1 if len(good) else 0)
        if len(good):
            at = good[good.replicas == want]
            assert (grp.replicas_min_batch == at.batch_size.max()).all()
            assert (grp.replicas_min_cost_usd_per_hour == at.cost_usd_per_hour.iloc[0]).all()


def test_frontier_file(small_run):
    _g, out = small_run
    front = pq.read_table(out / "frontier.parquet").to_pandas()
    pts = pq.read_table(out / "points").to_pandas()
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    assert set(pts.columns) <= set(front.columns) and {"is_knee", "is_slo_opt"} <= set(front.columns)
    for _, row in opt.iterrows():
        sub = pts[pts.point_id // 21 == row.row_id]
        f = front[front.row_id == row.row_id]
        want = brute_pareto(sub.capacity_rps.values, sub.latency_ms.values, sub.feasible.values)
        assert sorted(f.point_id) == sorted(sub.point_id[want])
        assert f.is_knee.sum() == (1 if len(f) else 0)
        assert f.is_slo_opt.sum() == (1 if row.reason in ("ok", "near_saturation") else 0)
        if len(f):
            assert f[f.is_knee].batch_size.iloc[0] == row.knee


def test_manifest_counts(small_run):
    _, out = small_run
    m = json.loads((out / "manifest.json").read_text())
    assert m["rows"]["optimum"] == 16 and m["rows"]["frontier"] > 0


def test_reason_codes(tmp_path):
    # Out of memory everywhere: GPT-3 on one L4.
    text = ROWS_GRID.replace('model = "llama-3.1-8b"', 'model = "gpt3-175b"')
    p = tmp_path / "g.toml"
    p.write_text(text)
    run_grid(spec.load(p), tmp_path / "o")
    opt = pq.read_table(tmp_path / "o" / "optimum.parquet").to_pandas()
    assert (opt.reason == "out_of_memory").all()
    assert opt.replicas_min.isna().all() and not opt.is_replicas_min.any()
    assert opt.replicas_min_cost_usd_per_hour.isna().all() and opt.b_max_slo_point_id.isna().all()
