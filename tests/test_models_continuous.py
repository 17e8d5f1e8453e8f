"""Continuous serving as a grid (`sweep.models.continuous.model`): its keys validated like every
other, the columns a run writes, the decisions on TTFT/TPOT SLOs, the simulator as a host
pass, and a `[search]` over the cap, the token budget, GPUs per replica and replicas.

References:
- the step roofline and the KV capacity are closed forms of the catalog figures (SPEC 10's
  step time, section 5's free HBM), recomputed here from `packaged_catalog()` at the running
  count `roofline.operating_running` gives each point's load;
- at light load one request is alone on the engine, so its TTFT, TPOT and E2E are sums of
  step times written out by hand (the scheduler's rules 3-5);
- the decisions (b_max_slo, replicas_min, the frontier, slo_opt) are recomputed by brute
  force over the run's own points table.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from _spec13 import decode_ms, spec13_step

from sweep import grid as spec
from sweep.catalog import packaged_catalog, packaged_efficiencies
from sweep.cli import main
from sweep.errors import GridError
from sweep.models.base import gpu_figures, model_figures
from sweep.models.continuous.benchrun import itl_quantiles
from sweep.models.continuous.model import COLUMNS
from sweep.models.shared import roofline as rl
from sweep.runner import run_grid
from sweep.search import run_search

GRID = """
name = "cont"
[grid]
model = ["llama-3.1-8b", "mixtral-8x7b"]
gpu = "h100-sxm"
gpus_per_replica = [1, 2]
arrival_rps = [2.0, 12.0]
replicas = [1, 2]
prompt_tokens = 1000
prompt_cv = 1.0
output_tokens = 200
output_cv = 1.0
batch_size = [8, 32, 128]
max_batched_tokens = [2048, inf]
ttft_slo_ms = 1000
tpot_slo_ms = 40
[options]
serving = "continuous"
kv_allocation = "paged"
block_tokens = 16
reserve_fraction = 0.1
[output]
points = "all"
"""


def load(tmp_path, text=GRID, name="g.toml"):
    p = tmp_path / name
    p.write_text(text)
    return spec.load(p)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cont")
    run_grid(load(tmp), tmp / "o")
    pts = ds.dataset(tmp / "o" / "points", partitioning="hive").to_table().to_pandas().sort_values("point_id")
    opt = pq.read_table(tmp / "o" / "optimum.parquet").to_pandas().sort_values("row_id")
    front = pq.read_table(tmp / "o" / "frontier.parquet").to_pandas()
    return pts.reset_index(drop=True), opt.reset_index(drop=True), front


def test_points_have_every_declared_column_and_no_nan(run):
    pts, _, _ = run
    declared = [c.name for c in COLUMNS if c.when is None]
    assert [c for c in declared if c not in pts.columns] == []
    assert len(pts) == 2 * 2 * 2 * 2 * 3 * 2
    # no NaN or infinity in the file: NULL only in a column that declares when, where one of
    # its flags is false (or the grid's inf for a limit)
    declared_null = {c.name: c for c in COLUMNS}
    for c in pts.columns:
        if pts[c].dtype.kind == "f":
            assert np.isfinite(pts[c].dropna()).all(), c
        if c in declared_null and pts[c].isna().any():
            col = declared_null[c]
            assert col.nullable, c
            if col.null_flags and len(col.null_flags) == len(col.null_reasons):
                explained = np.zeros(len(pts), bool)
                for flag in col.null_flags:
                    explained |= ~pts[flag].astype(bool)
                assert explained[pts[c].isna()].all(), c
    assert pts.max_batched_tokens.isna().any() and pts.tpot_p_ms.isna().any()  # the grid's inf, an unstable point


def test_roofline_step_coefficients_and_kv_capacity_are_the_closed_forms(run):
    pts, _, _ = run
    cat = packaged_catalog()
    for _, r in pts.iterrows():
        m, g = cat.models[r.model], cat.gpus[r.gpu]
        n = r.gpus_per_replica
        weights = m.n_params * 2.0
        kv_tok = m.n_layers * m.kv_elems_per_token_per_layer * 2.0
        width = m.n_heads * m.head_dim
        # SPEC 13 (tests/_spec13.py): t_ctx is a cached token's KV read; the line passes
        # through the decode step of the r sequences a sequence sees at this load (P + O/2 =
        # 1100 cached each) and the step where one prefills its chunk beside r - 1 decoders,
        # with the point's cell of the efficiency table (sweep/catalog/efficiency.toml): the
        # decode step pays the cell's decode-only overhead, the prefill step its prompt step's
        cell = packaged_efficiencies().lookup(m, g, n)
        assert (r.eta_bw, r.eta_flops) == (cell.eta_bw, cell.eta_flops)
        kw = {"eta_bw": cell.eta_bw, "eta_flops": cell.eta_flops, "t_overhead_s": cell.t_overhead_s}
        kw_decode = {**kw, "t_overhead_s": cell.t_decode_overhead_s}
        assert r.t_ctx_ms == pytest.approx(kv_tok / (n * g.hbm_bandwidth_bytes_per_s * cell.eta_bw) * 1e3, rel=1e-12)
        budget = math.inf if pd.isna(r.max_batched_tokens) else float(r.max_batched_tokens)
        x = {k: jnp.asarray(float(v)) for k, v in {**model_figures(m), **gpu_figures(g)}.items()}
        x.update(gpus_per_replica=jnp.asarray(float(n)), weight_bytes_per_param=jnp.asarray(2.0),
                 gpu_t_overhead=jnp.asarray(cell.t_overhead_s),
                 gpu_t_decode_overhead=jnp.asarray(cell.t_decode_overhead_s))
        running = float(rl.operating_running(
            rl.replica_params(x, cell.eta_bw, cell.eta_flops), r.lambda_per_replica_rps, 1000.0, 200.0, budget,
            float(r.batch_size), r.kv_capacity_tokens if r.mem_ok else 1.0, 16.0, kv_tok, width, m.n_layers))
        assert 1.0 <= running <= r.batch_size
        decode = decode_ms(r.model, r.gpu, n, running, 1100, **kw_decode)
        assert (r.t_step_fixed_ms + r.t_token_ms * running + 1100 * running * r.t_ctx_ms
                == pytest.approx(decode, rel=1e-12))
        chunk = min(1000.0, budget)
        others = running - 1.0
        attn = 4 * m.n_layers * width * others * 1100 + 2 * m.n_layers * width * chunk * chunk
        prefill = spec13_step(r.model, r.gpu, n, others + chunk, (others * 1101 + chunk) * kv_tok, attn, **kw)
        assert (r.t_step_fixed_ms + r.t_token_ms * (others + chunk) + r.t_ctx_ms * (others * 1100 + chunk)
                == pytest.approx(prefill, rel=1e-12))
        free = n * g.hbm_bytes * 0.9 - weights
        assert r.free_gb == pytest.approx(free * 1e-9, rel=1e-12)
        assert r.weights_fit == (free >= 0)
        want_c = math.floor(math.floor(max(free, 0) / kv_tok) / 16) * 16
        assert r.kv_capacity_tokens == want_c
        assert r.service_source == "roofline"


def test_weights_that_do_not_fit_are_infeasible_data_not_nan(run):
    pts, opt, _ = run
    # Mixtral 8x7B in bf16 is 93 GB: it does not fit one 80 GB H100
    nofit = pts[(pts.model == "mixtral-8x7b") & (pts.gpus_per_replica == 1)]
    assert len(nofit) and (~nofit.weights_fit).all() and (~nofit.mem_ok).all()
    assert (nofit.capacity_rps == 0).all() and nofit.ttft_p_ms.isna().all() and nofit.rho.isna().all()
    assert (nofit.action == "out_of_memory").all() and (~nofit.feasible).all()
    rows = opt[(opt.model == "mixtral-8x7b") & (opt.gpus_per_replica == 1)]
    assert (rows.reason == "out_of_memory").all() and rows.b_max_slo.isna().all() and rows.replicas_min.isna().all()


def test_derived_columns_follow_their_definitions(run):
    pts, _, _ = run
    ok = pts[pts.stable]
    assert len(ok) and len(pts[~pts.stable & pts.mem_ok])
    assert np.allclose(ok.lambda_per_replica_rps, ok.arrival_rps / ok.replicas)
    assert np.allclose(ok.rho, ok.lambda_per_replica_rps / ok.capacity_rps)
    assert np.allclose(ok.tok_s_per_user, 1e3 / ok.tpot_mean_ms)
    assert np.allclose(ok.tok_s_per_gpu, ok.capacity_rps * ok.output_tokens / ok.gpus_per_replica)
    assert np.allclose(ok.output_tok_s, ok.lambda_per_replica_rps * ok.output_tokens)
    assert np.allclose(ok.cost_usd_per_hour, ok.replicas * ok.gpus_per_replica * 2.5)  # h100-sxm: 2.5 USD/GPU-hour
    assert np.allclose(ok.cost_usd_per_mtok, ok.cost_usd_per_hour / (ok.output_tok_s * ok.replicas) / 3600 * 1e6)
    assert (ok.ttft_mean_ms <= ok.ttft_p_ms).all() and (ok.tpot_mean_ms <= ok.tpot_p_ms).all()
    assert (ok.ttft_mean_ms < ok.e2e_mean_ms).all() and (ok.mean_running <= ok.batch_size).all()
    assert ((ok.kv_util > 0) & (ok.kv_util <= 1)).all()
    # where the engine cannot keep up: unbounded latencies, the capacity still reported
    sat = pts[~pts.stable & pts.mem_ok]
    for c in ("ttft_mean_ms", "ttft_p_ms", "tpot_mean_ms", "tpot_p_ms", "e2e_mean_ms", "e2e_p_ms", "cost_usd_per_mtok",
              "tok_s_per_user"):
        assert sat[c].isna().all(), c  # NULL: unbounded or undefined, explained by stable = false
    assert (sat.rho >= 1).all() and (sat.capacity_rps > 0).all()
    assert np.allclose(sat.output_tok_s, sat.capacity_rps * sat.output_tokens)
    assert (sat.action == "unstable").all()
    # every SLO is checked at the percentile
    assert (pts.slo_ok == ((pts.ttft_p_ms <= pts.ttft_slo_ms) & (pts.tpot_p_ms <= pts.tpot_slo_ms))).all()


def test_decisions_match_brute_force_over_the_points(run):
    pts, opt, front = run
    assert len(opt) == 16 and (opt.n_points == 6).all()
    for _, row in opt.iterrows():
        sub = pts[(pts.model == row.model) & (pts.gpus_per_replica == row.gpus_per_replica)
                  & (pts.arrival_rps == row.arrival_rps) & (pts.replicas == row.replicas)]
        assert len(sub) == 6
        # b_max_slo honours rho_max (issue 27): a point above it is near saturation
        meets = sub[sub.feasible & sub.slo_ok & (sub.action != "near_saturation")]
        assert row.n_feasible == sub.feasible.sum()
        if len(meets):
            best = meets[meets.batch_size == meets.batch_size.max()]
            best = best[best.tok_s_per_user == best.tok_s_per_user.max()].iloc[0]
            assert row.b_max_slo == best.batch_size and row.b_max_slo_point_id == best.point_id
            assert row.b_max_slo_ttft_p_ms == best.ttft_p_ms and row.b_max_slo_tpot_p_ms == best.tpot_p_ms
            assert row.b_max_slo_max_batched_tokens == best.max_batched_tokens
        else:
            assert pd.isna(row.b_max_slo) and pd.isna(row.b_max_slo_point_id)
        # the frontier: feasible points no other feasible point beats on both axes
        feas = sub[sub.feasible]
        want = set()
        for _, p in feas.iterrows():
            dominated = ((feas.tok_s_per_gpu >= p.tok_s_per_gpu) & (feas.tok_s_per_user >= p.tok_s_per_user)
                         & ((feas.tok_s_per_gpu > p.tok_s_per_gpu) | (feas.tok_s_per_user > p.tok_s_per_user))).any()
            if not dominated:
                want.add(p.point_id)
        mine = front[front.row_id == row.row_id]
        assert set(mine.point_id) == want and row.n_frontier == len(want)
        assert mine.is_knee.sum() == (1 if want else 0)
        if want:
            assert row.knee_point_id == mine.point_id[mine.is_knee].iloc[0]
        # slo_opt: the most tokens/s per GPU meeting every SLO, ties to the faster user
        if len(meets):
            best = meets[meets.tok_s_per_gpu == meets.tok_s_per_gpu.max()]
            assert row.slo_opt_point_id in set(best.point_id[best.tok_s_per_user == best.tok_s_per_user.max()])
        else:
            assert pd.isna(row.slo_opt_point_id)
    # replicas_min: the fewest replicas with a cap meeting every SLO at rho <= rho_max
    for _, grp in opt.groupby(["model", "gpus_per_replica", "arrival_rps"]):
        ok = []
        for _, row in grp.iterrows():
            sub = pts[(pts.model == row.model) & (pts.gpus_per_replica == row.gpus_per_replica)
                      & (pts.arrival_rps == row.arrival_rps) & (pts.replicas == row.replicas)]
            if (sub.feasible & sub.slo_ok & (sub.rho <= sub.rho_max)).any():
                ok.append(row.replicas)
        want = min(ok) if ok else math.inf
        assert (grp.replicas_min == want).all() if ok else grp.replicas_min.isna().all()
        assert grp.is_replicas_min.sum() == (1 if ok else 0)
        if ok:
            assert (grp.replicas_min_cost_usd_per_hour == want * grp.gpus_per_replica.iloc[0] * 2.5).all()


def test_light_load_is_one_request_alone_by_hand(tmp_path):
    """lambda = 1e-3 req/s, deterministic lengths, whole prompts in one step: the prefill
    step carries P tokens and caches P (TTFT = t_f + (t_t + t_c) P); decode step k (k = 1..O-1)
    carries one token and holds P + k cached (rule 4), so the mean TPOT is t_f + t_t +
    t_c (P + O/2); E2E = TTFT + (O - 1) TPOT."""
    text = GRID.replace('model = ["llama-3.1-8b", "mixtral-8x7b"]', 'model = "llama-3.1-8b"').replace(
        "arrival_rps = [2.0, 12.0]", "arrival_rps = 0.001").replace("prompt_cv = 1.0", "prompt_cv = 0.0").replace(
        "output_cv = 1.0", "output_cv = 0.0").replace(
        "[options]", "t_fixed_ms = 8.0\nt_token_ms = 0.05\nt_ctx_ms = 0.0002\n[options]")
    run_grid(load(tmp_path, text), tmp_path / "o")
    pts = ds.dataset(tmp_path / "o" / "points", partitioning="hive").to_table().to_pandas()
    tf, tt, tc, p, o = 8.0, 0.05, 0.0002, 1000, 200
    ttft = tf + (tt + tc) * p
    tpot = tf + tt + tc * (p + o / 2)
    assert (pts.service_source == "given").all() and (pts.t_step_fixed_ms == tf).all()
    inf_budget = pts[pts.max_batched_tokens.isna()]  # NULL: the grid's inf, no budget
    assert np.allclose(inf_budget.ttft_mean_ms, ttft, rtol=1e-3)
    assert np.allclose(pts.tpot_mean_ms, tpot, rtol=1e-3)
    assert np.allclose(inf_budget.e2e_mean_ms, ttft + (o - 1) * tpot, rtol=1e-3)
    # a 2048-token budget still takes a 1000-token prompt whole
    assert np.allclose(pts.ttft_mean_ms, ttft, rtol=1e-3)


def test_simulated_latency_model_decides_on_the_simulator(tmp_path):
    text = GRID.replace('model = ["llama-3.1-8b", "mixtral-8x7b"]', 'model = "llama-3.1-8b"').replace(
        "gpus_per_replica = [1, 2]", "gpus_per_replica = 1").replace("replicas = [1, 2]", "replicas = 1").replace(
        "max_batched_tokens = [2048, inf]", "max_batched_tokens = 2048").replace(
        "[options]", '[options]\nlatency_model = "simulated"') + (
        "[simulation]\nn_requests = 1000\nwarmup = 200\nreplications = 2\nseed = 3\n")
    run_grid(load(tmp_path, text), tmp_path / "o")
    pts = ds.dataset(tmp_path / "o" / "points", partitioning="hive").to_table().to_pandas()
    sim_cols = [c.name for c in COLUMNS if c.when is not None and c.name.startswith(("sim_", "ttft_rel", "tpot_rel"))]
    assert [c for c in sim_cols if c not in pts.columns] == []
    assert (pts.stable == pts.sim_steady).all()
    steady = pts[pts.sim_steady]
    assert len(steady) and len(pts[~pts.sim_steady])
    assert (steady.ttft_p_ms == steady.sim_ttft_p_ms).all() and (steady.tpot_p_ms == steady.sim_tpot_p_ms).all()
    assert (steady.sim_preempt == 0).all() and (steady.sim_drop_rate == 0).all()
    assert (pts.slo_ok == ((pts.sim_ttft_p_ms <= pts.ttft_slo_ms) & (pts.sim_tpot_p_ms <= pts.tpot_slo_ms))).all()
    assert pts[~pts.sim_steady].ttft_p_ms.isna().all()
    # ITL: the gap law on the simulator's step, running count and TPOT (the grid's inversion)
    for _, r in steady.iterrows():
        (want,) = itl_quantiles((r.percentile,), step_mean=r.sim_step_mean_ms * 1e-3, mean_running=r.sim_mean_running,
                                rate_rps=r.lambda_per_replica_rps, prompt_mean=r.prompt_tokens,
                                max_batched_tokens=r.max_batched_tokens, t_token=r.t_token_ms * 1e-3,
                                service_cv=r.service_cv, tpot_mean=r.sim_tpot_mean_ms * 1e-3,
                                t_fixed=r.t_step_fixed_ms * 1e-3, inversion="grid")
        assert r.itl_p_ms == pytest.approx(want * 1e3, rel=1e-9)
    assert pts[~pts.sim_steady].itl_p_ms.isna().all()
    # rel_err: the analytic mean against the simulated one, recomputed
    both = steady[steady.ttft_rel_err.notna()]
    assert len(both)
    opt = pq.read_table(tmp_path / "o" / "optimum.parquet").to_pandas()
    for _, row in opt.iterrows():
        sub = pts[(pts.arrival_rps == row.arrival_rps) & pts.feasible & pts.slo_ok
                  & (pts.action != "near_saturation")]  # b_max_slo honours rho_max (issue 27)
        assert row.b_max_slo == sub.batch_size.max() if len(sub) else pd.isna(row.b_max_slo)


@pytest.mark.slow  # about 40 s on 2 cores
def test_search_over_cap_budget_gpus_and_replicas(tmp_path):
    text = GRID.replace('model = ["llama-3.1-8b", "mixtral-8x7b"]', 'model = "llama-3.1-70b"').replace(
        "arrival_rps = [2.0, 12.0]", "arrival_rps = 6.0") + """
