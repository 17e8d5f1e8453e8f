"""Exact decisions over the model's knobs (SPEC 6), in pure JAX.

A *row* is the `K` points of one scenario that differ only in the model's row axes
(`Decisions.row_axes`, any number of them, the cap innermost: for the dynamic batcher
`batch_window_ms` and `batch_size`). A *group* is the `R` rows that differ only in the
group axes (`Decisions.group_axes`: `replicas`, or one replicas axis per pool). Because
these are the innermost axes of the grid (each model's `params` puts them last, the group
axes just outside the row axes), a row is a contiguous block of K points and a group a
contiguous block of R rows, so a chunk of whole groups reshapes to `(groups, R, K)` with
no gathering.

`reduce_row` is written for ONE row (arrays of shape (K,)) and `reduce_group` for one
group's row results (shape (R,)); `reduce_chunk` vmaps them over a chunk. Every
decision considers feasible points only (`sweep.decide.verdict`). Indices are positions
inside the row (-1 where there is no answer).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from sweep._lazy import lazy_module
from sweep.decide.pareto import columns_sorted, knee_index, pareto_mask, pareto_mask_columns
from sweep.decide.verdict import counts_for_replicas_min
from sweep.models.base import Decisions

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
    from jax import Array
else:
    jax = lazy_module("jax")
    jnp = lazy_module("jax.numpy")

INF = math.inf

#: The private (points, S) mask of `[uncertainty]` (`sweep.engine.plan`): in which of the S
#: scenarios a point would count for replicas_min. `reduce_chunk` turns it into the bands.
RULES_BY_SAMPLE = "_rules_ok_by_sample"
#: The bands of replicas_min: nearest-rank percentiles over the scenarios.
REPLICAS_BANDS: tuple[int, ...] = (5, 50, 95)

#: `reason` codes for rows: the first constraint that left no candidate, in the order the
#: rules apply (`near_saturation`: some feasible point meets every SLO, but none with
#: utilisation <= rho_max). Codes past 0 rise with how far the row got, so a group's binding
#: constraint is its rows' largest code (`sweep.decide.recommend`).
REASONS: tuple[str, ...] = ("ok", "out_of_memory", "unstable", "proxy_invalid", "slo_violated", "near_saturation")


class Row(NamedTuple):
    """One row's points, each of shape (K,)."""

    feasible: Array
    mem_ok: Array
    stable: Array
    slo_ok: Array
    latency: Array  # the SLO estimate (frontier's second objective, ties)
    e_resp: Array  # the mean latency (b_latency_opt)
    capacity: Array
    batch: Array  # the cap
    rho: Array  # the utilisation of the operating rules
    rho_max: Array


def _argbest(mask: Array, primary: Array, secondary: Array) -> tuple[Array, Array]:
    """Index of the masked point with the largest `primary`, ties to the smallest
    `secondary`, then to the first position; (-1, False) when the mask is empty."""
    has = jnp.any(mask)
    top = jnp.max(jnp.where(mask, primary, -INF))
    tied = mask & (primary == top)
    idx = jnp.argmin(jnp.where(tied, secondary, INF))
    return jnp.where(has, idx, -1), has


def reduce_row(r: Row, frontier: Array) -> dict[str, Array]:
    """Every per-row answer of SPEC 6 for one row of K points, given its Pareto mask."""
    meets = r.feasible & r.slo_ok
    has_slo = jnp.any(meets)
    lat_opt, has_feasible = _argbest(r.feasible, -r.e_resp, r.batch)
    slo_opt, _ = _argbest(meets, r.capacity, r.latency)
    # b_max_slo and the replicas_min pick are one rule: the largest cap meeting every SLO
    # with rho <= rho_max (a point above rho_max is near saturation, never an answer).
    headroom = counts_for_replicas_min(r.feasible, r.slo_ok, r.rho, r.rho_max)
    b_max_slo, row_ok = _argbest(headroom, r.batch, r.latency)
    rmin_pick = b_max_slo
    knee = knee_index(r.capacity, r.latency, frontier)
    reason = jnp.where(
        ~jnp.any(r.mem_ok), 1,
        jnp.where(~jnp.any(r.mem_ok & r.stable), 2,
                  jnp.where(~has_feasible, 3, jnp.where(~has_slo, 4, jnp.where(~row_ok, 5, 0)))),
    )
    return {
        "b_max_slo_idx": b_max_slo,
        "b_latency_opt_idx": lat_opt,
        "slo_opt_idx": slo_opt,
        "knee_idx": knee,
        "replicas_ok": row_ok,
        "replicas_ok_idx": rmin_pick,
        "frontier": frontier,
        "n_feasible": jnp.sum(r.feasible),
        "n_frontier": jnp.sum(frontier),
        "reason": reason.astype(jnp.int32),
    }


