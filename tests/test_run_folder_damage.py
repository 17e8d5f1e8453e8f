"""Every command that reads a published run folder, on every damaged copy of one: one line
on stderr naming the damaged file, exit code 2, no traceback, nothing written
(`sweep.io.published`, docs/reliability.md).

One small real run (a grid with points in two hive partitions, a `[schedule]` and a
`[search]`, so the folder holds every kind of file a run publishes) is made once with
`sweep run`; each case damages a copy of it. The damages are those of issue 28's break test:
each file truncated to half, replaced by garbage bytes, deleted, replaced by a folder; the
`points/` folder deleted or replaced by a file; the manifest `{}`, a list, `null`, a string,
without each key a reader needs, with a wrong type or a wrong row count. A `sweep run` of the
same grid into a damaged folder is the repair: it says what is damaged in one line, computes
the run again and publishes a folder that checks clean.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sweep.cli import main

#: Every kind of file a run publishes: points/ in two partitions, optimum, frontier, the
#: replica schedule and the search answers. (24 hourly rates: a [schedule] takes a day.)
GRID = """
name = "damage"
[grid]
model = "llama-3.1-8b"
gpu = ["h100-sxm", "l4"]
seq_len = 4096
batch_size = [1, 8, 32]
batch_window_ms = [5, inf]
replicas = [1, 2, 3, 4]
t_fixed_ms = 12.0
t_req_ms = 0.4
slo_ms = 150.0
[schedule]
hourly_rps = [40, 40, 40, 40, 40, 40, 60, 90, 120, 150, 150, 150, 150, 150, 150, 150, 120, 90, 90, 60, 60, 40, 40, 40]
[search]
objective = "min_cost"
trials = 8
batch = 4
seed = 3
storage = "memory"
[search.params]
batch_size = {low = 1, high = 32, log = true}
[output]
partition_by = ["gpu"]
"""

#: The folder's own files that are not the run's output: the writers' lock.
NOT_OUTPUT = {".sweep.lock"}


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("damage")
    (base / "damage.toml").write_text(GRID)
    with contextlib.chdir(base):  # the manifest names the grid file as given
        assert main(["run", "damage.toml", "--out", "run", "--quiet", "--progress", "none"]) == 0
    return base / "run"


def _files(folder: Path) -> list[str]:
    """The run's output files (relative paths, sorted), and the points/ folder."""
    out = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name not in NOT_OUTPUT)
    return [*out, "points"]


# --------------------------------------------------------------------------- damages


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def garbage(path: Path) -> None:
    """Random bytes (seeded), about as many as the file had; a folder becomes such a file."""
    size = max(64, path.stat().st_size if path.is_file() else 4096)
    if path.is_dir():
        shutil.rmtree(path)
    path.write_bytes(random.Random(size).randbytes(size))


