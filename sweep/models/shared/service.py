"""Service times of one forward pass (seed eq. 1; SPEC 1), ONE point, SI units.

Three sources, recorded per row as `service_source`: given (`t_fixed_ms`, `t_req_ms` in
the grid), fitted (a profile, `sweep.grid.profile`), or a roofline estimate from the
model and GPU catalogs: SPEC 13's step (`sweep.models.shared.roofline.service_line`).

`roofline_times` is the seed's linear roofline, the engine's estimate before SPEC 13. No
serving model uses it; it stays as the baseline that `benchmarks/kernel.py` (cost) and
`benchmarks/roofline_accuracy.py` (error against measurements) compare SPEC 13 with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jax import Array



def service_time(t_fixed: Array, t_req: Array, b: Array) -> Array:
    """T_svc(B) = T_fixed + t_req B (seed eq. 1), seconds."""
    return t_fixed + t_req * b


def roofline_times(
    weights_bytes: Array,
    active_params: Array,
    kv_bytes_per_token: Array,
    mean_seq_len: Array,
    tokens_per_request: Array,
    gpus: Array,
    hbm_bytes_per_s: Array,
    flops: Array,
    eta_bw: Array,
    eta_flops: Array,
) -> tuple[Array, Array]:
    """(T_fixed, t_req) in seconds from the seed's linear roofline (the baseline; module doc).

    One forward pass on `gpus` GPUs: the weights stream from HBM once per pass (T_fixed);
    each request adds its matmul FLOPs for `tokens_per_request` new tokens and reads its
    KV cache of `mean_seq_len` tokens (t_req).
    """
    bw = gpus * hbm_bytes_per_s * eta_bw
    t_fixed = weights_bytes / bw
    t_req = 2.0 * active_params * tokens_per_request / (gpus * flops * eta_flops) + (
        kv_bytes_per_token * mean_seq_len / bw
    )
    return t_fixed, t_req
