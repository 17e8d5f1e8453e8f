"""A run's segments as tasks on a `dask.distributed` cluster (`sweep run --scheduler/--workers`).

The client (the `sweep run` process) keeps every guarantee of a run in one process
(README, "Reliability"): it holds the output folder's lock, decides which segments are
sealed, seals, verifies and publishes. The workers only evaluate and write:

* Each unsealed segment [begin, end) is one task, `segment_task`. It runs the same code as
  a segment in process (`sweep.runner.segment.SegmentWriter`, one per worker process and run,
  so a worker compiles once and reuses the compiled chunk function across its tasks; the
  simulator's host pass runs there too) and writes its files under its own attempt folder,
  `STAGING/attempts/SESSION/NNNNN-PID-RANDOM/`, laid out like the staging folder. It returns
  the segment's statistics and every file's rows, size and SHA-256.
* The client takes the results as they complete: it renames the attempt's files into place
  and only then seals the segment (`Staging.seal_records`). A segment is sealed exactly
  once, from exactly one attempt: an attempt cut short by a lost worker (Dask runs the task
  again elsewhere), or a duplicate attempt, leaves only files in its own attempt folder,
  which nothing reads and which is removed before publishing. A client killed before the
  seal leaves the segment unsealed: the same command computes it again.
* Workers and client need one shared file system for the output folder (any POSIX one
  where rename is atomic: NFS, Lustre, GPFS, CephFS, a Kubernetes ReadWriteMany volume).
  A worker that cannot see the folder fails its task with one line saying so.

`DaskExecutor` is the run's executor (`sweep.runner.executors`) on a cluster, chosen by
`sweep.runner.run.executor_for` when a run has `ClusterOptions`. Dask is an optional
dependency (`pip install 'sweep[cluster]'`), imported only here (`_distributed`) and only
when a run asks for a cluster: without it, such a run is refused in one line before any work.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import socket
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import jax

from sweep._version import __version__
from sweep.engine.evaluate import DEFAULT_CHUNK, Evaluator
from sweep.errors import OutputError, ResourceError
from sweep.grid.spec import GridSpec
from sweep.io.staging import Staging, file_record
from sweep.models import REGISTRY
from sweep.runner.executors import Executor, SegmentRun
from sweep.runner.progress import enable_compile_cache
from sweep.runner.segment import SegmentWriter

#: Points per segment (one task) on a cluster, unless `--segment-points` says otherwise:
#: small enough to spread a large grid over many workers, large enough that a task's fixed
#: cost (opening three Parquet files, sealing) stays small beside its work.
CLUSTER_SEGMENT_POINTS = 1 << 20
#: A simulated grid (each of its points runs a simulation) is cut into about this many chunks,
#: one segment each, so that it spreads over the workers; a chunk is whole scenario groups.
CLUSTER_TASKS = 256
ATTEMPTS = "attempts"
CONNECT_TIMEOUT_S = 10.0
NO_DASK = "running on a Dask cluster needs the cluster extra: pip install 'sweep[cluster]'"


def _distributed() -> ModuleType:
    """`dask.distributed`, or `OutputError` in one line saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise OutputError(NO_DASK) from None
    return distributed


@dataclass(frozen=True)
class ClusterOptions:
    """Where a run's segments go: a running scheduler (`scheduler`, e.g. tcp://host:8786)
    or a LocalCluster of `workers` worker processes started for the run."""

    scheduler: str | None = None
    workers: int | None = None
    connect_timeout_s: float = CONNECT_TIMEOUT_S

    def __post_init__(self) -> None:
        if (self.scheduler is None) == (self.workers is None):
            raise OutputError("a cluster run needs exactly one of --scheduler ADDRESS and --workers N")
        if self.workers is not None and self.workers < 1:
            raise OutputError(f"--workers {self.workers}: need at least 1")

    def describe(self) -> str:
        return self.scheduler if self.scheduler is not None else f"LocalCluster({self.workers} workers)"

    def check(self, timeout_s: float = 3.0) -> None:
        """Refuse, before any work, a run whose cluster cannot be had: Dask not installed, or
        a scheduler address that does not accept a TCP connection within `timeout_s`."""
        _distributed()
        if self.scheduler is None:
            return
        address = self.scheduler.split("://", 1)[-1]
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise OutputError(f"--scheduler {self.scheduler}: expected an address such as tcp://head-node:8786")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except OSError as exc:
            raise OutputError(f"--scheduler {self.scheduler}: cannot reach the Dask scheduler ({exc.strerror or type(exc).__name__}); "
                              "start it (dask scheduler) or fix the address") from None


