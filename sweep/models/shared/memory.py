"""KV-cache memory (seed eq. 3, SPEC 5): one point's reservation and the batch that fits.

`kv_memory` is the per-point function every serving model calls; `kv_answer` is the quick
answer for one model on one GPU (`sweep kv`), through the same function, so the command
line, a grid run and the tests share one set of formulas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from sweep._lazy import lazy_module
from sweep.catalog import Gpu, Model

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array
else:
    jnp = lazy_module("jax.numpy")


class Memory(NamedTuple):
    s_alloc: Array  # tokens reserved per request
    kv_bytes_per_req: Array
    kv_waste_frac: Array
    free_bytes: Array
    weights_fit: Array
    b_mem_max: Array
    mem_ok: Array


def kv_memory(
    kv_bytes_per_token: Array,
    seq_len: Array,
    mean_seq_len: Array,
    block_tokens: Array | float,
    weights_bytes: Array,
    usable_hbm_bytes: Array,
    b_max: Array,
    *,
    paged: bool,
) -> Memory:
    """KV-cache memory (seed eq. 3, SPEC 5), float64 scalars, bytes and tokens.

    Contiguous allocation reserves S_max (`seq_len`) per request; paged reserves the mean
    length rounded up to whole blocks. B_mem_max = floor(free / per-request reservation),
    0 when the weights alone do not fit; `mem_ok` when the batch cap `b_max` fits too.
    `usable_hbm_bytes` = gpus_per_replica x HBM x (1 - reserve_fraction).
    """
    if paged:
        s_alloc = jnp.ceil(mean_seq_len / block_tokens) * block_tokens
    else:
        s_alloc = seq_len
    per_req = kv_bytes_per_token * s_alloc
    free = usable_hbm_bytes - weights_bytes
    fit = free >= 0.0
    b_mem = jnp.where(fit, jnp.floor(jnp.where(fit, free, 0.0) / per_req), 0.0)
    return Memory(
        s_alloc=s_alloc,
        kv_bytes_per_req=per_req,
        kv_waste_frac=1.0 - mean_seq_len / s_alloc,
        free_bytes=free,
        weights_fit=fit,
        b_mem_max=b_mem,
        mem_ok=fit & (b_max <= b_mem),
    )


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
    allocs = {}
    mem = None
    for paged in (False, True):
        mem = kv_memory(f(kv_tok), f(seq_len), f(mean), f(block_tokens), f(weights), f(usable), f(1.0), paged=paged)
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
