"""The `[search]` table of a grid file: parse and validate it into a frozen `SearchSpec`.

Pure validation (no Optuna, no database): everything a user can get wrong in the table is
refused here, before any work, as a one-line `GridError(source, "search.KEY", value, rule)`,
like any other bad grid file. Whether the storage can actually be reached is a separate,
impure check, `check_storage(search, out_dir)`, that the CLI calls before any work too.

    [search]
    objective = "min_cost"          # min_cost | max_capacity | min_latency, or a list of them
    trials    = 256                 # trial budget per study, > 0
    batch     = 64                  # trials asked per kernel call (one compiled batch shape)
    seed      = 0
    storage   = "sqlite"            # sqlite | journal | memory | an RDB URL
    [search.params]
    gpu              = ["a100-80gb", "h100-sxm"]     # categorical: a list
    replicas         = {low = 1, high = 64}          # integer range
    batch_size       = {low = 1, high = 512, log = true}
    batch_window_ms  = {low = 0.0, high = 200.0}     # float range (continuous)

Loading runs in steps because the grid loader resolves the catalog in between:
`parse_search` (shape, types, domains: the same value rules as `[grid]`) right after the
`[grid]` values are normalised, then `resolve_search` (catalog names of a searched `gpu`)
and `check_search_space` (the model's cross-field rules over the searched domain) right
after the catalog is resolved. `fill_searched` lets a grid omit a searched key from `[grid]`
(a required one such as `batch_size` or `gpu` included).
"""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sweep.errors import CatalogError, GridError, StorageError, did_you_mean
from sweep.grid.files import ALLOW_OPTION, within
from sweep.grid.values import MAX_AXIS_VALUES, check_value
from sweep.models import ServingModel


def searchable(model: ServingModel) -> tuple[str, ...]:
    """The fleet (`ServingModel.fleet_keys`) and the model's decision axes: for the dynamic
    batcher gpu, gpus_per_replica, replicas, batch_window_ms and batch_size; for
    disaggregated serving gpu, each pool's GPUs per replica, its replicas and its knobs."""
    return (*model.fleet_keys, *model.decisions.decision_axes)


#: Storage keywords; anything else must be an RDB URL (`dialect[+driver]://...`).
STORAGE_KINDS: tuple[str, ...] = ("sqlite", "journal", "memory")
STORAGE_FILES: dict[str, str] = {"sqlite": "search.db", "journal": "search.journal"}
#: A space whose parameters are all categorical/integer and whose size is at most this is
#: also solved exactly, by evaluating every combination (the gap columns of the answer).
EXACT_LIMIT = 2_000_000
MAX_BATCH = 1 << 16
TABLE_KEYS: tuple[str, ...] = ("objective", "trials", "batch", "seed", "storage", "params")
DEFAULTS: dict[str, Any] = {"objective": "min_cost", "batch": 64, "seed": 0, "storage": "sqlite"}
STORAGE_TIMEOUT_S = 3.0

_URL_RE = re.compile(r"^([a-z][a-z0-9]*)(\+[a-z0-9_]+)?://", re.IGNORECASE)
_DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433, "oracle": 1521}


@dataclass(frozen=True)
class SearchParam:
    """One searched parameter. `kind`: categorical (`choices`), int or float (`low`..`high`)."""

    key: str
    kind: str  # categorical | int | float
    choices: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    log: bool = False

    @property
    def size(self) -> float:
        """Number of values (+inf for a float range)."""
        if self.kind == "categorical":
            return float(len(self.choices))
        if self.kind == "int":
            return float(int(self.high) - int(self.low) + 1)
        return math.inf

    @property
    def values(self) -> tuple[Any, ...]:
        """Every value (categorical/int only), in order."""
        if self.kind == "categorical":
            return self.choices
        if self.kind == "int":
            return tuple(range(int(self.low), int(self.high) + 1))
        raise ValueError(f"{self.key}: a float range cannot be enumerated")

    @property
    def extremes(self) -> tuple[Any, ...]:
        """The values that bound the domain (for static kernel choices and cross-checks)."""
        return self.choices if self.kind == "categorical" else (self.low, self.high)


