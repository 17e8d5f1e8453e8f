"""`sweep explain`: one point's derivation in the terminal (`sweep.api.explain`), its headline
and docs page from the serving model's views (`Views.explain`)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.api import Explanation
from sweep.cli.summary import make_console
from sweep.decide.layouts import EXPLAIN_LEAD
from sweep.models import ServingModel, get_model

#: Inputs named in the headline of a model whose views name none.
GENERIC_HEADLINE = ("model", "gpu", "gpus_per_replica", "arrival_rps")


def _model(e: Explanation) -> ServingModel | None:
    serving, _, name = e.model.partition("/")
    try:
        return get_model(serving, name or None)
    except KeyError:
        return None


def print_explanation(e: Explanation, console: Console | None = None) -> None:
    console = make_console(console)
    model = _model(e)
    checks = model.slo_checks if model is not None else ()
    slos = {slo for _, slo in checks}
    headline = ((model.views.explain.headline or (*GENERIC_HEADLINE, *model.group_axes, *model.row_axes))
                if model is not None else GENERIC_HEADLINE)
    inputs = ", ".join(f"{k} = {_value(e.row[k])}" for k in headline if k in e.row
                       and not (k in slos and _value(e.row[k]) == "inf"))  # an SLO of inf is none
    console.print(f"[bold]{escape(e.grid)}[/bold], point_id {e.point_id} ({escape(e.model)}): {escape(inputs)}")
    if e.chosen:
        console.print(f"this point: {e.chosen} (--point ID or a decision axis, e.g. replicas=2, names another)",
                      markup=False)
    if e.steps is None:
        console.print(f"the serving model {e.model} has no step-by-step derivation yet; its columns:", markup=False)
        t = Table(show_header=False)
        for k, v in e.row.items():
            t.add_row(k, _value(v))
        console.print(t)
        return
    for n, step in enumerate(e.steps, 1):
        t = Table(title=f"{n}. {step.title}  ({step.section})", title_justify="left", show_header=False, expand=False)
        t.add_column("formula", overflow="fold")
        t.add_column("with this point's numbers", overflow="fold")
        t.add_column("result", justify="right", overflow="fold")
        for formula, numbers, result in step.lines:
            t.add_row(escape(formula), escape(numbers), escape(result))
        console.print(t)
    units = {c.name: c.unit for c in model.columns} if model is not None else {}
    checked = ", ".join(f"{k} = {_value(e.row[k])} {units.get(k, 'ms')}" for k, _ in checks if k in e.row)
    docs = model.views.explain.docs if model is not None else ""
    console.print(f"checked against the SLOs: {checked}; action {e.row.get('action')}"
                  + (f"; formulas and references: {docs}" if docs else ""), markup=False)
    if e.layout:
        console.print(f"{EXPLAIN_LEAD}: {e.layout}", markup=False)


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
