"""Cluster: a run's segments on Dask against in process, the scheduler's task rate, search
storages under concurrent workers, and the projected time of a large simulated study.

Part 1 runs one grid (`points = "all"`, every column to Parquet) in process and on a
LocalCluster of 1 and 2 worker processes started once beforehand (the same command, the
workers warm: their first task compiled), each the median of `--repeat` runs with
`--force`: the overhead of Dask is (cluster seconds / in-process seconds) - 1.

Part 2 measures the scheduler alone (no-op tasks through `client.map`: tasks/s) and the
fixed cost of a sweep segment task (a grid cut into many tiny segments on 1 worker against
the same segments in process, divided by the number of segments).

Part 3 runs `sweep search` worker processes (1 and 4) on one fresh study in each storage:
SQLite, the journal file and PostgreSQL (a throwaway local server, fsync on, asynchronous
commit, like SQLite's WAL with synchronous = NORMAL); trials/s counts COMPLETE trials over
the span from the first trial's start to the last one's end (process start-up excluded).

Part 4 measures the simulator's cost per point (default `[simulation]`: 8 replications of
22,000 arrivals) and projects, on paper, a 10^4-point simulated study on 64 workers:
tasks = 10^4 / points per task; time = ceil(tasks / 64) x (points per task x cost per point
+ fixed cost of a task) + tasks / scheduler rate + one compilation per worker (the first,
untimed run of the same grid less the timed one).

    python benchmarks/cluster.py [--points 2000000] [--repeat 3] [--trials 256] [--parts 1,2,3,4] [--smoke]

(``--parts``: a subset of the parts; part 4 alone takes part 2's figures from an earlier run,
``--tasks-per-s`` and ``--task-fixed-ms``, which it then requires.)

(``--smoke``: a tiny grid, 1 worker, SQLite (and PostgreSQL where its server is installed)
with 1 worker, a few simulated points; nothing written to benchmarks/results/.)
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the throwaway PostgreSQL server of the tests

GRID = """
name = "cluster-bench"
[grid]
model = ["llama-3.1-8b", "llama-3.1-70b"]
gpu = ["h100-sxm", "a100-80gb"]
gpus_per_replica = [1, 2, 4, 8]
seq_len = 4096
arrival_rps = {{start = 1.0, stop = 2000.0, num = {rates}, scale = "log"}}
batch_size = {{start = 1, stop = 512, step = 1}}
batch_window_ms = [20, inf]
slo_ms = 250.0
[output]
points = "all"
"""

SEARCH = """
name = "search-bench"
[grid]
arrival_rps = 100.0
batch_size = 8
seq_len = 2048
model = "gpt3-175b"
gpu = "a100-80gb"
gpus_per_replica = 8
replicas = 1
t_fixed_ms = 50.0
t_req_ms = 0.5
slo_ms = 300.0
[search]
objective = "min_cost"
trials = {trials}
batch = {batch}
seed = 0
storage = "{storage}"
[search.params]
batch_size = {{low = 1, high = 64}}
replicas = {{low = 1, high = 8}}
"""

SIM = """
name = "sim-bench"
[grid]
arrival_rps = {rates}
replicas = [1, 2]
batch_size = [4, 16, 64]
batch_window_ms = [5, inf]
seq_len = 2048
model = "llama-3.1-8b"
gpu = "h100-sxm"
t_fixed_ms = 10.0
t_req_ms = 1.0
slo_ms = 80.0
[options]
latency_model = "simulated"
[simulation]
{simulation}
"""


def _noop(i: int) -> int:
    return i


def _median_run(grid, out: Path, repeat: int, **kw) -> float:
    from sweep.runner import run_grid

    run_grid(grid, out, force=True, **kw)  # warm: compiled here, or on every worker
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run_grid(grid, out, force=True, **kw)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _cluster(n: int):
    from distributed import LocalCluster

    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                        silence_logs=logging.CRITICAL)


def _grid(points: int, d: Path):
    from sweep import grid as spec

    per_rate = 2 * 2 * 4 * 512 * 2
    p = d / "g.toml"
    p.write_text(GRID.format(rates=max(1, round(points / per_rate))))
    return spec.load(p)


def part1(g, repeat: int, workers: list[int], d: Path, part2_args: tuple[int, int]) -> tuple[dict, dict]:
    """In process against 1 and 2 warm workers, the same grid and command; part 2 runs on
    the 1-worker cluster."""
    from sweep.runner.cluster import ClusterOptions

    seg = 1 << 20
    row = {"points": g.n_points, "segment_points": seg, "in_process_s": _median_run(g, d / "here", repeat, segment_points=seg)}
    row2: dict = {}
    for n in workers:
        with _cluster(n) as lc:
            row[f"dask_{n}_s"] = _median_run(g, d / f"dask{n}", repeat, segment_points=seg,
                                             cluster=ClusterOptions(scheduler=lc.scheduler_address))
            if n == 1:
                row2 = part2(lc, *part2_args, d)
        row[f"overhead_{n}"] = row[f"dask_{n}_s"] / row["in_process_s"] - 1.0
    return row, row2


def part2(lc, tasks: int, segments: int, d: Path) -> dict:
    """Tasks/s of the scheduler (no-op tasks), and the fixed cost of one segment task."""
    from distributed import Client

    from sweep import grid as spec
    from sweep.runner.cluster import ClusterOptions

    p = d / "tiny.toml"
    p.write_text(GRID.format(rates=1).replace('points = "all"', 'points = "none"'))
    g = spec.load(p)
    group = g.group_size
    n_groups = g.n_points // group
    take = max(1, n_groups // segments)
    row: dict = {}
    with Client(lc, set_as_default=False) as client:
        client.gather(client.map(_noop, range(100), pure=False))  # warm
        t0 = time.perf_counter()
        client.gather(client.map(_noop, range(tasks), pure=False))
        row["noop_tasks"] = tasks
        row["tasks_per_s"] = tasks / (time.perf_counter() - t0)
    kw = dict(chunk_size=take * group, segment_points=take * group)
    here = _median_run(g, d / "tiny-here", 1, **kw)
    there = _median_run(g, d / "tiny-dask", 1, cluster=ClusterOptions(scheduler=lc.scheduler_address), **kw)
    row["segments"] = math.ceil(n_groups / take)
    row["segment_in_process_s"] = here / row["segments"]
    row["segment_task_fixed_s"] = max(0.0, (there - here) / row["segments"])
    return row


def _study_rate(storage_url: str, out: Path, env: dict) -> float:
    """COMPLETE trials per second over the span of their starts and ends."""
    import optuna

    if storage_url == "sqlite":
        storage: object = f"sqlite:///{out / 'search.db'}"
    elif storage_url == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        storage = JournalStorage(JournalFileBackend(str(out / "search.journal")))
    else:
        from sweep.grid.search_table import resolve_url

        os.environ["PGPASSWORD"] = env["PGPASSWORD"]
        storage = resolve_url(storage_url)
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    span = (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()
    return len(trials) / max(span, 1e-9)


def part3(trials: int, batch: int, worker_counts: list[int], d: Path, smoke: bool) -> list[dict]:
    from _postgres import PostgresServer

    rows = []
    storages = ["sqlite", "journal", "postgresql"]
    why = PostgresServer.missing()
    server = None
    if why is not None:
        print(f"  (PostgreSQL skipped: {why})")
        storages.remove("postgresql")
    if smoke:  # one storage: PostgreSQL where its server is installed
        storages = storages[-1:]
    if "postgresql" in storages:  # the smoke run keeps the test server's settings (no fsync)
        settings = None if smoke else {"fsync": "on", "synchronous_commit": "off", "full_page_writes": "on"}
        server = PostgresServer(settings=settings).__enter__()
    try:
        for storage in storages:
            for n in worker_counts:
                out = d / f"search-{storage}-{n}"
                env = dict(os.environ)
                url = storage
                if storage == "postgresql":
                    assert server is not None
                    url = server.create_database(f"bench{n}")
                    env = server.env()
                grid = d / f"search-{storage}-{n}.toml"
                grid.write_text(SEARCH.format(trials=trials, batch=batch, storage=url))
                cmd = [sys.executable, "-m", "sweep", "search", str(grid), "--out", str(out), "--quiet"]
                procs = [subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True) for _ in range(n)]
                for proc in procs:
                    _, err = proc.communicate(timeout=1800)
                    if proc.returncode != 0:
                        raise RuntimeError(f"sweep search failed on {storage}: {err}")
                rows.append({"storage": storage, "workers": n, "trials": trials,
                             "trials_per_s": _study_rate(url, out, env)})
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    return rows


def part4(rates: list[float], simulation: str, d: Path, row2: dict, points_per_task: int, workers: int,
          study: int) -> dict:
    """The simulator's cost per point here, and the projected study on `workers` workers."""
    from sweep import grid as spec
    from sweep.runner import run_grid

    p = d / "sim.toml"
    p.write_text(SIM.format(rates=json.dumps(rates), simulation=simulation))
    g = spec.load(p)
    t0 = time.perf_counter()
    run_grid(g, d / "sim-warm", chunk_size=g.group_size)  # compiles the simulator
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_grid(g, d / "sim", chunk_size=g.group_size)
    timed = time.perf_counter() - t0
    per_point = timed / g.n_points
    tasks = math.ceil(study / points_per_task)
    task_s = points_per_task * per_point + row2["segment_task_fixed_s"]
    compile_s = max(0.0, first - timed)  # what a worker's first task costs more than the others
    total = math.ceil(tasks / workers) * task_s + tasks / row2["tasks_per_s"] + compile_s
    return {"points": g.n_points, "per_point_s": per_point, "study_points": study, "workers": workers,
            "points_per_task": points_per_task, "tasks": tasks, "task_s": task_s, "compile_s": compile_s,
            "projected_s": total, "one_core_s": study * per_point}


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _positive(kind: type, zero: bool = False):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (v >= 0 if zero else v > 0) or not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'at least 0' if zero else 'above 0'}")
        return v

    parse.__name__ = kind.__name__
    return parse


