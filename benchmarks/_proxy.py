"""The seed's window proxy at explicit points (SI units in and out), through the engine's
own evaluation of the gaussian model: what the benchmarks compare the other models with."""

from __future__ import annotations

import numpy as np

from sweep.engine.evaluate import evaluate_points
from sweep.models import get_model


def window_proxy(lam, b_max, t_max_s, t_fixed_s, t_req_s, service_cv=0.0, q=0.99) -> dict[str, np.ndarray]:
    """E[T], the gaussian and exponential percentiles (s), rho and E[B] of the proxy."""
    params = dict(
        arrival_rps=lam, replicas=1.0, batch_size=b_max, batch_window_ms=np.asarray(t_max_s) * 1e3,
        t_fixed_ms=np.asarray(t_fixed_s) * 1e3, t_req_ms=np.asarray(t_req_s) * 1e3, service_cv=service_cv,
        percentile=q, slo_ms=1e3, rho_target=0.75, rho_max=0.85, rho_min=0.5, seq_len=1.0, mean_seq_len=1.0,
        kv_bytes_per_elem=1.0, weight_bytes_per_param=1.0, gpus_per_replica=1.0, workers=1.0,
        queue_capacity=np.inf,
    )
    figures = dict(kv_elems_per_token=1.0, n_params=0.0, active_params=0.0, hbm_bytes=1e12, hbm_bw=1e12,
                   flops=1e15, usd_per_gpu_hour=1.0)
    static = dict(windowed=True, full=True, paged=False, service_source="given", mean_follows=False,
                  block_tokens=16.0, reserve_fraction=0.0)
    r = evaluate_points(get_model("dynamic", "gaussian"), params, figures, static=static)
    return {"e_resp": r["e_resp_ms"] / 1e3, "p_gauss": r["p_gauss_ms"] / 1e3, "p_exp": r["p_exp_ms"] / 1e3,
            "rho": r["rho"], "mean_batch": r["mean_batch"]}
