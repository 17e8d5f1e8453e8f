"""`[schedule]` validation (SPEC 8 rules applied to SPEC 12's table): every bad key is one
line naming the file, the key, the value and the rule, exit 2, nothing written; and the
profile forms (a day, a week as 168 values or 7 x 24, a trace) read as documented."""

from __future__ import annotations

import pytest

from sweep.cli import main
from sweep.errors import GridError
from sweep.grid import load
from sweep.grid.schedule import bin_trace

BASE = """
name = "s"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
seq_len = 1024
batch_size = [1, 8]
t_fixed_ms = 10.0
t_req_ms = 0.5
slo_ms = 500
replicas = [1, 2, 4]
%s
"""
DAY = [float(10 + h) for h in range(24)]


def _load(tmp_path, schedule, grid_extra=""):
    path = tmp_path / "g.toml"
    path.write_text(BASE.replace("replicas =", grid_extra + "\nreplicas =") % schedule)
    return load(path)


@pytest.mark.parametrize(
    ("schedule", "key", "rule"),
    [
        ("[schedule]\nramp = 1", "schedule", "exactly one of hourly_rps or trace"),
        (f'[schedule]\nhourly_rps = {DAY}\ntrace = "t.csv"', "schedule", "exactly one of"),
        ("[schedule]\nhourly_rps = [1.0, 2.0]", "schedule.hourly_rps", "24 hourly rates"),
        (f"[schedule]\nhourly_rps = {DAY[:23] + [-1.0]}", "schedule.hourly_rps[23]",
         "0 (no traffic that hour) or in [1e-06, 1e+09]"),
        (f"[schedule]\nhourly_rps = {DAY[:23] + [1e-7]}", "schedule.hourly_rps[23]", "[1e-06, 1e+09]"),
        (f"[schedule]\nhourly_rps = {DAY[:23]} \nhourly_rps_x = 1", "schedule.hourly_rps_x", "unknown schedule key"),
        (f"[schedule]\nhourly_rps = {DAY[:23] + ['nan']}", "schedule.hourly_rps[23]", "a rate"),
        (f"[schedule]\nhourly_rps = {[0.0] * 24}", "schedule.hourly_rps", "at least one hour with traffic"),
        ("[schedule]\nhourly_rps = [[1.0, 2.0]]", "schedule.hourly_rps", "7 lists of 24"),
        (f"[schedule]\nhourly_rps = {DAY}\nramp = 0", "schedule.ramp", "integer >= 1"),
        (f"[schedule]\nhourly_rps = {DAY}\nramp = 1.5", "schedule.ramp", "integer >= 1"),
        (f"[schedule]\nhourly_rps = {DAY}\nwarmup_hours = -1", "schedule.warmup_hours", "[0, 24]"),
        (f"[schedule]\nhourly_rps = {DAY}\nwarmup_hours = true", "schedule.warmup_hours", "[0, 24]"),
        (f'[schedule]\nhourly_rps = {DAY}\nperiod = "week"', "schedule.period", "trace only"),
        ('[schedule]\ntrace = "missing.csv"', "schedule.trace", "cannot be read"),
        ('[schedule]\ntrace = "t.csv"\nperiod = "month"', "schedule.period", '"day" or "week"'),
    ],
)
def test_bad_schedule_is_one_line_exit_2_nothing_written(tmp_path, capsys, schedule, key, rule):
    (tmp_path / "t.csv").write_text("".join(f"{3600 * h + 1}\n" for h in range(24)))
    path = tmp_path / "g.toml"
    path.write_text(BASE % schedule)
    out = tmp_path / "o"
    with pytest.raises(GridError) as exc:
        load(path)
    assert f": {key} = " in str(exc.value) and rule in str(exc.value)
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and key in err
    assert not out.exists()


def test_schedule_replaces_arrival_rps(tmp_path):
    with pytest.raises(GridError, match=r"grid\.arrival_rps.*drop arrival_rps"):
        _load(tmp_path, f"[schedule]\nhourly_rps = {DAY}", "arrival_rps = 5.0")
    spec = _load(tmp_path, f"[schedule]\nhourly_rps = {[0.0] + DAY[1:12] + DAY[1:13]}")
    assert spec.axis("arrival_rps").values == tuple(DAY[1:13])  # distinct positive rates, ascending
    assert spec.schedule.rate_index[0] == -1 and spec.schedule.rate_index[1] == 0


def test_week_forms_agree(tmp_path):
    week = [[d * 100.0 + h for h in range(24)] for d in range(7)]
    a = _load(tmp_path, f"[schedule]\nhourly_rps = {week}").schedule
    b = _load(tmp_path, f"[schedule]\nhourly_rps = {[r for day in week for r in day]}").schedule
    assert a.hourly_rps == b.hourly_rps and a.hours == 168 and a.days == 7


def test_trace_of_timestamps(tmp_path):
    """One line per request over 48 whole hours: hour h of day has (h + 1) requests on each
    day, so its rate is (h + 1) / 3600 req/s; a week profile needs 168 hours and says so."""
    lines = ["t"] + [f"{86400 * d + 3600 * h + 60 * i}" for d in range(2) for h in range(24) for i in range(h + 1)]
    (tmp_path / "t.csv").write_text("\n".join(lines))
    rates = bin_trace("t.csv", str(tmp_path / "g.toml"), 24)
    assert rates == pytest.approx([(h + 1) / 3600 for h in range(24)], rel=1e-15)
    with pytest.raises(GridError, match="needs every hour of the period"):
        bin_trace("t.csv", str(tmp_path / "g.toml"), 168)
    (tmp_path / "bad.csv").write_text("t\n5\n1,2\n")
    with pytest.raises(GridError, match=r"bad.csv:3"):
        bin_trace("bad.csv", str(tmp_path / "g.toml"), 24)


def test_weekly_trace_starts_monday(tmp_path):
    """1970-01-05 was a Monday: a request at its 00:30 lands in hour 0 of the week."""
    monday = 4 * 86400
    lines = [f"{monday + 3600 * h + 1800},{h + 1}" for h in range(168)]
    (tmp_path / "w.csv").write_text("\n".join(lines))
    rates = bin_trace("w.csv", str(tmp_path / "g.toml"), 168)
    assert rates[0] == pytest.approx(1 / 3600) and rates[167] == pytest.approx(168 / 3600)


def test_coupled_plans_bound_the_replica_counts(tmp_path):
    big = '{start = 1, stop = 200, step = 1}'
    path = tmp_path / "g.toml"
    path.write_text(BASE.replace("replicas = [1, 2, 4]", f"replicas = {big}")
                    % f"[schedule]\nhourly_rps = {DAY}\nramp = 2")
    with pytest.raises(GridError, match=r"grid\.replicas = .*has 200 values; .*at most 128"):
        load(path)
    path.write_text(BASE.replace("replicas = [1, 2, 4]", f"replicas = {big}") % f"[schedule]\nhourly_rps = {DAY}")
    assert load(path).schedule.ramp is None  # independent hours: any axis
