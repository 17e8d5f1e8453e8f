"""Closed-form approximation of the greedy (work-conserving) dynamic batcher, ONE point.

Why a second model
------------------
The window proxy (SPEC 2-3, `sweep.kernels`) assumes the worker is idle when a window
closes: its batches are the window's Poisson count, ``min(B_max, 1 + Poisson(lam T_max))``,
and its batches reach the worker as Poisson "super-requests". Under load both are wrong for
the batcher of SPEC 7: when the worker frees up it takes *every* waiting request (up to
``B_max``), so batches grow with the backlog, the worker stays busy, and the system is stable
for every ``lam < B_max / T_svc(B_max)`` — where the proxy often reports ``rho > 1`` and
``+inf``. This module models that batcher with the same O(1), pure-``jax.numpy`` style.

Derivation (one worker, Poisson arrivals at ``lam``, ``S(b) = T_fixed + t_req b``)
-----------------------------------------------------------------------------------
1. *Effective window.* Let the previous batch be dispatched at ``d'`` and take ``S'`` to
   serve. Without carry-over, the next window is opened by the first arrival after ``d'``,
   at ``a_o = d' + E``, ``E ~ Exp(lam)``, and the batch is dispatched at
   ``d = max(d' + S', min(t_full, a_o + T_max))``. Counting the followers of the opener
   case by case (``tau_k`` = arrival of the ``k = B_max - 1``-th follower) gives *exactly*

       followers = min(k, N(T_eff)),      T_eff = max(T_max, S' - E),

   with ``N`` the Poisson count after the opener: the batch is a window batch of SPEC 2 with
   the window stretched to the time the worker is still busy. The accumulation delay of a
   request is that window's (the opener waits until the worker frees, the followers the
   rest), except when a *full* batch waits for the worker — that wait is step 3. So the
   batch moments are the SPEC 2 window moments (`kernels.window_moments`) averaged over
   ``E``: an ``n_nodes``-point midpoint rule in ``E``'s quantiles (``E_j = -ln(1 - u_j) /
   lam``, ``u_j = (j + 1/2) / n``); moments mix per batch, delays per request.
2. *Fixed point.* ``S'`` is taken at two points, ``S(b) -+ sd(S')``, with weight 1/2
   each (so the convexity of ``(S' - E)^+`` is kept); ``Var(S') = t_req^2 Var(B) +
   cv^2 S(b)^2`` with the batch-size variance of the recursion ``B' ~ Poisson(lam S(B))``,
   ``Var(B) = lam S(b) / (1 - (lam t_req)^2)``, capped at ``(b - 1)(B_max - b)`` (the largest
   variance of a size in ``[1, B_max]`` with mean ``b``). The mean batch solves

       b = G(b) = min(B_max, max(F(b), lam S(b))),

   ``F(b)`` the mean of step 1's batch. The ``lam S(b)`` floor is exact flow balance: a batch
   holds everything that arrived since the previous dispatch, and dispatches are at least
   ``S`` apart, so ``E[B] >= lam E[S] = lam S(E[B])`` (``S`` is affine; noise has mean 1);
   it binds when the cap truncates batches and the backlog carries over, and then the
   missing mass is put on full batches (weight ``w`` on a point mass at ``B_max``, chosen
   so that the mean is ``b*``). ``G`` is increasing with slope ``<= lam t_req < 1``, so
   ``G(b) - b`` is strictly decreasing and the root in ``[1, B_max]`` is unique: a fixed
   number (``N_ROOT`` = 18) of regula-falsi steps (Illinois variant, bracketing) finds it
   (to ~1e-10 relative on random inputs with ``B_max`` up to 4096).
3. *Backlog wait.* Requests that do not fit in a batch wait for whole batches of ``B_max``:
   the carry-over ``Z`` (waiting requests beyond a full batch) follows the Lindley walk
   ``Z' = max(Z + A - B_max, 0)``, ``A`` the arrivals during one full service, i.e. a
   GI/G/1 queue of full-batch units: arrivals every ``B_max`` Poisson gaps (Erlang, SCV
   ``c_a^2 = 1/B_max``), service ``S(B_max) X`` (SCV ``c_s^2 = cv^2``), load
   ``rho_full = lam S(B_max) / B_max``. Its mean wait is the Kramer-Langenbach-Belz
   (Allen-Cunneen) formula

       E[W] = g rho_full S(B_max) (c_a^2 + c_s^2) / (2 (1 - rho_full)),
       g = exp(-2 (1 - rho_full) (1 - c_a^2)^2 / (3 rho_full (c_a^2 + c_s^2)))  (c_a^2 < 1),

   exact (P-K) for Poisson arrivals (``B_max = 1``: ``c_a^2 = 1``, ``g = 1``), exact in heavy
   traffic (Kingman), and vanishing fast at moderate load when batches are large (the
   Erlang arrivals are nearly regular). ``Var[W]`` generalises Takacs:
   ``Var[W] = E[W]^2 + (2/3) (E[S^3]/E[S^2]) E[W]`` (exact for M/G/1).
4. *Response.* ``E[T] = E[W] + E[T_batch] + E[T_svc]`` with request-weighted
   ``E[T_batch]`` (step 1) and ``E[T_svc] = T_fixed + t_req E[B^2]/E[B]``;
   ``sigma_T^2 = Var[W] + Var[T_batch] + Var[T_svc]`` (independence, as SPEC 4).
   Percentile ``p_q``: ``E[T]`` plus the three terms' q-quantile excesses over their means
   added in quadrature (exact for gaussians; the dominant term wins otherwise):
   - wait: a gamma law matched to ``(E[W], Var[W])``, quantile by Wilson-Hilferty
     ``m (1 - 1/(9a) + z_q / sqrt(9a))^3``, ``a = m^2 / Var`` (exponential-like tail);
   - accumulation: the smaller of (i) the exact full-batch law — a random request waits
     ``m ~ U{0..k}`` more gaps, ``P(T_b > x) = E[(k - N(lam x))^+] / B_max``, inverted by a
     fixed-step bisection — and (ii) the longest the window can stay open,
     ``max(T_max, S(b* + z_q sd_B))`` (timer, or the worker's previous service);
   - service: gaussian, ``z_q sd(T_svc)``.
   ``p_gauss = E[T] + z_q sigma_T`` and ``p_exp = -ln(1-q) E[T]`` (SPEC 4) are returned too.

Where it is exact, and its limits
---------------------------------
* ``B_max = 1``: ``k = 0``, every batch is one request, ``E[T_batch] = 0``, ``c_a^2 = 1``:
  ``E[T]`` is the Pollaczek-Khinchine M/G/1 response, exactly (and ``Var[W]`` is Takacs').
* ``T_max = inf``: ``T_eff = inf``, every batch is full, ``E[T_batch] = (B-1)/(2 lam)``
  exactly; the wait is the GI/G/1 (Erlang-``B_max`` arrivals) approximation instead of the
  proxy's M/G/1, which treats full batches as Poisson and overstates the wait by up to a
  factor ``B_max`` — the two agree at moderate load up to that wait term.
* Light load (``lam S -> 0``): ``T_eff -> T_max`` and ``E[W] -> 0``: the window proxy's
  batch, accumulation and service moments, to ``O(lam S)``.
* Heavy load: ``E[W]`` ~ Kingman's heavy-traffic limit, ``+inf`` exactly when
  ``lam >= B_max / T_svc(B_max)`` (``stable`` false; SPEC 3's ``stable``).
Approximations: ``S'`` by a two-point law around the mean batch, carry-over represented by
full batches, the KLB wait (it underestimates the Erlang-arrival wait by ~5-10% of E[T] at
rho_full >= 0.85 for B_max = 4-16), independence of the three terms (P99 of small batches at
mid load: up to +25%). Cost: 2 x 4 x (N_ROOT + 3) + N_BISECT, about 200 incomplete-gamma
evaluations per point (0.15-0.3 ms per point vmapped on two CPU cores, ~1000x the window
proxy) — O(1), but not free.
The benchmark (``benchmarks/batcher.py``) measures the error against the simulator.

Inputs are float64 scalars in SI units (vmap for batches); nothing is NaN for
``lam > 0``, ``b_max >= 1``, ``t_max >= 0`` (``inf`` allowed), ``t_fixed, t_req,
service_cv >= 0``, ``q`` in (0, 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from sweep._lazy import lazy_module
from sweep.models.base import Column
from sweep.models.dynamic.batching import window_moments
from sweep.models.dynamic.model import (
    BASE_COLUMNS,
    MS,
    PLAN_COLUMNS,
    SIM_COLUMNS,
    DynamicModel,
    Estimates,
    latency_nulls,
)

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
    from jax import Array, lax
    from jax.scipy import special

    from sweep import _numerics as numerics
else:
    numerics = lazy_module("sweep._numerics")
    special = lazy_module("jax.scipy.special")
    lax = lazy_module("jax.lax")
    jax = lazy_module("jax")
    jnp = lazy_module("jax.numpy")

__all__ = ["N_BISECT", "N_NODES", "N_ROOT", "BatcherModel", "batcher_point"]

INF = math.inf
#: quadrature nodes over the opener's offset E ~ Exp(lam) (step 1)
N_NODES = 4
#: regula-falsi (Illinois) steps for the mean batch (step 2)
N_ROOT = 18
#: bisection steps for the full-batch accumulation quantile: precision 2**-N_BISECT
N_BISECT = 28


def _f64(x) -> Array:
    return jnp.asarray(x, dtype=jnp.float64)


def _mixed_moments(lam, s_prev, t_max, b_max, n_nodes):
    """Window moments with T_eff = max(T_max, s_prev - E), averaged over E ~ Exp(lam).

    Returns per-batch (eb, eb2, eb3) and request-weighted (etb, etb2). ``t_max`` must be
    finite here (the caller routes T_max = inf to the full-batch moments).
    """
    u = (jnp.arange(n_nodes, dtype=jnp.float64) + 0.5) / n_nodes
    e = -jnp.log1p(-u) / lam
    t_eff = jnp.maximum(t_max, (s_prev[:, None] - e[None, :]).reshape(-1))
    bm = jax.vmap(window_moments, in_axes=(None, 0, None))(lam, t_eff, b_max)
    eb = jnp.mean(bm.eb)
    eb2 = jnp.mean(bm.eb2)
    eb3 = jnp.mean(bm.eb3)
    etb = jnp.mean(bm.eb * bm.etb) / eb
    etb2 = jnp.mean(bm.eb * bm.etb2) / eb
    return eb, eb2, eb3, etb, etb2


def _wh_quantile(mean, var, z):
    """q-quantile (z = Phi^-1(q)) of a gamma law with this mean and variance, by
    Wilson-Hilferty: m (1 - 1/(9a) + z / sqrt(9a))^3, a = m^2 / var; the mean where var = 0."""
    pos = (var > 0.0) & (mean > 0.0)
    ratio = jnp.sqrt(jnp.where(pos, var, 1.0)) / jnp.where(pos, mean, 1.0)  # CV; no underflow
    inv9a = jnp.where(pos, jnp.minimum(ratio * ratio / 9.0, 1e6), 0.0)
    base = jnp.maximum(1.0 - inv9a + z * jnp.sqrt(inv9a), 0.0)
    return jnp.where(pos, mean * base**3, mean)


def _full_acc_quantile(lam, b_max, q, z):
    """q-quantile of the accumulation delay of a random request in a FULL batch.

    The request waits for m ~ Uniform{0..k} (k = B_max - 1) more Exp(lam) gaps, so
        P(T_b > x) = (1/B) sum_{m=1..k} P(N(lam x) < m) = E[(k - N)^+] / B
                   = (k P(N <= k-1) - lam x P(N <= k-2)) / B,   N ~ Poisson(lam x);
    solved for P(T_b > x) = 1 - q by bisection (fixed steps) below 1.5 x the Erlang(k)
    q-quantile, an upper bound. 0 for B_max = 1.
    """
    k = b_max - 1.0
    x_hi = 1.5 * _wh_quantile(k / lam, k / (lam * lam), z) + 1e-300

    def tail(x):
        mu = lam * x
        _, lower = numerics.poisson_tails(k, mu)
        return (k * lower[3] - mu * lower[2]) / b_max

    def step(_, lohi):
        lo, hi = lohi
        mid = 0.5 * (lo + hi)
        above = tail(mid) > 1.0 - q
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    lo, hi = lax.fori_loop(0, N_BISECT, step, (jnp.zeros_like(x_hi), x_hi))
    return jnp.where(k > 0.0, 0.5 * (lo + hi), 0.0)


def batcher_point(lam, b_max, t_max, t_fixed, t_req, service_cv, q, *, n_nodes: int = N_NODES) -> dict[str, Array]:
    """Greedy-batcher approximation for one point (see the module docstring).

    Arguments (float64 scalars, SI): per-replica arrival rate ``lam`` (1/s), batch cap
    ``b_max``, window ``t_max`` (s, ``inf`` = full batches), ``t_fixed``, ``t_req`` (s),
    multiplicative service-noise CV ``service_cv``, percentile ``q`` in (0, 1) (``p_q`` is
    an upper-tail estimate, meant for ``q >= 0.5``).

    Returns float64 scalars (bools for flags): ``e_resp`` (E[T], s), ``p_q`` (the
    q-percentile estimate, step 4 of the module docstring), ``p_gauss``, ``p_exp``, ``sd_resp``,
    ``e_wait`` (backlog wait), ``e_batch`` (request-weighted accumulation delay), ``e_svc``
    (request-weighted service time), ``mean_batch`` (b*), ``rho`` (worker utilisation
    ``lam S(b*) / b*``), ``rho_full`` (``lam S(B_max) / B_max``), ``stable``
    (``lam S(B_max) < B_max``). Where not stable every time is ``+inf``, ``rho`` is
    ``rho_full`` and ``mean_batch`` is ``b_max``.
    """
    lam = jnp.maximum(_f64(lam), 1e-300)
    b_max = jnp.maximum(_f64(b_max), 1.0)
    t_max = _f64(t_max)
    tf = _f64(t_fixed)
    tr = _f64(t_req)
    cv = _f64(service_cv)
    q = _f64(q)

    s_cap = tf + tr * b_max
    stable = lam * s_cap < b_max
    rho_full = lam * s_cap / b_max
    is_full = jnp.isinf(t_max)
    t_fin = jnp.where(is_full, 0.0, t_max)

    def moments(b):
        # previous service at two points b -+ sd_B (sd of the AR(1) batch-size recursion
        # b' = Poisson(lam S(b)): Var = lam S / (1 - (lam t_req)^2), at most (b-1)(B-b))
        # plus the service noise
        lt = jnp.minimum(lam * tr, 0.999)
        var_b = jnp.minimum(lam * (tf + tr * b) / (1.0 - lt * lt), (b - 1.0) * (b_max - b))
        sd_s = jnp.sqrt(tr * tr * jnp.maximum(var_b, 0.0) + (cv * (tf + tr * b)) ** 2)
        s_prev = jnp.stack([tf + tr * b - sd_s, tf + tr * b + sd_s])
        return _mixed_moments(lam, s_prev, t_fin, b_max, n_nodes)

    def g_minus_b(b):
        eb = moments(b)[0]
        g = jnp.minimum(b_max, jnp.maximum(eb, lam * (tf + tr * b)))
        return g - b

    def illinois(_, st):
        # regula falsi, Illinois variant: keeps a sign-changing bracket [a, c], superlinear
        a, fa, c, fc = st
        den = fc - fa
        ok = jnp.abs(den) > 0.0
        x = jnp.where(ok, (a * fc - c * fa) / jnp.where(ok, den, 1.0), 0.5 * (a + c))
        x = jnp.clip(x, jnp.minimum(a, c), jnp.maximum(a, c))
        fx = g_minus_b(x)
        same = fx * fc > 0.0
        a, fa = jnp.where(same, a, c), jnp.where(same, 0.5 * fa, fc)
        return a, fa, x, fx

    one = _f64(1.0)
    _, _, b_root, _ = lax.fori_loop(0, N_ROOT, illinois, (one, g_minus_b(one), b_max, g_minus_b(b_max)))
    b_star = jnp.where(is_full | ~stable, b_max, b_root)

    eb, eb2, eb3, etb, etb2 = moments(b_star)
    # carry-over: put the missing mean on full batches (weight w on B_max)
    gap = b_max - eb
    w = jnp.where(gap > 1e-12, jnp.clip((b_star - eb) / jnp.where(gap > 1e-12, gap, 1.0), 0.0, 1.0), 0.0)
    eb_m = (1.0 - w) * eb + w * b_max
    eb2 = (1.0 - w) * eb2 + w * b_max**2
    eb3 = (1.0 - w) * eb3 + w * b_max**3
    # (the accumulation delay keeps the window mixture's values, which already weight full
    # windows.) Full-batch regime (T_max = inf): exact moments.
    fb_etb = (b_max - 1.0) / (2.0 * lam)
    fb_var_tb = (b_max - 1.0) * (b_max + 7.0) / (12.0 * lam * lam)
    eb_m = jnp.where(is_full, b_max, eb_m)
    eb2 = jnp.where(is_full, b_max**2, eb2)
    eb3 = jnp.where(is_full, b_max**3, eb3)
    var_tb = jnp.where(is_full, fb_var_tb, jnp.maximum(etb2 - etb * etb, 0.0))
    etb = jnp.where(is_full, fb_etb, etb)

    m2 = 1.0 + cv * cv
    # request-weighted service
    mean_b_r = eb2 / eb_m
    var_b_r = jnp.where(is_full, 0.0, jnp.maximum(eb3 / eb_m - mean_b_r * mean_b_r, 0.0))
    e_svc = tf + tr * mean_b_r
    var_svc = m2 * tr * tr * var_b_r + (m2 - 1.0) * e_svc * e_svc

    # backlog wait: GI/G/1 of full-batch units (KLB), Takacs-type variance
    ca2 = 1.0 / b_max
    cs2 = cv * cv
    c2 = ca2 + cs2
    rf = jnp.where(stable, rho_full, 0.5)
    slack = 1.0 - rf
    g_klb = jnp.where(
        (ca2 < 1.0) & (rf > 0.0),
        jnp.exp(-2.0 * slack * (1.0 - ca2) ** 2 / (3.0 * jnp.maximum(rf, 1e-300) * c2)),
        1.0,
    )
    e_wait = g_klb * rf * s_cap * c2 / (2.0 * slack)
    var_wait = e_wait * e_wait + (2.0 / 3.0) * s_cap * m2 * m2 * e_wait  # E[X^3]/E[X^2] = m2^2

    e_resp = e_wait + etb + e_svc
    var_t = var_wait + var_tb + var_svc
    sd = jnp.sqrt(var_t)
    z = special.ndtri(q)
    p_gauss = e_resp + z * sd
    p_exp = -jnp.log1p(-q) * e_resp
    # percentile: quantile excesses of the three terms added in quadrature
    x_wait = _wh_quantile(e_wait, var_wait, z) - e_wait  # exponential-like: gamma
    # the accumulation ends by the time the batch fills (exact full-batch law), the window
    # times out, or the worker frees: a previous service at a high batch size
    sd_b = jnp.sqrt(jnp.maximum(eb2 - eb_m * eb_m, 0.0))
    s_prev_q = tf + tr * jnp.minimum(b_max, b_star + z * sd_b)
    acc_q = jnp.minimum(_full_acc_quantile(lam, b_max, q, z), jnp.maximum(t_max, s_prev_q))
    x_acc = jnp.maximum(acc_q - etb, 0.0)
    x_svc = z * jnp.sqrt(var_svc)
    p_q = e_resp + jnp.sqrt(x_wait * x_wait + x_acc * x_acc + x_svc * x_svc)

    def gate(x):
        return jnp.where(stable, x, INF)

    rho = jnp.where(stable, lam * (tf + tr * b_star) / b_star, rho_full)
    return {
        "e_resp": gate(e_resp),
        "p_q": gate(p_q),
        "p_gauss": gate(p_gauss),
        "p_exp": gate(p_exp),
        "sd_resp": gate(sd),
        "e_wait": gate(e_wait),
        "e_batch": gate(etb),
        "e_svc": jnp.where(stable, e_svc, s_cap),
        "mean_batch": b_star,
        "rho": rho,
        "rho_full": rho_full,
        "stable": stable,
    }


class BatcherModel(DynamicModel):
    """`latency_model = "batcher"`: the SLO is checked against this module's percentile,
    and its utilisation drives the operating rules, like its latency."""

    name: ClassVar[str] = "batcher"
    columns: ClassVar[tuple[Column, ...]] = latency_nulls(BASE_COLUMNS, "stable") + (
        Column("batcher_e_resp_ms", "float64", "ms",
               "E[T] of the greedy-batcher model (docs/model.md, the batcher model).",
               null_when="stable"),
        Column("batcher_p_ms", "float64", "ms",
               "Its percentile estimate at `percentile` (latency_ms with latency_model = batcher).",
               null_when="stable"),
        Column("batcher_mean_batch", "float64", "requests",
               "Its mean batch size: the fixed point between load and batch size."),
        Column("batcher_rho", "float64", "-",
               "Its utilisation lambda T_svc(b*) / b* (drives the operating rules with latency_model = batcher)."),
    ) + SIM_COLUMNS + PLAN_COLUMNS

    #: Measured: compiling it peaks 340 MB above compiling the window proxy (18 unrolled
    #: regula-falsi steps, 4 quadrature nodes, a bisection: a large XLA graph).
    compile_mb: ClassVar[int] = 340
    #: The fixed point's batch and utilisation grow with load too (G(b) rises in lambda).
    monotone_in_load: ClassVar[tuple[str, ...]] = DynamicModel.monotone_in_load + ("batcher_mean_batch", "batcher_rho")
    #: Its compilations are slow: the contract runs the first grid only (both regimes, given times).
    contract_variants: ClassVar[tuple[Mapping[str, Any], ...]] = DynamicModel.contract_variants[:1]

    def estimate(self, e: Estimates) -> tuple[Array, Array, dict[str, Array]]:
        bt = batcher_point(e.lam, e.b_max, e.t_max, e.t_fixed, e.t_req, e.service_cv, e.q)
        extra = {"batcher_e_resp_ms": bt["e_resp"] * MS, "batcher_p_ms": bt["p_q"] * MS,
                 "batcher_mean_batch": bt["mean_batch"], "batcher_rho": bt["rho"]}
        return bt["p_q"], bt["rho"], extra
