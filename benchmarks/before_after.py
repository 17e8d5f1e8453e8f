"""Before/after: the engine today against an earlier commit, on the same grids, in one run.

Issue 9 restructured the engine (one serving-model interface, one verdict, columns that
derive from declarations) with its behaviour unchanged; its promise is that no figure got
lower. Comparing two benchmark scripts of different ages is not like for like (today's
kernel computes the verdicts and every declared column, the old kernel benchmark timed the
bare formulas), so this script runs the one contract both versions share: `sweep run` on
the same grid files, which both versions answer with the same files (the golden digests
in tests/golden/ prove that). The baseline is exported with `git archive` into a temporary
folder (the repository's work tree and worktree list are not touched) and each side runs
in a fresh interpreter with its own tree first on `sys.path`, alternately, so both see the
same machine. Persistent compilation caches are off on both sides.

Workloads (explicit service times, so both versions evaluate the seed's model and the
SPEC 13 roofline default, which the baseline predates, plays no part):

- ``all-full`` / ``all-windowed``: `points = "all"`, every column of every point to
  Parquet plus optimum and frontier (the `points = "all"` path of issue 9, item 9);
- ``none-full`` / ``none-windowed``: `points = "none"`, grids twice as large: evaluation
  and the exact reductions (the kernel's like-for-like figure: both versions compute the
  same columns and decisions; the windowed regime is the incomplete-gamma path).

Printed per workload: the best-of-repeats seconds of each side (the run's own
`timings_s.total` from manifest.json, compilation included, and the process's wall time
with imports) and the ratio baseline/today (above 1: today is faster).

    python benchmarks/before_after.py [--baseline 5d18fd3] [--points 2000000] [--repeats 3] [--smoke]

The default baseline is the last commit before issue 9's restructure. Figures land in
benchmarks/results/before_after.json (not with --smoke, which compares today with itself
on tiny grids: the test suite's check that this script works).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The last commit before issue 9's restructure (its parent commit took the golden digests).
BASELINE = "5d18fd3"

GRID = """
name = "before-after-{name}"
[grid]
model = ["llama-3.1-8b", "llama-3.1-70b"]
gpu = ["h100-sxm", "a100-80gb"]
gpus_per_replica = [1, 2, 4, 8]
seq_len = 4096
t_fixed_ms = 20.0
t_req_ms = 0.4
arrival_rps = {{start = 1.0, stop = 2000.0, num = {rates}, scale = "log"}}
batch_size = {{start = 1, stop = 512, step = 1}}
batch_window_ms = {windows}
slo_ms = 250.0
[output]
points = "{points}"
"""

_CODE = """
import json, sys, time
t0 = time.perf_counter()
from sweep.cli import main
rc = main(["run", sys.argv[1], "--out", sys.argv[2], "--quiet"])
wall = time.perf_counter() - t0
import sweep
m = json.load(open(sys.argv[2] + "/manifest.json"))
print(json.dumps({"rc": rc, "wall_s": wall, "total_s": m["timings_s"]["total"], "points": m["rows"]["grid_points"],
                  "tree": sweep.__file__}))
"""


def workloads(points: int, smoke: bool) -> dict[str, str]:
    per_rate = 2 * 2 * 4 * 512
    def text(name: str, mode: str, windows: str, n: int) -> str:
        w = 1 if windows == "inf" else 2
        return GRID.format(name=name, rates=max(1, round(n / (per_rate * w))), windows=windows, points=mode)
    if smoke:
        return {"all-full": text("all-full", "all", "inf", 1)}
    return {"all-full": text("all-full", "all", "inf", points),
            "all-windowed": text("all-windowed", "all", "[5.0, inf]", points),
            "none-full": text("none-full", "none", "inf", 4 * points),
            "none-windowed": text("none-windowed", "none", "[5.0, inf]", 4 * points)}


def export(ref: str, dest: Path) -> Path:
    """The tree of commit `ref` in `dest` (its `sweep` package is what the baseline runs)."""
    archive = dest / "tree.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref, "sweep"], stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest / "tree", filter="data")
    archive.unlink()
    return dest / "tree"


def run_once(tree: Path, grid: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "SWEEP_CACHE_DIR": ""}
    res = subprocess.run([sys.executable, "-c", _CODE, str(grid), str(out)], capture_output=True, text=True, env=env,
                         cwd=str(out.parent))
    if res.returncode != 0:
        raise SystemExit(f"before_after: the run of {grid.name} with {tree} failed:\n{res.stderr[-2000:]}")
    row = json.loads(res.stdout.strip().splitlines()[-1])
    if not row["tree"].startswith(str(tree)):  # an installed copy shadowed the tree under test
        raise SystemExit(f"before_after: {tree} was not the sweep imported ({row['tree']})")
    return row


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=BASELINE, help="the commit to compare with (default: before issue 9)")
    ap.add_argument("--points", type=int, default=2_000_000, help="points of the points='all' grids")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="today against itself, tiny grids, nothing written")
    args = ap.parse_args(argv)
    if args.points < 1 or args.repeats < 1:
        ap.error("--points and --repeats must be at least 1")
    results: dict = {"baseline": "HEAD (smoke)" if args.smoke else args.baseline, "workloads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        today = ROOT
        base = ROOT if args.smoke else export(args.baseline, d)
        print(f"{'workload':<14} {'points':>10} {'baseline s':>11} {'today s':>9} {'ratio':>6}   "
              f"{'wall base':>9} {'wall today':>10} {'ratio':>6}")
        for name, text in workloads(args.points, args.smoke).items():
            grid = d / f"{name}.toml"
            grid.write_text(text)
            best: dict[str, dict] = {}
            for r in range(1 if args.smoke else args.repeats):
                for side, tree in (("baseline", base), ("today", today)):
                    out = d / f"{name}-{side}-{r}"
                    row = run_once(tree, grid, out)
                    subprocess.run(["rm", "-rf", str(out)], check=True)  # the disk holds one run at a time
                    if side not in best or row["total_s"] < best[side]["total_s"]:
                        best[side] = {**row, "wall_s": min(row["wall_s"], best.get(side, row)["wall_s"])}
            b, t = best["baseline"], best["today"]
            ratio, wall_ratio = b["total_s"] / t["total_s"], b["wall_s"] / t["wall_s"]
            results["workloads"][name] = {"points": t["points"], "baseline_total_s": b["total_s"],
                                          "today_total_s": t["total_s"], "ratio": ratio, "baseline_wall_s": b["wall_s"],
                                          "today_wall_s": t["wall_s"], "wall_ratio": wall_ratio}
            print(f"{name:<14} {t['points']:>10,} {b['total_s']:>11.2f} {t['total_s']:>9.2f} {ratio:>6.2f}   "
                  f"{b['wall_s']:>9.2f} {t['wall_s']:>10.2f} {wall_ratio:>6.2f}", flush=True)
    print("ratio = baseline seconds / today's seconds (above 1: today is faster); best of "
          f"{1 if args.smoke else args.repeats}, compilation included, caches off. {time.strftime('%Y-%m-%d')}")
    if not args.smoke:
        out = HERE / "results"
        out.mkdir(exist_ok=True)
        (out / "before_after.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
