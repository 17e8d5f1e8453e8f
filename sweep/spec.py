"""Grid files (SPEC 8): parse, fill defaults, validate, build a frozen `GridSpec`.

Loading runs in stages, each a small function that can be tested alone:

    read TOML -> check top-level tables -> normalise each value to an axis (scalar, list,
    range table) with its type and domain rule -> fill defaults -> cross-field checks ->
    resolve the catalog -> GridSpec

Everything a user can get wrong is caught here, before any work starts, as a `GridError`
naming the file, the key, the value and the rule. The kernels downstream trust their inputs.
"""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sweep.catalog import Catalog, Gpu, Model, load_catalog
from sweep.errors import CatalogError, GridError
from sweep.search_spec import SearchSpec, fill_searched, parse_search, resolve_search

# --------------------------------------------------------------------------- parameters

Kind = Literal["float", "int", "name"]

#: Named dtypes accepted for `weight_bytes_per_param` and `kv_bytes_per_elem` (bytes per element).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "fp4": 0.5, "int4": 0.5,
}


@dataclass(frozen=True)
class Param:
    """One `[grid]` parameter: its type, default and domain rule.

    `rule(x)` returns None when `x` is valid, else the rule it breaks (for the message).
    """

    key: str
    kind: Kind
    default: Any  # None: required (or derived, see `load`)
    rule: Callable[[float], str | None] = lambda x: None
    allow_inf: bool = False
    example: str = ""


def _nonneg(x: float) -> str | None:
    return None if x >= 0 else "must be >= 0"


def _positive(x: float) -> str | None:
    return None if x > 0 else "must be > 0"


def _at_least_one(x: float) -> str | None:
    return None if x >= 1 else "must be an integer >= 1"


def _open_unit(x: float) -> str | None:
    return None if 0 < x < 1 else "must lie in (0, 1)"


def _half_open_unit(x: float) -> str | None:
    return None if 0 < x <= 1 else "must lie in (0, 1]"


def _unit_closed_open(x: float) -> str | None:
    return None if 0 <= x < 1 else "must lie in [0, 1)"


#: Every `[grid]` parameter, in the canonical axis order (outermost first). The three
#: decision axes come last, so one (scenario group, replicas) row is a contiguous block.
PARAMS: tuple[Param, ...] = (
    Param("model", "name", None, example='model = "gpt3-175b"'),
    Param("gpu", "name", None, example='gpu = "a100-80gb"'),
    Param("gpus_per_replica", "int", 1, _at_least_one, example="gpus_per_replica = [1, 2, 4, 8]"),
    Param("seq_len", "int", None, _at_least_one, example="seq_len = 2048"),
    Param("mean_seq_len", "float", None, _positive, example="mean_seq_len = 900"),
    Param("arrival_rps", "float", None, _positive, example="arrival_rps = [50, 100, 200]"),
    Param("t_fixed_ms", "float", None, _nonneg, example="t_fixed_ms = 50.0"),
    Param("t_req_ms", "float", None, _nonneg, example="t_req_ms = 0.5"),
    Param("eta_bw", "float", 0.8, _half_open_unit, example="eta_bw = 0.8"),
    Param("eta_flops", "float", 0.5, _half_open_unit, example="eta_flops = 0.5"),
    Param("tokens_per_request", "float", 1.0, _positive, example="tokens_per_request = 1"),
    Param("weight_bytes_per_param", "float", 2.0, _positive, example='weight_bytes_per_param = "fp8"'),
    Param("kv_bytes_per_elem", "float", 2.0, _positive, example='kv_bytes_per_elem = "fp16"'),
    Param("slo_ms", "float", None, _positive, example="slo_ms = 200.0"),
    Param("percentile", "float", 0.99, _open_unit, example="percentile = 0.99"),
    Param("rho_target", "float", 0.75, _half_open_unit, example="rho_target = 0.75"),
    Param("rho_max", "float", 0.85, _half_open_unit, example="rho_max = 0.85"),
    Param("rho_min", "float", 0.5, _unit_closed_open, example="rho_min = 0.5"),
    Param("workers", "int", 1, _at_least_one, example="workers = 1"),
    Param("queue_capacity", "int", math.inf, _at_least_one, allow_inf=True,
          example="queue_capacity = 64  # or inf"),
    Param("service_cv", "float", 0.0, _nonneg, example="service_cv = 0.1"),
    Param("replicas", "int", 1, _at_least_one, example="replicas = [1, 2, 4]"),
    Param("batch_window_ms", "float", math.inf, _nonneg, allow_inf=True,
          example="batch_window_ms = [5, 20, inf]"),
    Param("batch_size", "int", None, _at_least_one, example="batch_size = [1, 8, 32]"),
)
PARAM_BY_KEY: dict[str, Param] = {p.key: p for p in PARAMS}
DECISION_AXES: tuple[str, ...] = ("replicas", "batch_window_ms", "batch_size")
ROOFLINE_KEYS: tuple[str, ...] = ("eta_bw", "eta_flops", "tokens_per_request")
REQUIRED_GRID_KEYS: tuple[str, ...] = (
    "arrival_rps", "batch_size", "seq_len", "model", "gpu", "slo_ms",
)
#: Largest batch cap the windowed closed forms are validated for (SPEC 2).
MAX_WINDOWED_BATCH = 4096

