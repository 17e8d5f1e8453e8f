"""Tests for sweep.catalog: packaged entries, reference figures, merging, and every rejection.

Reference values and where they come from:
- GPT-3 175B at fp16 (SPEC section 5, the reference document's worked example):
  2 * 96 * 12288 * 2 = 4,718,592 bytes per token; * 2048 = 9,663,676,416 bytes (9.66 GB)
  per request; weights 175e9 * 2 = 350e9 bytes; 8 x A100 80 GB = 640e9 bytes, 290e9 free,
  floor(290e9 / 9.663676416e9) = 30 requests. All exact in float64 (integers < 2**53).
- Llama 3.1 70B (GQA): 80 layers * 2 * 8 KV heads * 128 * 2 bytes = 327,680 bytes per token.
- DeepSeek-V3 (latent): 61 layers * 576 * 2 bytes = 70,272 bytes per token.
"""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from sweep.catalog import (
    GPU_FIGURES,
    MODEL_FIGURES,
    Catalog,
    Gpu,
    Model,
    load_catalog,
    packaged_catalog,
)
from sweep.errors import CatalogError, SweepError

MODELS = [
    "gpt3-175b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
    "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b", "deepseek-v3",
    "llama-3.3-70b", "qwen3-32b", "qwen3-30b-a3b", "deepseek-r1",
]
MOE_MODELS = ["mixtral-8x7b", "deepseek-v3", "deepseek-r1", "qwen3-30b-a3b"]
GPUS = ["a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "l4", "l40s", "mi300x"]

GRID = "grids/my.toml"

COMPLETE_MODEL = {
    "attention": "gqa", "n_layers": 80, "hidden": 8192, "n_heads": 64, "n_kv_heads": 8,
    "head_dim": 128, "n_params": 70e9, "active_params": 70e9,
}
COMPLETE_GPU = {
    "hbm_bytes": 80e9, "hbm_bandwidth_bytes_per_s": 2.039e12, "bf16_dense_flops": 312e12,
    "usd_per_gpu_hour": 1.8,
}


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return packaged_catalog()


def _packaged_files(kind: str):
    folder = resources.files("sweep.catalog") / kind
    return sorted((t for t in folder.iterdir() if t.name.endswith(".toml")), key=lambda t: t.name)


# ---------------------------------------------------------------------------------------
# Packaged entries


def test_packaged_names_are_exactly_the_promised_set(cat):
    assert sorted(cat.models) == sorted(MODELS)
    assert sorted(cat.gpus) == sorted(GPUS)


@pytest.mark.parametrize("kind, figures", [("models", MODEL_FIGURES), ("gpus", GPU_FIGURES)])
def test_every_packaged_figure_has_a_source(kind, figures):
    files = _packaged_files(kind)
    assert files
    for item in files:
        raw = tomllib.loads(item.read_text(encoding="utf-8"))
        present = [k for k in raw if k in figures]
        assert present, item.name
        missing = [k for k in present if k not in raw.get("source", {})]
        assert not missing, f"{item.name}: no [source] for {missing}"
        assert all(isinstance(v, str) and v.strip() for v in raw["source"].values()), item.name


def test_packaged_entries_validate_and_carry_source_and_origin(cat):
    for name, m in cat.models.items():
        assert isinstance(m, Model) and m.name == name
        assert m.origin.endswith(f"models/{name}.toml")
        assert set(m.source) >= {"n_layers", "hidden", "n_heads", "n_params", "attention"}
        assert 0 < m.active_params <= m.n_params
        assert m.n_heads % m.n_kv_heads == 0
    for name, g in cat.gpus.items():
        assert isinstance(g, Gpu) and g.name == name
        given = {f for f in GPU_FIGURES if getattr(g, f) is not None}
        assert set(g.source) >= given
        assert g.price_date == "2026-11"
        assert "illustrative" in g.price_note
        assert g.hbm_bytes > 0 and g.hbm_bandwidth_bytes_per_s > 0 and g.bf16_dense_flops > 0


def test_packaged_catalog_is_cached_and_immutable(cat):
    assert packaged_catalog() is cat
    with pytest.raises(TypeError):
        cat.models["x"] = cat.models["gpt3-175b"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        cat.models["gpt3-175b"].n_layers = 1  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# Reference figures


def test_gpt3_matches_the_reference_document(cat):
    m = cat.model("gpt3-175b")
    assert (m.attention, m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim) == (
        "mha", 96, 12288, 96, 96, 128)
    assert m.n_params == 175e9
    kv_per_token = m.kv_bytes_per_token(2)
    assert kv_per_token == 2 * 96 * 12288 * 2 == 4_718_592
    kv_per_request = kv_per_token * 2048
    assert kv_per_request == 9_663_676_416
    assert round(kv_per_request / 1e9, 2) == 9.66
    weights = m.weights_bytes(2)
    assert weights == 350e9


def test_eight_a100_80gb_hold_30_gpt3_requests(cat):
    m, g = cat.model("gpt3-175b"), cat.gpu("a100-80gb")
    total = 8 * g.hbm_bytes
    assert total == 640e9
    free = total - m.weights_bytes(2)
    assert free == 290e9
    assert math.floor(free / (m.kv_bytes_per_token(2) * 2048)) == 30
    assert math.floor(290e9 / 9.663676416e9) == 30


def test_gqa_kv_size(cat):
    m = cat.model("llama-3.1-70b")
    assert m.attention == "gqa"
    assert m.kv_elems_per_token_per_layer == 2 * 8 * 128
    assert m.kv_bytes_per_token(2) == 80 * 2 * 8 * 128 * 2 == 327_680


def test_latent_kv_size(cat):
    m = cat.model("deepseek-v3")
    assert m.attention == "latent" and m.latent_width == 576
    assert m.kv_elems_per_token_per_layer == 576  # not doubled
    assert m.kv_bytes_per_token(2) == 61 * 576 * 2 == 70_272
    assert m.active_params == 37e9 < m.n_params == 671e9


def test_mixture_of_experts_active_params(cat):
    m = cat.model("mixtral-8x7b")
    assert m.n_params == 46_702_792_704
    assert m.active_params == 12_879_925_248
    assert cat.model("llama-3.1-8b").active_params == cat.model("llama-3.1-8b").n_params


def test_every_moe_model_carries_cited_expert_fields_and_dense_ones_none(cat):
    for name, m in cat.models.items():
        if name in MOE_MODELS:
            assert m.is_moe and 1 <= m.experts_per_token <= m.n_experts
            assert 0 < m.expert_param_fraction < 1
            assert {"n_experts", "experts_per_token", "expert_param_fraction"} <= set(m.source)
            # the always-read share plus k/n of the experts is the per-token share: active params
            active = m.dense_params + m.expert_params * m.experts_per_token / m.n_experts
            assert active == pytest.approx(m.active_params, rel=0.02), name
        else:
            assert not m.is_moe and m.expert_params == 0 and m.dense_params == m.n_params


def test_moe_reference_figures(cat):
    """Mixtral: 32 layers x 8 experts x 3 x 4096 x 14336 = 45,097,156,608 expert parameters;
    Qwen3-30B-A3B: 48 x 128 x 3 x 2048 x 768 = 28,991,029,248 of 30,532,134,912 (model card
    '30.5B in total and 3.3B activated'); DeepSeek-R1 has DeepSeek-V3's shapes."""
    m = cat.model("mixtral-8x7b")
    assert (m.n_experts, m.experts_per_token) == (8, 2)
    assert m.expert_params == pytest.approx(45_097_156_608, abs=1)
    q = cat.model("qwen3-30b-a3b")
    assert (q.n_experts, q.experts_per_token) == (128, 8)
    assert q.expert_params == pytest.approx(28_991_029_248, abs=1)
    assert q.active_params == 3_353_044_992 and round(q.n_params / 1e9, 1) == 30.5
    v3, r1 = cat.model("deepseek-v3"), cat.model("deepseek-r1")
    for f in ("attention", "n_layers", "hidden", "n_heads", "latent_width", "n_params", "active_params",
              "n_experts", "experts_per_token", "expert_param_fraction"):
        assert getattr(v3, f) == getattr(r1, f), f
    assert (r1.n_experts, r1.experts_per_token, r1.kv_bytes_per_token(2)) == (256, 8, 70_272)
    assert round(cat.model("qwen3-32b").n_params / 1e9, 1) == 32.8
    assert cat.model("llama-3.3-70b").n_params == cat.model("llama-3.1-70b").n_params


def test_every_gpu_carries_cited_interconnect_fields(cat):
    for name, g in cat.gpus.items():
        assert g.interconnect_bytes_per_s and g.interconnect_bytes_per_s > 0, name
        assert g.collective_latency_s is not None and g.collective_latency_s >= 0, name
        assert {"interconnect_bytes_per_s", "collective_latency_s"} <= set(g.source), name
        assert g.eta_bw is None and g.eta_flops is None  # packaged entries are not calibrated
    assert cat.gpu("h100-sxm").interconnect_bytes_per_s == 450e9  # NVLink 900 GB/s, one direction
    assert cat.gpu("a100-80gb").interconnect_bytes_per_s == 300e9  # NVLink 600 GB/s
    assert cat.gpu("l40s").interconnect_bytes_per_s == 32e9  # PCIe Gen4 x16 64 GB/s
    assert cat.gpu("a100-80gb").fp8_dense_flops is None and cat.gpu("h100-sxm").fp8_dense_flops == 1979e12


# ---------------------------------------------------------------------------------------
# Lookup


def test_unknown_name_suggests_close_match(cat):
    with pytest.raises(CatalogError) as e:
        cat.model("llama-3.1-70")
    assert "llama-3.1-70b" in str(e.value) and "unknown model" in str(e.value)
    with pytest.raises(CatalogError) as e:
        cat.gpu("H100-SXM")
    assert "did you mean 'h100-sxm'" in str(e.value)
    with pytest.raises(CatalogError) as e:
        cat.gpu("a100", source=GRID, key="gpu")
    msg = str(e.value)
    assert msg.startswith(f"{GRID}: gpu = 'a100': unknown GPU")
    assert "a100-80gb" in msg and "\n" not in msg
    assert isinstance(e.value, SweepError)


# ---------------------------------------------------------------------------------------
# Inline entries


def test_inline_override_merges_over_existing(cat):
    new = cat.with_entries({}, {"a100-80gb": {"usd_per_gpu_hour": 1.2}}, origin=GRID)
    g = new.gpu("a100-80gb")
    assert g.usd_per_gpu_hour == 1.2
    assert g.hbm_bytes == 80e9 and g.bf16_dense_flops == 312e12
    assert g.origin == GRID
    assert "usd_per_gpu_hour" not in g.source  # the old citation no longer describes it
    assert g.source["hbm_bytes"] == cat.gpu("a100-80gb").source["hbm_bytes"]
    assert cat.gpu("a100-80gb").usd_per_gpu_hour == 1.8  # the original is untouched
    assert new.gpu("h100-sxm") == cat.gpu("h100-sxm")


def test_inline_override_of_dense_params_keeps_active_default(cat):
    new = cat.with_entries({"llama-3.1-70b": {"n_params": 70e9}}, {}, origin=GRID)
    m = new.model("llama-3.1-70b")
    assert m.n_params == m.active_params == 70e9
    assert m.kv_bytes_per_token(2) == 327_680


def test_inline_new_entries(cat):
    new = cat.with_entries(
        {"my-70b": dict(COMPLETE_MODEL),
         "my-mla": {"attention": "latent", "n_layers": 4, "hidden": 64, "n_heads": 4,
                    "latent_width": 48, "n_params": 1e6}},
        {"my-gpu": dict(COMPLETE_GPU)},
        origin=GRID,
    )
    m = new.model("my-70b")
    assert m.kv_bytes_per_token(2) == 327_680 and m.origin == GRID and dict(m.source) == {}
    mla = new.model("my-mla")
    assert (mla.n_kv_heads, mla.head_dim, mla.active_params) == (4, 16, 1e6)
    assert mla.kv_bytes_per_token(1) == 4 * 48
    g = new.gpu("my-gpu")
    assert g.hbm_bytes == 80e9 and g.price_date is None
    assert "my-70b" not in cat.models  # with_entries returns a new catalog


def test_inline_defaults():
    cat = packaged_catalog().with_entries(
        {"tiny": {"attention": "mha", "n_layers": 2, "hidden": 256, "n_heads": 4, "n_params": 1e6}},
        None, origin=GRID)
    m = cat.model("tiny")
    assert (m.n_kv_heads, m.head_dim, m.active_params, m.latent_width) == (4, 64, 1e6, None)
    assert m.kv_bytes_per_token(2) == 2 * 2 * 4 * 64 * 2


def test_int_accepted_where_float_expected(cat):
    new = cat.with_entries({}, {"g": {**COMPLETE_GPU, "hbm_bytes": 80_000_000_000,
                                      "usd_per_gpu_hour": 0}}, origin=GRID)
    assert new.gpu("g").hbm_bytes == 80e9 and isinstance(new.gpu("g").hbm_bytes, float)
    assert new.gpu("g").usd_per_gpu_hour == 0.0


# ---------------------------------------------------------------------------------------
# Rejections: each names the key path in one line


def _model_error(fields: dict, name: str = "my-70b", base: dict | None = None) -> str:
    entry = dict(COMPLETE_MODEL if base is None else base)
    entry.update(fields)
    entry = {k: v for k, v in entry.items() if v is not _DROP}
    with pytest.raises(CatalogError) as e:
        packaged_catalog().with_entries({name: entry}, {}, origin=GRID)
    msg = str(e.value)
    assert msg.startswith(f"{GRID}: ") and "\n" not in msg
    return msg


def _gpu_error(fields: dict, name: str = "my-gpu") -> str:
    entry = {**COMPLETE_GPU, **fields}
    entry = {k: v for k, v in entry.items() if v is not _DROP}
    with pytest.raises(CatalogError) as e:
        packaged_catalog().with_entries({}, {name: entry}, origin=GRID)
    msg = str(e.value)
    assert msg.startswith(f"{GRID}: ") and "\n" not in msg
    return msg


_DROP = object()
P = "catalog.models.my-70b."
G = "catalog.gpus.my-gpu."


@pytest.mark.parametrize(
    "fields, key, rule",
    [
        ({"n_layer": 80}, "n_layer", "did you mean 'n_layers'"),
        ({"attention": "mqa"}, "attention", '"gqa"'),
        ({"attention": 1}, "attention", "string"),
        ({"n_layers": 80.0}, "n_layers", "integer in [1, 10000] layers"),
        ({"n_layers": True}, "n_layers", "integer in [1, 10000] layers"),
        ({"n_layers": 0}, "n_layers", "integer in [1, 10000] layers"),
        ({"hidden": "8192"}, "hidden", "integer in [1, 1e+06]"),
        ({"n_heads": -64}, "n_heads", "integer in [1, 100000] heads"),
        ({"n_kv_heads": 0}, "n_kv_heads", "integer in [1, 100000] heads"),
        ({"head_dim": 0}, "head_dim", "integer in [1, 100000]"),
        ({"n_kv_heads": 7}, "n_kv_heads", "must divide n_heads"),
        ({"n_kv_heads": _DROP}, "n_kv_heads", "needs n_kv_heads"),
        ({"attention": "mha"}, "n_kv_heads", "must equal n_heads"),
        ({"head_dim": _DROP, "hidden": 8000, "n_heads": 48, "n_kv_heads": 8},
         "head_dim", "not an integer"),
        ({"latent_width": 576}, "latent_width", 'only for attention = "latent"'),
        ({"attention": "latent"}, "latent_width", "needs latent_width"),
        ({"attention": "latent", "latent_width": 0}, "latent_width", "lie in [1, 1e+06] elements"),
        ({"attention": "latent", "latent_width": "576"}, "latent_width", "number"),
        ({"n_params": 0}, "n_params", "lie in [1e+06, 1e+15] parameters"),
        ({"n_params": -1e9}, "n_params", "lie in [1e+06, 1e+15] parameters"),
        ({"n_params": float("nan")}, "n_params", "finite"),
        ({"n_params": float("inf")}, "n_params", "finite"),
        ({"n_params": False}, "n_params", "number"),
        ({"n_params": _DROP}, "n_params", "missing"),
        ({"active_params": 80e9}, "active_params", "(0, n_params"),
        ({"active_params": 0}, "active_params", "lie in [1e+06, 1e+15] parameters"),
        ({"description": 3}, "description", "string"),
        ({"source": "paper"}, "source", "table of citations"),
        ({"source": {"n_layer": "x"}}, "source.n_layer", "did you mean 'n_layers'"),
        ({"source": {"n_layers": ""}}, "source.n_layers", "non-empty"),
        ({"n_experts": 8}, "experts_per_token", "all of n_experts"),
        ({"n_experts": 8, "experts_per_token": 2}, "expert_param_fraction", "missing"),
        ({"experts_per_token": 2, "expert_param_fraction": 0.9}, "n_experts", "missing"),
        ({"n_experts": 8, "experts_per_token": 9, "expert_param_fraction": 0.9}, "experts_per_token",
         "<= n_experts"),
        ({"n_experts": 8, "experts_per_token": 2, "expert_param_fraction": 1.0}, "expert_param_fraction",
         "lie in (0, 1)"),
        ({"n_experts": 8, "experts_per_token": 2, "expert_param_fraction": 0}, "expert_param_fraction",
         "lie in (0, 1)"),
        ({"n_experts": 0, "experts_per_token": 2, "expert_param_fraction": 0.5}, "n_experts",
         "integer in [1, 100000] experts"),
    ],
)
def test_model_rejections_name_the_key(fields, key, rule):
    msg = _model_error(fields)
    assert f"{P}{key} = " in msg, msg
    assert rule in msg, msg


@pytest.mark.parametrize(
    "fields, key, rule",
    [
        ({"hbm_gb": 80}, "hbm_gb", "unknown field"),
        ({"hbm_bytes": 0}, "hbm_bytes", "lie in [1e+09, 1e+13] bytes"),
        ({"hbm_bytes": "80e9"}, "hbm_bytes", "number"),
        ({"hbm_bandwidth_bytes_per_s": -1.0}, "hbm_bandwidth_bytes_per_s", "lie in [1e+09, 1e+15] bytes/s"),
        ({"bf16_dense_flops": float("inf")}, "bf16_dense_flops", "finite"),
        ({"bf16_dense_flops": True}, "bf16_dense_flops", "number"),
        ({"usd_per_gpu_hour": -0.5}, "usd_per_gpu_hour", "lie in [0, 10000] USD/h"),
        ({"usd_per_gpu_hour": float("nan")}, "usd_per_gpu_hour", "finite"),
        ({"usd_per_gpu_hour": _DROP}, "usd_per_gpu_hour", "missing"),
        ({"price_date": "Nov 2026"}, "price_date", '"YYYY-MM"'),
        ({"price_date": "2026-13"}, "price_date", '"YYYY-MM"'),
        ({"price_note": 1}, "price_note", "string"),
        ({"interconnect_bytes_per_s": 0}, "interconnect_bytes_per_s", "lie in [1e+08, 1e+15] bytes/s"),
        ({"fp8_dense_flops": -1}, "fp8_dense_flops", "lie in [1e+11, 1e+18] FLOP/s"),
        ({"collective_latency_s": -1e-6}, "collective_latency_s", "lie in [0, 1] s"),
        ({"eta_bw": 1.2}, "eta_bw", "lie in [0.001, 1]"),
        ({"eta_flops": 0}, "eta_flops", "lie in [0.001, 1]"),
    ],
)
def test_gpu_rejections_name_the_key(fields, key, rule):
    msg = _gpu_error(fields)
    assert f"{G}{key} = " in msg, msg
    assert rule in msg, msg


@pytest.mark.parametrize("name", ["My-70B", "-x", "a b", "x_y", ""])
def test_bad_names_rejected(name):
    with pytest.raises(CatalogError) as e:
        packaged_catalog().with_entries({name: dict(COMPLETE_MODEL)}, {}, origin=GRID)
    assert f"catalog.models.{name} = " in str(e.value) and "kebab-case" in str(e.value)


def test_override_is_validated_after_merging(cat):
    with pytest.raises(CatalogError) as e:
        cat.with_entries({"mixtral-8x7b": {"n_params": 10e9}}, {}, origin=GRID)
    assert "catalog.models.mixtral-8x7b.active_params = " in str(e.value)
    with pytest.raises(CatalogError) as e:
        cat.with_entries({}, {"h200": {"hbm_bytes": -1}}, origin=GRID)
    assert "catalog.gpus.h200.hbm_bytes = -1: must lie in [1e+09, 1e+13] bytes" in str(e.value)


def test_entry_must_be_a_table(cat):
    with pytest.raises(CatalogError) as e:
        cat.with_entries({"my-70b": 70}, {}, origin=GRID)
    assert "catalog.models.my-70b = 70" in str(e.value)
    with pytest.raises(CatalogError) as e:
        cat.with_entries({}, ["h200"], origin=GRID)  # type: ignore[arg-type]
    assert "catalog.gpus = " in str(e.value)


# ---------------------------------------------------------------------------------------
# User folders


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_user_folders_add_and_override_later_wins(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a / "models" / "my-70b.toml",
           'attention = "gqa"\nn_layers = 80\nhidden = 8192\nn_heads = 64\nn_kv_heads = 8\n'
           "n_params = 70e9\n")
    _write(a / "gpus" / "a100-80gb.toml",
           "hbm_bytes = 80e9\nhbm_bandwidth_bytes_per_s = 2.039e12\nbf16_dense_flops = 312e12\n"
           "usd_per_gpu_hour = 0.9\n")
    _write(b / "gpus" / "a100-80gb.toml",
           "hbm_bytes = 80e9\nhbm_bandwidth_bytes_per_s = 2.039e12\nbf16_dense_flops = 312e12\n"
           "usd_per_gpu_hour = 0.5\n")
    cat = load_catalog([a, b])
    m = cat.model("my-70b")
    assert m.head_dim == 128 and m.kv_bytes_per_token(2) == 327_680
    assert m.origin == str(a / "models" / "my-70b.toml")
    assert cat.gpu("a100-80gb").usd_per_gpu_hour == 0.5
    assert cat.gpu("a100-80gb").origin == str(b / "gpus" / "a100-80gb.toml")
    assert cat.model("gpt3-175b") == packaged_catalog().model("gpt3-175b")
    assert load_catalog() is packaged_catalog()
    # inline entries still merge over a folder entry
    merged = cat.with_entries({"my-70b": {"n_params": 69e9}}, {}, origin=GRID)
    assert merged.model("my-70b").n_params == 69e9 and merged.model("my-70b").n_layers == 80


def test_user_folder_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad"
    _write(bad / "models" / "m.toml", 'attention = "gqa"\nn_layers = 80.5\n')
    with pytest.raises(CatalogError) as e:
        load_catalog([bad])
    assert str(e.value).startswith(f"{bad / 'models' / 'm.toml'}: n_layers = 80.5: ")

    broken = tmp_path / "broken"
    _write(broken / "gpus" / "g.toml", "hbm_bytes = = 1\n")
    with pytest.raises(CatalogError) as e:
        load_catalog([broken])
    assert "not valid TOML" in str(e.value) and "g.toml" in str(e.value)

    badname = tmp_path / "badname"
    _write(badname / "gpus" / "My_GPU.toml", "")
    with pytest.raises(CatalogError) as e:
        load_catalog([badname])
    assert "file name = 'My_GPU'" in str(e.value)

    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path / "missing"])
    assert "not a folder" in str(e.value)

    (tmp_path / "empty").mkdir()
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path / "empty"])
    assert "neither a models/ nor a gpus/" in str(e.value)


def test_mistyped_override_is_explained(cat):
    with pytest.raises(CatalogError) as e:
        cat.with_entries({}, {"a100-80g": {"usd_per_gpu_hour": 1.2}}, origin=GRID)
    msg = str(e.value)
    assert msg.startswith(f"{GRID}: catalog.gpus.a100-80g.hbm_bytes = None: missing")
    assert "'a100-80gb'" in msg


def test_override_with_citations(cat):
    new = cat.with_entries({}, {"h200": {"usd_per_gpu_hour": 2.0,
                                         "source": {"usd_per_gpu_hour": "our 2026 contract"}}},
                           origin=GRID)
    assert new.gpu("h200").source["usd_per_gpu_hour"] == "our 2026 contract"
    assert new.gpu("h200").source["hbm_bytes"] == cat.gpu("h200").source["hbm_bytes"]
    with pytest.raises(CatalogError) as e:
        cat.with_entries({}, {"h200": {"source": "x"}}, origin=GRID)
    assert "catalog.gpus.h200.source = 'x'" in str(e.value)
