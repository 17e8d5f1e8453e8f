"""Evaluate the dynamic-batching models at explicit points (no grid file), for model tests.

The defaults are the seed's worked example: GPT-3 175B (96 layers, d = 12288, fp16) on
8 x A100 80 GB at 100 requests/s with T_svc(B) = 50 + 0.5 B ms (seed eq. 1, Table 1).
"""

from __future__ import annotations

import math

import numpy as np

from sweep.engine.evaluate import evaluate_points
from sweep.models import get_model

SEED_PARAMS = dict(
    arrival_rps=100.0, replicas=1.0, batch_size=8.0, batch_window_ms=math.inf, t_fixed_ms=50.0,
    t_req_ms=0.5, service_cv=0.0, percentile=0.99, slo_ms=200.0, rho_target=0.75, rho_max=0.85,
    rho_min=0.5, seq_len=2048.0, mean_seq_len=2048.0, kv_bytes_per_elem=2.0,
    weight_bytes_per_param=2.0, gpus_per_replica=8.0, workers=1.0, queue_capacity=math.inf,
    eta_bw=0.8, eta_flops=0.5, tokens_per_request=1.0,
)
#: 2 x 96 layers x 12288 elements per token; 175e9 parameters (dense); 80 GB of HBM per GPU
#: (an A100 80GB: no FP8, 300 GB/s NVLink one way, 10 us all-reduce; SPEC 13's 0.7 / 0.6).
SEED_FIGURES = dict(
    kv_elems_per_token=2 * 96 * 12288.0, n_params=175e9, active_params=175e9, hbm_bytes=80e9,
    hbm_bw=2.039e12, flops=312e12, usd_per_gpu_hour=1.0, dense_params=175e9, expert_params=0.0,
    n_experts=0.0, experts_per_token=0.0, n_layers=96.0, hidden=12288.0, attn_width=12288.0,
    fp8_flops=0.0, link_bw=300e9, alpha=10e-6, gpu_eta_bw=0.7, gpu_eta_flops=0.6, gpu_t_overhead=1e-3,
    gpu_t_decode_overhead=1e-3,
)


def dynamic(latency_model: str = "gaussian", *, windowed: bool = True, full: bool = True, paged: bool = False,
            service_source: str = "given", block_tokens: float = 16.0, reserve_fraction: float = 0.0,
            **kw: object) -> dict[str, np.ndarray]:
    """Every column of a dynamic model at the seed's point with `kw` overriding params or
    figures (scalars or equal-length arrays)."""
    params = {k: kw.pop(k, v) for k, v in SEED_PARAMS.items()}
    figures = {k: kw.pop(k, v) for k, v in SEED_FIGURES.items()}
    if kw:
        raise TypeError(f"unknown point inputs {sorted(kw)}")
    static = dict(windowed=windowed, full=full, paged=paged, service_source=service_source,
                  mean_follows=False, block_tokens=block_tokens, reserve_fraction=reserve_fraction)
    return evaluate_points(get_model("dynamic", latency_model), params, figures, static=static)
