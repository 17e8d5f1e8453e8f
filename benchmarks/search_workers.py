"""Search workers: trials/s of `sweep search` with 1, 2 and 4 worker processes on one
PostgreSQL study, and the answer's quality at equal budget.

Each run is one fresh study (a fresh database on a throwaway local PostgreSQL server,
`tests/_postgres.py`, fsync on, asynchronous commit) of a dynamic-batching Llama 3.1 70B
scenario at 1000 requests/s, the second study of `grids/search-fleet.toml` before that
example moved to continuous serving (gpu x gpus_per_replica x replicas x batch_size: 98,304 combinations,
min_cost under a P99 SLO), `--trials` trials in rounds of `--batch`, started as N `sweep
search` processes at once. trials/s counts the COMPLETE trials over the span from the first
trial's start to the last one's end (process start-up and compilation excluded); wall s is
the whole command, start-up included. Quality: the published answer (the study's best
feasible trial, exactly as `sweep run` would write it) against the exact optimum, which the
space is small enough to enumerate: the share of seeds whose answer is the exact optimum,
and the mean relative gap. Without PostgreSQL binaries the studies use the journal file
(several processes on one host) and say so.

    python benchmarks/search_workers.py [--trials 256] [--batch 64] [--seeds 5] [--workers 1,4] [--speed-workers 2]
        [--smoke]

(``--workers``: run for every seed; ``--speed-workers``: for the first seed only, a speed
figure. ``--smoke``: 16 trials in rounds of 8, 1 and 2 workers, one seed; nothing written
to benchmarks/results/.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the throwaway PostgreSQL server of the tests

#: the former (dynamic-batching) grids/search-fleet.toml at 1000 requests/s only, with the budget,
#: round size, seed and storage of each run.
STUDY = """
name = "search-workers"
[grid]
arrival_rps      = 1000.0
model            = "llama-3.1-70b"
seq_len          = 4096
mean_seq_len     = 1500
batch_window_ms  = inf
slo_ms           = 2000.0
percentile       = 0.99
rho_max          = 0.85
[options]
kv_allocation    = "paged"
reserve_fraction = 0.1
[output]
points           = "none"
[search]
objective = "min_cost"
trials    = {trials}
batch     = {batch}
seed      = {seed}
storage   = "{storage}"
[search.params]
gpu              = ["a100-80gb", "h100-sxm", "h200"]
gpus_per_replica = [1, 2, 4, 8]
replicas         = {{low = 1, high = 32}}
batch_size       = {{low = 1, high = 256, log = true}}
"""


def _span_rate(study) -> float:
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
    return len(done) / max(span, 1e-9)


def one_study(n: int, seed: int, trials: int, batch: int, d: Path, server) -> dict:
    """N `sweep search` processes on one fresh study; its rate, its answer and the exact optimum."""
    import optuna

    from sweep import grid as spec
    from sweep.search import run_search
    from sweep.search.study import open_storage

    tag = f"w{n}s{seed}"
    env = dict(os.environ)
    storage = "journal"
    if server is not None:
        storage = server.create_database(tag)
        env = server.env()
        os.environ["PGPASSWORD"] = server.password
    grid, out = d / f"{tag}.toml", d / tag
    grid.write_text(STUDY.format(trials=trials, batch=batch, seed=seed, storage=storage))
    cmd = [sys.executable, "-m", "sweep", "search", str(grid), "--out", str(out), "--quiet"]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    for proc in procs:
        _, err = proc.communicate(timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"sweep search failed ({n} workers, seed {seed}): {err.strip()}")
    wall = time.perf_counter() - t0
    g = spec.load(grid)
    store = open_storage(g.search, out)
    (summary,) = optuna.get_all_study_summaries(store)
    study = optuna.load_study(study_name=summary.study_name, storage=store)
    rate = _span_rate(study)
    owners = {json.dumps(t.user_attrs.get("sweep_owner"), sort_keys=True) for t in study.trials}
    count = len(study.trials)
    (answer,) = run_search(g, out).records()  # the published answer: asks no trial (the budget is used)
    return {"workers": n, "seed": seed, "trials": count, "complete": answer["trials"], "owners": len(owners),
            "trials_per_s": rate, "wall_s": wall, "value": answer["objective_value"],
            "exact": answer["exact_value"], "gap_rel": answer["gap_rel"], "found_exact": bool(answer["found_exact"]),
            "storage": "postgresql" if server is not None else "journal"}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--workers", default="1,4", help="worker counts run for every seed (speed and quality)")
    ap.add_argument("--speed-workers", default="2", help="worker counts run for the first seed only (speed)")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run that writes nothing (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.trials, args.batch, args.seeds, args.workers, args.speed_workers = 16, 8, 1, "1", "2"
    every = [int(x) for x in args.workers.split(",") if x]
    first = [int(x) for x in args.speed_workers.split(",") if x and int(x) not in every]
    counts = sorted(every + first)
    from _postgres import PostgresServer

    from sweep.runner.progress import compile_cache

    why = PostgresServer.missing()
    server = None
    if why is not None:
        print(f"(PostgreSQL not available: {why}; the journal file instead)")
    else:
        settings = None if args.smoke else {"fsync": "on", "synchronous_commit": "off", "full_page_writes": "on"}
        server = PostgresServer(settings=settings).__enter__()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp, compile_cache(str(Path(tmp) / "jax-cache")):
            d = Path(tmp)
            if not args.smoke:  # compile the kernels into the cache first: no study pays for it
                one_study(1, 99, args.batch, args.batch, d, server)
            for seed in range(args.seeds):  # seeds outermost: a shared machine's load falls on every count alike
                for n in counts:
                    if n in every or seed == 0:
                        rows.append(one_study(n, seed, args.trials, args.batch, d, server))
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    storage = rows[0]["storage"]
    print(f"{storage} study, {args.trials} trials in rounds of {args.batch}, seeds 0..{args.seeds - 1}: "
          "trials/s (first trial start to last end), wall s (start-up included), answer against the exact optimum")
    print(f"  {'workers':>7} {'trials/s':>9} {'wall s':>8} {'found exact':>12} {'mean gap':>9} {'values (USD/h)':<30}")
    table = {}
    for n in counts:
        mine = [r for r in rows if r["workers"] == n]
        found = sum(r["found_exact"] for r in mine) / len(mine)
        gaps = [r["gap_rel"] for r in mine if r["gap_rel"] is not None]
        table[n] = {"trials_per_s": statistics.median(r["trials_per_s"] for r in mine),
                    "wall_s": statistics.median(r["wall_s"] for r in mine), "found_exact": found,
                    "mean_gap": statistics.fmean(gaps) if gaps else None, "studies": len(mine)}
        values = ", ".join(f"{r['value']:g}" for r in mine)
        gap = "-" if table[n]["mean_gap"] is None else f"{table[n]['mean_gap']:.1%}"
        print(f"  {n:>7} {table[n]['trials_per_s']:>9.2f} {table[n]['wall_s']:>8.1f} "
              f"{sum(r['found_exact'] for r in mine):>5} of {len(mine):<4} {gap:>9} {values:<30}")
    print(f"  exact optimum {rows[0]['exact']:g} USD/h; every study {args.trials} trials, none twice "
          f"({all(r['trials'] == args.trials == r['complete'] for r in rows)}); trials/s: median over seeds")
    results = {"rows": rows, "table": table, "trials": args.trials, "batch": args.batch, "storage": storage}
    if not args.smoke:
        out = HERE / "results"
        out.mkdir(exist_ok=True)
        (out / "search_workers.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
