"""The toy single-server queues (`sweep.testing.toy`): each reference value says where it
comes from: the M/M/1 sojourn Exp(mu - lambda) and Pollaczek-Khinchine's mean (textbook
closed forms), Erlang's 1909 M/D/1 waiting-time sum evaluated in 100-digit decimals, and the
plain-NumPy Lindley simulation with its batch-means confidence interval.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

from sweep.api import decide, evaluate, grid_from_dict
from sweep.engine.evaluate import evaluate_points
from sweep.models import register, unregister
from sweep.models.base import CATALOG_FIELDS
from sweep.testing.models import check_values
from sweep.testing.toy import EXACT_SPAN, MD1Queue, MM1Queue, batch_means, md1_wait, simulate


def run(model, **params):
    """Every unconditional column of `model` at the points `params` (broadcast)."""
    figures = {k: np.ones(1) for k in CATALOG_FIELDS}
    base = {"replicas": 1.0, "percentile": 0.99, "slo_ms": math.inf, "rho_max": 0.85, "rho_min": 0.5}
    return evaluate_points(model, {**base, **params}, figures, static={})


def erlang_wait_tail(w: float, rho: float, d: float = 1.0) -> float:
    """P(W > w) for M/D/1 by Erlang's alternating sum (1 - rho) sum_{k <= w/D}
    (lambda (kD - w))^k / k! e^{-lambda (kD - w)}, in 100-digit decimals (its terms reach
    e^{lambda w}: float64 loses every digit by w ~ 30 D)."""
    with localcontext() as ctx:
        ctx.prec = 100
        lam, dd, ww = Decimal(rho) / Decimal(d), Decimal(d), Decimal(w)
        total = Decimal(0)
        for k in range(int(w // d) + 1):
            x = lam * (k * dd - ww)
            total += (x**k if k else Decimal(1)) / math.factorial(k) * (-x).exp()
        return float(1 - (1 - Decimal(rho)) * total)


def test_mm1_closed_forms():
    s, lam = 10.0, np.array([1.0, 50.0, 90.0, 99.9, 100.0, 150.0])  # rho = lam s / 1000
    q = np.array([0.5, 0.9, 0.99, 0.999999, 0.99, 0.99])
    out = run(MM1Queue(), arrival_rps=lam, service_ms=s, percentile=q)
    rho = lam * s * 1e-3
    ok = rho < 1
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(out["e_resp_ms"][ok], s / (1 - rho[ok]), rtol=1e-14)
        np.testing.assert_allclose(out["e_wait_ms"][ok], rho[ok] * s / (1 - rho[ok]), rtol=1e-13)
        np.testing.assert_allclose(out["latency_ms"][ok], -np.log1p(-q[ok]) * s / (1 - rho[ok]), rtol=1e-14)
    assert (out["stable"] == ok).all()
    assert np.isinf(out["latency_ms"][~ok]).all() and np.isinf(out["e_resp_ms"][~ok]).all()


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.6, 0.9, 0.99])
def test_md1_wait_cdf_is_erlangs(rho):
    """Exact (Crommelin-Franx, stable recursion) below EXACT_SPAN D: Erlang's sum to the
    rounding of F; the exponential tail above: its 1 - F to 1e-12."""
    cdf, _ = md1_wait(jnp.float64(rho), jnp.float64(1.0))
    ws = np.array([0.0, 0.3, 0.999, 1.0, 1.001, 1.5, 2.7, 5.2, 10.1, 15.99, 16.0, 16.5, 20.5, 30.3, 45.0])
    got = np.asarray(jax.vmap(cdf)(jnp.asarray(ws)))
    tail = np.array([erlang_wait_tail(w, rho) for w in ws])
    near = ws < EXACT_SPAN
    np.testing.assert_allclose(got[near], 1.0 - tail[near], rtol=0, atol=2e-15)
    # theta and C carry a (1 - rho) cancellation: 2e-14 of the tail at rho = 0.99
    far = ~near & (tail > 1e-6)
    np.testing.assert_allclose(1.0 - got[far], tail[far], rtol=1e-12)
    np.testing.assert_allclose(got[~near], 1.0 - tail[~near], rtol=0, atol=2e-14)
    assert got[0] == pytest.approx(1.0 - rho, rel=1e-15)  # the atom: no wait with probability 1 - rho


def test_md1_closed_forms():
    d = 4.0
    lam = np.array([10.0, 100.0, 200.0, 240.0, 249.0, 250.0, 300.0])  # rho = lam d / 1000
    q = np.array([0.99, 0.5, 0.9, 0.99, 0.999999, 0.99, 0.99])
    out = run(MD1Queue(), arrival_rps=lam, service_ms=d, percentile=q)
    rho = lam * d * 1e-3
    ok = rho < 1
    # Pollaczek-Khinchine with E[S^2] = D^2: E[W] = rho D / (2 (1 - rho))
    np.testing.assert_allclose(out["e_wait_ms"][ok], rho[ok] * d / (2 * (1 - rho[ok])), rtol=1e-13)
    assert np.isinf(out["latency_ms"][~ok]).all() and (out["stable"] == ok).all()
    # P50 at rho = 0.4: inside the atom (no wait with probability 0.6), exactly D
    assert out["latency_ms"][1] == d
    # elsewhere P(W <= latency - D) = q: by Erlang's sum in decimals up to 60 D (beyond, its
    # terms need more digits than is reasonable), else by the dominant pole's tail C e^{-theta w}
    # (theta D the root of rho (e^x - 1) = x by brentq, C = (1 - rho) / (rho e^x - 1))
    for i in np.flatnonzero(ok & (q > 1 - rho)):
        w = out["latency_ms"][i] - d
        if w <= 60 * d:
            assert 1.0 - erlang_wait_tail(w, rho[i], d) == pytest.approx(q[i], abs=3e-15)
        else:
            x = brentq(lambda x, r=rho[i]: r * math.expm1(x) - x, 1e-12, 50.0, xtol=1e-300, rtol=1e-15)
            c = (1 - rho[i]) / (rho[i] * math.exp(x) - 1)
            assert c * math.exp(-x * w / d) == pytest.approx(1 - q[i], rel=1e-9)


def test_md1_tail_decay_is_the_dominant_pole():
    """theta D solves rho (e^x - 1) = x: the tail's ratio over one D is e^{-theta D}."""
    for rho in (1e-12, 0.01, 0.5, 0.999):
        cdf, _ = md1_wait(jnp.float64(rho), jnp.float64(1.0))
        w = np.array([EXACT_SPAN + 2.0, EXACT_SPAN + 3.0])
        with np.errstate(divide="ignore"):
            t = 1.0 - np.asarray(jax.vmap(cdf)(jnp.asarray(w)))
        if t[1] > 1e-8:  # a tail float64 can see
            x = -math.log(t[1] / t[0])
            assert rho * math.expm1(x) == pytest.approx(x, rel=1e-6)


