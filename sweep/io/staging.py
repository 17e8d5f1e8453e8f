"""The staging folder: a journal of sealed segments, verified, then published by renames.

A run writes only inside `OUT/.sweep-staging-KEY/` (KEY: the run's settings), under the
output folder's lock (`sweep.io.lock`):

* Each finished segment is *sealed* by `segments/NNNNN.json`: its statistics and, for every
  file it wrote, the row count, size and SHA-256, plus a digest of the marker itself. A
  rerun trusts a segment only if its marker and every file still verify; a damaged segment
  (garbage marker, missing, truncated or altered file) is reported in one line and computed
  again.
* Before publishing, every sealed segment is verified again, the outputs are assembled in
  `final/` (copies: nothing leaves a segment), and `final/manifest.json` is written.
* Publishing is a journal too: `publish.json` (the list of renames) is written atomically
  first; that is the commit point. Then the old `OUT/manifest.json` goes (the folder stops
  looking complete), each old entry is moved aside and each new one renamed in, and the new
  `manifest.json` is renamed in last. A crash before `publish.json` leaves the previous output
  complete and untouched; a crash after it leaves a folder without `manifest.json` that the
  next run (or merge) in the same folder finishes first (`recover`). There is never a
  `manifest.json` beside a mix of old and new files.
* `--force` (`discard`) removes the staging folder: it always recovers.
* An old entry that cannot be moved aside (a folder without write permission, which a
  rename into another folder needs) is found before the commit point: one line, the previous
  output complete and untouched, the sealed segments kept for the rerun. One that fails after
  it (a race, an immutable file) is one line too; the folder then has no `manifest.json`, and
  the same command finishes the publish once the cause is fixed.

`FAULT_ENV` names a test hook: `SWEEP_FAULT=publish:N` stops the process at step N of
publishing, as a kill would, so tests can check every crash point.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from sweep._faults import FAULT_ENV, InjectedCrash, fault  # noqa: F401 - re-exported for tests
from sweep.errors import OutputError, disk_full

STAGING_PREFIX = ".sweep-staging-"
MANIFEST = "manifest.json"
PUBLISH = "publish.json"
_CHUNK = 1 << 20


class DamagedError(OutputError):
    """Sealed work no longer verifies (a file changed, vanished or was truncated)."""


# --------------------------------------------------------------------------- files


def file_record(path: Path, rows: int | None = None) -> dict[str, Any]:
    """Row count (a Parquet file's footer unless given), size and SHA-256 of one file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    if rows is None:
        rows = pq.ParquetFile(path).metadata.num_rows if path.suffix == ".parquet" else 0
    return {"rows": int(rows), "bytes": path.stat().st_size, "sha256": h.hexdigest()}


def check_file(root: Path, rel: str, record: Mapping[str, Any]) -> str | None:
    """None when `root/rel` matches its record, else what is wrong (one phrase)."""
    path = root / rel
    if not path.is_file():
        return f"{rel} is missing"
    if path.stat().st_size != record.get("bytes"):
        return f"{rel} has {path.stat().st_size} bytes, sealed with {record.get('bytes')}"
    if file_record(path, rows=0)["sha256"] != record.get("sha256"):
        return f"{rel} has changed since it was sealed (SHA-256 differs)"
    if path.suffix == ".parquet":
        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except Exception as exc:
            return f"{rel} is not a readable Parquet file ({type(exc).__name__})"
        if rows != record.get("rows"):
            return f"{rel} holds {rows} rows, sealed with {record.get('rows')}"
    return None


def dumps(obj: Any, indent: int | None = None) -> str:
    """Strict JSON (RFC 8259): non-finite floats are written as the strings "inf", "-inf",
    "nan" (never bare NaN/Infinity, which JSON readers reject)."""
    return json.dumps(_finite(obj), indent=indent, allow_nan=False, default=str)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def write_json_atomic(path: Path, obj: Any, indent: int | None = None) -> None:
    """Write under a temporary name, flush to disk, rename: a reader sees all or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(dumps(obj, indent) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _marker_digest(marker: Mapping[str, Any]) -> str:
    body = {k: v for k, v in marker.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# --------------------------------------------------------------------------- staging


class Staging:
    """A run's hidden folder inside the output folder; the caller holds the folder's lock.

    `final/` holds what will be published; `segments/` the seals; the rest is per-segment work.
    The folder is named by the run's key, so rerunning the same command finds it and resumes.
    """

    MANIFEST = MANIFEST

    def __init__(self, out_dir: Path, key: str) -> None:
        self.out_dir = out_dir
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{out_dir}: cannot create the output folder ({exc.strerror})") from None
        if not os.access(out_dir, os.W_OK):
            raise OutputError(f"{out_dir}: the output folder is not writable")
        recover(out_dir)
        self.path = out_dir / f"{STAGING_PREFIX}{key}"
        for other in out_dir.glob(f"{STAGING_PREFIX}*"):
            if other != self.path:  # an abandoned run of other settings: it cannot resume here
                shutil.rmtree(other, ignore_errors=True)
        self.final = self.path / "final"
        fault("stage:mkdir", self.final)
        self.final.mkdir(parents=True, exist_ok=True)

    # -- segments -----------------------------------------------------------------------

    def marker(self, k: int) -> Path:
        return self.path / "segments" / f"{k:05d}.json"

    def seal(self, k: int, stats: Mapping[str, Any], files: Sequence[tuple[Path, int]]) -> None:
        """Seal segment `k`: its statistics and the record of every file it wrote."""
        self.seal_records(k, stats, {str(p.relative_to(self.path)): file_record(p, rows) for p, rows in files})

    def seal_records(self, k: int, stats: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]]) -> None:
        """Seal segment `k` with records already taken (path relative to the staging folder
        -> rows, bytes, sha256), e.g. by the cluster worker that wrote the files."""
        marker = {"segment": k, "stats": dict(stats), "files": dict(records)}
        marker["digest"] = _marker_digest(marker)
        write_json_atomic(self.marker(k), marker)

    def sealed(self, k: int) -> tuple[dict[str, Any] | None, str | None]:
        """(seal, None) for a sealed segment that verifies (`seal["stats"]`, `seal["files"]`:
        path relative to the staging folder -> rows, bytes, sha256); (None, why) for a
        damaged one; (None, None) when it was never sealed."""
        path = self.marker(k)
        if not path.exists():
            return None, None
        try:
            marker = json.loads(path.read_text())
            if (not isinstance(marker, dict) or marker.get("digest") != _marker_digest(marker)
                    or marker.get("segment") != k):
                return None, f"its seal {path.name} is not one sweep wrote (edited or garbage)"
            for rel, record in marker["files"].items():
                problem = check_file(self.path, rel, record)
                if problem is not None:
                    return None, problem
            return marker, None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return None, f"its seal {path.name} cannot be read ({type(exc).__name__})"

    def drop_segment(self, k: int, prefix: str) -> None:
        """Remove what an interrupted or damaged attempt at segment `k` left."""
        self.marker(k).unlink(missing_ok=True)
        points = self.final / "points"
        for p in points.rglob(f"{prefix}*") if points.exists() else ():
            p.unlink()
        for sub in ("optimum", "frontier"):
            (self.path / sub / f"{k:05d}.parquet").unlink(missing_ok=True)

    def discard(self) -> None:
        """Forget everything staged (`--force`)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.final.mkdir(parents=True, exist_ok=True)

    # -- publishing ---------------------------------------------------------------------

    def publish(self, manifest: Mapping[str, Any]) -> None:
        """Publish `final/` and then its manifest (see the module docstring)."""
        write_json_atomic(self.final / MANIFEST, manifest, indent=2)
        fault("publish:1")
        entries = sorted(e.name for e in self.final.iterdir() if e.name != MANIFEST)
        _check_movable(self.out_dir, entries)
        write_json_atomic(self.path / PUBLISH, {"entries": entries})  # the commit point
        fault("publish:2")
        _roll_forward(self.out_dir, self.path)


def _roll_forward(out_dir: Path, staging: Path) -> None:
    """Carry out (or finish) a committed publish plan; every step may be repeated."""
    plan = json.loads((staging / PUBLISH).read_text())
    final = staging / "final"
    if not (final / MANIFEST).exists():  # the new manifest is in place: only cleaning up was left
        shutil.rmtree(staging, ignore_errors=True)
        return
    if (out_dir / MANIFEST).is_dir() and not (out_dir / MANIFEST).is_symlink():  # a damaged folder
        shutil.rmtree(out_dir / MANIFEST)
    else:
        (out_dir / MANIFEST).unlink(missing_ok=True)
    fault("publish:3")
    for i, name in enumerate(plan["entries"]):
        new, target, old = final / name, out_dir / name, staging / f".old-{name}"
        if new.exists():  # not yet moved in
            try:
                if target.exists() or target.is_symlink():
                    if old.exists():
                        _remove(old)
                    fault("publish:move", target)
                    target.rename(old)
                fault(f"publish:entry{i}")
                new.rename(target)
            except OSError as exc:
                if disk_full(exc):
                    raise
                raise OutputError(f"{target}: cannot be replaced by the new output ({exc.strerror}); the publish is "
                                  f"committed in {staging.name} and the folder has no manifest.json until it is done: "
                                  "fix the cause and rerun the same command to finish it") from None
    fault("publish:4")
    if (final / MANIFEST).exists():
        os.replace(final / MANIFEST, out_dir / MANIFEST)
    fault("publish:5")
    shutil.rmtree(staging, ignore_errors=True)


def _check_movable(out_dir: Path, entries: Sequence[str]) -> None:
    """Before the commit point: every old entry publishing replaces can be moved aside. A
    folder needs write permission of its own to be renamed into another folder."""
    for name in entries:
        target = out_dir / name
        try:
            fault("publish:check", target)
            if target.is_dir() and not target.is_symlink() and not os.access(target, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
        except OSError as exc:
            raise OutputError(f"{target}: cannot be moved aside to publish the new output ({exc.strerror}); the "
                              "previous output is untouched and the computed work is kept: make it writable (or "
                              "remove it) and rerun the same command") from None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def recover(out_dir: Path) -> list[Path]:
    """Finish any publish an earlier process committed but did not complete (the caller
    holds the folder's lock). Returns the staging folders it finished."""
    done = []
    for staging in sorted(out_dir.glob(f"{STAGING_PREFIX}*")):
        if (staging / PUBLISH).exists():
            try:
                _roll_forward(out_dir, staging)
            except (OSError, ValueError, KeyError) as exc:
                raise OutputError(f"{out_dir}: an interrupted publish in {staging.name} cannot be finished "
                                  f"({type(exc).__name__}: {exc}); rerun with --force") from None
            done.append(staging)
    return done
