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
  A worker that cannot see the folder (or runs another sweep) fails its task with one line
  saying so, and the client leaves that worker out of the run's later tasks.
* A task that fails on one worker is submitted again, restricted to the workers that have
  not failed it; the run stops only when every live worker has failed a task, in one line
  naming the segment and the cause (`DaskExecutor`).
* A worker keeps the run's evaluator across its tasks under the run's key, a digest of
  every input (`sweep.runner.identity`): an edited catalog entry, profile or trace file,
  or other engine code, is another key, never the old figures.

`DaskExecutor` is the run's executor (`sweep.runner.executors`) on a cluster, chosen by
`sweep.runner.run.executor_for` when a run has `ClusterOptions`. Dask is an optional
dependency (`pip install 'sweep-capacity[cluster]'`), imported only here (`_distributed`) and only
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
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sweep._faults import active
from sweep._lazy import lazy_module
from sweep._version import __version__
from sweep.engine.evaluate import DEFAULT_CHUNK, Evaluator
from sweep.errors import OutputError, ResourceError, SweepError
from sweep.grid.spec import GridSpec
from sweep.io.staging import Staging, file_record
from sweep.models import REGISTRY
from sweep.runner.executors import Executor, SegmentRun
from sweep.runner.identity import engine_digest, isa_tag, machine
from sweep.runner.progress import enable_compile_cache
from sweep.runner.segment import SegmentWriter

if TYPE_CHECKING:
    import jax
else:
    jax = lazy_module("jax")

#: The most points per segment (one task) on a cluster, unless `--segment-points` says
#: otherwise: a large grid makes more tasks than `CLUSTER_TASKS` rather than longer ones.
CLUSTER_SEGMENT_POINTS = 1 << 20
#: An analytic grid is cut into about this many tasks (whole scenario groups each; fewer when
#: the grid has fewer groups), so that a cluster of up to 16 workers gets at least 4 tasks
#: per worker: llm-fleet made 1 task with 1M-point segments alone. More tasks cost more than
#: they spread: llm-fleet in 256 tasks took 67 s on 1 warm worker against 31 s in process
#: (benchmarks/README.md, "Cluster").
CLUSTER_TASKS = 64
#: A simulated grid (each of its points runs a simulation: a task is seconds of work) is cut
#: into about this many tasks.
SIM_TASKS = 256
ATTEMPTS = "attempts"
#: The environment variable naming the compilation cache folder a cluster's workers share.
CACHE_ENV = "SWEEP_CLUSTER_CACHE_DIR"
#: For a scheduler's workers, without CACHE_ENV: this folder beside the output folder.
SHARED_CACHE = ".sweep-jax-cache"
CONNECT_TIMEOUT_S = 10.0
NO_DASK = "running on a Dask cluster needs the cluster extra: pip install 'sweep-capacity[cluster]'"


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
            raise OutputError(f"--scheduler {self.scheduler}: cannot reach the Dask scheduler "
                              f"({exc.strerror or type(exc).__name__}); "
                              "start it (dask scheduler) or fix the address") from None


def cluster_tasks(spec: GridSpec) -> int:
    """About how many tasks a cluster cuts `spec` into (before the 1M-point cap)."""
    return SIM_TASKS if spec.simulates else CLUSTER_TASKS


