"""The SPEC 13 roofline: one forward step of an LLM server, in pure JAX, for ONE point.

    T_step    = max(T_mem, T_compute) + T_comm + t_overhead   (t_decode_overhead: decode tokens only)
                + t_seq * sequences in the step                 (0 unless the grid sets t_seq_us)
    T_mem     = (dense weight bytes + expert bytes * E[touched] / n_experts + KV bytes)
                / (g * hbm_bw * eta_bw)
    T_compute = (2 * active_params * n_tok + attention FLOPs) / (g * flops * eta_flops)
    T_comm    = (g > 1) * collectives_per_layer * n_layers
                * (alpha + 2 (g-1)/g * n_tok * hidden * act_bytes / link_bw)
    E[touched] = n_experts * (1 - (1 - k / n_experts) ** n_tok)       (top-k routing)

One addition to SPEC 13's T_compute: the attention score FLOPs (Q K^T and A V), which
`2 * active_params * n_tok` leaves out. They are negligible for decode and short prompts and
grow with the square of the prompt: +31% for a 20,000-token prefill of Llama 3.1 8B.
The phase helpers compute them; pass 0 to get SPEC 13 exactly.

Every argument is a float64 scalar in SI units (seconds, bytes, bytes/s, FLOP/s) or a
count; the code is straight-line `jnp` with no Python branching on values, so it jits and
vmaps (the engine vmaps over points in one place; STYLE habit 4). Division guards use the
double-`where` trick so a dense model (n_experts = 0) gives exact zeros and finite
gradients.

Cost per point: `step_time` is ~30 scalar flops plus one `pow` (E[touched]); the seed's
linear `service.roofline_times` is ~10 flops and no transcendental. The dynamic model
evaluates two steps a point; `benchmarks/kernel.py` measures the whole model at 1.27x the
linear form's cost (docs/roofline.md).

Defaults (one set for every model, GPU and phase; justified in docs/roofline.md):
    ETA_BW = 0.7, ETA_FLOPS = 0.6, COLLECTIVES_PER_LAYER = 2, ACT_BYTES = 2,
    T_OVERHEAD_S = 1.0e-3.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

from sweep._lazy import lazy_module
from sweep.catalog._efficiency import DEFAULT_ETA_BW as ETA_BW
from sweep.catalog._efficiency import DEFAULT_ETA_FLOPS as ETA_FLOPS
from sweep.catalog._efficiency import DEFAULT_T_OVERHEAD_S as T_OVERHEAD_S

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array, lax
else:
    lax = lazy_module("jax.lax")
    jnp = lazy_module("jax.numpy")

#: A float64 scalar or array: a Python float, NumPy or JAX (traced under jit and vmap).
Real = Any

# The global defaults, the efficiency table's last fallback (sweep/catalog/_efficiency.py, which
# the catalog layer below this one owns): share of the peak HBM bandwidth a decode step's weight
# and KV stream reaches; share of the peak dense tensor FLOP/s (of the dtype the GEMMs run in) a
# step reaches; fixed per-step cost outside the GPU kernels' roofline (scheduling, input
# preparation, sampling, kernel launches and the gaps between them): ETA_BW, ETA_FLOPS,
# T_OVERHEAD_S, imported above.

# Megatron-style tensor parallelism: one all-reduce after attention, one after the MLP.
COLLECTIVES_PER_LAYER = 2.0
# Bytes per activation element in the all-reduce (bf16/fp16).
ACT_BYTES = 2.0
# A GPU entry without interconnect figures (a user's PCIe card): one direction of PCIe 4.0
# x16 (32 GB/s) and the 50 us small-message all-reduce nccl-tests reports over PCIe.
PCIE_LINK_BYTES_PER_S = 32e9
PCIE_ALPHA_S = 50e-6
# Regula-falsi (Illinois) steps of `operating_running`'s flow balance: its root within 1.2e-7
# relative of a 200-step bisection on 4,000 random points of five catalog models (8 steps: 7e-3,
# on DeepSeek-V3's 256 experts); tests/test_models_roofline.py checks 1e-6.
OPERATING_ITERATIONS = 10


class StepParams(NamedTuple):
    """Everything a step's time depends on except the step's own work (a pytree: vmap it).

    Model: `weights_dense_bytes` (bytes read every step: all non-expert weights),
    `expert_bytes` (bytes of all routed experts; 0 for dense), `n_experts`, `k`
    (experts per token; both 0 for dense), `active_params` (parameters used per token),
    `n_layers`, `hidden`. GPU and parallelism: `gpus` (tensor-parallel size g), `hbm_bw`
    (bytes/s per GPU), `flops` (dense FLOP/s per GPU in the GEMM dtype), `link_bw`
    (bytes/s per GPU, one direction), `alpha` (seconds per all-reduce). Engine: `eta_bw`,
    `eta_flops`, `act_bytes`, `collectives_per_layer`, `t_overhead` (seconds per step that
    carries prompt tokens), `t_decode_overhead` (seconds per step of decode tokens only;
    None: `t_overhead`, one overhead for every step) and `t_seq` (seconds per sequence a step
    carries: the engine's host work per running sequence, 0 unless the grid sets `t_seq_us`).
    """

    weights_dense_bytes: Real
    expert_bytes: Real
    n_experts: Real
    k: Real
    active_params: Real
    n_layers: Real
    hidden: Real
    gpus: Real
    hbm_bw: Real
    flops: Real
    link_bw: Real
    alpha: Real
    eta_bw: Real = ETA_BW
    eta_flops: Real = ETA_FLOPS
    act_bytes: Real = ACT_BYTES
    collectives_per_layer: Real = COLLECTIVES_PER_LAYER
    t_overhead: Real = T_OVERHEAD_S
    t_decode_overhead: Real = None
    t_seq: Real = 0.0


class Work(NamedTuple):
    """What one step carries: `n_tok` new tokens, `kv_bytes` of KV cache read or written
    from HBM (whole replica), `attn_flops` attention score FLOPs (whole replica), and
    `prompt`: 1 when it carries prompt tokens, 0 when only decode tokens, or the share of
    steps that carry prompt tokens for an average step. It picks the step's overhead:
    engines replay decode-only steps as a captured CUDA graph and launch a prompt-carrying
    step's kernels one by one (docs/roofline.md). `seqs`: the sequences the step carries
    (each decoding sequence and each prompt), which `StepParams.t_seq` charges."""

    n_tok: Real
    kv_bytes: Real
    attn_flops: Real
    prompt: Real = 0.0
    seqs: Real = 0.0


class StepParts(NamedTuple):
    """The terms of one step, seconds (and the expected experts touched per MoE layer)."""

    t_mem: Array
    t_compute: Array
    t_comm: Array
    t_overhead: Array
    experts_touched: Array


def experts_touched(n_tok, n_experts, k):
    """Expected distinct experts a step's `n_tok` tokens touch in one MoE layer, each token
    picking `k` of `n_experts` uniformly (top-k routing with balanced load):

        E[touched] = n_experts * (1 - (1 - k / n_experts) ** n_tok)

    An expert is missed by one token with probability 1 - k/n, by all n_tok independently
    with (1 - k/n)^n_tok. Exact 0 for a dense model (n_experts = 0); n_tok = 0 gives 0.
    """
    moe = n_experts > 0
    n_safe = jnp.where(moe, n_experts, 1.0)  # double-where: no 0/0 on the dense branch
    miss = jnp.power(1.0 - k / n_safe, n_tok)
    return jnp.where(moe, n_safe * (1.0 - miss), 0.0)


def step_time(work: Work, p: StepParams):
    """(T_step seconds, StepParts) for one step of `work` on the replica `p` (module doc)."""
    g = p.gpus
    touched = experts_touched(work.n_tok, p.n_experts, p.k)
    n_safe = jnp.where(p.n_experts > 0, p.n_experts, 1.0)
    expert_read = jnp.where(p.n_experts > 0, p.expert_bytes * touched / n_safe, 0.0)
    t_mem = (p.weights_dense_bytes + expert_read + work.kv_bytes) / (g * p.hbm_bw * p.eta_bw)
    t_compute = (2.0 * p.active_params * work.n_tok + work.attn_flops) / (g * p.flops * p.eta_flops)
    ring = 2.0 * (g - 1.0) / g * work.n_tok * p.hidden * p.act_bytes / p.link_bw
    t_comm = jnp.where(g > 1, p.collectives_per_layer * p.n_layers * (p.alpha + ring), 0.0)
    t_dec = p.t_overhead if p.t_decode_overhead is None else p.t_decode_overhead
    t_over = t_dec + jnp.clip(work.prompt, 0.0, 1.0) * (p.t_overhead - t_dec)
    t_over = t_over + work.seqs * p.t_seq
    t = jnp.maximum(t_mem, t_compute) + t_comm + t_over
    return t, StepParts(t_mem, t_compute, t_comm, t_over, touched)


# --------------------------------------------------------------------------- phases


def decode_work(batch, context_tokens, kv_bytes_per_token, attn_width, n_layers) -> Work:
    """A decode step of `batch` sequences with mean cached context `context_tokens`.

    n_tok = B. KV: every sequence reads its whole cache and writes one new token,
    B (L + 1) kv_bytes_per_token. Attention FLOPs: each new token scores L keys and mixes L
    values in every layer, 4 * n_layers * attn_width * B * L, where attn_width =
    n_heads * head_dim (the query width).
    """
    kv = batch * (context_tokens + 1.0) * kv_bytes_per_token
    attn = 4.0 * n_layers * attn_width * batch * context_tokens
    return Work(batch, kv, attn, 0.0, batch)


def prefill_work(batch, prompt_tokens, kv_bytes_per_token, attn_width, n_layers) -> Work:
    """A step that prefills `batch` prompts of `prompt_tokens` tokens each.

    n_tok = B P. KV: the prompt's keys and values are written once, B P kv_bytes_per_token;
    reading them back for the prompt's own attention happens tile by tile on chip
    (FlashAttention), so it adds no HBM traffic here. Attention FLOPs, causal (FlashAttention
    skips the masked half): 2 * n_layers * attn_width * B * P^2.
    """
    n = batch * prompt_tokens
    kv = n * kv_bytes_per_token
    attn = 2.0 * n_layers * attn_width * batch * prompt_tokens * prompt_tokens
    return Work(n, kv, attn, jnp.where(n > 0, 1.0, 0.0), batch)


def add_work(a: Work, b: Work) -> Work:
    """One step carrying both `a` and `b` (e.g. decode tokens plus a prompt chunk, SPEC 10).
    It carries prompt tokens when either does (shares combine as independent events)."""
    return Work(a.n_tok + b.n_tok, a.kv_bytes + b.kv_bytes, a.attn_flops + b.attn_flops,
                a.prompt + b.prompt - a.prompt * b.prompt, a.seqs + b.seqs)


def scale_work(a: Work, s) -> Work:
    """`s` times the work of `a` (an expected share of a prompt per step); the share of
    steps carrying prompt tokens scales with it up to 1."""
    return Work(a.n_tok * s, a.kv_bytes * s, a.attn_flops * s, jnp.minimum(a.prompt * s, 1.0), a.seqs * s)


def crossover_batch(p: StepParams, context_tokens: Real, kv_bytes_per_token: Real) -> Array:
    """Decode batch B* at which compute time overtakes memory time for a dense model
    (attention FLOPs ignored, KV read of B (L+1) tokens), from T_mem(B) = T_compute(B):

        (W + B (L+1) c) / (g bw eta_bw) = 2 N B / (g F eta_flops)
        B* = W / (2 N bw eta_bw / (F eta_flops) - (L+1) c)

    W dense weight bytes, c KV bytes per token, N active params, F flops. +inf when the
    denominator is <= 0 (KV traffic grows as fast as compute: never compute-bound).
    """
    per_b = 2.0 * p.active_params * p.hbm_bw * p.eta_bw / (p.flops * p.eta_flops) - (
        (context_tokens + 1.0) * kv_bytes_per_token)
    pos = per_b > 0
    return jnp.where(pos, p.weights_dense_bytes / jnp.where(pos, per_b, 1.0), jnp.inf)


# --------------------------------------------------------------------------- the engine's estimate


def replica_params(x: Any, eta_bw: Real, eta_flops: Real) -> StepParams:
    """`StepParams` of one grid point: `x` maps the point's grid keys and catalog figures
    (`sweep.models.base.CATALOG_FIELDS`) to scalars; its per-step overheads are the point's
    `gpu_t_overhead` and `gpu_t_decode_overhead` (the efficiency table's cell) when given.
    GEMMs run in FP8 (`fp8_flops`) when the weights are 1 byte or less and the GPU has FP8
    tensor cores, else at the bf16 rate."""
    wb = x["weight_bytes_per_param"]
    fp8 = (wb <= 1.0) & (x["fp8_flops"] > 0)
    return StepParams(
        weights_dense_bytes=x["dense_params"] * wb,
        expert_bytes=x["expert_params"] * wb,
        n_experts=x["n_experts"],
        k=x["experts_per_token"],
        active_params=x["active_params"],
        n_layers=x["n_layers"],
        hidden=x["hidden"],
        gpus=x["gpus_per_replica"],
        hbm_bw=x["hbm_bw"],
        flops=jnp.where(fp8, x["fp8_flops"], x["flops"]),
        link_bw=x["link_bw"],
        alpha=x["alpha"],
        eta_bw=eta_bw,
        eta_flops=eta_flops,
        t_overhead=x["gpu_t_overhead"] if "gpu_t_overhead" in x else T_OVERHEAD_S,
        t_decode_overhead=x["gpu_t_decode_overhead"] if "gpu_t_decode_overhead" in x else None,
        t_seq=x["t_seq_us"] * 1e-6 if "t_seq_us" in x else 0.0,
    )


def batch_work(batch, tokens_per_request, context_tokens, kv_bytes_per_token, attn_width, n_layers) -> Work:
    """One forward pass of `batch` requests of the dynamic batcher (SPEC 1's roofline
    semantics): each brings `tokens_per_request` new tokens that attend to
    `context_tokens` cached ones, reads that cache and writes its new tokens' KV.
    With one token a request this is `decode_work`; with more, a prompt-carrying step."""
    n = batch * tokens_per_request
    kv = batch * (context_tokens + tokens_per_request) * kv_bytes_per_token
    attn = 4.0 * n_layers * attn_width * n * context_tokens
    return Work(n, kv, attn, jnp.where(tokens_per_request > 1.0, 1.0, 0.0), batch)


def service_line(p: StepParams, batch, tokens_per_request, context_tokens, kv_bytes_per_token, attn_width,
                 n_layers) -> tuple[Array, Array]:
    """(T_fixed, t_req) seconds: the dynamic batcher's line T_svc(B) = T_fixed + t_req B as
    the secant of the SPEC 13 step time through B = 1 and B = `batch` (2 when `batch` is 1).

    T_svc(batch) and T_svc(1) are SPEC 13's exactly; the full-batch regime uses only
    T_svc(batch). The queue's closed forms need a line (they average T_svc over the batch
    sizes a window produces); between the two ends the secant is above a dense model's
    convex max(memory, compute) and below a mixture-of-experts model's concave
    experts-touched curve."""
    hi = jnp.maximum(batch, 2.0)
    t1, _ = step_time(batch_work(1.0, tokens_per_request, context_tokens, kv_bytes_per_token, attn_width, n_layers), p)
    th, _ = step_time(batch_work(hi, tokens_per_request, context_tokens, kv_bytes_per_token, attn_width, n_layers), p)
    t_req = jnp.maximum((th - t1) / (hi - 1.0), 0.0)
    return jnp.maximum(t1 - t_req, 0.0), t_req


def line_at(p: StepParams, running, prompt_tokens, output_tokens, budget, kv_bytes_per_token, attn_width,
            n_layers) -> tuple[Array, Array, Array]:
    """(t_fixed, t_token, t_ctx) seconds: SPEC 10's linear step time
    T = t_fixed + t_token n_tok + t_ctx n_ctx from the SPEC 13 step, exact at the two steps a
    sequence sees when `running` sequences (itself included) run.

    t_ctx is the KV read of one cached token, kv_bytes / (g bw eta_bw). t_fixed and t_token
    make the line exact at (a) the decode step of `running` = r sequences, each holding
    P + O/2 cached tokens (n_tok = r, n_ctx = r (P + O/2)), and (b) the step in which one of
    them prefills: the r - 1 others decode and it runs a chunk of min(P, budget) prompt
    tokens (n_tok = r - 1 + chunk, n_ctx = (r - 1)(P + O/2) + chunk). For a mixture of
    experts, step (a) streams the experts r tokens touch, so the line's decode step rises
    with the running count as the refined step does. r = 1 is a lone request: its decode
    step and its prefill chunk (`step_line`). Where the secant would put t_fixed below the
    decode step's own overhead (many running sequences, beside which the chunk's step turns
    compute-bound), t_fixed is that overhead and t_token the secant's: both steps come out
    above the refined ones by the same margin. (Keeping step (a) exact instead, with t_fixed
    0, priced prompt tokens at the decode step's memory-bound rate and left a line without a
    fixed cost, whose lone step is almost free: docs/roofline.md.)
    Step (b) pays the prompt-carrying step's overhead and (a) the decode-only one, so the
    difference rides on t_token: exact for one chunk of min(P, budget) tokens in a step, spread per token
    otherwise (a step of several short prompts pays it more than once, a lone partial chunk
    less than once)."""
    r = running
    ctx = prompt_tokens + output_tokens / 2.0
    chunk = jnp.maximum(jnp.minimum(prompt_tokens, budget), 2.0)
    t_dec, parts = step_time(decode_work(r, ctx, kv_bytes_per_token, attn_width, n_layers), p)
    t_pre, _ = step_time(add_work(decode_work(r - 1.0, ctx, kv_bytes_per_token, attn_width, n_layers),
                                  prefill_work(1.0, chunk, kv_bytes_per_token, attn_width, n_layers)), p)
    t_ctx = kv_bytes_per_token / (p.gpus * p.hbm_bw * p.eta_bw)
    t_token = jnp.maximum((t_pre - t_dec - (chunk - ctx) * t_ctx) / (chunk - 1.0), 0.0)
    t_fixed = t_dec - t_token * r - r * ctx * t_ctx
    # a step never costs less than its overhead: where the secant would leave t_fixed below
    # the decode step's (many running sequences, beside which the chunk's step turns
    # compute-bound), t_fixed is that overhead and t_token stays the secant's, what a prompt
    # token costs: both steps come out above the refined ones by the same few milliseconds
    # (a decode-anchored slope would price prompt tokens at the decode step's memory-bound
    # rate, half or less of their compute, and overstate the prefill capacity)
    floor = parts.t_overhead
    return jnp.maximum(t_fixed, floor), t_token, t_ctx


def step_line(p: StepParams, prompt_tokens, output_tokens, budget, kv_bytes_per_token, attn_width,
              n_layers) -> tuple[Array, Array, Array]:
    """(t_fixed, t_token, t_ctx) seconds: the line of a lone request (`line_at` with one
    running sequence), exact at its decode step (one token, holding P + O/2 cached tokens
    on average) and its prefill step (its prompt, or a chunk of min(P, budget) tokens): the
    steps that set TPOT and TTFT at light load. `operating_line` is this line moved to the
    occupancy a point's load produces."""
    return line_at(p, 1.0, prompt_tokens, output_tokens, budget, kv_bytes_per_token, attn_width, n_layers)


