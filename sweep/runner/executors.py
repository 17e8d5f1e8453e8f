"""Where a run's segments are computed: an `Executor`, chosen once per run.

`sweep.runner.run.run_grid` keeps what makes a run safe in any case (the output folder's
lock, the staging folder, verification, the `[search]` phase, publishing); its executor
computes and seals the segments not already sealed. Two executors:

* `InProcess` (the default): one segment after another, in grid order, in this process;
* `sweep.runner.cluster.DaskExecutor` (`--scheduler ADDRESS` / `--workers N`): each
  segment a task on a `dask.distributed` cluster.

`sweep.runner.run.executor_for` is the one place that chooses. `run_grid` calls `check`
before any work, `chunk_size` and `segment_points` for the defaults the caller did not
set, `run_segments` once, then `manifest` and `compilations` for the manifest. An executor
sees the run through `SegmentRun`, never through `sweep.runner.run` itself.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from sweep.engine.evaluate import Evaluator
from sweep.grid.spec import GridSpec
from sweep.io.staging import Staging
from sweep.runner.identity import machine
from sweep.runner.segment import SegmentWriter

#: Points per resumable segment in process (rounded to whole chunks).
SEGMENT_POINTS = 1 << 23


class SegmentRun(Protocol):
    """What an executor uses of a run (`sweep.runner.run._Run` is one)."""

    spec: GridSpec
    ev: Evaluator
    staging: Staging
    writer: SegmentWriter  # this process's, for segments computed here
    meta: dict[str, Any]  # the provenance every file carries
    run_key: str
    seg: int  # points per segment: segment k covers [bounds[k], min(bounds[k] + seg, stop))
    stop: int
    timings: dict[str, float]
    computed: int  # points evaluated for this run (resumed segments are not)
    kept: list[dict[str, np.ndarray]]  # every row, for small grids (the terminal summary)
    note: Callable[[str], None]  # one line a person should read

    def sealed(self, k: int, n_seg: int) -> dict[str, Any] | None:
        """Segment `k`'s seal when it verifies (a damaged one is noted, and computed again)."""

    def add(self, seg_stats: dict[str, Any]) -> None:
        """Count a sealed segment's statistics into the run's."""

    def report(self, done: int) -> None:
        """Progress: `done` points of the run are finished."""


class Executor(abc.ABC):
    """Computes a run's unsealed segments."""

    def check(self) -> None:
        """Refuse, before any work, a run that cannot have this executor (in process: none)."""
        return None

    def chunk_size(self, spec: GridSpec, chunk: int) -> int:
        """The chunk to use when the caller set none; `chunk`: the engine's default, or the
        one a memory limit sets."""
        return chunk

    def segment_points(self, spec: GridSpec, chunk: int) -> int:
        """Points per segment when the caller set none (`chunk`: the run's chunk size)."""
        return SEGMENT_POINTS

    @abc.abstractmethod
    def run_segments(self, run: SegmentRun, bounds: Sequence[int]) -> int:
        """Compute, seal and `run.add` every segment of `run` (segment k starts at point
        `bounds[k]`), reporting progress; a segment found sealed is added, not computed.
        Returns how many were found sealed."""

    @abc.abstractmethod
    def manifest(self) -> dict[str, Any]:
        """The manifest's `executor` entry: where the segments ran."""

    def compilations(self, ev: Evaluator) -> int:
        """The manifest's `chunks.compilations`: the most any process compiled for the run."""
        return ev.compile_count()


class InProcess(Executor):
    """Every segment in this process, in order: progress after every chunk."""

    def run_segments(self, run: SegmentRun, bounds: Sequence[int]) -> int:
        resumed = 0
        done_points = 0
        for k, begin in enumerate(bounds):
            end = min(begin + run.seg, run.stop)
            seal = run.sealed(k, len(bounds))
            if seal is not None:
                seg_stats = seal["stats"]
                resumed += 1
            else:
                run.staging.drop_segment(k, f"seg-{k:05d}-")
                at = [done_points]

                def chunk_done(n: int, at: list[int] = at) -> None:
                    run.computed += n
                    at[0] += n
                    run.report(at[0])

                seg_stats, files = run.writer.write(k, begin, end, run.staging.path, run.kept, first=done_points == 0,
                                                    on_chunk=chunk_done)
                seg_stats["computed_by"] = machine()
                run.staging.seal(k, seg_stats, files)
            run.add(seg_stats)
            done_points += end - begin
            run.report(done_points)
        return resumed

    def manifest(self) -> dict[str, Any]:
        return {"kind": "process"}
