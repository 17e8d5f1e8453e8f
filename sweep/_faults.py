"""The crash test hook: `SWEEP_FAULT=NAME` stops the process at the named point
(`NAME@N`: the N-th time it is reached).

Publishing (`sweep.io.staging`) and searching (`sweep.search`) call `fault(name)` at each
step a crash could interrupt. By default the hook raises `InjectedCrash`, a BaseException
nothing catches (in-process tests); with `SWEEP_FAULT_KILL=1` the process exits at once with
status 137, as SIGKILL would, running no cleanup at all (subprocess tests); with
`SWEEP_FAULT_ERRNO=ENOSPC` (any `errno` name: EPERM, EDQUOT, ...) it raises the `OSError` a
write or rename at that point would raise, naming the path it was writing (a full disk or a
refused move, without filling a disk). Writes that can meet a full disk call it too
(`lock:write`, `stage:mkdir`, `publish:move`). Unset, it costs one dictionary lookup.
`active(name)` is the same test without the stop: the caller acts out the fault itself
(a Dask worker that cannot see the output folder).
"""

from __future__ import annotations

import errno
import os

FAULT_ENV = "SWEEP_FAULT"
_hits: dict[str, int] = {}


class InjectedCrash(BaseException):
    """Raised by the test hook."""


def active(point: str) -> bool:
    """True if `SWEEP_FAULT` names this point (and this is the N-th time, with `@N`): the
    caller then behaves as the fault would make it (e.g. a Dask worker that cannot see the
    output folder, `sweep.runner.cluster`). Set in one worker process only, it makes that
    worker faulty and leaves the others healthy."""
    wanted = os.environ.get(FAULT_ENV)
    if not wanted or not wanted.startswith(point):
        return False
    name, _, nth = wanted.partition("@")
    if name != point:
        return False
    _hits[point] = _hits.get(point, 0) + 1
    if _hits[point] < int(nth or 1):
        return False
    _hits.clear()
    return True


def fault(point: str, path: str | os.PathLike[str] | None = None) -> None:
    """Stop here if `SWEEP_FAULT` names this point (and this is the N-th time, with `@N`);
    `path` is the file an injected `OSError` names."""
    if not active(point):
        return
    wanted = os.environ.get(FAULT_ENV, "")
    code = os.environ.get(FAULT_ENV + "_ERRNO")
    if code:
        number = getattr(errno, code)
        raise OSError(number, os.strerror(number), None if path is None else os.fspath(path))
    if os.environ.get(FAULT_ENV + "_KILL") == "1":
        os._exit(137)
    raise InjectedCrash(wanted)


def reset() -> None:
    """Forget the hits counted so far (tests)."""
    _hits.clear()
