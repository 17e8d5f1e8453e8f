"""`sweep explain`: one point's derivation in the terminal (`sweep.api.explain`)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.api import Explanation
from sweep.cli.summary import make_console

#: Inputs named in the headline, when the point has them.
HEADLINE = ("model", "gpu", "gpus_per_replica", "arrival_rps", "replicas", "batch_size", "batch_window_ms", "seq_len",
            "slo_ms", "percentile")


def print_explanation(e: Explanation, console: Console | None = None) -> None:
    console = make_console(console)
    inputs = ", ".join(f"{k} = {_value(e.row[k])}" for k in HEADLINE if k in e.row)
    console.print(f"[bold]{escape(e.grid)}[/bold], point_id {e.point_id} ({escape(e.model)}): {escape(inputs)}")
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
    console.print(f"latency checked against the SLO: latency_ms = {_value(e.row.get('latency_ms'))} ms; "
                  f"action {e.row.get('action')}; formulas and references: docs/model.md", markup=False)


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
