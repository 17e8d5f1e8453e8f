"""Planning under uncertainty and sensitivity (docs/uncertainty.md), inside the jitted chunk.

Both run the model's own per-point function, so every serving model gets them for free:

* `[uncertainty]`: each point is evaluated over S samples of its uncertain inputs (vmapped
  inside the point's vmap). Besides its own columns, a point hands the chunk's reduction
  a private (S,) mask: in which scenarios it would count for `replicas_min`, from which
  `sweep.decide.reduce` takes the bands of `replicas_min` (the fewest replicas each
  scenario needs). The samples are *common random numbers*: the same S standard
  draws (from `seed`) for every point, each scaled by the point's own grid value, so two
  configurations are compared on the same S scenarios and a chunk's answer does not depend
  on how the grid is chunked. The engine divides its chunk by S, so a call holds at most
  `chunk_size` (point, sample) evaluations whatever S is: memory stays bounded.
* `[sensitivity]`: derivatives of every SLO latency with respect to the arrival rate, the
  service-time coefficients (when they are inputs) and the token lengths, by automatic
  differentiation of the same function (`jax.jacfwd`, or `jax.jacrev` where the model says
  reverse mode is cheaper: `ServingModel.derivative_mode`); and `headroom_rps`, found by
  bisection on the arrival rate.

A point's samples share the work that depends on no sampled input: it runs once per point
(`sweep._numerics.over_samples`; `jax.vmap` over inputs broadcast to the samples left XLA
to compute part of it once per sample: S = 64 1.6x faster for dynamic batching, 1.1x for
continuous serving, `benchmarks/uncertainty.py`).

Both run over a chunk in blocks (`blocked`: `SAMPLE_BLOCK` evaluations, `DERIVATIVE_BLOCK`
points): their programs are long, and block-sized intermediates stay in the caches where
chunk-sized ones do not (`benchmarks/uncertainty.py`, continuous serving: S = 64 1.6x and
the derivatives 2.5x faster than one vmap over the chunk). Reverse-mode derivatives keep
every value and adjoint used twice in memory (`sweep._numerics.kept_in_memory`: XLA:CPU
would compute each again in every fused consumer), which pays in larger blocks
(`DERIVATIVE_BLOCK_REVERSE`: continuous serving's derivative program 30 % faster, its
executed arithmetic 30,515 to 16,631 operations per point).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from sweep._lazy import lazy_module
from sweep.decide.reduce import RULES_BY_SAMPLE
from sweep.decide.verdict import bounded, counts_for_replicas_min, slo_met
from sweep.grid.uncertainty import UncertaintyOptions
from sweep.models.base import ServingModel, band_stem

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
    from jax import Array

    from sweep import _numerics as numerics
else:
    numerics = lazy_module("sweep._numerics")
    jax = lazy_module("jax")
    jnp = lazy_module("jax.numpy")

QUANTILES = (5, 50, 95)
#: Bisection steps of `headroom_rps` in log rate: from [1e-6, 1e9] req/s at worst (a factor
#: 1e15, ln 34.5) 48 halvings leave a relative bracket of 34.5 / 2^48 = 1.2e-13.
HEADROOM_STEPS = 48
#: model evaluations per block of `[uncertainty]` (points x samples): 256 points at S = 64
SAMPLE_BLOCK = 16384
#: points per block of the `[sensitivity]` derivatives (forward mode)
DERIVATIVE_BLOCK = 256
#: ... in reverse mode, where every value and adjoint used twice is kept in memory: larger
#: blocks pay for the extra kernels (continuous serving, 32,768 points: 4,096 points 7-10 %
#: slower than 8,192, 16,384 20 % slower; benchmarks/uncertainty.py, README)
DERIVATIVE_BLOCK_REVERSE = 8192


def _domain(model: ServingModel, key: str) -> tuple[float, float]:
    d = model.param_by_key[key].domain
    assert d is not None
    lo = d.lo if not d.lo_open else np.nextafter(d.lo, np.inf)
    return float(lo), float(d.hi)


def draws(unc: UncertaintyOptions) -> tuple[np.ndarray, np.ndarray]:
    """The common standard draws: (S, n_dists) normal-or-uniform variates (by each dist's
    kind) and (S, n_cov) normals for the profile covariance. From `seed` alone (NumPy's
    PCG64, so the draws are the same on every platform and backend)."""
    rng = np.random.default_rng(unc.seed)
    s, n = unc.samples, len(unc.dists)
    z = rng.standard_normal((s, n))
    u = rng.random((s, n))
    kinds = np.array([d.kind == "uniform" for d in unc.dists], dtype=bool).reshape(1, n)
    zc = rng.standard_normal((s, len(unc.cov_keys)))
    return np.where(kinds, u, z), zc


def sample_inputs(x: Mapping[str, Array], unc: UncertaintyOptions, model: ServingModel,
                  z: Array, zc: Array) -> dict[str, Array]:
    """ONE point's inputs over the S samples: every key a (S,) array (the sampled ones drawn
    around the point's grid value, clipped to their domain; the rest repeated)."""
    s = unc.samples
    out = {k: jnp.broadcast_to(v, (s,)) for k, v in x.items()}
    for i, d in enumerate(unc.dists):
        key = _source(model, x, d.key)
        g = x[key]
        if d.kind == "normal":
            val = g * (d.a + d.b * z[:, i])
        elif d.kind == "lognormal":
            sig2 = float(np.log1p((d.b / d.a) ** 2))
            val = g * d.a * jnp.exp(np.sqrt(sig2) * z[:, i] - sig2 / 2)
        else:
            val = g * (d.a + (d.b - d.a) * z[:, i])
        lo, hi = _domain(model, d.key)
        out[key] = jnp.clip(val, lo, hi)
    for i, key in enumerate(unc.cov_keys):
        dev = sum(unc.cov_factor[i][j] * zc[:, j] for j in range(len(unc.cov_keys)))
        lo, hi = _domain(model, key)
        out[key] = jnp.clip(x[key] + dev, lo, hi)
    return out


