"""The `sweep` command: parse arguments, call the library, map errors to exit codes.

Exit codes (documented for schedulers in the README):
    0  success
    1  the machine ran out of something (a full disk): one line, the staging folder removed;
       or an internal error (a bug: please report it with the traceback)
    2  bad input: grid file, catalog, profile or arguments, or the output folder is locked by
       another sweep; nothing was written
    130 interrupted (Ctrl-C / SIGINT); nothing half-written looks complete
    143 terminated (SIGTERM, e.g. a scheduler's time limit); likewise, and it resumes
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweep.cli.tools import int_at_least_one, one_line_errors, positive_seconds
from sweep.errors import ResourceError, SweepError

EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143


class Terminated(BaseException):
    """SIGTERM (a scheduler's stop or timeout): unwind like Ctrl-C, so the run stops cleanly
    and the same command resumes it."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) or a usage error (2, one line already printed)
        return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else EXIT_INPUT
    previous = (signal.signal(signal.SIGTERM, _on_sigterm) if threading.current_thread() is threading.main_thread()
                else None)
    try:
        return int(args.handler(args) or EXIT_OK)
    except ResourceError as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    except SweepError as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("sweep: interrupted; rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("sweep: terminated (SIGTERM); rerun the same command to resume", file=sys.stderr)
        return EXIT_TERMINATED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


EXITS_RUN = """exit codes:
  0    done: DIR/manifest.json written (also when an identical finished run was found)
  1    a full disk (the run's staging removed, the previous output intact) or an internal error
  2    bad input (grid, catalog, profile, arguments) or DIR is locked by another sweep; nothing written
  130  interrupted (SIGINT)   143  terminated (SIGTERM): rerun the same command to resume"""
EXITS_READ = """exit codes:
  0    done
  2    bad input (a file, a name, a filter or an argument); nothing written"""


def epilog(examples: Sequence[str], exits: str = EXITS_READ) -> str:
    """A sub-command's --help ending: examples, then the exit codes."""
    return "examples:\n" + "\n".join(f"  {e}" for e in examples) + "\n\n" + exits


def command(sub: Any, name: str, help: str, examples: Sequence[str],
            exits: str = EXITS_READ) -> argparse.ArgumentParser:
    """A sub-command whose --help ends with examples and exit codes, and whose argument errors
    are one line and exit 2."""
    p = sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".", epilog=epilog(examples, exits),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    one_line_errors(p)
    return p


def allow_outside_arg(p: argparse.ArgumentParser) -> None:
    """`--allow-outside DIR`: the one way a grid's file paths leave the grid's folder."""
    p.add_argument("--allow-outside", type=Path, action="append", default=[], metavar="DIR",
                   help="let the grid's trace and profile paths, and a SQLite [search] storage, reach files under "
                        "DIR (repeatable); without it they must lie in the grid file's folder (the database: in OUT)")


def out_arg(p: argparse.ArgumentParser, what: str = "output folder") -> None:
    """`--out DIR`, by default runs/<grid file stem> in the working folder (`default_out`)."""
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help=f"{what} (default: runs/<grid file name without .toml>, e.g. runs/llm-fleet)")


def default_out(grid: Path) -> Path:
    """Where a grid's run goes without --out: runs/<grid file stem>, relative to the working folder."""
    return Path("runs") / grid.stem


def _parser() -> argparse.ArgumentParser:
    from sweep._version import __version__

    p = argparse.ArgumentParser(
        prog="sweep", description="Capacity planning for batched inference serving.",
        epilog=epilog(["sweep run grids/seed-gpt3.toml --out runs/gpt3      # evaluate a grid, print its answers",
                       "sweep ask --model llama-3.1-70b --gpu h100-sxm --isl 1500 --osl 300 --rate 40 --ttft-ms 2000 "
                       "--tpot-ms 60   # a question from flags",
                       "sweep show runs/gpt3 model=gpt3-175b                # the answers of a finished run",
                       "sweep explain grids/seed-gpt3.toml --point 2        # one point's derivation, step by step",
                       "sweep report runs/gpt3                              # an HTML report",
                       "sweep plan grids/diurnal.toml --out runs/diurnal    # replicas per hour of a daily profile",
                       "sweep <command> --help                              # a command's options and examples"],
                      EXITS_RUN),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"sweep {__version__}")
    one_line_errors(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = command(sub, "run", "evaluate a grid file, write Parquet and print the answers",
                ["sweep run grids/seed-gpt3.toml --out runs/gpt3",
                 "sweep run grids/fleet-nightly.toml --out runs/fleet --progress log --log-interval 30",
                 "sweep run grids/fleet-nightly.toml --out runs/fleet --shard 3/16   # then: sweep merge runs/fleet",
                 "sweep run grids/example.toml --out runs/example --memory-limit 800 --top 20",
                 "sweep run grids/fleet-nightly.toml --out /shared/runs/fleet --scheduler tcp://head:8786   # Dask"],
                EXITS_RUN)
    r.add_argument("grid", type=Path, help="grid file (TOML), see grids/example.toml")
    out_arg(r)
    r.add_argument("--chunk-size", type=int_at_least_one, default=None,
                   help="points per evaluation chunk (bounds memory; default 65536)")
    r.add_argument("--memory-limit", type=int_at_least_one, default=None, metavar="MB",
                   help="keep the run near MB megabytes of memory (sets the chunk and row-group sizes; a limit below "
                        "the least the grid needs is refused with that least, exit 2)")
    r.add_argument("--shard", default=None, metavar="I/N",
                   help="run shard I of N (1-based): a disjoint slice of the scenario groups, written to OUT/shards/; "
                        "combine with `sweep merge OUT`")
    r.add_argument("--force", action="store_true",
                   help="run even if an identical finished run is in OUT, discarding any staged work")
    r.add_argument("--wait", action="store_true",
                   help="if another sweep is writing OUT, wait for it instead of refusing (exit 2)")
    r.add_argument("--progress", choices=("auto", "bar", "log", "none"), default="auto",
                   help="auto: a bar on a terminal, JSON log lines otherwise")
    r.add_argument("--log-interval", type=positive_seconds, default=10.0, metavar="S",
                   help="at most S seconds between progress log lines (> 0; default 10)")
    r.add_argument("--top", type=int_at_least_one, default=10, metavar="N",
                   help="scenario groups (and search answers) the summary shows (default 10)")
    r.add_argument("--quiet", action="store_true", help="print nothing but errors")
    r.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                   help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    allow_outside_arg(r)
    where = r.add_mutually_exclusive_group()
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="run the segments as tasks on a running dask.distributed scheduler, e.g. tcp://head:8786 "
                            "(needs sweep-capacity[cluster] and OUT on a file system the workers share)")
    where.add_argument("--workers", type=int_at_least_one, default=None, metavar="N",
                       help="run the segments as tasks on a LocalCluster of N worker processes started for the run")
    r.add_argument("--segment-points", type=int_at_least_one, default=None, metavar="N",
                   help="points per resumable segment, one task on a cluster (rounded to whole chunks; "
                        "default 8,388,608 in process; on a cluster about 1/64 of the grid (1/256 simulated), "
                        "at most 1,048,576)")
    r.set_defaults(handler=_cmd_run)
    sh = command(sub, "show", "print the answers of a finished run: decisions per scenario group, search answers, "
                              "and the per-point table of a small selection",
                 ["sweep show runs/gpt3",
                  "sweep show runs/fleet model=llama-3.1-70b gpu=h100-sxm --top 25",
                  "sweep show runs/fleet arrival_rps=400 replicas=4"])
    sh.add_argument("run_dir", type=Path, help="a finished run folder (the --out of `sweep run`)")
    sh.add_argument("filters", nargs="*", metavar="KEY=VALUE",
                    help="keep the scenarios whose column KEY equals VALUE (a name or a number; inf = NULL)")
    sh.add_argument("--top", type=int_at_least_one, default=10, metavar="N", help="scenario groups shown (default 10)")
    sh.set_defaults(handler=_cmd_show)
    ex = command(sub, "explain", "derive one point of a grid step by step: service time, B_min, the response-time "
                                 "decomposition, the percentile, KV memory, the action",
                 ["sweep explain grids/seed-gpt3.toml --point 2",
                  "sweep explain grids/seed-gpt3.toml batch_size=16",
                  "sweep explain runs/gpt3 --point 2                  # the grid a finished run was made from",
                  "sweep explain grids/example.toml model=llama-3.1-70b batch_size=32 replicas=2"])
    ex.add_argument("grid", type=Path, help="grid file (TOML), or a finished run folder (the grid it was made from)")
    ex.add_argument("filters", nargs="*", metavar="KEY=VALUE",
                    help="choose the point by its axis values: with a decision axis (replicas, the cap, a knob) the "
                         "first match in grid order, else the recommendation of the first matching scenario group")
    ex.add_argument("--point", type=int, default=None, metavar="ID", help="the point_id (as in the output files)")
    ex.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                    help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    allow_outside_arg(ex)
    ex.set_defaults(handler=_cmd_explain)
    pl = command(sub, "plan", "a grid with [schedule]: run it and print the replica schedule (schedule.parquet)",
                 ["sweep plan grids/diurnal.toml --out runs/diurnal",
                  "sweep plan grids/diurnal.toml --out runs/diurnal --quiet   "
                  "# then: duckdb on runs/diurnal/schedule.parquet"],
                 EXITS_RUN)
    pl.add_argument("grid", type=Path, help="grid file with a [schedule] table, see grids/diurnal.toml")
    out_arg(pl)
    pl.add_argument("--force", action="store_true", help="run even if an identical finished run is in OUT")
    pl.add_argument("--wait", action="store_true", help="if another sweep is writing OUT, wait for it")
    pl.add_argument("--quiet", action="store_true", help="print nothing but errors")
    pl.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                    help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    allow_outside_arg(pl)
    pl.set_defaults(handler=_cmd_plan)
    m = command(sub, "merge", "combine the shards in OUT/shards/ into one output",
                ["sweep merge runs/fleet", "sweep merge runs/fleet --wait --quiet"], EXITS_RUN)
    m.add_argument("out", type=Path, help="the --out folder the shards were run with")
    m.add_argument("--quiet", action="store_true")
    m.add_argument("--wait", action="store_true", help="if another sweep is writing OUT, wait for it")
    m.set_defaults(handler=_cmd_merge)
    w = command(sub, "search", "a search worker: run the grid's [search] studies only, sharing OUT with other workers",
                ["for i in 1 2 3 4; do sweep search grids/search-fleet.toml --out runs/sf --quiet & done; wait",
                 "sweep run grids/search-fleet.toml --out runs/sf    # then publish search.parquet"], EXITS_RUN)
    w.add_argument("grid", type=Path, help="grid file with a [search] table")
    out_arg(w, "the folder of the shared storage (search.db / search.journal); workers hold it shared, a `sweep "
               "run` on it waits for them")
    w.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                   help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    allow_outside_arg(w)
    w.add_argument("--quiet", action="store_true")
    w.set_defaults(handler=_cmd_search)
    from sweep.cli import ask, tools

    ask.add_command(sub, command, EXITS_RUN)  # sweep ask
    tools.add_commands(sub, command)  # sweep fit, kv, catalog, calibrate, report
    from sweep.cli import deploy

    deploy.add_command(sub, command)  # sweep deploy
    from sweep.cli import predict

    predict.add_command(sub, command)  # sweep predict-benchmark
    return p


def _cmd_run(args: argparse.Namespace) -> int:
    from sweep.catalog import load_catalog
    from sweep.cli.summary import print_summary
    from sweep.grid import load
    from sweep.runner import Shard, run_grid
    from sweep.runner.progress import ProgressReporter, compile_cache_dir, enable_compile_cache

    if args.chunk_size and args.memory_limit:
        from sweep.errors import OutputError

        raise OutputError(f"--chunk-size {args.chunk_size} and --memory-limit {args.memory_limit} both set the chunk "
                          f"size: give one (--memory-limit {args.memory_limit} alone sizes the chunk to the limit)")
    if args.out is None:
        args.out = default_out(args.grid)
    grid = load(args.grid, catalog=load_catalog(args.catalog) if args.catalog else None,
                allow_outside=args.allow_outside)
    shard = Shard.parse(args.shard) if args.shard else None
    if grid.search is not None:
        from sweep.grid.search_table import check_storage

        # an unreachable database, or a SQLite file outside OUT not allowed, is refused before any work
        check_storage(grid.search, args.out, allow_outside=args.allow_outside)
    cluster = None
    if args.scheduler is not None or args.workers is not None:
        from sweep.runner.cluster import ClusterOptions

        cluster = ClusterOptions(scheduler=args.scheduler, workers=args.workers)
        cluster.check()  # Dask missing or an unreachable scheduler is refused before any work
    if args.memory_limit:
        from sweep.runner.memory import plan_memory

        plan_memory(grid, args.memory_limit)  # a limit below the grid's floor is refused before any work
    enable_compile_cache(compile_cache_dir())
    mode = "none" if args.quiet else args.progress
    with ProgressReporter(grid.name, mode, args.log_interval) as progress:
        result = run_grid(grid, args.out, chunk_size=args.chunk_size, shard=shard, force=args.force, wait=args.wait,
                          memory_limit_mb=args.memory_limit,
                          progress=None if mode == "none" else progress, note=progress.note,
                          segment_points=args.segment_points, cluster=cluster)
    if not args.quiet:
        print_summary(grid, result, top=args.top)
        if grid.schedule is not None:
            from sweep.cli.plan import print_schedule

            print_schedule(result.out_dir, full=False)
    return EXIT_OK


def _cmd_plan(args: argparse.Namespace) -> int:
    """`sweep run` for a grid with [schedule], printing the schedule instead of the points."""
    from sweep.catalog import load_catalog
    from sweep.cli.plan import print_schedule
    from sweep.errors import GridError
    from sweep.grid import load
    from sweep.runner import run_grid
    from sweep.runner.progress import compile_cache_dir, enable_compile_cache

    if args.out is None:
        args.out = default_out(args.grid)
    grid = load(args.grid, catalog=load_catalog(args.catalog) if args.catalog else None,
                allow_outside=args.allow_outside)
    if grid.schedule is None:
        raise GridError(grid.source, "schedule", None,
                        "sweep plan needs a [schedule] table, e.g. [schedule] hourly_rps = [24 rates]; "
                        "use sweep run for a plain grid")
    enable_compile_cache(compile_cache_dir())
    result = run_grid(grid, args.out, force=args.force, wait=args.wait)
    if not args.quiet:
        s = grid.schedule
        rules = ", ".join(x for x in (f"ramp {s.ramp}/h" if s.ramp else "",
                                      f"warm-up {s.warmup_hours:g} h" if s.warmup_hours else "") if x)
        print(f"{grid.name}: {s.hours}-hour profile from {s.source}{f' ({rules})' if rules else ''}; "
              f"{grid.n_points:,} points evaluated; {result.out_dir / 'schedule.parquet'}")
        print_schedule(result.out_dir)
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    import pyarrow as pa

    from sweep.cli.answers import RunFolder, parse_filters
    from sweep.cli.summary import show_run
    from sweep.io.published import DamagedRunError

    run = RunFolder.open(args.run_dir, parse_filters(args.filters))  # the folder is checked first
    try:
        show_run(run, top=args.top)
    except (pa.ArrowException, OSError) as exc:  # a data page the checks do not read (beyond the hash budget)
        raise DamagedRunError(f"{args.run_dir}: a file cannot be read ({type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[0][:100] if str(exc).strip() else ''}); rerun the "
                              f"`sweep run GRID --out {args.run_dir}` that made it to compute it again") from None
    return EXIT_OK


def _cmd_explain(args: argparse.Namespace) -> int:
    from sweep.api import explain
    from sweep.catalog import load_catalog
    from sweep.cli.answers import parse_filters, run_grid_spec
    from sweep.cli.explain import print_explanation
    from sweep.grid import load

    catalog = load_catalog(args.catalog) if args.catalog else None
    grid = (run_grid_spec(args.grid, catalog) if args.grid.is_dir()
            else load(args.grid, catalog=catalog, allow_outside=args.allow_outside))
    from sweep.runner.progress import compile_cache_dir, enable_compile_cache

    enable_compile_cache(compile_cache_dir())  # the point's kernel compiles once, not on every explain
    print_explanation(explain(grid, point_id=args.point, filters=parse_filters(args.filters)))
    return EXIT_OK


def _cmd_search(args: argparse.Namespace) -> int:
    """Several of these share one study (journal storage on one host, a database across
    hosts); the budget is shared exactly. `sweep run` on the same folder afterwards writes
    search.parquet from the finished studies (it runs no new trial)."""
    from sweep.catalog import load_catalog
    from sweep.errors import GridError, disk_full
    from sweep.grid import load
    from sweep.grid.search_table import check_storage
    from sweep.io.lock import FolderLock
    from sweep.runner.progress import compile_cache_dir, enable_compile_cache
    from sweep.search import run_search

    if args.out is None:
        args.out = default_out(args.grid)
    grid = load(args.grid, catalog=load_catalog(args.catalog) if args.catalog else None,
                allow_outside=args.allow_outside)
    if grid.search is None:
        raise GridError(grid.source, "search", None,
                        "sweep search needs a [search] table; use sweep run for a plain grid")
    check_storage(grid.search, args.out, allow_outside=args.allow_outside)
    enable_compile_cache(compile_cache_dir())
    with FolderLock(args.out, what="sweep search", shared=True):
        try:
            result = run_search(grid, args.out)
        except Exception as exc:
            full = disk_full(exc)
            if full is None:
                raise
            raise ResourceError(f"{args.out}: the disk is full ({full}); the study keeps every trial it told: free "
                                "space and rerun the worker to continue") from None
    if not args.quiet:
        for s in result.meta["studies"]:
            print(f"{s['name']}: {s['trials_run']} trials run by this worker")
        for r in result.records():
            # NULL: misses a constraint
            value = "unbounded" if r["objective_value"] is None else f"{r['objective_value']:g}"
            print(f"{r['study_name']}: {r['objective']} = {value} at trial {r['trial_number']} "
                  f"({'meets every constraint' if r['meets_constraints'] else r['reason']})")
    return EXIT_OK


def _cmd_merge(args: argparse.Namespace) -> int:
    from sweep.runner import merge_shards

    manifest = merge_shards(args.out, wait=args.wait)
    if not args.quiet:
        r = manifest["rows"]
        print(f"merged {manifest['shards']['count']} shards into {args.out}: {r['grid_points']:,} points, "
              f"{r['optimum']:,} optimum rows, {r['frontier']:,} frontier rows, {r['points_written']:,} points written")
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
