"""The seed's window proxy and the greedy-batcher model at explicit points (SI units in and
out): what the benchmarks compare with the simulator.

Both pad the points to a power of two, at least `MIN_LANES` (the padding repeats the last
point and is dropped from the answers), so that the benchmarks that call them in one process
(the test suite's smoke runs) share one compiled program per model.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sweep.engine.evaluate import evaluate_points
from sweep.models import get_model
from sweep.models.dynamic.batcher import batcher_point

MIN_LANES = 256
_BATCHER = jax.jit(jax.vmap(batcher_point))


def lanes(n: int) -> int:
    """The padded number of points for `n` points."""
    return max(MIN_LANES, 1 << (n - 1).bit_length())


def _padded(n: int, *arrays) -> list[np.ndarray]:
    take = np.minimum(np.arange(lanes(n)), n - 1)
    return [np.broadcast_to(np.asarray(a, dtype=np.float64), (n,))[take] for a in arrays]


def window_proxy(lam, b_max, t_max_s, t_fixed_s, t_req_s, service_cv=0.0, q=0.99) -> dict[str, np.ndarray]:
    """E[T], the gaussian and exponential percentiles (s), rho and E[B] of the proxy, through
    the engine's own evaluation of the gaussian model."""
    n = np.broadcast(lam, b_max, t_max_s, t_fixed_s, t_req_s, service_cv, q).size
    lam, b_max, t_max_s, t_fixed_s, t_req_s, service_cv, q = _padded(
        n, lam, b_max, t_max_s, t_fixed_s, t_req_s, service_cv, q)
    params = {
        "arrival_rps": lam, "replicas": 1.0, "batch_size": b_max, "batch_window_ms": t_max_s * 1e3,
        "t_fixed_ms": t_fixed_s * 1e3, "t_req_ms": t_req_s * 1e3, "service_cv": service_cv,
        "percentile": q, "slo_ms": 1e3, "rho_target": 0.75, "rho_max": 0.85, "rho_min": 0.5, "seq_len": 1.0,
        "mean_seq_len": 1.0, "kv_bytes_per_elem": 1.0, "weight_bytes_per_param": 1.0, "gpus_per_replica": 1.0,
        "workers": 1.0, "queue_capacity": np.inf,
    }
    figures = {"kv_elems_per_token": 1.0, "n_params": 0.0, "active_params": 0.0, "hbm_bytes": 1e12,
               "hbm_bw": 1e12, "flops": 1e15, "usd_per_gpu_hour": 1.0,
               "dense_params": 0.0, "expert_params": 0.0, "n_experts": 0.0, "experts_per_token": 0.0, "n_layers": 1.0,
               "hidden": 1.0, "attn_width": 1.0, "fp8_flops": 0.0, "link_bw": 450e9, "alpha": 10e-6, "gpu_eta_bw": 0.7,
               "gpu_eta_flops": 0.6, "gpu_t_overhead": 1e-3, "gpu_t_decode_overhead": 1e-3}
    static = {"windowed": True, "full": True, "paged": False, "service_source": "given", "mean_follows": False,
              "block_tokens": 16.0, "reserve_fraction": 0.0}
    r = evaluate_points(get_model("dynamic", "gaussian"), params, figures, static=static)
    return {"e_resp": r["e_resp_ms"][:n] / 1e3, "p_gauss": r["p_gauss_ms"][:n] / 1e3,
            "p_exp": r["p_exp_ms"][:n] / 1e3, "rho": r["rho"][:n], "mean_batch": r["mean_batch"][:n]}


def batcher_model(lam, b_max, t_max_s, t_fixed_s, t_req_s, service_cv, q) -> dict[str, jax.Array]:
    """`sweep.models.dynamic.batcher.batcher_point` (jit + vmap) at every padded point: the answers
    keep the padding (`lanes(n)` long, still on the device, so that a caller can time the
    call); the caller takes the first n."""
    n = np.broadcast(lam, b_max, t_max_s, t_fixed_s, t_req_s, service_cv, q).size
    return _BATCHER(*(jnp.asarray(a) for a in _padded(n, lam, b_max, t_max_s, t_fixed_s, t_req_s, service_cv, q)))
