"""A third serving mode, defined here and nowhere else, runs through the real CLI: `sweep run`'s
answers, `sweep show`, `sweep explain` and `sweep report` print its own columns with no edit
outside this file (issue 23, item 1: the display code reads the model's declarations and
`views`, never a mode's name or a column of its own).

The mode is a toy replica: `concurrency` slots, each serving a request in `service_ms`, seen
as one M/M/1 server of rate mu = concurrency / service_ms. Its sojourn time is exponential
with mean 1 / (mu - lambda), so the SLO latency at `percentile` q is -ln(1 - q) / (mu - lambda).
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax.numpy as jnp
import pyarrow.parquet as pq
import pytest
from jax import Array

from sweep.cli import main
from sweep.errors import GridError
from sweep.models import register, unregister
from sweep.models.base import (
    ACTION,
    FEASIBLE,
    POINT_ID,
    SLO_OK,
    Column,
    Decisions,
    Domain,
    Param,
    ServingModel,
    Step,
    num,
)
from sweep.models.shared import columns as shared
from sweep.models.views import (
    Answers,
    Axis,
    CapLines,
    Card,
    Cell,
    Check,
    Explain,
    Frontier,
    Panel,
    Plan,
    PointTable,
    Utilisation,
    Value,
    Views,
)

SERVING = "toyqueue"

VIEWS = Views(
    axes=(Axis("concurrency", symbol="c", title="concurrency c (slots)", short="concurrency c", hover="c",
               noun="concurrency"),),
    checks=(Check("sojourn_p_ms", "sojourn"),),
    point_table=PointTable(
        title="per point (toy queue; times in ms)",
        cells=(Cell("c", "concurrency", fmt="{:.0f}"), Cell("mu/s", "capacity_rps"),
               Cell("rho", "rho", percent=True, flag="stable", flag_text=" (unstable)"),
               Cell("mean", "sojourn_mean_ms", 2), Cell("{q} sojourn", "sojourn_p_ms", 2))),
    report_table=PointTable(
        cells=(Cell("c", "concurrency", fmt="{:g}"), Cell("mean sojourn", "sojourn_mean_ms", 2),
               Cell("{q} sojourn", "sojourn_p_ms", 2), Cell("rho", "rho", percent=True)),
        legend="From {source}; bold: the answers' points.", marks=("b_max_slo", "knee"), mark_points=True),
    explain=Explain(headline=("model", "gpu", "arrival_rps", "replicas", "concurrency", "service_ms", "sojourn_slo_ms"),
                    docs="tests/test_third_mode.py"),
    answers=Answers(cards=(Card("b_max_slo", "most slots under the SLO (b_max_slo)", "the most slots meeting the SLO"),
                           Card("knee", "knee of the frontier", "the frontier's knee")),
                    values=(Value("sojourn {} ms", "sojourn_p_ms", 2), Value("rho {}%", "rho", percent=True)),
                    replicas="fewest replicas meeting the sojourn SLO (replicas_min)"),
    plan=Plan(cells=(Cell("slots", "concurrency", fmt="{:g}"), Cell("sojourn ms", "sojourn_p_ms", 2)),
              workload=("service_ms", "sojourn_slo_ms"), choices="slots"),
    figures=(
        CapLines("latency", "Sojourn against concurrency", "The toy queue's sojourn at the percentile.",
                 panels=(Panel("sojourn_p_ms", "{q} sojourn", "sojourn ({q}, ms)", slo="sojourn_slo_ms",
                               slo_name="sojourn SLO {slo:g} ms"),)),
        Utilisation("utilisation", "Load against concurrency", series=(("rho", "rho"),)),
        Frontier("frontier", "Pareto frontiers", x="capacity_rps", y="sojourn_p_ms", x_title="mu (req/s)",
                 y_title="sojourn (ms)"),
    ),
)


class ToyQueue(ServingModel):
    """`concurrency` slots of `service_ms` each, as one M/M/1 server."""

    serving: ClassVar[str] = SERVING
    name: ClassVar[str] = "exact"
    params: ClassVar[tuple[Param, ...]] = (
        Param("model", "name", None),
        Param("gpu", "name", None),
        Param("arrival_rps", "float", None, Domain(1e-6, 1e9, "requests/s")),
        Param("service_ms", "float", None, Domain(1e-3, 1e7, "ms")),
        Param("sojourn_slo_ms", "float", None, Domain(0, 1e9, "ms", lo_open=True)),
        Param("percentile", "float", 0.99, Domain(0, 1, lo_open=True, hi_open=True)),
        Param("rho_max", "float", 0.85, Domain(0, 1, lo_open=True)),
        Param("rho_min", "float", 0.5, Domain(0, 1)),
        Param("replicas", "int", 1, Domain(1, 1e6, "replicas")),
        Param("concurrency", "int", None, Domain(1, 1e6, "slots"), ascending=True),
    )
    columns: ClassVar[tuple[Column, ...]] = (
        POINT_ID, shared.MODEL, shared.GPU, shared.ARRIVAL_RPS, shared.REPLICAS,
        Column("service_ms", "float64", "ms", "Time one slot serves one request."),
        Column("concurrency", "int64", "slots", "Slots serving requests in parallel (the cap)."),
        Column("sojourn_slo_ms", "float64", "ms", "SLO on the sojourn at `percentile`."),
        Column("percentile", "float64", "-", "Percentile q of the SLO."),
        Column("rho_max", "float64", "-", "Near-saturation threshold."),
        Column("rho_min", "float64", "-", "Over-provisioning threshold."),
        Column("capacity_rps", "float64", "requests/s", "mu = concurrency / service_ms."),
        Column("rho", "float64", "-", "lambda / mu per replica."),
        Column("stable", "bool", "-", "rho < 1."),
        Column("mem_ok", "bool", "-", "Always (the toy has no memory)."),
        Column("sojourn_mean_ms", "float64", "ms", "1 / (mu - lambda).", null_when="stable"),
        Column("sojourn_p_ms", "float64", "ms", "-ln(1 - q) / (mu - lambda).", null_when="stable"),
        SLO_OK, FEASIBLE, ACTION, shared.COST_USD_PER_HOUR,
    )
    echo: ClassVar[tuple[str, ...]] = ("model", "gpu", "arrival_rps", "replicas", "service_ms", "concurrency",
                                       "sojourn_slo_ms", "percentile", "rho_max", "rho_min")
    decisions: ClassVar[Decisions] = Decisions(
        row_axes=("concurrency",), group_axes=("replicas",), size="replicas", capacity="capacity_rps",
        latency="sojourn_p_ms", mean_latency="sojourn_mean_ms", utilisation="rho",
        answer_fields=(("", "concurrency", "int64", "slots"), ("_sojourn_p_ms", "sojourn_p_ms", "float64", "ms"),
                       ("_sojourn_mean_ms", "sojourn_mean_ms", "float64", "ms"),
                       ("_capacity_rps", "capacity_rps", "float64", "requests/s"), ("_rho", "rho", "float64", "-"),
                       ("_point_id", "point_id", "int64", "-")))
    row_constant: ClassVar[tuple[str, ...]] = ("model", "gpu", "arrival_rps", "replicas", "service_ms",
                                               "sojourn_slo_ms", "percentile", "rho_max", "rho_min",
                                               "cost_usd_per_hour")
    slo_checks: ClassVar[tuple[tuple[str, str], ...]] = (("sojourn_p_ms", "sojourn_slo_ms"),)
    coefficient_keys: ClassVar[tuple[str, ...]] = ("service_ms",)
    views: ClassVar[Views] = VIEWS

    def fill(self, values: dict[str, list[Any]], where: Callable[[str], str], source: str
             ) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        for key in ("model", "gpu", "arrival_rps", "service_ms", "sojourn_slo_ms", "concurrency"):
            if key not in values:
                raise GridError(source, where(key), None, "is required")
        out, _ = super().fill(values, where, source)
        return out, {"service_source": "given"}

    def static(self, spec: Any) -> dict[str, Any]:
        return {}

    def point(self, x: Mapping[str, Array], *args: Any, **static: Any) -> dict[str, Array]:
        lam = x["arrival_rps"] / x["replicas"]
        mu = x["concurrency"] / (x["service_ms"] * 1e-3)
        rho = lam / mu
        stable = rho < 1.0
        mean = jnp.where(stable, 1.0 / jnp.where(stable, mu - lam, 1.0), jnp.inf)
        return {
            "capacity_rps": mu, "rho": rho, "stable": stable, "mem_ok": x["concurrency"] >= 1,
            "sojourn_mean_ms": mean * 1e3, "sojourn_p_ms": -jnp.log1p(-x["percentile"]) * mean * 1e3,
            "cost_usd_per_hour": x["replicas"] * x["usd_per_gpu_hour"], "_rho_rules": rho,
        }

    def derivation(self, row: Mapping[str, Any], figures: Mapping[str, float] | None = None,
                   options: Mapping[str, Any] | None = None) -> list[Step] | None:
        lam = row["arrival_rps"] / row["replicas"]
        return [Step("The toy queue", "tests/test_third_mode.py", (
            ("mu = concurrency / service_ms", f"{row['concurrency']} / {row['service_ms']:g} ms",
             num(row["capacity_rps"], "requests/s")),
            ("rho = lambda / mu", f"{lam:g} / {row['capacity_rps']:.4g}", num(row["rho"])),
            ("sojourn at q = -ln(1 - q) / (mu - lambda)", f"q = {row['percentile']:g}",
             num(row["sojourn_p_ms"], "ms")),
        ))]


GRID = f"""
name = "toy"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
arrival_rps = [50.0, 400.0]
service_ms = 20.0
concurrency = [1, 2, 4, 8]
replicas = [1, 2]
sojourn_slo_ms = 100.0
[options]
serving = "{SERVING}"
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The mode registered for this module's tests only, and its run folder."""
    register(ToyQueue())
    try:
        base = tmp_path_factory.mktemp("toy")
        grid = base / "toy.toml"
        grid.write_text(GRID)
        out = base / "run"
        text = _cli(["run", str(grid), "--out", str(out), "--progress", "none"])
        yield grid, out, text
    finally:
        unregister(SERVING)


