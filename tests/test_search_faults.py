"""No stuck study (`sweep.search.study`): a worker killed at any step of a round (reserving
its trials, drawing their parameters, evaluating, telling) or a PostgreSQL server stopped at
any of them leaves a study that the next `sweep run` completes to the same budget, with the
same trials and the same answer as an uninterrupted run; the outage itself is one line and
exit 2 for the worker, never a traceback.

A real PostgreSQL server (`tests/_postgres.py`). Faults: `SWEEP_FAULT` (`sweep._faults`) for
the killed worker (in process, `InjectedCrash`; the slow tests: a real `sweep search`
process ending with `os._exit(137)` at the point, as SIGKILL would), and the same fault
points turned into a server stop (`pg_ctl stop -m fast`, then started again on the same
data). Slow (`pytest -m slow`): killed subprocesses, and 4 workers through an outage.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from _postgres import PostgresServer
from _search import SEED_GRID, rows, seed_spec

from sweep import _faults
from sweep._faults import FAULT_ENV, InjectedCrash
from sweep.search import run_search
from sweep.search import study as study_mod

pytest.importorskip("psycopg")

#: 3 rounds of 8 trials and one of 4 (28 trials), as tests/test_search_resume.py.
KW = dict(trials=28, batch=8)
#: What an answer must equal between a faulted run and an uninterrupted one.
KEEP = ("trial_number", "trials", "objective_value", "batch_size", "replicas", "gap_rel", "meets_constraints")


@pytest.fixture(scope="module")
def pg():
    PostgresServer.require()
    with PostgresServer() as server:
        before = os.environ.get("PGPASSWORD")
        os.environ["PGPASSWORD"] = server.password
        try:
            yield server
        finally:
            if before is None:
                os.environ.pop("PGPASSWORD", None)
            else:
                os.environ["PGPASSWORD"] = before


def _history(pg: PostgresServer, db: str) -> list[tuple]:
    """Every trial: number, state, parameters, values, round."""
    import optuna

    url = f"postgresql+psycopg://sweep:{pg.password}@127.0.0.1:{pg.port}/{db}"
    (summary,) = optuna.get_all_study_summaries(url)
    study = optuna.load_study(study_name=summary.study_name, storage=url)
    out = [(t.number, t.state.name, t.params, t.values, t.user_attrs["sweep_round"]) for t in study.trials]
    study._storage._backend.engine.dispose()
    return out


def _grid(url: str, trials: int = 28, batch: int = 8) -> str:
    return SEED_GRID.format(objective='"min_cost"', trials=trials, batch=batch, storage=url, slo=300.0, rates="100.0")


def _db(point: str) -> str:
    return "f_" + point.replace(":", "_").replace("@", "_")


@pytest.fixture(scope="module")
def clean(pg, tmp_path_factory):
    """The uninterrupted search: its trials and its answer."""
    url = pg.create_database("clean")
    answers = rows(run_search(seed_spec(storage=url, **KW), tmp_path_factory.mktemp("clean")))
    return _history(pg, "clean"), [{k: r[k] for k in KEEP} for r in answers]


def _lacking(history: list[tuple]) -> list[int]:
    """RUNNING trials without every searched parameter: what the takeover once crashed on."""
    return [n for n, state, params, _, _ in history if state == "RUNNING" and len(params) < 2]


# --------------------------------------------------------------------------- a killed worker

#: A point in each step of a round, in the first round and in later ones: while reserving
#: (trials without parameters), after reserving, after the first parameter of a trial (the
#: other one missing), after a whole draw, after the kernel call, between a trial's
#: constraints and its tell, after a tell.
KILLS = ["search:reserve2@2", "search:reserved@1", "search:reserved@3", "search:param0@11", "search:ask4@2",
         "search:evaluated@2", "search:constrained3@1", "search:tell5@3"]
LACKING = {"search:reserve2@2", "search:reserved@1", "search:reserved@3", "search:param0@11"}


def _some_slow(points: list[str], default: set[str]) -> list:
    """The points, those outside `default` marked slow: the default suite keeps one point of each
    kind of step (about 15 s each on 2 cores), `pytest -m slow` runs the rest."""
    return [p if p in default else pytest.param(p, marks=pytest.mark.slow) for p in points]


@pytest.mark.parametrize("point", _some_slow(KILLS, {"search:reserve2@2", "search:param0@11", "search:evaluated@2",
                                                 "search:tell5@3"}))
def test_a_worker_killed_at_any_step_leaves_a_study_the_next_run_completes(pg, clean, tmp_path, monkeypatch, point):
    url = pg.create_database(_db(point))
    _faults.reset()
    monkeypatch.setenv(FAULT_ENV, point)
    with pytest.raises(InjectedCrash):
        run_search(seed_spec(storage=url, **KW), tmp_path)
    monkeypatch.delenv(FAULT_ENV)
    left = _history(pg, _db(point))
    assert any(state == "RUNNING" for _, state, *_ in left)
    if point in LACKING:  # the case that was stuck for good: trials without their parameters
        assert _lacking(left)
    again = run_search(seed_spec(storage=url, **KW), tmp_path)
    history, answers = clean
    assert _history(pg, _db(point)) == history  # the same 28 trials: none lost, none twice, the same draws
    assert [{k: r[k] for k in KEEP} for r in rows(again)] == answers


# --------------------------------------------------------------------------- a stopped server


def _stop_at(pg: PostgresServer, point: str, monkeypatch) -> list[bool]:
    """Turn the fault point `NAME@N` into a server stop (the N-th time it is reached)."""
    name, _, nth = point.partition("@")
    hits, stopped = [0], [False]

    def hook(where: str) -> None:
        if where == name:
            hits[0] += 1
            if hits[0] == int(nth or 1) and not stopped[0]:
                pg.stop()
                stopped[0] = True

    monkeypatch.setattr(study_mod, "fault", hook)
    return stopped


#: A stop while reserving, drawing, after evaluating, while telling.
STOPS = ["search:reserve1@2", "search:param1@5", "search:evaluated@2", "search:tell3@2"]


@pytest.mark.parametrize("point", _some_slow(STOPS, {"search:reserve1@2", "search:tell3@2"}))
def test_a_server_stopped_at_any_step_is_one_line_and_the_next_run_completes(pg, clean, tmp_path, monkeypatch,
                                                                              capsys, point):
    from sweep.cli import main

    url = pg.create_database(_db(point))
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(_grid(url))
    stopped = _stop_at(pg, point, monkeypatch)
    try:
        code = main(["search", str(grid), "--out", str(out), "--quiet"])
    finally:
        if stopped[0]:
            pg.start()
    err = capsys.readouterr().err
    assert stopped[0] and code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "search.storage" in err and "the study storage failed during the search" in err and "rerun" in err
    assert pg.password not in err
    monkeypatch.setattr(study_mod, "fault", _faults.fault)
    assert main(["run", str(grid), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    history, answers = clean
    assert _history(pg, _db(point)) == history
    (answer,) = pq.read_table(out / "search.parquet").to_pylist()
    assert {k: answer[k] for k in KEEP} == answers[0]


# --------------------------------------------------------------------------- other storages


def test_a_sqlite_study_locked_past_its_timeout_is_one_line(tmp_path, monkeypatch):
    """Another process holds search.db's write lock while this one tells: SQLite's own
    "database is locked" after the timeout, as one line; the study resumes afterwards."""
    monkeypatch.setattr(study_mod, "SQLITE_TIMEOUT_S", 0.5)
    holder: list[sqlite3.Connection] = []

    def hook(where: str) -> None:
        if where == "search:evaluated" and not holder:
            conn = sqlite3.connect(tmp_path / "search.db", isolation_level=None)
            conn.execute("BEGIN EXCLUSIVE")
            holder.append(conn)

    monkeypatch.setattr(study_mod, "fault", hook)
    spec = seed_spec(storage="sqlite", trials=16, batch=8)
    with pytest.raises(study_mod.StorageError) as exc:
        run_search(spec, tmp_path)
    assert "database is locked" in str(exc.value) and "\n" not in str(exc.value)
    assert "another process held the study locked" in str(exc.value)
    holder[0].execute("ROLLBACK")
    holder[0].close()
    monkeypatch.setattr(study_mod, "fault", _faults.fault)
    assert rows(run_search(spec, tmp_path))[0]["trials"] == 16


def test_storage_failures_are_named_and_others_are_not():
    """The classifier behind the one line: driver errors anywhere in the chain, a disk that
    is full; not a bug of ours (a KeyError) nor an unrelated OSError."""
    try:
        try:
            raise sqlite3.OperationalError("disk I/O error")
        except sqlite3.Error as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as exc:
        rule = study_mod.storage_failure(exc)
    assert rule is not None and "OperationalError: disk I/O error" in rule and "free the disk" in rule
    full = study_mod.storage_failure(OSError(errno.ENOSPC, "No space left on device"))
    assert full is not None and "free the disk" in full
    assert study_mod.storage_failure(KeyError("gpu")) is None
    assert study_mod.storage_failure(FileNotFoundError(errno.ENOENT, "x")) is None


# --------------------------------------------------------------------------- real processes (slow)


def _sweep(*args: str, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep", *args], env=env, capture_output=True, text=True,
                          timeout=900, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["search:reserve3@2", "search:param0@11", "search:evaluated@2", "search:tell2@2"])
def test_a_worker_process_killed_at_a_step_leaves_a_study_sweep_run_completes(pg, clean, tmp_path, point):
    url = pg.create_database(_db(point) + "_p")
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(_grid(url))
    killed = _sweep("search", str(grid), "--out", str(out), "--quiet",
                    env={**pg.env(), FAULT_ENV: point, FAULT_ENV + "_KILL": "1"})
    assert killed.returncode == 137, killed.stderr
    run = _sweep("run", str(grid), "--out", str(out), "--quiet", env=pg.env())
    assert run.returncode == 0, run.stderr
    history, answers = clean
    assert _history(pg, _db(point) + "_p") == history
    (answer,) = pq.read_table(out / "search.parquet").to_pylist()
    assert {k: answer[k] for k in KEEP} == answers[0]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_an_outage_is_one_line_and_exit_2_for_every_worker(pg, tmp_path, mode):
    """4 workers mid-study, the server stopped (a service stop, or a crash losing the last
    commits): each worker one line, exit 2; restarted, `sweep run` completes the study to
    exactly its budget, with the exact optimum an uninterrupted run finds."""
    trials = 96
    db = f"outage_{mode}"
    url = pg.create_database(db)
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(_grid(url, trials=trials))
    cmd = [sys.executable, "-m", "sweep", "search", str(grid), "--out", str(out), "--quiet"]
    workers = [subprocess.Popen(cmd, env=pg.env(), stderr=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        for _ in range(6000):
            with pg.connect(db) as conn:
                try:
                    done = conn.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
                except Exception:
                    done = 0
            if done >= 16:
                break
            time.sleep(0.05)
        pg.stop(mode)
        errors = [w.communicate(timeout=300)[1] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        if pg.root is not None:
            try:
                pg.start()
            except subprocess.CalledProcessError:
                pass
    assert [w.returncode for w in workers] == [2, 2, 2, 2], errors
    for err in errors:
        assert err.count("\n") == 1 and err.startswith("sweep: error: ") and "Traceback" not in err, err
    run = _sweep("run", str(grid), "--out", str(out), "--quiet", env=pg.env())
    assert run.returncode == 0, run.stderr
    with pg.connect(db) as conn:
        states = conn.execute("SELECT number, state FROM trials ORDER BY number").fetchall()
    assert [n for n, _ in states] == list(range(trials)) and {s for _, s in states} == {"COMPLETE"}
    (answer,) = pq.read_table(out / "search.parquet").to_pylist()
    assert answer["trials"] == trials and answer["found_exact"]
    assert answer["objective_value"] == answer["exact_value"]
