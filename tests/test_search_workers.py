"""Search workers sharing one study in one folder, as real processes (`sweep search`):
the trial budget is exact, no trial is asked twice, and a `sweep run` afterwards publishes
the answers without running a trial (journal and SQLite); a worker killed with SIGKILL
leaves the study resumable; workers opening a new SQLite file at one instant do not collide.
Subprocess-heavy: marked slow (`pytest -m slow`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import optuna
import pyarrow.parquet as pq
import pytest
from _search import SEED_GRID

pytestmark = pytest.mark.slow

GRID = SEED_GRID.format(objective='"min_cost"', trials=96, batch=8, storage="{storage}", slo=300.0, rates="100.0")


def _study(out, kind="journal"):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if kind == "sqlite":
        storage = f"sqlite:///{out / 'search.db'}"
    else:
        storage = JournalStorage(JournalFileBackend(str(out / "search.journal")))
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage)


def _cmd(*args):
    return [sys.executable, "-m", "sweep", *args]


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_four_workers_share_one_budget_exactly(tmp_path, kind):
    """SQLite too: the 4 workers start at once on a new file, whose tables are created by
    whichever opens it first (the others wait on the folder's budget lock)."""
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(GRID.replace("{storage}", kind))
    workers = [subprocess.Popen(_cmd("search", str(grid), "--out", str(out), "--quiet")) for _ in range(4)]
    assert [w.wait(timeout=900) for w in workers] == [0, 0, 0, 0]
    trials = _study(out, kind).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 96  # exactly the budget, nothing left running
    params = [tuple(sorted(t.params.items())) for t in trials]
    assert len({t.number for t in trials}) == 96
    owners = {t.user_attrs["sweep_owner"]["pid"] for t in trials}
    assert len(owners) >= 2  # the budget really was shared
    # the run publishes the answers from the finished study: it asks no new trial
    run = subprocess.run(_cmd("run", str(grid), "--out", str(out), "--quiet"), capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    assert len(_study(out, kind).trials) == 96 and len(params) == 96
    (answer,) = pq.read_table(out / "search.parquet").to_pylist()
    assert answer["trials"] == 96 and answer["meets_constraints"]


def test_a_worker_killed_with_sigkill_leaves_the_study_resumable(tmp_path):
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(GRID.replace("{storage}", "journal"))
    worker = subprocess.Popen(_cmd("search", str(grid), "--out", str(out), "--quiet"))
    journal = out / "search.journal"
    for _ in range(1200):  # until it has told some trials
        if (journal.exists()
                and journal.read_bytes().count(b'"state": 1') + journal.read_bytes().count(b'"state":1') >= 8):
            break
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    assert worker.wait(timeout=60) == -signal.SIGKILL
    again = subprocess.run(_cmd("search", str(grid), "--out", str(out), "--quiet"), capture_output=True, text=True,
                           timeout=900)
    assert again.returncode == 0, again.stderr
    trials = _study(out).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 96


#: Opens the study storage of GRID in OUT at the wall-clock instant T, as `sweep search` does.
OPEN_AT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from sweep import grid as spec
    from sweep.search.study import open_storage
    search = spec.load(sys.argv[1]).search
    while time.time() < float(sys.argv[3]):
        time.sleep(0.0005)
    open_storage(search, Path(sys.argv[2])).engine.dispose()
""")


def test_workers_opening_a_new_sqlite_file_at_once_do_not_collide(tmp_path):
    """Optuna creates a new SQLite file's tables and stamps their version when the storage
    opens; 6 processes doing that at one instant without the folder's lock fail with "table
    ... already exists" or a duplicate `alembic_version` row (seen with plain `RDBStorage`)."""
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(GRID.replace("{storage}", "sqlite"))
    out.mkdir()
    at = time.time() + 8  # after every process has imported sweep
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_AT, str(grid), str(out), str(at)],
                              stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [
        next((x for x in reversed(e.splitlines()) if "Error" in x), e[-300:]) for e in errors if e.strip()]
    assert optuna.get_all_study_summaries(f"sqlite:///{out / 'search.db'}") == []
