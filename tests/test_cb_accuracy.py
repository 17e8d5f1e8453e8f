"""The analytic continuous-batching model against stored simulations of random configurations.

tests/data/cb_accuracy_reference.csv holds configurations drawn by
`sweep.testing.cb_domain.draw` (its header comment says the command, the seeds, the
replications and the date) with the simulator's means and 95% half-widths: SPEC 10's
accuracy judgement (benchmarks/cb_accuracy.py) at a size the suite can afford, with no
simulation in the fast test. The slow test re-simulates a few points under new random
streams so that the stored values cannot silently drift from what the simulator computes.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from sweep.models.continuous.confidence import analytic_trusted, reservations_never_block
from sweep.models.continuous.sim import CBSimSettings, simulate_continuous
from sweep.testing.cb_domain import CB_KEYS, TARGETS, analytic_all, analytic_by_steps, judge

REFERENCE = Path(__file__).parent / "data" / "cb_accuracy_reference.csv"
#: Floor on the share of judged comparisons (point x metric) within SPEC 10's target. The
#: analytic model of main 38967f0 (2026-12-02) measured 224/255 = 87.8% on the reference
#: (misses: the E2E and TTFT medians, built as the mean plus an excess); the model with the
#: slot chain, the prompt-law prefill and fitted-law percentiles (issue 24) measures
#: 245/255 = 96.1%. SPEC 10's goal is 95%.
FLOOR = 0.95
#: how the reference was simulated (its header says the same)
N_REQUESTS, WARMUP, SIM_SEED, BATCH = 1000, 200, 11, 4


def _reference(path: Path = REFERENCE) -> dict[str, np.ndarray]:
    with path.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    out: dict[str, np.ndarray] = {}
    for key in rows[0]:
        vals = [r[key] for r in rows]
        if key in ("model", "gpu"):
            out[key] = np.array(vals)
        elif vals[0] in ("True", "False"):
            out[key] = np.array([v == "True" for v in vals])
        else:
            out[key] = np.array([float(v) for v in vals])
    return out


def _sim_view(ref: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = {k[4:]: v for k, v in ref.items() if k.startswith("sim_")}
    s.update({k[:-2]: v for k, v in list(s.items()) if k.endswith("_s") and not k.endswith("_hw_s")})
    s.update({k[:-5] + "_hw": v for k, v in list(s.items()) if k.endswith("_hw_s")})
    return s


def test_reference_header_says_how_it_was_made():
    head = REFERENCE.read_text().splitlines()[0]
    assert head.startswith("# Produced by `python benchmarks/cb_accuracy.py")
    assert f"{N_REQUESTS} measured + {WARMUP} warmup" in head and f"sim seed {SIM_SEED}" in head
    ref = _reference()
    assert ref["lam"].size >= 40 and set(CB_KEYS) <= set(ref)


def test_share_within_target_holds_the_floor():
    """The analytic model (q = 0.5, 0.9, 0.99) on the stored inputs, judged as the benchmark
    judges: SPEC 10's stable region, comparisons whose simulated half-width is below a
    third of the target."""
    ref = _reference()
    s = _sim_view(ref)
    a = analytic_all({k: ref[k] for k in CB_KEYS})
    j = judge({k: ref[k] for k in CB_KEYS}, a, s)
    judged = sum(int(j[k]["judged"].sum()) for k in TARGETS)
    ok = sum(int(j[k]["ok"].sum()) for k in TARGETS)
    assert judged >= 100, judged  # enough comparisons for the share to mean something
    assert ok / judged >= FLOOR, f"{ok}/{judged} = {ok / judged:.1%} within target, floor {FLOOR:.0%}"
    for k in TARGETS:  # never NaN where the simulator is steady
        assert not np.any(np.isnan(a[k][s["stable"]])), k


@pytest.mark.slow  # simulates 5 points x 8 replications (~1-2 min on a shared core)
def test_stored_simulations_reproduce():
    """Five judged points below 0.7 load (the cheapest to simulate), re-simulated under new random streams
    (scenario ids the reference never used): at least 4 stay steady, and where both runs
    are, every stored value agrees with the new one within the 95% half-width of their
    difference, hypot(hw_old, hw_new), for at least 90% of the comparisons, and within
    twice it for all."""
    ref = _reference()
    s = _sim_view(ref)
    p = {k: ref[k] for k in CB_KEYS}
    a = analytic_all(p)
    j = judge(p, a, s)
    judged = np.flatnonzero(np.any([j[k]["judged"] for k in TARGETS], axis=0) & (ref["load"] < 0.7))
    cost = (ref["prompt_mean"] + ref["output_mean"]) / np.minimum(ref["cap"], ref["sim_mean_running"] + 1.0)
    pick = judged[np.argsort(cost[judged])[:5]]
    params = {k: p[k][pick] for k in CB_KEYS}
    params["queue_capacity"] = np.full(pick.size, np.inf)
    st = CBSimSettings(n_requests=N_REQUESTS, warmup=WARMUP, replications=2 * BATCH, seed=SIM_SEED)
    new = simulate_continuous(params, st, percentile=0.9, more_percentiles=(0.5, 0.99),
                              scenario_ids=pick + 100000 * 97)
    within = total = 0
    for k in TARGETS:
        met, _, kind = k.partition("_")
        key = f"{met}_p_s" if kind == "p90" else f"{k}_s"
        hw_key = key[:-2] + "_hw_s"
        old, old_hw = s[k][pick], s[k + "_hw"][pick]
        fin = np.isfinite(old) & np.isfinite(new[key])
        band = np.hypot(old_hw, new[hw_key])[fin]
        diff = np.abs(new[key] - old)[fin]
        assert np.all(diff <= 2.0 * band), (k, diff / old[fin], band / old[fin])
        within += int(np.sum(diff <= band))
        total += int(fin.sum())
    # the quarter rule may call a heavy-tailed run not steady by chance: most stay steady
    assert new["stable"].sum() >= 4, new["stable"]
    assert total >= 35 and within >= 0.9 * total, (within, total)


#: The same judgement for `kv_admission = "on_demand"`: configurations simulated on demand by the
#: compiled event loop (recompute preemption), against the analytic model's reserve values, where
#: `analytic_trusted` with its on-demand clause (`reservations_never_block`) trusts them.
ON_DEMAND = Path(__file__).parent / "data" / "cb_accuracy_on_demand_reference.csv"
#: Floor on the trusted share: SPEC 10's goal. Measured on the reference (2026-12-03): 417/429 = 97.2%
#: where trusted (41 of 60 points), against 15/20 and 30/41 where the clause alone, or the whole
#: rule, sets points apart.
ON_DEMAND_FLOOR = 0.95


def test_on_demand_trusted_share_holds_the_floor():
    """Where reservations never block, the on-demand engine runs the reserve engine's schedule,
    so the reserve model is judged against on-demand simulations there; the points the clause
    sets apart are where on demand and reserve part (preemptions recorded in the reference)."""
    ref = _reference(ON_DEMAND)
    assert ref["lam"].size >= 40 and "compiled event loop, kv_admission on_demand" in ON_DEMAND.read_text()[:2000]
    s = _sim_view(ref)
    p = {k: ref[k] for k in CB_KEYS}
    a = analytic_all(p)
    j = judge(p, a, s)
    base = np.asarray(analytic_trusted(mean_running=a["mean_running"], slots=a["slots"], lam=p["lam"],
                                       capacity_rps=a["capacity_rps"], mem_ok=np.ones(p["lam"].size, bool)))
    never = np.asarray(reservations_never_block(
        mean_running=a["mean_running"], cap=p["cap"], kv_tokens=p["kv_capacity_tokens"], prompt_tokens=p["prompt_mean"],
        prompt_cv=p["prompt_cv"], output_tokens=p["output_mean"], output_cv=p["output_cv"], block=p["block_tokens"]))
    trusted = base & never
    judged = sum(int((j[k]["judged"] & trusted).sum()) for k in TARGETS)
    ok = sum(int((j[k]["ok"] & trusted).sum()) for k in TARGETS)
    assert judged >= 100, judged
    assert ok / judged >= ON_DEMAND_FLOOR, f"{ok}/{judged} = {ok / judged:.1%} within target where trusted"
    # the clause earns its place: the points it alone sets apart fare worse than the trusted ones
    apart = base & ~never
    judged_apart = sum(int((j[k]["judged"] & apart).sum()) for k in TARGETS)
    ok_apart = sum(int((j[k]["ok"] & apart).sum()) for k in TARGETS)
    assert judged_apart >= 10 and ok_apart / judged_apart < ok / judged, (ok_apart, judged_apart)
    # where reservations never block, nothing was preempted in the stored runs (the proof's premise)
    assert np.all(ref["sim_preempt"][trusted & np.isfinite(p["kv_capacity_tokens"])] < 0.01)


STEPS = Path(__file__).parent / "data" / "cb_accuracy_steps_reference.csv"
#: Floor for multi-step scheduling (`scheduler_steps` = k drawn from 2, 4, 8, 16 per point,
#: chunked, reserve): the analytic model's windows against the compiled event loop. The
#: reference (40 points, seed 254) measured 197/219 = 90.0% when it was written (2026-12-04),
#: 200/219 = 91.3% once a chunked prompt's window waits widened its TTFT law (unchanged by the
#: window's length of 2026-12-05), 202/219 = 92.2% after the windows' changes of 2026-12-06,
#: 205/219 = 93.6% after the TPOT's last window and node mixture and the window's spread (the
#: same day); 95.5% on seven draws of 150 points (93.3-97.2% each), docs/continuous.md ("Engine
#: variants"); the one-step model without windows scores about 60% on such simulations.
STEPS_FLOOR = 0.90


def _within_floor(path: Path, head: str, steps: set[float], floor: float, min_judged: int, *,
                  prefill_first: bool = False) -> None:
    """A stored reference's configurations at their own k, judged as benchmarks/cb_accuracy.py
    judges: at least `min_judged` comparisons, a share `floor` of them within target."""
    assert path.read_text().splitlines()[0].startswith(head)
    ref = _reference(path)
    p = {k: ref[k] for k in CB_KEYS}
    assert set(np.unique(ref["steps"])) == steps
    j = judge(p, analytic_by_steps(p, ref["steps"], prefill_first=prefill_first), _sim_view(ref))
    judged = sum(int(j[k]["judged"].sum()) for k in TARGETS)
    ok = sum(int(j[k]["ok"].sum()) for k in TARGETS)
    assert judged >= min_judged, judged
    assert ok / judged >= floor, f"{ok}/{judged} = {ok / judged:.1%} within target, floor {floor:.0%}"


_HEAD = "# Produced by `python benchmarks/cb_accuracy.py"
_PF_HEAD = _HEAD + " --scheduler-policy prefill_first"


def test_multi_step_windows_hold_their_floor():
    """The windows at each configuration's own k, judged as benchmarks/cb_accuracy.py judges."""
    _within_floor(STEPS, _HEAD, {2.0, 4.0, 8.0, 16.0}, STEPS_FLOOR, 100)

