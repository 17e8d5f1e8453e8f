"""`latency_model = "simulated"`: the dynamic batcher decided on the simulator's measured
percentile (the host pass `sweep.models.dynamic.simulation.Simulation`).
"""

from __future__ import annotations

from typing import ClassVar

from sweep.models.base import Column
from sweep.models.dynamic.model import latency_nulls
from sweep.models.dynamic.proxy import GaussianProxy
from sweep.models.dynamic.views import VIEWS
from sweep.models.views import Views


class SimulatedModel(GaussianProxy):
    """`latency_model = "simulated"`: the gaussian estimate stands in until the simulator's
    host pass replaces it with the measured percentile."""

    name: ClassVar[str] = "simulated"
    needs_host_pass: ClassVar[bool] = True
    #: the per-point table shows the simulated percentile beside both proxy estimates
    views: ClassVar[Views] = VIEWS
    #: latency_ms is the simulated percentile: unbounded where the backlog grew.
    columns: ClassVar[tuple[Column, ...]] = latency_nulls(GaussianProxy.columns, "sim_steady")
