"""The analytic serving model for ONE grid point, in pure JAX (SPEC sections 1-6).

Every function here takes float64 scalars (shape `()`) in SI units — seconds, bytes,
requests/second — and returns scalars. Nothing here batches: `sweep.evaluate` vmaps
`evaluate_point` over fixed-shape chunks, and is the only place that does.

Infeasible is data: an unstable queue gives `+inf` waits and `False` flags, a model that
does not fit gives `b_mem_max = 0`; nothing raises and nothing is NaN.

References are to the seed document (`inference-foundations`): eq. 1 service time,
eq. 2 utilisation-target batch size, eq. 3 KV-cache memory, eq. P-K the Pollaczek-Khinchine
mean wait of the M/G/1 batch proxy.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array
from jax.scipy.special import ndtri

from sweep._numerics import poisson_tails, safe_div

INF = jnp.inf

#: `action` codes (SPEC 6, seed Table 1); first match wins in this order.
ACTIONS: tuple[str, ...] = (
    "out_of_memory",
    "unstable",
    "slo_violated",
    "near_saturation",
    "overprovisioned",
    "ok",
)
ACTION_CODE = {name: i for i, name in enumerate(ACTIONS)}


class Point(NamedTuple):
    """One grid point's inputs, SI units, each a float64 scalar (or a batch under vmap)."""

    lam: Array  # per-replica arrival rate lambda, 1/s
    b_max: Array  # batch size (the cap B_max when windowed)
    t_max: Array  # batching window T_max, s (inf: full-batch regime)
    t_fixed: Array  # T_fixed, s (eq. 1)
    t_req: Array  # t_req, s per request (eq. 1)
    service_cv: Array  # coefficient of variation of multiplicative service noise
    q: Array  # percentile in (0, 1)
    slo: Array  # latency SLO, s
    rho_target: Array
    rho_max: Array
    rho_min: Array
    kv_bytes_per_token: Array  # bytes cached per token (all layers)
    seq_len: Array  # S_max, tokens
    mean_seq_len: Array  # S_mean, tokens
    block_tokens: Array  # paged-allocation block, tokens
    weights_bytes: Array
    usable_hbm_bytes: Array  # gpus_per_replica * hbm * (1 - reserve_fraction)


class BatchMoments(NamedTuple):
    """Moments of the dynamic batcher for one point (SPEC 2).

    `eb*` are per-batch moments of the actual batch size B_actual = min(B_max, 1 + N);
    `etb`, `etb2` are the request-weighted first and second moments of the accumulation
    delay T_batch.
    """

    eb: Array
    eb2: Array
    eb3: Array
    etb: Array
    etb2: Array


# --------------------------------------------------------------------------- section 1


def service_time(t_fixed: Array, t_req: Array, b: Array) -> Array:
    """T_svc(B) = T_fixed + t_req B (seed eq. 1), seconds."""
    return t_fixed + t_req * b


def roofline_times(
    weights_bytes: Array,
    active_params: Array,
    kv_bytes_per_token: Array,
    mean_seq_len: Array,
    tokens_per_request: Array,
    gpus: Array,
    hbm_bytes_per_s: Array,
    flops: Array,
    eta_bw: Array,
    eta_flops: Array,
) -> tuple[Array, Array]:
    """(T_fixed, t_req) in seconds from a roofline estimate (SPEC 1, source 3).

    One forward pass on `gpus` GPUs: the weights stream from HBM once per pass (T_fixed);
    each request adds its matmul FLOPs for `tokens_per_request` new tokens and reads its
    KV cache of `mean_seq_len` tokens (t_req).
    """
    bw = gpus * hbm_bytes_per_s * eta_bw
    t_fixed = weights_bytes / bw
    t_req = 2.0 * active_params * tokens_per_request / (gpus * flops * eta_flops) + (
        kv_bytes_per_token * mean_seq_len / bw
    )
    return t_fixed, t_req


