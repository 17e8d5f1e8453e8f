"""Analytic model of continuous batching (SPEC 10) for ONE point, in pure ``jax.numpy``.

Inputs are float64 scalars in SI units; the engine vmaps (nothing here batches). Every
output is finite or ``+inf`` (latencies where the load is not sustainable), never NaN.

Notation
--------
Poisson arrivals at ``lam``; prompt ``P`` and output ``O`` tokens lognormal with means
``p1``, ``o1`` and CVs (rounding to integers is ignored: it moves the moments by < 1/12
token^2); ``N`` the cap, ``M`` the token budget, ``C`` the KV capacity in tokens, ``b``
the block size; a step carrying ``n_tok`` tokens with ``n_ctx`` cached takes
``T = t_f + t_t n_tok + t_c n_ctx``. A request's *service* runs from admission to its
last token: ``D`` steps (its prefill step(s), then ``O - 1`` decode steps).

Derivation
----------
1. **Exact flow balance.** Over a long time every request contributes ``P + O - 1`` new
   tokens and ``a2 = E[O P + O (O - 1) / 2]`` token-steps of cache (its prompt once per
   step it is in, plus one more token per decode step), so with ``sigma`` steps per unit
   time the step averages are ``n_tok = lam a1 / sigma`` (``a1 = p1 + o1 - 1``) and
   ``n_ctx = lam a2 / sigma``. Busy time is ``u = sigma t_f + rho_tok`` with
   ``rho_tok = lam (t_t a1 + t_c a2)`` (all work that is not per step), hence the mean
   step time ``T_bar = t_f / (1 - rho_tok / u)``.
2. **Slots.** The engine is an M/G/c queue whose servers are the ``c`` sequence slots:
   ``c = min(N, c_kv)`` with ``c_kv`` the number of reservations
   ``r = ceil((P + O) / b) b`` that fit in ``C`` (time-weighted mean reservation, less half
   a reservation of fragmentation at the head: FCFS without skipping). A request holds a
   slot for its service ``S = T_p + (O - 1) T_d`` (``T_p`` its prefill phase, ``T_d`` the
   step time seen by a decoding sequence), so the offered load is ``A = lam E[S]`` and
   the mean running count is ``A`` (Little). The state distribution is Erlang's
   (Poisson below ``c``, real ``c`` through the incomplete gamma function): the busy
   fraction ``u = 1 - P(0)``, the probability that all slots are busy
   ``P_wait = ErlangC(c, A)``, and the running count seen by a running sequence
   (size-biased) ``R_seen = E[R^2] / E[R]`` (``A + 1`` below the cap, ``c`` at it).
3. **TPOT.** A decoding sequence sees steps carrying its own token, the other decoders'
   (``R_seen - 1`` others, a share ``f_dec = (o1 - 1) T_d / E[S]`` of them decoding) and
   the prompt tokens prefilled in the step (step average ``Pi = lam p1 T_bar / u``),
   with cache: its own (``p1 + o1 / 2`` on average over its life), the others'
   (``c_bar = a2 / E[D]`` each, per-step average) and the prompts just prefilled:
   ``T_d = t_f + t_t (1 + f_dec (R_seen - 1) + Pi) + t_c (p1 + o1/2 + (R_seen - 1) c_bar + Pi)``.
   Mean TPOT = ``T_d`` (a request's TPOT averages the steps it sees, so no harmonic mean).
4. **TTFT.** ``W_q`` (waiting for a slot) + the residual of the step in progress
   (``u E[T^2] / (2 T_bar)``, zero when idle) + the prefill phase ``T_p``. The slot wait
   comes from a birth-death chain over the requests present (`_slot_chain`): all
   running sequences share every step and each step slows as sequences join, so the
   departure rate with ``r`` running is ``r / (a + b r)`` and the law below the cap is
   negative binomial (wider than Erlang's Poisson, which treats the sequences' services
   as independent), geometric above it; ``W_q`` is its mean queue over ``lam`` times the
   Allen-Cunneen factor ``(1 + cs^2) / 2`` of the service's spread. The prefill phase is
   an average over the prompt's own law: a prompt that fits what the step's budget
   leaves after the prompts ahead of it (``P <= B - ahead``) is prefilled in the step it
   is admitted to, which also carries the prompts that arrived during the previous step
   (length-biased: ``lam p1 u E[T^2] / T_bar``); a longer one waits for the prompt work
   ahead (an M/G/1 backlog in tokens, ``rho_pf = lam p1 T_bar / B``) and takes
   ``ceil((ahead + P) / B)`` steps of ``B = M - decoders`` tokens.
5. The step-time variance (for ``E[T^2]`` and the percentiles) comes from the prompt
   tokens per step (compound Poisson, ``Var = lam T_bar E[P^2]`` tokens^2), the running
   count (Erlang variance) and the service noise (``cv^2 T^2``). ``T_d``, ``T_p`` and
   ``A`` form a fixed point solved by ``N_FIXED`` damped iterations from the light-load
   values (weight ``DAMP`` on the new iterate for the first half, 0.3 after: 1e-6
   relative at the 99th percentile of random inputs, 5e-3 at worst, next to saturation);
   inside the iteration the occupancy is Poisson and ``P_wait`` Sakasegawa's
   ``rho^(sqrt(2 (c + 1)) - 1)`` (no special function), and Erlang's exact law is
   evaluated once at the solution. Derivatives (`[sensitivity]`) of the fixed point come
   from the implicit function theorem at the iterate (`_implicit_tangent`), not from
   differentiating the iterations; `cb_state` solves the fixed point alone, for a caller
   that hands it back as ``cb_point(..., state=)``. The occupancy is capped by
   throughput: steps are longest at full occupancy, so ``E[S] <= c / capacity_rps`` and
   ``A <= c lam / capacity_rps``.
6. **Sustainability** (``stable``): at full occupancy every step holds ``c`` sequences,
   so from step 1 with ``u = 1`` and ``sigma = lam E[D] / c``:
   ``capacity_rps = 1 / (t_f E[D] / c + rho_tok / lam)``, and, with a finite budget,
   prompts must fit: ``lam p1 T_sat <= M - decoders``. ``stable = lam < capacity_rps``.
7. **Percentiles** are quantiles of fitted laws, not the mean plus an excess (a median
   may lie below the mean). TTFT is a two-way mixture: with probability ``P_wait`` an
   exponential slot wait of mean ``W_q / P_wait`` is added; each side is a lognormal
   shifted to the shortest step, matched to the mean and variance of the rest (the own
   prompt's prefill over the prompt's law, the step in progress, the companions'
   prompts, the chunked backlog, the noise); its quantile, which lies between the two
   sides' own quantiles, is found by safeguarded Newton steps (`_mix_quantile`). E2E is one
   shifted lognormal matched to the mean and variance of that mixture plus the decode phase
   ``(O - 1) TPOT_i`` (its mean, ``T_d^2 Var(O)`` and the request's own TPOT deviation).
   TPOT: a gamma law above a floor (the shortest step ``t_f + t_t``, less what step noise
   can take off a single step), with the step-time variance averaged over ``O - 1`` steps
   (``E[1 / (O - 1)]``), the arrival burst spread over them (``E[1 / (O - 1)^2]``) and
   half the running count's variance (its slow drift over a life).

Accuracy (benchmarks/cb_accuracy.py, docs/continuous.md): on 300 configurations drawn at
random across the domain, 94.7% of the comparisons (means and P50/P90/P99 of TTFT, TPOT and
E2E) within SPEC 10's targets (87.5% before the slot chain, the prompt-law prefill and the
fitted-law percentiles); the misses gather at loads of 0.85 and more of the capacity (the
`analytic_trusted` flag, `confidence.py`) and in the P99 of TPOT and TTFT.

Prompts already cached (``prefilled=True``: the decode pool of disaggregated serving, SPEC 11):
requests arrive with their prompt's KV in place and their first token emitted elsewhere, so the
engine prefills nothing. ``pw`` (the share of the prompt this engine prefills, 1 or 0) scales
every prompt-*work* term: a request brings ``O - 1`` new tokens (``a1``), ``E[D] = O - 1``
steps, cache ``a2 - p1`` (no prefill step), no budget bound and no prefill phase (``T_p = 0``:
the "TTFT" is the wait for a slot plus the step in progress); its KV still holds ``P`` (the
reservation ``P + O`` and ``t_c (P + O / 2)`` of ``T_d``). With one sequence at a time its
TPOT is ``t_f + t_t + t_c (P + O / 2)``, exact. ``pw = 1`` leaves every value unchanged.

Scheduler policy ``prefill_first`` (``ff = 1``; docs/continuous.md, "Engine variants"): a
step with prompt tokens carries no decode token. The token work is the same as under
``chunked`` (every prompt and decode token, and the cache each step reads, is still
processed once), but the prompts now take steps of their own, each paying ``t_f``: between
two of a decoder's steps comes a chain of prompt steps (`_pf_chain`, the windows' below with
a window of one decode step): the decision after a decode step prefills the prompts that
arrived during it, and the engine keeps prefilling while prompts arrive during its prompt
steps (until its admissions take every slot: a chain the slots cut leaves prompts waiting,
which the next decision carries in one step), so ``T_d = (t_own + burst + t_f n) / (1 -
rho_tok)`` with ``n`` the chain's mean prompt steps; at full occupancy ``(1 - e^-m) max(1, m
P / M)`` with ``m = c / (O - 1)`` (one admission per departure). A decoder's gap holds that
chain or nothing, so TPOT's law adds the pause's variance (the larger of one chain link's,
``t_f^2 Var[N]`` for its ``N`` prompt steps plus the prompts' tokens, and the whole chain's
time's), and its quantiles are a mixture: the requests none of whose gaps held a chain at
the decoders' own step, the rest above it. A prompt's own step carries no decoder (the whole
budget ``M``, no decoders' cache), and sustainability counts ``(O - 1) / c`` decode steps
and ``(1 - e^-mu) / mu`` prompt steps per request (``mu = c / (O - 1)``), with no budget
bound.

Multi-step scheduling (``scheduler_steps = k``, ``km = k - 1``), chunked policy: a
decision step (admission, prompt chunks, decodes) is followed by ``km`` decode-only steps,
and a client receives a window's tokens in one message at its end (docs/continuous.md,
"Engine variants"). The one-step fixed point is solved with the capacity at ``k`` and the
windows are added around it (`_windows`): (a) sustainability: a slot is also held through
each later chunk's window and the rest of its last window (half a window, or half the
others' longest remaining decode where that is shorter; while decoders keep windows
going), and a window's prompts must fit one decision's budget beside the decoders running
at that load (the step time at that load; the load that a decision's budget sustains is the
fixed point of a decreasing map, found by bisection: iterating the map can cycle);
(b) TTFT adds the rest of the window in progress (length-biased by its length's spread: the
decision step's, and the decoders running, one count through its ``k`` steps), the prompts that arrived
during it (its decision step carries them), a window per later chunk while decoders keep
windows going (`_spanned_windows`: at most the windows the longest remaining decode of the
decoders present spans, and of the one a prompt ahead has just begun), and the delivery of
the first message at the window's end; a window runs ``E[min(km, max R)]`` decode-only steps,
the longest remaining decode of a sequence and the others beside it (a Poisson count of
fresh outputs' ``O - 1``; the request's own ``min(km, O - 1)`` alone). The TTFT variance
takes the companions of a whole window, the later chunks' window count's spread and the
delivery wait's spread besides; (c) a request's TPOT
is the gap from its first message to its last over ``O - 1``: whole windows while it decodes,
then its last window as long as its own tokens left or, while another decoder (a Poisson
count of fresh outputs) has tokens left, up to the window's end, at the output length's 64
equal-probability nodes (rounded as the simulator rounds); 0 where every token comes in one
message. Its quantiles are those of a mixture with an atom at 0 and over the 64 nodes
(`_node_quantile`: each node's span over ``O - 1`` times a lognormal mean step), none above
the longest span times a window's longest mean step (a full decision step and ``km``
decode-only steps at the running count's high end); (d) E2E is TTFT plus
that span; a chunked prompt's window waits grow with it, so they scale the prompt's share of
the TTFT variance. Under ``prefill_first`` a busy engine alternates a decode window of ``k``
decode-only steps and a chain of prompt steps (`_pf_chain`: the decision after a window
prefills what arrived during it, and prefills again while prompts keep arriving, until a step
sees none or the admissions take every slot); the decoders' step carries the chain's prompt
steps spread over the window; an arrival waits for the rest of the window (whose length
varies with the decoders running and the steps they keep it going, not with prompt tokens)
or prompt step in progress, then
the next prompt step carries it and hands its first token over at once, the window's rest
kept uniform in the quantiles (`_window_quantile`); its later tokens come in windows, the
last one as under ``chunked``; the span's time is the rest of its own chain (`_pf_chain`'s
``rest``: none, or, for the share ``q_rest`` of prompts behind which another arrived, the mean
rest over that share), its whole windows at the decoders' mean step (a
chain spread over each) and its last window's decode-only steps; E2E's spread adds a chain's
a window (and, at one step, a gap). A chain is followed prompt batch by prompt batch: the
prompts waiting at a decision take ``max(1, T / M)`` steps for their ``T`` tokens, and the
chain goes on while prompts arrive meanwhile, so a prompt longer than the budget is one
link of many steps, not many links that may each end the chain. ``k = 1``
leaves the program as it was (a Python-level branch).

Not modelled here (the simulator has them): the finite queue (drops), the warm-up, and
the exact integer rounding of lengths; see docs/continuous.md for what neither models.
"""

from __future__ import annotations

import functools
from statistics import NormalDist
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array, lax
from jax.custom_derivatives import SymbolicZero
from jax.scipy.special import ndtri

