"""The efficiency table (sweep/catalog/efficiency.toml) against the published figures it was fitted to.

For every figure of tests/data/gpu_measurements.csv: the refined roofline's estimate / measured
with the single default set (eta_bw 0.7, eta_flops 0.6, 1 ms a step: BEFORE), with the shipped
table (AFTER: the cell of the figure's GPU, size class and tensor parallel, as the engine uses
it) and leave-one-out (LOO: the table refitted without that figure, `sweep.grid.efficiency_fit`,
then the figure predicted, an honest measure of how the table does on a figure it has not
seen); then the share within 20% of each, and the table's cells.

    .venv/bin/python benchmarks/efficiency_fit.py [--smoke]

(``--smoke``: leave-one-out for the first 4 figures only: the test suite's check.) Writes
benchmarks/results/efficiency_fit.json. About a minute (one table fit per figure).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sweep.catalog import packaged_catalog, packaged_efficiencies, size_class
from sweep.grid import efficiency_fit as ef
from sweep.grid.calibrate import read_rows

DATA = ROOT / "tests" / "data" / "gpu_measurements.csv"
RESULT = ROOT / "benchmarks" / "results" / "efficiency_fit.json"


def share(ratio: np.ndarray) -> str:
    ok = np.abs(ratio - 1) <= 0.20
    return f"{np.mean(ok):4.0%} ({int(ok.sum())} of {len(ok)}), median |err| {100 * np.median(np.abs(ratio - 1)):4.1f}%"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="leave-one-out for 4 figures only; write nothing")
    args = ap.parse_args(argv)
    rows = read_rows(DATA)
    cat = packaged_catalog()
    terms = ef.step_terms(rows)
    meas = np.asarray([r.measured_ms for r in rows])
    before = terms.estimate_ms(*ef.DEFAULTS) / meas
    after = ef.table_estimate_ms(rows, terms, packaged_efficiencies()) / meas
    n_loo = 4 if args.smoke else len(rows)
    loo = np.full(len(rows), np.nan)
    loo[:n_loo] = ef.leave_one_out_ms(rows, terms, range(n_loo)) / meas[:n_loo]
    print(f"{'figure':58s} {'gpu':9s} {'class':6s} {'tp':>2s} {'phase':8s} {'B':>4s} {'measured':>10s} "
          f"{'before':>6s} {'after':>6s} {'LOO':>6s}")
    for r, b, a, lo in zip(rows, before, after, loo):
        print(f"{r.extra['id'][:58]:58s} {r.gpu:9s} {size_class(cat.model(r.model)):6s} {r.tensor_parallel:2d} "
              f"{r.phase:8s} {r.batch:4.0f} {r.measured_ms:10.2f} {b:6.2f} {a:6.2f} {lo:6.2f}")
    print()
    print(f"within 20%, BEFORE (one set: eta_bw 0.7, eta_flops 0.6, 1 ms): {share(before)}")
    print(f"within 20%, AFTER (the shipped table):                      {share(after)}")
    print(f"within 20%, leave-one-out ({n_loo} figures):                        {share(loo[:n_loo])}")
    print("baseline: the published measurements (ratio = estimate / measured)")
    t = packaged_efficiencies()
    print()
    print(f"{'gpu':10s} {'class':6s} {'tp':>3s} {'figures':>7s} {'eta_bw':>7s} {'eta_flops':>9s} "
          f"{'prompt step ms':>14s} {'decode step ms':>14s}")
    for c in [*t.gpu_rows.values(), *t.cells.values()]:
        print(f"{c.gpu:10s} {c.size_class:6s} {c.tensor_parallel or '*':>3} {c.figures:7d} {c.eta_bw:7.4g} "
              f"{c.eta_flops:9.4g} {c.t_overhead_s * 1e3:14.4g} {c.t_decode_overhead_s * 1e3:14.4g}")
    result = {"rows": [{"id": r.extra["id"], "measured_ms": float(r.measured_ms), "before": float(b),
                        "after": float(a), "loo": None if np.isnan(lo) else float(lo)}
                       for r, b, a, lo in zip(rows, before, after, loo, strict=True)],
              "within_20": {"before": float(np.mean(np.abs(before - 1) <= 0.2)),
                            "after": float(np.mean(np.abs(after - 1) <= 0.2)),
                            "loo": float(np.mean(np.abs(loo[:n_loo] - 1) <= 0.2)), "loo_figures": n_loo}}
    if not args.smoke:
        RESULT.parent.mkdir(exist_ok=True)
        RESULT.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {RESULT.relative_to(ROOT)}")
    return result


if __name__ == "__main__":
    main()
