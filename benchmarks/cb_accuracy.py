"""Analytic continuous-batching model against the simulator (SPEC 10 accuracy targets).

A sweep of engines (step coefficients of a small and a large model, caps 8-64, token
budgets 256 / 2048 / inf, a KV-bound engine) and request mixes (chat-like, long prompts,
long outputs) at loads from 10% to 95% of the model's own capacity. For every point the
simulator (3 replications, 95% half-widths) and the analytic model run on the same
inputs; the table gives, per metric, the error of the model over SPEC 10's stable region
(simulated point steady and mean running below 90% of the cap), how many points meet the
target, and the points that miss. The figure, docs/cb_vs_sim.png, shows simulated (dots
with half-widths) and analytic (lines) TTFT and TPOT, mean and percentile, against load.

    python benchmarks/cb_accuracy.py            # ~20-30 min on two shared cores
    python benchmarks/cb_accuracy.py --tiny     # seconds: smoke test, no figure

The simulated results are kept in benchmarks/results/cb_accuracy_sim.npz together with
the inputs they were run on; a later run with the same inputs reuses them (``--resim``
forces a new simulation), so the analytic side can be iterated on in seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np

from sweep.models.continuous.analytic import cb_point
from sweep.models.continuous.sim import CBSimSettings, simulate_continuous

OUT = ROOT / "docs" / "cb_vs_sim.png"
KEYS = ("lam", "prompt_mean", "prompt_cv", "output_mean", "output_cv", "cap",
        "max_batched_tokens", "kv_capacity_tokens", "block_tokens", "t_fixed", "t_token",
        "t_ctx", "service_cv")
Q = 0.9
# step coefficients: an 8B-class model on one GPU and a 70B-class model on a TP group
SMALL = dict(t_fixed=0.010, t_token=3e-5, t_ctx=5e-8)
LARGE = dict(t_fixed=0.020, t_token=5e-5, t_ctx=1e-7)
CHAT = dict(prompt_mean=400.0, prompt_cv=1.0, output_mean=150.0, output_cv=1.0)
ENG = dict(max_batched_tokens=np.inf, kv_capacity_tokens=np.inf, block_tokens=16.0, service_cv=0.0)
CONFIGS = {
    "chat N=32": {**CHAT, **LARGE, **ENG, "cap": 32.0},
    "chat N=32 M=256": {**CHAT, **LARGE, **ENG, "cap": 32.0, "max_batched_tokens": 256.0},
    "chat N=8": {**CHAT, **LARGE, **ENG, "cap": 8.0},
    "chat KV=6000": {**CHAT, **LARGE, **ENG, "cap": 64.0, "kv_capacity_tokens": 6000.0},
    "long prompt M=2048": dict(prompt_mean=2000.0, prompt_cv=0.5, output_mean=60.0, output_cv=0.5,
                               cap=32.0, **{**ENG, "max_batched_tokens": 2048.0, "service_cv": 0.1},
                               t_fixed=0.02, t_token=1e-4, t_ctx=2e-7),
    "long output N=64": dict(prompt_mean=100.0, prompt_cv=0.5, output_mean=300.0, output_cv=0.8,
                             cap=64.0, **ENG, **SMALL),
    "chat small N=16 M=2048": {**CHAT, **SMALL, **ENG, "cap": 16.0, "max_batched_tokens": 2048.0},
    "code N=48 noise": dict(prompt_mean=1200.0, prompt_cv=0.7, output_mean=250.0, output_cv=0.6,
                            cap=48.0, **{**ENG, "service_cv": 0.2}, **SMALL),
}
LOADS = (0.1, 0.3, 0.5, 0.7, 0.85, 0.95)
TARGETS = (("tpot_mean", 0.05), ("ttft_mean", 0.15), ("e2e_mean", 0.15), ("ttft_p", 0.25),
           ("tpot_p", 0.25), ("e2e_p", 0.25))


def analytic(p: dict[str, np.ndarray], q: float = Q) -> dict[str, np.ndarray]:
    n = p["lam"].shape[0]
    out = jax.jit(jax.vmap(cb_point))(*(jnp.asarray(p[k]) for k in KEYS), jnp.full(n, q))
    return {k: np.asarray(v) for k, v in out.items()}


def sweep(configs, loads):
    rows = []
    for name, cfg in configs.items():
        one = {k: np.array([cfg[k] if k != "lam" else 1.0]) for k in KEYS}
        cap = float(analytic(one)["capacity_rps"][0])
        rows += [(name, f, {**cfg, "lam": f * cap}) for f in loads]
    p = {k: np.array([r[2][k] for r in rows]) for k in KEYS}
    return rows, p


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-requests", type=int, default=3000)
    ap.add_argument("--replications", type=int, default=3)
    ap.add_argument("--smoke", "--tiny", dest="tiny", action="store_true", help="seconds: no figure, no cache")
    ap.add_argument("--resim", action="store_true", help="ignore the cached simulation")
    args = ap.parse_args(argv)
    configs, loads = CONFIGS, LOADS
    if args.tiny:
        configs = {k: CONFIGS[k] for k in ("chat N=32", "chat N=8")}
        loads, args.n_requests, args.replications = (0.3, 0.7), 300, 2
    rows, p = sweep(configs, loads)
    a = analytic(p)
    settings = CBSimSettings(n_requests=args.n_requests, warmup=args.n_requests // 10,
                             replications=args.replications, seed=11)
    cache = ROOT / "benchmarks" / "results" / "cb_accuracy_sim.npz"
    stamp = np.concatenate([np.stack([p[k] for k in KEYS]).ravel(),
                            [settings.n_requests, settings.warmup, settings.replications,
                             settings.seed, Q]])
    t = time.perf_counter()
    s = None
    if cache.exists() and not args.resim and not args.tiny:
        old = dict(np.load(cache))
        if old["stamp"].shape == stamp.shape and np.array_equal(old["stamp"], stamp):
            s = {k: v for k, v in old.items() if k != "stamp"}
    if s is None:
        s = simulate_continuous({**p, "queue_capacity": np.full(len(rows), np.inf)}, settings,
                                percentile=Q)
        if not args.tiny:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cache, stamp=stamp, **s)
    sim_s = time.perf_counter() - t
    region = s["stable"] & (s["mean_running"] < 0.9 * p["cap"]) & a["stable"]
    print(f"# {len(rows)} points ({len(configs)} engines x {len(loads)} loads), q = {Q}, "
          f"{args.replications} x {args.n_requests} requests each; simulated in {sim_s:.0f} s")
    print(f"# stable region (simulated steady, mean running < 0.9 N): {region.sum()} points; "
          f"not steady in the simulator: {int((~s['stable']).sum())}\n")
    print("| metric | target | median abs err | max abs err | within target "
          "| misses (engine, load: error, simulated 95% half-width) |")
    print("|---|---:|---:|---:|---:|---|")
    for key, tol in TARGETS:
        err = a[key][region] / s[key + "_s"][region] - 1.0
        idx = np.flatnonzero(region)
        hw_key = key.replace("_mean", "_mean_hw").replace("_p", "_p_hw") + "_s"
        rel_hw = s[hw_key][region] / s[key + "_s"][region]
        miss = [f"{rows[i][0]} @{rows[i][1]:.2f}: {e:+.0%} (sim +-{h:.0%})"
                for i, e, h in zip(idx, err, rel_hw) if abs(e) > tol]
        print(f"| {key} | {tol:.0%} | {np.median(np.abs(err)):.1%} | {np.max(np.abs(err)):.1%} | "
              f"{np.sum(np.abs(err) <= tol)}/{err.size} | {'; '.join(miss) or '-'} |")
    for key, sk in (("mean_running", "mean_running"), ("step_mean", "step_mean_s"),
                    ("kv_util", "kv_util")):
        ok = region & (s[sk] > 0)
        err = a[key][ok] / s[sk][ok] - 1.0
        if err.size:
            print(f"| {key} | - | {np.median(np.abs(err)):.1%} | {np.max(np.abs(err)):.1%} | - | - |")
    print("\n| engine | load | sim running | TTFT sim / model (ms) | TPOT sim / model (ms) | "
          "E2E p sim / model (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for i, (name, f, _) in enumerate(rows):
        mark = "" if region[i] else " (outside region)" if s["stable"][i] else " (not steady)"
        print(f"| {name}{mark} | {f:.2f} | {s['mean_running'][i]:.1f} | "
              f"{s['ttft_mean_s'][i] * 1e3:.1f} / {a['ttft_mean'][i] * 1e3:.1f} | "
              f"{s['tpot_mean_s'][i] * 1e3:.2f} / {a['tpot_mean'][i] * 1e3:.2f} | "
              f"{s['e2e_p_s'][i] * 1e3:.0f} / {a['e2e_p'][i] * 1e3:.0f} |")
    if args.tiny:
        return {"points": len(rows)}
    figure(rows, p, a, s, configs, loads)


def figure(rows, p, a, s, configs, loads) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(configs)
    fig, axes = plt.subplots(4, 4, figsize=(13, 11))
    fine_f = np.linspace(0.05, 0.97, 40)
    for ci, name in enumerate(names):
        cfg = configs[name]
        sel = np.array([r[0] == name for r in rows])
        cap_rps = p["lam"][sel][0] / loads[0]
        fp = {k: np.full(fine_f.size, cfg[k]) for k in KEYS if k != "lam"}
        fp["lam"] = fine_f * cap_rps
        fa = analytic(fp)
        x = np.array(loads)
        for mi, (metric, unit) in enumerate((("ttft", "TTFT"), ("tpot", "TPOT"))):
            ax = axes[(ci // 4) * 2 + mi, ci % 4]
            ok = s["stable"][sel]
            for kind, style, lab in (("mean", "o", "mean"), ("p", "s", f"P{Q * 100:.0f}")):
                y = s[f"{metric}_{kind}_s"][sel] * 1e3
                hw = s[f"{metric}_{kind}_hw_s"][sel] * 1e3
                ax.errorbar(x[ok], y[ok], yerr=hw[ok], fmt=style, ms=4,
                            mfc="k" if kind == "mean" else "none", color="k",
                            label=f"simulated {lab}")
                ax.plot(fine_f, fa[f"{metric}_{kind}"] * 1e3, "-" if kind == "mean" else "--",
                        color="tab:blue", lw=1.4, label=f"analytic {lab}")
            if (~ok).any():
                top = ax.get_ylim()[1]
                y_mark = top * 0.97 if metric == "tpot" else top * 0.8
                ax.plot(x[~ok], np.full((~ok).sum(), y_mark), "v", color="tab:red", ms=6,
                        label="simulated: not steady")
            if metric == "ttft":  # waits span orders of magnitude near saturation
                ax.set_yscale("log")
            ax.set_title(f"{name}: {unit}", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if ci % 4 == 0:
                ax.set_ylabel(f"{unit} (ms)", fontsize=8)
            if (ci // 4) * 2 + mi == 3:
                ax.set_xlabel("load = lam / capacity_rps (model)", fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    fig.legend(seen.values(), seen.keys(), loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle("Continuous batching: analytic model (lines) vs simulator (markers, 95% "
                 "half-widths)", fontsize=10)
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=70)
    print(f"\nwrote {OUT} ({OUT.stat().st_size / 1e3:.0f} KB)")


if __name__ == "__main__":
    main()