LATENCY_MODELS = ("gaussian", "exponential", "batcher", "simulated")
KV_ALLOCATIONS = ("contiguous", "paged")
POINTS_MODES = ("all", "feasible", "none")
TOP_LEVEL_KEYS = ("name", "description", "grid", "options", "output", "catalog", "profile", "search", "simulation")

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


# --------------------------------------------------------------------------- the built spec


@dataclass(frozen=True)
class Axis:
    """One grid parameter's values. Numbers are float64 in file units; names stay strings."""

    key: str
    values: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class Options:
    latency_model: str = "gaussian"
    kv_allocation: str = "contiguous"
    block_tokens: int = 16
    reserve_fraction: float = 0.0


@dataclass(frozen=True)
class SimulationOptions:
    """`[simulation]`: the simulator's settings (SPEC 7). Present when the grid asks for
    simulated latencies (`latency_model = "simulated"`) or declares the table."""

    n_requests: int = 20_000  # arrivals per replication, after the warm-up
    warmup: int = 2_000  # leading arrivals discarded from the statistics
    replications: int = 8  # independent replications: the CI of the percentile
    seed: int = 0
    trace: str | None = None  # arrival-time trace (seconds), replayed instead of Poisson
    trace_times: tuple[float, ...] = ()


@dataclass(frozen=True)
class OutputOptions:
    points: str = "all"
    columns: tuple[str, ...] = ()  # empty: every point column
    partition_by: tuple[str, ...] = ()  # hive partitioning of points/ ("model", "gpu")
    row_group_rows: int = 1 << 18


@dataclass(frozen=True)
class GridSpec:
    """A validated grid: every parameter an axis (length >= 1) in canonical order."""

    name: str
    source: str
    text: str
    sha256: str
    axes: tuple[Axis, ...]
    options: Options
    output: OutputOptions
    service_source: str  # given | fitted | roofline
    mean_follows_seq_len: bool
    models: tuple[Model, ...]
    gpus: tuple[Gpu, ...]
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: service_source "fitted": the profile fit (file, t_fixed_ms, t_req_ms, r2, n, residuals), else None
    fit: Mapping[str, Any] | None = None
    #: the validated `[search]` table (sweep.search_spec), else None
    search: SearchSpec | None = None
    #: the simulator's settings when the grid simulates (latency_model "simulated" or a
    #: [simulation] table), else None
    simulation: SimulationOptions | None = None

    def axis(self, key: str) -> Axis:
        for a in self.axes:
            if a.key == key:
                return a
        raise KeyError(key)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.axes)

    @property
    def n_points(self) -> int:
        return math.prod(self.shape)

    @property
    def windowed(self) -> bool:
        """True when any window is finite: the kernel needs the incomplete-gamma path."""
        return any(math.isfinite(v) for v in self.axis("batch_window_ms").values)

    @property
    def full_batch(self) -> bool:
        """True when any window is infinite: the kernel needs the full-batch path."""
        return any(math.isinf(v) for v in self.axis("batch_window_ms").values)


# --------------------------------------------------------------------------- stage 1: read


