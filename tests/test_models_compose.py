"""Tandems of two stage models (`sweep.models.compose`), on the toy queues of
`sweep.testing.toy`, whose end-to-end latencies are known. Each reference says where it
comes from:

* M/M/1 -> M/M/1: by Burke's theorem an M/M/1 queue's departures are Poisson (random
  splitting and merging keep them so), and by Reich's theorem a request's two sojourns are
  independent, so the end-to-end sojourn is the sum of independent Exp(mu1 - lambda1) and
  Exp(mu2 - lambda2): mean 1/a1 + 1/a2, CDF 1 - (a2 e^{-a1 t} - a1 e^{-a2 t}) / (a2 - a1)
  (the hypoexponential; Erlang-2 where a1 = a2, its quantile by Lambert's W_{-1}).
* M/D/1 -> ./D/1 with the same D: the first queue's departures are at least D apart, so the
  second never waits: the sojourn is the M/D/1 sojourn plus D (2D at light load).
* Both against `sweep.testing.toy.simulate` (Lindley's recursion, plain NumPy), within the
  99.9% batch-means confidence interval.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import lambertw

from sweep.api import decide, evaluate, grid_from_dict
from sweep.engine.evaluate import Evaluator, evaluate_points
from sweep.models import ServingModel, register, unregister
from sweep.models.base import CATALOG_FIELDS
from sweep.models.compose import SHARED, IndependentSum, Link, QuadratureSum, Stage, Tandem, UnionBound, tandem
from sweep.testing.models import check_values
from sweep.testing.toy import MD1Queue, MM1Queue, batch_means, simulate


def pair(first: ServingModel, second: ServingModel, **kw) -> Tandem:
    return tandem(Stage("prefill", first), Stage("decode", second), serving="toy-tandem", **kw)


MM, DD, DM = pair(MM1Queue(), MM1Queue()), pair(MD1Queue(), MD1Queue()), pair(MD1Queue(), MM1Queue())


def run(model: ServingModel, **params) -> dict[str, np.ndarray]:
    """Every unconditional column of a tandem (or a toy queue) at the points `params`
    (broadcast; keys the model does not read are ignored)."""
    base = {"percentile": 0.99, "slo_ms": math.inf, "prefill_slo_ms": math.inf, "decode_slo_ms": math.inf,
            "rho_max": 0.85, "rho_min": 0.5, "transfer_ms": 0.0, "prefill_replicas": 1.0, "decode_replicas": 1.0}
    figures = {k: np.ones(1) for k in CATALOG_FIELDS}
    static = {s.name: () for s in model.stages} if isinstance(model, Tandem) else {}
    return evaluate_points(model, {**base, **params}, figures, static=static)


def hypo_quantile(q: float, a1: float, a2: float) -> float:
    """The q-quantile of Exp(a1) + Exp(a2): Lambert's W for a1 = a2 (1 + a t = -W_{-1}(-(1-q)/e)),
    else the root of the hypoexponential CDF."""
    if a1 == a2:
        return (-lambertw(-(1.0 - q) / math.e, k=-1).real - 1.0) / a1
    a, b = min(a1, a2), max(a1, a2)
    cdf = lambda t: 1.0 - math.exp(-a * t) * (1.0 + a * -math.expm1(-(b - a) * t) / (b - a))  # noqa: E731
    return brentq(lambda t: cdf(t) - q, 0.0, 60.0 / a, xtol=1e-300, rtol=1e-15)


# --------------------------------------------------------------------------- declarations


def test_keys_columns_and_decisions_are_named_by_stage():
    keys = [p.key for p in MM.params]
    assert keys == ["model", "gpu", "arrival_rps", "percentile", "rho_max", "rho_min", "transfer_ms", "slo_ms",
                    "prefill_slo_ms", "decode_slo_ms", "prefill_replicas", "decode_replicas",
                    "prefill_service_ms", "decode_service_ms"]
    d = MM.decisions
    # every stage's group axes, then every stage's row axes, innermost (rows and groups are
    # contiguous blocks of the grid)
    assert d.group_axes == ("prefill_replicas", "decode_replicas")
    assert d.row_axes == ("prefill_service_ms", "decode_service_ms")
    assert tuple(keys[-4:]) == (*d.group_axes, *d.row_axes)
    assert d.size == "total_replicas" and d.latency == "e2e_p_ms" and d.mean_latency == "e2e_mean_ms"
    columns = {c.name: c for c in MM.columns}
    assert len(columns) == len(MM.columns)
    for name in (*keys, d.size, d.capacity, d.latency, d.mean_latency, d.utilisation, "prefill_latency_ms",
                 "decode_e_wait_ms", "stable", "mem_ok", "slo_ok", "feasible", "action", "cost_usd_per_hour"):
        assert name in columns, name
    # NULL rules follow the renaming
    assert columns["decode_latency_ms"].null_when == "decode_stable"
    assert columns["e2e_p_ms"].null_when == "prefill_stable, decode_stable"
    assert MM.slo_checks == (("prefill_latency_ms", "prefill_slo_ms"), ("decode_latency_ms", "decode_slo_ms"),
                             ("e2e_p_ms", "slo_ms"))
    assert set(MM.echo) <= set(keys) and "prefill_replicas" in MM.echo
    assert isinstance(MM.combine, IndependentSum)
    assert columns["prefill_replicas"].doc.startswith("Prefill stage: ")
    assert MM.param_by_key["decode_replicas"].example.startswith("decode_replicas = ")


class NoDistribution(ServingModel):
    """An M/M/1 stage that declares no sojourn distribution (a stage model need not)."""

    serving: ClassVar[str] = "toy-opaque"
    name: ClassVar[str] = "analytic"
    params = MM1Queue.params
    columns = MM1Queue.columns
    echo = MM1Queue.echo
    decisions = MM1Queue.decisions
    row_constant = MM1Queue.row_constant

    def static(self, spec):
        return {}

    def point(self, x, **static):
        return MM1Queue().point(x)


def test_what_cannot_be_composed_is_refused():
    with pytest.raises(ValueError, match="two names"):
        tandem(Stage("a", MM1Queue()), Stage("a", MM1Queue()), serving="x")
    with pytest.raises(ValueError, match="shared by stage a but its own in stage b"):
        tandem(Stage("a", MM1Queue(), shared=(*SHARED, "replicas")), Stage("b", MM1Queue()), serving="x")
    solo = ("model", "gpu", "percentile", "rho_max", "rho_min")
    with pytest.raises(ValueError, match="'arrival_rps' must be shared"):
        tandem(Stage("a", MM1Queue(), shared=solo), Stage("b", MM1Queue(), shared=solo), serving="x")
    with pytest.raises(ValueError, match="b declares none"):
        tandem(Stage("a", MM1Queue()), Stage("b", NoDistribution()), serving="x", combine=IndependentSum())
    with pytest.raises(ValueError, match="lower-case identifier"):
        Stage("Pre fill", MM1Queue())


# --------------------------------------------------------------------------- M/M/1 tandem

LOADS = np.array([10.0, 40.0, 70.0, 95.0])  # requests/s; service 10 ms then 4 ms: rho1 up to 0.95


@pytest.mark.parametrize("replicas", [(1, 1), (2, 3)])
def test_mm1_tandem_is_the_hypoexponential(replicas):
    r1, r2 = replicas
    lam = np.repeat(LOADS, 3)
    q = np.tile([0.5, 0.9, 0.99], len(LOADS))
    out = run(MM, arrival_rps=lam, percentile=q, prefill_service_ms=10.0, decode_service_ms=4.0,
              prefill_replicas=float(r1), decode_replicas=float(r2))
    a1 = (1.0 - lam / r1 * 10e-3) / 10.0  # mu - lambda, per ms
    a2 = (1.0 - lam / r2 * 4e-3) / 4.0
    np.testing.assert_allclose(out["e2e_mean_ms"], 1.0 / a1 + 1.0 / a2, rtol=1e-14)
    expected = [hypo_quantile(qi, x, y) for qi, x, y in zip(q, a1, a2)]
    np.testing.assert_allclose(out["e2e_p_ms"], expected, rtol=1e-12)
    assert out["stable"].all() and (out["total_replicas"] == r1 + r2).all()
    np.testing.assert_allclose(out["capacity_rps"], min(r1 * 100.0, r2 * 250.0), rtol=1e-15)


def test_mm1_tandem_of_equal_rates_is_erlang_two():
    q = np.array([0.5, 0.9, 0.99, 0.999999])
    out = run(MM, arrival_rps=60.0, percentile=q, prefill_service_ms=10.0, decode_service_ms=10.0)
    a = (1.0 - 0.6) / 10.0
    expected = (-lambertw(-(1.0 - q) / math.e, k=-1).real - 1.0) / a
    np.testing.assert_allclose(out["e2e_p_ms"][:3], expected[:3], rtol=1e-12)
    np.testing.assert_allclose(out["e2e_p_ms"][3], expected[3], rtol=1e-10)  # 1e-16 in F: 6e-12 at six nines


@pytest.mark.parametrize("lam,replicas,transfer", [(70.0, (1, 1), 0.0), (95.0, (2, 3), 3.0)])
def test_mm1_tandem_against_simulation(lam, replicas, transfer):
    r1, r2 = replicas
    qs = (0.5, 0.9, 0.99)
    out = run(MM, arrival_rps=lam, percentile=np.array(qs), prefill_service_ms=10.0, decode_service_ms=4.0,
              prefill_replicas=float(r1), decode_replicas=float(r2), transfer_ms=transfer)
    rng = np.random.default_rng(int(lam) + r1)
    sojourn = simulate(rng, 400_000, lam, [("M", 10.0, r1), ("M", 4.0, r2)], transfer_ms=transfer)[20_000:]
    mean, hw = batch_means(sojourn, np.mean)
    assert abs(mean - out["e2e_mean_ms"][0]) <= hw
    for i, q in enumerate(qs):
        sim, hw = batch_means(sojourn, lambda b, q=q: np.quantile(b, q))
        assert abs(sim - out["e2e_p_ms"][i]) <= hw, (q, sim, out["e2e_p_ms"][i], hw)


# --------------------------------------------------------------------------- M/D/1 tandem


def test_identical_md1_tandem_never_waits_twice():
    d = 4.0
    lam = np.array([0.025, 50.0, 100.0, 200.0, 240.0, 100.0, 100.0])  # rho = 1e-4 .. 0.96
    q = np.array([0.99, 0.99, 0.5, 0.9, 0.99, 0.99, 0.99])
    decode = np.array([1.0, 1, 1, 1, 1, 2, 1])  # random thinning to two replicas keeps the gaps
    out = run(DD, arrival_rps=lam, percentile=q, prefill_service_ms=d, decode_service_ms=d, decode_replicas=decode)
    alone = run(MD1Queue(), arrival_rps=lam, percentile=q, service_ms=d, replicas=1.0)
    assert (out["decode_e_wait_ms"] == 0.0).all() and (out["decode_latency_ms"] == d).all()
    np.testing.assert_allclose(out["e2e_mean_ms"], alone["e_resp_ms"] + d, rtol=1e-15)
    np.testing.assert_allclose(out["e2e_p_ms"], alone["latency_ms"] + d, rtol=1e-14)
    rho = lam * d * 1e-3
    np.testing.assert_allclose(out["e2e_mean_ms"], 2 * d + rho * d / (2 * (1 - rho)), rtol=1e-14)  # P-K, plus D
    assert out["e2e_p_ms"][0] == 2 * d  # light load: P99 is inside the atom of no wait (1 - rho = 0.9999)


def test_md1_tandem_merging_replicas_loses_the_spacing():
    """Two first-stage replicas merge their departures: the second stage's arrivals are no
    longer D apart, and it is modelled as an M/D/1 (an approximation, not exact)."""
    out = run(DD, arrival_rps=100.0, prefill_service_ms=4.0, decode_service_ms=4.0, prefill_replicas=2.0)
    assert out["decode_e_wait_ms"][0] == pytest.approx(0.4 * 4.0 / (2 * 0.6), rel=1e-14)
    assert out["e2e_p_ms"][0] > out["prefill_latency_ms"][0] + 4.0


@pytest.mark.parametrize("lam,decode", [(100.0, 1), (200.0, 2)])
def test_identical_md1_tandem_against_simulation(lam, decode):
    d, qs = 4.0, (0.5, 0.9, 0.99)
    out = run(DD, arrival_rps=lam, percentile=np.array(qs), prefill_service_ms=d, decode_service_ms=d,
              decode_replicas=float(decode))
    sojourn = simulate(np.random.default_rng(int(lam)), 400_000, lam, [("D", d, 1), ("D", d, decode)])[20_000:]
    mean, hw = batch_means(sojourn, np.mean)
    assert abs(mean - out["e2e_mean_ms"][0]) <= hw
    for i, q in enumerate(qs):
        sim, hw = batch_means(sojourn, lambda b, q=q: np.quantile(b, q))
        # a quantile inside the atom is exactly 2D; the simulation's times carry ~1e-9 of rounding
        assert abs(sim - out["e2e_p_ms"][i]) <= max(hw, 1e-8), (q, sim, out["e2e_p_ms"][i], hw)


# --------------------------------------------------------------------------- link and combine


def test_transfer_shifts_the_end_to_end_latency_exactly():
    q = np.array([0.5, 0.9, 0.99])
    for model in (MM, DM):
        before = run(model, arrival_rps=70.0, percentile=q, prefill_service_ms=10.0, decode_service_ms=4.0)
        after = run(model, arrival_rps=70.0, percentile=q, prefill_service_ms=10.0, decode_service_ms=4.0,
                    transfer_ms=25.0)
        np.testing.assert_allclose(after["e2e_mean_ms"], before["e2e_mean_ms"] + 25.0, rtol=1e-15)
        np.testing.assert_allclose(after["e2e_p_ms"], before["e2e_p_ms"] + 25.0, rtol=1e-13)


def test_a_link_without_delay_declares_no_key():
    model = pair(MM1Queue(), MM1Queue(), link=Link(delay_key=None))
    assert "transfer_ms" not in model.param_by_key
    out = run(model, arrival_rps=70.0, percentile=0.9, prefill_service_ms=10.0, decode_service_ms=4.0)
    assert out["e2e_p_ms"][0] == pytest.approx(hypo_quantile(0.9, 0.03, 0.18), rel=1e-12)


def test_union_bound_where_a_stage_declares_no_distribution():
    """Default combine without both distributions: each stage's latency at (1+q)/2, summed
    (the first re-evaluated at that percentile); an upper bound of the exact M/M/1 one."""
    bound = pair(NoDistribution(), MM1Queue())
    assert isinstance(bound.combine, UnionBound)
    q = np.array([0.5, 0.9, 0.99])
    out = run(bound, arrival_rps=70.0, percentile=q, prefill_service_ms=10.0, decode_service_ms=4.0)
    exact = run(MM, arrival_rps=70.0, percentile=q, prefill_service_ms=10.0, decode_service_ms=4.0)
    r = 0.5 * (1 + q)
    np.testing.assert_allclose(out["e2e_p_ms"], -np.log1p(-r) * (1 / 0.03 + 1 / 0.18), rtol=1e-14)
    assert (out["e2e_p_ms"] >= exact["e2e_p_ms"]).all()
    np.testing.assert_array_equal(out["e2e_mean_ms"], exact["e2e_mean_ms"])


@pytest.mark.parametrize("decode_ms", [4.0, 10.0])
def test_quadrature_sum_against_the_exact_mm1_tandem(decode_ms):
    """`QuadratureSum` from each stage's mean and percentile (Exp(a): 1/a and -ln(1-q)/a):
    the formula exactly, and against the exact hypoexponential quantile (module docstring) a
    tail estimate: within -1.3%..+0.1% at P90 and 0..+7% at P99 (+6.93% for equal rates, the
    Erlang-2: 2 + sqrt(2) ln(100) - 1 against its 6.638), where the union bound is +60%; at
    P50 the excesses are negative, clipped to 0, so it is the sum of the means (+19% to +42%)."""
    qs = pair(MM1Queue(), MM1Queue(), combine=QuadratureSum())
    lam = np.repeat(LOADS, 3)
    q = np.tile([0.5, 0.9, 0.99], len(LOADS))
    out = run(qs, arrival_rps=lam, percentile=q, prefill_service_ms=10.0, decode_service_ms=decode_ms)
    a1 = (1.0 - lam * 10e-3) / 10.0
    a2 = (1.0 - lam * decode_ms * 1e-3) / decode_ms
    ex1, ex2 = np.maximum(-np.log1p(-q) - 1.0, 0.0) / a1, np.maximum(-np.log1p(-q) - 1.0, 0.0) / a2
    np.testing.assert_allclose(out["e2e_p_ms"], 1 / a1 + 1 / a2 + np.hypot(ex1, ex2), rtol=1e-13)
    exact = np.array([hypo_quantile(qi, x, y) for qi, x, y in zip(q, a1, a2)])
    err = out["e2e_p_ms"] / exact - 1.0
    assert np.all((err[q == 0.9] > -0.013) & (err[q == 0.9] < 0.001))
    assert np.all((err[q == 0.99] >= 0.0) & (err[q == 0.99] < 0.07))
    np.testing.assert_allclose(out["e2e_p_ms"][q == 0.5], (1 / a1 + 1 / a2)[q == 0.5], rtol=1e-14)


# --------------------------------------------------------------------------- the contract


def domain_points(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Points over the tandem's declared domain, bounds included; most near a stable load."""
    pick = lambda lo, hi, k=n: 10 ** rng.uniform(math.log10(lo), math.log10(hi), k)  # noqa: E731
    p = {"prefill_service_ms": pick(1e-6, 1e7), "decode_service_ms": pick(1e-6, 1e7),
         "prefill_replicas": np.floor(pick(1, 1e6)), "decode_replicas": np.floor(pick(1, 1e6)),
         "percentile": rng.uniform(0.01, 0.999999, n),
         "transfer_ms": np.where(rng.random(n) < 0.5, 0.0, pick(1e-3, 1e7)),
         "slo_ms": np.where(rng.random(n) < 0.5, math.inf, pick(1e-3, 1e9)), "rho_max": rng.uniform(0.5, 1, n),
         "rho_min": rng.uniform(0, 0.49, n)}
    cap = 1e3 * np.minimum(p["prefill_replicas"] / p["prefill_service_ms"],
                           p["decode_replicas"] / p["decode_service_ms"])
    p["arrival_rps"] = np.clip(cap * 10 ** rng.uniform(-6, 0.3, n), 1e-6, 1e9)
    p["arrival_rps"][:4] = [1e-6, 1e9, 1e-6, 1e9]
    p["percentile"][:2] = [0.01, 0.999999]
    p["prefill_replicas"][:4] = 1.0
    p["prefill_service_ms"][:4] = [1e-6, 1e7, 1e7, 1e-6]
    return p


