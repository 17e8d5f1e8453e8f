"""`[uncertainty]` and `[sensitivity]` (sweep.engine.plan, sweep.grid.uncertainty; docs/uncertainty.md)."""

from __future__ import annotations

import contextlib
import copy
import math
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from scipy.stats import norm

from sweep.api import decide, evaluate, grid_from_dict
from sweep.cli import main
from sweep.engine import evaluate as engine_evaluate
from sweep.engine.evaluate import DEFAULT_CHUNK, Evaluator
from sweep.engine.plan import draws
from sweep.errors import GridError
from sweep.models.continuous import analytic as cb_analytic

ROOT = Path(__file__).resolve().parents[1]

#: The seed worked example (grids/seed-gpt3.toml): GPT-3 175B on 8 x A100, T_svc = 50 + 0.5 B ms,
#: with a P99 SLO of 350 ms (200 ms is met by no batch size there).
SEED = {
    "name": "u",
    "grid": {
        "arrival_rps": 100.0, "batch_size": [8, 16, 32], "batch_window_ms": math.inf, "seq_len": 2048,
        "model": "gpt3-175b", "gpu": "a100-80gb", "gpus_per_replica": 8, "replicas": 1,
        "t_fixed_ms": 50.0, "t_req_ms": 0.5, "slo_ms": 350.0, "percentile": 0.99,
    },
}
#: B = 1 without a window: an M/D/1-like queue whose latency rises with the arrival rate,
#: so a point misses its SLO exactly when the rate exceeds its headroom.
MONOTONE = {
    "name": "m",
    "grid": {**SEED["grid"], "batch_size": 1, "t_fixed_ms": 5.0, "t_req_ms": 1.0, "slo_ms": 60.0},
}
CONTINUOUS = {
    "name": "c",
    "options": {"serving": "continuous"},
    "grid": {
        "model": "llama-3.1-8b", "gpu": "h100-sxm", "arrival_rps": 4.0, "prompt_tokens": 1000.0,
        "output_tokens": 200.0, "t_fixed_ms": 12.0, "t_token_ms": 0.05, "t_ctx_ms": 1e-5,
        "batch_size": [16, 64], "ttft_slo_ms": 2000.0, "tpot_slo_ms": 50.0,
    },
}


def grid(base: dict, **tables: object) -> dict:
    doc = copy.deepcopy(base)
    doc.update(copy.deepcopy(tables))
    return doc


def cols(doc: dict, chunk_size: int = DEFAULT_CHUNK) -> dict[str, np.ndarray]:
    """Every column of the evaluated grid; a float column's NULL (unbounded, under the output
    contract) back to the engine's +inf."""
    t = evaluate(grid_from_dict(doc), chunk_size=chunk_size)
    out = {}
    for n in t.column_names:
        col = t.column(n)
        if pa.types.is_floating(col.type):
            col = pc.fill_null(col, math.inf)
        out[n] = col.to_numpy(zero_copy_only=False)
    return out


def with_grid(base: dict, **values: object) -> dict:
    doc = copy.deepcopy(base)
    doc["grid"].update(values)
    return doc


# --------------------------------------------------------------------------- uncertainty


def test_default_grids_write_no_planning_columns():
    names = set(cols(SEED))
    assert not {"p_slo_breach", "latency_p50_ms", "headroom_rps"} & names


@pytest.mark.parametrize("sd", [0.0, 1e-9])
def test_bands_shrink_to_the_point_value_as_sd_goes_to_zero(sd):
    c = cols(grid(SEED, uncertainty={"samples": 32, "arrival_rps": {"dist": "normal", "sd": sd},
                                     "t_req_ms": {"dist": "lognormal", "sd": sd}}))
    for q in (5, 50, 95):
        np.testing.assert_allclose(c[f"latency_p{q}_ms"], c["latency_ms"], rtol=1e-6)
    np.testing.assert_array_equal(c["p_slo_breach"], np.where(c["slo_ok"], 0.0, 1.0))


def test_continuous_bands_shrink_too_and_are_ordered():
    c = cols(grid(CONTINUOUS, uncertainty={"samples": 16, "prompt_tokens": {"dist": "uniform", "low": 1, "high": 1}}))
    for stem in ("ttft_p", "tpot_p", "e2e_p"):
        np.testing.assert_allclose(c[f"{stem}_p50_ms"], c[f"{stem}_ms"], rtol=1e-12)
    c = cols(grid(CONTINUOUS, uncertainty={"samples": 64, "arrival_rps": {"dist": "normal", "sd": 0.3}}))
    assert np.all(c["ttft_p_p5_ms"] <= c["ttft_p_p50_ms"]) and np.all(c["ttft_p_p50_ms"] <= c["ttft_p_p95_ms"])
    assert np.all(c["ttft_p_p5_ms"] < c["ttft_p_p95_ms"])