def test_simulator_reproduces_mm1():
    """The simulator itself, against the M/M/1 closed forms (mean S/(1-rho), P90)."""
    rng = np.random.default_rng(7)
    sojourn = simulate(rng, 400_000, 70.0, [("M", 10.0, 1)])[20_000:]
    mean, hw = batch_means(sojourn, np.mean)
    assert abs(mean - 10.0 / 0.3) <= hw
    p90, hw = batch_means(sojourn, lambda b: np.quantile(b, 0.9))
    assert abs(p90 - math.log(10.0) * 10.0 / 0.3) <= hw


@pytest.mark.parametrize("lam", [100.0, 200.0])
def test_md1_against_simulation(lam):
    d = 4.0
    out = run(MD1Queue(), arrival_rps=np.full(3, lam), service_ms=d, percentile=np.array([0.5, 0.9, 0.99]))
    sojourn = simulate(np.random.default_rng(int(lam)), 400_000, lam, [("D", d, 1)])[20_000:]
    mean, hw = batch_means(sojourn, np.mean)
    assert abs(mean - out["e_resp_ms"][0]) <= hw
    for i, q in enumerate((0.5, 0.9, 0.99)):
        sim, hw = batch_means(sojourn, lambda b, q=q: np.quantile(b, q))
        assert abs(sim - out["latency_ms"][i]) <= max(hw, 1e-9), (q, sim, out["latency_ms"][i], hw)


