"""Decisions: the verdict on each point, and exact answers over a grid (SPEC 6).

Owns the one verdict function (`verdict`: slo_ok, feasible, action) every path uses, the
Pareto frontier and its knee, the per-row and per-group reductions fused into the chunk
function, and the columns and rows of optimum.parquet and frontier.parquet. Pure JAX and
NumPy; knows nothing of files or Optuna.
"""

from __future__ import annotations

from sweep.decide.pareto import knee_index, pareto_mask, pareto_mask_columns
from sweep.decide.reduce import REASONS, reduce_chunk
from sweep.decide.verdict import ACTIONS, Verdict, verdict

__all__ = ["ACTIONS", "REASONS", "Verdict", "knee_index", "pareto_mask", "pareto_mask_columns", "reduce_chunk",
           "verdict"]
