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
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if threading.current_thread() is threading.main_thread() else None
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sweep", description="Capacity planning for batched inference serving.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="evaluate a grid file and write Parquet")
    r.add_argument("grid", type=Path, help="grid file (TOML), see grids/example.toml")
    r.add_argument("--out", type=Path, required=True, help="output folder")
    r.add_argument("--chunk-size", type=int_at_least_one, default=None, help="points per evaluation chunk (bounds memory; default 65536)")
    r.add_argument("--memory-limit", type=int_at_least_one, default=None, metavar="MB",
                   help="keep the run near MB megabytes of memory (sets the chunk and row-group sizes; refused with the least it needs when too small)")
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
                   help="seconds between progress log lines (> 0)")
    r.add_argument("--quiet", action="store_true", help="print nothing but errors")
    r.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                   help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    where = r.add_mutually_exclusive_group()
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="run the segments as tasks on a running dask.distributed scheduler, e.g. tcp://head:8786 "
                            "(needs sweep[cluster] and OUT on a file system the workers share)")
    where.add_argument("--workers", type=int_at_least_one, default=None, metavar="N",
                       help="run the segments as tasks on a LocalCluster of N worker processes started for the run")
    r.add_argument("--segment-points", type=int_at_least_one, default=None, metavar="N",
                   help="points per resumable segment, one task on a cluster (rounded to whole chunks; "
                        "default 8,388,608 in process, 1,048,576 on a cluster, one chunk for a simulated grid)")
    r.set_defaults(handler=_cmd_run)
    one_line_errors(r)
    m = sub.add_parser("merge", help="combine the shards in OUT/shards/ into one output")
    m.add_argument("out", type=Path, help="the --out folder the shards were run with")
    m.add_argument("--quiet", action="store_true")
    m.add_argument("--wait", action="store_true", help="if another sweep is writing OUT, wait for it")
    m.set_defaults(handler=_cmd_merge)
    one_line_errors(m)
    w = sub.add_parser("search", help="a search worker: run the grid's [search] studies only, sharing OUT with other workers")
    w.add_argument("grid", type=Path, help="grid file with a [search] table")
    w.add_argument("--out", type=Path, required=True,
                   help="the folder of the shared storage (search.db / search.journal); workers hold it shared, "
                        "a `sweep run` on it waits for them")
    w.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                   help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    w.add_argument("--quiet", action="store_true")
    w.set_defaults(handler=_cmd_search)
    one_line_errors(w)
    from sweep.cli import tools

    tools.add_commands(sub)  # sweep fit, sweep kv, sweep catalog
    return p


def _cmd_run(args: argparse.Namespace) -> int:
    from sweep.catalog import load_catalog
    from sweep.cli.summary import print_summary
    from sweep.grid import load
    from sweep.runner import Shard, run_grid
    from sweep.runner.progress import ProgressReporter, enable_compile_cache

    grid = load(args.grid, catalog=load_catalog(args.catalog) if args.catalog else None)
    shard = Shard.parse(args.shard) if args.shard else None
    if grid.search is not None:
        from sweep.grid.search_table import check_storage

        check_storage(grid.search, args.out)  # an unreachable database is refused before any work
    cluster = None
    if args.scheduler is not None or args.workers is not None:
        from sweep.runner.cluster import ClusterOptions

        cluster = ClusterOptions(scheduler=args.scheduler, workers=args.workers)
        cluster.check()  # Dask missing or an unreachable scheduler is refused before any work
    if args.memory_limit and not args.chunk_size:
        from sweep.runner.memory import plan_memory

        plan_memory(grid, args.memory_limit)  # a limit below the grid's floor is refused before any work
    enable_compile_cache(compile_cache_dir())
    mode = "none" if args.quiet else args.progress
    with ProgressReporter(grid.name, mode, args.log_interval) as progress:
        result = run_grid(grid, args.out, chunk_size=args.chunk_size, shard=shard, force=args.force, wait=args.wait,
                          memory_limit_mb=None if args.chunk_size else args.memory_limit,
                          progress=None if mode == "none" else progress, note=progress.note,
                          segment_points=args.segment_points, cluster=cluster)
    if not args.quiet:
        print_summary(grid, result)
    return EXIT_OK


def compile_cache_dir() -> str | None:
    """Where compiled kernels persist across runs: $SWEEP_CACHE_DIR, else
    $XDG_CACHE_HOME/sweep/jax or ~/.cache/sweep/jax; SWEEP_CACHE_DIR="" turns it off."""
    import os

    if "SWEEP_CACHE_DIR" in os.environ:
        return os.environ["SWEEP_CACHE_DIR"] or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sweep", "jax")


def _cmd_search(args: argparse.Namespace) -> int:
    """Several of these share one study (journal storage on one host, a database across
    hosts); the budget is shared exactly. `sweep run` on the same folder afterwards writes
    search.parquet from the finished studies (it runs no new trial)."""
    from sweep.catalog import load_catalog
    from sweep.errors import GridError
    from sweep.grid import load
    from sweep.grid.search_table import check_storage
    from sweep.io.lock import FolderLock
    from sweep.runner.progress import enable_compile_cache
    from sweep.search import run_search

    grid = load(args.grid, catalog=load_catalog(args.catalog) if args.catalog else None)
    if grid.search is None:
        raise GridError(grid.source, "search", None, "sweep search needs a [search] table; use sweep run for a plain grid")
    check_storage(grid.search, args.out)
    enable_compile_cache(compile_cache_dir())
    with FolderLock(args.out, what="sweep search", shared=True):
        result = run_search(grid, args.out)
    if not args.quiet:
        for s in result.meta["studies"]:
            print(f"{s['name']}: {s['trials_run']} trials run by this worker")
        for r in result.records():
            print(f"{r['study_name']}: {r['objective']} = {r['objective_value']:g} at trial {r['trial_number']} "
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
