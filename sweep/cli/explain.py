"""`sweep explain`: one point's derivation in the terminal (`sweep.api.explain`)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.api import Explanation
from sweep.cli.summary import make_console

#: Inputs named in the headline, when the point has them.
HEADLINE = ("model", "gpu", "gpus_per_replica", "arrival_rps", "replicas", "batch_size", "batch_window_ms",
            "max_batched_tokens", "seq_len", "prompt_tokens", "output_tokens", "slo_ms", "ttft_slo_ms", "tpot_slo_ms",
            "percentile")
#: The latencies an SLO checks, by serving mode's column names.
CHECKED = ("latency_ms", "ttft_p_ms", "tpot_p_ms", "e2e_p_ms")


def print_explanation(e: Explanation, console: Console | None = None) -> None:
    console = make_console(console)
    inputs = ", ".join(f"{k} = {_value(e.row[k])}" for k in HEADLINE if k in e.row
                       and not (k.endswith("slo_ms") and _value(e.row[k]) == "inf"))
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
    checked = ", ".join(f"{k} = {_value(e.row[k])} ms" for k in CHECKED if k in e.row)
    docs = "docs/continuous.md" if "ttft_p_ms" in e.row else "docs/model.md"
    console.print(f"checked against the SLOs: {checked}; action {e.row.get('action')}; formulas and references: {docs}",
                  markup=False)


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