[search]
objective = "min_cost"
trials = 96
batch = 32
seed = 0
storage = "memory"
[search.params]
batch_size = [8, 16, 32, 64, 128]
max_batched_tokens = [2048, 8192]
gpus_per_replica = [2, 4, 8]
replicas = {low = 1, high = 6}
"""
    g = load(tmp_path, text)
    table = run_search(g, tmp_path / "s")
    (row,) = table.records()
    assert row["enumerable"] and row["exact_points"] == 5 * 2 * 3 * 6 and row["trials"] == 96
    assert row["meets_constraints"] and row["slo_ok"] and row["stable"] and row["rho"] <= row["rho_max"]
    assert row["ttft_p_ms"] <= 1000 and row["tpot_p_ms"] <= 40
    # the exact answer, recomputed by brute force: the same space as a grid, every point
    grid = text.split("[search]")[0].replace("batch_size = [8, 32, 128]", "batch_size = [8, 16, 32, 64, 128]").replace(
        "max_batched_tokens = [2048, inf]", "max_batched_tokens = [2048, 8192]").replace(
        "gpus_per_replica = [1, 2]", "gpus_per_replica = [2, 4, 8]").replace(
        "replicas = [1, 2]", "replicas = [1, 2, 3, 4, 5, 6]")
    run_grid(load(tmp_path, grid, "grid.toml"), tmp_path / "o")
    pts = ds.dataset(tmp_path / "o" / "points", partitioning="hive").to_table().to_pandas()
    meets = pts[pts.feasible & pts.slo_ok & (pts.rho <= pts.rho_max)]
    assert row["exact_value"] == pytest.approx(meets.cost_usd_per_hour.min(), rel=1e-12)
    # 70B in bf16 at 6 req/s: cost moves in whole replicas of 2+ GPUs at 2.5 USD/GPU-hour
    assert row["cost_usd_per_hour"] <= 2 * row["exact_value"]


BAD = [
    ("prompt_tokens = 1000\n", "", "grid.prompt_tokens", "is required"),
    ("ttft_slo_ms = 1000\ntpot_slo_ms = 40\n", "", "grid.ttft_slo_ms", "at least one SLO"),
    ("[options]", "t_fixed_ms = 8.0\n[options]", "grid.t_token_ms", "give all of t_fixed_ms"),
    ("[options]", "t_fixed_ms = 8.0\nt_token_ms = 0.1\nt_ctx_ms = 0.0\neta_bw = 0.7\n[options]", "grid.eta_bw",
     "roofline input given"),
    ("[options]", "t_fixed_ms = 0.0\nt_token_ms = 0.0\nt_ctx_ms = 0.0\n[options]", "grid.t_token_ms", "both 0"),
    ("[options]", "t_fixed_ms = 8.0\nt_token_ms = 0.1\nt_ctx_ms = 0.0\nt_seq_us = 40\n[options]", "grid.t_seq_us",
     "roofline input given"),
    ("tpot_slo_ms = 40", "tpot_slo_ms = 40\nt_seq_us = -1", "grid.t_seq_us", "must lie in [0, 10000] us"),
    ("max_batched_tokens = [2048, inf]", "max_batched_tokens = [64, inf]", "grid.max_batched_tokens",
     "must be >= grid.batch_size 128"),
    ("prompt_cv = 1.0", "prompt_cv = -1.0", "grid.prompt_cv", "must lie in [0, 10]"),
    ("output_tokens = 200", "output_tokens = 0", "grid.output_tokens", "must lie in [1, 1e+07] tokens"),
    ("batch_size = [8, 32, 128]", "batch_size = [8, 32.5]", "grid.batch_size", "integer"),
    ("tpot_slo_ms = 40", "tpot_slo_ms = 0", "grid.tpot_slo_ms", "must lie in (0, 1e+09] ms or be inf"),
    ("tpot_slo_ms = 40", "tpot_slo_ms = 40\nrho_min = 0.9", "grid.rho_min", "must be < rho_max"),
    ("tpot_slo_ms = 40", "tpot_slo_ms = 40\nbatch_window_ms = 5", "grid.batch_window_ms", ""),
]


@pytest.mark.parametrize("old, new, key, rule", BAD, ids=[b[2] + ":" + b[3][:12] for b in BAD])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, old, new, key, rule):
    assert old in GRID
    text = GRID.replace(old, new, 1)
    with pytest.raises(GridError) as err:
        load(tmp_path, text)
    assert key in str(err.value) and rule in str(err.value)
    out = tmp_path / "o"
    assert main(["run", str(tmp_path / "g.toml"), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "g.toml" in lines[0] and key in lines[0]
    assert not out.exists()


def test_the_per_sequence_cost_enters_the_line_at_the_running_count(tmp_path, run):
    """`t_seq_us` (docs/roofline.md, "Per-sequence cost"): a closed loop of n clients below the
    cap runs n sequences, so the line drawn there gains exactly n t_seq in t_fixed and
    nothing in t_token or t_ctx (closed form); its TPOT rises by about that (a decode step of
    n sequences is most of what a token waits for); the grid's value is echoed, 0 by default."""
    text = """
name = "seq"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
clients = [1, 100]
prompt_tokens = 200
output_tokens = 1000
batch_size = 256
max_batched_tokens = 8192
tpot_slo_ms = 40
t_seq_us = [0, 45]
[options]
serving = "continuous"
workload = "closed"
kv_allocation = "paged"
block_tokens = 16
[output]
points = "all"
"""
    run_grid(load(tmp_path, text), tmp_path / "o")
    pts = ds.dataset(tmp_path / "o" / "points", partitioning="hive").to_table().to_pandas()
    by = {(int(r.clients), float(r.t_seq_us)): r for r in pts.itertuples()}
    for n in (1, 100):
        a, b = by[(n, 0.0)], by[(n, 45.0)]
        assert b.t_step_fixed_ms - a.t_step_fixed_ms == pytest.approx(n * 45e-3, rel=1e-9)
        assert b.t_token_ms == pytest.approx(a.t_token_ms, rel=1e-12)
        assert b.t_ctx_ms == pytest.approx(a.t_ctx_ms, rel=1e-12)
    rise = by[(100, 45.0)].tpot_mean_ms - by[(100, 0.0)].tpot_mean_ms
    assert 0.9 * 100 * 45e-3 < rise < 1.1 * 100 * 45e-3
    assert "t_seq_us" not in GRID and (run[0].t_seq_us == 0.0).all()


