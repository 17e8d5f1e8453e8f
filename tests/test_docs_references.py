"""Self-contained documentation: the README, `docs/`, `benchmarks/README.md`, the changelog and
every column description point only at files a clone has, and cite the formulas by
`docs/model.md` section, never a document outside the repository (issue 13, item 6). The
README is a front door to the pages of `docs/`, and those pages build into a site with
MkDocs in strict mode, every page in its nav (issue 23)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sweep.decide.tables import FRONTIER_EXTRA, optimum_columns
from sweep.models import REGISTRY
from sweep.search.study import SEARCH_META_FIRST, SEARCH_META_LAST

ROOT = Path(__file__).resolve().parents[1]
#: What a reference to a file outside the repository looks like.
OUTSIDE = re.compile(r"SPEC\b|SPEC\.md|\.\./shared|shared/SPEC|seed document|inference-foundations|seed eq\.|"
                     r"seed step|[Ss]eed Table")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "benchmarks" / "README.md",
            *sorted((ROOT / "docs").rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}


@pytest.mark.parametrize("doc", documents() + sorted((ROOT / "grids").glob("*.toml")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reference_outside_the_repository(doc):
    text = doc.read_text()
    hits = [m.group(0) for m in OUTSIDE.finditer(text)]
    assert not hits, f"{doc.name} cites {sorted(set(hits))}"


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_exists_in_a_clone(doc):
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        full = (doc.parent / path).resolve() if path else doc
        assert full.exists(), f"{doc.name} links {target}, which a clone does not have"
        assert "benchmarks/results" not in path, f"{doc.name} links an ignored folder: {target}"
        if anchor and full.suffix == ".md":
            assert anchor in _anchors(full), f"{doc.name} links {target}: no such heading in {path or doc.name}"


def test_column_descriptions_cite_docs_model_not_outside():
    columns = [*FRONTIER_EXTRA, *SEARCH_META_FIRST, *SEARCH_META_LAST]
    for model in REGISTRY.values():
        columns += [*model.columns, *optimum_columns(model, model.columns)]
    for c in columns:
        assert not OUTSIDE.search(c.doc), f"{c.name}: {c.doc}"
        for ref in re.findall(r"docs/[\w/.-]+\.md", c.doc):
            assert (ROOT / ref).exists(), f"{c.name} cites {ref}"


def test_cli_help_cites_nothing_outside():
    from sweep.cli.main import _parser

    parser = _parser()
    texts = [parser.format_help()]
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        texts += [sub.format_help() for sub in action.choices.values()]
    for text in texts:
        assert not OUTSIDE.search(text), text[:200]


# --------------------------------------------------------------------------- the front door


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _shell_commands(section: str) -> list[str]:
    blocks = re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", section, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_readme_is_a_front_door():
    """At most 300 lines; the Quickstart's two commands (the second is the one `.ci/run`
    runs); a link to every page of `docs/`; the source model named for what it is, "seed"
    only inside file names such as `grids/seed-gpt3.toml`."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300, f"README.md has {len(readme.splitlines())} lines; move reference to docs/"
    commands = _shell_commands(_section(readme, "Quickstart"))
    assert len(commands) == 2, commands
    assert commands[0].startswith("python3 -m venv .venv && ") and "sweep run grids/seed-gpt3.toml" in commands[0]
    assert commands[1] in (ROOT / ".ci" / "run").read_text().splitlines(), "the test command is the one .ci/run runs"
    links = {target.partition("#")[0] for target in LINK.findall(readme)}
    index = (ROOT / "docs" / "index.md").read_text()
    index_links = {"docs/" + target.partition("#")[0] for target in LINK.findall(index)}
    for page in sorted((ROOT / "docs").glob("*.md")):
        name = f"docs/{page.name}"
        assert name in links or name in index_links, f"neither README.md nor docs/index.md links {name}"
    assert "docs/index.md" in links
    seeds = [m.group(0) for m in re.finditer(r"(?i)\bseed\b(?!-)\S*", readme)]
    assert not seeds, f"README.md says {seeds}: name the dynamic-batching model or the GPT-3 worked example"


# --------------------------------------------------------------------------- the site


def _nav_pages() -> list[str]:
    """The pages `mkdocs.yml`'s nav lists (each `Title: page.md` entry)."""
    return re.findall(r"^\s*-\s*(?:\"[^\"]*\"|[^:\n]+):\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)


def test_every_docs_page_is_in_the_nav():
    nav = _nav_pages()
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages, f"mkdocs.yml nav lists {sorted(set(nav) ^ set(pages))} differently from docs/"
    assert len(nav) == len(set(nav))


def test_the_docs_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: a broken link or anchor, or a page outside the nav, fails
    (mkdocs.yml's validation turns each into a warning, strict mode into an error)."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.skip("MkDocs is not installed (pip install -e '.[docs]'; .ci/docs builds the site in CI)")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                          "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stderr, out.stderr
    assert (tmp_path / "site" / "index.html").exists()
