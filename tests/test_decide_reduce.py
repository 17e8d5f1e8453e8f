"""Per-row answers (`sweep.decide.reduce`, SPEC 6) against a brute force written from
SPEC 6's arg-max rules, on random rows with ties."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sweep.decide import pareto as decide
from sweep.decide.reduce import Row, reduce_row

_row = jax.jit(jax.vmap(lambda r: reduce_row(r, decide.pareto_mask(r.capacity, r.latency, r.feasible))))


def brute_row(r):
    """SPEC 6 answers for one row, by plain loops."""
    n = len(r["batch"])
    feas = [i for i in range(n) if r["feasible"][i]]
    meets = [i for i in feas if r["latency"][i] <= r["slo"][i]]
    lat_opt = min(feas, key=lambda i: (r["e_resp"][i], r["batch"][i], i)) if feas else -1
    slo_opt = min(meets, key=lambda i: (-r["capacity"][i], r["latency"][i], i)) if meets else -1
    head = [i for i in meets if r["rho"][i] <= r["rho_max"][i]]
    pick = min(head, key=lambda i: (-r["batch"][i], r["latency"][i], i)) if head else -1
    # b_max_slo honours rho_max (issue 27): the same rule as the replicas_min pick
    return pick, lat_opt, slo_opt, pick


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
        assert (int(got["b_max_slo_idx"][i]), int(got["b_latency_opt_idx"][i]), int(got["slo_opt_idx"][i]),
                int(got["replicas_ok_idx"][i])) == want


def test_reduce_chunk_with_three_row_axes_and_two_group_axes_matches_brute_force():
    """A mode with row axes (a, b, cap) and group axes (p, q) whose replicas_min counts a
    `gpus` column: rows are contiguous blocks of 2 x 3 x 4 points, groups of 2 x 3 rows; the
    group's pick is the smallest gpus among rows with an answer within rho_max, ties to the
    lowest cost, then the first row (brute force over every row of every group)."""
    from sweep.decide.reduce import reduce_chunk
    from sweep.models.base import Decisions

    rng = np.random.default_rng(11)
    n_groups, rows_per_group, n_cap = 7, 6, 4
    row_size = 2 * 3 * n_cap
    n = n_groups * rows_per_group * row_size
    d = Decisions(row_axes=("a", "b", "cap"), group_axes=("p", "q"), size="gpus")
    cap = np.tile(np.array([1.0, 2.0, 4.0, 8.0]), n // n_cap)
    gpus_row = rng.integers(2, 6, n_groups * rows_per_group).astype(float)  # ties within a group are common
    cost_row = rng.integers(1, 4, n_groups * rows_per_group) * 10.0
    rho = rng.random(n)
    out = {
        "feasible": rng.random(n) < 0.7, "mem_ok": np.ones(n, bool), "stable": np.ones(n, bool),
        "slo_ok": rng.random(n) < 0.5, "latency_ms": rng.random(n) * 100, "e_resp_ms": rng.random(n) * 100,
        "capacity_rps": cap * 10.0, "cap": cap, "_rho_rules": rho, "rho_max": np.full(n, 0.6),
        "gpus": np.repeat(gpus_row, row_size), "cost_usd_per_hour": np.repeat(cost_row, row_size),
    }
    got = reduce_chunk({k: jnp.asarray(v) for k, v in out.items()}, d, row_size=row_size, n_cap=n_cap,
                       rows_per_group=rows_per_group)["_rows"]
    ok_row = (out["feasible"] & out["slo_ok"] & (rho <= 0.6)).reshape(-1, row_size).any(axis=1)
    for g in range(n_groups):
        rows = range(g * rows_per_group, (g + 1) * rows_per_group)
        cand = [r for r in rows if ok_row[r]]
        want = min(cand, key=lambda r: (gpus_row[r], cost_row[r], r)) if cand else None
        for r in rows:
            assert bool(got["is_replicas_min"][r]) == (r == want)
            assert float(got["replicas_min"][r]) == (gpus_row[want] if want is not None else np.inf)
