"""The README figure: window proxy, greedy-batcher model and simulator against load.

3 x 3 panels (rows: window T_max = 2 ms, 20 ms, inf; columns: B_max = 4, 16, 64), one
service shape (T_fixed = 50 ms, t_req = 0.5 ms), E[T] and P99 against
rho_full = lam T_svc(B_max) / B_max. Simulated points carry their 95% half-widths
(mostly smaller than the markers); a proxy point that is +inf (its rho >= 1) or off the
panel is drawn as a red triangle at the top edge.

    .venv/bin/python benchmarks/proxy_vs_sim.py      # needs the `bench` extra (matplotlib)
    .venv/bin/python benchmarks/proxy_vs_sim.py --smoke  # tiny, the figure to a temporary folder

Writes docs/proxy_vs_sim.png (< 300 KB). About half a minute on two cores.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import _smoke
import jax
import numpy as np
from _proxy import batcher_model, window_proxy

from sweep.models.dynamic.batch_sim import SimSettings, simulate

jax.config.update("jax_enable_x64", True)

OUT = Path(__file__).resolve().parents[1] / "docs" / "proxy_vs_sim.png"
TF, TR = 0.05, 0.0005
WINDOWS = (0.002, 0.02, np.inf)
CAPS = (4, 16, 64)
LOADS = np.round(np.linspace(0.05, 0.95, 13), 3)
Q = 0.99


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a tiny simulation, the figure drawn into a "
                    "temporary folder (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = (SimSettings(**_smoke.SIM, seed=5) if args.smoke
                else SimSettings(n_requests=100_000, warmup=5_000, replications=6, seed=5))
    rows = [(r * b / (TF + TR * b), b, t, r) for t in WINDOWS for b in CAPS for r in LOADS]
    lam, b, t, rf = (np.array(c) for c in zip(*rows, strict=True))
    n = lam.size
    one = np.ones(n)
    sim = simulate(
        {"lam": lam, "b_max": b, "t_max_s": t, "t_fixed_s": TF * one, "t_req_s": TR * one, "workers": one,
         "queue_capacity": np.inf * one, "service_cv": 0 * one},
        settings, Q, **(_smoke.SIM_OPTIONS if args.smoke else {}),
    )
    px = window_proxy(lam, b, t, TF * one, TR * one, 0.0, Q)
    bm = batcher_model(lam, b, t, TF * one, TR * one, 0 * one, Q * one)
    px = {k: np.asarray(v) * 1e3 for k, v in px.items() if k in ("e_resp",)}
    bm = {k: np.asarray(v)[:n] * 1e3 for k, v in bm.items() if k in ("e_resp", "p_q")}
    s_mean, s_mhw = sim["mean_s"] * 1e3, sim["mean_hw_s"] * 1e3
    s_p, s_phw = sim["p_s"] * 1e3, sim["p_hw_s"] * 1e3

    fig, axes = plt.subplots(3, 3, figsize=(10.5, 8.2), sharex=True)
    for i, tw in enumerate(WINDOWS):
        for j, cap in enumerate(CAPS):
            ax = axes[i, j]
            m = (t == tw) & (b == cap)
            x = rf[m]
            # the scale of what is bounded: an unsteady simulated point or an unstable model is +inf
            bounded = np.concatenate([s_p[m], bm["p_q"][m]])
            bounded = bounded[np.isfinite(bounded)]
            top = 1.25 * float(bounded.max()) if bounded.size else 1.0
            ax.errorbar(x, s_mean[m], yerr=s_mhw[m], fmt="o", ms=4, color="k", label="simulated E[T]")
            ax.errorbar(x, s_p[m], yerr=s_phw[m], fmt="o", ms=4, mfc="none", color="0.45",
                        label="simulated P99")
            ax.plot(x, bm["e_resp"][m], "-", color="tab:blue", lw=1.6, label="batcher model E[T]")
            ax.plot(x, bm["p_q"][m], "--", color="tab:blue", lw=1.2, label="batcher model P99")
            pe = px["e_resp"][m]
            ok = np.isfinite(pe) & (pe <= top)
            ax.plot(np.where(ok, x, np.nan), np.where(ok, pe, np.nan), "-", color="tab:red", lw=1.4,
                    label="window proxy E[T]")
            ax.plot(x[~ok], np.full((~ok).sum(), top * 0.97), "^", color="tab:red", ms=6,
                    label="proxy +inf / off scale")
            ax.set_ylim(0, top)
            wlab = "inf (full batches)" if np.isinf(tw) else f"{tw * 1e3:g} ms"
            ax.set_title(f"B_max = {cap}, T_max = {wlab}", fontsize=9)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("latency (ms)", fontsize=9)
            if i == 2:
                ax.set_xlabel("rho_full = lambda T_svc(B_max) / B_max", fontsize=9)
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=6, fontsize=8, frameon=False)
    fig.suptitle(f"Window proxy vs greedy-batcher model vs simulator (T_fixed = {TF * 1e3:g} ms, "
                 f"t_req = {TR * 1e3:g} ms, one worker)", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    px_fin = np.isfinite(px["e_resp"])
    ratios = {"batcher model E[T]": bm["e_resp"] / s_mean, "batcher model P99": bm["p_q"] / s_p,
              "window proxy E[T]": px["e_resp"][px_fin] / s_mean[px_fin]}
    print(f"baseline: the simulator ({settings.replications} x {settings.n_requests:,} requests per point); "
          "median ratio ours / simulated: "
          + ", ".join(f"{k} {np.median(v):.3f}" for k, v in ratios.items())
          + f" (window proxy +inf at {int((~px_fin).sum())} of {n} points)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / OUT.name if args.smoke else OUT
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=72)
        print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} KB)")
    plt.close(fig)
    return {"figure": fig, "points": n, "median_ratio": {k: float(np.median(v)) for k, v in ratios.items()},
            "proxy_inf": int((~px_fin).sum())}


if __name__ == "__main__":
    main()
