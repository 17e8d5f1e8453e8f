"""One writer per output folder: an OS-level advisory lock on `DIR/.sweep.lock`.

`sweep run` and `sweep merge` take the lock exclusively for the whole run; `sweep search`
workers that share one folder take it shared (many workers, no run). A second writer
refuses at once with one line naming the holder, or waits for it (`wait=True`, the CLI's
`--wait`). The lock is `fcntl.flock` on `DIR/.sweep.lock`; the kernel drops it when the
holder exits, however it exits (SIGKILL included), so a crashed run never leaves a stale
lock. The file stays, except where a run that failed before writing anything removes the
folder it created (`remove_if_unused`), so that a refused run leaves nothing behind. That
is safe against the next taker because every taker, once it holds the lock, checks that the
file it locked is still the one at the path, and starts again if it was removed meanwhile.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from sweep._faults import fault
from sweep.errors import OutputError, ResourceError, disk_full

LOCK_FILE = ".sweep.lock"


class LockedError(OutputError):
    """Another sweep process holds the output folder."""


class FolderLock:
    """`with FolderLock(dir, what="sweep run"):` holds `dir/.sweep.lock` (creating `dir`)."""

    def __init__(self, folder: str | Path, *, what: str, shared: bool = False, wait: bool = False) -> None:
        self.folder = Path(folder)
        self.what = what
        self.shared = shared
        self.wait = wait
        self._file: IO[str] | None = None

    def __enter__(self) -> FolderLock:
        while True:
            f = self._open()
            mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
            try:
                fcntl.flock(f, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                if not self.wait:
                    holder = _holder(f)
                    f.close()
                    raise LockedError(
                        f"{self.folder}: {holder} is writing this folder; wait for it to finish, or rerun with --wait"
                    ) from None
                fcntl.flock(f, mode)  # blocks until the holder is done
            if _same_file(f, self.folder / LOCK_FILE):
                break
            f.close()  # the holder removed the file (`remove_if_unused`) while we waited: take the new one
        if not self.shared:
            try:
                f.seek(0)
                f.truncate()
                fault("lock:write", self.folder / LOCK_FILE)
                f.write(json.dumps({"pid": os.getpid(), "what": self.what,
                                    "since": time.strftime("%Y-%m-%dT%H:%M:%S"), "argv": sys.argv[:6]}) + "\n")
                f.flush()
            except OSError as exc:
                _release(f)
                if disk_full(exc):
                    raise ResourceError(f"{self.folder / LOCK_FILE}: the disk is full ({exc.strerror}); no output was "
                                        "written: free space and rerun") from None
                raise OutputError(f"{self.folder / LOCK_FILE}: cannot write the lock's note ({exc.strerror})") from None
        self._file = f
        return self

    def _open(self) -> IO[str]:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            return open(self.folder / LOCK_FILE, "a+")
        except OSError as exc:
            if disk_full(exc):
                raise ResourceError(f"{self.folder / LOCK_FILE}: the disk is full ({exc.strerror}); no output was "
                                    "written: free space and rerun") from None
            raise OutputError(f"{self.folder}: cannot create the output folder or its lock ({exc.strerror})") from None

    def remove_if_unused(self) -> None:
        """While holding the lock exclusively: remove the lock file and the folder when the
        folder holds nothing else (a run that failed before writing anything, in a folder it
        created). Anything else in the folder keeps both."""
        if self._file is None or self.shared:
            return
        try:
            if [p.name for p in self.folder.iterdir()] != [LOCK_FILE]:
                return
            (self.folder / LOCK_FILE).unlink()
            self.folder.rmdir()
        except OSError:
            return  # best effort: what stays is what a crash would leave

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def _same_file(f: IO[str], path: Path) -> bool:
    """`f` is still the file at `path` (not removed, nor replaced, since it was opened)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(f.fileno())
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _release(f: IO[str]) -> None:
    """Unlock and close, whatever the file's state (a write that failed may fail again on close)."""
    try:
        fcntl.flock(f, fcntl.LOCK_UN)
    finally:
        try:
            f.close()
        except OSError:
            pass


def _holder(f: IO[str]) -> str:
    """Who holds the lock, as far as its note says (search workers leave none)."""
    try:
        f.seek(0)
        note: dict[str, Any] = json.loads(f.read() or "{}")
    except (OSError, ValueError):
        note = {}
    pid = note.get("pid")
    if isinstance(pid, int) and _alive(pid):
        return f"another {note.get('what', 'sweep')} (pid {pid}, since {note.get('since', '?')})"
    return "another sweep process (a run, a merge or search workers)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