def test_breach_probability_has_its_closed_form():
    """Latency rises with the rate here, so with arrival_rps ~ N(g, (0.2 g)^2) a sample
    breaches iff its rate exceeds lambda* = headroom_rps x replicas (the [sensitivity]
    answer): P(breach) = P(z > (lambda*/g - 1) / 0.2). Reference 1: that count over the
    very draws the engine used (exact). Reference 2: 1 - Phi((lambda*/g - 1) / 0.2), to
    within 4 binomial standard errors of S = 4096 samples."""
    s = 4096
    doc = grid(with_grid(MONOTONE, arrival_rps=[100.0, 115.0, 130.0]),
               uncertainty={"samples": s, "seed": 7, "arrival_rps": {"dist": "normal", "sd": 0.2}},
               sensitivity={})
    c = cols(doc)
    z, _ = draws(grid_from_dict(doc).uncertainty)
    for g, lam_star, p in zip(c["arrival_rps"], c["headroom_rps"] * c["replicas"], c["p_slo_breach"]):
        assert 0.0 < p < 1.0
        threshold = (lam_star / g - 1.0) / 0.2
        assert p == pytest.approx(np.mean(z[:, 0] > threshold), abs=0.5 / s)
        phi = 1.0 - norm.cdf(threshold)
        assert abs(p - phi) < 4 * math.sqrt(phi * (1 - phi) / s)


def test_results_do_not_depend_on_the_chunking_and_memory_is_bounded():
    doc = grid(with_grid(SEED, replicas=[1, 2], arrival_rps=[80.0, 100.0, 120.0]),
               uncertainty={"samples": 64, "arrival_rps": {"dist": "lognormal", "sd": 0.25}})
    spec = grid_from_dict(doc)
    for chunk in (64, 1024, DEFAULT_CHUNK):
        ev = Evaluator(spec, chunk)
        # a call holds at most max(chunk, one group) x S (point, sample) evaluations
        assert ev.chunk_size * 64 <= max(chunk, spec.group_size * 64)
    a, b = cols(doc, chunk_size=64), cols(doc)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    ev = Evaluator(spec, 64)
    assert ev.n_chunks == 3  # one group (3 batch sizes x 2 replicas) per call
    assert len(list(ev.iter_chunks())) == 3 and ev.compile_count() == 1  # chunks 2 and 3 do not recompile


def test_risk_makes_decisions_require_a_small_breach_probability():
    base = grid(SEED, uncertainty={"samples": 256, "arrival_rps": {"dist": "normal", "sd": 0.2}})
    free = cols(base)
    doc = copy.deepcopy(base)
    doc["uncertainty"]["risk"] = 0.05
    risky = cols(doc)
    np.testing.assert_array_equal(risky["slo_ok"], free["slo_ok"] & (free["p_slo_breach"] <= 0.05))
    assert (free["slo_ok"] & (free["p_slo_breach"] > 0.05)).any()  # the constraint bites somewhere
    # and the action says so (issue 27: a point that breaches too often was still "ok"): where
    # risk takes slo_ok away, action is slo_violated unless it was unstable or out of memory
    bitten = free["slo_ok"] & ~risky["slo_ok"]
    worse = np.isin(free["action"], ["unstable", "out_of_memory"])
    assert (bitten & ~worse).any() and set(free["action"][bitten & ~worse]) - {"slo_violated"}
    assert set(risky["action"][bitten & ~worse]) == {"slo_violated"}
    np.testing.assert_array_equal(risky["action"][~bitten | worse], free["action"][~bitten | worse])


def _optimum(doc: dict) -> dict[str, np.ndarray]:
    """optimum.parquet's columns of the grid, NULL read back as the engine's +inf."""
    t, _ = decide(grid_from_dict(doc))
    return {n: pc.fill_null(pc.cast(t.column(n), pa.float64()), math.inf).to_numpy() if n.startswith("replicas_min")
            else t.column(n).to_numpy(zero_copy_only=False) for n in t.column_names}


def _nearest_rank(values: np.ndarray, q: int) -> float:
    v = np.sort(values)
    return float(v[round(q / 100 * (len(v) - 1))])


