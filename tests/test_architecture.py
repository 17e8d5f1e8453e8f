"""The dependency graph: every import, module level or inside a function, goes down the
layers (README, "Architecture"), so there is no import cycle between layers and no
function-local import hiding one; within a layer, no two modules import each other, however
indirectly. Imports under `if TYPE_CHECKING:` are annotations only and are not counted; a module bound
with `sweep._lazy.lazy_module("sweep.x")` is imported on first use, and counts like an import."""

from __future__ import annotations

import ast
import re
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "sweep"

#: Layer of each top-level part of the package, lowest first.
LAYERS: dict[str, int] = {
    "errors": 0, "_lazy": 0, "_numerics": 0, "_gamma": 0, "_version": 0, "_faults": 0, "_domain": 0,
    "catalog": 1,
    "models": 2, "deploy": 2,
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


def _counted(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, at any depth, except under `if TYPE_CHECKING:`
    (or `if typing.TYPE_CHECKING:`)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            for sub in ast.walk(node):
                skip.add(id(sub))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip]


def _lazy_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of every `lazy_module("NAME")` call: an import that happens on first use."""
    return [(node.lineno, node.args[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "lazy_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported sweep module) for every absolute import outside `if TYPE_CHECKING:` blocks,
    lazy ones included."""
    tree = ast.parse(path.read_text())
    out = [(line, name) for line, name in _lazy_imports(tree) if name.split(".")[0] == "sweep"]
    for node in _counted(tree):
        if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.split(".")[0] == "sweep"):
            if node.module == "sweep":  # from sweep import x: x is a part of the package
                out.extend((node.lineno, f"sweep.{a.name}") for a in node.names)
            else:
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "sweep")
    return out


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, not `.__init__`)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _edges(module: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The sweep modules `module` imports (each with the first line that does): `import
    sweep.a.b` -> the longest prefix that is a module; `from sweep.a import b` -> sweep.a.b
    when that is a module or subpackage, else sweep.a; relative imports likewise."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def longest(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    out: dict[str, int] = {}
    tree = ast.parse(path.read_text())
    for line, name in _lazy_imports(tree):
        target = longest(name) if name.split(".")[0] == "sweep" else None
        if target is not None and target != module:
            out.setdefault(target, line)
    for node in _counted(tree):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [longest(a.name) for a in node.names if a.name.split(".")[0] == "sweep"]
        else:
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "sweep":
                continue
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else longest(source) for a in node.names]
        for target in targets:
            if target is not None and target != module:
                out.setdefault(target, node.lineno)
    return out


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported module: line}, over every module of the package at `root`."""
    modules = _modules(root)
    return {module: _edges(module, path, modules) for module, path in modules.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every
    module of one imports every other, directly or through the others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # iterative: no recursion limit on a long chain of imports
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        work = [(v, iter(sorted(graph.get(v, {}))))]
        while work:
            node, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def cycle_through(component: list[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest import path within a component from its first module back to itself
    (breadth first)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in previous:
                    previous[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {component}")  # a component always has one


def shown(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    """One cycle of a component, each module with the line of its import of the next, and
    the component's modules when the cycle does not pass through all of them."""
    cycle = cycle_through(component, graph)
    text = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in pairwise(cycle)) + f" -> {cycle[-1]}"
    return text if len(cycle) - 1 == len(component) else f"{text}  [cycles among {', '.join(component)}]"


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


def test_no_import_cycle_between_modules():
    """Module level and inside functions alike: an import inside a function runs all the
    same, only later; it hides a cycle, it does not remove it."""
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles (module (line of its import of the next) -> ...):\n" + "\n".join(
        shown(c, graph) for c in found)


def test_the_cycle_finder_finds_cycles():
    """On a made-up graph: two cycles (one of three modules, one of two), a self-import and a
    chain that is no cycle."""
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {"e": 5}, "e": {"d": 6},
             "f": {"f": 7, "a": 8}, "g": {}}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert shown(["a", "b", "c"], graph) == "a (line 1) -> b (line 2) -> c (line 3) -> a"
    graph["b"]["a"] = 9  # a shorter cycle inside the component: shown, with every member named
    assert cycles(graph)[0] == ["a", "b", "c"]
    assert shown(["a", "b", "c"], graph) == "a (line 1) -> b (line 9) -> a  [cycles among a, b, c]"


def test_the_graph_resolves_every_kind_of_import(tmp_path):
    """`from sweep.x import y` is the module sweep.x.y when there is one, else sweep.x;
    relative imports resolve against the importing package; TYPE_CHECKING imports are not
    counted; a `lazy_module("sweep.x")` binding is."""
    pkg = tmp_path / "sweep"
    (pkg / "a").mkdir(parents=True)
    files = {
        "__init__.py": "from sweep.a import b\nc = lazy_module('sweep.a.c.NAME')\n",
        "a/__init__.py": "from .b import thing\nfrom . import c\n",
        "a/b.py": "import sweep.a.c.missing\ndef f():\n    from sweep.a.c import NAME\n",
        "a/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sweep import a\nfrom ..a import b\n",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    graph = import_graph(pkg)
    assert graph == {"sweep": {"sweep.a.b": 1, "sweep.a.c": 2}, "sweep.a": {"sweep.a.b": 1, "sweep.a.c": 2},
                     "sweep.a.b": {"sweep.a.c": 1}, "sweep.a.c": {"sweep.a.b": 4}}
    assert cycles(graph) == [["sweep.a.b", "sweep.a.c"]]


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
NOT_DISPLAY = {"cli/tools.py": "sweep fit / kv / calibrate speak profile formats and KV flags, not a run's results",
               "cli/ask.py": "sweep ask writes a continuous-serving grid from flags and answers in its terms (TTFT, "
                             "TPOT, engine knobs): a question for one serving mode, by design",
               "cli/predict.py": "sweep predict-benchmark predicts one continuous-serving configuration's benchmark "
                                 "from its step coefficients and engine knobs: one serving mode, by design"}


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
