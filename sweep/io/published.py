"""A published run folder, checked before anything reads it.

Every reader of a finished run (`sweep show`, `sweep report`, `sweep explain RUN_DIR`, and
`sweep run` deciding whether an identical run is already complete) calls `check_run` first.
It returns the manifest when the folder is what the manifest says, and otherwise raises
`DamagedRunError`: one line naming the file, what is wrong with it, and how to get a whole
folder back (the `sweep run` that made it, which computes it again).

What is checked, cheaply (no data page is read):

* `manifest.json` is a regular file of UTF-8 JSON, an object, with the keys readers use and
  their types (`rows`, `files`, `checksums`; `axes`, `shard`, `search`, `serving` where
  present), and names a registered serving model;
* every file the manifest names (`files`: optimum, frontier, points parts, schedule; the
  search answers) has its record in `checksums`, exists, is a regular file of the recorded
  size, has a readable Parquet footer with the recorded row count and the columns readers
  need; the row counts add up to the manifest's `rows`;
* `points/` is a folder holding exactly the parts listed (a stray part would be read by every
  query that globs the folder);
* the SHA-256 of the files, the top-level tables first, as far as `HASH_BUDGET` bytes go
  (beyond it the size, footer and row count stand in for it).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.parquet as pq

from sweep.errors import SweepError, show
from sweep.models import REGISTRY, SERVING_MODES

MANIFEST = "manifest.json"
#: Bytes whose SHA-256 a check recomputes (top-level tables first, then points parts).
HASH_BUDGET = 64 << 20
#: Columns a reader needs in each table (by `files` key), whatever the serving model.
NEEDED: dict[str, tuple[str, ...]] = {
    "optimum": ("group_id", "row_id", "reason", "is_replicas_min", "replicas_min", "replicas_min_cost_usd_per_hour"),
    "frontier": ("point_id", "row_id"),
    "schedule": ("schedule_group_id", "hour"),
    "search": ("study_name", "rank", "objective", "objective_value", "meets_constraints"),
    "points": (),
}
_CHUNK = 1 << 20


class DamagedRunError(SweepError):
    """A published run folder is damaged or incomplete (exit 2; nothing is written).
    `detail`: the file and its problem, without the advice."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


def check_run(path: str | Path, *, hash_budget: int | None = None) -> dict[str, Any]:
    """The manifest of the finished run in `path`, after checking the folder against it;
    `DamagedRunError` (one line) when the folder is missing, incomplete or damaged.
    `hash_budget`: bytes to hash (default `HASH_BUDGET`)."""
    return _Check(Path(path), HASH_BUDGET if hash_budget is None else hash_budget).run()