@pytest.mark.parametrize("model", [MM, DM, DD], ids=["mm1-mm1", "md1-mm1", "md1-md1"])
def test_contract_over_the_domain(model):
    """Columns as declared, in their dtypes; no NaN; +inf only where a NULL flag says so,
    and on every SLO latency where unstable; the sum's quantile at least each stage's."""
    rng = np.random.default_rng(5)
    n = 64  # evaluate_points pads to powers of two: one compilation per model here
    out = run(model, **domain_points(rng, n))
    check_values(model, out)
    stable = out["stable"]
    assert 0.2 < stable.mean() < 0.95  # the sample covers both
    # every SLO latency is +inf where its own part is unsustainable (a stage's sojourn stays
    # finite where only the other stage is unstable), and finite where the tandem is stable
    for latency, _ in model.slo_checks:
        own = stable if latency == "e2e_p_ms" else out[latency.split("_")[0] + "_stable"]
        assert np.isinf(out[latency][~own]).all() and np.isfinite(out[latency][stable]).all(), latency
    assert (out["feasible"] <= stable).all() and np.isfinite(out["e2e_p_ms"][out["feasible"]]).all()
    ok = stable
    for name in ("prefill_latency_ms", "decode_latency_ms"):
        assert (out["e2e_p_ms"][ok] >= out[name][ok] * (1 - 1e-12)).all()
    np.testing.assert_allclose(out["e2e_mean_ms"][ok], (out["prefill_e_resp_ms"] + out["transfer_ms"]
                                                         + out["decode_e_resp_ms"])[ok], rtol=1e-14)