def sampled_keys(x: Mapping[str, Array], unc: UncertaintyOptions, model: ServingModel) -> set[str]:
    """The inputs that `sample_inputs` draws (the rest are the same in every sample)."""
    return {_source(model, x, d.key) for d in unc.dists} | set(unc.cov_keys)


def _source(model: ServingModel, x: Mapping[str, Array], key: str) -> str:
    """The input that carries `key` at this point (e.g. seq_len where mean_seq_len follows it)."""
    return key if key in x else model.input_fallback.get(key, key)


def _meets(o: Mapping[str, Array], x: Mapping[str, Array], model: ServingModel) -> Array:
    """Stable and every SLO met (`p_slo_breach` counts the samples where this fails)."""
    return o["stable"] & slo_met([(o[lat], x[slo]) for lat, slo in model.slo_checks])


def _meets_rules(o: Mapping[str, Array], x: Mapping[str, Array], model: ServingModel, meets: Array) -> Array:
    """Per sample: the point would count for `replicas_min` in that scenario
    (`sweep.decide.verdict.counts_for_replicas_min`)."""
    feasible = o["mem_ok"] & bounded([o[lat] for lat, _ in model.slo_checks])
    return counts_for_replicas_min(feasible, meets, o["_rho_rules"], x["rho_max"])


def uncertainty_columns(x: Mapping[str, Array], model: ServingModel, kw: Mapping[str, Any],
                        unc: UncertaintyOptions, z: Array, zc: Array) -> dict[str, Array]:
    """`p_slo_breach` and the latency bands of ONE point."""
    xs = sample_inputs(x, unc, model, z, zc)
    sampled = sampled_keys(x, unc, model)
    o = numerics.over_samples(lambda q: model.point(q, **kw), {k: v for k, v in x.items() if k not in sampled},
                     {k: xs[k] for k in sampled})
    meets = _meets(o, x, model)
    out = {"p_slo_breach": 1.0 - jnp.mean(meets.astype(jnp.float64)),
           RULES_BY_SAMPLE: _meets_rules(o, x, model, meets)}
    # nearest rank: the sample at index round(q (S - 1)) of the sorted S. Latencies are >= 0
    # (NaN read as +inf), whose float64 bit patterns sort like the int64s they spell: XLA
    # sorts int64 about 4x faster than floats on CPU (measured: benchmarks/uncertainty.py)
    idx = [round(q / 100.0 * (unc.samples - 1)) for q in QUANTILES]
    for lat, _ in model.slo_checks:
        v = jnp.where(o[lat] > 0, o[lat], jnp.where(jnp.isnan(o[lat]), jnp.inf, 0.0))
        bits = jax.lax.sort(jax.lax.bitcast_convert_type(v, jnp.int64), is_stable=False)
        for q, i in zip(QUANTILES, idx):
            out[f"{band_stem(lat)}_p{q}_ms"] = jax.lax.bitcast_convert_type(bits[i], jnp.float64)
    return out


def sensitivity_keys(model: ServingModel, roofline: bool) -> tuple[str, ...]:
    return ("arrival_rps", *(() if roofline else model.coefficient_keys), *model.length_keys)