from sweep._numerics import gammainc_pq, kept_in_memory, opaque_one, poisson_pmf, safe_div

__all__ = ["DAMP", "N_FIXED", "cb_point", "cb_state"]

INF = jnp.inf
#: damped fixed-point iterations for (T_d, T_p). On 32,768 random points (benchmarks/cb_points.py's
#: inputs) 8 iterations are within 2e-4 of 60 iterations at the 99.9th percentile of every output
#: (12: 7e-6); the rest are 2-cycles next to saturation that no count settles
N_FIXED = 8
#: weight of the new iterate in the damped fixed-point update
DAMP = 0.85


def _f64(x) -> Array:
    return jnp.asarray(x, dtype=jnp.float64)


def _sqrt0(u):
    """``sqrt(u)`` for ``u >= 0`` whose derivative at 0 is 0 rather than 0/0: the norms of
    excesses below are exactly 0 wherever every excess is (no spread, no wait), and forward-
    mode derivatives (`[sensitivity]`) must not turn that into NaN. Same values as sqrt."""
    pos = u > 0.0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, u, 1.0)), 0.0)


def _wh_quantile(mean, var, z):
    """q-quantile (z = Phi^-1(q)) of a gamma law with this mean and variance
    (Wilson-Hilferty); the mean where the variance is 0."""
    pos = (var > 0.0) & (mean > 0.0)
    cv = jnp.sqrt(jnp.where(pos, var, 1.0)) / jnp.where(pos, mean, 1.0)
    inv9a = jnp.where(pos, jnp.minimum(cv * cv / 9.0, 1e6), 0.0)
    base = jnp.maximum(1.0 - inv9a + z * _sqrt0(inv9a), 0.0)
    return jnp.where(pos, mean * base**3, mean)


def _erlang(c, a):
    """M/M/c state quantities for real c >= 1 and load a < c (Poisson tails through the
    regularized incomplete gamma function, so c need not be an integer).

    Returns (P_wait = Erlang C, P(R = 0), E[R^2]) with R = min(customers, c) the busy
    servers: below c the state law is p0 a^k / k!, at c the rest (P_wait). One
    incomplete-gamma and one log-gamma evaluation: ``P(Q <= c)`` and ``P(Q = c)``, then the
    lower tails by subtracting ``P(Q = c - j)`` from the recurrence
    ``P(Q = k - 1) = P(Q = k) k / a`` (safe: each tail is a difference of larger terms only
    where the tail itself is tiny beside 1, i.e. where its relative error cannot matter)."""
    a = jnp.maximum(a, 1e-300)
    rho = jnp.clip(a / c, 0.0, 1.0 - 1e-12)
    _, q_c = gammainc_pq(c + 1.0, a)  # P(Q <= c), Q ~ Poisson(a)
    pmf_c = poisson_pmf(c, a)
    pmf_1 = pmf_c * c / a
    pmf_2 = pmf_1 * jnp.maximum(c - 1.0, 0.0) / a
    q_c1 = jnp.maximum(q_c - pmf_c, 0.0)
    q_c2 = jnp.where(c >= 2.0, jnp.maximum(q_c1 - pmf_1, 0.0), 0.0)
    q_c3 = jnp.where(c >= 3.0, jnp.maximum(q_c2 - pmf_2, 0.0), 0.0)
    erl_b = safe_div(pmf_c, q_c, q_c > 0.0, 1.0)
    erl_c = erl_b / (1.0 - rho * (1.0 - erl_b))
    scale = safe_div(1.0 - erl_c, q_c1, q_c1 > 0.0, 0.0)  # p0 e^a
    p0 = scale * jnp.exp(-a)
    er2 = scale * (a * a * q_c3 + a * q_c2) + c * c * erl_c
    return erl_c, p0, er2


def _lognormal(mean, cv):
    """(sigma, mu) of a lognormal with this mean and CV."""
    s2 = jnp.log1p(cv * cv)
    return _sqrt0(s2), jnp.log(mean) - 0.5 * s2


def _ln_shape(mean, var):
    """(sigma, mu) of the lognormal with this mean (> 0) and variance (>= 0)."""
    m = jnp.maximum(mean, 1e-300)
    s2 = jnp.log1p(jnp.maximum(var, 0.0) / (m * m))
    return _sqrt0(s2), jnp.log(m) - 0.5 * s2


def _phi_fast(x):
    """The standard normal CDF in its tanh form, ``(1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2``
    (3e-4 absolute at worst)."""
    xc = jnp.clip(x, -8.0, 8.0)
    return 0.5 * (1.0 + jnp.tanh(0.7978845608028654 * (xc + 0.044715 * xc * xc * xc)))


def _ndtr(x):
    """The standard normal CDF through the Chebyshev-fitted erfc of Numerical Recipes (2nd ed.,
    section 6.2, ``erfcc``): relative error below 1.2e-7 in both tails, at the price of one exp
    and a division, where `jax.scipy.special.ndtr` evaluates erf and erfc on every lane."""
    a = 0.7071067811865476 * jnp.abs(x)
    t = 1.0 / (1.0 + 0.5 * a)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    half_tail = 0.5 * t * jnp.exp(-a * a + poly)  # Phi(-|x|)
    return jnp.where(x < 0.0, half_tail, 1.0 - half_tail)


#: The analytic model's floor on a step's fixed cost, seconds (`_raw`): 0.1 ms.
MIN_T_FIXED_S = 1e-4

#: safeguarded Newton steps of `_mix_quantile` (in log time, inside a shrinking bracket)
N_NEWTON = 3


def _mix_quantile(q, z, w, shift, one, two):
    """q-quantile of ``shift + X``, X the mixture ``(1 - w) A + w B`` of two lognormals,
    each ``(mean, var)``. In ``v = log X`` the mixture's CDF is
    ``F(v) = (1 - w) Phi((v - mu_a) / s_a) + w Phi((v - mu_b) / s_b)``, and its q-quantile
    lies between the two components' own, ``mu + s z``. Three starts, the best of which
    (smallest ``|F - q|``) is kept: the quantile of one lognormal matched to the mixture's
    mean and variance (components that overlap), and A's quantile at ``q / (1 - w)`` or B's
    at ``(q - (1 - w)) / w`` (components far apart: then the other one's CDF is 0 or 1
    there); then `N_NEWTON` Newton steps kept inside the bracket, which shrinks with every
    evaluation (a step that would leave it bisects instead); the answer is the evaluated
    point with the smallest ``|F - q|``. tests/test_models_cb_analytic.py
    checks the result against a fine bisection."""
    (sa, ma), (sb, mb) = _ln_shape(*one), _ln_shape(*two)
    sa, sb = jnp.maximum(sa, 1e-9), jnp.maximum(sb, 1e-9)  # a point mass: a very narrow lognormal
    w_in = w
    swap = mb < ma  # A the component with the smaller median (for the far-apart starts)
    sa, ma, sb, mb = (jnp.where(swap, sb, sa), jnp.where(swap, mb, ma), jnp.where(swap, sa, sb),
                      jnp.where(swap, ma, mb))
    w = jnp.where(swap, 1.0 - w, w)
    va, vb = ma + sa * z, mb + sb * z
    lo, hi = jnp.minimum(va, vb), jnp.maximum(va, vb)

    def cdf(v, slope=True):
        xa, xb = (v - ma) / sa, (v - mb) / sb
        f = (1.0 - w) * _ndtr(xa) + w * _ndtr(xb) - q
        if not slope:
            return f
        return f, 0.3989422804014327 * ((1.0 - w) * jnp.exp(-0.5 * xa * xa) / sa + w * jnp.exp(-0.5 * xb * xb) / sb)

    mean = (1.0 - w) * one[0] + w * two[0]
    second = (1.0 - w) * (one[1] + one[0] ** 2) + w * (two[1] + two[0] ** 2)
    s0, mu0 = _ln_shape(mean, second - mean * mean)
    tiny = 1e-12
    starts = (mu0 + s0 * z,
              ma + sa * ndtri(jnp.clip(q / jnp.maximum(1.0 - w, tiny), tiny, 1.0 - tiny)),
              mb + sb * ndtri(jnp.clip((q - (1.0 - w)) / jnp.maximum(w, tiny), tiny, 1.0 - tiny)))
    v = jnp.clip(starts[0], lo, hi)
    f = cdf(v, slope=False)
    lo, hi = jnp.where(f < 0.0, v, lo), jnp.where(f < 0.0, hi, v)
    for cand in starts[1:]:
        c = jnp.clip(cand, lo, hi)
        fc = cdf(c, slope=False)
        better = jnp.abs(fc) < jnp.abs(f)
        v, f = jnp.where(better, c, v), jnp.where(better, fc, f)
        lo, hi = jnp.where(fc < 0.0, c, lo), jnp.where(fc < 0.0, hi, c)
    _, d = cdf(v)  # the slope at the best start only
    best, best_f = v, f
    for _ in range(N_NEWTON):
        step = v - safe_div(f, d, d > 0.0, 0.0)
        v = jnp.where((d > 0.0) & (step >= lo) & (step <= hi), step, 0.5 * (lo + hi))
        f, d = cdf(v)
        lo, hi = jnp.where(f < 0.0, v, lo), jnp.where(f < 0.0, hi, v)
        better = jnp.abs(f) < jnp.abs(best_f)
        best, best_f = jnp.where(better, v, best), jnp.where(better, f, best_f)
    # one more Newton step from the root found, with the root itself and the slope held
    # constant: the same value (to the solver's precision) and, by the implicit function
    # theorem, the quantile's exact derivative dv = -dF / F' (`[sensitivity]`), which
    # differentiating the iterations themselves would not give
    v0 = lax.stop_gradient(best)
    f0, d0 = cdf(v0)
    d0 = lax.stop_gradient(d0)
    v = v0 - safe_div(f0, d0, d0 > 0.0, 0.0)
    # a step that would leave the bracket (a root already at the bracket's collapsed end,
    # where the step is an ulp) keeps the root's value, and still its implicit derivative
    v = jnp.where((d0 > 0.0) & (v >= lo) & (v <= hi), v,
                  v0 - safe_div(f0 - lax.stop_gradient(f0), d0, d0 > 0.0, 0.0))
    v_one, v_two = jnp.where(swap, vb, va), jnp.where(swap, va, vb)  # the quantiles of `one` and `two`
    x = jnp.where(w_in <= 0.0, jnp.exp(v_one), jnp.where(w_in >= 1.0, jnp.exp(v_two), jnp.exp(v)))
    return shift + jnp.where(mean > 0.0, x, 0.0)


#: bisection steps of `_window_quantile` (the bracket is one window wide: 2^-24 of it)
N_BISECT = 24


def _window_quantile(q, z, pi, width, mean_y, var_y):
    """q-quantile of ``B U + Y``: with probability ``pi`` the rest of a window in progress,
    uniform on ``(0, width)``, plus ``Y``, a lognormal of mean ``mean_y`` and variance
    ``var_y`` (independent): the TTFT of a multi-step engine, whose window residual is
    bounded where one lognormal for the whole sum puts a long upper tail (+50% at the
    99th percentile when the window dominates). Its CDF is closed-form:
    ``F(t) = (1 - pi) L(t) + pi (G(t) - G(t - width)) / width`` with ``L`` the lognormal's
    CDF and ``G(y) = y L(y) - mean_y Phi(d - s)`` its integral (``d = (ln y - mu) / s``).
    ``F`` lies between ``L(t - width)`` and ``L(t)``, so the quantile lies within one window
    above ``Y``'s own: `N_BISECT` bisections, then a Newton step from the root with the
    root and the slope held constant, for the implicit derivative (`_mix_quantile`)."""
    s, mu = _ln_shape(mean_y, var_y)
    s = jnp.maximum(s, 1e-9)
    wd = jnp.maximum(width, 1e-300)

    def big_l(y):
        return jnp.where(y > 0.0, _ndtr((jnp.log(jnp.maximum(y, 1e-300)) - mu) / s), 0.0)

    def big_g(y):
        d = (jnp.log(jnp.maximum(y, 1e-300)) - mu) / s
        return jnp.where(y > 0.0, y * _ndtr(d) - mean_y * _ndtr(d - s), 0.0)

    def cdf(t):
        return (1.0 - pi) * big_l(t) + pi * (big_g(t) - big_g(t - wd)) / wd - q

    def pdf(t):
        d = (jnp.log(jnp.maximum(t, 1e-300)) - mu) / s
        dens = jnp.where(t > 0.0, 0.3989422804014327 * jnp.exp(-0.5 * d * d) / (s * jnp.maximum(t, 1e-300)), 0.0)
        return (1.0 - pi) * dens + pi * (big_l(t) - big_l(t - wd)) / wd

    y_q = jnp.exp(mu + s * z)
    lo, hi = y_q, y_q + wd
    for _ in range(N_BISECT):
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < 0.0
        lo, hi = jnp.where(below, mid, lo), jnp.where(below, hi, mid)
    t0 = lax.stop_gradient(0.5 * (lo + hi))
    d0 = lax.stop_gradient(pdf(t0))
    f0 = cdf(t0)
    t = t0 - safe_div(f0 - lax.stop_gradient(f0), d0, d0 > 0.0, 0.0)
    return jnp.where((pi > 0.0) & (width > 0.0) & (mean_y > 0.0), t, jnp.where(mean_y > 0.0, y_q, 0.0))


#: bisection steps of `_node_quantile` (its bracket is the nodes' quantiles' log-range: 2^-10 of it, then a Newton step)
N_BISECT_NODES = 10


