"""The Python API a planner's notebook calls: grids in, Arrow tables out, no files needed.

    import sweep
    spec = sweep.load_grid("grids/seed-gpt3.toml")          # or sweep.grid_from_dict({...})
    points = sweep.evaluate(spec)                            # pyarrow.Table, one row per point
    optimum, frontier = sweep.decide(spec)                   # the reduced outputs, in memory
    result = sweep.run(spec, "runs/gpt3")                    # the files, as `sweep run` writes them
    e = sweep.explain(spec, point_id=2)                      # one point's derivation, step by step

Tables carry the same columns, types, units and meanings (field metadata) as the files,
and the same NULLs where a value is unbounded or there is no answer.
In-memory evaluation is for grids that fit in memory (`MAX_IN_MEMORY` points); larger
grids go through `run`, which streams to Parquet in bounded memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sweep.catalog import Catalog
from sweep.decide.layouts import SHARED_KEYS, aggregated_text, has_layouts, layout_companion, verdict_text
from sweep.decide.recommend import picks
from sweep.decide.recommend import recommendation as recommend_one
from sweep.decide.reduce import REASONS
from sweep.decide.tables import dictionaries, frontier_columns, frontier_rows, optimum_columns, optimum_rows
from sweep.engine.evaluate import DEFAULT_CHUNK, Evaluator, catalog_tables
from sweep.errors import GridError, OutputError, did_you_mean
from sweep.grid import GridSpec, build, load
from sweep.io.parquet import arrow_schema, record_batch
from sweep.models.base import CATALOG_FIELDS, Step, efficiency_figures
from sweep.runner.layouts import with_layouts
from sweep.runner.run import RunResult, Shard, run_grid

#: Points `evaluate` and `decide` hold in memory at most (about 1 KB each).
MAX_IN_MEMORY = 5_000_000


def load_grid(path: str | Path, catalog: Catalog | None = None, *,
              allow_outside: Sequence[str | Path] = ()) -> GridSpec:
    """Read and validate a grid file (`sweep.errors.GridError` on any problem). The trace and
    profile files it names must lie in its folder or under a folder of `allow_outside`."""
    return load(path, catalog=catalog, allow_outside=allow_outside)


def grid_from_dict(doc: Mapping[str, Any], *, source: str = "<dict>", catalog: Catalog | None = None,
                   allow_outside: Sequence[str | Path] = ()) -> GridSpec:
    """Validate a grid given as a dict shaped like the TOML file (`name`, `grid`, ...). Its
    relative paths resolve against the folder of `source` (the working folder for "<dict>")
    and must stay there or under a folder of `allow_outside`."""
    return build(doc, source=source, text=repr(dict(doc)), catalog=catalog, allow_outside=allow_outside)


def _dictionaries(spec: GridSpec) -> dict[str, list[str]]:
    return dictionaries([m.name for m in spec.models], [g.name for g in spec.gpus], gpu_keys=spec.model.part_gpu_keys)


def _check_size(spec: GridSpec) -> None:
    if spec.n_points > MAX_IN_MEMORY:
        raise OutputError(f"{spec.source}: {spec.n_points:,} points do not fit in memory (at most {MAX_IN_MEMORY:,}); "
                          "use sweep.run(spec, out_dir), which streams to Parquet")


def evaluate(spec: GridSpec, columns: Sequence[str] | None = None, *, chunk_size: int = DEFAULT_CHUNK) -> pa.Table:
    """Every point of `spec` as an Arrow table (all point columns, or `columns`)."""
    _check_size(spec)
    cols = [c for c in spec.point_columns() if columns is None or c.name in columns]
    schema = arrow_schema(cols, {"grid_name": spec.name, "grid_sha256": spec.sha256})
    names = _dictionaries(spec)
    batches = [record_batch(chunk.columns, schema, names) for chunk in Evaluator(spec, chunk_size).iter_chunks()]
    return pa.Table.from_batches(batches, schema=schema)


def decide(spec: GridSpec, *, chunk_size: int = DEFAULT_CHUNK) -> tuple[pa.Table, pa.Table]:
    """optimum and frontier of `spec` as Arrow tables (the files `sweep run` writes)."""
    _check_size(spec)
    every = spec.point_columns()
    meta = {"grid_name": spec.name, "grid_sha256": spec.sha256}
    opt_schema = arrow_schema(optimum_columns(spec.model, every, layouts=False), meta)
    front_schema = arrow_schema(frontier_columns(every, spec.model), meta)
    names = _dictionaries(spec)
    ev = Evaluator(spec, chunk_size)
    opt, front = [], []
    for chunk in ev.iter_chunks():
        opt.append(record_batch(optimum_rows(spec.model, chunk.columns, chunk.rows, ev.row_size, spec.rows_per_group),
                                opt_schema, names))
        front.append(record_batch(frontier_rows(chunk.columns, ev.row_size, spec.rows_per_group), front_schema, names))
    optimum = pa.Table.from_batches(opt, schema=opt_schema)
    if has_layouts(spec):  # the verdict against one pool (sweep.decide.layouts)
        optimum = with_layouts(spec, optimum)
    return optimum, pa.Table.from_batches(front, schema=front_schema)


def run(spec: GridSpec, out_dir: str | Path, *, shard: str | None = None, force: bool = False,
        chunk_size: int = DEFAULT_CHUNK) -> RunResult:
    """Evaluate `spec` and write points/, optimum, frontier and manifest to `out_dir`
    (resumable, atomic; the same as `sweep run GRID --out OUT`)."""
    return run_grid(spec, out_dir, chunk_size=chunk_size, shard=Shard.parse(shard) if shard else None, force=force)


@dataclass
class Explanation:
    """One point of a grid, evaluated, and its derivation (`sweep explain`)."""

    grid: str
    point_id: int
    model: str  # serving/latency_model
    row: dict[str, Any]  # every column, file units; names decoded; +inf where unbounded
    steps: list[Step] | None  # None: the serving model has no derivation yet
    figures: dict[str, float] = field(default_factory=dict)  # the catalog figures of its model and GPU
    #: why this point: its scenario group's recommendation, or why the group has none ("" when
    #: the point was named by --point or by a decision axis)
    chosen: str = ""
    #: a disaggregated point: its scenario group's verdict against one pool (`sweep.decide.layouts`)
    layout: str = ""


def recommendation(run_dir: str | Path, group: int | None = None,
                   filters: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The recommendation of a finished run (`sweep.decide.recommend.recommendation`): of
    scenario group `group`, or the cheapest over the groups whose optimum.parquet columns equal
    `filters` (e.g. {"model": "llama-3.1-70b", "arrival_rps": 40.0}); None when none has one."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from sweep.io.published import check_run
    from sweep.models import get_model

    manifest = check_run(Path(run_dir))
    serving, latency_model = manifest.get("serving"), manifest.get("latency_model")
    model = get_model(serving, latency_model) if serving else get_model(latency_model=latency_model)
    table = pq.read_table(Path(run_dir) / "optimum.parquet")
    for key, value in (filters or {}).items():
        if key not in table.column_names:
            raise OutputError(f"{run_dir}: recommendation filter {key}={value}: optimum.parquet has no column {key!r}")
        col = table.column(key)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        table = table.filter(pc.fill_null(pc.equal(col, value), False))
    return recommend_one(table.to_pydict(), model, group)


def point_id_of(spec: GridSpec, filters: Mapping[str, str]) -> int:
    """The first point in grid order whose axes take the given values (names or numbers)."""
    index = 0
    for axis in spec.axes:
        if axis.key not in filters:
            pos = 0
        else:
            text = filters[axis.key]
            names = [str(v.name) if hasattr(v, "name") else v for v in axis.values]
            try:
                pos = next(i for i, v in enumerate(names)
                           if (str(v) == text if isinstance(v, str) else float(v) == float(text)))
            except (StopIteration, ValueError):
                shown = ", ".join(str(v) for v in names[:12]) + (", ..." if len(names) > 12 else "")
                raise GridError(spec.source, f"grid.{axis.key}", text,
                                f"is not one of the grid's values ({shown})") from None
        index = index * len(axis) + pos
    unknown = sorted(set(filters) - {a.key for a in spec.axes})
    if unknown:
        keys = [a.key for a in spec.axes]
        raise GridError(spec.source, unknown[0], filters[unknown[0]],
                        f"is not an axis of this grid{did_you_mean(unknown[0], keys)}; choose among {', '.join(keys)}")
    return index


def explain(spec: GridSpec, point_id: int | None = None, filters: Mapping[str, str] | None = None) -> Explanation:
    """Evaluate one point and derive it: `point_id`, or where `filters` name a decision axis
    (replicas, the cap, a knob) the first point matching them, else the recommendation of the
    first scenario group matching them (`sweep.decide.recommend`: what `sweep run`, `sweep
    show`, `sweep report` and optimum.parquet recommend), or that group's first point when it
    has none."""
    filters = filters or {}
    pid = point_id_of(spec, filters) if point_id is None else int(point_id)
    if not 0 <= pid < spec.n_points:
        raise GridError(spec.source, "--point", pid,
                        f"must lie in [0, {spec.n_points - 1}] (the grid's point_id range)")
    ev = Evaluator(spec, chunk_size=spec.group_size)
    chunk = ev.chunk(pid // ev.chunk_size)
    chosen = ""
    if point_id is None and not set(filters) & set(spec.model.decisions.decision_axes):
        rec, _ = picks(spec.model, chunk.columns, spec.group_size)
        if rec[0] >= 0:
            pid = chunk.start + int(rec[0])
            chosen = ("the recommendation of its scenario group (group_id "
                      f"{pid // spec.group_size}): the cheapest configuration meeting every SLO with rho <= rho_max")
        else:
            binding = REASONS[int(np.max(chunk.rows["reason"]))]
            chosen = (f"its scenario group (group_id {pid // spec.group_size}) has no recommendation "
                      f"({binding} binds): its first point")
    i = pid - chunk.start
    names = _dictionaries(spec)
    row: dict[str, Any] = {}
    for c in spec.point_columns():
        v = chunk.columns[c.name][i]
        row[c.name] = names[c.name][int(v)] if c.dtype == "dict" else v.item()
    tables = catalog_tables(spec)
    m, g = int(chunk.columns["model"][i]), int(chunk.columns["gpu"][i])
    figures = {k: float(tables[k][m if axis == "model" else g]) for k, axis in CATALOG_FIELDS.items()}
    if "gpus_per_replica" in row:  # the point's (gpu, size class, tp) efficiency cell, as the engine uses
        figures.update(efficiency_figures(spec.models[m], spec.gpus[g], float(row["gpus_per_replica"])))
    options = {"kv_allocation": spec.options.kv_allocation, "block_tokens": spec.options.block_tokens,
               "reserve_fraction": spec.options.reserve_fraction,
               "scheduler_policy": spec.options.scheduler_policy, "scheduler_steps": spec.options.scheduler_steps}
    steps = spec.model.derivation(row, figures, options)
    layout = _group_layout(spec, ev, chunk, row) if has_layouts(spec) else ""
    return Explanation(spec.name, pid, f"{spec.model.serving}/{spec.model.name}", row, steps, figures, chosen,
                       layout)


def _group_layout(spec: GridSpec, ev: Evaluator, chunk: Any, row: Mapping[str, Any]) -> str:
    """A disaggregated point's scenario group against the best aggregated configuration of
    its workload (`sweep.decide.layouts`), in words."""
    every = spec.point_columns()
    schema = arrow_schema(optimum_columns(spec.model, every, layouts=False), {})
    table = pa.Table.from_batches([record_batch(
        optimum_rows(spec.model, chunk.columns, chunk.rows, ev.row_size, spec.rows_per_group), schema,
        _dictionaries(spec))])
    companion = layout_companion(spec, {k: row[k] for k in row if k in SHARED_KEYS})
    first = with_layouts(spec, table, companion).slice(0, 1).to_pylist()[0]
    return f"{verdict_text(first)}; one pool: {aggregated_text(first)}"
