"""Serving models: what a point's latency, capacity and memory are.

Owns the serving-model contract (`base`), one subpackage per serving mode, the pieces the
modes share (`shared`), the composition of two stage models into one mode (`compose`), and
the registry below that maps `[options]` names to models. Knows nothing of files, chunks,
Optuna or the CLI.

    serving = "dynamic"      request-level dynamic batching (`sweep.models.dynamic`)
    serving = "continuous"   iteration-level batching, TTFT and TPOT (`sweep.models.continuous`)
    serving = "disaggregated" prefill and decode pools in series (`sweep.models.disaggregated`)

A serving mode is one subpackage whose `MODELS` lists its `ServingModel`s, the default
latency model first; `register` adds a model (a mode's own, or one a test or plug-in builds).
`sweep.testing` runs the contract on every registered model.
"""

from __future__ import annotations

from sweep.errors import did_you_mean
from sweep.models import continuous, disaggregated, dynamic
from sweep.models.base import Column, Decisions, HostPass, Param, ServingModel

#: (serving, latency_model) -> the model.
REGISTRY: dict[tuple[str, str], ServingModel] = {}
#: The latency model a serving mode uses when `[options]` names none.
DEFAULT_LATENCY_MODEL: dict[str, str] = {}
SERVING_MODES: list[str] = []


def register(model: ServingModel, *, default: bool = False) -> ServingModel:
    """Add `model` under (model.serving, model.name); the first model of a serving mode (or
    one registered with `default=True`) is that mode's default latency model."""
    REGISTRY[(model.serving, model.name)] = model
    if model.serving not in SERVING_MODES:
        SERVING_MODES.append(model.serving)
    if default or model.serving not in DEFAULT_LATENCY_MODEL:
        DEFAULT_LATENCY_MODEL[model.serving] = model.name
    return model


def unregister(serving: str) -> None:
    """Remove every model of a serving mode (tests that register a toy mode clean up with it)."""
    for key in [k for k in REGISTRY if k[0] == serving]:
        del REGISTRY[key]
    DEFAULT_LATENCY_MODEL.pop(serving, None)
    if serving in SERVING_MODES:
        SERVING_MODES.remove(serving)


for _mode in (dynamic, continuous, disaggregated):
    for _model in _mode.MODELS:
        register(_model)


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
    "register",
    "unregister",
]