def _node_quantile(q, wgt, scale, floor, mean_y, var_y):
    """q-quantile of a mixture over output-length nodes: node ``i`` (weight ``wgt_i``, the
    weights summing to 1) is ``scale_i (floor + Y_i)``, ``Y_i`` lognormal of mean ``mean_y``
    and variance ``var_y_i``: a multi-step TPOT, whose requests' spans of whole windows put
    their TPOT at a few separate levels that one law of the mean and variance spreads into a
    long tail. The quantile lies between the nodes' own at ``q`` (the mixture's CDF there is
    below and above ``q``): `N_BISECT_NODES` bisections in its log, then one Newton step, with
    the root and the slope held constant for the implicit derivative (`_mix_quantile`)."""
    s, mu = _ln_shape(mean_y, var_y)
    s = jnp.maximum(s, 1e-9)
    z = ndtri(q)
    live = wgt > 0.0
    x_q = scale * (floor + jnp.exp(mu + s * z))
    lo = jnp.log(jnp.maximum(jnp.min(jnp.where(live, x_q, jnp.inf)), 1e-300))
    hi = jnp.log(jnp.maximum(jnp.max(jnp.where(live, x_q, 0.0)), 1e-300))

    def arg(t):
        return (jnp.log(jnp.maximum(t / jnp.maximum(scale, 1e-300) - floor, 1e-300)) - mu) / s

    def cdf(t):
        return jnp.sum(jnp.where(live & (t > scale * floor), wgt * _ndtr(arg(t)), 0.0)) - q

    def pdf(t):
        d = arg(t)
        y = jnp.maximum(t - scale * floor, 1e-300)
        dens = 0.3989422804014327 * jnp.exp(-0.5 * d * d) / (s * y)
        return jnp.sum(jnp.where(live & (t > scale * floor), wgt * dens, 0.0))

    for _ in range(N_BISECT_NODES):
        mid = 0.5 * (lo + hi)
        below = cdf(jnp.exp(mid)) < 0.0
        lo, hi = jnp.where(below, mid, lo), jnp.where(below, hi, mid)
    # a Newton step from the bracket's middle (kept inside it), with the root and the slope
    # held constant: the value to the square of the bracket's width, and the implicit derivative
    t0 = lax.stop_gradient(jnp.exp(0.5 * (lo + hi)))
    d0 = lax.stop_gradient(pdf(t0))
    f0 = cdf(t0)
    step = jnp.clip(safe_div(lax.stop_gradient(f0), d0, d0 > 0.0, 0.0), t0 - jnp.exp(hi), t0 - jnp.exp(lo))
    return t0 - step - safe_div(f0 - lax.stop_gradient(f0), d0, d0 > 0.0, 0.0)


def _pf_steps(m, p_over_m):
    """prefill_first: the prompt steps between two of a decoder's steps, when ``m`` prompts
    arrive (Poisson) in the meantime: one step if any arrived (probability ``1 - e^-m``), more
    where their tokens exceed the budget (``p_over_m`` = mean prompt / budget)."""
    return -jnp.expm1(-m) * jnp.maximum(1.0, m * p_over_m)


#: prefill_first: the links (prompt batches) of a chain followed one by one (`_pf_chain`)
_CHAIN_STEPS = 10


def _pf_chain(lam, w, tf, a_tok, p1, pcv, bud, t_max):
    """prefill_first: the chain of prompt steps after a decode window of ``w`` seconds (one
    decode step at ``scheduler_steps = 1``). Its decision carries the prompts that arrived
    during the window (Poisson, ``lam w``); they are prefilled in steps of at most the
    budget's tokens, and the next decision prefills the prompts that arrived meanwhile, as
    long as any did: the chain ends with the first batch during which none arrived. The chain
    is followed batch by batch (a link: the prompts waiting at a decision): a batch of ``T``
    tokens takes ``s = max(1, T / M)`` steps and ``t_f s + a_tok T`` seconds (``a_tok = t_t +
    t_c``), so a prompt longer than the budget is one link of many steps. (Until 2026-12-06 a
    link was one step, with the budget's leftover carried as a Poisson count that could end
    the chain: a 1,452-token prompt beside a 16-token budget was a chain of 11 steps, not 91,
    and seed 269's point 60 of benchmarks/cb_accuracy.py had its mean TPOT at a third of the
    simulated.) A link's prompt count is followed by its mean and variance: the arrivals
    during a link of random length are a mixed Poisson count, taken as negative binomial of
    the same two moments, whose probability of none ends the chain (short links, of few or
    short prompts, end it more often than their mean suggests). The first `_CHAIN_STEPS`
    links are followed, the rest as a geometric tail at the last one's. No sequence leaves
    during a chain, so it also ends once its admissions fill the slots: it lasts at most
    ``t_max`` (the caller's slot bound). Returns the expected prompt steps ``n`` of a chain,
    its expected time ``time``, the expected sum of its steps' squared durations ``d2`` (for
    the residual of the step in progress), a prompt's mean ``rest`` of its chain after its
    own link (each link weighted by the prompts it carries) and the share ``q_rest`` of prompts
    that have a rest (another link follows theirs); and ``full``, the share of the prompts
    arriving during a chain that find the slots full at its end (a chain the slots cut) and
    wait for the next window."""
    var_p = (p1 * pcv) ** 2
    m = lam * w  # the count at a decision: mean and variance (Poisson after a window)
    v = m

    def step(m, v):
        kappa = m * m / jnp.maximum(v - m, 1e-12 * m * m + 1e-300)
        p0 = jnp.exp(-kappa * jnp.log1p(m / jnp.maximum(kappa, 1e-300)))
        go = jnp.maximum(1.0 - p0, 1e-300)
        mu = m / go  # the link's prompts, given it happens
        var_n = jnp.maximum((v + m * m) / go - mu * mu, 0.0)
        tok = mu * p1
        over = tok > bud
        s = jnp.maximum(1.0, tok / bud)  # the steps its tokens take under the budget
        d = tf * s + a_tok * tok
        var_d = (a_tok + jnp.where(over, tf / bud, 0.0)) ** 2 * (mu * var_p + var_n * p1 * p1)
        d2 = jnp.where(over, s * (tf + a_tok * bud) ** 2, d * d + var_d)  # its steps' squared lengths
        m_next = lam * d
        v_next = lam * d + lam * lam * var_d
        return go, d, var_d, m_next, v_next, s, d2

    reach = jnp.ones_like(m)
    n = jnp.zeros_like(m)
    time = jnp.zeros_like(m)
    d2 = jnp.zeros_like(m)
    # the chain's time T = D_1 + ... + D_N: E[T^2] = sum_j P(N >= j) E[D_j^2 + 2 D_j (D_1 + ...
    # + D_{j-1})], the earlier steps taken at their means
    t2 = jnp.zeros_like(m)
    cum = jnp.zeros_like(m)
    go1 = jnp.zeros_like(m)
    d_first = jnp.zeros_like(m)
    # a prompt's rest of its chain (the links after its own; a link's prompts all taken at its
    # end), weighted by the prompts each link carries: sum_i mu_i (T - T_i) / sum_i reach_i mu_i,
    # T_i the expected time up to link i
    mu_sum, mu_t = jnp.zeros_like(m), jnp.zeros_like(m)
    carried = jnp.zeros_like(m)
    # and the prompts another link follows, sum_i mu_i P(N > i): the share with a rest
    on, mu_prev = jnp.zeros_like(m), jnp.zeros_like(m)
    for i in range(_CHAIN_STEPS):
        m_at = m
        go, d, var_d, m, v, s, dd = step(m, v)
        go1 = go if i == 0 else go1
        d_first = d if i == 0 else d_first
        reach = reach * go
        on = on + mu_prev * reach
        n, time, d2 = n + reach * s, time + reach * d, d2 + reach * dd
        t2 = t2 + reach * (d * d + var_d + 2.0 * d * cum)
        cum = cum + d
        mu = m_at / jnp.maximum(go, 1e-300)  # the link's prompts, given it happens
        mu_sum, mu_t, carried = mu_sum + mu, mu_t + mu * time, carried + reach * mu
        mu_prev = mu
    m_at = m
    go, d, var_d, _, _, s, dd = step(m, v)
    g1 = jnp.maximum(1.0 - go, 0.01)
    more = reach * go / g1  # reach (q + q^2 + ...), q = go <= 0.99
    # the tail's steps t = 1, 2, ...: each carries mu and leaves reach d q^(t+1) / (1 - q) after it
    mu = m_at / jnp.maximum(go, 1e-300)
    rest_tail = mu * reach * d * go * go / (g1 * g1)
    rest = safe_div(mu_sum * (time + more * d) - mu_t + rest_tail, carried + more * mu, carried > 0.0, 0.0)
    on = on + mu_prev * reach * go + mu * reach * go * go / g1
    q_rest = jnp.clip(safe_div(on, carried + more * mu, carried > 0.0, 0.0), 0.0, 1.0)
    n, time, d2 = n + more * s, time + more * d, d2 + more * dd
    # the tail's steps t = 1, 2, ... (reach q^t, cum + (t - 1) d before each): sum q^t = q / (1 - q),
    # sum t q^t = q / (1 - q)^2
    t2 = t2 + reach * ((d * d + var_d + 2.0 * d * (cum - d)) * go / g1 + 2.0 * d * d * go / (g1 * g1))
    t_cap = jnp.maximum(t_max, tf)
    cut = jnp.minimum(1.0, safe_div(t_cap, time, time > 0.0, 1.0))
    # a chain the slots cut leaves prompts waiting: the next decision's first step carries the
    # queue, up to the slots its window freed, so a slot-bound engine runs one prompt step (one
    # a budget's worth of tokens) a cycle, carrying what arrived over the cycle:
    # t1 = t_f n1 + a_tok lam p1 (w + t1), n1 = max(1, lam p1 (w + t1) / M)
    x = lam * p1
    t1_one = safe_div(tf + a_tok * x * w, 1.0 - a_tok * x, a_tok * x < 1.0, jnp.inf)
    den = 1.0 - a_tok * x - tf * x / bud
    t1_bud = safe_div((tf / bud + a_tok) * x * w, den, den > 0.0, jnp.inf)
    t1 = jnp.minimum(jnp.maximum(t1_one, t1_bud), t_cap)
    n1 = jnp.maximum(1.0, x * (w + t1) / bud)
    # the natural chain where it ends before the slot bound (weight `cut`); the more it is cut,
    # the bound: `some` is the chance of a chain, and a chain lasts at most t_cap, so
    # E[T^2] <= t_cap E[T]. Cut, it is one of two things, weighed by wgt = sqrt(t1 / t_cap)
    # (the square root, not the ratio, chosen on the four stored draws: 2,859 against 2,857
    # of 3,007 comparisons; seed 261's point 31, a slot-bound engine at load 0.90, keeps its
    # TPOT within 15% with it):
    # * the merged step (wgt -> 1: one step of what arrived over the cycle already fills the
    #   bound, so prompts queue for slots and each cycle runs that one step);
    # * the natural chain truncated at the bound (wgt -> 0: prompts arrive during every step,
    #   so the chain runs until its admissions fill the slots, t_cap; seed 273's point 110 of
    #   benchmarks/cb_accuracy.py, 161 req/s of 19-token prompts beside 42 ms steps: chains of
    #   32 steps, 1.47 s, to the cap). Its steps, time and squared durations are the natural
    #   chain's scaled by `cut`. A prompt's rest after its own step is then over a chain that
    #   ends at the bound, not the natural chain's memoryless geometric tail: its first step
    #   carries the window's lam w prompts, which wait for the rest of it, and the others
    #   arrive evenly over it and wait half of it; and the prompts that arrive in its last step
    #   find the slots full and wait for the next window (`full`, their share of the chain's
    #   arrivals: one of its steps). Until 2026-12-06 a cut chain was the merged step alone:
    #   that point's mean TPOT 36% below the simulated, 4% above now.
    t2_cut = jnp.minimum(t2 * cut * cut, t_cap * time * cut)
    t_tr = cut * time
    wgt = jnp.sqrt(jnp.clip(safe_div(t1, t_tr, t_tr > 0.0, 1.0), 0.0, 1.0))
    tr = (1.0 - cut) * (1.0 - wgt)  # the truncated chain's weight
    m0 = lam * w
    rest_tr = safe_div(m0 * jnp.maximum(t_tr - d_first, 0.0) + lam * t_tr * t_tr / 2.0, m0 + lam * t_tr,
                       t_tr > 0.0, 0.0)
    # a prompt's rest of its chain after its own step: the natural chain's (where the slots cut
    # it, at most the truncated chain's: seed 281's point 94, a natural chain twice the bound,
    # had its mean TPOT 61% high with the natural rest), the merged step's whole (a slot-bound
    # engine's prompts queue for it; without it seed 261's point 31, at load 0.90, puts E2E 20%
    # low) and the truncated chain's
    rest_nat = jnp.where(cut < 1.0, jnp.minimum(cut * rest, rest_tr), rest)
    rest_all = cut * rest_nat + (1.0 - cut) * wgt * t1 + tr * rest_tr
    return dict(n=cut * n * cut + (1.0 - cut) * wgt * n1 + tr * cut * n,
                time=cut * time * cut + (1.0 - cut) * wgt * t1 + tr * t_tr,
                d2=cut * d2 * cut + (1.0 - cut) * wgt * t1 * t1 + tr * cut * d2,
                t2=cut * t2_cut + (1.0 - cut) * wgt * t1 * t1 + tr * t_tr * t_tr,
                some=cut * go1 + (1.0 - cut) * wgt + tr * go1,
                rest=rest_all, q_rest=1.0 - cut * (1.0 - q_rest),
                full=tr / jnp.maximum(cut * n, 1.0))


