"""The memory knob of each engine, chosen so the engine's KV cache holds what the model planned.

The continuous model splits one replica's HBM (docs/continuous.md, `kv_capacity_tokens`):

    free = g H (1 - r) - W,     C = floor(free / k / b) b

with `g` GPUs of `H` bytes each (`gpus_per_replica`, the catalog's `hbm_bytes`), `r` the
`[options] reserve_fraction`, `W` the weights (`n_params x weight_bytes_per_param`), `k` the
KV bytes of one token over all layers and `b` the block (`block_tokens` when paged, else 1).
So per GPU the plan is `W/g` of weights, `C k s` of KV and `A = r H` for everything else the
engine needs: activations, CUDA graphs, communication buffers, the runtime. `s` is the share of
one token's KV a GPU holds: `1/g` where tensor parallelism shards the KV heads, `1/n_kv_heads`
where `g` exceeds the KV heads (each GPU then keeps a whole head), 1 for a latent (MLA) cache,
which every rank keeps whole. The model itself assumes `s = 1/g`; with any other share the
engine holds fewer tokens than modelled, and the knob says so (`fits`).

Each engine sizes its cache from a fraction of memory, read the way its source does:

* vLLM `--gpu-memory-utilization U`: the share of the GPU the instance may use for weights,
  activations and KV (vllm/config/cache.py; vllm/v1/worker/gpu_worker.py: KV = U x total
  memory - non-KV memory - CUDA graphs). `U = (W/g + C k s + A) / H`.
* SGLang `--mem-fraction-static f`: the share for the static pool, weights and KV
  (sglang/srt/arg_groups/fields/schedule.py); activations live outside it. `f = (W/g + C k s) / H`.
* TensorRT-LLM `--kv_cache_free_gpu_memory_fraction F`: the share of the memory left free after
  the weights and the engine's buffers (tensorrt_llm/commands/serve.py). `F = C k s / (H - W/g - A)`.

With `A = r H` (the model's reserve taken as the engine's working memory) each knob gives back
`C` exactly (`tokens_from_*`, the closed-form inverses; tests/test_deploy.py). vLLM's `U` is
then the whole GPU, which vLLM refuses; its launch command caps it at `VLLM_MAX_UTILIZATION`
and says what that holds. `r = 0` leaves the
engine no working memory: vLLM and TensorRT-LLM then find `A_real` less KV than modelled (the
memory they measure at start-up), which the deployment says. Each engine also has a flag that
pins the KV exactly, whatever its working memory: vLLM `--kv-cache-memory-bytes` (per GPU),
SGLang `--max-total-tokens`, TensorRT-LLM `kv_cache_config.max_tokens`; the deployment prints it
as the alternative command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Decimals the fraction knobs are printed with (rounded up, so the engine gets at least C).
KNOB_DECIMALS = 4
#: The largest `--gpu-memory-utilization` the launch command uses. vLLM refuses to start when
#: the share it is given exceeds the memory free at start-up ("Free memory on device ... on
#: startup is less than desired GPU memory utilization"), and the CUDA context alone is not
#: free; with the reserve as the engine's working memory the plan's U is 1 (the whole GPU).
VLLM_MAX_UTILIZATION = 0.95


@dataclass(frozen=True)
class Memory:
    """One replica's memory plan, per GPU, in bytes (decimal, as the catalog's `hbm_bytes`)."""

    hbm_bytes: float  # H: one GPU's memory
    weights_bytes: float  # W: the whole model's weights
    kv_bytes_per_token: float  # k: one token's KV over all layers, at the KV dtype
    kv_capacity_tokens: float  # C: what the model planned (the row's kv_capacity_tokens)
    gpus: int  # g: tensor-parallel GPUs of the replica
    reserve_fraction: float  # r: the model's reserve
    block_tokens: float  # b: tokens per KV block (1 when contiguous)
    kv_share: float  # s: share of one token's KV each GPU holds

    @property
    def weights_per_gpu(self) -> float:
        return self.weights_bytes / self.gpus

    @property
    def kv_per_gpu(self) -> float:
        """C k s: the KV bytes each GPU must hold for the modelled capacity."""
        return self.kv_capacity_tokens * self.kv_bytes_per_token * self.kv_share

    @property
    def work_per_gpu(self) -> float:
        """A = r H: the engine's working memory (activations, CUDA graphs, buffers) in the plan."""
        return self.reserve_fraction * self.hbm_bytes

    @property
    def fits(self) -> bool:
        """The engine's KV layout holds C tokens in what the plan leaves per GPU."""
        return self.weights_per_gpu + self.kv_per_gpu + self.work_per_gpu <= self.hbm_bytes * (1.0 + 1e-12)

    @property
    def tokens_that_fit(self) -> float:
        """The KV tokens the engine's layout holds in the plan's memory (C when `fits`)."""
        room = self.hbm_bytes - self.weights_per_gpu - self.work_per_gpu
        return self._blocks(max(room, 0.0) / (self.kv_bytes_per_token * self.kv_share))

    def _blocks(self, tokens: float) -> float:
        # 1e-9 relative: bytes computed back from a fraction carry float rounding
        return math.floor(tokens * (1.0 + 1e-9) / self.block_tokens) * self.block_tokens

    # -- the knobs --------------------------------------------------------------------------

    def vllm_utilization(self) -> float:
        """U = (W/g + C k s + A) / H."""
        return (self.weights_per_gpu + self.kv_per_gpu + self.work_per_gpu) / self.hbm_bytes

    def sglang_mem_fraction(self) -> float:
        """f = (W/g + C k s) / H."""
        return (self.weights_per_gpu + self.kv_per_gpu) / self.hbm_bytes

    def trtllm_free_fraction(self) -> float:
        """F = C k s / (H - W/g - A); +inf where nothing is left after weights and working memory."""
        room = self.hbm_bytes - self.weights_per_gpu - self.work_per_gpu
        return self.kv_per_gpu / room if room > 0 else math.inf

    # -- what an engine makes of a knob (the closed-form inverses) -------------------------

    def tokens_from_vllm(self, utilization: float) -> float:
        """KV tokens vLLM allocates at `utilization`, its working memory being A."""
        kv = utilization * self.hbm_bytes - self.weights_per_gpu - self.work_per_gpu
        return self._blocks(max(kv, 0.0) / (self.kv_bytes_per_token * self.kv_share))

    def tokens_from_sglang(self, fraction: float) -> float:
        """KV tokens in SGLang's static pool at `fraction`."""
        kv = fraction * self.hbm_bytes - self.weights_per_gpu
        return self._blocks(max(kv, 0.0) / (self.kv_bytes_per_token * self.kv_share))

    def tokens_from_trtllm(self, fraction: float) -> float:
        """KV tokens TensorRT-LLM allocates from `fraction` of the memory left free."""
        kv = fraction * (self.hbm_bytes - self.weights_per_gpu - self.work_per_gpu)
        return self._blocks(max(kv, 0.0) / (self.kv_bytes_per_token * self.kv_share))

    # -- exact pins ---------------------------------------------------------------------------

    def kv_bytes_pin(self) -> int:
        """vLLM's `--kv-cache-memory-bytes`: C k s per GPU, rounded up to a byte."""
        return math.ceil(self.kv_per_gpu)


def knob_text(value: float) -> str:
    """A fraction knob as printed: rounded up at `KNOB_DECIMALS`, at most 1."""
    scale = 10**KNOB_DECIMALS
    shown = min(math.ceil(value * scale - 1e-9) / scale, 1.0)
    return f"{shown:.{KNOB_DECIMALS}f}"


def kv_share(attention: str, n_kv_heads: int, gpus: int) -> float:
    """s: the share of one token's KV a GPU holds under tensor parallelism of `gpus`.

    Heads are split across ranks (vLLM, SGLang and TensorRT-LLM alike); with more ranks than KV
    heads each rank keeps one whole head (replicas of it), and a latent (MLA) cache is one
    vector per token that every rank keeps whole."""
    if attention == "latent":
        return 1.0
    return max(1.0 / gpus, 1.0 / n_kv_heads)
