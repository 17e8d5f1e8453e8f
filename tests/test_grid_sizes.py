"""Sizes are refused before any work: an axis longer than `MAX_AXIS_VALUES`, a grid of more
than `MAX_POINTS` points. Counted by arithmetic, never by building the axis: each refusal
runs a few thousand lines of Python, allocates next to nothing, and through `sweep run`
exits 2 and writes nothing (the audit's 10^9-10^12-value ranges and 1e27-point grid).

Work is measured by what the machine's speed does not change: lines of Python executed
(`sys.settrace`) and peak bytes allocated (`tracemalloc`). Building even one axis of 10^6
values exceeds either budget by far, and a refusal that goes over one is stopped there,
rather than left to run for as long as building 10^12 values takes.
"""

from __future__ import annotations

import contextlib
import sys
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import sweep
from sweep.cli import main
from sweep.errors import GridError
from sweep.grid.load import MAX_POINTS
from sweep.grid.values import MAX_AXIS_VALUES

BASE = {"arrival_rps": 100.0, "batch_size": [1, 8], "seq_len": 2048, "model": "gpt3-175b", "gpu": "a100-80gb",
        "t_fixed_ms": 50.0, "t_req_ms": 0.5, "slo_ms": 200.0}


#: Lines of Python, and peak bytes allocated, that refusing a grid may take: measured, a
#: long range 171-405 lines and under 20 KB, the 1e27-point grid 4,322 lines and 60 KB.
REFUSAL_LINES = 20_000
REFUSAL_BYTES = 1 << 20
#: The same for `sweep run` refusing one, once its modules are imported and its catalog
#: loaded: measured 29,791 and 36,584 lines, under 160 KB.
RUN_LINES = 200_000


class TooMuchWork(BaseException):
    """Raised inside the measured code: a BaseException, so that no `except Exception` in
    the code under test takes it for an error of its own."""


@dataclass
class Work:
    lines: int = 0
    peak_bytes: int = 0


@contextlib.contextmanager
def measured(max_lines: int, max_bytes: int = REFUSAL_BYTES) -> Iterator[Work]:
    """Count the lines of Python the block executes and its peak allocation; stop it with
    `TooMuchWork` as soon as it goes over either budget."""
    work = Work()

    def line(frame, event, arg):
        if event == "line":
            work.lines += 1
            if work.lines > max_lines or tracemalloc.get_traced_memory()[0] > max_bytes:
                raise TooMuchWork(f"over budget: {work.lines:,} lines of Python, "
                                  f"{tracemalloc.get_traced_memory()[0]:,} bytes held")
        return line

    def call(frame, event, arg):
        return line

    before = sys.gettrace()
    tracemalloc.start()
    sys.settrace(call)
    try:
        yield work
    finally:
        sys.settrace(before)
        work.peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert work.lines <= max_lines and work.peak_bytes <= max_bytes, work


def refused(grid: dict, budget: bool = True) -> str:
    """The message of loading a grid that must be refused, within the refusal's budgets
    (`budget`) or not."""
    with measured(REFUSAL_LINES) if budget else contextlib.nullcontext(), pytest.raises(GridError) as info:
        sweep.grid_from_dict({"name": "big", "grid": {**BASE, **grid}})
    return str(info.value)


LONG = [
    ("num 1e9", "arrival_rps", {"start": 1.0, "stop": 1e9, "num": 10**9}, 10**9),
    ("num 1e12", "slo_ms", {"start": 1.0, "stop": 1e9, "num": 10**12, "scale": "log"}, 10**12),
    ("step 1e9", "arrival_rps", {"start": 1e-6, "stop": 1e9, "step": 1.0}, 10**9),
    ("step 1e12", "batch_window_ms", {"start": 0.0, "stop": 1e7, "step": 1e-5}, 10**12),
    ("int num", "batch_size", {"start": 1, "stop": 1_000_000, "num": 10**10}, 10**10),
]


@pytest.mark.parametrize("what,key,table,n", LONG, ids=[x[0] for x in LONG])
def test_a_long_range_is_refused_with_its_size_before_it_is_built(what, key, table, n):
    msg = refused({key: table})  # nothing built: within the budgets
    assert f"grid.{key}" in msg and "at most 1,000,000" in msg and "\n" not in msg, msg
    count = int(msg.split("asks for ")[1].split(" values")[0].replace(",", ""))
    assert abs(count - n) <= 1, msg  # a float step counts to within its rounding