def _pf_window_and_chain(lam, kk, g, t_own, c_bar, tt, tc, tf, p1, pcv, bud, c, n_w):
    """prefill_first with windows of ``kk`` steps (1 at ``scheduler_steps = 1``): the decode
    window's length (``kk`` decode-only steps of the decoders running at the state ``g``,
    `_maps`' parts) and the chain of prompt steps after it (`_pf_chain`), which ends at the latest when its admissions
    take every slot: the ``n_w`` cohorts admitted over the ``n_w`` cycles of a request's
    windows fill them, so a window and its chain last at most ``c / (lam n_w)``."""
    t_dec = t_own + jnp.maximum(g["a"] * g["f_dec"] - 1.0, 0.0) * (tt + tc * c_bar)
    w_d = kk * t_dec
    return w_d, _pf_chain(lam, w_d, tf, tt + tc, p1, pcv, bud, c / (lam * n_w) - w_d)


def _slot_chain(lam, c, capacity, rho_tok):
    """The requests present as a birth-death chain with state-dependent departures. All
    running sequences share every step: with ``r`` running, a step costs ``t_f`` plus the
    tokens of the ``r`` sequences, so a request's service (its ``E[D]`` steps) takes
    ``S(r) = a + w r``, with ``w = t_t a1 + t_c a2`` the token work one request brings
    (its prompt, its decode tokens and the cache they read) and ``a = t_f E[D]``, taken
    as ``c / capacity - w c`` so that full occupancy departs at exactly the model's
    capacity (which also covers a binding token budget). The departure rate is
    ``mu(r) = r / (a + w r)`` and the chain's law below the cap is negative binomial:
    ``pi(n) ~ (s)_n x^n / n!`` with ``x = lam w`` (the token-work utilisation) and
    ``s = a / w + 1`` (Poisson as ``w -> 0``, wider the more a joining sequence slows
    everyone's steps: the running count varies more than Erlang's law, which treats the
    sequences' services as independent, allows); above the cap it is geometric with
    ratio ``rho_c = lam / capacity``. Returns P(wait) = P(n >= c) (PASTA) and the mean
    wait for a slot, ``E[n - c; n > c] / lam`` (exponential services; the caller applies
    the service-variance factor). The negative binomial's CDF at ``c`` is its gamma
    approximation (same mean and variance, half-integer continuity correction): one
    incomplete gamma function; its pmf at ``c`` is exact. A sustainable point has
    ``x < 1``: ``lam < capacity = c / (a + w c)`` implies ``lam w < 1``."""
    w = rho_tok / lam
    full = c / jnp.maximum(capacity, 1e-300)  # S(c)
    a = jnp.maximum(full - w * c, 1e-6 * full)
    bb = jnp.maximum(w, 1e-6 * a)  # s <= 1e6 + 1: the Poisson limit, in precision
    x = jnp.clip(lam * bb, 1e-300, 1.0 - 1e-12)
    s = a / bb + 1.0
    mu_c = c / (a + bb * c)
    rho_c = jnp.clip(lam / mu_c, 0.0, 1.0 - 1e-9)
    log_pmf = (lax.lgamma(s + c) - lax.lgamma(s) - lax.lgamma(c + 1.0) + s * jnp.log1p(-x) + c * jnp.log(x))
    pmf_c = jnp.exp(log_pmf)
    k = jnp.clip(s * x, 1.0, 5000.0)  # gamma shape m^2 / v = m (1 - x)
    cdf_c, _ = gammainc_pq(k, jnp.clip((c + 0.5) * (1.0 - x), 0.0, 1e7))  # scale 1 / (1 - x)
    cdf_c = jnp.maximum(cdf_c, pmf_c)
    tail = pmf_c * rho_c / (1.0 - rho_c)
    z = cdf_c + tail
    p_wait = (pmf_c + tail) / z
    lq = pmf_c * rho_c / (1.0 - rho_c) ** 2 / z
    return dict(p_wait=jnp.clip(p_wait, 0.0, 1.0), w_q=lq / lam)


#: ``scheduler_steps = k``: the output length's law at equal-probability midpoints (its normal
#: quantiles), rounded as the simulator rounds lengths: a window's arithmetic needs the integer
#: length, ``k ceil(O / k)``
_O_NODES = tuple(NormalDist().inv_cdf((i + 0.5) / 64) for i in range(64))


def _o_nodes(o1, ocv):
    """The output length at the 64 nodes of `_O_NODES` (its lognormal law), rounded as the
    simulator rounds lengths."""
    s2 = jnp.log1p(ocv * ocv)
    zs = jnp.asarray(_O_NODES)
    return jnp.maximum(1.0, jnp.round(jnp.where(ocv > 0.0, o1 * jnp.exp(jnp.sqrt(s2) * zs - 0.5 * s2), o1)))


def _decode_windows(o1, ocv, kk):
    """The decode windows of ``kk`` steps a request's ``O - 1`` decode tokens span,
    ``E[ceil((O - 1) / kk)]`` (at least 1), over the output length's law (`_o_nodes`)."""
    return jnp.maximum(jnp.mean(jnp.ceil((_o_nodes(o1, ocv) - 1.0) / kk)), 1.0)


def _spanned_windows(om1, kk, n_dec, theta, n):
    """Multi-step windows under the chunked policy: the first two moments of ``min(n, W)``, with
    ``W`` the windows of ``kk`` steps the decoders present keep running, each decoding a token
    a step: ``P(W > j) = 1 - (1 - theta S(j kk)) e^(-n_dec S(j kk))``, ``S`` the survival of a
    fresh output's ``O - 1`` (``om1``, `_o_nodes` less one), a Poisson count ``n_dec`` of
    decoders and, with probability ``theta``, one more that has just begun. ``n`` may be
    fractional; the sums run over 65 nodes spaced at least a window apart (wider for outputs
    longer than 64 windows)."""
    dj = jnp.maximum(1.0, jnp.max(om1) / kk / 64.0)
    jw = jnp.arange(65, dtype=om1.dtype) * dj
    surv = jnp.mean(jnp.where(om1[None, :] > (jw * kk)[:, None], 1.0, 0.0), axis=1)
    p_run = 1.0 - (1.0 - theta * surv) * jnp.exp(-n_dec * surv)
    wgt = jnp.clip(n - jw, 0.0, dj)
    return jnp.sum(p_run * wgt), jnp.sum(p_run * wgt * (2.0 * jw + wgt))


