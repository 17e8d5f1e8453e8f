"""A run's identity covers every input (`sweep.runner.identity`), and the manifest says which
machine computed each segment.

Issue 28: a rerun into the same folder after a catalog edit reported "already complete",
and a long-lived Dask cluster returned the old figures for an edited H100 (its workers'
cache key covered the grid's text only; the cluster half is in tests/test_runner_cluster.py).
Here, in process: an edited `--catalog` entry (bandwidth and price), an edited profile CSV,
an edited trace file and the engine's own digest each give another run key, and a rerun
after an edit recomputes and equals a fresh run of the edited inputs; an unchanged rerun
is still "already complete".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sweep import grid as spec
from sweep.catalog import load_catalog
from sweep.cli import main
from sweep.runner import run_grid
from sweep.runner.identity import ISA_FLAGS, engine_digest, isa_tag, machine, run_inputs

ROOT = Path(__file__).resolve().parents[1]

#: Roofline service times (no t_fixed_ms / t_req_ms): the H100's bandwidth sets the
#: latencies, its price the cost. 2 x 3 x 2 x 3 = 36 points, 12 scenario groups.
ROOF = """
name = "roof"
[grid]
arrival_rps = [5.0, 20.0]
batch_size = [1, 8, 32]
batch_window_ms = 5
seq_len = 2048
model = "llama-3.1-8b"
gpu = "h100-sxm"
gpus_per_replica = [1, 2]
replicas = [1, 2, 4]
slo_ms = 500.0
"""


def _catalog(tmp_path: Path, bandwidth: float, price: float) -> Path:
    """A catalog folder overriding the packaged h100-sxm with these two figures."""
    folder = tmp_path / "cat"
    (folder / "gpus").mkdir(parents=True, exist_ok=True)
    text = (ROOT / "sweep" / "catalog" / "gpus" / "h100-sxm.toml").read_text()
    lines: list[str] = []
    for line in text.splitlines():
        if "[source]" in lines:
            pass  # the citations keep their text
        elif line.startswith("hbm_bandwidth_bytes_per_s"):
            line = f"hbm_bandwidth_bytes_per_s = {bandwidth!r}"
        elif line.startswith("usd_per_gpu_hour"):
            line = f"usd_per_gpu_hour = {price!r}"
        lines.append(line)
    (folder / "gpus" / "h100-sxm.toml").write_text("\n".join(lines) + "\n")
    return folder


def _load(grid: Path, catalog: Path | None = None):
    return spec.load(grid, catalog=load_catalog([catalog]) if catalog is not None else None)


def _cost_and_latency(out: Path) -> tuple[list, list]:
    points = pq.read_table(out / "optimum.parquet").sort_by("row_id")
    return points.column("cost_usd_per_hour").to_pylist(), points.column("t_fixed_ms").to_pylist()


def test_a_rerun_after_a_catalog_edit_recomputes_with_the_new_figures(tmp_path):
    grid = tmp_path / "roof.toml"
    grid.write_text(ROOF)
    cat = _catalog(tmp_path, 3.35e12, 2.5)  # the packaged figures
    out = tmp_path / "out"
    first = run_grid(_load(grid, cat), out)
    assert run_grid(_load(grid, cat), out).skipped  # nothing changed: already complete
    old_cost, old_latency = _cost_and_latency(out)
    cat = _catalog(tmp_path, 1.0e12, 7.0)  # the same folder, the H100 edited in place
    again = run_grid(_load(grid, cat), out)
    assert not again.skipped
    assert again.manifest["run_key"] != first.manifest["run_key"]
    entry = again.manifest["inputs"]["catalog"]["gpus/h100-sxm"]
    assert entry["origin"] == str(cat / "gpus" / "h100-sxm.toml")
    assert entry["sha256"] != first.manifest["inputs"]["catalog"]["gpus/h100-sxm"]["sha256"]
    fresh = tmp_path / "fresh"
    run_grid(_load(grid, cat), fresh)
    assert _cost_and_latency(out) == _cost_and_latency(fresh)  # the edited figures, as a clean run
    new_cost, new_latency = _cost_and_latency(out)
    # cost is replicas x GPUs x price: every priced row 7.0 / 2.5 times the old one
    assert [c for c in new_cost if c is not None] and all(
        n == pytest.approx(o * 7.0 / 2.5) for n, o in zip(new_cost, old_cost) if o is not None and n is not None)
    assert all(n > o for n, o in zip(new_latency, old_latency))  # 1.0 TB/s instead of 3.35: slower


def test_the_cli_rerun_after_a_catalog_edit_is_not_already_complete(tmp_path, capsys):
    grid = tmp_path / "roof.toml"
    grid.write_text(ROOF)
    out = tmp_path / "out"
    cat = _catalog(tmp_path, 3.35e12, 2.5)
    args = ["run", str(grid), "--out", str(out), "--catalog", str(cat), "--quiet"]
    assert main(args) == 0
    before = json.loads((out / "manifest.json").read_text())
    _catalog(tmp_path, 3.35e12, 4.0)
    assert main(args) == 0
    after = json.loads((out / "manifest.json").read_text())
    assert after["run_key"] != before["run_key"] and after["created_utc"] >= before["created_utc"]
    assert _cost_and_latency(out)[0] != [None] * len(_cost_and_latency(out)[0])
    fresh = tmp_path / "fresh"
    assert main(["run", str(grid), "--out", str(fresh), "--catalog", str(cat), "--quiet"]) == 0
    assert _cost_and_latency(out) == _cost_and_latency(fresh)


def test_a_rerun_after_a_profile_edit_recomputes(tmp_path):
    folder = tmp_path / "g"
    shutil.copytree(ROOT / "grids" / "profiles", folder / "profiles")
    grid = folder / "seed-gpt3-profile.toml"
    shutil.copy(ROOT / "grids" / "seed-gpt3-profile.toml", grid)
    out = tmp_path / "out"
    first = run_grid(spec.load(grid), out)
    assert first.manifest["inputs"]["files"]["profile"]["sha256"] is not None
    assert run_grid(spec.load(grid), out).skipped
    csv = folder / "profiles" / "gpt3-a100.csv"
    edited = []
    for row in csv.read_text().splitlines():
        cells = row.split(",")
        if len(cells) >= 2 and cells[0].strip().isdigit():  # every latency 10% higher: another fit
            cells[1] = repr(float(cells[1]) * 1.1)
        edited.append(",".join(cells))
    csv.write_text("\n".join(edited) + "\n")
    again = run_grid(spec.load(grid), out)
    assert not again.skipped
    assert again.manifest["inputs"]["files"]["profile"]["sha256"] != \
        first.manifest["inputs"]["files"]["profile"]["sha256"]
    assert again.manifest["service_fit"]["t_fixed_ms"] != first.manifest["service_fit"]["t_fixed_ms"]


def test_every_input_moves_the_digest(tmp_path):
    """The digest covers the grid's text, each catalog entry's content, a trace file's
    times and the engine; what the inputs record names each file and its SHA-256."""
    grid = tmp_path / "roof.toml"
    grid.write_text(ROOF)
    base = run_inputs(spec.load(grid))
    assert base["engine"]["sha256"] == engine_digest() and len(base["digest"]) == 64
    assert base["files"]["grid"]["sha256"] == spec.load(grid).sha256
    assert run_inputs(spec.load(grid))["digest"] == base["digest"]  # deterministic
    assert run_inputs(_load(grid, _catalog(tmp_path, 3.35e12, 2.5)))["digest"] == base["digest"]  # same figures
    assert run_inputs(_load(grid, _catalog(tmp_path, 3.35e12, 2.6)))["digest"] != base["digest"]
    grid.write_text(ROOF.replace("slo_ms = 500.0", "slo_ms = 501.0"))
    assert run_inputs(spec.load(grid))["digest"] != base["digest"]
    # a [simulation] trace: the file's bytes and the times read from it
    trace = tmp_path / "arrivals.csv"
    trace.write_text("t\n" + "\n".join(f"{0.01 * i:.2f}" for i in range(400)) + "\n")
    sim = ROOF + '[options]\nlatency_model = "simulated"\n[simulation]\nwarmup = 10\ntrace = "arrivals.csv"\n'
    grid.write_text(sim)
    one = run_inputs(spec.load(grid))
    assert one["files"]["simulation.trace"]["sha256"] is not None
    trace.write_text("t\n" + "\n".join(f"{0.011 * i:.3f}" for i in range(400)) + "\n")
    two = run_inputs(spec.load(grid))
    assert two["files"]["simulation.trace"]["sha256"] != one["files"]["simulation.trace"]["sha256"]
    assert two["digest"] != one["digest"]


def test_each_segment_records_the_machine_that_computed_it(tmp_path):
    grid = tmp_path / "roof.toml"
    grid.write_text(ROOF)
    g = spec.load(grid)
    assert g.group_size == 9 and g.n_points == 36
    result = run_grid(g, tmp_path / "out", chunk_size=g.group_size, segment_points=g.group_size)
    m = result.manifest
    here = machine()
    assert [s["index"] for s in m["segments"]] == list(range(m["chunks"]["segments"])) and len(m["segments"]) == 4
    assert [s["points"] for s in m["segments"]] == [[i * 9, i * 9 + 9] for i in range(4)]
    assert {s["host"] for s in m["segments"]} == {here["host"]}
    assert {s["machine"] for s in m["segments"]} == {isa_tag(here)} == set(m["machines"])
    record = m["machines"][isa_tag(here)]
    assert record["cpu_flags"] == [f for f in ISA_FLAGS if f in record["cpu_flags"]]
    assert record["isa"] == here["isa"] and record["backend"] == "cpu"
    # /proc/cpuinfo's flags where there is one (the reference: this machine's own file)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = next(line.split(":", 1)[1].split() for line in cpuinfo.read_text().splitlines()
                     if line.startswith(("flags", "Features")))
        assert record["cpu_flags"] == [f for f in ISA_FLAGS if f in flags]
