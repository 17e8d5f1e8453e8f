"""`--memory-limit` (`sweep.runner.memory`): a limit below what the grid needs is refused in
one line with the least it needs; a limit above it is honoured: the run's peak resident
memory (VmHWM of a fresh process, the compilation cache off so the chunk function is
compiled in the run, the worse case) stays within 15% of the limit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sweep import grid as spec
from sweep.cli import main
from sweep.errors import OutputError
from sweep.runner.memory import BASE_MB, plan_memory

GRID = """
name = "mem"
[grid]
model = ["llama-3.1-8b", "llama-3.1-70b"]
gpu = ["h100-sxm", "a100-80gb"]
gpus_per_replica = [1, 2, 4, 8]
seq_len = 4096
arrival_rps = {{start = 1.0, stop = 2000.0, num = {rates}, scale = "log"}}
batch_size = {{start = 1, stop = 512, step = 1}}
batch_window_ms = [20, inf]
slo_ms = 250.0
[options]
latency_model = "{model}"
[output]
points = "{points}"
"""


def _grid(tmp_path, rates=60, model="gaussian", points="all"):
    p = tmp_path / "g.toml"
    p.write_text(GRID.format(rates=rates, model=model, points=points))
    return p


def test_a_limit_below_the_floor_is_refused_with_the_floor(tmp_path, capsys):
    g = spec.load(_grid(tmp_path))
    with pytest.raises(OutputError, match=r"needs at least (\d+) MB") as exc:
        plan_memory(g, 300)
    floor = int(exc.value.args[0].split("needs at least ")[1].split()[0])
    assert BASE_MB < floor < BASE_MB + 20
    assert plan_memory(g, floor).chunk_size == 4096  # at the floor: the smallest chunk and row groups
    assert main(["run", str(tmp_path / "g.toml"), "--out", str(tmp_path / "o"), "--memory-limit", "50"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"give at least {floor}" in err and not (tmp_path / "o").exists()


def test_the_plan_shrinks_row_groups_and_chunks_with_the_limit(tmp_path):
    g = spec.load(_grid(tmp_path))
    small, large = plan_memory(g, 700), plan_memory(g, 4000)
    assert small.row_group_rows is not None and small.row_group_rows < g.output.row_group_rows
    assert large.row_group_rows is None and large.chunk_size > small.chunk_size
    none = spec.load(_grid(tmp_path, points="none"))
    assert plan_memory(none, 700).row_group_rows is None  # nothing to encode


def _peak(grid, out, limit):
    code = ("from sweep.cli import main\n"
            f"rc = main(['run', {str(grid)!r}, '--out', {str(out)!r}, '--quiet', '--memory-limit', '{limit}'])\n"
            "hwm = int([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]) / 1024\n"
            "print(rc, hwm)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=900,
                         env={**__import__("os").environ, "SWEEP_CACHE_DIR": ""})
    rc, hwm = res.stdout.split()
    assert rc == "0", res.stderr
    return float(hwm)


@pytest.mark.slow
@pytest.mark.parametrize("model,points,limits", [
    ("gaussian", "all", (700, 800, 1200)),
    ("gaussian", "none", (640, 700, 1000)),
    ("batcher", "none", (1000, 1200)),
])
def test_limits_are_honoured_within_15_percent(tmp_path, model, points, limits):
    grid = _grid(tmp_path, rates=4 if model == "batcher" else 60, model=model, points=points)
    for limit in limits:
        peak = _peak(grid, tmp_path / f"o{limit}", limit)
        assert peak <= 1.15 * limit, (model, points, limit, peak)