class _Check:
    def __init__(self, path: Path, hash_budget: int) -> None:
        self.path, self.budget = path, hash_budget
        self.fix = f"rerun the `sweep run GRID --out {path}` that made it to compute it again"

    def fail(self, where: str, problem: str) -> DamagedRunError:
        return DamagedRunError(f"{where}: {problem}; {self.fix}", f"{where}: {problem}")

    def key(self, key: str, value: object, rule: str) -> DamagedRunError:
        return self.fail(str(self.path / MANIFEST), f"{key} = {show(value)}: {rule}")

    # ------------------------------------------------------------------ manifest

    def run(self) -> dict[str, Any]:
        path = self.path
        if not path.is_dir():
            what = "is a file, not a run folder" if path.exists() else "no such run folder"
            raise DamagedRunError(f"{path}: {what}; `sweep run GRID --out {path}` makes one")
        m = self.manifest()
        self.structure(m)
        files = self.named(m)
        records = m["checksums"]
        rows: dict[str, int] = {}
        for kind, rel in files:
            rows[rel] = self.table(kind, rel, records[rel])
        self.totals(m, files, rows)
        self.points_folder(m)
        self.unlisted(files)
        self.hashes(files, records)
        return m

    def manifest(self) -> dict[str, Any]:
        path, where = self.path / MANIFEST, str(self.path / MANIFEST)
        if not path.exists() and not path.is_symlink():
            if (self.path / "shards").is_dir():
                raise DamagedRunError(f"{self.path}: no manifest.json: the shards in {self.path}/shards/ are not "
                                      f"merged yet; `sweep merge {self.path}` combines them, or read one shard's "
                                      "folder")
            raise DamagedRunError(f"{self.path}: not a finished run: no manifest.json, so the run is missing or "
                                  f"incomplete (a run writes it last); `sweep run GRID --out {self.path}` makes or "
                                  "finishes it")
        if not path.is_file():
            raise self.fail(where, "is a folder, not the run's manifest file" if path.is_dir()
                            else "is not a regular file")
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as exc:
            raise self.fail(where, f"cannot be read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise self.fail(where, "is not UTF-8 text (garbage bytes)") from None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise self.fail(where, f"is not valid JSON ({exc.args[0].split(':')[0]}; truncated?)") from None
        if not isinstance(doc, dict):
            raise self.fail(where, f"holds {_kind(doc)}, not the JSON object a run writes")
        grid = doc.get("grid")
        if isinstance(grid, dict) and isinstance(grid.get("file"), str):
            shard = doc.get("shard")
            flag = (f" --shard {shard['index']}/{shard['count']}" if isinstance(shard, dict)
                    and isinstance(shard.get("count"), int) and shard["count"] > 1 else "")
            self.fix = f"rerun `sweep run {grid['file']} --out {self.path}{flag}` to compute it again"
        return doc

    def structure(self, m: Mapping[str, Any]) -> None:
        for key in ("rows", "files", "checksums"):
            if key not in m:
                raise self.key(key, None, "missing (a run writes it)")
        rows, files, records = m["rows"], m["files"], m["checksums"]
        self.mapping("rows", rows)
        for key in ("grid_points", "points_written", "optimum", "frontier"):
            self.count(f"rows.{key}", rows.get(key))
        for key in ("feasible", "shard_points", "schedule"):
            if key in rows:
                self.count(f"rows.{key}", rows[key])
        if "actions" in rows:
            self.mapping("rows.actions", rows["actions"])
            for action, n in rows["actions"].items():
                self.count(f"rows.actions.{action}", n)
        self.mapping("files", files)
        for key in ("optimum", "frontier"):
            self.name(f"files.{key}", files.get(key))
        if "schedule" in files:
            self.name("files.schedule", files["schedule"])
        parts = files.get("points")
        if not isinstance(parts, list):
            raise self.key("files.points", parts, "must be the list of points parts")
        for i, rel in enumerate(parts):
            self.name(f"files.points[{i}]", rel)
            if PurePosixPath(rel).parts[0] != "points":
                raise self.key(f"files.points[{i}]", rel, "a points part lies under points/")
        self.mapping("checksums", records)
        for rel, record in records.items():
            self.mapping(f"checksums.{rel}", record)
            self.count(f"checksums.{rel}.rows", record.get("rows"))
            self.count(f"checksums.{rel}.bytes", record.get("bytes"))
            sha = record.get("sha256")
            if not (isinstance(sha, str) and len(sha) == 64):
                raise self.key(f"checksums.{rel}.sha256", sha, "must be a SHA-256 (64 hex digits)")
        if "search" in m:
            search = m["search"]
            self.mapping("search", search)
            self.name("search.file", search.get("file"))
            self.count("search.rows", search.get("rows"))
        for key in ("axes", "shard"):
            if key in m:
                self.mapping(key, m[key])
                for k, n in m[key].items():
                    if key == "axes" or k in ("index", "count"):
                        self.count(f"{key}.{k}", n)
        for key in ("serving", "latency_model", "grid_name"):
            if key in m and not isinstance(m[key], str):
                raise self.key(key, m[key], "must be a string")
        if "grid" in m:
            self.mapping("grid", m["grid"])
            if not isinstance(m["grid"].get("toml", ""), str):
                raise self.key("grid.toml", m["grid"]["toml"], "must be the grid file's text")
        serving = m.get("serving")
        if serving is not None:
            latency = m.get("latency_model")
            if serving not in SERVING_MODES:
                raise self.key("serving", serving, f"not a serving mode of this sweep ({', '.join(SERVING_MODES)})")
            if latency is not None and (serving, latency) not in REGISTRY:
                names = sorted(n for s, n in REGISTRY if s == serving)
                raise self.key("latency_model", latency, f"no {serving} model of that name ({', '.join(names)})")

    def mapping(self, key: str, value: object) -> None:
        if not isinstance(value, dict):
            raise self.key(key, value, "must be a JSON object")

    def count(self, key: str, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.key(key, value, "must be a whole number >= 0")

    def name(self, key: str, value: object) -> None:
        p = PurePosixPath(value) if isinstance(value, str) and value else None
        if p is None or p.is_absolute() or ".." in p.parts:
            raise self.key(key, value, "must name a file inside the run folder")

    # ------------------------------------------------------------------ files

    def named(self, m: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(kind, relative path) of every file the manifest names, top-level tables first."""
        files = m["files"]
        out = [("optimum", files["optimum"]), ("frontier", files["frontier"])]
        if "schedule" in files:
            out.append(("schedule", files["schedule"]))
        if "search" in m:
            out.append(("search", m["search"]["file"]))
        out += [("points", rel) for rel in files["points"]]
        for kind, rel in out:
            if rel not in m["checksums"]:
                raise self.key("checksums", f"{{... {len(m['checksums'])} files}}",
                               f"has no record of {rel} (files.{kind} names it)")
        return out

    def table(self, kind: str, rel: str, record: Mapping[str, Any]) -> int:
        """Check one named Parquet file against its record; its row count."""
        path = self.path / rel
        where = str(path)
        if not path.exists() and not path.is_symlink():
            parent = next((p for p in reversed(PurePosixPath(rel).parents) if str(p) != "."
                           and not (self.path / p).is_dir()), None)
            if parent is not None and str(parent) != rel:  # points/ itself (or a partition) is gone
                if (self.path / parent).exists():
                    raise self.fail(str(self.path / parent), "is a file, not the folder manifest.json names "
                                    f"({rel} is in it)")
                raise self.fail(str(self.path / parent), f"is missing (manifest.json lists {rel} in it)")
            raise self.fail(where, "is missing (manifest.json lists it)")
        if not path.is_file():
            raise self.fail(where, "is a folder, not a file" if path.is_dir() else "is not a regular file")
        size = path.stat().st_size
        if size != record["bytes"]:
            cut = " (truncated)" if size < record["bytes"] else ""
            raise self.fail(where, f"has {size:,} bytes, manifest.json records {record['bytes']:,}{cut}")
        try:
            meta = pq.ParquetFile(path).metadata
            names = set(meta.schema.to_arrow_schema().names)
        except Exception as exc:  # pyarrow's errors for a bad footer vary (ArrowInvalid, OSError)
            raise self.fail(where, f"is not a readable Parquet file ({_first(exc)})") from None
        if meta.num_rows != record["rows"]:
            raise self.fail(where, f"holds {meta.num_rows:,} rows, manifest.json records {record['rows']:,}")
        missing = [c for c in NEEDED.get(kind, ()) if c not in names]
        if missing:
            raise self.fail(where, f"lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                            f"of a {kind} table")
        return int(meta.num_rows)

    def totals(self, m: Mapping[str, Any], files: list[tuple[str, str]], rows: Mapping[str, int]) -> None:
        """The tables' row counts against the manifest's `rows` (and `search.rows`)."""
        expect = {kind: (f"rows.{kind}", m["rows"][kind]) for kind in ("optimum", "frontier")}
        if "schedule" in m["rows"]:
            expect["schedule"] = ("rows.schedule", m["rows"]["schedule"])
        if "search" in m:
            expect["search"] = ("search.rows", m["search"]["rows"])
        for kind, rel in files:
            if kind in expect and rows[rel] != expect[kind][1]:
                key, n = expect[kind]
                raise self.fail(str(self.path / MANIFEST), f"{key} = {n:,}, but {rel} holds {rows[rel]:,} rows")
        points = sum(rows[rel] for kind, rel in files if kind == "points")
        if points != m["rows"]["points_written"]:
            raise self.fail(str(self.path / MANIFEST), f"rows.points_written = {m['rows']['points_written']:,}, "
                            f"but the {len(m['files']['points'])} parts of points/ hold {points:,} rows")

    def points_folder(self, m: Mapping[str, Any]) -> None:
        """points/ holds exactly the listed parts (readers glob it)."""
        folder = self.path / "points"
        listed = set(m["files"]["points"])
        if not folder.exists():
            return  # nothing listed (a listed part would have been missing)
        if not folder.is_dir():
            if listed:
                raise self.fail(str(folder), "is a file, not the folder of points parts")
            return
        for part in sorted(folder.rglob("*.parquet")):
            rel = part.relative_to(self.path).as_posix()
            if rel not in listed:
                raise self.fail(str(part), "is a points part manifest.json does not list (every query of points/ "
                                "would read it); remove it")

    def unlisted(self, files: list[tuple[str, str]]) -> None:
        """A table readers open by its name (`search.parquet`, `schedule.parquet`) that the
        manifest does not name is not this run's."""
        named = {rel for _, rel in files}
        for name in ("search.parquet", "schedule.parquet"):
            if name not in named and ((self.path / name).exists() or (self.path / name).is_symlink()):
                raise self.fail(str(self.path / name), "is not listed in manifest.json (left by another run?); "
                                "remove it")

    def hashes(self, files: list[tuple[str, str]], records: Mapping[str, Any]) -> None:
        left = self.budget
        for _, rel in files:
            record = records[rel]
            if record["bytes"] > left:
                continue
            left -= record["bytes"]
            h = hashlib.sha256()
            with open(self.path / rel, "rb") as f:
                while block := f.read(_CHUNK):
                    h.update(block)
            if h.hexdigest() != record["sha256"]:
                raise self.fail(str(self.path / rel), "has changed since the run wrote it (its SHA-256 differs from "
                                "manifest.json's)")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number" if not (isinstance(value, float) and not math.isfinite(value)) else "a non-finite number"
    return type(value).__name__


def _first(exc: BaseException) -> str:
    """An exception as a short phrase: its type and the first line of its message, cut."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= 100 else text[:97] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
