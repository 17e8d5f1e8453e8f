"""The analytic closed loop (`workload = "closed"`: mean value analysis over the open model)
against the simulated closed loop, on configurations drawn at random (docs/continuous.md,
"Closed loops").

Engines, request mixes and budgets are drawn as `benchmarks/cb_accuracy.py` draws them
(`sweep.testing.cb_domain.draw`: catalog models and GPUs at TP 1-8, caps 4-1,024, budgets from
the cap to inf, prompt and output CVs 0-2, KV-bound or not; reserve KV, one step a decision),
and the load is a population instead of a rate:

* clients per replica log-uniform from 1 to twice the engine's slots (`min(cap, KV slots)`),
  rounded;
* think time 0 (half the points: `vllm bench serve --max-concurrency` at rate inf), else
  exponential with a mean log-uniform from 0.1 to 10 times a lone request's E2E.

Each point is simulated by the compiled event loop's closed loop (equal to the reference
scheduler request by request), warmup ``max(200, 4 c)`` requests and ``max(800, 8 c)`` measured
(at most 6,000), 4 replications. Compared (relative error (analytic - simulated) / simulated,
judged where the simulator's 95% half-width is below a third of the target): throughput and
mean TPOT (5%), mean TTFT and E2E (15%), TTFT and E2E at P50, and TTFT, TPOT and E2E at P99
(25%), apart for the points the grid trusts and those it marks untrusted
(`confidence.closed_loop_trusted`: more clients than the engine serves at once, or, with no
more clients than slots, an open-model TTFT above that of `clients` lone requests, or a loop
in lockstep: more than one client, no think time and one output length).

    python benchmarks/closed_accuracy.py                 # 60 configurations, seed 26 (about 10 minutes)
    python benchmarks/closed_accuracy.py --smoke         # seconds: the test suite's check

Writes benchmarks/results/closed_accuracy.csv (one row per configuration).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "closed_accuracy.csv"
#: metric -> (analytic key of closed_loop, its quantile or None, simulated key of
#: simulate_continuous, that key's half-width, target)
METRICS = {
    "throughput": ("throughput_rps", None, "rate_rps", "rate_rps_hw", 0.05),
    "tpot_mean": ("tpot_mean", None, "tpot_mean_s", "tpot_mean_hw_s", 0.05),
    "ttft_mean": ("ttft_mean", None, "ttft_mean_s", "ttft_mean_hw_s", 0.15),
    "e2e_mean": ("e2e_mean", None, "e2e_mean_s", "e2e_mean_hw_s", 0.15),
    "ttft_p50": ("ttft_q", 0.5, "ttft_p_s", "ttft_p_hw_s", 0.25),
    "e2e_p50": ("e2e_q", 0.5, "e2e_p_s", "e2e_p_hw_s", 0.25),
    "ttft_p99": ("ttft_q", 0.99, "ttft_p99_s", "ttft_p99_hw_s", 0.25),
    "tpot_p99": ("tpot_q", 0.99, "tpot_p99_s", "tpot_p99_hw_s", 0.25),
    "e2e_p99": ("e2e_q", 0.99, "e2e_p99_s", "e2e_p99_hw_s", 0.25),
}
_KEYS = ("prompt_mean", "prompt_cv", "output_mean", "output_cv", "cap", "max_batched_tokens",
         "kv_capacity_tokens", "block_tokens", "t_fixed", "t_token", "t_ctx", "service_cv")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=60, help="configurations (default 60)")
    ap.add_argument("--seed", type=int, default=26, help="random seed of the draw (default 26)")
    ap.add_argument("--smoke", action="store_true", help="three small configurations, nothing written")
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    from sweep.models.continuous import loop
    from sweep.models.continuous.closed import closed_loop
    from sweep.models.continuous.confidence import closed_loop_trusted
    from sweep.models.continuous.sim import CBSimSettings
    from sweep.testing import cb_domain

    n_points = 3 if args.smoke else args.points
    p = cb_domain.draw(n_points, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    rows = []
    for i in range(n_points):
        eng = {k: float(p[k][i]) for k in _KEYS}
        slots = max(1.0, min(eng["cap"], p["kv_slots"][i]))
        clients = int(max(1, round(math.exp(rng.uniform(0, math.log(2 * slots))))))
        if args.smoke:  # one lone client, then a few
            clients = 1 if i == 0 else min(clients, 4)
        lone = closed_loop(1, 0.0, quantiles=(0.5,), **eng)["e2e_mean"]
        think = 0.0 if rng.random() < 0.5 else lone * math.exp(rng.uniform(math.log(0.1), math.log(10.0)))
        if args.smoke:  # tiny engines' worth of requests
            think, warm, meas = (2.0 * lone if i else 0.0), 30, 120
        else:
            warm, meas = max(200, 4 * clients), min(6000, max(800, 8 * clients))
        ana = closed_loop(clients, think, quantiles=(0.5, 0.99), **eng)
        settings = CBSimSettings(n_requests=meas, warmup=warm, replications=2 if args.smoke else 4, seed=i)
        params = {k: np.array([v]) for k, v in {**eng, "lam": math.inf, "queue_capacity": math.inf}.items()}
        sim = loop.simulate_continuous(params, settings, percentile=0.5, more_percentiles=(0.99,),
                                       clients=np.array([clients]), think_s=np.array([think]),
                                       kv_admission="reserve")
        trusted = bool(closed_loop_trusted(
            clients=float(clients), cap=eng["cap"], slots=ana["slots"], saturated=np.bool_(ana["saturated"]),
            mean_running=ana["mean_running"],
            ttft_served=ana["ttft_served"], ttft_lone=ana["ttft_lone"],
            kv_tokens=eng["kv_capacity_tokens"], prompt_tokens=eng["prompt_mean"], prompt_cv=eng["prompt_cv"],
            output_tokens=eng["output_mean"], output_cv=eng["output_cv"], block=eng["block_tokens"], think_s=think))
        row = {"point": i, "model": p["model"][i], "gpu": p["gpu"][i], "tp": int(p["tp"][i]),
               "clients": clients, "think_s": think, "slots": slots, "saturated": bool(ana["saturated"]),
               "trusted": trusted,
               "steady": bool(sim["stable"][0]), **{k: eng[k] for k in ("cap", "max_batched_tokens",
                                                                        "prompt_mean", "output_mean")}}
        for name, (a_key, q, s_key, hw_key, target) in METRICS.items():
            a = ana[a_key] if q is None else ana[a_key][q]
            s, hw = float(sim[s_key][0]), float(sim[hw_key][0])
            judged = row["steady"] and math.isfinite(s) and s > 0 and hw <= target / 3.0 * abs(s)
            row[f"{name}_model"], row[f"{name}_sim"], row[f"{name}_hw"] = a, s, hw
            row[f"{name}_err"] = a / s - 1.0 if s > 0 else math.nan
            row[f"{name}_judged"] = judged
        rows.append(row)
        print(f"{i:3d} c={clients:5d} Z={think:8.3f}s slots={slots:7.1f} {'   ' if trusted else 'unt'} "
              f"X {row['throughput_err']:+6.1%} TTFT {row['ttft_mean_err']:+6.1%} TPOT {row['tpot_mean_err']:+6.1%} "
              f"E2E p99 {row['e2e_p99_err']:+6.1%}", flush=True)
    summary = {}
    for part, keep in (("trusted", lambda r: r["trusted"]), ("untrusted", lambda r: not r["trusted"])):
        for name, (*_, target) in METRICS.items():
            judged = [r for r in rows if keep(r) and r[f"{name}_judged"]]
            within = sum(abs(r[f"{name}_err"]) <= target for r in judged)
            summary[(part, name)] = {"target": target, "judged": len(judged), "within": within}
    print("\n| points | metric | target | judged | within target |\n|---|---|---:|---:|---:|")
    for (part, name), s in summary.items():
        share = f"{s['within'] / s['judged']:.0%}" if s["judged"] else "-"
        print(f"| {part} | {name} | {s['target']:.0%} | {s['judged']} | {s['within']} ({share}) |")
    for part in ("trusted", "untrusted"):
        j = sum(s["judged"] for (q, _), s in summary.items() if q == part)
        w = sum(s["within"] for (q, _), s in summary.items() if q == part)
        print(f"{part}: {w} of {j} judged comparisons within target" + (f" ({w / j:.1%})" if j else ""))
    if not args.smoke:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        with RESULTS.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return {"rows": rows, "summary": summary}


if __name__ == "__main__":
    main()