def delete(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def folder(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "part-0.parquet").write_bytes(b"PAR1")


def scribble(path: Path, at: float = 0.5) -> None:
    """The same size: 256 zero bytes at `at` of the file (a bad disk block)."""
    data = bytearray(path.read_bytes())
    mid = int(len(data) * at)
    data[mid - 128: mid + 128] = bytes(256)
    path.write_bytes(bytes(data))


FILE_DAMAGES: dict[str, Callable[[Path], None]] = {"truncated": truncate, "garbage": garbage, "deleted": delete,
                                                   "folder": folder}
FOLDER_DAMAGES: dict[str, Callable[[Path], None]] = {"deleted": delete, "a file": garbage}


def _manifest_edit(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        doc = json.loads(path.read_text())
        out = edit(doc)
        path.write_text(json.dumps(doc if out is None else out))
    return damage


def _drop(*keys: str) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        d = doc
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]
    return edit


def _set(value: object, *keys: str) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        d = doc
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return edit


def _plus_one(doc: dict) -> None:
    doc["rows"]["optimum"] += 1


def _ghost_part(doc: dict) -> None:
    doc["files"]["points"].append("points/gpu=h100-sxm/seg-00009-part-00000.parquet")


MANIFEST_DAMAGES: dict[str, Callable[[Path], None]] = {
    "{}": lambda p: p.write_text("{}"),
    "[]": lambda p: p.write_text("[]"),
    "a list": lambda p: p.write_text(json.dumps([json.loads(p.read_text())])),
    "null": lambda p: p.write_text("null"),
    "a string": lambda p: p.write_text('"manifest"'),
    "empty": lambda p: p.write_bytes(b""),
    "not UTF-8": lambda p: p.write_bytes(b"\xff\xfe{\x00"),
    "no rows": _manifest_edit(_drop("rows")),
    "no files": _manifest_edit(_drop("files")),
    "no checksums": _manifest_edit(_drop("checksums")),
    "no rows.optimum": _manifest_edit(_drop("rows", "optimum")),
    "no files.points": _manifest_edit(_drop("files", "points")),
    "rows a list": _manifest_edit(_set([1, 2], "rows")),
    "rows.optimum a string": _manifest_edit(_set("16", "rows", "optimum")),
    "rows.optimum off by one": _manifest_edit(_plus_one),
    "files.points names a missing part": _manifest_edit(_ghost_part),
    "serving unknown": _manifest_edit(_set("telepathic", "serving")),
    "axes a string": _manifest_edit(_set("model", "axes")),
    "no checksum of optimum": _manifest_edit(lambda d: d["checksums"].pop("optimum.parquet") and None),
}


def _cases(published_files: list[str]) -> list[tuple[str, str]]:
    """(file, damage) for every file of the run folder and every damage that applies."""
    out = []
    for rel in published_files:
        damages = FOLDER_DAMAGES if rel == "points" else FILE_DAMAGES
        out += [(rel, d) for d in damages]
        if rel.endswith(".parquet") and "/" not in rel:
            out.append((rel, "scribbled"))
    out += [("manifest.json", d) for d in MANIFEST_DAMAGES]
    out.append(("points", "a stray part"))
    return out


#: The run's files, as `_files` lists them for the fixture's folder (checked by
#: test_matrix_covers_every_file, so a new output file cannot go untested).
FILES = ["frontier.parquet", "manifest.json", "optimum.parquet", "points/gpu=h100-sxm/seg-00000-part-00000.parquet",
         "points/gpu=l4/seg-00000-part-00000.parquet", "schedule.parquet", "search.parquet", "points"]
CASES = _cases(FILES)


def damage(src: Path, dst: Path, rel: str, kind: str) -> Path:
    """A copy of run folder `src` at `dst` with `rel` damaged by `kind`."""
    shutil.copytree(src, dst)
    path = dst / rel
    if kind == "a stray part":
        part = next((dst / "points").rglob("*.parquet"))
        shutil.copy(part, part.with_name("seg-00099-part-00000.parquet"))
    elif kind == "scribbled":
        scribble(path)
    elif rel == "manifest.json" and kind in MANIFEST_DAMAGES:
        MANIFEST_DAMAGES[kind](path)
    else:
        (FOLDER_DAMAGES if path.is_dir() else FILE_DAMAGES)[kind](path)
    return dst


def snapshot(folder: Path) -> dict[str, tuple[bool, int, int]]:
    """Every entry under `folder`: (is a folder, size, mtime in ns)."""
    return {str(p.relative_to(folder)): (p.is_dir(), p.stat().st_size if p.is_file() else 0, p.stat().st_mtime_ns)
            for p in folder.rglob("*")}


COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "show": lambda run: ["show", str(run)],
    "report": lambda run: ["report", str(run)],
    "explain": lambda run: ["explain", str(run), "--point", "0"],
}


