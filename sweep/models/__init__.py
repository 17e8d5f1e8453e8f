"""Serving models: what a point's latency, capacity and memory are (SPEC 1-7).

Owns the serving-model contract (`base`), the per-point JAX functions of every model, the
simulators, and the registry below that maps `[options]` names to models. Knows nothing of
files, chunks, Optuna or the CLI.

    serving = "dynamic" (the seed's request-level batcher):
        latency_model = "gaussian" | "exponential"   the window proxy's tail rules
                        "batcher"                    the greedy-batcher model
                        "simulated"                  the simulator's measured percentile
    serving = "continuous" (iteration-level batching, TTFT and TPOT):
        latency_model = "analytic"                   the fixed-point model
                        "simulated"                  the iteration-level simulator

A new model is one module with a `ServingModel` subclass, registered here, plus its tests
(`tests/test_models_contract.py` runs the contract on every registered model).
"""

from __future__ import annotations

from sweep.errors import did_you_mean
from sweep.models.base import Column, Decisions, HostPass, Param, ServingModel
from sweep.models.batcher import BatcherModel
from sweep.models.continuous import ContinuousModel, SimulatedContinuous
from sweep.models.proxy import ExponentialProxy, GaussianProxy
from sweep.models.simulated import SimulatedModel

#: (serving, latency_model) -> the model.
REGISTRY: dict[tuple[str, str], ServingModel] = {
    (m.serving, m.name): m
    for m in (GaussianProxy(), ExponentialProxy(), BatcherModel(), SimulatedModel(), ContinuousModel(),
              SimulatedContinuous())
}
SERVING_MODES: tuple[str, ...] = tuple(dict.fromkeys(s for s, _ in REGISTRY))
#: The latency model a serving mode uses when `[options]` names none.
DEFAULT_LATENCY_MODEL: dict[str, str] = {"dynamic": "gaussian", "continuous": "analytic"}


def latency_models(serving: str) -> tuple[str, ...]:
    return tuple(name for s, name in REGISTRY if s == serving)


def get_model(serving: str = "dynamic", latency_model: str | None = None) -> ServingModel:
    """The registered model; `KeyError` with a hint when there is none."""
    name = latency_model or DEFAULT_LATENCY_MODEL[serving]
    try:
        return REGISTRY[(serving, name)]
    except KeyError:
        raise KeyError(f"no {serving!r} model named {name!r}{did_you_mean(name, latency_models(serving))}") from None


__all__ = [
    "DEFAULT_LATENCY_MODEL",
    "REGISTRY",
    "SERVING_MODES",
    "Column",
    "Decisions",
    "HostPass",
    "Param",
    "ServingModel",
    "get_model",
    "latency_models",
]