def _windows(km, lam, p1, o1, ocv, td, g, pf, tt, tc, tf, q, tpot_law, point, prefill_first=False
             ) -> dict[str, Array]:
    """Multi-step windows of ``k = km + 1`` steps, from the one-step model's solution: what an
    arrival, a chunked prompt and a client's messages wait for beyond it. ``prefill_first``
    (a Python bool): prompts take single steps of their own between decode windows, so the
    first token is its own message, no chunk waits for a window, and the window in progress
    is a decode window or a step of a chain of prompt steps (`_pf_chain`). ``point``: the
    point's ``pcv``, ``bud``, ``t_own``, ``c_bar``, ``c``, ``n_w``, ``pw`` and ``m2``."""
    kk = 1.0 + km
    lam_p1 = lam * p1
    e = point
    u, t_bar, var_t = g["u"], g["t_bar"], g["var_t"]
    # a decode-only step: a decoder's mean step less the prompt work in it (lam p1 (t_t + t_c)
    # of each second: the decisions carry the prompts; a lone request's step at light load)
    t_do = jnp.maximum(td * (1.0 - (tt + tc) * lam_p1), tf + tt)
    # another sequence keeps a window going (the others a running sequence sees; under
    # prefill_first only the decoding ones: a window never carries a prompt)
    seen = jnp.maximum(g["r_seen"] - 1.0, 0.0)
    n_o = seen * g["f_dec"] if prefill_first else seen
    o = _o_nodes(o1, ocv)
    om1 = o - 1.0
    # steps from the first message to the last: whole windows while the request decodes, and
    # its last window as long as its own remaining tokens or, while another decoder (a Poisson
    # count, mean `n_o`) has tokens left, up to the window's end:
    # E[min(k, max(r, R))] = r + sum_{r <= j < k} (1 - e^(-n_o S_e(j))). Under prefill_first a
    # decoder present when the window starts is at a random point of its output, so its tokens
    # left follow the length-biased residual of D = O - 1, S_e(j) = E[(D - j)^+] / E[D] (until 2026-12-06 a
    # fresh output's survival, whose short outputs put seed 261's point 102, 3.5-token outputs
    # at CV 1.55, at a mean TPOT of 6.2 ms against 7.5 simulated; now 7.4)
    # (under chunked the last window's decision step carries the own token, then up to km
    # decode-only steps: r - 1 and km in place of r and k)
    # (until 2026-12-06 the last window ran whole whenever another decoder was present, which
    # short outputs end early)
    jk = jnp.arange(int(km) + 1, dtype=om1.dtype)
    surv_k = jnp.mean(jnp.where(om1[None, :] > jk[:, None], 1.0, 0.0), axis=1)
    left_k = jnp.mean(jnp.maximum(om1[None, :] - jk[:, None], 0.0), axis=1) / jnp.maximum(jnp.mean(om1), 1e-12)
    # P(another decoder has more than j tokens left); under chunked a fresh output's survival
    # (the residual cost 2 comparisons of 1,891 there, seeds 256 and 268, one point's TPOT tail)
    p_oth = -jnp.expm1(-n_o * (left_k if prefill_first else surv_k))
    # a window runs km steps only while a sequence has tokens left: its length is the longest
    # remaining decode of a running sequence and of the others beside it (Poisson, mean
    # `n_o`), each a fresh output's O - 1: E[min(km, max R)] = sum_j P(max R > j)
    # = sum_{j < km} 1 - F(j) e^(-n_o (1 - F(j))), F the law of O - 1 (short outputs end windows early)
    # (the fresh survival here: the length-biased residual, as above, cost 2 of 2,241 on seeds 261-269)
    surv = surv_k[:int(km)]
    p_run = 1.0 - (1.0 - surv) * jnp.exp(-n_o * surv)
    km_a = jnp.sum(p_run)
    ka = 1.0 + km_a
    # the spread of that count of decode-only steps (its second moment sum_j (2 j + 1) P(> j))
    var_km = jnp.maximum(jnp.sum((2.0 * jk[:int(km)] + 1.0) * p_run) - km_a * km_a, 0.0)
    if prefill_first:  # the window and the chain of prompt steps after it (`_pf_chain`); the
        # first token alone, then the decode tokens in windows of k
        w_d, ch = _pf_window_and_chain(lam, ka, g, e["t_own"], e["c_bar"], tt, tc, tf, p1, e["pcv"],
                                       e["bud"], e["c"], e["n_w"])
        n_win = jnp.ceil(om1 / kk)
        r_last = om1 - kk * (n_win - 1.0)  # the own tokens of the last window, 1 to k
    else:  # the first message also carries the decision window's decode tokens: the last window
        # is a decision step (the own token) and up to km decode-only steps
        n_win = jnp.maximum(jnp.ceil((om1 - km) / kk), 0.0)
        r_last = om1 - km - kk * (n_win - 1.0)
    sh = 0.0 if prefill_first else 1.0  # (the decision step's token: km steps after it)
    in_tail = (jk[None, :] >= r_last[:, None] - sh) & (jk[None, :] <= km - sh)
    tail = jnp.sum(jnp.where(in_tail, p_oth[None, :], 0.0), axis=1)
    # the last window's own steps (r0) and the steps another decoder adds after them (T): T's
    # second moment sum_j (2 (j - r0) + 1) P(max R > j), and P(T > 0), another decoder
    # outlasting the own tokens
    r0 = r_last - sh
    t2 = jnp.sum(jnp.where(in_tail, (2.0 * (jk[None, :] - r0[:, None]) + 1.0) * p_oth[None, :], 0.0), axis=1)
    p_on = jnp.where((n_win > 0.0) & (r0 <= km - sh), jnp.take(p_oth, jnp.clip(r0, 0.0, km).astype(jnp.int32)), 0.0)

    def span_steps(t_last, rest_scale=1.0):
        """The span in steps of `td`, with ``t_last`` steps after the own ones in the last window
        (and, under prefill_first, ``rest_scale`` times the mean rest of the own chain)."""
        steps = jnp.where(n_win > 0.0, kk * (n_win - 1.0) + r_last + t_last, 0.0)
        if not prefill_first:
            return steps
        # the span's time: the rest of the request's own chain (the prompt steps after the one
        # that carried it), its whole windows, each with the chain after it (`td` spreads a
        # chain over a window's steps), and its last window's decode-only steps (a chain the
        # slots cut keeps its whole time in the rest)
        t_span = (rest_scale * e["pw"] * ch["rest"] + kk * (n_win - 1.0) * td
                  + (steps - kk * (n_win - 1.0)) * (w_d / ka))
        return jnp.where(n_win > 0.0, t_span / jnp.maximum(td, 1e-300), 0.0)

    span = span_steps(tail)
    # T's law once the window runs on (T > 0): its mean and variance
    t_on = safe_div(tail, p_on, p_on > 1e-12, 0.0)
    var_on = jnp.maximum(safe_div(t2, p_on, p_on > 1e-12, 0.0) - t_on * t_on, 0.0)
    has = o >= 2.0
    n_has = jnp.sum(jnp.where(has, 1.0, 0.0))
    ratio = jnp.where(has, span / jnp.maximum(o - 1.0, 1.0), -1.0)
    g_mean = jnp.where(n_has > 0, jnp.sum(jnp.where(has, ratio, 0.0)) / jnp.maximum(n_has, 1.0), 1.0)
    # TPOT's law: 0 for the requests whose tokens all come in one message (span 0), the
    # one-step law (floor, fast and slow variance) over the others' own 1 / (O - 1), scaled
    # by their span / (O - 1)
    t_floor, burst_var, var_slow, var_gap = tpot_law
    pos = has & (ratio > 0.0)
    n_pos = jnp.maximum(jnp.sum(jnp.where(pos, 1.0, 0.0)), 1.0)
    p0 = 1.0 - jnp.sum(jnp.where(pos, 1.0, 0.0)) / jnp.maximum(n_has, 1.0)
    qq = jnp.clip((q - p0) / jnp.maximum(1.0 - p0, 1e-12), 1e-9, 1.0 - 1e-9)
    # a mixture over the output lengths, each in two parts: a request of length o has TPOT
    # span / (o - 1) (t_floor + Y), Y its mean step over its span's steps (a lognormal: the
    # steps' spread over its span, its burst once, the slow spread, a chain's pause once a
    # window: prefill_first's `var_gap`, the one-step law's pause variance; 0 under chunked),
    # and its last window either ends with its own tokens (1 - P(T > 0)) or runs on (T's law
    # given T > 0, whose spread Y carries too). (Until 2026-12-06 one part per length with
    # the last window's whole spread in Y: a short output's TPOT is one step alone and a
    # window beside a longer decoder, which one lognormal spread between them; seed 261's
    # point 102: P90 7.6 ms and P99 13 ms against 13.4 and 38.6 simulated, now 13.6 and 27.7)
    den = jnp.maximum(o - 1.0, 1.0)
    wgt = jnp.where(pos, 1.0, 0.0) / n_pos

    def part(t_last, var_last, rest_scale=1.0):
        sp_ = span_steps(t_last, rest_scale)
        spp = jnp.maximum(sp_, 1.0)
        var_y = (var_t / spp + burst_var / (spp * spp) + var_slow + var_gap / (kk * spp)
                 + td * td * var_last / (spp * spp))
        return jnp.where(pos, sp_ / den, 0.0), var_y

    zero = jnp.zeros_like(tail)
    if prefill_first:
        # a prompt's own chain goes on after its step (another prompt arrived meanwhile) for a
        # share q_rest of the prompts, whose rest is then the mean rest / q_rest: each part in two
        q_r = jnp.clip(ch["q_rest"], 1e-6, 1.0)
        parts_ = [part(zero, zero, 0.0), part(zero, zero, 1.0 / q_r), part(t_on, var_on, 0.0),
                  part(t_on, var_on, 1.0 / q_r)]
        wts = [wgt * (1.0 - p_on) * (1.0 - q_r), wgt * (1.0 - p_on) * q_r, wgt * p_on * (1.0 - q_r),
               wgt * p_on * q_r]
    else:
        parts_ = [part(zero, zero), part(t_on, var_on)]
        wts = [wgt * (1.0 - p_on), wgt * p_on]
    law = _node_quantile(qq, jnp.concatenate(wts), jnp.concatenate([r for r, _ in parts_]), t_floor,
                         jnp.maximum(td - t_floor, 0.0), jnp.concatenate([v for _, v in parts_]))
    tpot_p = jnp.where(q > p0, law, 0.0)
    span_mean = jnp.mean(span)
    span_var = jnp.maximum(jnp.mean(span * span) - span_mean * span_mean, 0.0)
    if prefill_first:  # the own chain's rest: none, or (a share q_rest) rest / q_rest
        r_mean = e["pw"] * ch["rest"] / jnp.maximum(td, 1e-300)
        span_var = span_var + r_mean * r_mean * (1.0 / q_r - 1.0)
    # the arrival waits for the window in progress (length-biased, of ka steps), its decision
    # step carries the prompts that arrived during it, a chunked prompt's later chunks wait a
    # window each, and the first token reaches the client at the window's end
    comp = (tt + tc) * lam_p1 * u * km_a * t_bar
    if prefill_first:
        # a busy engine alternates a decode window (ka decode-only steps) and a chain of prompt
        # steps (`_pf_chain`). An arrival in the window waits for its rest, then the chain's
        # first step carries it with the window's arrivals; an arrival in a prompt step waits
        # for its rest, then the next step carries it with that step's arrivals. The prompt
        # step that carries the request hands its first token over at once (no deliver wait)
        cycle = w_d + ch["time"]
        phi_d, phi_p = w_d / cycle, ch["time"] / cycle
        # the window's length varies with the decoders running (the same count through its ka
        # steps), with how many of its steps they keep going (`var_km`: short outputs end a
        # window early) and with the steps' own noise, not with prompt tokens: its steps carry none (until
        # 2026-12-06 ka times the one-step variance, whose prompt tokens put a 2-step window's
        # mean rest at 0.179 s where its 0.130 s allow 0.065: seed 261's point 11)
        var_w = (ka * ka * (tt + tc * e["c_bar"]) ** 2 * g["var_r"] * e["m2"]
                 + ka * (e["m2"] - 1.0) * (w_d / ka) ** 2 + var_km * (w_d / ka) ** 2)
        r_d = (w_d * w_d + var_w) / (2.0 * w_d)
        r_p = ch["d2"] / jnp.maximum(2.0 * ch["time"], 1e-300)
        comp_d = (tt + tc) * lam_p1 * 2.0 * r_d
        comp_p = (tt + tc) * lam_p1 * 2.0 * r_p
        # (a prompt that finds the slots full at a cut chain's end waits for the next window too)
        resid = u * (phi_d * r_d + phi_p * r_p + phi_p * ch["full"] * w_d)
        var_resid = jnp.maximum(u * (phi_d * 4.0 * r_d * r_d + phi_p * 4.0 * r_p * r_p) / 3.0
                                + u * phi_p * ch["full"] * w_d * w_d - resid * resid, 0.0)
        comp = u * (phi_d * comp_d + phi_p * comp_p) - (tt + tc) * pf["comp"]
        pi, width = u * phi_d, 2.0 * r_d  # the window residual's share (uniform), for the quantiles
        chunks = jnp.zeros_like(resid)
        deliver = jnp.zeros_like(resid)
        var_extra = jnp.zeros_like(resid)  # (the window residual's law is kept apart: cb_point)
    else:
        x_run = (tt + tc * e["c_bar"]) ** 2 * g["var_r"] * e["m2"]
        var_w = var_t + (ka * ka - 1.0) * x_run + (ka - 1.0) * (e["m2"] - 1.0) * t_bar * t_bar
        ew2 = ka * ka * t_bar * t_bar + var_w
        resid = u * ew2 / (2.0 * ka * t_bar)
        var_resid = jnp.maximum(u * ew2 / 3.0 - resid * resid, 0.0)
        pi = width = None  # (the chunked policy's quantiles keep `_mix_quantile`: cb_point)
        deliver = t_do * km_a  # the own window's end, as long as the longest of it and the others'
        # a later chunk waits for a window only while a decoder keeps windows going: the windows
        # the longest remaining decode of the decoders present spans (and, where a prompt was
        # being prefilled when this one arrived, of the one that just finished it), as many as
        # the later chunks at most. The prefill is busy with rho_k: its prompts' chunks at the
        # one-step rate, and their later chunks' windows behind a decoder that has just begun
        win = km_a * t_do
        n_dec = g["a"] * g["f_dec"]
        n_own = jnp.maximum(p1 / pf["b_step"] - 1.0, 0.0)
        rho_k = jnp.minimum(pf["lam_pf"] * pf["per_tok_c"]
                            + lam * win * _spanned_windows(om1, kk, n_dec, 1.0, n_own)[0], 0.999)
        n1, n2 = _spanned_windows(om1, kk, n_dec, rho_k, pf["chunks_after"])
        chunks = win * n1
        var_chunks = win * win * jnp.maximum(n2 - n1 * n1, 0.0)
        # the first message waits for its window's end: min(km, max R) decode-only steps, whose
        # spread joins the TTFT's (sum_j (2 j + 1) P(max R > j) is its second moment)
        var_deliver = t_do * t_do * var_km
        var_extra = var_chunks + var_deliver
    resid1 = u * g["et2"] / (2.0 * t_bar)
    return dict(extra=resid - resid1 + comp + chunks + deliver, resid=resid, var_resid=var_resid, pi=pi, width=width,
                var_extra=var_extra, ka=ka, ratio_max=jnp.max(jnp.where(pos, ratio, 0.0)),  # (the longest span)
                g_mean=g_mean, tpot_p=tpot_p, span_mean=span_mean, span_var=span_var, paused=chunks)


def _prelude(lam, p1, pcv, o1, ocv, n_cap, budget, kv, blk, tf, tt, tc, cv, pw, ff, km=0.0,
             chain=False) -> dict[str, Array]:
    """Everything about one point that the fixed point does not change: the request moments,
    the slots (step 2), sustainability (step 6) and the fixed point's constants (step 3), as
    a dict: a function of `cb_point`'s inputs alone."""
    # -- request moments ------------------------------------------------------------------
    p2 = p1 * p1 * (1.0 + pcv * pcv)
    o2 = o1 * o1 * (1.0 + ocv * ocv)
    a1 = pw * p1 + o1 - 1.0
    a2 = o1 * p1 + 0.5 * (o2 - o1) - (1.0 - pw) * p1  # prefilled: no prefill step holding P
    # time-weighted mean reservation (a request holds it ~ its O steps) and fragmentation
    r_mean = p1 + o1 + 0.5 * (blk - 1.0)
    r_w = (p1 * o1 + o2) / o1 + 0.5 * (blk - 1.0)
    kv_fin = jnp.isfinite(kv)
    r_head = (p2 + o2 + 2.0 * p1 * o1) / (p1 + o1) + 0.5 * (blk - 1.0)  # size-biased E[r]
    c_kv = jnp.where(kv_fin, (jnp.where(kv_fin, kv, 0.0) - 0.5 * r_head) / r_w, INF)
    # head-of-line blocking: a large reservation at the head holds back everyone behind it;
    # the slot wait grows with the spread of reservations (1 + their squared CV)
    hol = jnp.where(kv_fin & (c_kv < n_cap), r_head / r_mean, 1.0)
    c = jnp.clip(jnp.minimum(n_cap, c_kv), 1.0, 5000.0)
    budget_fin = jnp.isfinite(budget)
    bud = jnp.where(budget_fin, budget, 1e300)

    # -- sustainability (step 6) ------------------------------------------------------------
    rho_tok = lam * (tt * a1 + tc * a2)
    # decoders among running sequences at saturation (M = inf); prefilled: all of them
    dec_share = jnp.where(pw > 0.0, (o1 - 1.0) / o1, 1.0)
    b_sat = jnp.maximum(bud - c * dec_share, 1.0)
    n_chunks = jnp.where(pw > 0.0, jnp.maximum(1.0, p1 / b_sat), 0.0)
    e_d = jnp.where(pw > 0.0, o1 - 1.0 + n_chunks, jnp.maximum(o1 - 1.0, 1e-9))
    # prefill_first: the decode steps (o1 - 1 a request, c at a time) and one prompt step after
    # every decode step in which a sequence left and another was admitted: at full occupancy
    # mu = c / (o1 - 1) admissions a decode step, so 1 - e^-mu prompt steps a decode step,
    # each of mu / (1 - e^-mu) prompts on average (more steps where they exceed the budget)
    mu_sat = c / jnp.maximum(o1 - 1.0, 1.0)
    pf_steps = -jnp.expm1(-mu_sat) / mu_sat * jnp.maximum(1.0, mu_sat * p1 / bud)
    fixed_req = jnp.where(ff > 0.0, tf * (jnp.maximum(o1 - 1.0, 0.0) / c + pw * pf_steps), tf * e_d / c)
    if km:  # multi-step windows: a slot also holds a chunk's window and the rest of the last window
        # (a window ends with the last decoder's tokens: short outputs hold a slot less than km / 2)
        rem_o = jnp.maximum(o2 - 2.0 * o1 + 1.0, 0.0) / jnp.maximum(o1 - 1.0, 1e-9)
        last = 0.5 * jnp.minimum(km, rem_o)
        hold = (n_chunks - 1.0) * km + last
        fixed_chunked = tf * (e_d + hold * -jnp.expm1(-c * dec_share)) / c
        # prefill_first: prompts take single steps of their own (no chunk waits for a window), and
        # the admissions of a window, k c / (o1 - 1 + last) of them at full occupancy, share its
        # decision's prompt steps
        dec_hold = jnp.maximum(o1 - 1.0, 1.0) + last * -jnp.expm1(-c * dec_share)
        mu_k = (1.0 + km) * c / dec_hold
        fixed_pf = tf * (dec_hold / c + pw * -jnp.expm1(-mu_k) / mu_k * jnp.maximum(1.0, mu_k * p1 / bud))
        fixed_req = jnp.where(ff > 0.0, fixed_pf, fixed_chunked)
    cap_steps = 1.0 / (fixed_req + tt * a1 + tc * a2)
    t_sat = tf + tt * jnp.minimum(bud, c * dec_share + pw * p1 * c / e_d) + tc * c * a2 / e_d
    # (prefill_first gives prompts steps of their own, with the whole budget: more steps, above)
    cap_budget = jnp.where(budget_fin & (pw > 0.0) & (ff == 0.0), b_sat / (p1 * t_sat), INF)
    if km:
        # prompts enter at decisions only: a window's prompts must fit one decision's budget
        # besides the decoders running at that load (below the cap: lam (o1 - 1) T of them),
        # and a window lasts k steps only while a sequence decodes in it
        # (the step time at that load, not at full occupancy). The load lam_b that a decision's
        # budget sustains falls as the load grows (more decoders keep windows going): its fixed
        # point, by bisection in log rate and one implicit-derivative step (a plain iteration
        # of the map can cycle between two rates, 0.9 and 4.7 requests/s on one drawn point)
        bud_f = jnp.where(budget_fin, bud, 1.0)
        kmo = jnp.minimum(km, rem_o)

        def sustained(lb):  # the rate a decision's budget admits at the load lb, its step and k_eff
            t_b = tf + tt * bud_f
            for _ in range(4):
                dec_b = jnp.minimum(lb * (o1 - 1.0) * t_b, c * dec_share)
                # steps a decision: a window while a decoder is present (a share 1 - e^-dec_b of
                # the time; k steps, or fewer where outputs end sooner: 1 + min(km, the
                # size-biased remaining decode)), one step otherwise; decisions come that many
                # times as often in the latter, so per decision 1 / (e^-dec_b + (1 - e^-dec_b) /
                # window) steps
                some = -jnp.expm1(-dec_b)
                k_eff = 1.0 / (1.0 - some + some / (1.0 + kmo))
                t_b = tf + tt * (dec_b + (bud_f - dec_b) / k_eff) + tc * dec_b * a2 / e_d
            return bud_f / (t_b * (k_eff * p1 + o1 - 1.0)), t_b, k_eff

        def gap(log_lb):  # increasing in the load
            return log_lb - jnp.log(sustained(jnp.exp(log_lb))[0])

        def halve(_, lo_hi):
            lo, hi = lo_hi
            mid = 0.5 * (lo + hi)
            up = gap(mid) > 0.0
            return jnp.where(up, lo, mid), jnp.where(up, mid, hi)

        bracket = (jnp.log(sustained(_f64(1e30))[0]), jnp.log(sustained(_f64(0.0))[0]))
        lo, hi = lax.fori_loop(0, 48, halve, lax.stop_gradient(bracket))
        x0 = lax.stop_gradient(0.5 * (lo + hi))
        f0 = gap(x0)
        d0 = lax.stop_gradient(jax.jvp(gap, (x0,), (jnp.ones_like(x0),))[1])
        lam_b = jnp.exp(x0 - safe_div(f0 - lax.stop_gradient(f0), d0, d0 > 0.0, 0.0))
        _, t_b, k_eff = sustained(lam_b)
        lam_b = jnp.where(lam_b * (o1 - 1.0) * t_b < c * dec_share, lam_b, b_sat / (p1 * t_b * k_eff))
        cap_budget = jnp.where(budget_fin & (pw > 0.0) & (ff == 0.0), lam_b, INF)
    capacity = jnp.minimum(cap_steps, cap_budget)
    stable = (lam < capacity) & (c >= 1.0) & ~(kv_fin & (c_kv < 1.0))

    c_bar = a2 / e_d  # cache of a running sequence, per-step average
    m2 = 1.0 + cv * cv

    # -- the fixed point's constants (T_d, T_p, A: `_maps`, `_fixed_point`) ----------------------
    # TPOT (step 3): over its life a decoding sequence shares its steps with everything the
    # engine processes meanwhile; other requests' work arrives at the long-run rate (the
    # others evolve independently of it below the cap), so per own step it sees
    # lam (t_t a1 + t_c a2) T_d of token work besides its own: T_d = base / (1 - rho_tok).
    # When all slots are busy (probability P_wait) the steps run at full occupancy.
    # One correction to that rate: the prompts that arrived during the request's own last
    # prefill step (a long step: it carries its prompt) are prefilled in its first decode
    # step, while those arriving during its last decode step are not in its life: a net
    # lam p1 (T_p_last - T_d) prompt tokens, spread over its O - 1 steps (E[1 / (O - 1)]),
    # where a slot is free: with all slots busy, admissions follow departures, not the clock.
    t_own = tf + tt + tc * (p1 + 0.5 * o1)
    s_o, mu_o = _lognormal(jnp.maximum(o1 - 1.0, 1e-9), ocv * o1 / jnp.maximum(o1 - 1.0, 1e-9))
    inv_o = jnp.minimum(jnp.exp(-mu_o + 0.5 * s_o * s_o), 1.0)  # E[1 / (O - 1)]
    rho_cap = capacity * (tt * a1 + tc * a2)  # token work share at full occupancy
    return dict(p2=p2, o2=o2, r_mean=r_mean, kv_fin=kv_fin, hol=hol, c=c, bud=bud, rho_tok=rho_tok,
                capacity=capacity, cap_steps=cap_steps, cap_budget=cap_budget, stable=stable, c_bar=c_bar,
                m2=m2, t_own=t_own, s_o=s_o, mu_o=mu_o, inv_o=inv_o, rho_cap=rho_cap,
                # prefill_first (``chain``, a Python bool): the fixed point follows the chains of
                # prompt steps between decode windows (of one step at k = 1); without, these keys
                # are absent
                **(dict(kk=_f64(1.0 + km), n_w=_decode_windows(o1, ocv, 1.0 + km)) if chain else {}))


