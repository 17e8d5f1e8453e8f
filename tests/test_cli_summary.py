"""The terminal summary of `sweep run` (`sweep.cli.summary`) on extreme rows: text, never a
NumPy RuntimeWarning (every warning is an error here), whatever the row holds."""

from __future__ import annotations

import io
import math
from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

import sweep
from sweep.cli.summary import print_summary
from sweep.engine.evaluate import Evaluator

pytestmark = pytest.mark.filterwarnings("error")

GRID = {"name": "extreme", "grid": {
    "arrival_rps": [1e-6, 1e9], "batch_size": [1, 4096], "batch_window_ms": [0.0, 1e7, math.inf],
    "seq_len": 100_000_000, "model": "deepseek-v3", "gpu": "l4", "gpus_per_replica": 4096,
    "t_fixed_ms": [0.0, 1e7], "t_req_ms": [1e-6, 1e7], "slo_ms": 1e9, "percentile": 0.01, "service_cv": 10.0,
    "kv_bytes_per_elem": 8, "weight_bytes_per_param": 0.0625, "rho_target": 5e-324,
}}


def _rows(spec) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in Evaluator(spec).chunk(0).columns.items()}


def _print(spec, rows) -> str:
    buf = io.StringIO()
    result = SimpleNamespace(
        manifest={"rows": {"grid_points": spec.n_points, "points_written": spec.n_points},
                  "timings_s": {"total": 0.0, "points_per_s": math.inf}},
        skipped=False, rows=rows, feasible=0, out_dir="out", action_counts={"unstable": 1})
    print_summary(spec, result, Console(file=buf, width=400, highlight=False))  # type: ignore[arg-type]
    return buf.getvalue()


def test_the_summary_at_the_domain_bounds():
    spec = sweep.grid_from_dict(GRID)
    text = _print(spec, _rows(spec))
    assert "nan" not in text.lower() and "B_min" in text


@pytest.mark.parametrize("value", [np.finfo(np.float64).max, math.inf, -math.inf, math.nan, 5e-324, -0.0])
def test_the_summary_of_any_float_prints_without_warnings(value):
    spec = sweep.grid_from_dict(GRID)
    rows = _rows(spec)
    for name, col in rows.items():
        if col.dtype == np.float64 and name not in ("batch_window_ms", "arrival_rps"):
            col[...] = value
    text = _print(spec, rows)
    assert "B_min" in text