def _cli(argv: list[str]) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    assert rc == 0, (argv, buf.getvalue())
    return buf.getvalue()


def _sojourn_p99(arrival: float, concurrency: int, replicas: int = 1) -> float:
    mu = concurrency / 0.020
    return -math.log1p(-0.99) / (mu - arrival / replicas) * 1e3


def test_the_run_answers_in_the_modes_own_columns(toy):
    _, out, text = toy
    # the per-point table (16 points: at most 64), its columns as the views declare them
    assert "per point (toy queue; times in ms)" in text and "P99 sojourn" in text
    assert f"{_sojourn_p99(50, 8):.2f}" in text and "50.0% " in text
    assert "action and SLO checked against P99 exact (sojourn_p_ms)" in text
    # the decisions: the cap by its own name, the checked latency, the SLO
    decisions = text[text.index("recommendation per scenario group"):text.index("full tables")]
    for head in ("concurrency", "P99 exact ms", "SLO ms", "USD/h"):
        assert head in decisions, head
    opt = pq.read_table(out / "optimum.parquet").to_pylist()
    at_50 = next(r for r in opt if r["arrival_rps"] == 50.0 and r["is_replicas_min"])
    assert at_50["replicas_min"] == 1 and at_50["replicas_min_batch"] == 8
    assert at_50["replicas_min_sojourn_p_ms"] == pytest.approx(_sojourn_p99(50, 8))
    assert f"{at_50['replicas_min_sojourn_p_ms']:.1f}" in decisions