def reduce_group(size: Array, cost: Array, row_ok: Array) -> tuple[Array, Array]:
    """replicas_min over one group's rows (shape (R,)): the smallest `size` (the model's
    `Decisions.size`: replicas, or every pool's GPUs) of a row in which some point meets the
    SLO with rho <= rho_max (+inf when none), and the one-hot mask of that row. Rows tied
    on size (two pools' splits of the same total) go to the lowest cost, then the first."""
    smin = jnp.min(jnp.where(row_ok, size, INF))
    tied = row_ok & (size == smin)
    pick = jnp.argmin(jnp.where(tied, cost, INF))
    return smin, tied & (jnp.arange(size.shape[0]) == pick)


def replicas_bands(size: Array, ok: Array) -> dict[str, Array]:
    """The bands of replicas_min over one group's scenarios: `size` (R,) each row's size,
    `ok` (R, K, S) the per-scenario rule of each point. In scenario s the group needs the
    smallest size for which some point of that row meets the rule (+inf when none);
    the bands are the nearest-rank 5th/50th/95th percentiles of those S counts (the same
    rank rule as the latency bands, so an unmet share above 5 % gives +inf, never a blend)."""
    row_ok = jnp.any(ok, axis=1)  # (R, S)
    need = jnp.min(jnp.where(row_ok, size[:, None], INF), axis=0)  # (S,)
    need = jnp.sort(need)
    s = need.shape[0]
    return {f"replicas_min_p{q}": need[round(q / 100.0 * (s - 1))] for q in REPLICAS_BANDS}


def reduce_chunk(out: Mapping[str, Array], d: Decisions, *, row_size: int, n_cap: int,
                 rows_per_group: int) -> dict[str, Array]:
    """SPEC 6 for every row and group of a chunk of whole groups (flat point columns).

    Returns `_rows` (per-row answers, shape (n_rows,)) and the per-point flags
    `on_frontier`, `is_knee`, `is_slo_opt`.
    """
    n_rows = out["feasible"].shape[0] // row_size

    def as_rows(x: Array) -> Array:
        return x.reshape(n_rows, row_size)

    row = Row(
        feasible=as_rows(out["feasible"]),
        mem_ok=as_rows(out["mem_ok"]),
        stable=as_rows(out["stable"]),
        slo_ok=as_rows(out["slo_ok"]),
        latency=as_rows(out[d.latency]) * d.latency_sign,
        e_resp=as_rows(out[d.mean_latency]),
        capacity=as_rows(out[d.capacity]),
        batch=as_rows(out[d.cap]).astype(jnp.float64),
        rho=as_rows(out["_rho_rules"]),
        rho_max=as_rows(out["rho_max"]),
    )
    # The frontier: O(K) when capacity depends on the cap column only (the usual case,
    # checked here), else the general sort-based mask. The branch is per chunk, outside
    # vmap, so only one side runs. The cap is the innermost row axis: a row is n_knob
    # columns (every combination of the outer row axes) of n_cap points each.
    n_knob = row_size // n_cap
    cap3 = row.capacity.reshape(n_rows, n_knob, n_cap)
    frontier = jax.lax.cond(
        columns_sorted(cap3),
        lambda: jax.vmap(pareto_mask_columns)(
            cap3, row.latency.reshape(n_rows, n_knob, n_cap), row.feasible.reshape(n_rows, n_knob, n_cap)
        ).reshape(n_rows, row_size),
        lambda: jax.vmap(pareto_mask)(row.capacity, row.latency, row.feasible),
    )
    red = jax.vmap(reduce_row)(row, frontier)
    size = as_rows(out[d.size])[:, 0].astype(jnp.float64).reshape(-1, rows_per_group)
    cost = as_rows(out["cost_usd_per_hour"])[:, 0].reshape(-1, rows_per_group)
    rmin, is_rmin = jax.vmap(reduce_group)(size, cost, red["replicas_ok"].reshape(-1, rows_per_group))
    pos = jnp.arange(row_size)[None, :]
    rows = dict(red)
    rows["replicas_min"] = jnp.repeat(rmin, rows_per_group)
    rows["is_replicas_min"] = is_rmin.reshape(-1)
    if RULES_BY_SAMPLE in out:  # [uncertainty]: the size each scenario needs
        by_sample = out[RULES_BY_SAMPLE]
        ok = by_sample.reshape(-1, rows_per_group, row_size, by_sample.shape[-1])
        bands = jax.vmap(replicas_bands)(size, ok)
        rows.update({k: jnp.repeat(v, rows_per_group) for k, v in bands.items()})
    return {
        "_rows": rows,
        "on_frontier": frontier.reshape(-1),
        "is_knee": (pos == red["knee_idx"][:, None]).reshape(-1),
        "is_slo_opt": (pos == red["slo_opt_idx"][:, None]).reshape(-1),
    }
