"""The serving-model contract, run on every registered model (`sweep.models.REGISTRY`).

Every model must: return exactly the columns it declares, in the declared dtypes; never
produce NaN over its validated domain; report `+inf` latency wherever it says the load is
unsustainable (`stable` false); keep the columns it lists in `monotone_in_load` from
decreasing as the arrival rate rises; and compile its chunk function once per chunk shape.
A new model passes these by being registered: this file needs no edit.
"""

from __future__ import annotations

import math
from typing import ClassVar

import jax
import numpy as np
import pytest

from sweep.api import grid_from_dict
from sweep.catalog import packaged_catalog
from sweep.engine.evaluate import Evaluator, ModelContractError, evaluate_points
from sweep.models import REGISTRY, ServingModel
from sweep.models.base import figure_arrays
from sweep.models.dynamic.proxy import GaussianProxy

MODELS = sorted(REGISTRY.items())
IDS = [f"{s}/{n}" for (s, n), _ in MODELS]
_DTYPES = {"float64": np.float64, "int64": np.int64, "bool": np.bool_, "dict": np.int32}


def _catalog_figures(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    cat = packaged_catalog()
    models = [cat.model(m) for m in rng.choice(sorted(cat.models), n)]
    gpus = [cat.gpu(g) for g in rng.choice(sorted(cat.gpus), n)]
    return figure_arrays(models, gpus)


def random_points(serving: str, rng: np.random.Generator, n: int, *, windowed: bool) -> dict[str, np.ndarray]:
    """Valid points over wide ranges of each model's domain (file units)."""
    u, lu = rng.uniform, lambda lo, hi: 10 ** rng.uniform(lo, hi, n)
    if serving == "continuous":
        cap = rng.integers(1, 1025, n).astype(float)
        budget = np.where(rng.random(n) < 0.3, math.inf, np.maximum(cap, lu(1, 5)))
        return {
            "arrival_rps": lu(-3, 3), "replicas": rng.integers(1, 9, n).astype(float),
            "prompt_tokens": lu(0, 4.5), "prompt_cv": u(0, 3, n), "output_tokens": lu(0, 3.5), "output_cv": u(0, 3, n),
            "batch_size": cap, "max_batched_tokens": budget if windowed else np.full(n, math.inf),
            "t_fixed_ms": lu(-2, 2), "t_token_ms": lu(-5, -1), "t_ctx_ms": lu(-8, -3), "service_cv": u(0, 2, n),
            "ttft_slo_ms": np.where(rng.random(n) < 0.3, math.inf, lu(1, 5)), "tpot_slo_ms": lu(0, 3),
            "slo_ms": np.where(rng.random(n) < 0.5, math.inf, lu(2, 6)), "percentile": u(0.5, 0.9999, n),
            "rho_max": u(0.5, 1, n), "rho_min": u(0, 0.49, n), "gpus_per_replica": rng.choice([1.0, 2.0, 4.0, 8.0], n),
            "kv_bytes_per_elem": rng.choice([0.5, 1.0, 2.0], n), "weight_bytes_per_param": rng.choice([0.5, 1.0, 2.0], n),
            "queue_capacity": np.where(rng.random(n) < 0.2, 100.0, math.inf), "eta_bw": u(0.1, 1, n), "eta_flops": u(0.1, 1, n),
        }
    assert serving == "dynamic", f"add a sampler for serving mode {serving!r}"
    seq = rng.integers(1, 131_073, n).astype(float)
    windows = np.where(rng.random(n) < 0.2, 0.0, lu(-2, 4)) if windowed else np.full(n, math.inf)
    if windowed:
        windows = np.where(rng.random(n) < 0.2, math.inf, windows)
    return {
        "arrival_rps": lu(-1, 4), "replicas": rng.integers(1, 9, n).astype(float),
        "batch_size": rng.integers(1, 4097, n).astype(float), "batch_window_ms": windows,
        "t_fixed_ms": lu(-3, 3), "t_req_ms": lu(-4, 2), "service_cv": u(0, 2, n),
        "percentile": u(0.5, 0.9999, n), "slo_ms": lu(0, 5), "rho_target": u(0.05, 1, n),
        "rho_max": u(0.5, 1, n), "rho_min": u(0, 0.49, n), "seq_len": seq, "mean_seq_len": seq * u(1e-3, 1, n),
        "kv_bytes_per_elem": rng.choice([0.5, 1.0, 2.0, 4.0], n), "weight_bytes_per_param": rng.choice([0.5, 1.0, 2.0], n),
        "gpus_per_replica": rng.choice([1.0, 2.0, 4.0, 8.0], n), "workers": np.ones(n), "queue_capacity": np.full(n, math.inf),
        "eta_bw": u(0.1, 1, n), "eta_flops": u(0.1, 1, n), "tokens_per_request": lu(0, 3),
    }


def statics(model: ServingModel) -> list[dict]:
    if model.serving == "continuous":  # contiguous given times; paged roofline with a reserve
        return [dict(paged=False, service_source="given", block_tokens=16.0, reserve_fraction=0.0),
                dict(paged=True, service_source="roofline", block_tokens=16.0, reserve_fraction=0.1)]
    base = dict(paged=False, service_source="given", mean_follows=False, block_tokens=16.0, reserve_fraction=0.0)
    # Two compilations per model: both batching regimes with given times and contiguous KV;
    # full batches only, paged KV, the roofline and a reserve.
    return [
        {**base, "windowed": True, "full": True},
        {**base, "windowed": False, "full": True, "paged": True, "block_tokens": 32.0,
         "service_source": "roofline", "reserve_fraction": 0.1},
    ]


def evaluate(model: ServingModel, static: dict, points: dict[str, np.ndarray], figures: dict[str, np.ndarray]) -> dict:
    columns = tuple(c.name for c in model.columns if c.when != "simulation" and c.name != "point_id")
    if static["service_source"] != "roofline":
        columns = tuple(c for c in columns if c not in ("eta_bw", "eta_flops", "tokens_per_request"))
    elif model.serving == "continuous":
        points = {k: v for k, v in points.items() if k not in ("t_fixed_ms", "t_token_ms", "t_ctx_ms")}
    return evaluate_points(model, points, figures, static=static, columns=columns)


@pytest.mark.parametrize("key,model", MODELS, ids=IDS)
def test_columns_as_declared_no_nan_inf_where_unstable(key, model):
    rng = np.random.default_rng(sum(map(ord, "/".join(key))))
    declared = {c.name: c for c in model.columns}
    for static in statics(model):
        n = 512
        points = random_points(model.serving, rng, n, windowed=static.get("windowed", True))
        out = evaluate(model, static, points, _catalog_figures(rng, n))
        public = {k: v for k, v in out.items() if not k.startswith("_")}
        for name, values in public.items():
            column = declared[name]
            assert values.dtype == _DTYPES[column.memory_dtype], (name, values.dtype)
            as_float = values.astype(np.float64)
            assert not np.isnan(as_float).any(), f"{model.name}: NaN in {name} ({static})"
            # +inf only where the column declares when it is NULL in the files, and then with
            # one of its explaining flags false (no-answer and grid-inf columns name no flag)
            unbounded = np.isinf(as_float)
            if not column.nullable:
                assert not unbounded.any(), f"{model.name}: {name} is +inf but declares no null_when"
            elif (column.null_flags and len(column.null_flags) == len(column.null_reasons)
                  and all(f in out for f in column.null_flags)):  # sim_* flags come from the host pass
                explained = np.zeros(n, bool)
                for flag in column.null_flags:
                    explained |= ~out[flag]
                assert explained[unbounded].all(), f"{model.name}: {name} unbounded with every flag of {column.null_when} true"
        unstable = ~out["stable"]
        for latency, _ in model.slo_checks:  # every latency an SLO checks is +inf where unsustainable
            assert np.isinf(out[latency][unstable]).all() and (out[latency][unstable] > 0).all(), latency
            assert (np.isfinite(out[latency]) | ~out["feasible"]).all(), latency
        assert not (out["feasible"] & ~out["stable"]).any()


@pytest.mark.parametrize("key,model", MODELS, ids=IDS)
def test_monotone_in_load_where_claimed(key, model):
    if not model.monotone_in_load:
        pytest.skip(f"{model.name} claims no column monotone in load")
    rng = np.random.default_rng(11)
    n, steps = 64, 6
    points = random_points(model.serving, rng, n, windowed=True)
    figures = _catalog_figures(rng, n)
    # the same n points at rising arrival rates: rate factor 1, 1.5, 2.25, ...
    grid = {k: np.tile(v, steps) for k, v in points.items()}
    grid["arrival_rps"] = grid["arrival_rps"] * np.repeat(1.5 ** np.arange(steps), n)
    out = evaluate(model, statics(model)[0], grid, {k: np.tile(v, steps) for k, v in figures.items()})
    for name in model.monotone_in_load:
        x = out[name].reshape(steps, n)
        with np.errstate(invalid="ignore"):
            down = np.diff(x, axis=0) < -1e-9 * np.abs(x[:-1])
        assert not down.any(), f"{model.name}: {name} decreases with load at {np.argwhere(down)[:3].tolist()}"


GRIDS = {
    "dynamic": {"arrival_rps": [10.0, 50.0, 200.0], "batch_size": [1, 4, 16], "batch_window_ms": [5.0, math.inf],
                "seq_len": 2048, "model": "llama-3.1-8b", "gpu": "h100-sxm", "t_fixed_ms": 10.0, "t_req_ms": 1.0,
                "slo_ms": 100.0},
    "continuous": {"arrival_rps": [1.0, 5.0, 20.0], "batch_size": [8, 32, 128], "max_batched_tokens": [2048, math.inf],
                   "prompt_tokens": 500, "output_tokens": 100, "model": "llama-3.1-8b", "gpu": "h100-sxm",
                   "t_fixed_ms": 10.0, "t_token_ms": 0.02, "t_ctx_ms": 1e-5, "tpot_slo_ms": 40.0},
}


@pytest.mark.parametrize("key,model", [m for m in MODELS if not m[1].needs_host_pass],
                         ids=[i for i, m in zip(IDS, MODELS) if not m[1].needs_host_pass])
def test_one_compilation_per_chunk_shape(key, model, tmp_path):
    serving, name = key
    spec = grid_from_dict({"name": "contract", "options": {"serving": serving, "latency_model": name},
                           "grid": GRIDS[serving]})
    ev = Evaluator(spec, chunk_size=spec.group_size)  # one group per chunk: 3 chunks
    chunks = list(ev.iter_chunks())
    assert len(chunks) == 3 and ev.compile_count() == 1


class _Forgetful(GaussianProxy):
    """Declares every dynamic column but does not compute `little_l`."""

    name: ClassVar[str] = "forgetful"

    def point(self, x, **static):  # type: ignore[override]
        out = super().point(x, **static)
        del out["little_l"]
        return out


def test_a_model_that_breaks_its_declaration_is_refused():
    rng = np.random.default_rng(0)
    model = _Forgetful()
    with pytest.raises(ModelContractError, match="little_l"):
        evaluate(model, statics(model)[0], random_points("dynamic", rng, 8, windowed=True), _catalog_figures(rng, 8))
    jax.clear_caches()
