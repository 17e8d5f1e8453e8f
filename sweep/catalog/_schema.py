"""Catalog entries: the frozen `Model` and `Gpu` records and the checks that build them.

One entry is a flat table of fields (a TOML file under `models/` or `gpus/`, or an inline
`[catalog.models.NAME]` / `[catalog.gpus.NAME]` table of a grid file). Building one runs in
stages, each a small function (STYLE habit 3): reject unknown fields -> check each field's
type -> require what has no default -> fill defaults -> cross-field checks -> build.

Units are in the field names: `hbm_bytes` (decimal bytes, 1 GB = 1e9), `..._bytes_per_s`,
`..._flops` (per second), `..._s` (seconds), `usd_per_gpu_hour`. Parameter counts are plain
counts.

Fields for the refined roofline (SPEC 13), all optional:
- model: `n_experts` (routed experts per mixture-of-experts layer), `experts_per_token`
  (top-k), `expert_param_fraction` (share of `n_params` held in routed experts; the rest —
  attention, embeddings, shared experts, dense layers — is read on every step). All three or
  none: a dense model gives none.
- GPU: `interconnect_bytes_per_s` — the per-GPU, one-direction bandwidth a tensor-parallel
  all-reduce can use (NVLink: half the marketed bidirectional total; PCIe cards: one
  direction of the x16 link), because a ring all-reduce moves 2(g-1)/g of the message out
  of (and into) every GPU at once; `collective_latency_s` — the fixed cost alpha of one
  all-reduce; `fp8_dense_flops` — dense FP8 tensor throughput where the part has it;
  `eta_bw`, `eta_flops` — calibrated efficiencies (written by `sweep calibrate`; absent on
  packaged entries, where the roofline's documented defaults apply).

Every figure has a domain (`MODEL_DOMAINS`, `GPU_DOMAINS`; docs/catalog.md, "Domains"), a
range a datasheet or a config file can mean with generous headroom, as every numeric `[grid]`
key has one (the same `sweep._domain.Domain`): a value outside is refused at load with one
line naming the file, the key, the value and the range. Inside the box, every output of
every serving mode is finite or +inf, never NaN (`tests/test_catalog_domains.py`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sweep._domain import Domain
from sweep.errors import CatalogError, close_matches

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
NAME_RULE = (
    "catalog names are lowercase kebab-case: letters a-z, digits, '-' and '.', "
    "starting with a letter or digit, e.g. llama-3.1-70b"
)

ATTENTION_KINDS = ("mha", "gqa", "latent")

_PRICE_DATE_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")

# field -> (kind, example). kind: "int" (an integer in its domain), "float" (int accepted;
# finite, in its domain), "str", "table" (the [source] table). Examples go into error messages.
_MODEL_FIELDS: dict[str, tuple[str, str]] = {
    "attention": ("str", 'attention = "gqa"'),
    "n_layers": ("int", "n_layers = 80"),
    "hidden": ("int", "hidden = 8192"),
    "n_heads": ("int", "n_heads = 64"),
    "n_kv_heads": ("int", "n_kv_heads = 8"),
    "head_dim": ("int", "head_dim = 128"),
    "latent_width": ("float", "latent_width = 576"),
    "n_params": ("float", "n_params = 70e9"),
    "active_params": ("float", "active_params = 12.9e9"),
    "n_experts": ("int", "n_experts = 8"),
    "experts_per_token": ("int", "experts_per_token = 2"),
    "expert_param_fraction": ("float", "expert_param_fraction = 0.9656"),
    "description": ("str", 'description = "my fine-tune of Llama 3.1 70B"'),
    "hf_id": ("str", 'hf_id = "meta-llama/Llama-3.1-70B-Instruct"'),
    "source": ("table", '[source] n_layers = "https://huggingface.co/.../config.json"'),
}
_MODEL_REQUIRED = ("attention", "n_layers", "hidden", "n_heads", "n_params")

_GPU_FIELDS: dict[str, tuple[str, str]] = {
    "hbm_bytes": ("float", "hbm_bytes = 80e9"),
    "hbm_bandwidth_bytes_per_s": ("float", "hbm_bandwidth_bytes_per_s = 2.039e12"),
    "bf16_dense_flops": ("float", "bf16_dense_flops = 312e12"),
    "fp8_dense_flops": ("float", "fp8_dense_flops = 1979e12"),
    "interconnect_bytes_per_s": ("float", "interconnect_bytes_per_s = 450e9"),
    "collective_latency_s": ("float", "collective_latency_s = 10e-6"),
    "eta_bw": ("float", "eta_bw = 0.75"),
    "eta_flops": ("float", "eta_flops = 0.6"),
    "usd_per_gpu_hour": ("float", "usd_per_gpu_hour = 1.8"),
    "price_date": ("str", 'price_date = "2026-11"'),
    "price_note": ("str", 'price_note = "illustrative on-demand price"'),
    "description": ("str", 'description = "NVIDIA A100 SXM4 80 GB"'),
    "source": ("table", '[source] hbm_bytes = "https://vendor.example/datasheet.pdf"'),
}
_GPU_REQUIRED = ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "bf16_dense_flops", "usd_per_gpu_hour")


#: Where each numeric model figure is valid. One comment says why each ends where it does;
#: the cross-field rules (n_kv_heads divides n_heads, active_params <= n_params, k <= n) come
#: after. Inside these boxes the KV bytes of a request (<= 1e4 layers x 2e10 elements x 8 B x
#: 1e8 tokens) and the attention FLOPs stay far below float64's range.
MODEL_DOMAINS: Mapping[str, Domain] = MappingProxyType({
    # the deepest public transformers have ~160 layers; 1e4 is 60x headroom
    "n_layers": Domain(1, 1e4, "layers"),
    # public widths reach ~2e4 (GPT-3: 12288, Llama 3.1 405B: 16384); 1e6 is 50x headroom
    "hidden": Domain(1, 1e6),
    # query and KV heads: 128 is the most public models use; 1e5 is headroom
    "n_heads": Domain(1, 1e5, "heads"),
    "n_kv_heads": Domain(1, 1e5, "heads"),
    # 64 to 256 in public models
    "head_dim": Domain(1, 1e5),
    # elements cached per token per layer (DeepSeek-V3: 576); 1e6 is headroom
    "latent_width": Domain(1, 1e6, "elements"),
    # a million parameters (a toy) to 1e15, ~500x the largest public models (~2e12)
    "n_params": Domain(1e6, 1e15, "parameters"),
    "active_params": Domain(1e6, 1e15, "parameters"),
    # routed experts per layer (DeepSeek-V3: 256, top-8); 1e5 is headroom
    "n_experts": Domain(1, 1e5, "experts"),
    "experts_per_token": Domain(1, 1e5, "experts"),
    # a share of n_params: a mixture of experts holds some but not all of it in its experts
    "expert_param_fraction": Domain(0, 1, lo_open=True, hi_open=True),
})

#: Where each numeric GPU figure is valid (decimal units, as the datasheets write them).
GPU_DOMAINS: Mapping[str, Domain] = MappingProxyType({
    # 1 GB (an old consumer card) to 10 TB per GPU (a B200 has 180 GB)
    "hbm_bytes": Domain(1e9, 1e13, "bytes"),
    # 1 GB/s to 1 PB/s (a B200: 8 TB/s)
    "hbm_bandwidth_bytes_per_s": Domain(1e9, 1e15, "bytes/s"),
    # 0.1 TFLOP/s to 1 EFLOP/s dense (a B200: 2.25 PFLOP/s bf16, 4.5 fp8)
    "bf16_dense_flops": Domain(1e11, 1e18, "FLOP/s"),
    "fp8_dense_flops": Domain(1e11, 1e18, "FLOP/s"),
    # 100 MB/s (gigabit Ethernet) to 1 PB/s one way (NVLink 5: 0.9 TB/s)
    "interconnect_bytes_per_s": Domain(1e8, 1e15, "bytes/s"),
    # 0 to 1 s per all-reduce (NVLink: ~10 us; sweep calibrate fits within [0, 1 ms])
    "collective_latency_s": Domain(0, 1, "s"),
    # shares of the peak, the grid's eta_bw / eta_flops domains (sweep calibrate fits within them)
    "eta_bw": Domain(1e-3, 1),
    "eta_flops": Domain(1e-3, 1),
    # free to 10,000 USD per GPU-hour
    "usd_per_gpu_hour": Domain(0, 1e4, "USD/h"),
})

# Fields that are not figures and so need no citation in [source].
_NOT_FIGURES = frozenset({"description", "hf_id", "price_date", "price_note", "source"})

#: A Hugging Face Hub repository id ("owner/name") or a local checkpoint folder (absolute path):
#: what an engine's launch command loads (`sweep.deploy`).
HF_ID_RE = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|/\S+)$")

MOE_FIELDS = ("n_experts", "experts_per_token", "expert_param_fraction")

MODEL_FIGURES = tuple(k for k in _MODEL_FIELDS if k not in _NOT_FIGURES)
GPU_FIGURES = tuple(k for k in _GPU_FIELDS if k not in _NOT_FIGURES)


@dataclass(frozen=True)
class Model:
    """A transformer's shape, as far as serving memory and the roofline need it.

    KV cache (SPEC section 5): every layer caches `kv_elems_per_token_per_layer` elements
    per token: `2 * n_kv_heads * head_dim` (keys and values) for mha/gqa, `latent_width`
    (one compressed vector, not doubled) for latent attention.

    Mixture of experts (SPEC 13): `n_experts` routed experts per MoE layer, `experts_per_token`
    of them per token, holding `expert_param_fraction` of `n_params`; all 0 for a dense model.

    `hf_id`: the checkpoint an engine loads (a Hub repository id or a local folder; "" when the
    model has no public weights), the MODEL of the launch commands `sweep.deploy` writes.
    """

    name: str
    attention: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    latent_width: float | None
    n_params: float
    active_params: float
    source: Mapping[str, str]
    origin: str
    description: str = ""
    n_experts: int = 0
    experts_per_token: int = 0
    expert_param_fraction: float = 0.0
    hf_id: str = ""

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def expert_params(self) -> float:
        """Parameters held in routed experts (0 for a dense model)."""
        return self.n_params * self.expert_param_fraction

    @property
    def dense_params(self) -> float:
        """Parameters every step reads whatever the routing: all but the routed experts."""
        return self.n_params - self.expert_params

    @property
    def kv_elems_per_token_per_layer(self) -> float:
        """Elements cached per token per layer: 2*n_kv_heads*head_dim, or latent_width."""
        if self.attention == "latent":
            assert self.latent_width is not None  # guaranteed by validation
            return float(self.latent_width)
        return float(2 * self.n_kv_heads * self.head_dim)

    def kv_bytes_per_token(self, kv_bytes_per_elem: float) -> float:
        """KV-cache bytes per token over all layers (2 bytes/elem for fp16/bf16)."""
        return self.n_layers * self.kv_elems_per_token_per_layer * kv_bytes_per_elem

    def weights_bytes(self, bytes_per_param: float) -> float:
        """Bytes to hold all `n_params` weights (every expert of a mixture-of-experts)."""
        return self.n_params * bytes_per_param


@dataclass(frozen=True)
class Gpu:
    """One accelerator: memory, bandwidth, dense bf16 (and FP8) compute, the tensor-parallel
    interconnect, and an hourly price. `eta_bw` / `eta_flops` are set only on calibrated
    entries (`sweep calibrate`); None means "use the roofline's defaults"."""

    name: str
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    bf16_dense_flops: float
    usd_per_gpu_hour: float
    price_date: str | None
    source: Mapping[str, str]
    origin: str
    price_note: str = ""
    description: str = ""
    fp8_dense_flops: float | None = None
    interconnect_bytes_per_s: float | None = None
    collective_latency_s: float | None = None
    eta_bw: float | None = None
    eta_flops: float | None = None


# ---------------------------------------------------------------------------------------
# Stages shared by both kinds of entry


def check_name(name: object, origin: str, key: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise CatalogError(origin, key, name, NAME_RULE)
    return name


def _close(word: str, choices: Any) -> str:
    near = close_matches(word, choices)
    return f"did you mean {near[0]!r}? " if near else ""


def _reject_unknown(raw: Mapping[str, Any], fields: Mapping[str, Any], origin: str, prefix: str):
    for key, value in raw.items():
        if key not in fields:
            raise CatalogError(
                origin,
                prefix + str(key),
                value,
                f"unknown field; {_close(str(key), fields)}known fields: {', '.join(fields)}",
            )


def _check_types(raw: Mapping[str, Any], fields: Mapping[str, tuple[str, str]], domains: Mapping[str, Domain],
                 origin: str, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        kind, example = fields[key]
        where = prefix + key
        if kind == "int":
            domain = domains[key]
            # bool is an int subclass in Python; a flag is never a count.
            if isinstance(value, bool) or not isinstance(value, int) or not domain.contains(value):
                raise CatalogError(origin, where, value, f"{domain.refusal(integer=True)}, e.g. {example}")
            out[key] = value
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise CatalogError(origin, where, value, f"must be a number, e.g. {example}")
            if isinstance(value, float) and not math.isfinite(value):
                raise CatalogError(origin, where, value, f"must be a finite number, e.g. {example}")
            # an integer beyond float64 lies outside every domain: compare before converting
            if not domains[key].contains(value):
                raise CatalogError(origin, where, value, f"{domains[key].refusal()}, e.g. {example}")
            out[key] = float(value)
        elif kind == "str":
            if not isinstance(value, str):
                raise CatalogError(origin, where, value, f"must be a string, e.g. {example}")
            out[key] = value
        else:  # table: the [source] citations
            out[key] = _check_source(value, fields, origin, where)
    return out


def _check_source(value: Any, fields: Mapping[str, Any], origin: str, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise CatalogError(
            origin, where, value,
            'must be a table of citations, one per figure, e.g. [source] n_layers = "URL, field"',
        )
    figures = [k for k in fields if k not in _NOT_FIGURES]
    out: dict[str, str] = {}
    for key, cite in value.items():
        if key not in figures:
            raise CatalogError(
                origin, f"{where}.{key}", cite,
                f"cites no figure of this entry; {_close(str(key), figures)}"
                f"figures: {', '.join(figures)}",
            )
        if not isinstance(cite, str) or not cite.strip():
            raise CatalogError(
                origin, f"{where}.{key}", cite,
                'must be a non-empty citation string, e.g. "https://.../config.json: hidden_size"',
            )
        out[key] = cite
    return out


def _require(values: Mapping[str, Any], required: tuple[str, ...], fields: Mapping[str, Any],
             origin: str, prefix: str, what: str) -> None:
    for key in required:
        if key not in values:
            raise CatalogError(
                origin, prefix + key, None,
                f"missing; a {what} entry needs {', '.join(required)} (e.g. {fields[key][1]})",
            )


def _require_sources(values: Mapping[str, Any], origin: str, prefix: str) -> None:
    source = values.get("source", {})
    for key in values:
        if key not in _NOT_FIGURES and key not in source:
            raise CatalogError(
                origin, f"{prefix}source.{key}", None,
                "every figure of a packaged entry needs a citation in [source], "
                f'e.g. {key} = "https://huggingface.co/.../config.json: <field>"',
            )


# ---------------------------------------------------------------------------------------
# Models


def build_model(name: str, raw: Mapping[str, Any], origin: str, prefix: str = "",
                require_source: bool = False) -> Model:
    """Validate one model entry and build it. `prefix` starts every key in an error message
    (e.g. "catalog.models.my-70b." for inline grid entries)."""
    if not isinstance(raw, Mapping):
        raise CatalogError(origin, prefix.rstrip("."), raw, "a model entry must be a table of fields")
    _reject_unknown(raw, _MODEL_FIELDS, origin, prefix)
    v = _check_types(raw, _MODEL_FIELDS, MODEL_DOMAINS, origin, prefix)
    _require(v, _MODEL_REQUIRED, _MODEL_FIELDS, origin, prefix, "model")
    if require_source:
        _require_sources(v, origin, prefix)
    _check_attention(v, origin, prefix)
    n_kv_heads, head_dim = _heads(v, origin, prefix)
    latent_width = _latent(v, origin, prefix)
    n_params, active_params = _params(v, origin, prefix)
    n_experts, k, fraction = _experts(v, origin, prefix)
    hf_id = v.get("hf_id", "")
    if hf_id and not HF_ID_RE.match(hf_id):
        raise CatalogError(origin, prefix + "hf_id", hf_id,
                           'must be a Hugging Face repository id "owner/name" or an absolute checkpoint folder, '
                           'e.g. hf_id = "meta-llama/Llama-3.1-70B-Instruct"')
    return Model(
        name=name,
        attention=v["attention"],
        n_layers=v["n_layers"],
        hidden=v["hidden"],
        n_heads=v["n_heads"],
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        latent_width=latent_width,
        n_params=n_params,
        active_params=active_params,
        source=MappingProxyType(dict(v.get("source", {}))),
        origin=origin,
        description=v.get("description", ""),
        n_experts=n_experts,
        experts_per_token=k,
        expert_param_fraction=fraction,
        hf_id=hf_id,
    )


def _check_attention(v: Mapping[str, Any], origin: str, prefix: str) -> None:
    if v["attention"] not in ATTENTION_KINDS:
        raise CatalogError(
            origin, prefix + "attention", v["attention"],
            'must be "mha" (multi-head), "gqa" (grouped-query; multi-query is "gqa" with '
            'n_kv_heads = 1) or "latent" (compressed cache, e.g. DeepSeek MLA)',
        )


def _heads(v: Mapping[str, Any], origin: str, prefix: str) -> tuple[int, int]:
    n_heads, attention = v["n_heads"], v["attention"]
    if "n_kv_heads" in v:
        n_kv_heads = v["n_kv_heads"]
    elif attention == "gqa":
        raise CatalogError(
            origin, prefix + "n_kv_heads", None,
            'missing; attention = "gqa" needs n_kv_heads (KV heads shared by the query heads), '
            "e.g. n_kv_heads = 8 (multi-query: 1)",
        )
    else:
        n_kv_heads = n_heads
    if attention == "mha" and n_kv_heads != n_heads:
        raise CatalogError(
            origin, prefix + "n_kv_heads", n_kv_heads,
            f'attention = "mha" caches every head: n_kv_heads must equal n_heads ({n_heads}); '
            'for fewer KV heads use attention = "gqa"',
        )
    if n_heads % n_kv_heads:
        raise CatalogError(
            origin, prefix + "n_kv_heads", n_kv_heads,
            f"must divide n_heads ({n_heads}) so each KV head serves a whole group of query "
            "heads, e.g. n_kv_heads = 8 with n_heads = 64",
        )
    if "head_dim" in v:
        head_dim = v["head_dim"]
    elif v["hidden"] % n_heads:
        raise CatalogError(
            origin, prefix + "head_dim", None,
            f"missing, and hidden / n_heads = {v['hidden']} / {n_heads} is not an integer; "
            "give head_dim explicitly, e.g. head_dim = 128",
        )
    else:
        head_dim = v["hidden"] // n_heads
    return n_kv_heads, head_dim


def _latent(v: Mapping[str, Any], origin: str, prefix: str) -> float | None:
    width = v.get("latent_width")
    if v["attention"] == "latent":
        if width is None:
            raise CatalogError(
                origin, prefix + "latent_width", None,
                'missing; attention = "latent" needs latent_width, the elements cached per '
                "token per layer (not doubled), e.g. latent_width = 576 for DeepSeek-V3 "
                "(kv_lora_rank 512 + qk_rope_head_dim 64)",
            )
        return width
    if width is not None:
        raise CatalogError(
            origin, prefix + "latent_width", width,
            f'only for attention = "latent"; attention is "{v["attention"]}", whose cache is '
            "2 * n_kv_heads * head_dim per layer (drop latent_width)",
        )
    return None


def _params(v: Mapping[str, Any], origin: str, prefix: str) -> tuple[float, float]:
    n_params = v["n_params"]
    active = v.get("active_params", n_params)
    if active > n_params:  # both in their domain already
        raise CatalogError(
            origin, prefix + "active_params", active,
            f"must be in (0, n_params = {n_params:.6g}]: the parameters used per token "
            "(mixture-of-experts), e.g. active_params = 12.9e9 for Mixtral 8x7B; omit for dense",
        )
    return n_params, active


def _experts(v: Mapping[str, Any], origin: str, prefix: str) -> tuple[int, int, float]:
    given = [f for f in MOE_FIELDS if f in v]
    if not given:
        return 0, 0, 0.0
    if len(given) < len(MOE_FIELDS):
        missing = next(f for f in MOE_FIELDS if f not in v)
        raise CatalogError(
            origin, prefix + missing, None,
            f"missing; a mixture-of-experts model gives all of {', '.join(MOE_FIELDS)} "
            "(a dense model gives none), e.g. n_experts = 8, experts_per_token = 2, "
            "expert_param_fraction = 0.9656 for Mixtral 8x7B",
        )
    n, k, fraction = v["n_experts"], v["experts_per_token"], v["expert_param_fraction"]
    if k > n:
        raise CatalogError(
            origin, prefix + "experts_per_token", k,
            f"must be <= n_experts ({n}): a token is routed to k of the n experts, "
            "e.g. experts_per_token = 2 with n_experts = 8",
        )
    return n, k, fraction


# ---------------------------------------------------------------------------------------
# GPUs


def build_gpu(name: str, raw: Mapping[str, Any], origin: str, prefix: str = "",
              require_source: bool = False) -> Gpu:
    """Validate one GPU entry and build it (see `build_model` for `prefix`)."""
    if not isinstance(raw, Mapping):
        raise CatalogError(origin, prefix.rstrip("."), raw, "a GPU entry must be a table of fields")
    _reject_unknown(raw, _GPU_FIELDS, origin, prefix)
    v = _check_types(raw, _GPU_FIELDS, GPU_DOMAINS, origin, prefix)
    _require(v, _GPU_REQUIRED, _GPU_FIELDS, origin, prefix, "GPU")
    if require_source:
        _require_sources(v, origin, prefix)
    price_date = v.get("price_date")
    if price_date is not None and not _PRICE_DATE_RE.match(price_date):
        raise CatalogError(origin, prefix + "price_date", price_date,
                           'must be a year and month "YYYY-MM", e.g. price_date = "2026-11"')
    return Gpu(
        name=name,
        hbm_bytes=v["hbm_bytes"],
        hbm_bandwidth_bytes_per_s=v["hbm_bandwidth_bytes_per_s"],
        bf16_dense_flops=v["bf16_dense_flops"],
        usd_per_gpu_hour=v["usd_per_gpu_hour"],
        price_date=price_date,
        source=MappingProxyType(dict(v.get("source", {}))),
        origin=origin,
        price_note=v.get("price_note", ""),
        description=v.get("description", ""),
        fp8_dense_flops=v.get("fp8_dense_flops"),
        interconnect_bytes_per_s=v.get("interconnect_bytes_per_s"),
        collective_latency_s=v.get("collective_latency_s"),
        eta_bw=v.get("eta_bw"),
        eta_flops=v.get("eta_flops"),
    )
