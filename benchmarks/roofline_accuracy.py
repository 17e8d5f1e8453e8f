"""The refined roofline (docs/roofline.md) against published measurements (tests/data/gpu_measurements.csv).

For every figure: the refined estimate as the engine makes it (the efficiencies and per-step
overhead of the figure's cell of sweep/catalog/efficiency.toml; benchmarks/efficiency_fit.py
compares it with the single default set and leave-one-out), the linear roofline
(`sweep.models.shared.service.roofline_times`: T_fixed + t_req B with eta_bw 0.8, eta_flops 0.5, every weight
read every step, bf16 FLOP/s, no collectives, no overhead), the measurement and both ratios;
then the error distribution of each (median and max |estimate / measured - 1|, share within
10% and 20%), and the listed misses with their reasons.

    .venv/bin/python benchmarks/roofline_accuracy.py [--smoke]

(``--smoke``: the same run, the figure drawn into a temporary folder: the test suite's check.)

Writes docs/roofline_accuracy.png where matplotlib is installed. A few seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sweep.catalog import packaged_catalog, packaged_efficiencies
from sweep.grid import efficiency_fit as ef
from sweep.grid.calibrate import StepRow, read_rows
from sweep.models.shared.service import roofline_times

DATA = ROOT / "tests" / "data" / "gpu_measurements.csv"
FIGURE = ROOT / "docs" / "roofline_accuracy.png"


def old_estimate_ms(r: StepRow) -> float:
    """Today's roofline for the row's figure: T_fixed + t_req * B per step (docs/model.md, \
service time: the roofline source)."""
    cat = packaged_catalog()
    m, g = cat.model(r.model), cat.gpu(r.gpu)
    kvb = m.kv_bytes_per_token(r.kv_bytes)

    def step(batch, tokens_per_request, seq_len):
        t_fixed, t_req = roofline_times(
            m.weights_bytes(r.weight_bytes), m.active_params, kvb, float(seq_len), float(tokens_per_request),
            float(r.tensor_parallel), g.hbm_bandwidth_bytes_per_s, g.bf16_dense_flops, 0.8, 0.5)
        return float(t_fixed + t_req * batch)

    if r.phase == "prefill":
        return 1e3 * step(r.batch, r.prompt_tokens, r.prompt_tokens)
    if r.phase == "decode":
        return 1e3 * step(r.batch, 1, r.context_tokens)
    total = step(r.batch, r.prompt_tokens, r.prompt_tokens)
    total += sum(step(r.batch, 1, r.prompt_tokens + i) for i in range(int(r.output_tokens) - 1))
    return 1e3 * total


def summary(errors: np.ndarray) -> str:
    a = np.abs(errors)
    return (f"median |err| {100 * np.median(a):5.1f}%, max |err| {100 * a.max():6.1f}%, "
            f"within 10%: {np.mean(a <= 0.10):4.0%}, within 20%: {np.mean(a <= 0.20):4.0%} "
            f"({int(np.sum(a <= 0.20))} of {len(a)})")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="the same run, the figure drawn into a temporary "
                    "folder (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    rows = read_rows(DATA)
    new = ef.table_estimate_ms(rows, ef.step_terms(rows), packaged_efficiencies())
    old = np.asarray([old_estimate_ms(r) for r in rows])
    meas = np.asarray([r.measured_ms for r in rows])
    miss = np.asarray([r.extra.get("expected_miss", "") == "yes" for r in rows])
    print(f"{'figure':50s} {'phase':8s} {'B':>4s} {'tp':>2s} {'measured':>9s} {'refined':>9s} {'ratio':>6s} "
          f"{'linear':>9s} {'ratio':>6s}")
    for r, n, o, m, x in zip(rows, new, old, meas, miss):
        flag = "  (listed miss)" if x else ""
        print(f"{r.extra['id'][:50]:50s} {r.phase:8s} {r.batch:4.0f} {r.tensor_parallel:2d} {m:9.2f} {n:9.2f} "
              f"{n / m:6.2f} {o:9.2f} {o / m:6.2f}{flag}")
    print()
    print(f"refined, all {len(rows)} figures:   {summary(new / meas - 1)}")
    print(f"refined, {int((~miss).sum())} not listed as misses: {summary(new[~miss] / meas[~miss] - 1)}")
    print(f"linear roofline, all figures: {summary(old / meas - 1)}")
    print(f"baseline: the published measurements; median ratio estimate / measured: refined "
          f"{np.median(new / meas):.3f}, linear roofline {np.median(old / meas):.3f}")
    print()
    print("listed misses (tests/data/gpu_measurements.csv, miss_reason):")
    for r, n, m, x in zip(rows, new, meas, miss):
        if x:
            print(f"- {r.extra['id']}: ratio {n / m:.2f}: {r.extra['miss_reason']}")
    result = {"rows": [{"id": r.extra["id"], "phase": r.phase, "measured_ms": float(m), "spec13_ms": float(n),
                        "linear_ms": float(o), "listed_miss": bool(x)}
                       for r, n, o, m, x in zip(rows, new, old, meas, miss, strict=True)]}
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            result["figure"] = _figure(rows, new, old, meas, miss, Path(tmp) / FIGURE.name)
    else:
        result["figure"] = _figure(rows, new, old, meas, miss, FIGURE)
    return result


def _figure(rows, new, old, meas, miss, path: Path):
    try:
        import matplotlib
    except ImportError:
        print("matplotlib not installed: no figure")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    phases = np.asarray([r.phase for r in rows])
    lo, hi = 0.8 * meas.min(), 1.25 * meas.max()
    xs = np.geomspace(lo, hi, 50)
    ax.fill_between(xs, 0.8 * xs, 1.2 * xs, color="0.9", label="within 20%")
    ax.plot(xs, xs, color="0.5", lw=0.8)
    for ph, mk in (("prefill", "o"), ("decode", "s"), ("generate", "^")):
        sel = phases == ph
        ax.scatter(meas[sel & ~miss], new[sel & ~miss], marker=mk, color="C0", label=f"refined, {ph}")
        ax.scatter(meas[sel & miss], new[sel & miss], marker=mk, facecolors="none", edgecolors="C3",
                   label=f"refined, {ph}, listed miss")
        ax.scatter(meas[sel], old[sel], marker=mk, color="C1", alpha=0.5, s=14, label=f"linear, {ph}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("measured (ms)")
    ax.set_ylabel("estimate (ms)")
    ax.set_title("Roofline estimates against published measurements")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    plt.close(fig)
    return fig


if __name__ == "__main__":
    main()