def test_prefill_first_grids_simulate_the_policy(tmp_path):
    """`[options] scheduler_policy = "prefill_first"` reaches the simulator: on the same
    simulated points (same seed, same draws) every decoder pauses for each prompt step, so
    the simulated TPOT is longer than under "chunked" at every stable point and TTFT (a
    prompt runs with the whole budget, alone) no longer, and the run's manifest names it."""
    text = GRID.replace('model = ["llama-3.1-8b", "mixtral-8x7b"]', 'model = "llama-3.1-8b"').replace(
        "gpus_per_replica = [1, 2]", "gpus_per_replica = 1").replace("replicas = [1, 2]", "replicas = 1").replace(
        "max_batched_tokens = [2048, inf]", "max_batched_tokens = 2048").replace(
        "batch_size = [8, 32, 128]", "batch_size = [32, 128]").replace(
        "[options]", '[options]\nlatency_model = "simulated"') + (
        "[simulation]\nn_requests = 1000\nwarmup = 200\nreplications = 2\nseed = 3\n")
    runs = {}
    for policy in ("chunked", "prefill_first"):
        g = load(tmp_path, text.replace("[options]", f'[options]\nscheduler_policy = "{policy}"'))
        assert g.options.scheduler_policy == policy
        run_grid(g, tmp_path / policy)
        runs[policy] = ds.dataset(tmp_path / policy / "points", partitioning="hive").to_table().to_pandas()
    both = runs["chunked"].sim_steady & runs["prefill_first"].sim_steady
    assert both.sum() >= 2
    assert (runs["prefill_first"].sim_tpot_mean_ms[both] > runs["chunked"].sim_tpot_mean_ms[both]).all()
    assert (runs["prefill_first"].sim_ttft_mean_ms[both] <= runs["chunked"].sim_ttft_mean_ms[both] * 1.02).all()
    import json

    assert json.loads((tmp_path / "prefill_first" / "manifest.json").read_text())["scheduler_policy"] == "prefill_first"


