"""A scheduler's SIGTERM mid-run: exit 143, a `failed` log line, nothing that looks complete,
and the same command resumes to exactly the result of an uninterrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow  # three sweep processes, ~16M points

GRID = """
name = "term"
[grid]
arrival_rps = {start = 1.0, stop = 2000.0, num = 40, scale = "log"}
slo_ms = {start = 50.0, stop = 500.0, num = 800}  # 16,384,000 points: two segments
batch_size = {start = 1, stop = 512, step = 1}
seq_len = 2048
model = "llama-3.1-8b"
gpu = "h100-sxm"
t_fixed_ms = 8.0
t_req_ms = 0.05
[output]
points = "none"
"""


def _cmd(grid, out, *extra):
    return [sys.executable, "-m", "sweep.cli", "run", str(grid), "--out", str(out), *extra]


def test_sigterm_exits_143_and_the_rerun_resumes(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    out = tmp_path / "o"
    proc = subprocess.Popen(_cmd(grid, out, "--progress", "log", "--log-interval", "0.001"), stderr=subprocess.PIPE,
                            text=True)
    for line in proc.stderr:  # wait until the first segment's 8,388,608 points are done
        event = json.loads(line)
        if event["event"] == "progress" and event["done"] >= 8_388_608:
            break
    # ... and sealed: its points are counted done before its files are written and its seal
    # (the staging folder's segments/00000.json) is in place, so a signal at the count alone
    # could land before the seal and leave nothing to resume
    for _ in range(6000):
        if list(out.glob("*/segments/00000.json")):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 143
    assert '"event": "failed"' in rest and "rerun the same command" in rest
    assert not (out / "manifest.json").exists()
    subprocess.run(_cmd(grid, out, "--quiet"), check=True, timeout=300)
    resumed = json.loads((out / "manifest.json").read_text())
    assert resumed["chunks"]["resumed_segments"] == 1  # the first of two; the second was in flight
    subprocess.run(_cmd(grid, tmp_path / "clean", "--quiet"), check=True, timeout=300)
    clean = json.loads((tmp_path / "clean" / "manifest.json").read_text())
    assert resumed["rows"] == clean["rows"]
    for name in ("optimum.parquet", "frontier.parquet"):
        assert pq.read_table(out / name).equals(pq.read_table(tmp_path / "clean" / name))


SEARCH_GRID = """
name = "sig-search"
[grid]
arrival_rps = [100.0, 400.0]
batch_size = [8, 32]
seq_len = 2048
model = "llama-3.1-8b"
gpu = "h100-sxm"
t_fixed_ms = 10.0
t_req_ms = 0.8
slo_ms = 250.0
[search]
objective = "min_cost"
trials = 400
batch = 16
seed = 3
storage = "sqlite"
[search.params]
replicas = {low = 1, high = 12}
batch_size = {low = 1, high = 64, log = true}
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["SIGKILL", "SIGTERM", "SIGINT"])
def test_a_signal_in_the_search_phase_resumes_to_the_clean_result(tmp_path, sig):
    import sqlite3

    grid = tmp_path / "g.toml"
    grid.write_text(SEARCH_GRID)
    out = tmp_path / "o"
    proc = subprocess.Popen(_cmd(grid, out, "--quiet"))
    db = out / "search.db"
    for _ in range(2400):  # until the second study has told some trials
        try:
            with sqlite3.connect(db, timeout=1) as con:
                n = con.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
            if n >= 450:
                break
        except sqlite3.Error:
            pass
        time.sleep(0.05)
    proc.send_signal(sig)
    code = proc.wait(timeout=120)
    assert code == {signal.SIGKILL: -9, signal.SIGTERM: 143, signal.SIGINT: 130}[sig]
    assert not (out / "manifest.json").exists()
    subprocess.run(_cmd(grid, out, "--quiet"), check=True, timeout=900)
    subprocess.run(_cmd(grid, tmp_path / "clean", "--quiet"), check=True, timeout=900)
    for name in ("optimum.parquet", "frontier.parquet", "search.parquet"):
        assert pq.read_table(out / name).to_pylist() == pq.read_table(tmp_path / "clean" / name).to_pylist(), name