def _domain_points(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Points over the whole declared domain, its bounds included."""
    pick = lambda lo, hi: 10 ** rng.uniform(math.log10(lo), math.log10(hi), n)  # noqa: E731
    p = {"arrival_rps": pick(1e-6, 1e9), "service_ms": pick(1e-6, 1e7), "replicas": np.floor(pick(1, 1e6)),
         "percentile": rng.uniform(0.01, 0.999999, n),
         "slo_ms": np.where(rng.random(n) < 0.5, math.inf, pick(1e-3, 1e9)),
         "rho_max": rng.uniform(0.5, 1, n), "rho_min": rng.uniform(0, 0.49, n)}
    p["arrival_rps"][:4] = [1e-6, 1e9, 1e-6, 1e9]
    p["service_ms"][:4] = [1e-6, 1e7, 1e7, 1e-6]
    p["percentile"][:2] = [0.01, 0.999999]
    # loads near saturation, where the M/D/1 tail and theta are delicate
    p["arrival_rps"][4:20] = (1 - 10.0 ** -rng.uniform(1, 12, 16)) * 1e3 * p["replicas"][4:20] / p["service_ms"][4:20]
    return p


@pytest.mark.parametrize("model", [MM1Queue(), MD1Queue()], ids=["mm1", "md1"])
def test_columns_as_declared_no_nan_over_the_domain(model):
    rng = np.random.default_rng(3)
    n = 256
    out = run(model, **_domain_points(rng, n))
    check_values(model, out)
    stable = out["stable"]
    for name in ("e_wait_ms", "e_resp_ms", "latency_ms"):
        assert np.isinf(out[name][~stable]).all() and np.isfinite(out[name][stable]).all(), name
    assert (out["latency_ms"][stable] >= out["service_ms"][stable] * (model.serving == "toy-md1")).all()


@pytest.fixture
def md1_registered():
    model = register(MD1Queue())
    yield model
    unregister(model.serving)


def test_standalone_through_the_engine(md1_registered):
    """A toy queue is a complete serving mode: the engine evaluates and decides it."""
    spec = grid_from_dict({"name": "toy", "options": {"serving": "toy-md1"},
                           "grid": {"arrival_rps": [50.0, 100.0], "replicas": [1, 2], "service_ms": [2.0, 5.0, 12.0],
                                    "slo_ms": 40.0}})
    points = evaluate(spec).to_pylist()
    assert len(points) == 12
    direct = run(MD1Queue(), arrival_rps=np.array([p["arrival_rps"] for p in points]),
                 replicas=np.array([p["replicas"] for p in points], dtype=float),
                 service_ms=np.array([p["service_ms"] for p in points]), slo_ms=40.0)
    for i, p in enumerate(points):
        for name in ("e_resp_ms", "latency_ms", "rho"):
            expected = direct[name][i]
            assert (p[name] is None and not np.isfinite(expected)) or p[name] == pytest.approx(expected, rel=1e-14)
    optimum, _ = decide(spec)
    for row in optimum.to_pylist():  # b_max_slo: the largest service time that meets the SLO within rho_max
        meets = [p["service_ms"] for p in points if p["arrival_rps"] == row["arrival_rps"]
                 and p["replicas"] == row["replicas"] and p["slo_ok"] and p["feasible"]
                 and p["action"] != "near_saturation"]
        assert row["b_max_slo"] == (max(meets) if meets else None)