def _task_groups(spec: GridSpec) -> int:
    """Scenario groups per task: the grid's groups over about `cluster_tasks` tasks."""
    groups = max(1, spec.n_points // spec.group_size)
    return max(1, math.ceil(groups / cluster_tasks(spec)))


def cluster_chunk(spec: GridSpec) -> int:
    """The default chunk on a cluster: the engine's default, or one task's points when a
    task is smaller (a chunk holds whole scenario groups: it never spans two tasks)."""
    per_point = spec.uncertainty.samples if spec.uncertainty is not None else 1
    return min(DEFAULT_CHUNK, _task_groups(spec) * spec.group_size * per_point)


def cluster_segment(spec: GridSpec, chunk: int) -> int:
    """The default segment (one task) on a cluster, in points: about 1/`cluster_tasks` of
    the grid (whole scenario groups; a grid of fewer groups makes one task per group), at
    most `CLUSTER_SEGMENT_POINTS` (so a large grid makes more tasks), at least one chunk.
    It depends on the grid only, never on how many workers there are: the same command
    resumes on a cluster of any size."""
    return max(chunk, min(_task_groups(spec) * spec.group_size, CLUSTER_SEGMENT_POINTS))


# --------------------------------------------------------------------------- client


@contextlib.contextmanager
def _quiet_dask() -> Iterator[None]:
    """Dask's own log lines and warnings kept off stderr for the block (a run's stderr is its
    progress log: in log mode, JSON lines only). Dask logs through StreamHandlers on the
    "distributed" logger (child loggers such as distributed.client carry their own levels),
    and warns (a busy dashboard port, a slow call) through `warnings`."""
    quiet = logging.getLogger("distributed")
    handlers = [(h, h.level) for h in quiet.handlers if isinstance(h, logging.StreamHandler)]
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    for h, _ in handlers:
        h.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"distributed(\..*)?$")
            warnings.filterwarnings("ignore", message=r"(?s)Port \d+ is already in use")
            yield
    finally:
        quiet.setLevel(level)
        for h, before in handlers:
            h.setLevel(before)


@contextlib.contextmanager
def connect(options: ClusterOptions) -> Iterator[Any]:
    """A `distributed.Client` for the run (and the LocalCluster it asked for), closed after.

    Dask's own log lines and warnings are kept off stderr (`_quiet_dask`; a LocalCluster's
    worker processes start with the same filters); what a person should know (a segment
    computed again after a lost worker, a worker that cannot do the run's tasks) is said
    through the run's notes."""
    distributed = _distributed()
    with _quiet_dask():
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
            quiet_env = {"PYTHONWARNINGS": "ignore"}  # the worker processes' own warnings
            with (distributed.LocalCluster(n_workers=options.workers, threads_per_worker=1, processes=True,
                                           dashboard_address=None, worker_dashboard_address=None,
                                           silence_logs=logging.CRITICAL, env=quiet_env) as cluster,
                  distributed.Client(cluster, set_as_default=False) as client):
                yield client


class WorkerUnfit(OutputError):
    """A worker cannot do any of the run's tasks (it cannot see the output folder, runs
    another engine): the client gives its tasks to the other workers."""


