"""Grid files (SPEC 8): parse, fill defaults, validate, build a frozen `GridSpec`.

Loading runs in stages, each a small function that can be tested alone:

    read TOML -> check top-level tables -> [options] choose the serving model -> normalise
    each [grid] value to an axis (scalar, list, range table) with the model's type and
    domain rule -> the other tables -> the model fills defaults -> the model's cross-field
    checks -> resolve the catalog -> GridSpec

Everything a user can get wrong is caught here, before any work starts, as a `GridError`
naming the file, the key, the value and the rule. The kernels downstream trust their inputs.
"""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweep.catalog import Catalog, load_catalog
from sweep.deploy.engines import ENGINES
from sweep.errors import CatalogError, GridError, did_you_mean
from sweep.grid.files import InputFileError, read_bytes, read_text, resolve_in_grid
from sweep.grid.schedule import ScheduleSpec, check_schedule_replicas, parse_schedule
from sweep.grid.search_table import (
    check_search_space,
    fill_searched,
    parse_search,
    resolve_search,
)
from sweep.grid.spec import Axis, GridSpec, Options, OutputOptions, SimulationOptions
from sweep.grid.uncertainty import parse_sensitivity, parse_uncertainty
from sweep.grid.values import MAX_AXIS_VALUES, axis_size, axis_values, check_value, expand_range
from sweep.models import (
    REGISTRY,
    SERVING_MODES,
    ServingModel,
    get_model,
    latency_models,
)
from sweep.models.base import WHEN_SENSITIVITY, WHEN_SIMULATION, WHEN_UNCERTAINTY
from sweep.models.shared.columns import OPTION_PARAMS

KV_ALLOCATIONS = ("contiguous", "paged")
POINTS_MODES = ("all", "feasible", "none")
TOP_LEVEL_KEYS = ("name", "description", "grid", "options", "output", "catalog", "profile", "search", "simulation",
                  "schedule", "uncertainty", "sensitivity")
OPTION_KEYS = ("serving", "latency_model", "kv_allocation", "block_tokens", "reserve_fraction", "engine",
               "scheduler_policy", "scheduler_steps", "kv_admission", "workload")
#: `[options] scheduler_policy` values (docs/continuous.md, "Engine variants")
SCHEDULER_POLICIES = ("chunked", "prefill_first")
#: `[options] kv_admission` values (docs/continuous.md, "Engine variants")
KV_ADMISSIONS = ("reserve", "on_demand")
#: `[options] workload` values (docs/continuous.md, "Closed loops")
WORKLOADS = ("open", "closed")
#: tables whose rates or samples assume an open loop at arrival_rps
_OPEN_LOOP_TABLES = ("schedule", "uncertainty", "sensitivity")
#: the most decode steps per scheduling decision `[options] scheduler_steps` takes (vLLM 0.6
#: documents 8-16 as typical; beyond 64 a window outlasts any TTFT a planner would accept)
MAX_SCHEDULER_STEPS = 64
PARTITION_KEYS = ("model", "gpu")

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")

#: Points one grid may hold. The flat point id is an int64 and is decoded through float64
#: axis strides, exact below 2^53 (9.007e15); 1e15 keeps a 9x margin and is already ~3 years
#: of evaluation at 1e7 points/s. A larger grid is refused before anything is built.
MAX_POINTS = 10**15


def _grid_key(key: str) -> str:
    return f"grid.{key}"


# --------------------------------------------------------------------------- stage 1: read


def load(path: str | Path, catalog: Catalog | None = None, *,
         allow_outside: Sequence[str | Path] = ()) -> GridSpec:
    """Read, validate and build a grid file. Raises `GridError` (one line) on any problem.

    The files the grid names (trace, profile) must lie in its folder, symlinks followed, or
    under a folder of `allow_outside` (`sweep.grid.files`)."""
    path = Path(path)
    source = str(path)
    try:
        raw_bytes = read_bytes(path)  # a regular file: a FIFO or a folder is refused before it is opened
    except InputFileError as exc:
        raise GridError(source, "<file>", source, exc.reason) from None
    text = raw_bytes.decode("utf-8", errors="replace")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GridError(source, "<toml>", "", f"is not valid TOML: {exc}") from None
    return build(doc, source=source, text=text, catalog=catalog, allow_outside=allow_outside)