# --------------------------------------------------------------------------- section 2


def full_batch_moments(lam: Array, b: Array) -> BatchMoments:
    """Full-batch regime (T_max = inf): every batch holds exactly B requests.

    A random request waits for m ~ Uniform{0..B-1} further Exp(lam) gaps, so
    E[T_batch] = (B-1)/(2 lam) and E[T_batch^2] = (B^2-1)/(3 lam^2).
    """
    etb = (b - 1.0) / (2.0 * lam)
    etb2 = (b * b - 1.0) / (3.0 * lam * lam)
    return BatchMoments(b, b * b, b * b * b, etb, etb2)


def window_moments(lam: Array, t_max: Array, b_max: Array) -> BatchMoments:
    """Windowed batcher (finite T_max): closed forms, O(1) per point (SPEC 2).

    With mu = lam T_max, N ~ Poisson(mu) followers in the window, k = B_max - 1 and
    L_j = P(N <= j), U_j = P(N >= j), the partial factorial moments are
        S_r = sum_{n<k} n(n-1)..(n-r+1) P(N=n) = mu^r L_{k-1-r},
    and with n+1 the batch size of a timed-out window:
        E[B]   = S1 + S0 + B U_k
        E[B^2] = S2 + 3 S1 + S0 + B^2 U_k
        E[B^3] = S3 + 6 S2 + 7 S1 + S0 + B^3 U_k.
    Accumulation delay, request-weighted (E[tau_k 1{tau_k<=T}] = (k/lam) U_{k+1},
    E[tau_k^2 1{tau_k<=T}] = k(k+1)/lam^2 U_{k+2}):
        full window:    sum of waits tau_k (B)/2,       sum of squares tau_k^2 (k+2)/3
        timeout, N=n:   sum of waits T (n+2)/2,         sum of squares T^2 (1 + n/3)
    so E[T_batch]   = [B k/(2 lam) U_{k+1} + T/2 (S1 + 2 S0)] / E[B]
       E[T_batch^2] = [(k+2) k (k+1)/(3 lam^2) U_{k+2} + T^2 (S0 + S1/3)] / E[B].
    All tails come from one incomplete-gamma evaluation (`poisson_tails`).
    """
    k = b_max - 1.0
    mu = lam * t_max
    upper, lower = poisson_tails(k, mu)
    u_k, u_k1, u_k2 = upper[3], upper[4], upper[5]
    l_km1, l_km2, l_km3, l_km4 = lower[3], lower[2], lower[1], lower[0]
    s0 = l_km1
    s1 = mu * l_km2
    s2 = mu * mu * l_km3
    s3 = mu * mu * mu * l_km4
    eb = s1 + s0 + b_max * u_k
    eb2 = s2 + 3.0 * s1 + s0 + b_max * b_max * u_k
    eb3 = s3 + 6.0 * s2 + 7.0 * s1 + s0 + b_max**3 * u_k
    full_sum = b_max * k / (2.0 * lam) * u_k1
    timeout_sum = 0.5 * t_max * (s1 + 2.0 * s0)
    etb = (full_sum + timeout_sum) / eb
    full_sq = (k + 2.0) * k * (k + 1.0) / (3.0 * lam * lam) * u_k2
    timeout_sq = t_max * t_max * (s0 + s1 / 3.0)
    etb2 = (full_sq + timeout_sq) / eb
    return BatchMoments(eb, eb2, eb3, etb, etb2)


def batch_moments(lam: Array, t_max: Array, b_max: Array, *, windowed: bool, full: bool) -> BatchMoments:
    """The batcher's moments for either regime, chosen per point by `t_max`.

    `windowed`/`full` are static: a grid whose windows are all infinite never traces the
    incomplete-gamma path. Safe: the windowed branch sees T_max = 0 where the point is
    full-batch, so its infinities never reach the result.
    """
    if not windowed:
        return full_batch_moments(lam, b_max)
    is_full = jnp.isinf(t_max)
    win = window_moments(lam, jnp.where(is_full, 0.0, t_max), b_max)
    if not full:
        return win
    fb = full_batch_moments(lam, b_max)
    return BatchMoments(*(jnp.where(is_full, f, w) for f, w in zip(fb, win)))


