"""The domain of every catalog figure (docs/catalog.md, "Domains"): refused outside, and no
output NaN inside.

`sweep.catalog.MODEL_DOMAINS` / `GPU_DOMAINS` bound each figure of a model or GPU entry as
`sweep.models.*.DOMAINS` bound the `[grid]` keys, with the same `Domain` and messages. Here:

- every bound and the values just inside it are accepted; the values just outside, an
  integer beyond float64, inf and NaN are refused with one line naming the key and the range;
- the values that broke a run before the domains (issue 28: a bandwidth, FLOP rate or
  interconnect of 1e-300, an MLA latent width of 1e300 wrote NaN and inf; a lognormal
  `[uncertainty]` mean of 1e-160 raised OverflowError and left staging and lock behind) are
  each one line and exit 2 from `sweep run`, with nothing written;
- a Hypothesis property over the box of catalog domains, its corners included: entries drawn
  from it (edges, the values just inside them, log-uniform interiors; every attention kind,
  dense and mixture-of-experts, optional figures given or left to their defaults) are built
  through `Catalog.with_entries` (so each is accepted) and evaluated with the roofline's step
  times by every analytic kernel of every serving mode on 512 points of a grid whose keys take
  their own bounds and a typical value: every column is finite or +inf, never NaN or -inf;
- the corners of the box (every figure at its lowest or highest value, each combination of
  the figures that set a step's time) through the loader and the whole pipeline, decisions
  included: the tables hold no NaN and no infinity (an unbounded value is NULL).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sweep
from sweep.catalog import GPU_DOMAINS, MODEL_DOMAINS, packaged_catalog
from sweep.cli import main
from sweep.engine.evaluate import evaluate_points
from sweep.errors import CatalogError
from sweep.models import REGISTRY, ServingModel
from sweep.models.base import figure_arrays
from sweep.models.continuous.model import PARAMS as CONTINUOUS_PARAMS
from sweep.models.disaggregated.model import PARAMS as DISAGGREGATED_PARAMS
from sweep.models.dynamic.model import MAX_WINDOWED_BATCH
from sweep.models.dynamic.model import PARAMS as DYNAMIC_PARAMS
from sweep.models.shared.columns import DOMAINS as SHARED_DOMAINS

N = 512
GRID = "grids/my.toml"
INTEGER = {"n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "n_experts", "experts_per_token"}
DOMAINS = {**MODEL_DOMAINS, **GPU_DOMAINS}
#: A complete entry of each kind, inside every domain (Llama 3.1 70B on an H100's figures).
MODEL = {"attention": "gqa", "n_layers": 80, "hidden": 8192, "n_heads": 64, "n_kv_heads": 8, "head_dim": 128,
         "n_params": 70.6e9}
GPU = {"hbm_bytes": 80e9, "hbm_bandwidth_bytes_per_s": 3.35e12, "bf16_dense_flops": 989.5e12,
       "usd_per_gpu_hour": 2.5}


def edges(key: str) -> list[float]:
    """The bounds of a figure's domain and the values just inside them."""
    d = DOMAINS[key]
    if key in INTEGER:
        lo, hi = d.lo + d.lo_open, d.hi - d.hi_open
        return sorted({lo, lo + 1, hi - 1, hi})
    lo = math.nextafter(d.lo, math.inf) if d.lo_open else d.lo
    hi = math.nextafter(d.hi, -math.inf) if d.hi_open else d.hi
    return sorted({lo, math.nextafter(lo, math.inf), math.nextafter(hi, -math.inf), hi})


def outside(key: str) -> list[float]:
    d = DOMAINS[key]
    if key in INTEGER:
        return [d.lo - 1, d.hi + 1]
    return [d.lo if d.lo_open else math.nextafter(d.lo, -math.inf),
            d.hi if d.hi_open else math.nextafter(d.hi, math.inf)]


