"""Quick answers for one model on one GPU (`sweep kv`), through the same kernels as a grid.

`kv_answer` builds one `kernels.Point` and calls `kernels.kv_memory` twice (contiguous and
paged), so the command line, the grid run and the tests share one set of formulas (SPEC 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from sweep import kernels
from sweep.catalog import Gpu, Model

jax.config.update("jax_enable_x64", True)


@dataclass(frozen=True)
class Allocation:
    """One allocation scheme's reservation and the batch it allows."""

    s_alloc_tokens: float
    kv_gb_per_req: float
    kv_waste_frac: float
    b_mem_max: int


@dataclass(frozen=True)
class KvAnswer:
    model: str
    gpu: str
    gpus: int
    seq_len: int
    mean_seq_len: float
    kv_bytes_per_elem: float
    weight_bytes_per_param: float
    block_tokens: int
    reserve_fraction: float
    kv_bytes_per_token: float
    weights_gb: float
    usable_gb: float
    free_gb: float
    weights_fit: bool
    contiguous: Allocation
    paged: Allocation


def kv_answer(
    model: Model,
    gpu: Gpu,
    *,
    gpus: int,
    seq_len: int,
    mean_seq_len: float | None = None,
    kv_bytes_per_elem: float = 2.0,
    weight_bytes_per_param: float = 2.0,
    block_tokens: int = 16,
    reserve_fraction: float = 0.0,
) -> KvAnswer:
    """KV-cache memory of `model` on `gpus` x `gpu` (SPEC 5), both allocation schemes."""
    mean = float(seq_len if mean_seq_len is None else mean_seq_len)
    kv_tok = model.kv_bytes_per_token(kv_bytes_per_elem)
    weights = model.weights_bytes(weight_bytes_per_param)
    usable = gpus * gpu.hbm_bytes * (1.0 - reserve_fraction)
    f = lambda x: jnp.asarray(float(x), dtype=jnp.float64)  # noqa: E731
    point = kernels.Point(
        lam=f(1.0), b_max=f(1.0), t_max=f(jnp.inf), t_fixed=f(0.0), t_req=f(0.0),
        service_cv=f(0.0), q=f(0.99), slo=f(1.0), rho_target=f(0.75), rho_max=f(0.85),
        rho_min=f(0.5), kv_bytes_per_token=f(kv_tok), seq_len=f(seq_len), mean_seq_len=f(mean),
        block_tokens=f(block_tokens), weights_bytes=f(weights), usable_hbm_bytes=f(usable),
    )
    allocs = {}
    mem = None
    for paged in (False, True):
        mem = kernels.kv_memory(point, paged=paged)
        allocs[paged] = Allocation(
            s_alloc_tokens=float(mem.s_alloc),
            kv_gb_per_req=float(mem.kv_bytes_per_req) * 1e-9,
            kv_waste_frac=float(mem.kv_waste_frac),
            b_mem_max=int(mem.b_mem_max),
        )
    assert mem is not None
    return KvAnswer(
        model=model.name, gpu=gpu.name, gpus=gpus, seq_len=seq_len, mean_seq_len=mean,
        kv_bytes_per_elem=kv_bytes_per_elem, weight_bytes_per_param=weight_bytes_per_param,
        block_tokens=block_tokens, reserve_fraction=reserve_fraction,
        kv_bytes_per_token=kv_tok, weights_gb=weights * 1e-9, usable_gb=usable * 1e-9,
        free_gb=float(mem.free_bytes) * 1e-9, weights_fit=bool(mem.weights_fit),
        contiguous=allocs[False], paged=allocs[True],
    )
