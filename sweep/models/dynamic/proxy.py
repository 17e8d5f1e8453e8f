"""The seed's model: the window proxy with the gaussian or exponential tail rule (SPEC 4).

`latency_model = "gaussian"`: the SLO is checked against E[T] + z_q sigma_T;
`"exponential"`: against -ln(1-q) E[T]. Both are computed for every point anyway
(`p_gauss_ms`, `p_exp_ms`); the rules' utilisation is the proxy's `rho`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from sweep.models.dynamic.model import DynamicModel, Estimates
from sweep.models.dynamic.views import PROXY_VIEWS
from sweep.models.views import Views

if TYPE_CHECKING:
    from jax import Array


class GaussianProxy(DynamicModel):
    name: ClassVar[str] = "gaussian"
    #: the checked latency is p_gauss_ms, already in the per-point table
    views: ClassVar[Views] = PROXY_VIEWS

    def estimate(self, e: Estimates) -> tuple[Array, Array, dict[str, Array]]:
        return e.p_gauss, e.rho, {}


class ExponentialProxy(DynamicModel):
    name: ClassVar[str] = "exponential"
    views: ClassVar[Views] = PROXY_VIEWS

    def estimate(self, e: Estimates) -> tuple[Array, Array, dict[str, Array]]:
        return e.p_exp, e.rho, {}
