"""The JAX compilation cache persists across runs (issue: scale, item 5), and a cache
opened for a block only (a test's or a benchmark's temporary folder) is closed after it.

Two `sweep run` processes on the same grid with SWEEP_CACHE_DIR pointing at an empty
folder: the first writes compiled kernels there; the second (--force, so it really runs)
finds them and adds no new entry. Entry counts, not timings: the machines are noisy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings

import pytest


def _run(root, out, cache, *extra):
    env = {**os.environ, "SWEEP_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "sweep.cli", "run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(out),
           "--quiet", *extra]
    subprocess.run(cmd, check=True, env=env, timeout=300)


def _entries(cache):
    return sorted(p.name for p in cache.rglob("*") if p.is_file())


@pytest.mark.slow  # two sweep processes
def test_compiled_kernels_are_reused_by_the_next_run(tmp_path, root):
    cache = tmp_path / "cache"
    _run(root, tmp_path / "a", cache)
    first = _entries(cache)
    assert first, "the first run wrote no compiled kernel to the cache"
    _run(root, tmp_path / "a", cache, "--force")
    assert _entries(cache) == first


def test_a_block_cache_is_closed_when_the_block_ends(tmp_path):
    """CI once failed nine later tests: a benchmark's smoke run enabled the cache in a
    temporary folder, deleted it, and every later compilation warned that it could not write
    there (JAX opens its cache once and keeps the path). After `compile_cache` the settings
    are restored and a new compilation, in a fresh function, writes nowhere near the folder."""
    import jax
    import jax.numpy as jnp

    from sweep.runner.progress import compile_cache

    before = jax.config.jax_compilation_cache_dir
    folder = tmp_path / "jax-cache"
    with compile_cache(str(folder)):
        jax.jit(lambda x: x * 3.0 + 1.0)(jnp.float64(2.0)).block_until_ready()
    assert folder.is_dir() and any(folder.iterdir()), "the block compiled nothing into its cache"
    assert jax.config.jax_compilation_cache_dir == before
    shutil.rmtree(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax.jit(lambda x: x * 5.0 - 7.0)(jnp.float64(2.0)).block_until_ready()
    assert not folder.exists()