# --------------------------------------------------------------------------- section 3


class Queue(NamedTuple):
    rho: Array
    proxy_ok: Array
    stable: Array
    e_wait: Array  # E[W], s
    var_wait: Array  # Var[W], s^2
    e_svc: Array  # request-weighted E[T_svc], s
    var_svc: Array  # request-weighted Var[T_svc], s^2
    capacity: Array  # B_max / T_svc(B_max), 1/s


def queue_proxy(p: Point, bm: BatchMoments, *, exact_full: bool) -> Queue:
    """M/G/1 batch proxy (SPEC 3): batches are Poisson super-requests at lam / E[B].

    Service S = T_svc(B_actual) X with X lognormal noise of mean 1 and CV `service_cv`
    (E[X^2] = 1 + cv^2, E[X^3] = (1 + cv^2)^3; cv = 0 is the seed's deterministic case):
        rho    = lam_b E[S]
        E[W]   = lam_b E[S^2] / (2 (1 - rho))                 (P-K)
        Var[W] = E[W]^2 + lam_b E[S^3] / (3 (1 - rho))        (Takacs, E[W^2] - E[W]^2)
    `exact_full` (static) marks a grid with only full batches, whose request-weighted
    service variance is exactly zero without noise.
    """
    tf, tr = p.t_fixed, p.t_req
    m2 = 1.0 + p.service_cv**2
    m3 = m2**3
    lam_b = p.lam / bm.eb
    es = tf + tr * bm.eb
    es2 = (tf * tf + 2.0 * tf * tr * bm.eb + tr * tr * bm.eb2) * m2
    es3 = (tf**3 + 3.0 * tf * tf * tr * bm.eb + 3.0 * tf * tr * tr * bm.eb2 + tr**3 * bm.eb3) * m3
    rho = lam_b * es
    proxy_ok = rho < 1.0
    slack = 1.0 - rho
    e_wait = safe_div(lam_b * es2, 2.0 * slack, proxy_ok, INF)
    var_wait = jnp.where(proxy_ok, e_wait * e_wait, INF) + safe_div(lam_b * es3, 3.0 * slack, proxy_ok, INF)
    # Request-weighted service: a request sits in a batch of size-biased B.
    mean_b_r = bm.eb2 / bm.eb
    e_svc = tf + tr * mean_b_r
    if exact_full:
        var_b_r = jnp.zeros_like(mean_b_r)
    else:
        var_b_r = jnp.maximum(bm.eb3 / bm.eb - mean_b_r * mean_b_r, 0.0)
    # Var[T_svc X] = E[X^2] Var[T_svc] + (E[X^2] - 1) E[T_svc]^2: no cancellation.
    var_svc = m2 * tr * tr * var_b_r + (m2 - 1.0) * e_svc * e_svc
    t_cap = service_time(tf, tr, p.b_max)
    stable = p.lam * t_cap < p.b_max
    capacity = safe_div(p.b_max, t_cap, t_cap > 0, INF)
    return Queue(rho, proxy_ok, stable, e_wait, var_wait, e_svc, var_svc, capacity)


def b_min(lam: Array, t_fixed: Array, t_req: Array, rho: Array) -> Array:
    """B_min(rho) = lam T_fixed / (rho - lam t_req), +inf when rho <= lam t_req (eq. 2)."""
    ok = rho > lam * t_req
    return safe_div(lam * t_fixed, rho - lam * t_req, ok, INF)


