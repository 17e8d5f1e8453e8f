"""Roofline service times in the engine (SPEC 13 as the default when no times are given):
the dynamic batcher's line and continuous serving's step coefficients, each against the
SPEC 13 step written out by hand here (independently of `sweep.models.shared.roofline`), and the
engine's estimate against published figures.

The SPEC 13 step, per replica of g GPUs (docs/roofline.md):

    T_step    = max(T_mem, T_compute) + T_comm + 1 ms
    T_mem     = (dense weight bytes + expert bytes * E[touched] / n_experts + KV bytes) / (g bw eta_bw)
    T_compute = (2 active_params n_tok + attention FLOPs) / (g F eta_flops)
    T_comm    = (g > 1) 2 n_layers (alpha + 2 (g-1)/g n_tok hidden 2 B / link_bw)

with eta_bw = 0.7 and eta_flops = 0.6 unless the grid or a calibrated GPU entry says
otherwise. The dynamic batcher's T_svc(B) = T_fixed + t_req B is the secant of T_step through
B = 1 and the point's batch size; continuous serving's T = t_fixed + t_token n_tok + t_ctx n_ctx
passes through the steps a sequence sees at the running count the load produces (its decode step,
and its prefill chunk beside the other decoders; a lone request's at light load).
"""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pyarrow.dataset as ds
import pytest
from _spec13 import decode_ms, spec13_step

from sweep import grid as spec
from sweep.catalog import packaged_catalog, packaged_efficiencies
from sweep.engine import Evaluator
from sweep.models.base import SERVICE_SOURCES
from sweep.runner import run_grid


