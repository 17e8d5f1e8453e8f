"""Analytic continuous-batching points per second against the seed model's windowed kernel.

Both sides run in the same process on the same machine: `sweep.models.cb_analytic.cb_point`
vmapped and jitted over 2^16 .. 2^20 random points, and `sweep.kernels.evaluate_point` with
`windowed=True` (the seed model's windowed kernel, vmapped the way `sweep/evaluate.py`
does it) over the same number of points. Goal (issue 11, item 7): the continuous model
within 3x of the windowed kernel. Best of ``--repeats`` after a warm-up call (compile).

    python benchmarks/cb_points.py [--max-log2 20] [--repeats 3] [--tiny]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
from kernel import COLUMNS, make_inputs  # benchmarks/kernel.py: the seed model's inputs

from sweep.engine.evaluate import evaluate_values
from sweep.models import get_model
from sweep.models.base import CATALOG_FIELDS
from sweep.models.cb_analytic import cb_point

CB_KEYS = ("lam", "prompt_mean", "prompt_cv", "output_mean", "output_cv", "cap",
           "max_batched_tokens", "kv_capacity_tokens", "block_tokens", "t_fixed", "t_token",
           "t_ctx", "service_cv", "q")


def cb_inputs(n: int, seed: int = 0) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng(seed)
    cap = rng.integers(1, 513, n).astype(float)
    v = dict(lam=10 ** rng.uniform(-1, 2, n), prompt_mean=10 ** rng.uniform(1, 3.5, n),
             prompt_cv=rng.uniform(0, 1.5, n), output_mean=10 ** rng.uniform(1, 3, n),
             output_cv=rng.uniform(0, 1.5, n), cap=cap,
             max_batched_tokens=np.maximum(cap, rng.choice([np.inf, 512.0, 2048.0, 8192.0], n)),
             kv_capacity_tokens=rng.choice([np.inf, 2e4, 2e5], n), block_tokens=np.full(n, 16.0),
             t_fixed=rng.uniform(0.005, 0.05, n), t_token=10 ** rng.uniform(-5.5, -4, n),
             t_ctx=10 ** rng.uniform(-9, -7, n), service_cv=rng.choice([0.0, 0.2], n),
             q=np.full(n, 0.99))
    return tuple(jnp.asarray(v[k]) for k in CB_KEYS)


def windowed(n: int, seed: int = 0) -> tuple:
    """The seed's windowed model as the engine evaluates it (benchmarks/kernel.py's inputs):
    a jitted function and its arguments."""
    x = make_inputs(n, windowed=True, seed=seed)
    static = dict(windowed=True, full=False, paged=False, service_source="given", mean_follows=True,
                  block_tokens=16.0, reserve_fraction=0.0)
    fn = jax.jit(functools.partial(evaluate_values, model=get_model("dynamic", "gaussian"),
                                   static=tuple(sorted(static.items())), columns=COLUMNS))
    v = {k: jnp.asarray(a) for k, a in x.items() if k not in CATALOG_FIELDS}
    v["model"] = v["gpu"] = jnp.arange(n, dtype=jnp.int32)
    return fn, (v, {k: jnp.asarray(x[k]) for k in CATALOG_FIELDS})


def best_time(f, args, repeats: int) -> float:
    jax.block_until_ready(f(*args))  # compile
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-log2", type=int, default=16)
    ap.add_argument("--max-log2", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", "--tiny", dest="tiny", action="store_true", help="2^10 points, one repeat")
    args = ap.parse_args(argv)
    if args.tiny:
        args.min_log2 = args.max_log2 = 10
        args.repeats = 1
    cb = jax.jit(jax.vmap(cb_point))
    print(f"# analytic points/s (jax {jax.__version__}, {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPUs visible, load {os.getloadavg()[0]:.1f}); best of {args.repeats}\n")
    print("| points | continuous cb_point (pts/s) | windowed seed model (pts/s) | ratio |")
    print("|---:|---:|---:|---:|")
    rows = []
    for lg in range(args.min_log2, args.max_log2 + 1, 2):
        n = 1 << lg
        t_cb = best_time(cb, cb_inputs(n), args.repeats)
        win, win_args = windowed(n)
        t_w = best_time(win, win_args, args.repeats)
        rows.append({"points": n, "continuous_points_per_s": n / t_cb, "windowed_points_per_s": n / t_w,
                     "ratio": t_cb / t_w})
        print(f"| 2^{lg} | {n / t_cb:,.0f} | {n / t_w:,.0f} | {t_cb / t_w:.2f}x slower |")
    print("baseline: the seed model's windowed kernel (engine evaluation); ratio ours / baseline in time per point: "
          + ", ".join(f"{r['ratio']:.2f}" for r in rows))
    return {"rows": rows}


if __name__ == "__main__":
    main()