@pytest.mark.parametrize("replicas", [list(range(1, 9)), [1, 2, 3]])
def test_replicas_min_bands_are_the_replicas_each_scenario_needs(replicas):
    """Reference: the plain engine (no [uncertainty]) on a grid whose arrival_rps axis is
    the S rates the scenarios drew (the same draws, `plan.draws`, scaled as documented:
    g (1 + 0.3 z)). Its replicas_min at each drawn rate is what that scenario needs; the
    bands are their nearest-rank percentiles. With replicas only up to 3 some scenarios need
    more than the axis offers: +inf (NULL in the file) for them, and for a band past them."""
    s, g = 64, 1000.0
    doc = grid(with_grid(MONOTONE, arrival_rps=g, batch_size=[1, 2, 4], replicas=replicas),
               uncertainty={"samples": s, "seed": 3, "arrival_rps": {"dist": "normal", "sd": 0.3}})
    opt = _optimum(doc)
    z, _ = draws(grid_from_dict(doc).uncertainty)
    rates = g * (1.0 + 0.3 * z[:, 0])
    assert (rates > 0).all()
    plain = _optimum(with_grid(MONOTONE, arrival_rps=sorted(set(rates.tolist())), batch_size=[1, 2, 4],
                               replicas=replicas))
    need_at = dict(zip(plain["arrival_rps"], plain["replicas_min"]))
    need = np.array([need_at[r] for r in rates])
    assert len(set(need.tolist())) >= 3  # the scenarios really need different fleets
    for q in (5, 50, 95):
        np.testing.assert_array_equal(opt[f"replicas_min_p{q}"], _nearest_rank(need, q))
    assert (np.isinf(need).any() and np.isinf(opt["replicas_min_p95"]).all()) == (replicas == [1, 2, 3])


def test_replicas_min_bands_shrink_to_replicas_min_as_sd_goes_to_zero():
    base = with_grid(MONOTONE, arrival_rps=[200.0, 400.0, 1500.0], batch_size=[1, 2], replicas=[1, 2, 3, 4])
    opt = _optimum(grid(base, uncertainty={"samples": 32, "arrival_rps": {"dist": "normal", "sd": 0.0}}))
    # 1500 req/s needs more than 4
    assert np.isfinite(opt["replicas_min"]).any() and np.isinf(opt["replicas_min"]).any()
    for q in (5, 50, 95):
        np.testing.assert_array_equal(opt[f"replicas_min_p{q}"], opt["replicas_min"])
    cb = with_grid(CONTINUOUS, arrival_rps=[4.0, 40.0, 400.0], replicas=[1, 2, 4, 8])
    opt = _optimum(grid(cb, uncertainty={"samples": 16, "arrival_rps": {"dist": "lognormal", "sd": 0.0}}))
    assert len(set(opt["replicas_min"].tolist())) >= 2  # continuous serving too, more than one answer
    for q in (5, 50, 95):
        np.testing.assert_array_equal(opt[f"replicas_min_p{q}"], opt["replicas_min"])
    # only with [uncertainty]
    assert not {"replicas_min_p5", "replicas_min_p50", "replicas_min_p95"} & set(_optimum(base))


def test_profile_covariance_is_sampled(tmp_path):
    text = (ROOT / "grids" / "seed-gpt3-profile.toml").read_text()
    (tmp_path / "profiles").mkdir()
    shutil.copy(ROOT / "grids" / "profiles" / "gpt3-a100.csv", tmp_path / "profiles")  # beside the grid
    path = tmp_path / "p.toml"
    path.write_text(text + "\n[uncertainty]\nsamples = 128\n[uncertainty.profile]\ncovariance = true\n")
    from sweep.api import load_grid

    spec = load_grid(path)
    t = evaluate(spec)
    lat, p5, p95 = (t.column(n).to_numpy() for n in ("latency_ms", "latency_p5_ms", "latency_p95_ms"))
    finite = np.isfinite(lat)
    assert finite.any() and np.all(p5[finite] < p95[finite])
    # the band is a few standard errors of the fit wide, not tens of percent
    assert np.all((p95[finite] - p5[finite]) / lat[finite] < 0.2)


# --------------------------------------------------------------------------- sensitivity


def _fd(base: dict, key: str, lat: str | tuple[str, ...] = "latency_ms", rel: float = 1e-5) -> np.ndarray:
    """Central finite difference of the SLO latency `lat` (or of each of several) in `key`
    (reference for the derivatives)."""
    g = base["grid"][key]
    h = g * rel
    up = cols(with_grid(base, **{key: g + h}))
    dn = cols(with_grid(base, **{key: g - h}))
    if isinstance(lat, tuple):
        return np.stack([(up[k] - dn[k]) / (2 * h) for k in lat])
    return (up[lat] - dn[lat]) / (2 * h)


