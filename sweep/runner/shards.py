"""Combine the shards of a study (`sweep run --shard i/n`) into one output folder.

Shards cover contiguous, disjoint ranges of scenario groups in grid order, so the combined
optimum and frontier are the shards' files concatenated in shard order: exactly what one
run of the whole grid writes. Points files are hard-linked (copied where links are not
possible) into `OUT/points/` with a shard prefix; the shard folders stay as they are, so a
merge can be repeated. The merged `manifest.json` is written last, like a run's.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from sweep.errors import OutputError
from sweep.io.parquet import concat_parquet
from sweep.io.staging import Staging


def merge_shards(out_dir: str | Path) -> dict[str, Any]:
    out_dir = Path(out_dir)
    folders = sorted((out_dir / "shards").glob("*-of-*")) if (out_dir / "shards").is_dir() else []
    if not folders:
        raise OutputError(f"{out_dir}: no shards/ folder with finished shards; run `sweep run GRID --out {out_dir} --shard i/n` first")
    manifests = []
    for f in folders:
        m = f / Staging.MANIFEST
        if not m.exists():
            raise OutputError(f"{f}: shard not finished (no manifest.json); rerun it with the same command to resume")
        manifests.append(json.loads(m.read_text()))
    first = manifests[0]
    count = first["shard"]["count"]
    indices = sorted(m["shard"]["index"] for m in manifests)
    if indices != list(range(1, count + 1)):
        missing = sorted(set(range(1, count + 1)) - set(indices))
        raise OutputError(f"{out_dir}/shards: shards {missing} of {count} are missing; run them with --shard i/{count}")
    for m in manifests:
        if m["grid"]["sha256"] != first["grid"]["sha256"] or m["sweep_version"] != first["sweep_version"] or m["shard"]["count"] != count:
            raise OutputError(f"{out_dir}/shards: shard {m['shard']['index']} ran another grid, version or shard count; rerun it")
    ordered = sorted(zip(manifests, folders), key=lambda mf: mf[0]["shard"]["index"])
    staging = Staging(out_dir, "merge-" + first["grid"]["sha256"][:12])
    final = staging.final
    opt_schema = pq.read_schema(ordered[0][1] / "optimum.parquet")
    front_schema = pq.read_schema(ordered[0][1] / "frontier.parquet")
    concat_parquet([f / "optimum.parquet" for _, f in ordered], final / "optimum.parquet", opt_schema)
    concat_parquet([f / "frontier.parquet" for _, f in ordered], final / "frontier.parquet", front_schema)
    points: list[str] = []
    for m, f in ordered:
        for rel in m["files"]["points"]:
            src = f / rel
            dst = final / Path(rel).parent / f"shard-{m['shard']['index']:04d}-{Path(rel).name}"
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
            points.append(str(dst.relative_to(final)))
    rows = {key: sum(m["rows"][key] for m in manifests) for key in ("points_written", "optimum", "frontier", "feasible")}
    actions: dict[str, int] = {}
    for m in manifests:
        for k, v in m["rows"]["actions"].items():
            actions[k] = actions.get(k, 0) + v
    manifest = {
        **{k: v for k, v in first.items() if k not in ("shard", "rows", "files", "chunks", "timings_s", "run_key")},
        "rows": {"grid_points": first["rows"]["grid_points"], "points_mode": first["rows"]["points_mode"], **rows, "actions": actions},
        "files": {"points": sorted(points), "optimum": "optimum.parquet", "frontier": "frontier.parquet"},
        "shards": {"count": count, "folders": [str(f.relative_to(out_dir)) for _, f in ordered],
                   "timings_s": [m["timings_s"] for m, _ in ordered]},
    }
    staging.commit(manifest)
    return manifest