def b_min_stable_int(lam: Array, t_fixed: Array, t_req: Array, raw: Array) -> Array:
    """Smallest integer B with lam T_svc(B) < B (strictly stable): floor(B_min(1)) + 1.

    The candidate is checked with the same inequality as the `stable` column and moved by
    one where rounding in B_min put it on the wrong side, so the two never disagree.
    """
    finite = jnp.isfinite(raw)
    c = jnp.maximum(jnp.floor(jnp.where(finite, raw, 0.0)) + 1.0, 1.0)
    ok = lambda b: lam * service_time(t_fixed, t_req, b) < b  # noqa: E731
    c = jnp.where((c > 1.0) & ok(c - 1.0), c - 1.0, c)
    c = jnp.where(ok(c), c, c + 1.0)
    return jnp.where(finite, c, INF)


def b_min_target_int(lam: Array, t_fixed: Array, t_req: Array, rho_target: Array, raw: Array) -> Array:
    """Smallest integer B >= 1 with lam T_svc(B) / B <= rho_target: ceil(B_min(rho_target))."""
    finite = jnp.isfinite(raw)
    c = jnp.maximum(jnp.ceil(jnp.where(finite, raw, 1.0)), 1.0)
    ok = lambda b: lam * service_time(t_fixed, t_req, b) <= rho_target * b  # noqa: E731
    c = jnp.where((c > 1.0) & ok(c - 1.0), c - 1.0, c)
    c = jnp.where(ok(c), c, c + 1.0)
    return jnp.where(finite, c, INF)


# --------------------------------------------------------------------------- section 5


class Memory(NamedTuple):
    s_alloc: Array  # tokens reserved per request
    kv_bytes_per_req: Array
    kv_waste_frac: Array
    free_bytes: Array
    weights_fit: Array
    b_mem_max: Array
    mem_ok: Array


def kv_memory(p: Point, *, paged: bool) -> Memory:
    """KV-cache memory (seed eq. 3, SPEC 5).

    Contiguous allocation reserves S_max per request; paged reserves the mean length
    rounded up to whole blocks. B_mem_max = floor(free / per-request reservation), 0 when
    the weights alone do not fit.
    """
    if paged:
        s_alloc = jnp.ceil(p.mean_seq_len / p.block_tokens) * p.block_tokens
    else:
        s_alloc = p.seq_len
    per_req = p.kv_bytes_per_token * s_alloc
    free = p.usable_hbm_bytes - p.weights_bytes
    fit = free >= 0.0
    b_mem = jnp.where(fit, jnp.floor(jnp.where(fit, free, 0.0) / per_req), 0.0)
    return Memory(
        s_alloc=s_alloc,
        kv_bytes_per_req=per_req,
        kv_waste_frac=1.0 - p.mean_seq_len / s_alloc,
        free_bytes=free,
        weights_fit=fit,
        b_mem_max=b_mem,
        mem_ok=fit & (p.b_max <= b_mem),
    )


# --------------------------------------------------------------------------- section 4 + 6


def action_code(mem_ok: Array, stable: Array, latency: Array, slo: Array, rho: Array, rho_max: Array, rho_min: Array) -> Array:
    """Seed Table 1 as a code into `ACTIONS`; first match wins."""
    code = jnp.full(jnp.shape(rho), ACTION_CODE["ok"], dtype=jnp.int32)
    code = jnp.where(rho < rho_min, ACTION_CODE["overprovisioned"], code)
    code = jnp.where(rho > rho_max, ACTION_CODE["near_saturation"], code)
    code = jnp.where(~(latency <= slo), ACTION_CODE["slo_violated"], code)
    code = jnp.where(~stable, ACTION_CODE["unstable"], code)
    code = jnp.where(~mem_ok, ACTION_CODE["out_of_memory"], code)
    return code