@pytest.mark.parametrize("key", ["arrival_rps", "t_fixed_ms", "t_req_ms"])
def test_dynamic_derivatives_match_central_differences(key):
    base = with_grid(SEED, batch_size=[16, 32])
    c = cols(grid(base, sensitivity={}))
    fd = _fd(base, key)
    assert np.all(np.isfinite(fd))
    np.testing.assert_allclose(c[f"d_latency_d_{key}"], fd, rtol=1e-6)


#: Continuous serving where the model is smooth around every point: prompts and outputs
#: spread (lognormal CVs 0.5 and 1), the slot wait and the step mix both active. The
#: derivative and headroom tests share this grid's shape, so its derivative program
#: (about 8 s to compile) compiles once for both.
CONTINUOUS_SMOOTH = with_grid(CONTINUOUS, arrival_rps=3.0, prompt_cv=0.5, output_cv=1.0, batch_size=[16, 64],
                              replicas=[1, 2])


@contextlib.contextmanager
def converged_fixed_point(iterations: int = 80):
    """The continuous model with its step-time fixed point iterated `iterations` times
    (the engine's `N_FIXED` = 8 leave a relative residual up to ~2e-4 at the 99.9th percentile of
    random points): every compiled program is dropped on entry and exit."""
    def clear() -> None:
        jax.clear_caches()
        for f in (engine_evaluate._compiled_chunk, engine_evaluate._compiled_finish, engine_evaluate._compiled_points):
            f.cache_clear()

    old = cb_analytic.N_FIXED
    cb_analytic.N_FIXED = iterations
    clear()
    try:
        yield
    finally:
        cb_analytic.N_FIXED = old
        clear()


CONTINUOUS_KEYS = ("arrival_rps", "t_fixed_ms", "t_token_ms", "t_ctx_ms", "prompt_tokens", "output_tokens")


@pytest.mark.slow  # about 90 s on 2 cores: it recompiles every program with the fixed point converged
def test_continuous_derivatives_match_central_differences():
    """The derivatives (implicit-function derivative of the step-time fixed point, then
    automatic differentiation of the rest) against central differences of the model with
    its fixed point solved to convergence, for every input and SLO latency (TTFT, TPOT and
    E2E percentiles): the rule itself to 1e-6, both taken at the converged fixed point. The
    published derivatives are taken at the engine's 8-iteration iterate: within 1e-4 of the
    converged differences (3.1e-5 measured), and within 1e-3 of central differences of the
    published latencies (1.4e-4 measured), which also differentiate the iteration's residual."""
    c = cols(grid(CONTINUOUS_SMOOTH, sensitivity={}))
    assert c["stable"].all()
    lats = ("ttft_p_ms", "tpot_p_ms", "e2e_p_ms")
    with converged_fixed_point():  # one compilation for every key: the grids share a shape
        limit = cols(grid(CONTINUOUS_SMOOTH, sensitivity={}))
        fd = {key: _fd(CONTINUOUS_SMOOTH, key, lats) for key in CONTINUOUS_KEYS}
    for key in CONTINUOUS_KEYS:
        published = _fd(CONTINUOUS_SMOOTH, key, lats)
        for i, lat in enumerate(lats):
            name = f"d_{lat.removesuffix('_ms')}_d_{key}"
            assert np.all(np.isfinite(fd[key][i])) and np.all(fd[key][i] != 0.0)
            np.testing.assert_allclose(limit[name], fd[key][i], rtol=1e-6, err_msg=f"{lat} {key}")
            np.testing.assert_allclose(c[name], fd[key][i], rtol=1e-4, err_msg=f"{lat} {key}")
            np.testing.assert_allclose(c[name], published[i], rtol=1e-3, err_msg=f"{lat} {key}")