def load(path: str | Path, catalog: Catalog | None = None) -> GridSpec:
    """Read, validate and build a grid file. Raises `GridError` (one line) on any problem."""
    path = Path(path)
    source = str(path)
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        raise GridError(source, "<file>", source, f"cannot be read ({exc.strerror})") from None
    text = raw_bytes.decode("utf-8", errors="replace")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GridError(source, "<toml>", "", f"is not valid TOML: {exc}") from None
    return build(doc, source=source, text=text, catalog=catalog)


def build(
    doc: Mapping[str, Any], *, source: str, text: str = "", catalog: Catalog | None = None
) -> GridSpec:
    """Validate a parsed grid document and build the spec (stages 2-5)."""
    _check_top_level(doc, source)
    name = _check_name(doc, source)
    grid = doc.get("grid")
    if not isinstance(grid, Mapping):
        raise GridError(source, "grid", grid, "a [grid] table is required")
    values = _normalise_grid(grid, source)
    search = parse_search(doc["search"], source, values) if "search" in doc else None
    if search is not None:
        values = fill_searched(search, values)
    options = _build_options(doc.get("options", {}), source)
    simulation = _build_simulation(doc.get("simulation"), options, source)
    output = _build_output(doc.get("output", {}), source)
    fit = _fit_profile(doc.get("profile"), values, source) if "profile" in doc else None
    values, service_source, mean_follows = _fill_defaults(values, source)
    if fit is not None:
        service_source = "fitted"
    _cross_checks(values, options, source)
    catalog = _resolve_catalog(doc.get("catalog", {}), source, catalog)
    if search is not None:
        search = resolve_search(search, catalog, values, source)
    models = tuple(_lookup(catalog.model, n, source, "grid.model") for n in values["model"])
    gpus = tuple(_lookup(catalog.gpu, n, source, "grid.gpu") for n in values["gpu"])
    axes = tuple(Axis(p.key, tuple(values[p.key])) for p in PARAMS if p.key in values)
    return GridSpec(
        name=name,
        source=source,
        text=text,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        axes=axes,
        options=options,
        output=output,
        service_source=service_source,
        mean_follows_seq_len=mean_follows,
        models=models,
        gpus=gpus,
        description=str(doc.get("description", "")),
        fit=fit,
        search=search,
        simulation=simulation,
    )


# --------------------------------------------------------------------------- stage 2: shape


def _fit_profile(raw: Any, values: dict[str, list[Any]], source: str) -> dict[str, Any]:
    """`[profile] file = "x.csv"` (relative to the grid file): fit T_fixed, t_req (sweep.fit)
    and put them in `values` as scalar axes. Exclusive with t_fixed_ms/t_req_ms and the
    roofline inputs. A bad profile raises `ProfileError` naming the CSV file and row."""
    from sweep.fit import fit_file

    if not isinstance(raw, Mapping):
        raise GridError(source, "profile", raw, 'must be a table, e.g. [profile] file = "profiles/my-model.csv"')
    for k in raw:
        if k != "file":
            raise GridError(source, f"profile.{k}", raw[k], "unknown profile key; expected file")
    file = raw.get("file")
    if not isinstance(file, str) or not file.strip():
        raise GridError(source, "profile.file", file,
                        'must be a path (string) to a CSV relative to the grid file, e.g. file = "profiles/gpt3-a100.csv"')
    for key in ("t_fixed_ms", "t_req_ms", "eta_bw", "eta_flops", "tokens_per_request"):
        if key in values:
            raise GridError(source, f"grid.{key}", values[key][0],
                            "[profile] gives the service times; drop it or the profile, not both")
    path = Path(file)
    if not path.is_absolute():
        path = Path(source).parent / path
    fit = fit_file(path)
    values["t_fixed_ms"] = [fit.t_fixed_ms]
    values["t_req_ms"] = [fit.t_req_ms]
    return fit.as_dict()


def _check_top_level(doc: Mapping[str, Any], source: str) -> None:
    for key in doc:
        if key not in TOP_LEVEL_KEYS:
            raise GridError(source, key, doc[key], f"unknown top-level key; expected one of {', '.join(TOP_LEVEL_KEYS)}")
    for key in ("options", "output", "catalog"):
        if key in doc and not isinstance(doc[key], Mapping):
            raise GridError(source, key, doc[key], f"must be a table, e.g. [{key}]")


