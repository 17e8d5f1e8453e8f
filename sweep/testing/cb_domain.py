"""Random continuous-batching configurations across SPEC 10's validated domain.

SPEC 10 judges the analytic model "on configurations drawn at random across the validated
domain, never on chosen points". `draw(n, seed)` is that draw, shared by
`benchmarks/cb_accuracy.py` and `tests/test_cb_accuracy.py`. Per configuration,
independently (numpy ``default_rng(seed)``):

* **engine**: a (catalog model, catalog GPU, tensor-parallel degree in {1, 2, 4, 8},
  weight bytes per parameter: 2 (bf16), or 1 (FP8) with probability 0.3) drawn uniformly
  among the combinations whose weights fit in ``(1 - RESERVE)`` of the group's HBM with
  room for at least 1.5 mean reservations of the request mix; its step line
  ``(t_fixed, t_token, t_ctx)`` is the roofline's `sweep.models.shared.roofline.step_line`
  at the drawn mix and budget (the calibrated efficiency of the GPU entry, else SPEC 13's
  defaults), exactly as `sweep.models.continuous.model` builds it;
* **request mix**: prompt mean log-uniform in [16, 16384] tokens, prompt/output mean ratio
  log-uniform in [0.1, 100], output mean = prompt / ratio, redrawn until it lies in
  [2, 4096] (longer outputs are a cost of simulation, not of the model); prompt and output
  CVs uniform in [0, 2];
* **scheduler**: cap ``N`` log-uniform in [4, 1024] (rounded); token budget ``M = inf``
  with probability ``P_M_INF``, else log-uniform in [N, 16384] (rounded, >= N: SPEC 10);
  block 16 tokens;
* **KV capacity**: ``inf`` with probability ``1 - P_KV_BOUND``; else ``C`` such that the
  KV-limited slot count ``C / r`` (``r = P + O + b/2`` the mean reservation) is a fraction
  log-uniform in [0.1, 1.5] of ``N``, floored at 1.5 reservations and at the sum of the
  prompt's and the output's 99th percentiles (so that rejections, which SPEC 10 drops and
  the analytic model does not describe, stay rare), rounded up to whole blocks;
* **noise**: ``service_cv`` uniform in [0, 0.3] with probability 0.3, else 0;
* **load**: uniform in [0.05, 0.95]; ``lam = load * capacity_rps`` of the analytic model
  (`sweep.models.continuous.analytic.cb_point`) at these inputs.

Returns float64[n] arrays under `CB_KEYS` (cb_point's keyword inputs but ``q``) plus the
labels ``load``, ``capacity_rps`` (what ``lam`` was scaled from), ``model``, ``gpu`` (str),
``tp``, ``weight_bytes``, ``moe`` (bool), ``kv_bound`` (bool), ``chunked`` (bool: finite
``M``) and ``kv_slots`` (``C / r``; inf when C is).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from sweep.catalog import packaged_catalog
from sweep.models.base import gpu_figures, model_figures
from sweep.models.continuous.analytic import cb_point
from sweep.models.shared import roofline as rl

__all__ = ["CB_KEYS", "QS", "TARGETS", "analytic", "analytic_all", "draw", "judge", "region_of", "wide"]

#: cb_point's inputs in its positional order (without ``q``), also the simulator's keys.
CB_KEYS = ("lam", "prompt_mean", "prompt_cv", "output_mean", "output_cv", "cap",
           "max_batched_tokens", "kv_capacity_tokens", "block_tokens", "t_fixed", "t_token",
           "t_ctx", "service_cv")
RESERVE = 0.1  # HBM share the runtime keeps (activations, CUDA graphs)
KV_BYTES_PER_ELEM = 2.0
BLOCK = 16.0
P_M_INF = 0.35
P_KV_BOUND = 0.4
P_NOISE = 0.3
TPS = (1, 2, 4, 8)
#: the percentiles judged, by name
QS = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
#: metric -> target relative error (SPEC 10); the simulator must pin each to a third of it
TARGETS = {"tpot_mean": 0.05, "ttft_mean": 0.15, "e2e_mean": 0.15,
           **{f"{m}_{k}": 0.25 for k in QS for m in ("ttft", "tpot", "e2e")}}


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _lognormal_q99(mean: float, cv: float) -> float:
    if cv == 0.0:
        return mean
    s2 = math.log1p(cv * cv)
    return mean * math.exp(-0.5 * s2 + 2.3263478740408408 * math.sqrt(s2))


def _engines() -> list[tuple[str, str, int, float, dict[str, float], float, float]]:
    """Every (model, gpu, tp, weight bytes) with its catalog figures, free KV bytes, and
    KV bytes per token."""
    cat = packaged_catalog()
    out = []
    for mname in sorted(cat.models):
        m = cat.models[mname]
        for gname in sorted(cat.gpus):
            g = cat.gpus[gname]
            for tp in TPS:
                for wb in (2.0, 1.0):
                    free = tp * g.hbm_bytes * (1.0 - RESERVE) - m.n_params * wb
                    if free > 0:
                        x = {**model_figures(m), **gpu_figures(g), "gpus_per_replica": float(tp),
                             "weight_bytes_per_param": wb}
                        out.append((mname, gname, tp, wb, x, free, m.kv_bytes_per_token(KV_BYTES_PER_ELEM)))
    return out


@jax.jit
def _line(x, prompt, output, budget, kv_per_token):
    p = rl.replica_params(x, x["gpu_eta_bw"], x["gpu_eta_flops"])
    return rl.step_line(p, prompt, output, budget, kv_per_token, x["attn_width"], x["n_layers"])


def draw(n: int, seed: int, *, prefill_first: bool = False) -> dict[str, np.ndarray]:
    """``n`` configurations drawn at random from the domain in the module docstring (loads
    relative to the capacity of the scheduler policy: `prefill_first`, or `chunked`)."""
    rng = np.random.default_rng(seed)
    engines = _engines()
    cols: dict[str, list] = {k: [] for k in CB_KEYS + ("load", "model", "gpu", "tp", "weight_bytes",
                                                         "moe", "kv_bound", "chunked", "kv_slots")}
    for _ in range(n):
        while True:
            pm = _loguniform(rng, 16.0, 16384.0)
            om = pm / _loguniform(rng, 0.1, 100.0)
            if 2.0 <= om <= 4096.0:
                break
        pm, om = round(pm, 1), round(om, 1)
        pcv, ocv = (round(float(v), 3) for v in rng.uniform(0.0, 2.0, 2))
        cap = float(round(_loguniform(rng, 4.0, 1024.0)))
        budget = math.inf if rng.random() < P_M_INF else float(round(_loguniform(rng, cap, 16384.0)))
        r_mean = pm + om + BLOCK / 2.0
        kv_bound = bool(rng.random() < P_KV_BOUND)
        frac = _loguniform(rng, 0.1, 1.5)
        floor = max(1.5 * r_mean, _lognormal_q99(pm, pcv) + _lognormal_q99(om, ocv))
        kv = math.ceil(max(frac * cap * r_mean, floor) / BLOCK) * BLOCK if kv_bound else math.inf
        while True:  # an engine whose HBM holds the weights and this mix's KV floor
            e = engines[rng.integers(len(engines))]
            if rng.random() < (0.3 if e[3] == 1.0 else 0.7) and e[5] / e[6] >= floor:
                break
        mname, gname, tp, wb, x, _, kv_per_token = e
        tf, tt, tc = (float(v) for v in _line({k: jnp.float64(v) for k, v in x.items()}, pm, om,
                                               budget, kv_per_token))
        noise = round(float(rng.uniform(0.0, 0.3)), 3) if rng.random() < P_NOISE else 0.0
        load = round(float(rng.uniform(0.05, 0.95)), 4)
        row = dict(lam=load, prompt_mean=pm, prompt_cv=pcv, output_mean=om, output_cv=ocv, cap=cap,
                   max_batched_tokens=budget, kv_capacity_tokens=kv, block_tokens=BLOCK, t_fixed=tf,
                   t_token=tt, t_ctx=tc, service_cv=noise, load=load, model=mname, gpu=gname, tp=tp,
                   weight_bytes=wb, moe=x["n_experts"] > 0, kv_bound=kv_bound,
                   chunked=math.isfinite(budget), kv_slots=kv / r_mean)
        for k, v in row.items():
            cols[k].append(v)
    out = {k: np.array(v) for k, v in cols.items()}
    for k in CB_KEYS + ("load", "tp", "weight_bytes", "kv_slots"):
        out[k] = out[k].astype(np.float64)
    unit = analytic({**out, "lam": np.ones(n)}, 0.5, prefill_first=prefill_first)["capacity_rps"]
    out["capacity_rps"] = unit
    out["lam"] = out["load"] * unit
    return out


def analytic(p: dict[str, np.ndarray], q: float, *, prefill_first: bool = False,
             steps: int = 1) -> dict[str, np.ndarray]:
    """`cb_point` at every configuration of ``p`` (arrays under `CB_KEYS`), percentile ``q``,
    under the `prefill_first` scheduler policy or `chunked`, ``steps`` decode steps a decision."""
    n = p["lam"].shape[0]
    out = _vmapped(prefill_first, steps)(*(jnp.asarray(p[k], jnp.float64) for k in CB_KEYS), jnp.full(n, q))
    return {k: np.asarray(v) for k, v in out.items()}


@functools.cache
def _vmapped(prefill_first: bool, steps: int):
    return jax.jit(jax.vmap(functools.partial(cb_point, prefill_first=prefill_first, steps=steps)))


def analytic_all(p: dict[str, np.ndarray], *, prefill_first: bool = False, steps: int = 1) -> dict[str, np.ndarray]:
    """`analytic` at every percentile of `QS`: its outputs at q = 0.9, plus ``{m}_{name}``
    for m in ttft, tpot, e2e and every name of `QS`."""
    outs = {name: analytic(p, q, prefill_first=prefill_first, steps=steps) for name, q in QS.items()}
    a = dict(outs["p90"])
    for name in QS:
        for m in ("ttft", "tpot", "e2e"):
            a[f"{m}_{name}"] = outs[name][f"{m}_p"]
    return a


def analytic_by_steps(p: dict[str, np.ndarray], steps: np.ndarray, *,
                      prefill_first: bool = False) -> dict[str, np.ndarray]:
    """`analytic_all` at each configuration's own ``scheduler_steps`` (``steps``, one per
    configuration; one compiled program per distinct k)."""
    ks = np.asarray(steps).astype(np.int64)
    out: dict[str, np.ndarray] = {}
    for k in np.unique(ks):
        m = ks == k
        part = analytic_all({key: np.asarray(v)[m] for key, v in p.items() if key in CB_KEYS},
                            prefill_first=prefill_first, steps=int(k))
        for key, v in part.items():
            out.setdefault(key, np.empty(ks.size, np.asarray(v).dtype))[m] = v
    return out


def region_of(p: dict[str, np.ndarray], s: dict[str, np.ndarray]) -> np.ndarray:
    """SPEC 10's stable region, from the simulation ``s`` (``stable``, ``mean_running``,
    ``kv_util``): steady, mean running below 0.9 N and mean reserved KV below 0.9 C (mean
    running below 90% of the KV-limited slot count)."""
    kv_ok = ~np.isfinite(p["kv_capacity_tokens"]) | (s["kv_util"] < 0.9)
    return s["stable"] & (s["mean_running"] < 0.9 * p["cap"]) & kv_ok


def wide(s: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per metric of `TARGETS`: the simulated 95% half-width ``s[k + "_hw"]`` is above a
    third of the target, relative to ``s[k]`` (or either is not finite)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return {k: ~(s[k + "_hw"] / np.abs(s[k]) <= tol / 3.0) for k, tol in TARGETS.items()}


def judge(p: dict[str, np.ndarray], a: dict[str, np.ndarray], s: dict[str, np.ndarray]) -> dict[str, dict]:
    """Per metric of `TARGETS`: ``judged`` (in the region, simulated half-width narrow
    enough), ``err`` (model / simulated - 1; +inf where the model is unbounded),
    ``excluded`` (in the region, half-width too wide) and ``ok`` (judged, within target)."""
    reg = region_of(p, s)
    w = wide(s)
    out = {}
    for k, tol in TARGETS.items():
        with np.errstate(invalid="ignore", divide="ignore"):
            err = np.where(np.isfinite(a[k]), a[k] / s[k] - 1.0, np.inf)
        judged = reg & ~w[k] & np.isfinite(s[k]) & (s[k] > 0)
        out[k] = dict(judged=judged, err=err, excluded=reg & w[k], ok=judged & (np.abs(err) <= tol))
    return out
