"""The Pareto frontier of a row and its knee (SPEC 6), in pure JAX, for ONE row.

Points are (capacity up, latency down); a model whose second objective rises (tokens/s per
user) passes its negation as `latency`. Exact float comparison throughout.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sweep._lazy import lazy_module

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array, lax
else:
    lax = lazy_module("jax.lax")
    jnp = lazy_module("jax.numpy")

INF = math.inf
#: Knee scores within this of the best are ties (SPEC 6).
KNEE_TIE = 1e-9


def pareto_mask(capacity: Array, latency: Array, valid: Array) -> Array:
    """Non-dominated points over (capacity up, latency down), exact float comparison.

    Seed definition: a point is dominated when another has capacity >= and latency <=
    with one of them strictly better. Sorting by (capacity desc, latency asc), a point is
    dominated exactly when some point of strictly higher capacity has latency <= its own,
    or the first point of its equal-capacity run has strictly lower latency. Identical
    points do not dominate each other and are all kept. O(K log K).
    """
    k = capacity.shape[0]
    cap = jnp.where(valid, capacity, -INF)
    lat = jnp.where(valid, latency, INF)
    order = jnp.lexsort((lat, -cap))
    cap_s, lat_s = cap[order], lat[order]
    pos = jnp.arange(k)
    new_run = jnp.concatenate([jnp.array([True]), cap_s[1:] != cap_s[:-1]])
    run_start = lax.cummax(jnp.where(new_run, pos, 0))
    cummin = lax.cummin(lat_s)
    before = jnp.where(run_start > 0, cummin[jnp.maximum(run_start - 1, 0)], INF)
    dominated = (before <= lat_s) | (lat_s[run_start] < lat_s)
    on_sorted = ~dominated & valid[order]
    return jnp.zeros(k, dtype=bool).at[order].set(on_sorted)


def pareto_mask_columns(capacity: Array, latency: Array, valid: Array) -> Array:
    """`pareto_mask` for a row laid out as (n_windows, n_batch) whose capacity depends on
    the batch column only and does not decrease along it (capacity_rps = B / T_svc(B) with
    batch sizes ascending). O(K), no sort; same answer as `pareto_mask` bit for bit.

    With c_j the column's capacity and m_j the smallest latency in column j, a point of
    column j with latency l is dominated iff A_j <= l or S_j < l, where A_j is the smallest
    m over columns of strictly larger capacity (the suffix after j's equal-capacity run)
    and S_j the smallest m from the start of j's run onwards (A_j > l makes S_j < l exactly
    "some equal-capacity point is strictly faster").
    """
    n_b = capacity.shape[-1]
    cap = capacity[0]
    lat = jnp.where(valid, latency, INF)
    col_min = jnp.min(lat, axis=0)
    suffix = jnp.concatenate([lax.cummin(col_min, reverse=True), jnp.array([INF])])
    pos = jnp.arange(n_b)
    new_run = jnp.concatenate([jnp.array([True]), cap[1:] != cap[:-1]])
    is_last = jnp.concatenate([cap[1:] != cap[:-1], jnp.array([True])])
    run_start = lax.cummax(jnp.where(new_run, pos, 0))
    run_end = lax.cummin(jnp.where(is_last, pos, n_b), reverse=True)
    above = suffix[run_end + 1]
    from_run = suffix[run_start]
    dominated = (above[None, :] <= lat) | (from_run[None, :] < lat)
    return ~dominated & valid


def columns_sorted(capacity: Array) -> Array:
    """True when every row of `capacity` (rows, n_windows, n_batch) is the same in every
    window and non-decreasing along the batch axis: `pareto_mask_columns` applies."""
    same = jnp.all(capacity == capacity[:, :1, :])
    rising = jnp.all(capacity[:, 0, 1:] >= capacity[:, 0, :-1])
    return same & rising


def knee_index(capacity: Array, latency: Array, on_frontier: Array) -> Array:
    """The frontier point farthest above the chord (SPEC 6); -1 for an empty frontier.

    Capacity and latency are normalised over the frontier to [0, 1] ((x - min)/(max -
    min), 0 where max = min); the knee maximises capacity_norm - latency_norm; scores
    within 1e-9 of the best are ties, and ties go to the smaller capacity. A frontier of
    one point is its own knee.
    """
    def norm(x: Array) -> Array:
        lo = jnp.min(jnp.where(on_frontier, x, INF))
        hi = jnp.max(jnp.where(on_frontier, x, -INF))
        span = hi - lo
        ok = on_frontier & (span > 0)
        return jnp.where(ok, (x - lo) / jnp.where(ok, span, 1.0), 0.0)

    score = jnp.where(on_frontier, norm(capacity) - norm(latency), -INF)
    best = jnp.max(score)
    tied = on_frontier & (score >= best - KNEE_TIE)
    idx = jnp.argmin(jnp.where(tied, capacity, INF))
    return jnp.where(jnp.any(on_frontier), idx, -1)