def _check_name(doc: Mapping[str, Any], source: str) -> str:
    if "name" not in doc:
        raise GridError(source, "name", None, 'is required, e.g. name = "gpt3-100qps"')
    name = doc["name"]
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise GridError(source, "name", name, 'must match [A-Za-z0-9_.-]+, e.g. name = "gpt3-100qps"')
    if "description" in doc and not isinstance(doc["description"], str):
        raise GridError(source, "description", doc["description"], "must be a string")
    return name


def _normalise_grid(grid: Mapping[str, Any], source: str) -> dict[str, list[Any]]:
    """Every present [grid] key -> a non-empty list of checked values (scalar = length 1)."""
    out: dict[str, list[Any]] = {}
    for key, raw in grid.items():
        param = PARAM_BY_KEY.get(key)
        if param is None:
            close = _close(key, PARAM_BY_KEY)
            raise GridError(source, f"grid.{key}", raw, f"unknown parameter{close}")
        out[key] = _axis_values(param, raw, source)
    return out


def _axis_values(param: Param, raw: Any, source: str) -> list[Any]:
    where = f"grid.{param.key}"
    if isinstance(raw, Mapping):
        items = _expand_range(param, raw, source)
    elif isinstance(raw, list):
        if not raw:
            raise GridError(source, where, raw, f"an axis must not be empty, e.g. {param.example}")
        items = list(raw)
    else:
        items = [raw]
    values = [_check_value(param, v, source) for v in items]
    if len(set(values)) != len(values):
        dup = next(v for v in values if values.count(v) > 1)
        raise GridError(source, where, dup, "appears twice in the axis; each value once")
    if param.key == "batch_size":
        values.sort()  # ascending batch sizes let the frontier skip a sort (sweep.decide)
    return values


def _check_value(param: Param, v: Any, source: str) -> Any:
    where = f"grid.{param.key}"
    if param.kind == "name":
        if not isinstance(v, str):
            raise GridError(source, where, v, f"must be a catalog name (string), e.g. {param.example}")
        return v
    if param.key in ("weight_bytes_per_param", "kv_bytes_per_elem") and isinstance(v, str):
        if v.lower() not in DTYPE_BYTES:
            raise GridError(source, where, v, f"unknown dtype; use bytes or one of {', '.join(DTYPE_BYTES)}")
        return DTYPE_BYTES[v.lower()]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        kind = "an integer" if param.kind == "int" else "a number"
        raise GridError(source, where, v, f"must be {kind}, e.g. {param.example}")
    if isinstance(v, float) and math.isnan(v):
        raise GridError(source, where, v, f"NaN is not a value, e.g. {param.example}")
    if isinstance(v, float) and math.isinf(v):
        if param.allow_inf and v > 0:
            return math.inf
        raise GridError(source, where, v, f"must be finite, e.g. {param.example}")
    if param.kind == "int" and not isinstance(v, int):
        raise GridError(source, where, v, f"must be an integer (not a float), e.g. {param.example}")
    problem = param.rule(float(v))
    if problem:
        raise GridError(source, where, v, f"{problem}, e.g. {param.example}")
    return int(v) if param.kind == "int" else float(v)