def test_monotone_in_load_where_claimed():
    rng = np.random.default_rng(11)
    n, steps = 12, 5  # 60 points: the contract test's padded shape (64), no new compilation
    p = domain_points(rng, n)
    p = {k: np.tile(v, steps) for k, v in p.items()}
    p["arrival_rps"] = np.minimum(p["arrival_rps"] * np.repeat(1.5 ** np.arange(steps), n), 1e9)
    out = run(DM, **p)
    assert "e2e_p_ms" in DM.monotone_in_load
    for name in DM.monotone_in_load:
        x = out[name].reshape(steps, n)
        with np.errstate(invalid="ignore"):
            down = np.diff(x, axis=0) < -1e-9 * np.abs(x[:-1])
        assert not down.any(), name


# --------------------------------------------------------------------------- through the engine


@pytest.fixture
def registered():
    model = register(MM)
    yield model
    unregister(model.serving)


GRID = {"arrival_rps": [40.0, 70.0], "prefill_replicas": [1, 2], "decode_replicas": [1, 2],
        "prefill_service_ms": [5.0, 10.0], "decode_service_ms": [2.0, 4.0], "transfer_ms": 3.0, "slo_ms": 200.0}


def test_through_the_engine(registered):
    """Registered, the tandem is a serving mode: a grid evaluates to the same columns as the
    model at those points, which are the hypoexponential's."""
    spec = grid_from_dict({"name": "tandem", "options": {"serving": "toy-tandem"}, "grid": GRID})
    assert [a.key for a in spec.axes][-4:] == ["prefill_replicas", "decode_replicas", "prefill_service_ms",
                                               "decode_service_ms"]
    points = evaluate(spec).to_pylist()
    assert len(points) == 32
    for p in points:
        a1 = (1.0 - p["arrival_rps"] / p["prefill_replicas"] * p["prefill_service_ms"] * 1e-3) / p["prefill_service_ms"]
        a2 = (1.0 - p["arrival_rps"] / p["decode_replicas"] * p["decode_service_ms"] * 1e-3) / p["decode_service_ms"]
        if a1 <= 0 or a2 <= 0:
            assert p["e2e_p_ms"] is None and p["action"] == "unstable"
            continue
        assert p["e2e_mean_ms"] == pytest.approx(1 / a1 + 1 / a2 + 3.0, rel=1e-14)
        assert p["e2e_p_ms"] == pytest.approx(hypo_quantile(0.99, a1, a2) + 3.0, rel=1e-12)
        assert p["slo_ok"] == (p["e2e_p_ms"] <= 200.0)
        assert p["total_replicas"] == p["prefill_replicas"] + p["decode_replicas"]


