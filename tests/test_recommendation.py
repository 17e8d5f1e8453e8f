"""One recommendation per scenario group (issue 27, items 1 and 4): computed once in the
decide layer (`sweep.decide.recommend`), written to optimum.parquet with its prices, GPUs
and runner-up, the same in the terminal, `sweep explain` and `sweep.recommendation`; a group
without one names the constraint that binds; terminal tables never cut a value.

References: every expected answer is recomputed here by brute force over the points the
engine wrote (plain pandas), and every price from the formulas of docs/outputs.md
(cost per hour / (rate x 3600) x 1e6)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import sweep
from sweep.cli.answers import RunFolder, print_answers
from sweep.cli.fit import split_constant, wrap_header

CB = """
name = "rec-cb"
[grid]
model = ["llama-3.1-8b", "llama-3.1-70b"]
gpu = "h100-sxm"
gpus_per_replica = [1, 4]
arrival_rps = 20.0
prompt_tokens = 1500
output_tokens = 300
batch_size = [16, 64, 256]
max_batched_tokens = [2048, 8192]
replicas = [1, 2, 4, 8]
weight_bytes_per_param = "fp8"
kv_bytes_per_elem = "fp8"
ttft_slo_ms = 2000.0
tpot_slo_ms = 60.0
[options]
serving = "continuous"
"""

# dynamic batching; rho_max = 0.3 leaves groups whose SLO holds only above rho_max
DYN = """
name = "rec-dyn"
[grid]
model = "llama-3.1-8b"
gpu = ["h100-sxm", "a100-80gb"]
arrival_rps = [50.0, 400.0, 2000.0]
batch_size = [1, 4, 16, 64]
batch_window_ms = [5.0, inf]
replicas = [1, 2]
seq_len = 2048
t_fixed_ms = 10.0
t_req_ms = 1.0
slo_ms = 150.0
rho_max = 0.3
rho_min = 0.1
[output]
points = "none"
"""


@pytest.fixture(scope="module")
def cb_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("rec")
    grid = base / "cb.toml"
    grid.write_text(CB)
    out = base / "run"
    sweep.run(sweep.load_grid(grid), out)
    return grid, out


def _brute(points: pd.DataFrame, group_size: int, cap: str, latency: str, sign: float) -> dict[int, list[int]]:
    """Per group: point_ids meeting every SLO with rho <= rho_max, in the recommendation's order."""
    p = points.copy()
    p["group"] = p.point_id // group_size
    # within rho_max: a feasible point meeting every SLO whose action is not near_saturation
    # (the operating rule's rho > rho_max, docs/model.md)
    ok = p[p.feasible & p.slo_ok & (p.action != "near_saturation")].copy()
    ok["lat"] = sign * ok[latency]
    ok["negcap"] = -ok[cap]
    ok = ok.sort_values(["group", "cost_usd_per_hour", "replicas", "negcap", "lat", "point_id"])
    return {int(g): list(sub.point_id) for g, sub in ok.groupby("group")}


def test_the_recommendation_is_the_cheapest_point_within_rho_max(cb_run):
    grid, out = cb_run
    spec = sweep.load_grid(grid)
    points = pq.read_table(out / "points").to_pandas()
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    want = _brute(points, spec.group_size, "batch_size", "tok_s_per_user", -1.0)
    assert want, "the grid must have groups with an answer"
    for g, rows in opt.groupby("group_id"):
        ids = want.get(int(g), [])
        if not ids:
            assert rows.recommended_batch.isna().all() and not rows.is_recommended.any()
            assert (rows.group_reason != "ok").all()
            continue
        assert (rows.recommended_point_id == ids[0]).all() and (rows.group_reason == "ok").all()
        assert rows.is_recommended.sum() == 1
        at = points.set_index("point_id").loc[ids[0]]
        row = rows.iloc[0]
        assert rows[rows.is_recommended].replicas.iloc[0] == at.replicas == row.recommended_replicas
        assert row.recommended_gpus == at.replicas * at.gpus_per_replica
        assert row.recommended_cost_usd_per_hour == at.cost_usd_per_hour
        # docs/outputs.md: per million output tokens = cost_usd_per_mtok; total = x O / (P + O)
        assert row.recommended_cost_usd_per_m_output_tok == pytest.approx(
            at.cost_usd_per_hour / (at.arrival_rps * at.output_tokens * 3600) * 1e6, rel=1e-9)
        assert row.recommended_cost_usd_per_m_total_tok == pytest.approx(
            at.cost_usd_per_hour / (at.arrival_rps * (at.prompt_tokens + at.output_tokens) * 3600) * 1e6, rel=1e-9)
        assert row.recommended_cost_usd_per_m_requests == pytest.approx(
            at.cost_usd_per_hour / (at.arrival_rps * 3600) * 1e6, rel=1e-12)
        if len(ids) > 1:
            assert (rows.runner_up_point_id == ids[1]).all()
        else:
            assert rows.runner_up_batch.isna().all()
        # one pool: the recommendation is the point replicas_min reports
        assert (rows.replicas_min == row.recommended_replicas).all()
        assert (rows.replicas_min_batch == row.recommended_batch).all()


