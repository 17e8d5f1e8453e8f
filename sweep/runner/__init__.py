"""Runs: a grid (or one shard of it) evaluated and published as files (SPEC 9).

Owns segments and resume, the writer threads, the manifest, the `[search]` phase of a run,
merging shards, progress reporting, and segments as tasks on a Dask cluster (`cluster`,
imported only when a run asks for one). Uses the engine to evaluate, `sweep.decide` for the
reduced outputs' rows, `sweep.io` to write.
"""

from __future__ import annotations

from sweep.runner.run import RunResult, Shard, run_grid
from sweep.runner.shards import merge_shards

__all__ = ["RunResult", "Shard", "merge_shards", "run_grid"]
