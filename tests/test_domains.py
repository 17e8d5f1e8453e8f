"""The validated domain of every numeric [grid] key (docs/grid.md): no output is NaN.

`sweep.models.dynamic.DOMAINS` bounds each key to a range a planner can mean. These tests
are what the bounds were found with: over the whole box, every registered model
(`sweep.models.REGISTRY`) evaluated at explicit points (`sweep.engine.evaluate_points`)
returns every column finite or +inf, never NaN and never -inf, and never a negative count.

- a Hypothesis property: per key a small palette of values drawn from its domain (the bounds
  themselves, the values just inside them, and log-uniform interiors), mixed into 512 points
  under the grid's cross-field rules, with catalog figures of every packaged model and GPU;
- the corners: the factorial of every key's two extreme values (three for the window: 0, its
  largest, inf), per kernel configuration (with given service times the queue's keys and the
  memory's share no input: the memory's corners then take turns beside the queue's factorial);
- a grid at the bounds goes through the loader and the whole pipeline (decisions included).

Points are 512 at a time everywhere, so each (model, configuration) compiles once.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sweep
from sweep.catalog import packaged_catalog
from sweep.engine.evaluate import evaluate_points
from sweep.errors import GridError
from sweep.grid.values import check_value
from sweep.models import REGISTRY, ServingModel
from sweep.models.base import figure_arrays
from sweep.models.dynamic.model import DOMAINS, MAX_WINDOWED_BATCH, MIN_T_SVC_MS, PARAMS
from sweep.models.shared.columns import OPTION_PARAMS

N = 512
#: The dynamic serving mode's models (the continuous mode's domains: tests/test_domains_continuous.py)
MODELS = sorted((k, m) for k, m in REGISTRY.items() if m.serving == "dynamic")
IDS = [f"{s}/{n}" for (s, n), _ in MODELS]
NUMERIC = tuple(p for p in PARAMS if p.domain is not None)
BY_KEY = {p.key: p for p in NUMERIC}
ROOFLINE_KEYS = ("eta_bw", "eta_flops", "tokens_per_request")
GIVEN_KEYS = ("t_fixed_ms", "t_req_ms")

#: Kernel configurations (static keywords); the options' domains are exercised at their ends.
#: The window proxies (cheap to compile) run all three. The batcher (20 s to compile) runs A
#: only: what it adds to the shared code reads (lambda, B, T_max, T_fixed, t_req, CV, q)
#: alone, and in A its times cover the roofline's whole reach as well (`_times`), both
#: batching regimes included, so B and C would feed it nothing new.
BLOCK, RESERVE = OPTION_PARAMS["block_tokens"].domain, OPTION_PARAMS["reserve_fraction"].domain
assert BLOCK is not None and RESERVE is not None
CONFIGS = {
    "A": dict(windowed=True, full=True, paged=False, service_source="given", mean_follows=False,
              block_tokens=16.0, reserve_fraction=0.0),
    "B": dict(windowed=False, full=True, paged=True, service_source="roofline", mean_follows=False,
              block_tokens=float(BLOCK.hi), reserve_fraction=math.nextafter(RESERVE.hi, 0.0)),
    "C": dict(windowed=True, full=True, paged=True, service_source="roofline", mean_follows=False,
              block_tokens=float(BLOCK.lo), reserve_fraction=float(RESERVE.lo)),
}


def configs(model: ServingModel) -> list[str]:
    return ["A"] if model.name == "batcher" else ["A", "B", "C"]


# --------------------------------------------------------------------------- the catalog


def _figures() -> dict[str, np.ndarray]:
    """Every packaged (model, GPU) pair's figures, one pair per row."""
    cat = packaged_catalog()
    pairs = list(itertools.product(cat.models.values(), cat.gpus.values()))
    return figure_arrays([m for m, _ in pairs], [g for _, g in pairs])


FIGURES = _figures()
N_PAIRS = len(FIGURES["n_params"])


