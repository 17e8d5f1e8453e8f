"""Exact decisions (SPEC 6) against brute force, and optimum/frontier files end to end.

References: a plain-Python brute force written from SPEC 6's definitions (pairwise
domination with exact float comparison, the knee rule, the arg-max rules), on random point
sets drawn with many ties and duplicates.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweep import grid as spec
from sweep.decide import pareto as decide
from sweep.decide.reduce import Row, reduce_row
from sweep.runner import run_grid

_pareto = jax.jit(jax.vmap(decide.pareto_mask))
_knee = jax.jit(jax.vmap(decide.knee_index))
_row = jax.jit(jax.vmap(lambda r: reduce_row(r, decide.pareto_mask(r.capacity, r.latency, r.feasible))))
_cols = jax.jit(jax.vmap(decide.pareto_mask_columns))


def brute_pareto(cap, lat, valid):
    n = len(cap)
    out = []
    for i in range(n):
        if not valid[i]:
            out.append(False)
            continue
        dominated = any(
            valid[j] and cap[j] >= cap[i] and lat[j] <= lat[i] and (cap[j] > cap[i] or lat[j] < lat[i])
            for j in range(n)
        )
        out.append(not dominated)
    return np.array(out)


def brute_knee(cap, lat, front):
    idx = [i for i in range(len(cap)) if front[i]]
    if not idx:
        return -1
    c, la = np.array([cap[i] for i in idx]), np.array([lat[i] for i in idx])

    def norm(x):
        span = x.max() - x.min()
        return (x - x.min()) / span if span > 0 else np.zeros_like(x)

    score = norm(c) - norm(la)
    tied = [k for k in range(len(idx)) if score[k] >= score.max() - 1e-9]
    best = min(tied, key=lambda k: (c[k], idx[k]))
    return idx[best]


def random_rows(rng, rows, k, levels):
    # Few distinct levels -> many ties and exact duplicates.
    cap = rng.integers(1, levels, (rows, k)).astype(float) * 10.0
    lat = rng.integers(1, levels, (rows, k)).astype(float) * 7.0
    valid = rng.random((rows, k)) < 0.8
    return cap, lat, valid


@pytest.mark.parametrize("k,levels", [(1, 3), (2, 2), (7, 3), (33, 5), (64, 40), (200, 1000)])
def test_pareto_and_knee_match_brute_force(k, levels):
    rng = np.random.default_rng(k * 1000 + levels)
    cap, lat, valid = random_rows(rng, 60, k, levels)
    got = np.asarray(_pareto(jnp.asarray(cap), jnp.asarray(lat), jnp.asarray(valid)))
    knees = np.asarray(_knee(jnp.asarray(cap), jnp.asarray(lat), jnp.asarray(got)))
    for r in range(cap.shape[0]):
        want = brute_pareto(cap[r], lat[r], valid[r])
        np.testing.assert_array_equal(got[r], want)
        assert knees[r] == brute_knee(cap[r], lat[r], want)


@pytest.mark.parametrize("n_win,n_b,levels", [(1, 1, 3), (1, 9, 4), (3, 7, 3), (4, 33, 6), (2, 64, 1000)])
def test_column_frontier_matches_general(n_win, n_b, levels):
    rng = np.random.default_rng(n_win * 100 + n_b)
    rows = 80
    cap_cols = np.sort(rng.integers(1, levels + 1, (rows, n_b)).astype(float), axis=1)  # ties included
    cap = np.repeat(cap_cols[:, None, :], n_win, axis=1)
    lat = rng.integers(1, levels + 1, (rows, n_win, n_b)).astype(float)
    valid = rng.random((rows, n_win, n_b)) < 0.8
    assert bool(decide.columns_sorted(jnp.asarray(cap)))
    got = np.asarray(_cols(jnp.asarray(cap), jnp.asarray(lat), jnp.asarray(valid))).reshape(rows, -1)
    for r in range(rows):
        want = brute_pareto(cap[r].ravel(), lat[r].ravel(), valid[r].ravel())
        np.testing.assert_array_equal(got[r], want)


def test_columns_sorted_detects_other_layouts():
    cap = jnp.asarray([[[1.0, 2.0], [1.0, 2.0]]])
    assert bool(decide.columns_sorted(cap))
    assert not bool(decide.columns_sorted(cap[:, :, ::-1]))
    assert not bool(decide.columns_sorted(jnp.asarray([[[1.0, 2.0], [1.0, 3.0]]])))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 1e4), st.floats(0.1, 1e4), st.booleans()), min_size=1, max_size=40))
def test_pareto_property(points):
    cap = np.array([p[0] for p in points])
    lat = np.array([p[1] for p in points])
    valid = np.array([p[2] for p in points])
    got = np.asarray(_pareto(jnp.asarray(cap)[None], jnp.asarray(lat)[None], jnp.asarray(valid)[None]))[0]
    np.testing.assert_array_equal(got, brute_pareto(cap, lat, valid))


def test_knee_of_a_single_point_and_of_a_line():
    cap = jnp.asarray([[100.0, 50.0, 10.0]])
    lat = jnp.asarray([[5.0, 9.0, 1.0]])
    one = jnp.asarray([[True, False, False]])
    assert int(_knee(cap, lat, one)[0]) == 0
    # Collinear frontier: every score is 0 -> tie -> the smallest capacity.
    line_cap = jnp.asarray([[1.0, 2.0, 3.0]])
    line_lat = jnp.asarray([[1.0, 2.0, 3.0]])
    assert int(_knee(line_cap, line_lat, jnp.ones((1, 3), dtype=bool))[0]) == 0


def brute_row(r):
    """SPEC 6 answers for one row, by plain loops."""
    n = len(r["batch"])
    feas = [i for i in range(n) if r["feasible"][i]]
    meets = [i for i in feas if r["latency"][i] <= r["slo"][i]]
    b_max_slo = min(meets, key=lambda i: (-r["batch"][i], r["latency"][i], i)) if meets else -1
    lat_opt = min(feas, key=lambda i: (r["e_resp"][i], r["batch"][i], i)) if feas else -1
    slo_opt = min(meets, key=lambda i: (-r["capacity"][i], r["latency"][i], i)) if meets else -1
    head = [i for i in meets if r["rho"][i] <= r["rho_max"][i]]
    pick = min(head, key=lambda i: (-r["batch"][i], r["latency"][i], i)) if head else -1
    return b_max_slo, lat_opt, slo_opt, pick


def test_reduce_row_matches_brute_force():
    rng = np.random.default_rng(7)
    rows, k = 300, 24
    r = {
        "feasible": rng.random((rows, k)) < 0.6,
        "mem_ok": np.ones((rows, k), dtype=bool),
        "stable": np.ones((rows, k), dtype=bool),
        "latency": rng.integers(1, 30, (rows, k)) * 10.0,
        "e_resp": rng.integers(1, 30, (rows, k)) * 5.0,
        "slo": np.full((rows, k), 150.0),
        "capacity": rng.integers(1, 8, (rows, k)) * 100.0,
        "batch": np.tile(np.repeat([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], 4), (rows, 1)),
        "rho": rng.random((rows, k)),
        "rho_max": np.full((rows, k), 0.85),
    }
    r["slo_ok"] = r["latency"] <= r["slo"]
    got = _row(Row(**{f: jnp.asarray(r[f]) for f in Row._fields}))
    for i in range(rows):
        want = brute_row({f: r[f][i] for f in r})
        assert (int(got["b_max_slo_idx"][i]), int(got["b_latency_opt_idx"][i]), int(got["slo_opt_idx"][i]), int(got["replicas_ok_idx"][i])) == want


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
    g, out = small_run
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    assert len(opt) == 2 * 2 * 4  # arrival x gpu x replicas
    assert not opt.isna().any().any()
    pts = pq.read_table(out / "points").to_pandas()
    for _, row in opt.iterrows():
        sub = pts[(pts.arrival_rps == row.arrival_rps) & (pts.gpu == row.gpu) & (pts.replicas == row.replicas)]
        ok = sub[sub.feasible & (sub.latency_ms <= sub.slo_ms)]
        if len(ok):
            assert row.b_max_slo == ok.batch_size.max() and row.reason == "ok"
            best = ok.loc[ok.capacity_rps.idxmax()]
            assert row.slo_opt_capacity_rps == best.capacity_rps
        else:
            assert row.b_max_slo == 0 and math.isinf(row.b_max_slo_latency_ms) and row.reason != "ok"
        feas = sub[sub.feasible]
        if len(feas):
            assert row.b_latency_opt_e_resp_ms == feas.e_resp_ms.min()
    # replicas_min: the fewest replicas with an SLO batch at rho <= rho_max, on every row.
    for (rate, gpu), grp in opt.groupby(["arrival_rps", "gpu"]):
        sub = pts[(pts.arrival_rps == rate) & (pts.gpu == gpu)]
        good = sub[sub.feasible & (sub.latency_ms <= sub.slo_ms) & (sub.rho <= sub.rho_max)]
        want = good.replicas.min() if len(good) else math.inf
        assert (grp.replicas_min == want).all()
        assert grp.is_replicas_min.sum() == (1 if len(good) else 0)
        if len(good):
            at = good[good.replicas == want]
            assert (grp.replicas_min_batch == at.batch_size.max()).all()
            assert (grp.replicas_min_cost_usd_per_hour == at.cost_usd_per_hour.iloc[0]).all()


def test_frontier_file(small_run):
    g, out = small_run
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
        assert f.is_slo_opt.sum() == (1 if row.reason == "ok" else 0)
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
    assert np.isinf(opt.replicas_min).all() and not opt.is_replicas_min.any()
