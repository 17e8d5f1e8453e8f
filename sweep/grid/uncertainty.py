"""`[uncertainty]` and `[sensitivity]` tables (docs/uncertainty.md): parse and validate.

A distribution is relative to the point's grid value, which stays its centre: a planner
writes "100 req/s +- 20 %" as `arrival_rps = 100` and `[uncertainty.arrival_rps]
dist = "normal", sd = 0.2`. Each rule a user can break raises a one-line `GridError`
naming the file, the key, the value and the rule.

    [uncertainty]
    samples = 64          # S, per point (1 .. 4096)
    seed = 0
    risk = 0.05           # optional: a point meets its SLO only if p_slo_breach <= risk
    [uncertainty.arrival_rps]
    dist = "normal"       # normal | lognormal: mean (x grid value, default 1), sd (x grid value)
    sd = 0.2              # uniform: low, high (x grid value)
    [uncertainty.profile]
    covariance = true     # sample the [profile] fit's coefficients from its covariance
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweep._domain import Domain
from sweep.errors import GridError, did_you_mean
from sweep.models.base import ServingModel

DISTS = ("normal", "lognormal", "uniform")
MAX_SAMPLES = 4096
MAX_SD = 10.0  # relative sd: 1000 % is already no forecast at all
#: `mean` (normal, lognormal): a forecast off by more than a factor of 1000 either way is no
#: forecast; inside it the lognormal's log-variance log(1 + (sd / mean)^2) <= 18.4 and every
#: draw stays finite (issue 28: mean = 1e-160 overflowed).
MEAN = Domain(1e-3, 1e3)
#: `low`, `high` (uniform): multiples of the grid value, up to the same factor.
BOUND = Domain(0, 1e3)


@dataclass(frozen=True)
class Dist:
    """One input's distribution: `kind`, and (a, b) = (mean, sd) multipliers for normal and
    lognormal, (low, high) multipliers for uniform."""

    key: str
    kind: str
    a: float
    b: float


@dataclass(frozen=True)
class UncertaintyOptions:
    samples: int = 64
    seed: int = 0
    risk: float | None = None
    dists: tuple[Dist, ...] = ()
    #: `[uncertainty.profile] covariance = true`: the fitted coefficients' keys and the
    #: lower Cholesky-like factor L (L L' = covariance, ms^2) their deviations are drawn from
    cov_keys: tuple[str, ...] = ()
    cov_factor: tuple[tuple[float, ...], ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(d.key for d in self.dists) + self.cov_keys


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def uncertain_keys(model: ServingModel) -> tuple[str, ...]:
    return ("arrival_rps", *model.coefficient_keys, *model.length_keys)


def parse_uncertainty(raw: Any, model: ServingModel, fit: Mapping[str, Any] | None, service_source: str,
                      source: str, values: Mapping[str, Sequence[Any]] | None = None) -> UncertaintyOptions:
    """`[uncertainty]` -> UncertaintyOptions (`service_source`: given | fitted | roofline).
    `values` (the grid's filled values) lets each distribution's centre be checked against
    the domain of the key it perturbs, at every value of that key's axis."""
    if not isinstance(raw, Mapping):
        raise GridError(source, "uncertainty", raw, "must be a table, e.g. [uncertainty] samples = 64")
    if model.needs_host_pass:
        raise GridError(source, "uncertainty", "latency_model = " + model.name,
                        "needs an analytic latency model (samples run inside the jitted kernel, not the simulator)")
    keys = uncertain_keys(model)
    known = ("samples", "seed", "risk", "profile", *keys)
    samples, seed, risk = 64, 0, None
    dists: list[Dist] = []
    cov_keys: tuple[str, ...] = ()
    factor: tuple[tuple[float, ...], ...] = ()
    for k, v in raw.items():
        where = f"uncertainty.{k}"
        if k not in known:
            raise GridError(source, where, v,
                            f"unknown uncertainty key{did_you_mean(k, known)}; expected one of {', '.join(known)}")
        if k == "samples":
            if isinstance(v, bool) or not isinstance(v, int) or not 2 <= v <= MAX_SAMPLES:
                raise GridError(source, where, v, f"must be an integer in [2, {MAX_SAMPLES}], e.g. samples = 64")
            samples = v
        elif k == "seed":
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**31:
                raise GridError(source, where, v, "must be an integer in [0, 2^31), e.g. seed = 0")
            seed = v
        elif k == "risk":
            if not _num(v) or not 0 <= v < 1:
                raise GridError(source, where, v, "must be a number in [0, 1), e.g. risk = 0.05")
            risk = float(v)
        elif k == "profile":
            cov_keys, factor = _profile(v, model, fit, source)
        else:
            if k in model.coefficient_keys and service_source == "roofline":
                raise GridError(source, where, v, "the service times come from the roofline here; give "
                                f"{k} in [grid] or a [profile] to make it uncertain")
            dists.append(_centred(_dist(k, v, source), model, values, source))
    clash = set(cov_keys) & {d.key for d in dists}
    if clash:
        k = sorted(clash)[0]
        raise GridError(source, f"uncertainty.{k}", raw[k], "is sampled from the profile covariance already; drop one")
    return UncertaintyOptions(samples, seed, risk, tuple(dists), cov_keys, factor)


def _dist(key: str, v: Any, source: str) -> Dist:
    where = f"uncertainty.{key}"
    example = f'[uncertainty.{key}] dist = "normal", sd = 0.2'
    if not isinstance(v, Mapping):
        raise GridError(source, where, v, f"must be a table, e.g. {example}")
    kind = v.get("dist")
    if kind not in DISTS:
        raise GridError(source, f"{where}.dist", kind, f"must be one of {', '.join(DISTS)}, e.g. {example}")
    fields = ("mean", "sd") if kind != "uniform" else ("low", "high")
    for f in v:
        if f != "dist" and f not in fields:
            raise GridError(source, f"{where}.{f}", v[f], f"is not a {kind} parameter; expected {', '.join(fields)}")
    if kind == "uniform":
        for f in fields:
            if f not in v:
                raise GridError(source, f"{where}.{f}", None,
                                "is required (a multiple of the grid value), e.g. low = 0.8, high = 1.2")
            if not _num(v[f]) or not BOUND.contains(v[f]):
                raise GridError(source, f"{where}.{f}", v[f],
                                f"must be a finite number in {BOUND.text()} (a multiple of the grid value)")
        if v["low"] > v["high"]:
            raise GridError(source, f"{where}.low", v["low"], f"must be <= high ({v['high']})")
        return Dist(key, kind, float(v["low"]), float(v["high"]))
    mean = v.get("mean", 1.0)
    if not _num(mean) or not MEAN.contains(mean):
        raise GridError(source, f"{where}.mean", mean,
                        f"must be a finite number in {MEAN.text()} (a multiple of the grid value; default 1)")
    if "sd" not in v:
        raise GridError(source, f"{where}.sd", None, "is required (relative to the grid value), e.g. sd = 0.2")
    sd = v["sd"]
    if not _num(sd) or not 0 <= sd <= MAX_SD:
        raise GridError(source, f"{where}.sd", sd,
                        f"must be a number in [0, {MAX_SD:g}] (relative to the grid value: 0.2 = 20 %)")
    return Dist(key, kind, float(mean), float(sd))


def _centred(d: Dist, model: ServingModel, values: Mapping[str, Sequence[Any]] | None, source: str) -> Dist:
    """The distribution's centre (mean, or the middle of low..high) times every grid value of
    the key it perturbs lies in that key's domain: the samples spread around a value the grid
    could hold (a sample beyond the domain is still clipped to it)."""
    if values is None:
        return d
    key = d.key if d.key in values else model.input_fallback.get(d.key, d.key)
    domain = model.param_by_key[key].domain if key in model.param_by_key else None
    if domain is None or key not in values:
        return d
    field, factor = ("mean", d.a) if d.kind != "uniform" else ("high", (d.a + d.b) / 2)
    for g in values[key]:
        centre = float(g) * factor
        if math.isfinite(float(g)) and not domain.contains(centre):
            what = "mean" if d.kind != "uniform" else "(low + high) / 2"
            raise GridError(source, f"uncertainty.{d.key}.{field}", d.a if d.kind != "uniform" else d.b,
                            f"centres the samples at {key} = {float(g):g} x {factor:g} = {centre:g}, outside "
                            f"{key}'s domain {domain.text()}; the {what} is a multiple of the grid value")
    return d


def _profile(v: Any, model: ServingModel, fit: Mapping[str, Any] | None,
             source: str) -> tuple[tuple[str, ...], tuple[tuple[float, ...], ...]]:
    where = "uncertainty.profile"
    if not isinstance(v, Mapping):
        raise GridError(source, where, v, "must be a table, e.g. [uncertainty.profile] covariance = true")
    for f in v:
        if f != "covariance":
            raise GridError(source, f"{where}.{f}", v[f],
                            f"unknown key{did_you_mean(str(f), ['covariance'])}; expected covariance")
    cov_flag = v.get("covariance", False)
    if not isinstance(cov_flag, bool):
        raise GridError(source, f"{where}.covariance", cov_flag, "must be true or false")
    if not cov_flag:
        return (), ()
    if fit is None:
        raise GridError(source, f"{where}.covariance", True,
                        'needs a [profile] file = "..." to fit (its covariance is sampled)')
    cov = fit.get("cov_ms2")
    if not cov:
        raise GridError(source, f"{where}.covariance", True,
                        f"the fit of {fit.get('file', 'the profile')} has no covariance "
                        "(too few rows: no residual degree of freedom)")
    c = np.asarray(cov, dtype=np.float64)
    # a symmetric square root that tolerates a singular (e.g. pinned) covariance
    w, u = np.linalg.eigh((c + c.T) / 2)
    root = u * np.sqrt(np.clip(w, 0.0, None))
    return tuple(model.coefficient_keys[: len(c)]), tuple(tuple(float(x) for x in r) for r in root)


def parse_sensitivity(raw: Any, model: ServingModel, source: str) -> bool:
    """`[sensitivity]` (an empty table, or `enabled = true|false`) -> whether to compute it."""
    if not isinstance(raw, Mapping):
        raise GridError(source, "sensitivity", raw, "must be a table, e.g. [sensitivity] enabled = true")
    for k in raw:
        if k != "enabled":
            raise GridError(source, f"sensitivity.{k}", raw[k],
                            f"unknown sensitivity key{did_you_mean(str(k), ['enabled'])}; expected enabled")
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise GridError(source, "sensitivity.enabled", enabled, "must be true or false")
    if enabled and model.needs_host_pass:
        raise GridError(source, "sensitivity", "latency_model = " + model.name,
                        "needs an analytic latency model "
                        "(derivatives run through the jitted kernel, not the simulator)")
    return enabled
