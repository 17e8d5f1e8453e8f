"""Parquet and JSON output, written so that a failed run never looks complete (SPEC 9).

The schema and its metadata are built by a pure function (`arrow_schema`); the writer only
streams record batches into a hidden staging folder inside the output folder. `commit`
first removes the old `manifest.json` (so the folder stops looking complete), swaps the new
files in by rename, and writes `manifest.json` last: its presence marks a complete run.
The writer knows nothing of queueing: it gets columns (`sweep.columns.Column`), arrays and
the dictionaries of the string columns.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sweep.columns import Column
from sweep.errors import OutputError

_ARROW = {"float64": pa.float64(), "int64": pa.int64(), "bool": pa.bool_(), "dict": pa.dictionary(pa.int32(), pa.string())}
COMPRESSION = "zstd"
STAGING_PREFIX = ".sweep-staging-"


def arrow_schema(columns: Sequence[Column], metadata: Mapping[str, Any]) -> pa.Schema:
    """Arrow schema for `columns`; each field carries its unit and meaning, the schema the
    run's provenance (`metadata`, stored as JSON under the key `sweep`)."""
    fields = [
        pa.field(c.name, _ARROW[c.dtype], nullable=False, metadata={"unit": c.unit, "description": c.doc})
        for c in columns
    ]
    return pa.schema(fields, metadata={"sweep": json.dumps(metadata, sort_keys=True, default=str)})


def record_batch(
    arrays: Mapping[str, np.ndarray], schema: pa.Schema, dictionaries: Mapping[str, Sequence[str]]
) -> pa.RecordBatch:
    """Arrays (dictionary columns as int32 codes) -> a record batch of `schema`."""
    cols = []
    for field in schema:
        data = arrays[field.name]
        if pa.types.is_dictionary(field.type):
            cols.append(pa.DictionaryArray.from_arrays(pa.array(data, pa.int32()), pa.array(dictionaries[field.name], pa.string())))
        else:
            cols.append(pa.array(data, field.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


class DatasetWriter:
    """Streams record batches into `folder/part-NNNNN.parquet`, rolling files by row count.

    Batches are buffered until `row_group_rows` so row groups have the size BI readers like,
    whatever the evaluation chunk size.
    """

    def __init__(
        self,
        folder: Path,
        schema: pa.Schema,
        *,
        row_group_rows: int = 1 << 18,
        rows_per_file: int = 1 << 23,
        single_file: str | None = None,
        prefix: str = "",
    ) -> None:
        self.folder = folder
        self.schema = schema
        self.row_group_rows = row_group_rows
        self.rows_per_file = max(rows_per_file, row_group_rows) if single_file is None else 1 << 62
        self.single_file = single_file
        self.prefix = prefix
        folder.mkdir(parents=True, exist_ok=True)
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._writer: pq.ParquetWriter | None = None
        self._file_rows = 0
        self.files: list[Path] = []
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._buffer.append(batch)
        self._buffered += batch.num_rows
        while self._buffered >= self.row_group_rows:
            self._flush(self.row_group_rows)

    def close(self) -> None:
        if self._buffered:
            self._flush(self._buffered)
        if self._writer is None and self.single_file is not None:
            self._open_next()  # an empty table is still a valid file with the schema
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _flush(self, n: int) -> None:
        table = pa.Table.from_batches(self._buffer, schema=self.schema)
        head, tail = table.slice(0, n), table.slice(n)
        self._buffer = tail.to_batches() if tail.num_rows else []
        self._buffered = tail.num_rows
        if self._writer is None or self._file_rows >= self.rows_per_file:
            self._open_next()
        assert self._writer is not None
        self._writer.write_table(head, row_group_size=n)
        self._file_rows += n
        self.rows += n

    def _open_next(self) -> None:
        if self._writer is not None:
            self._writer.close()
        name = self.single_file or f"{self.prefix}part-{len(self.files):05d}.parquet"
        path = self.folder / name
        self._writer = pq.ParquetWriter(path, self.schema, compression=COMPRESSION, write_statistics=True)
        self.files.append(path)
        self._file_rows = 0


def concat_parquet(parts: Sequence[Path], target: Path, schema: pa.Schema) -> int:
    """Stream Parquet files, in order, into one file (row group by row group, bounded memory).
    A single part is moved, not copied."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if len(parts) == 1 and pq.read_schema(parts[0]).equals(schema, check_metadata=True):
        os.replace(parts[0], target)
        return pq.ParquetFile(target).metadata.num_rows
    rows = 0
    with pq.ParquetWriter(target, schema, compression=COMPRESSION, write_statistics=True) as out:
        for part in parts:
            f = pq.ParquetFile(part)
            same = f.schema_arrow.equals(schema)
            for i in range(f.num_row_groups):
                table = f.read_row_group(i)
                table = table if same else table.cast(schema)
                out.write_table(table, row_group_size=max(table.num_rows, 1))
                rows += table.num_rows
    return rows


class Staging:
    """A hidden folder inside the output folder where a run writes; `commit` publishes it.

    The folder is named by the run's key, so rerunning the same command finds it again and
    resumes; `final/` holds what will be published, the rest is per-segment work.
    """

    MANIFEST = "manifest.json"

    def __init__(self, out_dir: Path, key: str) -> None:
        self.out_dir = out_dir
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{out_dir}: cannot create the output folder ({exc.strerror})") from None
        if not os.access(out_dir, os.W_OK):
            raise OutputError(f"{out_dir}: the output folder is not writable")
        self.path = out_dir / f"{STAGING_PREFIX}{key}"
        for other in out_dir.glob(f"{STAGING_PREFIX}*"):
            if other != self.path:  # an abandoned run of other settings: it cannot resume here
                shutil.rmtree(other, ignore_errors=True)
        self.final = self.path / "final"
        self.final.mkdir(parents=True, exist_ok=True)

    def clear_segment(self, prefix: str, k: int) -> None:
        """Remove what an interrupted attempt at segment `k` may have left."""
        for p in (self.final / "points").rglob(f"{prefix}*") if (self.final / "points").exists() else ():
            p.unlink()
        for sub in ("optimum", "frontier"):
            (self.path / sub / f"{k:05d}.parquet").unlink(missing_ok=True)

    def commit(self, manifest: Mapping[str, Any]) -> None:
        """Publish every entry of `final/`, then the manifest. Old outputs of the same names go."""
        final_manifest = self.out_dir / self.MANIFEST
        final_manifest.unlink(missing_ok=True)
        for entry in sorted(self.final.iterdir()):
            target = self.out_dir / entry.name
            if target.is_dir():
                trash = self.path / f".old-{entry.name}"
                target.rename(trash)
                shutil.rmtree(trash)
            elif target.exists():
                target.unlink()
            entry.rename(target)
        tmp = self.path / f".{self.MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n")
        os.replace(tmp, final_manifest)
        shutil.rmtree(self.path, ignore_errors=True)
