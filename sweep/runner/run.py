"""One grid run: evaluate chunk by chunk, stream to Parquet, publish atomically (SPEC 9).

A run (or one shard of it, `--shard i/n`) covers a contiguous range of scenario groups and
works through it in *segments* of whole chunks. Each segment's files (points parts, its
optimum rows, its frontier rows) go to a staging folder inside the output folder and are
sealed by a `done` marker; an interrupted run restarted with the same command skips the
sealed segments and resumes. When every segment is sealed, the optimum and frontier parts
are concatenated in order into `optimum.parquet` and `frontier.parquet`, the points parts
are moved into `points/`, and `manifest.json` is written last. A finished run with the
same grid, version and settings is not run again (`force` overrides).
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.parquet as pq

from sweep._lazy import lazy_module
from sweep._version import __version__
from sweep.decide.layouts import has_layouts, layout_companion
from sweep.decide.schedule import ROW_FACTS, schedule_table
from sweep.decide.verdict import ACTIONS
from sweep.engine.evaluate import DEFAULT_CHUNK, Evaluator, chunk_points
from sweep.errors import OutputError, ResourceError, disk_full
from sweep.grid.spec import GridSpec
from sweep.io.lock import FolderLock
from sweep.io.parquet import COMPRESSION, DatasetWriter, arrow_schema, concat_parquet, record_batch
from sweep.io.published import DamagedRunError, check_run
from sweep.io.staging import PUBLISH, STAGING_PREFIX, DamagedError, Staging, file_record, recover
from sweep.runner.cluster import ClusterOptions, DaskExecutor
from sweep.runner.executors import Executor, InProcess
from sweep.runner.identity import isa_tag, run_inputs
from sweep.runner.layouts import with_layouts
from sweep.runner.memory import plan_memory
from sweep.runner.segment import SegmentWriter

if TYPE_CHECKING:
    import jax
else:
    jax = lazy_module("jax")

#: The replica schedule's file (grids with [schedule], SPEC 12).
SCHEDULE_FILE = "schedule.parquet"

#: (points done, points total, points computed by this process: resumed segments excluded;
#: on a cluster, by its workers for this run)
Progress = Callable[[int, int, int], None]
Note = Callable[[str], None]  # one line a person should read


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (1-based): a contiguous, disjoint range of scenario groups."""

    index: int = 1
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        try:
            i, n = (int(x) for x in text.split("/"))
        except ValueError:
            raise OutputError(f"--shard {text!r}: expected i/n with integers, e.g. --shard 3/8") from None
        if not (n >= 1 and 1 <= i <= n):
            raise OutputError(f"--shard {text!r}: need 1 <= i <= n, e.g. --shard 3/8")
        return cls(i, n)

    @property
    def folder(self) -> str:
        return f"{self.index:04d}-of-{self.count:04d}"

    def groups(self, n_groups: int) -> tuple[int, int]:
        return (self.index - 1) * n_groups // self.count, self.index * n_groups // self.count


@dataclass
class RunResult:
    out_dir: Path
    manifest: dict[str, Any]
    rows: dict[str, np.ndarray] | None  # every point, for small grids (terminal summary)
    action_counts: dict[str, int] = field(default_factory=dict)
    feasible: int = 0
    skipped: bool = False  # an identical finished run was found: nothing was done


def provenance(spec: GridSpec) -> dict[str, Any]:
    """What a reader of any output file needs to know where it came from. The engine variant
    (`scheduler_policy`, `scheduler_steps`, `kv_admission`) is a continuous engine's; null for
    the other servings."""
    continuous = spec.options.serving == "continuous"
    return {
        "sweep_version": __version__,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "grid_name": spec.name,
        "grid_file": spec.source,
        "grid_sha256": spec.sha256,
        "grid_toml": spec.text,
        "service_source": spec.service_source,
        "service_fit": getattr(spec, "fit", None),
        "serving": spec.options.serving,
        "latency_model": spec.options.latency_model,
        "kv_allocation": spec.options.kv_allocation,
        "scheduler_policy": spec.options.scheduler_policy if continuous else None,
        "scheduler_steps": spec.options.scheduler_steps if continuous else None,
        "kv_admission": spec.options.kv_admission if continuous else None,
    }


