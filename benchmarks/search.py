"""Exact decisions: JAX reductions against a straightforward NumPy version, and scale.

Part 1 evaluates the per-row decisions of SPEC 6 (b_max_slo, b_latency_opt, SLO-optimal
point, Pareto frontier, knee) on the same random (rows x K) arrays with `sweep.decide`
(jit + vmap) and with a plain NumPy implementation (sort-based frontier, vectorised over
rows), checks they agree, and prints rows/s for both.

Part 2 runs whole grids of G scenario groups x batch sizes 1..1024 through `sweep run`
(`[output] points = "none"`, so only optimum.parquet and frontier.parquet are written), each
in a fresh process, and prints time, points/s and peak resident memory: memory must not
grow with G.

    python benchmarks/search.py [--rows 4096] [--k 1024] [--groups 1000,10000,100000] [--smoke]

(``--smoke``: 64 rows x 64 points, one repeat, one run of 2 groups; nothing written to
benchmarks/results/.)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _fresh import run_fresh

jax.config.update("jax_enable_x64", True)

from sweep.decide import pareto as decide
from sweep.decide.reduce import Row, reduce_row


def numpy_decide(cap, lat, e_resp, batch, feasible, slo):
    """Straightforward NumPy: the same answers, vectorised over rows."""
    rows, k = cap.shape
    meets = feasible & (lat <= slo)

    def argbest(mask, primary, secondary):
        top = np.max(np.where(mask, primary, -np.inf), axis=1, keepdims=True)
        tied = mask & (primary == top)
        idx = np.argmin(np.where(tied, secondary, np.inf), axis=1)
        return np.where(mask.any(axis=1), idx, -1)

    b_max = argbest(meets, batch, lat)
    lat_opt = argbest(feasible, -e_resp, batch)
    slo_opt = argbest(meets, cap, lat)
    c = np.where(feasible, cap, -np.inf)
    la = np.where(feasible, lat, np.inf)
    order = np.lexsort((la, -c), axis=1)
    cs, ls = np.take_along_axis(c, order, 1), np.take_along_axis(la, order, 1)
    pos = np.broadcast_to(np.arange(k), (rows, k))
    new_run = np.concatenate([np.ones((rows, 1), bool), cs[:, 1:] != cs[:, :-1]], axis=1)
    run_start = np.maximum.accumulate(np.where(new_run, pos, 0), axis=1)
    cm = np.minimum.accumulate(ls, axis=1)
    before = np.where(run_start > 0, np.take_along_axis(cm, np.maximum(run_start - 1, 0), 1), np.inf)
    dom = (before <= ls) | (np.take_along_axis(ls, run_start, 1) < ls)
    front_sorted = ~dom & np.take_along_axis(feasible, order, 1)
    front = np.zeros_like(feasible)
    np.put_along_axis(front, order, front_sorted, 1)

    def norm(x):
        lo = np.min(np.where(front, x, np.inf), axis=1, keepdims=True)
        hi = np.max(np.where(front, x, -np.inf), axis=1, keepdims=True)
        span = hi - lo
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(front & (span > 0), (x - lo) / np.where(span > 0, span, 1), 0.0)

    score = np.where(front, norm(cap) - norm(lat), -np.inf)
    tied = front & (score >= score.max(axis=1, keepdims=True) - decide.KNEE_TIE)
    knee = np.where(front.any(axis=1), np.argmin(np.where(tied, cap, np.inf), axis=1), -1)
    return b_max, lat_opt, slo_opt, front, knee


def part1(rows: int, k: int, repeats: int = 3) -> dict:
    rng = np.random.default_rng(0)
    batch = np.tile(np.arange(1, k + 1, dtype=float), (rows, 1))
    lam = rng.uniform(10, 1000, (rows, 1))
    t = 0.02 + 0.0005 * batch
    cap = batch / t
    rho = lam * t / batch
    ok = rho < 1
    e_resp = np.where(ok, lam * t * t / batch / (2 * (1 - np.where(ok, rho, 0))) + (batch - 1) / (2 * lam) + t,
                      np.inf) * 1e3
    lat = e_resp * 2.0
    feasible = ok
    slo = np.full((rows, k), 300.0)
    row = Row(
        feasible=jnp.asarray(feasible), mem_ok=jnp.ones((rows, k), bool), stable=jnp.asarray(ok),
        slo_ok=jnp.asarray(lat <= slo), latency=jnp.asarray(lat), e_resp=jnp.asarray(e_resp), capacity=jnp.asarray(cap),
        batch=jnp.asarray(batch), rho=jnp.asarray(rho), rho_max=jnp.full((rows, k), 0.85),
    )
    def columns(r):  # the engine's path: capacity rises along the batch axis (one window)
        front = decide.pareto_mask_columns(r.capacity[None], r.latency[None], r.feasible[None])[0]
        return reduce_row(r, front)

    def general(r):  # the fallback: sort-based frontier
        return reduce_row(r, decide.pareto_mask(r.capacity, r.latency, r.feasible))

    fn = jax.jit(jax.vmap(columns))
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(row))
    compile_s = time.perf_counter() - t0
    jax_s = min(_timed(lambda: jax.block_until_ready(fn(row))) for _ in range(repeats))
    fn_general = jax.jit(jax.vmap(general))
    out_general = jax.block_until_ready(fn_general(row))
    general_s = min(_timed(lambda: jax.block_until_ready(fn_general(row))) for _ in range(repeats))
    ref = numpy_decide(cap, lat, e_resp, batch, feasible, slo)
    np_s = min(_timed(lambda: numpy_decide(cap, lat, e_resp, batch, feasible, slo)) for _ in range(repeats))
    agree = (
        np.array_equal(np.asarray(out["b_max_slo_idx"]), ref[0])
        and np.array_equal(np.asarray(out["b_latency_opt_idx"]), ref[1])
        and np.array_equal(np.asarray(out["slo_opt_idx"]), ref[2])
        and np.array_equal(np.asarray(out["frontier"]), ref[3])
        and np.array_equal(np.asarray(out["knee_idx"]), ref[4])
        and all(np.array_equal(np.asarray(out[k]), np.asarray(out_general[k])) for k in out)
    )
    return {"rows": rows, "k": k, "jax_rows_per_s": rows / jax_s, "jax_general_rows_per_s": rows / general_s,
            "numpy_rows_per_s": rows / np_s,
            "speedup": np_s / jax_s, "compile_s": compile_s, "agree": agree}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


GRID = """
name = "decide-scale"
[grid]
arrival_rps = {{start = 20.0, stop = 2000.0, num = {rates}, scale = "log"}}
slo_ms = {{start = 50.0, stop = 500.0, num = {slos}}}
batch_size = {{start = 1, stop = 1024, step = 1}}
seq_len = 2048
model = "llama-3.1-8b"
gpu = "h100-sxm"
t_fixed_ms = 8.0
t_req_ms = 0.05
[output]
points = "none"
"""


def part2_one(groups: int) -> dict:
    rates = min(100, groups)
    with tempfile.TemporaryDirectory() as d:
        grid = Path(d) / "g.toml"
        grid.write_text(GRID.format(rates=rates, slos=groups // rates))
        row = run_fresh(grid, Path(d) / "out")
    row["groups"] = groups
    return row


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--groups", default="1000,10000,100000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run that writes nothing (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rows, args.k, args.groups, args.repeats = 64, 64, "2", 1
    r1 = part1(args.rows, args.k, args.repeats)
    print(f"part 1: per-row decisions on {args.rows:,} rows x {args.k} points (best of {args.repeats})")
    print(f"  JAX   {r1['jax_rows_per_s']:>12,.0f} rows/s   compile {r1['compile_s']:.2f} s  "
          "(column frontier, the engine's path)")
    print(f"  JAX   {r1['jax_general_rows_per_s']:>12,.0f} rows/s   (general sort-based frontier, the fallback)")
    print(f"  NumPy {r1['numpy_rows_per_s']:>12,.0f} rows/s")
    print(f"  JAX/NumPy {r1['speedup']:.1f}x, answers identical: {r1['agree']}")
    print("part 2: whole runs, groups x batch sizes 1..1024, points = none")
    print(f"  {'groups':>8} {'points':>13} {'seconds':>9} {'points/s':>12} {'frontier rows':>14} {'peak RSS MB':>12}")
    rows2 = []
    for g in (int(x) for x in args.groups.split(",")):
        r = part2_one(g)
        rows2.append(r)
        print(f"  {g:>8,} {r['points']:>13,} {r['s']:>9.1f} {r['points_per_s']:>12,.0f} "
              f"{r['frontier']:>14,} {r['rss_mb']:>12,.0f}")
    results = {"part1": r1, "part2": rows2}
    if not args.smoke:
        out = Path(__file__).parent / "results"
        out.mkdir(exist_ok=True)
        (out / "search.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
