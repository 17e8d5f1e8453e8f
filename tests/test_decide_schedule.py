"""The exact replica plan (`sweep.decide.schedule`): hand-checked cases, and every cyclic
sequence enumerated on small cases (the reference: brute force is exact by construction)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sweep.decide.schedule import plan_cycle, plan_group, started

INF = np.inf


def brute(values, allowed, ramp, warm):
    """The least replica-hours over every cyclic sequence, by enumeration (None: none)."""
    hours, n = allowed.shape
    best = None
    for seq in itertools.product(range(n), repeat=hours):
        r = values[list(seq)]
        if not all(allowed[h, seq[h]] for h in range(hours)):
            continue
        prev = np.roll(r, 1)
        if np.any(np.abs(r - prev) > ramp):
            continue
        cost = r.sum() + warm * np.maximum(r - prev, 0).sum()
        best = cost if best is None else min(best, cost)
    return best


def cost_of(r, warm):
    return r.sum() + warm * started(r).sum()


@pytest.mark.parametrize("seed", range(40))
def test_plan_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    hours, n = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    values = np.sort(rng.choice(np.arange(0, 9), size=n, replace=False)).astype(float)
    allowed = rng.random((hours, n)) < 0.6
    ramp = [1.0, 2.0, 3.0, INF][seed % 4]
    warm = [0.0, 0.25, 1.0, 3.0][(seed // 4) % 4]
    plan = plan_cycle(values, allowed, ramp, warm)
    ref = brute(values, allowed, ramp, warm)
    if ref is None:
        assert np.all(plan == INF)
        return
    assert np.all(np.isfinite(plan))
    idx = np.searchsorted(values, plan)
    assert all(allowed[h, idx[h]] for h in range(hours)), "every hour meets the SLO"
    assert np.all(np.abs(plan - np.roll(plan, 1)) <= ramp), "the ramp holds, cyclically"
    assert cost_of(plan, warm) == pytest.approx(ref, abs=1e-12), "no cheaper sequence exists"


def test_ramp_by_hand():
    """Requirements 1,1,5,1 (monotone feasibility: any count >= the requirement serves), ramp 2.
    The cheapest cycle must climb to 5 in steps of 2 and come down the same way, cyclically:
    hour 1 >= 5 - 2 = 3, hour 3 >= 3, hour 0 >= max(3 - 2, 1) = 1: (1, 3, 5, 3)."""
    values = np.arange(0, 7, dtype=float)
    need = np.array([1, 1, 5, 1])
    allowed = values[None, :] >= need[:, None]
    np.testing.assert_array_equal(plan_cycle(values, allowed, 2.0, 0.0), [1, 3, 5, 3])
    np.testing.assert_array_equal(plan_cycle(values, allowed, INF, 0.0), [1, 1, 5, 1])


def test_warmup_keeps_replicas_through_a_short_dip():
    """Needs 4,2,4,4 (any count above serves). Dropping to 2 at hour 1 saves 2 replica-hours
    and restarts 2 replicas at hour 2: 2 x warmup_hours. At 0.5 h it pays (saves 2, costs 1):
    (4,2,4,4); at 1.5 h it does not (costs 3 > 2): run 4 throughout. At exactly 1 h they tie
    and ties go to the smaller count."""
    values = np.arange(0, 6, dtype=float)
    allowed = values[None, :] >= np.array([4, 2, 4, 4])[:, None]
    np.testing.assert_array_equal(plan_cycle(values, allowed, INF, 0.5), [4, 2, 4, 4])
    np.testing.assert_array_equal(plan_cycle(values, allowed, INF, 1.5), [4, 4, 4, 4])
    np.testing.assert_array_equal(started(np.array([4.0, 2, 4, 4])), [0, 0, 2, 0])


def test_group_required_flat_and_infeasible_hours():
    """Counts 1..4; rate 0 needs 1, rate 1 needs 3, rate 2 none; hour 2 has no traffic."""
    values = np.array([1.0, 2, 3, 4])
    ok = np.array([[1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0]], dtype=bool)
    g = plan_group(values, ok, [0, 1, -1, 0], ramp=None, warmup_hours=0.0)
    np.testing.assert_array_equal(g["replicas_required"], [1, 3, 0, 1])
    np.testing.assert_array_equal(g["replicas"], [1, 3, 0, 1])
    np.testing.assert_array_equal(g["replicas_started"], [0, 2, 0, 1])
    assert g["flat_replicas"] == 3.0 and g["feasible"].all()
    bad = plan_group(values, ok, [0, 2, 1, 0], ramp=1, warmup_hours=0.5)
    np.testing.assert_array_equal(bad["replicas_required"], [1, INF, 3, 1])
    np.testing.assert_array_equal(bad["feasible"], [True, False, True, True])
    assert np.all(bad["replicas"] == INF) and np.all(bad["replicas_started"] == INF)
    assert bad["flat_replicas"] == INF
    assert not np.isnan(bad["replicas_started"]).any()
