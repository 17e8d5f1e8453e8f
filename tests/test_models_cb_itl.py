"""The grid's per-token gap column `itl_p_ms` (docs/continuous.md, "Per-token gaps (ITL)").

* On every stable point it is the law of `sweep.models.continuous.itl` at the point's own
  columns, as the grid inverts it (`benchrun.itl_quantiles(..., inversion="grid")`, the host's
  entry to the same function), under both scheduler policies, finite and of the order of a step
  (a P90 gap above half the mean step); NULL exactly where the point is not stable.
* The grid's inversion equals the bisection on the law's CDF wherever both are exact: without
  step noise (the law is a step function: the quantile is the mean of the part it falls in) and
  for a law of one part (no prompt arrives in a gap: the step's own lognormal quantile, a
  closed form). With a step noise CV of 0.1 it stays within 40% of the bisection, 2% at the
  median, on configurations drawn like `benchmarks/itl_accuracy.py`'s (its figures against the
  simulator are in the docs).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

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
                                t_fixed=r["t_step_fixed_ms"] * 1e-3, prefill_first=policy == "prefill_first",
                                inversion="grid")
        assert r["itl_p_ms"] == pytest.approx(want * 1e3, rel=1e-9)
        assert math.isfinite(r["itl_p_ms"]) and r["itl_p_ms"] > 0.5 * r["step_mean_ms"]


def _law(rng: np.random.Generator, prefill_first: bool) -> dict:
    """Law inputs drawn like benchmarks/itl_accuracy.py's configurations, the mean gap
    consistent with the step (TPOT above the step's own prompt work under prefill_first)."""
    cap = float(2 ** rng.integers(3, 9))
    step = float(rng.uniform(0.004, 0.03) * rng.uniform(1.0, 3.0))
    prompt, t_token = float(np.exp(rng.uniform(np.log(50), np.log(4000)))), float(np.exp(rng.uniform(-12, -9)))
    return dict(step_mean=step, mean_running=float(rng.uniform(0.1, 0.9) * cap),
                rate_rps=float(rng.uniform(0.05, 0.8) / (prompt * t_token + step)), prompt_mean=prompt,
                max_batched_tokens=float(cap * 2 ** rng.integers(1, 6)), t_token=t_token,
                tpot_mean=step * float(rng.uniform(1.5, 3.0)), t_fixed=float(rng.uniform(0.004, 0.03)),
                prefill_first=prefill_first)


QS = (0.5, 0.9, 0.99)


@pytest.mark.parametrize("prefill_first", [False, True])
def test_grid_inversion_is_the_bisection_without_step_noise(prefill_first: bool) -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        law = _law(rng, prefill_first)
        exact = itl_quantiles(QS, **law, service_cv=0.0)
        grid = itl_quantiles(QS, **law, service_cv=0.0, inversion="grid")
        assert grid == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("prefill_first", [False, True])
def test_grid_inversion_of_a_one_part_law_is_the_steps_lognormal(prefill_first: bool) -> None:
    """No prompt in a gap (a rate of 1e-12/s): the gap is the step, lognormal of CV 0.2 about
    its mean: quantile = mean exp(-s^2/2 + s z_q), s^2 = log(1 + 0.2^2)."""
    law = {**_law(np.random.default_rng(3), prefill_first), "rate_rps": 1e-12}
    s = math.sqrt(math.log1p(0.04))
    mean = law["tpot_mean"] if prefill_first else law["step_mean"]
    want = [mean * math.exp(-0.5 * s * s + s * norm.ppf(q)) for q in QS]
    assert itl_quantiles(QS, **law, service_cv=0.2, inversion="grid") == pytest.approx(want, rel=1e-9)
    assert itl_quantiles(QS, **law, service_cv=0.2) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("prefill_first", [False, True])
def test_grid_inversion_with_step_noise_stays_near_the_bisection(prefill_first: bool) -> None:
    rng = np.random.default_rng(11)
    errs = []
    for _ in range(40):
        law = _law(rng, prefill_first)
        exact = np.asarray(itl_quantiles(QS, **law, service_cv=0.1))
        grid = np.asarray(itl_quantiles(QS, **law, service_cv=0.1, inversion="grid"))
        errs.extend(np.abs(grid / exact - 1.0))
    # measured on these 40 draws x 3 quantiles: largest 32% (chunked) and median 0.9%
    assert max(errs) < 0.4 and np.median(errs) < 0.02, (max(errs), np.median(errs))
