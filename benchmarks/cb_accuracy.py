"""Analytic continuous-batching model against the simulator, on configurations drawn at random.

SPEC 10: "accuracy is judged on configurations drawn at random across the validated domain,
never on chosen points". `sweep.testing.cb_domain.draw(n, seed)` draws them (catalog model,
GPU and tensor-parallel degree for the roofline step line; caps 4-1024; token budgets from
the cap to inf; KV-bound or not; prompt and output CVs 0-2; prompt/output ratios 0.1-100;
service noise; loads 0.05-0.95 of the analytic model's own capacity_rps; its docstring has
the distributions). Every configuration is simulated (`simulate_continuous`, batches of 4
replications under new random streams, added where a compared half-width is too wide)
and the analytic model (`cb_point`) runs on the same inputs. A comparison (point, metric)
is judged when the point lies in SPEC 10's stable region (simulated steady, simulated mean
running below 90% of the cap, simulated reserved KV below 90% of the capacity, i.e. mean
running below 90% of the KV-limited slot count) and the simulator's 95% half-width is below
a third of the metric's target (mean TPOT 5%, mean TTFT and E2E 15%, P50/P90/P99 of TTFT,
TPOT and E2E 25%); a point the simulator cannot pin down within `--max-batches` batches is
excluded from that metric and counted. An analytic `stable = false` on a judged point is a
miss (error +inf).

Run length per point, scaled to how long the engine takes to forget its empty start. By
Little's law one request lifetime spans ``R`` arrivals (``R`` the analytic model's mean
running count at the point, the cap where the model has none), and the running count
relaxes more slowly as the load nears 1, so the relaxation span is taken as
``W = R / (1 - load)`` arrivals (``1 - load`` floored at 0.05). The warmup must cover
``K_w W`` arrivals (``--warmup-lives``, 2) and the measured span ``K_m W``
(``--measured-lives``, 4). Since `simulate_continuous` takes one `CBSimSettings` per call,
the points fall into size classes ``k = 0, 1, ...`` (powers of two): class ``k`` runs
``min(w0 2^k, --max-warmup)`` warmup and ``min(n0 2^k, --max-n-requests)`` measured requests
per replication (``w0 = --warmup``, 120; ``n0 = --n-requests``, 600; caps 4000 each), and a
point takes the smallest class whose warmup and measured span cover its ``K_w W`` and
``K_m W`` (the largest class where the caps bind). Points with a short lifetime keep
120 + 600 requests; the longest-lived, most loaded ones get up to 4000 + 4000. Each class is
simulated by its own call in every round of batches (one compilation per class); the
adaptive batches and the time budget below are unchanged. Multi-step draws
(``--scheduler-steps``) draw their loads against the one-step capacity, which a point's own
``k`` can lower: their load is the larger of the drawn one and the rate over the analytic
capacity at ``k``, and the points at 0.95 of it or beyond run ``LONG_RUN`` (10000 + 30000
requests), so that a mild overload fails the not-steady test (two such points, at 1.07 and
1.09 of the simulated capacity, had passed it with 4000 + 4000 and been judged).

    python benchmarks/cb_accuracy.py            # 300 points, seed 24: ~40 min on two busy cores
    python benchmarks/cb_accuracy.py --tiny     # seconds: smoke test, no figure, no cache
    python benchmarks/cb_accuracy.py --n-requests 1000 --warmup 200 --points 40 --seed 240 \\
        --min-batches 2 --max-batches 6 --budget-s 900 \\
        --reference tests/data/cb_accuracy_reference.csv   # the regression test's data
    python benchmarks/cb_accuracy.py --kv-admission on_demand --points 150 --seed 252 --budget-s 900
        # on-demand KV simulated by the compiled event loop, judged against the reserve model,
        # split by the trust rule (benchmarks/results/cb_accuracy_points_on_demand.csv)
    python benchmarks/cb_accuracy.py --scheduler-steps 2 4 8 16 --points 150 --seed 253 --budget-s 900
        # multi-step scheduling: each point's k drawn from the list, simulated by the compiled
        # event loop and judged against the analytic model's windows at that k
        # (benchmarks/results/cb_accuracy_points_steps.csv)
    python benchmarks/cb_accuracy.py --scheduler-policy prefill_first --scheduler-steps 2 4 8 16 --points 120 \\
        --seed 261 --budget-s 900   # the same under prefill_first (decode windows between chains of prompt steps)

The simulated results are kept in benchmarks/results/cb_accuracy_sim.npz together with the
drawn inputs and the settings; a later run with the same settings reuses both (the drawn
inputs too, so a rewritten analytic model is judged on the same points in seconds;
``--resim`` redraws and resimulates). Writes docs/cb_accuracy.png (relative error against
load per metric) and benchmarks/results/cb_accuracy_points.csv (one row per point).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np

from sweep.models.continuous.sim import CBSimSettings, simulate_continuous, student_t975
from sweep.testing.cb_domain import CB_KEYS, QS, TARGETS, analytic, analytic_by_steps, draw, judge, region_of, wide

OUT = ROOT / "docs" / "cb_accuracy.png"
RESULTS = ROOT / "benchmarks" / "results"
LABELS = ("load", "capacity_rps", "model", "gpu", "tp", "weight_bytes", "moe", "kv_bound", "chunked", "kv_slots")
BATCH = 4  # replications per batch (one compiled shape for every batch)
SIM_KEYS = tuple(TARGETS) + ("mean_running", "kv_util", "drop_rate", "step_mean", "preempt", "recomputed")
SAMPLER_VERSION = 1  # bump when sweep.testing.cb_domain.draw changes what a seed draws
#: multi-step draws: warmup and measured requests of the points at 0.95 of their capacity at k
#: or beyond (`size_classes`)
LONG_RUN = (10000, 30000)


def size_classes(p: dict[str, np.ndarray], args) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Per point its size class (int64[n]) and per class ``(warmup, n_requests)``: the
    module docstring's rule (relaxation span ``W = R / (1 - load)`` arrivals, ``R`` the
    analytic mean running count)."""
    n = p["lam"].size
    settings = []
    k = 0
    while True:
        w = min(args.warmup * 2 ** k, max(args.max_warmup, args.warmup))
        m = min(args.n_requests * 2 ** k, max(args.max_n_requests, args.n_requests))
        settings.append((int(w), int(m)))
        if (w >= args.max_warmup and m >= args.max_n_requests) or k >= 20:
            break
        k += 1
    if len(settings) == 1:
        return np.zeros(n, np.int64), settings
    r = analytic({k: p[k] for k in CB_KEYS}, 0.9, prefill_first=args.prefill_first)["mean_running"]
    r = np.where(np.isfinite(r) & (r > 0), r, p["cap"])
    load = p["load"]
    if args.scheduler_steps != [1]:
        # the loads were drawn against the one-step capacity; a point's own k can leave it
        # less: its runs are sized by the load at k, and a point at 0.95 of it or beyond gets
        # a long class of its own, so that a mild overload shows in the simulator (4000 +
        # 4000 requests at 1.07 or 1.09 of the capacity at k passed the not-steady test)
        cap_k = analytic_by_steps({k: p[k] for k in CB_KEYS}, p["steps"], prefill_first=args.prefill_first)[
            "capacity_rps"]
        load = np.where(np.isfinite(cap_k) & (cap_k > 0), np.maximum(load, p["lam"] / np.maximum(cap_k, 1e-300)),
                        load)
    span = r / np.maximum(1.0 - load, 0.05)
    ws = np.array([w for w, _ in settings], dtype=np.float64)
    ms = np.array([m for _, m in settings], dtype=np.float64)
    enough = (ws[None, :] >= args.warmup_lives * span[:, None]) & (ms[None, :] >= args.measured_lives * span[:, None])
    cls = np.where(enough.any(axis=1), np.argmax(enough, axis=1), len(settings) - 1).astype(np.int64)
    if args.scheduler_steps != [1]:
        settings.append(LONG_RUN)
        cls = np.where(load >= 0.95, len(settings) - 1, cls)
    return cls, settings


