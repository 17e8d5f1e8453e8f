"""What a run's results depend on (its identity) and which machine computed them.

A run's key (`sweep.runner.run.run_grid`: the staging folder's name, what resume trusts,
what "already complete" compares, what a Dask worker caches its evaluator under) is a
digest of every input the results depend on, not of the grid's text alone:

* the grid file's text;
* every catalog entry the grid uses, by content (every field as read: from the packaged
  catalog, a `--catalog` folder or the grid's inline tables; an edited bandwidth or price
  is a new key), and the efficiency figures the engine takes for each (model, GPU) pair;
* every other file the grid reads, by SHA-256 of its bytes, and what was taken from it: a
  `[profile]` CSV (its fit), a `[simulation]` trace (its arrival times), a `[schedule]`
  trace (its hourly rates);
* the engine: sweep's version and a digest of its code and packaged data (`engine_digest`),
  so that a long-lived worker holding older code, or an edited checkout, never passes for
  the client's engine.

`run_inputs(spec)` gives the manifest's `inputs` entry (each input with its digest) and
its `digest`. `machine()` describes the host computing a segment (host name, CPU model,
the vector ISA XLA compiles for); each segment's seal and the manifest record it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import socket
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from sweep._version import __version__
from sweep.grid.spec import GridSpec

#: CPU flags that decide which vector instructions XLA's CPU backend emits (Linux
#: /proc/cpuinfo names); the last bits of a result can depend on them.
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16",
             "avx512_fp16", "avx512_vnni", "amx_tile", "amx_bf16", "neon", "asimd", "sve")
#: The highest level first: the ISA a segment's compiled code could use.
_LEVELS = (("amx_tile", "AMX"), ("avx512f", "AVX512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4_2"),
           ("sve", "SVE"), ("asimd", "NEON"), ("neon", "NEON"))
_MAX_ISA = re.compile(r"--xla_cpu_max_isa=(\S+)")


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _plain(obj: Any) -> Any:
    """JSON-able, in a canonical order (mappings sorted)."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return repr(obj)
    return obj


def _entry_digest(entry: Any) -> str:
    """A catalog entry's content: every field of the frozen record but where it was read
    from (`origin`, recorded beside the digest), canonical JSON."""
    content = {f.name: getattr(entry, f.name) for f in fields(entry) if f.name != "origin"}
    return _sha(json.dumps(_plain(content), sort_keys=True))


def _file(path: Path) -> dict[str, Any]:
    """A file's path and the SHA-256 of its bytes (None when it can no longer be read: the
    content taken from it when the grid was read is in the digest all the same)."""
    try:
        digest: str | None = _sha(path.read_bytes())
    except OSError:
        digest = None
    return {"path": str(path), "sha256": digest}


def _engine_files_digest() -> str:
    root = Path(__file__).resolve().parents[1]  # the sweep package
    h = hashlib.sha256(__version__.encode())
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml") and p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


#: Read when this module is imported (about 20 ms), i.e. when the process loaded the run
#: code: a long-lived worker whose files were edited afterwards keeps the digest of the code
#: it actually runs, and so is told apart from a client that runs the edited code.
_ENGINE = _engine_files_digest()


def engine_digest() -> str:
    """SHA-256 over sweep's own code and packaged data (every `.py` and `.toml` under the
    installed package, by relative path) as they were when this process imported the
    runner: two processes agree on it only if they run the same engine."""
    return _ENGINE


def run_inputs(spec: GridSpec) -> dict[str, Any]:
    """Every input the results of `spec` depend on, each with its digest, and `digest`:
    one SHA-256 over all of them (the part of the run's key that is not a setting)."""
    from sweep.models.base import efficiency_cells, gpu_figures

    base = Path(spec.source).parent
    files: dict[str, Any] = {"grid": {"path": spec.source, "sha256": spec.sha256}}
    taken: dict[str, Any] = {}
    if spec.fit is not None:
        files["profile"] = _file(Path(str(spec.fit.get("file", ""))))
        taken["profile"] = _sha(json.dumps(_plain(spec.fit), sort_keys=True))
    if spec.simulation is not None and spec.simulation.trace is not None:
        files["simulation.trace"] = _file(base / spec.simulation.trace)
        taken["simulation.trace"] = _sha(np.asarray(spec.simulation.trace_times, dtype=np.float64).tobytes())
    if spec.schedule is not None:
        if spec.schedule.source != "hourly_rps":
            files["schedule.trace"] = _file(base / spec.schedule.source)
        taken["schedule"] = _sha(np.asarray(spec.schedule.hourly_rps, dtype=np.float64).tobytes())
    catalog = {f"models/{m.name}": {"origin": m.origin, "sha256": _entry_digest(m)} for m in spec.models}
    catalog |= {f"gpus/{g.name}": {"origin": g.origin, "sha256": _entry_digest(g)} for g in spec.gpus}
    cells = efficiency_cells(spec.models, spec.gpus)
    eff = hashlib.sha256()
    for name in sorted(cells):
        eff.update(name.encode() + np.ascontiguousarray(cells[name], dtype=np.float64).tobytes())
    eff.update(json.dumps(_plain([gpu_figures(g) for g in spec.gpus]), sort_keys=True).encode())
    engine = {"version": __version__, "sha256": engine_digest()}
    inputs = {"files": files, "catalog": catalog, "efficiency_sha256": eff.hexdigest(), "engine": engine}
    # contents only: the same inputs read from elsewhere (a moved folder) are the same run
    content = {"files": {role: f["sha256"] for role, f in files.items()},
               "catalog": {name: e["sha256"] for name, e in catalog.items()},
               "efficiency": inputs["efficiency_sha256"], "engine": engine, "taken": taken}
    digest = _sha(json.dumps(_plain(content), sort_keys=True))
    return {**inputs, "digest": digest}


# --------------------------------------------------------------------------- machines


@functools.cache
def _cpu() -> tuple[str, tuple[str, ...]]:
    """(CPU model name, its ISA_FLAGS present), from /proc/cpuinfo where there is one."""
    model, flags = platform.processor() or platform.machine(), set[str]()
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Processor", "cpu model") and value.strip():
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, tuple(f for f in ISA_FLAGS if f in flags)


def machine() -> dict[str, Any]:
    """The machine computing here: host name, CPU model, its vector ISA flags, the highest
    ISA XLA may compile for (`isa`; `XLA_FLAGS=--xla_cpu_max_isa=...` caps it, and that cap
    is `xla_max_isa`), and the JAX backend."""
    import jax

    model, flags = _cpu()
    isa = next((name for flag, name in _LEVELS if flag in flags), platform.machine() or "unknown")
    cap = _MAX_ISA.search(os.environ.get("XLA_FLAGS", ""))
    return {"host": socket.gethostname(), "arch": platform.machine(), "cpu": model, "cpu_flags": list(flags),
            "isa": isa, "xla_max_isa": cap.group(1) if cap else None, "backend": jax.default_backend()}


def isa_tag(info: Mapping[str, Any]) -> str:
    """A short name of the instruction sets a machine's compiled code depends on (the
    compilation cache keeps one folder per tag): e.g. `x86_64-AVX512-2f9c01`."""
    text = json.dumps([info.get("cpu_flags"), info.get("xla_max_isa"), info.get("backend")])
    return f"{info.get('arch') or 'cpu'}-{info.get('isa')}-{_sha(text)[:6]}"
