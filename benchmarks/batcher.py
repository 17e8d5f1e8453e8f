"""Accuracy of the window proxy and of the greedy-batcher model against the simulator.

For a grid over load (``rho_full = lam T_svc(B_max) / B_max``), batching window and batch
cap, with two realistic service-time shapes, every point is simulated
(`sweep.simulate`, one worker, Poisson arrivals, deterministic service) and evaluated by
the SPEC 2-4 window proxy (the gaussian model: ``e_resp``, ``p_gauss``, ``p_exp``)
and by `sweep.batcher.batcher_point` (``e_resp``, ``p_q``). Prints, per load band and per
window, the median and the largest absolute relative error against the simulated mean and
P99, and how often the proxy gives ``+inf`` (counted as a failure, never as an error);
writes ``benchmarks/results/batcher.json`` (every point) and ``batcher.md`` (the table).

    .venv/bin/python benchmarks/batcher.py [--n-requests 200000] [--replications 8] [--smoke]

Takes about a minute on two cores. ``--smoke``: a few hundred requests a point, 2
replications, nothing written (the test suite's check that this script works).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import _smoke
import jax
import numpy as np
from _proxy import batcher_model, lanes, window_proxy

from sweep.models.dynamic.batch_sim import SimSettings, simulate

jax.config.update("jax_enable_x64", True)

OUT = Path(__file__).resolve().parent / "results"
CAPS = (4, 16, 64)
WINDOWS_S = (0.002, 0.02, 0.1, np.inf)  # short, ~T_fixed/2, long, full-batch
LOADS = (0.1, 0.3, 0.5, 0.7, 0.85, 0.95)
SERVICES = ((0.05, 0.0005), (0.02, 0.002))  # (T_fixed, t_req) s: ratio 100 and 10
BANDS = (("low (0.1-0.3)", 0.0, 0.4), ("mid (0.5-0.7)", 0.4, 0.8), ("high (0.85-0.95)", 0.8, 1.0))
Q = 0.99


def grid() -> dict[str, np.ndarray]:
    rows = []
    for tf, tr in SERVICES:
        for b in CAPS:
            for t in WINDOWS_S:
                for r in LOADS:
                    rows.append((r * b / (tf + tr * b), b, t, tf, tr, r))
    a = np.array(rows).T
    return {"lam": a[0], "b_max": a[1], "t_max": a[2], "t_fixed": a[3], "t_req": a[4], "rho_full": a[5]}


def proxy(g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return window_proxy(g["lam"], g["b_max"], g["t_max"], g["t_fixed"], g["t_req"], 0.0, Q)


def model(g: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
    n = g["lam"].shape[0]
    args = [g[k] for k in ("lam", "b_max", "t_max", "t_fixed", "t_req")] + [np.zeros(n), np.full(n, Q)]
    jax.block_until_ready(batcher_model(*args))
    t = time.perf_counter()
    o = jax.block_until_ready(batcher_model(*args))
    us = (time.perf_counter() - t) / lanes(n) * 1e6  # per evaluated point, padding included
    return {k: np.asarray(v)[:n] for k, v in o.items()}, us


def rel(est: np.ndarray, ref: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(est), (est - ref) / ref, np.inf)


def summarize(err: np.ndarray) -> dict:
    fin = np.isfinite(err)
    a = np.abs(err[fin])
    return {
        "n": int(err.size),
        "inf": int((~fin).sum()),
        "median_abs": float(np.median(a)) if a.size else None,
        "max_abs": float(a.max()) if a.size else None,
    }


def fmt(s: dict) -> str:
    if s["median_abs"] is None:
        return f"all +inf ({s['inf']}/{s['n']})"
    txt = f"{100 * s['median_abs']:.0f}% / {100 * s['max_abs']:.0f}%"
    return txt + (f", +inf {s['inf']}/{s['n']}" if s["inf"] else "")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-requests", type=int, default=200_000)
    ap.add_argument("--warmup", type=int, default=10_000)
    ap.add_argument("--replications", type=int, default=8)
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run that writes nothing (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    if args.smoke:
        vars(args).update(_smoke.SIM)
    st = SimSettings(n_requests=args.n_requests, warmup=args.warmup, replications=args.replications, seed=7)

    g = grid()
    n = g["lam"].shape[0]
    t0 = time.perf_counter()
    sim = simulate(
        {"lam": g["lam"], "b_max": g["b_max"], "t_max_s": g["t_max"], "t_fixed_s": g["t_fixed"],
         "t_req_s": g["t_req"], "workers": np.ones(n), "queue_capacity": np.full(n, np.inf),
         "service_cv": np.zeros(n)},
        st, Q, **(_smoke.SIM_OPTIONS if args.smoke else {}),
    )
    sim_s = time.perf_counter() - t0
    px = proxy(g)
    bm, us_per_point = model(g)

    errs = {
        "proxy mean": rel(px["e_resp"], sim["mean_s"]),
        "batcher mean": rel(bm["e_resp"], sim["mean_s"]),
        "proxy P99 gauss": rel(px["p_gauss"], sim["p_s"]),
        "proxy P99 exp": rel(px["p_exp"], sim["p_s"]),
        "batcher P99 (p_q)": rel(bm["p_q"], sim["p_s"]),
        "batcher P99 gauss": rel(bm["p_gauss"], sim["p_s"]),
    }
    cols = list(errs)
    # Only where the simulation measured something: a point whose simulated backlog grew
    # (not steady) has no finite reference to compare with.
    steady = np.asarray(sim["steady"], bool)
    groups: list[tuple[str, np.ndarray]] = [("all points", steady.copy())]
    for name, lo, hi in BANDS:
        groups.append((f"load {name}", (g["rho_full"] > lo) & (g["rho_full"] <= hi)))
    for t in WINDOWS_S:
        label = "inf" if np.isinf(t) else f"{t * 1e3:g} ms"
        groups.append((f"window {label}", g["t_max"] == t))
    for b in CAPS:
        groups.append((f"B_max {b}", g["b_max"] == b))
    # where the proxy is worst: +inf, or off by more than 25% on the mean
    worst = ~np.isfinite(errs["proxy mean"]) | (np.abs(np.where(np.isfinite(errs["proxy mean"]),
                                                                 errs["proxy mean"], 0)) > 0.25)
    groups.append(("proxy worst (+inf or mean off >25%)", worst))
    groups.append(("proxy finite and within 25%", ~worst))

    groups = [(gname, mask & steady) for gname, mask in groups]
    table = {gname: {c: summarize(errs[c][mask]) for c in cols} for gname, mask in groups}
    ci_mean = float(np.max(sim["mean_hw_s"][steady] / sim["mean_s"][steady]))
    ci_p = float(np.max(sim["p_hw_s"][steady] / sim["p_s"][steady]))
    ci_p_med = float(np.median(sim["p_hw_s"][steady] / sim["p_s"][steady]))

    head = "| points | n | " + " | ".join(cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 2)]
    for gname, _ in groups:
        row = table[gname]
        lines.append(f"| {gname} | {row[cols[0]]['n']} | " + " | ".join(fmt(row[c]) for c in cols) + " |")
    md_table = "\n".join(lines)
    info = (
        f"{n} points: B_max {list(CAPS)}, T_max {['inf' if np.isinf(t) else t for t in WINDOWS_S]} s, "
        f"rho_full {list(LOADS)}, (T_fixed, t_req) {list(SERVICES)} s, service_cv 0, q = {Q}. "
        f"Simulator: {st.replications} replications x {st.n_requests} requests (+{st.warmup} warm-up) per "
        f"point, {sim_s:.0f} s; 95% half-width <= {100 * ci_mean:.1f}% of the mean, P99 half-width "
        f"median {100 * ci_p_med:.1f}%, max {100 * ci_p:.1f}%. Batcher model: {us_per_point:.1f} us/point "
        f"(jit+vmap, CPU). Cells: median / max |relative error| over finite estimates; "
        f"+inf = proxy reported +inf (a failure: the simulated system is stable at every point). "
        f"Points whose simulated backlog grew (not steady; too few requests near saturation): {int((~steady).sum())} "
        f"of {n}, left out."
    )
    print(info)
    print(md_table)
    ratios = {name: float(np.median(est[np.isfinite(est) & steady] / sim[ref][np.isfinite(est) & steady]))
              for name, est, ref in (("batcher model mean", bm["e_resp"], "mean_s"),
                                     ("batcher model P99 (p_q)", bm["p_q"], "p_s"),
                                     ("window proxy mean", px["e_resp"], "mean_s"),
                                     ("window proxy P99 gauss", px["p_gauss"], "p_s"))}
    print("baseline: the simulator (sweep.models.dynamic.batch_sim.simulate); median ratio ours / simulated over "
          "finite estimates: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    result = {"settings": {"n_requests": st.n_requests, "warmup": st.warmup, "replications": st.replications},
              "points": n, "steady_points": int(steady.sum()), "table": table, "median_ratio": ratios}
    if args.smoke:
        return result

    OUT.mkdir(parents=True, exist_ok=True)
    points = []
    for i in range(n):
        points.append({
            "b_max": int(g["b_max"][i]), "t_max_s": float(g["t_max"][i]), "t_fixed_s": float(g["t_fixed"][i]),
            "t_req_s": float(g["t_req"][i]), "rho_full": float(g["rho_full"][i]), "lam": float(g["lam"][i]),
            "sim_mean_s": float(sim["mean_s"][i]), "sim_mean_hw_s": float(sim["mean_hw_s"][i]),
            "sim_p99_s": float(sim["p_s"][i]), "sim_p99_hw_s": float(sim["p_hw_s"][i]),
            "sim_mean_batch": float(sim["mean_batch"][i]),
            "proxy_e_resp_s": float(px["e_resp"][i]), "proxy_p_gauss_s": float(px["p_gauss"][i]),
            "proxy_p_exp_s": float(px["p_exp"][i]), "proxy_rho": float(px["rho"][i]),
            "batcher_e_resp_s": float(bm["e_resp"][i]), "batcher_p_q_s": float(bm["p_q"][i]),
            "batcher_p_gauss_s": float(bm["p_gauss"][i]), "batcher_mean_batch": float(bm["mean_batch"][i]),
        })
    # JSON has no inf: write it as the string "inf"
    def clean(x):
        if isinstance(x, float) and not np.isfinite(x):
            return "inf" if x > 0 else "-inf"
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    (OUT / "batcher.json").write_text(json.dumps(clean({
        "settings": {"n_requests": st.n_requests, "warmup": st.warmup, "replications": st.replications,
                     "seed": st.seed, "q": Q, "sim_seconds": sim_s, "batcher_us_per_point": us_per_point,
                     "max_rel_hw_mean": ci_mean, "max_rel_hw_p99": ci_p, "median_rel_hw_p99": ci_p_med},
        "table": table, "points": points}), indent=1) + "\n")
    (OUT / "batcher.md").write_text("# Window proxy and batcher model vs simulator\n\n"
                                    + info + "\n\n" + md_table + "\n")
    return result


if __name__ == "__main__":
    main()
