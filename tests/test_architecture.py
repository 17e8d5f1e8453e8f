"""The dependency graph: every import, module level or inside a function, goes down the
layers (README, "Architecture"), so there is no import cycle between layers and no
function-local import hiding one. Imports under `if TYPE_CHECKING:` are annotations only and
are not counted."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "sweep"

#: Layer of each top-level part of the package, lowest first.
LAYERS: dict[str, int] = {
    "errors": 0, "_numerics": 0, "_gamma": 0, "_version": 0, "_faults": 0,
    "catalog": 1,
    "models": 2,
    "grid": 3,
    "decide": 4,
    "engine": 5,
    "search": 6,
    "io": 7,
    "runner": 8,
    "api": 9, "reporting": 9,
    "testing": 10,
    "cli": 10,
    "__init__": 11, "__main__": 11,
}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported sweep module) for every import outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for sub in ast.walk(node):
                skip.add(id(sub))
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sweep":
            if node.module == "sweep":  # from sweep import x: x is a part of the package
                out.extend((node.lineno, f"sweep.{a.name}") for a in node.names)
            else:
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "sweep")
    return out


def test_every_import_goes_down_the_layers():
    problems = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        module = ".".join(rel.parts)
        here = _part(module if rel.name != "__init__" or len(rel.parts) > 2 else "sweep.__init__")
        if module == "sweep.__init__":
            here = "__init__"
        for line, target in _imports(path):
            there = _part(target)
            if LAYERS[there] > LAYERS[here]:
                problems.append(f"{path.relative_to(ROOT.parent)}:{line} ({here}) imports {target} ({there})")
    assert not problems, "imports that go up the layers:\n" + "\n".join(problems)


def test_every_part_has_a_layer_and_a_docstring():
    for path in sorted(ROOT.iterdir()):
        if path.name.startswith(".") or path.name == "__pycache__" or path.suffix not in ("", ".py"):
            continue
        name = path.stem
        if path.is_dir() and not (path / "__init__.py").exists():
            continue
        assert name in LAYERS, f"{path}: give it a layer in tests/test_architecture.py and the README"
        init = path / "__init__.py" if path.is_dir() else path
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init}: say what it owns"
