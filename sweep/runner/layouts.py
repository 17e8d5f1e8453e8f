"""Disaggregate or not, computed: the aggregated companion of a disaggregated grid planned in
memory and joined to its optimum table (the rule and the columns: `sweep.decide.layouts`)."""

from __future__ import annotations

import pyarrow as pa

from sweep.decide.layouts import LAYOUT_COLUMNS, LAYOUT_REASONS, best_aggregated, layout_companion, layout_rows
from sweep.decide.tables import dictionaries, optimum_columns, optimum_rows
from sweep.engine.evaluate import DEFAULT_CHUNK, Evaluator
from sweep.grid.spec import GridSpec
from sweep.io.parquet import arrow_schema, record_batch


def optimum_table(spec: GridSpec, *, chunk_size: int = DEFAULT_CHUNK, meta: dict | None = None) -> pa.Table:
    """optimum.parquet of `spec` as an Arrow table, in memory, without the layout verdict."""
    every = spec.point_columns()
    schema = arrow_schema(optimum_columns(spec.model, every, layouts=False), meta or {})
    names = dictionaries([m.name for m in spec.models], [g.name for g in spec.gpus], gpu_keys=spec.model.part_gpu_keys)
    ev = Evaluator(spec, chunk_size)
    batches = [record_batch(optimum_rows(spec.model, chunk.columns, chunk.rows, ev.row_size, spec.rows_per_group),
                            schema, names) for chunk in ev.iter_chunks()]
    return pa.Table.from_batches(batches, schema=schema)


def with_layouts(spec: GridSpec, optimum: pa.Table, companion: GridSpec | None = None) -> pa.Table:
    """`optimum` (a disaggregated grid's table without the layout columns) with them appended:
    the companion grid (`layout_companion`) is planned in memory and joined by workload."""
    companion = companion or layout_companion(spec)
    best = best_aggregated(companion, optimum_table(companion))
    cols = layout_rows(spec, optimum, best)
    schema = arrow_schema(LAYOUT_COLUMNS, {})
    batch = record_batch(cols, schema, {"layout_reason": list(LAYOUT_REASONS),
                                        "aggregated_gpu": [g.name for g in spec.gpus]})
    out = optimum
    for field, array in zip(schema, batch.columns):
        out = out.append_column(field, array)
    return out.replace_schema_metadata(optimum.schema.metadata)