def build(
    doc: Mapping[str, Any], *, source: str, text: str = "", catalog: Catalog | None = None,
    allow_outside: Sequence[str | Path] = (),
) -> GridSpec:
    """Validate a parsed grid document and build the spec (stages 2-5). Relative paths in it
    resolve against `source`'s folder (the working folder for a `source` like "<dict>") and
    must stay there or under a folder of `allow_outside`."""
    _check_top_level(doc, source)
    name = _check_name(doc, source)
    options = _build_options(doc.get("options", {}), source)
    model = get_model(options.serving, options.latency_model)
    if options.workload == "closed":
        _check_closed(doc, source)
    grid = doc.get("grid")
    if not isinstance(grid, Mapping):
        raise GridError(source, "grid", grid, "a [grid] table is required")
    schedule = None
    if "schedule" in doc:
        schedule = parse_schedule(doc["schedule"], source, allow_outside)
        grid = _with_schedule_rates(grid, schedule, source)
    _check_supported_tables(doc, model, source)
    values = _normalise_grid(grid, model, source)
    search = parse_search(doc["search"], source, model) if "search" in doc else None
    if search is not None:
        values = fill_searched(search, values)
    simulation = _build_simulation(doc.get("simulation"), options, source, allow_outside)
    output = _build_output(doc.get("output", {}), model, source)
    fit = _fit_profile(doc.get("profile"), values, source, model, allow_outside) if "profile" in doc else None
    values, facts = model.fill(values, _grid_key, source)
    service_source = "fitted" if fit is not None else facts.pop("service_source")
    model.check(values, options, _grid_key, source)
    uncertainty = (parse_uncertainty(doc["uncertainty"], model, fit, service_source, source, values)
                   if "uncertainty" in doc else None)
    sensitivity = parse_sensitivity(doc["sensitivity"], model, source) if "sensitivity" in doc else False
    if (uncertainty is not None or sensitivity) and search is not None:
        raise GridError(source, "search", "[search]", "cannot be combined with [uncertainty] or [sensitivity] (yet)")
    if schedule is not None:
        check_schedule_replicas(schedule, model, values, source)
    catalog = _resolve_catalog(doc.get("catalog", {}), source, catalog)
    if search is not None:
        search = resolve_search(search, catalog, source)
        check_search_space(search, model, values, options)
    models = tuple(_lookup(catalog.model, n, source, "grid.model") for n in values["model"])
    gpus = tuple(_lookup(catalog.gpu, n, source, "grid.gpu") for n in values["gpu"])
    for key in model.part_gpu_keys:  # a pool's own GPU: looked up under its key, kept once
        for n in values.get(key, ()):
            g = _lookup(catalog.gpu, n, source, _grid_key(key))
            if all(h.name != g.name for h in gpus):
                gpus = (*gpus, g)
    axes = tuple(Axis(p.key, tuple(values[p.key])) for p in model.params if p.key in values)
    spec = GridSpec(
        name=name,
        source=source,
        text=text,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        model=model,
        axes=axes,
        options=options,
        output=output,
        service_source=service_source,
        models=models,
        gpus=gpus,
        description=str(doc.get("description", "")),
        facts=facts,
        fit=fit,
        search=search,
        simulation=simulation,
        uncertainty=uncertainty,
        sensitivity=sensitivity,
        schedule=schedule,
    )
    model.check_spec(spec)
    return spec


def _with_schedule_rates(grid: Mapping[str, Any], schedule: ScheduleSpec, source: str) -> dict[str, Any]:
    """[schedule]'s distinct positive hourly rates become the `arrival_rps` axis: the run
    evaluates every point at every rate the profile needs."""
    if "arrival_rps" in grid:
        raise GridError(source, "grid.arrival_rps", grid["arrival_rps"],
                        "[schedule] gives the arrival rates (one per hour); drop arrival_rps from [grid]")
    return {**grid, "arrival_rps": list(schedule.rates)}


