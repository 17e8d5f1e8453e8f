"""The search phase of a run is heard (issue 27, item 4): while the Optuna studies of a
`[search]` table run, the progress bar and the JSON log say trials done of the budget, the
trials told per second and an ETA, and the best feasible value so far; the manifest times
the search apart from the grid's evaluation (`timings_s.search`).

The reporter's own tests move its clock by hand: no line depends on the machine's speed."""

from __future__ import annotations

import io
import json
import tomllib

import pyarrow.parquet as pq
from _search import SEED_GRID

from sweep import grid as spec_mod
from sweep.runner import run_grid
from sweep.runner.progress import ProgressReporter
from sweep.search.study import SearchStatus


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def _status(done: int, told: int, best: float | None = None, study: int = 1) -> SearchStatus:
    return SearchStatus(study=f"g/arrival_rps={study}/abc", study_index=study, studies=2, done=done, total=200,
                        told=told, objective="min_cost", best=best, best_trial=None if best is None else 7,
                        feasible=0 if best is None else 3)


def test_search_lines_count_trials_rate_the_told_ones_and_carry_the_best():
    buf, clock = io.StringIO(), Clock()
    with ProgressReporter("g", "log", interval_s=10.0, stream=buf, clock=clock, heartbeat=False) as p:
        p(5, 5, 5)  # the grid's points: its last line
        clock.now += 1.0
        p.search(_status(done=20, told=0))  # study 1 opens with 20 trials resumed from the storage: a line
        clock.now += 4.0
        p.search(_status(done=60, told=40, best=14.4))  # within the interval: no line
        clock.now += 6.0
        p.search(_status(done=80, told=60, best=12.0))  # 10 s since the last line
        clock.now += 1.0
        p.search(_status(done=100, told=80, best=12.0, study=2))  # study 2 opens: a line
        clock.now += 10.0
        p.beat()  # a round computing: the last state repeated
        p.search(_status(done=200, told=180, best=9.5, study=2))  # the end: a line
    lines = _lines(buf)
    assert [x["event"] for x in lines] == ["start", "progress", "search", "search", "search", "search", "search",
                                           "done"]
    first, mid, second, beat, end = lines[2:7]
    assert (first["done"], first["total"], first["pct"], first["best"], first["eta_s"]) == (20, 200, 10.0, None, None)
    # 60 trials told over the 10 s since the search began (the 20 resumed ones are not a rate)
    assert mid["trials_per_s"] == 6.0 and mid["eta_s"] == round(120 / 6.0, 1)
    assert (mid["best"], mid["best_trial"], mid["objective"], mid["feasible"]) == (12.0, 7, "min_cost", 3)
    assert (second["study"], second["studies"], second["done"]) == (2, 2, 100)
    assert beat["done"] == 100 and beat["trials_per_s"] == round(80 / 21.0, 2)  # the state repeated, rated now
    assert (end["done"], end["pct"], end["eta_s"], end["best"]) == (200, 100.0, 0.0, 9.5)


def test_a_search_run_logs_its_trials_and_the_manifest_times_it_apart(tmp_path):
    # the seed example searched over batch_size 1..64 x replicas 1..8 (tests/_search.py), two
    # studies (two arrival rates) of 48 trials in rounds of 16
    text = SEED_GRID.format(objective='"min_cost"', trials=48, batch=16, storage="memory", slo=300.0,
                            rates="[100.0, 150.0]")
    spec = spec_mod.build(tomllib.loads(text), source="seed-search.toml", text=text)
    buf = io.StringIO()
    with ProgressReporter(spec.name, "log", interval_s=3600.0, stream=buf, heartbeat=False) as p:
        result = run_grid(spec, tmp_path / "o", progress=p, note=p.note)
    lines = [x for x in _lines(buf) if x["event"] == "search"]
    # each study opening, and the end of the budget: trials done/total, a rate, an ETA, the best
    assert [(x["study"], x["done"]) for x in lines] == [(1, 0), (2, 48), (2, 96)]
    assert all(x["total"] == 96 and x["objective"] == "min_cost" for x in lines)
    end = lines[-1]
    assert end["pct"] == 100.0 and end["eta_s"] == 0.0 and end["trials_per_s"] > 0
    answers = pq.read_table(tmp_path / "o" / "search.parquet").to_pylist()
    study2 = next(a for a in answers if a["study_name"] == end["study_name"])
    # the best so far at the end is the study's answer
    assert end["best"] == study2["objective_value"] and end["best_trial"] == study2["trial_number"]
    assert end["feasible"] == study2["feasible_trials"] > 0
    timings = result.manifest["timings_s"]
    assert {"evaluate", "write", "total", "search"} <= set(timings) and timings["search"] > 0
    assert timings["points_per_s"] == round(result.manifest["shard"]["points"][1] / timings["total"], 1) or \
        abs(timings["points_per_s"] - result.manifest["shard"]["points"][1] / timings["total"]) < 1.0