def _expand_range(param: Param, table: Mapping[str, Any], source: str) -> list[Any]:
    """`{start, stop, num, scale}` or `{start, stop, step}` -> explicit values.

    Integer parameters round a linear/log spacing to integers and drop repeats (a log
    range of batch sizes is what a planner means by it); `step` ranges include `stop`.
    """
    where = f"grid.{param.key}"
    if param.kind == "name":
        raise GridError(source, where, dict(table), "catalog names take a list, not a range table")
    allowed = {"start", "stop", "num", "scale", "step"}
    for k in table:
        if k not in allowed:
            raise GridError(source, f"{where}.{k}", table[k], "unknown range key; use {start, stop, num, scale} or {start, stop, step}")
    for k in ("start", "stop"):
        if k not in table:
            raise GridError(source, where, dict(table), f"a range table needs '{k}', e.g. {{start = 1, stop = 64, num = 7, scale = \"log\"}}")
        x = table[k]
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise GridError(source, f"{where}.{k}", x, "must be a finite number")
        if param.kind == "int" and not isinstance(x, int):
            raise GridError(source, f"{where}.{k}", x, "must be an integer for an integer parameter")
    start, stop = table["start"], table["stop"]
    if stop < start:
        raise GridError(source, f"{where}.stop", stop, f"must be >= start ({start})")
    if ("num" in table) == ("step" in table):
        raise GridError(source, where, dict(table), "give exactly one of 'num' or 'step'")
    if "step" in table:
        step = table["step"]
        if "scale" in table:
            raise GridError(source, f"{where}.scale", table["scale"], "only with 'num', not with 'step'")
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0 or not math.isfinite(step):
            raise GridError(source, f"{where}.step", step, "must be a finite number > 0")
        if param.kind == "int" and not isinstance(step, int):
            raise GridError(source, f"{where}.step", step, "must be an integer for an integer parameter")
        n = int(math.floor((stop - start) / step * (1 + 1e-12))) + 1
        return [start + i * step for i in range(n)] if param.kind == "int" else [float(start + i * step) for i in range(n)]
    num = table["num"]
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise GridError(source, f"{where}.num", num, "must be an integer >= 1")
    scale = table.get("scale", "linear")
    if scale not in ("linear", "log"):
        raise GridError(source, f"{where}.scale", scale, 'must be "linear" or "log"')
    if scale == "log":
        if start <= 0:
            raise GridError(source, f"{where}.start", start, 'must be > 0 with scale = "log"')
        xs = np.geomspace(start, stop, num)
    else:
        xs = np.linspace(start, stop, num)
    if param.kind == "int":
        ints = sorted({int(round(x)) for x in xs})
        return ints
    return [float(x) for x in xs]


# --------------------------------------------------------------------------- stage 3: tables


def _build_options(raw: Mapping[str, Any], source: str) -> Options:
    known = {"latency_model", "kv_allocation", "block_tokens", "reserve_fraction"}
    for k in raw:
        if k not in known:
            raise GridError(source, f"options.{k}", raw[k], f"unknown option{_close(k, known)}")
    lm = raw.get("latency_model", "gaussian")
    if lm not in LATENCY_MODELS:
        raise GridError(source, "options.latency_model", lm, f"must be one of {', '.join(LATENCY_MODELS)}")
    alloc = raw.get("kv_allocation", "contiguous")
    if alloc not in KV_ALLOCATIONS:
        raise GridError(source, "options.kv_allocation", alloc, f"must be one of {', '.join(KV_ALLOCATIONS)}")
    block = raw.get("block_tokens", 16)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise GridError(source, "options.block_tokens", block, "must be an integer >= 1, e.g. block_tokens = 16")
    reserve = raw.get("reserve_fraction", 0.0)
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not (0 <= reserve < 1):
        raise GridError(source, "options.reserve_fraction", reserve, "must be a number in [0, 1), e.g. reserve_fraction = 0.1")
    return Options(lm, alloc, block, float(reserve))


