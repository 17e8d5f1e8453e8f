"""The engine: evaluate a grid chunk by chunk, jit + vmap, decisions fused in.

Owns decoding flat point indices into axis values, gathering catalog figures, vmapping the
serving model's per-point function (the only place that batches), the host pass, and the
in-memory evaluation a notebook uses (`evaluate`). Knows nothing of files.
"""

from __future__ import annotations

from sweep.engine.evaluate import DEFAULT_CHUNK, Chunk, Evaluator, ModelContractError, evaluate_values

__all__ = ["DEFAULT_CHUNK", "Chunk", "Evaluator", "ModelContractError", "evaluate_values"]