def _columns(text: str) -> dict[str, np.ndarray]:
    g = spec.build(tomllib.loads(text), source="<test>", text=text)
    assert g.service_source == "roofline"
    ev = Evaluator(g)
    parts = [ev.chunk(i).columns for i in range(ev.n_chunks)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


ROOF = """
name = "roof"
[grid]
arrival_rps = 10.0
batch_size = [1, 16, 64]
seq_len = 4096
mean_seq_len = 2000
model = "llama-3.1-70b"
gpu = "h100-sxm"
gpus_per_replica = [1, 2, 4, 8]
slo_ms = 1000.0
{extra}
"""


def _cell(model: str, gpu: str, g: int, step: str = "decode") -> dict[str, float]:
    """The efficiencies and overhead the engine gives a roofline point's `step` ("decode":
    decode tokens only; "prompt": a step that carries prompt tokens) from its cell of
    sweep/catalog/efficiency.toml."""
    cat = packaged_catalog()
    e = packaged_efficiencies().lookup(cat.model(model), cat.gpu(gpu), g)
    return {"eta_bw": e.eta_bw, "eta_flops": e.eta_flops,
            "t_overhead_s": e.t_decode_overhead_s if step == "decode" else e.t_overhead_s}


def test_dynamic_line_is_the_spec13_step_at_one_and_at_the_batch():
    """Llama 3.1 70B on H100 SXM, bf16, S_mean 2000, one token a request: T_svc(1) and
    T_svc(B) are SPEC 13's decode steps. By hand at g = 1, B = 1:
        T_mem = (141,107,412,992 + 2001 x 327,680) B / (3.35e12 x 0.7) = 60.4533 ms
        T_compute = (2 x 70.55e9 + 4 x 80 x 8192 x 2000) / (989.5e12 x 0.6) = 0.2465 ms
        T_step = 60.4533 + 1 = 61.4533 ms
    """
    c = _columns(ROOF.format(extra=""))
    assert decode_ms("llama-3.1-70b", "h100-sxm", 1, 1, 2000) == pytest.approx(61.4533, abs=1e-4)
    for i in range(len(c["batch_size"])):
        g, b = int(c["gpus_per_replica"][i]), float(c["batch_size"][i])
        kw = _cell("llama-3.1-70b", "h100-sxm", g)  # the point's cell of the efficiency table
        assert (c["eta_bw"][i], c["eta_flops"][i]) == (kw["eta_bw"], kw["eta_flops"])
        one = decode_ms("llama-3.1-70b", "h100-sxm", g, 1, 2000, **kw)
        assert c["t_fixed_ms"][i] + c["t_req_ms"][i] == pytest.approx(one, rel=1e-12)
        assert c["t_svc_ms"][i] == pytest.approx(decode_ms("llama-3.1-70b", "h100-sxm", g, b, 2000, **kw), rel=1e-12)
        if b > 1:
            assert c["t_req_ms"][i] == pytest.approx(
                (decode_ms("llama-3.1-70b", "h100-sxm", g, b, 2000, **kw) - one) / (b - 1), rel=1e-12)
    assert set(c["service_source"]) == {SERVICE_SOURCES.index("roofline")}


def test_mixture_of_experts_reads_the_experts_its_tokens_touch():
    """Mixtral 8x7B (8 experts, top 2) on 2 H100: a batch-1 decode reads the dense weights and
    2 of 8 experts; at B = 16 all but 8 (6/8)^16 = 0.080 experts."""
    c = _columns(ROOF.format(extra="").replace('"llama-3.1-70b"', '"mixtral-8x7b"')
                 .replace("[1, 2, 4, 8]", "2"))
    m = packaged_catalog().model("mixtral-8x7b")
    kw = _cell("mixtral-8x7b", "h100-sxm", 2)
    for i in range(len(c["batch_size"])):
        b = float(c["batch_size"][i])
        assert c["t_svc_ms"][i] == pytest.approx(decode_ms("mixtral-8x7b", "h100-sxm", 2, b, 2000, **kw), rel=1e-12)
    one = decode_ms("mixtral-8x7b", "h100-sxm", 2, 1, 2000)  # at the global defaults, as by hand
    kv = 2001 * m.kv_bytes_per_token(2)
    by_hand = ((m.dense_params * 2 + m.expert_params * 2 * 2 / 8 + kv) / (2 * 3.35e12 * 0.7)
               + 2 * m.n_layers * (1e-5 + 2 * 0.5 * m.hidden * 2 / 450e9) + 1e-3) * 1e3
    assert one == pytest.approx(by_hand, rel=1e-12)
    assert c["t_fixed_ms"][0] + c["t_req_ms"][0] == pytest.approx(
        decode_ms("mixtral-8x7b", "h100-sxm", 2, 1, 2000, **kw), rel=1e-12)


def test_every_row_of_a_roofline_run_says_roofline(tmp_path):
    text = ROOF.format(extra="eta_bw = [0.6, 0.8]")
    g = spec.build(tomllib.loads(text), source="<test>", text=text)
    result = run_grid(g, tmp_path / "out")
    assert result.manifest["service_source"] == "roofline"
    t = ds.dataset(tmp_path / "out" / "points").to_table()
    assert t.num_rows == g.n_points == 24
    assert set(t.column("service_source").to_pylist()) == {"roofline"}
    assert set(t.column("eta_bw").to_pylist()) == {0.6, 0.8}


def test_larger_efficiencies_never_slow_a_step():
    c = _columns(ROOF.format(extra="eta_bw = [0.4, 0.6, 0.8, 1.0]\neta_flops = [0.25, 0.5, 1.0]"))
    for vary, other in (("eta_bw", "eta_flops"), ("eta_flops", "eta_bw")):
        groups: dict[tuple, list[int]] = {}
        for i in range(len(c["t_svc_ms"])):
            groups.setdefault((c["gpus_per_replica"][i], c[other][i], c["batch_size"][i]), []).append(i)
        for idx in groups.values():
            order = np.argsort(c[vary][idx])
            assert (np.diff(c["t_svc_ms"][idx][order]) <= 0).all()
    # memory-bound decode: a larger eta_bw is strictly faster
    small = (c["batch_size"] == 1) & (c["eta_flops"] == 0.5) & (c["gpus_per_replica"] == 1)
    assert (np.diff(c["t_svc_ms"][small][np.argsort(c["eta_bw"][small])]) < 0).all()


def test_dynamic_estimate_against_published_decode_latencies():
    """Published: NVIDIA NIM LLM benchmarking guide, "Performance", Llama-3.3-70b-instruct,
    NIM 1.8.0, "2 x H100 80G", "fp8 TP2", concurrency 1 (every decode step is a batch of
    B = 1): 500 input / 2000 output tokens ITL 18.91 ms; 5000 input / 500 output ITL 18.58 ms.
    https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance (tests/data/gpu_measurements.csv).
    Context S_mean = input + output / 2 (1500 and 5250); fp8 weights and KV.

    The seed's linear roofline put these at 13.35 / 13.47 ms (1.4x too fast: no collectives,
    no per-step overhead). SPEC 13 must land within 20%.
    """
    text = """
name = "nim"
[grid]
arrival_rps = 1.0
batch_size = 1
seq_len = 5250
mean_seq_len = [1500, 5250]
model = "llama-3.3-70b"
gpu = "h100-sxm"
gpus_per_replica = 2
weight_bytes_per_param = "fp8"
kv_bytes_per_elem = "fp8"
slo_ms = 1000.0
"""
    c = _columns(text)
    step = dict(zip(c["mean_seq_len"].tolist(), c["t_svc_ms"].tolist()))
    for s, itl in {1500.0: 18.91, 5250.0: 18.58}.items():
        assert step[s] == pytest.approx(decode_ms("llama-3.3-70b", "h100-sxm", 2, 1, s, kv_elem_bytes=1.0,
                                                  weight_bytes=1.0, **_cell("llama-3.3-70b", "h100-sxm", 2)),
                                        rel=1e-12)
        assert abs(step[s] / itl - 1) < 0.20, (s, step[s], itl)


CONT = """
name = "cb-roof"
[options]
serving = "continuous"
[grid]
arrival_rps = 2.0
model = "llama-3.1-8b"
gpu = ["h100-sxm", "a100-80gb"]
gpus_per_replica = [1, 4]
prompt_tokens = 1000
output_tokens = 200
batch_size = 64
max_batched_tokens = [512, 4096]
ttft_slo_ms = 2000
tpot_slo_ms = 100
"""


def test_continuous_line_passes_through_the_steps_at_the_operating_running_count():
    """t_ctx = KV bytes of one token / (g bw eta_bw); with r the running count a sequence sees
    at the point's load (`roofline.operating_running`, 2 requests/s here), the line is exact
    at the decode step of r sequences (P + O/2 = 1100 cached each) and at the step where one
    of them prefills its chunk min(P, budget) (512 or 1000 tokens) beside r - 1 decoders."""
    import jax.numpy as jnp

    from sweep.engine.evaluate import gpu_figures, model_figures
    from sweep.models.shared import roofline as rl

    c = _columns(CONT)
    cat = packaged_catalog()
    m = cat.model("llama-3.1-8b")
    kv_tok = m.kv_bytes_per_token(2)
    width = m.n_heads * m.head_dim
    for i in range(len(c["gpu"])):
        gpu, g, budget = (("h100-sxm", "a100-80gb")[c["gpu"][i]], int(c["gpus_per_replica"][i]),
                          float(c["max_batched_tokens"][i]))
        tf, tt, tc = c["t_step_fixed_ms"][i], c["t_token_ms"][i], c["t_ctx_ms"][i]
        kw, kw_prompt = _cell("llama-3.1-8b", gpu, g), _cell("llama-3.1-8b", gpu, g, "prompt")
        bw = g * cat.gpu(gpu).hbm_bandwidth_bytes_per_s * kw["eta_bw"]
        assert tc == pytest.approx(kv_tok / bw * 1e3, rel=1e-12)
        x = {k: jnp.asarray(float(v)) for k, v in {**model_figures(m), **gpu_figures(cat.gpu(gpu))}.items()}
        x.update(gpus_per_replica=jnp.asarray(float(g)), weight_bytes_per_param=jnp.asarray(2.0),
                 gpu_t_overhead=jnp.asarray(kw_prompt["t_overhead_s"]),
                 gpu_t_decode_overhead=jnp.asarray(kw["t_overhead_s"]))
        r = float(rl.operating_running(rl.replica_params(x, kw["eta_bw"], kw["eta_flops"]), 2.0, 1000.0, 200.0,
                                       budget, 64.0, float(c["kv_capacity_tokens"][i]), 1.0, kv_tok, width,
                                       m.n_layers))
        assert 1.5 < r < 64  # two requests/s keep more than a lone one running
        assert tf + tt * r + 1100 * r * tc == pytest.approx(decode_ms("llama-3.1-8b", gpu, g, r, 1100, **kw),
                                                            rel=1e-12)
        chunk = min(1000.0, budget)
        n_tok, kv = r - 1 + chunk, ((r - 1) * 1101 + chunk) * kv_tok
        attn = 4 * m.n_layers * width * (r - 1) * 1100 + 2 * m.n_layers * width * chunk * chunk
        step = spec13_step("llama-3.1-8b", gpu, g, n_tok, kv, attn, **kw_prompt)
        assert tf + tt * n_tok + tc * ((r - 1) * 1100 + chunk) == pytest.approx(step, rel=1e-12)
        assert tf >= 0 and tt >= 0 and math.isfinite(tf + tt + tc)
