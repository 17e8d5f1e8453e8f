"""End to end: grid file -> chunks -> Parquet + manifest, as BI tools and schedulers see it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from sweep import grid as spec
from sweep.io import parquet as writers
from sweep.io.columns import all_point_columns
from sweep.io.staging import STAGING_PREFIX
from sweep.decide.tables import FRONTIER_EXTRA, optimum_columns
from sweep.models import get_model
from sweep.cli import main
from sweep.engine import Evaluator
from sweep.runner import run_grid

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


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory, root):
    out = tmp_path_factory.mktemp("seed")
    assert main(["run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(out), "--quiet"]) == 0
    return out


def test_outputs_exist_and_manifest(seed_run, root):
    m = json.loads((seed_run / "manifest.json").read_text())
    text = (root / "grids" / "seed-gpt3.toml").read_text()
    assert m["grid"]["toml"] == text and len(m["grid"]["sha256"]) == 64
    assert m["rows"]["grid_points"] == 5 and m["rows"]["points_written"] == 5
    assert m["service_source"] == "given" and m["latency_model"] == "gaussian"
    assert m["chunks"]["compilations"] == 1
    assert {"total", "evaluate", "write"} <= set(m["timings_s"])
    assert m["sweep_version"]
    assert not [p for p in seed_run.iterdir() if p.name.startswith(STAGING_PREFIX)]


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
    # +inf stays +inf, never NaN or null.
    ew = table.column("e_wait_ms").to_numpy()
    assert math.isinf(ew[0]) and ew[0] > 0
    for name in table.column_names:
        col = table.column(name)
        assert col.null_count == 0
        if pa.types.is_floating(col.type):
            assert not np.isnan(col.to_numpy()).any(), name


def test_duckdb_reads_the_output(seed_run):
    con = duckdb.connect()
    rows = con.execute(
        f"""SELECT batch_size, round(e_resp_ms, 1) AS e_t, action
            FROM read_parquet('{seed_run}/points/*.parquet')
            WHERE stable ORDER BY batch_size"""
    ).fetchall()
    # Seed table: stable from B = 8; E[T] 145.1, 149.5, 229.6 ms.
    assert rows == [(8, 145.1, "slo_violated"), (16, 149.5, "slo_violated"), (32, 229.6, "out_of_memory")]
    inf_rows = con.execute(
        f"SELECT count(*) FROM read_parquet('{seed_run}/points/*.parquet') WHERE e_wait_ms = 'inf'::DOUBLE"
    ).fetchone()
    assert inf_rows == (2,)


def test_chunking_does_not_change_results_and_compiles_once(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED)
    g = spec.load(p)
    assert g.n_points == 2 * 2 * 5 * 4 * 2 * 2 * 2 * 2
    whole = Evaluator(g, chunk_size=1 << 12).chunk(0).columns
    ev = Evaluator(g, chunk_size=96)  # does not divide the grid: the last chunk is padded
    parts = list(ev.iter_chunks())
    assert ev.compile_count() == 1  # one compilation for every chunk
    assert sum(len(c) for c in parts) == g.n_points
    for key, full in whole.items():
        np.testing.assert_array_equal(np.concatenate([c.columns[key] for c in parts]), full, err_msg=key)
    assert np.array_equal(whole["point_id"], np.arange(g.n_points))


def test_point_ids_decode_the_axes(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED)
    g = spec.load(p)
    cols = Evaluator(g).chunk(0).columns
    grid = np.stack(np.meshgrid(*[np.arange(n) for n in g.shape], indexing="ij"), -1).reshape(-1, len(g.shape))
    for i, axis in enumerate(g.axes):
        if axis.key in ("model", "gpu"):
            np.testing.assert_array_equal(cols[axis.key], grid[:, i])
        elif axis.key in cols:
            np.testing.assert_array_equal(cols[axis.key], np.asarray(axis.values, dtype=float)[grid[:, i]])


@pytest.mark.parametrize("mode", ["feasible", "none"])
def test_points_modes(tmp_path, mode):
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED + f'\n[output]\npoints = "{mode}"\n')
    result = run_grid(spec.load(p), tmp_path / "out", chunk_size=128)
    m = result.manifest
    if mode == "none":
        assert m["rows"]["points_written"] == 0 and not (tmp_path / "out" / "points").exists()
    else:
        t = ds.dataset(tmp_path / "out" / "points").to_table()
        assert t.num_rows == m["rows"]["feasible"] == m["rows"]["points_written"] > 0
        assert pa.compute.all(t.column("feasible")).as_py()


def _interrupting_writes(monkeypatch, after: int) -> None:
    calls = {"n": 0}
    real_write = writers.DatasetWriter.write

    def failing_write(self, batch):
        calls["n"] += 1
        if calls["n"] == after:
            raise KeyboardInterrupt  # as if killed half way
        real_write(self, batch)

    monkeypatch.setattr(writers.DatasetWriter, "write", failing_write)


def test_failed_run_leaves_nothing_that_looks_complete(tmp_path, monkeypatch, root):
    out = tmp_path / "out"
    run_grid(spec.load(root / "grids" / "seed-gpt3.toml"), out)  # a complete earlier run
    assert (out / "manifest.json").exists()
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED)
    _interrupting_writes(monkeypatch, after=3)
    with pytest.raises(KeyboardInterrupt):
        run_grid(spec.load(p), out, chunk_size=64)
    # The earlier complete run is untouched; the interrupted one is only in a hidden folder.
    assert json.loads((out / "manifest.json").read_text())["grid_name"] == "seed-gpt3"
    assert ds.dataset(out / "points").count_rows() == 5
    visible = sorted(x.name for x in out.iterdir() if not x.name.startswith("."))
    assert visible == ["frontier.parquet", "manifest.json", "optimum.parquet", "points"]


def _tables(out: Path) -> dict[str, pa.Table]:
    return {
        "points": ds.dataset(out / "points", partitioning="hive").to_table().sort_by("point_id"),
        "optimum": pq.read_table(out / "optimum.parquet").sort_by("row_id"),
        "frontier": pq.read_table(out / "frontier.parquet").sort_by("point_id"),
    }


def _same(a: dict[str, pa.Table], b: dict[str, pa.Table]) -> None:
    for name in a:
        ta, tb = a[name], b[name]
        assert ta.num_rows == tb.num_rows, name
        for col in ta.column_names:
            x, y = ta.column(col).to_pylist(), tb.column(col).to_pylist()
            assert x == y, (name, col)


def test_interrupted_run_resumes_to_the_same_result(tmp_path, monkeypatch):
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED)
    g = spec.load(p)
    clean = run_grid(g, tmp_path / "clean", chunk_size=64, segment_points=128)
    _interrupting_writes(monkeypatch, after=14)  # 3 writes a chunk, 3 chunks a segment
    with pytest.raises(KeyboardInterrupt):
        run_grid(g, tmp_path / "resumed", chunk_size=64, segment_points=128)
    monkeypatch.undo()
    again = run_grid(g, tmp_path / "resumed", chunk_size=64, segment_points=128)
    assert again.manifest["chunks"]["resumed_segments"] >= 1
    assert again.manifest["rows"] == clean.manifest["rows"]
    _same(_tables(tmp_path / "clean"), _tables(tmp_path / "resumed"))
    # A finished run is not run again; --force runs it.
    t0 = (tmp_path / "resumed" / "manifest.json").stat().st_mtime_ns
    assert run_grid(g, tmp_path / "resumed", chunk_size=64, segment_points=128).skipped
    assert (tmp_path / "resumed" / "manifest.json").stat().st_mtime_ns == t0
    assert not run_grid(g, tmp_path / "resumed", chunk_size=64, segment_points=128, force=True).skipped


def test_shards_combine_to_exactly_one_run(tmp_path):
    from sweep.runner import Shard
    from sweep.runner import merge_shards

    p = tmp_path / "w.toml"
    p.write_text(WINDOWED + '\n[output]\npartition_by = ["model", "gpu"]\n')
    g = spec.load(p)
    run_grid(g, tmp_path / "one", chunk_size=64)
    for i in (1, 2, 3):
        r = run_grid(g, tmp_path / "split", chunk_size=64, shard=Shard(i, 3))
        assert r.out_dir == tmp_path / "split" / "shards" / f"{i:04d}-of-0003"
    with pytest.raises(Exception, match="missing"):
        import shutil

        shutil.move(tmp_path / "split" / "shards" / "0002-of-0003", tmp_path / "away")
        merge_shards(tmp_path / "split")
    shutil.move(tmp_path / "away", tmp_path / "split" / "shards" / "0002-of-0003")
    merged = merge_shards(tmp_path / "split")
    assert merged["rows"]["points_written"] == g.n_points
    _same(_tables(tmp_path / "one"), _tables(tmp_path / "split"))
    # Shards are disjoint slices: their point ranges tile the grid.
    ranges = [json.loads((tmp_path / "split" / "shards" / f"{i:04d}-of-0003" / "manifest.json").read_text())["shard"]["points"] for i in (1, 2, 3)]
    assert ranges[0][0] == 0 and ranges[-1][1] == g.n_points and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_hive_partitions_columns_and_row_groups(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED + '\n[output]\npartition_by = ["gpu", "model"]\ncolumns = ["point_id", "model", "gpu", "batch_size", "latency_ms"]\nrow_group_rows = 1024\n')
    run_grid(spec.load(p), tmp_path / "o", chunk_size=64)
    dirs = sorted(str(d.relative_to(tmp_path / "o" / "points")) for d in (tmp_path / "o" / "points").glob("*/*"))
    assert dirs == ["model=llama-2-7b/gpu=h100-sxm", "model=llama-2-7b/gpu=l4", "model=llama-3.1-8b/gpu=h100-sxm", "model=llama-3.1-8b/gpu=l4"]
    f = next((tmp_path / "o" / "points").rglob("*.parquet"))
    assert pq.read_schema(f).names == ["point_id", "batch_size", "latency_ms"]  # partition keys live in the path
    assert pq.ParquetFile(f).metadata.num_rows == 320  # one partition's share of the grid
    p.write_text(WINDOWED + '\n[output]\nrow_group_rows = 1024\n')
    run_grid(spec.load(p), tmp_path / "flat", chunk_size=64)
    meta = pq.ParquetFile(next((tmp_path / "flat" / "points").glob("*.parquet"))).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1024, 256]
    con = duckdb.connect()
    n = con.execute(f"SELECT count(DISTINCT model || gpu) FROM read_parquet('{tmp_path}/o/points/**/*.parquet', hive_partitioning = true)").fetchone()
    assert n == (4,)


def test_progress_log_lines_for_schedulers(tmp_path, root, capsys):
    assert main(["run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(tmp_path / "o"), "--progress", "log"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().err.strip().splitlines()]
    assert [x["event"] for x in lines] == ["start", "progress", "done"]
    assert lines[1]["done"] == lines[1]["total"] == 5 and "eta_s" in lines[1] and "points_per_s" in lines[1]


def test_bad_shard_and_output_options_exit_2(tmp_path, root, capsys):
    assert main(["run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(tmp_path / "o"), "--shard", "4/3"]) == 2
    assert "--shard" in capsys.readouterr().err
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED + '\n[output]\ncolumns = ["latency"]\n')
    assert main(["run", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "output.columns" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_readme_documents_every_column(root):
    readme = (root / "README.md").read_text()
    every = all_point_columns()
    for c in (*every, *optimum_columns(get_model(), every), *FRONTIER_EXTRA):
        assert f"`{c.name}`" in readme, c.name


def test_summary_prints_the_seed_table(root, capsys, tmp_path):
    assert main(["run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    for fragment in ("54.0", "148.1", "67.5%", "56.1", "35.0", "145.1", "149.5", "229.6", "7.14 -> 8", "14.95", "5.80", "9.66 GB"):
        assert fragment in out, fragment
