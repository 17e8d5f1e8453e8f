"""Parquet output: schemas from declared columns, record batches, streaming writers.

The schema and its metadata are built by a pure function (`arrow_schema`) from the
declared columns (`sweep.models.base.Column`); the writer only streams record batches. It
knows nothing of queueing: it gets columns, arrays and the dictionaries of the string
columns.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sweep.models.base import MAX_EXACT_INT, Column

_ARROW = {"float64": pa.float64(), "int64": pa.int64(), "bool": pa.bool_(),
          "dict": pa.dictionary(pa.int32(), pa.string())}
COMPRESSION = "zstd"


def arrow_schema(columns: Sequence[Column], metadata: Mapping[str, Any]) -> pa.Schema:
    """Arrow schema for `columns`; each field carries its unit and meaning (and, where it
    can be NULL, what explains a NULL), the schema the run's provenance (`metadata`, stored
    as JSON under the key `sweep`). Only columns that declare `null_when` are nullable."""
    fields = []
    for c in columns:
        meta = {"unit": c.unit, "description": c.doc}
        if c.nullable:
            meta["null_when"] = c.null_text()
        fields.append(pa.field(c.name, _ARROW[c.dtype], nullable=c.nullable, metadata=meta))
    return pa.schema(fields, metadata={"sweep": json.dumps(metadata, sort_keys=True, default=str)})


def record_batch(
    arrays: Mapping[str, np.ndarray], schema: pa.Schema, dictionaries: Mapping[str, Sequence[str]]
) -> pa.RecordBatch:
    """Arrays (dictionary columns as int32 codes) -> a record batch of `schema`.

    The file boundary of the NULL rule: in a nullable field every value the engine holds as
    non-finite (`+inf`: unbounded, undefined, no answer) becomes NULL, and a nullable int64
    field (float64 in memory) becomes int64, NULL also beyond 2^53 where float64 stops
    counting exactly. No file ever holds `+inf` or NaN in a nullable field."""
    cols = []
    for field in schema:
        data = arrays[field.name]
        if pa.types.is_dictionary(field.type):
            cols.append(pa.DictionaryArray.from_arrays(pa.array(data, pa.int32()),
                                                       pa.array(dictionaries[field.name], pa.string())))
        elif field.nullable and np.asarray(data).dtype.kind == "f":
            cols.append(_nullable(np.asarray(data), field.type))
        else:
            cols.append(pa.array(data, field.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _nullable(data: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """Float64 values -> `arrow_type` with NULL where they are not finite (int64: nor exact;
    bool: 1.0 true, 0.0 false)."""
    if pa.types.is_boolean(arrow_type):  # a flag of an answer: 1.0 / 0.0, +inf where there is none
        null = ~np.isfinite(data)
        return pa.array(np.where(null, 0.0, data) > 0.5, arrow_type, mask=null if null.any() else None)
    if pa.types.is_integer(arrow_type):
        with np.errstate(invalid="ignore"):
            null = ~(np.abs(data) <= MAX_EXACT_INT)  # NaN and +-inf included
        values = np.where(null, 0.0, data).astype(np.int64)
    else:
        null = ~np.isfinite(data)
        values = data
    if not null.any():
        return pa.array(values, arrow_type)
    return pa.array(values, arrow_type, mask=null)


class _Lane:
    """One encoder: its own thread and its own open file."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, "sweep-encode")
        self.pending: Future[None] | None = None
        self.writer: pq.ParquetWriter | None = None
        self.file_rows = 0

    def wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()


class DatasetWriter:
    """Streams record batches into `folder/part-NNNNN.parquet`, rolling files by row count.

    Batches are buffered until `row_group_rows` so row groups have the size BI readers like,
    whatever the evaluation chunk size. With `encoders = 2` whole row groups go alternately
    to two files, each encoded by its own thread (Parquet encoding releases the GIL), so a
    large output is written on both cores; every row group still has `row_group_rows` rows
    except the last of each file. At most one row group per encoder is in flight.
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
        encoders: int = 1,
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
        self._lanes = [_Lane() for _ in range(1 if single_file is not None else max(1, encoders))]
        self._turn = 0
        self._files_lock = threading.Lock()
        self.files_of: dict[int, Path] = {}  # lane -> its open file
        self.files: list[Path] = []
        #: every file written and its row count (complete once `close` returns)
        self.written: dict[Path, int] = {}
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._buffer.append(batch)
        self._buffered += batch.num_rows
        while self._buffered >= self.row_group_rows:
            self._flush(self.row_group_rows)

    def close(self) -> None:
        try:
            if self._buffered:
                self._flush(self._buffered)
            for lane in self._lanes:
                lane.wait()
            if self.single_file is not None and self._lanes[0].writer is None:
                self._open(self._lanes[0])  # an empty table is still a valid file with the schema
        finally:
            for lane in self._lanes:
                lane.pool.shutdown(wait=True)
                if lane.writer is not None:
                    lane.writer.close()
                    lane.writer = None

    def _flush(self, n: int) -> None:
        table = pa.Table.from_batches(self._buffer, schema=self.schema)
        head, tail = table.slice(0, n), table.slice(n)
        self._buffer = tail.to_batches() if tail.num_rows else []
        self._buffered = tail.num_rows
        lane = self._lanes[self._turn % len(self._lanes)]
        self._turn += 1
        lane.wait()  # its previous row group is written: at most one in flight per lane
        lane.pending = lane.pool.submit(self._encode, lane, head)
        self.rows += n

    def _encode(self, lane: _Lane, table: pa.Table) -> None:
        if lane.writer is None or lane.file_rows >= self.rows_per_file:
            self._open(lane)
        assert lane.writer is not None
        lane.writer.write_table(table, row_group_size=table.num_rows)
        lane.file_rows += table.num_rows
        with self._files_lock:
            self.written[self.files_of[id(lane)]] += table.num_rows

    def _open(self, lane: _Lane) -> None:
        if lane.writer is not None:
            lane.writer.close()
        with self._files_lock:
            name = self.single_file or f"{self.prefix}part-{len(self.files):05d}.parquet"
            path = self.folder / name
            self.files.append(path)
            self.written[path] = 0
            self.files_of[id(lane)] = path
        lane.writer = pq.ParquetWriter(path, self.schema, compression=COMPRESSION, write_statistics=True)
        lane.file_rows = 0


def concat_parquet(parts: Sequence[Path], target: Path, schema: pa.Schema) -> int:
    """Stream Parquet files, in order, into one file (row group by row group, bounded memory).
    The parts stay where they are: a single part is hard-linked (copied across file systems)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)  # it may be a hard link to a part: never write through it
    if len(parts) == 1 and pq.read_schema(parts[0]).equals(schema, check_metadata=True):
        try:
            os.link(parts[0], target)
        except OSError:
            shutil.copyfile(parts[0], target)
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
