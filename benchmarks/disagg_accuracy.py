"""Analytic disaggregated model against the simulator of both pools, on configurations drawn
at random (issue 26; modelled on benchmarks/cb_accuracy.py).

Configurations are drawn at random across the domain (seeded): a catalog model and GPU, GPUs
per replica of each pool (the fewest powers of two that hold the weights, sometimes twice
that), prompt and output lengths (log-uniform, 64-8192 and 8-1024 tokens) and CVs (0-1.5),
the prefill batcher's cap (1-32) and window (0, 1-100 ms or none), the decode cap (8-256),
1-4 replicas per pool, a link of the catalog and service noise (CV 0-0.3). The step times
are the roofline's (the catalog's figures), as a roofline grid computes them. A configuration
whose decode replica holds fewer than 4 mean requests' KV (P + O) is drawn again (the
lognormal lengths would make the simulator reject requests that the analytic model admits).

Each one is put at several loads: `arrival_rps = load x capacity_rps`, `capacity_rps` the
analytic model's (the smaller pool's sustainable rate), load 0.3, 0.6 and 0.85 by default.
The analytic model runs on the point (`sweep.engine.evaluate_points`, the engine's own
kernel) and the simulator (`simulate_disaggregated`) on the same figures
(`DisaggSimulation.params`, what `latency_model = "simulated"` feeds it). Run lengths per
point: the warm-up covers ``2 L / (1 - load)`` arrivals (``L`` the analytic mean number in
the system, Little's law: ``arrival_rps x e2e_mean``; ``1 - load`` floored at 0.1), rounded up
to a power-of-two class, at least ``--warmup``; the measured span four times that, at least
``--n-requests``; each class one simulator call.

Compared (relative error (analytic - simulated) / simulated): mean and P99 of TTFT, TPOT
(both the decode pool's interval between tokens) and E2E. A comparison is judged where the
simulator is steady and its 95% half-width is below 5% of its value (else counted as "wide");
an analytic `stable = false` at a steady simulated point is a miss (error +inf).

    python benchmarks/disagg_accuracy.py              # 40 configurations x 3 loads, seed 26
    python benchmarks/disagg_accuracy.py --smoke      # seconds: the test suite's check

Writes benchmarks/results/disagg_accuracy.json (the summary) and
benchmarks/results/disagg_accuracy_points.csv (one row per point and metric). The simulated
results are kept in benchmarks/results/disagg_accuracy_sim.npz with the settings; a later run
with the same settings reuses them (a rewritten analytic model is judged on the same points in
seconds; `--resim` simulates again).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np

from sweep.catalog import packaged_catalog
from sweep.engine.evaluate import evaluate_points
from sweep.grid.spec import SimulationOptions
from sweep.models import get_model
from sweep.models.base import figure_arrays
from sweep.models.disaggregated.links import LINKS, NVLINK
from sweep.models.disaggregated.sim import DisaggSimSettings, simulate_disaggregated
from sweep.models.disaggregated.simulation import DisaggSimulation

RESULTS = ROOT / "benchmarks" / "results"
MODELS = ("llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "llama-2-13b", "qwen3-32b", "qwen3-30b-a3b", "mixtral-8x7b",
          "llama-3.1-70b")
GPUS = ("h100-sxm", "h200", "a100-80gb", "b200", "mi300x", "l40s")
LOADS = (0.3, 0.6, 0.85)
#: (metric, analytic column, simulator key)
METRICS = (("ttft_mean", "ttft_mean_ms", "ttft_mean_s"), ("ttft_p99", "ttft_p_ms", "ttft_p_s"),
           ("tpot_mean", "tpot_mean_ms", "tpot_mean_s"), ("tpot_p99", "tpot_p_ms", "tpot_p_s"),
           ("e2e_mean", "e2e_mean_ms", "e2e_mean_s"), ("e2e_p99", "e2e_p_ms", "e2e_p_s"))
SIM_CACHE = RESULTS / "disagg_accuracy_sim.npz"
SAMPLER_VERSION = 1  # bump when `draw` changes what a seed draws
HW_MAX = 0.05  # a comparison is judged where the simulator's half-width is below this share of its value
PAGED, BLOCK, RESERVE = True, 16.0, 0.1
MODEL = get_model("disaggregated", "analytic")
STATIC = {"prefill": (("block_tokens", BLOCK), ("paged", PAGED), ("reserve_fraction", RESERVE),
                      ("service_source", "roofline")),
          "decode": (("block_tokens", BLOCK), ("paged", PAGED), ("reserve_fraction", RESERVE),
                     ("service_source", "roofline"))}


def _gpus_for(m, g, rng) -> float:
    """The fewest GPUs (a power of two) whose HBM holds the weights with a third to spare,
    doubled one time in four."""
    need = m.n_params * 2.0 / (g.hbm_bytes * (1.0 - RESERVE))
    n = 1.0
    while n < 1.5 * need:
        n *= 2.0
    return n * (2.0 if rng.random() < 0.25 else 1.0)


def draw(n: int, seed: int) -> list[dict]:
    """`n` configurations (module docstring), without `arrival_rps`."""
    rng = np.random.default_rng(seed)
    cat = packaged_catalog()
    out: list[dict] = []
    while len(out) < n:
        m, g = cat.model(str(rng.choice(MODELS))), cat.gpu(str(rng.choice(GPUS)))
        link = str(rng.choice(list(LINKS)))
        if link == NVLINK and not g.interconnect_bytes_per_s:
            continue
        window = rng.random()
        c = dict(
            model=m.name, gpu=g.name, prefill_gpus_per_replica=_gpus_for(m, g, rng),
            decode_gpus_per_replica=_gpus_for(m, g, rng),
            prompt_tokens=float(round(math.exp(rng.uniform(math.log(64), math.log(8192))))),
            prompt_cv=float(rng.uniform(0.0, 1.5)),
            output_tokens=float(round(math.exp(rng.uniform(math.log(8), math.log(1024))))),
            output_cv=float(rng.uniform(0.0, 1.5)),
            prefill_batch_size=float(rng.choice([1, 2, 4, 8, 16, 32])),
            prefill_batch_window_ms=0.0 if window < 0.3 else (math.inf if window > 0.85 else
                                                              float(math.exp(rng.uniform(0.0, math.log(100.0))))),
            decode_batch_size=float(rng.choice([8, 16, 32, 64, 128, 256])),
            decode_max_batched_tokens=math.inf, prefill_replicas=float(rng.integers(1, 5)),
            decode_replicas=float(rng.integers(1, 5)), service_cv=float(rng.uniform(0.0, 0.3)), link=link,
            link_bytes_per_s=LINKS[link].bytes_per_s or g.interconnect_bytes_per_s,
            link_latency_s=LINKS[link].latency_s)
        free = c["decode_gpus_per_replica"] * g.hbm_bytes * (1 - RESERVE) - m.n_params * 2.0
        kv_tokens = free / (m.n_layers * m.kv_elems_per_token_per_layer * 2.0)
        if kv_tokens < 4.0 * (c["prompt_tokens"] + c["output_tokens"]):
            continue
        if c["prefill_batch_window_ms"] == math.inf and c["prefill_batch_size"] > 8:
            c["prefill_batch_size"] = 8.0  # a batcher without a window waits for B arrivals
        out.append(c)
    return out


def analytic(points: list[dict]) -> dict[str, np.ndarray]:
    """The analytic model at `points` (every column and its private values)."""
    cat = packaged_catalog()
    keys = {p.key: p for p in MODEL.params}
    params: dict[str, np.ndarray] = {}
    for k, p in keys.items():
        if k in ("model", "gpu", "link") or p.kind == "name":
            continue
        if k in points[0]:
            params[k] = np.array([pt[k] for pt in points], np.float64)
        elif p.default is not None and k not in ("t_fixed_ms", "t_token_ms", "t_ctx_ms", "eta_bw", "eta_flops"):
            params[k] = np.full(len(points), float(p.default))
    params["percentile"] = np.full(len(points), 0.99)
    params["ttft_slo_ms"] = np.full(len(points), math.inf)
    figures = figure_arrays([cat.model(p["model"]) for p in points], [cat.gpu(p["gpu"]) for p in points])
    return evaluate_points(MODEL, params, figures, static=STATIC)


def simulate(points: list[dict], cols: dict[str, np.ndarray], loads: np.ndarray, args) -> dict[str, np.ndarray]:
    """The simulator at every point, one call per run-length class (module docstring)."""
    n = len(points)
    little = np.where(np.isfinite(cols["e2e_mean_ms"]), cols["arrival_rps"] * cols["e2e_mean_ms"] / 1e3,
                      cols["arrival_rps"] * 10.0)
    need = 2.0 * little / np.maximum(1.0 - loads, 0.1)
    cls = np.maximum(0, np.ceil(np.log2(np.maximum(need, 1.0) / args.warmup))).astype(int)
    cls = np.minimum(cls, int(math.log2(args.max_warmup // args.warmup)))
    host = DisaggSimulation(SimulationOptions(), decides=False, paged=PAGED, block_tokens=BLOCK)
    sim_in = host.params(cols, n)
    out: dict[str, np.ndarray] = {}
    for k in np.unique(cls):
        idx = np.flatnonzero(cls == k)
        w = args.warmup * 2 ** int(k)
        st = DisaggSimSettings(n_requests=max(args.n_requests, 4 * w), warmup=w, replications=args.replications,
                               seed=args.seed)
        res = simulate_disaggregated({key: v[idx] for key, v in sim_in.items()}, st, percentile=0.99,
                                     scenario_ids=idx)
        for key, v in res.items():
            out.setdefault(key, np.full(n, np.nan, dtype=np.asarray(v).dtype if key != "stable" else bool))[idx] = v
        print(f"  class {k}: {idx.size} points, warmup {w}, measured {st.n_requests}, "
              f"{args.replications} replications", flush=True)
    return out


def judge(cols, sim) -> dict[str, dict[str, np.ndarray]]:
    """Per metric: the relative error (inf: analytic unstable at a steady point), the
    simulator's relative half-width and whether the comparison is judged."""
    out = {}
    for name, a_col, s_key in METRICS:
        a, s, hw = cols[a_col], sim[s_key], sim[s_key.replace("_s", "_hw_s")]
        steady = sim["stable"].astype(bool)
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(np.isfinite(a), (a / 1e3 - s) / s, np.inf)
            rel_hw = hw / s
        judged = steady & (rel_hw < HW_MAX)
        out[name] = {"err": rel, "rel_hw": rel_hw, "judged": judged, "wide": steady & ~judged}
    return out