def derivative_columns(x: Mapping[str, Array], model: ServingModel, kw: Mapping[str, Any],
                       roofline: bool) -> dict[str, Array]:
    """d(SLO latency)/d(input) of ONE point (+inf where the latency is): `jax.jacfwd` (a
    tangent per input) or `jax.jacrev` (a cotangent per SLO latency), as the model's
    `derivative_mode` says. The inputs are differentiated as separate scalars, not as one
    stacked vector: the transpose of reading a vector's element is a pad per input, and XLA
    fused the whole backward pass into each of those pads (continuous serving, when measured
    with benchmarks/uncertainty.py: 8.5-9x the plain kernel, against 6.7-7x as scalars). In
    reverse mode the model runs through `numerics.kept_in_memory`, so that its backward pass is not
    recomputed inside each input's derivative (see the module docstring)."""
    names = sensitivity_keys(model, roofline)
    keys = tuple(_source(model, x, k) for k in names)
    lats = [lat for lat, _ in model.slo_checks]

    reverse = model.derivative_mode == "reverse"
    point: Callable[[dict[str, Array]], dict[str, Array]] = functools.partial(model.point, **kw)
    if reverse:  # every value and adjoint used twice kept in memory
        point = numerics.kept_in_memory(point)

    def f(theta: tuple[Array, ...]) -> tuple[Array, Array]:
        q = dict(x)
        q.update(zip(keys, theta))
        o = point(q)
        value = jnp.stack([o[lat] for lat in lats])
        return value, value

    theta0 = tuple(jnp.asarray(x[k], dtype=jnp.float64) for k in keys)
    jacobian = jax.jacrev if reverse else jax.jacfwd
    d, value = jacobian(f, has_aux=True)(theta0)  # one trace: the values ride along as aux
    # (stacking d into one (L, K) array makes XLA emit one fusion that recomputes every
    # input's derivative chain per element: minutes per thousand points; kept apart)
    out: dict[str, Array] = {}
    for i, lat in enumerate(lats):
        for j, k in enumerate(names):
            out[f"d_{band_stem(lat)}_d_{k}"] = jnp.where(jnp.isfinite(value[i]), d[j][i], jnp.inf)
    return out


def headroom(x: Mapping[str, Array], model: ServingModel, kw: Mapping[str, Any]) -> Array:
    """Largest arrival rate per replica up to which ONE point keeps meeting its SLO (stable,
    every SLO latency within its SLO), starting from its own rate: bisection in log rate on
    [its rate, 1e9 req/s], `HEADROOM_STEPS` halvings. The answer is the bracket's low end,
    which was evaluated and met; 0 where the point misses at its own rate (no headroom)."""
    _, hi_d = _domain(model, "arrival_rps")

    def meets(rate: Array) -> Array:
        q = dict(x)
        q["arrival_rps"] = rate
        return _meets(model.point(q, **kw), x, model)

    own = x["arrival_rps"]
    at_own = meets(own)
    top_met = meets(jnp.asarray(hi_d))

    def step(_: int, b: tuple[Array, Array]) -> tuple[Array, Array]:
        a, c = b
        mid = jnp.sqrt(a * c)
        ok = meets(mid)
        return jnp.where(ok, mid, a), jnp.where(ok, c, mid)

    lo, _ = jax.lax.fori_loop(0, HEADROOM_STEPS, step, (own, jnp.asarray(hi_d)))
    rate = jnp.where(at_own, jnp.where(top_met, hi_d, lo), 0.0)
    return model.per_replica(x, rate)


def plan_values(x: Mapping[str, Array], *, model: ServingModel, kw: Mapping[str, Any],
                uncertainty: UncertaintyOptions | None, sensitivity: bool, roofline: bool) -> dict[str, Array]:
    """The planning columns of a batch of points (`x`: every input a (n,) array, catalog
    figures included)."""
    out: dict[str, Array] = {}
    if uncertainty is not None:
        z_np, zc_np = draws(uncertainty)
        z, zc = jnp.asarray(z_np), jnp.asarray(zc_np)
        out.update(blocked(lambda p: uncertainty_columns(p, model, kw, uncertainty, z, zc), dict(x),
                           max(SAMPLE_BLOCK // uncertainty.samples, 1)))
    if sensitivity:
        out.update(derivative_values(x, model, kw, roofline))
        out["headroom_rps"] = jax.vmap(lambda p: headroom(p, model, kw))(dict(x))
    return out


def derivative_values(x: Mapping[str, Array], model: ServingModel, kw: Mapping[str, Any],
                      roofline: bool) -> dict[str, Array]:
    """The derivative columns of a batch of points, `DERIVATIVE_BLOCK` points at a time,
    after the model's `presolve` over the whole batch (an iterative solve inside a block
    would run once per block: continuous serving's fixed point, 8 iterations)."""
    xs = dict(x)
    xs.update(jax.vmap(lambda p: model.presolve(p, **kw))(dict(x)))
    block = DERIVATIVE_BLOCK_REVERSE if model.derivative_mode == "reverse" else DERIVATIVE_BLOCK
    return blocked(lambda p: derivative_columns(p, model, kw, roofline), xs, block)


def blocked(f: Any, x: Mapping[str, Array], block: int) -> dict[str, Array]:
    """``jax.vmap(f)(x)`` computed `block` points at a time (`jax.lax.map` with a batch size):
    the planning programs are long (S samples per point, a derivative per input), and over a
    whole chunk every intermediate is an array too large for the caches; a block's fit.
    The points are padded to a whole number of blocks with copies of the last one (one
    trace of `f`, no remainder program) and the padding is cut from the result."""
    n = len(next(iter(x.values())))
    if n <= block:
        return jax.vmap(f)(x)
    pad = -n % block
    xp = {k: jnp.concatenate([v, jnp.repeat(v[-1:], pad, axis=0)]) if pad else v for k, v in x.items()}
    out = jax.lax.map(f, xp, batch_size=block)
    return {k: v[:n] for k, v in out.items()}
