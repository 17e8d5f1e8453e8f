"""Search workers sharing one study in one folder, as real processes (`sweep search`):
the trial budget is exact, no trial is asked twice, and a `sweep run` afterwards publishes
the answers without running a trial; a worker killed with SIGKILL leaves the study
resumable. Subprocess-heavy: marked slow (`pytest -m slow`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import optuna
import pyarrow.parquet as pq
import pytest
from _search import SEED_GRID

pytestmark = pytest.mark.slow

GRID = SEED_GRID.format(objective='"min_cost"', trials=96, batch=8, storage="journal", slo=300.0, rates="100.0")


def _study(out):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(out / "search.journal")))
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage)


def _cmd(*args):
    return [sys.executable, "-m", "sweep", *args]


def test_four_workers_share_one_budget_exactly(tmp_path):
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(GRID)
    workers = [subprocess.Popen(_cmd("search", str(grid), "--out", str(out), "--quiet")) for _ in range(4)]
    assert [w.wait(timeout=900) for w in workers] == [0, 0, 0, 0]
    trials = _study(out).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 96  # exactly the budget, nothing left running
    params = [tuple(sorted(t.params.items())) for t in trials]
    assert len({t.number for t in trials}) == 96
    owners = {t.user_attrs["sweep_owner"]["pid"] for t in trials}
    assert len(owners) >= 2  # the budget really was shared
    # the run publishes the answers from the finished study: it asks no new trial
    run = subprocess.run(_cmd("run", str(grid), "--out", str(out), "--quiet"), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert len(_study(out).trials) == 96 and len(params) == 96
    (answer,) = pq.read_table(out / "search.parquet").to_pylist()
    assert answer["trials"] == 96 and answer["meets_constraints"]


def test_a_worker_killed_with_sigkill_leaves_the_study_resumable(tmp_path):
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(GRID)
    worker = subprocess.Popen(_cmd("search", str(grid), "--out", str(out), "--quiet"))
    journal = out / "search.journal"
    for _ in range(1200):  # until it has told some trials
        if journal.exists() and journal.read_bytes().count(b'"state": 1') + journal.read_bytes().count(b'"state":1') >= 8:
            break
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    assert worker.wait(timeout=60) == -signal.SIGKILL
    again = subprocess.run(_cmd("search", str(grid), "--out", str(out), "--quiet"), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    trials = _study(out).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 96