def evaluate_point(
    p: Point, *, windowed: bool, full: bool, paged: bool, latency_model: str
) -> dict[str, Array]:
    """Every analytic output for one point, SI units (seconds, bytes, 1/s).

    Static keywords: `windowed`/`full` say which batching regimes the grid holds,
    `paged` the KV allocation, `latency_model` which estimate `latency` is.
    """
    bm = batch_moments(p.lam, p.t_max, p.b_max, windowed=windowed, full=full)
    qu = queue_proxy(p, bm, exact_full=not windowed)
    var_tb = jnp.maximum(bm.etb2 - bm.etb * bm.etb, 0.0)
    if not windowed:  # closed form, no cancellation: (B-1)(B+7)/(12 lam^2)
        var_tb = (p.b_max - 1.0) * (p.b_max + 7.0) / (12.0 * p.lam * p.lam)
    e_resp = jnp.where(qu.proxy_ok, qu.e_wait + bm.etb + qu.e_svc, INF)
    sd_resp = jnp.where(qu.proxy_ok, jnp.sqrt(jnp.where(qu.proxy_ok, qu.var_wait, 0.0) + var_tb + qu.var_svc), INF)
    z = ndtri(p.q)
    p_gauss = jnp.where(qu.proxy_ok, e_resp + z * jnp.where(qu.proxy_ok, sd_resp, 0.0), INF)
    p_exp = -jnp.log1p(-p.q) * e_resp
    # "simulated": the gaussian estimate stands in until sweep.evaluate replaces it with
    # the simulator's percentile (and recomputes slo_ok, action and the decisions).
    extra: dict[str, Array] = {}
    rho_rules = qu.rho
    if latency_model == "batcher":
        from sweep.batcher import batcher_point  # the greedy-batcher model (issue: simulator, item 7)

        bt = batcher_point(p.lam, p.b_max, p.t_max, p.t_fixed, p.t_req, p.service_cv, p.q)
        latency = bt["p_q"]
        rho_rules = bt["rho"]  # its utilisation drives the operating rules, like its latency
        extra = {"batcher_e_resp": bt["e_resp"], "batcher_p": bt["p_q"], "batcher_mean_batch": bt["mean_batch"], "batcher_rho": bt["rho"]}
    else:
        latency = {"gaussian": p_gauss, "exponential": p_exp, "simulated": p_gauss}[latency_model]
    little_l = p.lam * e_resp
    in_service = p.lam * qu.e_svc
    raw_stable = b_min(p.lam, p.t_fixed, p.t_req, 1.0)
    raw_target = b_min(p.lam, p.t_fixed, p.t_req, p.rho_target)
    mem = kv_memory(p, paged=paged)
    slo_ok = latency <= p.slo
    return {
        "t_svc": service_time(p.t_fixed, p.t_req, p.b_max),
        "capacity": qu.capacity,
        "rho": qu.rho,
        "proxy_ok": qu.proxy_ok,
        "stable": qu.stable,
        "mean_batch": bm.eb,
        "e_wait": qu.e_wait,
        "e_batch": bm.etb,
        "e_svc": qu.e_svc,
        "e_resp": e_resp,
        "sd_resp": sd_resp,
        "p_gauss": p_gauss,
        "p_exp": p_exp,
        "latency": latency,
        "slo_ok": slo_ok,
        "little_l": little_l,
        "in_service": in_service,
        "in_queue": little_l - in_service,
        "b_min_stable": raw_stable,
        "b_min_stable_int": b_min_stable_int(p.lam, p.t_fixed, p.t_req, raw_stable),
        "b_min_rho_target": raw_target,
        "b_min_rho_target_int": b_min_target_int(p.lam, p.t_fixed, p.t_req, p.rho_target, raw_target),
        "kv_bytes_per_req": mem.kv_bytes_per_req,
        "kv_waste_frac": mem.kv_waste_frac,
        "free_bytes": mem.free_bytes,
        "weights_fit": mem.weights_fit,
        "b_mem_max": mem.b_mem_max,
        "mem_ok": mem.mem_ok,
        "action": action_code(mem.mem_ok, qu.stable, latency, p.slo, rho_rules, p.rho_max, p.rho_min),
        "rho_rules": rho_rules,
        **extra,
    }
