"""The analytic model's multi-step windows (`scheduler_steps = k`, `analytic.cb_point(steps=k)`).

Reference values: a lone request's closed form under each scheduler policy (the reference scheduler's rules traced by
hand, docs/continuous.md "Engine variants"), and one configuration's simulated values (named where used).
The accuracy against the compiled event loop's
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


def test_a_window_lasts_as_long_as_the_longest_output_in_it() -> None:
    """Llama 2 7B on two MI300X with windows of 16 steps, 286 req/s of 322-token prompts and
    6.4-token outputs (CV 0.63), about 9 running (`benchmarks/cb_accuracy.py --scheduler-steps 2
    4 8 16 --points 150 --seed 256 --budget-s 900`, point 60): every request gets all its tokens
    in its first message, at the end of a window that runs while any of the sequences in it has
    tokens left. The model took a window's length from one other sequence's size-biased output
    (8.4 steps), where a window of nine sequences lasts as long as the longest of them: mean TTFT
    53 ms against a simulated 74.3 +- 2.8 ms (16 replications), 67 ms now (the expected maximum
    over a Poisson count of fresh outputs)."""
    engine = (322.2, 1.433, 6.4, 0.632, 63.0, 10148.0, math.inf, 16.0, 0.002546776109319299, 2.607101462371944e-06,
              7.065876010781671e-08, 0.0, 0.5)
    r = cb_point(286.4375651130577, *engine, steps=16)
    assert abs(float(r["ttft_mean"]) / 0.07426 - 1.0) < 0.15, float(r["ttft_mean"])
    assert abs(float(r["ttft_p"]) / 0.07283 - 1.0) < 0.15, float(r["ttft_p"])  # the median (q = 0.5)
