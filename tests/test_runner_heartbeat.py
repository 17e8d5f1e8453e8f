"""Progress (issue 13, item 7): the runner reports after every chunk whatever the segment
size, the log mode writes a line at least every --log-interval seconds (a heartbeat while a
chunk computes), and rates count only the points this process computed (after a resume the
sealed segments neither inflate the rate nor shorten the ETA)."""

from __future__ import annotations

import io
import json
import time

import pytest

import sweep
from sweep.runner import run_grid
from sweep.runner.progress import ProgressReporter

GRID = {"name": "beat", "grid": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "seq_len": 2048,
                                 "arrival_rps": [10.0, 20.0, 40.0, 80.0], "batch_size": [1, 2, 4, 8],
                                 "t_fixed_ms": 10.0, "t_req_ms": 1.0, "slo_ms": 100.0}}


def _lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_the_runner_reports_every_chunk_within_a_segment(tmp_path):
    calls: list[tuple[int, int, int]] = []
    spec = sweep.grid_from_dict(GRID)
    run_grid(spec, tmp_path / "o", chunk_size=4, segment_points=1 << 20,
             progress=lambda done, total, computed: calls.append((done, total, computed)))
    chunk_calls = [c for c in calls if c[0] < c[1]]
    assert len(chunk_calls) >= 3  # one segment of 16 points in chunks of 4: a report per chunk
    assert calls[-1] == (16, 16, 16)


def test_a_resumed_run_rates_only_what_it_computed(tmp_path):
    spec = sweep.grid_from_dict(GRID)

    def interrupt(done: int, total: int, computed: int) -> None:
        if done >= 8:  # two segments of 4 points sealed
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_grid(spec, tmp_path / "o", chunk_size=4, segment_points=4, progress=interrupt)
    calls: list[tuple[int, int, int]] = []
    run_grid(spec, tmp_path / "o", chunk_size=4, segment_points=4, progress=lambda *a: calls.append(a))
    assert calls[-1][0] == 16 and calls[-1][2] < 16  # done counts the resumed segments, computed does not


def test_log_lines_name_resumed_points_and_rate_the_computed_ones():
    buf = io.StringIO()
    with ProgressReporter("g", "log", interval_s=1000.0, stream=buf) as p:
        time.sleep(0.05)
        p(900, 1000, 100)
        p(1000, 1000, 200)
    line = [x for x in _lines(buf) if x["event"] == "progress"][-1]
    assert line["resumed"] == 800 and line["done"] == 1000
    assert line["points_per_s"] < 200 / 0.05  # 200 points over at least 50 ms, not 1000


def test_a_heartbeat_every_interval_while_nothing_reports():
    buf = io.StringIO()
    with ProgressReporter("g", "log", interval_s=0.2, stream=buf) as p:
        time.sleep(0.7)  # compiling: no report yet
        p(10, 100, 10)
        time.sleep(0.7)  # one long chunk
    events = _lines(buf)
    beats = [e for e in events if e["event"] == "progress"]
    assert len(beats) >= 4, events
    assert any(e["done"] == 0 for e in beats) and any(e["done"] == 10 for e in beats)
    assert events[0]["event"] == "start" and events[-1]["event"] == "done"
