"""The serving-model contract as pytest tests, one per registered model (as optuna ships
`optuna.testing.pytest_samplers`). A test module runs them with

    from sweep.testing.pytest_models import *  # noqa: F403

The tests are parametrised over `sweep.models.REGISTRY` when the module is imported (at
collection): a model registered before then (a mode's own, or a plug-in's) is checked with
no edit anywhere. The checks are `sweep.testing.models`'; see there for what each asserts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from sweep.models import DEFAULT_LATENCY_MODEL, REGISTRY, ServingModel
from sweep.testing import models as contract

__all__ = [
    "contract_models",
    "test_a_model_that_breaks_its_declaration_is_refused",
    "test_columns_as_declared_no_nan_inf_where_unstable",
    "test_monotone_in_load_where_claimed",
    "test_one_compilation_per_chunk_shape",
]


def contract_models() -> list[tuple[str, ServingModel]]:
    """(test id, model) of every registered model, in a stable order."""
    return [(f"{s}/{n}", model) for (s, n), model in sorted(REGISTRY.items())]


def _params(keep: Callable[[ServingModel], bool] = lambda model: True) -> list[Any]:
    return [pytest.param(model, id=name) for name, model in contract_models() if keep(model)]


@pytest.mark.parametrize("model", _params())
def test_columns_as_declared_no_nan_inf_where_unstable(model: ServingModel) -> None:
    """Drawn points of every contract grid: declared columns and dtypes, no NaN, +inf only
    where declared, SLO latencies +inf where unstable, feasible implies stable."""
    contract.check_points(model, np.random.default_rng(contract.seed_of(model)))


@pytest.mark.parametrize("model", _params(lambda m: bool(m.monotone_in_load)))
def test_monotone_in_load_where_claimed(model: ServingModel) -> None:
    contract.check_monotone_in_load(model, np.random.default_rng(contract.seed_of(model) + 1))


@pytest.mark.parametrize("model", _params(lambda m: not m.needs_host_pass))  # a host pass would run per chunk
def test_one_compilation_per_chunk_shape(model: ServingModel) -> None:
    contract.check_one_compilation(model)


@pytest.mark.parametrize("model", [pytest.param(REGISTRY[(s, n)], id=f"{s}/{n}")
                                   for s, n in sorted(DEFAULT_LATENCY_MODEL.items())])
def test_a_model_that_breaks_its_declaration_is_refused(model: ServingModel) -> None:
    """The engine's own check (one model per serving mode: the check is the engine's)."""
    contract.check_refuses_broken(model, np.random.default_rng(0))
