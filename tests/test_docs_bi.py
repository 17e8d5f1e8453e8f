"""The BI how-tos (`docs/bi/`) and the nightly query of docs/cli.md, run against real run folders
(issue 13, item 5): every `sql` block through DuckDB's Python API, every `sh` line through the
`duckdb` command-line program, every `python` block (pandas, polars, DuckDB), and the Power BI
and Superset definitions as far as they can be checked here (Superset's dataset SQL and
metrics through DuckDB, the column types a Parquet connector sees). No result may hold NaN or
infinity.

The runs: `grids/example.toml` as `runs/example`, and two nightly runs of a small fleet grid
whose SLO tightened overnight as `runs/fleet-2026-11-29` / `-30` (so that answers appear,
vanish and change between the two, the case where `inf - inf` used to give NaN).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import sweep

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "bi"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
FLEET = {"grid": {"model": ["llama-3.1-8b", "llama-3.1-70b"], "gpu": ["h100-sxm", "a100-80gb"],
                  "gpus_per_replica": [1, 4], "seq_len": 4096, "arrival_rps": [20.0, 400.0, 3000.0],
                  "replicas": [1, 2, 8], "batch_size": [1, 4, 16, 64], "batch_window_ms": [10.0, math.inf]}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("bi")
    sweep.run(sweep.load_grid(ROOT / "grids" / "example.toml"), base / "runs" / "example")
    for day, slo in (("2026-11-29", 400.0), ("2026-11-30", 150.0)):
        spec = sweep.grid_from_dict({"name": "fleet", **FLEET, "grid": {**FLEET["grid"], "slo_ms": slo}})
        sweep.run(spec, base / "runs" / f"fleet-{day}")
    return base


def blocks(path: Path, lang: str) -> list[str]:
    return [body for kind, body in BLOCK.findall(path.read_text()) if kind == lang]


def pages_with(lang: str) -> list[str]:
    """The how-tos that hold at least one `lang` block: each parametrised case runs code."""
    return sorted(p.name for p in DOCS.glob("*.md") if blocks(p, lang))


SQL_PAGES, PYTHON_PAGES = pages_with("sql"), pages_with("python")


def test_the_code_block_tests_have_pages_to_run():
    """The two parametrised tests below are not vacuous: each case is a page with code."""
    assert SQL_PAGES and PYTHON_PAGES
    assert "duckdb.md" in SQL_PAGES and {"pandas.md", "polars.md"} <= set(PYTHON_PAGES)


def assert_clean(rows: list[tuple], where: str) -> None:
    for row in rows:
        for v in row:
            assert not (isinstance(v, float) and not math.isfinite(v)), f"{where}: {v} in {row}"


def run_sql(sql: str, cwd: Path) -> list[tuple]:
    here = os.getcwd()
    os.chdir(cwd)
    try:
        return duckdb.connect().execute(sql).fetchall()
    finally:
        os.chdir(here)


@pytest.mark.parametrize("page", SQL_PAGES)
def test_every_sql_block_runs_and_returns_no_nan(runs, page):
    sqls = blocks(DOCS / page, "sql")
    assert sqls
    for sql in sqls:
        rows = run_sql(sql, runs)
        assert rows, f"{page}: a query returned nothing:\n{sql}"
        assert_clean(rows, page)


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_every_python_block_runs(runs, page):
    codes = blocks(DOCS / page, "python")
    assert codes
    here = os.getcwd()
    os.chdir(runs)
    try:
        for code in codes:
            exec(compile(code, f"{page}", "exec"), {})
    finally:
        os.chdir(here)


def _duckdb_cli() -> str | None:
    """The `duckdb` program: beside this Python (the duckdb-cli package), or on PATH."""
    beside = Path(sys.executable).parent / "duckdb"
    return str(beside) if beside.exists() else shutil.which("duckdb")


def test_the_command_line_lines_run(runs):
    cli = _duckdb_cli()
    if cli is None:
        pytest.skip("the duckdb program is not installed (pip install duckdb-cli, in the test extra)")
    lines = [line for body in blocks(DOCS / "duckdb.md", "sh") for line in body.splitlines() if line.startswith("duckdb ")]
    assert lines
    for line in lines:
        out = subprocess.run(line.replace("duckdb ", f"{cli} ", 1), shell=True, cwd=runs, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        rows = list(csv.reader(io.StringIO(out.stdout)))
        assert len(rows) >= 2, out.stdout
        assert not any(v.lower() in ("nan", "inf", "-inf", "infinity") for row in rows for v in row), out.stdout


def test_the_nightly_query_returns_changes_and_no_nan(runs):
    cli = (ROOT / "docs" / "cli.md").read_text()
    nightly = next(sql for sql in (b for k, b in BLOCK.findall(cli) if k == "sql") if "WITH today AS" in sql)
    assert nightly in (DOCS / "duckdb.md").read_text()  # docs/cli.md and the how-to show the same query
    rows = run_sql(nightly, runs)
    assert rows, "the two nightly runs differ: the query must list the changes"
    assert_clean(rows, "nightly query")
    assert any(r[8] is None or r[9] is None for r in rows)  # an answer appeared or vanished: NULL, not NaN
    # what the same query gave when no answer was +inf: NaN from inf - inf
    assert math.isnan(math.inf - math.inf)


def test_a_parquet_connector_sees_only_plain_nullable_types(runs):
    files = [runs / "runs" / "example" / name for name in ("optimum.parquet", "frontier.parquet")]
    files += sorted((runs / "runs" / "example" / "points").rglob("*.parquet"))
    for path in files:
        schema = pq.ParquetFile(path).schema
        for i in range(len(schema)):
            col = schema.column(i)
            kind = (col.physical_type, str(col.logical_type))
            assert kind in {("INT64", "None"), ("DOUBLE", "None"), ("BOOLEAN", "None"), ("BYTE_ARRAY", "String")}, \
                (path.name, col.name, kind)
            assert col.max_repetition_level == 0, (path.name, col.name)  # no nested or repeated column


def test_the_power_query_steps_name_real_files_and_columns(runs):
    text = (DOCS / "powerbi.md").read_text()
    m = "\n".join(blocks(DOCS / "powerbi.md", "powerquery"))
    names = set(pq.read_schema(runs / "runs" / "example" / "optimum.parquet").names)
    for column in re.findall(r'\[(\w+)\]', m):
        assert column in names or column in ("Extension", "Content", "Data", "Folder"), column
    for measure in re.findall(r"optimum\[(\w+)\]", text):
        assert measure in names, measure


def test_the_data_dictionary_lists_every_column_with_its_unit(runs):
    from sweep.io.columns import csv_dictionary

    names = pq.read_schema(runs / "runs" / "example" / "optimum.parquet").names
    rows = list(csv.DictReader(io.StringIO(csv_dictionary("optimum"))))
    listed = {r["column"]: r for r in rows}
    assert set(names) <= set(listed)
    assert listed["replicas_min"]["null_when"] == "no answer" and listed["replicas_min"]["type"] == "int64"
    assert listed["b_max_slo_latency_ms"]["unit"] == "ms"
