"""Grid texts and run helpers shared by several test modules."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

#: Both batching regimes, two models, two GPUs, two GPU counts, two replica counts:
#: 1,280 points (the golden digest `tests/golden/grids/windowed.toml` is the same grid).
WINDOWED = """
name = "w"
[grid]
arrival_rps = [50.0, 120.0]
replicas = [1, 2]
batch_size = [1, 2, 8, 32, 128]
batch_window_ms = [0, 5, 40, inf]
seq_len = [1024, 4096]
model = ["llama-3.1-8b", "llama-2-7b"]
gpu = ["h100-sxm", "l4"]
gpus_per_replica = [1, 2]
t_fixed_ms = 12.0
t_req_ms = 0.4
slo_ms = 150.0
"""


def tables(out: Path) -> dict[str, pa.Table]:
    """A run's three tables, rows in a canonical order."""
    return {
        "points": ds.dataset(out / "points", partitioning="hive").to_table().sort_by("point_id"),
        "optimum": pq.read_table(out / "optimum.parquet").sort_by("row_id"),
        "frontier": pq.read_table(out / "frontier.parquet").sort_by("point_id"),
    }


def same(a: dict[str, pa.Table], b: dict[str, pa.Table]) -> None:
    """Two runs' tables hold exactly the same values, column by column."""
    for name in a:
        ta, tb = a[name], b[name]
        assert ta.num_rows == tb.num_rows, name
        for col in ta.column_names:
            x, y = ta.column(col).to_pylist(), tb.column(col).to_pylist()
            assert x == y, (name, col)
