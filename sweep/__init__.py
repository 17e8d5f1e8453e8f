"""sweep: capacity planning for batched inference serving.

Layers, each importing only those before it (data flows this way):

    catalog  models  grid  decide  engine  search  io  runner  api  cli

`catalog` (model and GPU figures) -> `models` (serving models: per-point JAX functions,
simulators, the registry) -> `grid` (grid files -> GridSpec) -> `decide` (verdicts,
frontiers, exact reductions) -> `engine` (jit + vmap over chunks) -> `search` (Optuna) ->
`io` (Parquet, staging) -> `runner` (resumable runs, shards) -> `api` (the notebook API
below) -> `cli` (the `sweep` command).

Importing `sweep` switches JAX to float64 (`jax_enable_x64`): every kernel is written for
it. This is the one place that does so.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)
# The simulators' random streams: JAX's default since 0.5, set here so that every supported
# release (0.4.35 on) draws the same numbers from the same seed.
jax.config.update("jax_threefry_partitionable", True)

from sweep._version import __version__  # noqa: E402
from sweep.api import (  # noqa: E402
    MAX_IN_MEMORY,
    Explanation,
    decide,
    evaluate,
    explain,
    grid_from_dict,
    load_grid,
    recommendation,
    run,
)
from sweep.catalog import Catalog, load_catalog, packaged_catalog  # noqa: E402
from sweep.errors import (  # noqa: E402
    CatalogError,
    GridError,
    OutputError,
    ProfileError,
    SimulationError,
    StorageError,
    SweepError,
)
from sweep.grid import GridSpec  # noqa: E402
from sweep.grid.profile import fit_file  # noqa: E402
from sweep.models import REGISTRY, ServingModel, get_model  # noqa: E402
from sweep.models.dynamic.batch_sim import SimSettings, simulate  # noqa: E402
from sweep.models.shared.memory import kv_answer  # noqa: E402
from sweep.runner import RunResult, merge_shards  # noqa: E402
from sweep.search import run_search  # noqa: E402

__all__ = [
    "MAX_IN_MEMORY",
    "REGISTRY",
    "Catalog",
    "CatalogError",
    "Explanation",
    "GridError",
    "GridSpec",
    "OutputError",
    "ProfileError",
    "RunResult",
    "ServingModel",
    "SimSettings",
    "SimulationError",
    "StorageError",
    "SweepError",
    "__version__",
    "decide",
    "evaluate",
    "explain",
    "fit_file",
    "get_model",
    "grid_from_dict",
    "kv_answer",
    "load_catalog",
    "load_grid",
    "merge_shards",
    "packaged_catalog",
    "recommendation",
    "run",
    "run_search",
    "simulate",
]