#: the fixed point's constants (`_maps`' keyword arguments): `cb_point`'s inputs or `_prelude`'s
_ENV = ("lam", "p1", "p2", "o1", "c", "capacity", "rho_tok", "tf", "tt", "tc", "c_bar", "m2", "bud", "inv_o",
        "t_own", "rho_cap", "pw", "ff", "kk", "n_w")


def _env(raw: dict[str, Array], pre: dict[str, Array] | None = None) -> dict[str, Array]:
    """The fixed point's constants of the point with inputs `raw` (`pre`: its `_prelude`)."""
    pre = _prelude(**raw) if pre is None else pre
    return {k: raw[k] if k in raw else pre[k] for k in _ENV if k in raw or k in pre}


def _maps(lam, p1, p2, o1, c, capacity, rho_tok, tf, tt, tc, c_bar, m2, bud, inv_o, t_own, rho_cap, pw, ff, kk=None,
          n_w=None):
    """The fixed point's parts (step 2), the prefill phase (step 4) and its map
    ``(T_d, T_p) -> (T_d', T_p')`` (step 3), closed over one point's quantities (its keyword
    arguments, the ``env`` of `_fixed_point`), so that `_fixed_point` can differentiate the
    map in them and in the state separately."""

    s_pd = jnp.maximum(_sqrt0(jnp.log(jnp.maximum(p2 / (p1 * p1), 1.0))), 1e-9)  # the prompt's lognormal
    mu_p = jnp.log(p1) - 0.5 * s_pd * s_pd

    def parts(td, tp, exact=True):
        es = tp + (o1 - 1.0) * td
        # steps are longest at full occupancy, so E[S] <= c / capacity: the occupancy
        # cannot exceed c lam / capacity (< c wherever the point is sustainable)
        a_load = jnp.minimum(lam * es, c * jnp.minimum(lam / capacity, 1.0 - 1e-9))
        if exact:  # Erlang's state law (one incomplete-gamma evaluation)
            p_wait, p0, er2 = _erlang(c, a_load)
        else:  # inside the iteration: Poisson occupancy, Sakasegawa's P_wait (no gamma)
            rho_c = a_load / c
            p_wait = rho_c ** (jnp.sqrt(2.0 * (c + 1.0)) - 1.0)
            p0 = jnp.exp(-a_load)
            er2 = jnp.minimum(a_load * (a_load + 1.0), c * a_load)
        # the engine is busy at least as long as a step a request and every token take
        # (rho_tok + lam t_fixed): a state whose occupancy says less (the light-load start of
        # the fixed point, where a long prompt is split over many small steps) would leave the
        # mean step t_bar = t_fixed / (1 - rho_tok / u) without a solution
        u = jnp.clip(jnp.maximum(1.0 - p0, jnp.minimum(rho_tok + lam * tf, 1.0)), 1e-12, 1.0)
        r_seen = jnp.clip(er2 / a_load, 1.0, c)
        slack = jnp.maximum(1.0 - rho_tok / u, 1e-9)
        t_bar = tf / slack
        pi = lam * pw * p1 * t_bar / u
        f_dec = (o1 - 1.0) * td / es
        var_r = jnp.maximum(er2 - a_load * a_load, 0.0)
        var_tok = lam * t_bar / u * pw * p2  # compound-Poisson prompt tokens per step
        var_t = ((tt + tc) ** 2 * var_tok + (tt + tc * c_bar) ** 2 * var_r) * m2 \
            + (m2 - 1.0) * t_bar * t_bar
        et2 = t_bar * t_bar + var_t
        return dict(es=es, a=a_load, p_wait=p_wait, u=u, r_seen=r_seen, t_bar=t_bar, pi=pi,
                    f_dec=f_dec, var_r=var_r, var_t=var_t, et2=et2)

    def t_prefill(g, td, exact=True):
        # decoders and cache an arrival finds (time average, PASTA)
        # (prefill_first: a prompt step carries no decode token and reads no decoder's cache)
        dec_a = g["a"] * g["f_dec"] * (1.0 - ff)
        ctx_a = g["a"] * c_bar * (1.0 - ff)
        # companions: prompts that arrived during the step in progress (length-biased)
        comp = lam * pw * p1 * g["u"] * g["et2"] / g["t_bar"]
        b_step = jnp.maximum(bud - dec_a, 1.0)
        step_base = tf + tt * dec_a + tc * ctx_a
        per_tok_c = step_base / b_step + tt + tc
        rho_pf = jnp.minimum(lam * pw * p1 * per_tok_c, 0.999)
        backlog = jnp.where(jnp.isfinite(bud) & (bud < 1e299), rho_pf * p2 / (2.0 * p1 * (1.0 - rho_pf)), 0.0)
        # the request's prompt P (lognormal) fits the step it is admitted to when
        # P <= B - ahead (the companions and the backlog ahead of it): one step; longer
        # prompts take ceil((ahead + P) / B) steps of the budget. Both branches use the
        # prompt's conditional moments on its side of the threshold.
        ahead = comp + backlog
        room = b_step - ahead
        has_room = room > 0.0
        lr = (jnp.log(jnp.where(has_room, room, 1.0)) - mu_p) / s_pd
        # (inside the fixed point's iterations Phi is the tanh form, 3e-4 absolute at worst,
        # which costs one exp where erfc costs a rational function and an exp)
        phi = _ndtr if exact else _phi_fast
        f1 = jnp.where(has_room, phi(lr), 0.0)  # P(P <= room)
        e1 = jnp.where(has_room, p1 * phi(lr - s_pd), 0.0)  # E[P; P <= room]
        q1 = jnp.where(has_room, p2 * phi(lr - 2.0 * s_pd), 0.0)  # E[P^2; P <= room]
        f2, e2, q2 = jnp.maximum(1.0 - f1, 0.0), jnp.maximum(p1 - e1, 0.0), jnp.maximum(p2 - q1, 0.0)
        # a branch of probability 0 gets the mean prompt: finite, so that reverse-mode
        # derivatives through the branch's zero weight stay 0 (not 0 x inf)
        pm1 = jnp.where(f1 > 1e-300, safe_div(e1, f1, f1 > 1e-300, 0.0), p1)
        pm2 = jnp.where(f2 > 1e-300, safe_div(e2, f2, f2 > 1e-300, 0.0), p1)
        one_step = tf + tt * (dec_a + pm1 + comp) + tc * (ctx_a + pm1 + comp)
        full = tf + tt * bud + tc * (ctx_a + 0.5 * bud)
        steps = (backlog + pm2) / b_step + 0.5
        chunked = jnp.maximum(steps * step_base + (tt + tc) * (backlog + pm2),
                              tf + tt * (dec_a + pm2 + comp) + tc * (ctx_a + pm2 + comp))
        some1, some2 = f1 > 0.0, f2 > 0.0
        tp_mean = jnp.where(some1, f1 * one_step, 0.0) + jnp.where(some2, f2 * chunked, 0.0)
        # variance of the prefill phase over the prompt's law (total variance of the branches)
        v1 = (tt + tc) ** 2 * jnp.maximum(safe_div(q1, f1, f1 > 1e-300, 0.0) - pm1 * pm1, 0.0)
        v2 = per_tok_c ** 2 * jnp.maximum(safe_div(q2, f2, f2 > 1e-300, 0.0) - pm2 * pm2, 0.0)
        var_tp = (jnp.where(some1, f1 * (v1 + (one_step - tp_mean) ** 2), 0.0)
                  + jnp.where(some2, f2 * (v2 + (chunked - tp_mean) ** 2), 0.0))
        # prefilled (pw = 0): no prefill phase at all
        return dict(tp=pw * tp_mean, chunks_after=pw * jnp.where(some2, f2 * jnp.maximum(steps - 1.0, 0.0), 0.0),
                    last=pw * jnp.where(some2 & (bud < 1e299), f1 * one_step + f2 * full, one_step),
                    wait_pf=backlog * per_tok_c,
                    rho_pf=jnp.where(backlog > 0.0, rho_pf, 0.0),
                    var_tp=pw * jnp.maximum(var_tp, 0.0),
                    comp=comp,
                    # for multi-step windows (`_windows`): a chunk's time a prompt token, the
                    # budget a step leaves the prompts, and the prompt tokens a second to prefill
                    per_tok_c=per_tok_c, b_step=b_step, lam_pf=lam * pw * p1)

    def step(td, tp):
        # TPOT (step 3), see cb_point: T_d = base / (1 - rho_tok), at full occupancy with
        # probability P_wait, plus the burst of prompts from the own last prefill step
        g = parts(td, tp, exact=False)
        pf = t_prefill(g, td, exact=False)
        burst = (tt + tc) * lam * p1 * jnp.maximum(pf["last"] - td, 0.0) * inv_o
        if kk is None:  # chunked: no prompt step of its own (ff = 0)
            n_pf = sat = 0.0
        else:  # prefill_first, windows of kk steps (1: one step a decision): a chain of prompt
            # steps between two decode windows, spread over the window's steps
            pcv = _sqrt0(jnp.maximum(p2 / (p1 * p1) - 1.0, 0.0))
            _, chain = _pf_window_and_chain(lam, kk, g, t_own, c_bar, tt, tc, tf, p1, pcv, bud, c, n_w)
            n_pf = chain["n"] / kk
            sat = _pf_steps(kk * c / jnp.maximum(o1 - 1.0, 1.0), p1 / bud) / kk
        own = t_own + burst + ff * pw * tf * n_pf
        td_free = own / jnp.maximum(1.0 - rho_tok, 1e-9)
        # With every slot busy (P_wait) a prompt is admitted when a sequence leaves, and a
        # step's departures do not grow with its length: the burst of prompts that arrived
        # during the request's own long prefill step is the free state's (a Poisson stream
        # admitted as it comes), not the queued one's (seed 29 of benchmarks/closed_accuracy.py,
        # 579 clients on 398 slots, budget inf: TPOT 0.69 s with it, 0.51 without, 0.49 simulated)
        own_sat = t_own + ff * pw * tf * sat
        td_sat = own_sat / jnp.maximum(1.0 - rho_cap, 1e-9)
        td_queued = (own - burst) / jnp.maximum(1.0 - rho_tok, 1e-9)
        return (1.0 - g["p_wait"]) * td_free + g["p_wait"] * jnp.maximum(td_sat, td_queued), pf["tp"]

    return parts, t_prefill, step