@dataclass(frozen=True)
class SearchSpec:
    source: str
    objectives: tuple[str, ...]
    trials: int
    batch: int
    seed: int
    storage: str  # sqlite | journal | memory | an RDB URL
    params: tuple[SearchParam, ...]
    gpus: tuple[Any, ...] = ()  # catalog `Gpu` entries of a searched gpu, in choice order

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.params)

    def param(self, key: str) -> SearchParam:
        for p in self.params:
            if p.key == key:
                return p
        raise KeyError(key)

    @property
    def space_size(self) -> float:
        return math.prod(p.size for p in self.params)

    @property
    def enumerable(self) -> bool:
        """All categorical/integer and at most `EXACT_LIMIT` combinations."""
        return self.space_size <= EXACT_LIMIT

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    def storage_url(self, out_dir: Path) -> str | None:
        """The Optuna storage for `out_dir` (None: in memory). Journal files: `journal:PATH`."""
        if self.storage == "memory":
            return None
        if self.storage == "sqlite":
            return f"sqlite:///{(Path(out_dir) / STORAGE_FILES['sqlite']).resolve()}"
        if self.storage == "journal":
            return f"journal:{(Path(out_dir) / STORAGE_FILES['journal']).resolve()}"
        return self.storage


# --------------------------------------------------------------------------- parsing


def parse_search(raw: Any, source: str, model: ServingModel) -> SearchSpec:
    """Validate a `[search]` table (shape, types, domains); catalog names come later."""
    if not isinstance(raw, Mapping):
        raise GridError(source, "search", raw,
                        "must be a table, e.g. [search] with objective, trials and [search.params]")
    for k in raw:
        if k not in TABLE_KEYS:
            raise GridError(source, f"search.{k}", raw[k],
                            f"unknown search key{did_you_mean(k, TABLE_KEYS)}; expected one of {', '.join(TABLE_KEYS)}")
    objectives = _objectives(raw.get("objective", DEFAULTS["objective"]), source, model)
    if "trials" not in raw:
        raise GridError(source, "search.trials", None, "is required: the trial budget per study, e.g. trials = 256")
    trials = _count(raw["trials"], "trials", source, "the trial budget per study, e.g. trials = 256")
    batch = _count(raw.get("batch", DEFAULTS["batch"]), "batch", source, "trials per kernel call, e.g. batch = 64")
    if batch > MAX_BATCH:
        raise GridError(source, "search.batch", batch, f"must be <= {MAX_BATCH}")
    seed = raw.get("seed", DEFAULTS["seed"])
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise GridError(source, "search.seed", seed, "must be an integer in [0, 2**32), e.g. seed = 0")
    storage = _storage(raw.get("storage", DEFAULTS["storage"]), source)
    params_raw = raw.get("params")
    if params_raw is None:
        raise GridError(source, "search.params", None,
                        "is required: a [search.params] table naming the searched parameters, "
                        "e.g. replicas = {low = 1, high = 64}")
    if not isinstance(params_raw, Mapping) or not params_raw:
        raise GridError(source, "search.params", params_raw,
                        "must be a non-empty table, e.g. [search.params] replicas = {low = 1, high = 64}")
    params = tuple(_param(k, v, source, model) for k, v in params_raw.items())
    return SearchSpec(source, objectives, trials, batch, seed, storage, params)


def fill_searched(search: SearchSpec, values: Mapping[str, list[Any]]) -> dict[str, list[Any]]:
    """[grid] values with every searched key that [grid] omits set to a placeholder (its
    first value), so a grid need not repeat a searched (even a required) key. The search
    replaces these values; they only keep the [grid] checks meaningful."""
    out = dict(values)
    for p in search.params:
        if p.key not in out:
            v = p.choices[0] if p.kind == "categorical" else p.low
            out[p.key] = [int(v) if p.kind == "int" else v]
    return out


def resolve_search(search: SearchSpec, catalog: Any, source: str) -> SearchSpec:
    """Look up a searched gpu's catalog names."""
    gpus: tuple[Any, ...] = ()
    if "gpu" in search.keys:
        found = []
        for name in search.param("gpu").choices:
            try:
                found.append(catalog.gpu(name))
            except CatalogError as exc:
                raise GridError(source, "search.params.gpu", name, exc.rule) from None
        gpus = tuple(found)
    return replace(search, gpus=gpus)


def check_search_space(search: SearchSpec, model: ServingModel, values: Mapping[str, list[Any]], options: Any) -> None:
    """The model's cross-field rules (the same that check `[grid]`) over the searched
    domain: each searched key takes the values that bound its range."""
    space = dict(values)
    for p in search.params:
        space[p.key] = list(p.extremes)

    def where(key: str) -> str:
        return f"search.params.{key}" if key in search.keys else f"grid.{key}"

    model.check(space, options, where, search.source)