# --------------------------------------------------------------------------- stage 2: shape


def _fit_profile(raw: Any, values: dict[str, list[Any]], source: str, model: ServingModel,
                 allow_outside: Sequence[str | Path] = ()) -> dict[str, Any]:
    """`[profile] file = "x.csv"` (relative to the grid file): fit the model's service-time
    coefficients (`sweep.grid.fit`: T_fixed and t_req for the dynamic batcher, t_fixed,
    t_token and t_ctx for continuous serving) and put them in `values` as scalar axes.
    Exclusive with those keys and the roofline inputs. A bad profile raises `ProfileError`
    naming the CSV file and row."""
    from sweep.grid.fit import FILLS, KINDS, SHAPES, fit_file

    kind = model.profile_kind
    example = "profiles/my-model.csv"
    if not isinstance(raw, Mapping):
        raise GridError(source, "profile", raw, f'must be a table, e.g. [profile] file = "{example}"')
    for k in raw:
        if k != "file":
            raise GridError(source, f"profile.{k}", raw[k],
                            f"unknown profile key{did_you_mean(str(k), ['file'])}; expected file")
    file = raw.get("file")
    if not isinstance(file, str) or not file.strip():
        shapes = " or ".join(",".join(SHAPES[s]) for s in KINDS[kind])
        raise GridError(source, "profile.file", file,
                        f'must be a path (string) to a CSV ({shapes}) relative to the grid file, '
                        f'e.g. file = "{example}"')
    for key in (*FILLS[kind], "eta_bw", "eta_flops", "tokens_per_request"):
        if key in values:
            raise GridError(source, f"grid.{key}", values[key][0],
                            "[profile] gives the service times; drop it or the profile, not both")
    path = resolve_in_grid(file, source, "profile.file", allow_outside)
    fit = fit_file(path, kind)  # its coefficients lie in their [grid] domains, or it raises
    for key, value in fit.grid_values().items():
        values[key] = [value]
    return fit.as_dict()


def _check_top_level(doc: Mapping[str, Any], source: str) -> None:
    for key in doc:
        if key not in TOP_LEVEL_KEYS:
            raise GridError(source, key, doc[key],
                            f"unknown top-level key{did_you_mean(str(key), TOP_LEVEL_KEYS)}; "
                            f"expected one of {', '.join(TOP_LEVEL_KEYS)}")
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


def _normalise_grid(grid: Mapping[str, Any], model: ServingModel, source: str) -> dict[str, list[Any]]:
    """Every present [grid] key -> a non-empty list of checked values (scalar = length 1).

    Sizes first: every axis is counted (a range table by arithmetic) and the grid's point
    count checked against `MAX_POINTS` before any axis is built."""
    params = model.param_by_key
    sizes: dict[str, int] = {}
    for key, raw in grid.items():
        param = params.get(key)
        if param is None:
            raise GridError(source, f"grid.{key}", raw, f"unknown parameter{did_you_mean(key, params)}")
        sizes[key] = axis_size(param, raw, source)
    if math.prod(sizes.values()) > MAX_POINTS:  # exact sizes of integer ranges (repeats dropped) first
        for key, raw in grid.items():
            if isinstance(raw, Mapping) and params[key].kind == "int":
                sizes[key] = len(expand_range(params[key], raw, source))  # <= MAX_AXIS_VALUES: cheap
    check_points(sizes, source)
    return {key: axis_values(params[key], raw, source) for key, raw in grid.items()}


def check_points(sizes: Mapping[str, int], source: str) -> int:
    """The grid's point count (the product of its axis sizes); refused above `MAX_POINTS`."""
    n = math.prod(sizes.values())
    if n > MAX_POINTS:
        shape = " x ".join(f"{k} {v:,}" for k, v in sizes.items() if v > 1)
        raise GridError(source, "grid", f"{n:,} points",
                        f"a grid holds at most {MAX_POINTS:.0e} points ({shape}); sweep fewer values "
                        f"(at most {MAX_AXIS_VALUES:,} per axis), split the study, or search it ([search])")
    return n


