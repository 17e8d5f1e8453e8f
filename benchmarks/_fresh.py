"""Run one grid in a fresh Python process and report its time and peak memory.

The peak is VmHWM of the child's own address space: `ru_maxrss` would carry the parent's
high-water mark across fork and exec, and a benchmark that already holds large tables
would then report its own memory, not the run's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_CODE = """
import json, time
from sweep import grid as spec
from sweep.runner import run_grid
g = spec.load({grid!r})
t = time.perf_counter()
r = run_grid(g, {out!r})
s = time.perf_counter() - t
hwm = int([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]) / 1024
print(json.dumps({{'s': s, 'rss_mb': hwm, 'points': g.n_points, 'frontier': r.manifest['rows']['frontier']}}))
"""


def run_fresh(grid: Path, out: Path) -> dict:
    """`sweep.run.run_grid` on `grid` in a new process: seconds, peak RSS (MB), points,
    frontier rows and points/s."""
    code = _CODE.format(grid=str(grid), out=str(out))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    row = json.loads(res.stdout.strip().splitlines()[-1])
    row["points_per_s"] = row["points"] / row["s"]
    return row
