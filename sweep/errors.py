"""Error hierarchy: one root, one subclass per layer.

Every message is one line a user can act on: where (file, key), what (the value), the
rule, and where it helps a correct example. The CLI maps every `SweepError` to exit code 2
(bad input, nothing written), except `ResourceError` (exit 1: the machine, not the input).
"""

from __future__ import annotations

import difflib
import errno
import os
import sqlite3
from collections.abc import Iterable


class SweepError(Exception):
    """Root of every error `sweep` raises on purpose (bad input, not a bug)."""


class _Located(SweepError):
    """An error at a place in a file: `SOURCE: KEY = VALUE: RULE`."""

    def __init__(self, source: str, key: str, value: object, rule: str) -> None:
        self.source, self.key, self.value, self.rule = source, key, value, rule
        super().__init__(f"{source}: {key} = {show(value)}: {rule}")


class GridError(_Located):
    """A grid file is malformed: unknown key, wrong type, empty axis, out-of-domain value."""


class CatalogError(_Located):
    """A catalog entry (packaged, inline or from a user folder) is malformed."""


class DeployError(_Located):
    """A deployment cannot be written for a configuration: no checkpoint to load, a dtype the
    engine lacks, a row that is not a continuous-serving point (`sweep.deploy`)."""


class StorageError(_Located):
    """A search's study storage (SQLite, journal file, database URL) cannot be used."""


class ProfileError(SweepError):
    """A profiling file (batch_size, latency_ms rows) cannot be fitted."""


def profile_error(source: str, where: str, value: object, rule: str) -> ProfileError:
    """The one-line error of a profile or measurement file: `FILE: where = value: rule`, the
    value's repr cut at 80 characters."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return ProfileError(f"{source}: {where} = {text}: {rule}")


class SimulationError(SweepError, ValueError):
    """Simulator input is invalid (shape mismatch, out-of-domain parameter)."""


class OutputError(SweepError):
    """The output folder cannot be written as asked."""


class ResourceError(SweepError):
    """The machine ran out of something (disk, memory) mid-run; the input was fine (exit 1)."""


#: The `errno`s of a full disk: no space left, or the user's quota spent.
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = 13  # SQLITE_FULL, "database or disk is full" (its extended codes share the low byte)


def disk_full(exc: BaseException) -> str | None:
    """What a full disk said, when `exc` or an error it was raised from (its cause, its
    context, a database driver's original error) is one: `ENOSPC`/`EDQUOT`, or SQLite's
    SQLITE_FULL; else None."""
    todo: list[object] = [exc]
    seen: set[int] = set()
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in FULL_DISK_ERRNOS:
            return e.strerror or os.strerror(e.errno)
        if isinstance(e, sqlite3.Error) and ((getattr(e, "sqlite_errorcode", None) or 0) & 0xFF == _SQLITE_FULL
                                             or "disk is full" in str(e)):
            return f"SQLite: {str(e).splitlines()[0] if str(e) else 'database or disk is full'}"
        todo.extend((e.__cause__, e.__context__, getattr(e, "orig", None)))
    return None


def show(value: object) -> str:
    """`repr(value)`, cut to 80 characters for a one-line message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def close_matches(word: str, choices: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The (at most `n`) `choices` closest to `word`, best first (difflib's ratio >= cutoff)."""
    return difflib.get_close_matches(word, list(choices), n=n, cutoff=cutoff)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`"; did you mean 'x'?"` for the closest of `choices`, or `""`."""
    match = close_matches(word, choices)
    return f"; did you mean '{match[0]}'?" if match else ""