def simulate(p: dict[str, np.ndarray], ids: np.ndarray, n_requests: int, warmup: int, seed: int,
             batches: np.ndarray, first: np.ndarray, policy: str = "chunked",
             kv_admission: str = "reserve", steps: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Batches ``first[i] .. first[i] + batches[i] - 1`` of point i (a batch = `BATCH`
    replications under scenario id ``ids[i] + 100000 * batch``), one call for all, every
    replication ``warmup`` + ``n_requests`` requests.
    Returns per (point, batch) rows: every SIM_KEYS mean and half-width, and ``stable``."""
    rows = np.repeat(np.arange(ids.size), batches)
    b = np.concatenate([first[i] + np.arange(batches[i]) for i in range(ids.size)]).astype(np.int64)
    params = {k: p[k][rows] for k in CB_KEYS}
    params["queue_capacity"] = np.full(rows.size, np.inf)
    st = CBSimSettings(n_requests=n_requests, warmup=warmup, replications=BATCH, seed=seed)
    k_row = np.ones(rows.size, np.int64) if steps is None else steps[rows].astype(np.int64)
    if kv_admission == "reserve" and (k_row == 1).all():
        s = simulate_continuous(params, st, percentile=0.9, more_percentiles=(0.5, 0.99),
                                scenario_ids=ids[rows] + 100000 * b, scheduler_policy=policy)
    else:  # on demand or multi-step: the compiled event loop, the same streams and statistics
        from sweep.models.continuous import loop

        s = {}
        for k in np.unique(k_row):
            m = k_row == k
            part = loop.simulate_continuous({key: v[m] for key, v in params.items()}, st, percentile=0.9,
                                            more_percentiles=(0.5, 0.99), scenario_ids=(ids[rows] + 100000 * b)[m],
                                            scheduler_policy=policy, kv_admission=kv_admission,
                                            scheduler_steps=int(k))
            for key, v in part.items():
                s.setdefault(key, np.empty(rows.size, np.asarray(v).dtype))[m] = v
    out = {"row": rows, "stable": s["stable"], "steps": s["steps"] * BATCH}
    for k in SIM_KEYS:
        met, _, kind = k.partition("_")
        if k in TARGETS:
            src = f"{met}_p_s" if kind == "p90" else f"{k}_s"
            out[k], out[k + "_hw"] = s[src], s[src.replace("_s", "_hw_s") if kind == "p90" else f"{k}_hw_s"]
        else:
            name = "step_mean_s" if k == "step_mean" else k
            zero = np.zeros(rows.size)  # the JAX simulator never preempts: no preempt_hw, no recomputed
            out[k], out[k + "_hw"] = s.get(name, zero), s.get(name + "_hw", zero)
    return out


def combine(parts: list[dict[str, np.ndarray]], n: int) -> dict[str, np.ndarray]:
    """Pool batches per point exactly: a batch of R replications with mean m and half-width
    h has sample variance (h sqrt(R) / t_R)^2; pooled mean and variance of the union, with
    the Student-t half-width of all its replications. Unstable anywhere -> +inf latencies."""
    tq = student_t975(BATCH - 1)
    rows = np.concatenate([q["row"] for q in parts])
    res: dict[str, np.ndarray] = {"reps": np.bincount(rows, minlength=n).astype(np.float64) * BATCH}
    stab = np.ones(n, bool)
    for q in parts:
        np.logical_and.at(stab, q["row"], q["stable"])
    res["stable"] = stab
    res["steps"] = np.bincount(rows, np.concatenate([q["steps"] for q in parts]), minlength=n)
    reps = np.maximum(res["reps"], 1.0)
    for k in SIM_KEYS:
        m = np.concatenate([q[k] for q in parts])
        hw = np.concatenate([q[k + "_hw"] for q in parts])
        fin = np.isfinite(m) & np.isfinite(hw)
        mm, hh = np.where(fin, m, 0.0), np.where(fin, hw, 0.0)
        cnt = np.bincount(rows, minlength=n).astype(np.float64)
        mean = np.bincount(rows, mm, minlength=n) / np.maximum(cnt, 1)
        var_in = (hh * math.sqrt(BATCH) / tq) ** 2
        ss = np.bincount(rows, (BATCH - 1) * var_in + BATCH * (mm - mean[rows]) ** 2, minlength=n)
        bad = np.bincount(rows, ~fin, minlength=n) > 0
        r = reps
        t = np.array([student_t975(int(x) - 1) for x in r])
        half = t * np.sqrt(ss / np.maximum(r - 1, 1) / r)
        latency = k in TARGETS
        res[k] = np.where(bad | (latency & ~stab), np.inf, mean)
        res[k + "_hw"] = np.where(bad | (latency & ~stab), np.inf, half)
    return res


def run_sim(p, args, log) -> dict[str, np.ndarray]:
    """The adaptive scheme: ``--min-batches`` batches for every point; then, while some
    point in the region has a metric whose half-width is too wide but, scaled as
    t_{R-1} / sqrt(R), would be narrow enough within ``--max-batches``, the batches that
    scaling asks for (at least one more), within ``--budget-s`` seconds of simulation
    (estimated from the rate of the rounds so far; the smallest requests served first)."""
    n = p["lam"].size
    ids = np.arange(n, dtype=np.int64)
    seed = args.sim_seed
    have = np.zeros(n, np.int64)
    parts = []
    todo = np.full(n, args.min_batches, np.int64)
    cls, settings = size_classes(p, args)
    log("# size classes (warmup + measured requests per replication: points): " + ", ".join(
        f"{w} + {m}: {int((cls == c).sum())}" for c, (w, m) in enumerate(settings) if (cls == c).any()))
    start = time.perf_counter()
    for rnd in range(8):
        sel = np.flatnonzero(todo > 0)
        if sel.size == 0:
            break
        t0 = time.perf_counter()
        for c, (w, m) in enumerate(settings):
            sc = sel[cls[sel] == c]
            if sc.size == 0:
                continue
            sub = {k: v[sc] for k, v in p.items() if k in CB_KEYS}
            part = simulate(sub, ids[sc], m, w, seed, todo[sc], have[sc], args.scheduler_policy, args.kv_admission,
                            p["steps"][sc])
            part["row"] = sc[part["row"]]
            parts.append(part)
        have += todo
        log(f"# round {rnd + 1}: {int(todo.sum())} batches of {BATCH} replications over {sel.size} points "
            f"in {time.perf_counter() - t0:.0f} s")
        s = combine(parts, n)
        reg = region_of(p, s)
        todo = np.zeros(n, np.int64)
        r = s["reps"]
        t_now = np.array([student_t975(int(x) - 1) for x in r])
        for k, w in wide(s).items():
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = s[k + "_hw"] / np.abs(s[k]) / t_now * np.sqrt(r)  # ~ t-free spread per sqrt(rep)
                need_r = (rel * 2.0 / (TARGETS[k] / 3.0)) ** 2  # t ~ 2 at many replications
            need_b = np.ceil(np.nan_to_num(need_r, nan=np.inf, posinf=np.inf) / BATCH) - have
            ok = reg & w & np.isfinite(need_b) & (need_b + have <= args.max_batches)
            todo = np.where(ok, np.maximum(todo, np.maximum(need_b, 1)), todo).astype(np.int64)
        todo = np.minimum(todo, args.max_batches - have)
        # the time budget: the smallest requests first, as many batches as the rate so far affords
        # (the per-batch rate averaged over the size classes run so far)
        spent = time.perf_counter() - start
        per_batch = spent / max(int(have.sum()), 1)
        afford = int((args.budget_s - spent) / per_batch)
        if int(todo.sum()) > afford:
            order = np.argsort(todo + 1000 * (todo == 0), kind="stable")
            keep = order[np.cumsum(todo[order]) <= afford]
            log(f"# time budget ({args.budget_s:.0f} s): {np.count_nonzero(todo) - keep.size} points get no "
                "more batches")
            todo = np.where(np.isin(np.arange(n), keep), todo, 0)
    return combine(parts, n)


def stamp_of(args) -> np.ndarray:
    return np.array([args.points, args.seed, args.sim_seed, args.n_requests, args.warmup, BATCH,
                     args.min_batches, args.max_batches, args.budget_s, SAMPLER_VERSION, args.max_n_requests,
                     args.max_warmup, args.warmup_lives, args.measured_lives, float(args.prefill_first)]
                    + ([1.0] if args.kv_admission == "on_demand" else [])
                    + ([float(k) for k in args.scheduler_steps] + [float(v) for v in LONG_RUN]
                       if args.scheduler_steps != [1] else []),
                    dtype=np.float64)


def load_or_simulate(args, log):
    variant = ("_prefill_first" if args.prefill_first else "")
    variant += "_on_demand" if args.kv_admission == "on_demand" else ""
    variant += "_steps" + "-".join(map(str, args.scheduler_steps)) if args.scheduler_steps != [1] else ""
    cache = RESULTS / f"cb_accuracy_sim_{args.points}_{args.seed}{variant}.npz"
    if args.points == 300 and args.seed == 24 and not variant:
        cache = RESULTS / "cb_accuracy_sim.npz"
    stamp = stamp_of(args)
    if cache.exists() and not args.resim and not args.tiny:
        old = dict(np.load(cache, allow_pickle=False))
        if old["stamp"].shape == stamp.shape and np.array_equal(old["stamp"], stamp):
            p = {k: old["in_" + k] for k in CB_KEYS + LABELS}
            p["steps"] = old.get("in_steps", np.ones(p["lam"].size))
            s = {k[4:]: v for k, v in old.items() if k.startswith("sim_")}
            log(f"# simulated results and drawn inputs from {cache.relative_to(ROOT)} (--resim to redo)")
            return p, s, 0.0
    t0 = time.perf_counter()
    p = draw(args.points, args.seed, prefill_first=args.prefill_first)
    p["steps"] = draw_steps(args.points, args.seed, args.scheduler_steps)
    log(f"# drew {args.points} configurations (seed {args.seed}) in {time.perf_counter() - t0:.0f} s")
    t0 = time.perf_counter()
    s = run_sim(p, args, log)
    sim_s = time.perf_counter() - t0
    log(f"# simulated {s['steps'].sum():.3g} engine steps in {sim_s:.0f} s: {s['steps'].sum() / sim_s:.3g} steps/s "
        "(compilation included)")
    if not args.tiny:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, stamp=stamp, **{"in_" + k: p[k] for k in CB_KEYS + LABELS + ("steps",)},
                 **{"sim_" + k: v for k, v in s.items()})
    return p, s, sim_s


def draw_steps(n: int, seed: int, choices: list[int]) -> np.ndarray:
    """Per point its ``scheduler_steps``, drawn uniformly from ``choices`` (its own stream:
    the configurations are `draw`'s whatever the choices)."""
    return np.random.default_rng([seed, 25]).choice(np.asarray(choices, np.float64), n)


def load_band(x):
    return np.digitize(x, [0.35, 0.65, 0.85])


BANDS = ("load < 0.35", "0.35-0.65", "0.65-0.85", ">= 0.85")


def report(p, a, s, j, log) -> dict:
    n = p["lam"].size
    reg = region_of(p, s)
    log(f"# {n} points; in the stable region: {int(reg.sum())}; not steady in the simulator: "
        f"{int((~s['stable']).sum())}; steady but mean running >= 0.9 of the cap or of the KV slots: "
        f"{int((s['stable'] & ~reg).sum())}")
    log(f"# replications per point: median {np.median(s['reps']):.0f}, max {s['reps'].max():.0f}; "
        f"judged points where the model says unstable: {int((reg & ~a['stable']).sum())}\n")
    log("| metric | target | judged | within target | share | median abs err | max abs err "
        "| excluded (sim half-width > target/3) |")
    log("|---|---:|---:|---:|---:|---:|---:|---:|")
    table = {}
    tot_ok = tot = 0
    for k, tol in TARGETS.items():
        jm = j[k]
        e = np.abs(jm["err"][jm["judged"]])
        nj, nok = int(jm["judged"].sum()), int(jm["ok"].sum())
        tot, tot_ok = tot + nj, tot_ok + nok
        med = float(np.median(e)) if e.size else math.nan
        mx = float(np.max(e)) if e.size else math.nan
        table[k] = dict(judged=nj, ok=nok, median=med, max=mx, excluded=int(jm["excluded"].sum()))
        log(f"| {k} | {tol:.0%} | {nj} | {nok} | {nok / max(nj, 1):.1%} | {med:.1%} | {mx:.1%} "
            f"| {table[k]['excluded']} |")
    share = tot_ok / max(tot, 1)
    log(f"| **all** | | {tot} | {tot_ok} | **{share:.1%}** | | | "
        f"{sum(t['excluded'] for t in table.values())} |")
    log(f"\n# overall: {tot_ok}/{tot} = {share:.1%} of comparisons within target (goal 95%)\n")

    # worst points: the largest error relative to its target over the judged metrics
    score = np.zeros(n)
    worst_metric = np.array([""] * n, dtype=object)
    for k, tol in TARGETS.items():
        r = np.where(j[k]["judged"], np.abs(j[k]["err"]) / tol, 0.0)
        upd = r > score
        score = np.where(upd, r, score)
        worst_metric = np.where(upd, k, worst_metric)
    order = np.argsort(-score)[:15]
    log("15 worst points (error / target of their worst metric):\n")
    log("| # | model, gpu, tp | load | N | M | C (slots) | P mean, cv | O mean, cv | noise | sim running "
        "| worst: err (sim hw) | misses |")
    log("|---:|---|---:|---:|---:|---:|---|---|---:|---:|---|---:|")
    worst = []
    for i in order:
        if score[i] <= 1.0:
            break
        k = worst_metric[i]
        misses = sum(int(j[m]["judged"][i] and not j[m]["ok"][i]) for m in TARGETS)
        hw = s[k + "_hw"][i] / s[k][i]
        kv = "inf" if not np.isfinite(p["kv_capacity_tokens"][i]) else \
            f"{p['kv_capacity_tokens'][i]:.0f} ({p['kv_slots'][i]:.1f})"
        log(f"| {i} | {p['model'][i]}, {p['gpu'][i]}, {p['tp'][i]:.0f} | {p['load'][i]:.2f} | "
            f"{p['cap'][i]:.0f} | {p['max_batched_tokens'][i]:.0f} | {kv} | "
            f"{p['prompt_mean'][i]:.0f}, {p['prompt_cv'][i]:.2f} | {p['output_mean'][i]:.0f}, "
            f"{p['output_cv'][i]:.2f} | {p['service_cv'][i]:.2f} | {s['mean_running'][i]:.1f} | "
            f"{k}: {j[k]['err'][i]:+.0%} (+-{hw:.0%}) | {misses} |")
        worst.append(int(i))

    log("\nBy region (share of judged comparisons within target, count):\n")
    regions = {
        "KV-bound": p["kv_bound"], "not KV-bound": ~p["kv_bound"],
        "chunked (M finite)": p["chunked"], "M = inf": ~p["chunked"],
        **{b: load_band(p["load"]) == i for i, b in enumerate(BANDS)},
        "dense": ~p["moe"], "MoE": p["moe"],
        "service noise": p["service_cv"] > 0, "no noise": p["service_cv"] == 0,
    }
    log("| region | points judged | all metrics | means | percentiles | tpot_mean | ttft_mean | ttft_p99 |")
    log("|---|---:|---:|---:|---:|---:|---:|---:|")
    breakdown = {}
    for name, mask in regions.items():
        def share_of(keys, mask=mask):
            ok = sum(int((j[k]["ok"] & mask).sum()) for k in keys)
            nj = sum(int((j[k]["judged"] & mask).sum()) for k in keys)
            return f"{ok / nj:.0%} ({nj})" if nj else "-", ok, nj
        allk = share_of(TARGETS)
        breakdown[name] = dict(ok=allk[1], judged=allk[2])
        pts = int((mask & reg).sum())
        log(f"| {name} | {pts} | {allk[0]} | {share_of([k for k in TARGETS if k.endswith('mean')])[0]} | "
            f"{share_of([k for k in TARGETS if not k.endswith('mean')])[0]} | {share_of(['tpot_mean'])[0]} | "
            f"{share_of(['ttft_mean'])[0]} | {share_of(['ttft_p99'])[0]} |")
    return dict(points=n, region=int(reg.sum()), share=share, judged=tot, table=table, worst=worst,
                breakdown=breakdown)


def trusted_split(p, a, j, log) -> dict:
    """`kv_admission = "on_demand"`: the comparisons of points the analytic model trusts (the
    `analytic_trusted` rule with its on-demand clause, `reservations_never_block`) and of the
    rest, each with its share within target."""
    from sweep.models.continuous.confidence import analytic_trusted, reservations_never_block

    base = np.asarray(analytic_trusted(mean_running=a["mean_running"], slots=a["slots"], lam=p["lam"],
                                        capacity_rps=a["capacity_rps"], mem_ok=np.ones(p["lam"].size, bool)))
    never = np.asarray(reservations_never_block(
        mean_running=a["mean_running"], cap=p["cap"], kv_tokens=p["kv_capacity_tokens"],
        prompt_tokens=p["prompt_mean"], prompt_cv=p["prompt_cv"], output_tokens=p["output_mean"],
        output_cv=p["output_cv"], block=p["block_tokens"]))
    out = {}
    log("\nThe analytic model's reserve values against the on-demand simulation, by the trust rule:\n")
    log("| points | count | judged | within target | share |")
    log("|---|---:|---:|---:|---:|")
    for name, mask in (("trusted (reservations never block)", base & never),
                       ("trusted before the on-demand clause, reservations may block", base & ~never),
                       ("untrusted", ~(base & never))):
        judged = sum(int((j[k]["judged"] & mask).sum()) for k in TARGETS)
        ok = sum(int((j[k]["ok"] & mask).sum()) for k in TARGETS)
        share = ok / judged if judged else float("nan")
        log(f"| {name} | {int(mask.sum())} | {judged} | {ok} | {100 * share:.1f}% |")
        out[name] = (judged, ok)
    return out


def write_points(p, a, s, j, path: Path) -> None:
    reg = region_of(p, s)
    zero = np.zeros(p["lam"].size)  # a cache simulated before the preemption columns
    head = list(CB_KEYS) + list(LABELS) + ["steps", "sim_reps", "sim_stable", "region", "sim_mean_running",
                                           "sim_kv_util", "sim_drop_rate", "model_stable", "model_capacity_rps",
                                           "model_mean_running", "model_slots", "model_kv_util", "model_p_wait",
                                           "sim_preempt", "sim_recomputed"]
    for k in TARGETS:
        head += [f"sim_{k}_s", f"sim_{k}_hw_s", f"model_{k}_s", f"{k}_rel_err", f"{k}_judged", f"{k}_ok"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        for i in range(p["lam"].size):
            row = [p[k][i] for k in CB_KEYS + LABELS + ("steps",)] + [
                s["reps"][i], bool(s["stable"][i]), bool(reg[i]), s["mean_running"][i], s["kv_util"][i],
                s["drop_rate"][i], bool(a["stable"][i]), a["capacity_rps"][i], a["mean_running"][i], a["slots"][i],
                a["kv_util"][i], a["p_wait"][i], s.get("preempt", zero)[i], s.get("recomputed", zero)[i]]
            for k in TARGETS:
                row += [s[k][i], s[k + "_hw"][i], a[k][i], j[k]["err"][i], bool(j[k]["judged"][i]),
                        bool(j[k]["ok"][i])]
            w.writerow([repr(float(v)) if isinstance(v, (float, np.floating)) else v for v in row])


def write_reference(p, s, args, path: Path) -> None:
    """The regression test's data: inputs, labels and the simulated values with their 95%
    half-widths (tests/test_cb_accuracy.py)."""
    head = list(CB_KEYS) + list(LABELS) + ["steps", "sim_reps", "sim_stable", "sim_mean_running", "sim_kv_util",
                                           "sim_preempt"]
    for k in TARGETS:
        head += [f"sim_{k}_s", f"sim_{k}_hw_s"]
    cmd = " ".join(["python benchmarks/cb_accuracy.py"] + (sys.argv[1:] if args.argv is None else args.argv))
    how = "the compiled event loop, kv_admission on_demand, " if args.kv_admission == "on_demand" else ""
    if args.scheduler_steps != [1]:
        how = f"the compiled event loop, scheduler_steps drawn from {args.scheduler_steps} (column steps), "
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        f.write(f"# Produced by `{cmd}` on {time.strftime('%Y-%m-%d', time.gmtime())}: {args.points} "
                f"configurations drawn by sweep.testing.cb_domain.draw(n={args.points}, seed={args.seed}), each "
                f"simulated ({how}simulate_continuous, sim seed {args.sim_seed}, {args.n_requests} measured + "
                f"{args.warmup} warmup requests per replication in the smallest size class, up to "
                f"{args.max_n_requests} + {args.max_warmup} by the relaxation rule of the script's docstring, "
                f"{args.min_batches}-{args.max_batches} batches "
                f"of {BATCH} replications, scenario id = row + 100000 * batch). sim_* values are simulator "
                f"means over sim_reps replications, *_hw_s their 95% Student-t half-widths (s). "
                f"Percentiles: linear interpolation per replication, averaged.\n")
        w = csv.writer(f)
        w.writerow(head)
        for i in range(p["lam"].size):
            row = [p[k][i] for k in CB_KEYS + LABELS + ("steps",)] + [s["reps"][i], bool(s["stable"][i]),
                                                        s["mean_running"][i], s["kv_util"][i],
                                                        s.get("preempt", np.zeros(p["lam"].size))[i]]
            for k in TARGETS:
                row += [s[k][i], s[k + "_hw"][i]]
            w.writerow([repr(float(v)) if isinstance(v, (float, np.floating)) else v for v in row])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=300)
    ap.add_argument("--seed", type=int, default=24, help="the draw's seed (24: issue 24)")
    ap.add_argument("--sim-seed", type=int, default=11)
    ap.add_argument("--n-requests", type=int, default=600, help="measured requests of the smallest size class")
    ap.add_argument("--warmup", type=int, default=120, help="warmup requests of the smallest size class")
    ap.add_argument("--max-n-requests", type=int, default=4000, help="measured requests of the largest class")
    ap.add_argument("--max-warmup", type=int, default=4000, help="warmup requests of the largest class")
    ap.add_argument("--warmup-lives", type=float, default=2.0,
                    help="warmup >= this many relaxation spans R / (1 - load) (arrivals)")
    ap.add_argument("--measured-lives", type=float, default=4.0,
                    help="measured requests >= this many relaxation spans R / (1 - load)")
    ap.add_argument("--min-batches", type=int, default=1, help=f"batches of {BATCH} replications for every point")
    ap.add_argument("--max-batches", type=int, default=4, help="at most this many for a point")
    ap.add_argument("--budget-s", type=float, default=2400.0,
                    help="no further rounds of batches past this many seconds of simulation")
    ap.add_argument("--smoke", "--tiny", dest="tiny", action="store_true", help="seconds: no figure, no cache")
    ap.add_argument("--resim", action="store_true", help="ignore the cached simulation")
    ap.add_argument("--reference", type=Path, help="also write the regression test's CSV there")
    ap.add_argument("--scheduler-policy", choices=("chunked", "prefill_first"), default="chunked",
                    help="the engine's scheduler policy, in the simulator and the analytic model alike")
    ap.add_argument("--kv-admission", choices=("reserve", "on_demand"), default="reserve",
                    help="on_demand: simulate vLLM's on-demand KV with preemption (the compiled event loop) and "
                         "judge the analytic model's reserve values against it, inside and outside the rule that "
                         "trusts them (KV that cannot bind)")
    ap.add_argument("--scheduler-steps", type=int, nargs="+", default=[1], metavar="K",
                    help="decode steps per scheduling decision, each point's drawn from these (multi-step "
                         "scheduling: the compiled event loop against the analytic model's windows)")
    args = ap.parse_args(argv)
    args.prefill_first = args.scheduler_policy == "prefill_first"
    args.argv = argv
    if args.tiny:
        args.points, args.n_requests, args.warmup, args.min_batches, args.max_batches = 6, 200, 50, 1, 1
        args.max_n_requests, args.max_warmup = 200, 50  # one size class
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    t0 = time.perf_counter()
    p, s, sim_s = load_or_simulate(args, log)
    t1 = time.perf_counter()
    a = analytic_by_steps(p, p["steps"], prefill_first=args.prefill_first)
    j = judge(p, a, s)
    log(f"# analytic model on {p['lam'].size} points x {len(QS)} percentiles in {time.perf_counter() - t1:.1f} s; "
        f"simulation {sim_s:.0f} s")
    out = report(p, a, s, j, log)
    out["sim_s"] = sim_s
    if args.kv_admission == "on_demand":
        out["trusted_split"] = trusted_split(p, a, j, log)
    if args.reference is not None and not args.tiny:
        write_reference(p, s, args, args.reference)
        log(f"\nwrote {args.reference}")
    if args.tiny:
        return out
    if args.scheduler_steps != [1]:
        write_points(p, a, s, j, RESULTS / ("cb_accuracy_points_prefill_first_steps.csv" if args.prefill_first
                                            else "cb_accuracy_points_steps.csv"))
    elif args.kv_admission == "on_demand":
        write_points(p, a, s, j, RESULTS / "cb_accuracy_points_on_demand.csv")
    elif args.prefill_first:  # the published figure and table are the default policy's
        write_points(p, a, s, j, RESULTS / "cb_accuracy_points_prefill_first.csv")
    else:
        write_points(p, a, s, j, RESULTS / "cb_accuracy_points.csv")
        figure(p, j)
    log(f"\n# total {time.perf_counter() - t0:.0f} s")
    return out


def figure(p, j) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 4, figsize=(14, 9), sharex=True)
    for ax, k in zip(axes.ravel(), TARGETS, strict=True):
        tol = TARGETS[k]
        jm = j[k]
        x = p["load"][jm["judged"]]
        e = np.clip(jm["err"][jm["judged"]], -1.0, 1.0)
        ok = jm["ok"][jm["judged"]]
        ax.axhspan(-tol, tol, color="tab:green", alpha=0.12)
        ax.scatter(x[ok], e[ok], s=9, color="tab:blue", label="within target")
        ax.scatter(x[~ok], e[~ok], s=14, color="tab:red", marker="x", label="outside target")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_ylim(-1.05, 1.05)
        ax.set_title(f"{k}: {ok.sum()}/{ok.size} within {tol:.0%}", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("load = lam / capacity_rps (model)", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("model / sim - 1 (clipped to +-1)", fontsize=8)
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle("Continuous batching: analytic model vs simulator on randomly drawn configurations "
                 "(green band: target)", fontsize=10)
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=70)
    print(f"\nwrote {OUT} ({OUT.stat().st_size / 1e3:.0f} KB)")


if __name__ == "__main__":
    main()