def _entry(key: str, x: float) -> tuple[dict, dict]:
    """(models, gpus) inline tables setting `key` to `x` on a complete entry of its kind."""
    v = int(x) if key in INTEGER else x
    if key in GPU_DOMAINS:
        return {}, {"my-gpu": {**GPU, key: v}}
    m = dict(MODEL)
    if key == "latent_width":
        m = {**m, "attention": "latent"}
        del m["n_kv_heads"]
    if key in ("n_experts", "experts_per_token", "expert_param_fraction"):
        m.update(n_experts=100_000, experts_per_token=1, expert_param_fraction=0.5)
    if key in ("n_heads", "n_kv_heads") and DOMAINS[key].contains(v):
        m.update(n_heads=v, n_kv_heads=v)  # a divisor; outside the domain the type check refuses first
    if key == "active_params":
        m["n_params"] = DOMAINS["n_params"].hi
    m[key] = v
    return {"my-model": m}, {}


# --------------------------------------------------------------------------- the loader


@pytest.mark.parametrize("key", sorted(DOMAINS))
def test_bounds_accepted_and_just_outside_refused_naming_the_range(key):
    cat = packaged_catalog()
    for x in edges(key):
        models, gpus = _entry(key, x)
        cat.with_entries(models, gpus, origin=GRID)
    d = DOMAINS[key]
    where = ("catalog.gpus.my-gpu." if key in GPU_DOMAINS else "catalog.models.my-model.") + key
    for x in [*outside(key), 10**400, math.inf, math.nan]:
        if key in INTEGER and isinstance(x, float) and not math.isfinite(x):
            continue  # an integer key refuses any float (tested in test_catalog.py)
        models, gpus = _entry(key, x)
        with pytest.raises(CatalogError) as info:
            cat.with_entries(models, gpus, origin=GRID)
        msg = str(info.value)
        assert msg.startswith(f"{GRID}: {where} = ") and "\n" not in msg, msg
        if isinstance(x, int) or math.isfinite(x):
            assert d.text(key in INTEGER) in msg, msg
        else:
            assert "finite" in msg, msg


def test_every_packaged_entry_lies_in_the_domains():
    cat = packaged_catalog()  # validated at load: a figure outside would raise
    for entry in [*cat.models.values(), *cat.gpus.values()]:
        for key, d in DOMAINS.items():
            x = getattr(entry, key, None)
            if x is not None and not (key in MODEL_DOMAINS and entry in cat.gpus.values()):
                if key in ("n_experts", "experts_per_token", "expert_param_fraction") and x == 0:
                    continue  # a dense model: none
                assert d.contains(x), (entry.name, key, x)


def test_the_efficiencies_share_the_grid_domains():
    for key in ("eta_bw", "eta_flops"):
        assert GPU_DOMAINS[key] == SHARED_DOMAINS[key]


def test_the_catalog_page_documents_every_domain(root):
    """docs/catalog.md, "Domains": a row per figure, naming its range as the messages do."""
    page = (root / "docs" / "catalog.md").read_text()
    section = page[page.index("\n### Domains\n"):]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    for key, d in DOMAINS.items():
        row = next((r for r in rows if r.split(" | ")[0] == f"| `{key}`"), None)
        assert row is not None and d.text(key in INTEGER) in row, (key, row)


# --------------------------------------------------------------------------- the probes

PROBES = {
    # issue 28: these wrote NaN and inf before the domains
    "hbm_bandwidth_bytes_per_s": ("gpus", 1e-300),
    "bf16_dense_flops": ("gpus", 1e-300),
    "interconnect_bytes_per_s": ("gpus", 1e-300),
    "latent_width": ("models", 1e300),
}


#: A DeepSeek-V3-like model and an H200-like GPU (inside every domain) the probes edit.
PROBE_MODEL = {"attention": "latent", "n_layers": 61, "hidden": 7168, "n_heads": 128, "head_dim": 192,
               "latent_width": 576, "n_params": 671e9, "active_params": 37e9}
PROBE_GPU = {"hbm_bytes": 141e9, "hbm_bandwidth_bytes_per_s": 4.8e12, "bf16_dense_flops": 989.5e12,
             "interconnect_bytes_per_s": 450e9, "usd_per_gpu_hour": 3.5}


