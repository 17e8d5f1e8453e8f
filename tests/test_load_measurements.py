"""Integrity of tests/data/load_measurements.csv and load_measurements_dli.csv (published
measurements of servers under load; docs/accuracy-load.md): every figure cited, well formed
and about a catalog model and GPU. Data checks only: how well the model predicts them is
benchmarks/load_accuracy.py's."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from sweep.catalog import packaged_catalog

DATA = Path(__file__).parent / "data" / "load_measurements.csv"
#: the second, larger set (one source, 787 runs): checked row by row in one test
DLI = Path(__file__).parent / "data" / "load_measurements_dli.csv"
FILES = (DATA, DLI)
COLUMNS = ["id", "model", "gpu", "tensor_parallel", "engine", "engine_version", "weight_dtype", "kv_dtype",
           "workload", "request_rate_rps", "concurrency", "num_prompts", "dataset", "prompt_tokens_mean",
           "prompt_tokens_cv", "output_tokens_mean", "output_tokens_cv", "lengths_source", "metric", "measured",
           "url", "date", "software", "settings", "quote"]
ENGINES = {"vllm", "sglang", "tensorrt-llm", "tgi"}
METRICS = {f"{m}_{s}_ms" for m in ("ttft", "tpot", "itl", "e2e") for s in ("mean", "p50", "p90", "p99")}
METRICS |= {"throughput_rps", "output_tok_s"}
DTYPES = {"bf16", "fp16", "fp8"}


def _rows(path: Path = DATA) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        lines = list(f)
    assert lines[0].startswith("#"), "the file opens with a comment saying what every column means"
    header_comment = "".join(line for line in lines if line.startswith("#"))
    for col in COLUMNS:
        assert col in header_comment, f"the header comment does not explain column {col}"
    return list(csv.DictReader(line for line in lines if not line.startswith("#")))


ROWS = _rows()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_columns_and_size(path):
    with path.open(newline="") as f:
        header = next(line for line in f if not line.startswith("#"))
    assert header.strip().split(",") == COLUMNS
    assert len(_rows(path)) >= 30


def test_ids_unique():
    ids = [r["id"] for path in FILES for r in _rows(path)]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_row(row):
    _check_row(row)


def test_dli_rows():
    rows = _rows(DLI)
    assert len(rows) == 4 * 787  # the sheet's 787 runs, four figures each (tests/data/convert_dli_nim.py)
    for row in rows:
        _check_row(row)


def _check_row(row):
    cat = packaged_catalog()
    cat.model(row["model"])  # raises CatalogError for a name the catalog lacks
    cat.gpu(row["gpu"])
    for col in ("url", "date", "software", "settings", "quote", "lengths_source", "engine_version", "dataset"):
        assert row[col].strip(), f"{col} is empty"
    assert row["url"].startswith("https://")
    assert row["engine"] in ENGINES and row["metric"] in METRICS
    assert row["weight_dtype"] in DTYPES and row["kv_dtype"] in DTYPES
    assert int(row["tensor_parallel"]) >= 1
    measured = float(row["measured"])
    assert math.isfinite(measured) and measured > 0
    for col in ("prompt_tokens_mean", "output_tokens_mean"):
        assert float(row[col]) > 0
    for col in ("prompt_tokens_cv", "output_tokens_cv"):
        assert row[col] == "" or float(row[col]) >= 0
    if row["dataset"] == "fixed":
        assert float(row["prompt_tokens_cv"]) == 0 and float(row["output_tokens_cv"]) == 0
    if row["workload"] == "open":
        rate = row["request_rate_rps"]
        assert rate == "inf" or float(rate) > 0
        assert row["concurrency"] == ""
    else:
        assert row["workload"] == "closed"
        assert int(row["concurrency"]) >= 1 and row["request_rate_rps"] == ""
    if row["num_prompts"]:
        assert int(row["num_prompts"]) >= 1
    # the figure's value is written in its quote (as the source prints it)
    value = row["measured"]
    assert value.rstrip("0").rstrip(".") in row["quote"], (row["id"], value, row["quote"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_several_load_levels_per_setup(path):
    """Issue 25 item 5 asks for several load levels per setup."""
    levels: dict[tuple, set] = {}
    for r in _rows(path):
        setup = (r["model"], r["gpu"], r["tensor_parallel"], r["engine"], r["weight_dtype"], r["kv_dtype"],
                 r["workload"], r["prompt_tokens_mean"], r["output_tokens_mean"])
        levels.setdefault(setup, set()).add(r["request_rate_rps"] or r["concurrency"])
    assert all(len(v) >= 2 for v in levels.values()), {k: v for k, v in levels.items() if len(v) < 2}
