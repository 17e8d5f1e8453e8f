"""The `Catalog` of models and GPUs, and where its entries come from.

Three layers, later over earlier:
1. the packaged TOML files (`sweep/catalog/models/*.toml`, `gpus/*.toml`), read through
   `importlib.resources`; each must cite a source for every figure;
2. user folders given to `load_catalog`, each with `models/` and/or `gpus/` subfolders of
   `*.toml` files; a file replaces any earlier entry of the same name (it must be complete);
3. inline `[catalog.models.NAME]` / `[catalog.gpus.NAME]` tables of a grid file, applied by
   `Catalog.with_entries`; these merge their fields over an existing entry of that name,
   so a grid can override just `usd_per_gpu_hour`, or add a complete new entry.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sweep.errors import CatalogError, close_matches

from ._schema import Gpu, Model, build_gpu, build_model, check_name

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Catalog:
    """Models and GPUs by catalog name. Immutable: `with_entries` returns a new catalog."""

    models: Mapping[str, Model]
    gpus: Mapping[str, Gpu]
    # The fields each entry was given (before defaults), so inline overrides can merge.
    _model_fields: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: _EMPTY, repr=False, compare=False)
    _gpu_fields: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: _EMPTY, repr=False, compare=False)

    def model(self, name: str, *, source: str = "catalog", key: str = "model") -> Model:
        """The model called `name`; an unknown name raises `CatalogError` naming close
        matches. `source` and `key` say where the name came from (e.g. the grid file)."""
        return _lookup(self.models, name, "model", source, key)

    def gpu(self, name: str, *, source: str = "catalog", key: str = "gpu") -> Gpu:
        """The GPU called `name` (see `model`)."""
        return _lookup(self.gpus, name, "GPU", source, key)

    def with_entries(self, models: Mapping[str, Mapping] | None, gpus: Mapping[str, Mapping] | None,
                     origin: str) -> Catalog:
        """This catalog plus inline entries from a grid file at `origin`.

        An entry whose name exists merges its fields over the existing entry (the
        citations of the fields it sets are dropped: they no longer describe the value);
        a new name must be a complete entry. Error keys read `catalog.models.NAME.FIELD`.
        """
        new_models, new_model_fields = _merge(
            self.models, self._model_fields, models, "catalog.models", origin, build_model)
        new_gpus, new_gpu_fields = _merge(
            self.gpus, self._gpu_fields, gpus, "catalog.gpus", origin, build_gpu)
        return Catalog(new_models, new_gpus, new_model_fields, new_gpu_fields)


def _lookup(entries: Mapping[str, Any], name: object, what: str, source: str, key: str):
    if isinstance(name, str) and name in entries:
        return entries[name]
    known = sorted(entries)
    text = name.lower() if isinstance(name, str) else str(name)
    near = close_matches(text, known, n=3)
    hint = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
    raise CatalogError(
        source, key, name,
        f"unknown {what}; {hint}known: {', '.join(known)} (or define it inline under "
        f"[catalog.{what.lower()}s.NAME] or in a catalog folder)",
    )


def _merge(entries, fields, inline, table: str, origin: str, build: Callable):
    if inline is None:
        return entries, fields
    if not isinstance(inline, Mapping):
        raise CatalogError(origin, table, inline,
                           f"must be a table of entries, e.g. [{table}.my-entry]")
    entries, fields = dict(entries), dict(fields)
    for name, raw in inline.items():
        prefix = f"{table}.{name}."
        check_name(name, origin, f"{table}.{name}")
        if not isinstance(raw, Mapping):
            raise CatalogError(origin, f"{table}.{name}", raw,
                               f"must be a table of fields, e.g. [{table}.{name}]")
        if name in fields:
            base = dict(fields[name])
            base_source = {k: v for k, v in base.pop("source", {}).items() if k not in raw}
            merged = {**base, **raw}
            given = raw.get("source", {})
            if isinstance(given, Mapping):  # anything else is rejected by `build`
                merged["source"] = {**base_source, **given}
                if not merged["source"]:
                    del merged["source"]
            entries[name] = build(name, merged, origin, prefix)
        else:
            merged = dict(raw)
            try:
                entries[name] = build(name, merged, origin, prefix)
            except CatalogError as exc:
                raise _new_entry_hint(exc, name, fields) from None
        fields[name] = MappingProxyType(merged)
    return _frozen(entries), _frozen(fields)


def _new_entry_hint(exc: CatalogError, name: str, known: Mapping[str, Any]) -> CatalogError:
    """A field missing from an unknown name is often a mistyped override: say so."""
    near = close_matches(name, known)
    if not exc.rule.startswith("missing") or not near:
        return exc
    return CatalogError(
        exc.source, exc.key, exc.value,
        f"{exc.rule}; {name!r} is not in the catalog, so it is a new entry "
        f"(to override fields of {near[0]!r}, name that entry)",
    )


def _frozen(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(sorted(d.items())))


# ---------------------------------------------------------------------------------------
# Files


def _read_folder(folder: Traversable | Path, origin_of: Callable[[str], str], build: Callable,
                 require_source: bool, entries: dict, fields: dict) -> None:
    if not folder.is_dir():
        return
    for item in sorted(folder.iterdir(), key=lambda t: t.name):
        if not item.name.endswith(".toml") or not item.is_file():
            continue
        name = item.name[: -len(".toml")]
        origin = origin_of(item.name)
        check_name(name, origin, "file name")
        try:
            raw = tomllib.loads(item.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise CatalogError(origin, "file", item.name, f"not valid TOML: {exc}") from None
        entries[name] = build(name, raw, origin, "", require_source=require_source)
        fields[name] = MappingProxyType(raw)


def _read_root(root: Traversable | Path, origin_of: Callable[[str, str], str], require_source: bool,
               base: Catalog) -> Catalog:
    models, model_fields = dict(base.models), dict(base._model_fields)
    gpus, gpu_fields = dict(base.gpus), dict(base._gpu_fields)
    _read_folder(root / "models", lambda f: origin_of("models", f), build_model, require_source,
                 models, model_fields)
    _read_folder(root / "gpus", lambda f: origin_of("gpus", f), build_gpu, require_source,
                 gpus, gpu_fields)
    return Catalog(_frozen(models), _frozen(gpus), _frozen(model_fields), _frozen(gpu_fields))


@functools.cache
def packaged_catalog() -> Catalog:
    """The catalog shipped with `sweep` (read once, then cached; it is immutable)."""
    root = resources.files("sweep.catalog")
    return _read_root(root, lambda sub, f: f"sweep/catalog/{sub}/{f}", True,
                      Catalog(_EMPTY, _EMPTY))


def load_catalog(extra_dirs: Sequence[Path | str] = ()) -> Catalog:
    """The packaged catalog, then each folder of `extra_dirs` in order (later wins).

    Each folder holds `models/` and/or `gpus/` subfolders of `*.toml` entries, one per
    file, named by the file (`models/my-70b.toml` is model `my-70b`). User entries need no
    `[source]`, but one that is given is checked.
    """
    catalog = packaged_catalog()
    for d in extra_dirs:
        path = Path(d)
        if not path.is_dir():
            raise CatalogError(str(path), "catalog folder", str(d),
                               "not a folder; give a folder holding models/ and/or gpus/")
        if not (path / "models").is_dir() and not (path / "gpus").is_dir():
            raise CatalogError(
                str(path), "catalog folder", str(d),
                "has neither a models/ nor a gpus/ subfolder, e.g. my-catalog/models/my-70b.toml",
            )
        def origin_of(sub: str, f: str, p: Path = path) -> str:
            return str(p / sub / f)

        catalog = _read_root(path, origin_of, False, catalog)
    return catalog
