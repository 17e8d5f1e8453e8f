"""The Pareto frontier and its knee (`sweep.decide.pareto`, SPEC 6) against brute force.

References: a plain-Python brute force written from SPEC 6's definitions (pairwise
domination with exact float comparison, the knee rule), on random point sets drawn with
many ties and duplicates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweep.decide import pareto as decide

_pareto = jax.jit(jax.vmap(decide.pareto_mask))


_knee = jax.jit(jax.vmap(decide.knee_index))


_cols = jax.jit(jax.vmap(decide.pareto_mask_columns))


def brute_pareto(cap, lat, valid):
    n = len(cap)
    out = []
    for i in range(n):
        if not valid[i]:
            out.append(False)
            continue
        dominated = any(
            valid[j] and cap[j] >= cap[i] and lat[j] <= lat[i] and (cap[j] > cap[i] or lat[j] < lat[i])
            for j in range(n)
        )
        out.append(not dominated)
    return np.array(out)


def brute_knee(cap, lat, front):
    idx = [i for i in range(len(cap)) if front[i]]
    if not idx:
        return -1
    c, la = np.array([cap[i] for i in idx]), np.array([lat[i] for i in idx])

    def norm(x):
        span = x.max() - x.min()
        return (x - x.min()) / span if span > 0 else np.zeros_like(x)

    score = norm(c) - norm(la)
    tied = [k for k in range(len(idx)) if score[k] >= score.max() - 1e-9]
    best = min(tied, key=lambda k: (c[k], idx[k]))
    return idx[best]


def random_rows(rng, rows, k, levels):
    # Few distinct levels -> many ties and exact duplicates.
    cap = rng.integers(1, levels, (rows, k)).astype(float) * 10.0
    lat = rng.integers(1, levels, (rows, k)).astype(float) * 7.0
    valid = rng.random((rows, k)) < 0.8
    return cap, lat, valid


@pytest.mark.parametrize("k,levels", [(1, 3), (2, 2), (7, 3), (33, 5), (64, 40), (200, 1000)])
def test_pareto_and_knee_match_brute_force(k, levels):
    rng = np.random.default_rng(k * 1000 + levels)
    cap, lat, valid = random_rows(rng, 60, k, levels)
    got = np.asarray(_pareto(jnp.asarray(cap), jnp.asarray(lat), jnp.asarray(valid)))
    knees = np.asarray(_knee(jnp.asarray(cap), jnp.asarray(lat), jnp.asarray(got)))
    for r in range(cap.shape[0]):
        want = brute_pareto(cap[r], lat[r], valid[r])
        np.testing.assert_array_equal(got[r], want)
        assert knees[r] == brute_knee(cap[r], lat[r], want)


@pytest.mark.parametrize("n_win,n_b,levels", [(1, 1, 3), (1, 9, 4), (3, 7, 3), (4, 33, 6), (2, 64, 1000)])
def test_column_frontier_matches_general(n_win, n_b, levels):
    rng = np.random.default_rng(n_win * 100 + n_b)
    rows = 80
    cap_cols = np.sort(rng.integers(1, levels + 1, (rows, n_b)).astype(float), axis=1)  # ties included
    cap = np.repeat(cap_cols[:, None, :], n_win, axis=1)
    lat = rng.integers(1, levels + 1, (rows, n_win, n_b)).astype(float)
    valid = rng.random((rows, n_win, n_b)) < 0.8
    assert bool(decide.columns_sorted(jnp.asarray(cap)))
    got = np.asarray(_cols(jnp.asarray(cap), jnp.asarray(lat), jnp.asarray(valid))).reshape(rows, -1)
    for r in range(rows):
        want = brute_pareto(cap[r].ravel(), lat[r].ravel(), valid[r].ravel())
        np.testing.assert_array_equal(got[r], want)


def test_columns_sorted_detects_other_layouts():
    cap = jnp.asarray([[[1.0, 2.0], [1.0, 2.0]]])
    assert bool(decide.columns_sorted(cap))
    assert not bool(decide.columns_sorted(cap[:, :, ::-1]))
    assert not bool(decide.columns_sorted(jnp.asarray([[[1.0, 2.0], [1.0, 3.0]]])))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 1e4), st.floats(0.1, 1e4), st.booleans()), min_size=1, max_size=40))
def test_pareto_property(points):
    cap = np.array([p[0] for p in points])
    lat = np.array([p[1] for p in points])
    valid = np.array([p[2] for p in points])
    got = np.asarray(_pareto(jnp.asarray(cap)[None], jnp.asarray(lat)[None], jnp.asarray(valid)[None]))[0]
    np.testing.assert_array_equal(got, brute_pareto(cap, lat, valid))


def test_knee_of_a_single_point_and_of_a_line():
    cap = jnp.asarray([[100.0, 50.0, 10.0]])
    lat = jnp.asarray([[5.0, 9.0, 1.0]])
    one = jnp.asarray([[True, False, False]])
    assert int(_knee(cap, lat, one)[0]) == 0
    # Collinear frontier: every score is 0 -> tie -> the smallest capacity.
    line_cap = jnp.asarray([[1.0, 2.0, 3.0]])
    line_lat = jnp.asarray([[1.0, 2.0, 3.0]])
    assert int(_knee(line_cap, line_lat, jnp.ones((1, 3), dtype=bool))[0]) == 0
