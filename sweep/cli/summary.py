"""The terminal summary `sweep run` prints (rich tables; plain text when not a terminal)."""

from __future__ import annotations

import math

import numpy as np
from rich.console import Console
from rich.table import Table

from sweep.decide.verdict import ACTIONS
from sweep.grid.spec import GridSpec
from sweep.runner.run import RunResult


def _fmt(x: float, digits: int = 1) -> str:
    x = float(x)  # Python floats: arithmetic and formatting never raise a NumPy RuntimeWarning
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def print_summary(spec: GridSpec, result: RunResult, console: Console | None = None) -> None:
    if console is None:
        console = Console(highlight=False)
        if not console.is_terminal:  # logs and pipes: never truncate the table
            console = Console(highlight=False, width=200)
    m = result.manifest
    if result.skipped:
        console.print(f"[bold]{spec.name}[/bold]: already complete in {result.out_dir} "
                      f"(same grid, version and settings); nothing to do. --force runs it again.")
        return
    console.print(
        f"[bold]{spec.name}[/bold]: {m['rows']['grid_points']:,} points, "
        f"{result.feasible:,} feasible, {m['rows']['points_written']:,} written to {result.out_dir}/points "
        f"in {m['timings_s']['total']:.2f} s ({m['timings_s']['points_per_s']:,.0f} points/s; "
        f"service times {spec.service_source}, latency {spec.options.latency_model})"
    )
    if result.rows is not None and spec.model.serving == "dynamic":
        _point_table(spec, result.rows, console)
    elif result.rows is not None:
        _continuous_table(spec, result.rows, console)
    counts = ", ".join(f"{a} {result.action_counts[a]:,}" for a in ACTIONS if result.action_counts.get(a))
    console.print(f"actions: {counts}")


def _point_table(spec: GridSpec, rows: dict[str, np.ndarray], console: Console) -> None:
    q = spec.axis("percentile").values
    qlabel = f"P{100 * q[0]:g}" if len(q) == 1 else "P(q)"
    varying = [a.key for a in spec.axes if len(a) > 1 and a.key != "batch_size"]
    t = Table(title="per point (times in ms; rho as %)", title_justify="left")
    for key in varying:
        t.add_column(key, justify="right")
    for name in ("B", "T_svc", "req/s", "rho", "E[W]", "E[T_batch]", "E[T_svc]", "E[T]", f"{qlabel} gauss", f"{qlabel} exp", "L", "in svc", "in queue", "action"):
        t.add_column(name, justify="right")
    models = [mm.name for mm in spec.models]
    gpus = [g.name for g in spec.gpus]
    for i in range(len(rows["batch_size"])):
        cells = []
        for key in varying:
            v = rows[key][i]
            cells.append(models[v] if key == "model" else gpus[v] if key == "gpu" else f"{v:g}")
        rho = float(rows["rho"][i])
        rho_txt = f"{100.0 * rho:.1f}%" + ("" if rows["stable"][i] else " (unstable)")
        cells += [
            f"{rows['batch_size'][i]}",
            _fmt(rows["t_svc_ms"][i]),
            _fmt(rows["capacity_rps"][i]),
            rho_txt,
            _fmt(rows["e_wait_ms"][i]),
            _fmt(rows["e_batch_ms"][i]),
            _fmt(rows["e_svc_ms"][i]),
            _fmt(rows["e_resp_ms"][i]),
            _fmt(rows["p_gauss_ms"][i]),
            _fmt(rows["p_exp_ms"][i]),
            _fmt(rows["little_l"][i], 2),
            _fmt(rows["in_service"][i], 2),
            _fmt(rows["in_queue"][i], 2),
            ACTIONS[rows["action"][i]],
        ]
        t.add_row(*cells)
    console.print(t)
    # B_min does not depend on the batch size: one line per distinct scenario.
    seen = set()
    for i in range(len(rows["batch_size"])):
        scenario = (rows["lambda_per_replica_rps"][i], rows["t_fixed_ms"][i], rows["t_req_ms"][i], rows["rho_target"][i])
        if scenario in seen:
            continue
        seen.add(scenario)
        console.print(
            f"lambda {scenario[0]:g} req/s per replica, T_fixed {scenario[1]:g} ms, t_req {scenario[2]:g} ms: "
            f"B_min(rho_target={scenario[3]:g}) = {_fmt(rows['b_min_rho_target'][i], 2)} -> {_fmt(rows['b_min_rho_target_int'][i], 0)}; "
            f"B_min stable = {_fmt(rows['b_min_stable'][i], 2)} -> {_fmt(rows['b_min_stable_int'][i], 0)}; "
            f"KV {rows['kv_gb_per_req'][i]:.2f} GB/request, weights {rows['weights_gb'][i]:.0f} GB, "
            f"free {rows['free_gb'][i]:.0f} GB, at most {rows['b_mem_max'][i]} requests in memory"
        )
        if len(seen) >= 8:
            break


def _continuous_table(spec: GridSpec, rows: dict[str, np.ndarray], console: Console) -> None:
    """Continuous serving: per point, the knobs, the percentiles the SLOs check, throughput."""
    q = spec.axis("percentile").values
    ql = f"P{100 * q[0]:g}" if len(q) == 1 else "P(q)"
    varying = [a.key for a in spec.axes if len(a) > 1 and a.key not in ("batch_size", "max_batched_tokens")]
    t = Table(title="per point (times in ms)", title_justify="left")
    for key in varying:
        t.add_column(key, justify="right")
    for name in ("N", "M", "running", "step", f"TTFT {ql}", f"TPOT {ql}", f"E2E {ql}", "tok/s/GPU", "tok/s/user", "rho", "action"):
        t.add_column(name, justify="right")
    names = {"model": [m.name for m in spec.models], "gpu": [g.name for g in spec.gpus]}
    for i in range(len(rows["batch_size"])):
        cells = [names[k][rows[k][i]] if k in names else f"{rows[k][i]:g}" for k in varying]
        cells += [f"{rows['batch_size'][i]}", _fmt(rows["max_batched_tokens"][i], 0), _fmt(rows["mean_running"][i], 1),
                  _fmt(rows["step_mean_ms"][i], 2), _fmt(rows["ttft_p_ms"][i]), _fmt(rows["tpot_p_ms"][i], 2),
                  _fmt(rows["e2e_p_ms"][i]), _fmt(rows["tok_s_per_gpu"][i]), _fmt(rows["tok_s_per_user"][i]),
                  _fmt(100 * float(rows["rho"][i]), 1) + "%", ACTIONS[rows["action"][i]]]
        t.add_row(*cells)
    console.print(t)
