"""Where the analytic model of continuous batching is trusted: the rule behind the
`analytic_trusted` column, for ONE point, in pure ``jax.numpy`` (the engine vmaps).

SPEC 10's accuracy targets hold over the stable region away from the cap; the analytic
model (`sweep.models.continuous.analytic`) is a fixed point of mean-value and queueing
approximations that degrade where the engine saturates: a cap that is full most of the
time (the occupancy is no longer Poisson below it), a load close to the capacity (the
waits and the `stable` verdict itself turn on small differences), and a KV-bound engine
whose reservations are widely spread (head-of-line blocking by one large reservation, which
the model takes as half a mean one). A point is **outside** the trusted region when any of

    mean_running >= RUNNING_SHARE_MAX * slots
    lam >= LOAD_MAX * capacity_rps
    kv_bound and reservation_cv > RESERVATION_CV_MAX

holds, with `slots` the analytic model's effective slots (min(cap, reservations that fit in
the KV capacity)), `kv_bound` the KV capacity holding fewer mean reservations than the cap
(C / ceil((P + O) / b) b < cap), and `reservation_cv` the coefficient of variation of a
reservation P + O (independent lognormal lengths: sqrt((P cv_P)^2 + (O cv_O)^2) / (P + O)).
An unstable point is outside (its load is at least the capacity). A point whose weights or
mean reservation do not fit (`mem_ok` false) is inside: its verdict, out of memory, is a
closed form, not the analytic model's.

The thresholds are the initial rule of issue 24 (item 6), to be tuned against the
randomized accuracy benchmark (`benchmarks/cb_accuracy.py`); they are module constants so
that a change is one line, documented in docs/continuous.md.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import Array

#: The cap counts as saturated when the mean running count reaches this share of the slots.
RUNNING_SHARE_MAX = 0.9
#: Near saturation: the per-replica load at or above this share of `capacity_rps`.
LOAD_MAX = 0.9
#: A KV-bound engine is outside when its reservations' coefficient of variation exceeds this.
RESERVATION_CV_MAX = 1.0


def reservation_cv(prompt_mean: Any, prompt_cv: Any, output_mean: Any, output_cv: Any) -> Array:
    """Coefficient of variation of a request's reservation P + O (independent lengths)."""
    sd = jnp.sqrt((prompt_mean * prompt_cv) ** 2 + (output_mean * output_cv) ** 2)
    return sd / (prompt_mean + output_mean)


def analytic_trusted(*, mean_running: Any, slots: Any, lam: Any, capacity_rps: Any, cap: Any,
                     kv_capacity_tokens: Any, reservation_tokens: Any, prompt_mean: Any, prompt_cv: Any,
                     output_mean: Any, output_cv: Any, mem_ok: Any) -> Array:
    """True where the point lies inside the region where the analytic model was shown
    accurate (the module's rule). Inputs are one point's scalars: the analytic model's
    `mean_running`, `slots` and `capacity_rps` (requests/s), the per-replica rate `lam`
    (requests/s), the cap, the KV capacity and a mean reservation (tokens, block-rounded), the
    length means and CVs, and the memory verdict."""
    saturated_cap = mean_running >= RUNNING_SHARE_MAX * slots
    near_capacity = lam >= LOAD_MAX * capacity_rps
    kv_bound = kv_capacity_tokens < cap * reservation_tokens
    spread = reservation_cv(prompt_mean, prompt_cv, output_mean, output_cv) > RESERVATION_CV_MAX
    outside = saturated_cap | near_capacity | (kv_bound & spread)
    return jnp.logical_not(mem_ok) | jnp.logical_not(outside)
