"""The roofline's efficiencies and per-step overheads per (GPU, model size class, tensor parallel).

The refined roofline (docs/roofline.md) has four engine figures that no datasheet gives:
`eta_bw` (share of the HBM peak a step's weight and KV stream reaches), `eta_flops` (share
of the dense tensor peak a step's GEMMs reach), `t_overhead_s` (seconds per step outside
the kernels' roofline, for a step that carries prompt tokens) and `t_decode_overhead_s`
(the same for a step of decode tokens only, which engines replay as a captured CUDA graph;
optional in a cell, where it defaults to the cell's `t_overhead_s`). One set for everything
leaves 8B prefill 1.3-1.5x slow and 70B tensor-parallel steps milliseconds short, so the
catalog ships a table of them, `sweep/catalog/efficiency.toml`, fitted by
`sweep calibrate --table` to the published measurements of
`tests/data/gpu_measurements.csv` (docs/roofline.md, "Calibrated defaults").

Size classes (`size_class`), by the parameters a token uses, because what moves the
efficiencies is the shape of the step: GEMM widths (hidden 4096 at 7-8B, 8192 at 70B,
12288-16384 above 100B), the number of layers (32, 80, 96-126: kernel launches and
all-reduces per step) and, for a mixture of experts, grouped GEMMs and routing:

    moe     any model with routed experts (n_experts > 0), whatever its size
    small   dense, active parameters <= 15e9   (7B-14B: Llama 2/3 8B, Mistral 7B, Qwen 7B)
    medium  dense, 15e9 < active <= 100e9      (32B-72B: Llama 70B, Qwen 72B)
    large   dense, active > 100e9              (GPT-3 175B, Llama 405B)

The lookup (`EfficiencyTable.lookup`), most specific first:

1. the cell (gpu, size class, tensor parallel), the tensor-parallel degree matched to the
   nearest power of two (3 uses the tp = 4 cell);
2. the GPU entry's own `eta_bw` / `eta_flops` when it sets them (a `sweep calibrate --out`
   entry, fitted to that replica);
3. the table's GPU-wide row (`size_class = "*"`), fitted to every figure of that GPU;
4. the roofline's global defaults (`roofline.ETA_BW`, `ETA_FLOPS`, `T_OVERHEAD_S`).

Each figure falls back on its own: a GPU entry that sets only `eta_bw` takes `eta_flops`
from the next level. Every value is checked once, at load, against `DOMAINS`.
"""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any, NamedTuple

from sweep.errors import CatalogError, did_you_mean

from ._schema import Gpu, Model

#: The global defaults (the last fallback; docs/roofline.md justifies them), re-exported by
#: `sweep.models.shared.roofline` as ETA_BW, ETA_FLOPS and T_OVERHEAD_S: share of the peak HBM
#: bandwidth a decode step reaches, share of the peak dense FLOP/s, per-step overhead (s).
DEFAULT_ETA_BW = 0.7
DEFAULT_ETA_FLOPS = 0.6
DEFAULT_T_OVERHEAD_S = 1.0e-3

SIZE_CLASSES: tuple[str, ...] = ("small", "medium", "large", "moe")
#: Upper bounds (active parameters) of the dense classes; above the last is "large".
SMALL_MAX_PARAMS = 15e9
MEDIUM_MAX_PARAMS = 100e9
#: The table's row for every size class and tensor-parallel degree of one GPU.
ANY_CLASS = "*"
#: Tensor-parallel degrees 1, 2, 4, ... 4096 (the `gpus_per_replica` domain), as log2 bins.
TP_BINS = 13
#: Each figure's domain, [lo, hi] (eta_* > 0). The fit's bounds lie inside these.
DOMAINS: Mapping[str, tuple[float, float]] = MappingProxyType({
    "eta_bw": (1e-3, 1.0),
    "eta_flops": (1e-3, 1.0),
    "t_overhead_s": (0.0, 0.1),
    "t_decode_overhead_s": (0.0, 0.1),
})
FIGURES: tuple[str, ...] = ("eta_bw", "eta_flops", "t_overhead_s", "t_decode_overhead_s")
_CELL_FIELDS = {"gpu": str, "size_class": str, "tensor_parallel": int, "eta_bw": float, "eta_flops": float,
                "t_overhead_s": float, "t_decode_overhead_s": float, "figures": int, "source": str}
