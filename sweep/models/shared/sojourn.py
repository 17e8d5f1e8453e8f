"""Sojourn-time distributions of one stage, and of the sum of two independent ones (ms).

A stage that knows the distribution of its sojourn time T (arrival to departure, one
request) declares it as a `Sojourn`: T = shift_ms + W with W >= 0, an atom P(W = 0) = atom,
and the rest of W's mass continuous, given by W's CDF and quantile function. Everything is
for ONE point (scalars; the engine vmaps the model that calls it).

`sum_cdf` and `sum_quantile` give the distribution of T1 + T2 for independent T1, T2 (the
tandem's end-to-end latency, `sweep.models.compose`). With F_i the CDF of W_i, a_i its atom
and f1 the density of W1's continuous part (`jax.grad` of F1 away from 0),

    P(W1 + W2 <= x) = a1 F2(x) + a2 (F1(x) - a1) + int_0^x (F2(x - u) - a2) f1(u) du,

the three terms being (W1 = 0), (W2 = 0 < W1) and (both continuous). The integral is
composite Gauss-Legendre (`GL_NODES` per panel) over panels that halve towards both ends of
[0, x] down to 2^-`PANEL_LEVELS` of x, so that a stage much faster than the other (its mass
packed near one end) is still resolved, with more edges where either density may jump
(`Sojourn.breaks_ms`: M/D/1's at multiples of D), between which the integrand is smooth.
It is then exact to the rounding of 1 - F (`tests/test_models_sojourn.py`: the
hypoexponential CDF at rate ratios up to 1e7).

`sum_quantile` inverts it by false position (`regula_falsi`: the CDF of the sum is
continuous above 0, its one atom, at 0, is handled exactly) on a bracket that holds for any
two non-negative variables: below, the larger of the two quantiles (W1 + W2 >= W1 and >=
W2); above, the union bound Q1((1+q)/2) + Q2((1+q)/2) (`union_bound`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sweep._lazy import lazy_module

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
    from jax import Array
else:
    jax = lazy_module("jax")
    jnp = lazy_module("jax.numpy")

INF = math.inf
#: Illinois steps of `regula_falsi`: 16 reach rounding on every pair of toy stages tried
#: (M/M/1 and M/D/1, loads 0.001-0.99, service ratios 1e-3-1e3, P1-P99.9999); 24 for margin
ROOT_STEPS = 24
#: Panels halve towards each end of [0, x] down to 2^-PANEL_LEVELS x ...
PANEL_LEVELS = 24
#: ... with this many Gauss-Legendre nodes on each.
GL_NODES = 12


def _gl01(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1]."""
    g, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (g + 1.0), 0.5 * w


def _geometric_edges(levels: int) -> tuple[np.ndarray, np.ndarray]:
    """Panel edges e in [0, 1] halving towards both ends, and 1 - e without cancellation."""
    low = np.array([0.0, *(2.0 ** -k for k in range(levels, 1, -1))])  # 0, 2^-L, ..., 1/4
    edges = np.concatenate([low, [0.5], 1.0 - low[::-1]])
    return edges, np.concatenate([1.0 - low, [0.5], low[::-1]])


_G, _GW = (a[None, :] for a in _gl01(GL_NODES))  # (1, GL_NODES): broadcast over panels
_E, _EC = _geometric_edges(PANEL_LEVELS)


@dataclass(frozen=True)
class Sojourn:
    """T = shift_ms + W for one point: W >= 0, P(W = 0) = `atom`, the rest continuous.

    `cdf_w(w)` is P(W <= w) (0 for w < 0, the atom included at 0), differentiable in w
    away from 0 with a derivative smooth between `breaks_ms`; `quantile_w(p)` is the
    smallest w with cdf_w(w) >= p (0 where p <= atom). Where `bounded` is false T is +inf:
    the callables then describe a finite stand-in (built from guarded parameters, never
    NaN), which every result here masks.
    """

    shift_ms: Array
    atom: Array
    mean_ms: Array
    cdf_w: Callable[[Array], Array]
    quantile_w: Callable[[Array], Array]
    bounded: Array
    #: where W's density may jump or kink (shape (n,), n static; the quadrature puts panel
    #: edges there): M/D/1's at multiples of D
    breaks_ms: Array = field(default_factory=lambda: jnp.zeros((0,)))

    def cdf(self, t: Array) -> Array:
        """P(T <= t); 0 where unbounded."""
        return jnp.where(self.bounded, self.cdf_w(t - self.shift_ms), 0.0)

    def quantile(self, p: Array) -> Array:
        """The smallest t with P(T <= t) >= p; +inf where unbounded."""
        return jnp.where(self.bounded, self.shift_ms + self.quantile_w(p), INF)

    def mean(self) -> Array:
        return jnp.where(self.bounded, self.mean_ms, INF)


