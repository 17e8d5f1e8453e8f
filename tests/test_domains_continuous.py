"""The continuous serving mode's domains (`sweep.models.continuous.DOMAINS`): no output is
NaN or -inf anywhere in the box, bounds included, for both latency models' jitted part.

A Hypothesis property over palettes of each key (its bounds, the values just inside them,
log-uniform interiors), mixed into 512 points under the cross-field rules (a budget at least
the cap, rho_min below rho_max, a step that takes time), with every packaged (model, GPU)
pair's figures; given step times and the roofline."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweep.catalog import packaged_catalog
from sweep.engine.evaluate import evaluate_points
from sweep.models import REGISTRY
from sweep.models.base import figure_arrays
from sweep.models.continuous.model import PARAMS

N = 512
MODELS = sorted((k, m) for k, m in REGISTRY.items() if m.serving == "continuous")
NUMERIC = {p.key: p for p in PARAMS if p.domain is not None}
STATICS = {
    "given": dict(paged=False, service_source="given", block_tokens=16.0, reserve_fraction=0.0),
    "roofline": dict(paged=True, service_source="roofline", block_tokens=1e8,
                     reserve_fraction=math.nextafter(1.0, 0.0)),
}


def _figures() -> dict[str, np.ndarray]:
    cat = packaged_catalog()
    pairs = list(itertools.product(cat.models.values(), cat.gpus.values()))
    return figure_arrays([m for m, _ in pairs], [g for _, g in pairs])


FIGURES = _figures()


def edges(key: str) -> list[float]:
    p = NUMERIC[key]
    d = p.domain
    assert d is not None
    lo = math.nextafter(d.lo, math.inf) if d.lo_open else d.lo
    hi = math.nextafter(d.hi, -math.inf) if d.hi_open else d.hi
    out = ([lo, lo + 1, hi - 1, hi] if p.kind == "int"
           else [lo, math.nextafter(lo, math.inf), math.nextafter(hi, -math.inf), hi])
    return sorted(set(out + ([math.inf] if d.inf else [])))


def values(key: str) -> st.SearchStrategy[float]:
    finite = [x for x in edges(key) if math.isfinite(x)]
    lo, hi = max(finite[0], 1e-300), finite[-1]
    inner = st.floats(math.log(lo), math.log(hi)).map(lambda u: min(max(math.exp(u), lo), hi))
    if NUMERIC[key].kind == "int":
        inner = inner.map(round).map(float)
    return st.one_of(st.sampled_from(edges(key)), inner)


def valid(p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    p = {k: np.asarray(v, dtype=np.float64).copy() for k, v in p.items()}
    p["max_batched_tokens"] = np.maximum(p["max_batched_tokens"], p["batch_size"])
    p["rho_min"] = np.where(p["rho_min"] < p["rho_max"], p["rho_min"], 0.0)
    p["t_token_ms"] = np.where((p["t_fixed_ms"] == 0) & (p["t_token_ms"] == 0), 1e-6, p["t_token_ms"])
    return p


@pytest.mark.parametrize("static", sorted(STATICS))
@pytest.mark.parametrize("key,model", MODELS, ids=[f"{s}/{n}" for (s, n), _ in MODELS])
def test_no_nan_over_the_continuous_domain(key, model, static):
    columns = tuple(c.name for c in model.columns if c.when != "simulation" and c.name != "point_id"
                    and not (static == "given" and c.when == "roofline"))

    @settings(max_examples=20, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(palette=st.fixed_dictionaries({k: st.lists(values(k), min_size=1, max_size=6) for k in NUMERIC}),
           seed=st.integers(0, 2**32 - 1))
    def prop(palette, seed):
        rng = np.random.default_rng(seed)
        points = valid({k: rng.choice(np.asarray(v), N) for k, v in palette.items()})
        pair = rng.integers(0, len(FIGURES["n_params"]), N)
        out = evaluate_points(model, points, {k: v[pair] for k, v in FIGURES.items()}, static=STATICS[static],
                              columns=columns)
        for name, col in out.items():
            x = np.asarray(col, dtype=np.float64)
            bad = np.isnan(x) | (x == -math.inf)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                pytest.fail(f"{model.name} [{static}]: {name} = {x[i]} "
                            f"at {({k: float(v[i]) for k, v in points.items()})}")

    prop()