@jax.custom_jvp
def _fixed_point(env: dict[str, Array]) -> tuple[Array, Array]:
    """(T_d, T_p) of the point with the fixed point's constants `env` (`_env`): `N_FIXED`
    damped iterations of the map from the light-load values (weight `DAMP` on the new
    iterate for the first half, 0.3 after: fast steps first, then heavy damping breaks the
    2-cycles that the undamped map can fall into next to saturation, where P_wait switches
    T_d to full occupancy)."""
    _, _, step = _maps(**env)

    def update(i, st):
        td, tp = st
        td_new, tp_new = step(td, tp)
        w = jnp.where(i < N_FIXED // 2, DAMP, 0.3)
        return (1.0 - w) * td + w * td_new, (1.0 - w) * tp + w * tp_new

    td0 = env["t_own"] / jnp.maximum(1.0 - env["rho_tok"], 1e-9)
    tp0 = env["pw"] * (env["tf"] + (env["tt"] + env["tc"]) * env["p1"])
    return lax.fori_loop(0, N_FIXED, update, (td0, tp0))


def _implicit_tangent(env: dict[str, Array], denv: dict[str, Any], td: Array, tp: Array) -> tuple[Array, Array]:
    """The implicit-function derivative of the fixed point s = F(s; env) at the state
    (td, tp): ``ds = (I - dF/ds)^-1 dF/denv . denv``, through ONE application of the map
    rather than through every iteration (`[sensitivity]`).

    The map is differentiated in the fixed point's constants `env`, not in the model's
    inputs: how the inputs move the constants (the prelude: slots, capacity, moments) is
    differentiated once, by the caller's own autodiff, for the map and the model's tail
    together. The partials of F, in the state and in every constant that has a tangent
    (symbolic zeros are skipped), are computed once per point as primal values, by reverse
    mode (two outputs), and kept in ONE array divided by an XLA-opaque 1: a division is
    never recomputed by XLA:CPU's fusion, so the partials are computed once, where their
    cheap multiply-add chains would otherwise be fused, whole, into every consumer (the
    derivative program took 590 ms against about 100 ms; benchmarks/uncertainty.py); the map
    runs through `kept_in_memory` for the same reason. The tangent is then their linear combination,
    which is all that reverse mode transposes. Where the 2 x 2 system is singular (a kink
    of the map at the state) the state's own tangent through one map application stands
    in."""
    act = [k for k in env if not isinstance(denv[k], SymbolicZero)]

    def f(td, tp, x):
        return jnp.stack(_maps(**{**env, **x})[2](td, tp))

    j_td, j_tp, j_x = jax.jacrev(kept_in_memory(f), argnums=(0, 1, 2))(td, tp, {k: env[k] for k in act})
    partials = jnp.stack([j_td, j_tp, *(j_x[k] for k in act)]) / opaque_one(td)
    f0 = sum((partials[2 + i, 0] * denv[k] for i, k in enumerate(act)), jnp.zeros_like(td))
    f1 = sum((partials[2 + i, 1] * denv[k] for i, k in enumerate(act)), jnp.zeros_like(td))
    a11, a12, a21, a22 = 1.0 - partials[0, 0], -partials[1, 0], -partials[0, 1], 1.0 - partials[1, 1]
    det = a11 * a22 - a12 * a21
    ok = jnp.isfinite(det) & (jnp.abs(det) > 1e-12)
    det = jnp.where(ok, det, 1.0)
    d_td = jnp.where(ok, (a22 * f0 - a12 * f1) / det, f0)
    d_tp = jnp.where(ok, (a11 * f1 - a21 * f0) / det, f1)
    return d_td, d_tp


@functools.partial(_fixed_point.defjvp, symbolic_zeros=True)
def _fixed_point_jvp(primals, tangents):
    """`_implicit_tangent` at the iterate the model publishes."""
    (env,), (denv,) = primals, tangents
    td, tp = _fixed_point(env)
    return (td, tp), _implicit_tangent(env, denv, td, tp)


@jax.custom_jvp
def _at_state(env: dict[str, Array], state: tuple[Array, Array]) -> tuple[Array, Array]:
    """The fixed point given as `state` (`cb_state`'s, solved beforehand for the same
    inputs), differentiated like `_fixed_point`; the state's own tangent is ignored."""
    return state


@functools.partial(_at_state.defjvp, symbolic_zeros=True)
def _at_state_jvp(primals, tangents):
    (env, (td, tp)), (denv, _) = primals, tangents
    return (td, tp), _implicit_tangent(env, denv, td, tp)


def _raw(lam, prompt_mean, prompt_cv, output_mean, output_cv, cap, max_batched_tokens, kv_capacity_tokens,
         block_tokens, t_fixed, t_token, t_ctx, service_cv, prefilled=False,
         prefill_first=False, steps=1) -> dict[str, Array]:
    """`cb_point`'s inputs as float64, with the two floors every formula relies on,
    ``pw``, the share of the prompt the engine prefills (0 where prompts arrive cached),
    ``ff``, 1 under the `prefill_first` scheduler policy (0: `chunked`), and ``km``, the
    decode steps a window adds to a decision (``scheduler_steps - 1``, a Python float: 0
    leaves the one-step model's program as it is), and ``chain``, a Python bool: the
    `prefill_first` policy, whose fixed point follows the chains of prompt steps between
    decode windows (`_pf_chain`; a window of one step at ``scheduler_steps = 1``)."""
    if int(steps) < 1 or (int(steps) > 1 and prefilled):
        raise ValueError(f"scheduler_steps = {steps}: the analytic model has windows for an engine that "
                         "prefills")
    lam = jnp.maximum(_f64(lam), 1e-300)
    p1, pcv, o1, ocv = (_f64(x) for x in (prompt_mean, prompt_cv, output_mean, output_cv))
    n_cap, budget, kv, blk = (_f64(x) for x in (cap, max_batched_tokens, kv_capacity_tokens, block_tokens))
    tf, tt, tc, cv = (_f64(x) for x in (t_fixed, t_token, t_ctx, service_cv))
    # a step's fixed cost is at least MIN_T_FIXED_S: the model's time scale is the fixed
    # cost (the busy step t_bar = t_f / slack divides several ratios), and a line without
    # one (t_f = 0, as a fit may return) put the fixed point on nonsense: hours of TTFT at
    # 1 req/s, flagged trusted. No engine's step costs less (a CUDA graph's replay and the
    # scheduler's decision take more).
    tf = jnp.maximum(tf, MIN_T_FIXED_S)
    return dict(lam=lam, p1=p1, pcv=pcv, o1=o1, ocv=ocv, n_cap=n_cap, budget=budget, kv=kv, blk=blk, tf=tf, tt=tt,
                tc=tc, cv=cv, pw=_f64(0.0 if prefilled else 1.0), ff=_f64(1.0 if prefill_first else 0.0),
                km=float(int(steps) - 1), chain=bool(prefill_first))


def cb_state(lam, prompt_mean, prompt_cv, output_mean, output_cv, cap, max_batched_tokens,
             kv_capacity_tokens, block_tokens, t_fixed, t_token, t_ctx, service_cv, q, *,
             prefilled: bool = False, prefill_first: bool = False, steps: int = 1) -> tuple[Array, Array]:
    """The step-time fixed point (T_d, T_p) of `cb_point` with the same arguments, for its
    ``state=`` (`ContinuousModel.presolve`)."""
    return _fixed_point(_env(_raw(lam, prompt_mean, prompt_cv, output_mean, output_cv, cap, max_batched_tokens,
                                  kv_capacity_tokens, block_tokens, t_fixed, t_token, t_ctx, service_cv, prefilled,
                                  prefill_first, steps)))


def cb_point(lam, prompt_mean, prompt_cv, output_mean, output_cv, cap, max_batched_tokens,
             kv_capacity_tokens, block_tokens, t_fixed, t_token, t_ctx, service_cv, q, *,
             state: tuple[Array, Array] | None = None, prefilled: bool = False,
             prefill_first: bool = False, steps: int = 1) -> dict[str, Array]:
    """Continuous-batching model for one point (see the module docstring).

    Arguments: float64 scalars, SI (``lam`` 1/s, token counts, seconds);
    ``max_batched_tokens`` and ``kv_capacity_tokens`` may be ``inf``; ``q`` in (0, 1).
    ``state``: the fixed point (T_d, T_p) when already solved for these arguments
    (`cb_state`); the outputs are the same, and it is differentiated implicitly.
    ``prefilled``: prompts arrive already cached (module docstring): no prefill work.
    ``prefill_first``: the scheduler policy of that name (module docstring).
    ``steps``: decode steps per scheduling decision (``scheduler_steps``; module docstring,
    "Multi-step scheduling"), under either scheduler policy.

    Returns float64 scalars (``stable`` bool): ``stable``, ``capacity_rps``,
    ``mean_running``, ``step_mean`` (s), ``ttft_mean``, ``ttft_p``, ``tpot_mean``,
    ``tpot_p``, ``e2e_mean``, ``e2e_p`` (s, ``+inf`` when not stable), ``output_tok_s``,
    ``kv_util`` (time-average reserved KV / C; 0 for C = inf), ``slots`` (effective
    concurrency ``c``), ``p_wait`` (probability an arrival waits for a slot), and the parts
    `sweep explain` shows: ``ttft_slot_wait``, ``ttft_residual``, ``ttft_prefill`` (s, their
    sum is ``ttft_mean``), ``capacity_steps_rps`` and ``capacity_budget_rps`` (the step and
    token-budget bounds whose minimum is ``capacity_rps``).
    """
    raw = _raw(lam, prompt_mean, prompt_cv, output_mean, output_cv, cap, max_batched_tokens, kv_capacity_tokens,
               block_tokens, t_fixed, t_token, t_ctx, service_cv, prefilled, prefill_first, steps)
    lam, p1, o1, kv, blk, tf, tt, tc = (raw[k] for k in ("lam", "p1", "o1", "kv", "blk", "tf", "tt", "tc"))
    km = raw["km"]
    q = _f64(q)
    z = ndtri(q)
    pre = _prelude(**raw)
    p2, o2, r_mean, kv_fin, hol, c, capacity, cap_steps, cap_budget, stable, c_bar, m2, s_o, mu_o, inv_o = (
        pre[k] for k in ("p2", "o2", "r_mean", "kv_fin", "hol", "c", "capacity", "cap_steps", "cap_budget", "stable",
                         "c_bar", "m2", "s_o", "mu_o", "inv_o"))
    env = _env(raw, pre)
    parts, t_prefill, _ = _maps(**env)
    td, tp = _fixed_point(env) if state is None else _at_state(env, state)
    g = parts(td, tp)
    ok = stable

    # -- TTFT -----------------------------------------------------------------------------------
    cs2 = (o2 - o1 * o1) * td * td / (g["es"] * g["es"])
    ch = _slot_chain(lam, c, capacity, pre["rho_tok"])
    p_wait = ch["p_wait"]
    w_q = ch["w_q"] * 0.5 * (1.0 + cs2) * hol
    g = dict(g, p_wait=p_wait)
    resid = g["u"] * g["et2"] / (2.0 * g["t_bar"])
    ttft = w_q + resid + tp
    pf = t_prefill(g, td)
    # Distribution: with probability P_wait a request waits for a slot (an exponential wait
    # of mean w_q / P_wait, the chain's geometric tail), else not; the rest is one shifted
    # lognormal matched to the mean and variance of its parts: the own prompt's prefill
    # (linear in P, lognormal), the step in progress, the companions' prompts, the prompt
    # backlog ahead (chunked: 0 with probability 1 - rho_pf, else exponential) and noise.
    var_resid = jnp.maximum(g["u"] * g["et2"] / 3.0 - resid * resid, 0.0)
    var_comp = (tt + tc) ** 2 * lam * raw["pw"] * p2 * g["u"] * g["et2"] / g["t_bar"]
    var_pf = pf["wait_pf"] ** 2 * jnp.maximum(2.0 / jnp.maximum(pf["rho_pf"], 1e-12) - 1.0, 0.0)
    shift = jnp.minimum(tf, tp)
    mean0 = resid + tp - shift
    var0 = pf["var_tp"] + var_resid + var_comp + var_pf + (m2 - 1.0) * tp * tp
    cond_w = safe_div(w_q, p_wait, p_wait > 1e-12, 0.0)
    ttft_p = _mix_quantile(q, z, p_wait, shift, (mean0, var0), (mean0 + cond_w, var0 + cond_w * cond_w))
    # -- TPOT -----------------------------------------------------------------------------------
    # A request's TPOT averages its O - 1 steps: the fast part of the step-time variance
    # (prompt bursts, noise) shrinks as 1 / (O - 1), the burst of prompts that arrived
    # during its own prefill step is spread over its O - 1 steps (1 / (O - 1)^2), and the
    # running count drifts slowly over its life: a gamma law above a floor, matched to that
    # mean and variance.
    t_min = tf + tt
    var_slow = 0.5 * (tt * g["f_dec"] + tc * c_bar) ** 2 * g["var_r"]
    burst_var = (tt + tc) ** 2 * lam * p2 * jnp.maximum(pf["last"], 0.0)
    inv_o2 = jnp.minimum(jnp.exp(-2.0 * mu_o + 2.0 * s_o * s_o), 1.0)  # E[1 / (O - 1)^2]
    var_fast = g["var_t"] * inv_o + burst_var * inv_o2
    if prefill_first:
        # a decoder's gap holds the prompt steps of the K ~ Poisson(m) prompts that arrived
        # during it (m = lam T_d): N = s of them (s = max(1, m P / M)) with probability
        # 1 - e^-m, else none, each paying t_f, plus their S tokens at t_t + t_c. Its variance
        # t_f^2 Var[N] + (t_t + t_c)^2 m E[P^2] + 2 t_f (t_t + t_c) s e^-m m P (Cov[N, S])
        # replaces var_t's compound-Poisson tokens per step; over the O - 1 gaps
        m_pf = lam * td
        s_pf = jnp.maximum(1.0, m_pf * p1 / pre["bud"])
        n_pf = _pf_steps(m_pf, p1 / pre["bud"])
        a_pf = tt + tc
        var_n = jnp.maximum(n_pf * s_pf - n_pf * n_pf, 0.0)
        var_pause = (tf * tf * var_n + a_pf * a_pf * m_pf * p2
                     + 2.0 * tf * a_pf * s_pf * jnp.exp(-m_pf) * m_pf * p1)
        # the pause is the chain of prompt steps after the decode step (`_pf_chain`): its time
        # varies with its length as well (a chain of several steps, or of a prompt the budget
        # splits), which one all-or-nothing link leaves out
        _, ch = _pf_window_and_chain(lam, env["kk"], g, pre["t_own"], c_bar, tt, tc, tf, p1, raw["pcv"], pre["bud"],
                                     c, env["n_w"])
        var_pause = jnp.maximum(var_pause, ch["t2"] - ch["time"] * ch["time"])
        tok_in_var_t = a_pf * a_pf * lam * g["t_bar"] / g["u"] * raw["pw"] * p2 * m2
        var_fast = var_fast + raw["pw"] * (var_pause - tok_in_var_t) * inv_o
        var_gap_pf = raw["pw"] * (var_pause - tok_in_var_t)  # (a window's pause: `_windows`)
    # lognormal above a floor: the shortest step, less what the noise can take off a single
    # step (three of its log-sigmas; the whole of t_min without noise)
    noise_cut = jnp.exp(-3.0 * _sqrt0(jnp.log1p(m2 - 1.0)))
    t_floor = jnp.minimum(t_min * noise_cut, td)
    if prefill_first:
        # a decoder's gap holds a chain of prompt steps or none: a request none of whose O - 1
        # gaps held one (probability E[(1 - pi)^(O - 1)], pi a gap's chance of a chain) has the
        # decoders' own steps, the others the rest of the mean and of the variance: the
        # quantile of that mixture of two lognormals above the shortest step (a gamma law above
        # the decoders' own step put the tails of requests with a few long pauses too low)
        dec = jnp.clip(td - raw["pw"] * ch["time"], t_floor, td)
        pi_g = jnp.clip(raw["pw"] * ch["some"], 0.0, 1.0)
        n_g = _o_nodes(o1, raw["ocv"]) - 1.0
        has_g = n_g >= 1.0
        w_a = (jnp.sum(jnp.where(has_g, (1.0 - pi_g) ** n_g, 0.0))
               / jnp.maximum(jnp.sum(jnp.where(has_g, 1.0, 0.0)), 1.0))
        w_b = 1.0 - w_a
        var_a = var_slow + (m2 - 1.0) * dec * dec * inv_o
        some_b = w_b > 1e-12
        mean_b = jnp.where(some_b, safe_div(td - w_a * dec, w_b, some_b, 0.0), td)
        second_b = jnp.where(some_b, safe_div(var_fast + var_slow + td * td - w_a * (var_a + dec * dec), w_b, some_b,
                                              0.0), td * td)
        var_b = jnp.maximum(second_b - mean_b * mean_b, 0.0)
        tiny = 1e-9 * td  # a component at the floor: a point mass just above it
        tpot_p = _mix_quantile(q, z, w_b, t_floor, (jnp.maximum(dec - t_floor, tiny), var_a),
                               (jnp.maximum(mean_b - t_floor, tiny), var_b))
    else:
        tpot_p = t_floor + _wh_quantile(jnp.maximum(td - t_floor, 0.0), var_fast + var_slow, z)
        # each gap of a decoder is one step, and a step carries at most a budget of tokens:
        # no TPOT exceeds a full step's time (the budget's tokens, the cache of the running
        # count's high end at twice the mean context each, the noise's upper three sigmas)
        r_top = jnp.minimum(c, g["a"] + 4.0 * _sqrt0(g["var_r"]) + 1.0)
        t_top = (tf + tt * pre["bud"] + tc * (2.0 * r_top * c_bar + pre["bud"])) / noise_cut
        tpot_p = jnp.minimum(tpot_p, jnp.maximum(t_top, td))

    # -- E2E = TTFT + (O - 1) TPOT ---------------------------------------------------------------
    # the TTFT mixture plus the decode phase (O - 1) TPOT_i (its mean, the output length's
    # variance times T_d^2 and the request's own TPOT deviation) as one shifted lognormal of
    # the same mean and variance (the decode phase dominates E2E's spread; a second mixture
    # quantile cost 1.5x the kernel's time for no measured gain)
    e2e = ttft + (o1 - 1.0) * td
    var_dec = td * td * (o2 - o1 * o1) + (o2 - 2.0 * o1 + 1.0) * var_slow + (o1 - 1.0) * g["var_t"]
    if prefill_first:  # and the chains of prompt steps in its O - 1 gaps, each its own spread
        var_dec = var_dec + (o1 - 1.0) * jnp.maximum(var_gap_pf, 0.0)
    dec = (o1 - 1.0) * td
    e2e_rest = mean0 + w_q + dec  # one lognormal matched to the mixture's mean and variance
    var_e2e = var0 + var_dec + p_wait * (2.0 - p_wait) * cond_w * cond_w
    s_e, mu_e = _ln_shape(e2e_rest, var_e2e)
    e2e_p = shift + jnp.where(e2e_rest > 0.0, jnp.exp(mu_e + s_e * z), 0.0)

    running, tpot_mean = g["a"], td
    served = (mean0, var0)  # TTFT beyond the shift, without a slot wait
    served_resid_var = var_resid  # the step in progress's share of served[1]
    if km:  # multi-step windows (module docstring, "Multi-step scheduling")
        w = _windows(km, lam, p1, o1, raw["ocv"], td, g, pf, tt, tc, tf, q,
                     (t_floor, burst_var, var_slow, var_gap_pf if prefill_first else 0.0),
                     dict(pcv=raw["pcv"], bud=pre["bud"], t_own=pre["t_own"], c_bar=c_bar, c=c,
                          n_w=pre.get("n_w"), pw=raw["pw"], m2=m2),
                     prefill_first=bool(prefill_first))
        ttft_k = ttft + w["extra"]
        resid_k, var_resid_k = w["resid"], w["var_resid"]
        mean0_k = mean0 + w["extra"]
        # a chunked prompt's later chunks wait a window each: a wait that grows with the prompt,
        # as its prefill does, so the prompt's share of the TTFT variance grows with it
        grow = 1.0 + safe_div(w["paused"], tp, tp > 0.0, 0.0)
        var0_k = var0 - var_resid + var_resid_k + pf["var_tp"] * (grow * grow - 1.0)
        if not prefill_first:
            # the decision step carries the prompts that arrived during the window in progress
            # (length-biased, of ka steps), not a step: their spread grows with the window; and
            # the later chunks' and the first message's window waits spread the TTFT besides
            var_comp_k = var_comp * (w["ka"] * g["t_bar"] ** 2 + g["var_t"]) / g["et2"]
            var0_k = var0_k + var_comp_k - var_comp + w["var_extra"]
        if prefill_first:
            # the window residual kept uniform (`_window_quantile`), the rest and the slot wait one
            # lognormal: a decode window's rest dominates this policy's wait, and one lognormal
            # for the whole would put a long tail on it (+50% at the 99th percentile)
            bu_mean = w["pi"] * w["width"] / 2.0
            bu_var = jnp.maximum(w["pi"] * w["width"] ** 2 / 3.0 - bu_mean * bu_mean, 0.0)
            ttft_p = shift + _window_quantile(q, z, w["pi"], w["width"], mean0_k - bu_mean + w_q,
                                              jnp.maximum(var0_k - bu_var, 0.0) + p_wait * (2.0 - p_wait) * cond_w ** 2)
        else:  # (the chunked policy's first message waits for its window's end besides: no better measured)
            ttft_p = _mix_quantile(q, z, p_wait, shift, (mean0_k, var0_k),
                                   (mean0_k + cond_w, var0_k + cond_w * cond_w))
        served = (mean0_k, var0_k)
        served_resid_var = var_resid_k
        tpot_p = w["tpot_p"]
        if not prefill_first:
            # no window is longer than a full decision step and k - 1 decode-only steps at the
            # running count's high end, and a client's gaps span whole windows (k steps each)
            # beside others: at most the longest span over O - 1 times that window's mean step
            t_do_top = (tf + tt * r_top + tc * 2.0 * r_top * c_bar) / noise_cut
            t_win_top = (t_top + km * t_do_top) / (1.0 + km)
            tpot_p = jnp.minimum(tpot_p, jnp.maximum(t_win_top * w["ratio_max"], td * w["g_mean"]))
        span = td * w["span_mean"]
        e2e_rest = e2e_rest + w["extra"] + span - dec
        var_e2e = var_e2e - td * td * (o2 - o1 * o1) + td * td * w["span_var"]
        var_e2e = var_e2e + var0_k - var0  # E2E's first token is the TTFT above
        if prefill_first:  # a chain a window, not a gap
            var_e2e = var_e2e + (pre["n_w"] - (o1 - 1.0)) * jnp.maximum(var_gap_pf, 0.0)
        s_e, mu_e = _ln_shape(e2e_rest, var_e2e)
        e2e_p = shift + jnp.where(e2e_rest > 0.0, jnp.exp(mu_e + s_e * z), 0.0)
        e2e = ttft_k + span
        ttft, resid = ttft_k, resid_k
        running = running + lam * w["paused"]
        tpot_mean = td * w["g_mean"]

    def gate(x):
        return jnp.where(ok, x, INF)

    # the quantiles of a request that finds a slot free (closed loops add their own wait:
    # sweep.models.continuous.closed); unused outputs cost nothing under jit
    s_t, mu_t = _ln_shape(*served)
    ttft_p_served = shift + jnp.where(served[0] > 0.0, jnp.exp(mu_t + s_t * z), 0.0)
    e2e_served = e2e_rest - w_q
    var_e2e_served = var_e2e - p_wait * (2.0 - p_wait) * cond_w * cond_w
    s_e, mu_e = _ln_shape(e2e_served, var_e2e_served)
    e2e_p_served = shift + jnp.where(e2e_served > 0.0, jnp.exp(mu_e + s_e * z), 0.0)

    kv_util = jnp.where(
        kv_fin, lam * (tp * r_mean + td * (p1 * o1 + o2 - p1 - o1 + 0.5 * (blk - 1.0) * (o1 - 1.0)))
        / jnp.where(kv_fin, kv, 1.0), 0.0)
    return {
        "stable": ok,
        "capacity_rps": capacity,
        "mean_running": jnp.where(ok, running, c),
        "step_mean": jnp.where(ok, g["t_bar"], INF),
        "ttft_mean": gate(ttft),
        "ttft_p": gate(ttft_p),
        "tpot_mean": gate(tpot_mean),
        "tpot_p": gate(tpot_p),
        "e2e_mean": gate(e2e),
        "e2e_p": gate(e2e_p),
        "output_tok_s": jnp.where(ok, lam * o1, capacity * o1),
        "kv_util": jnp.where(ok, jnp.clip(kv_util, 0.0, 1.0), jnp.where(kv_fin, 1.0, 0.0)),
        "slots": c,
        "p_wait": jnp.where(ok, g["p_wait"], 1.0),
        # the decomposition `sweep explain` shows (s; +inf when not stable): TTFT = slot
        # wait + residual of the step in progress + prefill phase; the two capacity bounds
        "ttft_slot_wait": gate(w_q),
        "ttft_p_served": gate(ttft_p_served),
        "busy_share": jnp.where(ok, g["u"], 1.0),  # time share with a step running
        "e2e_p_served": gate(e2e_p_served),
        # the served laws' parts (s, s^2), for a closed loop's own wait for a step: the
        # shifted lognormals' shift, TTFT mean and variance beyond it, the variance of the
        # step in progress's residual in it, and E2E's mean, variance and residual variance
        "served_shift": shift,
        "ttft_served_mean": gate(served[0]),
        "ttft_served_var": gate(served[1]),
        "ttft_resid_var": gate(served_resid_var),
        "e2e_served_mean": gate(e2e_served),
        "e2e_served_var": gate(var_e2e_served),
        "e2e_resid_var": gate(var_resid),
        "ttft_residual": gate(resid),
        "ttft_prefill": gate(tp),
        "capacity_steps_rps": cap_steps,
        "capacity_budget_rps": cap_budget,
    }
