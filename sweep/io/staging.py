"""The staging folder: where a run writes before anything is published (SPEC 9).

A run writes into a hidden folder inside the output folder. `commit` first removes the old
`manifest.json` (so the folder stops looking complete), swaps the new files in by rename,
and writes `manifest.json` last: its presence marks a complete run.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweep.errors import OutputError

STAGING_PREFIX = ".sweep-staging-"


class Staging:
    """A hidden folder inside the output folder where a run writes; `commit` publishes it.

    The folder is named by the run's key, so rerunning the same command finds it again and
    resumes; `final/` holds what will be published, the rest is per-segment work.
    """

    MANIFEST = "manifest.json"

    def __init__(self, out_dir: Path, key: str) -> None:
        self.out_dir = out_dir
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{out_dir}: cannot create the output folder ({exc.strerror})") from None
        if not os.access(out_dir, os.W_OK):
            raise OutputError(f"{out_dir}: the output folder is not writable")
        self.path = out_dir / f"{STAGING_PREFIX}{key}"
        for other in out_dir.glob(f"{STAGING_PREFIX}*"):
            if other != self.path:  # an abandoned run of other settings: it cannot resume here
                shutil.rmtree(other, ignore_errors=True)
        self.final = self.path / "final"
        self.final.mkdir(parents=True, exist_ok=True)

    def clear_segment(self, prefix: str, k: int) -> None:
        """Remove what an interrupted attempt at segment `k` may have left."""
        for p in (self.final / "points").rglob(f"{prefix}*") if (self.final / "points").exists() else ():
            p.unlink()
        for sub in ("optimum", "frontier"):
            (self.path / sub / f"{k:05d}.parquet").unlink(missing_ok=True)

    def commit(self, manifest: Mapping[str, Any]) -> None:
        """Publish every entry of `final/`, then the manifest. Old outputs of the same names go."""
        final_manifest = self.out_dir / self.MANIFEST
        final_manifest.unlink(missing_ok=True)
        for entry in sorted(self.final.iterdir()):
            target = self.out_dir / entry.name
            if target.is_dir():
                trash = self.path / f".old-{entry.name}"
                target.rename(trash)
                shutil.rmtree(trash)
            elif target.exists():
                target.unlink()
            entry.rename(target)
        tmp = self.path / f".{self.MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n")
        os.replace(tmp, final_manifest)
        shutil.rmtree(self.path, ignore_errors=True)
