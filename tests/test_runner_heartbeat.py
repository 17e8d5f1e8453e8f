"""Progress (issue 13, item 7): the runner reports after every chunk whatever the segment
size, the log mode writes a line at least every --log-interval seconds (a heartbeat while a
chunk computes), and rates count only the points this process computed (after a resume the
sealed segments neither inflate the rate nor shorten the ETA).

The reporter's tests move its clock by hand and call its heartbeat themselves: no sleep,
no line that depends on how fast the machine is."""

from __future__ import annotations

import io
import json
import threading

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


class Clock:
    """The reporter's clock, moved by hand: what a line says depends on the test alone."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_log_lines_name_resumed_points_and_rate_the_computed_ones():
    buf, clock = io.StringIO(), Clock()
    with ProgressReporter("g", "log", interval_s=1000.0, stream=buf, clock=clock, heartbeat=False) as p:
        clock.now += 2.0
        p(900, 1000, 100)
        p(1000, 1000, 200)
    lines = _lines(buf)
    assert [x["event"] for x in lines] == ["start", "progress", "done"]  # the end, once; nothing before the interval
    line = lines[1]
    assert line["resumed"] == 800 and line["done"] == 1000
    assert line["points_per_s"] == 100.0  # the 200 points computed over 2 s, not the 1000 done
    assert lines[-1]["elapsed_s"] == 2.0


def test_a_heartbeat_every_interval_while_nothing_reports():
    buf, clock = io.StringIO(), Clock()
    with ProgressReporter("g", "log", interval_s=1.0, stream=buf, clock=clock, heartbeat=False) as p:
        for _ in range(3):  # compiling: no report yet
            clock.now += 1.0
            p.beat()
        p(10, 100, 10)  # within the interval of the last line: no line
        clock.now += 0.5
        p.beat()  # one long chunk: not yet an interval since the last line
        for _ in range(2):
            clock.now += 1.0
            p.beat()
    events = _lines(buf)
    assert [(e["event"], e.get("done")) for e in events] == [
        ("start", None), ("progress", 0), ("progress", 0), ("progress", 0), ("progress", 10), ("progress", 10), ("done", None)]
    assert all(e["note"] == "compiling or computing the first chunk" and e["total"] is None for e in events[1:4])
    assert events[4]["total"] == 100 and events[4]["pct"] == 10.0  # the last state, repeated
    assert [e["points_per_s"] for e in events[4:6]] == [2.2, 1.8]  # 10 points over 4.5 s, then 5.5 s
    assert events[-1]["elapsed_s"] == 5.5


def test_the_heartbeat_thread_beats_until_the_reporter_closes(monkeypatch):
    """The thread that calls `beat` in a run: started in log mode, stopped and joined on
    exit; `heartbeat=False` starts none (the tests above drive `beat` themselves)."""
    beaten = threading.Event()
    monkeypatch.setattr(ProgressReporter, "beat", lambda self: beaten.set())
    with ProgressReporter("g", "log", interval_s=0.001, stream=io.StringIO()) as p:
        assert beaten.wait(timeout=60)
        thread = p._heart
    assert thread is not None and not thread.is_alive()
    with ProgressReporter("g", "log", stream=io.StringIO(), heartbeat=False) as p:
        assert p._heart is None