# --------------------------------------------------------------------------- stage 3: tables


def _build_options(raw: Mapping[str, Any], source: str) -> Options:
    for k in raw:
        if k not in OPTION_KEYS:
            raise GridError(source, f"options.{k}", raw[k], f"unknown option{did_you_mean(k, OPTION_KEYS)}")
    serving = raw.get("serving", "dynamic")
    if serving not in SERVING_MODES:
        raise GridError(source, "options.serving", serving, f"must be one of {', '.join(SERVING_MODES)}")
    lm = raw.get("latency_model", get_model(serving).name)
    if (serving, lm) not in REGISTRY:
        raise GridError(source, "options.latency_model", lm,
                        f"must be one of {', '.join(latency_models(serving))}"
                        f"{did_you_mean(str(lm), latency_models(serving))}")
    alloc = raw.get("kv_allocation", "contiguous")
    if alloc not in KV_ALLOCATIONS:
        raise GridError(source, "options.kv_allocation", alloc, f"must be one of {', '.join(KV_ALLOCATIONS)}")
    block = _option(raw, "block_tokens", source)
    reserve = _option(raw, "reserve_fraction", source)
    options = Options(serving, lm, alloc, block, float(reserve), _engine(raw, serving, source),
                      _scheduler_policy(raw, serving, source), _scheduler_steps(raw, serving, source),
                      _continuous_option(raw, "kv_admission", KV_ADMISSIONS, serving, source,
                                         "is how an iteration-level (continuous) engine allocates KV"),
                      workload=_continuous_option(raw, "workload", WORKLOADS, serving, source,
                                                  "is how clients load an iteration-level (continuous) engine"))
    return options


def _scheduler_steps(raw: Mapping[str, Any], serving: str, source: str) -> int:
    """`[options] scheduler_steps`: decode steps per scheduling decision (continuous serving only)."""
    if "scheduler_steps" not in raw:
        return Options.scheduler_steps
    value = raw["scheduler_steps"]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SCHEDULER_STEPS:
        raise GridError(source, "options.scheduler_steps", value,
                        f"must be an integer from 1 to {MAX_SCHEDULER_STEPS} (decode steps per scheduling "
                        "decision), e.g. scheduler_steps = 8")
    if serving != "continuous":
        raise GridError(source, "options.scheduler_steps", value,
                        f'is how often an iteration-level (continuous) engine schedules; serving is "{serving}": '
                        'set serving = "continuous" or drop scheduler_steps')
    return value


def _check_closed(doc: Mapping[str, Any], source: str) -> None:
    """A closed loop is set by its clients; its rate is what they make of the engine: the
    tables that set or sample arrival rates, and a replayed arrival trace, are open-loop tools."""
    grid = doc.get("grid")
    if isinstance(grid, Mapping) and "clients" not in grid:
        raise GridError(source, "grid.clients", None,
                        'is required with workload = "closed" (the clients over the fleet), e.g. clients = [64, 256]')
    for table in _OPEN_LOOP_TABLES:
        if table in doc:
            raise GridError(source, table, f"[{table}]",
                            'assumes an open loop at arrival_rps; workload = "closed" sets the load by clients: '
                            f'drop [{table}] or set workload = "open"')
    sim = doc.get("simulation")
    if isinstance(sim, Mapping) and "trace" in sim:
        raise GridError(source, "simulation.trace", sim["trace"],
                        'is an open loop\'s arrival times; workload = "closed" sends a request when a client is '
                        'free: drop trace or set workload = "open"')