def _objectives(raw: Any, source: str, model: ServingModel) -> tuple[str, ...]:
    OBJECTIVES = model.objectives
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise GridError(source, "search.objective", raw, f"must name at least one objective: {', '.join(OBJECTIVES)}")
    for o in items:
        if not isinstance(o, str) or o not in OBJECTIVES:
            raise GridError(source, "search.objective", o,
                            f"unknown objective{did_you_mean(str(o), OBJECTIVES)}; "
                            f"use one of {', '.join(OBJECTIVES)} or a list of them")
    if len(set(items)) != len(items):
        raise GridError(source, "search.objective", raw, "lists an objective twice")
    return tuple(items)


def _count(v: Any, key: str, source: str, example: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise GridError(source, f"search.{key}", v, f"must be an integer >= 1: {example}")
    return v


def _storage(v: Any, source: str) -> str:
    if not isinstance(v, str) or not v:
        raise GridError(source, "search.storage", v, 'must be "sqlite", "journal", "memory" or an RDB URL such as "postgresql://user@host/db"')
    if v in STORAGE_KINDS:
        return v
    if not _URL_RE.match(v):
        raise GridError(source, "search.storage", _hide_password(v),
                        'must be "sqlite", "journal", "memory" or an RDB URL such as "postgresql://user@host/db"')
    if _has_password(v):
        raise GridError(source, "search.storage", _hide_password(v),
                        "carries a password, which the grid file would copy into the manifest and every Parquet file; "
                        "leave it out (postgresql://user@host/db) and give it in the environment: "
                        "PGPASSWORD or ~/.pgpass")
    return v


def _has_password(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password is not None
    except ValueError:
        return _hide_password(url) != url


def resolve_url(url: str) -> str:
    """The URL SQLAlchemy opens: a `postgresql://` (or `postgres://`) URL that names no
    driver gets psycopg 3, the `sweep-capacity[cluster]` extra's driver (psycopg2 when only that is
    installed); a URL naming its driver (`postgresql+psycopg2://`) is kept."""
    m = _URL_RE.match(url)
    if m is None or m.group(2) or m.group(1).lower() not in ("postgresql", "postgres"):
        return url
    import importlib.util

    driver = "psycopg" if importlib.util.find_spec("psycopg") is not None else (
        "psycopg2" if importlib.util.find_spec("psycopg2") is not None else "psycopg")
    return f"postgresql+{driver}://" + url[m.end():]


def _param(key: str, raw: Any, source: str, model: ServingModel) -> SearchParam:
    where = f"search.params.{key}"
    keys = searchable(model)
    if key not in keys:
        rule = (f"unknown searched parameter{did_you_mean(key, keys)}; a search varies {', '.join(keys)} "
                "(fix every other key in [grid])")
        raise GridError(source, where, raw, rule)
    param = model.param_by_key[key]
    if isinstance(raw, list):
        if not raw:
            raise GridError(source, where, raw,
                            f"an empty list searches nothing; give at least one value, e.g. {_example(model, key)}")
        if len(raw) > MAX_AXIS_VALUES:
            raise GridError(source, where, raw[:32],
                            f"gives {len(raw):,} values; a searched list holds at most {MAX_AXIS_VALUES:,}")
        choices = tuple(check_value(param, v, source, where) for v in raw)
        if len(set(choices)) != len(choices):
            dup = next(c for c in choices if choices.count(c) > 1)
            raise GridError(source, where, dup, "appears twice; each value once")
        return SearchParam(key, "categorical", choices=choices)
    if isinstance(raw, Mapping):
        if param.kind == "name":
            raise GridError(source, where, dict(raw), f"catalog names take a list, e.g. {_example(model, key)}")
        for k in raw:
            if k not in ("low", "high", "log"):
                raise GridError(source, f"{where}.{k}", raw[k],
                                f"unknown range key{did_you_mean(str(k), ('low', 'high', 'log'))}; use {{low, high}} "
                                "and optionally log = true")
        for k in ("low", "high"):
            if k not in raw:
                raise GridError(source, where, dict(raw), f"a range needs '{k}', e.g. {_example(model, key)}")
        low = check_value(param, raw["low"], source, f"{where}.low", finite=True)
        high = check_value(param, raw["high"], source, f"{where}.high", finite=True)
        if high < low:
            raise GridError(source, f"{where}.high", high, f"empty range: must be >= low ({low})")
        log = raw.get("log", False)
        if not isinstance(log, bool):
            raise GridError(source, f"{where}.log", log, "must be true or false")
        if log and low <= 0:
            raise GridError(source, f"{where}.low", low, "must be > 0 with log = true")
        return SearchParam(key, "int" if param.kind == "int" else "float", low=low, high=high, log=log)
    raise GridError(source, where, raw,
                    f"a searched parameter takes a list or a {{low, high}} range, e.g. {_example(model, key)}; "
                    "a fixed value belongs in [grid]")


def _example(model: ServingModel, key: str) -> str:
    """How the model says `key` is searched (its parameter's `search_example`)."""
    return model.param_by_key[key].search_example or f"{key} = [1, 2]"


def _hide_password(url: str) -> str:
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


# --------------------------------------------------------------------------- storage check


def check_storage(search: SearchSpec, out_dir: str | Path, timeout_s: float = STORAGE_TIMEOUT_S,
                  allow_outside: Sequence[str | Path] = ()) -> None:
    """Refuse a storage that cannot be used, fast (`timeout_s`), before any work starts.

    sqlite/journal: the output folder (or its nearest existing parent) must be writable.
    A SQLite URL: its database (relative to the working folder, as SQLite opens it) must lie
    in `out_dir` or under a folder of `allow_outside` (`sweep run --allow-outside DIR`), so a
    shared grid cannot create a database anywhere writable.
    An RDB URL: the host must accept a TCP connection, the driver must be installed, and a
    connection must open. Raises `StorageError(source, "search.storage", url, reason)`.
    """
    import os

    if search.storage == "memory":
        return
    shown = _hide_password(search.storage)
    if search.storage in STORAGE_FILES:
        d = Path(out_dir).resolve()
        while not d.exists() and d != d.parent:
            d = d.parent
        if not (d.is_dir() and os.access(d, os.W_OK)):
            raise StorageError(search.source, "search.storage", search.storage,
                               f"the output folder {out_dir} is not writable for {STORAGE_FILES[search.storage]}")
        return
    try:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        url = make_url(resolve_url(search.storage))
    except (ArgumentError, ValueError) as exc:
        raise StorageError(search.source, "search.storage", shown, f"is not a valid database URL ({exc})") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        db = url.database or ""
        if db.startswith("file:"):  # a SQLite URI filename
            db = db[len("file:"):].split("?", 1)[0]
        if db and db != ":memory:":
            roots = [Path(out_dir).resolve(), *(Path(a).resolve() for a in allow_outside)]
            if not within(db, roots):
                raise StorageError(search.source, "search.storage", shown,
                                   f"the database {Path(db).resolve()} lies outside the output folder {roots[0]}; "
                                   f"use storage = \"sqlite\" (OUT/{STORAGE_FILES['sqlite']}), or allow its folder "
                                   f"with {ALLOW_OPTION} DIR")
            parent = Path(db).resolve().parent
            if not parent.is_dir() or not os.access(parent, os.W_OK):
                raise StorageError(search.source, "search.storage", shown,
                                   f"the folder {parent} does not exist or is not writable")
        return
    host, port = url.host or "localhost", url.port or _DEFAULT_PORTS.get(backend)
    if port is not None and not (host.startswith("/") or url.query.get("host")):
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise StorageError(search.source, "search.storage", shown,
                               f"cannot reach {host}:{port} ({reason}); start the database or fix the URL") from None
    try:
        import sqlalchemy

        connect_args = ({"connect_timeout": int(max(1, timeout_s))} if backend in ("postgresql", "mysql", "mariadb")
                        else {})
        engine = sqlalchemy.create_engine(url, connect_args=connect_args, poolclass=sqlalchemy.pool.NullPool)
        with engine.connect():
            pass
        engine.dispose()
    except ImportError as exc:
        raise StorageError(search.source, "search.storage", shown,
                           f"the database driver is not installed ({exc.name or exc}); "
                           "for PostgreSQL: pip install 'sweep-capacity[cluster]'") from None
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StorageError(search.source, "search.storage", shown, f"cannot connect ({first[:160]})") from None
