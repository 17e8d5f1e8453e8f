"""Commands that find their answers on disk never import JAX, and JAX is still float64.

`sweep show` and a rerun of a finished run read Parquet and a manifest: importing JAX (and
ml_dtypes, XLA's client) alone costs more than the whole command should (the goal is under
2 s on 2 cores). Modules on the declaration path bind JAX through `sweep._lazy.lazy_module`;
these tests run each command in a fresh interpreter in which importing JAX raises, so any
eager import anywhere on the path fails the command. And because JAX is no longer imported
by `import sweep`, they also check that float64 (and the simulators' random streams) hold
whichever of JAX and sweep is imported first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweep._lazy import lazy_module

ROOT = Path(__file__).resolve().parents[1]

#: A fresh interpreter in which `import jax` (or any jax submodule) raises, then `sweep ARGS`.
NO_JAX = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "jax" or name.startswith("jax.") or name == "jaxlib" or name.startswith("jaxlib."):
            raise ImportError(f"this command imported {name}")
        return None
sys.meta_path.insert(0, Refuse())
from sweep.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "jax": sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib"))}),
      file=sys.stderr)
sys.exit(code)
""".replace("import sys\n", "import json, sys\n", 1)


def _run_without_jax(*args: str, cwd: Path) -> tuple[int, str, dict]:
    p = subprocess.run([sys.executable, "-c", NO_JAX, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "{}"
    try:
        status = json.loads(last)
    except ValueError:
        status = {}
    return p.returncode, p.stdout + p.stderr, status


def test_import_sweep_does_not_import_jax() -> None:
    code = "import sys, sweep; print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("order", ["sweep first", "jax first"])
def test_float64_and_random_streams_whichever_is_imported_first(order: str) -> None:
    imports = "import sweep; import jax" if order == "sweep first" else "import jax; import sweep"
    code = (f"{imports}; import jax.numpy as jnp; print(jnp.zeros(1).dtype, jnp.arange(3).dtype, "
            "jax.config.jax_threefry_partitionable)")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("JAX_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env)
    assert out.stdout.split() == ["float64", "int64", "True"]


def test_sweep_names_resolve_on_first_use() -> None:
    """Every public name of `sweep` is reachable (loaded on first use) and listed by dir()."""
    import sweep

    for name in sweep.__all__:
        assert getattr(sweep, name) is not None, name
        assert name in dir(sweep)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        sweep.not_a_name  # noqa: B018


def test_sweep_decide_is_the_function_whatever_imports_the_subpackage() -> None:
    """`sweep.decide` (the API function) shares its name with the subpackage `sweep.decide`;
    loading the subpackage afterwards (which binds it on its parent) does not shadow the
    function, and `from sweep.decide import ...` still reaches the subpackage."""
    code = ("import sweep; f = sweep.decide; import sweep.decide.pareto; from sweep.decide import reduce; "
            "import sweep.api; print(sweep.decide is sweep.api.decide is f, callable(sweep.decide), "
            "reduce.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["True", "True", "sweep.decide.reduce"]


def test_lazy_module_imports_on_first_attribute() -> None:
    proxy = lazy_module("colorsys")  # a standard module this test suite never imports otherwise
    sys.modules.pop("colorsys", None)
    assert "colorsys" not in sys.modules and "lazy module 'colorsys'" in repr(proxy)
    assert proxy.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert "colorsys" in sys.modules and "rgb_to_hsv" in vars(proxy)  # cached: the next lookup is direct


def test_show_and_a_finished_rerun_never_import_jax(seed_run: Path, tmp_path: Path) -> None:
    """`sweep show` and `sweep run` on a finished run, in interpreters where importing JAX
    fails: both answer (exit 0) with no jax module loaded. The run folder comes from the same
    grid, so the rerun finds it identical and only prints its answers."""
    grid = ROOT / "grids" / "seed-gpt3.toml"
    code, out, status = _run_without_jax("show", str(seed_run), cwd=tmp_path)
    assert code == 0, out
    assert status["jax"] == [] and "is_recommended" in out
    code, out, status = _run_without_jax("run", str(grid), "--out", str(seed_run), "--progress", "log", cwd=tmp_path)
    assert code == 0, out
    assert status["jax"] == [] and '"event": "done"' in out
