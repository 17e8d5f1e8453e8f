"""Throughput of sweep._gamma.gammainc_pq vs scipy and jax.scipy (float64, CPU).

Standalone script:

    .venv/bin/python benchmarks/gamma.py              # pinned to one core
    .venv/bin/python benchmarks/gamma.py --all-cores  # let XLA use every core
    .venv/bin/python benchmarks/gamma.py -n 200000 --repeats 3
    .venv/bin/python benchmarks/gamma.py --smoke      # 256 points, 1 repeat, not pinned

Workloads (n points each, default 1e6):
  uniform     a integer uniform in 1..4097, x log-uniform in [1e-3, 1e5]
  transition  a as above, x = a * (1 + N(0, 1) / sqrt(a))  (clipped at 0)

Every row computes both P and Q.  Throughput is best-of-repeats wall time
on already-compiled code; compile (first-call) time is reported separately.
jax.scipy.special is run on a subset (default 1e4 points) and scaled.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np
import scipy.special as sc

jax.config.update("jax_enable_x64", True)

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
from sweep._gamma import gammainc_pq


def _workloads(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 4098, n).astype(np.float64)
    x_uni = 10.0 ** rng.uniform(-3.0, 5.0, n)
    a2 = rng.integers(1, 4098, n).astype(np.float64)
    x_tr = np.maximum(a2 * (1.0 + rng.standard_normal(n) / np.sqrt(a2)), 0.0)
    return {"uniform": (a, x_uni), "transition": (a2, x_tr)}


def _time_jax(fn, a, x, repeats, fresh=True):
    """(best seconds, compile seconds, outputs) for a jitted fn on fresh shapes."""
    ja, jx = jax.device_put(a), jax.device_put(x)
    # So that compile time is really measured; not in a smoke run, which runs inside the test
    # process and would throw away every program compiled there.
    if fresh:
        jax.clear_caches()
    t0 = time.perf_counter()
    compiled = fn.lower(ja, jx).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(ja, jx))  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(ja, jx))
        best = min(best, time.perf_counter() - t0)
    return best, compile_s, out


def _time_numpy(fn, a, x, repeats):
    best = float("inf")
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(a, x)
        best = min(best, time.perf_counter() - t0)
    return best, out


def _scipy_pq(a, x):
    return sc.gammainc(a, x), sc.gammaincc(a, x)


@jax.jit
def _jax_scipy_pq(a, x):
    return jax.scipy.special.gammainc(a, x), jax.scipy.special.gammaincc(a, x)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=1_000_000, help="points per workload")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--jax-scipy-n", type=int, default=10_000, help="subset size for jax.scipy")
    ap.add_argument("--all-cores", action="store_true", help="do not pin the process to one core")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run on every core (the test suite's check that this script works)")
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    if args.smoke:
        # Tiny, and never pinned: in smoke mode this runs inside the test process.
        args.n, args.repeats, args.jax_scipy_n, args.all_cores = 256, 1, 256, True
    if not args.all_cores and hasattr(os, "sched_setaffinity"):
        # Pin before jax starts its thread pools (on the first computation, below; importing
        # jax and sweep does not start them): the comparison is per core.
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    n = args.n
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import scipy

    print(
        f"jax {jax.__version__} ({jax.default_backend()}, float64), scipy {scipy.__version__}, "
        f"numpy {np.__version__}; cores available to this process: {cores}"
    )
    print(f"n = {n:,} points per workload, best of {args.repeats}; every row computes P and Q\n")
    ours = jax.jit(gammainc_pq)
    rows, notes, errors = [], [], {}
    for name, (a, x) in _workloads(n).items():
        t_ours, c_ours, (p, q) = _time_jax(ours, a, x, args.repeats, fresh=not args.smoke)
        t_sp, (ps, qs) = _time_numpy(_scipy_pq, a, x, max(2, args.repeats // 2))
        m = min(args.jax_scipy_n, n)
        t_js, c_js, _ = _time_jax(_jax_scipy_pq, a[:m], x[:m], max(2, args.repeats // 2), fresh=not args.smoke)
        rows.append((name, "sweep._gamma.gammainc_pq (jit)", n / t_ours, f"{c_ours:.2f}", n))
        rows.append((name, "scipy gammainc + gammaincc", n / t_sp, "-", n))
        rows.append((name, "jax.scipy gammainc + gammaincc (jit)", m / t_js, f"{c_js:.2f}", m))
        # sanity: agreement with scipy where scipy is itself accurate
        p, q = np.asarray(p), np.asarray(q)
        trust = ((a <= 100) | (np.abs(x - a) <= 0.3 * a)) & (ps > 1e-280) & (qs > 1e-280)
        err = max(
            np.max(np.abs(p - ps)[trust] / ps[trust]), np.max(np.abs(q - qs)[trust] / qs[trust])
        )
        errors[name] = float(err)
        notes.append(f"{name}: max rel diff of P, Q vs scipy where scipy is accurate: {err:.1e}")

    base = {name: rate for name, impl, rate, _, _ in rows if impl.startswith("scipy")}
    hdr = (
        f"{'workload':<11} {'implementation':<37} {'M evals/s':>10} {'vs scipy':>9} "
        f"{'compile s':>10} {'timed pts':>10}"
    )
    print(hdr)
    print("-" * len(hdr))
    for name, impl, rate, comp, pts in rows:
        print(
            f"{name:<11} {impl:<37} {rate / 1e6:10.3f} {rate / base[name]:8.2f}x "
            f"{comp:>10} {pts:>10,}"
        )
    print()
    for line in notes:
        print(line)
    print("(jax.scipy rates are measured on the first timed-pts points and scaled per point)")
    return {
        "rows": [{"workload": name, "implementation": impl, "evals_per_s": rate, "vs_scipy": rate / base[name],
                  "compile_s": comp, "timed_points": pts} for name, impl, rate, comp, pts in rows],
        "max_rel_diff": errors,
    }


if __name__ == "__main__":
    main()
