"""The analytic per-token gap (ITL) law against finite benchmark runs, on configurations drawn at
random (docs/deploy.md, "Predicting a benchmark").

The grid's `itl_p_ms` and `sweep predict-benchmark`'s analytic column give the median and tail
of ITL (every gap between consecutive tokens of a request, pooled) from the per-token gap law
of `sweep.models.continuous.itl`: a mixture of a decoder's own step and the prompt work a
Poisson number of prompts adds to it (`chunked`: their chunks in the same step;
`prefill_first`: their prompt steps in between). This script holds it against the simulated
column, the finite run through the reference scheduler (``--scheduler-policy``, default
`chunked`), on configurations drawn at random (seeded):

* cap 8-256 running sequences (powers of two), token budget 2-32 times the cap;
* prompt 50-4,000 and output 20-800 tokens (log-uniform), CVs 0-1.5 (lognormal lengths);
* step coefficients: ``t_fixed`` 4-30 ms, ``t_token`` 5e-6 to 1e-4 s, ``t_ctx`` 1e-9 to 1e-7 s
  (log-uniform), step noise CV 0, 0.1 or 0.3; the KV cache does not bind;
* load 0.1-0.85 of the analytic model's capacity, Poisson, ``max(400, 200 lambda)`` prompts
  (at most 4,000), 3 replications.

Compared: the median and P99 gap (relative error (analytic - simulated) / simulated), judged
within 25% (the target the continuous model's percentiles are held to), and the mean gap; the
median and P99 twice: the law's CDF inverted by bisection (`sweep predict-benchmark`) and as the
grid's `itl_p_ms` inverts it (``itl_grid_*``: the one part the quantile falls in, at a fixed
small cost).

    python benchmarks/itl_accuracy.py               # 40 configurations, seed 25 (about 4 minutes)
    python benchmarks/itl_accuracy.py --smoke       # seconds: the test suite's check

Writes benchmarks/results/itl_accuracy.csv (one row per configuration; under `prefill_first`
itl_accuracy_prefill_first.csv).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sweep.cli.predict import BenchConfig, Benchmark, analytic, simulate

RESULTS = ROOT / "benchmarks" / "results" / "itl_accuracy.csv"
TARGET = 0.25


def draw(rng: np.random.Generator) -> tuple[BenchConfig, float]:
    """One configuration and its load (a fraction of the analytic capacity)."""
    cap = float(2 ** rng.integers(3, 9))

    def loguniform(lo: float, hi: float) -> float:
        return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))

    cfg = BenchConfig(prompt_mean=loguniform(50, 4000), prompt_cv=float(rng.uniform(0, 1.5)),
                      output_mean=loguniform(20, 800), output_cv=float(rng.uniform(0, 1.5)), cap=cap,
                      max_batched_tokens=float(cap * 2 ** rng.integers(1, 6)), kv_capacity_tokens=math.inf,
                      block_tokens=16.0, t_fixed=float(rng.uniform(0.004, 0.03)), t_token=loguniform(5e-6, 1e-4),
                      t_ctx=loguniform(1e-9, 1e-7), service_cv=float(rng.choice([0.0, 0.1, 0.3])), label="random",
                      kv_admission="reserve")
    return cfg, float(rng.uniform(0.1, 0.85))


def capacity_rps(cfg: BenchConfig) -> float:
    """The analytic model's capacity (requests/s) of a configuration."""
    import jax.numpy as jnp

    from sweep.models.continuous.analytic import cb_point

    params = {k: jnp.float64(v) for k, v in cfg.kwargs().items()}
    return float(cb_point(lam=jnp.float64(1e-3), q=jnp.float64(0.5), **params,
                          prefill_first=cfg.scheduler_policy == "prefill_first")["capacity_rps"])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=40, help="configurations (default 40)")
    ap.add_argument("--seed", type=int, default=25, help="random seed of the draw (default 25)")
    ap.add_argument("--scheduler-policy", choices=("chunked", "prefill_first"), default="chunked",
                    help="the engine's policy (default chunked)")
    ap.add_argument("--smoke", action="store_true", help="two small configurations, nothing written")
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(args.seed)
    points = 2 if args.smoke else args.points
    rows = []
    print(f"{'#':>3s} {'load':>5s} {'p50 model':>9s} {'sim':>8s} {'err':>6s} {'p99 model':>9s} {'sim':>8s} "
          f"{'err':>6s} {'mean model':>10s} {'sim':>8s}   (ms)")
    for i in range(points):
        cfg, load = draw(rng)
        cfg = replace(cfg, scheduler_policy=args.scheduler_policy)
        lam = load * capacity_rps(cfg)
        n = 60 if args.smoke else int(min(4000, max(400, 200 * lam)))
        bench = Benchmark(n, lam, None, quantile=0.99)
        model, _basis = analytic(cfg, bench, itl_grid=True)
        sim = simulate(cfg, bench, replications=2 if args.smoke else 3, seed=i)
        row = {"point": i, "load": load, "rate_rps": lam, "prompt_mean": cfg.prompt_mean,
               "output_mean": cfg.output_mean, "cap": cfg.cap, "max_batched_tokens": cfg.max_batched_tokens,
               "service_cv": cfg.service_cv}
        for key in ("itl_q0.5", "itl_q0.99", "itl_mean", "itl_grid_q0.5", "itl_grid_q0.99"):
            m, (s, hw) = model.get(key), sim[key.replace("grid_", "")]
            row[f"{key}_model"], row[f"{key}_sim"], row[f"{key}_hw"] = m, s, hw
            row[f"{key}_err"] = (m / s - 1.0) if m is not None and s > 0 else None
        rows.append(row)

        def ms(v: float | None) -> str:
            return f"{v * 1e3:9.2f}" if v is not None else f"{'-':>9s}"

        def err(v: float | None) -> str:
            return f"{v:+6.2f}" if v is not None else f"{'-':>6s}"

        print(f"{i:3d} {load:5.2f} {ms(row['itl_q0.5_model'])} {row['itl_q0.5_sim'] * 1e3:8.2f} "
              f"{err(row['itl_q0.5_err'])} {ms(row['itl_q0.99_model'])} {row['itl_q0.99_sim'] * 1e3:8.2f} "
              f"{err(row['itl_q0.99_err'])} {ms(row['itl_mean_model']):>10s} {row['itl_mean_sim'] * 1e3:8.2f}")
    summary = {}
    for key in ("itl_q0.5", "itl_q0.99", "itl_mean", "itl_grid_q0.5", "itl_grid_q0.99"):
        errs = [r[f"{key}_err"] for r in rows if r[f"{key}_err"] is not None]
        summary[key] = {"judged": len(errs), "within_25": sum(abs(e) <= TARGET for e in errs),
                        "median_abs_err": float(np.median(np.abs(errs))) if errs else math.nan}
        print(f"{key:14s} within 25%: {summary[key]['within_25']}/{len(errs)}, median |error| "
              f"{summary[key]['median_abs_err']:.3f}")
    worst = sorted(rows, key=lambda r: -abs(r["itl_q0.99_err"] or 0.0))[:3]
    print("worst P99: " + "; ".join(f"#{r['point']} {r['itl_q0.99_err']:+.2f} (load {r['load']:.2f}, prompt "
                                    f"{r['prompt_mean']:.0f}, budget {r['max_batched_tokens']:.0f})" for r in worst))
    if not args.smoke:
        path = RESULTS if args.scheduler_policy == "chunked" else RESULTS.with_name(
            f"itl_accuracy_{args.scheduler_policy}.csv")
        path.parent.mkdir(exist_ok=True)
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {path.relative_to(ROOT)}")
    return {"rows": rows, "summary": summary}


if __name__ == "__main__":
    main()
