"""How request-level dynamic batching's results read (`sweep.models.views`): the batch B and
its window, the one latency the SLO checks, the seed's per-point table with its B_min line,
and the report's figures (latency and utilisation against the batch, the KV reservation, the
frontier of capacity against latency, the proxy against the simulator)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sweep.models.views import (
    AgainstSimulator,
    Answers,
    Axis,
    CapLines,
    Card,
    Cell,
    Check,
    Explain,
    Frontier,
    KvBudget,
    Mark,
    Note,
    Panel,
    Plan,
    PointTable,
    Regions,
    Series,
    Threshold,
    Utilisation,
    Value,
    Views,
    fixed,
)


def _fixed(x: Any, digits: int) -> str:
    """A terminal cell: `digits` after the point, `inf` when unbounded, `-` when missing."""
    x = float(x)
    if math.isnan(x):
        return "-"
    return f"{x:.{digits}f}"


def _count(x: Any) -> str:
    """A whole count in the terminal: `8`, `inf`; `-` when missing."""
    x = float(x)
    if math.isnan(x):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{int(x)}" if x.is_integer() and abs(x) < 1e15 else f"{x:,.0f}"


def _b_min_line(r: Mapping[str, Any]) -> str:
    """The terminal's line per scenario: B_min does not depend on the batch size."""
    return (f"lambda {float(r['lambda_per_replica_rps']):g} req/s per replica, T_fixed {float(r['t_fixed_ms']):g} ms, "
            f"t_req {float(r['t_req_ms']):g} ms: "
            f"B_min(rho_target={float(r['rho_target']):g}) = {_fixed(r['b_min_rho_target'], 2)} -> "
            f"{_count(r['b_min_rho_target_int'])}; "
            f"B_min stable = {_fixed(r['b_min_stable'], 2)} -> {_count(r['b_min_stable_int'])}; "
            f"KV {float(r['kv_gb_per_req']):.2f} GB/request, weights {float(r['weights_gb']):.0f} GB, "
            f"free {float(r['free_gb']):.0f} GB, at most {int(r['b_mem_max'])} requests in memory")


def _b_min_html(r: Mapping[str, Any]) -> str:
    """The report's line under a scenario row's table."""
    return (f"lambda {fixed(r.get('lambda_per_replica_rps'), 3).rstrip('0').rstrip('.')} req/s per replica, "
            f"T_fixed {fixed(r.get('t_fixed_ms'), 3)} ms, t_req {fixed(r.get('t_req_ms'), 4)} ms: "
            f"B_min(rho_target={r.get('rho_target', math.nan):g}) = "
            f"{fixed(r.get('b_min_rho_target'), 2)} -> {fixed(r.get('b_min_rho_target_int'), 0)}; "
            f"B_min stable = {fixed(r.get('b_min_stable'), 2)} -> {fixed(r.get('b_min_stable_int'), 0)}; "
            f"KV {fixed(r.get('kv_gb_per_req'), 2)} GB/request, weights {fixed(r.get('weights_gb'), 0)} GB, "
            f"free {fixed(r.get('free_gb'), 0)} GB, at most {fixed(r.get('b_mem_max'), 0)} requests in memory")


_B_MIN_KEY = ("lambda_per_replica_rps", "t_fixed_ms", "t_req_ms", "rho_target")
B_MIN_LINE = Note(_b_min_line, key=_B_MIN_KEY, needs=(
    *_B_MIN_KEY, "b_min_rho_target", "b_min_rho_target_int", "b_min_stable", "b_min_stable_int", "kv_gb_per_req",
    "weights_gb", "free_gb", "b_mem_max"))

_RHO = Cell("rho", "rho", percent=True, flag="stable", flag_text=" (unstable)")
#: The seed's table: service, queue, the two proxy estimates, Little's law.
_QUEUE = (Cell("T_svc", "t_svc_ms"), Cell("req/s", "capacity_rps"), _RHO, Cell("E[W]", "e_wait_ms"),
          Cell("E[T_batch]", "e_batch_ms"), Cell("E[T_svc]", "e_svc_ms"), Cell("E[T]", "e_resp_ms"),
          Cell("{q} gauss", "p_gauss_ms"), Cell("{q} exp", "p_exp_ms"))
_LITTLE = (Cell("L", "little_l", 2), Cell("in svc", "in_service", 2), Cell("in queue", "in_queue", 2))

#: The terminal's table where the checked latency is neither proxy estimate (batcher, simulated).
POINT_TABLE = PointTable(
    title="per point (times in ms; rho as %)",
    cells=(Cell("B", "batch_size", fmt="{:.0f}"), *_QUEUE, Cell("{checked}", "latency_ms"), *_LITTLE),
    note=B_MIN_LINE)

_REGIONS = Regions(stable_from="b_min_stable_int", memory_to="b_mem_max", none_stable="unstable (no batch keeps up)",
                   none_stable_hover="unstable at every batch size: lambda >= B / T_svc(B)")
_ANSWER_MARKS = (("b_max_slo", "largest batch under the SLO"), ("slo_opt", "SLO optimum"), ("knee", "knee"))

