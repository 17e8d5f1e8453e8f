"""Benchmark of the JAX batcher simulator against a plain-Python event loop.

Standalone: ``.venv/bin/python benchmarks/simulate.py [--scenarios 128] [--n-requests 20000]``
(``--smoke``: 64 scenarios x 2 replications x 350 arrivals, the test suite's check).
Prints (1) compile time, (2) simulated requests/s of the vmapped JAX simulator and of a
plain-Python event loop (the same algorithm as the test reference) on the same scenarios
and the same random draws in the same run, with a spot check that they agree, and
(3) requests per replication vs the 95% half-width of p99.
"""

from __future__ import annotations

import argparse
import heapq
import math
import os
import time
from collections import deque

import _smoke
import jax
import numpy as np

from sweep.models.dynamic import batch_sim as sim
from sweep.models.dynamic.batch_sim import (
    SimSettings,
    replication_draws,
    simulate,
    simulate_requests,
)

jax.config.update("jax_enable_x64", True)


def python_event_loop(arrivals, z, *, b_max, t_max_s, t_fixed_s, t_req_s, workers,
                      queue_capacity=math.inf, service_cv=0.0):
    """Plain-Python simulation of one replication (window by window, FIFO deque, heap of
    worker free times); returns per-request latencies (+inf when dropped)."""
    a = arrivals.tolist()
    n = len(a)
    big_b, t_max, cap = round(float(b_max)), float(t_max_s), float(queue_capacity)
    s2 = math.log1p(service_cv**2)
    sig, mu = math.sqrt(s2), -s2 / 2
    zl = z.tolist()
    free = [0.0] * round(float(workers))
    waiting = deque()
    lat = [math.inf] * n
    i = 0
    d_prev = -math.inf
    while True:
        if not waiting:
            if i >= n:
                break
            if len(waiting) < cap:
                waiting.append(i)
            i += 1
            continue
        a_o = a[waiting[0]]
        f_min = free[0]
        while True:
            if len(waiting) >= big_b:
                t_full = a[waiting[big_b - 1]]
                break
            if i >= n:
                t_full = a[n - 1]
                break
            if a[i] > max(d_prev, f_min, a_o + t_max):
                t_full = math.inf
                break
            if len(waiting) < cap:
                waiting.append(i)
            i += 1
        d = max(d_prev, f_min, min(t_full, a_o + t_max))
        while i < n and a[i] <= d:
            if len(waiting) < cap:
                waiting.append(i)
            i += 1
        b = min(big_b, len(waiting))
        first = waiting[0]
        done = d + (t_fixed_s + t_req_s * b) * math.exp(mu + sig * zl[first])
        heapq.heapreplace(free, done)
        for _ in range(b):
            j = waiting.popleft()
            lat[j] = done - a[j]
        d_prev = d
    return lat