def cluster_chunk(spec: GridSpec) -> int:
    """The default chunk on a cluster: the engine's default, or for a simulated grid about
    1/`CLUSTER_TASKS` of the grid (whole scenario groups), so that it makes tasks."""
    if not spec.simulates:
        return DEFAULT_CHUNK
    groups = max(1, spec.n_points // spec.group_size)
    return min(DEFAULT_CHUNK, max(1, math.ceil(groups / CLUSTER_TASKS)) * spec.group_size)


def cluster_segment(spec: GridSpec, chunk: int) -> int:
    """The default segment (task) on a cluster: one chunk for a simulated grid (each chunk is
    seconds of simulation), `CLUSTER_SEGMENT_POINTS` otherwise."""
    return chunk if spec.simulates else max(chunk, CLUSTER_SEGMENT_POINTS)


# --------------------------------------------------------------------------- client


@contextlib.contextmanager
def connect(options: ClusterOptions) -> Iterator[Any]:
    """A `distributed.Client` for the run (and the LocalCluster it asked for), closed after.

    Dask's own log lines are kept off stderr (a run's stderr is its progress log); what a
    person should know (a segment computed again after a lost worker) is said through the
    run's notes."""
    distributed = _distributed()
    # Dask logs through StreamHandlers on the "distributed" logger (child loggers such as
    # distributed.client carry their own levels): quiet the handlers themselves.
    quiet = logging.getLogger("distributed")
    handlers = [(h, h.level) for h in quiet.handlers if isinstance(h, logging.StreamHandler)]
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    for h, _ in handlers:
        h.setLevel(logging.CRITICAL)
    try:
        if options.scheduler is not None:
            try:
                client = distributed.Client(options.scheduler, timeout=options.connect_timeout_s, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                why = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
                raise OutputError(f"--scheduler {options.scheduler}: cannot reach the Dask scheduler ({why}); "
                                  "start it (dask scheduler) or fix the address") from None
            with client:
                yield client
        else:
            with (distributed.LocalCluster(n_workers=options.workers, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=logging.CRITICAL) as cluster,
                  distributed.Client(cluster, set_as_default=False) as client):
                yield client
    finally:
        quiet.setLevel(level)
        for h, before in handlers:
            h.setLevel(before)


class DaskExecutor(Executor):
    """Each unsealed segment a task on the cluster of `options`; the client seals each as its
    task completes (in completion order) and reports progress and notes."""

    def __init__(self, options: ClusterOptions) -> None:
        self.options = options
        self.info: dict[str, Any] = {"kind": "dask"}  # the manifest's entry, filled by run_segments
        self._compilations: int | None = None  # the most any worker process compiled

    def check(self) -> None:
        self.options.check()

    def chunk_size(self, spec: GridSpec, chunk: int) -> int:
        return min(chunk, cluster_chunk(spec))  # a simulated grid is split finer, so that it makes tasks

    def segment_points(self, spec: GridSpec, chunk: int) -> int:
        return cluster_segment(spec, chunk)

    def manifest(self) -> dict[str, Any]:
        return self.info

    def compilations(self, ev: Evaluator) -> int:
        return ev.compile_count() if self._compilations is None else self._compilations

    def run_segments(self, run: SegmentRun, bounds: Sequence[int]) -> int:
        staging, n_seg = run.staging, len(bounds)
        todo: list[tuple[int, int, int]] = []
        resumed = done = 0
        for k, begin in enumerate(bounds):
            end = min(begin + run.seg, run.stop)
            seal = run.sealed(k, n_seg)
            if seal is not None:
                run.add(seal["stats"])
                resumed += 1
                done += end - begin
            else:
                todo.append((k, begin, end))
        if done:
            run.report(done)
        self.info = {"kind": "dask", "cluster": self.options.describe(), "tasks": len(todo), "recomputed": 0}
        if not todo:
            return resumed
        attempts = staging.path / ATTEMPTS
        shutil.rmtree(attempts, ignore_errors=True)  # an earlier client's attempts: never sealed
        session = uuid.uuid4().hex[:12]
        folder = (attempts / session).resolve()
        folder.mkdir(parents=True)
        for k, _, _ in todo:
            staging.drop_segment(k, f"seg-{k:05d}-")
        job = {"spec": run.spec, "chunk_size": run.ev.chunk_size, "meta": run.meta, "run_key": run.run_key,
               "version": __version__, "cache_dir": getattr(jax.config, "jax_compilation_cache_dir", None) or None,
               "folder": str(folder)}
        kept_by_segment: dict[int, list] = {}
        compilations = 0
        with connect(self.options) as client:
            self.info["workers"] = len(client.nthreads())
            futures = {client.submit(segment_task, job, k, begin, end, key=f"sweep-{run.run_key}-{session}-{k:05d}"): (k, begin, end)
                       for k, begin, end in todo}
            try:
                for future in _distributed().as_completed(list(futures), loop=client.loop):
                    k, begin, end = futures.pop(future)
                    try:
                        result = future.result()
                    except Exception as exc:
                        if "CancelledError" in type(exc).__name__:
                            raise OutputError(f"segment {k + 1} of {n_seg}: its task was cancelled on the cluster; rerun to resume") from None
                        if type(exc).__name__ == "KilledWorker":
                            raise ResourceError(f"segment {k + 1} of {n_seg}: every worker that ran it died ({exc}); "
                                                "rerun the same command to resume (a worker's memory limit?)") from None
                        raise
                    _adopt(staging, k, folder / result["attempt"], result)
                    again = [p for p in folder.glob(f"{k:05d}-*") if p.name != result["attempt"]]
                    if again:
                        self.info["recomputed"] += 1
                        run.note(f"segment {k + 1} of {n_seg} was computed again on {result['worker']} "
                                 f"(the worker that had it was lost); nothing of the lost attempt was kept")
                    run.add(result["stats"])
                    for key, seconds in result["timings"].items():
                        run.timings[key] += seconds
                    compilations = max(compilations, result["compilations"])
                    if result["kept"] is not None:
                        kept_by_segment[k] = result["kept"]
                    done += end - begin
                    run.computed += end - begin
                    run.report(done)
            except BaseException:
                client.cancel(list(futures))
                raise
        for k in sorted(kept_by_segment):
            run.kept.extend(kept_by_segment[k])
        self._compilations = compilations
        shutil.rmtree(attempts, ignore_errors=True)
        return resumed


def _adopt(staging: Staging, k: int, attempt: Path, result: dict[str, Any]) -> None:
    """Rename the winning attempt's files into the staging folder, then seal segment `k`."""
    for rel, record in result["records"].items():
        src, dst = attempt / rel, staging.path / rel
        if not src.is_file() or src.stat().st_size != record["bytes"]:
            raise OutputError(f"{staging.out_dir}: segment {k + 1}: {rel} is not where its worker wrote it; is the "
                              "output folder on a file system shared by the client and every worker?")
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
    staging.seal_records(k, result["stats"], result["records"])


# --------------------------------------------------------------------------- worker

#: Per worker process: the segment writer of each recent run (its compiled chunk function).
_WRITERS: dict[str, SegmentWriter] = {}


def segment_task(job: dict[str, Any], k: int, begin: int, end: int) -> dict[str, Any]:
    """On a worker: evaluate and write segment `k` = points [begin, end) under a fresh
    attempt folder; return its statistics and its files' records (never seals)."""
    where = f"{socket.gethostname()}:{os.getpid()}"
    if job["version"] != __version__:
        raise OutputError(f"worker {where} runs sweep {__version__}, the client {job['version']}: install the same version everywhere")
    folder = Path(job["folder"])
    if not folder.is_dir():
        raise OutputError(f"worker {where} cannot see {folder}: a cluster run needs the output folder on a file system "
                          "shared by the client and every worker (or the run was restarted meanwhile)")
    writer = _writer(job)
    attempt = folder / f"{k:05d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    attempt.mkdir()
    kept: list = []
    before = dict(writer.timings)
    stats, files = writer.write(k, begin, end, attempt, kept, first=True)
    records = {str(p.relative_to(attempt)): file_record(p, rows) for p, rows in files}
    return {"attempt": attempt.name, "stats": stats, "records": records, "worker": where,
            "kept": kept if writer.keep_rows else None, "compilations": writer.ev.compile_count(),
            "timings": {key: writer.timings[key] - before[key] for key in writer.timings}}


def _writer(job: dict[str, Any]) -> SegmentWriter:
    """The process's writer for this run (built on its first task: Evaluator, schemas)."""
    key = job["run_key"]
    if key not in _WRITERS:
        enable_compile_cache(job["cache_dir"])
        spec: GridSpec = job["spec"]
        # the registry's own model object: the engine's compile caches are keyed by it
        spec = replace(spec, model=REGISTRY[(spec.model.serving, spec.model.name)])
        writer = SegmentWriter(spec, Evaluator(spec, job["chunk_size"]), job["meta"])
        while len(_WRITERS) >= 4:
            _WRITERS.pop(next(iter(_WRITERS)))
        _WRITERS[key] = writer
    return _WRITERS[key]
