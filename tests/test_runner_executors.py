"""Where a run's segments are computed (`sweep.runner.executors`): one place chooses the
executor, `run_grid` uses it through the `Executor` base in a fixed order, and a cluster run
without Dask installed is one line before any work (these run without Dask too; the Dask
executor's runs are tests/test_runner_cluster.py)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from _grids import WINDOWED

import sweep
from sweep import grid as spec
from sweep.cli import main
from sweep.errors import OutputError
from sweep.runner import run, run_grid
from sweep.runner.cluster import ClusterOptions, DaskExecutor
from sweep.runner.executors import Executor, InProcess

#: 16 points in scenario groups of 4.
SMALL = {"name": "small", "grid": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "seq_len": 2048,
                                   "arrival_rps": [10.0, 20.0, 40.0, 80.0], "batch_size": [1, 2, 4, 8],
                                   "t_fixed_ms": 10.0, "t_req_ms": 1.0, "slo_ms": 100.0}}


def test_the_executor_is_chosen_in_one_place():
    assert type(run.executor_for(None)) is InProcess
    dask = run.executor_for(ClusterOptions(workers=2))
    assert isinstance(dask, DaskExecutor) and isinstance(dask, Executor) and dask.options.workers == 2


def test_run_grid_uses_its_executor_in_order(tmp_path, monkeypatch):
    """check before any work, the defaults, the segments once, then the manifest's entries;
    what the executor returns is what the manifest says."""
    calls: list[str] = []

    class Recording(InProcess):
        def check(self) -> None:
            calls.append("check")
            assert not (tmp_path / "out").exists()

        def chunk_size(self, grid, chunk: int) -> int:
            calls.append("chunk_size")
            return 4

        def segment_points(self, grid, chunk: int) -> int:
            calls.append("segment_points")
            return 2 * chunk

        def run_segments(self, run, bounds) -> int:
            calls.append("run_segments")
            return super().run_segments(run, bounds)

        def manifest(self) -> dict[str, Any]:
            calls.append("manifest")
            return {"kind": "recording"}

        def compilations(self, ev) -> int:
            calls.append("compilations")
            return 7

    monkeypatch.setattr(run, "executor_for", lambda cluster: Recording())
    result = run_grid(sweep.grid_from_dict(SMALL), tmp_path / "out")
    assert calls == ["check", "chunk_size", "segment_points", "run_segments", "compilations", "manifest"]
    m = result.manifest
    assert m["executor"] == {"kind": "recording"} and m["chunks"]["compilations"] == 7
    assert m["chunks"]["size"] == 4 and m["chunks"]["segments"] == 2 and m["rows"]["points_written"] == 16


def test_a_cluster_run_without_dask_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` raises ImportError
    g = tmp_path / "g.toml"
    g.write_text(WINDOWED)
    with pytest.raises(OutputError, match=r"needs the cluster extra: pip install 'sweep-capacity\[cluster\]'"):
        run_grid(spec.load(g), tmp_path / "out", cluster=ClusterOptions(workers=2))
    assert not (tmp_path / "out").exists()
    assert main(["run", str(g), "--out", str(tmp_path / "out"), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sweep-capacity[cluster]" in err, err
    assert not (tmp_path / "out").exists()
