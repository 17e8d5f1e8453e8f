"""SPEC 13's step time written out by hand for tests, independently of
`sweep.models.shared.roofline` (the formula is in docs/roofline.md)."""

from __future__ import annotations

from sweep.catalog import packaged_catalog


def spec13_step(model: str, gpu: str, g: int, n_tok: float, kv_bytes: float, attn_flops: float,
                weight_bytes: float = 2.0, eta_bw: float = 0.7, eta_flops: float = 0.6,
                t_overhead_s: float = 1e-3) -> float:
    """SPEC 13's step time in ms, written out from the module docstring's formula (the
    global defaults unless the efficiencies and overhead are given, e.g. a point's cell)."""
    cat = packaged_catalog()
    m, d = cat.model(model), cat.gpu(gpu)
    flops = d.fp8_dense_flops if weight_bytes <= 1.0 and d.fp8_dense_flops else d.bf16_dense_flops
    touched = m.n_experts * (1 - (1 - m.experts_per_token / m.n_experts) ** n_tok) if m.n_experts else 0.0
    expert_read = m.expert_params * weight_bytes * touched / m.n_experts if m.n_experts else 0.0
    t_mem = (m.dense_params * weight_bytes + expert_read + kv_bytes) / (g * d.hbm_bandwidth_bytes_per_s * eta_bw)
    t_compute = (2 * m.active_params * n_tok + attn_flops) / (g * flops * eta_flops)
    ring = 2 * (g - 1) / g * n_tok * m.hidden * 2.0 / d.interconnect_bytes_per_s
    t_comm = 2 * m.n_layers * (d.collective_latency_s + ring) if g > 1 else 0.0
    return (max(t_mem, t_compute) + t_comm + t_overhead_s) * 1e3


def decode_ms(model: str, gpu: str, g: int, batch: float, context: float, kv_elem_bytes: float = 2.0,
              **kw) -> float:
    """A decode step of `batch` requests, one new token each over `context` cached tokens."""
    m = packaged_catalog().model(model)
    kv_tok = m.kv_bytes_per_token(kv_elem_bytes)
    attn = 4 * m.n_layers * m.n_heads * m.head_dim * batch * context
    return spec13_step(model, gpu, g, batch, batch * (context + 1) * kv_tok, attn, **kw)
