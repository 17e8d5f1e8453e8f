"""Searches on a real PostgreSQL server (`tests/_postgres.py` starts a throwaway one:
initdb + pg_ctl on 127.0.0.1, password authentication).

Default suite: one process against the server: the budget is exact and resumable, the
answer is the exact optimum, the password (given in PGPASSWORD, never in the grid) appears
in no output file and no output line, a wrong password or a stopped server is one line
before any work. Slow (`pytest -m slow`): 4 concurrent `sweep search` worker processes on
one study (the budget exact, no trial twice, the exact optimum), and one of them killed
with SIGKILL mid-run (its trials finished by the others, the study consistent and resumed
to the same exact budget).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from _postgres import PostgresServer
from _search import SEED_GRID, seed_spec

from sweep.errors import StorageError
from sweep.grid.search_table import check_storage
from sweep.search import run_search

pytest.importorskip("psycopg")


@pytest.fixture(scope="module")
def pg():
    PostgresServer.require()
    with PostgresServer() as server:
        yield server


def _grid(url: str, trials: int, batch: int = 8) -> str:
    return SEED_GRID.format(objective='"min_cost"', trials=trials, batch=batch, storage=url, slo=300.0, rates="100.0")


def _trials(pg: PostgresServer, db: str) -> list[tuple[int, str]]:
    with pg.connect(db) as conn:
        return conn.execute("SELECT number, state FROM trials ORDER BY number").fetchall()


def _complete(pg: PostgresServer, db: str) -> int:
    try:
        with pg.connect(db) as conn:
            return conn.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
    except Exception:
        return 0


def _no_secret_anywhere(folder, secret: str) -> None:
    needle = secret.encode()
    for path in folder.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), path


def test_a_search_on_postgresql_is_exact_resumable_and_keeps_the_password_out(pg, tmp_path, monkeypatch, capsys):
    from sweep.cli import main

    url = pg.create_database("fast")
    monkeypatch.setenv("PGPASSWORD", pg.password)
    spec = seed_spec(storage=url, trials=64, batch=16)
    check_storage(spec.search, tmp_path)  # reachable, the driver there, the password accepted
    first = run_search(spec, tmp_path / "a")
    (row,) = first.records()
    assert row["trials"] == 64 and first.meta["studies"][0]["trials_run"] == 64
    assert row["enumerable"] and row["found_exact"] and row["objective_value"] == row["exact_value"]
    assert row["storage"] == url  # no password to hide: there is none in the URL
    states = _trials(pg, "fast")
    assert [n for n, _ in states] == list(range(64)) and {s for _, s in states} == {"COMPLETE"}
    # the same budget again runs nothing; a larger one runs only the difference
    assert run_search(spec, tmp_path / "a").meta["studies"][0]["trials_run"] == 0
    more = run_search(seed_spec(storage=url, trials=80, batch=16), tmp_path / "a")
    assert more.meta["studies"][0]["trials_run"] == 16 and len(_trials(pg, "fast")) == 80
    # a whole run with the password in the environment: it is in no file and no line
    grid = tmp_path / "g.toml"
    grid.write_text(_grid(url, trials=80))
    assert main(["run", str(grid), "--out", str(tmp_path / "run"), "--progress", "log"]) == 0
    printed = capsys.readouterr()
    assert pg.password not in printed.out + printed.err
    (answer,) = pq.read_table(tmp_path / "run" / "search.parquet").to_pylist()
    assert answer["trials"] == 80 and answer["found_exact"]
    _no_secret_anywhere(tmp_path, pg.password)


def test_a_wrong_password_or_a_stopped_server_is_one_line_before_any_work(pg, tmp_path, monkeypatch):
    url = pg.create_database("refused")
    monkeypatch.setenv("PGPASSWORD", "not-the-password")
    spec = seed_spec(storage=url, trials=8)
    with pytest.raises(StorageError) as exc:
        check_storage(spec.search, tmp_path)
    assert "cannot connect" in exc.value.rule and "\n" not in str(exc.value)
    assert "not-the-password" not in str(exc.value)
    stopped = seed_spec(storage=url.replace(f":{pg.port}/", ":1/"), trials=8)
    with pytest.raises(StorageError) as exc:
        run_search(stopped, tmp_path / "out")
    assert "cannot reach 127.0.0.1:1" in exc.value.rule
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- 4 workers (slow)

TRIALS = 96


def _workers(grid, out, pg: PostgresServer, n: int = 4) -> list[subprocess.Popen]:
    cmd = [sys.executable, "-m", "sweep", "search", str(grid), "--out", str(out), "--quiet"]
    return [subprocess.Popen(cmd, env=pg.env(), stderr=subprocess.PIPE, text=True) for _ in range(n)]


def _check_study(pg: PostgresServer, db: str) -> None:
    """Exactly the budget, every trial COMPLETE, numbered 0..TRIALS-1 once each."""
    states = _trials(pg, db)
    assert [n for n, _ in states] == list(range(TRIALS)), "a trial number twice, or missing"
    assert {s for _, s in states} == {"COMPLETE"}


def _publish(grid, out, pg: PostgresServer) -> dict:
    run = subprocess.run([sys.executable, "-m", "sweep", "run", str(grid), "--out", str(out), "--quiet"],
                         env=pg.env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    (answer,) = pq.read_table(out / "search.parquet").to_pylist()
    return answer


@pytest.mark.slow
def test_four_workers_share_one_study_exactly(pg, tmp_path):
    url = pg.create_database("four")
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(_grid(url, TRIALS))
    workers = _workers(grid, out, pg)
    errors = [w.communicate(timeout=900)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0], errors
    _check_study(pg, "four")
    with pg.connect("four") as conn:
        owners = conn.execute("SELECT count(DISTINCT value_json::json->>'session') FROM trial_user_attributes "
                              "WHERE key = 'sweep_owner'").fetchone()[0]
    assert owners >= 2  # the budget really was shared
    answer = _publish(grid, out, pg)  # asks no new trial
    assert len(_trials(pg, "four")) == TRIALS
    assert answer["trials"] == TRIALS and answer["meets_constraints"]
    assert answer["found_exact"] and answer["objective_value"] == answer["exact_value"]
    _no_secret_anywhere(out, pg.password)


@pytest.mark.slow
def test_a_worker_killed_with_sigkill_leaves_the_study_consistent_and_resumable(pg, tmp_path):
    url = pg.create_database("killed")
    grid, out = tmp_path / "g.toml", tmp_path / "out"
    grid.write_text(_grid(url, TRIALS))
    workers = _workers(grid, out, pg)
    for _ in range(6000):  # until the study has told some trials: the workers are mid-run
        if _complete(pg, "killed") >= 16:
            break
        time.sleep(0.02)
    victim = workers[0]
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=60) == -signal.SIGKILL
    for w in workers[1:]:
        _, err = w.communicate(timeout=900)
        assert w.returncode == 0, err
    # the survivors took the dead worker's RUNNING trials over (its liveness lock was free)
    # or, had they finished first, a new worker does; either way the budget is exact
    again = subprocess.run([sys.executable, "-m", "sweep", "search", str(grid), "--out", str(out)],
                           env=pg.env(), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    _check_study(pg, "killed")
    answer = _publish(grid, out, pg)
    assert answer["trials"] == TRIALS and answer["found_exact"]
