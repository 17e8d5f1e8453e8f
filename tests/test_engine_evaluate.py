"""Chunked evaluation (`sweep.engine.evaluate`): chunking changes nothing, one compilation
per chunk shape, point ids decode the axes, explicit points evaluate without a grid."""

from __future__ import annotations

import numpy as np
from _grids import WINDOWED

from sweep import grid as spec
from sweep.engine import Evaluator


def test_chunking_does_not_change_results_and_compiles_once(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED)
    g = spec.load(p)
    assert g.n_points == 2 * 2 * 5 * 4 * 2 * 2 * 2 * 2
    whole = Evaluator(g, chunk_size=1 << 12).chunk(0).columns
    ev = Evaluator(g, chunk_size=96)  # does not divide the grid: the last chunk is padded
    parts = list(ev.iter_chunks())
    assert ev.compile_count() == 1  # one compilation for every chunk
    assert sum(len(c) for c in parts) == g.n_points
    for key, full in whole.items():
        np.testing.assert_array_equal(np.concatenate([c.columns[key] for c in parts]), full, err_msg=key)
    assert np.array_equal(whole["point_id"], np.arange(g.n_points))


def test_point_ids_decode_the_axes(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED)
    g = spec.load(p)
    cols = Evaluator(g).chunk(0).columns
    grid = np.stack(np.meshgrid(*[np.arange(n) for n in g.shape], indexing="ij"), -1).reshape(-1, len(g.shape))
    for i, axis in enumerate(g.axes):
        if axis.key in ("model", "gpu"):
            np.testing.assert_array_equal(cols[axis.key], grid[:, i])
        elif axis.key in cols:
            np.testing.assert_array_equal(cols[axis.key], np.asarray(axis.values, dtype=float)[grid[:, i]])
