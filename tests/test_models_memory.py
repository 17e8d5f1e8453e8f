"""KV-cache memory (SPEC 5) as properties (Hypothesis), and through real grid runs over every
packaged model x GPU x dtype.

The properties run `sweep.models.shared.memory.kv_answer`, which calls `kv_memory` (the grid's own
kernel) for contiguous and paged allocation.
"""

from __future__ import annotations

import tomllib

import numpy as np
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweep import grid as spec
from sweep.catalog import packaged_catalog
from sweep.models.shared.memory import kv_answer
from sweep.runner import run_grid

CAT = packaged_catalog()
MODELS = sorted(CAT.models)
GPUS = sorted(CAT.gpus)
FAST = settings(max_examples=40, deadline=None)

model_st = st.sampled_from(MODELS).map(CAT.model)
gpu_st = st.sampled_from(GPUS).map(CAT.gpu)
dtype_st = st.sampled_from([2.0, 1.0, 0.5])
seq_st = st.integers(min_value=1, max_value=131_072)


def _ans(model, gpu, **kw):
    kw.setdefault("gpus", 8)
    return kv_answer(model, gpu, **kw)


@FAST
@given(model_st, gpu_st, seq_st, seq_st, dtype_st, dtype_st, st.integers(1, 8))
def test_memory_rises_with_seq_len(model, gpu, s1, s2, kv_dt, w_dt, gpus):
    lo, hi = sorted((s1, s2))
    a = _ans(model, gpu, gpus=gpus, seq_len=lo, kv_bytes_per_elem=kv_dt, weight_bytes_per_param=w_dt)
    b = _ans(model, gpu, gpus=gpus, seq_len=hi, kv_bytes_per_elem=kv_dt, weight_bytes_per_param=w_dt)
    assert a.contiguous.kv_gb_per_req <= b.contiguous.kv_gb_per_req
    assert a.paged.kv_gb_per_req <= b.paged.kv_gb_per_req
    assert a.contiguous.b_mem_max >= b.contiguous.b_mem_max
    if lo < hi:
        assert a.contiguous.kv_gb_per_req < b.contiguous.kv_gb_per_req


@FAST
@given(model_st, gpu_st, seq_st, dtype_st, dtype_st, st.integers(1, 8), st.integers(1, 4096), st.integers(1, 4096))
def test_memory_rises_with_batch(model, gpu, seq, kv_dt, w_dt, gpus, b1, b2):
    """A batch of B holds B reservations: memory rises with B, and b_mem_max is exactly the
    largest B whose reservations fit in the free memory."""
    a = _ans(model, gpu, gpus=gpus, seq_len=seq, kv_bytes_per_elem=kv_dt, weight_bytes_per_param=w_dt)
    per_req = a.contiguous.kv_gb_per_req
    lo, hi = sorted((b1, b2))
    assert lo * per_req <= hi * per_req and (lo == hi or lo * per_req < hi * per_req)
    b = a.contiguous.b_mem_max
    if a.weights_fit:
        assert b * per_req <= a.free_gb * (1 + 1e-12) and (b + 1) * per_req > a.free_gb * (1 - 1e-12)
    else:
        assert b == 0


@FAST
@given(model_st, gpu_st, seq_st, st.floats(0.01, 1.0), st.sampled_from([1, 8, 16, 32, 128, 256]),
       st.floats(0.0, 0.5), dtype_st)
