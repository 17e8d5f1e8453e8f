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
