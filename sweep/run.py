"""One grid run: evaluate chunk by chunk, stream to Parquet, publish atomically (SPEC 9)."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jax
import numpy as np

import sweep
from sweep import columns as cols
from sweep.evaluate import DEFAULT_CHUNK, SERVICE_SOURCES, Evaluator
from sweep.decide import REASONS
from sweep.kernels import ACTIONS
from sweep.reduced import frontier_rows, optimum_rows
from sweep.spec import GridSpec
from sweep.writers import DatasetWriter, Staging, arrow_schema, record_batch

#: Grids at most this large keep every row in memory for the terminal summary.
SUMMARY_ROWS = 64

Progress = Callable[[int, int], None]  # (points done, points total)


@dataclass
class RunResult:
    out_dir: Path
    manifest: dict[str, Any]
    rows: dict[str, np.ndarray] | None  # every point, for small grids (terminal summary)
    action_counts: dict[str, int] = field(default_factory=dict)
    feasible: int = 0


def provenance(spec: GridSpec) -> dict[str, Any]:
    """What a reader of any output file needs to know where it came from."""
    return {
        "sweep_version": sweep.__version__,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "grid_name": spec.name,
        "grid_file": spec.source,
        "grid_sha256": spec.sha256,
        "grid_toml": spec.text,
        "service_source": spec.service_source,
        "service_fit": getattr(spec, "fit", None),  # profile fit (file, T_fixed, t_req, R^2) when "fitted"
        "latency_model": spec.options.latency_model,
        "kv_allocation": spec.options.kv_allocation,
    }


def run_grid(
    spec: GridSpec, out_dir: str | Path, *, chunk_size: int = DEFAULT_CHUNK, progress: Progress | None = None
) -> RunResult:
    """Evaluate every point of `spec` and write `out_dir/points/` and `manifest.json`."""
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    staging = Staging(out_dir)
    try:
        result = _run(spec, out_dir, staging, chunk_size, progress, t0)
    except BaseException:
        staging.abort()
        raise
    return result


def _run(spec: GridSpec, out_dir: Path, staging: Staging, chunk_size: int, progress: Progress | None, t0: float) -> RunResult:
    meta = provenance(spec)
    evaluator = Evaluator(spec, chunk_size)
    columns = cols.point_columns(spec.service_source)
    schema = arrow_schema(columns, meta)
    dictionaries = {
        "model": [m.name for m in spec.models],
        "gpu": [g.name for g in spec.gpus],
        "action": list(ACTIONS),
        "service_source": list(SERVICE_SOURCES),
    }
    mode = spec.output.points
    writer = DatasetWriter(staging.path / "points", schema) if mode != "none" else None
    dictionaries["reason"] = list(REASONS)
    dictionaries["method"] = ["exact"]
    opt_schema = arrow_schema(cols.optimum_columns(spec.service_source), meta)
    front_schema = arrow_schema(cols.frontier_columns(spec.service_source), meta)
    opt_writer = DatasetWriter(staging.path, opt_schema, single_file="optimum.parquet")
    front_writer = DatasetWriter(staging.path, front_schema, single_file="frontier.parquet")
    n_replicas = len(spec.axis("replicas"))
    keep_rows = spec.n_points <= SUMMARY_ROWS
    kept: list[dict[str, np.ndarray]] = []
    action_counts = np.zeros(len(ACTIONS), dtype=np.int64)
    feasible = 0
    t_first = t_eval = t_write = 0.0
    done = 0
    tick = time.perf_counter()
    for chunk in evaluator.iter_chunks():
        now = time.perf_counter()
        if chunk.index == 0:
            t_first = now - tick  # includes compilation
        else:
            t_eval += now - tick
        data = chunk.columns
        action_counts += np.bincount(data["action"], minlength=len(ACTIONS))
        mask = data["feasible"]
        feasible += int(mask.sum())
        if keep_rows:
            kept.append(data)
        if writer is not None:
            w0 = time.perf_counter()
            batch = record_batch(data, schema, dictionaries)
            if mode == "feasible":
                batch = batch.filter(mask)
            writer.write(batch)
            t_write += time.perf_counter() - w0
        w0 = time.perf_counter()
        opt_writer.write(record_batch(optimum_rows(chunk, evaluator.row_size, n_replicas), opt_schema, dictionaries))
        front_writer.write(record_batch(frontier_rows(chunk, evaluator.row_size, n_replicas), front_schema, dictionaries))
        t_write += time.perf_counter() - w0
        done += len(chunk)
        if progress is not None:
            progress(done, spec.n_points)
        tick = time.perf_counter()
    w0 = time.perf_counter()
    for w in (writer, opt_writer, front_writer):
        if w is not None:
            w.close()
    t_write += time.perf_counter() - w0
    counts = {a: int(n) for a, n in zip(ACTIONS, action_counts)}
    manifest = {
        **{k: v for k, v in meta.items() if k != "grid_toml"},
        "grid": {"file": spec.source, "sha256": spec.sha256, "toml": spec.text},
        "jax": {"version": jax.__version__, "backend": jax.default_backend(), "x64": bool(jax.config.jax_enable_x64)},
        "python": platform.python_version(),
        "axes": {a.key: len(a) for a in spec.axes},
        "estimates": ["gaussian", "exponential"],
        "rows": {
            "grid_points": spec.n_points,
            "points_written": writer.rows if writer is not None else 0,
            "points_mode": mode,
            "optimum": opt_writer.rows,
            "frontier": front_writer.rows,
            "feasible": feasible,
            "actions": counts,
        },
        "files": {
            "points": [str(p.relative_to(staging.path)) for p in writer.files] if writer else [],
            "optimum": "optimum.parquet",
            "frontier": "frontier.parquet",
        },
        "decisions": {"method": "exact", "row_axes": ["batch_window_ms", "batch_size"], "group_axis": "replicas"},
        "chunks": {"size": evaluator.chunk_size, "count": evaluator.n_chunks, "compilations": evaluator.compile_count()},
        "timings_s": {
            "first_chunk_incl_compile": round(t_first, 4),
            "evaluate": round(t_eval, 4),
            "write": round(t_write, 4),
            "total": round(time.perf_counter() - t0, 4),
        },
    }
    manifest["timings_s"]["points_per_s"] = round(spec.n_points / max(manifest["timings_s"]["total"], 1e-9), 1)
    staging.commit(manifest)
    rows = {k: np.concatenate([d[k] for d in kept]) for k in kept[0]} if kept else None
    return RunResult(out_dir, manifest, rows, counts, feasible)
