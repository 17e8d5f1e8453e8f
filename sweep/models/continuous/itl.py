"""The per-token gap (ITL) of continuous batching: its law, and its quantiles, for ONE point in
pure ``jax.numpy`` (the engine vmaps; `benchrun.itl_quantiles` calls it on the host).

ITL is every gap between two consecutive tokens of a request, pooled over tokens (what `vllm
bench serve` prints as ITL); TPOT is a request's mean gap. Under both scheduler policies a
decoding sequence's gap is a step of its own plus whatever prompt work lands in it, and the
prompt work comes from a Poisson number ``K`` of prompts (arrivals at ``lambda``):

* ``chunked``: a prompt takes ``c = max(1, P / (M - n))`` chunks (``n`` the mean running
  count, ``M`` the token budget), one a step, so the prompts with a chunk in a step number
  ``K ~ Poisson(lambda T c)`` (``T`` the mean step). A step with ``K = k`` lasts
  ``T_0 + t_token min(k P / c, M - n)``; a decode-only step ``T_0 = T (1 - t_token lambda P)``
  (the two average to ``T``, budget apart).
* ``prefill_first``: prompts take steps of their own, which pause every decoder, so a gap is
  the decoder's step plus the prompt steps of the ``K ~ Poisson(lambda G)`` prompts that
  arrived in it (``G`` the mean gap, TPOT's mean): ``ceil(k P / M)`` steps of ``t_fixed``
  plus ``t_token k P``. The decode step ``T_0`` is ``G`` less the mean of that prompt work.

Each part is lognormal about its mean with the step noise's CV (a gap of one step; the noise of
a gap of several steps is narrower, which this keeps on the safe side). The law is the mixture
over ``k``; ``K`` runs to `K_MAX` terms with the rest of the Poisson mass on the last (under
``chunked`` a step then carries the whole budget). Two inversions of the law:

* `itl_quantile` (`sweep predict-benchmark`, one point): a bisection on the mixture's CDF,
  `BISECTIONS` halvings of ``[0, a bound above every part's 1 - 1e-9 quantile]``, about 4,000
  normal CDFs a quantile: as a grid column it made the continuous grid 100x slower;
* `itl_quantile_fast` (the grid's `itl_p_ms`): the part the quantile falls in, then that part's
  own lognormal quantile, about 130 multiplications and one inverse normal CDF. Equal to the
  bisection without step noise; with noise it ignores the overlap of neighbouring parts.

Both are checked against finite runs of the reference scheduler on random configurations
(`benchmarks/itl_accuracy.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
from jax import Array, lax
from jax.scipy.special import ndtr, ndtri

#: Poisson terms of the mixture (the rest of the mass is put on the last)
K_MAX = 64
#: bisection halvings of the quantile's bracket (2^-64 of it: float64 resolution)
BISECTIONS = 64


def _law(step_mean: Array, tpot_mean: Array, mean_running: Array, lam: Array, prompt_mean: Array,
         max_batched_tokens: Array, t_fixed: Array, t_token: Array, prefill_first: bool
         ) -> tuple[Array, Callable[[Array], Array], Callable[[Array], Array]]:
    """(the Poisson mean ``m`` of the prompt count, the prompt work ``extra(k)`` of ``k`` prompts,
    the decoder's own step given the mean prompt work): the module docstring's law."""
    p = jnp.asarray(prompt_mean, jnp.float64)
    budget = jnp.minimum(jnp.asarray(max_batched_tokens, jnp.float64), 1e300)
    if prefill_first:
        m = lam * tpot_mean
    else:
        room = jnp.maximum(budget - mean_running, 1.0)
        c = jnp.maximum(1.0, p / room)
        m = lam * step_mean * c

    def extra(k: Array) -> Array:
        if prefill_first:
            return t_fixed * jnp.ceil(k * p / budget) + t_token * k * p
        return t_token * jnp.minimum(k * p / c, room)

    def base(mean_extra: Array) -> Array:
        return jnp.maximum((tpot_mean - mean_extra) if prefill_first else step_mean * (1.0 - t_token * lam * p),
                           1e-12)

    return jnp.maximum(m, 0.0), extra, base


def itl_parts(step_mean: Array, tpot_mean: Array, mean_running: Array, lam: Array, prompt_mean: Array,
              max_batched_tokens: Array, t_fixed: Array, t_token: Array, *,
              prefill_first: bool = False) -> tuple[Array, Array]:
    """(weights, means) of the mixture, float64[K_MAX + 1] each (module docstring)."""
    k = jnp.arange(K_MAX + 1, dtype=jnp.float64)
    m, extra, base = _law(step_mean, tpot_mean, mean_running, lam, prompt_mean, max_batched_tokens, t_fixed,
                          t_token, prefill_first)
    # Poisson(m) weights in log space; the tail beyond K_MAX joins the last term
    logw = k * jnp.log(jnp.where(m > 0.0, m, 1.0)) - m - lax.lgamma(k + 1.0)
    w = jnp.where(m > 0.0, jnp.exp(logw), jnp.where(k == 0.0, 1.0, 0.0))
    w = w.at[K_MAX].add(jnp.maximum(1.0 - jnp.sum(w), 0.0))
    x = extra(k)
    return w, base(jnp.sum(w * x)) + x


def itl_quantile(q: Array, weights: Array, means: Array, service_cv: Array) -> Array:
    """The ``q`` quantile (s) of the mixture of lognormals with these weights and means and CV
    ``service_cv`` (a weighted sum of point masses at CV 0)."""
    s2 = jnp.log1p(service_cv * service_cv)
    sig = jnp.sqrt(s2)
    total = jnp.sum(weights)

    def cdf(x: Array) -> Array:
        z = (jnp.log(jnp.maximum(x, 1e-300)) - jnp.log(means) + 0.5 * s2) / jnp.where(sig > 0.0, sig, 1.0)
        part = jnp.where(sig > 0.0, ndtr(z), (x >= means).astype(jnp.float64))
        return jnp.sum(weights * part) / total

    hi0 = jnp.max(jnp.where(weights > 0.0, means, 0.0)) * jnp.exp(0.5 * s2 + 6.0 * sig)

    def halve(_: int, bracket: tuple[Array, Array]) -> tuple[Array, Array]:
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < q
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    _, hi = lax.fori_loop(0, BISECTIONS, halve, (jnp.zeros_like(hi0), hi0))
    return hi


def itl_quantile_fast(q: Array, step_mean: Array, tpot_mean: Array, mean_running: Array, lam: Array,
                      prompt_mean: Array, max_batched_tokens: Array, t_fixed: Array, t_token: Array,
                      service_cv: Array, *, prefill_first: bool = False) -> Array:
    """The grid's ``q`` quantile (s) of the same law, at a small fixed cost (no CDF inverted).

    The part the quantile falls in is the first whose cumulative Poisson weight reaches ``q``
    (the weights by the recurrence ``w_k = w_(k-1) m / k``, no exponential a term; parts of one
    mean, such as every count that fills the budget under `chunked`, are one part); the quantile
    is that part's own lognormal quantile at the share of its weight ``q`` reaches into. Exact
    without step noise (the law is then a step function) and for a law of one part; with noise it
    ignores how far the neighbouring parts overlap this one (its error against the bisection of
    `itl_quantile`: docs/continuous.md, "Per-token gaps (ITL)")."""
    f64 = jnp.float64
    m, extra, base = _law(step_mean, tpot_mean, mean_running, lam, prompt_mean, max_batched_tokens, t_fixed,
                          t_token, prefill_first)
    # (k, cumulative weight before part k, after it); the rest of the mass joins the last part
    w = cum = jnp.exp(-m)
    parts = [(f64(0.0), jnp.zeros_like(cum), cum)]
    for j in range(1, K_MAX + 1):
        w = w * m / j
        nxt = jnp.where(j == K_MAX, 1.0, cum + w)
        parts.append((f64(j), cum, nxt))
        cum = nxt

    kstar, mean_extra = f64(K_MAX), jnp.zeros_like(m)
    for k, before, after in parts:
        kstar = jnp.where((before < q) & (after >= q), k, kstar)
        mean_extra = mean_extra + (after - before) * extra(k)
    # one part's means agree to rounding only (XLA folds each k's arithmetic apart)
    top = extra(kstar)
    tol = 1e-9 * jnp.maximum(top, 1e-300)
    below, upto = jnp.zeros_like(m), jnp.zeros_like(m)
    for k, _, after in parts:
        below = jnp.where(extra(k) < top - tol, after, below)
        upto = jnp.where(extra(k) <= top + tol, after, upto)
    mean = base(mean_extra) + top
    s2 = jnp.log1p(service_cv * service_cv)
    share = jnp.clip((q - below) / jnp.maximum(upto - below, 1e-300), 1e-12, 1.0 - 1e-12)
    return jnp.where(s2 > 0.0, mean * jnp.exp(-0.5 * s2 + jnp.sqrt(s2) * ndtri(share)), mean)


@partial(jax.jit, static_argnames=("prefill_first",))
def itl_quantiles_jit(qs: Array, step_mean: Array, tpot_mean: Array, mean_running: Array, lam: Array,
                      prompt_mean: Array, max_batched_tokens: Array, t_fixed: Array, t_token: Array,
                      service_cv: Array, *, prefill_first: bool = False) -> Array:
    """Quantiles ``qs`` (float64[m]) of one point's law, compiled once (the host's entry)."""
    w, means = itl_parts(step_mean, tpot_mean, mean_running, lam, prompt_mean, max_batched_tokens, t_fixed,
                         t_token, prefill_first=prefill_first)
    return jax.vmap(lambda q: itl_quantile(q, w, means, service_cv))(qs)


@partial(jax.jit, static_argnames=("prefill_first",))
def itl_quantiles_fast_jit(qs: Array, step_mean: Array, tpot_mean: Array, mean_running: Array, lam: Array,
                           prompt_mean: Array, max_batched_tokens: Array, t_fixed: Array, t_token: Array,
                           service_cv: Array, *, prefill_first: bool = False) -> Array:
    """`itl_quantiles_jit` with the grid column's inversion (`itl_quantile_fast`)."""
    return jax.vmap(lambda q: itl_quantile_fast(q, step_mean, tpot_mean, mean_running, lam, prompt_mean,
                                                max_batched_tokens, t_fixed, t_token, service_cv,
                                                prefill_first=prefill_first))(qs)


@partial(jax.jit, static_argnames=("prefill_first",))
def itl_quantile_points(q: Array, step_mean: Array, tpot_mean: Array, mean_running: Array, lam: Array,
                        prompt_mean: Array, max_batched_tokens: Array, t_fixed: Array, t_token: Array,
                        service_cv: Array, *, prefill_first: bool = False) -> Array:
    """The ``q`` quantile of each point's law (every argument float64[n]; the simulated grid's
    entry, on the simulator's step, running count and TPOT)."""
    return jax.vmap(partial(itl_quantile_fast, prefill_first=prefill_first))(
        q, step_mean, tpot_mean, mean_running, lam, prompt_mean, max_batched_tokens, t_fixed, t_token, service_cv)