_EXAMPLE = ('[[cell]] gpu = "h100-sxm", size_class = "small", tensor_parallel = 1, eta_bw = 0.7, '
            'eta_flops = 0.6, t_overhead_s = 4e-3, t_decode_overhead_s = 1e-3, figures = 6, source = "fitted: ..."')


def size_class(model: Model) -> str:
    """The model's size class (module doc): "moe", else by active parameters."""
    if model.is_moe:
        return "moe"
    if model.active_params <= SMALL_MAX_PARAMS:
        return "small"
    return "medium" if model.active_params <= MEDIUM_MAX_PARAMS else "large"


def tp_bin(tensor_parallel: float) -> int:
    """log2 of the nearest power of two, clipped to [0, TP_BINS - 1] (1 -> 0, 3 -> 2, 8 -> 3)."""
    return min(max(int(round(math.log2(max(float(tensor_parallel), 1.0)))), 0), TP_BINS - 1)


class Efficiency(NamedTuple):
    """One replica's roofline engine figures and the lookup level each came from."""

    eta_bw: float
    eta_flops: float
    t_overhead_s: float
    t_decode_overhead_s: float
    level: str  # "cell", "gpu entry", "gpu" or "default" (of eta_bw; the others may differ)


@dataclass(frozen=True)
class Cell:
    gpu: str
    size_class: str  # a SIZE_CLASSES name or ANY_CLASS
    tensor_parallel: int  # 0 with ANY_CLASS
    eta_bw: float
    eta_flops: float
    t_overhead_s: float
    t_decode_overhead_s: float
    figures: int
    source: str


@dataclass(frozen=True)
class EfficiencyTable:
    """Cells keyed by (gpu, size class, log2 tensor parallel); GPU-wide rows by gpu."""

    cells: Mapping[tuple[str, str, int], Cell]
    gpu_rows: Mapping[str, Cell]
    origin: str = "<table>"

    def lookup(self, model: Model, gpu: Gpu, tensor_parallel: float) -> Efficiency:
        """The figures for `model` on `tensor_parallel` x `gpu` (module doc's order)."""
        return self._chain(self.cells.get((gpu.name, size_class(model), tp_bin(tensor_parallel))), gpu)

    def gpu_level(self, gpu: Gpu) -> Efficiency:
        """The figures for `gpu` whatever the model and parallelism: levels 2-4 of the order."""
        return self._chain(None, gpu)

    def _chain(self, cell: Cell | None, gpu: Gpu) -> Efficiency:
        row = self.gpu_rows.get(gpu.name)
        chain: list[tuple[str, Mapping[str, float | None]]] = []
        if cell is not None:
            chain.append(("cell", {f: getattr(cell, f) for f in FIGURES}))
        chain.append(("gpu entry", {"eta_bw": gpu.eta_bw, "eta_flops": gpu.eta_flops, "t_overhead_s": None,
                                    "t_decode_overhead_s": None}))
        if row is not None:
            chain.append(("gpu", {f: getattr(row, f) for f in FIGURES}))
        chain.append(("default", {"eta_bw": DEFAULT_ETA_BW, "eta_flops": DEFAULT_ETA_FLOPS,
                                  "t_overhead_s": DEFAULT_T_OVERHEAD_S, "t_decode_overhead_s": DEFAULT_T_OVERHEAD_S}))

        def first(f: str) -> tuple[float, str]:
            for level, values in chain:
                if values[f] is not None:
                    return float(values[f]), level  # type: ignore[arg-type]
            raise AssertionError("the defaults give every figure")

        (eb, level), (ef, _) = first("eta_bw"), first("eta_flops")
        (t, _), (td, _) = first("t_overhead_s"), first("t_decode_overhead_s")
        return Efficiency(eb, ef, t, td, level)


EMPTY = EfficiencyTable(MappingProxyType({}), MappingProxyType({}), "<none>")