def test_the_fixed_point_derivative_is_the_limit_of_the_iterations():
    """`_fixed_point`'s rule (the implicit function theorem) against forward-mode
    differentiation through the iterations of the same map, both at 80 iterations (where
    the iterate has converged), on random engines where the model is stable: the rule is
    the limit of the iterate's derivative."""
    rng = np.random.default_rng(7)
    n = 64
    args = dict(lam=10 ** rng.uniform(-1, 1, n), prompt_mean=10 ** rng.uniform(1, 3.5, n),
                prompt_cv=rng.uniform(0, 1.5, n), output_mean=10 ** rng.uniform(1, 3, n),
                output_cv=rng.uniform(0, 1.5, n), cap=rng.integers(1, 257, n) * 1.0,
                max_batched_tokens=np.full(n, np.inf), kv_capacity_tokens=10 ** rng.uniform(4, 6, n),
                block_tokens=np.full(n, 16.0), t_fixed=rng.uniform(5e-3, 5e-2, n),
                t_token=10 ** rng.uniform(-5.5, -4, n), t_ctx=10 ** rng.uniform(-9, -7, n),
                service_cv=np.full(n, 0.2), q=np.full(n, 0.99))
    names = ("lam", "prompt_mean", "output_mean", "t_fixed", "t_token", "t_ctx")

    def jac(fn):
        def one(*row):
            kw = dict(zip(args, row))
            def f(theta):
                o = fn(**{**kw, **dict(zip(names, theta))})
                return jnp.stack([o["ttft_p"], o["tpot_p"], o["e2e_p"]])
            return jax.jacfwd(f)(jnp.stack([kw[k] for k in names])), fn(**kw)["stable"]
        return jax.jit(jax.vmap(one))(*(jnp.asarray(v) for v in args.values()))

    with converged_fixed_point():
        implicit, stable = jac(cb_analytic.cb_point)
        original = cb_analytic._fixed_point
        cb_analytic._fixed_point = original.fun  # plain autodiff through the loop
        try:
            iterated, _ = jac(cb_analytic.cb_point)
        finally:
            cb_analytic._fixed_point = original
    ok = np.asarray(stable)
    assert ok.sum() >= n // 2
    np.testing.assert_allclose(np.asarray(implicit)[ok], np.asarray(iterated)[ok], rtol=1e-6, atol=1e-12)


def test_a_presolved_fixed_point_gives_the_same_values_and_derivatives():
    """`[sensitivity]` solves continuous serving's fixed point once per point over the
    whole chunk (`ContinuousModel.presolve`, `cb_analytic.cb_state`) and hands it to
    `cb_point` as ``state=``: every output and the derivatives of the three SLO latencies
    in the six inputs are those of the model solving it itself (same operations, so equal
    to rounding), on random engines including caps, budgets and KV limits that bind."""
    rng = np.random.default_rng(11)
    n = 64
    cap = rng.integers(1, 257, n) * 1.0
    args = dict(lam=10 ** rng.uniform(-1, 1.5, n), prompt_mean=10 ** rng.uniform(1, 3.5, n),
                prompt_cv=rng.uniform(0, 1.5, n), output_mean=10 ** rng.uniform(1, 3, n),
                output_cv=rng.uniform(0, 1.5, n), cap=cap,
                max_batched_tokens=np.maximum(cap, rng.choice([np.inf, 512.0, 4096.0], n)),
                kv_capacity_tokens=rng.choice([np.inf, 2e4, 2e5], n), block_tokens=np.full(n, 16.0),
                t_fixed=rng.uniform(5e-3, 5e-2, n), t_token=10 ** rng.uniform(-5.5, -4, n),
                t_ctx=10 ** rng.uniform(-9, -7, n), service_cv=rng.choice([0.0, 0.2], n), q=np.full(n, 0.99))
    names = ("lam", "prompt_mean", "output_mean", "t_fixed", "t_token", "t_ctx")
    lats = ("ttft_p", "tpot_p", "e2e_p")

    def one(*row):
        kw = dict(zip(args, row))
        state = cb_analytic.cb_state(**kw)

        def f(theta, given):
            o = cb_analytic.cb_point(**{**kw, **dict(zip(names, theta))}, state=state if given else None)
            return tuple(o[k] for k in lats)

        theta = tuple(kw[k] for k in names)
        return (cb_analytic.cb_point(**kw), cb_analytic.cb_point(**kw, state=state),
                jax.jacrev(lambda th: f(th, False))(theta), jax.jacrev(lambda th: f(th, True))(theta))

    own, given, d_own, d_given = jax.jit(jax.vmap(one))(*(jnp.asarray(v) for v in args.values()))
    stable = np.asarray(own["stable"])
    assert 0 < stable.sum() < n  # both kinds of point
    for k in own:
        np.testing.assert_allclose(np.asarray(given[k]), np.asarray(own[k]), rtol=1e-12, err_msg=k)
    for i in range(len(lats)):
        for j in range(len(names)):
            a, b = np.asarray(d_given[i][j])[stable], np.asarray(d_own[i][j])[stable]
            assert np.all(np.isfinite(a))
            np.testing.assert_allclose(a, b, rtol=1e-10, err_msg=f"{lats[i]} {names[j]}")