def test_decisions_over_two_group_axes(registered):
    """replicas_min is the fewest total_replicas (prefill + decode) of a group whose row has a
    point meeting the SLO with rho <= rho_max (brute force over the points); b_max_slo the
    largest decode_service_ms meeting it within rho_max; a chunk per group compiles once."""
    spec = grid_from_dict({"name": "tandem", "options": {"serving": "toy-tandem"}, "grid": {**GRID, "slo_ms": 60.0}})
    points = evaluate(spec).to_pylist()
    optimum, _ = decide(spec)
    rows = optimum.to_pylist()
    assert len(rows) == 8  # 2 arrival rates x 2 x 2 replica counts
    for row in rows:
        same = [p for p in points if p["arrival_rps"] == row["arrival_rps"]]
        ok = [p["total_replicas"] for p in same if p["slo_ok"] and p["feasible"] and p["rho"] <= p["rho_max"]]
        assert row["replicas_min"] == min(ok)
        mine = [p for p in same if (p["prefill_replicas"], p["decode_replicas"]) == (row["prefill_replicas"],
                                                                                       row["decode_replicas"])]
        # b_max_slo honours rho_max (issue 27): a point above it is near saturation
        meets = [p["decode_service_ms"] for p in mine if p["slo_ok"] and p["feasible"]
                 and p["action"] != "near_saturation"]
        assert row["b_max_slo"] == (max(meets) if meets else None)
        assert row["total_replicas"] == row["prefill_replicas"] + row["decode_replicas"]
    ev = Evaluator(spec, chunk_size=spec.group_size)
    assert len(list(ev.iter_chunks())) == 2 and ev.compile_count() == 1


