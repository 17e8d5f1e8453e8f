"""The column reference of every output file, generated from the declarations.

Point columns are declared by each serving model (`sweep.models`), the reduced outputs'
by `sweep.decide.tables` (and `sweep.decide.schedule`), the search answers' by `sweep.search`. This module
only renders them: `python -m sweep.io.columns points|optimum|frontier|schedule|search [SERVING]`
prints one table, `python -m sweep.io.columns --fill FILE.md [FILE.md ...]` rewrites every
table between `<!-- columns:NAME -->` and `<!-- /columns:NAME -->` markers in markdown files
(NAME is a table, or TABLE:SERVING for a serving mode other than dynamic; the pages that hold
them are docs/outputs.md, docs/continuous.md and docs/schedule.md; `--readme` is the old
name of `--fill`), and
`python -m sweep.io.columns --csv NAME [SERVING]` prints one file's reference as CSV (a
data dictionary for BI tools, which do not show Parquet field metadata).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from sweep.decide.schedule import schedule_columns
from sweep.decide.tables import frontier_extra, optimum_columns
from sweep.models import REGISTRY, ServingModel, get_model
from sweep.models.base import WHEN_TEXT, Column


def all_point_columns(serving: str = "dynamic") -> tuple[Column, ...]:
    """Every point column any model of a serving mode can write, in file order."""
    seen: dict[str, Column] = {}
    for (s, _), model in REGISTRY.items():
        if s != serving:
            continue
        for c in model.columns:
            seen.setdefault(c.name, c)
    base = get_model(serving)
    order = [c.name for c in base.columns]
    extra = [n for n in seen if n not in order]
    # model-specific columns go before the simulator's, as each model declares them
    first_sim = next((i for i, n in enumerate(order) if seen[n].when == "simulation"), len(order))
    names = order[:first_sim] + extra + order[first_sim:]
    return tuple(seen[n] for n in names)


def markdown_table(columns: Sequence[Column], models: dict[str, str] | None = None,
                   nulls: dict[str, str] | None = None) -> str:
    """A markdown table: column, type, unit, when it is NULL, meaning (with the condition it
    is written under). `nulls` overrides a column's NULL text (where models differ)."""
    rows = ["| column | type | unit | NULL when | meaning |", "|---|---|---|---|---|"]
    for c in columns:
        dtype = "string (dictionary)" if c.dtype == "dict" else c.dtype
        doc = c.doc + (f" Only when {WHEN_TEXT[c.when]}." if c.when else "")
        if models and c.name in models:
            doc += f" Only with {models[c.name]}."
        null = (nulls or {}).get(c.name) or c.null_text() or "never"
        rows.append(f"| `{c.name}` | {dtype} | {c.unit} | {null} | {doc} |")
    return "\n".join(rows)


def _only_with(serving: str) -> dict[str, str]:
    """Columns that only some latency models write -> which."""
    owners: dict[str, list[str]] = {}
    models = [m for (s, _), m in REGISTRY.items() if s == serving]
    for m in models:
        for c in m.columns:
            owners.setdefault(c.name, []).append(m.name)
    return {name: "latency_model = " + " | ".join(o) for name, o in owners.items() if len(o) < len(models)}


def _null_by_model(serving: str) -> dict[str, str]:
    """Columns whose NULL rule depends on the latency model -> one text naming each."""
    rules: dict[str, dict[str, list[str]]] = {}
    for (s, _), m in REGISTRY.items():
        if s == serving:
            for c in m.columns:
                rules.setdefault(c.name, {}).setdefault(c.null_text() or "never", []).append(m.name)
    return {name: "; ".join(f"{text} ({', '.join(models)})" for text, models in by.items())
            for name, by in rules.items() if len(by) > 1}


def reference(table: str, model: ServingModel | None = None) -> str:
    model = model or get_model()
    if table == "points":
        return markdown_table(all_point_columns(model.serving), _only_with(model.serving), _null_by_model(model.serving))
    if table == "optimum":
        return markdown_table(optimum_columns(model, all_point_columns(model.serving)), nulls=_null_by_model(model.serving))
    if table == "frontier":
        return markdown_table(frontier_extra(model.decisions, model.slo_checks))
    if table == "schedule":
        return markdown_table(schedule_columns(model, all_point_columns(model.serving)))
    if table == "search":
        from sweep.search.study import SEARCH_META_FIRST, SEARCH_META_LAST

        return markdown_table(SEARCH_META_FIRST + SEARCH_META_LAST)
    raise SystemExit(f"usage: python -m sweep.io.columns points|optimum|frontier|schedule|search [serving/latency_model]; not {table!r}")


_MARKED = re.compile(r"(<!-- columns:([a-z]+(?::[a-z]+)?) -->\n)(.*?)(<!-- /columns:\2 -->)", re.S)


def marked_reference(name: str) -> str:
    """The table a marker names: `TABLE` (dynamic serving) or `TABLE:SERVING`."""
    table, _, serving = name.partition(":")
    return reference(table, get_model(serving) if serving else None)


def fill_markdown(text: str) -> str:
    """`text` with every marked table regenerated (`<!-- columns:points -->`, or
    `<!-- columns:points:continuous -->` for another serving mode)."""
    return _MARKED.sub(lambda m: m.group(1) + marked_reference(m.group(2)) + "\n" + m.group(4), text)


def csv_dictionary(table: str, model: ServingModel | None = None) -> str:
    """The column reference of one file as CSV (column, type, unit, null_when, meaning): a
    data dictionary a BI tool can load beside the data (it does not show field metadata)."""
    import csv
    import io

    model = model or get_model()
    columns = {"points": all_point_columns(model.serving), "frontier": frontier_extra(model.decisions, model.slo_checks),
               "optimum": optimum_columns(model, all_point_columns(model.serving)),
               "schedule": schedule_columns(model, all_point_columns(model.serving))}
    if table == "search":
        from sweep.search.study import SEARCH_META_FIRST, SEARCH_META_LAST

        columns["search"] = SEARCH_META_FIRST + SEARCH_META_LAST
    if table not in columns:
        raise SystemExit(f"usage: python -m sweep.io.columns --csv points|optimum|frontier|schedule|search [SERVING]; not {table!r}")
    nulls = _null_by_model(model.serving)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["column", "type", "unit", "null_when", "meaning"])
    for c in columns[table]:
        w.writerow([c.name, "string" if c.dtype == "dict" else c.dtype, c.unit,
                    nulls.get(c.name) or c.null_text() or "never", c.doc])
    return buf.getvalue()


if __name__ == "__main__":  # pragma: no cover - docs helper
    if sys.argv[1:2] == ["--csv"]:
        serving = sys.argv[3] if len(sys.argv) > 3 else None
        sys.stdout.write(csv_dictionary(sys.argv[2] if len(sys.argv) > 2 else "points", get_model(serving) if serving else None))
    elif sys.argv[1:2] in (["--fill"], ["--readme"]):
        for path in map(Path, sys.argv[2:]):
            path.write_text(fill_markdown(path.read_text()))
    else:
        which = sys.argv[1] if len(sys.argv) > 1 else "points"
        print(reference(which, get_model(*sys.argv[2].split("/")) if len(sys.argv) > 2 else None))
