"""Cost of `[uncertainty]` and `[sensitivity]` against the plain kernel, in one run.

Six jitted, vmapped programs over the same random dynamic-batching points (the inputs of
`benchmarks/kernel.py`, full batches, given service times), side by side:

* plain: the engine's `evaluate_values` (every column, the verdicts);
* S = 64: the same plus `[uncertainty]` with `arrival_rps` normal (sd 20 %) and `t_req_ms`
  lognormal (sd 10 %): 64 model evaluations per point, p_slo_breach and the bands.
  Goal: points/s at most 64x slower than plain (cost ratio <= 64);
* latency only: the model's `latency_ms` alone (XLA drops every other column): the fair
  baseline of the derivatives, which need only the latency;
* derivatives: `sweep.engine.plan.derivative_columns` alone (jax.jacfwd over 4 inputs).
  Goal: at most 3x the plain kernel (also printed: the cost against latency only);
* plain + derivatives: the plain kernel and the derivatives in ONE jitted program, as the
  engine's chunk computes them (XLA then solves continuous serving's step-time fixed point
  once for both): its time over plain's, less one, is what the derivatives add to a run
  (printed as "derivatives' marginal cost");
* sensitivity: the whole `[sensitivity]` (the derivatives and headroom_rps, a 48-step
  bisection), for reference.

A second table repeats them for continuous serving (`continuous_programs`: the analytic
model of docs/continuous.md on `benchmarks/cb_points.py`'s random engines).

    python benchmarks/uncertainty.py [--points 65536] [--repeats 3] [--smoke]

Machines here are shared and noisy: each program is timed once per round, over `--repeats`
rounds (so every program sees the same spells of a busy machine), and its best is
reported; nothing in the test suite depends on speed. Beside each time, the arithmetic the
compiled program executes per point (`benchmarks/_hlo.py`: elementwise operations counted
from XLA's optimized HLO, loops by their trip counts), a cost that does not move with the
machine's load, and the same count in the program JAX hands to XLA ("traced ops": the
arithmetic the program asks for; their ratio is what XLA's fusion adds by recomputing cheap
intermediates in every fused consumer). Figures land in benchmarks/results/uncertainty.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from _hlo import executed_ops, traced_ops
from cb_points import CONTINUOUS, CONTINUOUS_COLUMNS, continuous
from kernel import COLUMNS, MODEL, make_inputs

from sweep.engine.evaluate import evaluate_values
from sweep.engine.plan import derivative_values, plan_values
from sweep.grid.uncertainty import Dist, UncertaintyOptions
from sweep.models.base import CATALOG_FIELDS

KW = dict(windowed=False, full=True, paged=False, service_source="given", mean_follows=False,
          block_tokens=16.0, reserve_fraction=0.0)
STATIC = tuple(sorted(KW.items()))
UNC = UncertaintyOptions(samples=64, seed=0, dists=(Dist("arrival_rps", "normal", 1.0, 0.2),
                                                    Dist("t_req_ms", "lognormal", 1.0, 0.1)))


def _split(x: dict[str, np.ndarray]) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    n = len(x["arrival_rps"])
    v = {k: jnp.asarray(a) for k, a in x.items() if k not in CATALOG_FIELDS}
    v["model"] = v["gpu"] = jnp.arange(n, dtype=jnp.int32)
    return v, {k: jnp.asarray(x[k]) for k in CATALOG_FIELDS}


def programs(model=MODEL, kw=KW, columns=COLUMNS, unc=UNC, latency="latency_ms",
             only: tuple[str, ...] | None = None) -> dict[str, object]:
    plain = functools.partial(evaluate_values, model=model, static=tuple(sorted(kw.items())), columns=columns)

    def with_plan(v, t, plan):
        return plain(v, t, plan=plan)

    def inputs(v, t):
        x = dict(v)
        x.update({k: t[k][v[a]] for k, a in CATALOG_FIELDS.items()})
        return x

    def derivatives(v, t):
        return derivative_values(inputs(v, t), model, kw, False)

    def latency_only(v, t):
        return jax.vmap(lambda p: model.point(p, **kw)[latency])(inputs(v, t))

    def plain_and_derivatives(v, t):
        out = plain(v, t)
        out.update(derivatives(v, t))
        return out

    def sensitivity(v, t):
        return plan_values(inputs(v, t), model=model, kw=kw, uncertainty=None, sensitivity=True, roofline=False)

    progs = {
        "plain": jax.jit(plain),
        "S=64": jax.jit(functools.partial(with_plan, plan=(unc, False, False))),
        "latency only": jax.jit(latency_only),
        "derivatives": jax.jit(derivatives),
        "plain + derivatives": jax.jit(plain_and_derivatives),
        "sensitivity": jax.jit(sensitivity),
    }
    return {k: f for k, f in progs.items() if only is None or k in only}


def continuous_programs(smoke: bool) -> dict[str, object]:
    """The same programs for continuous serving (`benchmarks/cb_points.py`'s random engines,
    given step times, paged KV), S = 64 with `arrival_rps` normal (sd 20 %) and
    `t_token_ms` lognormal (sd 10 %). The smoke run leaves out the derivatives: their
    program takes about 8 s to compile."""
    kw = dict(paged=True, service_source="given", block_tokens=16.0, reserve_fraction=0.1)
    unc = UncertaintyOptions(samples=64, seed=0, dists=(Dist("arrival_rps", "normal", 1.0, 0.2),
                                                        Dist("t_token_ms", "lognormal", 1.0, 0.1)))
    only = ("plain", "S=64", "latency only") if smoke else None
    return programs(CONTINUOUS, kw, CONTINUOUS_COLUMNS, unc, "ttft_p_ms", only)


def _table(title: str, progs: dict[str, object], v, t, repeats: int) -> dict[str, dict[str, float]]:
    print(f"{title}\n{'program':<20} {'points/s':>12} {'cost / plain':>13} {'goal':>7} {'compile s':>10} "
          f"{'XLA ops/point':>14} {'ops / plain':>12} {'traced ops':>11} {'XLA/traced':>11}")
    rows: dict[str, dict[str, float]] = {}
    compiled = {}
    n = len(v["arrival_rps"])
    goals = {"S=64": 64.0, "derivatives": 3.0}
    for name, fn in progs.items():  # compile each (and a first timing)
        t0 = time.perf_counter()
        compiled[name] = fn.lower(v, t).compile()  # type: ignore[attr-defined]
        jax.block_until_ready(compiled[name](v, t))
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        jax.block_until_ready(compiled[name](v, t))
        rows[name] = {"seconds": time.perf_counter() - t0, "compile_s": compile_s,
                      "traced_ops_per_point": traced_ops(fn, (v, t), n)}
        counted = executed_ops(compiled[name], n)
        rows[name]["xla_ops_per_point"] = counted.ops_per_point
        rows[name]["xla_unknown_loops"] = counted.unknown_loops
    for _ in range(repeats - 1):  # then rounds over every program: each sees the same machine
        for name in progs:
            t0 = time.perf_counter()
            jax.block_until_ready(compiled[name](v, t))
            rows[name]["seconds"] = min(rows[name]["seconds"], time.perf_counter() - t0)
    for r in rows.values():
        r["points_per_s"] = n / r["seconds"]
    for name, r in rows.items():
        r["cost_ratio"] = r["seconds"] / rows["plain"]["seconds"]
        r["ops_ratio"] = r["xla_ops_per_point"] / rows["plain"]["xla_ops_per_point"]
        goal = f"<= {goals[name]:g}" if name in goals else ""
        print(f"{name:<20} {r['points_per_s']:>12,.0f} {r['cost_ratio']:>12.2f}x {goal:>7} {r['compile_s']:>10.2f} "
              f"{r['xla_ops_per_point']:>14,.0f} {r['ops_ratio']:>11.2f}x {r['traced_ops_per_point']:>11,.0f} "
              f"{r['xla_ops_per_point'] / r['traced_ops_per_point']:>10.2f}x"
              f"{' (a loop of unknown trips counted once)' if r['xla_unknown_loops'] else ''}")
    if "derivatives" in rows:
        rows["derivatives"]["cost_vs_latency_only"] = rows["derivatives"]["seconds"] / rows["latency only"]["seconds"]
        print(f"derivatives / latency only: {rows['derivatives']['cost_vs_latency_only']:.2f}x")
    if "plain + derivatives" in rows:
        rows["derivatives"]["marginal_cost"] = rows["plain + derivatives"]["cost_ratio"] - 1.0
        print(f"derivatives' marginal cost (plain + derivatives in one program, less plain): "
              f"{rows['derivatives']['marginal_cost']:.2f}x plain")
    return rows


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1 << 16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="a tiny run (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.points, args.repeats = 64, 1
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs, "
          f"{args.points:,} points, best of {args.repeats}")
    v, t = _split(make_inputs(args.points, windowed=False))
    rows = _table("dynamic batching", programs(), v, t, args.repeats)
    _, (cv, ct) = continuous(args.points)
    cont = _table("continuous batching", continuous_programs(args.smoke), cv, ct, args.repeats)
    out = {"points": args.points, "rows": rows, "continuous": cont}
    if not args.smoke:
        res = Path(__file__).parent / "results"
        res.mkdir(exist_ok=True)
        (res / "uncertainty.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
