"""The verdict on a point: does it meet its SLO, is it feasible, what should an operator do.

One function, `verdict`, used by every path: fused into the jitted chunk function, and
after a host pass (the simulator) on the measured columns. Elementwise `jax.numpy`.

`action` follows the seed's operating rules (Table 1, SPEC 6), first match wins:
out_of_memory (`mem_ok` false), unstable (`stable` false), slo_violated (a latency above
its SLO, `+inf` included), near_saturation (rho > rho_max), overprovisioned
(rho < rho_min), ok.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

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
    slo_ok = jnp.ones(jnp.shape(rho), dtype=bool)
    finite = jnp.ones(jnp.shape(rho), dtype=bool)
    for latency, slo in checks:
        slo_ok = slo_ok & (latency <= slo)
        finite = finite & jnp.isfinite(latency)
    code = jnp.full(jnp.shape(rho), ACTION_CODE["ok"], dtype=jnp.int32)
    code = jnp.where(rho < rho_min, ACTION_CODE["overprovisioned"], code)
    code = jnp.where(rho > rho_max, ACTION_CODE["near_saturation"], code)
    code = jnp.where(~slo_ok, ACTION_CODE["slo_violated"], code)
    code = jnp.where(~stable, ACTION_CODE["unstable"], code)
    code = jnp.where(~mem_ok, ACTION_CODE["out_of_memory"], code)
    return Verdict(slo_ok, stable & mem_ok & finite, code)
