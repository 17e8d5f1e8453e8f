"""sweep: capacity planning for batched inference serving.

Layers, each importing only those before it (data flows this way):

    catalog  models  grid  decide  engine  search  io  runner  api  cli

`catalog` (model and GPU figures) -> `models` (serving models: per-point JAX functions,
simulators, the registry) -> `grid` (grid files -> GridSpec) -> `decide` (verdicts,
frontiers, exact reductions) -> `engine` (jit + vmap over chunks) -> `search` (Optuna) ->
`io` (Parquet, staging) -> `runner` (resumable runs, shards) -> `api` (the notebook API
below) -> `cli` (the `sweep` command).

Importing `sweep` switches JAX to float64 (`jax_enable_x64`): every kernel is written for
it. This is the one place that does so. JAX itself is imported only when something needs it
(a kernel, a simulator): `sweep show` and a rerun that finds its answers on disk start in a
fraction of a second. Before JAX is imported the switch is its environment variables
(`JAX_ENABLE_X64`, read when JAX starts); after, `jax.config`. The names below are loaded
on first use (PEP 562), so `import sweep` is cheap and `sweep.evaluate` works as before.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from typing import TYPE_CHECKING, Any

#: JAX settings every kernel and simulator relies on: float64 everywhere, and the simulators'
#: random streams (JAX's default since 0.5, set so that every supported release, 0.4.35 on,
#: draws the same numbers from the same seed).
JAX_SETTINGS = {"jax_enable_x64": True, "jax_threefry_partitionable": True}


def _configure_jax() -> None:
    if "jax" in sys.modules:  # imported before sweep: switch it now
        import jax

        for name, value in JAX_SETTINGS.items():
            jax.config.update(name, value)
    else:  # read by JAX when it is first imported (each flag's default comes from its upper-case variable)
        for name, value in JAX_SETTINGS.items():
            os.environ[name.upper()] = "1" if value else "0"


_configure_jax()

from sweep._version import __version__  # noqa: E402
from sweep.errors import (  # noqa: E402
    CatalogError,
    GridError,
    OutputError,
    ProfileError,
    SimulationError,
    StorageError,
    SweepError,
)

#: public name -> the module that defines it, imported on first use
_LAZY = {
    **dict.fromkeys(("MAX_IN_MEMORY", "Explanation", "evaluate", "explain", "grid_from_dict", "load_grid",
                     "recommendation", "run"), "sweep.api"),
    **dict.fromkeys(("Catalog", "load_catalog", "packaged_catalog"), "sweep.catalog"),
    "GridSpec": "sweep.grid",
    "fit_file": "sweep.grid.profile",
    **dict.fromkeys(("REGISTRY", "ServingModel", "get_model"), "sweep.models"),
    **dict.fromkeys(("SimSettings", "simulate"), "sweep.models.dynamic.batch_sim"),
    "kv_answer": "sweep.models.shared.memory",
    **dict.fromkeys(("RunResult", "merge_shards"), "sweep.runner"),
    "run_search": "sweep.search",
}


class _Package(types.ModuleType):
    """`sweep` itself. One public function shares its name with a subpackage: `sweep.decide`
    is the function (`sweep.api.decide`), as it was when `import sweep` imported everything,
    whatever imports the subpackage `sweep.decide` later (the import system binds a loaded
    subpackage on its parent: that binding is ignored here; `from sweep.decide import ...`
    and `sys.modules` reach the subpackage)."""

    @property
    def decide(self) -> Any:
        from sweep.api import decide

        return decide

    @decide.setter
    def decide(self, value: Any) -> None:
        return None


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if importlib.util.find_spec(f"sweep.{name}") is not None:  # a subpackage, as `import sweep` once loaded
            return importlib.import_module(f"sweep.{name}")
        raise AttributeError(f"module 'sweep' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"decide"})


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, eagerly
    from sweep.api import (
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
    from sweep.catalog import Catalog, load_catalog, packaged_catalog
    from sweep.grid import GridSpec
    from sweep.grid.profile import fit_file
    from sweep.models import REGISTRY, ServingModel, get_model
    from sweep.models.dynamic.batch_sim import SimSettings, simulate
    from sweep.models.shared.memory import kv_answer
    from sweep.runner import RunResult, merge_shards
    from sweep.search import run_search

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
