"""Parquet output (`sweep.io.parquet`) as BI tools see it: zstd, BI-safe types, units and
meanings as field metadata, readable by DuckDB."""

from __future__ import annotations

import json
import math

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sweep.models import get_model


def test_parquet_is_bi_safe(seed_run):
    files = sorted((seed_run / "points").glob("*.parquet"))
    assert files
    meta = pq.ParquetFile(files[0]).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    table = ds.dataset(seed_run / "points").to_table()
    names = [c.name for c in get_model().point_columns(roofline=False, simulation=False)]
    assert table.column_names == names
    for field in table.schema:
        t = field.type
        assert not pa.types.is_unsigned_integer(t) and not pa.types.is_nested(t), field
        if pa.types.is_dictionary(t):
            assert pa.types.is_string(t.value_type)
        assert field.metadata[b"unit"]
    for name in ("model", "gpu", "action", "service_source"):
        assert pa.types.is_dictionary(table.schema.field(name).type)
    prov = json.loads(table.schema.metadata[b"sweep"])
    assert prov["grid_name"] == "seed-gpt3" and len(prov["grid_sha256"]) == 64
    # An unbounded value is NULL, explained by a false flag; never +inf or NaN in a file.
    # (The seed's B = 1 and 4 are not stable: their proxy waits are unbounded.)
    ew = table.column("e_wait_ms")
    assert ew[0].as_py() is None and table.column("proxy_ok")[0].as_py() is False
    assert ew.null_count == 2
    for field in table.schema:
        col = table.column(field.name)
        if not field.nullable:
            assert col.null_count == 0, field.name
        if pa.types.is_floating(col.type):
            assert np.isfinite(col.drop_null().to_numpy()).all(), field.name


def test_duckdb_reads_the_output(seed_run):
    con = duckdb.connect()
    rows = con.execute(
        f"""SELECT batch_size, round(e_resp_ms, 1) AS e_t, action
            FROM read_parquet('{seed_run}/points/*.parquet')
            WHERE stable ORDER BY batch_size"""
    ).fetchall()
    # Seed table: stable from B = 8; E[T] 145.1, 149.5, 229.6 ms.
    assert rows == [(8, 145.1, "slo_violated"), (16, 149.5, "slo_violated"), (32, 229.6, "out_of_memory")]
    null_rows = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE NOT proxy_ok), avg(e_wait_ms) IS NOT NULL "
        f"FROM read_parquet('{seed_run}/points/*.parquet') WHERE e_wait_ms IS NULL"
    ).fetchone()
    assert null_rows == (2, 2, False)
    # aggregates skip NULL: a finite mean over the stable points, never inf or NaN
    mean = con.execute("SELECT avg(e_wait_ms), stddev(e_wait_ms) "
                       f"FROM read_parquet('{seed_run}/points/*.parquet')").fetchone()
    assert all(math.isfinite(v) for v in mean)
