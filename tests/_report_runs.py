"""Run folders for the report tests, made once per test session.

Every run is produced by `sweep run` (in process) from a small grid: the report is tested
on what the engine really writes.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sweep.io.staging import file_record

ROOT = Path(__file__).resolve().parents[1]

#: Two models on two GPUs, roofline service times, two windows, hive-partitioned points.
MULTI = """
name = "report-multi"
description = "report tests: 2 models x 2 GPUs, windows 10 ms and full batches"
[grid]
arrival_rps = [50.0, 200.0]
replicas = [1, 2]
batch_size = [1, 4, 16, 64]
batch_window_ms = [10, inf]
model = ["llama-3.1-8b", "llama-3.1-70b"]
gpu = ["h100-sxm", "a100-80gb"]
gpus_per_replica = 2
seq_len = 4096
mean_seq_len = 1500
kv_bytes_per_elem = "fp8"
slo_ms = 200.0
[options]
kv_allocation = "paged"
reserve_fraction = 0.1
[output]
partition_by = ["model", "gpu"]
"""

#: The same scenario with reduced output only (like the nightly fleet study).
REDUCED = MULTI.replace('name = "report-multi"', 'name = "report-reduced"').replace(
    'partition_by = ["model", "gpu"]', 'points = "none"')

#: The seed's example, simulated (small and fast: 2 replications of 1,000 requests).
SIMULATED = """
name = "report-sim"
description = "report tests: the seed's example, simulated"
[grid]
arrival_rps = [60.0, 100.0]
batch_size = [4, 8, 16]
batch_window_ms = [20, inf]
seq_len = 2048
model = "gpt3-175b"
gpu = "a100-80gb"
gpus_per_replica = 8
t_fixed_ms = 50.0
t_req_ms = 0.5
slo_ms = 300.0
[options]
latency_model = "simulated"
[simulation]
n_requests = 1000
warmup = 100
replications = 2
"""

#: Continuous batching: two models (one MoE) on two GPUs, two caps, four loads; the
#: heaviest load saturates some configurations.
CONTINUOUS = """
name = "report-continuous"
description = "report tests: continuous batching, 2 models x 2 GPUs"
[grid]
model = ["llama-3.1-8b", "qwen3-30b-a3b"]
gpu = ["h100-sxm", "a100-80gb"]
arrival_rps = [1.0, 4.0, 16.0, 40.0]
prompt_tokens = 512
prompt_cv = 1.0
output_tokens = 128
output_cv = 1.0
batch_size = [16, 64]
max_batched_tokens = 2048
weight_bytes_per_param = "fp8"
ttft_slo_ms = 500
tpot_slo_ms = 40
[options]
serving = "continuous"
kv_allocation = "paged"
"""

_CACHE: dict[str, Path] = {}


def run_folder(base: Path, name: str) -> Path:
    """The run folder `name` (seed, multi, reduced, sim, continuous), made once under `base`."""
    if name in _CACHE:
        return _CACHE[name]
    from sweep.cli import main

    out = base / name
    if not (out / "manifest.json").exists():
        if name == "seed":
            grid = ROOT / "grids" / "seed-gpt3.toml"
        else:
            grid = base / f"{name}.toml"
            grid.write_text({"multi": MULTI, "reduced": REDUCED, "sim": SIMULATED, "continuous": CONTINUOUS}[name])
        with contextlib.chdir(grid.parent):  # the manifest names the grid file as given: keep it short
            rc = main(["run", grid.name, "--out", str(out), "--quiet", "--progress", "none"])
        assert rc == 0, f"sweep run {grid} failed with {rc}"
    _CACHE[name] = out
    return out


def tiled_frontier(src: Path, folder: Path, copies: int) -> Path:
    """A copy of run folder `src` whose optimum and frontier are repeated `copies` times
    with shifted row and group ids: a frontier as large as a fleet study's, from real
    engine rows, without running one."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name in ("optimum.parquet", "frontier.parquet"):
        t = pq.read_table(src / name)
        n_rows = int(pq.read_table(src / "optimum.parquet", columns=["row_id"]).column(0).to_numpy().max()) + 1
        n_groups = int(pq.read_table(src / "optimum.parquet", columns=["group_id"]).column(0).to_numpy().max()) + 1
        parts = []
        for k in range(copies):
            part = t.set_column(t.schema.get_field_index("row_id"), "row_id",
                                pa.compute.add(t.column("row_id"), k * n_rows))
            part = part.set_column(part.schema.get_field_index("group_id"), "group_id",
                                   pa.compute.add(part.column("group_id"), k * n_groups))
            parts.append(part)
        pq.write_table(pa.concat_tables(parts), folder / name)
    shutil.copy(src / "manifest.json", folder / "manifest.json")
    reseal(folder)
    return folder


def reseal(folder: Path) -> None:
    """Record the rewritten files of run folder `folder` in its manifest (checksums and row
    counts), as a run would have: readers check the folder against it (sweep.io.published)."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    for rel in list(manifest["checksums"]):
        if (folder / rel).is_file():
            manifest["checksums"][rel] = file_record(folder / rel)
        else:
            del manifest["checksums"][rel]
    for name in ("optimum", "frontier"):
        manifest["rows"][name] = manifest["checksums"][f"{name}.parquet"]["rows"]
    path.write_text(json.dumps(manifest))
