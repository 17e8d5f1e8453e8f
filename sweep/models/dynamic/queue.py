"""The seed's queueing proxy (SPEC 3) and the batch sizes it recommends (seed eq. 2), ONE point.

Batches are treated as Poisson "super-requests" at `lambda / E[B]` served by one worker
(the M/G/1 batch proxy): the mean wait by Pollaczek-Khinchine, its variance by Takacs.
Float64 scalars in SI units (seconds, 1/s); infeasible is `+inf`, never NaN.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from sweep._lazy import lazy_module
from sweep.models.dynamic.batching import BatchMoments
from sweep.models.shared.service import service_time

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array

    from sweep import _numerics as numerics
else:
    numerics = lazy_module("sweep._numerics")
    jnp = lazy_module("jax.numpy")

INF = math.inf


class Queue(NamedTuple):
    rho: Array
    proxy_ok: Array
    stable: Array
    e_wait: Array  # E[W], s
    var_wait: Array  # Var[W], s^2
    e_svc: Array  # request-weighted E[T_svc], s
    var_svc: Array  # request-weighted Var[T_svc], s^2
    capacity: Array  # B_max / T_svc(B_max), 1/s


def queue_proxy(lam: Array, b_max: Array, t_fixed: Array, t_req: Array, service_cv: Array, bm: BatchMoments, *,
                exact_full: bool) -> Queue:
    """M/G/1 batch proxy (SPEC 3): batches are Poisson super-requests at lam / E[B].

    Service S = T_svc(B_actual) X with X lognormal noise of mean 1 and CV `service_cv`
    (E[X^2] = 1 + cv^2, E[X^3] = (1 + cv^2)^3; cv = 0 is the seed's deterministic case):
        rho    = lam_b E[S]
        E[W]   = lam_b E[S^2] / (2 (1 - rho))                 (P-K)
        Var[W] = E[W]^2 + lam_b E[S^3] / (3 (1 - rho))        (Takacs, E[W^2] - E[W]^2)
    `exact_full` (static) marks a grid with only full batches, whose request-weighted
    service variance is exactly zero without noise.
    """
    tf, tr = t_fixed, t_req
    m2 = 1.0 + service_cv**2
    m3 = m2**3
    lam_b = lam / bm.eb
    es = tf + tr * bm.eb
    es2 = (tf * tf + 2.0 * tf * tr * bm.eb + tr * tr * bm.eb2) * m2
    es3 = (tf**3 + 3.0 * tf * tf * tr * bm.eb + 3.0 * tf * tr * tr * bm.eb2 + tr**3 * bm.eb3) * m3
    rho = lam_b * es
    proxy_ok = rho < 1.0
    slack = 1.0 - rho
    e_wait = numerics.safe_div(lam_b * es2, 2.0 * slack, proxy_ok, INF)
    var_wait = jnp.where(proxy_ok, e_wait * e_wait, INF) + numerics.safe_div(lam_b * es3, 3.0 * slack, proxy_ok, INF)
    # Request-weighted service: a request sits in a batch of size-biased B.
    mean_b_r = bm.eb2 / bm.eb
    e_svc = tf + tr * mean_b_r
    if exact_full:
        var_b_r = jnp.zeros_like(mean_b_r)
    else:
        var_b_r = jnp.maximum(bm.eb3 / bm.eb - mean_b_r * mean_b_r, 0.0)
    # Var[T_svc X] = E[X^2] Var[T_svc] + (E[X^2] - 1) E[T_svc]^2: no cancellation.
    var_svc = m2 * tr * tr * var_b_r + (m2 - 1.0) * e_svc * e_svc
    t_cap = service_time(tf, tr, b_max)
    stable = lam * t_cap < b_max
    capacity = numerics.safe_div(b_max, t_cap, t_cap > 0, INF)
    return Queue(rho, proxy_ok, stable, e_wait, var_wait, e_svc, var_svc, capacity)


def b_min(lam: Array, t_fixed: Array, t_req: Array, rho: Array | float) -> Array:
    """B_min(rho) = lam T_fixed / (rho - lam t_req), +inf when rho <= lam t_req (eq. 2)."""
    ok = rho > lam * t_req
    return numerics.safe_div(lam * t_fixed, rho - lam * t_req, ok, INF)


def b_min_stable_int(lam: Array, t_fixed: Array, t_req: Array, raw: Array) -> Array:
    """Smallest integer B with lam T_svc(B) < B (strictly stable): floor(B_min(1)) + 1.

    The candidate is checked with the same inequality as the `stable` column and moved by
    one where rounding in B_min put it on the wrong side, so the two never disagree.
    """
    finite = jnp.isfinite(raw)
    c = jnp.maximum(jnp.floor(jnp.where(finite, raw, 0.0)) + 1.0, 1.0)
    ok = lambda b: lam * service_time(t_fixed, t_req, b) < b  # noqa: E731
    c = jnp.where((c > 1.0) & ok(c - 1.0), c - 1.0, c)
    c = jnp.where(ok(c), c, c + 1.0)
    return jnp.where(finite, c, INF)


def b_min_target_int(lam: Array, t_fixed: Array, t_req: Array, rho_target: Array, raw: Array) -> Array:
    """Smallest integer B >= 1 with lam T_svc(B) / B <= rho_target: ceil(B_min(rho_target))."""
    finite = jnp.isfinite(raw)
    c = jnp.maximum(jnp.ceil(jnp.where(finite, raw, 1.0)), 1.0)
    ok = lambda b: lam * service_time(t_fixed, t_req, b) <= rho_target * b  # noqa: E731
    c = jnp.where((c > 1.0) & ok(c - 1.0), c - 1.0, c)
    c = jnp.where(ok(c), c, c + 1.0)
    return jnp.where(finite, c, INF)