@pytest.mark.parametrize("first", [MM1Queue(), MD1Queue()], ids=["mm1", "md1"])
def test_the_shipped_contract_passes_on_a_registered_tandem(first):
    """The contract `sweep.testing` ships (points drawn from the tandem's declared domains,
    its example grid, the checks every registered model passes) runs on a tandem with no edit:
    a stage's latency is +inf where that stage's own `stable` is false (its declared NULL
    flag), and where the tandem is unstable some checked latency is."""
    from sweep.testing.models import check_model

    model = register(tandem(Stage("prefill", first), Stage("decode", MM1Queue()), serving="toy-tandem-contract"))
    try:
        check_model(model, n=256)
    finally:
        unregister("toy-tandem-contract")


@pytest.mark.parametrize("table", ["uncertainty", "sensitivity", "simulation"])
def test_a_table_the_tandem_declares_no_columns_for_is_refused(registered, table):
    """A tandem declares no [uncertainty], [sensitivity] or [simulation] columns: the loader
    refuses such a table in one line naming it, rather than ignoring it or failing later."""
    from sweep.errors import GridError

    body = {"uncertainty": {"samples": 8}, "sensitivity": {}, "simulation": {}}[table]
    with pytest.raises(GridError, match=rf"\[{table}\].*declares no \[{table}\] columns"):
        grid_from_dict({"name": "tandem", "options": {"serving": "toy-tandem"}, "grid": GRID, table: body})
