"""schedule.parquet from a run (SPEC 12, time of day): a synthetic diurnal day with a
hand-checked answer, the same answer as the plain grid's replicas_min at each rate (both
serving modes), a trace binned by hour, the ramp and warm-up end to end, and `sweep plan`."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweep.cli import main
from sweep.decide.schedule import SCHEDULE_BODY
from sweep.grid import load
from sweep.runner import run_grid

#: A day: night trough, two peaks. Chosen away from the multiples of 85 (the boundary below).
DIURNAL = [40, 30, 20, 20, 30, 60, 120, 200, 300, 380, 400, 390,
           370, 350, 340, 360, 390, 420, 430, 380, 300, 200, 120, 70]

DYNAMIC = """
name = "diurnal-test"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
gpus_per_replica = 2
seq_len = 1024
batch_size = 1
t_fixed_ms = 10.0
t_req_ms = 0.0
slo_ms = 1e6
rho_max = 0.85
replicas = {start = 1, stop = 8, step = 1}
[schedule]
hourly_rps = %s
%s
"""


def _write(tmp_path, text, name="g.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _schedule(out):
    return pq.read_table(out / "schedule.parquet").to_pandas()


def test_diurnal_day_by_hand(tmp_path):
    """Batch 1, T_svc = t_fixed + t_req * 1 = 10 ms: each replica is an M/D/1 queue of
    capacity 1 / 10 ms = 100 req/s (SPEC 1-3), and a replica at rate/r has rho = rate / (100 r).
    The SLO (1e6 ms) is met by every stable point, so the binding rule of replicas_min (SPEC 6)
    is rho <= rho_max = 0.85: replicas(h) = ceil(rate(h) / 85). The peak (430 req/s) needs
    ceil(5.06) = 6; the night (20 req/s) 1. Cost: 2 GPUs x usd_per_gpu_hour per replica-hour."""
    out = tmp_path / "o"
    spec = load(_write(tmp_path, DYNAMIC % (DIURNAL, "")))
    run_grid(spec, out)
    s = _schedule(out)
    want = [math.ceil(r / 85) for r in DIURNAL]
    assert s["hour"].tolist() == list(range(24))
    assert s["arrival_rps"].tolist() == DIURNAL
    assert s["replicas_required"].tolist() == want
    assert s["replicas"].tolist() == want
    price = spec.gpus[0].usd_per_gpu_hour
    np.testing.assert_allclose(s["gpu_hours"], np.array(want) * 2.0)
    np.testing.assert_allclose(s["cost_usd"], np.array(want) * 2.0 * price)
    first = s.iloc[0]
    assert first["flat_replicas"] == 6
    assert first["gpu_hours_per_day"] == 2.0 * sum(want)
    assert first["flat_gpu_hours_per_day"] == 2.0 * 6 * 24
    assert first["saving_usd_per_day"] == pytest.approx(price * 2.0 * (6 * 24 - sum(want)))
    assert first["saving_frac"] == pytest.approx(1 - sum(want) / (6 * 24))
    assert s["feasible"].all() and s["schedule_ok"].all()
    # a day with a plan: every schedule figure is a number (NULL only in the grid's own
    # unlimited inputs, e.g. queue_capacity = inf)
    body = [c.name for c in SCHEDULE_BODY]
    assert not s[body].select_dtypes("number").isna().any().any()


def test_ramp_and_warmup_end_to_end(tmp_path):
    """The same day with ramp 1 and a 0.5 h warm-up: each hour's count is at least its need
    and at least every other hour's need minus the hours between them (cyclic); here that
    envelope is also the cheapest plan, and each started replica costs 0.5 replica-hours."""
    out = tmp_path / "o"
    run_grid(load(_write(tmp_path, DYNAMIC % (DIURNAL, "ramp = 1\nwarmup_hours = 0.5"))), out)
    s = _schedule(out)
    need = np.array([math.ceil(r / 85) for r in DIURNAL])
    h = np.arange(24)
    dist = np.minimum(np.abs(h[:, None] - h[None, :]), 24 - np.abs(h[:, None] - h[None, :]))
    envelope = np.max(need[None, :] - dist, axis=1)
    np.testing.assert_array_equal(s["replicas"], envelope)
    assert np.all(np.abs(np.diff(np.r_[envelope, envelope[0]])) <= 1)
    starts = np.maximum(envelope - np.roll(envelope, 1), 0)
    np.testing.assert_array_equal(s["replicas_started"], starts)
    assert s["gpu_hours_per_day"].iloc[0] == 2.0 * (envelope.sum() + 0.5 * starts.sum())


def test_infeasible_hours_are_data(tmp_path):
    """At 900 req/s even 8 replicas (rho 1.125) fail: that hour has no count (NULL, with
    `feasible` false), there is no plan (NULL, with `schedule_ok` false) and no flat fleet;
    never +inf or NaN in the file."""
    day = [*DIURNAL[:23], 900]
    out = tmp_path / "o"
    run_grid(load(_write(tmp_path, DYNAMIC % (day, "ramp = 2"))), out)
    s = _schedule(out)
    assert pd.isna(s["replicas_required"].iloc[23]) and not s["feasible"].iloc[23]
    assert s["replicas_required"].iloc[:23].notna().all()
    assert s["replicas"].isna().all() and not s["schedule_ok"].any()
    assert pd.isna(s["flat_replicas"].iloc[0]) and s["saving_usd_per_day"].iloc[0] == 0.0
    table = pq.read_table(out / "schedule.parquet")
    for field in table.schema:
        col = table.column(field.name)
        if not field.nullable:
            assert col.null_count == 0, field.name
        if pa.types.is_floating(col.type):
            assert np.isfinite(col.drop_null().to_numpy()).all(), field.name


CONTINUOUS = """
name = "diurnal-cont"
[grid]
model = ["llama-3.1-8b", "qwen3-30b-a3b"]
gpu = "h100-sxm"
prompt_tokens = 512
output_tokens = 128
batch_size = [16, 64]
max_batched_tokens = 2048
weight_bytes_per_param = "fp8"
ttft_slo_ms = 500
tpot_slo_ms = 40
replicas = [1, 2, 3, 4, 6, 8]
%s
[options]
serving = "continuous"
kv_allocation = "paged"
"""


@pytest.mark.parametrize("mode", ["dynamic", "continuous"])
def test_required_is_replicas_min_at_each_rate(tmp_path, mode):
    """replicas_required at an hour = the plain grid's replicas_min at that hour's rate (the
    same kernels, the same decision), in both serving modes and for every schedule group."""
    rates = [2.0, 5.0, 9.0, 14.0] * 6 if mode == "continuous" else [float(r) for r in DIURNAL]
    if mode == "continuous":
        sched = CONTINUOUS % f"[schedule]\nhourly_rps = {rates}"
        plain = CONTINUOUS.replace("replicas = [", f"arrival_rps = {sorted(set(rates))}\nreplicas = [") % ""
    else:
        sched = DYNAMIC % (rates, "")
        plain = DYNAMIC.split("[schedule]")[0].replace("replicas =", f"arrival_rps = {sorted(set(rates))}\nreplicas =")
    run_grid(load(_write(tmp_path, sched, "s.toml")), tmp_path / "s")
    run_grid(load(_write(tmp_path, plain, "p.toml")), tmp_path / "p")
    s = _schedule(tmp_path / "s")
    opt = pq.read_table(tmp_path / "p" / "optimum.parquet").to_pandas()
    rmin = {(m, r): v for m, r, v in zip(opt["model"].astype(str), opt["arrival_rps"], opt["replicas_min"])}
    for m, r, v in zip(s["model"].astype(str), s["arrival_rps"], s["replicas_required"]):
        assert v == rmin[(m, r)], (m, r)
    assert s["schedule_group_id"].nunique() == (2 if mode == "continuous" else 1)
    assert np.isfinite(s["replicas_required"]).any()


def test_trace_binned_by_hour(tmp_path):
    """A two-day trace of (timestamp, requests) lines: hour h of day gets the mean of its two
    occurrences / 3600 s. Every hour carries 3600 x rate requests in two lines."""
    lines = ["timestamp,requests"]
    for day in range(2):
        for h, rate in enumerate(DIURNAL):
            t0 = 86400 * (day + 10) + 3600 * h  # day 10 of the epoch, 00:00 UTC onward
            lines += [f"{t0 + 5},{rate * 1800}", f"{t0 + 1900},{rate * 1800}"]
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "day.csv").write_text("\n".join(lines) + "\n")
    grid = DYNAMIC.replace("hourly_rps = %s", 'trace = "traces/day.csv"') % ""
    spec = load(_write(tmp_path, grid))
    assert spec.schedule.hourly_rps == tuple(float(r) for r in DIURNAL)
    run_grid(spec, tmp_path / "o")
    assert _schedule(tmp_path / "o")["replicas"].tolist() == [math.ceil(r / 85) for r in DIURNAL]


def test_sweep_plan_prints_the_schedule(tmp_path, capsys):
    path = _write(tmp_path, DYNAMIC % (DIURNAL, "ramp = 1"))
    assert main(["plan", str(path), "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "rate req/s" in text and "430.0" in text and "saving $" in text
    assert (tmp_path / "o" / "manifest.json").exists()
    assert main(["plan",
                 str(_write(tmp_path,
                            DYNAMIC.split("[schedule]")[0].replace("replicas =", "arrival_rps = 5\nreplicas ="),
                            "plain.toml")),
                 "--out", str(tmp_path / "p")]) == 2


def test_segments_and_chunks_do_not_change_the_schedule(tmp_path):
    """Row facts are staged per segment and joined at the end: small chunks and segments (a
    run that could be resumed between them) give the same file as one chunk."""
    spec = load(_write(tmp_path, DYNAMIC % (DIURNAL, "ramp = 1\nwarmup_hours = 0.5")))
    run_grid(spec, tmp_path / "a")
    run_grid(spec, tmp_path / "b", chunk_size=8, segment_points=16)
    a, b = _schedule(tmp_path / "a"), _schedule(tmp_path / "b")
    assert a.equals(b)


def test_shards_are_refused(tmp_path):
    from sweep.errors import OutputError
    from sweep.runner import Shard

    spec = load(_write(tmp_path, DYNAMIC % (DIURNAL, "")))
    with pytest.raises(OutputError, match="without --shard"):
        run_grid(spec, tmp_path / "o", shard=Shard(1, 2))


def test_weekly_profile_and_the_run_summary(tmp_path, capsys):
    """7 x 24 rates: weekdays the diurnal day, the weekend half of it; per-day figures divide
    the week's total by 7; `sweep run` prints the group's saving line."""
    week = [DIURNAL] * 5 + [[r / 2 for r in DIURNAL]] * 2
    path = _write(tmp_path, DYNAMIC % (week, ""))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--progress", "none"]) == 0
    assert "schedule group 0: llama-3.1-8b on 2 x h100-sxm: plan" in capsys.readouterr().out
    s = _schedule(tmp_path / "o")
    want = [math.ceil(r / 85) for day in week for r in day]
    assert len(s) == 168 and s["replicas"].tolist() == want
    assert s["day"].tolist() == [h // 24 for h in range(168)]
    assert s["gpu_hours_per_day"].iloc[0] == pytest.approx(2.0 * sum(want) / 7)
    assert s["flat_gpu_hours_per_day"].iloc[0] == 2.0 * 6 * 24