def test_show_prints_the_same(toy):
    _, out, text = toy
    shown = _cli(["show", str(out)])
    part = lambda t: t[t.index("recommendation per"):t.index("full tables")]  # noqa: E731
    assert part(shown) == part(text) and "per point (toy queue" in shown
    one = _cli(["show", str(out), "arrival_rps=400", "replicas=2"])
    assert f"{_sojourn_p99(400, 8, 2):.2f}" in one


def test_explain_derives_a_point_of_the_mode(toy):
    grid, _, _ = toy
    text = _cli(["explain", str(grid), "--point", "1"])  # arrival 50, replicas 1, concurrency 2
    assert "concurrency = 2" in text and "service_ms = 20" in text and "sojourn_slo_ms = 100" in text
    assert "The toy queue" in text and "100 requests/s" in text and "50 / 100" in text
    assert f"sojourn_p_ms = {_sojourn_p99(50, 2):g} ms" in text
    assert "formulas and references: tests/test_third_mode.py" in text


def test_report_draws_the_modes_figures_and_tables(toy, tmp_path):
    pytest.importorskip("plotly")
    from sweep.reporting import build_report

    _, out, _ = toy
    result = build_report(out, out=tmp_path / "toy.html")
    assert {"latency", "utilisation", "frontier", "action-map", "replica-plan"} <= set(result.figures)
    html = result.path.read_text()
    assert "Sojourn against concurrency" in html and "most slots under the SLO (b_max_slo)" in html
    assert f"c = 8: sojourn {_sojourn_p99(50, 8):,.2f} ms" in html
    assert "<th>slots</th><th>sojourn ms</th>" in html  # the Cheapest plan table, in the mode's columns
    # the derivation follows the recommendation, the card marked THE ANSWER (issue 27)
    assert "recommended: the recommendation: the cheapest configuration" in html and "The toy queue" in html
    assert "THE ANSWER: the recommendation" in html
    # the figures the other modes draw are listed, not drawn, naming the modes that draw them
    assert "throughput" in result.skipped and f'serving = "{SERVING}"' in result.skipped["throughput"]
