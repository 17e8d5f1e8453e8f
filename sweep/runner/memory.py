"""`--memory-limit MB`: the chunk size, row-group size and simulator budget that keep a run
near a memory limit, or a refusal naming the least the run needs.

A run's peak resident memory is, measured in fresh processes on this engine (2-core x86,
JAX 0.10 CPU, pyarrow 26; `benchmarks/scale.py` and `tests/test_runner_memory.py`):

    peak ~ BASE + model.compile_mb + chunk x BYTES_PER_POINT
                + (points written) WRITER_COPIES x row_group_rows x bytes per row
                + (simulated grids) the simulator's lane buffers

BASE (Python, JAX, XLA, pyarrow, rich, and compiling the window proxy's chunk function) is
600 MB when the chunk function is compiled in the run (it was 530 MB when first measured,
2026-11-30; re-measured 2026-12-05 on JAX 0.10: 545-560 MB for the compiled run, about 35 MB
more when a grid's last, shorter chunk compiles a second program, and about 40 bytes per
grid point of bookkeeping, 40 MB at a million points); a point of a chunk costs 1.7-3 KB
across the device output, the host view, the record batches and the decisions (2.5 KB
planned); the points writer holds its buffer, the two row groups its encoders have in flight
and their pages, measured at 10-25 times a row group's raw bytes on the test grid of
`tests/test_runner_memory.py` (12 planned; 4 until 2026-12-05, when that test's peaks were
1.24-1.26 times the 600 and 800 MB limits). The plan gives the points writer at most 40% of
what is left, the chunk the rest, and the simulator half of the chunk's share.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweep.errors import OutputError
from sweep.grid.spec import GridSpec

BASE_MB = 600
BYTES_PER_POINT = 2500
WRITER_COPIES = 12
MIN_CHUNK = 4096
MAX_CHUNK = 1 << 20
MIN_ROW_GROUP = 1024
_DTYPE_BYTES = {"float64": 8, "int64": 8, "bool": 1, "dict": 4}


@dataclass(frozen=True)
class MemoryPlan:
    chunk_size: int
    row_group_rows: int | None  # None: the grid's own
    sim_budget_bytes: int | None  # None: the simulator's default


def bytes_per_row(spec: GridSpec) -> int:
    cols = [c for c in spec.point_columns() if not spec.output.columns or c.name in spec.output.columns]
    return sum(_DTYPE_BYTES[c.dtype] for c in cols)


def plan_memory(spec: GridSpec, limit_mb: int) -> MemoryPlan:
    """The plan for `limit_mb`, or `OutputError` when the grid needs more than that."""
    fixed = BASE_MB + spec.model.compile_mb
    writes = spec.output.points != "none"
    row_bytes = bytes_per_row(spec)
    least_writer = WRITER_COPIES * MIN_ROW_GROUP * row_bytes if writes else 0
    floor_mb = int(fixed + (MIN_CHUNK * BYTES_PER_POINT + least_writer) / 1e6) + 1
    if limit_mb < floor_mb:
        raise OutputError(f"--memory-limit {limit_mb}: this grid needs at least {floor_mb} MB "
                          f"(measured: {BASE_MB} MB for Python, JAX and pyarrow, "
                          f"{spec.model.compile_mb} MB to compile the {spec.model.name} model, "
                          f"and the smallest chunk{' and row groups' if writes else ''}); give at least {floor_mb}")
    avail = (limit_mb - fixed) * 1e6
    row_group: int | None = None
    if writes:
        wanted = WRITER_COPIES * spec.output.row_group_rows * row_bytes
        writer = min(wanted, max(least_writer, 0.4 * avail))
        if writer < wanted:
            row_group = max(MIN_ROW_GROUP, int(writer / (WRITER_COPIES * row_bytes)))
        avail -= WRITER_COPIES * (row_group or spec.output.row_group_rows) * row_bytes
    sim_budget = None
    if spec.simulation is not None:
        sim_budget = int(max(avail * 0.5, 16e6))
        avail -= sim_budget
    chunk = int(min(MAX_CHUNK, max(MIN_CHUNK, avail / BYTES_PER_POINT)))
    return MemoryPlan(chunk, row_group, sim_budget)
