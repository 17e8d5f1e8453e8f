"""The launch command of one replica, per engine: the grid's knobs as each engine's flags.

Flag names are the engines' own, read from their source (tests/data/engine_flags.json holds the
flags and value types of vLLM 0.34.0 and SGLang 0.5.23 from their wheels, and TensorRT-LLM's
`trtllm-serve` from tensorrt_llm/commands/serve.py; tests/test_deploy.py checks every command
against them):

The mapping, knob by knob, is docs/deploy.md's table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from sweep.deploy.memory import VLLM_MAX_UTILIZATION, Memory, knob_text

ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")
_NAMES: Mapping[str, str] = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}

#: Where each engine's server listens by default (its own default port).
PORTS: Mapping[str, int] = {"vllm": 8000, "sglang": 30000, "trtllm": 8000}

#: KV bytes per element -> each engine's --kv-cache-dtype ("auto": the model's dtype).
KV_DTYPES: Mapping[str, Mapping[float, str]] = {
    "vllm": {2.0: "auto", 1.0: "fp8", 0.5: "nvfp4"},
    "sglang": {2.0: "auto", 1.0: "fp8_e4m3", 0.5: "nvfp4"},
    "trtllm": {2.0: "auto", 1.0: "fp8"},
}


@dataclass(frozen=True)
class Knobs:
    """What the launch command sets: the grid's point in engine terms."""

    model_id: str  # the checkpoint (catalog hf_id)
    gpus: int  # tensor parallel
    cap: int  # batch_size
    budget: int | None  # max_batched_tokens; None = no budget (whole prompts)
    kv_bytes_per_elem: float
    weight_bytes_per_param: float
    paged: bool
    block_tokens: int
    kv_capacity_tokens: int
    memory: Memory
    #: how the planned engine schedules ([options] scheduler_policy, scheduler_steps, kv_admission)
    scheduler_policy: str = "chunked"
    scheduler_steps: int = 1
    kv_admission: str = "reserve"


@dataclass
class Launch:
    """One engine's command: the argv, the exact-KV alternative, files it reads, notes."""

    argv: list[str]
    exact_argv: list[str]
    knob: tuple[str, str | None]  # (flag, printed value or None where the plan does not fit)
    files: dict[str, str] = field(default_factory=dict)  # name -> text, written beside launch.sh
    notes: list[str] = field(default_factory=list)


def launch(engine: str, k: Knobs) -> Launch:
    """The launch command of `engine` for one replica with knobs `k`."""
    return {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}[engine](k)


def _weights_note(engine: str, k: Knobs) -> tuple[list[str], list[str]]:
    """(flags, notes) for the weights' dtype."""
    w = k.weight_bytes_per_param
    if w >= 2.0:
        return [], [] if w == 2.0 else [f"weights at {w:g} bytes per parameter: serve the checkpoint in that dtype "
                                          "(e.g. --dtype float32 in vLLM); the memory knob assumes it"]
    if w == 1.0 and engine in ("vllm", "sglang"):
        note = (f"FP8 weights: {_NAMES[engine]} quantizes the bf16 checkpoint {k.model_id} on load "
                "(--quantization fp8); a pre-quantized FP8 checkpoint also works (then drop --quantization: the "
                "engine reads it from the checkpoint)")
        return ["--quantization", "fp8"], [note]
    return [], [f"weights at {w:g} bytes per parameter: serve a checkpoint quantized to that size (e.g. FP8 from "
                "NVIDIA ModelOpt, or AWQ/GPTQ for 4 bits) in place of " + k.model_id +
                "; the engine reads the method from the checkpoint, and the memory knob assumes that size"]


def _scheduler_notes(engine: str, k: Knobs) -> list[str]:
    """Where the engine cannot run the scheduler the plan modelled: one note each, saying what
    the engine does instead and how to plan for it."""
    name, notes = _NAMES[engine], []
    if k.scheduler_policy == "prefill_first" and engine != "sglang":
        notes.append(f"the plan has prompts in steps of their own that pause every decoder (scheduler_policy = "
                     f"\"prefill_first\"); {name} mixes prompt chunks into the decode steps: plan with "
                     "scheduler_policy = \"chunked\" for it, or deploy SGLang, whose default prefill_first is")
    if k.scheduler_steps > 1 and engine != "sglang":
        notes.append(f"the plan decides every {k.scheduler_steps} steps (scheduler_steps); {name} decides every step "
                     "(vLLM's --num-scheduler-steps left with its V0 engine): plan with scheduler_steps = 1 for it, "
                     "or deploy SGLang (--num-continuous-decode-steps)")
    if k.kv_admission == "reserve" and engine != "trtllm":
        notes.append(f"{name} takes KV blocks as tokens are cached and preempts a sequence when they run out, where "
                     "the plan reserved each request's prompt + output at admission (kv_admission = \"reserve\"): "
                     "plan with kv_admission = \"on_demand\" and latency_model = \"simulated\" to see its "
                     "concurrency and preemptions")
    return notes


def _kv_dtype(engine: str, k: Knobs) -> str | None:
    return KV_DTYPES[engine].get(float(k.kv_bytes_per_elem))


