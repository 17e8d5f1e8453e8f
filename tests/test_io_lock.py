"""One writer per output folder (`sweep.io.lock`): a second run refuses in one line with
exit 2 and writes nothing, or waits with --wait; real processes racing for one folder leave
a complete, readable output (the audit's corrupt frontier.parquet, 5 of 5 tries)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from _grids import WINDOWED

from sweep import grid as spec
from sweep.cli import main
from sweep.io.lock import LOCK_FILE, FolderLock, LockedError
from sweep.io.staging import check_file
from sweep.runner import merge_shards, run_grid


def test_a_held_folder_refuses_a_second_writer_in_one_line(tmp_path, capsys, root):
    out = tmp_path / "out"
    with FolderLock(out, what="sweep run"):
        with pytest.raises(LockedError, match="is writing this folder"):
            run_grid(spec.load(root / "grids" / "seed-gpt3.toml"), out)
        assert main(["run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "another sweep run (pid" in err and "--wait" in err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # nothing else was written
    (out / "shards" / "0001-of-0001").mkdir(parents=True)
    with FolderLock(out, what="sweep run"), pytest.raises(LockedError):
        merge_shards(out)  # merge is a writer too


def test_shared_holders_coexist_and_keep_writers_out(tmp_path):
    out = tmp_path / "out"
    with FolderLock(out, what="sweep search", shared=True), FolderLock(out, what="sweep search", shared=True):
        with pytest.raises(LockedError, match="another sweep process"):
            FolderLock(out, what="sweep run").__enter__()
    with FolderLock(out, what="sweep run"):  # released: a writer gets it
        pass


@pytest.mark.slow
def test_two_real_runs_into_one_folder(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(WINDOWED.replace("batch_size = [1, 2, 8, 32, 128]",
                                     "batch_size = {start = 1, stop = 256, step = 1}"))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "sweep", "run", str(grid), "--out", str(out), "--quiet", "--chunk-size", "512"]
    first = subprocess.Popen(cmd)
    for _ in range(600):  # until the first run holds the lock
        note = (out / LOCK_FILE).read_text() if (out / LOCK_FILE).exists() else ""
        if str(first.pid) in note:
            break
        time.sleep(0.05)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert second.returncode == 2 and f"pid {first.pid}" in second.stderr and second.stderr.count("\n") == 1
    waiting = subprocess.run([*cmd, "--wait", "--force"], capture_output=True, text=True, timeout=600)
    assert first.wait(timeout=600) == 0 and waiting.returncode == 0, waiting.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    for rel, record in manifest["checksums"].items():
        assert check_file(out, rel, record) is None
    assert pq.read_table(out / "frontier.parquet").num_rows == manifest["rows"]["frontier"]


@pytest.mark.parametrize(("code", "exit_code", "rule"), [("ENOSPC", 1, "the disk is full (No space left on device)"),
                                                         ("EDQUOT", 1, "the disk is full (Disk quota exceeded)"),
                                                         ("EIO", 2, "cannot write the lock's note")])
def test_a_lock_note_that_cannot_be_written_is_one_line(tmp_path, capsys, monkeypatch, root, code, exit_code, rule):
    """A full disk while the lock's note is written (the audit's traceback), injected with
    `SWEEP_FAULT=lock:write SWEEP_FAULT_ERRNO=...`: one line naming the lock file, exit 1 for a
    full disk (the machine, not the input), 2 otherwise; no output written and the lock
    released (the next writer gets it at once)."""
    from sweep import _faults
    from sweep.io.staging import FAULT_ENV

    out = tmp_path / "out"
    _faults.reset()
    monkeypatch.setenv(FAULT_ENV, "lock:write")
    monkeypatch.setenv(FAULT_ENV + "_ERRNO", code)
    assert main(["run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(out), "--quiet"]) == exit_code
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{out / LOCK_FILE}: " in err and rule in err, err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    monkeypatch.delenv(FAULT_ENV)
    with FolderLock(out, what="sweep run"):  # released
        pass
