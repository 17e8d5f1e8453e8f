"""The column reference (`sweep.io.columns`): generated from the declarations, and the
README's tables are exactly what it generates."""

from __future__ import annotations

from sweep.decide.tables import FRONTIER_EXTRA, optimum_columns
from sweep.io.columns import all_point_columns, fill_markdown, reference
from sweep.models import REGISTRY, get_model


def test_readme_tables_are_the_generated_reference(root):
    readme = (root / "README.md").read_text()
    assert "<!-- columns:points -->" in readme and "<!-- columns:optimum -->" in readme
    assert fill_markdown(readme) == readme, "run: python -m sweep.io.columns --readme README.md"


def test_readme_documents_every_column(root):
    readme = (root / "README.md").read_text()
    every = all_point_columns()
    for c in (*every, *optimum_columns(get_model(), every), *FRONTIER_EXTRA):
        assert f"`{c.name}`" in readme, c.name


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
    assert fill_markdown(doc) == doc, "run: python -m sweep.io.columns --readme docs/continuous.md"
    for c in get_model("continuous").columns:
        assert f"`{c.name}`" in doc, c.name


def test_schedule_tables_are_the_generated_reference(root):
    """schedule.parquet's columns (README for dynamic serving, docs/schedule.md for both)."""
    from sweep.decide.schedule import SCHEDULE_BODY

    for path in (root / "README.md", root / "docs" / "schedule.md"):
        text = path.read_text()
        assert fill_markdown(text) == text, f"run: python -m sweep.io.columns --readme {path.relative_to(root)}"
        for c in SCHEDULE_BODY:
            assert f"| `{c.name}` |" in text, (path.name, c.name)
    assert "<!-- columns:schedule:continuous -->" in (root / "docs" / "schedule.md").read_text()
