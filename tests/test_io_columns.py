"""The column reference (`sweep.io.columns`): every declared column is documented."""

from __future__ import annotations

from sweep.decide.tables import FRONTIER_EXTRA, optimum_columns
from sweep.io.columns import all_point_columns
from sweep.models import get_model


def test_readme_documents_every_column(root):
    readme = (root / "README.md").read_text()
    every = all_point_columns()
    for c in (*every, *optimum_columns(get_model(), every), *FRONTIER_EXTRA):
        assert f"`{c.name}`" in readme, c.name
