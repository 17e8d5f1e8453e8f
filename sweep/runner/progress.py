"""Progress a person can watch, and log lines a scheduler can keep.

On a terminal: a rich progress bar with points done, points/s and ETA. Elsewhere (cron,
job arrays, CI): one JSON object per line on stderr at least every `interval_s` seconds
(a heartbeat repeats the last state while a long chunk computes) and at the end, e.g.
{"event": "progress", "grid": "fleet-nightly", "done": 1048576, "total": ..., "pct": 12.5,
"points_per_s": 812345.0, "eta_s": 93.1}.

Rates count only the points this process computed, over the time since it started
computing: after a resume, the segments found sealed neither inflate the rate nor shorten
the ETA (`resumed` in the log line says how many points were found done).

A grid with `[search]` runs its Optuna studies after the points: the bar gets a second line
(trials done/total, trials/s, ETA, the best feasible value so far) and the log `search`
events, e.g. {"event": "search", "grid": "search-fleet", "study": 2, "studies": 2,
"study_name": "...", "done": 320, "total": 384, "pct": 83.33, "trials_per_s": 6.65,
"eta_s": 9.6, "objective": "min_cost", "best": 140.0, "best_trial": 124, "feasible": 51},
the heartbeat repeating the last one while a round of trials computes.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from sweep.search.study import SearchStatus


class ProgressReporter:
    """Callable `(done, total, computed=None)`; use as a context manager around a run.

    `done` counts every point finished (resumed segments included), `computed` those this
    process evaluated (default: `done`). `clock` gives the seconds that rates, intervals and
    the elapsed time are measured in (a monotonic clock; a test passes its own). In log mode
    a thread calls `beat` about every interval; `heartbeat=False` leaves that to the caller."""

    def __init__(self, grid: str, mode: str = "auto", interval_s: float = 10.0, stream: TextIO | None = None, *,
                 clock: Callable[[], float] = time.perf_counter, heartbeat: bool = True) -> None:
        self.grid = grid
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "log"
        self.mode = mode
        self.interval_s = interval_s
        self._clock = clock
        self._beats = heartbeat
        self._bar: Any = None
        self._task: Any = None
        self._t0 = clock()
        self._last = 0.0
        self._state: tuple[int, int, int] | None = None  # (done, total, computed)
        self._logged: tuple[int, int] | None = None  # (done, total) of the last line: the end is logged once
        self._search: SearchStatus | None = None  # the search's last status, once it has begun
        self._search_t0 = 0.0  # when the search began (its rate's clock), and the trials told then
        self._search_told0 = 0
        self._search_task: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None

    def __enter__(self) -> ProgressReporter:
        self._t0 = self._clock()
        self._last = self._t0
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[best]}"),
                console=Console(file=self.stream), transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.grid, total=None, rate="- points/s", best="")
        elif self.mode == "log":
            self._emit({"event": "start", "grid": self.grid})
            if self._beats:
                self._heart = threading.Thread(target=self._heartbeat, name="sweep-progress", daemon=True)
                self._heart.start()
        return self

    def rate(self, computed: int, now: float) -> float:
        """Points per second this process computed since it started computing."""
        elapsed = max(now - self._t0, 1e-9)
        return computed / elapsed

    def __call__(self, done: int, total: int, computed: int | None = None) -> None:
        computed = done if computed is None else computed
        now = self._clock()
        with self._lock:
            self._state = (done, total, computed)
            rate = self.rate(computed, now)
            if self.mode == "bar":
                self._bar.update(self._task, completed=done, total=total, rate=f"{rate:,.0f} points/s")
            elif self.mode == "log" and (now - self._last >= self.interval_s
                                         or (done >= total and self._logged != (done, total))):
                self._log(now)

    def search(self, status: SearchStatus) -> None:
        """The search's progress (`sweep.search.run_search`'s `progress`): trials done of the
        budget, the best feasible value so far; the rate counts the trials this process told
        since the search began, so resumed trials do not shorten the ETA."""
        now = self._clock()
        with self._lock:
            if self._search is None:
                self._search_t0, self._search_told0 = now, status.told
            first = self._search is None or self._search.study_index != status.study_index
            self._search = status
            rate, _ = self._search_rate(now)
            if self.mode == "bar":
                best = ("" if status.best is None
                        else f"best {status.objective} {status.best:,.6g} (trial {status.best_trial})")
                fields = {"completed": status.done, "total": status.total, "rate": f"{rate:,.1f} trials/s",
                          "best": best}
                if self._search_task is None:
                    self._search_task = self._bar.add_task(f"{self.grid} search", **fields)
                else:
                    self._bar.update(self._search_task, **fields)
            elif self.mode == "log" and (first or now - self._last >= self.interval_s or status.done >= status.total):
                self._log(now)

    def _search_rate(self, now: float) -> tuple[float, float | None]:
        """(trials/s this process told since the search began, seconds left at that rate)."""
        assert self._search is not None
        st = self._search
        rate = (st.told - self._search_told0) / max(now - self._search_t0, 1e-9)
        return rate, ((st.total - st.done) / rate if rate > 0 else None)

    def _log(self, now: float) -> None:
        if self._search is not None:
            self._log_search(now)
            return
        assert self._state is not None
        done, total, computed = self._state
        self._last = now
        self._logged = (done, total)
        rate = self.rate(computed, now)
        eta = (total - done) / rate if rate > 0 else None
        line = {"event": "progress", "grid": self.grid, "done": done, "total": total,
                "pct": round(100.0 * done / max(total, 1), 2), "points_per_s": round(rate, 1),
                "eta_s": None if eta is None else round(eta, 1)}
        if done > computed:
            line["resumed"] = done - computed
        self._emit(line)

    def _log_search(self, now: float) -> None:
        assert self._search is not None
        st = self._search
        self._last = now
        rate, eta = self._search_rate(now)
        self._emit({"event": "search", "grid": self.grid, "study": st.study_index, "studies": st.studies,
                    "study_name": st.study, "done": st.done, "total": st.total,
                    "pct": round(100.0 * st.done / max(st.total, 1), 2), "trials_per_s": round(rate, 2),
                    "eta_s": None if eta is None else round(eta, 1), "objective": st.objective,
                    "best": st.best, "best_trial": st.best_trial, "feasible": st.feasible})

    def _heartbeat(self) -> None:
        """The heartbeat thread (log mode): `beat` every interval (at most every second)."""
        while not self._stop.wait(min(self.interval_s, 1.0)):
            self.beat()

    def beat(self) -> None:
        """In log mode: a line when `interval_s` has passed since the last one, the last state
        repeated while a long chunk (or the compilation) keeps the run from reporting."""
        with self._lock:
            now = self._clock()
            if now - self._last >= self.interval_s:
                if self._state is None:
                    self._last = now
                    self._emit({"event": "progress", "grid": self.grid, "done": 0, "total": None, "pct": 0.0,
                                "points_per_s": 0.0, "eta_s": None, "note": "compiling or computing the first chunk"})
                else:
                    self._log(now)

    def note(self, message: str) -> None:
        """One line a person should read (a damaged segment recomputed): on stderr, or as a
        JSON `note` event in log mode."""
        if self.mode == "log":
            with self._lock:
                self._emit({"event": "note", "grid": self.grid, "message": message})
        elif self.mode == "bar" and self._bar is not None:
            self._bar.console.print(f"sweep: {message}", markup=False)
        else:
            print(f"sweep: {message}", file=self.stream, flush=True)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._stop.set()
        if self._heart is not None:
            self._heart.join()
        if self._bar is not None:
            self._bar.stop()
        if self.mode == "log":
            status = "done" if exc_type is None else "failed"
            self._emit({"event": status, "grid": self.grid, "elapsed_s": round(self._clock() - self._t0, 3)})

    def _emit(self, obj: dict[str, Any]) -> None:
        obj = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **obj}
        print(json.dumps(obj), file=self.stream, flush=True)


#: The environment variable naming the compilation cache's folder ("" turns the cache off).
CACHE_DIR_ENV = "SWEEP_CACHE_DIR"


def compile_cache_dir() -> str | None:
    """Where compiled kernels persist across runs (every command that evaluates a kernel, and
    a LocalCluster's workers): $SWEEP_CACHE_DIR, else $XDG_CACHE_HOME/sweep/jax or
    ~/.cache/sweep/jax; SWEEP_CACHE_DIR="" turns it off (None)."""
    import os

    if CACHE_DIR_ENV in os.environ:
        return os.environ[CACHE_DIR_ENV] or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sweep", "jax")


_CACHE_SETTINGS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                   "jax_persistent_cache_min_entry_size_bytes")


def enable_compile_cache(path: str | None) -> None:
    """Persist JAX compilations across runs in `path` (None: leave JAX's default, off).

    JAX opens its cache once, at the first compilation after the folder is set, and keeps
    writing there; moving to another folder therefore drops the open cache first. Before
    JAX is imported (a command that may find its answers on disk and never compile) the
    settings go to the environment variables JAX reads when it starts, so that nothing
    imports JAX only to configure it."""
    if not path:
        return
    import sys

    if "jax" not in sys.modules:
        import os

        os.environ.update({"JAX_COMPILATION_CACHE_DIR": str(path), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
        return
    import jax
    from jax._src import compilation_cache

    if getattr(jax.config, "jax_compilation_cache_dir", None) != str(path):
        compilation_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@contextlib.contextmanager
def compile_cache(path: str) -> Iterator[None]:
    """`enable_compile_cache(path)` for the block only: afterwards JAX's settings are as they
    were and the cache is closed, so nothing compiled later is written into `path` (which
    the caller may delete: a temporary folder in a test or a benchmark)."""
    import jax
    from jax._src import compilation_cache

    before = {name: getattr(jax.config, name) for name in _CACHE_SETTINGS}
    enable_compile_cache(path)
    try:
        yield
    finally:
        compilation_cache.reset_cache()
        for name, value in before.items():
            jax.config.update(name, value)