def parse_table(text: str, origin: str, gpus: Mapping[str, Any] | None = None) -> EfficiencyTable:
    """An `EfficiencyTable` from TOML `text`: `[[cell]]` entries (module doc). Every field is
    checked (type, domain, known size class and, when `gpus` is given, a catalog GPU);
    a bad one raises `CatalogError` naming the file, the cell and the rule."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(origin, "<file>", "", f"is not valid TOML ({exc})") from None
    unknown = set(raw) - {"cell", "fit"}
    if unknown:
        key = sorted(unknown)[0]
        raise CatalogError(origin, key, raw[key], "unknown table; an efficiency table has [fit] and [[cell]] only")
    cells: dict[tuple[str, str, int], Cell] = {}
    rows: dict[str, Cell] = {}
    for i, c in enumerate(raw.get("cell", [])):
        where = f"cell[{i}]"
        cell = _cell(c, origin, where, gpus)
        if cell.size_class == ANY_CLASS:
            if cell.gpu in rows:
                raise CatalogError(origin, where, cell.gpu, "a second GPU-wide row for this GPU")
            rows[cell.gpu] = cell
        else:
            ckey = (cell.gpu, cell.size_class, tp_bin(cell.tensor_parallel))
            if ckey in cells:
                raise CatalogError(origin, where, ckey, "a second cell for this (gpu, size class, tensor parallel)")
            cells[ckey] = cell
    return EfficiencyTable(MappingProxyType(cells), MappingProxyType(rows), origin)


def _cell(c: Any, origin: str, where: str, gpus: Mapping[str, Any] | None) -> Cell:
    if not isinstance(c, dict):
        raise CatalogError(origin, where, c, f"must be a table, e.g. {_EXAMPLE}")
    for key in c:
        if key not in _CELL_FIELDS:
            raise CatalogError(origin, f"{where}.{key}", c[key],
                               f"unknown field{did_you_mean(str(key), _CELL_FIELDS)}; known: {', '.join(_CELL_FIELDS)}")
    # a cell without `t_decode_overhead_s` has one overhead for every step (tables written
    # before the field had it)
    c = {"t_decode_overhead_s": c.get("t_overhead_s"), **c}
    for key, kind in _CELL_FIELDS.items():
        if key not in c or c[key] is None:
            raise CatalogError(origin, f"{where}.{key}", "", f"is missing, e.g. {_EXAMPLE}")
        v = c[key]
        ok = (isinstance(v, str) if kind is str else
              isinstance(v, int) and not isinstance(v, bool) if kind is int else
              isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v))
        if not ok:
            raise CatalogError(origin, f"{where}.{key}", v, f"must be a {kind.__name__}, e.g. {_EXAMPLE}")
    if c["size_class"] not in (*SIZE_CLASSES, ANY_CLASS):
        raise CatalogError(origin, f"{where}.size_class", c["size_class"],
                           f"must be one of {', '.join(SIZE_CLASSES)} or {ANY_CLASS!r} (every class)")
    if gpus is not None and c["gpu"] not in gpus:
        raise CatalogError(origin, f"{where}.gpu", c["gpu"], "is not a catalog GPU")
    tp = c["tensor_parallel"]
    if c["size_class"] == ANY_CLASS:
        if tp != 0:
            raise CatalogError(origin, f"{where}.tensor_parallel", tp, "must be 0 on a GPU-wide row (size_class '*')")
    elif not (1 <= tp <= 2 ** (TP_BINS - 1) and tp & (tp - 1) == 0):
        raise CatalogError(origin, f"{where}.tensor_parallel", tp, "must be a power of two in [1, 4096], e.g. 8")
    for f in FIGURES:
        lo, hi = DOMAINS[f]
        if not lo <= c[f] <= hi or (f.startswith("eta") and c[f] <= 0):
            raise CatalogError(origin, f"{where}.{f}", c[f], f"must lie in [{lo:g}, {hi:g}] (and > 0 for eta_*)")
    if c["figures"] < 0:
        raise CatalogError(origin, f"{where}.figures", c["figures"], "must be >= 0 (figures the cell was fitted to)")
    return Cell(c["gpu"], c["size_class"], tp, float(c["eta_bw"]), float(c["eta_flops"]), float(c["t_overhead_s"]),
                float(c["t_decode_overhead_s"]), c["figures"], c["source"])


@functools.cache
def packaged_efficiencies() -> EfficiencyTable:
    """The table shipped as `sweep/catalog/efficiency.toml` (read once; immutable)."""
    from ._load import packaged_catalog

    f = resources.files("sweep.catalog").joinpath("efficiency.toml")
    if not f.is_file():
        return EMPTY
    return parse_table(f.read_text(encoding="utf-8"), "sweep/catalog/efficiency.toml", packaged_catalog().gpus)
