"""Keep JAX honest: float64 everywhere and strict promotion, so a silent float32 or an
accidental broadcast in a kernel fails the tests instead of skewing the numbers.

On x86 the suite also caps the instructions XLA compiles for at AVX2 (`XLA_FLAGS`, set here
before JAX starts, so the Dask workers the cluster tests spawn inherit it): the golden digests
pin exact bytes, and with AVX-512 XLA rounds some last bits of TTFT differently. A cap the
caller already set is kept."""

import os
import platform

if platform.machine().lower() in ("x86_64", "amd64") and "--xla_cpu_max_isa" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_max_isa=AVX2").strip()

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed's worked example (grids/seed-gpt3.toml), run once per session."""
    from sweep.cli import main

    out = tmp_path_factory.mktemp("seed")
    assert main(["run", str(ROOT / "grids" / "seed-gpt3.toml"), "--out", str(out), "--quiet"]) == 0
    return out
