"""Scale: end-to-end rows/s against raw pyarrow, and peak memory against grid size.

Part 1 runs `sweep run` on a grid with `points = "all"` (every column of every point to
Parquet, zstd, the engine's row groups, plus optimum and frontier), then writes the very
same tables from memory with plain `pyarrow.parquet.write_table` and the same settings, in
the same process: (a) the points table alone, (b) every file the engine wrote (points,
optimum, frontier). The ratios say how close the whole engine (evaluation, decisions,
three outputs) comes to the cost of the Parquet writes alone.

Part 2 runs grids of growing size with `points = "none"` in fresh processes and prints
seconds, points/s and peak resident memory (VmHWM of the child: ru_maxrss would carry the
parent's high-water mark across fork and exec): memory must stay flat.

    python benchmarks/scale.py [--points 2000000] [--sizes 1e6,1e7,1e8] [--smoke]

(``--smoke``: the smallest grids, the full-batch regime only in part 1, one size in part 2,
nothing written to benchmarks/results/.)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
from _fresh import run_fresh

GRID = """
name = "scale"
[grid]
model = ["llama-3.1-8b", "llama-3.1-70b"]
gpu = ["h100-sxm", "a100-80gb"]
gpus_per_replica = [1, 2, 4, 8]
seq_len = 4096
arrival_rps = {{start = 1.0, stop = 2000.0, num = {rates}, scale = "log"}}
batch_size = {{start = 1, stop = 512, step = 1}}
batch_window_ms = {windows}
slo_ms = 250.0
[output]
points = "{points}"
"""


def grid_text(points: int, mode: str, windowed: bool) -> str:
    per_rate = 2 * 2 * 4 * 512 * (2 if windowed else 1)
    rates = max(1, round(points / per_rate))
    return GRID.format(rates=rates, points=mode, windows="[20, inf]" if windowed else "inf")


def part1(points: int, windowed: bool) -> dict:
    from sweep import grid as spec
    from sweep.runner import run_grid

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "g.toml"
        p.write_text(grid_text(points, "all", windowed))
        g = spec.load(p)
        run_grid(g, Path(d) / "warm")  # compile once, so both sides are measured warm
        t0 = time.perf_counter()
        r = run_grid(g, Path(d) / "out", force=True)
        engine_s = time.perf_counter() - t0
        out = Path(d) / "out"
        table = ds.dataset(out / "points").to_table()
        files = sorted((out / "points").glob("*.parquet"))
        rg = pq.ParquetFile(files[0]).metadata.row_group(0).num_rows
        others = {name: pq.read_table(out / name) for name in ("optimum.parquet", "frontier.parquet")}
        t0 = time.perf_counter()
        pq.write_table(table, Path(d) / "raw.parquet", compression="zstd", row_group_size=rg)
        points_s = time.perf_counter() - t0
        for name, t in others.items():
            pq.write_table(t, Path(d) / f"raw-{name}", compression="zstd", row_group_size=1 << 16)
        all_s = time.perf_counter() - t0
    n = r.manifest["rows"]["points_written"]
    return {"regime": "windowed" if windowed else "full", "rows": n, "columns": table.num_columns,
            "frontier_rows": others["frontier.parquet"].num_rows,
            "engine_rows_per_s": n / engine_s, "pyarrow_points_rows_per_s": n / points_s,
            "pyarrow_all_rows_per_s": n / all_s, "ratio_points": points_s / engine_s, "ratio_all": all_s / engine_s}


def part2(points: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "g.toml"
        p.write_text(grid_text(points, "none", True))
        return run_fresh(p, Path(d) / "out")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=float, default=2e6)
    ap.add_argument("--sizes", default="1e6,1e7,1e8")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run that writes nothing (the test suite's check that this script works)")
    args = ap.parse_args(argv)
    if args.smoke:  # one arrival rate: 8,192 points in part 1 (full batches only), 16,384 in part 2
        args.points, args.sizes = 1, "1"
    regimes = (False,) if args.smoke else (False, True)
    results: dict = {"part1": [], "part2": []}
    print("part 1: sweep run (points = all) against raw pyarrow writing the same tables")
    print("  (a) only points/ as one table; (b) points, optimum and frontier: every file the engine writes")
    print(f"  {'regime':<9} {'rows':>10} {'frontier':>9} {'engine rows/s':>14} {'(a) rows/s':>11} {'engine/(a)':>11} "
          f"{'(b) rows/s':>11} {'engine/(b)':>11}")
    for windowed in regimes:
        r = part1(int(args.points), windowed)
        results["part1"].append(r)
        print(f"  {r['regime']:<9} {r['rows']:>10,} {r['frontier_rows']:>9,} {r['engine_rows_per_s']:>14,.0f} "
              f"{r['pyarrow_points_rows_per_s']:>11,.0f} {r['ratio_points']:>10.0%} "
              f"{r['pyarrow_all_rows_per_s']:>11,.0f} {r['ratio_all']:>10.0%}")
    print("part 2: peak memory against grid size (points = none, fresh process each)")
    print(f"  {'points':>13} {'seconds':>9} {'points/s':>12} {'frontier rows':>14} {'peak RSS MB':>12}")
    for size in (int(float(x)) for x in args.sizes.split(",")):
        r = part2(size)
        results["part2"].append(r)
        print(f"  {r['points']:>13,} {r['s']:>9.1f} {r['points_per_s']:>12,.0f} "
              f"{r['frontier']:>14,} {r['rss_mb']:>12,.0f}")
    if not args.smoke:
        out = Path(__file__).parent / "results"
        out.mkdir(exist_ok=True)
        (out / "scale.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
