"""The files `sweep` reads besides the grid's text: where a grid may reach, and what a file must be.

Where. A path in a grid (`[profile] file`, `[schedule] trace`, `[simulation] trace`)
resolves against the grid file's folder and, once symlinks are followed, must stay inside
it: a grid shared in a repository and run by a nightly job reads the files beside it and
nothing else. An absolute path, a path that climbs with `..`, or a symlink that leads out
is refused (`GridError`) unless it lands under a folder the person running the grid allowed
(`sweep run --allow-outside DIR`, repeatable; `allow_outside=` in the Python API). The same
option lets a `[search] storage` SQLite URL name a database outside `--out`
(`sweep.grid.search_table.check_storage`).

What. `read_text` reads a regular file only: a FIFO, a device, a socket or a folder is
refused before it is opened (opening a FIFO would block until a writer came), a file over
`MAX_INPUT_BYTES` is refused before it is read, and the bytes must be UTF-8 (a byte-order
mark is allowed). Each refusal is an `InputFileError` naming the file and the rule, never
its contents; the callers turn it into their own one-line error (file, key, value, rule).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from sweep.errors import GridError, SweepError

#: The largest input file read (1 GiB): about 60 million trace lines, a few minutes of
#: parsing. A bigger trace is better given as counts (`timestamp,requests` lines).
MAX_INPUT_BYTES = 1 << 30
#: The option that lets a grid's paths reach a folder outside the grid's (CLI spelling).
ALLOW_OPTION = "--allow-outside"


class InputFileError(SweepError):
    """An input file that cannot be read as text: `PATH: REASON` (never its contents)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path, self.reason = str(path), reason
        super().__init__(f"{path}: {reason}")


def n_cells(n: int) -> str:
    """A CSV line's size as an error shows it in place of the line (whose text may be anything)."""
    return f"{n} cell" if n == 1 else f"{n} cells"


def allowed_roots(source: str, allow_outside: Sequence[str | Path] = ()) -> list[Path]:
    """The folders a grid at `source` may read from: its own, then each allowed one (real paths)."""
    return [Path(source).parent.resolve(), *(Path(a).resolve() for a in allow_outside)]


def within(path: str | Path, roots: Sequence[Path]) -> bool:
    """Does `path`, symlinks followed, lie in one of `roots` (real paths)?"""
    real = Path(path).resolve()
    return any(real.is_relative_to(r) for r in roots)


def resolve_in_grid(value: str, source: str, key: str, allow_outside: Sequence[str | Path] = ()) -> Path:
    """The file a grid's path `value` names (relative to the grid file's folder), refused with
    a `GridError` when, symlinks followed, it lies outside that folder and every allowed one."""
    path = Path(value)
    if not path.is_absolute():
        path = Path(source).parent / path
    roots = allowed_roots(source, allow_outside)
    if not within(path, roots):
        raise GridError(source, key, value,
                        f"resolves to {path.resolve()}, outside the grid file's folder {roots[0]}; a grid reads "
                        f"only files beside it: move the file there, or allow its folder with {ALLOW_OPTION} DIR")
    return path


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str | Path, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (`InputFileError` otherwise)."""
    try:
        kind = _kind(os.stat(path).st_mode)  # before opening: opening a FIFO blocks, a device may act
    except OSError as exc:
        raise InputFileError(path, f"cannot be read ({exc.strerror})") from None
    if kind is not None:
        raise InputFileError(path, f"is {kind}, not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputFileError(path, f"cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        kind = _kind(st.st_mode)  # swapped between the look and the open
        if kind is not None:
            raise InputFileError(path, f"is {kind}, not a regular file")
        if st.st_size > limit:
            raise InputFileError(path, f"has {st.st_size:,} bytes; an input file may have at most {limit:,} "
                                       f"({limit / 2**30:g} GiB)")
        # Read what fstat reported plus one byte, then in 1 MiB pieces only if the file grew:
        # `read(limit + 1)` would allocate the whole limit (1 GiB) up front for a small grid file.
        parts: list[bytes] = []
        size = 0
        want = st.st_size + 1
        try:
            while size <= limit:
                part = f.read(min(want, limit + 1 - size))
                if not part:
                    break
                parts.append(part)
                size += len(part)
                if len(part) < want:  # a short read of a regular file is its end
                    break
                want = 1 << 20
        except OSError as exc:
            raise InputFileError(path, f"cannot be read ({exc.strerror})") from None
        data = b"".join(parts)
    if len(data) > limit:  # grew while read
        raise InputFileError(path, f"has more than {limit:,} bytes; an input file may have at most {limit:,}")
    return data


def decode(data: bytes, path: str | Path) -> str:
    """UTF-8 text (a byte-order mark dropped), or an `InputFileError` naming the first bad
    byte's line and offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputFileError(path, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, "
                                   f"line {line}); save it as UTF-8") from None


def read_text(path: str | Path, limit: int = MAX_INPUT_BYTES) -> str:
    """A regular file's UTF-8 text (see the module docstring); `InputFileError` otherwise."""
    return decode(read_bytes(path, limit), path)