VIEWS = Views(
    axes=(
        Axis("batch_window_ms", symbol="T_max", title="batching window T_max (ms)", short="window", hover="window ms",
             inf="full batch", inf_text="full batches", legend_inf="full batches (window inf)", value="window {:g} ms",
             noun="batching window"),
        Axis("batch_size", symbol="B", title="batch size B (requests)", short="batch size B", hover="B",
             noun="batch size"),
    ),
    checks=(Check("latency_ms", "latency"),),
    latency_names={"batcher": "batcher model"},
    point_table=POINT_TABLE,
    report_table=PointTable(
        cells=(Cell("window", "batch_window_ms", fmt="{:g} ms", left=True, varies=True),
               Cell("B", "batch_size", fmt="{:g}"), *_QUEUE,
               Cell("{q} batcher", "batcher_p_ms"), Cell("{q} simulated", "sim_p_ms"), *_LITTLE),
        note=Note(_b_min_html),
        legend="From {source}; times in ms; bold rows are the answers' batch sizes (and B_min stable, b_mem_max).",
        marks=("b_max_slo", "slo_opt", "knee", "b_latency_opt", "b_min_stable_int", "b_mem_max"), thin=True),
    explain=Explain(headline=("model", "gpu", "gpus_per_replica", "arrival_rps", "replicas", "batch_size",
                              "batch_window_ms", "seq_len", "slo_ms", "percentile"),
                    docs="docs/model.md"),
    answers=Answers(
        cards=(Card("b_max_slo", "largest batch under the SLO (b_max_slo)", "the largest batch meeting the SLO"),
               Card("slo_opt", "SLO optimum (most capacity under the SLO)", "the SLO optimum"),
               Card("knee", "knee of the frontier", "the frontier's knee"),
               Card("b_latency_opt", "lowest mean latency (b_latency_opt)", "the lowest mean latency")),
        values=(Value("{} ms", "latency_ms"), Value("{} req/s per replica", "capacity_rps"),
                Value("rho {}%", "rho", percent=True)),
        replicas="fewest replicas meeting the SLO (replicas_min)"),
    plan=Plan(cells=(Cell("batch", "batch_size", fmt="{:g}"), Cell("window ms", "batch_window_ms", fmt="{:g}"),
                     Cell("latency ms", "latency_ms")),
              workload=("seq_len", "mean_seq_len", "slo_ms"), shown=(("seq_len", "S_max"),), choices="batch, window"),
    figures=(
        CapLines("latency", "Latency against batch size",
                 "The SLO's estimate (latency_ms) per batching window, the SLO, the knee and the SLO optimum of the "
                 "frontier; shaded: unstable and out-of-memory batch sizes.",
                 panels=(Panel("latency_ms", "{q} estimate", "latency_ms ({q}, ms)", slo="slo_ms",
                               slo_name="SLO {q} {slo:g} ms", alone=" (latency_ms)",
                               hover=(("E[T]", "e_resp_ms", ",.1f", " ms"), ("rho", "rho", ".1%", "")),
                               mean=("e_resp_ms", "mean E[T]"), cap_at_slo=20.0),),
                 regions=_REGIONS,
                 marks=(Mark("latency unbounded (proxy rho >= 1)", "stable, but the latency estimate is unbounded",
                             true=("stable",), unbounded=True),)),
        Utilisation("utilisation", "Utilisation against batch size",
                    "The proxy's rho = lambda E[S] / E[B] per window, with the operating thresholds of the operating "
                    "rules (docs/model.md, decisions).",
                    series=(("rho (proxy)", "rho"), ("batcher model rho", "batcher_rho"),
                            ("simulated utilisation", "sim_utilization")),
                    thresholds=(Threshold("rho_max", "rho_max (near saturation above)", "upper"),
                                Threshold("rho_target", "rho_target", "target"),
                                Threshold("rho_min", "rho_min (overprovisioned below)", "lower")),
                    regions=_REGIONS),
        KvBudget("kv-budget", "KV budget of one replica",
                 "HBM per replica: the weights, the KV-cache reservation at the batch sizes that matter, and what "
                 "stays free (usable HBM = weights + free_gb).",
                 per_request="kv_gb_per_req", limit="b_mem_max", marks=_ANSWER_MARKS,
                 largest="largest batch in the grid"),
        Frontier("frontier", "Pareto frontiers",
                 "Each scenario row's frontier over the batcher's knobs: capacity per replica up, latency down; the "
                 "knee (star) and the SLO optimum (diamond) of every row. One colour per GPU; hover for the scenario.",
                 x="capacity_rps", y="latency_ms", x_title="capacity per replica (req/s)",
                 y_title="latency_ms (ms, the SLO's estimate)", slo="slo_ms"),
        AgainstSimulator("proxy-sim", "Proxy against simulator",
                         "The analytic estimates against the simulator's measurements of the same points: the "
                         "percentile (with the simulator's 95% half-width) and the mean; on y = x they agree.",
                         series=(Series("p_gauss_ms", "sim_p_ms", "{q} gaussian proxy", 0, 0),
                                 Series("p_exp_ms", "sim_p_ms", "{q} exponential proxy", 0, 1),
                                 Series("batcher_p_ms", "sim_p_ms", "{q} batcher model", 0, 2),
                                 Series("e_resp_ms", "sim_mean_ms", "mean E[T] proxy", 1, 0),
                                 Series("batcher_e_resp_ms", "sim_mean_ms", "mean, batcher model", 1, 2)),
                         half_width="sim_p_hw_ms", needs=("sim_mean_ms", "sim_p_ms", "e_resp_ms"),
                         unbounded="estimate unbounded (proxy rho >= 1)",
                         missing="this run did not simulate (no sim_* columns): add a [simulation] table or "
                                 "latency_model = \"simulated\""),
    ),
    labels={"seq_len": "S_max {:g}", "mean_seq_len": "S_mean {:g}"},
    mean_name="E[T]",
)

#: The proxies' views: the checked latency is one of the two proxy estimates the table shows.
PROXY_VIEWS = replace(VIEWS, point_table=replace(POINT_TABLE, cells=tuple(
    c for c in POINT_TABLE.cells if c.column != "latency_ms")))
