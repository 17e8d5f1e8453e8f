"""The dynamic batcher's batch-size and accumulation-delay moments (SPEC 2), ONE point.

A batcher with window `T_max` and cap `B_max`: the first request opens the window; the
batch closes when `B_max` requests are in it or `T_max` has passed. `T_max = inf` is the
seed's full-batch regime. Every function takes float64 scalars in SI units (seconds,
1/s) and is O(1): the windowed closed forms need one incomplete-gamma evaluation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from sweep._lazy import lazy_module

if TYPE_CHECKING:
    import jax.numpy as jnp
    from jax import Array

    from sweep import _numerics as numerics
else:
    numerics = lazy_module("sweep._numerics")
    jnp = lazy_module("jax.numpy")


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
    All tails come from one incomplete-gamma evaluation (`numerics.poisson_tails`).
    """
    k = b_max - 1.0
    mu = lam * t_max
    upper, lower = numerics.poisson_tails(k, mu)
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


def never_fills(t_max_s: ArrayLike, queue_capacity: ArrayLike, b_max: ArrayLike) -> np.ndarray:
    """True where a batch can never fill: no window (T_max = inf) and fewer waiting places
    (K) than the batch needs. Such a grid is rejected at validation (SPEC 7)."""
    return (np.isinf(np.asarray(t_max_s, dtype=np.float64))
            & (np.asarray(queue_capacity) < np.round(np.asarray(b_max, dtype=np.float64))))