def compute_line(p: StepParams) -> tuple[Real, Real]:
    """(t_fixed, t_token) seconds of the refined step's compute-bound regime as a line: a
    step of n_tok tokens costs at least t_fixed + t_token n_tok, t_token being one token's
    GEMMs, 2 active_params / (g flops eta_flops), plus its share of the tensor-parallel
    all-reduces, collectives_per_layer n_layers 2 (g - 1) / g hidden act_bytes / link_bw, and
    t_fixed the prompt-carrying step's overhead plus the all-reduces' latencies (`step_time`'s
    terms without the memory stream, the attention FLOPs and the per-sequence cost). The
    secant of `line_at` is exact for one prompt chunk beside the decodes; a step that carries
    many prompts (a burst, a prompt run under prefill_first) is compute-bound beyond it, where
    the secant's slope, drawn through a step the weights' stream may still bound, prices its
    tokens below their compute. `sweep predict-benchmark`'s simulated run takes the larger of
    the two lines (docs/deploy.md)."""
    g = p.gpus
    ring = jnp.where(g > 1, p.collectives_per_layer * p.n_layers * 2.0 * (g - 1.0) / g * p.hidden * p.act_bytes
                     / p.link_bw, 0.0)
    t_token = 2.0 * p.active_params / (g * p.flops * p.eta_flops) + ring
    return p.t_overhead + jnp.where(g > 1, p.collectives_per_layer * p.n_layers * p.alpha, 0.0), t_token


