"""Where the analytic model of continuous batching is trusted: the rule behind the
`analytic_trusted` column, for ONE point, in pure ``jax.numpy`` (the engine vmaps).

SPEC 10's accuracy targets hold over the stable region away from the cap; the analytic
model (`sweep.models.continuous.analytic`) is built from queueing approximations that
degrade where the engine saturates: a cap that is full most of the time, and a load close to
the capacity (the waits and the `stable` verdict itself turn on small differences). A point
is **outside** the trusted region when either

    mean_running >= RUNNING_SHARE_MAX * slots
    lam >= LOAD_MAX * capacity_rps

holds, with `slots` the analytic model's effective slots (min(cap, reservations that fit in
the KV capacity)). An unstable point is outside (its load is at least the capacity). A point
whose weights or mean reservation do not fit (`mem_ok` false) is inside: its verdict, out of
memory, is a closed form, not the analytic model's.

The thresholds come from the randomized accuracy benchmark (`benchmarks/cb_accuracy.py`, 300
random configurations, docs/continuous.md). With the simulations warmed up for each point's
relaxation time, the rewritten model (issue 24) is 96.8% within SPEC 10's targets inside
the rule (2084/2153 judged comparisons) and 94.2% outside it (114/121); what the flag mostly
marks is where the simulator itself stops giving a verdict: 17 of the 32 points drawn at
loads >= 0.85 are not steady in the simulator (42% at 0.65-0.85, 15-19% below), where the
analytic model still answers. A third clause first proposed for the rule, a KV-bound engine
with widely spread reservations (CV of P + O above 1), separated nothing (those comparisons
were 99% within target, 124/125), so it is not part of the rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sweep._lazy import lazy_module

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array
else:
    jnp = lazy_module("jax.numpy")


#: The cap counts as saturated when the mean running count reaches this share of the slots.
RUNNING_SHARE_MAX = 0.9
#: Near saturation: the per-replica load at or above this share of `capacity_rps`.
LOAD_MAX = 0.85


def analytic_trusted(*, mean_running: Any, slots: Any, lam: Any, capacity_rps: Any, mem_ok: Any) -> Array:
    """True where the point lies inside the region where the analytic model was shown
    accurate (the module's rule). Inputs are one point's scalars: the analytic model's
    `mean_running`, `slots` and `capacity_rps` (requests/s), the per-replica rate `lam`
    (requests/s), and the memory verdict."""
    saturated_cap = mean_running >= RUNNING_SHARE_MAX * slots
    near_capacity = lam >= LOAD_MAX * capacity_rps
    return jnp.logical_not(mem_ok) | jnp.logical_not(saturated_cap | near_capacity)


#: Standard deviations of headroom the on-demand rule asks for, in the running count and in
#: the sum of the running sequences' reservations.
KV_HEADROOM_Z = 3.0


def reservations_never_block(*, mean_running: Any, cap: Any, kv_tokens: Any, prompt_tokens: Any, prompt_cv: Any,
                             output_tokens: Any, output_cv: Any, block: Any) -> Array:
    """`kv_admission = "on_demand"`: True where the reserve engine's reservations (prompt +
    output in whole blocks, held from admission) almost never block an admission, so that the
    on-demand engine runs the very same schedule (it holds at most what reserve reserves for
    the same sequences, so it never lacks a block either) and the analytic model's reserve
    values are its own. The running count stays below ``n_hi = min(cap, R + z sqrt(R) + 1)``
    and ``n_hi`` reservations below ``n_hi r + z sqrt(n_hi var(r))`` tokens (z = KV_HEADROOM_Z,
    ``r`` the mean reservation with half a block of rounding, var(r) the prompt's and the
    output's variances plus the rounding's); the rule asks that to fit in the KV capacity. An
    infinite capacity never blocks."""
    r_mean = prompt_tokens + output_tokens + 0.5 * block
    r_var = (prompt_tokens * prompt_cv) ** 2 + (output_tokens * output_cv) ** 2 + block * block / 12.0
    z = KV_HEADROOM_Z
    n_hi = jnp.minimum(cap, mean_running + z * jnp.sqrt(jnp.maximum(mean_running, 0.0)) + 1.0)
    need = n_hi * r_mean + z * jnp.sqrt(n_hi * r_var)
    return jnp.isinf(kv_tokens) | (need <= kv_tokens)



def closed_loop_trusted(*, saturated: Any, clients: Any, slots: Any, ttft_open: Any, ttft_lone: Any) -> Array:
    """The closed loop's own clause (`workload = "closed"`; `benchmarks/closed_accuracy.py`):
    false where the clients outnumber what the engine serves at once (`saturated`: the slot
    wait is added as a constant, while the open model's spread at that rate is too wide), and
    where no more clients than slots meet an open-model TTFT above `clients` lone requests'
    TTFTs: a request of such a loop has at most `clients - 1` others' prompts ahead of it, so
    a longer TTFT is the open model's queue of Poisson arrivals (a slot or prefill backlog)
    outgrowing a population of a few clients (seen on KV-bound engines with heavy-tailed
    outputs and on small token budgets with long prompts)."""
    few = clients <= slots
    return ~saturated & ~(few & (ttft_open > clients * ttft_lone))
