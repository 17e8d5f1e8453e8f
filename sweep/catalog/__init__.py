"""Model and GPU catalogs: the figures the memory model and the roofline are built on.

Entries are data files, one per model or GPU (`models/*.toml`, `gpus/*.toml`), with units
in the field names and a `[source]` table citing where each figure came from. Users add or
override entries in folders of their own (`load_catalog(extra_dirs)`) or inline in a grid
file (`Catalog.with_entries`). Every malformed entry raises `sweep.errors.CatalogError`
naming the file, the key, the value and the rule.

    >>> cat = packaged_catalog()
    >>> cat.model("gpt3-175b").kv_bytes_per_token(2)   # 2 * 96 * 12288 * 2 bytes
    4718592.0
"""

from __future__ import annotations

from ._efficiency import SIZE_CLASSES, Efficiency, EfficiencyTable, packaged_efficiencies, size_class
from ._load import Catalog, load_catalog, packaged_catalog
from ._schema import ATTENTION_KINDS, GPU_DOMAINS, GPU_FIGURES, MODEL_DOMAINS, MODEL_FIGURES, Gpu, Model

__all__ = [
    "ATTENTION_KINDS",
    "GPU_DOMAINS",
    "GPU_FIGURES",
    "MODEL_DOMAINS",
    "MODEL_FIGURES",
    "SIZE_CLASSES",
    "Catalog",
    "Efficiency",
    "EfficiencyTable",
    "Gpu",
    "Model",
    "load_catalog",
    "packaged_catalog",
    "packaged_efficiencies",
    "size_class",
]
