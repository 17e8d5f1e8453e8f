"""Every install hint in the repository names the distribution pyproject.toml declares.

"sweep" on PyPI is an unrelated project (SWeeP, biological sequences): a hint such as
`pip install 'sweep[report]'` installs it instead of this package's extra. The distribution is
`sweep-capacity` (the import package and the command stay `sweep`)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIST = PYPROJECT["project"]["name"]
EXTRAS = sorted(PYPROJECT["project"]["optional-dependencies"])
#: `NAME[extra, ...]` where every extra is one of ours: a requirement on this package.
_ONE = "|".join(EXTRAS)
REQUIREMENT = re.compile(rf"(?<![\w.\-/])([A-Za-z][\w.\-]*)\[((?:{_ONE})(?:\s*,\s*(?:{_ONE}))*)\]")
#: `pip install ... 'NAME[...]'`, possibly wrapped onto the next line of a docstring or a page.
PIP_HINT = re.compile(r"pip install\s+(?:-[\w-]+\s+)*['\"]?([^\s'\"`\[]+)\[")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".yml", ".yaml", ""}


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    paths = [ROOT / line for line in out.splitlines() if line]
    this = Path(__file__).resolve()  # its own examples of the old name are what it looks for
    return [p for p in paths if p.suffix in TEXT_SUFFIXES and p.is_file() and p.resolve() != this]


def test_the_distribution_is_not_the_unrelated_pypi_sweep() -> None:
    assert DIST != "sweep"
    assert PYPROJECT["project"]["scripts"]["sweep"] == "sweep.cli:main"  # the command keeps its name


def test_every_install_hint_names_the_distribution() -> None:
    wrong: list[str] = []
    hints = 0
    for path in _tracked_text_files():
        text = path.read_text(errors="replace")
        for m in REQUIREMENT.finditer(text):
            hints += 1
            if m.group(1) not in (DIST, "."):  # `pip install -e '.[test]'` installs this checkout
                wrong.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
        for m in PIP_HINT.finditer(text):
            name = m.group(1)
            if REQUIREMENT.match(text, m.end(1) - len(name)) and name not in (DIST, "."):
                wrong.append(f"{path.relative_to(ROOT)}: pip install {name}[...]")
    assert hints > 0  # the scan finds the hints that are there (pyproject's own test extra names two)
    assert not wrong, "install hints naming another distribution: " + "; ".join(sorted(set(wrong)))


def test_the_scan_catches_the_old_name() -> None:
    assert REQUIREMENT.search("pip install 'sweep[report]'").group(1) == "sweep"
    assert REQUIREMENT.search("needs sweep[cluster] and OUT").group(1) == "sweep"
    assert REQUIREMENT.search("pip install 'dask[distributed]'") is None  # not one of our extras