def _roofline_reach_ms() -> float:
    """An upper bound of the T_fixed or t_req (ms) the SPEC 13 roofline gives over the
    domains and the packaged catalog: the sum of its terms' largest values for one request
    (the secant's T_fixed <= T_svc(1); its slope <= one more request's whole cost) on one
    GPU at the lowest efficiencies, the widest dtypes and the longest reads, and the most
    GPUs' collectives."""
    d, f = DOMAINS, FIGURES
    bw = f["hbm_bw"].min() * d["eta_bw"].lo
    flops = f["flops"].min() * d["eta_flops"].lo
    tokens, ctx = d["tokens_per_request"].hi, d["mean_seq_len"].hi
    t_mem = (f["n_params"].max() * d["weight_bytes_per_param"].hi
             + f["kv_elems_per_token"].max() * d["kv_bytes_per_elem"].hi * (ctx + tokens)) / bw
    t_compute = (2 * f["active_params"].max() * tokens
                 + 4 * f["n_layers"].max() * f["attn_width"].max() * tokens * ctx) / flops
    t_comm = 2 * f["n_layers"].max() * (f["alpha"].max() + 2 * tokens * f["hidden"].max() * 2 / f["link_bw"].min())
    return float((t_mem + t_compute + t_comm + 1e-3) * 1e3)


REACH_MS = _roofline_reach_ms()


# --------------------------------------------------------------------------- values


def edges(key: str) -> list[float]:
    """The bounds of a key's domain and the values just inside them (and inf where allowed)."""
    p = BY_KEY[key]
    d = p.domain
    assert d is not None
    if p.kind == "int":
        lo, hi = d.lo + d.lo_open, d.hi - d.hi_open
        out = [lo, lo + 1, hi - 1, hi]
    else:
        lo = math.nextafter(d.lo, math.inf) if d.lo_open else d.lo
        hi = math.nextafter(d.hi, -math.inf) if d.hi_open else d.hi
        out = [lo, math.nextafter(lo, math.inf), math.nextafter(hi, -math.inf), hi]
    if d.inf:
        out.append(math.inf)
    assert all(not d.rule(x, p.kind == "int") for x in out), (key, out)
    return sorted(set(out))


def interior(key: str) -> st.SearchStrategy[float]:
    """Log-uniform over the domain (from 1e-300 where it starts at 0)."""
    p = BY_KEY[key]
    finite = [x for x in edges(key) if math.isfinite(x)]
    lo, hi = max(finite[0], 1e-300), finite[-1]
    logs = st.floats(math.log(lo), math.log(hi))
    if p.kind == "int":
        return logs.map(lambda u: float(min(max(round(math.exp(u)), lo), hi)))
    return logs.map(lambda u: min(max(math.exp(u), lo), hi))


def values(key: str) -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(edges(key)), interior(key))


def _times() -> st.SearchStrategy[float]:
    """T_fixed / t_req in configuration A: the given domain and the roofline's reach."""
    return st.one_of(values("t_fixed_ms"), st.sampled_from([REACH_MS, math.nextafter(REACH_MS, 0.0)]),
                     st.floats(math.log(1e-300), math.log(REACH_MS)).map(math.exp))


def palettes(config: str) -> st.SearchStrategy[dict[str, list[float]]]:
    keys = {k: values(k) for k in BY_KEY}
    if config == "A":
        keys.update({k: _times() for k in GIVEN_KEYS})
    return st.fixed_dictionaries({k: st.lists(v, min_size=1, max_size=6) for k, v in keys.items()})


# --------------------------------------------------------------------------- points


def valid(points: dict[str, np.ndarray], config: str) -> dict[str, np.ndarray]:
    """Points that pass the grid's cross-field rules (`DynamicModel.check`) and the
    configuration (full batches only: every window inf)."""
    p = {k: np.asarray(v, dtype=np.float64).copy() for k, v in points.items()}
    p["mean_seq_len"] = np.minimum(p["mean_seq_len"], p["seq_len"])
    p["rho_min"] = np.where(p["rho_min"] < p["rho_max"], p["rho_min"], 0.0)
    short = p["t_fixed_ms"] + p["t_req_ms"] < MIN_T_SVC_MS
    p["t_req_ms"] = np.where(short, MIN_T_SVC_MS, p["t_req_ms"])
    if not CONFIGS[config]["windowed"]:
        p["batch_window_ms"] = np.full_like(p["batch_window_ms"], math.inf)
    finite_window = np.isfinite(p["batch_window_ms"])
    p["batch_size"] = np.where(finite_window, np.minimum(p["batch_size"], MAX_WINDOWED_BATCH), p["batch_size"])
    p["workers"] = np.ones_like(p["workers"])  # analytic models: one worker (workers is the simulator's)
    return p


