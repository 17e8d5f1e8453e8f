"""Benchmark of the JAX continuous-batching simulator against the plain-Python reference
and the same scheduler as a compiled event loop.

Standalone: ``python benchmarks/cb_sim.py [--scenarios 64] [--n-requests 2000] [--tiny]``.
All sides simulate the same scenarios on the same draws (arrivals, lengths, step noise)
in the same run; the table gives simulated engine steps per second, the ratios, and the
largest per-request difference of a spot check (they must agree to float rounding). The
compiled event loop (:mod:`sweep.models.continuous.loop`, Numba, one thread like the JAX
kernel) runs every replication the JAX simulator runs, step by step.
Machines here are shared and noisy: both sides are timed ``--repeats`` times, interleaved,
and the medians are reported (compilation, the JAX side's first call, is reported apart).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np

from sweep.models.continuous import loop as compiled
from sweep.models.continuous import sim as cb_sim
from sweep.testing import cb_reference as ref


def scenario_grid(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A mixed grid of engines and loads: caps 8-64, budgets 512 / 2048 / inf, KV from
    tight to ample, prompts ~ 400 and outputs ~ 120 tokens (CV 0.5-1), loads 0.2-0.8 of
    a decode-bound capacity estimate, service noise on half."""
    rng = np.random.default_rng(seed)
    cap = rng.choice([8.0, 16.0, 32.0, 64.0], n)
    budget = rng.choice([512.0, 2048.0, np.inf], n)
    pm, om = rng.uniform(200, 600, n), rng.uniform(60, 200, n)
    tf, tt, tc = rng.uniform(0.01, 0.03, n), rng.uniform(2e-5, 1e-4, n), rng.uniform(0, 2e-7, n)
    t_full = tf + tt * cap + tc * cap * (pm + om / 2)
    lam_cap = cap / (t_full * om + (tt * pm) * cap)  # crude: cap sequences, prefill interleaved
    kv = np.where(rng.random(n) < 0.3, cap * (pm + om) * 0.8, np.inf)
    return dict(
        lam=rng.uniform(0.2, 0.8, n) * lam_cap, prompt_mean=pm, prompt_cv=rng.uniform(0.5, 1.0, n),
        output_mean=om, output_cv=rng.uniform(0.5, 1.0, n), cap=cap,
        max_batched_tokens=np.maximum(budget, cap), kv_capacity_tokens=kv,
        block_tokens=np.full(n, 16.0), queue_capacity=np.where(rng.random(n) < 0.3, 256.0, np.inf),
        t_fixed=tf, t_token=tt, t_ctx=tc, service_cv=np.where(rng.random(n) < 0.5, 0.2, 0.0))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=64)
    ap.add_argument("--n-requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--replications", type=int, default=4)
    ap.add_argument("--python-lanes", type=int, default=8)
    ap.add_argument("--max-lanes", type=int, default=512, help="replications per chunk")
    ap.add_argument("--lanes", type=int, default=cb_sim._DEFAULT_LANES, help="lanes running them")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", "--tiny", dest="tiny", action="store_true", help="a few seconds: smoke test")
    args = ap.parse_args(argv)
    if args.tiny:
        args.scenarios, args.n_requests, args.warmup, args.replications = 4, 200, 20, 2
        args.python_lanes, args.repeats = 2, 1
    s = args.scenarios
    st = cb_sim.CBSimSettings(n_requests=args.n_requests, warmup=args.warmup,
                              replications=args.replications, seed=0)
    p = scenario_grid(s)
    lanes = s * st.replications
    print(f"# sweep.models.continuous.sim benchmark (jax {jax.__version__}, {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPUs visible, load {os.getloadavg()[0]:.1f})")
    print(f"# {s} scenarios x {st.replications} replications x "
          f"{st.warmup + st.n_requests} arrivals; {args.lanes} lanes, <= {args.max_lanes} "
          "replications per chunk\n")
    t = time.perf_counter()
    res = cb_sim.simulate_continuous(p, st, max_lanes=args.max_lanes, lanes=args.lanes)
    first = time.perf_counter() - t
    # the plain-Python reference on lanes (scenario i, replication 0), same draws
    idx = np.linspace(0, s - 1, min(args.python_lanes, s)).round().astype(int)
    lanes_in = []
    for i in idx:
        kw = {k: float(p[k][i]) for k in ("lam", "prompt_mean", "prompt_cv", "output_mean",
                                          "output_cv")}
        a, pp, oo = cb_sim.replication_draws(st, int(i), 0, **kw)
        eng = dict(cap=p["cap"][i], max_batched_tokens=p["max_batched_tokens"][i],
                   block_tokens=p["block_tokens"][i], queue_capacity=p["queue_capacity"][i],
                   t_fixed=p["t_fixed"][i], t_token=p["t_token"][i], t_ctx=p["t_ctx"][i],
                   service_cv=p["service_cv"][i])
        # steps <= sum(O) + sum(P) / M (a step emits a token or fills the budget)
        n_steps = int(oo.sum() + pp.sum() / p["max_batched_tokens"][i]) + 10
        z = cb_sim.step_normals(st, int(i), 0, n_steps)
        lanes_in.append((i, a, pp, oo, eng, z))

    # every replication the JAX simulator runs, for the compiled loop (draws outside the timing)
    all_lanes = []
    for i in range(s):
        kw = {k: float(p[k][i]) for k in ("lam", "prompt_mean", "prompt_cv", "output_mean", "output_cv")}
        for r in range(st.replications):
            a, pp, oo = cb_sim.replication_draws(st, i, r, **kw)
            n_steps = int(oo.sum() + pp.sum() / p["max_batched_tokens"][i]) + 10
            z = (cb_sim.step_normals(st, i, r, n_steps) if p["service_cv"][i] > 0 else None)
            all_lanes.append((i, a, pp, oo, z))
    eng_keys = ("cap", "max_batched_tokens", "block_tokens", "queue_capacity", "t_fixed", "t_token",
                "t_ctx", "service_cv")

    def compiled_pass():
        t = time.perf_counter()
        out = [compiled.simulate(a, pp, oo, kv_capacity=p["kv_capacity_tokens"][i], z=z,
                                 **{k: p[k][i] for k in eng_keys})
               for i, a, pp, oo, z in all_lanes]
        return out, time.perf_counter() - t

    t = time.perf_counter()
    compiled_pass()  # compiles (Numba), then runs once
    c_first = time.perf_counter() - t

    def python_pass():
        t = time.perf_counter()
        out = [ref.simulate(a, pp.astype(int).tolist(), oo.astype(int).tolist(),
                            kv_capacity=p["kv_capacity_tokens"][i], z=z, **eng)
               for i, a, pp, oo, eng, z in lanes_in]
        return out, time.perf_counter() - t

    runs, py_runs, c_runs = [], [], []
    for _ in range(args.repeats):  # interleaved: every side sees the same machine load
        t = time.perf_counter()
        res = cb_sim.simulate_continuous(p, st, max_lanes=args.max_lanes, lanes=args.lanes)
        runs.append(time.perf_counter() - t)
        refs, dt = python_pass()
        py_runs.append(dt)
        c_out, dt = compiled_pass()
        c_runs.append(dt)
    wall, py_time, c_time = float(np.median(runs)), float(np.median(py_runs)), float(np.median(c_runs))
    jax_steps = float(np.sum(res["steps"]) * st.replications)
    jax_rate = jax_steps / wall
    py_steps, worst = 0, 0.0
    for (i, a, pp, oo, eng, z), r in zip(lanes_in, refs):
        py_steps += len(r.step_start)
        o = cb_sim.simulate_requests(a, pp, oo, kv_capacity_tokens=p["kv_capacity_tokens"][i],
                                     z=z, **eng)
        assert o["n_steps"] == len(r.step_start), "step counts differ"
        ok = np.array(r.status) == 0
        assert np.array_equal(np.array(r.status), o["status"]), "admission outcomes differ"
        fin = np.array(r.finish_s)[ok]
        worst = max(worst, float(np.max(np.abs(fin - o["finish_s"][ok]) / fin, initial=0.0)))
    py_rate = py_steps / py_time
    c_steps = sum(o["n_steps"] for o in c_out)
    c_rate = c_steps / c_time
    # both count every engine step of the same replications (the JAX side: its mean per scenario)
    assert abs(c_steps - jax_steps) <= 1e-9 * jax_steps, f"step counts differ: {c_steps} vs {jax_steps}"
    checked = idx.tolist()
    for lane, o in zip(all_lanes[::st.replications], c_out[::st.replications]):
        if lane[0] in checked:  # the spot-checked lanes (replication 0): compiled == reference
            r = refs[checked.index(lane[0])]
            assert o["n_steps"] == len(r.step_start), "compiled loop: step counts differ"
            ok = np.array(r.status) == 0
            fin = np.array(r.finish_s)[ok]
            worst = max(worst, float(np.max(np.abs(fin - o["finish_s"][ok]) / fin, initial=0.0)))
    print("| simulator                          | steps/s      | wall (s) | note")
    print("|------------------------------------|-------------:|---------:|------")
    print(f"| JAX first call (compile + run)     |              | {first:8.2f} | "
          f"compile ~ {first - wall:.1f} s")
    print(f"| JAX, {lanes:4d} replications          | {jax_rate:12,.0f} | {wall:8.2f} | "
          f"{jax_steps:,.0f} steps, median of {len(runs)} ({min(runs):.2f}-{max(runs):.2f} s)")
    print(f"| Python reference, {len(idx):3d} lanes        | {py_rate:12,.0f} | {py_time:8.2f} | "
          f"{py_steps:,} steps, same draws, median of {len(py_runs)}")
    print(f"| compiled loop, {len(all_lanes):4d} replications | {c_rate:12,.0f} | {c_time:8.2f} | "
          f"{c_steps:,} steps, one thread, median of {len(c_runs)}; first call {c_first:.1f} s")
    paired = sorted(jax_steps / py_steps * pr / jr for jr, pr in zip(runs, py_runs))
    paired_c = sorted(jax_steps / c_steps * cr / jr for jr, cr in zip(runs, c_runs))
    print(f"| speed-up JAX / Python              | {jax_rate / py_rate:11.1f}x |          | "
          f"per repeat {paired[0]:.1f}-{paired[-1]:.1f}x; max rel. finish-time diff {worst:.1e}")
    print(f"| speed-up JAX / compiled loop       | {jax_rate / c_rate:11.2f}x |          | "
          f"per repeat {paired_c[0]:.2f}-{paired_c[-1]:.2f}x")
    print(f"\n# mean running over the grid {np.mean(res['mean_running']):.1f}, "
          f"{int(np.sum(~res['stable']))} of {s} scenarios not steady, "
          f"median TTFT {np.median(res['ttft_mean_s']) * 1e3:.1f} ms")
    print(f"baseline: the plain-Python reference (sweep.testing.cb_reference), same draws; ratio ours / baseline "
          f"{jax_rate / py_rate:.2f} (steps/s)")
    print(f"baseline: the compiled event loop (sweep.models.continuous.loop), same draws; ratio ours / baseline "
          f"{jax_rate / c_rate:.2f} (steps/s)")
    return {"jax_steps_per_s": jax_rate, "python_steps_per_s": py_rate, "speedup": jax_rate / py_rate,
            "compiled_steps_per_s": c_rate, "speedup_vs_compiled": jax_rate / c_rate,
            "max_finish_rel_diff": worst, "scenarios": s, "compile_s": first - wall,
            "jax_wall_s": runs, "python_wall_s": py_runs}


if __name__ == "__main__":
    main()
