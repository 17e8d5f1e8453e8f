"""Keep JAX honest: float64 everywhere and strict promotion, so a silent float32 or an
accidental broadcast in a kernel fails the tests instead of skewing the numbers.

On x86 the suite also caps the instructions XLA compiles for at AVX2 (`XLA_FLAGS`, set here
before JAX starts, so the Dask workers the cluster tests spawn inherit it): the golden digests
pin exact bytes, and with AVX-512 XLA rounds some last bits of TTFT differently. A cap the
caller already set is kept.

The suite compiles hundreds of XLA programs in one process, and each CPU executable holds
about a thousand memory mappings (measured: one continuous-serving grid's program adds
1,000-1,200 to /proc/self/maps). Linux allows 65,530 a process by default
(vm.max_map_count); past it, LLVM's next mapping fails and the process aborts ("Fatal Python
error: Aborted" while compiling). So before each test, where the process holds more than
`MAX_MAPPINGS`, the compiled programs are dropped (`jax.clear_caches()`; the persistent
compilation cache makes recompiling them cheap)."""

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


#: Memory mappings above which the compiled programs are dropped (half of Linux's default
#: vm.max_map_count, 65,530: one test compiles well under 30,000 mappings' worth).
MAX_MAPPINGS = 32_000
_MAPS = Path("/proc/self/maps")


@pytest.fixture(autouse=True)
def _bounded_mappings() -> None:
    """Drop JAX's compiled programs when the process nears the kernel's mapping limit (module
    docstring). Linux only; elsewhere a no-op."""
    if not _MAPS.exists():
        return
    with _MAPS.open("rb") as f:
        n = sum(1 for _ in f)
    if n > MAX_MAPPINGS:
        import gc

        jax.clear_caches()
        gc.collect()


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