def scenario_grid(n: int, seed: int = 0, small_batches: bool = False) -> dict[str, np.ndarray]:
    """A mixed grid: loads 0.3-0.95, B 1-32 (1-4 with ``small_batches``), windows
    finite/inf, c 1-4, K finite/inf."""
    rng = np.random.default_rng(seed)
    b = rng.choice([1, 2, 4] if small_batches else [1, 2, 4, 8, 16, 32], n).astype(float)
    c = rng.integers(1, 5, n).astype(float)
    t_fixed = rng.uniform(0.005, 0.03, n)
    t_req = rng.uniform(0.0005, 0.003, n)
    rho = rng.uniform(0.3, 0.95, n)
    lam = rho * c * b / (t_fixed + t_req * b)  # rho of a full-batch server
    t_max = np.where(rng.random(n) < 0.2, np.inf, rng.uniform(0.001, 0.05, n))
    cap = np.where(rng.random(n) < 0.5, np.inf, np.maximum(b, rng.choice([32, 128, 512], n)))
    return {"lam": lam, "b_max": b, "t_max_s": t_max, "t_fixed_s": t_fixed, "t_req_s": t_req, "workers": c,
            "queue_capacity": cap, "service_cv": rng.uniform(0.0, 0.5, n)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=128)
    ap.add_argument("--n-requests", type=int, default=20_000)
    ap.add_argument("--warmup", type=int, default=2_000)
    ap.add_argument("--replications", type=int, default=8)
    ap.add_argument("--small-batches", action="store_true",
                    help="B_max in {1, 2, 4} (per-request work dominates the Python loop)")
    ap.add_argument("--python-lanes", type=int, default=32,
                    help="lanes (scenario, replication 0) the Python loop simulates")
    ap.add_argument("--repeats", type=int, default=3, help="steady-state calls (the best is reported)")
    ap.add_argument("--smoke", action="store_true", help="a tiny run (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    if args.smoke:
        vars(args).update(_smoke.SIM, scenarios=64, python_lanes=1, repeats=1)
    sim_options = _smoke.SIM_OPTIONS if args.smoke else {}
    half_width_sizes = (300,) if args.smoke else (1_000, 4_000, 16_000, 64_000)

    s = args.scenarios
    settings = SimSettings(n_requests=args.n_requests, warmup=args.warmup,
                           replications=args.replications, seed=0)
    n = settings.warmup + settings.n_requests
    params = scenario_grid(s, small_batches=args.small_batches)
    lanes = s * settings.replications
    print(f"# sweep.simulate benchmark  (jax {jax.__version__}, {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPUs visible)")
    print(f"# {s} scenarios x {settings.replications} replications x {n} arrivals "
          f"= {lanes * n / 1e6:.1f} M simulated requests per call; B_max in "
          f"{sorted(set(params['b_max'].astype(int).tolist()))}\n")

    # -- compile time and steady-state throughput ------------------------------------------
    t = time.perf_counter()
    simulate(params, settings, **sim_options)
    first = time.perf_counter() - t
    runs = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        res = simulate(params, settings, **sim_options)
        runs.append(time.perf_counter() - t)
    steady = min(runs)
    jax_rate = lanes * n / steady

    # -- Python event loop on the same scenarios and draws --------------------------------
    py_lanes = min(args.python_lanes, s)
    idx = np.linspace(0, s - 1, py_lanes).round().astype(int)
    py_time, py_req, worst = 0.0, 0, 0.0
    for i in idx:
        a, z = replication_draws(settings, int(i), 0, lam=float(params["lam"][i]))
        kw = {k: float(params[k][i]) for k in sim.PARAM_KEYS if k != "lam"}
        t = time.perf_counter()
        lat_py = np.asarray(python_event_loop(a, z, **kw))
        py_time += time.perf_counter() - t
        py_req += n
        lat_jx = simulate_requests(a, z, **kw)["latency_s"]
        fin = np.isfinite(lat_py)
        assert np.array_equal(fin, np.isfinite(lat_jx))
        worst = max(worst, float(np.max(np.abs(lat_py[fin] - lat_jx[fin]), initial=0.0)))
    py_rate = py_req / py_time

    print("| simulator                         | requests/s   | wall (s) | note")
    print("|-----------------------------------|-------------:|---------:|------")
    print(f"| JAX first call (compile + run)    |              | {first:8.2f} | "
          f"compile ~ {first - steady:.2f} s")
    print(f"| JAX vmapped, {lanes:4d} lanes          | {jax_rate:12,.0f} | {steady:8.2f} | "
          f"steady state, best of {len(runs)}")
    print(f"| Python event loop, {py_lanes:3d} lanes      | {py_rate:12,.0f} | {py_time:8.2f} | "
          f"same scenarios, same draws")
    print(f"| speed-up JAX / Python             | {jax_rate / py_rate:11.1f}x |          | "
          f"max |latency diff| = {worst:.1e} s")
    # -- where the time goes (one chunk of the steady state) -------------------------------
    import jax.numpy as jnp

    chunk = max(1, min(s, sim._DEFAULT_MAX_LANES // settings.replications))
    c_lanes = chunk * settings.replications
    pc = {k: jnp.asarray(v[:chunk]) for k, v in params.items()}
    c_max = sim._pow2(int(np.max(params["workers"])))
    kw = {"n": n, "warmup": settings.warmup, "reps": settings.replications, "max_workers": c_max,
          "use_trace": False}
    cargs = (jnp.uint32(0), jnp.arange(chunk, dtype=jnp.int32), pc, jnp.zeros(1))
    jax.block_until_ready(sim._chunk(*cargs, **kw))
    t = time.perf_counter()
    _, lat = jax.block_until_ready(sim._chunk(*cargs, **kw))
    t_dev = time.perf_counter() - t
    draws = jax.jit(jax.vmap(sim._draws, in_axes=(None, 0, 0, 0, None), out_axes=1),
                    static_argnums=4)
    lam_l = jnp.asarray(np.repeat(params["lam"][:chunk], settings.replications))
    lane_s = jnp.repeat(jnp.arange(chunk, dtype=jnp.int32), settings.replications)
    lane_r = jnp.tile(jnp.arange(settings.replications, dtype=jnp.int32), chunk)
    jax.block_until_ready(draws(jnp.uint32(0), lane_s, lane_r, lam_l, n))
    t = time.perf_counter()
    jax.block_until_ready(draws(jnp.uint32(0), lane_s, lane_r, lam_l, n))
    t_draw = time.perf_counter() - t
    t = time.perf_counter()
    np.sort(np.asarray(lat).T, axis=1)
    t_sort = time.perf_counter() - t
    per = 1e9 / (c_lanes * n)
    print(f"\n# one chunk of {c_lanes} lanes: jitted kernel {t_dev:.2f} s "
          f"({t_dev * per:.0f} ns/request; of which random draws ~{t_draw * per:.0f} ns), "
          f"host sort for quantiles {t_sort:.2f} s ({t_sort * per:.0f} ns/request, overlapped "
          f"with the next chunk)")
    print(f"# {np.sum(res['drop_rate'] > 0)} of {s} scenarios shed load; "
          f"median p99 = {np.median(res['p99_s']) * 1e3:.1f} ms\n")

    # -- requests per replication vs p99 half-width ---------------------------------------
    one = {k: v[:1] for k, v in scenario_grid(1, seed=4).items()}
    one["queue_capacity"] = np.array([np.inf])
    print(f"# p99 half-width vs requests per replication (R = {settings.replications}; "
          f"B={one['b_max'][0]:.0f}, c={one['workers'][0]:.0f}, "
          f"T_max={one['t_max_s'][0] * 1e3:.1f} ms, cv={one['service_cv'][0]:.2f}, "
          f"lam={one['lam'][0]:.0f}/s)")
    print("| requests / replication | p99 (ms) | 95% half-width (ms) | half-width / p99 |")
    print("|-----------------------:|---------:|--------------------:|-----------------:|")
    half_widths = []
    for m in half_width_sizes:
        st = SimSettings(n_requests=m, warmup=max(200, m // 10),
                         replications=settings.replications, seed=1)
        r = simulate(one, st, percentile=0.99)
        half_widths.append({"requests": m, "p99_s": float(r["p_s"][0]), "p99_hw_s": float(r["p_hw_s"][0])})
        print(f"| {m:22,d} | {r['p_s'][0] * 1e3:8.2f} | {r['p_hw_s'][0] * 1e3:19.3f} | "
              f"{r['p_hw_s'][0] / r['p_s'][0]:15.2%} |")
    return {"jax_requests_per_s": jax_rate, "python_requests_per_s": py_rate, "speedup": jax_rate / py_rate,
            "compile_s": first - steady, "max_latency_diff_s": worst, "python_lanes": py_lanes,
            "p99_s": res["p99_s"], "half_widths": half_widths}


if __name__ == "__main__":
    main()
