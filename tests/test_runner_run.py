"""One grid run end to end (`sweep.runner.run`): files, manifest, points modes, hive
partitions, atomic publishing, resume, progress lines."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from _grids import WINDOWED, same, tables

from sweep import grid as spec
from sweep.cli import main
from sweep.io import parquet as writers
from sweep.io.staging import STAGING_PREFIX
from sweep.runner import run_grid


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
    # 1,280 points in chunks of 40 (one group) and segments of 3 chunks: the interrupt at the
    # 14th write (3 a chunk: points, optimum, frontier) falls in the second segment.
    assert again.manifest["chunks"]["resumed_segments"] == 1
    assert again.manifest["rows"] == clean.manifest["rows"]
    same(tables(tmp_path / "clean"), tables(tmp_path / "resumed"))
    # A finished run is not run again; --force runs it.
    t0 = (tmp_path / "resumed" / "manifest.json").stat().st_mtime_ns
    assert run_grid(g, tmp_path / "resumed", chunk_size=64, segment_points=128).skipped
    assert (tmp_path / "resumed" / "manifest.json").stat().st_mtime_ns == t0
    assert not run_grid(g, tmp_path / "resumed", chunk_size=64, segment_points=128, force=True).skipped


def test_hive_partitions_columns_and_row_groups(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED + '\n[output]\npartition_by = ["gpu", "model"]\n'
                 'columns = ["point_id", "model", "gpu", "batch_size", "latency_ms"]\nrow_group_rows = 1024\n')
    run_grid(spec.load(p), tmp_path / "o", chunk_size=64)
    dirs = sorted(str(d.relative_to(tmp_path / "o" / "points")) for d in (tmp_path / "o" / "points").glob("*/*"))
    assert dirs == ["model=llama-2-7b/gpu=h100-sxm", "model=llama-2-7b/gpu=l4", "model=llama-3.1-8b/gpu=h100-sxm",
                    "model=llama-3.1-8b/gpu=l4"]
    f = next((tmp_path / "o" / "points").rglob("*.parquet"))
    assert pq.read_schema(f).names == ["point_id", "batch_size", "latency_ms"]  # partition keys live in the path
    assert pq.ParquetFile(f).metadata.num_rows == 320  # one partition's share of the grid
    p.write_text(WINDOWED + '\n[output]\nrow_group_rows = 1024\n')
    run_grid(spec.load(p), tmp_path / "flat", chunk_size=64)
    # 1,280 points in row groups of 1,024: whole row groups alternate between the two
    # encoders' files, so one file holds the full group and the other the 256-row tail.
    files = sorted((tmp_path / "flat" / "points").glob("*.parquet"))
    groups = [[pq.ParquetFile(f).metadata.row_group(i).num_rows
               for i in range(pq.ParquetFile(f).metadata.num_row_groups)]
              for f in files]
    assert sorted(groups) == [[256], [1024]]
    con = duckdb.connect()
    n = con.execute(f"SELECT count(DISTINCT model || gpu) FROM read_parquet('{tmp_path}/o/points/**/*.parquet', "
                    "hive_partitioning = true)").fetchone()
    assert n == (4,)


def test_progress_log_lines_for_schedulers(tmp_path, root, capsys):
    assert main(["run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(tmp_path / "o"), "--progress", "log"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().err.strip().splitlines()]
    assert [x["event"] for x in lines] == ["start", "progress", "done"]
    assert lines[1]["done"] == lines[1]["total"] == 5 and "eta_s" in lines[1] and "points_per_s" in lines[1]