def _continuous_option(raw: Mapping[str, Any], key: str, values: Sequence[str], serving: str, source: str,
                       what: str, example: str = "") -> str:
    """`[options] key`, one of `values`, for continuous serving only (`what` says what it is
    of such an engine); the `Options` default when absent."""
    if key not in raw:
        return str(getattr(Options, key))
    value = raw[key]
    if not isinstance(value, str) or value not in values:
        raise GridError(source, f"options.{key}", value,
                        f"must be one of {', '.join(values)}{did_you_mean(str(value).lower(), values)}{example}")
    if serving != "continuous":
        raise GridError(source, f"options.{key}", value,
                        f'{what}; serving is "{serving}": set serving = "continuous" or drop {key}')
    return value


def _scheduler_policy(raw: Mapping[str, Any], serving: str, source: str) -> str:
    """`[options] scheduler_policy`: how a continuous engine composes its steps (docs/continuous.md)."""
    return _continuous_option(raw, "scheduler_policy", SCHEDULER_POLICIES, serving, source,
                              "is how an iteration-level (continuous) engine composes a step")


def _engine(raw: Mapping[str, Any], serving: str, source: str) -> str:
    """`[options] engine`: the engine `sweep deploy` writes commands for (continuous serving only)."""
    return _continuous_option(raw, "engine", ENGINES, serving, source,
                              "names the engine of an iteration-level (continuous) deployment",
                              ', e.g. engine = "vllm"')


def _option(raw: Mapping[str, Any], key: str, source: str) -> Any:
    """A numeric option, checked against its domain like a [grid] value (one value, no axis)."""
    param = OPTION_PARAMS[key]
    if key not in raw:
        return param.default
    if isinstance(raw[key], (list, Mapping)):
        raise GridError(source, f"options.{key}", raw[key], f"takes one value, e.g. {param.example}")
    return check_value(param, raw[key], source, f"options.{key}", finite=True)


#: Tables a model supports only when it declares their columns (`Column.when`).
_TABLE_COLUMNS = {"uncertainty": WHEN_UNCERTAINTY, "sensitivity": WHEN_SENSITIVITY, "simulation": WHEN_SIMULATION}


def _check_supported_tables(doc: Mapping[str, Any], model: ServingModel, source: str) -> None:
    """A table whose columns the serving model does not declare is refused, not ignored."""
    for table, when in _TABLE_COLUMNS.items():
        if table in doc and not any(c.when == when for c in model.columns):
            raise GridError(source, table, f"[{table}]",
                            f'serving = "{model.serving}" (latency_model = "{model.name}") declares no [{table}] '
                            "columns; remove the table")


