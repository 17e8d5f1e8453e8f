"""The verdict on a point: does it meet its SLO, is it feasible, what should an operator do.

One function, `verdict`, used by every path: fused into the jitted chunk function, and
after a host pass (the simulator) on the measured columns. Elementwise `jax.numpy`.

`action` follows the seed's operating rules (Table 1, SPEC 6), first match wins:
out_of_memory (`mem_ok` false), unstable (`stable` false), slo_violated (a latency above
its SLO, `+inf` included), near_saturation (rho > rho_max), overprovisioned
(rho < rho_min), ok.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from sweep._lazy import lazy_module

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array
else:
    jnp = lazy_module("jax.numpy")


#: `action` codes; first match wins in this order.
ACTIONS: tuple[str, ...] = (
    "out_of_memory",
    "unstable",
    "slo_violated",
    "near_saturation",
    "overprovisioned",
    "ok",
)
ACTION_CODE = {name: i for i, name in enumerate(ACTIONS)}


# --------------------------------------------------------------------------- the rules
# Each rule once, written with operators only so it reads NumPy arrays (the search's
# constraints) and JAX arrays (the kernels, the reductions, [uncertainty]'s scenarios) alike.


def slo_met(checks: Sequence[tuple[Any, Any]]) -> Any:
    """Every latency <= its SLO (an unbounded latency fails; an SLO of +inf always holds).
    `checks` = ((latency, slo), ...) in the same unit."""
    ok: Any = True
    for latency, slo in checks:
        ok = ok & (latency <= slo)
    return ok


def bounded(latencies: Sequence[Any]) -> Any:
    """Every latency finite (NaN counts as unbounded)."""
    ok: Any = True
    for latency in latencies:
        ok = ok & (latency < math.inf)
    return ok


def counts_for_replicas_min(feasible: Any, slo_ok: Any, rho: Any, rho_max: Any) -> Any:
    """A point `replicas_min` may choose: feasible, meeting every SLO, and its utilisation
    within `rho_max` (docs/model.md, decisions)."""
    return feasible & slo_ok & (rho <= rho_max)


def within_risk(slo_ok: Any, p_slo_breach: Any, risk: float | None) -> Any:
    """With `[uncertainty] risk`: the SLO holds only where the share of scenarios that miss
    it is at most `risk`."""
    return slo_ok if risk is None else slo_ok & (p_slo_breach <= risk)


class Verdict(NamedTuple):
    slo_ok: Array  # every latency <= its SLO (+inf fails)
    feasible: Array  # stable, mem_ok and every latency finite: what the decisions consider
    action: Array  # int32 code into ACTIONS


def verdict(
    *,
    stable: Array,
    mem_ok: Array,
    checks: Sequence[tuple[Array, Array]],
    rho: Array,
    rho_max: Array,
    rho_min: Array,
) -> Verdict:
    """The verdict for points whose SLO checks are `checks` = ((latency, slo), ...), in the
    same unit; `rho` is the utilisation the operating rules read."""
    shape = jnp.shape(rho)
    slo_ok = jnp.broadcast_to(slo_met(checks), shape)
    finite = jnp.broadcast_to(bounded([latency for latency, _ in checks]), shape)
    code = jnp.full(jnp.shape(rho), ACTION_CODE["ok"], dtype=jnp.int32)
    code = jnp.where(rho < rho_min, ACTION_CODE["overprovisioned"], code)
    code = jnp.where(rho > rho_max, ACTION_CODE["near_saturation"], code)
    code = jnp.where(~slo_ok, ACTION_CODE["slo_violated"], code)
    code = jnp.where(~stable, ACTION_CODE["unstable"], code)
    code = jnp.where(~mem_ok, ACTION_CODE["out_of_memory"], code)
    return Verdict(slo_ok, stable & mem_ok & finite, code)
