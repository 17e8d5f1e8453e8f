"""The dependency graph: every import, module level or inside a function, goes down the
layers (README, "Architecture"), so there is no import cycle between layers and no
function-local import hiding one. Imports under `if TYPE_CHECKING:` are annotations only and
are not counted."""

from __future__ import annotations

import ast
import re
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


# --------------------------------------------------------------------------- display code and serving modes

#: The display code: it reads a run through the serving model's declarations (`views`,
#: `decisions`, `slo_checks`), so a new serving mode's runs print and draw without an edit there.
DISPLAY = ("cli", "reporting")
#: Files of the display folders that are not about a run's results: the quick tools (`sweep fit`
#: reads profile formats of each mode, `sweep kv` is the contiguous/paged KV calculator with its
#: own flags), each with the reason.
NOT_DISPLAY = {"cli/tools.py": "sweep fit / kv / calibrate speak profile formats and KV flags, not a run's results"}


def _mode_words() -> tuple[set[str], set[str], set[str]]:
    """(serving-mode names, latency-model names, columns in some but not every registered
    model: point columns, grid keys and answer fields, with the answer suffixes)."""
    from sweep.models import REGISTRY

    per_model = []
    for m in REGISTRY.values():
        d = m.decisions
        names = {c.name for c in m.columns} | {p.key for p in m.params}
        names |= {src for _, src, *_ in d.answer_fields} | {sfx.lstrip("_") for sfx, *_ in d.answer_fields if sfx}
        per_model.append(names)
    columns = set.union(*per_model) - set.intersection(*per_model)
    return {s for s, _ in REGISTRY}, {n for _, n in REGISTRY}, columns


def test_display_code_names_no_serving_mode_and_no_mode_specific_column():
    """No word of sweep/cli or sweep/reporting (code, strings, comments, docstrings alike) is a
    registered serving mode's name (`dynamic`, also inside an identifier: `CONTINUOUS_X`) or a
    column only some models have (`latency_ms`, also as an answer column:
    `replicas_min_latency_ms`); no string literal is a latency model's name (`"gaussian"`) or a
    one-word column of some models only (`"workers"`)."""
    modes, latency_models, columns = _mode_words()
    # a column named by one English word (`workers`) is also a word of prose and of other flags
    # (`--workers`): only a string literal that is exactly it names the column
    plain = {c for c in columns if "_" not in c}
    compound = columns - plain
    problems = []
    for part in DISPLAY:
        for path in sorted((ROOT / part).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel in NOT_DISPLAY:
                continue
            text = path.read_text()
            for n, line in enumerate(text.splitlines(), 1):
                for word in re.findall(r"[A-Za-z0-9_]+", line):
                    low = word.lower()
                    bad = ({m for m in modes if m in low.split("_")}
                           | {c for c in compound if low == c or low.endswith("_" + c)})
                    if bad:
                        problems.append(f"sweep/{rel}:{n}: {word} ({', '.join(sorted(bad))})")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Constant) and node.value in latency_models | plain:
                    problems.append(f"sweep/{rel}:{node.lineno}: the string {node.value!r}")
    assert not problems, ("display code naming a serving mode or a column of some models only (declare it in the "
                          "model's views, sweep.models.views):\n" + "\n".join(problems))
