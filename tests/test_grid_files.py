"""The files a grid names (`[schedule] trace`, `[simulation] trace`, `[profile] file`) and the
CSV files `sweep fit` / `sweep calibrate` read (`sweep.grid.files`):

* they stay in the grid file's folder (symlinks followed) unless `--allow-outside DIR`;
* a FIFO, a device or a folder is refused before it is opened, a non-UTF-8 file and an
  oversized one before they are parsed, each in one line (file, key, value, rule), exit 2,
  nothing written;
* errors never quote a line of the file;
* a `[schedule]` trace spans at most ten years (binning walks every hour of the span);
* a SQLite study outside `--out` needs the same option; `calibrate --out` is a folder.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from _search import seed_spec

from sweep import grid as spec
from sweep.cli import main
from sweep.errors import GridError, StorageError, disk_full, show
from sweep.grid.files import MAX_INPUT_BYTES, InputFileError, read_text
from sweep.grid.schedule import MAX_TRACE_HOURS, bin_trace
from sweep.grid.search_table import check_storage

DYNAMIC = """
name = "f"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
seq_len = 1024
batch_size = [1, 8]
t_fixed_ms = 10.0
t_req_ms = 0.5
slo_ms = 500
replicas = [1, 2]
arrival_rps = 20.0
"""
#: The grid around each file key, and a file it accepts.
KINDS = {
    "schedule.trace": (DYNAMIC.replace("arrival_rps = 20.0\n", "") + '[schedule]\ntrace = "{path}"\n',
                       "".join(f"{3600 * h + 1}\n" for h in range(24))),
    "simulation.trace": (DYNAMIC + '[options]\nlatency_model = "simulated"\n'
                         '[simulation]\nn_requests = 1000\nwarmup = 100\ntrace = "{path}"\n',
                         "t\n" + "".join(f"{0.05 * i:.2f}\n" for i in range(400))),
    "profile.file": (DYNAMIC.replace("t_fixed_ms = 10.0\nt_req_ms = 0.5\n", "") + '[profile]\nfile = "{path}"\n',
                     "batch_size,latency_ms\n1,50.5\n8,54\n32,66\n"),
}
SECRET = "root:$6$s3cr3t-hash:19000:0:99999:7:::"


def _grid(folder: Path, key: str, path: str | Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    g = folder / "g.toml"
    g.write_text(KINDS[key][0].format(path=path))
    return g


def _where(folder: Path, key: str, value: str) -> str:
    """How an error names the file: a trace by the grid's key; a profile by its own path
    (`sweep.grid.fit`, as `sweep fit` does), the key `<file>`."""
    if key == "profile.file":
        return f"{folder / value}: <file> = {str(folder / value)!r}"
    return f"{folder / 'g.toml'}: {key} = {value!r}"


def _refused(capsys, grid: Path, out: Path, *extra: str) -> str:
    """`sweep run` refuses in one line, exit 2, writing nothing."""
    assert main(["run", str(grid), "--out", str(out), "--quiet", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert not out.exists()
    return err


# --------------------------------------------------------------------------- what a file must be


@pytest.mark.parametrize("key", KINDS)
def test_a_file_that_is_not_utf8_is_one_line(tmp_path, capsys, key):
    (tmp_path / "in.csv").write_bytes(KINDS[key][1].encode() + b"\xff\xfe1\n")
    err = _refused(capsys, _grid(tmp_path, key, "in.csv"), tmp_path / "o")
    assert f"{_where(tmp_path, key, 'in.csv')}: is not UTF-8 text (byte 0xff at offset" in err
    assert f"line {KINDS[key][1].count(chr(10)) + 1}" in err


@pytest.mark.parametrize("key", KINDS)
def test_a_fifo_is_refused_before_it_is_opened(tmp_path, capsys, key):
    """Opening a FIFO for reading blocks until a writer comes (the audit's hang). A writer is
    started here so that a regression reads an empty file and fails instead of hanging."""
    fifo = tmp_path / "in.csv"
    os.mkfifo(fifo)

    def writer() -> None:
        fd = os.open(fifo, os.O_WRONLY)  # blocks until someone opens the FIFO to read
        os.close(fd)

    threading.Thread(target=writer, daemon=True).start()
    err = _refused(capsys, _grid(tmp_path, key, "in.csv"), tmp_path / "o")
    assert f"{_where(tmp_path, key, 'in.csv')}: is a FIFO (named pipe), not a regular file" in err


@pytest.mark.parametrize("key", KINDS)
def test_a_folder_or_a_device_is_refused(tmp_path, capsys, key):
    (tmp_path / "in.csv").mkdir()
    err = _refused(capsys, _grid(tmp_path, key, "in.csv"), tmp_path / "o")
    assert f"{_where(tmp_path, key, 'in.csv')}: is a folder, not a regular file" in err
    err = _refused(capsys, _grid(tmp_path, key, "/dev/null"), tmp_path / "o", "--allow-outside", "/dev")
    assert f"{_where(tmp_path, key, '/dev/null')}: is a character device, not a regular file" in err


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, capsys):
    big = tmp_path / "in.csv"
    with open(big, "wb") as f:
        f.truncate(MAX_INPUT_BYTES + 1)  # sparse: no disk used
    err = _refused(capsys, _grid(tmp_path, "schedule.trace", "in.csv"), tmp_path / "o")
    assert f"has {MAX_INPUT_BYTES + 1:,} bytes; an input file may have at most {MAX_INPUT_BYTES:,}" in err


def test_a_grid_file_that_is_a_fifo_is_refused(tmp_path, capsys):
    os.mkfifo(tmp_path / "g.toml")
    err = _refused(capsys, tmp_path / "g.toml", tmp_path / "o")
    assert "<file>" in err and "is a FIFO" in err


def test_read_text_accepts_a_byte_order_mark(tmp_path):
    (tmp_path / "p.csv").write_bytes(b"\xef\xbb\xbfbatch_size,latency_ms\n")
    assert read_text(tmp_path / "p.csv").startswith("batch_size")
    with pytest.raises(InputFileError, match="cannot be read"):
        read_text(tmp_path / "missing.csv")


# --------------------------------------------------------------------------- where a file may be


def _outside(tmp_path: Path, key: str) -> Path:
    """A valid file for `key` in a folder beside the grid's, not in it."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    (d / "in.csv").write_text(KINDS[key][1])
    return d / "in.csv"


@pytest.mark.parametrize("key", KINDS)
@pytest.mark.parametrize("how", ["absolute", "climbing", "symlink"])
def test_a_path_outside_the_grids_folder_needs_allow_outside(tmp_path, capsys, key, how):
    target = _outside(tmp_path, key)
    folder = tmp_path / "grids"
    folder.mkdir()
    value = {"absolute": str(target), "climbing": "../elsewhere/in.csv", "symlink": "in.csv"}[how]
    if how == "symlink":
        (folder / "in.csv").symlink_to(target)
    grid = _grid(folder, key, value)
    err = _refused(capsys, grid, tmp_path / "o")
    # the value as every one-line error shows it (its repr, cut at 80 characters: tmp paths vary in length)
    assert f"{grid}: {key} = {show(value)}: resolves to {target}, outside the grid file's folder {folder}" in err
    assert "--allow-outside DIR" in err
    with pytest.raises(GridError, match="outside the grid file's folder"):
        spec.load(grid, allow_outside=[tmp_path / "other"])  # another folder allowed: still refused
    g = spec.load(grid, allow_outside=[target.parent])
    assert g.name == "f"


def test_a_climbing_path_that_stays_inside_is_fine(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "in.csv").write_text(KINDS["profile.file"][1])
    assert spec.load(_grid(tmp_path, "profile.file", "sub/../in.csv")).service_source == "fitted"


def test_allow_outside_reaches_the_cli(tmp_path, capsys):
    """`sweep explain` (and run, plan, search) take --allow-outside; the profile outside is read."""
    target = _outside(tmp_path, "profile.file")
    grid = _grid(tmp_path / "grids", "profile.file", str(target))
    assert main(["explain", str(grid), "--point", "0"]) == 2
    assert "outside the grid file's folder" in capsys.readouterr().err
    assert main(["explain", str(grid), "--point", "0", "--allow-outside", str(target.parent)]) == 0


# --------------------------------------------------------------------------- never quote a file


@pytest.mark.parametrize(("key", "text", "where"), [
    ("schedule.trace", f"{SECRET}\n5\n{SECRET}\n", "in.csv:3"),
    ("schedule.trace", f"5\n7,{SECRET}\n", "in.csv:2"),
    ("simulation.trace", f"{SECRET}\n0.5\n{SECRET}\n", "in.csv:3"),
    ("profile.file", f"{SECRET}\n1,2\n", "row 1 (header)"),
    ("profile.file", f"batch_size,latency_ms\n1,50,{SECRET}\n", "row 2"),
])
def test_errors_never_quote_a_line_of_the_file(tmp_path, capsys, key, text, where):
    """The audit ran `/etc/shadow` as a profile (as root) and got its first line back. The
    error names the line and the rule, not the text."""
    (tmp_path / "in.csv").write_text(text)
    err = _refused(capsys, _grid(tmp_path, key, "in.csv"), tmp_path / "o")
    assert where in err and "s3cr3t" not in err and "root:" not in err


@pytest.mark.parametrize("command", ["fit", "calibrate"])
def test_fit_and_calibrate_never_quote_a_line_either(tmp_path, capsys, command):
    header = {"fit": "batch_size,latency_ms", "calibrate": "model,gpu,tensor_parallel,phase,batch,prompt_tokens,"
                                                          "context_tokens,measured_ms"}[command]
    for text, where in ((f"{SECRET}\nbin:x:1:1\n", "row 1 (header)"), (f"{header}\n1,2,{SECRET}\n", "row 2")):
        (tmp_path / "p.csv").write_text(text)
        assert main([command, str(tmp_path / "p.csv")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and where in err, err
        assert "s3cr3t" not in err and "root:" not in err


@pytest.mark.parametrize("command", ["fit", "calibrate"])
def test_fit_and_calibrate_refuse_fifos_folders_and_other_encodings(tmp_path, capsys, command):
    os.mkfifo(tmp_path / "fifo.csv")
    (tmp_path / "dir.csv").mkdir()
    (tmp_path / "latin1.csv").write_bytes("batch_size,latency_ms\n1,50\n# mesuré\n".encode("latin-1"))
    for name, rule in (("fifo.csv", "is a FIFO"), ("dir.csv", "is a folder"), ("latin1.csv", "is not UTF-8 text")):
        assert main([command, str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{tmp_path / name}: <file>" in err and rule in err, err


# --------------------------------------------------------------------------- a trace's span


def _counts(path: Path, hours: list[int]) -> None:
    """A `timestamp,requests` trace with 100 requests at each of `hours`."""
    path.write_text("".join(f"{3600 * h + 1},100\n" for h in hours))


def test_a_schedule_trace_spans_at_most_ten_years(tmp_path):
    """At the limit the trace is binned (87,840 hours walked); one hour more is refused
    before the walk, naming the limit. The audit's 1e13 s took 25 minutes, 1e15 s 40 hours."""
    source = str(tmp_path / "g.toml")
    day = list(range(24))
    _counts(tmp_path / "t.csv", day + [MAX_TRACE_HOURS - 1])
    rates = bin_trace("t.csv", source, 24)
    assert len(rates) == 24 and all(r > 0 for r in rates)
    _counts(tmp_path / "t.csv", day + [MAX_TRACE_HOURS])
    with pytest.raises(GridError, match=f"spans {MAX_TRACE_HOURS + 1:,} hours .* at most {MAX_TRACE_HOURS:,} hours"):
        bin_trace("t.csv", source, 24)
    for last in (1e13, 1e15, 1e300):
        (tmp_path / "t.csv").write_text("".join(f"{3600 * h + 1}\n" for h in day) + f"{last}\n")
        with pytest.raises(GridError, match=f"a \\[schedule\\] trace may span at most {MAX_TRACE_HOURS:,} hours"):
            bin_trace("t.csv", source, 168)


def test_a_long_trace_is_one_line_at_the_cli(tmp_path, capsys):
    (tmp_path / "in.csv").write_text("0\n1e13\n")
    err = _refused(capsys, _grid(tmp_path, "schedule.trace", "in.csv"), tmp_path / "o")
    assert "schedule.trace = 'in.csv': spans 2,777,777,778 hours" in err and "ten years" in err


# --------------------------------------------------------------------------- SQLite storage


def test_a_sqlite_study_outside_out_needs_allow_outside(tmp_path, monkeypatch):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = seed_spec(storage=f"sqlite:///{elsewhere / 's.db'}").search
    with pytest.raises(StorageError, match=f"the database {elsewhere / 's.db'} lies outside the output folder {out}"):
        check_storage(outside, out)
    check_storage(outside, out, allow_outside=[elsewhere])
    out.mkdir()
    check_storage(seed_spec(storage=f"sqlite:///{out / 's.db'}").search, out)  # inside --out
    monkeypatch.chdir(tmp_path)  # a relative URL is relative to the working folder, as SQLite opens it
    with pytest.raises(StorageError, match="outside the output folder"):
        check_storage(seed_spec(storage="sqlite:///s.db").search, out)
    check_storage(seed_spec(storage="sqlite:///out/s.db").search, out)
    check_storage(seed_spec(storage="sqlite").search, out)  # the default file, OUT/search.db
    assert not list(elsewhere.iterdir()) and not (tmp_path / "s.db").exists()


def test_a_sqlite_study_outside_out_is_one_line_at_the_cli(tmp_path, capsys, root):
    text = (root / "tests" / "golden" / "grids" / "search.toml").read_text()
    db = tmp_path / "elsewhere" / "s.db"
    db.parent.mkdir()
    (tmp_path / "g.toml").write_text(text.replace('storage = "memory"', f'storage = "sqlite:///{db}"'))
    for command in ("run", "search"):  # the study's run and a search worker
        assert main([command, str(tmp_path / "g.toml"), "--out", str(tmp_path / "o"), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "search.storage" in err and "lies outside the output folder" in err, err
    assert not db.exists() and not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- calibrate --out


def test_calibrate_out_must_be_a_folder(tmp_path, capsys, root):
    data = str(root / "tests" / "data" / "gpu_measurements.csv")
    (tmp_path / "afile").write_text("keep me\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "gpus").write_text("keep me too\n")
    cases = [(["--out", str(tmp_path / "afile")], "must be a folder for the catalog overlay"),
             (["--out", str(tmp_path / "afile" / "sub")], "lies under a file"),
             (["--out", str(tmp_path / "d")], "is a file; name a folder"),
             (["--table", str(tmp_path / "d")], "--table must name a file"),
             (["--table", str(tmp_path / "afile" / "t.toml")], "lies under a file")]
    for args, rule in cases:
        assert main(["calibrate", data, *args]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert err.count("\n") == 0 and rule in err, err
        assert captured.out == ""  # refused before any work
    assert (tmp_path / "afile").read_text() == "keep me\n" and (tmp_path / "d" / "gpus").read_text() == "keep me too\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "d"]


# --------------------------------------------------------------------------- what a full disk looks like


def test_disk_full_finds_the_full_disk_behind_wrappers(tmp_path):
    """A real SQLITE_FULL (a database capped at its size by PRAGMA max_page_count) seen
    through SQLAlchemy's wrapper and a `raise ... from None`, and ENOSPC/EDQUOT as OSErrors;
    other errors are not a full disk."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'x.db'}", poolclass=sqlalchemy.pool.NullPool)
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x BLOB)")
        conn.commit()
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
        conn.exec_driver_sql(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(sqlalchemy.exc.OperationalError) as wrapped:
            conn.exec_driver_sql("INSERT INTO t VALUES (zeroblob(100000))")
    assert isinstance(wrapped.value.orig, sqlite3.OperationalError)
    assert disk_full(wrapped.value) == "SQLite: database or disk is full"
    try:
        try:
            raise wrapped.value
        except Exception:
            raise StorageError("g.toml", "search.storage", "sqlite", "the study failed") from None
    except StorageError as exc:
        assert disk_full(exc) == "SQLite: database or disk is full"
    assert disk_full(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    assert disk_full(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))) == os.strerror(errno.EDQUOT)
    assert disk_full(OSError(errno.EACCES, "Permission denied")) is None
    assert disk_full(ValueError("disk is full")) is None