@pytest.mark.slow  # about 40 s on 2 cores
def test_continuous_derivatives_are_finite_wherever_the_latency_is():
    """No CV (exact square roots of zero spreads), no context cost, budgets and caps that
    bind: every derivative is finite where its latency is, NULL (unbounded) where it is not;
    the roofline's grid gives derivatives in the rate and the lengths only."""
    doc = grid(with_grid(CONTINUOUS, arrival_rps=[0.5, 4.0, 60.0], prompt_tokens=[200.0, 4000.0],
                         output_tokens=[2.0, 200.0], t_ctx_ms=[0.0, 1e-5], batch_size=[1, 64],
                         max_batched_tokens=[2048, math.inf], prompt_cv=0.0, output_cv=[0.0, 1.0]), sensitivity={})
    c = cols(doc)
    assert c["stable"].any() and not c["stable"].all()
    for lat in ("ttft_p", "tpot_p", "e2e_p"):
        bounded = np.isfinite(c[f"{lat}_ms"])
        for key in CONTINUOUS_KEYS:
            d = c[f"d_{lat}_d_{key}"]
            assert np.isfinite(d[bounded]).all() and np.isinf(d[~bounded]).all(), (lat, key)
    roof = grid({"name": "r", "options": {"serving": "continuous"},
                 "grid": {"model": ["llama-3.1-8b", "llama-3.1-70b"], "gpu": "h100-sxm", "gpus_per_replica": [1, 4],
                          "arrival_rps": [0.5, 20.0], "prompt_tokens": [200.0, 4000.0], "output_tokens": 200.0,
                          "batch_size": [16, 64], "ttft_slo_ms": 2000.0, "tpot_slo_ms": 50.0}}, sensitivity={})
    r = cols(roof)
    assert "d_ttft_p_d_t_token_ms" not in r and np.isfinite(r["ttft_p_ms"]).any()
    for key in ("arrival_rps", "prompt_tokens", "output_tokens"):
        bounded = np.isfinite(r["ttft_p_ms"])
        assert np.isfinite(r[f"d_ttft_p_d_{key}"][bounded]).all()


def test_continuous_headroom_matches_a_brute_force_scan():
    """As for dynamic batching: the last met rate of 200 geometric rates from the point's
    own rate up (1 to 100 req/s per replica, 2.3 % apart), and met at headroom, missed just
    above it."""
    base = CONTINUOUS_SMOOTH
    c = cols(grid(base, sensitivity={}))
    rates = np.geomspace(1.0, 100.0, 200)
    assert (c["headroom_rps"] > c["arrival_rps"] / c["replicas"]).all()
    for i, (b, r) in enumerate(zip(c["batch_size"], c["replicas"])):
        own = c["arrival_rps"][i] / r
        scan = cols(with_grid(base, batch_size=int(b), replicas=int(r), arrival_rps=list(rates * r)))
        above = rates > own
        met = scan["slo_ok"][above]
        assert met[0] and not met.all()
        best = rates[above][: int(np.argmin(met))].max()
        assert best <= c["headroom_rps"][i] < best * (rates[1] / rates[0])
        h = c["headroom_rps"][i] * r
        at = cols(with_grid(base, batch_size=int(b), replicas=int(r), arrival_rps=[h, h * (1 + 1e-9)]))
        assert at["slo_ok"][0] and not at["slo_ok"][1]


def test_risk_and_bands_survive_a_simulation_pass(tmp_path):
    """With a [simulation] table the analytic model still decides, but the verdicts are
    taken again after the simulator's host pass: `risk` and the bands of replicas_min must
    come through it as they do without one."""
    unc = {"samples": 64, "risk": 0.05, "arrival_rps": {"dist": "normal", "sd": 0.3}}
    base = with_grid(MONOTONE, arrival_rps=[300.0, 600.0], batch_size=[1, 2], replicas=[1, 2, 3, 4, 6])
    plain = grid(base, uncertainty=unc)
    sim = grid(plain, simulation={"n_requests": 1000, "warmup": 100, "replications": 2, "seed": 3})
    a, b = cols(plain), cols(sim)
    assert (a["p_slo_breach"] > 0.05).any() and not a["slo_ok"].all()
    np.testing.assert_array_equal(a["slo_ok"], b["slo_ok"])
    oa, ob = _optimum(plain), _optimum(sim)
    for name in ("replicas_min", "replicas_min_p5", "replicas_min_p50", "replicas_min_p95"):
        np.testing.assert_array_equal(oa[name], ob[name])


