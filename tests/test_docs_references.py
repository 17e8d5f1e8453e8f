"""Self-contained documentation: the README, `docs/` and every column description point only
at files a clone has, and cite the formulas by `docs/model.md` section, never a document
outside the repository (issue 13, item 6)."""

from __future__ import annotations

import re
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
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("doc", documents() + sorted((ROOT / "grids").glob("*.toml")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reference_outside_the_repository(doc):
    text = doc.read_text()
    hits = [m.group(0) for m in OUTSIDE.finditer(text)]
    assert not hits, f"{doc.name} cites {sorted(set(hits))}"


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_exists_in_a_clone(doc):
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        full = (doc.parent / path).resolve()
        assert full.exists(), f"{doc.name} links {target}, which a clone does not have"
        assert "benchmarks/results" not in path, f"{doc.name} links an ignored folder: {target}"
        if anchor and full.suffix == ".md":
            anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", full.read_text(), re.M)}
            assert anchor in anchors, f"{doc.name} links {target}: no such heading in {path}"


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