def evaluate(model: ServingModel, config: str, points: dict[str, np.ndarray],
             pair: np.ndarray) -> dict[str, np.ndarray]:
    static = CONFIGS[config]
    columns = tuple(c.name for c in model.columns if c.when != "simulation" and c.name != "point_id")
    if static["service_source"] != "roofline":
        columns = tuple(c for c in columns if c not in ROOFLINE_KEYS)
    figures = {k: v[pair] for k, v in FIGURES.items()}
    return evaluate_points(model, valid(points, config), figures, static=static, columns=columns)


def assert_no_nan(model: ServingModel, config: str, points: dict[str, np.ndarray], pair: np.ndarray) -> None:
    out = evaluate(model, config, points, pair)
    inputs = valid(points, config)
    for name, col in out.items():
        x = np.asarray(col, dtype=np.float64)
        bad = np.isnan(x) | (x == -math.inf)
        if name in ("b_mem_max", "b_min_stable_int", "b_min_rho_target_int", "mean_batch"):
            bad |= x < 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            where = {k: float(v[i]) for k, v in inputs.items()}
            figs = {k: float(v[pair[i]]) for k, v in FIGURES.items()}
            pytest.fail(f"{model.name} [{config}]: {name} = {x[i]} at {where} with figures {figs}")


# --------------------------------------------------------------------------- the property


