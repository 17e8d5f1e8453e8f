"""What the two pools of disaggregated serving share: their keys' declarations (continuous
serving's, so that one grid speaks one vocabulary), how they fill and check them, and the
columns both report."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sweep._lazy import lazy_module
from sweep.errors import GridError
from sweep.models.base import Column, Param
from sweep.models.continuous import model as cont

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array
else:
    jnp = lazy_module("jax.numpy")

MS = 1e3
INF = math.inf
STEP_KEYS = cont.STEP_KEYS
ROOFLINE_KEYS = cont.ROOFLINE_KEYS
_CONTINUOUS = {p.key: p for p in cont.PARAMS}


def params(*keys: str, **own: Param) -> tuple[Param, ...]:
    """Continuous serving's declarations of `keys`, in that order (`own` replaces one)."""
    return tuple(own[k] if k in own else _CONTINUOUS[k] for k in keys)


GPUS = Column("gpus", "int64", "GPUs", "GPUs in the pool: replicas x gpus_per_replica.")


#: continuous serving's rules for a pool's keys (required present, step coefficients all or
#: none, defaults filled): `sweep.models.continuous.model.fill_keys`
fill = cont.fill_keys


def check_rho(values: Mapping[str, Sequence[Any]], where: Callable[[str], str], source: str) -> None:
    if max(values["rho_min"]) >= min(values["rho_max"]):
        raise GridError(source, where("rho_min"), max(values["rho_min"]),
                        f"must be < rho_max for every combination (smallest rho_max is {min(values['rho_max'])})")


def memory(x: Mapping[str, Array], reserve_fraction: float) -> tuple[Array, Array, Array]:
    """(KV bytes per token, weight bytes, HBM left for the KV cache) of one replica."""
    kv_per_token = x["kv_elems_per_token"] * x["kv_bytes_per_elem"]
    weights = x["n_params"] * x["weight_bytes_per_param"]
    free = x["gpus_per_replica"] * x["hbm_bytes"] * (1.0 - reserve_fraction) - weights
    return kv_per_token, weights, free


def efficiencies(x: Mapping[str, Array]) -> tuple[Array, Array]:
    """The roofline's efficiencies: the grid's, else the GPU entry's."""
    return (x["eta_bw"] if "eta_bw" in x else x["gpu_eta_bw"],
            x["eta_flops"] if "eta_flops" in x else x["gpu_eta_flops"])
