"""The column reference (`sweep.io.columns`): generated from the declarations, and the tables
of the docs pages (docs/outputs.md, docs/continuous.md, docs/schedule.md) are exactly what it
generates."""

from __future__ import annotations

from sweep.decide.tables import FRONTIER_EXTRA, optimum_columns
from sweep.io.columns import all_point_columns, fill_markdown, reference
from sweep.models import REGISTRY, get_model


def test_outputs_page_tables_are_the_generated_reference(root):
    doc = (root / "docs" / "outputs.md").read_text()
    for table in ("points", "optimum", "frontier", "schedule"):
        assert f"<!-- columns:{table} -->" in doc, table
    assert fill_markdown(doc) == doc, "run: python -m sweep.io.columns --fill docs/outputs.md"


def test_outputs_page_documents_every_column(root):
    doc = (root / "docs" / "outputs.md").read_text()
    every = all_point_columns()
    for c in (*every, *optimum_columns(get_model(), every), *FRONTIER_EXTRA):
        assert f"`{c.name}`" in doc, c.name


def test_no_marked_table_is_left_behind_in_the_readme(root):
    """The README is a front door: the column tables live in docs/ (and link from there)."""
    assert "<!-- columns:" not in (root / "README.md").read_text()


def test_fill_rewrites_every_file_it_is_given(root, tmp_path):
    """`python -m sweep.io.columns --fill A.md B.md` (and the old `--readme`) regenerates the
    marked tables of each file and leaves the text around them alone."""
    import subprocess
    import sys

    pages = [tmp_path / "a.md", tmp_path / "b.md"]
    for page in pages:
        page.write_text("before\n<!-- columns:frontier -->\nstale\n<!-- /columns:frontier -->\nafter\n")
    for flag in ("--fill", "--readme"):
        out = subprocess.run([sys.executable, "-m", "sweep.io.columns", flag, *map(str, pages)], capture_output=True, text=True,
                             cwd=root)
        assert out.returncode == 0, out.stderr
        for page in pages:
            text = page.read_text()
            assert "stale" not in text and text.startswith("before\n") and text.endswith("after\n")
            assert fill_markdown(text) == text and "| `is_knee` |" in text
            page.write_text(text.replace("| `is_knee` |", "stale |"))


def test_every_model_column_is_in_the_reference():
    for (serving, _), model in REGISTRY.items():
        points = reference("points", get_model(serving))
        for c in model.columns:
            assert f"| `{c.name}` |" in points, (serving, model.name, c.name)
    assert "Only with latency_model = batcher." in reference("points")  # model-specific columns say so


def test_continuous_tables_in_docs_are_the_generated_reference(root):
    doc = (root / "docs" / "continuous.md").read_text()
    for table in ("points", "optimum"):
        assert f"<!-- columns:{table}:continuous -->" in doc
    assert fill_markdown(doc) == doc, "run: python -m sweep.io.columns --fill docs/continuous.md"
    for c in get_model("continuous").columns:
        assert f"`{c.name}`" in doc, c.name


def test_schedule_tables_are_the_generated_reference(root):
    """schedule.parquet's columns (docs/outputs.md for dynamic serving, docs/schedule.md for both)."""
    from sweep.decide.schedule import SCHEDULE_BODY

    for path in (root / "docs" / "outputs.md", root / "docs" / "schedule.md"):
        text = path.read_text()
        assert fill_markdown(text) == text, f"run: python -m sweep.io.columns --fill {path.relative_to(root)}"
        for c in SCHEDULE_BODY:
            assert f"| `{c.name}` |" in text, (path.name, c.name)
    assert "<!-- columns:schedule:continuous -->" in (root / "docs" / "schedule.md").read_text()
