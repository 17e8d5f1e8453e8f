"""Kernel throughput: the jitted, vmapped JAX model against plain NumPy/SciPy.

Both sides evaluate every column the seed's model computes (SPEC 1-6: batch moments, P-K
queue, Takacs variance, gaussian and exponential percentiles, B_min, Little's law, memory,
the verdicts) on the same inputs, in the same run, for the full-batch and the windowed
regime. The JAX side is the engine's own `evaluate_values` (the per-point model vmapped,
plus the verdicts); the NumPy side uses `scipy.special.gammainc` / `gammaincc` for its
Poisson tails. Prints points/s, the ratio, compile time, and the largest relative
difference between the two answers (they must agree on every declared column).

    python benchmarks/kernel.py [--points 1048576] [--repeats 5] [--smoke]

A second table prices the SPEC 13 roofline (the default when a grid gives no service
times): the whole dynamic model per point with its service line from SPEC 13
(`roofline.service_line`: two step times, max(memory, compute), collectives, experts
touched) against the same model fed by the seed's linear roofline (`service.roofline_times`,
the estimate before SPEC 13), half the points a dense 70B and half a Mixtral-like MoE,
tensor parallel 1-8. Goal: at most 1.5x.

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

from sweep.engine.evaluate import evaluate_values
from sweep.models import get_model
from sweep.models.base import CATALOG_FIELDS

MODEL = get_model("dynamic", "gaussian")
#: The model's computed columns (echoes of grid keys and the id are not computed).
COLUMNS = tuple(c.name for c in MODEL.columns if not c.when and c.name != "point_id")
COMPUTED = tuple(n for n in COLUMNS if n not in MODEL.echo)


def make_inputs(n: int, windowed: bool, seed: int = 0) -> dict[str, np.ndarray]:
    """Random points in file units (the grid's keys) plus catalog figures (a 70B-class
    model on one 80 GB GPU)."""
    rng = np.random.default_rng(seed)
    full = np.full
    return {
        "arrival_rps": 10 ** rng.uniform(0, 3, n), "replicas": full(n, 1.0),
        "batch_size": rng.integers(1, 4097 if windowed else 1025, n).astype(float),
        "batch_window_ms": 10 ** rng.uniform(0, 3, n) if windowed else full(n, np.inf),
        "t_fixed_ms": rng.uniform(1.0, 100.0, n), "t_req_ms": 10 ** rng.uniform(-3, 0, n),
        "service_cv": np.zeros(n), "percentile": full(n, 0.99), "slo_ms": full(n, 200.0),
        "rho_target": full(n, 0.75), "rho_max": full(n, 0.85), "rho_min": full(n, 0.5),
        "seq_len": full(n, 4096.0), "mean_seq_len": full(n, 2048.0), "gpus_per_replica": full(n, 1.0),
        "kv_bytes_per_elem": full(n, 2.0), "weight_bytes_per_param": full(n, 2.0), "workers": full(n, 1.0),
        "queue_capacity": full(n, np.inf),
        "kv_elems_per_token": full(n, 65536.0), "n_params": full(n, 8e9), "active_params": full(n, 8e9),
        "hbm_bytes": full(n, 80e9), "hbm_bw": full(n, 3.35e12), "flops": full(n, 989e12),
        "usd_per_gpu_hour": full(n, 2.5), "dense_params": full(n, 8e9), "expert_params": full(n, 0.0),
        "n_experts": full(n, 0.0), "experts_per_token": full(n, 0.0), "n_layers": full(n, 32.0),
        "hidden": full(n, 4096.0), "attn_width": full(n, 4096.0), "fp8_flops": full(n, 1979e12),
        "link_bw": full(n, 450e9), "alpha": full(n, 10e-6), "gpu_eta_bw": full(n, 0.7), "gpu_eta_flops": full(n, 0.6),
        "gpu_t_overhead": full(n, 1e-3),
        "gpu_t_decode_overhead": full(n, 1e-3),
    }


# --------------------------------------------------------------------------- NumPy baseline


def numpy_kernel(x: dict[str, np.ndarray], windowed: bool) -> dict[str, np.ndarray]:
    """The same formulas as the dynamic model (`sweep.models.dynamic.model`), written plainly with
    NumPy and SciPy; file units out."""
    lam = x["arrival_rps"] / x["replicas"]
    b, t, q = x["batch_size"], x["batch_window_ms"] * 1e-3, x["percentile"]
    tf, tr = x["t_fixed_ms"] * 1e-3, x["t_req_ms"] * 1e-3
    with np.errstate(all="ignore"):
        if windowed:
            k = b - 1
            mu = lam * t

            def pmf(n):
                return np.where(n < 0, 0.0, np.exp(special.xlogy(np.maximum(n, 0), mu) - mu
                                                   - special.gammaln(np.maximum(n, 0) + 1)))

            up_top = special.gammainc(k + 2, mu)  # P(N >= k+2)
            lo_top = special.gammaincc(k + 2, mu)  # P(N <= k+1)
            up = {2: up_top}
            lo = {1: lo_top}
            for j in (1, 0, -1, -2, -3):
                up[j] = up[j + 1] + pmf(k + j)
            for j in (0, -1, -2, -3, -4):
                lo[j] = np.maximum(lo[j + 1] - pmf(k + j + 1), 0.0)
            up = {j: np.where(k + j <= 0, 1.0, np.minimum(v, 1.0)) for j, v in up.items()}
            lo = {j: np.where(k + j < 0, 0.0, np.minimum(v, 1.0)) for j, v in lo.items()}
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
        kv_tok = x["kv_elems_per_token"] * x["kv_bytes_per_elem"]
        weights = x["n_params"] * x["weight_bytes_per_param"]
        per_req = kv_tok * s_alloc
        free = x["gpus_per_replica"] * x["hbm_bytes"] * 1.0 - weights
        fit = free >= 0
        b_mem = np.where(fit, np.floor(np.where(fit, free, 0.0) / per_req), 0.0)
        mem_ok = fit & (b <= b_mem)
        latency_ms = p_gauss * 1e3
        slo_ok = latency_ms <= x["slo_ms"]
        action = np.full(b.shape, 5, dtype=np.int32)
        action = np.where(rho < x["rho_min"], 4, action)
        action = np.where(rho > x["rho_max"], 3, action)
        action = np.where(~slo_ok, 2, action)
        action = np.where(~stable, 1, action)
        action = np.where(~mem_ok, 0, action)
        ms = 1e3
        return {"mean_seq_len": x["seq_len"], "lambda_per_replica_rps": lam, "t_fixed_ms": tf * ms,
                "t_req_ms": tr * ms, "service_source": np.zeros(b.shape, dtype=np.int32),
                "t_svc_ms": t_cap * ms, "capacity_rps": b / t_cap, "fleet_capacity_rps": b / t_cap * x["replicas"],
                "rho": rho, "proxy_ok": ok, "stable": stable, "mean_batch": eb, "e_wait_ms": ew * ms,
                "e_batch_ms": etb * ms, "e_svc_ms": e_svc * ms, "e_resp_ms": et * ms, "sd_resp_ms": sd * ms,
                "p_gauss_ms": p_gauss * ms, "p_exp_ms": p_exp * ms, "latency_ms": latency_ms, "slo_ok": slo_ok,
                "little_l": little, "in_service": in_service, "in_queue": little - in_service,
                "b_min_stable": raw_s, "b_min_stable_int": int_s, "b_min_rho_target": raw_t,
                "b_min_rho_target_int": int_t, "kv_gb_per_req": per_req * 1e-9, "kv_gb_at_cap": per_req * b * 1e-9,
                "kv_waste_frac": 1 - x["seq_len"] / s_alloc, "weights_gb": weights * 1e-9, "free_gb": free * 1e-9,
                "weights_fit": fit, "b_mem_max": b_mem, "mem_ok": mem_ok,
                "feasible": stable & mem_ok & np.isfinite(latency_ms), "action": action,
                "cost_usd_per_hour": x["replicas"] * x["gpus_per_replica"] * x["usd_per_gpu_hour"]}


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
    static = {"windowed": windowed, "full": not windowed, "paged": False, "service_source": "given",
              "mean_follows": True, "block_tokens": 16.0, "reserve_fraction": 0.0}
    fn = jax.jit(functools.partial(evaluate_values, model=MODEL, static=tuple(sorted(static.items())), columns=COLUMNS))
    v = {k: jnp.asarray(a) for k, a in x.items() if k not in CATALOG_FIELDS}
    v["model"] = v["gpu"] = jnp.arange(n, dtype=jnp.int32)
    tables = {k: jnp.asarray(x[k]) for k in CATALOG_FIELDS}
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(v, tables))
    compile_s = time.perf_counter() - t0
    jax_s = best_of(lambda: jax.block_until_ready(fn(v, tables)), repeats)
    ref = numpy_kernel(x, windowed)
    np_s = best_of(lambda: numpy_kernel(x, windowed), repeats)
    # Both sides produce every computed column the model declares, no more, no less.
    missing = set(COMPUTED) ^ set(ref)
    assert not missing, f"the NumPy twin and the model's declared columns differ: {sorted(missing)}"
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


def bench_roofline(n: int, repeats: int) -> dict[str, float]:
    """Points/s of the dynamic model with SPEC 13 service times against the seed's linear
    roofline feeding the same model (module doc)."""
    from sweep.models.shared.service import roofline_times

    rng = np.random.default_rng(1)
    x = make_inputs(n, windowed=True)
    moe = rng.random(n) < 0.5
    x.update({
        "gpus_per_replica": 2.0 ** rng.integers(0, 4, n), "tokens_per_request": np.ones(n),
        "eta_bw": np.full(n, 0.7), "eta_flops": np.full(n, 0.6),
        "n_params": np.where(moe, 46.7e9, 70.6e9), "active_params": np.where(moe, 12.9e9, 70.6e9),
        "dense_params": np.where(moe, 1.6e9, 70.6e9), "expert_params": np.where(moe, 45.1e9, 0.0),
        "n_experts": np.where(moe, 8.0, 0.0), "experts_per_token": np.where(moe, 2.0, 0.0),
        "n_layers": np.where(moe, 32.0, 80.0), "hidden": np.where(moe, 4096.0, 8192.0),
        "attn_width": np.where(moe, 4096.0, 8192.0), "kv_elems_per_token": np.where(moe, 65536.0, 163840.0),
    })
    cols = tuple(c.name for c in MODEL.columns if c.name != "point_id" and (not c.when or c.when == "roofline"))
    base = {"windowed": True, "full": True, "paged": False, "mean_follows": True, "block_tokens": 16.0,
            "reserve_fraction": 0.0}
    v = {k: jnp.asarray(a) for k, a in x.items() if k not in CATALOG_FIELDS}
    v["model"] = v["gpu"] = jnp.arange(n, dtype=jnp.int32)
    tables = {k: jnp.asarray(x[k]) for k in CATALOG_FIELDS}
    spec13 = jax.jit(functools.partial(evaluate_values, model=MODEL, columns=cols,
                                       static=tuple(sorted({**base, "service_source": "roofline"}.items()))))
    given = functools.partial(evaluate_values, model=MODEL, columns=COLUMNS,
                              static=tuple(sorted({**base, "service_source": "given"}.items())))

    @jax.jit
    def linear(v, tables):
        t_fixed, t_req = roofline_times(
            tables["n_params"] * v["weight_bytes_per_param"], tables["active_params"],
            tables["kv_elems_per_token"] * v["kv_bytes_per_elem"], v["mean_seq_len"], v["tokens_per_request"],
            v["gpus_per_replica"], tables["hbm_bw"], tables["flops"], v["eta_bw"], v["eta_flops"])
        return given({**v, "t_fixed_ms": t_fixed * 1e3, "t_req_ms": t_req * 1e3}, tables)

    jax.block_until_ready(spec13(v, tables))
    jax.block_until_ready(linear(v, tables))
    # interleaved repeats: both sides see the same machine load
    t13 = tlin = math.inf
    for _ in range(repeats):
        t13 = min(t13, best_of(lambda: jax.block_until_ready(spec13(v, tables)), 1))
        tlin = min(tlin, best_of(lambda: jax.block_until_ready(linear(v, tables)), 1))
    return {"points": n, "spec13_points_per_s": n / t13, "linear_points_per_s": n / tlin, "cost_ratio": t13 / tlin}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1 << 20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a tiny run (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.points, args.repeats = 256, 1
    rows = {}
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs, "
          f"{args.points:,} points, best of {args.repeats}")
    print(f"{'regime':<10} {'JAX points/s':>14} {'NumPy points/s':>15} {'JAX/NumPy':>10} "
          f"{'compile s':>10} {'max rel diff':>13}")
    for regime, windowed in (("full", False), ("windowed", True)):
        r = bench(args.points, windowed, args.repeats)
        rows[regime] = r
        print(f"{regime:<10} {r['jax_points_per_s']:>14,.0f} {r['numpy_points_per_s']:>15,.0f} {r['speedup']:>9.1f}x "
              f"{r['compile_s']:>10.2f} {r['max_rel_diff']:>13.1e}")
    r = bench_roofline(args.points, args.repeats)
    rows["roofline"] = r
    print(f"\nroofline service times, dynamic model, {args.points:,} points (half dense 70B, half MoE, TP 1-8)")
    print(f"{'SPEC 13 points/s':>17} {'linear points/s':>16} {'cost SPEC 13/linear':>20}")
    print(f"{r['spec13_points_per_s']:>17,.0f} {r['linear_points_per_s']:>16,.0f} {r['cost_ratio']:>19.2f}x")
    if not args.smoke:
        out = Path(__file__).parent / "results"
        out.mkdir(exist_ok=True)
        (out / "kernel.json").write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
