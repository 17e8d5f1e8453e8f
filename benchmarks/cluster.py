"""Cluster: a run's segments on Dask against in process, the scheduler's task rate, search
storages under concurrent workers, and the projected time of a large simulated study.

Part 1 runs one grid (`points = "all"`, every column to Parquet) in process and on
LocalClusters of 1 and 2 worker processes started once beforehand (the same command, the
workers warm: their first task compiled), each the median of `--repeat` runs with
`--force`, the three taken in turn within each repetition (a shared machine's load then
falls on all three alike): the overhead of Dask is (cluster seconds / in-process
seconds) - 1, in wall seconds and in CPU seconds (this process, which is the client and
the LocalCluster's scheduler, plus every worker process; less sensitive than wall time to
other jobs sharing the machine).

Part 2 measures the scheduler alone (no-op tasks through `client.map`: tasks/s, median of
`--repeat` batches of 5,000) and the fixed cost of a sweep segment task (a small grid cut
into 64 segments, on 1 worker against the same segments in process, interleaved: the
difference of the medians divided by the number of segments; negative where it is below
the machine's noise, counted as 0 in part 4), and the CPU an idle 1-worker cluster burns
a second (over 20 s): Dask's bookkeeping, which part 1's CPU overhead includes for as long
as a run lasts.

Part 3 runs `sweep search` worker processes (1 and 4) on one fresh study in each storage:
SQLite, the journal file and PostgreSQL (a throwaway local server, fsync on, asynchronous
commit, like SQLite's WAL with synchronous = NORMAL); trials/s counts COMPLETE trials over
the span from the first trial's start to the last one's end (process start-up excluded).

Part 4 projects, on paper, the worked example of docs/cluster.md (`STUDY` below: a
10^4-point continuous-batching simulated study, 2 replications of 2,200 arrivals a point) on
64 workers. Its tasks are cut as `sweep run --scheduler` cuts it (`cluster_chunk`,
`cluster_segment`); the cost of a point is measured on a sample of the study (2 of its 250
scenario groups, 80 points, in chunks of one task's size, run a second time once compiled;
the first run's extra time is the compilation), which a worker pays once: time = ceil(tasks / 64) x (points per
task x cost per point + fixed cost of a task) + tasks / scheduler rate + one compilation.

Part 5 runs a shipped grid as a person runs it (`sweep run GRID --out DIR --force --quiet`, a
subprocess, the default cut into tasks) in process and with `--workers 1` and `--workers 2`:
wall seconds, and CPU seconds of the whole process tree (the command, its LocalCluster's
worker processes: `getrusage(RUSAGE_CHILDREN)`), first with an empty compilation cache
(cold: every worker compiles; the workers of one run start together, so they compile at
the same time and none loads what another compiled) and then again with the cache the cold
run filled (warm: every worker loads). "1st chunk s" is the manifest's
`first_chunk_incl_compile`: on a cluster, summed over the workers. Not part of the default
parts (`--parts 5`).

    python benchmarks/cluster.py [--points 2000000] [--repeat 3] [--trials 256] [--parts 1,2,3,4] [--smoke]
    python benchmarks/cluster.py --parts 5 [--grid grids/llm-fleet.toml]

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
import resource
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

#: The worked example of docs/cluster.md (which quotes this text; tests/test_benchmarks.py
#: checks it does): a continuous-batching simulated study of 125 rates x 2 prompt lengths =
#: 250 scenario groups of 8 batch caps x 5 token budgets = 10,000 points.
STUDY = """
name = "cb-sim-study"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
gpus_per_replica = 1
arrival_rps = {start = 0.5, stop = 8.0, num = 125}
prompt_tokens = [1000, 3000]
prompt_cv = 1.0
output_tokens = 250
output_cv = 0.8
batch_size = [8, 16, 32, 64, 128, 256, 384, 512]
max_batched_tokens = [512, 1024, 2048, 4096, 8192]
ttft_slo_ms = 1500
tpot_slo_ms = 60
[options]
serving = "continuous"
latency_model = "simulated"
[simulation]
n_requests = 2000
warmup = 200
replications = 2
[output]
points = "all"
"""


def _noop(i: int) -> int:
    return i


def _own_cpu_s() -> float:
    """CPU seconds (user + system) of this process, all its threads."""
    t = os.times()
    return t.user + t.system


def _interleaved(grid, runs: dict[str, dict], d: Path, repeat: int, cpu: dict | None = None,
                 **kw) -> tuple[dict[str, float], dict[str, float]]:
    """The median wall seconds and CPU seconds of each named way of running `grid` (keywords
    of `run_grid`), the ways taken in turn within each repetition, so that the load of a
    shared machine drifting over the minutes falls on all of them alike. CPU: this process
    (the client, and a LocalCluster's scheduler, which runs in it) plus, for a name in `cpu`
    (a distributed Client), every worker process. One untimed run each first: compiled
    here, or on every worker."""
    from sweep.runner import run_grid

    cpu = cpu or {}

    def cpu_s(name: str) -> float:
        client = cpu.get(name)
        return _own_cpu_s() + (sum(client.run(_own_cpu_s).values()) if client is not None else 0.0)

    for name, extra in runs.items():
        run_grid(grid, d / name, force=True, **kw, **extra)
    wall: dict[str, list[float]] = {name: [] for name in runs}
    used: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, extra in runs.items():
            c0, t0 = cpu_s(name), time.perf_counter()
            run_grid(grid, d / name, force=True, **kw, **extra)
            wall[name].append(time.perf_counter() - t0)
            used[name].append(cpu_s(name) - c0)
    return ({name: statistics.median(t) for name, t in wall.items()},
            {name: statistics.median(t) for name, t in used.items()})


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


def part1(g, repeat: int, workers: list[int], d: Path, part2_args: tuple[int, int, int, float]) -> tuple[dict, dict]:
    """In process against 1 and 2 warm workers (every cluster up for the whole part), the
    same grid and command; part 2 runs on the 1-worker cluster."""
    from contextlib import ExitStack

    from distributed import Client

    from sweep.runner.cluster import ClusterOptions

    seg = 1 << 20
    with ExitStack() as stack:
        clusters = {n: stack.enter_context(_cluster(n)) for n in workers}
        clients = {f"dask_{n}": stack.enter_context(Client(lc, set_as_default=False)) for n, lc in clusters.items()}
        runs: dict[str, dict] = {"in_process": {}}
        runs |= {f"dask_{n}": {"cluster": ClusterOptions(scheduler=lc.scheduler_address)} for n, lc in clusters.items()}
        wall, cpu = _interleaved(g, runs, d, repeat, cpu=clients, segment_points=seg)
        row = {"points": g.n_points, "segment_points": seg, "repeat": repeat, "in_process_s": wall["in_process"],
               "in_process_cpu_s": cpu["in_process"]}
        for n in workers:
            row[f"dask_{n}_s"] = wall[f"dask_{n}"]
            row[f"overhead_{n}"] = row[f"dask_{n}_s"] / row["in_process_s"] - 1.0
            row[f"dask_{n}_cpu_s"] = cpu[f"dask_{n}"]
            row[f"cpu_overhead_{n}"] = row[f"dask_{n}_cpu_s"] / row["in_process_cpu_s"] - 1.0
        row2 = part2(clusters[1], *part2_args, d)
    return row, row2


def part2(lc, tasks: int, segments: int, repeat: int, idle_s: float, d: Path) -> dict:
    """Tasks/s of the scheduler (no-op tasks, median of `repeat` batches), and the fixed cost
    of one segment task: a small grid cut into `segments` segments on 1 worker against the
    same segments in process, interleaved, the difference of the medians over the segments
    (negative: below what this machine's noise resolves); and the CPU the idle cluster burns
    (client, scheduler, worker: heartbeats, monitors) per second, over `idle_s`."""
    from distributed import Client

    from sweep import grid as spec
    from sweep.runner.cluster import ClusterOptions

    p = d / "tiny.toml"
    p.write_text(GRID.format(rates=1).replace('points = "all"', 'points = "none"'))
    g = spec.load(p)
    per_rate = g.n_points // g.group_size  # scenario groups a rate: enough rates for `segments` segments
    p.write_text(GRID.format(rates=math.ceil(segments / per_rate)).replace('points = "all"', 'points = "none"'))
    g = spec.load(p)
    group = g.group_size
    n_groups = g.n_points // group
    take = max(1, n_groups // segments)
    row: dict = {"noop_tasks": tasks}
    with Client(lc, set_as_default=False) as client:
        client.gather(client.map(_noop, range(100), pure=False))  # warm
        rates = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            client.gather(client.map(_noop, range(tasks), pure=False))
            rates.append(tasks / (time.perf_counter() - t0))
        row["tasks_per_s"] = statistics.median(rates)
        c0, t0 = _own_cpu_s() + sum(client.run(_own_cpu_s).values()), time.perf_counter()
        time.sleep(idle_s)
        c1, t1 = _own_cpu_s() + sum(client.run(_own_cpu_s).values()), time.perf_counter()
        row["idle_cpu_s_per_s"] = (c1 - c0) / (t1 - t0)
    runs = {"tiny-here": {}, "tiny-dask": {"cluster": ClusterOptions(scheduler=lc.scheduler_address)}}
    med, _ = _interleaved(g, runs, d, repeat, chunk_size=take * group, segment_points=take * group)
    row["segments"] = math.ceil(n_groups / take)
    row["segment_in_process_s"] = med["tiny-here"] / row["segments"]
    row["segment_task_fixed_s"] = (med["tiny-dask"] - med["tiny-here"]) / row["segments"]
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


def part4(sample_edits: list[tuple[str, str]], d: Path, row2: dict, workers: int) -> dict:
    """The study's tasks as `sweep run --scheduler` would cut it; the cost of a simulated
    point, measured on a sample of the study (the same settings, a few of its scenario
    groups, run in chunks of one task's size, in this process, a second time once compiled),
    the compilation (the first run's extra time); and the projected time of the study on
    `workers` workers."""
    from sweep import grid as spec
    from sweep.runner import run_grid
    from sweep.runner.cluster import cluster_chunk, cluster_segment

    (d / "study.toml").write_text(STUDY)
    study = spec.load(d / "study.toml")
    per_task = cluster_segment(study, cluster_chunk(study))
    tasks = math.ceil(study.n_points / per_task)
    text = STUDY
    for old, new in sample_edits:
        assert old in text, old
        text = text.replace(old, new)
    (d / "sample.toml").write_text(text)
    sample = spec.load(d / "sample.toml")
    chunk = min(sample.n_points, max(sample.group_size, per_task // sample.group_size * sample.group_size))
    # the same sample twice in this process: the first run compiles, the second finds every
    # kernel compiled (JAX's in-memory cache), so it is the work alone and the difference is
    # the compilation (JAX's own compile-duration events added up to more than the whole
    # run's wall time at JAX 0.4.35, the floor)
    t0 = time.perf_counter()
    run_grid(sample, d / "sample", chunk_size=chunk)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_grid(sample, d / "sample-warm", chunk_size=chunk)
    warm = time.perf_counter() - t0
    compile_s = [max(cold - warm, 0.0)]
    per_point = warm / sample.n_points
    task_s = per_task * per_point + max(0.0, row2["segment_task_fixed_s"])
    total = math.ceil(tasks / workers) * task_s + tasks / row2["tasks_per_s"] + compile_s[0]
    return {"points": sample.n_points, "chunk": chunk, "per_point_s": per_point, "study_points": study.n_points,
            "workers": workers, "points_per_task": per_task, "tasks": tasks, "task_s": task_s,
            "compile_s": compile_s[0], "projected_s": total, "here_alone_s": study.n_points * per_point}


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished, waited-for descendants."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def part5(grid: Path, workers: list[int], d: Path, states: tuple[str, ...] = ("cold", "warm")) -> list[dict]:
    """`sweep run GRID` in process and with --workers N, cold then warm (see the module
    docstring): one row per (way, cache state) with wall and CPU seconds and the tasks."""
    rows = []
    for n in [0, *workers]:
        way = "in process" if n == 0 else f"{n} worker{'s' if n > 1 else ''}"
        cache = d / f"cache-{n}"  # each way its own cache: its cold run compiles
        env = {**os.environ, "SWEEP_CACHE_DIR": str(cache)}
        env.pop("SWEEP_CLUSTER_CACHE_DIR", None)
        for state in states:
            out = d / f"run5-{n}"
            cmd = [sys.executable, "-m", "sweep", "run", str(grid), "--out", str(out), "--force", "--quiet"]
            if n:
                cmd += ["--workers", str(n)]
            c0, t0 = _tree_cpu_s(), time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=7200)
            wall, cpu = time.perf_counter() - t0, _tree_cpu_s() - c0
            if proc.returncode != 0:
                raise RuntimeError(f"sweep run {grid} ({way}) failed: {proc.stderr.strip()[-300:]}")
            manifest = json.loads((out / "manifest.json").read_text())
            rows.append({"grid": grid.name, "points": manifest["rows"]["grid_points"], "way": way, "workers": n,
                         "cache": state, "wall_s": wall, "cpu_s": cpu,
                         "tasks": manifest["executor"].get("tasks", manifest["chunks"]["segments"]),
                         "chunk": manifest["chunks"]["size"],
                         "first_chunk_incl_compile_s": manifest["timings_s"]["first_chunk_incl_compile"]})
            r = rows[-1]
            print(f"  {r['way']:<12} {r['cache']:<6} {r['tasks']:>6} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} "
                  f"{r['first_chunk_incl_compile_s']:>12.1f}", flush=True)
    return rows


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
    if not parts or not parts <= {1, 2, 3, 4, 5}:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of 1, 2, 3, 4, 5")
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
    ap.add_argument("--grid", type=Path, default=HERE.parent / "grids" / "llm-fleet.toml",
                    help="part 5's shipped grid (default grids/llm-fleet.toml)")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run that writes nothing (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.parts = {1, 2, 3, 4, 5}
        args.grid = HERE.parent / "grids" / "seed-gpt3.toml"
    if 4 in args.parts and not args.parts & {1, 2} and (args.tasks_per_s is None or args.task_fixed_ms is None):
        ap.error("--parts 4 without part 1 or 2 needs --tasks-per-s and --task-fixed-ms (part 2's figures)")
    from sweep.runner.progress import compile_cache

    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp, compile_cache(str(Path(tmp) / "jax-cache")):
        d = Path(tmp)  # the workers load from the cache what the client compiled
        workers = [1] if args.smoke else [1, 2]
        if args.parts & {1, 2}:
            run12(args, workers, d, results)
        if 3 in args.parts:
            run3(args, d, results)
        if 4 in args.parts:
            r2 = results.get("part2") or {"tasks_per_s": args.tasks_per_s,
                                          "segment_task_fixed_s": args.task_fixed_ms / 1e3}
            run4(args, d, results, r2)
        if 5 in args.parts:
            run5(args, [1] if args.smoke else [1, 2], d, results)
    if not args.smoke:
        out = HERE / "results"
        out.mkdir(exist_ok=True)
        name = "cluster.json" if args.parts != {5} else "cluster-grid.json"  # part 5 alone: its own file
        (out / name).write_text(json.dumps(results, indent=2) + "\n")
    return results


def run12(args: argparse.Namespace, workers: list[int], d: Path, results: dict) -> None:
    print("part 1: the same grid in process and on a LocalCluster (warm workers), median of runs")
    r1, r2 = part1(_grid(1 if args.smoke else int(args.points), d), 1 if args.smoke else args.repeat, workers, d,
                   (200, 2, 1, 0.2) if args.smoke else (5000, 64, args.repeat, 20.0))
    results["part1"] = r1
    print(f"  {'':>12} {'in process':>11} " + " ".join(f"{f'{n} worker(s)':>12} {'overhead':>9}" for n in workers))
    for what, base, there, over in (("wall s", "in_process_s", "dask_{}_s", "overhead_{}"),
                                    ("CPU s", "in_process_cpu_s", "dask_{}_cpu_s", "cpu_overhead_{}")):
        print(f"  {what:>12} {r1[base]:>11.2f} "
              + " ".join(f"{r1[there.format(n)]:>12.2f} {r1[over.format(n)]:>+9.1%}" for n in workers))
    print(f"  ({r1['points']:,} points, median of {r1['repeat']}; CPU: client, scheduler and workers together)")
    print("part 2: the scheduler (no-op tasks) and the fixed cost of a segment task (1 worker)")
    results["part2"] = r2
    print(f"  tasks/s {r2['tasks_per_s']:,.0f} ({r2['noop_tasks']} no-op tasks); segment task fixed cost "
          f"{r2['segment_task_fixed_s'] * 1e3:.1f} ms over {r2['segments']} segments "
          f"(in process {r2['segment_in_process_s'] * 1e3:.1f} ms a segment); the idle 1-worker cluster burns "
          f"{r2['idle_cpu_s_per_s']:.3f} CPU s a second")


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
    print("part 4: the continuous-batching simulator per point, "
          "and a 10^4-point simulated study on 64 workers (projected)")
    edits = [("arrival_rps = {start = 0.5, stop = 8.0, num = 125}", "arrival_rps = 4.0")]  # 2 of the 250 groups
    if args.smoke:
        edits = [("arrival_rps = {start = 0.5, stop = 8.0, num = 125}", "arrival_rps = 2.0"),
                 ("prompt_tokens = [1000, 3000]", "prompt_tokens = 200"),
                 ("batch_size = [8, 16, 32, 64, 128, 256, 384, 512]", "batch_size = 16"),
                 ("max_batched_tokens = [512, 1024, 2048, 4096, 8192]", "max_batched_tokens = 2048"),
                 ("n_requests = 2000\nwarmup = 200", "n_requests = 1000\nwarmup = 0")]
    r4 = part4(edits, d, r2, workers=64)
    results["part4"] = r4
    print(f"  {r4['per_point_s']:.3f} s a simulated point (here, a sample of {r4['points']} points in chunks of "
          f"{r4['chunk']}), compilation {r4['compile_s']:.1f} s apart; {r4['study_points']:,} points = {r4['tasks']} "
          f"tasks of {r4['points_per_task']} points, {r4['task_s']:.1f} s each; on {r4['workers']} workers: about "
          f"{r4['projected_s'] / 60:.1f} min (here alone: {r4['here_alone_s'] / 3600:.1f} h)")


def run5(args: argparse.Namespace, workers: list[int], d: Path, results: dict) -> None:
    print(f"part 5: sweep run {args.grid.name} in process and on --workers N, cold then warm compilation cache")
    print(f"  {'way':<12} {'cache':<6} {'tasks':>6} {'wall s':>8} {'CPU s':>8} {'1st chunk s':>12}")
    r5 = part5(args.grid, workers, d, ("cold",) if args.smoke else ("cold", "warm"))
    results["part5"] = r5
    print(f"  ({r5[0]['points']:,} points; CPU: the command and its worker processes together)")


if __name__ == "__main__":
    main()