def test_headroom_matches_a_brute_force_scan():
    """Reference: on 400 geometrically spaced rates (1 to 1000 req/s per replica, 1.7 %
    apart) evaluated by the plain kernel, the last rate of the run of met rates that starts
    at the point's own rate (0 where the point misses at its own rate)."""
    base = with_grid(SEED, batch_size=[8, 16, 32], replicas=[1, 2])
    c = cols(grid(base, sensitivity={}))
    rates = np.geomspace(1.0, 1000.0, 400)
    assert (c["headroom_rps"] > 0).any() and (c["headroom_rps"] == 0).any()
    for i, (b, r) in enumerate(zip(c["batch_size"], c["replicas"])):
        own = c["arrival_rps"][i] / r
        if not c["slo_ok"][i]:
            assert c["headroom_rps"][i] == 0.0
            continue
        scan = cols(with_grid(base, batch_size=int(b), replicas=int(r), arrival_rps=list(rates * r)))
        above = rates > own
        met = scan["slo_ok"][above]
        best = own if met.all() or not met[0] else rates[above][: int(np.argmin(met))].max()
        assert best <= c["headroom_rps"][i] < max(best, own) * (rates[1] / rates[0])
        # checked by evaluating there: met at headroom, missed just above
        h = c["headroom_rps"][i] * r
        at = cols(with_grid(base, batch_size=int(b), replicas=int(r), arrival_rps=[h, h * (1 + 1e-9)]))
        assert at["slo_ok"][0] and not at["slo_ok"][1]


def test_coefficient_derivatives_are_absent_under_the_roofline():
    doc = copy.deepcopy(SEED)
    del doc["grid"]["t_fixed_ms"], doc["grid"]["t_req_ms"]
    names = set(cols(grid(doc, sensitivity={})))
    assert "d_latency_d_arrival_rps" in names and "headroom_rps" in names
    assert "d_latency_d_t_fixed_ms" not in names


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("tables, where, rule", [
    ({"uncertainty": {"samples": 1}}, "uncertainty.samples", "must be an integer in [2, 4096]"),
    ({"uncertainty": {"samples": True}}, "uncertainty.samples", "must be an integer"),
    ({"uncertainty": {"seed": -1}}, "uncertainty.seed", "must be an integer in [0, 2^31)"),
    ({"uncertainty": {"risk": 1.0}}, "uncertainty.risk", "must be a number in [0, 1)"),
    ({"uncertainty": {"sampels": 8}}, "uncertainty.sampels", "did you mean"),
    ({"uncertainty": {"batch_size": {"dist": "normal", "sd": 0.1}}}, "uncertainty.batch_size",
     "unknown uncertainty key"),
    ({"uncertainty": {"arrival_rps": 0.2}}, "uncertainty.arrival_rps", "must be a table"),
    ({"uncertainty": {"arrival_rps": {"dist": "gamma", "sd": 0.1}}}, "uncertainty.arrival_rps.dist",
     "must be one of normal, lognormal, uniform"),
    ({"uncertainty": {"arrival_rps": {"dist": "normal"}}}, "uncertainty.arrival_rps.sd", "is required"),
    ({"uncertainty": {"arrival_rps": {"dist": "normal", "sd": -0.1}}}, "uncertainty.arrival_rps.sd",
     "must be a number in [0, 10]"),
    ({"uncertainty": {"arrival_rps": {"dist": "normal", "sd": 0.1, "low": 1}}}, "uncertainty.arrival_rps.low",
     "is not a normal parameter"),
    ({"uncertainty": {"arrival_rps": {"dist": "lognormal", "mean": 0, "sd": 0.1}}}, "uncertainty.arrival_rps.mean",
     "must be a finite number in [0.001, 1000]"),
    # issue 28: an OverflowError in sample_inputs before the mean had a domain
    ({"uncertainty": {"arrival_rps": {"dist": "lognormal", "mean": 1e-160, "sd": 0.2}}},
     "uncertainty.arrival_rps.mean = 1e-160", "must be a finite number in [0.001, 1000]"),
    ({"uncertainty": {"arrival_rps": {"dist": "normal", "mean": 1e300, "sd": 0.2}}},
     "uncertainty.arrival_rps.mean", "must be a finite number in [0.001, 1000]"),
    ({"uncertainty": {"t_req_ms": {"dist": "uniform", "low": 0, "high": 1e300}}},
     "uncertainty.t_req_ms.high", "must be a finite number in [0, 1000]"),

    ({"uncertainty": {"arrival_rps": {"dist": "uniform", "low": 1.2, "high": 0.8}}}, "uncertainty.arrival_rps.low",
     "must be <= high"),
    ({"uncertainty": {"profile": {"covariance": True}}}, "uncertainty.profile.covariance", "needs a [profile]"),
    ({"uncertainty": {"profile": {"covariance": 1}}}, "uncertainty.profile.covariance", "must be true or false"),
    ({"sensitivity": {"on": True}}, "sensitivity.on", "unknown sensitivity key"),
    ({"sensitivity": 1}, "sensitivity", "must be a table"),
])
def test_bad_tables_are_one_line_naming_key_value_rule(tables, where, rule):
    with pytest.raises(GridError) as exc:
        grid_from_dict(grid(SEED, **tables), source="g.toml")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("g.toml") and where in msg and rule in msg