def test_a_subnormal_step_is_refused_not_overflowed():
    msg = refused({"arrival_rps": {"start": 1.0, "stop": 2.0, "step": 5e-324}})
    assert "grid.arrival_rps" in msg and "at most 1,000,000" in msg, msg


def test_a_long_list_is_refused_with_its_length():
    msg = refused({"arrival_rps": [1.0] * (MAX_AXIS_VALUES + 1)}, budget=False)  # (the list exists already)
    assert "grid.arrival_rps = [1.0, 1.0" in msg and f"has {MAX_AXIS_VALUES + 1:,} values" in msg, msg


def test_the_longest_axis_is_accepted():
    spec = sweep.grid_from_dict({"name": "long", "grid": {**BASE, "slo_ms": {"start": 1.0, "stop": 1e6, "num": MAX_AXIS_VALUES}}})
    assert len(spec.axis("slo_ms")) == MAX_AXIS_VALUES


#: Nine axes of 1000 values: 1e27 points.
KEYS9 = ("arrival_rps", "slo_ms", "mean_seq_len", "batch_size", "batch_window_ms", "t_fixed_ms", "t_req_ms",
         "replicas", "gpus_per_replica")
INTS = ("batch_size", "replicas", "gpus_per_replica")
HUGE = {k: {"start": 1, "stop": 1000, "num": 1000} if k in INTS else {"start": 1.0, "stop": 1000.0, "num": 1000}
        for k in KEYS9}


def test_a_1e27_point_grid_is_refused_in_the_loader_with_its_count():
    msg = refused(HUGE)
    assert msg.split(": ")[1].startswith("grid = ") and f"{10**27:,} points" in msg and f"{MAX_POINTS:.0e}" in msg, msg
    assert "arrival_rps 1,000" in msg and "\n" not in msg  # the shape that makes the count


def test_integer_ranges_count_after_dropping_repeats():
    """A log range of batch sizes asks for 10^6 values but holds 4096: the grid is counted
    with 4096, so it is not refused for points it does not have."""
    grid = dict(HUGE)
    del grid["gpus_per_replica"], grid["batch_window_ms"]  # six axes of 1000 x the batch axis
    grid["batch_size"] = {"start": 1, "stop": 4096, "num": MAX_AXIS_VALUES, "scale": "log"}
    msg = refused(grid, budget=False)  # its 10^6 values are built, to drop the repeats
    assert "batch_size 4,096" in msg and f"{10**18 * 4096:,} points" in msg, msg


def test_the_largest_grid_is_counted_exactly():
    """MAX_POINTS itself passes the count; one more point does not."""
    from sweep.grid.load import check_points

    assert check_points({"a": 10**5, "b": 10**5, "c": 10**5}, "g.toml") == MAX_POINTS
    with pytest.raises(GridError, match="points"):
        check_points({"a": 10**5, "b": 10**5, "c": 10**5 + 1}, "g.toml")
    assert MAX_POINTS < 2**53  # the flat point id decodes exactly through float64 strides


def _toml(v: object) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return f'"{v}"' if isinstance(v, str) else repr(v)


@pytest.mark.parametrize("grid", [
    {"arrival_rps": {"start": 1.0, "stop": 1e9, "num": 10**12}},
    HUGE,
], ids=["range 1e12", "grid 1e27"])
def test_sweep_run_refuses_with_one_line_exit_2_and_writes_nothing(tmp_path, capsys, grid):
    path = tmp_path / "big.toml"
    path.write_text('name = "big"\n[grid]\n' + "\n".join(f"{k} = {_toml(v)}" for k, v in {**BASE, **grid}.items()) + "\n")
    out = tmp_path / "out"
    argv = ["run", str(path), "--out", str(out)]
    assert main(argv) == 2  # imports the modules `sweep run` needs and loads the catalog: not counted
    capsys.readouterr()
    with measured(RUN_LINES):
        code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "points" in err or "values" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.toml"]  # no output folder, no staging
