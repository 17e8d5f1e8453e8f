"""The public output contract's NULL rule (docs/outputs.md): an unbounded or undefined value
is NULL in the files, with a flag that explains it; never +inf, -inf or NaN.

The engine keeps +inf in memory; `sweep.io.parquet.record_batch` turns it into NULL in the
columns that declare `null_when` (`sweep.models.base.Column`). Here:

- the declarations: every nullable column names what explains a NULL (flag columns of the same
  table, or "no answer" / "unlimited"), and only those are nullable in the schema;
- real runs of every latency model, windowed and full batches, a simulated grid with an
  unsteady point and a search, read back with DuckDB: no float is +-inf or NaN, and each
  NULL is explained (a named flag is false; an answer is missing as a whole, where `reason` /
  `n_feasible` / `is_replicas_min` say so; an "unlimited" input is the grid's inf);
- the Python API (`sweep.evaluate`, `sweep.decide`) gives the same tables as the files.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import sweep
from sweep.cli import main
from sweep.decide.recommend import PREFIXES
from sweep.decide.tables import ANSWERS, answer_name, frontier_columns, optimum_columns
from sweep.io.columns import all_point_columns
from sweep.models import REGISTRY
from sweep.models.base import NO_ANSWER, NULL_WORDS, UNLIMITED
from sweep.search.study import SEARCH_META_FIRST, SEARCH_META_LAST

ROOT = Path(__file__).resolve().parents[1]
BASE = {"seq_len": 2048, "model": "llama-3.1-8b", "gpu": "h100-sxm", "t_fixed_ms": 10.0, "t_req_ms": 1.0}
GRIDS = {
    # the window proxy: proxy-invalid, unstable and out-of-memory points, windows and full batches
    "gaussian": {"grid": {**BASE, "arrival_rps": [50.0, 400.0], "batch_size": [1, 4, 16, 64],
                          "batch_window_ms": [2.0, math.inf], "replicas": [1, 2, 8], "slo_ms": 120.0,
                          "t_req_ms": [1.0, 12.0]}},
    "batcher": {"grid": {**BASE, "arrival_rps": [50.0, 400.0], "batch_size": [1, 4, 16],
                         "batch_window_ms": [2.0, math.inf], "replicas": [1, 4], "slo_ms": 120.0},
                "options": {"latency_model": "batcher"}},
    # the simulator deciding: an unsteady point (far beyond capacity) and a bounded queue
    "simulated": {"grid": {**BASE, "arrival_rps": [20.0, 400.0], "batch_size": [1, 4],
                           "batch_window_ms": [5.0, math.inf], "queue_capacity": [8, math.inf], "slo_ms": 80.0},
                  "options": {"latency_model": "simulated"},
                  "simulation": {"n_requests": 1000, "warmup": 100, "replications": 2, "seed": 3}},
    # continuous serving, analytic: saturated loads, no token budget (inf), a model whose
    # weights do not fit one GPU (Mixtral 8x7B in bf16, 93 GB, on an 80 GB H100)
    "continuous": {"grid": {"model": ["llama-3.1-8b", "mixtral-8x7b"], "gpu": "h100-sxm",
                            "arrival_rps": [1.0, 40.0, 400.0],
                            "prompt_tokens": 512, "prompt_cv": 1.0, "output_tokens": 128, "output_cv": 1.0,
                            "batch_size": [8, 64], "max_batched_tokens": [512, math.inf], "replicas": [1, 2],
                            "ttft_slo_ms": 500.0, "tpot_slo_ms": 40.0},
                   "options": {"serving": "continuous", "kv_allocation": "paged"}},
    # continuous serving decided by the simulator: 200 req/s is far beyond one engine (unsteady)
    "continuous-simulated": {"grid": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "arrival_rps": [2.0, 200.0],
                                      "prompt_tokens": 512, "output_tokens": 128, "batch_size": [8, 32],
                                      "max_batched_tokens": 2048, "tpot_slo_ms": 40.0},
                             "options": {"serving": "continuous", "latency_model": "simulated"},
                             "simulation": {"n_requests": 1000, "warmup": 100, "replications": 2, "seed": 3}},
}


def _tables(model_columns):
    return {"points": model_columns, "frontier": frontier_columns(model_columns)}


# --------------------------------------------------------------------------- declarations


@pytest.mark.parametrize("key", sorted(REGISTRY), ids=lambda k: "/".join(k))
def test_every_nullable_column_names_what_explains_a_null(key):
    model = REGISTRY[key]
    cols = model.columns
    tables = {"points": cols, "frontier": frontier_columns(cols), "optimum": optimum_columns(model, cols)}
    answer_fields = {answer_name(p, s) for p in (*ANSWERS, *PREFIXES) for s, *_ in model.decisions.answer_fields}
    for table, columns in tables.items():
        flags = {c.name for c in columns if c.dtype == "bool"}
        point_flags = {c.name for c in cols if c.dtype == "bool"}
        for c in columns:
            if not c.nullable:
                continue
            # numbers, the flags an answer carries and a decision's own flag (e.g. the layout
            # verdict `disaggregate`): NULL where the row has no such answer
            answer_flag = c.dtype == "bool" and (c.name in answer_fields or c.null_reasons == (NO_ANSWER,))
            assert c.dtype in ("float64", "int64") or answer_flag, (table, c.name)
            for word in c.null_reasons:
                if word in NULL_WORDS:
                    continue
                # an answer's flags are its point's (join on the answer's point_id)
                known = point_flags if c.name in answer_fields else flags
                assert word in known, f"{table}.{c.name}: null_when names {word!r}, not a flag of the table"
            assert c.null_text(), (table, c.name)


def test_search_columns_name_their_flags():
    flags = {c.name for c in SEARCH_META_FIRST + SEARCH_META_LAST if c.dtype == "bool"}
    for c in SEARCH_META_FIRST + SEARCH_META_LAST:
        assert all(w in flags or w in NULL_WORDS for w in c.null_reasons), c.name


def test_the_schema_is_nullable_exactly_where_declared(seed_run):
    declared = {c.name: c for c in all_point_columns()}
    for field in pq.read_schema(next((seed_run / "points").glob("*.parquet"))):
        assert field.nullable == declared[field.name].nullable, field.name
        if field.nullable:
            assert field.metadata[b"null_when"].decode() == declared[field.name].null_text()


# --------------------------------------------------------------------------- real runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out: dict[str, Path] = {}
    base = tmp_path_factory.mktemp("nulls")
    for name, doc in GRIDS.items():
        spec = sweep.grid_from_dict({"name": f"nulls-{name}", **doc})
        out[name] = base / name
        sweep.run(spec, out[name])
    out["search"] = base / "search"
    assert main(["run", str(ROOT / "tests" / "golden" / "grids" / "search.toml"), "--out", str(out["search"]),
                 "--quiet"]) == 0
    return out


def _read(path: Path) -> pa.Table:
    return pq.read_table(path) if path.is_file() else ds.dataset(path, format="parquet").to_table()


def _no_inf_or_nan(con, view: str, table: pa.Table) -> None:
    for field in table.schema:
        if pa.types.is_floating(field.type):
            bad = con.execute(f"SELECT count(*) FROM {view} "
                              f"WHERE isinf({field.name}) OR isnan({field.name})").fetchall()[0][0]
            assert bad == 0, f"{view}.{field.name}: {bad} values are +-inf or NaN"


def _explained(con, view: str, columns, table: pa.Table) -> None:
    """Every NULL of a column whose flags are in the table has one of them false."""
    present = set(table.column_names)
    for c in columns:
        if not c.nullable or c.name not in present:
            continue
        flags = [f for f in c.null_flags if f in present]
        if flags and not set(c.null_reasons) & set(NULL_WORDS):
            cond = " AND ".join(flags)
            bad = con.execute(f"SELECT count(*) FROM {view} WHERE {c.name} IS NULL AND {cond}").fetchall()[0][0]
            assert bad == 0, f"{view}.{c.name}: {bad} NULLs where {cond}"


@pytest.mark.parametrize("name", sorted(GRIDS) + ["search"])
def test_files_hold_no_inf_or_nan_and_every_null_is_explained(runs, name):
    run = runs[name]
    spec = sweep.load_grid(ROOT / "tests/golden/grids/search.toml") if name == "search" else \
        sweep.grid_from_dict({"name": f"nulls-{name}", **GRIDS[name]})
    con = duckdb.connect()
    every = spec.point_columns()
    declared = {"points": every, "frontier": frontier_columns(every), "optimum": optimum_columns(spec.model, every)}
    for view in ("points", "frontier", "optimum"):
        table = _read(run / view if view == "points" else run / f"{view}.parquet")
        con.register(view, table)
        _no_inf_or_nan(con, view, table)
        _explained(con, view, declared[view], table)
    # answers: missing as a whole, and only where the row says there is none
    for prefix in ANSWERS:
        batch = answer_name(prefix, "")
        for suffix, *_ in spec.model.decisions.answer_fields:
            other = answer_name(prefix, suffix)
            assert con.execute(f"SELECT count(*) FROM optimum WHERE {batch} IS NULL "
                               f"AND {other} IS NOT NULL").fetchall()[0][0] == 0
    rows = con.execute("SELECT count(*) FILTER (WHERE (b_max_slo IS NULL) <> (reason <> 'ok')),"
                   " count(*) FILTER (WHERE (slo_opt IS NULL) <> (reason <> 'ok')),"
                   " count(*) FILTER (WHERE (b_latency_opt IS NULL) <> (n_feasible = 0)),"
                   " count(*) FILTER (WHERE (knee IS NULL) <> (n_feasible = 0)) FROM optimum").fetchall()[0]
    assert rows == (0, 0, 0, 0)
    groups = con.execute("SELECT group_id, bool_or(is_replicas_min) AS found, bool_and(replicas_min IS NULL) AS none,"
                     " bool_and(replicas_min_batch IS NULL) AS no_batch FROM optimum GROUP BY ALL").fetchall()
    assert all(found != none and none == no_batch for _, found, none, no_batch in groups)
    # unlimited inputs are the grid's inf: a NULL window means full batches
    if "batch_window_ms" in _read(run / "points").column_names:
        assert con.execute("SELECT count(*) FROM points "
                           "WHERE batch_window_ms IS NULL AND mean_batch <> batch_size").fetchall()[0][0] == 0
    if name == "search":
        search = _read(run / "search.parquet")
        con.register("search", search)
        _no_inf_or_nan(con, "search", search)
        _explained(con, "search", SEARCH_META_FIRST + every + SEARCH_META_LAST, search)


def test_the_runs_cover_the_rules(runs):
    """The grids above do exercise every kind of NULL (else the test above proves little)."""
    con = duckdb.connect()
    g = f"read_parquet('{runs['gaussian']}/points/*.parquet')"
    assert con.execute(f"SELECT count(*) FROM {g} WHERE e_resp_ms IS NULL").fetchall()[0][0] > 0
    assert con.execute(f"SELECT count(*) FROM {g} WHERE batch_window_ms IS NULL").fetchall()[0][0] > 0
    assert con.execute(f"SELECT count(*) FROM read_parquet('{runs['gaussian']}/optimum.parquet') "
                   "WHERE b_max_slo IS NULL AND b_latency_opt IS NOT NULL").fetchall()[0][0] > 0
    assert con.execute(f"SELECT count(*) FROM read_parquet('{runs['gaussian']}/optimum.parquet') "
                   "WHERE b_min_stable_int IS NULL").fetchall()[0][0] > 0
    s = f"read_parquet('{runs['simulated']}/points/*.parquet')"
    assert con.execute(f"SELECT count(*) FROM {s} WHERE sim_p_ms IS NULL AND NOT sim_steady").fetchall()[0][0] > 0
    assert con.execute(f"SELECT count(*) FROM {s} WHERE queue_capacity IS NULL").fetchall()[0][0] > 0
    b = f"read_parquet('{runs['batcher']}/points/*.parquet')"
    assert con.execute(f"SELECT count(*) FROM {b} WHERE batcher_p_ms IS NULL").fetchall()[0][0] > 0
    c = f"read_parquet('{runs['continuous']}/points/*.parquet')"
    assert con.execute(f"SELECT count(*) FROM {c} "
                       "WHERE ttft_p_ms IS NULL AND mem_ok AND NOT stable").fetchall()[0][0] > 0
    assert con.execute(f"SELECT count(*) FROM {c} WHERE rho IS NULL AND NOT mem_ok").fetchall()[0][0] > 0
    assert con.execute(f"SELECT count(*) FROM {c} WHERE max_batched_tokens IS NULL").fetchall()[0][0] > 0
    assert con.execute(f"SELECT count(*) FROM {c} WHERE slo_ms IS NULL").fetchall()[0][0] > 0  # no end-to-end SLO
    assert con.execute(f"SELECT count(*) FROM read_parquet('{runs['continuous']}/optimum.parquet') "
                       "WHERE b_max_slo IS NULL AND reason = 'out_of_memory'").fetchall()[0][0] > 0
    cs = f"read_parquet('{runs['continuous-simulated']}/points/*.parquet')"
    assert con.execute(f"SELECT count(*) FROM {cs} WHERE sim_ttft_p_ms IS NULL AND NOT sim_steady").fetchall()[0][0] > 0
    assert con.execute(f"SELECT count(*) FROM {cs} WHERE tpot_p_ms IS NOT NULL AND sim_steady").fetchall()[0][0] > 0


def test_integer_answers_are_integers(runs):
    schema = pq.read_schema(runs["gaussian"] / "optimum.parquet")
    for name in ("replicas_min", "b_max_slo", "knee", "replicas_min_batch", "b_max_slo_point_id",
                 "b_min_stable_int", "b_min_rho_target_int"):
        assert schema.field(name).type == pa.int64() and schema.field(name).nullable, name
    points = pq.read_schema(next((runs["simulated"] / "points").glob("*.parquet")))
    assert points.field("queue_capacity").type == pa.int64()
    continuous = pq.read_schema(runs["continuous"] / "optimum.parquet")
    for name in ("b_max_slo", "b_max_slo_max_batched_tokens", "replicas_min", "knee_point_id"):
        assert continuous.field(name).type == pa.int64() and continuous.field(name).nullable, name
    points = pq.read_schema(next((runs["continuous"] / "points").glob("*.parquet")))
    assert points.field("max_batched_tokens").type == pa.int64() and points.field("queue_capacity").type == pa.int64()


def test_the_python_api_gives_what_the_files_hold(runs):
    spec = sweep.grid_from_dict({"name": "nulls-gaussian", **GRIDS["gaussian"]})
    points = sweep.evaluate(spec)
    optimum, frontier = sweep.decide(spec)
    for table, path, key in ((points, runs["gaussian"] / "points", "point_id"),
                             (optimum, runs["gaussian"] / "optimum.parquet", "row_id"),
                             (frontier, runs["gaussian"] / "frontier.parquet", "point_id")):
        files = _read(path).sort_by(key)
        mine = table.sort_by(key)
        assert mine.column_names == files.column_names
        for name in mine.column_names:
            a, b = mine.column(name), files.column(name)
            if pa.types.is_dictionary(a.type):
                a = a.cast(a.type.value_type)
            assert a.null_count == b.null_count, name
            assert a.to_pylist() == b.to_pylist(), name


def test_no_answer_and_unlimited_words_are_documented(root):
    doc = (root / "docs" / "outputs.md").read_text()
    for word in (NO_ANSWER, UNLIMITED):
        assert NULL_WORDS[word] in doc
