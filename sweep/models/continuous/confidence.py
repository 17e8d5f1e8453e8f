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
    n_hi = jnp.minimum(cap, mean_running + KV_HEADROOM_Z * jnp.sqrt(jnp.maximum(mean_running, 0.0)) + 1.0)
    return kv_reservations_fit(n_hi, kv_tokens=kv_tokens, prompt_tokens=prompt_tokens, prompt_cv=prompt_cv,
                               output_tokens=output_tokens, output_cv=output_cv, block=block)


def kv_reservations_fit(n: Any, *, kv_tokens: Any, prompt_tokens: Any, prompt_cv: Any, output_tokens: Any,
                        output_cv: Any, block: Any) -> Array:
    """True where `n` reservations almost never exceed the KV capacity: ``n r + z sqrt(n
    var(r))`` tokens fit (z = KV_HEADROOM_Z, ``r`` the mean reservation prompt + output with
    half a block of rounding, var(r) the prompt's and the output's variances plus the
    rounding's). An infinite capacity always fits."""
    r_mean = prompt_tokens + output_tokens + 0.5 * block
    r_var = (prompt_tokens * prompt_cv) ** 2 + (output_tokens * output_cv) ** 2 + block * block / 12.0
    need = n * r_mean + KV_HEADROOM_Z * jnp.sqrt(n * r_var)
    return jnp.isinf(kv_tokens) | (need <= kv_tokens)



def closed_loop_trusted(*, clients: Any, cap: Any, slots: Any, saturated: Any, mean_running: Any, ttft_served: Any,
                        ttft_lone: Any, kv_tokens: Any, prompt_tokens: Any, prompt_cv: Any, output_tokens: Any,
                        output_cv: Any, block: Any, think_s: Any) -> Array:
    """The closed loop's own clause (`workload = "closed"`; `benchmarks/closed_accuracy.py`).
    Its model waits for a slot only where the clients outnumber the cap, so it asks that the
    reservations of the clients that run at once, `min(clients, cap)`, fit the KV capacity
    (`kv_reservations_fit`; where they may not, reservations block admissions below the cap
    and the wait depends on their spread). And a request of a loop of `clients` has at most
    `clients - 1` others' prompts ahead of it: a served TTFT above `clients` lone requests'
    is the open model's prefill backlog of Poisson arrivals outgrowing a few clients (seen on
    small token budgets with long prompts), also untrusted. A loop the model finds saturated
    is trusted only where the slots are what saturates it, more clients than slots and the
    slots at least `RUNNING_SHARE_MAX` full: where the open model's capacity is its token
    budget's or its step count's limit on a Poisson stream, a closed loop's throughput was
    measured 24-81% above it (`benchmarks/closed_accuracy.py`). And more clients than slots
    with the slots `RUNNING_SHARE_MAX` full but the loop not saturated is the edge where the
    clients' fluctuations queue for slots that the mean says are free (TTFT measured 85% above
    the model's), untrusted as the open model's full cap is.

    And a loop that moves in lockstep: more than one client, no think time and one output
    length for all (`output_cv = 0`). Its clients start together, finish together and send
    together, so each request's prompt is prefilled beside the whole wave's and decodes beside
    the wave only, which a model of desynchronized clients does not see (seed 31 of
    `benchmarks/closed_accuracy.py`, 78 clients: TTFT 0.61 s simulated, 0.05 s analytic; TPOT
    9.0 ms and 17.0 ms; E2E 1.25 s both). Benchmarks of fixed lengths run this way, on real
    servers too (docs/accuracy-load.md): the simulator, which starts the clients together,
    answers them."""
    slot_bound = (clients > slots) & (mean_running >= RUNNING_SHARE_MAX * slots)
    fits = kv_reservations_fit(jnp.minimum(clients, cap), kv_tokens=kv_tokens, prompt_tokens=prompt_tokens,
                               prompt_cv=prompt_cv, output_tokens=output_tokens, output_cv=output_cv, block=block)
    lockstep = (clients > 1.0) & (think_s <= 0.0) & (output_cv <= 0.0)
    return fits & (ttft_served <= clients * ttft_lone) & (saturated == slot_bound) & jnp.logical_not(lockstep)
