"""Run folders for the report tests, made once per test session.

Every run except the continuous one is produced by `sweep run` (in process) from a small
grid: the report is tested on what the engine really writes. The continuous-serving run
folder is SYNTHETIC: that serving mode is not implemented yet, so `synthetic_continuous`
writes a minimal run folder with SPEC 10's column names and made-up, clearly labelled
values, only to test that its figures switch on and draw.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

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

_CACHE: dict[str, Path] = {}


def run_folder(base: Path, name: str) -> Path:
    """The run folder `name` (seed, multi, reduced, sim), made once under `base`."""
    if name in _CACHE:
        return _CACHE[name]
    from sweep.cli import main

    out = base / name
    if not (out / "manifest.json").exists():
        if name == "seed":
            grid = ROOT / "grids" / "seed-gpt3.toml"
        else:
            grid = base / f"{name}.toml"
            grid.write_text({"multi": MULTI, "reduced": REDUCED, "sim": SIMULATED}[name])
        with contextlib.chdir(grid.parent):  # the manifest names the grid file as given: keep it short
            rc = main(["run", grid.name, "--out", str(out), "--quiet", "--progress", "none"])
        assert rc == 0, f"sweep run {grid} failed with {rc}"
    _CACHE[name] = out
    return out


def synthetic_continuous(folder: Path) -> Path:
    """SYNTHETIC continuous-serving run folder (SPEC 10 column names, made-up values).

    Two models x two GPUs x two batch caps x four loads; throughput per user falls and
    TTFT/TPOT rise with load, and the heaviest load of the small cap is unstable (NULL
    latencies, the spelling the engine will use). Not the engine's output: a stand-in
    until `serving = "continuous"` exists.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    pid = 0
    for mi, model in enumerate(["synthetic-8b", "synthetic-70b"]):
        for gi, gpu in enumerate(["gpu-a", "gpu-b"]):
            for cap in (16, 64):
                for li, lam in enumerate((1.0, 2.0, 4.0, 8.0)):
                    stable = not (cap == 16 and li == 3)
                    scale = (1 + mi) * (1.5 - 0.5 * gi)
                    tpot = 10.0 * scale * (1 + 0.1 * li) * (1 + cap / 128)
                    ttft = 80.0 * scale * (1 + 0.4 * li)
                    rows.append({
                        "row_id": 2 * mi + gi, "point_id": pid, "model": model, "gpu": gpu, "gpus_per_replica": 1, "replicas": 1,
                        "arrival_rps": lam, "lambda_per_replica_rps": lam, "batch_size": cap,
                        "max_batched_tokens": 2048, "prompt_tokens": 512.0, "output_tokens": 128.0,
                        "stable": stable, "percentile": 0.99, "ttft_slo_ms": 500.0, "tpot_slo_ms": 40.0,
                        "tok_s_per_user": 1000.0 / tpot if stable else None,
                        "tok_s_per_gpu": lam * 128.0 * 8 / scale if stable else None,
                        "ttft_mean_ms": ttft if stable else None, "ttft_p_ms": 2.5 * ttft if stable else None,
                        "tpot_mean_ms": tpot if stable else None, "tpot_p_ms": 1.8 * tpot if stable else None,
                        "action": "ok" if stable else "unstable",
                    })
                    pid += 1
    table = pa.Table.from_pylist(rows)
    (folder / "points").mkdir(exist_ok=True)
    pq.write_table(table.drop_columns(["row_id"]), folder / "points" / "part-0.parquet")
    stable = table.filter(pa.compute.field("stable"))
    pq.write_table(stable, folder / "frontier.parquet")
    per_row = np.bincount(stable.column("row_id").to_numpy(), minlength=4)
    opt = pa.Table.from_pylist([{"row_id": i, "group_id": i, "model": m, "gpu": g, "n_points": 8,
                                 "n_frontier": int(per_row[i]), "reason": "ok", "replicas_min": 1.0,
                                 "replicas_min_cost_usd_per_hour": 2.0 * (i + 1)}
                                for i, (m, g) in enumerate([("synthetic-8b", "gpu-a"), ("synthetic-8b", "gpu-b"),
                                                            ("synthetic-70b", "gpu-a"), ("synthetic-70b", "gpu-b")])])
    pq.write_table(opt, folder / "optimum.parquet")
    manifest = {"grid_name": "synthetic-continuous", "serving": "continuous", "synthetic": True,
                "grid_file": "(synthetic test fixture)", "rows": {"grid_points": table.num_rows},
                "axes": {"model": 2, "gpu": 2, "batch_size": 2, "arrival_rps": 4},
                "decisions": {"row_axes": ["max_batched_tokens", "batch_size"]}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def tiled_frontier(src: Path, folder: Path, copies: int) -> Path:
    """A copy of run folder `src` whose optimum and frontier are repeated `copies` times
    with shifted row and group ids: a frontier as large as a fleet study's, from real
    engine rows, without running one."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shutil.copy(src / "manifest.json", folder / "manifest.json")
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
    return folder