PF_STEPS = Path(__file__).parent / "data" / "cb_accuracy_prefill_first_steps_reference.csv"
#: Floor for multi-step scheduling under `prefill_first` (k from 2, 4, 8, 16, reserve): the
#: analytic windows of that policy (decode windows between chains of prompt steps) against the
#: compiled event loop. The reference (40 points, seed 262, drawn after the model was shaped on
#: seed 260) measured 267/304 = 87.8% when it was written (2026-12-04), 270/304 = 88.8% with a
#: chain's spread in the windows' TPOT law (2026-12-06), 282/304 = 92.8% after the last window,
#: the own chain's rest, the TPOT's node mixture, the window's spread and the span's time (the
#: same day), 285/304 = 93.8% with the last window's length-biased decoders and two parts per
#: output length (the same day), unchanged by the cut chain (the same day), 296/304 = 97.4%
#: with the chain followed prompt batch by prompt batch and the own rest as a mixture (the same
#: day); 96.2% on seven draws of 120 points in docs/continuous.md ("Engine variants"), 96.2% on
#: the one held out; the one-step model without windows scores 61.5% on one of them.
PF_STEPS_FLOOR = 0.94


def test_prefill_first_windows_hold_their_floor():
    """The prefill_first windows at each configuration's own k, judged as benchmarks/cb_accuracy.py judges."""
    _within_floor(PF_STEPS, _PF_HEAD, {2.0, 4.0, 8.0, 16.0}, PF_STEPS_FLOOR, 100, prefill_first=True)

PF = Path(__file__).parent / "data" / "cb_accuracy_prefill_first_reference.csv"
#: Floor for the `prefill_first` policy at one step a decision (reserve KV): the analytic model
#: (decode steps between chains of prompt steps) against the compiled event loop. The
#: reference (40 points, seed 273, drawn after the model was shaped on seed 271) measured
#: 211/232 = 90.9% when it was written (2026-12-05; the model before the chain and the pause
#: variance: 198/232 = 85.3%, below the floor), 212/232 = 91.4% with the chain's TPOT
#: mixture (2026-12-05), 214/232 = 92.2% with the chain followed prompt batch by prompt batch
#: (2026-12-06); 691/718, 671/704 and 624/650 (96.2%, 95.3%, 96.0%) on the 120 points of seeds
#: 272, 275 and 279 (docs/continuous.md, "Engine variants"). The 95% goal is on those, not on
#: these 40.
PF_FLOOR = 0.90


def test_prefill_first_holds_its_floor():
    """The prefill_first policy at k = 1, judged as benchmarks/cb_accuracy.py judges."""
    _within_floor(PF, _PF_HEAD, {1.0}, PF_FLOOR, 150, prefill_first=True)