def _build_simulation(raw: Any, options: Options, source: str,
                      allow_outside: Sequence[str | Path] = ()) -> SimulationOptions | None:
    """`[simulation]` -> SimulationOptions; None when the grid does not simulate."""
    if raw is None:
        if options.latency_model != "simulated":
            return None
        return SimulationOptions()
    if not isinstance(raw, Mapping):
        raise GridError(source, "simulation", raw, "must be a table, e.g. [simulation] n_requests = 20000")
    rules = {
        "n_requests": (1000, "an integer >= 1000 (arrivals per replication after the warm-up), "
                             "e.g. n_requests = 20000"),
        "warmup": (0, "an integer >= 0 (arrivals discarded at the start), e.g. warmup = 2000"),
        "replications": (2, "an integer >= 2 (the confidence interval needs two), e.g. replications = 8"),
        "seed": (0, "an integer >= 0, e.g. seed = 0"),
    }
    values: dict[str, Any] = {}
    for k, v in raw.items():
        if k == "trace":
            continue
        if k not in rules:
            raise GridError(source, f"simulation.{k}", v,
                            f"unknown simulation setting{did_you_mean(k, [*rules, 'trace'])}")
        low, rule = rules[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise GridError(source, f"simulation.{k}", v, f"must be {rule}")
        values[k] = v
    sim = SimulationOptions(**values)
    if sim.n_requests > 5_000_000:
        raise GridError(source, "simulation.n_requests", sim.n_requests,
                        "must be <= 5,000,000 (memory per simulated scenario)")
    if "trace" in raw:
        times = _read_trace(raw["trace"], source, sim.warmup, allow_outside)
        sim = SimulationOptions(**values, trace=str(raw["trace"]), trace_times=times)
    return sim


def _read_trace(path_value: Any, source: str, warmup: int,
                allow_outside: Sequence[str | Path] = ()) -> tuple[float, ...]:
    """An arrival-time trace: one time in seconds per line (a header line and `#` comments
    allowed), sorted ascending, finite, >= 0, longer than the warm-up."""
    if not isinstance(path_value, str):
        raise GridError(source, "simulation.trace", path_value,
                        'must be a path relative to the grid file, e.g. trace = "traces/monday.csv"')
    path = resolve_in_grid(path_value, source, "simulation.trace", allow_outside)
    try:
        lines = read_text(path).splitlines()
    except InputFileError as exc:
        raise GridError(source, "simulation.trace", path_value, exc.reason) from None
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
            raise GridError(source, "simulation.trace", f"{path_value}:{n}",
                            "is not a time in seconds (a number on each line)") from None
        if not math.isfinite(t) or t < 0:
            raise GridError(source, "simulation.trace", f"{path_value}:{n}", f"{t} must be a finite time >= 0 s")
        if times and t < times[-1]:
            raise GridError(source, "simulation.trace", f"{path_value}:{n}",
                            f"{t} is earlier than the line before ({times[-1]}): the trace must be sorted")
        times.append(t)
    if len(times) <= warmup + 100:
        raise GridError(source, "simulation.trace", path_value,
                        f"has {len(times)} arrivals; needs more than warmup + 100 = {warmup + 100}")
    return tuple(times)


def _build_output(raw: Mapping[str, Any], model: ServingModel, source: str) -> OutputOptions:
    names = [c.name for c in model.columns]
    known = ("points", "columns", "partition_by", "row_group_rows")
    for k in raw:
        if k not in known:
            raise GridError(source, f"output.{k}", raw[k],
                            f"unknown output option{did_you_mean(k, known)}; expected one of {', '.join(known)}")
    points = raw.get("points", "all")
    if points not in POINTS_MODES:
        raise GridError(source, "output.points", points, f"must be one of {', '.join(POINTS_MODES)}")
    columns = raw.get("columns", [])
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise GridError(source, "output.columns", columns,
                        'must be a list of column names, e.g. columns = ["batch_size", "latency_ms"]')
    for c in columns:
        if c not in names:
            raise GridError(source, "output.columns", c,
                            f"is not a points column{did_you_mean(c, names)} (README: columns of points/)")
    if "columns" in raw and not columns:
        raise GridError(source, "output.columns", columns,
                        'must not be empty; omit it for every column, or use points = "none"')
    part = raw.get("partition_by", [])
    if not isinstance(part, list) or any(p not in PARTITION_KEYS for p in part) or len(set(part)) != len(part):
        raise GridError(source, "output.partition_by", part,
                        'must be a list of distinct keys from "model", "gpu", e.g. partition_by = ["model", "gpu"]')
    rg = raw.get("row_group_rows", 1 << 18)
    if isinstance(rg, bool) or not isinstance(rg, int) or rg < 1024:
        raise GridError(source, "output.row_group_rows", rg, "must be an integer >= 1024, e.g. row_group_rows = 262144")
    # Keep the canonical order of the partition keys (outermost axes first).
    ordered = tuple(p for p in PARTITION_KEYS if p in part)
    return OutputOptions(points, tuple(columns), ordered, rg)


# --------------------------------------------------------------------------- stage 5: catalog


def _resolve_catalog(raw: Mapping[str, Any], source: str, base: Catalog | None) -> Catalog:
    catalog = base if base is not None else load_catalog()
    for k in raw:
        if k not in ("models", "gpus"):
            raise GridError(source, f"catalog.{k}", raw[k],
                            f"unknown catalog table{did_you_mean(str(k), ('models', 'gpus'))}; use "
                            "[catalog.models.NAME] or [catalog.gpus.NAME]")
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