def operating_running(p: StepParams, lam, prompt_tokens, output_tokens, budget, cap, kv_capacity_tokens,
                      block_tokens, kv_bytes_per_token, attn_width, n_layers, most=math.inf) -> Array:
    """The running count r a sequence sees at the point's load (itself included), for
    `operating_line`: r = min(c, A + 1), A the mean running count, c = min(N, C / reservation).

    A solves the flow balance A = min(c, lam E[D] S(A)) (Little: a request runs E[D] =
    O - 1 + max(1, P / M) steps), where S(A) is the refined step of the time-average step at
    that occupancy: A (O - 1) / E[D] decode tokens over P + O/2 cached tokens each, and the
    prompts of the lam S = A / E[D] requests that arrive per step (their tokens, KV writes
    and causal attention FLOPs). S rises with A, so h(A) = lam E[D] S(A) - A has one root in
    [0, c] when h(c) < 0; otherwise the load saturates the slots and A = c. The root comes
    from `OPERATING_ITERATIONS` steps of regula falsi with the Illinois modification on
    [0, c] (exact in one step where S is linear in A: a memory-bound dense model). r = A + 1
    is the running count a running sequence sees under Poisson occupancy (size-biased,
    E[R^2] / E[R]), the analytic model's R_seen below the cap; it is 1 (a lone request) as
    the load goes to 0. c follows the mean reservation ceil((P + O) / b) b; KV capacity
    C = inf gives c = N. ``most`` bounds r: a closed loop of n clients never runs more than n
    sequences (the caller passes n; a closed loop's due rate as ``lam``).
    """
    dec_ctx = prompt_tokens + output_tokens / 2.0
    steps = output_tokens - 1.0 + jnp.maximum(1.0, prompt_tokens / budget)
    reservation = jnp.ceil((prompt_tokens + output_tokens) / block_tokens) * block_tokens
    c = jnp.maximum(jnp.minimum(cap, kv_capacity_tokens / reservation), 1.0)
    prompt = prefill_work(1.0, prompt_tokens, kv_bytes_per_token, attn_width, n_layers)
    chunks = jnp.maximum(1.0, prompt_tokens / budget)

    def h(a):
        # the average step: a/steps of a prompt, and a chunk of one in a * chunks / steps of steps
        share = scale_work(prompt, a / steps)._replace(prompt=jnp.minimum(a * chunks / steps, 1.0))
        work = add_work(decode_work(a * (output_tokens - 1.0) / steps, dec_ctx, kv_bytes_per_token, attn_width,
                                    n_layers), share)
        t, _ = step_time(work, p)
        return lam * steps * t - a

    lo, hi = jnp.zeros_like(c), c
    h_lo, h_hi = h(lo), h(hi)
    saturated = h_hi >= 0.0
    h_hi = jnp.where(saturated, -1.0, h_hi)  # any bracket: the result is c
    # An iterate within `tol` of the root is final. Besides saving work, this keeps the
    # bracket honest: XLA may recompute h(a) in several fusions whose roundings differ, so
    # the sign of an h(a) at rounding level (~1e-16 A) could disagree between the two ends'
    # updates; above `tol` every copy agrees.
    tol = 1e-12 * (1.0 + c)

    def illinois(_, st):
        lo, hi, h_lo, h_hi, side, done, root = st
        den = h_lo - h_hi  # > 0 while h_lo > 0 > h_hi; 0 only at lam = 0 (root at 0)
        a = lo + h_lo * (hi - lo) / jnp.where(den > 0.0, den, 1.0)
        h_a = h(a)
        root = jnp.where(done, root, a)
        done = done | (jnp.abs(h_a) <= tol)
        right = h_a > 0.0  # the root lies right of a
        lo, h_lo = jnp.where(right, a, lo), jnp.where(right, h_a, h_lo)
        hi, h_hi = jnp.where(right, hi, a), jnp.where(right, h_hi, h_a)
        # Illinois: an end kept twice in a row has its value halved, so both ends move
        h_hi = jnp.where(right & (side > 0), 0.5 * h_hi, h_hi)
        h_lo = jnp.where(~right & (side < 0), 0.5 * h_lo, h_lo)
        return lo, hi, h_lo, h_hi, jnp.where(right, 1.0, -1.0), done, root

    # a loop, not unrolled steps: XLA would recompute each step's h(a) in every later
    # step's fusions that read it (measured 18x step_line's cost unrolled)
    lo, hi, h_lo, h_hi, _, done, root = lax.fori_loop(
        0, OPERATING_ITERATIONS, illinois, (lo, hi, h_lo, h_hi, jnp.zeros_like(c), saturated, c))
    den = h_lo - h_hi
    root = jnp.where(done, root, lo + h_lo * (hi - lo) / jnp.where(den > 0.0, den, 1.0))
    return jnp.minimum(jnp.minimum(root + 1.0, c), jnp.maximum(most, 1.0))


def operating_line(p: StepParams, lam, prompt_tokens, output_tokens, budget, cap, kv_capacity_tokens, block_tokens,
                   kv_bytes_per_token, attn_width, n_layers, most=math.inf) -> tuple[Array, Array, Array]:
    """(t_fixed, t_token, t_ctx) seconds: SPEC 10's line linearized at the point's operating
    composition: `line_at` the running count `operating_running` estimates from the load.
    Exact at the decode step of r sequences and at the step where one of them prefills a
    chunk beside r - 1 decoders; r -> 1 at light load gives `step_line`."""
    r = operating_running(p, lam, prompt_tokens, output_tokens, budget, cap, kv_capacity_tokens, block_tokens,
                          kv_bytes_per_token, attn_width, n_layers, most)
    return line_at(p, r, prompt_tokens, output_tokens, budget, kv_bytes_per_token, attn_width, n_layers)
