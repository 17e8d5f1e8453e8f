"""The analytic model's multi-step windows (`scheduler_steps = k`, `analytic.cb_point(steps=k)`).

Reference values: a lone request's closed form under each scheduler policy (the reference scheduler's rules traced by
hand, docs/continuous.md "Engine variants"). The accuracy against the compiled event loop's
simulations of random configurations is tests/test_cb_accuracy.py's.
"""

from __future__ import annotations

import math

import jax
import pytest

from sweep.models.continuous.analytic import cb_point


@pytest.mark.parametrize("k", [2, 4, 8])
@pytest.mark.parametrize("o", [3, 6, 20])
def test_a_lone_request_follows_the_windows_closed_form(k: int, o: int) -> None:
    """One request alone (arrivals 1e-9/s, fixed lengths, no budget, no KV limit, no noise,
    t_ctx = 0): its prompt is prefilled in the decision step (t_f + t_t P), the window then runs
    min(k - 1, O - 1) decode steps of t_f + t_t before the first message; the rest of its tokens
    arrive at window ends, the last when its last token is done (it is alone: the window ends
    with it). So TTFT = t_f + t_t P + min(k - 1, O - 1) (t_f + t_t), E2E = t_f + t_t P +
    (O - 1) (t_f + t_t), and TPOT = (O - 1 - min(k - 1, O - 1)) (t_f + t_t) / (O - 1)."""
    tf, tt, p = 0.01, 1e-4, 300.0
    args = (1e-9, p, 0.0, float(o), 0.0, 64.0, math.inf, math.inf, 1.0, tf, tt, 0.0, 0.0, 0.5)
    r = jax.jit(lambda *a: cb_point(*a, steps=k))(*args)
    step = tf + tt
    first = min(k - 1, o - 1)
    assert float(r["ttft_mean"]) == pytest.approx(tf + tt * p + first * step, rel=1e-6)
    assert float(r["e2e_mean"]) == pytest.approx(tf + tt * p + (o - 1) * step, rel=1e-6)
    assert float(r["tpot_mean"]) == pytest.approx((o - 1 - first) * step / (o - 1), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("k", [2, 8])
@pytest.mark.parametrize("o", [2, 6, 20])
def test_a_lone_request_under_prefill_first_follows_the_windows_closed_form(k: int, o: int) -> None:
    """`prefill_first` with windows, one request alone (as above): its prompt takes a step of its
    own (t_f + t_t P), a window of one step whose message carries the first token at once; its
    O - 1 decode tokens then come in decode windows that end with its last token (it is alone).
    So TTFT = t_f + t_t P, E2E = TTFT + (O - 1) (t_f + t_t) and TPOT = t_f + t_t, whatever k."""
    tf, tt, p = 0.01, 1e-4, 300.0
    args = (1e-9, p, 0.0, float(o), 0.0, 64.0, math.inf, math.inf, 1.0, tf, tt, 0.0, 0.0, 0.5)
    r = jax.jit(lambda *a: cb_point(*a, steps=k, prefill_first=True))(*args)
    step = tf + tt
    assert float(r["ttft_mean"]) == pytest.approx(tf + tt * p, rel=1e-6)
    assert float(r["e2e_mean"]) == pytest.approx(tf + tt * p + (o - 1) * step, rel=1e-6)
    assert float(r["tpot_mean"]) == pytest.approx(step, rel=1e-6)


def test_windows_refuse_what_they_do_not_model() -> None:
    args = (3.0, 500.0, 1.0, 200.0, 1.0, 32.0, 2048.0, 60000.0, 16.0, 0.012, 8e-5, 2e-7, 0.1, 0.9)
    with pytest.raises(ValueError, match="prefills"):
        cb_point(*args, steps=4, prefilled=True)
