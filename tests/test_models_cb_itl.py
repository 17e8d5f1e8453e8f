"""The grid's per-token gap column `itl_p_ms` (docs/continuous.md, "Per-token gaps (ITL)"): on
every stable point it is the law of `sweep.models.continuous.itl` at the point's own columns
(`benchrun.itl_quantiles`, the host's entry to the same law), under both scheduler policies,
finite and of the order of a step (a P90 gap above half the mean step); NULL exactly where the
point is not stable."""

from __future__ import annotations

import math

import pytest

import sweep
from sweep.models.continuous.benchrun import itl_quantiles


@pytest.mark.parametrize("policy", ["chunked", "prefill_first"])
def test_itl_column_is_the_law_at_the_points_columns(policy: str) -> None:
    doc = {"name": "itl", "grid": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "arrival_rps": [2.0, 9.0, 60.0],
                                   "prompt_tokens": 1000, "output_tokens": 200, "prompt_cv": 0.3, "output_cv": 0.3,
                                   "batch_size": [16, 64], "max_batched_tokens": 2048, "service_cv": 0.1,
                                   "percentile": 0.9, "ttft_slo_ms": 2000, "tpot_slo_ms": 50},
           "options": {"serving": "continuous", "scheduler_policy": policy}}
    rows = sweep.evaluate(sweep.grid_from_dict(doc)).to_pylist()
    assert any(r["stable"] for r in rows) and not all(r["stable"] for r in rows)
    for r in rows:
        if not r["stable"]:
            assert r["itl_p_ms"] is None
            continue
        (want,) = itl_quantiles((0.9,), step_mean=r["step_mean_ms"] * 1e-3, mean_running=r["mean_running"],
                                rate_rps=r["lambda_per_replica_rps"], prompt_mean=1000.0, max_batched_tokens=2048.0,
                                t_token=r["t_token_ms"] * 1e-3, service_cv=0.1, tpot_mean=r["tpot_mean_ms"] * 1e-3,
                                t_fixed=r["t_step_fixed_ms"] * 1e-3, prefill_first=policy == "prefill_first")
        assert r["itl_p_ms"] == pytest.approx(want * 1e3, rel=1e-9)
        assert math.isfinite(r["itl_p_ms"]) and r["itl_p_ms"] > 0.5 * r["step_mean_ms"]