def summary(j, loads) -> dict:
    res: dict = {}
    for name, d in j.items():
        e, m = np.abs(d["err"]), d["judged"]
        row = {"judged": int(m.sum()), "wide": int(d["wide"].sum()),
               "within_10": float(np.mean(e[m] <= 0.10)) if m.any() else math.nan,
               "within_20": float(np.mean(e[m] <= 0.20)) if m.any() else math.nan,
               "median_abs": float(np.median(e[m])) if m.any() else math.nan,
               "median_signed": float(np.median(d["err"][m])) if m.any() else math.nan}
        for load in np.unique(loads):
            mm = m & (loads == load)
            row[f"within_20_at_{load:g}"] = float(np.mean(e[mm] <= 0.20)) if mm.any() else math.nan
        res[name] = row
    return res


def print_table(s: dict, loads_used) -> str:
    lines = ["| metric | judged | within 10% | within 20% | median abs. error | median signed | "
             + " | ".join(f"within 20% at load {x:g}" for x in loads_used) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(loads_used)]
    for name, r in s.items():
        lines.append(f"| {name} | {r['judged']} | {100 * r['within_10']:.0f}% | {100 * r['within_20']:.0f}% | "
                     f"{100 * r['median_abs']:.1f}% | {100 * r['median_signed']:+.1f}% | "
                     + " | ".join(f"{100 * r[f'within_20_at_{x:g}']:.0f}%" for x in loads_used) + " |")
    return "\n".join(lines)