def test_b_max_slo_honours_rho_max_and_a_group_says_what_binds(tmp_path):
    grid = tmp_path / "dyn.toml"
    grid.write_text(DYN)
    spec = sweep.load_grid(grid)
    points = sweep.evaluate(spec).to_pandas()
    opt, _ = sweep.decide(spec)
    opt = opt.to_pandas()
    within = points.feasible & points.slo_ok & (points.action != "near_saturation")
    meets = points.feasible & points.slo_ok
    rows = points.point_id // (len(points) // len(opt))
    for _, r in opt.iterrows():
        sub = points[rows == r.row_id]
        good = sub[within[sub.index]]
        if len(good):
            assert r.b_max_slo == good.batch_size.max() and r.reason == "ok"
        else:
            assert pd.isna(r.b_max_slo)
            assert (r.reason == "near_saturation") == bool(meets[sub.index].any())
    groups = points.point_id // spec.group_size
    saturated = 0
    for g, rs in opt.groupby("group_id"):
        sub = points[groups == g]
        if within[sub.index].any():
            assert (rs.group_reason == "ok").all()
        elif meets[sub.index].any():
            assert (rs.group_reason == "near_saturation").all()
            saturated += 1
        else:
            assert (rs.group_reason != "ok").all() and (rs.group_reason != "near_saturation").all()
    assert saturated, "the grid must have a group whose SLO holds only above rho_max"


def test_the_price_is_in_optimum_with_points_none(tmp_path):
    grid = tmp_path / "dyn.toml"
    grid.write_text(DYN.replace("rho_max = 0.3\nrho_min = 0.1", "rho_max = 0.85"))
    out = tmp_path / "o"
    sweep.run(sweep.load_grid(grid), out)
    assert not (out / "points").exists() or not any((out / "points").rglob("*.parquet"))
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    has = opt[opt.group_reason == "ok"]
    assert len(has) and has.recommended_cost_usd_per_m_requests.notna().all()
    assert np.allclose(has.recommended_cost_usd_per_m_requests,
                       has.recommended_cost_usd_per_hour / (has.arrival_rps * 3600) * 1e6, rtol=1e-12)
    # dynamic batching counts requests: no token price (docs/outputs.md)
    assert "recommended_cost_usd_per_m_output_tok" not in opt.columns


def test_the_terminal_explain_and_the_api_give_the_same_recommendation(cb_run):
    grid, out = cb_run
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    best = opt[opt.is_recommended].sort_values(["recommended_cost_usd_per_hour", "group_id"]).iloc[0]
    got = sweep.recommendation(out)
    assert got["group_id"] == best.group_id and got["recommended"]["point_id"] == best.recommended_point_id
    assert got["recommended"]["cost_usd_per_m_output_tok"] == best.recommended_cost_usd_per_m_output_tok
    # over several groups the runner-up is the next group's recommendation (another hardware
    # choice), not the best group's same-hardware twin
    second = opt[opt.is_recommended].sort_values(["recommended_cost_usd_per_hour", "group_id"]).iloc[1]
    assert got["runner_up"]["group_id"] == second.group_id
    assert got["runner_up"]["point_id"] == second.recommended_point_id
    big = sweep.recommendation(out, filters={"model": "llama-3.1-70b"})
    row = opt[(opt.model == "llama-3.1-70b") & opt.is_recommended].sort_values("recommended_cost_usd_per_hour")
    assert big["recommended"]["point_id"] == row.recommended_point_id.iloc[0]
    e = sweep.explain(sweep.load_grid(grid), filters={"model": "llama-3.1-70b", "gpus_per_replica": "4"})
    pick = opt[(opt.model == "llama-3.1-70b") & (opt.gpus_per_replica == 4)].recommended_point_id.iloc[0]
    assert e.point_id == pick and "recommendation" in e.chosen
    # a decision axis names the point itself
    assert sweep.explain(sweep.load_grid(grid), filters={"replicas": "1"}).chosen == ""


@pytest.mark.parametrize("width", [80, 100, 200])
def test_terminal_tables_never_cut_an_identifying_value(cb_run, width):
    _grid, out = cb_run
    buf = io.StringIO()
    print_answers(RunFolder.open(out), Console(file=buf, width=width, highlight=False))
    text = buf.getvalue()
    assert "…" not in text
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    flat = " ".join(text.split())
    for _, r in opt[opt.is_recommended].iterrows():
        assert r.model in flat
        assert f"{r.recommended_max_batched_tokens:.0f}" in flat and f"{r.recommended_batch:.0f}" in flat
    assert ("engine flags: gpus_per_replica = tensor_parallel_size, batch_size = max_num_seqs, "
            "max_batched_tokens = max_num_batched_tokens") in flat
    # constant over the shown rows: stated once above the table, not a column
    assert "for every row: TTFT SLO ms = 2,000.0, TPOT SLO ms = 60.0" in flat
    assert "USD/M" in flat and "runner-up" in flat