class DaskExecutor(Executor):
    """Each unsealed segment a task on the cluster of `options`; the client seals each as its
    task completes (in completion order) and reports progress and notes.

    A task that fails on a worker is submitted again, restricted to the workers that have
    not failed it (and to none that is unfit for the run); the run stops only when every
    worker has failed a task, with one line naming the segment and the cause."""

    def __init__(self, options: ClusterOptions) -> None:
        self.options = options
        self.info: dict[str, Any] = {"kind": "dask"}  # the manifest's entry, filled by run_segments
        self._compilations: int | None = None  # the most any worker process compiled

    def check(self) -> None:
        self.options.check()

    def chunk_size(self, spec: GridSpec, chunk: int) -> int:
        return min(chunk, cluster_chunk(spec))  # a small task holds a small chunk

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
        self.info = {"kind": "dask", "cluster": self.options.describe(), "tasks": len(todo), "recomputed": 0,
                     "retried": 0}
        if not todo:
            return resumed
        attempts = staging.path / ATTEMPTS
        shutil.rmtree(attempts, ignore_errors=True)  # an earlier client's attempts: never sealed
        session = uuid.uuid4().hex[:12]
        folder = (attempts / session).resolve()
        folder.mkdir(parents=True)
        for k, _, _ in todo:
            staging.drop_segment(k, f"seg-{k:05d}-")
        here = machine()
        job = {"spec": run.spec, "chunk_size": run.ev.chunk_size, "meta": run.meta, "run_key": run.run_key,
               "version": __version__, "engine": engine_digest(), "cache_dir": self._cache_dir(staging.out_dir),
               "isa": isa_tag(here), "folder": str(folder)}
        kept_by_segment: dict[int, list] = {}
        compilations = 0
        failed_on: dict[int, dict[str, str]] = {}  # segment -> {worker address: why}
        unfit: dict[str, str] = {}  # worker address -> why it can do none of the run's tasks
        tries: dict[int, int] = {}
        errors: dict[int, BaseException] = {}  # segment -> the last error a worker raised on it
        with connect(self.options) as client:
            self.info["workers"] = len(client.nthreads())

            def submit(k: int, begin: int, end: int) -> Any:
                n = tries[k] = tries.get(k, 0) + 1
                avoid = set(failed_on.get(k, ())) | set(unfit)
                where: dict[str, Any] = {}
                if avoid:
                    alive = set(client.nthreads())
                    left = sorted(alive - avoid)
                    if not left or len(failed_on.get(k, ())) >= 2 * len(alive):  # (failures of no known worker)
                        self._give_up(k, n_seg, failed_on.get(k, {}), unfit, len(alive), errors.get(k))
                    # loose: should every worker left die, any worker may take it (and fail it)
                    where = {"workers": left, "allow_other_workers": True}
                return client.submit(segment_task, job, k, begin, end, pure=False,
                                     key=f"sweep-{run.run_key}-{session}-{k:05d}-{n}", **where)

            futures = {submit(k, begin, end): (k, begin, end) for k, begin, end in todo}
            pending = _distributed().as_completed(list(futures), loop=client.loop)
            try:
                for future in pending:
                    k, begin, end = futures.pop(future)
                    try:
                        result = future.result()
                    except Exception as exc:
                        if "CancelledError" in type(exc).__name__:
                            raise OutputError(f"segment {k + 1} of {n_seg}: its task was cancelled on the cluster; "
                                              "rerun to resume") from None
                        if type(exc).__name__ == "KilledWorker":
                            raise ResourceError(f"segment {k + 1} of {n_seg}: every worker that ran it died ({exc}); "
                                                "rerun the same command to resume (a worker's memory limit?)") from None
                        address, who = getattr(exc, "sweep_worker", (None, "a worker"))
                        why = _one_line(exc)
                        if who not in why:
                            why = f"worker {who}: {why}"
                        if isinstance(exc, WorkerUnfit) and address is not None:
                            if address not in unfit:
                                run.note(f"{why}; its tasks go to the other workers")
                            unfit[address] = why
                        failed_on.setdefault(k, {})[address or f"unknown-{tries[k]}"] = why
                        if not isinstance(exc, SweepError) and address is None:
                            raise  # not raised by the task (a bug): as in process
                        errors[k] = exc
                        self.info["retried"] += 1
                        retry = submit(k, begin, end)
                        futures[retry] = (k, begin, end)
                        pending.add(retry)
                        continue
                    _adopt(staging, k, folder / result["attempt"], result)
                    again = [p for p in folder.glob(f"{k:05d}-*") if p.name != result["attempt"]]
                    if again and not failed_on.get(k):
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

    def _give_up(self, k: int, n_seg: int, failed: dict[str, str], unfit: dict[str, str], alive: int,
                 last: BaseException | None) -> None:
        """Every live worker failed segment `k` (or is unfit for the run): one line naming the
        segment and the cause, the error class of the cause (a full disk stays exit 1)."""
        causes = list(dict.fromkeys([*failed.values(), *unfit.values()]))
        workers = f"{alive} worker{'s' if alive != 1 else ''}"
        message = (f"segment {k + 1} of {n_seg}: no worker could compute it ({workers}, each failed it or cannot do "
                   f"the run's tasks; the last cause of {len(causes)}): {causes[-1]}")
        if isinstance(last, ResourceError):
            raise ResourceError(message)
        if isinstance(last, SweepError) or last is None:
            raise OutputError(message)
        raise last  # a bug in the task, on every worker: its traceback, as in process

    def _cache_dir(self, out_dir: Path) -> str | None:
        """The compilation cache the workers share: `$SWEEP_CLUSTER_CACHE_DIR` when set (""
        turns it off), else the client's own (the CLI's `progress.compile_cache_dir()`:
        $SWEEP_CACHE_DIR, ~/.cache/sweep/jax) for a LocalCluster, and for a scheduler's workers
        (other machines) a folder beside the output folder, on the file system the run already
        needs them to share."""
        if CACHE_ENV in os.environ:
            return os.environ[CACHE_ENV] or None
        own = getattr(jax.config, "jax_compilation_cache_dir", None) or None
        if self.options.scheduler is None or own is None:
            return own
        return str(out_dir.resolve().parent / SHARED_CACHE)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


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