def test_paged_never_reserves_more_than_contiguous(model, gpu, seq, share, block, reserve, kv_dt):
    """Paged reserves ceil(S_mean / block) blocks; contiguous reserves S_max. With S_mean <= S_max
    the paged reservation never exceeds S_max rounded up to whole blocks, so it exceeds S_max
    only by a partial block, and never when S_max is a whole number of blocks."""
    mean = max(1.0, share * seq)
    a = _ans(model, gpu, seq_len=seq, mean_seq_len=mean, block_tokens=block, reserve_fraction=reserve,
             kv_bytes_per_elem=kv_dt)
    whole_blocks = -(-seq // block) * block
    assert a.paged.s_alloc_tokens <= whole_blocks
    assert a.paged.s_alloc_tokens < seq + block
    if seq % block == 0:
        assert a.paged.s_alloc_tokens <= a.contiguous.s_alloc_tokens
        assert a.paged.kv_gb_per_req <= a.contiguous.kv_gb_per_req
        assert a.paged.b_mem_max >= a.contiguous.b_mem_max
    assert 0.0 <= a.paged.kv_waste_frac < 1.0 and 0.0 <= a.contiguous.kv_waste_frac < 1.0


@FAST
@given(model_st, gpu_st, seq_st, st.integers(1, 16), st.integers(1, 16), dtype_st, dtype_st, st.floats(0.0, 0.5))
def test_more_gpus_never_lower_b_mem_max(model, gpu, seq, g1, g2, kv_dt, w_dt, reserve):
    lo, hi = sorted((g1, g2))
    kw = dict(seq_len=seq, kv_bytes_per_elem=kv_dt, weight_bytes_per_param=w_dt, reserve_fraction=reserve)
    a, b = _ans(model, gpu, gpus=lo, **kw), _ans(model, gpu, gpus=hi, **kw)
    assert a.free_gb <= b.free_gb
    assert a.contiguous.b_mem_max <= b.contiguous.b_mem_max
    assert a.paged.b_mem_max <= b.paged.b_mem_max
    assert (not a.weights_fit) or b.weights_fit


# --------------------------------------------------------------------------- real grid runs

ALL = """
name = "all-entries"
[grid]
arrival_rps = 20.0
batch_size = [1, 64]
seq_len = 4096
mean_seq_len = 1000
model = {models}
gpu = {gpus}
gpus_per_replica = [1, 8]
weight_bytes_per_param = {weights}
kv_bytes_per_elem = {kv}
slo_ms = 500.0
[options]
kv_allocation = "{alloc}"
[output]
points = "all"
"""

MEMORY_COLUMNS = ("kv_gb_per_req", "kv_gb_at_cap", "kv_waste_frac", "weights_gb", "free_gb", "b_mem_max",
                  "t_fixed_ms", "t_req_ms", "t_svc_ms")


@pytest.mark.parametrize(
    "weights, kv, alloc",
    [
        ('["bf16", "fp8", "int4"]', '["bf16", "fp8"]', "contiguous"),
        ('["fp16", "int8"]', '["fp16", "int8", "int4"]', "paged"),
    ],
)
def test_every_packaged_model_gpu_dtype_gives_finite_memory(tmp_path, weights, kv, alloc):
    text = ALL.format(models=str(MODELS).replace("'", '"'), gpus=str(GPUS).replace("'", '"'),
                      weights=weights, kv=kv, alloc=alloc)
    g = spec.build(tomllib.loads(text), source="<test>", text=text)
    n = (len(MODELS) * len(GPUS) * 2 * 2 * len(tomllib.loads(f"w = {weights}")["w"])
         * len(tomllib.loads(f"k = {kv}")["k"]))
    assert g.n_points == n
    run_grid(g, tmp_path / "out")
    t = ds.dataset(tmp_path / "out" / "points").to_table()
    assert t.num_rows == n
    assert set(t.column("model").to_pylist()) == set(MODELS) and set(t.column("gpu").to_pylist()) == set(GPUS)
    for col in MEMORY_COLUMNS:
        x = t.column(col).to_numpy().astype(float)
        assert np.isfinite(x).all(), col
    assert (t.column("kv_gb_per_req").to_numpy() > 0).all()
    assert (t.column("b_mem_max").to_numpy() >= 0).all()
    fit = t.column("weights_fit").to_numpy(zero_copy_only=False)
    free = t.column("free_gb").to_numpy()
    assert ((free >= 0) == fit).all()
    assert (t.column("b_mem_max").to_numpy()[~fit] == 0).all()


def test_seed_memory_figures_from_the_packaged_entries(tmp_path, root):
    """Seed eq. 3 with the packaged gpt3-175b and a100-80gb: 9.66 GB per request at S = 2048,
    350 GB of weights, 8 x 80 - 350 = 290 GB free, at most 30 requests (contiguous)."""
    g = spec.load(root / "grids" / "seed-gpt3.toml")
    run_grid(g, tmp_path / "out")
    t = ds.dataset(tmp_path / "out" / "points").to_table().to_pydict()
    assert {round(x, 2) for x in t["kv_gb_per_req"]} == {9.66}
    assert set(t["weights_gb"]) == {350.0}
    assert {round(x, 9) for x in t["free_gb"]} == {290.0}
    assert set(t["b_mem_max"]) == {30}
    mem_ok = dict(zip(t["batch_size"], t["mem_ok"]))
    assert mem_ok[16] and not mem_ok[32]