def _build_simulation(raw: Any, options: Options, source: str) -> SimulationOptions | None:
    """`[simulation]` -> SimulationOptions; None when the grid does not simulate."""
    if raw is None:
        return SimulationOptions() if options.latency_model == "simulated" else None
    if not isinstance(raw, Mapping):
        raise GridError(source, "simulation", raw, "must be a table, e.g. [simulation] n_requests = 20000")
    rules = {
        "n_requests": (1000, "an integer >= 1000 (arrivals per replication after the warm-up), e.g. n_requests = 20000"),
        "warmup": (0, "an integer >= 0 (arrivals discarded at the start), e.g. warmup = 2000"),
        "replications": (2, "an integer >= 2 (the confidence interval needs two), e.g. replications = 8"),
        "seed": (0, "an integer >= 0, e.g. seed = 0"),
    }
    values: dict[str, Any] = {}
    for k, v in raw.items():
        if k == "trace":
            continue
        if k not in rules:
            raise GridError(source, f"simulation.{k}", v, f"unknown simulation setting{_close(k, [*rules, 'trace'])}")
        low, rule = rules[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise GridError(source, f"simulation.{k}", v, f"must be {rule}")
        values[k] = v
    sim = SimulationOptions(**values)
    if sim.n_requests > 5_000_000:
        raise GridError(source, "simulation.n_requests", sim.n_requests, "must be <= 5,000,000 (memory per simulated scenario)")
    if "trace" in raw:
        times = _read_trace(raw["trace"], source, sim.warmup)
        sim = SimulationOptions(**values, trace=str(raw["trace"]), trace_times=times)
    return sim


def _read_trace(path_value: Any, source: str, warmup: int) -> tuple[float, ...]:
    """An arrival-time trace: one time in seconds per line (a header line and `#` comments
    allowed), sorted ascending, finite, >= 0, longer than the warm-up."""
    if not isinstance(path_value, str):
        raise GridError(source, "simulation.trace", path_value, 'must be a path relative to the grid file, e.g. trace = "traces/monday.csv"')
    path = Path(source).parent / path_value
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise GridError(source, "simulation.trace", path_value, f"cannot be read ({exc.strerror})") from None
    times: list[float] = []
    for n, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip().split(",", 1)[0].strip()
        if not text:
            continue
        try:
            t = float(text)
        except ValueError:
            if not times and n == 1:
                continue  # a header
            raise GridError(source, "simulation.trace", f"{path_value}:{n}", f"{text!r} is not a time in seconds") from None
        if not math.isfinite(t) or t < 0:
            raise GridError(source, "simulation.trace", f"{path_value}:{n}", f"{t} must be a finite time >= 0 s")
        if times and t < times[-1]:
            raise GridError(source, "simulation.trace", f"{path_value}:{n}", f"{t} is earlier than the line before ({times[-1]}): the trace must be sorted")
        times.append(t)
    if len(times) <= warmup + 100:
        raise GridError(source, "simulation.trace", path_value, f"has {len(times)} arrivals; needs more than warmup + 100 = {warmup + 100}")
    return tuple(times)


PARTITION_KEYS = ("model", "gpu")


def _build_output(raw: Mapping[str, Any], source: str) -> OutputOptions:
    from sweep.columns import COLUMN_BY_NAME

    known = ("points", "columns", "partition_by", "row_group_rows")
    for k in raw:
        if k not in known:
            raise GridError(source, f"output.{k}", raw[k], f"unknown output option{_close(k, known)}; expected one of {', '.join(known)}")
    points = raw.get("points", "all")
    if points not in POINTS_MODES:
        raise GridError(source, "output.points", points, f"must be one of {', '.join(POINTS_MODES)}")
    columns = raw.get("columns", [])
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise GridError(source, "output.columns", columns, 'must be a list of column names, e.g. columns = ["batch_size", "latency_ms"]')
    for c in columns:
        if c not in COLUMN_BY_NAME:
            raise GridError(source, "output.columns", c, f"is not a points column{_close(c, COLUMN_BY_NAME)} (README: columns of points/)")
    if "columns" in raw and not columns:
        raise GridError(source, "output.columns", columns, 'must not be empty; omit it for every column, or use points = "none"')
    part = raw.get("partition_by", [])
    if not isinstance(part, list) or any(p not in PARTITION_KEYS for p in part) or len(set(part)) != len(part):
        raise GridError(source, "output.partition_by", part, 'must be a list of distinct keys from "model", "gpu", e.g. partition_by = ["model", "gpu"]')
    rg = raw.get("row_group_rows", 1 << 18)
    if isinstance(rg, bool) or not isinstance(rg, int) or rg < 1024:
        raise GridError(source, "output.row_group_rows", rg, "must be an integer >= 1024, e.g. row_group_rows = 262144")
    # Keep the canonical order of the partition keys (outermost axes first).
    ordered = tuple(p for p in PARTITION_KEYS if p in part)
    return OutputOptions(points, tuple(columns), ordered, rg)


# --------------------------------------------------------------------------- stage 4: defaults


def _fill_defaults(values: dict[str, list[Any]], source: str) -> tuple[dict[str, list[Any]], str, bool]:
    """Required keys present; defaults filled; service-time source decided."""
    for key in REQUIRED_GRID_KEYS:
        if key not in values:
            raise GridError(source, f"grid.{key}", None, f"is required, e.g. {PARAM_BY_KEY[key].example}")
    has_fixed, has_req = "t_fixed_ms" in values, "t_req_ms" in values
    if has_fixed != has_req:
        missing = "t_req_ms" if has_fixed else "t_fixed_ms"
        raise GridError(source, f"grid.{missing}", None, "give both t_fixed_ms and t_req_ms, or neither (roofline estimate from the catalogs)")
    service_source = "given" if has_fixed else "roofline"
    # Roofline inputs mean something only without measured times: one would be ignored.
    if has_fixed:
        for key in ROOFLINE_KEYS:
            if key in values:
                raise GridError(source, f"grid.{key}", values[key][0], "roofline input given, but t_fixed_ms/t_req_ms are given too; drop one")
    out = dict(values)
    for p in PARAMS:
        if p.key not in out and p.default is not None and not (has_fixed and p.key in ROOFLINE_KEYS):
            out[p.key] = [p.default]
    mean_follows = "mean_seq_len" not in out
    return out, service_source, mean_follows


def _cross_checks(values: dict[str, list[Any]], options: Options, source: str) -> None:
    """Rules that involve several keys; every combination of the axes must be valid."""
    if "mean_seq_len" in values and max(values["mean_seq_len"]) > min(values["seq_len"]):
        raise GridError(source, "grid.mean_seq_len", max(values["mean_seq_len"]),
                        f"must be <= seq_len for every combination (smallest seq_len is {min(values['seq_len'])})")
    if max(values["rho_min"]) >= min(values["rho_max"]):
        raise GridError(source, "grid.rho_min", max(values["rho_min"]),
                        f"must be < rho_max for every combination (smallest rho_max is {min(values['rho_max'])})")
    if "t_fixed_ms" in values and min(values["t_fixed_ms"]) == 0 and min(values["t_req_ms"]) == 0:
        raise GridError(source, "grid.t_req_ms", 0.0, "t_fixed_ms and t_req_ms are both 0: a batch would take no time")
    windows = values["batch_window_ms"]
    if any(math.isfinite(w) for w in windows) and max(values["batch_size"]) > MAX_WINDOWED_BATCH:
        raise GridError(source, "grid.batch_size", max(values["batch_size"]),
                        f"must be <= {MAX_WINDOWED_BATCH} with a finite batch_window_ms (the windowed closed forms are validated up to there)")
    if max(values["workers"]) > 1 and options.latency_model != "simulated":
        raise GridError(source, "grid.workers", max(values["workers"]),
                        f'the analytic latency_model "{options.latency_model}" has one worker per replica; use workers = 1 or latency_model = "simulated"')
    finite_k = [k for k in values["queue_capacity"] if math.isfinite(k)]
    if finite_k and any(math.isinf(w) for w in windows) and min(finite_k) < max(values["batch_size"]):
        raise GridError(source, "grid.queue_capacity", min(finite_k),
                        f"is below batch_size {max(values['batch_size'])} with batch_window_ms = inf: a batch could never fill; set a window or raise the capacity")


# --------------------------------------------------------------------------- stage 5: catalog


def _resolve_catalog(raw: Mapping[str, Any], source: str, base: Catalog | None) -> Catalog:
    catalog = base if base is not None else load_catalog()
    for k in raw:
        if k not in ("models", "gpus"):
            raise GridError(source, f"catalog.{k}", raw[k], "unknown catalog table; use [catalog.models.NAME] or [catalog.gpus.NAME]")
    models, gpus = raw.get("models", {}), raw.get("gpus", {})
    for k, t in (("models", models), ("gpus", gpus)):
        if not isinstance(t, Mapping) or not all(isinstance(v, Mapping) for v in t.values()):
            raise GridError(source, f"catalog.{k}", t, f"entries are tables, e.g. [catalog.{k}.my-entry]")
    if not models and not gpus:
        return catalog
    try:
        return catalog.with_entries(models, gpus, origin=source)
    except CatalogError as exc:
        raise GridError(source, exc.key, exc.value, exc.rule) from None


def _lookup(getter: Callable[[str], Any], name: str, source: str, key: str) -> Any:
    try:
        return getter(name)
    except CatalogError as exc:
        raise GridError(source, key, name, exc.rule) from None


def _close(word: str, choices: Any) -> str:
    import difflib

    match = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean '{match[0]}'?" if match else ""
