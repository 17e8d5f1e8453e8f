"""The JAX compilation cache persists across runs (issue: scale, item 5).

Two `sweep run` processes on the same grid with SWEEP_CACHE_DIR pointing at an empty
folder: the first writes compiled kernels there; the second (--force, so it really runs)
finds them and adds no new entry. Entry counts, not timings: the machines are noisy.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # two sweep processes


def _run(root, out, cache, *extra):
    env = {**os.environ, "SWEEP_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "sweep.cli", "run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(out), "--quiet", *extra]
    subprocess.run(cmd, check=True, env=env, timeout=300)


def _entries(cache):
    return sorted(p.name for p in cache.rglob("*") if p.is_file())


def test_compiled_kernels_are_reused_by_the_next_run(tmp_path, root):
    cache = tmp_path / "cache"
    _run(root, tmp_path / "a", cache)
    first = _entries(cache)
    assert first, "the first run wrote no compiled kernel to the cache"
    _run(root, tmp_path / "a", cache, "--force")
    assert _entries(cache) == first