def test_the_answer_shows_breach_probability_bands_and_headroom(root, tmp_path):
    text = (root / "grids" / "seed-gpt3-uncertain.toml").read_text().replace("samples = 1000", "samples = 64")
    grid = tmp_path / "u.toml"
    grid.write_text(text)
    out = tmp_path / "o"
    sweep.run(sweep.load_grid(grid), out)
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    for col in ("recommended_p_slo_breach", "recommended_latency_p5_ms", "recommended_latency_p95_ms",
                "recommended_headroom_rps"):
        assert col in opt.columns, col
    buf = io.StringIO()
    print_answers(RunFolder.open(out), Console(file=buf, width=200, highlight=False))
    flat = " ".join(buf.getvalue().split())
    assert "P(breach)" in flat and "p5-p95 ms" in flat and "headroom req/s" in flat


def test_fit_helpers():
    assert wrap_header("max_batched_tokens", 8) == "max_\nbatched_\ntokens"
    assert wrap_header("TTFT P99 ms", 20) == "TTFT P99 ms"
    heads, rows, same = split_constant(["a", "b", "c"], [["1", "x", "2"], ["1", "y", "3"]], keep=("c",))
    assert heads == ["b", "c"] and rows == [["x", "2"], ["y", "3"]] and same == [("a", "1")]
    # one row: nothing is constant "over the rows"
    assert split_constant(["a"], [["1"]])[0] == ["a"]


def test_recommend_picks_order_on_a_hand_built_chunk():
    """Two groups of 2 rows x 2 points; costs 1, 2 per row: the recommendation is the cheapest
    ok point, ties to the larger cap; the runner-up the next (hand-computed)."""
    from sweep.decide.recommend import picks
    from sweep.models import get_model

    model = get_model()
    cols = {
        "point_id": np.arange(8),
        "feasible": np.array([1, 1, 1, 1, 0, 1, 1, 1], bool),
        "slo_ok": np.array([1, 1, 1, 0, 1, 0, 1, 1], bool),
        "_rho_rules": np.array([0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.9, 0.5]),
        "rho_max": np.full(8, 0.85),
        "latency_ms": np.array([10, 20, 5, 5, 1, 1, 1, 1.0]),
        "batch_size": np.array([1, 2, 1, 2, 1, 2, 1, 2]),
        "replicas": np.array([1, 1, 2, 2, 1, 1, 2, 2]),
        "cost_usd_per_hour": np.array([1, 1, 2, 2, 1, 1, 2, 2.0]),
    }
    rec, run = picks(model, cols, 4)
    # group 0: points 0, 1 (cost 1; cap 2 first), 2 (cost 2); group 1: only point 7
    assert rec.tolist() == [1, 7] and run.tolist() == [0, -1]


def test_groups_at_the_same_price_rank_by_room_under_their_slos():
    """Across scenario groups: the cheaper first; at the same price the recommendation whose
    largest latency / SLO ratio is smaller (hand-computed: 59.7 / 60 = 0.995 against
    max(549.8 / 2000, 36.1 / 60) = 0.602), then the group order."""
    from sweep.decide.recommend import group_order, recommendation, slo_use
    from sweep.models import get_model

    model = get_model("continuous")
    table = {
        "group_id": [0, 1, 2],
        "is_recommended": [True, True, True],
        "recommended_cost_usd_per_hour": [120.0, 120.0, 100.0],
        "recommended_batch": [256, 256, 16],
        "recommended_ttft_p_ms": [738.1, 549.8, 1900.0],
        "recommended_tpot_p_ms": [59.7, 36.1, 59.9],
        "ttft_slo_ms": [2000.0, 2000.0, 2000.0],
        "tpot_slo_ms": [60.0, 60.0, 60.0],
        "slo_ms": [None, None, None],  # no E2E target (NULL in the file)
    }
    assert slo_use(table, model, [0, 1]) == pytest.approx([59.7 / 60.0, 36.1 / 60.0])
    assert group_order(table, model, [0, 1, 2]).tolist() == [2, 1, 0]
    rec = recommendation(table, model)
    assert rec["group_id"] == 2 and rec["runner_up"]["group_id"] == 1
    table["recommended_cost_usd_per_hour"][2] = 130.0
    rec = recommendation(table, model)
    assert rec["group_id"] == 1 and rec["runner_up"]["group_id"] == 0
