"""Combine the shards of a study (`sweep run --shard i/n`) into one output folder.

Shards cover contiguous, disjoint ranges of scenario groups in grid order, so the combined
optimum and frontier are the shards' files concatenated in shard order: exactly what one
run of the whole grid writes. Every shard is verified first (its manifest is strict JSON of
the same grid, version and shard count, and every file it lists still has the row count,
size and SHA-256 its manifest recorded); a garbage, truncated or missing shard is one line
and nothing is changed. Points files are hard-linked (copied where links are not possible)
into `OUT/points/` with a shard prefix; the shard folders stay as they are, so a merge can
be repeated. Publishing is the run's (`sweep.io.staging`): the previous merged output stays
complete until the new one replaces it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from sweep.errors import OutputError
from sweep.io.lock import FolderLock
from sweep.io.parquet import concat_parquet
from sweep.io.staging import MANIFEST, Staging, check_file, file_record


def _shard_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not path.exists():
        raise OutputError(f"{folder}: shard not finished (no manifest.json); rerun it with the same command to resume")
    try:
        manifest = json.loads(path.read_text())
        _ = manifest["shard"]["index"], manifest["shard"]["count"], manifest["grid"]["sha256"], manifest["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OutputError(f"{path}: not a shard manifest sweep wrote ({type(exc).__name__}); "
                          "rerun the shard with --force") from None
    if not isinstance(manifest.get("checksums"), dict):
        raise OutputError(f"{path}: the shard has no file checksums (written by an older sweep); rerun it with --force")
    for rel, record in manifest["checksums"].items():
        problem = check_file(folder, rel, record)
        if problem is not None:
            raise OutputError(f"{folder}: the shard is damaged ({problem}); rerun it with the same --shard and --force")
    return manifest


def _inputs_digest(manifest: dict[str, Any]) -> str | None:
    inputs = manifest.get("inputs")
    return inputs.get("digest") if isinstance(inputs, dict) else None


def merge_shards(out_dir: str | Path, *, wait: bool = False) -> dict[str, Any]:
    out_dir = Path(out_dir)
    folders = sorted((out_dir / "shards").glob("*-of-*")) if (out_dir / "shards").is_dir() else []
    if not folders:
        raise OutputError(f"{out_dir}: no shards/ folder with finished shards; "
                          f"run `sweep run GRID --out {out_dir} --shard i/n` first")
    with FolderLock(out_dir, what="sweep merge", wait=wait):
        manifests = [_shard_manifest(f) for f in folders]
        counts = sorted({m["shard"]["count"] for m in manifests})
        if len(counts) > 1:
            raise OutputError(f"{out_dir}/shards: shards of different splits "
                              f"({', '.join(f'n = {c}' for c in counts)}); "
                              "keep the folders of one --shard i/n split only")
        first = manifests[0]
        count = counts[0]
        indices = sorted(m["shard"]["index"] for m in manifests)
        if indices != list(range(1, count + 1)):
            missing = sorted(set(range(1, count + 1)) - set(indices))
            raise OutputError(f"{out_dir}/shards: shards {missing} of {count} are missing; "
                              f"run them with --shard i/{count}")
        for m in manifests:
            if m["grid"]["sha256"] != first["grid"]["sha256"] or m["sweep_version"] != first["sweep_version"]:
                raise OutputError(f"{out_dir}/shards: shard {m['shard']['index']} "
                                  "ran another grid or sweep version; rerun it")
            if _inputs_digest(m) != _inputs_digest(first):
                raise OutputError(f"{out_dir}/shards: shard {m['shard']['index']} ran other inputs than shard "
                                  f"{first['shard']['index']} (a catalog entry, profile or trace file, or sweep's "
                                  "code changed between them; the manifests' inputs differ); rerun it with --force")
        ordered = sorted(zip(manifests, folders), key=lambda mf: mf[0]["shard"]["index"])
        staging = Staging(out_dir, "merge-" + first["grid"]["sha256"][:12])
        staging.discard()
        final = staging.final
        opt_schema = pq.read_schema(ordered[0][1] / "optimum.parquet")
        front_schema = pq.read_schema(ordered[0][1] / "frontier.parquet")
        concat_parquet([f / "optimum.parquet" for _, f in ordered], final / "optimum.parquet", opt_schema)
        concat_parquet([f / "frontier.parquet" for _, f in ordered], final / "frontier.parquet", front_schema)
        points: list[str] = []
        checksums: dict[str, Any] = {}
        for m, f in ordered:
            for rel in m["files"]["points"]:
                src = f / rel
                name = str(Path(rel).parent / f"shard-{m['shard']['index']:04d}-{Path(rel).name}")
                dst = final / name
                dst.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copy2(src, dst)
                points.append(name)
                checksums[name] = m["checksums"][rel]
        for name in ("optimum.parquet", "frontier.parquet"):
            checksums[name] = file_record(final / name)
        rows = {key: sum(m["rows"][key] for m in manifests)
                for key in ("points_written", "optimum", "frontier", "feasible")}
        actions: dict[str, int] = {}
        for m in manifests:
            for k, v in m["rows"]["actions"].items():
                actions[k] = actions.get(k, 0) + v
        manifest = {
            **{k: v for k, v in first.items()
               if k not in ("shard", "rows", "files", "chunks", "timings_s", "run_key", "checksums", "segments",
                            "machines")},
            "machines": {tag: record for m in manifests for tag, record in m.get("machines", {}).items()},
            "rows": {"grid_points": first["rows"]["grid_points"], "points_mode": first["rows"]["points_mode"],
                     **rows, "actions": actions},
            "files": {"points": sorted(points), "optimum": "optimum.parquet", "frontier": "frontier.parquet"},
            "checksums": dict(sorted(checksums.items())),
            "shards": {"count": count, "folders": [str(f.relative_to(out_dir)) for _, f in ordered],
                       "timings_s": [m["timings_s"] for m, _ in ordered],
                       "segments": [m.get("segments", []) for m, _ in ordered]},
        }
        staging.publish(manifest)
    return manifest
