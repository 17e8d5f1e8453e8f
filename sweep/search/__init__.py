"""Optuna search over the spaces a grid declares in `[search]` (SPEC 6).

Owns the studies (batched ask/tell through the engine's kernel, constraints, storage and
resume) and the exact check of small spaces. Returns answers as declared columns; writing
them is `sweep.runner`'s job.
"""

from __future__ import annotations

from sweep.search.study import RESULT_FILE, SearchResult, make_plan, pareto_front, run_search

__all__ = ["RESULT_FILE", "SearchResult", "make_plan", "pareto_front", "run_search"]