def exponential(rate_per_ms: Array, bounded: Array) -> Sojourn:
    """T ~ Exp(rate) (the M/M/1 sojourn, rate mu - lambda): no shift, no atom."""
    rate = jnp.where(bounded, rate_per_ms, 1.0)

    def cdf_w(w: Array) -> Array:
        return jnp.where(w >= 0.0, -jnp.expm1(-rate * jnp.maximum(w, 0.0)), 0.0)

    def quantile_w(p: Array) -> Array:
        return -jnp.log1p(-p) / rate

    return Sojourn(jnp.zeros_like(rate), jnp.zeros_like(rate), 1.0 / rate, cdf_w, quantile_w, bounded)


def _sum_cdf_w(first: Sojourn, second: Sojourn, x: Array) -> Array:
    """P(W1 + W2 <= x) (module docstring). Each panel edge is held as (u, x - u), each
    coordinate computed where it is exact (near 0 of its own), so that nodes near either end
    of [0, x] are exact in the coordinate the integrand reads there."""
    xs = jnp.maximum(x, 0.0)
    b1 = jnp.clip(first.breaks_ms, 0.0, xs)
    b2 = jnp.clip(second.breaks_ms, 0.0, xs)
    u = jnp.concatenate([xs * _E, b1, xs - b2])
    v = jnp.concatenate([xs * _EC, xs - b1, b2])
    order = jnp.argsort(u)
    u, v = u[order], v[order]
    width = (u[1:] - u[:-1])[:, None]
    nodes_u = u[:-1, None] + width * _G  # (panels, GL_NODES)
    nodes_v = v[1:, None] + (v[:-1] - v[1:])[:, None] * (1.0 - _G)  # = x - nodes_u
    f1 = jax.vmap(jax.grad(first.cdf_w))(nodes_u.reshape(-1)).reshape(nodes_u.shape)
    h2 = jax.vmap(second.cdf_w)(nodes_v.reshape(-1)).reshape(nodes_v.shape) - second.atom
    inner = jnp.sum(width * _GW * f1 * h2)
    p = first.atom * second.cdf_w(xs) + second.atom * (first.cdf_w(xs) - first.atom) + inner
    return jnp.where(x >= 0.0, jnp.clip(p, 0.0, 1.0), 0.0)


def regula_falsi(cdf: Callable[[Array], Array], p: Array, lo: Array, hi: Array, steps: int = ROOT_STEPS) -> Array:
    """The smallest t in [lo, hi] with cdf(t) >= p for a `cdf` continuous on (lo, hi] with
    cdf(hi) >= p: the Illinois method (false position; an end kept twice running has its
    value halved), which keeps a bracket cdf(a) < p <= cdf(b) and returns b (lo where
    cdf(lo) >= p already). Superlinear (order 1.44), where bisection would need 64 steps."""

    def step(_: int, s: tuple[Array, ...]) -> tuple[Array, ...]:
        a, fa, b, fb, side = s
        c = jnp.clip(a + (b - a) * (fa / (fa - fb)), a, b)
        fc = cdf(c) - p
        left = fc >= 0.0  # the root is in [a, c]: c is the new b
        return (jnp.where(left, a, c), jnp.where(left, jnp.where(side > 0, 0.5 * fa, fa), fc),
                jnp.where(left, c, b), jnp.where(left, fc, jnp.where(side < 0, 0.5 * fb, fb)),
                jnp.where(left, 1.0, -1.0))

    f_lo = cdf(lo) - p
    # fa < 0 <= fb keeps fa - fb < 0; the early return below covers f_lo >= 0
    s = (lo, jnp.minimum(f_lo, -1e-300), hi, cdf(hi) - p, jnp.zeros_like(p))
    return jnp.where(f_lo >= 0.0, lo, jax.lax.fori_loop(0, steps, step, s)[2])


def sum_cdf(first: Sojourn, second: Sojourn, t: Array) -> Array:
    """P(T1 + T2 <= t) for independent T1, T2; 0 where either is unbounded."""
    x = t - first.shift_ms - second.shift_ms
    return jnp.where(first.bounded & second.bounded, _sum_cdf_w(first, second, x), 0.0)


def sum_quantile(first: Sojourn, second: Sojourn, p: Array) -> Array:
    """The p-quantile of T1 + T2 for independent T1, T2 (false position on their CDF); +inf
    where either is unbounded; exactly the two shifts where both atoms together hold p."""
    lo = jnp.maximum(first.quantile_w(p), second.quantile_w(p))
    r = 0.5 * (1.0 + p)
    hi = first.quantile_w(r) + second.quantile_w(r)
    x = regula_falsi(lambda x: _sum_cdf_w(first, second, x), p, lo, jnp.maximum(hi, lo))
    x = jnp.where(first.atom * second.atom >= p, 0.0, x)
    return jnp.where(first.bounded & second.bounded, first.shift_ms + second.shift_ms + x, INF)


def union_bound(q1: Array, q2: Array) -> Array:
    """Given each stage's quantile at (1 + p) / 2, an upper bound of the p-quantile of
    T1 + T2 whatever their dependence (Bonferroni: P(T1 + T2 > a + b) <= P(T1 > a) + P(T2 > b)
    <= 2 (1 - (1 + p) / 2) = 1 - p)."""
    return q1 + q2
