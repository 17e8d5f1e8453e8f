"""Staging is a journal (`sweep.io.staging`): sealed segments verify or are computed again,
`--force` always recovers, and a crash at any step of publishing leaves the previous output
or (after the rerun) the new one, never a manifest beside a mix.

Crashes are injected with the `SWEEP_FAULT` test hook at each named step (a
`BaseException` here; `tests/test_cli_signals.py` kills a real process the same way). Every
reference result is a clean, uninterrupted run of the same grid.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _grids import WINDOWED, same, tables

from sweep import grid as spec
from sweep.errors import OutputError
from sweep.io.staging import FAULT_ENV, InjectedCrash, check_file
from sweep.runner import run_grid

#: 1,280 points, chunks of one group (40 points), segments of 3 chunks: 11 segments.
RUN = dict(chunk_size=64, segment_points=128)
PUBLISH_STEPS = ["publish:1", "publish:2", "publish:3", "publish:entry0", "publish:entry1", "publish:entry2",
                 "publish:4", "publish:5"]


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    d = tmp_path_factory.mktemp("grids")
    (d / "a.toml").write_text(WINDOWED)
    (d / "b.toml").write_text(WINDOWED.replace('name = "w"', 'name = "w2"').replace("slo_ms = 150.0", "slo_ms = 90.0"))
    clean = {}
    for name in ("a", "b"):
        clean[name] = d / f"clean-{name}"
        run_grid(spec.load(d / f"{name}.toml"), clean[name], **RUN)
    return d, clean


def _staged(out: Path) -> Path:
    (staging,) = [p for p in out.iterdir() if p.name.startswith(".sweep-staging-")]
    return staging


def _complete_and_intact(out: Path) -> dict:
    manifest = json.loads((out / "manifest.json").read_text())
    for rel, record in manifest["checksums"].items():
        assert check_file(out, rel, record) is None, rel
    return manifest


def _stage_everything(g, out: Path, monkeypatch) -> None:
    """A run whose every segment is sealed but that stopped before publishing."""
    monkeypatch.setenv(FAULT_ENV, "publish:1")
    with pytest.raises(InjectedCrash):
        run_grid(g, out, **RUN)
    monkeypatch.delenv(FAULT_ENV)
    assert not (out / "manifest.json").exists()


DAMAGE = {
    "points part deleted": lambda st: next((st / "final" / "points").glob("seg-00003-*.parquet")).unlink(),
    "points part truncated": lambda st: _truncate(next((st / "final" / "points").glob("seg-00004-*.parquet"))),
    "points part garbage":
        lambda st: next((st / "final" / "points").glob("seg-00005-*.parquet")).write_bytes(b"garbage" * 100),
    "optimum part deleted": lambda st: (st / "optimum" / "00001.parquet").unlink(),
    "seal edited": lambda st: _edit_seal(st / "segments" / "00002.json"),
    "seal garbage": lambda st: (st / "segments" / "00006.json").write_text("{not json"),
    "seal empty": lambda st: (st / "segments" / "00007.json").write_text(""),
}


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _edit_seal(path: Path) -> None:
    seal = json.loads(path.read_text())
    seal["stats"]["points_written"] += 1000
    path.write_text(json.dumps(seal))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_staging_is_reported_and_recomputed(grids, tmp_path, monkeypatch, damage):
    d, clean = grids
    g = spec.load(d / "a.toml")
    out = tmp_path / "out"
    _stage_everything(g, out, monkeypatch)
    DAMAGE[damage](_staged(out))
    notes: list[str] = []
    result = run_grid(g, out, note=notes.append, **RUN)
    assert len(notes) == 1 and "is damaged" in notes[0] and "\n" not in notes[0], notes
    assert result.manifest["chunks"]["resumed_segments"] == 10  # the other ten seals verify
    assert result.manifest["rows"] == json.loads((clean["a"] / "manifest.json").read_text())["rows"]
    _complete_and_intact(out)
    same(tables(clean["a"]), tables(out))


def test_force_recovers_from_any_staging(grids, tmp_path, monkeypatch):
    d, clean = grids
    g = spec.load(d / "a.toml")
    out = tmp_path / "out"
    _stage_everything(g, out, monkeypatch)
    staging = _staged(out)
    for path in staging.rglob("*"):
        if path.is_file():
            path.write_bytes(b"\x00garbage")
    result = run_grid(g, out, force=True, **RUN)
    assert result.manifest["chunks"]["resumed_segments"] == 0
    same(tables(clean["a"]), tables(out))


def test_nothing_leaves_a_segment_before_the_manifest(grids, tmp_path, monkeypatch):
    """The one-segment case of the audit: the search (or a crash) after the reduced outputs
    are assembled must leave every sealed segment whole, so the rerun resumes."""
    d, clean = grids
    g = spec.load(d / "a.toml")
    out = tmp_path / "out"
    monkeypatch.setenv(FAULT_ENV, "publish:2")
    with pytest.raises(InjectedCrash):
        run_grid(g, out, chunk_size=64)  # one segment
    monkeypatch.delenv(FAULT_ENV)
    staging = _staged(out)
    assert (staging / "optimum" / "00000.parquet").exists() and (staging / "final" / "optimum.parquet").exists()
    # committed at publish:2 (the plan is written): the rerun finishes publishing first
    result = run_grid(g, out, chunk_size=64)
    assert result.skipped
    same(tables(clean["a"]), tables(out))


@pytest.mark.parametrize("step", PUBLISH_STEPS)
def test_a_crash_at_every_publish_step_leaves_old_or_new(grids, tmp_path, monkeypatch, step):
    d, clean = grids
    out = tmp_path / "out"
    shutil.copytree(clean["a"], out)  # a complete previous output
    monkeypatch.setenv(FAULT_ENV, step)
    with pytest.raises(InjectedCrash):
        run_grid(spec.load(d / "b.toml"), out, **RUN)
    monkeypatch.delenv(FAULT_ENV)
    if (out / "manifest.json").exists():  # the previous output or the new one, whole
        manifest = _complete_and_intact(out)
        name = {"w": "a", "w2": "b"}[manifest["grid_name"]]
        assert name == ("b" if step == "publish:5" else "a")
        same(tables(clean[name]), tables(out))
    else:  # the new output was committed: the folder no longer looks complete
        assert step not in ("publish:1", "publish:2", "publish:5")
    result = run_grid(spec.load(d / "b.toml"), out, **RUN)
    assert result.manifest["grid_name"] == "w2"
    # committed (from publish:2 on): the rerun only finished publishing, it computed nothing
    assert result.skipped == (step not in ("publish:1",))
    _complete_and_intact(out)
    same(tables(clean["b"]), tables(out))
    assert not [p for p in out.iterdir() if p.name.startswith(".sweep-staging-")]


def test_a_full_disk_is_one_line_and_gives_the_space_back(grids, tmp_path, monkeypatch):
    """Failure injection (the one place a mock stands in for the real thing): the points
    encoder hits ENOSPC. The previous complete output stays; the staging folder is removed;
    the CLI prints one line and exits 1."""
    import errno

    from sweep.cli import main
    from sweep.errors import ResourceError
    from sweep.io.parquet import DatasetWriter

    d, clean = grids
    out = tmp_path / "out"
    shutil.copytree(clean["a"], out)

    def full(self, lane, table):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DatasetWriter, "_encode", full)
    with pytest.raises(ResourceError, match="the disk is full"):
        run_grid(spec.load(d / "b.toml"), out, **RUN)
    assert not [p for p in out.iterdir() if p.name.startswith(".sweep-staging-")]
    _complete_and_intact(out)
    same(tables(clean["a"]), tables(out))
    assert main(["run", str(d / "b.toml"), "--out", str(out), "--quiet"]) == 1
    same(tables(clean["a"]), tables(out))


# --------------------------------------------------------------------------- write faults
# `SWEEP_FAULT=POINT` with `SWEEP_FAULT_ERRNO=NAME` raises the OSError a write or rename at
# that point would raise (sweep._faults): a full disk or a refused move without filling a
# disk or dropping root's rights.


def _fail_at(monkeypatch, point: str, code: str) -> None:
    from sweep import _faults

    _faults.reset()
    monkeypatch.setenv(FAULT_ENV, point)
    monkeypatch.setenv(FAULT_ENV + "_ERRNO", code)


def _clear(monkeypatch) -> None:
    monkeypatch.delenv(FAULT_ENV)
    monkeypatch.delenv(FAULT_ENV + "_ERRNO")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_a_full_disk_creating_the_staging_folder_is_one_line(grids, tmp_path, monkeypatch, capsys):
    from sweep.cli import main

    d, clean = grids
    out = tmp_path / "out"
    shutil.copytree(clean["a"], out)
    _fail_at(monkeypatch, "stage:mkdir", "ENOSPC")
    assert main(["run", str(d / "b.toml"), "--out", str(out), "--quiet"]) == 1
    err = _one_line(capsys)
    assert "the disk is full" in err and ".sweep-staging-" in err and "staging folder was removed" in err
    assert not [p for p in out.iterdir() if p.name.startswith(".sweep-staging-")]
    _complete_and_intact(out)
    same(tables(clean["a"]), tables(out))


def test_an_old_entry_that_cannot_be_moved_is_refused_before_the_commit_point(grids, tmp_path, monkeypatch):
    """A previous `points/` that cannot be renamed aside (a folder without write permission:
    EACCES; root is not refused, so the check's answer is injected): one line (an
    `OutputError`: exit 2), the previous output still complete, the sealed work kept, and the
    rerun publishes the new one without computing anything again."""
    d, clean = grids
    out = tmp_path / "out"
    shutil.copytree(clean["a"], out)
    entries = sorted(p.name for p in out.iterdir() if not p.name.startswith(".") and p.name != "manifest.json")
    _fail_at(monkeypatch, f"publish:check@{entries.index('points') + 1}", "EACCES")
    with pytest.raises(OutputError) as exc:
        run_grid(spec.load(d / "b.toml"), out, **RUN)
    err = str(exc.value)
    assert "\n" not in err and f"{out / 'points'}: cannot be moved aside" in err and "Permission denied" in err
    _complete_and_intact(out)
    same(tables(clean["a"]), tables(out))
    assert not (_staged(out) / "publish.json").exists()  # not committed
    _clear(monkeypatch)
    result = run_grid(spec.load(d / "b.toml"), out, **RUN)
    assert result.manifest["chunks"]["resumed_segments"] == result.manifest["chunks"]["segments"]
    same(tables(clean["b"]), tables(out))


def test_a_points_folder_that_cannot_be_moved_mid_publish_is_one_line_and_the_rerun_finishes(
        grids, tmp_path, monkeypatch, capsys):
    """The rename itself refused after the commit point (EPERM: an immutable folder, a race):
    one line naming points/, exit 2, no manifest.json (the folder does not look complete), and
    the same command finishes the committed publish."""
    from sweep.cli import main

    d, clean = grids
    out = tmp_path / "out"
    shutil.copytree(clean["a"], out)
    entries = sorted(p.name for p in out.iterdir() if not p.name.startswith(".") and p.name != "manifest.json")
    _fail_at(monkeypatch, f"publish:move@{entries.index('points') + 1}", "EPERM")
    assert main(["run", str(d / "b.toml"), "--out", str(out), "--quiet"]) == 2
    err = _one_line(capsys)
    assert f"{out / 'points'}: cannot be replaced" in err and "Operation not permitted" in err
    assert "rerun the same command" in err
    assert not (out / "manifest.json").exists()
    _clear(monkeypatch)
    assert main(["run", str(d / "b.toml"), "--out", str(out), "--quiet"]) == 0
    _complete_and_intact(out)
    same(tables(clean["b"]), tables(out))
    assert not [p for p in out.iterdir() if p.name.startswith(".sweep-staging-")]


@pytest.mark.slow
def test_a_full_disk_in_the_sqlite_study_is_one_line_and_gives_the_staging_back(tmp_path, root, capsys):
    """SQLite's own SQLITE_FULL ("database or disk is full"), made real by capping the study
    database at 40 pages (PRAGMA max_page_count on every connection SQLAlchemy opens; the
    finished study takes 57 pages of 4 KiB, tests/golden/grids/search.toml), for a search
    worker and for a run. Before: a traceback and the run's staging left behind. Then the cap
    is lifted and the same command completes the study."""
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from sweep.cli import main

    text = ((root / "tests" / "golden" / "grids" / "search.toml").read_text()
            .replace('storage = "memory"', 'storage = "sqlite"'))
    grid = tmp_path / "g.toml"
    grid.write_text(text)
    out = tmp_path / "out"

    def cap(dbapi, record):
        if isinstance(dbapi, sqlite3.Connection):
            dbapi.execute("PRAGMA max_page_count = 40")

    event.listen(Engine, "connect", cap)
    try:
        assert main(["search", str(grid), "--out", str(out), "--quiet"]) == 1  # a search worker
        err = _one_line(capsys)
        assert "the disk is full (SQLite: database or disk is full)" in err and "rerun the worker" in err
        assert main(["run", str(grid), "--out", str(out), "--quiet"]) == 1
    finally:
        event.remove(Engine, "connect", cap)
    err = _one_line(capsys)
    assert "the disk is full (SQLite: database or disk is full)" in err and str(out) in err
    assert not [p for p in out.iterdir() if p.name.startswith(".sweep-staging-")]
    assert not (out / "manifest.json").exists()
    assert main(["run", str(grid), "--out", str(out), "--quiet"]) == 0
    assert (out / "search.parquet").exists()
