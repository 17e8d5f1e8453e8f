"""Dependency floors (issue 13, item 8): every floor pyproject.toml declares is the version CI
runs the suite against (.ci/floors installs .ci/floors.txt as constraints), so the two may
not drift apart; the `sweep` command reports its version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Test tools whose floor the code does not depend on: the resolver picks them in .ci/floors.
UNPINNED = {"pytest", "hypothesis", "playwright", "ruff", "mypy"}


def _release(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in text.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def declared_floors() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    floors = {}
    for req in reqs:
        m = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9.]+)", req)
        if m and m.group(1) != "sweep":
            floors[m.group(1).lower()] = m.group(3)
    return floors


def pinned() -> dict[str, str]:
    out = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[name.strip().lower()] = version.strip()
    return out


def test_every_declared_floor_is_pinned_for_the_floors_job():
    floors, pins = declared_floors(), pinned()
    assert {"jax", "numpy", "scipy", "pyarrow", "optuna", "rich", "duckdb", "plotly", "pandas"} <= set(floors)
    for name, version in floors.items():
        if name in UNPINNED:
            continue
        assert name in pins, f"{name}>={version} is declared but .ci/floors.txt does not pin it"
        assert _release(pins[name]) == _release(version), f"{name}: declared >={version}, pinned =={pins[name]}"
    assert pins["jaxlib"] == pins["jax"]  # jaxlib follows jax
    assert _release(floors["optuna"]) >= (5,)  # Trial.set_constraint ([search]) first appears in Optuna 5.0


def test_ci_runs_the_floors_job():
    run = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/floors" in run
    floors = (ROOT / ".ci" / "floors").read_text()
    assert "-c .ci/floors.txt" in floors and "pytest" in floors
    # only the tests that pin the development toolchain's exact bytes are left out there
    assert "-m 'not slow and not toolchain'" in floors
