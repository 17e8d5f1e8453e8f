"""Runs: a grid (or one shard of it) evaluated and published as files (SPEC 9).

Owns segments and resume (`run`), a segment's evaluation and writer threads (`segment`),
where segments are computed (`executors`: in process, or as tasks on a Dask cluster,
`cluster`, which imports Dask only when a run asks for one), the manifest, the `[search]`
phase of a run, merging shards, progress reporting. Uses the engine to evaluate,
`sweep.decide` for the reduced outputs' rows, `sweep.io` to write.

`identity` says what a run's results depend on (its key: every input by content, the
engine's code) and which machine computed each segment.

Modules import one another in one direction: run -> cluster -> executors -> identity, segment
(`tests/test_architecture.py` checks that no sweep modules import each other in a cycle).
"""

from __future__ import annotations

from sweep.runner.run import RunResult, Shard, run_grid
from sweep.runner.shards import merge_shards

__all__ = ["RunResult", "Shard", "merge_shards", "run_grid"]
