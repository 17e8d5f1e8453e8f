"""Numerically delicate helpers, kept together; each says why it is safe.

All of them are elementwise `jax.numpy` code with no data-dependent control flow, so they
jit and vmap to straight-line vector code. Branches are `jnp.where` selections, and every
discarded branch is fed a harmless input first (the "double where"), so an infinity or NaN
in a branch that is not taken never leaks into the result or its gradient.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

from sweep._gamma import gammainc_pq, poisson_pmf

__all__ = ["gammainc_pq", "opaque_one", "poisson_pmf", "poisson_tails", "safe_div"]


def safe_div(num: Array, den: Array, ok: Array, fill: float) -> Array:
    """`num / den` where `ok`, else `fill`; the division never sees a bad denominator.

    Safe: the denominator is replaced by 1 where `ok` is false before dividing, so the
    untaken branch computes a finite number that `where` then discards.
    """
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), fill)


def opaque_one(x: Array) -> Array:
    """1.0, NaN where `x` is NaN: a 1 that XLA cannot fold away. Dividing a value by it
    changes nothing (x / 1 == x exactly) and makes XLA:CPU keep the quotient in memory:
    a division is never duplicated into the consumers a fusion would otherwise copy a
    cheap chain of arithmetic into (`sweep._gamma` multiplies by the same 1 inline)."""
    return jnp.where(jnp.isnan(x), x, 1.0)


def poisson_tails(k: Array, mu: Array) -> tuple[Array, Array]:
    """Upper and lower Poisson tails around `k` from ONE incomplete-gamma evaluation.

    For N ~ Poisson(mu) returns two arrays of shape (6,) + k.shape:
        upper[i] = P(N >= k - 3 + i)     for i = 0..5  (indices k-3 .. k+2)
        lower[i] = P(N <= k - 4 + i)     for i = 0..5  (indices k-4 .. k+1)

    Safe: `gammainc_pq(k + 2, mu)` gives both P(N >= k+2) and P(N <= k+1), each accurate
    on its own (the smaller is computed directly, not as 1 minus the larger). The other
    upper tails follow by ADDING pmf terms going down (no cancellation); the lower tails by
    subtracting them going down, which loses relative accuracy only where the lower tail is
    already negligible beside the upper one (mu >> k), so every sum built from both stays
    accurate in absolute terms. Indices below zero are exact constants (P(N >= j) = 1,
    P(N <= j) = 0 for j < 0).
    """
    upper_top, lower_top = gammainc_pq(k + 2.0, mu)  # P(N >= k+2), P(N <= k+1)
    uppers = [upper_top]
    lowers = [lower_top]
    for j in range(1, 6):  # index k+2-j for upper, k+1-j for lower
        idx_u = k + 2.0 - j
        uppers.append(uppers[-1] + poisson_pmf(idx_u, mu))
        idx_l = k + 1.0 - j
        lowers.append(jnp.maximum(lowers[-1] - poisson_pmf(idx_l + 1.0, mu), 0.0))
    upper = jnp.stack(uppers[::-1])  # indices k-3 .. k+2
    lower = jnp.stack(lowers[::-1])  # indices k-4 .. k+1
    offs_u = jnp.arange(-3.0, 3.0).reshape((6,) + (1,) * jnp.ndim(k))
    offs_l = jnp.arange(-4.0, 2.0).reshape((6,) + (1,) * jnp.ndim(k))
    upper = jnp.where(k + offs_u <= 0, 1.0, jnp.minimum(upper, 1.0))
    lower = jnp.where(k + offs_l < 0, 0.0, jnp.minimum(lower, 1.0))
    return upper, lower
