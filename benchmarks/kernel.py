"""Kernel throughput: the jitted, vmapped JAX kernel against plain NumPy/SciPy.

Both sides evaluate the same formulas (SPEC 2-4: batch moments, P-K queue, Takacs
variance, gaussian and exponential percentiles) on the same inputs, in the same run, for
the full-batch and the windowed regime. The NumPy side uses `scipy.special.gammainc` /
`gammaincc` for its Poisson tails. Prints points/s, the ratio, compile time, and the
largest relative difference between the two answers (they must agree).

    python benchmarks/kernel.py [--points 1048576] [--repeats 5]

Figures land in benchmarks/results/kernel.json. Machines here are shared and noisy: the
best of several repeats is reported, and nothing in the test suite depends on speed.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

jax.config.update("jax_enable_x64", True)

from sweep import kernels  # noqa: E402

FIELDS = kernels.Point._fields


def make_inputs(n: int, windowed: bool, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lam = 10 ** rng.uniform(0, 3, n)
    b = rng.integers(1, 4097 if windowed else 1025, n).astype(float)
    t_max = 10 ** rng.uniform(-3, 0, n) if windowed else np.full(n, np.inf)
    return {
        "lam": lam, "b_max": b, "t_max": t_max,
        "t_fixed": rng.uniform(0.001, 0.1, n), "t_req": 10 ** rng.uniform(-6, -3, n),
        "service_cv": np.zeros(n), "q": np.full(n, 0.99), "slo": np.full(n, 0.2),
        "rho_target": np.full(n, 0.75), "rho_max": np.full(n, 0.85), "rho_min": np.full(n, 0.5),
        "kv_bytes_per_token": np.full(n, 131072.0), "seq_len": np.full(n, 4096.0),
        "mean_seq_len": np.full(n, 2048.0), "block_tokens": np.full(n, 16.0),
        "weights_bytes": np.full(n, 16e9), "usable_hbm_bytes": np.full(n, 80e9),
    }


# --------------------------------------------------------------------------- NumPy baseline


def numpy_kernel(x: dict[str, np.ndarray], windowed: bool) -> dict[str, np.ndarray]:
    """The same formulas as `sweep.kernels`, written plainly with NumPy and SciPy."""
    lam, b, t, tf, tr, q = x["lam"], x["b_max"], x["t_max"], x["t_fixed"], x["t_req"], x["q"]
    with np.errstate(all="ignore"):
        if windowed:
            k = b - 1
            mu = lam * t

            def pmf(n):
                return np.where(n < 0, 0.0, np.exp(special.xlogy(np.maximum(n, 0), mu) - mu - special.gammaln(np.maximum(n, 0) + 1)))

            up_top = special.gammainc(k + 2, mu)  # P(N >= k+2)
            lo_top = special.gammaincc(k + 2, mu)  # P(N <= k+1)
            up = {2: up_top}
            lo = {1: lo_top}
            for j in (1, 0, -1, -2, -3):
                up[j] = up[j + 1] + pmf(k + j)
            for j in (0, -1, -2, -3, -4):
                lo[j] = np.maximum(lo[j + 1] - pmf(k + j + 1), 0.0)
            for j in up:
                up[j] = np.where(k + j <= 0, 1.0, np.minimum(up[j], 1.0))
            for j in lo:
                lo[j] = np.where(k + j < 0, 0.0, np.minimum(lo[j], 1.0))
            s0, s1, s2, s3 = lo[-1], mu * lo[-2], mu**2 * lo[-3], mu**3 * lo[-4]
            eb = s1 + s0 + b * up[0]
            eb2 = s2 + 3 * s1 + s0 + b * b * up[0]
            eb3 = s3 + 6 * s2 + 7 * s1 + s0 + b**3 * up[0]
            etb = (b * k / (2 * lam) * up[1] + 0.5 * t * (s1 + 2 * s0)) / eb
            etb2 = ((k + 2) * k * (k + 1) / (3 * lam**2) * up[2] + t * t * (s0 + s1 / 3)) / eb
            var_tb = np.maximum(etb2 - etb**2, 0.0)
        else:
            eb, eb2, eb3 = b, b * b, b**3
            etb = (b - 1) / (2 * lam)
            var_tb = (b - 1) * (b + 7) / (12 * lam**2)
        lam_b = lam / eb
        es = tf + tr * eb
        es2 = tf**2 + 2 * tf * tr * eb + tr**2 * eb2
        es3 = tf**3 + 3 * tf**2 * tr * eb + 3 * tf * tr**2 * eb2 + tr**3 * eb3
        rho = lam_b * es
        ok = rho < 1
        ew = np.where(ok, lam_b * es2 / (2 * (1 - rho)), np.inf)
        var_w = np.where(ok, ew**2 + lam_b * es3 / (3 * (1 - rho)), np.inf)
        mean_b_r = eb2 / eb
        e_svc = tf + tr * mean_b_r
        var_svc = tr**2 * np.maximum(eb3 / eb - mean_b_r**2, 0.0) if windowed else 0.0
        et = np.where(ok, ew + etb + e_svc, np.inf)
        sd = np.where(ok, np.sqrt(np.where(ok, var_w, 0) + var_tb + var_svc), np.inf)
        z = special.ndtri(q)
        p_gauss = np.where(ok, et + z * sd, np.inf)
        p_exp = -np.log1p(-q) * et
        t_cap = tf + tr * b
        stable = lam * t_cap < b
        little = lam * et
        in_service = lam * e_svc

        def b_min(r):
            feasible = r > lam * tr
            return np.where(feasible, lam * tf / np.where(feasible, r - lam * tr, 1.0), np.inf)

        def adjust(raw, ok_fn, first):
            finite = np.isfinite(raw)
            c = np.maximum(first(np.where(finite, raw, 1.0)), 1.0)
            c = np.where((c > 1) & ok_fn(c - 1), c - 1, c)
            c = np.where(ok_fn(c), c, c + 1)
            return np.where(finite, c, np.inf)

        raw_s, raw_t = b_min(1.0), b_min(x["rho_target"])
        int_s = adjust(raw_s, lambda c: lam * (tf + tr * c) < c, lambda v: np.floor(v) + 1)
        int_t = adjust(raw_t, lambda c: lam * (tf + tr * c) <= x["rho_target"] * c, np.ceil)
        s_alloc = x["seq_len"]
        per_req = x["kv_bytes_per_token"] * s_alloc
        free = x["usable_hbm_bytes"] - x["weights_bytes"]
        fit = free >= 0
        b_mem = np.where(fit, np.floor(np.where(fit, free, 0.0) / per_req), 0.0)
        mem_ok = fit & (b <= b_mem)
        action = np.full(b.shape, 5, dtype=np.int32)
        action = np.where(rho < x["rho_min"], 4, action)
        action = np.where(rho > x["rho_max"], 3, action)
        action = np.where(~(p_gauss <= x["slo"]), 2, action)
        action = np.where(~stable, 1, action)
        action = np.where(~mem_ok, 0, action)
        return {"t_svc": t_cap, "capacity": b / t_cap, "rho": rho, "proxy_ok": ok, "stable": stable,
                "mean_batch": eb, "e_wait": ew, "e_batch": etb, "e_svc": e_svc, "e_resp": et, "sd_resp": sd,
                "p_gauss": p_gauss, "p_exp": p_exp, "latency": p_gauss, "slo_ok": p_gauss <= x["slo"],
                "little_l": little, "in_service": in_service, "in_queue": little - in_service,
                "b_min_stable": raw_s, "b_min_stable_int": int_s, "b_min_rho_target": raw_t,
                "b_min_rho_target_int": int_t, "kv_bytes_per_req": per_req,
                "kv_waste_frac": 1 - x["mean_seq_len"] / s_alloc, "free_bytes": free, "weights_fit": fit,
                "b_mem_max": b_mem, "mem_ok": mem_ok, "action": action}


# --------------------------------------------------------------------------- timing


def best_of(fn, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench(n: int, windowed: bool, repeats: int) -> dict[str, float]:
    x = make_inputs(n, windowed)
    kernel = functools.partial(kernels.evaluate_point, windowed=windowed, full=not windowed, paged=False, latency_model="gaussian")
    fn = jax.jit(jax.vmap(kernel))
    point = kernels.Point(**{k: jnp.asarray(x[k]) for k in FIELDS})
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(point))
    compile_s = time.perf_counter() - t0
    jax_s = best_of(lambda: jax.block_until_ready(fn(point)), repeats)
    ref = numpy_kernel(x, windowed)
    np_s = best_of(lambda: numpy_kernel(x, windowed), repeats)
    assert set(ref) == set(out), set(ref) ^ set(out)  # the same outputs on both sides
    worst = 0.0
    for key, want in ref.items():
        got = np.asarray(out[key], dtype=float)
        want = np.asarray(want, dtype=float)
        with np.errstate(invalid="ignore"):
            same = (got == want) | (np.isinf(got) & np.isinf(want) & (np.sign(got) == np.sign(want)))
            rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
        worst = max(worst, float(np.max(np.where(same, 0.0, rel))))
    return {"points": n, "jax_points_per_s": n / jax_s, "numpy_points_per_s": n / np_s,
            "speedup": np_s / jax_s, "compile_s": compile_s, "max_rel_diff": worst}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1 << 20)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = {}
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs, {args.points:,} points, best of {args.repeats}")
    print(f"{'regime':<10} {'JAX points/s':>14} {'NumPy points/s':>15} {'JAX/NumPy':>10} {'compile s':>10} {'max rel diff':>13}")
    for regime, windowed in (("full", False), ("windowed", True)):
        r = bench(args.points, windowed, args.repeats)
        rows[regime] = r
        print(f"{regime:<10} {r['jax_points_per_s']:>14,.0f} {r['numpy_points_per_s']:>15,.0f} {r['speedup']:>9.1f}x {r['compile_s']:>10.2f} {r['max_rel_diff']:>13.1e}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "kernel.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
