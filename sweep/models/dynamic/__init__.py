"""Request-level dynamic batching (`[options] serving = "dynamic"`, docs/model.md).

The batcher of the textbook appendix the project started from: a window of `batch_window_ms`
and a cap of `batch_size` requests form each batch, served by one worker per replica.

    latency_model = "gaussian" | "exponential"   the window proxy's tail rules (`proxy`)
                    "batcher"                    the greedy-batcher model (`batcher`)
                    "simulated"                  the simulator's measured percentile (`simulated`)
"""

from __future__ import annotations

from sweep.models.dynamic.batcher import BatcherModel
from sweep.models.dynamic.model import DynamicModel
from sweep.models.dynamic.proxy import ExponentialProxy, GaussianProxy
from sweep.models.dynamic.simulated import SimulatedModel

#: This mode's models, the default first.
MODELS = (GaussianProxy(), ExponentialProxy(), BatcherModel(), SimulatedModel())

__all__ = ["MODELS", "BatcherModel", "DynamicModel", "ExponentialProxy", "GaussianProxy", "SimulatedModel"]