@pytest.mark.parametrize("options, rule", [
    ('scheduler_policy = "prefil_first"', "must be one of chunked, prefill_first; did you mean 'prefill_first'"),
    ("scheduler_policy = 1", "must be one of chunked, prefill_first"),
    ('serving = "dynamic"\nscheduler_policy = "chunked"', "how an iteration-level (continuous) engine"),
])
def test_bad_scheduler_policy_is_one_line(tmp_path, capsys, options, rule):
    text = GRID.replace("[options]\nserving = \"continuous\"", "[options]\n" + options
                        + ("" if "serving" in options else '\nserving = "continuous"'))
    if "dynamic" in options:
        text = ("name = \"d\"\n[grid]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\narrival_rps = 10\n"
                "batch_size = 8\nbatch_window_ms = 5\nseq_len = 2048\nslo_ms = 500\n[options]\n" + options + "\n")
    f = tmp_path / "g.toml"
    f.write_text(text)
    assert main(["run", str(f), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "options.scheduler_policy" in err[0] and rule in err[0], err
    assert not (tmp_path / "out").exists()


def test_on_demand_and_multi_step_grids_simulate_the_engine(tmp_path):
    """`[options] kv_admission = "on_demand"` (the default) and `scheduler_steps = k` reach the simulator (the
    compiled event loop, `sweep.models.continuous.loop`, the same random streams as the JAX
    simulator). Llama 3.1 8B on one L4 with a fifth of its memory held back keeps 23,952 KV
    tokens: 20 reservations of the mean prompt + output (1,000 + 200), below the cap of 64. On
    demand a sequence holds only its cached tokens, so more sequences run at once than reserve
    admits, and they outgrow the cache: preemptions and recomputed tokens appear (0 under
    reserve, which never preempts). With 8 steps a decision a prompt waits for the window to
    end: the simulated TTFT is longer than at one step wherever both are steady. The manifest
    names both options."""
    text = GRID.replace('model = ["llama-3.1-8b", "mixtral-8x7b"]', 'model = "llama-3.1-8b"').replace(
        'gpu = "h100-sxm"', 'gpu = "l4"').replace(
        "gpus_per_replica = [1, 2]", "gpus_per_replica = 1").replace("replicas = [1, 2]", "replicas = 1").replace(
        "max_batched_tokens = [2048, inf]", "max_batched_tokens = 2048").replace(
        "batch_size = [8, 32, 128]", "batch_size = 64").replace(
        "arrival_rps = [2.0, 12.0]", "arrival_rps = [0.5, 0.75]").replace(
        "reserve_fraction = 0.1", 'reserve_fraction = 0.2\nlatency_model = "simulated"') + (
        "[simulation]\nn_requests = 1000\nwarmup = 200\nreplications = 2\nseed = 3\n")
    runs = {}
    reserve = 'kv_admission = "reserve"'
    for name, extra in (("base", reserve), ("on_demand", ""), ("steps", reserve + "\nscheduler_steps = 8")):
        g = load(tmp_path, text.replace('serving = "continuous"', f'serving = "continuous"\n{extra}'))
        run_grid(g, tmp_path / name)
        runs[name] = ds.dataset(tmp_path / name / "points", partitioning="hive").to_table().to_pandas()
    base, od, st = runs["base"], runs["on_demand"], runs["steps"]
    assert (base.kv_capacity_tokens == 23952).all()
    assert (base.sim_preempt == 0).all() and (base.sim_recomputed_tok == 0).all()
    assert (od.sim_mean_running > base.sim_mean_running).all()
    assert (od.sim_preempt > 0).all() and (od.sim_recomputed_tok > 0).all()
    both = base.sim_steady & st.sim_steady
    assert both.sum() >= 1 and (st.sim_ttft_mean_ms[both] > base.sim_ttft_mean_ms[both]).all()
    import json

    manifest = json.loads((tmp_path / "on_demand" / "manifest.json").read_text())
    assert manifest["kv_admission"] == "on_demand" and manifest["scheduler_steps"] == 1
    assert json.loads((tmp_path / "steps" / "manifest.json").read_text())["scheduler_steps"] == 8


@pytest.mark.parametrize("options, key, rule", [
    ('kv_admission = "ondemand"', "options.kv_admission", "did you mean 'on_demand'"),
    ("scheduler_steps = 0", "options.scheduler_steps", "must be an integer from 1 to 64"),
    ("scheduler_steps = 2.5", "options.scheduler_steps", "must be an integer from 1 to 64"),
])
def test_bad_engine_variant_is_one_line(tmp_path, capsys, options, key, rule):
    f = tmp_path / "g.toml"
    f.write_text(GRID.replace('[options]\nserving = "continuous"', '[options]\nserving = "continuous"\n' + options))
    assert main(["run", str(f), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0] and rule in err[0], err
    assert not (tmp_path / "out").exists()


def test_on_demand_analytic_is_the_reserve_model_where_reservations_never_block(tmp_path):
    """`kv_admission = "on_demand"` with the analytic model: wherever the reserve engine's
    reservations never block an admission, the on-demand engine runs the same schedule (it holds
    at most what reserve reserves), so every value is the reserve grid's, bit for bit, and
    `analytic_trusted` adds the rule `reservations_never_block` (recomputed here from its
    closed form) to the reserve grid's. Llama 3.1 8B with 1,000 + 200-token requests: an L4 with
    a fifth of its memory held back keeps 23,952 KV tokens (20 mean reservations, below the cap
    of 64), an H100 365,744."""
    text = GRID.replace('model = ["llama-3.1-8b", "mixtral-8x7b"]', 'model = "llama-3.1-8b"').replace(
        'gpu = "h100-sxm"', 'gpu = ["l4", "h100-sxm"]').replace(
        "gpus_per_replica = [1, 2]", "gpus_per_replica = 1").replace("replicas = [1, 2]", "replicas = 1").replace(
        "batch_size = [8, 32, 128]", "batch_size = 64").replace(
        "arrival_rps = [2.0, 12.0]", "arrival_rps = [0.5, 2.0, 8.0]").replace(
        "reserve_fraction = 0.1", "reserve_fraction = 0.2")
    runs = {}
    for name in ("reserve", "on_demand"):
        g = load(tmp_path, text.replace('serving = "continuous"', f'serving = "continuous"\nkv_admission = "{name}"'))
        run_grid(g, tmp_path / name)
        runs[name] = ds.dataset(tmp_path / name / "points", partitioning="hive").to_table().to_pandas().sort_values(
            "point_id").reset_index(drop=True)
    res, od = runs["reserve"], runs["on_demand"]
    pd.testing.assert_frame_equal(res.drop(columns="analytic_trusted"), od.drop(columns="analytic_trusted"))
    r_mean = 1000 + 200 + 0.5 * 16
    r_var = 1000.0**2 + 200.0**2 + 16.0**2 / 12
    n_hi = np.minimum(64, res.mean_running + 3 * np.sqrt(res.mean_running) + 1)
    never = n_hi * r_mean + 3 * np.sqrt(n_hi * r_var) <= res.kv_capacity_tokens
    assert (od.analytic_trusted == (res.analytic_trusted & never)).all()
    assert set(res.kv_capacity_tokens) == {23952.0, 365744.0}
    assert not never[res.gpu == "l4"].any() and never[res.gpu == "h100-sxm"].all()


def test_multi_step_analytic_grids_take_the_windows(tmp_path):
    """`scheduler_steps = 4` under the analytic model: every sustainable point's TTFT is longer
    than at one step a decision (the window in progress and the first message's wait for the
    window's end: analytic.cb_point(steps=k), checked against the compiled loop in
    tests/test_cb_accuracy.py), the message gap is 4 one-step gaps, and the manifest says k."""
    import json

    runs = {}
    for name, extra in (("one", ""), ("four", "scheduler_steps = 4")):
        g = load(tmp_path, GRID.replace('serving = "continuous"', f'serving = "continuous"\n{extra}'))
        run_grid(g, tmp_path / name)
        runs[name] = ds.dataset(tmp_path / name / "points", partitioning="hive").to_table().to_pandas().sort_values(
            "point_id").reset_index(drop=True)
    one, four = runs["one"], runs["four"]
    both = one.stable & four.stable
    assert both.sum() >= 10
    assert (four.ttft_mean_ms[both] > one.ttft_mean_ms[both]).all()
    # (the one-step law at the k fixed point: its capacity moves the step by a little)
    np.testing.assert_allclose(four.itl_p_ms[both], 4.0 * one.itl_p_ms[both], rtol=1e-3)
    assert (four.capacity_rps <= one.capacity_rps * (1 + 1e-12)).all()
    assert json.loads((tmp_path / "four" / "manifest.json").read_text())["scheduler_steps"] == 4


def test_prefill_first_multi_step_grids_are_analytic(tmp_path):
    """`scheduler_policy = "prefill_first"` with `scheduler_steps = 4` runs under the analytic
    model (docs/continuous.md, "Engine variants": decode windows between chains of prompt
    steps; checked against the compiled loop in tests/test_cb_accuracy.py): an arrival waits
    for the decode window in progress, so below 80% of the capacity (where the wait for a slot
    is small: nearer, the windows' fewer prompt steps raise the capacity and cut that wait)
    every point's TTFT is longer than at one step a decision, yet shorter than under `chunked`
    windows, whose first message also waits for its own window's end."""
    runs = {}
    pf = 'scheduler_policy = "prefill_first"'
    for name, extra in (("pf_one", pf), ("pf_four", pf + "\nscheduler_steps = 4"), ("four", "scheduler_steps = 4")):
        g = load(tmp_path, GRID.replace('serving = "continuous"', f'serving = "continuous"\n{extra}'))
        run_grid(g, tmp_path / name)
        runs[name] = ds.dataset(tmp_path / name / "points", partitioning="hive").to_table().to_pandas().sort_values(
            "point_id").reset_index(drop=True)
    one, four, chunked = runs["pf_one"], runs["pf_four"], runs["four"]
    both = one.stable & four.stable & chunked.stable & (one.lambda_per_replica_rps < 0.8 * one.capacity_rps)
    assert both.sum() >= 10
    assert (four.ttft_mean_ms[both] > one.ttft_mean_ms[both]).all()
    assert (four.ttft_mean_ms[both] < chunked.ttft_mean_ms[both]).all()
    assert np.isfinite(four.tpot_p_ms[four.stable]).all() and (four.tpot_p_ms[four.stable] > 0).all()