#: Per worker process: the segment writer of each recent run (its compiled chunk function),
#: by run key: a digest of every input of the run (`sweep.runner.identity`), so an edited
#: catalog entry, profile or trace is a new writer, never the old one's figures.
_WRITERS: dict[str, SegmentWriter] = {}


def segment_task(job: dict[str, Any], k: int, begin: int, end: int) -> dict[str, Any]:
    """On a worker: evaluate and write segment `k` = points [begin, end) under a fresh
    attempt folder; return its statistics and its files' records (never seals). An error
    carries the worker's address (`sweep_worker`), so that the client retries elsewhere."""
    where = f"{socket.gethostname()}:{os.getpid()}"
    try:
        return _segment_task(job, k, begin, end, where)
    except Exception as exc:
        with contextlib.suppress(Exception):
            exc.sweep_worker = (_distributed().get_worker().address, where)  # type: ignore[attr-defined]
        raise


def _segment_task(job: dict[str, Any], k: int, begin: int, end: int, where: str) -> dict[str, Any]:
    if job["version"] != __version__:
        raise WorkerUnfit(f"worker {where} runs sweep {__version__}, the client {job['version']}: "
                          "install the same version everywhere")
    if job["engine"] != engine_digest():
        raise WorkerUnfit(f"worker {where} runs other sweep code than the client (same version {__version__}, "
                          "edited or older files): install the same sweep everywhere and restart the workers")
    folder = Path(job["folder"])
    if active("worker-blind") or not folder.is_dir():
        raise WorkerUnfit(f"worker {where} cannot see {folder}: a cluster run needs the output folder on a file "
                          "system shared by the client and every worker (or the run was restarted meanwhile)")
    writer = _writer(job)
    attempt = folder / f"{k:05d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    attempt.mkdir()
    kept: list = []
    before = dict(writer.timings)
    stats, files = writer.write(k, begin, end, attempt, kept, first=True)
    stats["computed_by"] = {**machine(), "worker": where}
    records = {str(p.relative_to(attempt)): file_record(p, rows) for p, rows in files}
    return {"attempt": attempt.name, "stats": stats, "records": records, "worker": where,
            "kept": kept if writer.keep_rows else None, "compilations": writer.ev.compile_count(),
            "timings": {key: writer.timings[key] - before[key] for key in writer.timings}}


def worker_cache_dir(base: str | None, client_isa: str) -> str | None:
    """The compilation cache folder of this worker: the shared `base` on a machine with the
    client's instruction sets, else its own subfolder `base/ISA-TAG` (compiled code is
    specific to the instruction sets; JAX's cache key does not name them). None when `base`
    cannot be written here (the worker compiles, as without a cache)."""
    if not base:
        return None
    tag = isa_tag(machine())
    path = Path(base) if tag == client_isa else Path(base) / tag
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return None
    return str(path)


def _writer(job: dict[str, Any]) -> SegmentWriter:
    """The process's writer for this run (built on its first task: Evaluator, schemas)."""
    key = job["run_key"]
    if key not in _WRITERS:
        enable_compile_cache(worker_cache_dir(job["cache_dir"], job["isa"]))
        spec: GridSpec = job["spec"]
        # the registry's own model object: the engine's compile caches are keyed by it
        spec = replace(spec, model=REGISTRY[(spec.model.serving, spec.model.name)])
        writer = SegmentWriter(spec, Evaluator(spec, job["chunk_size"]), job["meta"])
        while len(_WRITERS) >= 4:
            _WRITERS.pop(next(iter(_WRITERS)))
        _WRITERS[key] = writer
    return _WRITERS[key]
