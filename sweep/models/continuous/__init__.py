"""Iteration-level (continuous) batching with TTFT and TPOT (`[options] serving =
"continuous"`, docs/continuous.md): the scheduler of vLLM, SGLang, TensorRT-LLM and TGI.

    latency_model = "analytic"    the fixed-point model (`analytic`, the default)
                    "simulated"   the iteration-level simulator (`sim`) as a host pass
"""

from __future__ import annotations

from sweep.models.continuous.model import ContinuousModel, SimulatedContinuous

#: This mode's models, the default first.
MODELS = (ContinuousModel(), SimulatedContinuous())

__all__ = ["MODELS", "ContinuousModel", "SimulatedContinuous"]
