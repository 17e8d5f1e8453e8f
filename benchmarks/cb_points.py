"""Analytic continuous-batching points per second against the seed model's windowed kernel.

All three run in the same process on the same machine, over 2^16 .. 2^20 random points:
- the continuous serving model as a grid evaluates it: the engine's `evaluate_values` with
  `serving = "continuous"` (every column: KV capacity, the analytic model, SLO verdicts,
  tokens/s, cost), jitted and vmapped;
- its core alone, `sweep.models.continuous.analytic.cb_point` vmapped (where the time goes);
- the baseline: the seed model's windowed kernel through the same `evaluate_values`.
Goal (issue 11, item 7): the continuous model within 3x of the windowed kernel. Best of
``--repeats`` after a warm-up call (compile).

    python benchmarks/cb_points.py [--max-log2 20] [--repeats 3] [--roofline] [--tiny]
    python benchmarks/cb_points.py --against 38967f0 [--repeats 9]

``--against REV``: `cb_point` as it was at git revision REV (its module file, loaded beside
today's against today's helpers) timed on the same inputs in the same process, the two calls
interleaved, so that other load on the machine hits both alike; prints the ratio of
points/s (today / REV), best and median over the repeats (issue 24's goal: >= 0.5 against
the revision before it).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import subprocess
import sys
import tempfile
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
from sweep.models.base import CATALOG_FIELDS, WHEN_ROOFLINE
from sweep.models.continuous.analytic import cb_point

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


CONTINUOUS = get_model("continuous", "analytic")
CONTINUOUS_COLUMNS = tuple(c.name for c in CONTINUOUS.columns if not c.when and c.name != "point_id")
ROOFLINE_COLUMNS = tuple(c.name for c in CONTINUOUS.columns if c.when == WHEN_ROOFLINE)


def continuous(n: int, seed: int = 0, roofline: bool = False) -> tuple:
    """The continuous model as the engine evaluates a grid chunk (given step times, paged
    KV): a jitted function and its arguments, in file units. `roofline`: step times from the
    refined roofline instead (`roofline.operating_line`; no t_* keys), half the points a dense
    8B and half a Mixtral-like mixture of experts."""
    rng = np.random.default_rng(seed)
    cap = rng.integers(1, 513, n).astype(float)
    full = np.full
    v = {
        "gpus_per_replica": rng.choice([1.0, 2.0, 4.0, 8.0], n), "arrival_rps": 10 ** rng.uniform(-1, 2, n),
        "replicas": full(n, 1.0), "prompt_tokens": 10 ** rng.uniform(1, 3.5, n), "prompt_cv": rng.uniform(0, 1.5, n),
        "output_tokens": 10 ** rng.uniform(1, 3, n), "output_cv": rng.uniform(0, 1.5, n),
        "t_fixed_ms": rng.uniform(5, 50, n), "t_token_ms": 10 ** rng.uniform(-2.5, -1, n),
        "t_ctx_ms": 10 ** rng.uniform(-6, -4, n), "eta_bw": full(n, 0.8), "eta_flops": full(n, 0.5),
        "weight_bytes_per_param": full(n, 2.0), "kv_bytes_per_elem": full(n, 2.0),
        "ttft_slo_ms": full(n, 2000.0), "tpot_slo_ms": full(n, 50.0), "slo_ms": full(n, np.inf),
        "percentile": full(n, 0.99), "rho_max": full(n, 0.85), "rho_min": full(n, 0.5),
        "queue_capacity": full(n, np.inf), "service_cv": rng.choice([0.0, 0.2], n),
        "clients": full(n, np.inf), "think_time_s": full(n, 0.0),  # an open loop
        "request_latency_ms": full(n, 0.0),
        "max_batched_tokens": np.maximum(cap, rng.choice([np.inf, 512.0, 2048.0, 8192.0], n)), "batch_size": cap,
    }
    tables = {"kv_elems_per_token": full(n, 32 * 2048.0), "n_params": full(n, 8e9), "active_params": full(n, 8e9),
              "hbm_bytes": full(n, 80e9), "hbm_bw": full(n, 3.35e12), "flops": full(n, 989e12),
              "usd_per_gpu_hour": full(n, 2.5), "dense_params": full(n, 8e9), "expert_params": full(n, 0.0),
              "n_experts": full(n, 0.0), "experts_per_token": full(n, 0.0), "n_layers": full(n, 32.0),
              "hidden": full(n, 4096.0), "attn_width": full(n, 4096.0), "fp8_flops": full(n, 1979e12),
              "link_bw": full(n, 450e9), "alpha": full(n, 10e-6), "gpu_eta_bw": full(n, 0.7),
              "gpu_eta_flops": full(n, 0.6), "gpu_t_overhead": full(n, 1e-3),
              "gpu_t_decode_overhead": full(n, 1e-3)}
    if roofline:
        for k in ("t_fixed_ms", "t_token_ms", "t_ctx_ms"):
            del v[k]
        moe = np.arange(n) % 2 == 1  # Mixtral 8x7B's figures (sweep/catalog/models/mixtral-8x7b.toml)
        for k, val in (("n_params", 46.7e9), ("active_params", 12.9e9), ("dense_params", 1.6e9),
                       ("expert_params", 45.1e9), ("n_experts", 8.0), ("experts_per_token", 2.0),
                       ("kv_elems_per_token", 32 * 2048.0)):
            tables[k] = np.where(moe, val, tables[k])
    static = dict(paged=True, service_source="roofline" if roofline else "given", block_tokens=16.0,
                  reserve_fraction=0.1)
    columns = CONTINUOUS_COLUMNS + (ROOFLINE_COLUMNS if roofline else ())
    fn = jax.jit(functools.partial(evaluate_values, model=CONTINUOUS, static=tuple(sorted(static.items())),
                                   columns=columns))
    args = {k: jnp.asarray(a) for k, a in v.items()}
    args["model"] = args["gpu"] = jnp.arange(n, dtype=jnp.int32)
    return fn, (args, {k: jnp.asarray(a) for k, a in tables.items()})


def best_time(f, args, repeats: int) -> float:
    jax.block_until_ready(f(*args))  # compile
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - t)
    return best


def baseline_cb_point(rev: str):
    """`cb_point` from `sweep/models/continuous/analytic.py` at git revision `rev`."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:sweep/models/continuous/analytic.py"],
                         check=True, capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location(f"_analytic_at_{rev}", fh.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(fh.name)
    return module.cb_point


def against(rev: str, lg_list: list[int], repeats: int) -> list[dict]:
    """Today's `cb_point` against REV's, interleaved on the same inputs (see the docstring)."""
    now, then = jax.jit(jax.vmap(cb_point)), jax.jit(jax.vmap(baseline_cb_point(rev)))
    print(f"| points | cb_point today (pts/s) | cb_point at {rev} (pts/s) | today / {rev}, best | median |")
    print("|---:|---:|---:|---:|---:|")
    rows = []
    for lg in lg_list:
        n = 1 << lg
        args = cb_inputs(n)
        jax.block_until_ready(now(*args))
        jax.block_until_ready(then(*args))
        t_now, t_then = [], []
        for _ in range(repeats):
            for f, ts in ((now, t_now), (then, t_then)):
                t = time.perf_counter()
                jax.block_until_ready(f(*args))
                ts.append(time.perf_counter() - t)
        a, b = np.array(t_now), np.array(t_then)
        rows.append({"points": n, "now_points_per_s": n / a.min(), "then_points_per_s": n / b.min(),
                     "ratio_best": b.min() / a.min(), "ratio_median": float(np.median(b / a))})
        r = rows[-1]
        print(f"| 2^{lg} | {r['now_points_per_s']:,.0f} | {r['then_points_per_s']:,.0f} | {r['ratio_best']:.3f} "
              f"| {r['ratio_median']:.3f} |")
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-log2", type=int, default=16)
    ap.add_argument("--max-log2", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--roofline", action="store_true",
                    help="step times from the refined roofline (the engine's operating line) instead of given ones")
    ap.add_argument("--smoke", "--tiny", dest="tiny", action="store_true", help="2^10 points, one repeat")
    ap.add_argument("--against", metavar="REV", help="time cb_point against its version at git revision REV")
    args = ap.parse_args(argv)
    if args.tiny:
        args.min_log2 = args.max_log2 = 10
        args.repeats = 1
    if args.against:
        return {"rows": against(args.against, list(range(args.min_log2, args.max_log2 + 1, 2)), args.repeats)}
    cb = jax.jit(jax.vmap(cb_point))
    print(f"# analytic points/s (jax {jax.__version__}, {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPUs visible, load {os.getloadavg()[0]:.1f}); best of {args.repeats}\n")
    print("| points | continuous model, engine (pts/s) | cb_point alone (pts/s) | windowed seed model, engine (pts/s) "
          "| ratio: continuous / windowed (time per point) |")
    print("|---:|---:|---:|---:|---:|")
    rows = []
    for lg in range(args.min_log2, args.max_log2 + 1, 2):
        n = 1 << lg
        cont, cont_args = continuous(n, roofline=args.roofline)
        t_model = best_time(cont, cont_args, args.repeats)
        t_cb = best_time(cb, cb_inputs(n), args.repeats)
        win, win_args = windowed(n)
        t_w = best_time(win, win_args, args.repeats)
        rows.append({"points": n, "continuous_points_per_s": n / t_model, "cb_point_points_per_s": n / t_cb,
                     "windowed_points_per_s": n / t_w, "ratio": t_model / t_w})
        print(f"| 2^{lg} | {n / t_model:,.0f} | {n / t_cb:,.0f} | {n / t_w:,.0f} | {t_model / t_w:.2f}x |")
    print("baseline: the seed model's windowed kernel (engine evaluation); goal: ratio <= 3; measured "
          + ", ".join(f"{r['ratio']:.2f}" for r in rows))
    return {"rows": rows}


if __name__ == "__main__":
    main()