def _parts(text: str) -> set[int]:
    try:
        parts = {int(x) for x in text.split(",")}
    except ValueError:
        parts = set()
    if not parts or not parts <= {1, 2, 3, 4}:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of 1, 2, 3, 4")
    return parts


def main(argv: list[str] | None = None) -> dict:
    ap = _Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=_positive(float), default=2e6)
    ap.add_argument("--repeat", type=_positive(int), default=3)
    ap.add_argument("--trials", type=_positive(int), default=256)
    ap.add_argument("--parts", type=_parts, default={1, 2, 3, 4},
                    help="which parts to run, e.g. 1,2 (part 4 needs part 2's figures: without part 2, "
                         "--tasks-per-s and --task-fixed-ms from an earlier run)")
    ap.add_argument("--tasks-per-s", type=_positive(float), help="the scheduler's rate, printed by part 2")
    ap.add_argument("--task-fixed-ms", type=_positive(float, zero=True),
                    help="the fixed cost of a segment task, printed by part 2")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run that writes nothing (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.parts = {1, 2, 3, 4}
    if 4 in args.parts and not args.parts & {1, 2} and (args.tasks_per_s is None or args.task_fixed_ms is None):
        ap.error("--parts 4 without part 1 or 2 needs --tasks-per-s and --task-fixed-ms (part 2's figures)")
    import jax

    from sweep.runner.progress import enable_compile_cache

    results: dict = {}
    cache_before = jax.config.jax_compilation_cache_dir
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        enable_compile_cache(str(d / "jax-cache"))  # the workers load what the client compiled
        workers = [1] if args.smoke else [1, 2]
        if args.parts & {1, 2}:
            run12(args, workers, d, results)
        if 3 in args.parts:
            run3(args, d, results)
        if 4 in args.parts:
            r2 = results.get("part2") or {"tasks_per_s": args.tasks_per_s, "segment_task_fixed_s": args.task_fixed_ms / 1e3}
            run4(args, d, results, r2)
        jax.config.update("jax_compilation_cache_dir", cache_before)
    if not args.smoke:
        out = HERE / "results"
        out.mkdir(exist_ok=True)
        (out / "cluster.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def run12(args: argparse.Namespace, workers: list[int], d: Path, results: dict) -> None:
    print("part 1: the same grid in process and on a LocalCluster (warm workers), median of runs")
    r1, r2 = part1(_grid(1 if args.smoke else int(args.points), d), 1 if args.smoke else args.repeat, workers, d,
                   (200, 2) if args.smoke else (5000, 32))
    results["part1"] = r1
    print(f"  {'points':>10} {'in process s':>13} " + " ".join(f"{f'{n} worker(s) s':>14} {'overhead':>9}" for n in workers))
    print(f"  {r1['points']:>10,} {r1['in_process_s']:>13.2f} "
          + " ".join(f"{r1[f'dask_{n}_s']:>14.2f} {r1[f'overhead_{n}']:>+9.1%}" for n in workers))
    print("part 2: the scheduler (no-op tasks) and the fixed cost of a segment task (1 worker)")
    results["part2"] = r2
    print(f"  tasks/s {r2['tasks_per_s']:,.0f} ({r2['noop_tasks']} no-op tasks); segment task fixed cost "
          f"{r2['segment_task_fixed_s'] * 1e3:.1f} ms over {r2['segments']} segments "
          f"(in process {r2['segment_in_process_s'] * 1e3:.1f} ms a segment)")


def run3(args: argparse.Namespace, d: Path, results: dict) -> None:
    print("part 3: trials/s of sweep search workers sharing one study (first trial start to last end)")
    counts = [1] if args.smoke else [1, 4]
    r3 = part3(16 if args.smoke else args.trials, 8 if args.smoke else 16, counts, d, args.smoke)
    results["part3"] = r3
    print(f"  {'storage':<11} " + " ".join(f"{f'{n} worker(s)':>12}" for n in counts))
    for storage in dict.fromkeys(r["storage"] for r in r3):
        cells = {r["workers"]: r["trials_per_s"] for r in r3 if r["storage"] == storage}
        print(f"  {storage:<11} " + " ".join(f"{cells[n]:>12.1f}" for n in counts))


def run4(args: argparse.Namespace, d: Path, results: dict, r2: dict) -> None:
    print("part 4: the simulator per point, and a 10^4-point simulated study on 64 workers (projected)")
    sim = ("n_requests = 1000\nwarmup = 100\nreplications = 2" if args.smoke else "")
    r4 = part4([50.0] if args.smoke else [20.0, 50.0, 80.0, 110.0], sim, d, r2,
               points_per_task=40, workers=64, study=10_000)
    results["part4"] = r4
    print(f"  {r4['per_point_s']:.3f} s a simulated point (one core, {r4['points']} points); "
          f"{r4['study_points']:,} points = {r4['tasks']} tasks of {r4['points_per_task']} points, "
          f"{r4['task_s']:.1f} s each, a compilation {r4['compile_s']:.1f} s a worker; on {r4['workers']} workers: "
          f"about {r4['projected_s'] / 60:.1f} min (one core: {r4['one_core_s'] / 3600:.1f} h)")


if __name__ == "__main__":
    main()
