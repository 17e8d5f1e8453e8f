"""`sweep report RUN_DIR`: one self-contained, offline HTML report of a finished run.

This subpackage owns everything the report needs and nothing the engine needs; the engine
never imports it. It reads a run folder (`manifest.json`, `optimum.parquet`,
`frontier.parquet`, `points/`, `search.parquet`) with bounded DuckDB queries — column
projection and predicate pushdown, never every point — and writes one HTML file with the
plotting library (plotly.js) and every style inlined, so it opens from a file:// URL on a
laptop with no network.

- `data`: the queries (what to read, how much, and from which file);
- `figures`: Plotly figure dictionaries built from those results (the same dictionary is
  drawn in the browser and, with `--png`, by kaleido);
- `html`: the document: header, tables, figure containers, the model/GPU filters, the
  scenario picker, the print stylesheet;
- `build_report`: the one entry point the CLI calls.

The plotting stack is an optional extra: `pip install 'sweep-capacity[report]'`. Without it the
command fails with one line saying so (`ReportError`, exit code 2).
"""

from __future__ import annotations

from sweep.reporting.api import ReportError, ReportResult, build_report, require_extra

__all__ = ["ReportError", "ReportResult", "build_report", "require_extra"]