@pytest.mark.parametrize("dist", [{"dist": "lognormal", "mean": 100, "sd": 0.1},
                                  {"dist": "uniform", "low": 50, "high": 150}])
def test_a_centre_outside_the_keys_domain_is_refused(dist):
    """mean (or the middle of low..high) x each grid value lies in the key's domain: 1e8 req/s
    x 100 = 1e10, beyond arrival_rps's [1e-06, 1e+09]; 1e6 req/s x 100 is inside."""
    doc = copy.deepcopy(SEED)
    doc["grid"]["arrival_rps"] = [1e6, 1e8]
    with pytest.raises(GridError) as exc:
        grid_from_dict(grid(doc, uncertainty={"arrival_rps": dist}), source="g.toml")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("g.toml: uncertainty.arrival_rps.") and "= 1e+10" in msg, msg
    assert "outside arrival_rps's domain [1e-06, 1e+09] requests/s" in msg, msg
    doc["grid"]["arrival_rps"] = [1e6]
    grid_from_dict(grid(doc, uncertainty={"arrival_rps": dist}), source="g.toml")


def test_a_coefficient_from_the_roofline_cannot_be_uncertain():
    doc = copy.deepcopy(SEED)
    del doc["grid"]["t_fixed_ms"], doc["grid"]["t_req_ms"]
    with pytest.raises(GridError, match=r"uncertainty.t_req_ms.*roofline"):
        grid_from_dict(grid(doc, uncertainty={"t_req_ms": {"dist": "normal", "sd": 0.1}}))


def test_simulated_latency_is_refused():
    doc = grid(SEED, options={"latency_model": "simulated"}, uncertainty={"samples": 8})
    with pytest.raises(GridError, match="needs an analytic latency model"):
        grid_from_dict(doc)


def test_bad_table_through_run_exits_2_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "g.toml"
    path.write_text((ROOT / "grids" / "seed-gpt3.toml").read_text() + "\n[uncertainty]\nsamples = 0\n")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "uncertainty.samples" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_samples_have_the_stated_moments_and_stay_in_the_domain():
    """Reference: the definitions in docs/uncertainty.md (the grid value g is the centre;
    sd and the uniform bounds are multiples of g), to within 5 standard errors of 4096 draws."""
    import jax.numpy as jnp

    from sweep.engine.plan import sample_inputs
    from sweep.grid.uncertainty import Dist, UncertaintyOptions
    from sweep.models import get_model

    model = get_model("dynamic")
    unc = UncertaintyOptions(samples=4096, seed=1, dists=(
        Dist("arrival_rps", "normal", 1.0, 2.0), Dist("t_req_ms", "lognormal", 1.1, 0.3),
        Dist("t_fixed_ms", "uniform", 0.5, 1.5)))
    z, zc = draws(unc)
    x = {"arrival_rps": jnp.asarray(100.0), "t_req_ms": jnp.asarray(2.0), "t_fixed_ms": jnp.asarray(10.0)}
    s = {k: np.asarray(v) for k, v in sample_inputs(x, unc, model, jnp.asarray(z), jnp.asarray(zc)).items()}
    se = 5 / math.sqrt(4096)
    assert s["t_req_ms"].mean() == pytest.approx(2.2, rel=0.3 * se / 1.1 + 1e-3)
    assert s["t_req_ms"].std() == pytest.approx(0.6, rel=0.1) and (s["t_req_ms"] > 0).all()
    assert s["t_fixed_ms"].min() >= 5.0 and s["t_fixed_ms"].max() < 15.0
    assert s["t_fixed_ms"].mean() == pytest.approx(10.0, abs=10 * se * 0.3)
    # a wide normal rate is clipped to arrival_rps's domain [1e-6, 1e9], never negative
    assert s["arrival_rps"].min() == 1e-6 and (s["arrival_rps"] > 0).all()


@pytest.mark.parametrize("n", [1, 5, 8, 13])
def test_blocked_is_vmap(n):
    """`blocked` (jax.lax.map over blocks, the points padded to whole blocks) gives vmap's
    result exactly, for fewer points than a block, a whole number of blocks and a remainder."""
    from sweep.engine.plan import blocked

    x = {"a": jnp.arange(n, dtype=jnp.float64), "b": jnp.linspace(1.0, 2.0, n)}

    def f(p):
        return {"s": jnp.sin(p["a"]) * p["b"], "t": jnp.stack([p["a"], p["b"]])}

    want, got = jax.vmap(f)(x), blocked(f, x, 4)
    for k in want:
        assert got[k].shape == want[k].shape
        np.testing.assert_array_equal(got[k], want[k])