def _vllm(k: Knobs) -> Launch:
    argv = ["vllm", "serve", k.model_id, "--tensor-parallel-size", str(k.gpus), "--max-num-seqs", str(k.cap)]
    if k.budget is None:
        argv += ["--no-enable-chunked-prefill"]
    else:
        argv += ["--max-num-batched-tokens", str(k.budget), "--enable-chunked-prefill"]
    argv += ["--kv-cache-dtype", _kv_dtype("vllm", k) or "auto"]
    flags, notes = _weights_note("vllm", k)
    argv += flags
    notes += _scheduler_notes("vllm", k)
    if k.paged:
        argv += ["--block-size", str(k.block_tokens)]
    u = k.memory.vllm_utilization()
    value = knob_text(min(u, VLLM_MAX_UTILIZATION)) if k.memory.fits else None
    if value is not None and u > VLLM_MAX_UTILIZATION:
        m = k.memory
        notes.append(f"the plan fills the GPU (U = {u:.4f} of the catalog's {m.hbm_bytes * 1e-9:g} GB, its reserve "
                     "being the engine's working memory), and vLLM refuses a share above the memory free at "
                     f"start-up, so the command gives U = {VLLM_MAX_UTILIZATION:.2f}: on a device reporting exactly "
                     f"{m.hbm_bytes * 1e-9:g} GB that holds {m.tokens_from_vllm(VLLM_MAX_UTILIZATION):,.0f} of the "
                     f"modelled {m.kv_capacity_tokens:,.0f} KV tokens; a device that reports more (CUDA counts "
                     "binary gigabytes, datasheets decimal ones) holds them all; the exact-KV command pins them")
    exact = [*argv, "--kv-cache-memory-bytes", str(k.memory.kv_bytes_pin()), "--port", str(PORTS["vllm"])]
    if value is not None:
        argv += ["--gpu-memory-utilization", value]
    argv += ["--port", str(PORTS["vllm"])]
    return Launch(argv, exact, ("--gpu-memory-utilization", value), notes=notes)


def _sglang(k: Knobs) -> Launch:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", k.model_id, "--tp-size", str(k.gpus),
            "--max-running-requests", str(k.cap), "--schedule-policy", "fcfs"]
    if k.budget is None:
        argv += ["--chunked-prefill-size", "-1"]
    else:
        argv += ["--chunked-prefill-size", str(k.budget), "--max-prefill-tokens", str(k.budget)]
        if k.scheduler_policy == "chunked":  # without it SGLang runs prompt batches alone (prefill_first)
            argv += ["--enable-mixed-chunk"]
    if k.scheduler_steps > 1:
        argv += ["--num-continuous-decode-steps", str(k.scheduler_steps)]
    argv += ["--kv-cache-dtype", _kv_dtype("sglang", k) or "auto"]
    flags, notes = _weights_note("sglang", k)
    argv += flags
    notes += _scheduler_notes("sglang", k)
    if k.paged:
        argv += ["--page-size", str(k.block_tokens)]
    f = k.memory.sglang_mem_fraction()
    value = knob_text(f) if k.memory.fits else None
    exact = [*argv, "--max-total-tokens", str(k.kv_capacity_tokens), "--port", str(PORTS["sglang"])]
    if value is not None:
        argv += ["--mem-fraction-static", value]
    argv += ["--port", str(PORTS["sglang"])]
    return Launch(argv, exact, ("--mem-fraction-static", value), notes=notes)


def _trtllm(k: Knobs) -> Launch:
    argv = ["trtllm-serve", k.model_id, "--backend", "pytorch", "--tp_size", str(k.gpus),
            "--max_batch_size", str(k.cap)]
    notes: list[str] = []
    if k.budget is None:
        notes.append("max_batched_tokens = inf (whole prompts in one step): chunked prefill stays off, and a step "
                     "holds at most --max_num_tokens (the engine's default) tokens, so raise it above the longest "
                     "prompt")
    else:
        argv += ["--max_num_tokens", str(k.budget), "--enable_chunked_prefill"]
    _, wnotes = _weights_note("trtllm", k)
    notes += wnotes + _scheduler_notes("trtllm", k)
    dtype = _kv_dtype("trtllm", k)
    yaml = ["kv_cache_config:", f"  dtype: {dtype or 'auto'}"]
    if k.paged:
        yaml.append(f"  tokens_per_block: {k.block_tokens}")
    f = k.memory.trtllm_free_fraction()
    value = knob_text(f) if k.memory.fits and math.isfinite(f) else None
    # the YAML's kv_cache_config replaces the one the command line builds, so the fraction goes
    # in both; with max_tokens the engine takes the smaller of the two, so the exact file lets
    # the whole free memory count and max_tokens bind
    main = [*yaml, f"  free_gpu_memory_fraction: {value}"] if value is not None else yaml
    exact_yaml = [*yaml, f"  max_tokens: {k.kv_capacity_tokens}", "  free_gpu_memory_fraction: 1.0"]
    # reserve: blocks for prompt + output at admission (the engine's default, written out);
    # on demand: MAX_UTILIZATION admits on the blocks in hand and pauses requests when they run out
    policy = "GUARANTEED_NO_EVICT" if k.kv_admission == "reserve" else "MAX_UTILIZATION"
    scheduler = ["scheduler_config:", f"  capacity_scheduler_policy: {policy}"]
    main, exact_yaml = [*main, *scheduler], [*exact_yaml, *scheduler]
    files = {"trtllm-config.yaml": "\n".join(main) + "\n", "trtllm-config-exact.yaml": "\n".join(exact_yaml) + "\n"}
    exact = [*argv, "--extra_llm_api_options", "trtllm-config-exact.yaml", "--port", str(PORTS["trtllm"])]
    argv += ["--extra_llm_api_options", "trtllm-config.yaml"]
    if value is not None:
        argv += ["--kv_cache_free_gpu_memory_fraction", value]
    argv += ["--port", str(PORTS["trtllm"])]
    return Launch(argv, exact, ("--kv_cache_free_gpu_memory_fraction", value), files, notes)