def _property(model: ServingModel, config: str):
    @settings(max_examples=12 if model.name == "batcher" else 25, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(palette=palettes(config), seed=st.integers(0, 2**32 - 1))
    def prop(palette: dict[str, list[float]], seed: int) -> None:
        rng = np.random.default_rng(seed)
        points = {k: rng.choice(np.asarray(v, dtype=np.float64), N) for k, v in palette.items()}
        assert_no_nan(model, config, points, rng.integers(0, N_PAIRS, N))

    return prop


@pytest.mark.parametrize("key,model", MODELS, ids=IDS)
def test_no_nan_over_the_domain(key, model):
    """Hypothesis over the whole box: palettes per key, mixed into 512 points per example."""
    for config in configs(model):
        _property(model, config)()


# --------------------------------------------------------------------------- the corners


#: The keys each configuration's arithmetic reads, in its two independent parts: the queue
#: (service times, batcher, proxy, tails, B_min) and the memory (KV, weights). With given
#: times (A) the parts share no input, so the queue's factorial runs with the memory's
#: corners assigned in turn; with the roofline (B, C) the memory keys set the service times
#: too, and the factorial is over both. rho_max, rho_min and slo_ms are only compared and
#: workers and queue_capacity only echoed: each stays at one extreme.
QUEUE = ("arrival_rps", "replicas", "batch_size", "service_cv", "percentile", "rho_target")
MEMORY = ("seq_len", "mean_seq_len", "kv_bytes_per_elem", "weight_bytes_per_param", "gpus_per_replica")
CORNER_KEYS = {
    "A": (QUEUE + ("batch_window_ms", "t_fixed_ms", "t_req_ms"), MEMORY),
    "B": (QUEUE + MEMORY + ROOFLINE_KEYS, ()),
    "C": (QUEUE + MEMORY + ROOFLINE_KEYS + ("batch_window_ms",), ()),
}


def _levels(key: str) -> list[float]:
    e = edges(key)
    return [e[0], max(x for x in e if math.isfinite(x))] + ([math.inf] if math.inf in e else [])


def corners(config: str) -> dict[str, np.ndarray]:
    """Every combination of the keys' extreme values (the window: 0, its largest, inf);
    the other keys at their lower bound (slo_ms, rho_max: upper)."""
    keys, turn = CORNER_KEYS[config]
    grid = np.array(list(itertools.product(*(_levels(k) for k in keys))), dtype=np.float64)
    n = len(grid)
    points = {k: np.full(n, edges(k)[0]) for k in BY_KEY}
    points["slo_ms"] = np.full(n, edges("slo_ms")[-1])
    points["rho_max"] = np.full(n, edges("rho_max")[-1])
    for j, k in enumerate(keys):
        points[k] = grid[:, j]
    if turn:
        other = np.array(list(itertools.product(*(_levels(k) for k in turn))), dtype=np.float64)
        for j, k in enumerate(turn):
            points[k] = other[np.arange(n) % len(other), j]
    return points


@pytest.mark.parametrize("key,model", MODELS, ids=IDS)
def test_no_nan_at_the_corners(key, model):
    for config in configs(model):
        points = corners(config)
        n = len(points["arrival_rps"])
        pairs = np.arange(n) % N_PAIRS  # each corner with a packaged (model, GPU) pair, in turn
        for start in range(0, n, N):
            chunk = {k: v[start:start + N] for k, v in points.items()}
            take = np.minimum(np.arange(N), len(chunk["arrival_rps"]) - 1)  # a full 512: one compilation
            assert_no_nan(model, config, {k: v[take] for k, v in chunk.items()}, pairs[start:start + N][take])


# --------------------------------------------------------------------------- the loader


@pytest.mark.parametrize("param", NUMERIC, ids=[p.key for p in NUMERIC])
def test_bounds_accepted_and_just_outside_refused_naming_the_range(param):
    d = param.domain
    integer = param.kind == "int"
    for x in edges(param.key):
        v = int(x) if integer and math.isfinite(x) else x
        assert check_value(param, v, "g.toml", f"grid.{param.key}") == v
    outside = [d.lo - 1, d.hi + 1] if integer else [
        d.lo if d.lo_open else math.nextafter(d.lo, -math.inf), d.hi if d.hi_open else math.nextafter(d.hi, math.inf)]
    for x in outside:
        v = int(x) if integer else x
        with pytest.raises(GridError) as info:
            check_value(param, v, "g.toml", f"grid.{param.key}")
        msg = str(info.value)
        assert d.text(integer) in msg and f"e.g. {param.example}" in msg and f"grid.{param.key}" in msg, msg
    if not d.inf:
        with pytest.raises(GridError, match="finite"):
            check_value(param, math.inf, "g.toml", f"grid.{param.key}")


@pytest.mark.parametrize("param", NUMERIC, ids=[p.key for p in NUMERIC])
def test_an_integer_beyond_float64_is_refused_not_overflowed(param):
    with pytest.raises(GridError) as info:
        check_value(param, 10**400, "g.toml", f"grid.{param.key}")
    assert param.domain is not None and param.domain.text(param.kind == "int") in str(info.value)


@pytest.mark.parametrize("key", ["arrival_rps", "batch_size", "batch_window_ms", "percentile"])
def test_range_tables_and_search_ranges_share_the_domain(key):
    p = BY_KEY[key]
    d = p.domain
    assert d is not None
    too_big = int(d.hi) + 1 if p.kind == "int" else d.hi * 10
    base = {"arrival_rps": 100.0, "batch_size": [1, 8], "seq_len": 2048, "model": "gpt3-175b", "gpu": "a100-80gb",
            "t_fixed_ms": 50.0, "t_req_ms": 0.5, "slo_ms": 200.0}
    start = int(d.lo) if p.kind == "int" else float(max(d.lo, 0.5 * d.hi))
    with pytest.raises(GridError) as info:
        sweep.grid_from_dict({"name": "t", "grid": {**base, key: {"start": start, "stop": too_big, "num": 3}}})
    assert f"grid.{key}.stop" in str(info.value) and d.text(p.kind == "int") in str(info.value)
    if key in ("batch_size", "batch_window_ms"):  # searchable
        with pytest.raises(GridError) as info:
            sweep.grid_from_dict({"name": "t", "grid": base,
                                  "search": {"trials": 8, "storage": "memory",
                                             "params": {key: {"low": start, "high": too_big}}}})
        assert f"search.params.{key}.high" in str(info.value) and d.text(p.kind == "int") in str(info.value)


#: Keys at both bounds in the bound grids (the others at one bound, alternately).
BOTH = ("arrival_rps", "replicas", "batch_size", "t_fixed_ms", "t_req_ms", "service_cv", "percentile", "seq_len",
        "kv_bytes_per_elem", "weight_bytes_per_param", "gpus_per_replica")


def _bound_grid(windowed: bool) -> dict:
    """A grid at the bounds: BOTH at both ends, the rest at one (cross-field rules kept)."""
    grid: dict = {"model": ["llama-3.1-8b", "deepseek-v3"], "gpu": ["l4", "b200"]}
    for i, p in enumerate(NUMERIC):
        e = [x for x in edges(p.key) if math.isfinite(x)]
        ends = [e[0], e[-1]] if p.key in BOTH else [e[i % 2 - 1]]
        grid[p.key] = [int(x) for x in ends] if p.kind == "int" else ends
    grid.update(workers=1, queue_capacity=math.inf, mean_seq_len=1.0, rho_min=0.0, rho_max=edges("rho_max")[-1],
                t_req_ms=[MIN_T_SVC_MS, DOMAINS["t_req_ms"].hi])
    for k in ROOFLINE_KEYS:
        del grid[k]
    if windowed:
        grid["batch_window_ms"] = [0.0, DOMAINS["batch_window_ms"].hi, math.inf]
        grid["batch_size"] = [1, MAX_WINDOWED_BATCH]
    else:
        grid["batch_window_ms"] = math.inf
    return grid


@pytest.mark.parametrize("windowed", [True, False], ids=["windowed", "full"])
def test_a_grid_at_the_bounds_runs_without_nan(windowed):
    """The loader accepts every bound, and points, optimum and frontier hold no NaN and no
    infinity: an unbounded value is NULL, and only in a column that declares when."""
    spec = sweep.grid_from_dict({"name": "bounds", "grid": _bound_grid(windowed)})
    assert spec.n_points == 2 ** len(BOTH) * 4 * (3 if windowed else 1)
    points = sweep.evaluate(spec)
    optimum, frontier = sweep.decide(spec)
    for table in (points, optimum, frontier):
        for name in table.column_names:
            col = table.column(name)
            if not table.schema.field(name).nullable:
                assert col.null_count == 0, name
            if pa.types.is_floating(col.type) or pa.types.is_integer(col.type):
                x = np.asarray(col.drop_null().to_numpy(zero_copy_only=False), dtype=np.float64)
                assert np.isfinite(x).all(), name


# --------------------------------------------------------------------------- the docs


def _grid_page_rows(root, start: str, end: str) -> list[str]:
    """The key rows of docs/grid.md between two of its headings."""
    page = (root / "docs" / "grid.md").read_text()
    section = page[page.index(f"\n## {start}\n"):page.index(f"\n## {end}\n")]
    return [line for line in section.splitlines() if line.startswith("| `")]


def test_the_grid_page_documents_every_domain(root):
    """docs/grid.md, "`[grid]`: dynamic batching" and `[options]`: each key's row names its
    range as the messages do."""
    page = (root / "docs" / "grid.md").read_text()
    rows = (_grid_page_rows(root, "`[grid]`: dynamic batching", "`[grid]`: continuous serving")
            + _grid_page_rows(root, "`[options]`, `[output]`, `[catalog]`", "`[simulation]`"))
    params = [*NUMERIC, *OPTION_PARAMS.values()]
    for p in params:
        d = p.domain
        assert d is not None
        box = dataclasses.replace(d, unit="").text(p.kind == "int")
        name = f"`{p.key}`" if p in NUMERIC else f"`options.{p.key}`"
        row = next((r for r in rows if name in r.split(" | ")[0]), None)
        assert row is not None and box in row, (p.key, box, row)
    example = "grid.percentile = 1.5: must lie in [0.01, 0.999999], e.g. percentile = 0.99"
    assert example in page
    with pytest.raises(GridError) as info:
        check_value(BY_KEY["percentile"], 1.5, "bad.toml", "grid.percentile")
    assert str(info.value) == f"bad.toml: {example}"


def test_the_grid_page_documents_every_continuous_key(root):
    """docs/grid.md, "`[grid]`: continuous serving": a row for every key the continuous model
    declares, with its default and its range as the messages write it."""
    from sweep.models import get_model

    rows = _grid_page_rows(root, "`[grid]`: continuous serving", "`[options]`, `[output]`, `[catalog]`")
    params = get_model("continuous").params
    for p in params:
        row = next((r for r in rows if f"`{p.key}`" in r.split(" | ")[0]), None)
        assert row is not None, p.key
        default, rule = row.split(" | ")[1:3]
        if p.domain is not None:
            assert dataclasses.replace(p.domain, unit="").text(p.kind == "int") in rule, (p.key, row)
        if p.default is None:  # required, or derived (the roofline's step times and efficiencies)
            assert default in ("required", "roofline") or default.startswith("GPU entry"), (p.key, row)
        elif p.default == math.inf:
            assert default.startswith("`inf`"), (p.key, row)
        else:
            assert default == f"{p.default:g}", (p.key, row)
    assert len(rows) == len(params), [r.split(" | ")[0] for r in rows]