def output_folder(out_dir: Path, shard: Shard | None) -> Path:
    return out_dir if shard is None or shard.count == 1 else out_dir / "shards" / shard.folder


def executor_for(cluster: ClusterOptions | None) -> Executor:
    """The one place a run's executor is chosen: in this process, or on the Dask cluster of
    `cluster` (`sweep run --scheduler ADDRESS` / `--workers N`)."""
    return InProcess() if cluster is None else DaskExecutor(cluster)


def run_grid(
    spec: GridSpec,
    out_dir: str | Path,
    *,
    chunk_size: int | None = None,
    progress: Progress | None = None,
    shard: Shard | None = None,
    force: bool = False,
    segment_points: int | None = None,
    wait: bool = False,
    note: Note | None = None,
    memory_limit_mb: int | None = None,
    cluster: ClusterOptions | None = None,
) -> RunResult:
    """Evaluate `spec` (or one shard of it) and write points/, optimum, frontier, manifest.

    Holds the output folder's lock for the whole run (`LockedError` when another process
    writes it, unless `wait`). `note` gets one line per thing a person should know (a
    damaged segment computed again); a `progress` with a `search` method (a
    `sweep.runner.progress.ProgressReporter`) also hears the `[search]` studies' trials.
    A full disk raises `ResourceError` after removing the run's staging folder.
    `memory_limit_mb` sets the chunk size, the points' row-group size and the simulator's
    budget (`sweep.runner.memory`), or refuses a limit below the least the grid needs.

    `cluster` runs the segments as tasks on a `dask.distributed` cluster (a running
    scheduler, or a LocalCluster of N worker processes; `sweep.runner.cluster`): the workers
    write each segment's files, this process keeps the lock, seals, verifies and publishes.
    `segment_points` (points per resumable segment, i.e. per task) defaults to
    `sweep.runner.executors.SEGMENT_POINTS` in process and to
    `sweep.runner.cluster.cluster_segment` on a cluster.
    """
    t0 = time.perf_counter()
    executor = executor_for(cluster)
    executor.check()  # refused before any work
    limit_chunk = None
    if memory_limit_mb is not None:
        plan = plan_memory(spec, memory_limit_mb)
        limit_chunk = plan.chunk_size
        if plan.row_group_rows is not None:
            spec = replace(spec, output=replace(spec.output, row_group_rows=plan.row_group_rows))
        if plan.sim_budget_bytes is not None and spec.simulation is not None:
            spec = replace(spec, simulation=replace(spec.simulation, memory_budget_bytes=plan.sim_budget_bytes))
    target = output_folder(Path(out_dir), shard)
    shard = shard or Shard()
    if chunk_size is None or limit_chunk is not None:  # not given, or set by the memory limit
        chunk_size = executor.chunk_size(spec, limit_chunk or DEFAULT_CHUNK)
    points_per_chunk = chunk_points(spec, chunk_size)  # the Evaluator (device arrays, jit) only when work is left
    if segment_points is None:
        segment_points = executor.segment_points(spec, points_per_chunk)
    seg = max(1, segment_points // points_per_chunk) * points_per_chunk
    if spec.schedule is not None and shard.count > 1:
        raise OutputError(f"{spec.source}: a grid with [schedule] plans across every scenario group; "
                          "run it without --shard")
    # Every input the results depend on (grid, catalog entries, profile and trace files,
    # the engine: `sweep.runner.identity`) and the settings that cut the run into segments.
    inputs = run_inputs(spec)
    key = [inputs["digest"], __version__, shard.index, shard.count, points_per_chunk, seg]
    run_key = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
    created = not target.exists()
    with FolderLock(target, what="sweep run", wait=wait) as lock:
        recover(target)
        done = _finished(target, run_key, note or _quiet)
        if done is not None and not force:
            return RunResult(target, done, None, done["rows"]["actions"], done["rows"]["feasible"], skipped=True)
        staged = target / f"{STAGING_PREFIX}{run_key}"
        try:
            staging = Staging(target, run_key)
            if force:
                staging.discard()
            # a disaggregated grid's companion (one pool, the same workload) is validated before any work
            companion = layout_companion(spec) if has_layouts(spec) else None
            evaluator = Evaluator(spec, chunk_size)
            return _Run(spec, evaluator, staging, shard, seg, run_key, progress, t0, note or _quiet, executor,
                        inputs, companion).execute()
        except Exception as exc:  # a full disk at any write: the staging, the points, the search's study, publishing
            full = disk_full(exc)
            where = getattr(exc, "filename", None) or target
            if full is not None and (staged / PUBLISH).exists():  # committed: the new output is whole in the staging
                raise ResourceError(f"{where}: the disk is full ({full}) while publishing; free space and rerun "
                                    "the same command to finish it") from None
            if full is not None or not _resumable(staged):
                # nothing a rerun could resume (or the space is needed back): leave no staging,
                # and no folder where the run created it
                shutil.rmtree(staged, ignore_errors=True)
                if created:
                    lock.remove_if_unused()
            if full is not None:
                raise ResourceError(f"{where}: the disk is full ({full}); the run's staging folder was "
                                    "removed; free space (or use another --out) and rerun") from None
            raise


def _resumable(staged: Path) -> bool:
    """Some segment of the staging folder is sealed: a rerun of the same command resumes from it."""
    return any((staged / "segments").glob("*.json"))


def _quiet(message: str) -> None:
    return None


def _finished(target: Path, run_key: str, note: Note) -> dict[str, Any] | None:
    """The manifest of the identical run finished in `target`, if the folder still checks
    whole (`sweep.io.published`); a damaged one is said in one line and computed again."""
    path = target / Staging.MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("run_key") != run_key:
        return None
    try:
        return check_run(target)
    except DamagedRunError as exc:
        note(f"{exc.detail}; computing the run again")
        return None


class _Run:
    """The state of one run (a `sweep.runner.executors.SegmentRun`); `execute` does it."""

    def __init__(self, spec: GridSpec, ev: Evaluator, staging: Staging, shard: Shard, seg: int,
                 run_key: str, progress: Progress | None, t0: float, note: Note, executor: Executor,
                 inputs: dict[str, Any], companion: GridSpec | None = None) -> None:
        self.spec, self.ev, self.staging, self.shard = spec, ev, staging, shard
        self.inputs = inputs
        self.seg, self.run_key, self.progress, self.t0, self.note = seg, run_key, progress, t0, note
        self.executor = executor
        self.companion = companion
        self.meta = provenance(spec)
        self.writer = SegmentWriter(spec, ev, self.meta)
        self.opt_schema, self.front_schema = self.writer.opt_schema, self.writer.front_schema
        g0, g1 = shard.groups(spec.n_points // ev.group_size)
        self.start, self.stop = g0 * ev.group_size, g1 * ev.group_size
        self.timings = self.writer.timings
        self.computed = 0  # points evaluated for this run (resumed segments are not)
        self.stats: dict[str, Any] = {"points_written": 0, "optimum": 0, "frontier": 0, "feasible": 0,
                                      "actions": [0] * len(ACTIONS)}
        self.kept: list[dict[str, np.ndarray]] = []  # every row, for small grids (terminal summary)
        self.search_s: float | None = None  # the [search] studies' seconds (timed apart from the grid)

    def report(self, done: int) -> None:
        """Progress: after every chunk in process (the reporter rate-limits what it prints),
        so a person or a log hears from the run whatever the segment size; after every task
        on a cluster."""
        if self.progress is not None:
            self.progress(done, self.stop - self.start, self.computed)

    def add(self, seg_stats: dict[str, Any]) -> None:
        """Count a sealed segment's statistics into the run's."""
        stats = self.stats
        for key in ("points_written", "optimum", "frontier", "feasible"):
            stats[key] += seg_stats[key]
        stats["actions"] = [a + b for a, b in zip(stats["actions"], seg_stats["actions"])]

    # ------------------------------------------------------------------ driver

    def execute(self) -> RunResult:
        bounds = list(range(self.start, self.stop, self.seg))
        n_seg = len(bounds)
        resumed = self.executor.run_segments(self, bounds)
        stats, kept = self.stats, self.kept
        w0 = time.perf_counter()
        final = self.staging.final
        self._verify(n_seg)
        concat_parquet([self.staging.path / "optimum" / f"{k:05d}.parquet" for k in range(n_seg)],
                       final / "optimum.parquet", self.opt_schema)
        if self.companion is not None:
            self._layouts(final / "optimum.parquet")
        concat_parquet([self.staging.path / "frontier" / f"{k:05d}.parquet" for k in range(n_seg)],
                       final / "frontier.parquet", self.front_schema)
        if self.spec.schedule is not None:
            self._schedule(n_seg)
        self.timings["write"] += time.perf_counter() - w0
        search_meta = None
        if self.spec.search is not None and self.shard.count == 1:
            s0 = time.perf_counter()
            search_meta = self._search()
            self.search_s = time.perf_counter() - s0
        manifest = self._manifest(stats, n_seg, resumed)
        if search_meta is not None:
            manifest["search"] = search_meta
        for name in sorted(p.name for p in final.glob("*.parquet")):
            self.records[name] = file_record(final / name)
        manifest["checksums"] = dict(sorted(self.records.items()))
        self.staging.publish(manifest)
        counts = dict(zip(ACTIONS, stats["actions"]))
        rows = {k: np.concatenate([d[k] for d in kept]) for k in kept[0]} if kept else None
        return RunResult(self.staging.out_dir, manifest, rows, counts, stats["feasible"])

    def sealed(self, k: int, n_seg: int) -> dict[str, Any] | None:
        """Segment `k`'s seal when it verifies; a damaged one is reported (and recomputed)."""
        seal, problem = self.staging.sealed(k)
        if problem is not None:
            self.note(f"segment {k + 1} of {n_seg} is damaged ({problem}); computing it again")
        return seal

    def _verify(self, n_seg: int) -> None:
        """Every sealed segment still verifies before anything is published; a damaged one
        loses its seal, so the rerun computes it again."""
        self.records: dict[str, Any] = {}
        self.segments: list[dict[str, Any]] = []
        self.machines: dict[str, dict[str, Any]] = {}
        for k in range(n_seg):
            seal, problem = self.staging.sealed(k)
            if seal is None:
                self.staging.drop_segment(k, f"seg-{k:05d}-")
                raise DamagedError(f"{self.staging.out_dir}: segment {k + 1} of {n_seg} was damaged while the run "
                                   f"went on ({problem or 'its seal is gone'}); nothing was published; "
                                   "rerun to compute it again")
            self._segment_record(k, seal["stats"].get("computed_by"))
            for rel, record in seal["files"].items():
                if rel.startswith("final/"):
                    self.records[rel.removeprefix("final/")] = record

    def _segment_record(self, k: int, by: dict[str, Any] | None) -> None:
        """The manifest's record of segment `k`: its points, the host and the instruction
        set that computed it (the full description once per machine, under `machines`)."""
        begin = self.start + k * self.seg
        record: dict[str, Any] = {"index": k, "points": [begin, min(begin + self.seg, self.stop)]}
        if by:  # a segment sealed by an older sweep has no record of its machine
            tag = isa_tag(by)
            self.machines.setdefault(tag, {key: v for key, v in by.items() if key != "worker"})
            record |= {"host": by.get("host"), "isa": by.get("isa"), "machine": tag}
            if by.get("worker"):
                record["worker"] = by["worker"]
        self.segments.append(record)

    def _schedule(self, n_seg: int) -> None:
        """The replica schedule from every segment's staged row facts -> schedule.parquet."""
        spec, sched, w = self.spec, self.spec.schedule, self.writer
        assert sched is not None
        tables = [pq.read_table(self.staging.path / "schedule-facts" / f"{k:05d}.parquet") for k in range(n_seg)]
        facts = {name: np.concatenate([t.column(name).to_numpy() for t in tables]) for name in w.facts_schema.names}
        keys = [a.key for a in spec.axes if a.key not in spec.model.decisions.decision_axes]
        axis_names = [n for n in w.facts_schema.names[len(ROW_FACTS):] if n in w.sched_schema.names]
        table = schedule_table(facts, group_shape=[len(spec.axis(k)) for k in keys],
                               arrival_pos=keys.index("arrival_rps"), hourly_rps=sched.hourly_rps,
                               rate_index=sched.rate_index, ramp=sched.ramp,
                               warmup_hours=sched.warmup_hours, axis_names=axis_names)
        writer = DatasetWriter(self.staging.final, w.sched_schema, single_file=SCHEDULE_FILE)
        writer.write(record_batch(table, w.sched_schema, w.dictionaries))
        writer.close()
        self.n_schedule = len(table["hour"])

    def _layouts(self, path: Path) -> None:
        """Add the layout verdict (`sweep.decide.layouts`) to a disaggregated run's optimum.parquet:
        the companion grid is planned in memory and joined by workload."""
        assert self.companion is not None
        table = with_layouts(self.spec, pq.read_table(path), self.companion)
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table, tmp, compression=COMPRESSION, write_statistics=True)
        tmp.replace(path)  # the concatenated file may be a hard link to the segment's part: never write through it

    def _search(self) -> dict[str, Any]:
        """Run the `[search]` studies; their answers go through the same writer and staging."""
        from sweep.search import RESULT_FILE, run_search

        # a reporter with a `search` method (`sweep.runner.progress.ProgressReporter`) shows the trials
        result = run_search(self.spec, self.staging.out_dir, progress=getattr(self.progress, "search", None))
        schema = arrow_schema(result.columns, {**self.meta, "search": result.meta})
        writer = DatasetWriter(self.staging.final, schema, single_file=RESULT_FILE)
        if result.num_rows:
            writer.write(record_batch(result.rows, schema, result.dictionaries))
        writer.close()
        return result.meta | {"file": RESULT_FILE, "rows": result.num_rows}

    # ------------------------------------------------------------------ manifest

    def _manifest(self, stats: dict[str, Any], n_seg: int, resumed: int) -> dict[str, Any]:
        spec, ev = self.spec, self.ev
        total = time.perf_counter() - self.t0 - (self.search_s or 0.0)  # the grid's run; the search apart
        final = self.staging.final
        points = (sorted(str(p.relative_to(final)) for p in (final / "points").rglob("*.parquet"))
                  if (final / "points").exists() else [])
        n = self.stop - self.start
        return {
            **{k: v for k, v in self.meta.items() if k != "grid_toml"},
            "run_key": self.run_key,
            "grid": {"file": spec.source, "sha256": spec.sha256, "toml": spec.text},
            "jax": {"version": jax.__version__, "backend": jax.default_backend(),
                    "x64": bool(jax.config.read("jax_enable_x64"))},
            "python": platform.python_version(),
            "axes": {a.key: len(a) for a in spec.axes},
            "slo_checks": [list(check) for check in spec.model.slo_checks],
            "shard": {"index": self.shard.index, "count": self.shard.count,
                      "groups": [self.start // ev.group_size, self.stop // ev.group_size],
                      "points": [self.start, self.stop]},
            "rows": {
                "grid_points": spec.n_points,
                "shard_points": n,
                "points_written": stats["points_written"],
                "points_mode": spec.output.points,
                "optimum": stats["optimum"],
                "frontier": stats["frontier"],
                "feasible": stats["feasible"],
                "actions": dict(zip(ACTIONS, stats["actions"])),
                **({"schedule": self.n_schedule} if spec.schedule is not None else {}),
            },
            "output": {"columns": list(spec.output.columns) or "all", "partition_by": list(spec.output.partition_by),
                       "row_group_rows": spec.output.row_group_rows},
            "files": {"points": points, "optimum": "optimum.parquet", "frontier": "frontier.parquet",
                      **({"schedule": SCHEDULE_FILE} if spec.schedule is not None else {})},
            "decisions": {"method": "exact", "row_axes": list(spec.model.row_axes),
                          "group_axes": list(spec.model.group_axes), "size": spec.model.decisions.size},
            "inputs": self.inputs,
            "segments": self.segments,
            "machines": self.machines,
            "chunks": {"size": ev.chunk_size, "group_size": ev.group_size, "segments": n_seg,
                       "resumed_segments": resumed,
                       "compilations": self.executor.compilations(ev)},
            "executor": self.executor.manifest(),
            "timings_s": {**{k: round(v, 4) for k, v in self.timings.items()},
                          "total": round(total, 4), "points_per_s": round(n / max(total, 1e-9), 1),
                          **({"search": round(self.search_s, 4)} if self.search_s is not None else {})},
        }
