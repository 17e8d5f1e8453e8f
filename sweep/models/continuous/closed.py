"""Closed-loop continuous batching: a fixed number of clients, each sending its next request
when the previous one finishes (after an optional think time), for ONE point, in pure ``jax.numpy``.

This is how `vllm bench serve --max-concurrency n --request-rate inf` loads a server, and how
AIConfigurator's batch sizes and NIM's concurrency tables are measured: the load is not an
arrival rate but a population, and the throughput is what the engine gives it.

Model (mean value analysis on top of the open-loop model)
---------------------------------------------------------
``n`` clients cycle between the engine (a request's end-to-end time ``R``) and thinking
(mean ``Z``, exponential in the simulator; only the mean enters here). The interactive
response-time law (Little's law over the whole cycle) ties the throughput to the response:

    X = n / (R + Z).

The response at throughput ``X`` is built from the open-loop model (`analytic.cb_point`) at
the rate a request *sees*. By the arrival theorem of closed product-form networks (the basis
of mean value analysis), a request arriving in a closed system of ``n`` clients sees the
system as it is with ``n - 1`` clients, whose mean population is about ``(n - 1) / n`` of
the full one's (Schweitzer's approximation); in the open model the population is
proportional to the rate, so the response is taken at ``lam_seen = X (n - 1) / n``:

    X (E2E_served(X (n - 1) / n) + Z) = n.

``E2E_served`` is the open model's E2E for a request that finds a slot free (its slot wait,
a Poisson stream's queue, taken out: a few clients never queue like that), plus the closed
loop's wait for a step (`step_wait`: sent ``Z`` after its predecessor finished at a step's
end, a request finds a busy engine a step begun). At ``n = 1`` this is exact: the request
runs alone, ``lam_seen = 0`` and the open model at zero load is a lone request's time (its
prefill step, then ``O - 1`` decode steps of one sequence whose context grows by one token a
step), ``X = 1 / (E2E_1 + Z)``. Without the correction (``arrival_theorem = False``, the open
model at ``lam = X``) the request would see one companion too many. As ``n`` grows, ``X``
rises to the open model's capacity.

The root is found by bisection (`N_BISECT` halvings of ``[0, min(n / (E2E_1 + Z),
capacity)]``: the response is at least a lone request's, and no population drives an engine
past its capacity). TTFT and E2E are the served ones; TPOT, the running count and the rest
are the open model's at ``lam_seen``; the request throughput is ``X`` and the output token
throughput ``X E[O]``. Where no root lies below the capacity (more clients than the engine
serves at once; ``saturated``), ``X`` is the capacity, the response is the law's ``n / X -
Z``, and its excess over the served E2E is the wait for a slot, before the first token: a
gamma law of that mean with rate ``X`` (the slots free one after another), whose deviation
at the quantile adds in quadrature to the served request's. A due rate below the loop's
throughput (``rate``) gives the open model at that rate.

Accuracy against the simulated closed loop (the reference scheduler with completion-driven
arrivals, `sweep.testing.cb_reference`): `benchmarks/closed_accuracy.py`,
tests/test_models_cb_closed.py and docs/continuous.md, "Closed loops".
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import Array, lax
from jax.scipy.special import ndtri

from sweep.models.continuous.analytic import _ln_shape, _wh_quantile, cb_point

__all__ = ["N_BISECT", "cb_closed", "closed_loop"]

#: Halvings of the throughput bracket: 2^-60 of it, below float64's resolution of the rate.
N_BISECT = 60


def cb_closed(clients, think_s, prompt_mean, prompt_cv, output_mean, output_cv, cap, max_batched_tokens,
              kv_capacity_tokens, block_tokens, t_fixed, t_token, t_ctx, service_cv, q, *,
              arrival_theorem: bool | Array = True, rate: Array | float = jnp.inf, prefill_first: bool = False,
              steps: int = 1) -> dict[str, Array]:
    """The closed loop of ``clients`` users with mean think time ``think_s`` (s) for one point
    (see the module docstring); the other arguments are `analytic.cb_point`'s, float64
    scalars in SI units, and ``prefill_first`` and ``steps`` its engine variants.

    ``rate`` (1/s, default inf) caps the rate at which requests become due, as `vllm bench
    serve --request-rate r --max-concurrency c` does: where ``rate`` is below the loop's own
    throughput ``X_c`` the throughput is ``rate``, and the engine sees
    ``min(rate, X_c (n - 1) / n)`` (the open model's arrivals while the clients rarely all
    wait; the closed loop's where they do): continuous in ``rate``, and the closed loop at
    ``rate = inf``.

    Returns float64 scalars: ``throughput_rps`` (X, requests per second), ``output_tok_s``,
    ``saturated`` (bool: X is the capacity),
    ``lam_seen`` (the rate the open model is evaluated at), ``capacity_rps`` (the open
    model's), and every other output of `cb_point` at ``lam_seen`` (``ttft_mean``,
    ``ttft_p``, ``tpot_mean``, ``tpot_p``, ``e2e_mean``, ``e2e_p``, ``mean_running``,
    ``step_mean``, ``slots``, ``kv_util``, ``stable``, ...; s). Every latency is finite: a
    closed loop always has a throughput below the capacity."""
    n = jnp.asarray(clients, jnp.float64)
    z = jnp.asarray(think_s, jnp.float64)
    rate = jnp.asarray(rate, jnp.float64)
    rest = (prompt_mean, prompt_cv, output_mean, output_cv, cap, max_batched_tokens, kv_capacity_tokens,
            block_tokens, t_fixed, t_token, t_ctx, service_cv, q)
    variant: dict[str, Any] = dict(prefill_first=prefill_first, steps=steps)
    share = jnp.where(jnp.asarray(arrival_theorem), (n - 1.0) / n, jnp.ones_like(n))

    # One loop whose body holds the open model once (it compiles once, not three times):
    # iteration 0 evaluates a lone request (the bracket), the next N_BISECT halve the
    # bracket, the last evaluates the root found.
    def fold(t):
        """``phi = T / Z`` (``T`` a step, finite) and its stand-in ``ps`` where ``phi`` is
        small (the laws below take their series there) or ``Z = 0``."""
        phi = t / jnp.where(z > 0.0, z, 1.0)
        small = phi < 1e-3
        return phi, small, jnp.where(small, 1.0, phi)

    def step_wait(r):
        """What a closed loop's request waits for the next step beyond a random arrival's
        residual: it is sent ``Z`` (exponential) after its predecessor's finish, a step's end,
        and a busy engine (probability ``u``) has begun the next step by then (docs/continuous.md,
        "Closed loops"). With steps of length ``T`` back to back from that end, the wait to the
        next start is ``T / (1 - e^-phi) - Z`` on average (``phi = T / Z``): a whole step at
        ``Z = 0``, half a step, a random arrival's, as ``Z`` grows. The open model counts the
        residual already, so the extra is ``u T h(phi)``, ``h = 1 / (1 - e^-phi) - 1 / phi -
        1/2`` (1/2 at ``Z = 0``, ``phi / 12`` as ``Z`` grows).

        A random arrival lands in a long step more often than in a short one, so its residual
        carries the steps' length bias (``u Var[T] / (2 T)`` beyond half a step). A request
        sent within the step after its predecessor's end (probability ``1 - e^-phi``) waits
        for that step, a step like any other: it carries the bias only otherwise."""
        t = r["step_mean"]
        u = r["busy_share"]
        ok = jnp.isfinite(t) & jnp.isfinite(r["ttft_residual"])
        t = jnp.where(ok, t, 0.0)
        phi, small, ps = fold(t)
        h = jnp.where(z > 0.0, jnp.where(small, phi / 12.0, 1.0 / -jnp.expm1(-ps) - 1.0 / ps - 0.5), 0.5)
        # (multi-step: the residual is a window's, and the request waits for the next decision)
        bias = jnp.maximum(jnp.where(ok, r["ttft_residual"], 0.0) - u * t / 2.0, 0.0) if steps == 1 else 0.0
        first = jnp.where(z > 0.0, -jnp.expm1(-phi), 1.0)  # sent within the next step
        return jnp.where(ok, u * t * jnp.clip(h, 0.0, 0.5) - bias * first, 0.0)

    def step_wait_var(r, x):
        """The variance of that wait for the step in progress. The engine is busy when the
        request comes if one of the other ``n - 1`` clients is in it: each thinks with
        probability ``X Z / n`` (Little's law), so busy with probability ``u = 1 - (X Z /
        n)^(n - 1)`` (certain at ``Z = 0``, where a finished request's successor takes its
        place at once). Busy, the request comes ``Y`` after a step's end (``Z``'s exponential
        folded onto a step of length ``T``: a truncated exponential on ``[0, T)``) and waits
        ``T - Y``: a whole step at ``Z = 0``, a uniform residual as ``Z`` grows; idle, none.
        (The mean keeps the open model's busy share, `step_wait`: with the share seen here in
        the mean too, 798 of 836 drawn comparisons were within target against 800;
        docs/continuous.md, "Closed loops".)"""
        t = jnp.where(jnp.isfinite(r["step_mean"]), r["step_mean"], 0.0)
        u = 1.0 - jnp.clip(x * z / n, 0.0, 1.0) ** (n - 1.0)
        phi, small, ps = fold(t)
        em1 = jnp.expm1(ps)  # e^phi - 1
        # E[Y] / T and E[Y^2] / T^2 of the folded exponential (1/2 and 1/3 as Z grows)
        ex = jnp.where(small, 0.5 - phi / 12.0, 1.0 / ps - 1.0 / em1)
        ex2 = jnp.where(small, 1.0 / 3.0 - phi / 12.0, 2.0 / (ps * ps) - (1.0 + 2.0 / ps) / em1)
        ex, ex2 = jnp.where(z > 0.0, ex, 0.0), jnp.where(z > 0.0, ex2, 0.0)
        m1 = 1.0 - ex  # E[W] / T when busy
        m2 = 1.0 - 2.0 * ex + ex2
        return jnp.maximum(u * m2 - (u * m1) ** 2, 0.0) * t * t

    def served(r):
        """The open model's E2E without its slot wait, with the closed loop's wait for a step:
        a closed loop's clients wait for a slot only as the response-time law says (below),
        not as a Poisson stream would."""
        return r["e2e_mean"] - jnp.where(jnp.isfinite(r["ttft_slot_wait"]), r["ttft_slot_wait"], 0.0) + step_wait(r)

    def body(i, st):
        lo, up, _, lone = st
        last = i == N_BISECT + 1
        mid = jnp.where(last, lo, 0.5 * (lo + up))
        seen = jnp.where(last, jnp.minimum(mid * share, rate), mid * share)
        r = cb_point(jnp.where(i == 0, 0.0, seen), *rest, **variant)  # cb_point floors the rate at 1e-300
        e2e = served(r)
        hi0 = jnp.minimum(n / (e2e + z), r["capacity_rps"])
        low = jnp.isfinite(e2e) & (mid * (jnp.where(jnp.isfinite(e2e), e2e, 0.0) + z) < n)
        halving = (i > 0) & (i <= N_BISECT)
        lo = jnp.where(halving & low, mid, lo)
        up = jnp.where(i == 0, hi0, jnp.where(halving & ~low, mid, up))
        return lo, up, r, jnp.where(i == 0, r["ttft_mean"], lone)

    zero = jnp.zeros(jnp.broadcast_shapes(n.shape, z.shape, rate.shape), jnp.float64)
    shape = jax.eval_shape(lambda: cb_point(zero, *rest, **variant))
    r0 = {k: jnp.zeros(v.shape, v.dtype) for k, v in shape.items()}
    # lo: the largest rate known to keep the law's left side below n (finite latencies)
    x, _, r, lone = lax.fori_loop(0, N_BISECT + 2, body, (zero, zero, r0, zero))
    capacity = r["capacity_rps"]
    out = dict(r)
    # Where the due rate binds (rate < X (n - 1) / n), the engine sees that rate's arrivals
    # and the open model's values hold, its slot wait included. Otherwise a request waits for
    # a slot only where the clients outnumber what the engine serves at once: where even the
    # capacity leaves the law's left side below n (the bracket's top is the capacity), the
    # response is the law's, n / X - Z, and its excess over the served E2E is that wait,
    # before the first token; elsewhere the excess is the bisection's residual (2^-60 of the
    # bracket).
    limited = rate < x * share
    e2e_sv = served(r)
    extra = step_wait(r)
    ttft_sv = r["ttft_mean"] - (r["e2e_mean"] - e2e_sv)
    excess = jnp.where(limited, 0.0, jnp.maximum(n / x - z - e2e_sv, 0.0))
    saturated = excess > 1e-6 * (e2e_sv + excess)
    through = jnp.minimum(x, rate)
    out["ttft_lone"] = lone  # a lone request's TTFT (the bracket's evaluation)
    out["ttft_served"] = jnp.where(limited, r["ttft_mean"], ttft_sv)  # before any wait for a slot
    # running sequences by Little's law over the engine, the slot wait excluded (the open
    # model's count at lam_seen misses the request itself: 0 for one client)
    out["mean_running"] = jnp.where(limited, r["mean_running"], jnp.minimum(through * e2e_sv, r["slots"]))
    out["ttft_mean"] = jnp.where(limited, r["ttft_mean"], ttft_sv + excess)
    out["e2e_mean"] = jnp.where(limited, r["e2e_mean"], e2e_sv + excess)
    out["ttft_slot_wait"] = jnp.where(limited, r["ttft_slot_wait"], excess)
    # Quantiles. Saturated, every request waits for a slot: a wait W of mean `excess`, a
    # gamma law of that mean with rate X (the slots free one after another, X a second; the
    # number ahead is W X), beside the served request's own TTFT or E2E (the open model's for
    # a request that finds a slot); their deviations from the mean at the quantile add in
    # quadrature, with the sign of their sum (both below the mean at the median of skewed
    # laws). Unsaturated, the served request's quantiles.
    zq = ndtri(jnp.asarray(q, jnp.float64))
    dev_w = _wh_quantile(excess, excess / jnp.where(x > 0, x, 1.0), zq) - excess
    var_w = step_wait_var(r, x) if steps == 1 else None
    shift = r["served_shift"]
    for k, own in (("ttft", ttft_sv), ("e2e", e2e_sv)):
        if steps == 1:
            # the served law with the closed loop's wait for the step in progress in place of a
            # random arrival's residual: one shifted lognormal of the same mean, its variance's
            # residual part replaced
            m_k = r[f"{k}_served_mean"] + extra
            v_k = jnp.maximum(r[f"{k}_served_var"] - r[f"{k}_resid_var"] + var_w, 0.0)
            s_k, mu_k = _ln_shape(m_k, v_k)
            own_p = shift + jnp.where(m_k > 0.0, jnp.exp(mu_k + s_k * zq), 0.0)
        else:  # multi-step: the window in progress's law, as an open loop's (not measured closed)
            own_p = r[f"{k}_p_served"] + extra
        dev = own_p - own
        sign = jnp.where(dev_w + dev >= 0.0, 1.0, -1.0)
        closed = jnp.where(saturated, excess + own + sign * jnp.sqrt(dev_w * dev_w + dev * dev), own_p)
        out[f"{k}_p"] = jnp.where(limited, r[f"{k}_p"], closed)
    out.update(saturated=saturated, throughput_rps=through,
               output_tok_s=through * jnp.asarray(output_mean, jnp.float64),
               lam_seen=jnp.minimum(x * share, rate), capacity_rps=capacity)
    return out


_closed_jit = jax.jit(cb_closed)


def closed_loop(clients: int, think_s: float, *, prompt_mean: float, prompt_cv: float, output_mean: float,
                output_cv: float, cap: float, max_batched_tokens: float, kv_capacity_tokens: float,
                block_tokens: float, t_fixed: float, t_token: float, t_ctx: float, service_cv: float = 0.0,
                quantiles: tuple[float, ...] = (0.5, 0.99), arrival_theorem: bool = True) -> dict[str, Any]:
    """`cb_closed` for one configuration, on the host: float scalars (``throughput_rps``,
    ``output_tok_s``, ``lam_seen``, ``capacity_rps``, the means and ``mean_running``,
    ``step_mean``) and, per q of ``quantiles``, ``ttft_q``, ``tpot_q`` and ``e2e_q``, dicts
    keyed by q (s). Inputs are trusted (the caller validates them)."""
    params = tuple(jnp.float64(v) for v in (prompt_mean, prompt_cv, output_mean, output_cv, cap,
                                            max_batched_tokens, kv_capacity_tokens, block_tokens, t_fixed,
                                            t_token, t_ctx, service_cv))
    out: dict[str, Any] = {}
    for q in quantiles or (0.5,):  # one compiled kernel, q traced: the root is found again per q (microseconds)
        r = _closed_jit(jnp.float64(clients), jnp.float64(think_s), *params, jnp.float64(q),
                        arrival_theorem=jnp.asarray(bool(arrival_theorem)))
        out.update({k: (bool(v) if k == "saturated" else float(v)) for k, v in r.items() if not k.endswith("_p")})
        for m in ("ttft", "tpot", "e2e"):
            out.setdefault(f"{m}_q", {})[float(q)] = float(r[f"{m}_p"])
    return out
