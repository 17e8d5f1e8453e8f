"""Scale soak tests (marked slow: `pytest -m slow`, about two minutes on 2 cores).

100,000 scenario groups x batch sizes 1..1024 (102,400,000 points) through the exact
reductions in bounded memory; and peak memory that does not grow with the grid: the same
study at 1/100 of the size may not use much less. Memory, not time, is asserted (time is
for benchmarks/).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

GRID = """
name = "scale-soak"
[grid]
arrival_rps = {{start = 20.0, stop = 2000.0, num = 100, scale = "log"}}
slo_ms = {{start = 50.0, stop = 500.0, num = {slos}}}
batch_size = {{start = 1, stop = 1024, step = 1}}
seq_len = 2048
model = "llama-3.1-8b"
gpu = "h100-sxm"
t_fixed_ms = 8.0
t_req_ms = 0.05
[output]
points = "none"
"""

#: Peak resident memory allowed for any grid size (the engine's fixed cost is ~0.7 GB).
PEAK_MB = 2500


def _run(tmp_path, slos: int) -> dict:
    grid = tmp_path / f"g{slos}.toml"
    grid.write_text(GRID.format(slos=slos))
    out = tmp_path / f"o{slos}"
    code = (
        "import json, sweep;"
        f"r = sweep.run(sweep.load_grid({str(grid)!r}), {str(out)!r});"
        "hwm = int([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]) / 1024;"
        "print(json.dumps({'rows': r.manifest['rows'], 'hwm_mb': hwm}))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=1800)
    result = json.loads(res.stdout.strip().splitlines()[-1])
    result["out"] = out
    return result


@pytest.mark.slow
def test_100k_groups_by_1024_batches_in_bounded_memory(tmp_path):
    small = _run(tmp_path, 10)  # 1,000 groups
    big = _run(tmp_path, 1000)  # 100,000 groups
    assert big["rows"]["grid_points"] == 100_000 * 1024
    assert big["rows"]["optimum"] == 100_000 and pq.read_metadata(big["out"] / "optimum.parquet").num_rows == 100_000
    assert big["hwm_mb"] < PEAK_MB
    # 100x the points may not cost anywhere near 100x the memory.
    assert big["hwm_mb"] < 3 * small["hwm_mb"]