def _grid_text(model: dict, gpu: dict, gpu_name: str = "my-gpu") -> str:
    def table(fields: dict) -> str:
        return "\n".join(f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in fields.items())

    return f"""name = "probe"
[grid]
model = "my-mla"
gpu = "{gpu_name}"
gpus_per_replica = [1, 2]
seq_len = 2048
mean_seq_len = 1000
arrival_rps = [10.0]
batch_size = [1, 8]
slo_ms = 200.0
[catalog.models.my-mla]
{table(model)}
[catalog.gpus.my-gpu]
{table(gpu)}
"""


def test_the_probe_grid_runs(tmp_path):
    """The probes' grid with the entries as they are: a run (the refusals below are the figures')."""
    grid = tmp_path / "g.toml"
    grid.write_text(_grid_text(PROBE_MODEL, PROBE_GPU))
    assert main(["run", str(grid), "--out", str(tmp_path / "out")]) == 0


@pytest.mark.parametrize("key", sorted(PROBES))
def test_the_issue_probes_are_one_line_exit_2_nothing_written(tmp_path, capsys, key):
    kind, value = PROBES[key]
    name = "my-gpu" if kind == "gpus" else "my-mla"
    model = {**PROBE_MODEL, key: value} if kind == "models" else PROBE_MODEL
    gpu = {**PROBE_GPU, key: value} if kind == "gpus" else PROBE_GPU
    grid = tmp_path / "g.toml"
    grid.write_text(_grid_text(model, gpu))
    out = tmp_path / "out"
    assert main(["run", str(grid), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    d = DOMAINS[key]
    assert err.count("\n") == 0 and f"catalog.{kind}.{name}.{key} = {value!r}" in err and d.text() in err, err
    assert not out.exists()


def test_a_catalog_folder_entry_outside_its_domain_names_the_file(tmp_path, capsys):
    gpus = tmp_path / "cat" / "gpus"
    gpus.mkdir(parents=True)
    (gpus / "slow.toml").write_text(
        "hbm_bytes = 80e9\nhbm_bandwidth_bytes_per_s = 1e-300\nbf16_dense_flops = 1e15\nusd_per_gpu_hour = 2.0\n")
    grid = tmp_path / "g.toml"
    grid.write_text(_grid_text(PROBE_MODEL, PROBE_GPU, gpu_name="slow"))
    out = tmp_path / "out"
    assert main(["run", str(grid), "--out", str(out), "--catalog", str(tmp_path / "cat")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{gpus / 'slow.toml'}: hbm_bandwidth_bytes_per_s = 1e-300: must lie in [1e+09, 1e+15] bytes/s" in err, err
    assert err.count("\n") == 0 and not out.exists()


# --------------------------------------------------------------------------- the property


def values(key: str) -> st.SearchStrategy[float]:
    """A figure's edges, or log-uniform over its domain (from 1e-300 where it starts at 0)."""
    e = edges(key)
    lo, hi = max(e[0], 1e-300), e[-1]
    inner = st.floats(math.log(lo), math.log(hi)).map(lambda u: min(max(math.exp(u), lo), hi))
    if key in INTEGER:
        inner = inner.map(lambda x: float(min(max(round(x), lo), hi)))
    return st.one_of(st.sampled_from(e), inner)


def _int(key: str) -> st.SearchStrategy[int]:
    return values(key).map(int)


@st.composite
def model_entries(draw) -> dict:
    attention = draw(st.sampled_from(["mha", "gqa", "latent"]))
    m: dict = {"attention": attention, "n_layers": draw(_int("n_layers")), "hidden": draw(_int("hidden")),
               "head_dim": draw(_int("head_dim")), "n_params": draw(values("n_params"))}
    if attention == "gqa":  # n_kv_heads divides n_heads: a whole number of groups, within the heads' range
        kv = draw(_int("n_kv_heads"))
        groups = min(draw(_int("n_heads")), int(DOMAINS["n_heads"].hi) // kv)
        m.update(n_kv_heads=kv, n_heads=kv * groups)
    else:
        m["n_heads"] = draw(_int("n_heads"))
    if attention == "latent":
        m["latent_width"] = draw(values("latent_width"))
    if draw(st.booleans()):
        m["active_params"] = min(draw(values("active_params")), m["n_params"])
    if draw(st.booleans()):
        n = draw(_int("n_experts"))
        m.update(n_experts=n, experts_per_token=min(draw(_int("experts_per_token")), n),
                 expert_param_fraction=draw(values("expert_param_fraction")))
    return m


@st.composite
def gpu_entries(draw) -> dict:
    g = {k: draw(values(k)) for k in ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "bf16_dense_flops",
                                      "usd_per_gpu_hour")}
    for k in ("fp8_dense_flops", "interconnect_bytes_per_s", "collective_latency_s", "eta_bw", "eta_flops"):
        if draw(st.booleans()):
            g[k] = draw(values(k))
    return g


def _grid_levels(params, key: str) -> list[float]:
    """A grid key's bounds (just inside where open) and a typical value between them."""
    p = next(p for p in params if p.key == key)
    d = p.domain
    lo = math.nextafter(d.lo, math.inf) if d.lo_open else d.lo
    hi = math.nextafter(d.hi, -math.inf) if d.hi_open else d.hi
    typical = p.default if isinstance(p.default, float | int) and math.isfinite(p.default) else None
    mid = typical if typical is not None and lo <= typical <= hi else math.sqrt(max(lo, 1e-3) * hi)
    out = [lo, mid, hi] + ([math.inf] if d.inf else [])
    return [float(round(x)) if p.kind == "int" and math.isfinite(x) else x for x in out]


def dynamic_points(rng: np.random.Generator, windowed: bool) -> dict[str, np.ndarray]:
    """512 points of a dynamic grid whose keys take their bounds and a typical value, under the
    grid's cross-field rules (roofline: no given times)."""
    keys = [p.key for p in DYNAMIC_PARAMS if p.domain is not None and p.key not in ("t_fixed_ms", "t_req_ms")]
    p = {k: rng.choice(np.asarray(_grid_levels(DYNAMIC_PARAMS, k)), N) for k in keys}
    p["mean_seq_len"] = np.minimum(p["mean_seq_len"], p["seq_len"])
    p["rho_min"] = np.where(p["rho_min"] < p["rho_max"], p["rho_min"], 0.0)
    p["workers"] = np.ones(N)
    if not windowed:
        p["batch_window_ms"] = np.full(N, math.inf)
    finite = np.isfinite(p["batch_window_ms"])
    p["batch_size"] = np.where(finite, np.minimum(p["batch_size"], MAX_WINDOWED_BATCH), p["batch_size"])
    return p


def continuous_points(rng: np.random.Generator) -> dict[str, np.ndarray]:
    keys = [p.key for p in CONTINUOUS_PARAMS
            if p.domain is not None and p.key not in ("t_fixed_ms", "t_token_ms", "t_ctx_ms")]
    p = {k: rng.choice(np.asarray(_grid_levels(CONTINUOUS_PARAMS, k)), N) for k in keys}
    p["max_batched_tokens"] = np.maximum(p["max_batched_tokens"], p["batch_size"])
    p["rho_min"] = np.where(p["rho_min"] < p["rho_max"], p["rho_min"], 0.0)
    return p


def disaggregated_points(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Both pools' keys at their own levels, under the rules the grid loader adds (outputs of at
    least 2 tokens, a decode budget of at least one token per running sequence, rho_min < rho_max)."""
    keys = [p.key for p in DISAGGREGATED_PARAMS if p.domain is not None]
    p = {k: rng.choice(np.asarray(_grid_levels(DISAGGREGATED_PARAMS, k)), N) for k in keys}
    p["output_tokens"] = np.maximum(p["output_tokens"], 2.0)
    p["decode_max_batched_tokens"] = np.maximum(p["decode_max_batched_tokens"], p["decode_batch_size"])
    p["rho_min"] = np.where(p["rho_min"] < p["rho_max"], p["rho_min"], 0.0)
    return p


#: Roofline kernel configurations (static keywords), as tests/test_domains*.py run them.
DYNAMIC_STATICS = {
    "full": dict(windowed=False, full=True, paged=True, service_source="roofline", mean_follows=False,
                 block_tokens=1e8, reserve_fraction=math.nextafter(1.0, 0.0)),
    "windowed": dict(windowed=True, full=True, paged=False, service_source="roofline", mean_follows=False,
                     block_tokens=1.0, reserve_fraction=0.0),
}
CONTINUOUS_STATIC = dict(paged=True, service_source="roofline", block_tokens=16.0, reserve_fraction=0.0)
#: disaggregated serving: each pool's static keywords under its name (`ComposedModel.static`)
DISAGGREGATED_STATIC = {pool: tuple(sorted(CONTINUOUS_STATIC.items())) for pool in ("prefill", "decode")}
#: Each kernel compiles in 20-90 s here: the Gaussian proxy runs in the default suite, the
#: others with `-m slow`.
KERNELS = [pytest.param(k, m, id="/".join(k), marks=() if k == ("dynamic", "gaussian") else pytest.mark.slow)
           for k, m in sorted(REGISTRY.items())]


def _check(model: ServingModel, out: dict[str, np.ndarray], points: dict[str, np.ndarray],
           figures: dict[str, np.ndarray], label: str) -> None:
    for name, col in out.items():
        x = np.asarray(col, dtype=np.float64)
        bad = np.isnan(x) | (x == -math.inf)
        if name in ("b_mem_max", "b_min_stable_int", "b_min_rho_target_int", "mean_batch"):
            bad |= x < 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            pytest.fail(f"{model.name} [{label}]: {name} = {x[i]} at {({k: float(v[i]) for k, v in points.items()})} "
                        f"with figures {({k: float(v[i]) for k, v in figures.items()})}")


def _evaluate(model: ServingModel, entries: tuple[list[dict], list[dict]], seed: int) -> None:
    models, gpus = entries
    cat = packaged_catalog().with_entries({f"m{i}": m for i, m in enumerate(models)},
                                          {f"g{i}": g for i, g in enumerate(gpus)}, origin=GRID)  # accepted
    rng = np.random.default_rng(seed)
    mi, gi = rng.integers(0, len(models), N), rng.integers(0, len(gpus), N)
    if model.serving == "disaggregated":
        configs: dict[str, Any] = {"disaggregated": DISAGGREGATED_STATIC}
    elif model.serving == "continuous":
        configs = {"continuous": CONTINUOUS_STATIC}
    else:
        configs = {k: v for k, v in DYNAMIC_STATICS.items() if model.name != "batcher" or k == "windowed"}
    for label, static in configs.items():
        points = (disaggregated_points(rng) if model.serving == "disaggregated" else continuous_points(rng)
                  if model.serving == "continuous" else dynamic_points(rng, label == "windowed"))
        figures = figure_arrays([cat.model(f"m{i}") for i in mi], [cat.gpu(f"g{i}") for i in gi],
                                tensor_parallel=points.get("gpus_per_replica"))  # the pools: their TP-1 cell
        columns = tuple(c.name for c in model.columns if c.when != "simulation"
                        and c.name not in ("point_id", "prefill_gpu", "decode_gpu"))  # names, not kernel values
        out = evaluate_points(model, points, figures, static=static, columns=columns)
        _check(model, out, points, figures, label)


@pytest.mark.parametrize("key,model", KERNELS)
def test_no_nan_over_the_catalog_domains(key, model):
    """Hypothesis over the box of catalog figures, mixed into 512 points of a grid at its bounds."""

    @settings(max_examples=10 if model.name == "batcher" else 20, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(entries=st.tuples(st.lists(model_entries(), min_size=1, max_size=6),
                             st.lists(gpu_entries(), min_size=1, max_size=6)),
           seed=st.integers(0, 2**32 - 1))
    def prop(entries, seed):
        _evaluate(model, entries, seed)

    prop()


# --------------------------------------------------------------------------- the corners


#: The figures that set a step's time and a request's memory, each at both ends; the rest
#: at the end that makes a step slowest (the other end is the property's).
CORNER_GPU = ("hbm_bandwidth_bytes_per_s", "bf16_dense_flops", "interconnect_bytes_per_s", "hbm_bytes")
CORNER_MODEL = ("n_params", "n_layers", "latent_width")


def corner_entries() -> tuple[dict, dict]:
    """Every combination of CORNER_GPU's and CORNER_MODEL's two ends, as inline entries."""
    gpus, models = {}, {}
    for i, ends in enumerate(itertools.product(*(edges(k)[::len(edges(k)) - 1] for k in CORNER_GPU))):
        g = dict(zip(CORNER_GPU, ends, strict=True))
        g.update(usd_per_gpu_hour=DOMAINS["usd_per_gpu_hour"].hi,
                 collective_latency_s=DOMAINS["collective_latency_s"].hi,
                 fp8_dense_flops=DOMAINS["fp8_dense_flops"].lo, eta_bw=DOMAINS["eta_bw"].lo,
                 eta_flops=DOMAINS["eta_flops"].lo)
        gpus[f"g{i}"] = g
    for i, ends in enumerate(itertools.product(*(edges(k)[::len(edges(k)) - 1] for k in CORNER_MODEL))):
        n_params, n_layers, width = ends
        models[f"m{i}"] = {"attention": "latent", "n_layers": int(n_layers), "hidden": int(DOMAINS["hidden"].hi),
                           "n_heads": int(DOMAINS["n_heads"].hi), "head_dim": int(DOMAINS["head_dim"].hi),
                           "latent_width": width, "n_params": n_params}
    models["moe"] = {"attention": "mha", "n_layers": 1, "hidden": 1, "n_heads": 1, "head_dim": 1,
                     "n_params": DOMAINS["n_params"].hi, "active_params": DOMAINS["active_params"].lo,
                     "n_experts": int(DOMAINS["n_experts"].hi), "experts_per_token": 1,
                     "expert_param_fraction": edges("expert_param_fraction")[-1]}
    return models, gpus


CORNER_GRIDS = {
    "dynamic": {"grid": {"gpus_per_replica": [1, 4096], "seq_len": [1, 100_000_000], "mean_seq_len": 1.0,
                         "arrival_rps": [1e-6, 1e9], "batch_size": [1, 4096], "batch_window_ms": [0.0, math.inf],
                         "slo_ms": 1e9, "weight_bytes_per_param": [0.0625, 8.0], "kv_bytes_per_elem": 8.0,
                         "tokens_per_request": [1e-3, 1e8], "replicas": [1, 1_000_000]}},
    "continuous": {"grid": {"gpus_per_replica": [1, 4096], "arrival_rps": [1e-6, 1e9],
                            "prompt_tokens": [1.0, 1e7], "output_tokens": [1.0, 1e6], "prompt_cv": 1.0,
                            "batch_size": [1, 4096], "max_batched_tokens": [4096, math.inf],
                            "weight_bytes_per_param": [0.0625, 8.0], "replicas": [1, 1_000_000],
                            "ttft_slo_ms": 1e9, "tpot_slo_ms": 1e9},
                   "options": {"serving": "continuous"}},
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(CORNER_GRIDS))
def test_a_grid_at_the_catalog_corners_writes_no_nan_or_inf(mode):
    """The loader accepts every corner entry; points, optimum and frontier hold no NaN and no
    infinity: an unbounded value is NULL, and only in a column that declares when."""
    models, gpus = corner_entries()
    doc = dict(CORNER_GRIDS[mode])
    doc = {"name": f"corners-{mode}", **doc, "grid": {**doc["grid"], "model": sorted(models), "gpu": sorted(gpus)},
           "catalog": {"models": models, "gpus": gpus}}
    spec = sweep.grid_from_dict(doc)
    points = sweep.evaluate(spec)
    optimum, frontier = sweep.decide(spec)
    for table in (points, optimum, frontier):
        for name in table.column_names:
            col = table.column(name)
            if not table.schema.field(name).nullable:
                assert col.null_count == 0, name
            if pa.types.is_floating(col.type) or pa.types.is_integer(col.type):
                x = np.asarray(col.drop_null().to_numpy(zero_copy_only=False), dtype=np.float64)
                assert np.isfinite(x).all(), (name, x[~np.isfinite(x)][:3])


# --------------------------------------------------------------------------- uncertainty


def test_lognormal_mean_1e_160_is_one_line_exit_2_nothing_written(tmp_path, capsys):
    """Issue 28: OverflowError in sample_inputs, staging and lock left behind."""
    grid = tmp_path / "g.toml"
    grid.write_text("""name = "ln"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
seq_len = 2048
arrival_rps = [10.0]
batch_size = [1, 8]
t_fixed_ms = 10.0
t_req_ms = 1.0
slo_ms = 200.0
[uncertainty]
samples = 8
[uncertainty.arrival_rps]
dist = "lognormal"
mean = 1e-160
sd = 0.2
""")
    out = tmp_path / "out"
    assert main(["run", str(grid), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "uncertainty.arrival_rps.mean = 1e-160" in err, err
    assert not out.exists()


# --------------------------------------------------------------------------- a failed run leaves nothing

SMALL = {"name": "small", "grid": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "seq_len": 2048,
                                   "arrival_rps": [10.0, 20.0], "batch_size": [1, 8], "t_fixed_ms": 10.0,
                                   "t_req_ms": 1.0, "slo_ms": 200.0}}


def _fail_on_chunk(monkeypatch, nth: int) -> None:
    """Failure injection: the evaluator raises OverflowError (issue 28's error) at its nth chunk."""
    from sweep.engine.evaluate import Evaluator

    real, seen = Evaluator.iter_chunks, []

    def failing(self, *args, **kwargs):
        for chunk in real(self, *args, **kwargs):
            seen.append(1)
            if len(seen) >= nth:
                raise OverflowError(34, "Numerical result out of range")
            yield chunk

    monkeypatch.setattr(Evaluator, "iter_chunks", failing)


def test_a_run_that_fails_before_any_segment_leaves_no_folder_staging_or_lock(tmp_path, monkeypatch):
    _fail_on_chunk(monkeypatch, 1)
    out = tmp_path / "out"
    with pytest.raises(OverflowError):
        sweep.run(sweep.grid_from_dict(SMALL), out)
    assert not out.exists()


def test_a_failed_run_into_a_published_folder_keeps_it_and_its_lock_and_no_staging(tmp_path, monkeypatch):
    out = tmp_path / "out"
    sweep.run(sweep.grid_from_dict(SMALL), out)
    before = sorted(p.name for p in out.iterdir())
    _fail_on_chunk(monkeypatch, 1)
    with pytest.raises(OverflowError):
        sweep.run(sweep.grid_from_dict({**SMALL, "grid": {**SMALL["grid"], "slo_ms": 300.0}}), out)
    assert sorted(p.name for p in out.iterdir()) == before and ".sweep.lock" in before
    assert not list(out.glob(".sweep-staging-*"))
    assert main(["show", str(out)]) == 0  # the previous output is whole


def test_a_failure_after_a_sealed_segment_keeps_the_staging_to_resume(tmp_path, monkeypatch):
    from sweep.runner.run import run_grid

    spec = sweep.grid_from_dict({**SMALL, "grid": {**SMALL["grid"], "batch_size": list(range(1, 65))}})
    out = tmp_path / "out"
    _fail_on_chunk(monkeypatch, 2)
    with pytest.raises(OverflowError):
        run_grid(spec, out, chunk_size=32, segment_points=32)
    staging = list(out.glob(".sweep-staging-*"))
    assert len(staging) == 1 and list((staging[0] / "segments").glob("*.json"))
    monkeypatch.undo()
    manifest = run_grid(spec, out, chunk_size=32, segment_points=32).manifest
    assert manifest["rows"]["points_written"] == 128 and manifest["chunks"]["resumed_segments"] >= 1