def check(run: Path, command: str, rel: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`sweep COMMAND` on damaged folder `run`: exit 2, one line naming `rel`, nothing written."""
    before = snapshot(run)
    capsys.readouterr()
    try:
        rc = main(COMMANDS[command](run))
    except BaseException as exc:  # a traceback the user would see
        pytest.fail(f"sweep {command}: {type(exc).__name__}: {exc}")
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, f"sweep {command} exited {rc}; stderr: {err!r}"
    assert len(lines) == 1 and "Traceback" not in err, err
    name = rel.split("/")[-1] if rel != "points" else "points"
    assert name in lines[0], f"{lines[0]!r} does not name {rel}"
    assert snapshot(run) == before, "the command wrote into the damaged folder"


@pytest.mark.parametrize(("rel", "kind"), CASES)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_damaged_folder(published: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                        rel: str, kind: str) -> None:
    check(damage(published, tmp_path / "run", rel, kind), command, rel, capsys)


def test_matrix_covers_every_file(published: Path) -> None:
    assert _files(published) == FILES


def test_clean_folder_reads(published: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The undamaged copy: every command succeeds (so each failure above is the damage's)."""
    run = shutil.copytree(published, tmp_path / "run")
    for command in ("show", "explain"):
        assert main(COMMANDS[command](run)) == 0, capsys.readouterr().err
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    assert (tmp_path / "r.html").stat().st_size > 0


def test_report_html_a_folder(published: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The report's own output in the folder (not part of the run) being a folder: one line."""
    run = shutil.copytree(published, tmp_path / "run")
    (run / "report.html").mkdir()
    before = snapshot(run)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "report.html" in err[0], err
    assert snapshot(run) == before


@pytest.mark.parametrize("command", ["show", "report"])
def test_damage_beyond_the_hashed_bytes(published: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    """A bad block in a file the checks do not hash (beyond HASH_BUDGET; here the budget is
    0) is still one line and exit 2 when the read meets it."""
    import sweep.io.published

    monkeypatch.setattr(sweep.io.published, "HASH_BUDGET", 0)
    run = shutil.copytree(published, tmp_path / "run")
    path = run / "optimum.parquet"
    data = path.read_bytes()
    footer = int.from_bytes(data[-8:-4], "little")  # Parquet: ... footer, its length (4 bytes), PAR1
    path.write_bytes(data[:4] + bytes(len(data) - 12 - footer) + data[-8 - footer:])  # every data page zeroed
    before = snapshot(run)
    capsys.readouterr()
    assert main(COMMANDS[command](run)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be read" in err[0], err
    assert snapshot(run) == before


def _rerun(base: Path, run: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    with contextlib.chdir(base):
        rc = main(["run", "damage.toml", "--out", str(run), "--quiet", "--progress", "none"])
    return rc, capsys.readouterr().err


def _assert_repaired(published: Path, run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(run)]) == 0, capsys.readouterr().err
    for name in ("optimum.parquet", "frontier.parquet", "schedule.parquet"):
        assert pq.read_table(run / name).equals(pq.read_table(published / name)), name
    clean = json.loads((published / "manifest.json").read_text())
    again = json.loads((run / "manifest.json").read_text())
    assert again["rows"] == clean["rows"] and again["files"] == clean["files"]


#: Each rerun computes the run again (about 10 s): one in the default suite, the rest slow.
REPAIRS = [("manifest.json", "folder"),
           *(pytest.param(*case, marks=pytest.mark.slow) for case in [
               ("optimum.parquet", "truncated"), ("points", "deleted"), ("frontier.parquet", "folder"),
               ("points/gpu=l4/seg-00000-part-00000.parquet", "garbage"), ("manifest.json", "{}")])]


@pytest.mark.parametrize(("rel", "kind"), REPAIRS)
def test_rerun_repairs(published: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], rel: str,
                       kind: str) -> None:
    """`sweep run` of the same grid into a damaged folder is not "already complete": one line
    says what is damaged, the run is computed again, and the folder then checks clean."""
    run = damage(published, tmp_path / "run", rel, kind)
    rc, err = _rerun(published.parent, run, capsys)
    assert rc == 0, err
    lines = err.strip().splitlines()
    if rel != "manifest.json":  # a manifest that is no manifest is no finished run: nothing to say
        assert len(lines) == 1 and rel.split("/")[-1] in lines[0] and "again" in lines[0], lines
    _assert_repaired(published, run, capsys)