def _settings(args) -> dict:
    return {k: getattr(args, k) for k in ("points", "loads", "seed", "n_requests", "warmup", "max_warmup",
                                          "replications")} | {"sampler": SAMPLER_VERSION}


def _cached(args) -> dict[str, np.ndarray] | None:
    """The simulated results of an earlier run with the same settings (the simulator's
    inputs depend on the draws and the analytic capacities only; `--resim` ignores them)."""
    if args.smoke or args.resim or not SIM_CACHE.exists():
        return None
    with np.load(SIM_CACHE) as z:
        if json.loads(str(z["settings"])) != _settings(args):
            return None
        return {k: z[k] for k in z.files if k != "settings"}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=40, help="configurations drawn")
    ap.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS), help="loads (of capacity_rps)")
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--n-requests", type=int, default=4000, help="measured arrivals per replication, at least")
    ap.add_argument("--warmup", type=int, default=1000, help="warm-up arrivals, at least")
    ap.add_argument("--max-warmup", type=int, default=8000)
    ap.add_argument("--replications", type=int, default=4)
    ap.add_argument("--worst", type=int, default=8, help="worst cases printed")
    ap.add_argument("--resim", action="store_true", help="simulate again even where results are cached")
    ap.add_argument("--smoke", action="store_true", help="tiny: 3 configurations at one load, nothing written")
    args = ap.parse_args(argv)
    if args.smoke:
        args.points, args.loads, args.n_requests, args.warmup, args.max_warmup, args.replications = (
            3, "0.3", 300, 50, 50, 2)
    loads_used = [float(x) for x in args.loads.split(",")]
    t0 = time.perf_counter()
    configs = draw(args.points, args.seed)
    base = analytic([{**c, "arrival_rps": 1.0} for c in configs])
    points, loads = [], []
    for c, cap in zip(configs, base["capacity_rps"]):
        for load in loads_used:
            points.append({**c, "arrival_rps": float(load * cap)})
            loads.append(load)
    load_arr = np.asarray(loads)
    cols = analytic(points)
    sim = _cached(args)
    if sim is None or len(sim["stable"]) != len(points):
        print(f"{len(configs)} configurations x {len(loads_used)} loads; simulating", flush=True)
        sim = simulate(points, cols, load_arr, args)
        if not args.smoke:
            RESULTS.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(SIM_CACHE, settings=json.dumps(_settings(args)), **sim)
    else:
        print(f"{len(configs)} configurations x {len(loads_used)} loads; simulated results from {SIM_CACHE.name}")
    j = judge(cols, sim)
    s = summary(j, load_arr)
    table = print_table(s, loads_used)
    print(table)
    rows = []
    for i, p in enumerate(points):
        for name, d in j.items():
            rows.append({"point": i, "load": loads[i], "metric": name, "rel_err": float(d["err"][i]),
                         "sim_rel_hw": float(d["rel_hw"][i]), "judged": bool(d["judged"][i]),
                         "analytic_stable": bool(cols["stable"][i]), "sim_steady": bool(sim["stable"][i]),
                         **{k: p[k] for k in ("model", "gpu", "prompt_tokens", "output_tokens", "prefill_batch_size",
                                              "prefill_batch_window_ms", "decode_batch_size", "prefill_replicas",
                                              "decode_replicas", "link")},
                         "prefill_rho": float(cols["prefill_rho"][i]), "decode_rho": float(cols["decode_rho"][i])})
    judged_rows = [r for r in rows if r["judged"]]
    worst = sorted(judged_rows, key=lambda r: -abs(r["rel_err"]))[:args.worst]
    print("worst cases:")
    for r in worst:
        print(f"  {r['metric']:<9} {100 * r['rel_err']:+8.1f}% (sim +-{100 * r['sim_rel_hw']:.1f}%) load {r['load']:g} "
              f"prefill rho {r['prefill_rho']:.2f} decode rho {r['decode_rho']:.2f}: {r['model']} on {r['gpu']}, "
              f"P {r['prompt_tokens']:g} O {r['output_tokens']:g}, prefill {r['prefill_replicas']:g} x B "
              f"{r['prefill_batch_size']:g} window {r['prefill_batch_window_ms']:.3g} ms, decode "
              f"{r['decode_replicas']:g} x cap {r['decode_batch_size']:g}, {r['link']}")
    steady = int(sim["stable"].sum())
    unstable_analytic = int(np.sum(sim["stable"].astype(bool) & ~cols["stable"].astype(bool)))
    elapsed = time.perf_counter() - t0
    print(f"{len(points)} points, {steady} steady in the simulator ({unstable_analytic} of them analytic-unstable); "
          f"{elapsed:.0f} s")
    out = {"settings": _settings(args),
           "summary": s, "table": table, "points": len(points), "steady": steady,
           "analytic_unstable_at_steady": unstable_analytic, "worst": worst, "elapsed_s": elapsed}
    if not args.smoke:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "disagg_accuracy.json").write_text(json.dumps(out, indent=1, default=float) + "\n")
        with open(RESULTS / "disagg_accuracy_points.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return out


if __name__ == "__main__":
    main()
