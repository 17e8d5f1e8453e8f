"""Optuna search over the spaces a grid declares in `[search]` (SPEC 6), checked against
the exact optimum where the space is small enough to enumerate.

How a search runs:

* The `[grid]` fixes the scenario. Each searched key replaces that key's `[grid]` value;
  every other list-valued `[grid]` key splits the search into separate *studies*, one per
  combination, named deterministically `GRID/key=value,.../DIGEST` (the digest covers the
  space, the objectives, the seed and the study's fixed values, so editing any of them
  starts a new study while raising `trials` resumes the old one).
* Batched ask/tell: each round asks up to `batch` trials, evaluates all of them in ONE
  jitted, vmapped call of `sweep.engine.evaluate_values` (the same kernel as a grid run)
  with a fixed batch shape (short rounds are padded), so a search compiles once, and tells
  every trial its objective values and its constraint values.
* Objectives: the model's `objectives` (name -> column, direction). The dynamic batcher's:
  `min_cost` (`cost_usd_per_hour` = replicas * gpus_per_replica * usd_per_gpu_hour),
  `max_capacity` (`fleet_capacity_rps` = replicas * B / T_svc(B), the fleet's throughput
  ceiling), `min_latency` (`latency_ms`, the grid's SLO estimate); or a list of them
  (multi-objective: the answer is the Pareto set from `study.best_trials`).
* Constraints, Optuna's convention (<= 0 feasible), one per rule: `slo` the worst
  latency/SLO-1 over the model's `slo_checks`, `stable` load/capacity-1 (one replica's
  lambda over its capacity; a two-pool mode's arrival_rps over its end-to-end capacity_rps,
  the smaller pool's, so the busier pool's load), `rho` rho-rho_max (a two-pool mode's rho
  is the busier pool's), `memory` (batch_size-b_mem_max)/batch_size where the model reports
  b_mem_max, else +-1 from `mem_ok` (both pools').
  Each value's sign is forced to agree with the boolean verdict the kernel reports, so
  Optuna's feasibility is exactly the planner's: stable & mem_ok & latency_ms <= slo_ms &
  rho <= rho_max. They are stored as one list in the trial system attribute `constraints`
  (`CONSTRAINTS_ATTR`), which Optuna reads for `best_trial(s)` and TPE's constrained
  sampling and Optuna Dashboard reads to mark feasibility.
* Sampler: TPE (multivariate, constant liar for the trials in flight), seeded by (seed,
  trial number). Workers sharing a study reserve rounds under a short lock and draw their
  parameters in parallel (`_optimise`).
* Storage (`storage`): `sqlite` -> `OUT/search.db` (default, one process), `journal` ->
  `OUT/search.journal` (Optuna's journal file, several processes on one host), an RDB URL
  (`postgresql://...`, workers on many machines), or `memory` (nothing kept). A rerun
  loads the same study (`load_if_exists`), counts its COMPLETE trials and runs only the
  remainder of the budget (recounted every round, so workers sharing a study share it).
* Exact check: where every searched parameter is categorical/integer and the space has at
  most `EXACT_LIMIT` combinations, every combination is evaluated (same kernel, same
  objective and constraints) and the answer reports the exact optimum and the gap.

Optuna is imported inside functions so `import sweep` stays fast.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import math
import os
import random
import socket
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from sweep._faults import fault
from sweep.decide.tables import dictionaries as table_dictionaries
from sweep.decide.verdict import slo_met
from sweep.engine.evaluate import catalog_tables, evaluate_values, jit_columns
from sweep.errors import StorageError, SweepError, disk_full
from sweep.grid.search_table import (
    EXACT_LIMIT,
    STORAGE_FILES,
    SearchSpec,
    _hide_password,
    check_storage,
    resolve_url,
)
from sweep.grid.spec import Axis, GridSpec
from sweep.models.base import Column, ServingModel

#: Relative tolerance for "Optuna found the exact optimum" (the exact pass uses a different
#: batch shape, so latencies may differ in the last bits).
EXACT_RTOL = 1e-9
ENUM_CHUNK = 1 << 15
RESULT_FILE = "search.parquet"
#: Trial user attributes: the round a trial was asked in, that round's size, who owns it.
ROUND_ATTR, ROUND_SIZE_ATTR, OWNER_ATTR = "sweep_round", "sweep_round_size", "sweep_owner"
#: Study system attribute prefix: a worker of the study (one key per owner session).
WORKER_ATTR = "sweep_worker:"
STUDY_CREATE_TRIES = 8
BUDGET_LOCK_FILE = ".search.lock"
#: How long a SQLite statement waits for another process's lock before "database is locked".
SQLITE_TIMEOUT_S = 60.0
#: The constraints, in the order of the values stored under `CONSTRAINTS_ATTR`.
CONSTRAINTS = ("slo", "stable", "rho", "memory")
#: The trial system attribute holding a trial's constraint values as one list, <= 0 feasible:
#: Optuna's `_CONSTRAINTS_KEY`, the form its samplers' `constraints_func` writes and that
#: `Trial.constraints`, `best_trial(s)` and TPE read (as keys "0".."3"), and the only one
#: Optuna Dashboard reads (`trial_system_attrs["constraints"]`, feasible when every value is
#: <= 0). `Trial.set_constraint`'s one key per name ("constraints:slo") the dashboard ignores.
CONSTRAINTS_ATTR = "constraints"
_BIG = 1e6  # constraint value standing in for +inf / NaN violations

#: Columns of search.parquet before and after the point columns of the answer.
SEARCH_META_FIRST: tuple[Column, ...] = (
    Column("study_name", "dict", "-",
           "The Optuna study: GRID/key=value,.../DIGEST (one per combination of the unsearched list axes)."),
    Column("method", "dict", "-", "How the answer was found: optuna."),
    Column("objective", "dict", "-",
           "The objective(s), joined by +: dynamic serving min_cost, max_capacity, min_latency; continuous serving "
           "min_cost, min_cost_per_mtok, max_tok_s_per_gpu, max_tok_s_per_user, min_ttft, min_tpot; disaggregated "
           "serving min_cost, max_capacity, min_latency, min_gpus, min_cost_per_mtok, min_ttft, min_tpot."),
    Column("objective_value", "float64", "-",
           "The first objective's value at this answer, in the unit of the column it optimises "
           "(min_cost: cost_usd_per_hour, max_capacity: fleet_capacity_rps, min_latency: latency_ms; "
           "continuous serving: cost_usd_per_mtok, tok_s_per_gpu, tok_s_per_user, ttft_p_ms, tpot_p_ms; "
           "disaggregated serving: capacity_rps, e2e_p_ms, total_gpus, cost_usd_per_mtok, ttft_p_ms, tpot_p_ms); "
           "NULL where that is unbounded (an answer that does not meet the constraints).",
           null_when="meets_constraints"),
    Column("rank", "int64", "-",
           "0 for a single objective; the answer's position in the Pareto set (sorted by the first objective) "
           "otherwise."),
    Column("meets_constraints", "bool", "-",
           "The answer meets every constraint: SLO, stability, rho <= rho_max, memory (disaggregated serving: every "
           "SLO, both pools)."),
    Column("reason", "dict", "-",
           "Empty, or why no answer meets every constraint (the least-violating trial is shown)."),
)
SEARCH_META_LAST: tuple[Column, ...] = (
    Column("trial_number", "int64", "-", "The Optuna trial this answer is."),
    Column("trials", "int64", "trials", "COMPLETE trials in the study."),
    Column("feasible_trials", "int64", "trials", "Trials that meet every constraint."),
    Column("enumerable", "bool", "-",
           "Every searched parameter is categorical or integer and the space has at most 2,000,000 combinations: "
           "the exact optimum was computed."),
    Column("space_size", "float64", "points",
           "Combinations in the searched space (NULL with a float range: uncountable).",
           null_when="enumerable"),
    Column("exact_points", "int64", "points", "Combinations evaluated by the exact check (0 when not enumerable)."),
    Column("exact_feasible", "int64", "points", "Feasible combinations among them."),
    Column("exact_value", "float64", "-",
           "The exact optimum of the first objective, in its unit "
           "(NULL when nothing is feasible or the space is not enumerable).",
           null_when="no answer, enumerable"),
    Column("exact_point", "dict", "-", "The exact optimum's searched values, key=value,..."),
    Column("gap_rel", "float64", "-",
           "Relative gap of this answer to the exact front (0 = found it; NULL when not enumerable, "
           "or when this answer misses the constraints but a feasible point exists).",
           null_when="enumerable, meets_constraints"),
    Column("found_exact", "bool", "-", "gap_rel within 1e-9."),
    Column("front_coverage", "float64", "-", "Share of the exact Pareto front found (multi-objective), else 1 or 0."),
    Column("seed", "int64", "-", "The sampler's seed."),
    Column("storage", "dict", "-", "The study storage (passwords hidden)."),
)


@dataclass
class StudyStats:
    name: str
    trials_run: int = 0
    search_calls: int = 0
    answer_calls: int = 0
    exact_calls: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class SearchStatus:
    """Where a search stands, for a progress display: told after each round of trials.

    `done` counts COMPLETE trials over every study (a study counts at most its budget; the
    studies still to come count 0), of `total` = trials x studies; `told` those this process
    told (the rate's numerator: trials resumed from the storage are not). `best` is the best
    feasible value of the first objective in the current study so far (None: no feasible
    trial yet), at trial `best_trial`; `feasible` counts its feasible trials."""

    study: str
    study_index: int  # 1-based
    studies: int
    done: int
    total: int
    told: int
    objective: str
    best: float | None
    best_trial: int | None
    feasible: int


#: Hears a `SearchStatus` after each round of trials (and when each study opens).
SearchProgress = Callable[[SearchStatus], None]


@dataclass
class SearchResult:
    """The answers of every study: columns (declared), rows, dictionaries, run facts."""

    columns: tuple[Column, ...]
    rows: dict[str, np.ndarray]
    dictionaries: dict[str, list[str]]
    meta: dict[str, Any]

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.rows.values()))) if self.rows else 0

    def records(self) -> list[dict[str, Any]]:
        """One dict per answer, strings decoded (for printing and tests)."""
        out = []
        for i in range(self.num_rows):
            rec: dict[str, Any] = {}
            for c in self.columns:
                value = self.rows[c.name][i]
                rec[c.name] = self.dictionaries[c.name][int(value)] if c.dtype == "dict" else value.item()
            out.append(rec)
        return out


@dataclass
class _Plan:
    spec: GridSpec
    search: SearchSpec
    gpus: tuple[Any, ...]
    tables: dict[str, Any]
    opts: dict[str, Any]  # the static keywords of `evaluate_values`
    columns: tuple[Column, ...]  # the point columns of an answer
    fixed_keys: tuple[str, ...]  # [grid] keys not searched (every axis key minus searched)
    studies: list[dict[str, Any]]  # per study: key -> (value, index-into-axis)
    stats: list[StudyStats] = field(default_factory=list)


# --------------------------------------------------------------------------- public entry


def run_search(spec: GridSpec, out_dir: Path, *, worker: int = 0,
               progress: SearchProgress | None = None) -> SearchResult:
    """Run (or resume) every study of `spec.search`; return one row per answer.

    `progress` hears a `SearchStatus` when each study opens and after each round of trials.

    The study storage lives in `out_dir` (so reruns resume); the caller writes the answers
    (`sweep.runner` publishes them as search.parquet with the rest of the run). Single
    objective: one row per study (its best feasible trial, or its least-violating trial
    with `meets_constraints = false` and a `reason`). Multi-objective: one row per Pareto
    trial of `study.best_trials`.
    """
    import optuna

    search = spec.search
    if search is None:
        raise ValueError(f"{spec.source}: the grid has no [search] table")
    out_dir = Path(out_dir)
    check_storage(search, out_dir)
    if search.storage in STORAGE_FILES:
        out_dir.mkdir(parents=True, exist_ok=True)
    plan = make_plan(spec)
    evaluator = BatchEvaluator(plan, search.batch)
    rows: list[dict[str, Any]] = []
    old = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rdb_log = logging.getLogger("optuna.storages._rdb.storage")
    rdb_log.addFilter(_storage_fallback_filter)
    storage: Any = None
    owner: Owner | None = None
    try:
        storage = open_storage(search, out_dir)
        owner = Owner(storage, source=spec.source)
        done_before = told_before = 0
        for index, scenario in enumerate(plan.studies):
            t0 = time.perf_counter()
            stats = StudyStats(study_name(plan, scenario))
            study = _open_study(plan, stats.name, storage, worker)
            budget = BudgetLock(search, out_dir, storage, scope=stats.name)
            tell = None
            if progress is not None:
                tell = functools.partial(_report, progress, plan, study, stats, index, done_before, told_before)
                tell()
            _optimise(plan, study, scenario, evaluator, stats, budget, owner, tell)
            done_before += min(len(_complete(study)), search.trials)
            told_before += stats.trials_run
            answers = _answers(plan, study, scenario, evaluator, stats)
            exact = exact_solution(plan, scenario, stats) if search.enumerable else None
            rows.extend(_rows(plan, study, stats, answers, exact))
            stats.seconds = round(time.perf_counter() - t0, 4)
            plan.stats.append(stats)
    except SweepError:
        raise
    except Exception as exc:
        if disk_full(exc) is not None:
            raise  # a full disk is a resource error (exit 1, retried by schedulers): the caller's one line
        failure = storage_failure(exc)
        if failure is None:
            raise
        raise StorageError(spec.source, "search.storage", _hide_password(search.storage), failure) from None
    finally:
        optuna.logging.set_verbosity(old)
        rdb_log.removeFilter(_storage_fallback_filter)
        _quietly(owner.close if owner is not None else None)
        engine = getattr(storage, "engine", None)
        if engine is not None:  # close the connections (SQLite then folds its WAL back in)
            _quietly(engine.dispose)
    return _result(plan, rows, evaluator)


def _report(progress: SearchProgress, plan: _Plan, study: Any, stats: StudyStats, index: int, done_before: int,
            told_before: int) -> None:
    """Tell `progress` where the search stands: study `index` (0-based) has its COMPLETE
    trials counted (every worker's) and its best feasible first-objective value so far."""
    search, model = plan.search, plan.spec.model
    complete = _complete(study)
    feasible = [t for t in complete if all(v <= 0.0 for v in t.constraints.values())]
    best = None
    if feasible:
        sign = -1.0 if model.objectives[search.objectives[0]][1] == "maximize" else 1.0
        best = min(feasible, key=lambda t: (sign * t.values[0], t.number))
    progress(SearchStatus(
        study=stats.name, study_index=index + 1, studies=len(plan.studies),
        done=done_before + min(len(complete), search.trials), total=search.trials * len(plan.studies),
        told=told_before + stats.trials_run, objective=search.objectives[0],
        best=None if best is None else float(best.values[0]), best_trial=None if best is None else best.number,
        feasible=len(feasible)))


# --------------------------------------------------------------------------- storage failures


#: errno values that say the storage's disk failed (full, quota, read-only, I/O).
_DISK_ERRNOS = ("ENOSPC", "EDQUOT", "EROFS", "EIO")


def storage_failure(exc: BaseException) -> str | None:
    """The one-line rule of a study-storage failure anywhere in `exc`'s chain (None: not
    one): a database that stopped answering or refused a statement (SQLAlchemy, psycopg,
    Optuna's `StorageInternalError` around them), SQLite locked past its timeout or out of
    disk, a journal file that cannot be written. Told trials are committed one by one, so
    the study keeps them all: the rule says to rerun."""
    import errno
    import sqlite3

    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    disk = {getattr(errno, n) for n in _DISK_ERRNOS if hasattr(errno, n)}
    hit: BaseException | None = None
    for e in chain:
        module = type(e).__module__.split(".")[0]
        if (module in ("sqlalchemy", "psycopg", "psycopg2") or isinstance(e, sqlite3.Error)
                or type(e).__name__ == "StorageInternalError"
                or (isinstance(e, OSError) and e.errno in disk)):
            hit = e  # the deepest one: the driver's own words
    if hit is None:
        return None
    text = str(getattr(hit, "orig", None) or hit).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    what = f"{type(hit).__name__}: {first}" if first else type(hit).__name__
    if len(what) > 200:
        what = what[:197] + "..."
    low = what.lower()
    if "locked" in low:
        hint = "another process held the study locked too long; rerun to continue the study"
    elif (isinstance(hit, OSError) and hit.errno in disk) or "disk" in low or "full" in low:
        hint = "free the disk (or make it writable) and rerun to continue the study"
    else:
        hint = "start the database (or fix the connection) and rerun to continue the study"
    return f"the study storage failed during the search ({what}); every told trial is kept: {hint}"


def _storage_fallback_filter(record: logging.LogRecord) -> bool:
    """Drop Optuna's "Caught an error from sqlalchemy ... Falling back to a slower
    alternative" warning: it comes when the database drops a connection, and the search then
    fails with its own one line (`StorageError`), or the fallback succeeds and nothing was
    lost. Left in, an outage printed a multi-line SQL dump before that line."""
    return not record.getMessage().startswith("Caught an error from sqlalchemy")


def _quietly(fn: Any) -> None:
    """Run a clean-up that may fail on a broken connection; its failure adds nothing."""
    if fn is None:
        return
    try:
        fn()
    except Exception:
        pass


# --------------------------------------------------------------------------- owners and the budget


class Owner:
    """This process's identity on the trials it asks: host, pid, the pid's start time (a
    reused pid is another process) and a session id (an earlier call in this process).

    On PostgreSQL the owner also holds a session-level advisory lock named by its session id
    on a connection of its own, for as long as it runs: the server drops it when that
    connection ends, however the process ends (SIGKILL, a lost machine: TCP keepalives
    find a silent peer within about a minute). A trial whose owner's lock can be taken is an
    orphan on any host; elsewhere only the processes of this host can be checked."""

    def __init__(self, storage: Any = None, source: str = "search") -> None:
        self.source = source
        self.attr: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(),
                                     "start": _start_ticks(os.getpid()), "session": uuid.uuid4().hex}
        self._conn: Any = None
        self._engine: Any = None
        self._dead: set[str] = set()
        engine = getattr(storage, "engine", None)
        if engine is not None and engine.dialect.name == "postgresql":
            import sqlalchemy

            self._engine = sqlalchemy.create_engine(engine.url, poolclass=sqlalchemy.pool.NullPool,
                                                    connect_args=PG_CONNECT)
            self._conn = self._engine.connect()
            self._conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"),
                               {"k": pg_key("sweep-owner/" + self.attr["session"])})
            self._conn.commit()  # a session-level lock outlives the transaction that took it
            self.attr["liveness"] = "postgresql"

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
                self._engine.dispose()

    def check(self) -> None:
        """Refuse to go on once this owner's liveness connection is gone: other workers may
        already be finishing its trials."""
        if self._conn is None:
            return
        from sqlalchemy import text

        try:
            self._conn.execute(text("SELECT 1"))
            self._conn.commit()
        except Exception:
            raise StorageError(self.source, "search.storage", "postgresql",
                               "this worker lost its connection to the database, "
                               "so other workers may take its trials over; rerun it to continue the study") from None

    def orphaned(self, attr: Any) -> bool:
        """A RUNNING trial whose owner is gone: an older sweep's (no owner), an earlier call
        in this process, a PostgreSQL owner whose liveness lock is free, or a process of this
        host that no longer runs. Trials of live processes are never taken over."""
        if not isinstance(attr, dict):
            return True
        if attr.get("session") == self.attr["session"]:
            return False
        if attr.get("liveness") == "postgresql" and self._conn is not None:
            return self._lock_free(str(attr.get("session")))
        if attr.get("host") != self.attr["host"]:
            return False
        if attr.get("pid") == self.attr["pid"] and attr.get("start") == self.attr["start"]:
            return True  # an earlier call in this process (another session)
        return _start_ticks(int(attr.get("pid", -1))) != attr.get("start")

    def gone(self, attr: Any) -> bool:
        """`orphaned`, remembered for the sessions found dead (a session id never comes back)."""
        session = str(attr.get("session")) if isinstance(attr, dict) else ""
        if session in self._dead:
            return True
        if self.orphaned(attr):
            self._dead.add(session)
            return True
        return False

    def _lock_free(self, session: str) -> bool:
        from sqlalchemy import text

        key = {"k": pg_key("sweep-owner/" + session)}
        free = bool(self._conn.execute(text("SELECT pg_try_advisory_lock(:k)"), key).scalar())
        if free:
            self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), key)
        self._conn.commit()
        return free


#: libpq options of every PostgreSQL connection: give up connecting after 10 s, and
#: keepalives so that a silent peer (a machine gone) is found within about a minute.
PG_CONNECT: dict[str, Any] = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 20,
                              "keepalives_interval": 10, "keepalives_count": 3}


def pg_key(name: str) -> int:
    """A PostgreSQL advisory-lock key (signed 64-bit) for `name`."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little", signed=True)


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None: no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


class BudgetLock:
    """Held while a process counts a study's trials and reserves its next round (inserts
    its trials, without parameters; the drawing happens outside), so workers sharing a
    study never ask more than the budget (and never create two trials at once, which on a
    database could give two trials one number): a file lock beside a SQLite or journal
    storage, a transaction-level PostgreSQL advisory lock named by the study (released
    by the server when the transaction or the connection ends, whoever dies), nothing in
    memory. `scope`: the study (any name that every worker of the study spells the same)."""

    def __init__(self, search: SearchSpec, out_dir: Path, storage: Any, scope: str = "") -> None:
        self.kind = "none"
        self.path = Path(out_dir) / BUDGET_LOCK_FILE
        self._file: Any = None
        self._conn: Any = None
        self._engine = getattr(storage, "engine", None)
        if search.storage in STORAGE_FILES:
            self.kind = "file"
        elif search.storage != "memory" and self._engine is not None and self._engine.dialect.name == "postgresql":
            self.kind = "postgresql"
        self.key = pg_key(f"sweep-budget/{scope}")

    def __enter__(self) -> BudgetLock:
        if self.kind == "file":
            import fcntl

            self._file = open(self.path, "a+")
            fcntl.flock(self._file, fcntl.LOCK_EX)
        elif self.kind == "postgresql":
            from sqlalchemy import text

            assert self._engine is not None
            self._conn = self._engine.connect()
            try:
                self._conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": self.key})
            except BaseException:
                self._drop()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            import fcntl

            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        if self._conn is not None:
            self._drop()

    def _drop(self) -> None:
        """End the transaction (releasing the lock); a connection that cannot is discarded,
        which releases it too."""
        try:
            self._conn.rollback()
            self._conn.close()
        except Exception:
            self._conn.invalidate()
        finally:
            self._conn = None


def open_storage(search: SearchSpec, out_dir: Path) -> Any:
    """The study storage. A SQLite or journal file is opened by one process of the folder at
    a time (under its budget lock): opening a new SQLite file creates Optuna's tables and
    stamps their version, which workers starting together would race on ("table ... already
    exists", a duplicate version row), and a journal is first cut back to its last whole
    line. PostgreSQL serializes its own table creation (`_postgres_storage`)."""
    if search.storage not in STORAGE_FILES:
        return _storage(search, out_dir)
    with BudgetLock(search, out_dir, None):
        if search.storage == "journal":
            _repair_journal(out_dir / STORAGE_FILES["journal"])
        return _storage(search, out_dir)


def _repair_journal(path: Path) -> None:
    """Cut a journal file back to its last whole line: a process killed while appending can
    leave half a line, which Optuna accepts only while it is the last one."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        data = f.read()
        if not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


# --------------------------------------------------------------------------- the plan


def make_plan(spec: GridSpec) -> _Plan:
    """Catalog tables that cover every searched gpu, static kernel options for the searched
    domains, and the list of studies (one per combination of the unsearched list axes)."""
    search = spec.search
    assert search is not None
    gpus = search.gpus if "gpu" in search.keys else spec.gpus
    gpus = (*gpus, *(g for g in spec.gpus if all(h.name != g.name for h in gpus)))  # a pool's own GPU
    axes = []
    for a in spec.axes:
        if a.key in search.keys:
            p = search.param(a.key)
            axes.append(Axis(a.key, tuple(p.extremes)))
        else:
            axes.append(a)
    eff = replace(spec, axes=tuple(axes), gpus=tuple(gpus))
    fixed = tuple(a.key for a in spec.axes if a.key not in search.keys)
    listed = [a for a in spec.axes if a.key in fixed and len(a) > 1]
    studies = []
    for combo in itertools.product(*[range(len(a)) for a in listed]):
        scen = {a.key: (a.values[i], i) for a, i in zip(listed, combo)}
        for k in fixed:
            if k not in scen:
                scen[k] = (spec.axis(k).values[0], 0)
        studies.append(scen)
    columns = tuple(c for c in jit_columns(eff) if c.name != "point_id")
    opts = {"model": spec.model, "static": tuple(sorted(spec.model.static(eff).items())),
            "columns": tuple(c.name for c in columns)}
    return _Plan(spec, search, tuple(gpus), catalog_tables(eff), opts, columns, fixed, studies)


def study_name(plan: _Plan, scenario: dict[str, Any]) -> str:
    spec, search = plan.spec, plan.search
    listed = [k for k in plan.fixed_keys if len(spec.axis(k)) > 1]
    label = ",".join(f"{k}={_fmt(scenario[k][0])}" for k in listed) or "-"
    ident = {
        "params": [[p.key, p.kind, [_fmt(c) for c in p.choices], p.low, p.high, p.log] for p in search.params],
        "objectives": list(search.objectives),
        "seed": search.seed,
        "scenario": {k: _fmt(scenario[k][0]) for k in plan.fixed_keys},
        # the latency model is part of what a study optimises (min_latency reads its estimate)
        "options": {**{k: _fmt(v) for k, v in plan.opts["static"]}, "latency_model": spec.model.name},
        "tables": {k: np.asarray(v).tolist() for k, v in plan.tables.items()},
        "models": [m.name for m in spec.models],
        "gpus": [g.name for g in plan.gpus],
    }
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{spec.name}/{label}/{digest}"


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return "inf" if math.isinf(v) else repr(v)
    return v


# --------------------------------------------------------------------------- the kernel call


class BatchEvaluator:
    """One jitted, vmapped `evaluate_values` call for a fixed number of points.

    `search_fn` (shape `batch`) serves every search round and every answer, so a search
    compiles it once; `enum_fn` (shape `ENUM_CHUNK` or less) serves the exact pass.
    """

    def __init__(self, plan: _Plan, batch: int) -> None:
        import jax

        self.plan = plan
        self.batch = batch
        self.search_fn: Any = jax.jit(functools.partial(evaluate_values, **plan.opts))
        self.calls = 0

    def evaluate(self, scenario: dict[str, Any], searched: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Evaluate up to `batch` points in one call (padded to `batch` by repeating the last)."""
        import jax

        n = len(next(iter(searched.values()))) if searched else 1
        assert 1 <= n <= self.batch
        padded = {k: np.concatenate([a, np.repeat(a[-1:], self.batch - n)]) for k, a in searched.items()}
        out = self.search_fn(kernel_values(self.plan, scenario, padded, self.batch), self.plan.tables)
        self.calls += 1
        host = jax.device_get(out)
        return {k: np.asarray(a)[:n] for k, a in host.items()}

    def compilations(self) -> int:
        return int(self.search_fn._cache_size())


def kernel_values(plan: _Plan, scenario: dict[str, Any], searched: dict[str, np.ndarray], n: int) -> dict[str, Any]:
    """The `v` dict of `evaluate_values` for `n` points: fixed keys broadcast from the
    scenario, searched keys from `searched` (gpu/model as catalog-table indices, a pool's own
    GPU as its index in `plan.gpus`)."""
    import jax.numpy as jnp

    v: dict[str, Any] = {}
    parts = plan.spec.model.part_gpu_keys
    for axis in plan.spec.axes:
        k = axis.key
        if k in searched:
            arr = np.asarray(searched[k])
        else:
            val, idx = scenario[k]
            if k in parts:
                idx = next(i for i, g in enumerate(plan.gpus) if g.name == val)
            arr = np.full(n, idx if k in ("model", "gpu", *parts) else val)
        v[k] = jnp.asarray(arr.astype(np.int32 if k in ("model", "gpu", *parts) else np.float64))
    return v




def _evaluate_reduced(v: dict[str, Any], tables: dict[str, Any], **opts: Any) -> dict[str, Any]:
    out = evaluate_values(v, tables, **opts)
    return {k: out[k] for k in reduced_keys(opts["model"])}


# --------------------------------------------------------------------------- objectives, constraints


def objective_matrix(out: dict[str, np.ndarray], objectives: tuple[str, ...], model: ServingModel) -> np.ndarray:
    """(n, n_objectives) objective values in their natural units and signs."""
    return np.stack([np.asarray(out[model.objectives[o][0]], dtype=np.float64) for o in objectives], axis=1)


def minimisation_form(values: np.ndarray, objectives: tuple[str, ...], model: ServingModel) -> np.ndarray:
    sign = np.array([-1.0 if model.objectives[o][1] == "maximize" else 1.0 for o in objectives])
    return values * sign


def reduced_keys(model: ServingModel) -> tuple[str, ...]:
    """The columns objectives and constraints read (the exact pass keeps only these)."""
    keys = [c for c, _ in model.objectives.values()]
    keys += [k for check in model.slo_checks for k in check]
    keys += [*_load_columns(model), "stable", model.decisions.utilisation, "rho_max", model.decisions.cap, "mem_ok"]
    keys += ["b_mem_max"] if any(c.name == "b_mem_max" for c in model.columns) else []
    return tuple(dict.fromkeys(keys))


def _load_columns(model: ServingModel) -> tuple[str, str]:
    """(load, capacity) columns whose ratio grades stability, load / capacity - 1: one
    replica's (`lambda_per_replica_rps`, `capacity_rps`) where the model has them, else the
    fleet's (`arrival_rps` over `capacity_rps`, the end-to-end capacity of a two-pool
    mode: the smaller pool's, so the ratio is the busier pool's load)."""
    names = {c.name for c in model.columns}
    return ("lambda_per_replica_rps" if "lambda_per_replica_rps" in names else "arrival_rps", "capacity_rps")


def constraint_values(out: dict[str, np.ndarray], model: ServingModel) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Optuna constraint values (<= 0 feasible) and the boolean verdict they agree with: every
    SLO of the model, stability, rho <= rho_max, memory."""
    checks = [(np.asarray(out[lat], float), np.asarray(out[slo], float)) for lat, slo in model.slo_checks]
    slo_ok = np.ones(len(out["stable"]), dtype=bool) & slo_met(checks)
    slo_graded = np.full(len(out["stable"]), -np.inf)
    for lat, slo in checks:
        with np.errstate(invalid="ignore", divide="ignore"):
            slo_graded = np.maximum(slo_graded, _graded(lat / slo - 1.0))
    rho = np.asarray(out[model.decisions.utilisation], float)
    mem_ok = np.asarray(out["mem_ok"], bool)
    if "b_mem_max" in out:
        batch = np.asarray(out[model.decisions.cap], float)
        mem_graded = _graded((batch - out["b_mem_max"]) / batch)
    else:
        mem_graded = np.where(mem_ok, -1.0, 1.0)
    lam, capacity = _load_columns(model)
    with np.errstate(invalid="ignore", divide="ignore"):  # no capacity (weights that do not fit): +inf, graded
        load = np.asarray(out[lam], float) / np.asarray(out[capacity], float)
    verdicts = {
        "slo": (slo_ok, slo_graded),
        "stable": (np.asarray(out["stable"], bool), _graded(load - 1.0)),
        "rho": (rho <= np.asarray(out["rho_max"]), _graded(rho - out["rho_max"])),
        "memory": (mem_ok, mem_graded),
    }
    cons = {}
    for name, (ok, graded) in verdicts.items():
        cons[name] = np.where(ok, np.minimum(graded, 0.0), np.maximum(graded, 1e-9))
    feasible = np.logical_and.reduce([ok for ok, _ in verdicts.values()])
    return cons, feasible


def _graded(x: Any) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(np.asarray(x, dtype=np.float64), nan=_BIG, posinf=_BIG, neginf=-_BIG)


# --------------------------------------------------------------------------- optuna


def _storage(search: SearchSpec, out_dir: Path) -> Any:
    url = search.storage_url(out_dir)
    if url is None:
        return None
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(url[len("journal:"):]))
    from optuna.storages import RDBStorage

    if url.startswith("sqlite"):
        return _fast_sqlite(RDBStorage(url, engine_kwargs={"connect_args": {"timeout": SQLITE_TIMEOUT_S}}))
    url = resolve_url(url)
    if url.startswith("postgresql"):
        return _postgres_storage(url)
    return RDBStorage(url, engine_kwargs={"pool_pre_ping": True})


def _postgres_storage(url: str) -> Any:
    """`RDBStorage` on PostgreSQL. Optuna creates its tables (and stamps their version)
    when the storage opens, which is not safe when several workers open a new database at
    once (they collide in PostgreSQL's catalog), so the opening is serialized by an
    advisory lock."""
    import sqlalchemy
    from optuna.storages import RDBStorage

    kwargs = {"pool_pre_ping": True, "connect_args": PG_CONNECT}
    gate = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool, connect_args=PG_CONNECT)
    try:
        with gate.connect() as conn:  # the lock ends with this transaction
            conn.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:k)"), {"k": pg_key("sweep-schema")})
            return RDBStorage(url, engine_kwargs=kwargs)
    finally:
        gate.dispose()


def _fast_sqlite(storage: Any) -> Any:
    """SQLite in WAL mode with synchronous=NORMAL: a commit no longer waits for an fsync
    (ask/tell commits several times per trial; the default costs ~40 ms each). A crash can
    lose the last commits, never corrupt the file; a rerun redoes those trials."""
    from sqlalchemy import event

    def pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    event.listen(storage.engine, "connect", pragmas)
    storage.engine.dispose()  # reopen pooled connections with the pragmas
    return storage


def _open_study(plan: _Plan, name: str, storage: Any, worker: int) -> Any:
    """Create or load the study; creation races between workers (SQLite's schema setup,
    the study row) are retried with a random back-off."""
    import optuna

    search = plan.search
    directions: list[Any] = [plan.spec.model.objectives[o][1] for o in search.objectives]
    for attempt in range(STUDY_CREATE_TRIES):
        try:
            study = optuna.create_study(storage=storage, sampler=_sampler(search, 0), study_name=name,
                                        directions=directions, load_if_exists=True)
            break
        except Exception as exc:
            if attempt == STUDY_CREATE_TRIES - 1 or not _is_race(exc):
                raise
            time.sleep(random.uniform(0.05, 0.3) * (attempt + 1))
    if "sweep_search" not in study.user_attrs:
        try:
            study.set_user_attr("sweep_search", {
                "grid": plan.spec.name, "grid_file": plan.spec.source,
                "objectives": list(search.objectives), "searched": list(search.keys),
                "constraints": list(CONSTRAINTS),  # the order of each trial's CONSTRAINTS_ATTR values
            })
        except Exception as exc:  # another worker set it at the same moment: the same value
            if not _is_race(exc):
                raise
    return study


def _is_race(exc: Exception) -> bool:
    name = type(exc).__name__
    return name in ("IntegrityError", "OperationalError", "DuplicatedStudyError") or "locked" in str(exc)


def _sampler(search: SearchSpec, number: int) -> Any:
    """TPE seeded for trial `number`: a trial's draw depends only on the seed, its number
    and the study's history (its RUNNING trials are constant liars), never on how many
    processes asked before it, so a resumed search asks exactly what an uninterrupted one
    would have."""
    import optuna

    seed = int.from_bytes(hashlib.sha256(f"{search.seed}/{number}".encode()).digest()[:4], "little")
    # The first `startup` trial numbers are random draws; a later one is a TPE draw once 10
    # trials are told (Optuna's least). One worker draws a trial numbered past `startup` only
    # after its whole first round is told, so this is TPE's usual "until `startup` trials
    # finish"; with several workers, whose first rounds end at different times, it keeps the
    # random draws to `startup` rather than to every trial asked before that many finish.
    startup = max(10, min(search.batch, search.trials // 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, constant_liar=True,
            n_startup_trials=startup if number < startup else 10,
        )


def _distributions(search: SearchSpec) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    d: dict[str, Any] = {}
    for p in search.params:
        if p.kind == "categorical":
            d[p.key] = CategoricalDistribution(list(p.choices))
        elif p.kind == "int":
            d[p.key] = IntDistribution(int(p.low), int(p.high), log=p.log)
        else:
            d[p.key] = FloatDistribution(float(p.low), float(p.high), log=p.log)
    return d


def _complete(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def _encode(plan: _Plan, params: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Trial params -> kernel inputs (a gpu name becomes its catalog-table index)."""
    out = {}
    for p in plan.search.params:
        col = [tp[p.key] for tp in params]
        if p.key == "gpu":
            out[p.key] = np.array([p.choices.index(c) for c in col], dtype=np.int64)
        else:
            out[p.key] = np.array(col, dtype=np.float64)
    return out


def _optimise(plan: _Plan, study: Any, scenario: dict[str, Any], ev: BatchEvaluator, stats: StudyStats,
              budget: BudgetLock, owner: Owner, told: Callable[[], None] | None = None) -> None:
    """Run the study to its budget, in rounds of trials asked together (`told`, if given,
    is called after each round is told: the progress display).

    A round goes in three steps. *Reserve* (under the budget lock, a few inserts): take over
    the RUNNING trials of a dead owner, or create the next round's trials, RUNNING, without
    parameters, each labelled in the same insert with its round, the round's size and its
    owner, so the trials reserved never exceed the budget and no number is given twice.
    *Draw* (no lock: workers sample in parallel): each reserved trial without all its
    parameters gets them from TPE seeded by (seed, trial number); a trial a dead process left
    with none or some of them is completed the same way, so its draw is the one an
    uninterrupted run makes. *Tell*: one kernel call evaluates the round, each trial is told.

    Each worker registers in the study (a study system attribute per owner session). A
    worker's round is its share of `batch`, `batch` over the live workers (itself included),
    and the study never has more than `batch` trials in flight (a worker waits for a tell),
    so together they draw with the feedback one process has, and each round is asked with
    the feedback of every round told before it. Alone, a worker asks rounds of `batch`, and a round cut short by a
    crash is completed with the same seeds before any of it is told: the history, and every
    later draw, equals an uninterrupted run's.
    """
    search = plan.search
    dists = _distributions(search)
    study._storage.set_study_system_attr(study._study_id, WORKER_ATTR + owner.attr["session"], owner.attr)
    while True:
        owner.check()
        with budget:
            mine = _reserve_round(study, search, owner)
        if mine is None:
            return
        if not mine:  # `batch` trials in flight: wait for a tell
            time.sleep(random.uniform(0.05, 0.15))
            continue
        fault("search:reserved")
        _draw(study, search, dists, mine, owner)
        fault("search:asked")
        owner.check()
        _tell(plan, study, scenario, ev, stats, mine)
        if told is not None:
            told()


def _reserve_round(study: Any, search: SearchSpec, owner: Owner) -> list[int] | None:
    """Under the budget lock: the trial numbers this worker evaluates next (None: the budget
    is used up). Orphans first (one round of them at a time, completed to its size as far
    as the budget allows), else a new round of this worker's share of `batch`."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    dead: dict[str, bool] = {}

    def orphaned(t: Any) -> bool:
        attr = t.user_attrs.get(OWNER_ATTR)
        key = json.dumps(attr, sort_keys=True, default=str)
        if key not in dead:
            dead[key] = owner.orphaned(attr)
        return dead[key]

    running = [t for t in trials if t.state == TrialState.RUNNING]
    orphans = [t for t in running if orphaned(t)]
    used = sum(t.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING) for t in trials)
    if orphans:
        round_id, size = _round_of(trials, orphans[0])
        if round_id is None:  # a round of its own
            round_id, asked, mine = _next_round(trials), [orphans[0]], [orphans[0].number]
        else:
            asked = [t for t in trials if _round_of(trials, t)[0] == round_id]
            mine = [t.number for t in orphans if _round_of(trials, t)[0] == round_id]
        for number in mine:
            trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
            study._storage.set_trial_user_attr(trial_id, ROUND_ATTR, round_id)
            study._storage.set_trial_user_attr(trial_id, ROUND_SIZE_ATTR, size)
            study._storage.set_trial_user_attr(trial_id, OWNER_ATTR, owner.attr)
        # the rest of a round whose reservation was cut short, unless other workers have
        # used its places since
        rest = min(size - len(asked), search.trials - used)
        return sorted(mine + _reserve(study, round_id, size, max(0, rest), owner))
    if used >= search.trials:
        return None
    workers = [attr for key, attr in study._storage.get_study_system_attrs(study._study_id).items()
               if key.startswith(WORKER_ATTR) and not owner.gone(attr)]
    share = -(-search.batch // max(1, len(workers)))
    n = min(share, search.batch - len(running), search.trials - used)
    if n <= 0:
        return []
    return _reserve(study, _next_round(trials), n, n, owner)


def _next_round(trials: list[Any]) -> int:
    return 1 + max((int(t.user_attrs[ROUND_ATTR]) for t in trials if ROUND_ATTR in t.user_attrs), default=-1)


def _round_of(trials: list[Any], t: Any) -> tuple[int | None, int]:
    """(round id, round size) of trial `t`. A trial without them was asked by an older sweep
    (which labelled a trial after creating it) that died before it could label it: it
    belongs to the round of the trial asked just before it, when that round was still being
    asked; else it is a round of its own."""
    if ROUND_ATTR in t.user_attrs:
        return t.user_attrs[ROUND_ATTR], int(t.user_attrs.get(ROUND_SIZE_ATTR, 1))
    before = [u for u in trials if u.number < t.number and ROUND_ATTR in u.user_attrs]
    if before:
        prev = max(before, key=lambda u: u.number)
        rid, size = prev.user_attrs[ROUND_ATTR], int(prev.user_attrs.get(ROUND_SIZE_ATTR, 1))
        if sum(u.user_attrs.get(ROUND_ATTR) == rid for u in trials) < size:
            return rid, size
    return None, 1


def _reserve(study: Any, round_id: int, size: int, n: int, owner: Owner) -> list[int]:
    """Create `n` RUNNING trials of round `round_id` (of `size`), without parameters; each
    insert carries the round, its size and the owner (one transaction a trial, so no trial
    is ever unlabelled)."""
    from datetime import datetime

    from optuna.trial import FrozenTrial, TrialState

    numbers = []
    for j in range(n):
        template = FrozenTrial(number=-1, state=TrialState.RUNNING, value=None, values=None,
                               datetime_start=datetime.now(), datetime_complete=None, params={}, distributions={},
                               user_attrs={ROUND_ATTR: round_id, ROUND_SIZE_ATTR: size, OWNER_ATTR: owner.attr},
                               system_attrs={}, intermediate_values={}, trial_id=-1)
        trial_id = study._storage.create_new_trial(study._study_id, template_trial=template)
        numbers.append(study._storage.get_trial_number_from_id(trial_id))
        fault(f"search:reserve{j}")
    return numbers


def _draw(study: Any, search: SearchSpec, dists: dict[str, Any], numbers: list[int], owner: Owner) -> None:
    """Give each trial of `numbers` (in number order) the parameters it lacks, drawn by TPE
    seeded for its number (what `study.ask(dists)` does for a trial it creates). A trial
    that already has some keeps them: the same seed and history draw the same values."""
    import optuna

    for j, number in enumerate(numbers):
        trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
        if dists.keys() <= study._storage.get_trial_params(trial_id).keys():
            continue
        owner.check()
        study.sampler = _sampler(search, number)
        study._thread_local.cached_all_trials = None  # as `ask` does: the sampler reads the latest history
        trial = optuna.trial.Trial(study, trial_id)
        stored = set(trial._cached_frozen_trial.params)
        for k, (name, dist) in enumerate(dists.items()):
            if name in stored:
                _redraw(study, trial, name, dist)
            else:
                trial._suggest(name, dist)
            fault(f"search:param{k}")
        fault(f"search:ask{j}")


def _redraw(study: Any, trial: Any, name: str, dist: Any) -> None:
    """Draw parameter `name` of a trial that already has it, as `Trial._suggest` would, and
    drop the value: the seeded sampler then stands where the first draw left it, so the
    parameters still missing get the values an uninterrupted draw gives them (a random
    sampler draws one value a parameter, in order). The stored value stays (a database
    keeps one value a parameter)."""
    from optuna import pruners

    if dist.single():
        return
    if trial._is_relative_param(name, dist):
        return  # drawn with the others, all at once, when the trial first needed them
    frozen = trial._get_latest_trial()
    study.sampler.sample_independent(pruners._filter_study(study, frozen), frozen, name, dist)


def _tell(plan: _Plan, study: Any, scenario: dict[str, Any], ev: BatchEvaluator, stats: StudyStats,
          numbers: list[int]) -> None:
    """Evaluate the trials `numbers` in one kernel call and tell each its values and
    constraints. A trial another worker has finished meanwhile (it took this one's trials
    over while this one was cut off from the database) is left as it is: the same
    parameters give the same values."""
    import optuna

    search = plan.search
    if not numbers:
        return
    trials = [study._storage.get_trial(study._storage.get_trial_id_from_study_id_trial_number(study._study_id, n))
              for n in numbers]
    out = ev.evaluate(scenario, _encode(plan, [t.params for t in trials]))
    stats.search_calls += 1
    fault("search:evaluated")
    values = objective_matrix(out, search.objectives, plan.spec.model)
    cons, _ = constraint_values(out, plan.spec.model)
    told = 0
    for i, frozen in enumerate(trials):
        trial = optuna.trial.Trial(study, frozen._trial_id)
        if trial._cached_frozen_trial.state.is_finished():
            continue
        try:
            # a crash may have set them already (before the tell)
            if CONSTRAINTS_ATTR not in trial._cached_frozen_trial.system_attrs:
                study._storage.set_trial_system_attr(frozen._trial_id, CONSTRAINTS_ATTR,
                                                     [float(cons[name][i]) for name in CONSTRAINTS])
            fault(f"search:constrained{i}")
            vals = [float(x) for x in values[i]]
            study.tell(trial, vals if len(vals) > 1 else vals[0], skip_if_finished=True)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        told += 1
        fault(f"search:tell{i}")
    stats.trials_run += told


def _answers(plan: _Plan, study: Any, scenario: dict[str, Any], ev: BatchEvaluator,
             stats: StudyStats) -> dict[str, Any]:
    """The study's answer trials re-evaluated (every output column), with a reason."""
    search = plan.search
    complete = _complete(study)
    feasible = [t for t in complete if all(v <= 0.0 for v in t.constraints.values())]
    if feasible:
        if search.multi_objective:
            sign = [-1.0 if plan.spec.model.objectives[o][1] == "maximize" else 1.0 for o in search.objectives]
            chosen = sorted(study.best_trials, key=lambda t: ([s * v for s, v in zip(sign, t.values)], t.number))
        else:
            chosen = [study.best_trial]
        reason = ""
    else:
        # No feasible trial: show the least-violating one, as a planner's hint.
        chosen = [min(complete, key=lambda t: (sum(max(v, 0.0) for v in t.constraints.values()), t.number))]
        reason = (f"no trial of {len(complete)} meets every constraint (slo, stable, rho <= rho_max, memory); "
                  "least-violating trial shown")
    seen, unique = set(), []
    for t in chosen:  # the same point asked twice is one answer
        key = tuple(_fmt(t.params[k]) for k in search.keys)
        if key not in seen:
            seen.add(key)
            unique.append(t)
    parts = []
    for i in range(0, len(unique), search.batch):
        part = unique[i:i + search.batch]
        parts.append(ev.evaluate(scenario, _encode(plan, [t.params for t in part])))
        stats.answer_calls += 1
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    _, ok = constraint_values(out, plan.spec.model)
    return {"trials": unique, "out": out, "meets": ok, "reason": reason,
            "n_complete": len(complete), "n_feasible": len(feasible)}


# --------------------------------------------------------------------------- exact


def exact_solution(plan: _Plan, scenario: dict[str, Any], stats: StudyStats | None = None) -> dict[str, Any]:
    """Every combination of the searched values, evaluated in fixed-shape chunks through the
    same kernel: feasible objective vectors (minimisation form) and their combinations."""
    import jax

    search = plan.search
    assert search.enumerable
    sizes = [int(p.size) for p in search.params]
    total = math.prod(sizes)
    chunk = min(ENUM_CHUNK, 1 << max(0, (total - 1).bit_length()))
    keep_f, keep_x = [], []
    enum_fn = _enum_fn(plan)
    for start in range(0, total, chunk):
        idx = np.minimum(np.arange(start, start + chunk), total - 1)
        coords = np.unravel_index(idx, sizes)
        searched: dict[str, np.ndarray] = {}
        for p, c in zip(search.params, coords):
            if p.key == "gpu":
                searched[p.key] = c.astype(np.int64)
            else:
                searched[p.key] = np.asarray(p.values, dtype=np.float64)[c]
        v = kernel_values(plan, scenario, searched, chunk)
        out = {k: np.asarray(a) for k, a in jax.device_get(enum_fn(v, plan.tables)).items()}
        if stats is not None:
            stats.exact_calls += 1
        n = min(chunk, total - start)
        out = {k: a[:n] for k, a in out.items()}
        _, ok = constraint_values(out, plan.spec.model)
        f = minimisation_form(objective_matrix(out, search.objectives, plan.spec.model), search.objectives,
                              plan.spec.model)
        keep_f.append(f[ok])
        keep_x.append(idx[:n][ok])
    f = np.concatenate(keep_f) if keep_f else np.zeros((0, len(search.objectives)))
    x = np.concatenate(keep_x) if keep_x else np.zeros(0, dtype=np.int64)
    if len(search.objectives) == 1:
        if len(f):
            i = int(np.argmin(f[:, 0]))  # first in enumeration order among ties
            front, front_x = f[i:i + 1], x[i:i + 1]
        else:
            front, front_x = f, x
    else:
        front, front_x = pareto_front(f, x)
    return {"front": front, "front_x": front_x, "points": total, "feasible": int(len(f)), "sizes": sizes}


@functools.lru_cache(maxsize=8)
def _enum_fn_cached(opts_key: tuple[tuple[str, Any], ...]) -> Any:
    import jax

    return jax.jit(functools.partial(_evaluate_reduced, **dict(opts_key)))


def _enum_fn(plan: _Plan) -> Any:
    return _enum_fn_cached(tuple(sorted(plan.opts.items(), key=lambda kv: kv[0])))


def pareto_front(f: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-dominated rows of `f` (minimisation), one per distinct objective vector (the
    first combination in enumeration order), sorted by the first objective."""
    if len(f) == 0:
        return f, x
    uniq, first = np.unique(f, axis=0, return_index=True)  # lexicographic order
    xs = x[first]
    # The lexicographically smallest remaining vector is never dominated (a dominator would
    # come before it and would have removed it); keep it, drop all it dominates, repeat:
    # O(front size x points), not O(points^2).
    idx = np.arange(len(uniq))
    keep: list[int] = []
    while len(idx):
        p = uniq[idx[0]]
        keep.append(int(idx[0]))
        idx = idx[~np.all(uniq[idx] >= p, axis=1)]
    return uniq[keep], xs[keep]


def _point_label(plan: _Plan, flat: int, sizes: list[int]) -> str:
    coords = np.unravel_index(int(flat), sizes)
    return ",".join(f"{p.key}={_fmt(p.values[int(c)])}" for p, c in zip(plan.search.params, coords))


def _gap(found: np.ndarray, front: np.ndarray) -> tuple[float, int]:
    """Relative gap of one found vector to the exact front (minimisation form): the
    smallest, over front points that weakly dominate it, of the largest relative excess."""
    scale = np.maximum(np.abs(front), 1e-300)
    excess = (found[None, :] - front) / scale  # >= 0 where the front point is at least as good
    dominating = np.all(excess >= -EXACT_RTOL, axis=1)
    if not dominating.any():  # numerically on (or beyond) the front
        j = int(np.argmin(np.max(np.abs(excess), axis=1)))
        return 0.0, j
    cand = np.where(dominating, np.max(np.maximum(excess, 0.0), axis=1), np.inf)
    j = int(np.argmin(cand))
    g = float(cand[j])
    return (0.0 if g <= EXACT_RTOL else g), j


# --------------------------------------------------------------------------- rows and table


def _rows(plan: _Plan, study: Any, stats: StudyStats, ans: dict[str, Any],
          exact: dict[str, Any] | None) -> list[dict[str, Any]]:
    search = plan.search
    objectives = search.objectives
    out = ans["out"]
    found = minimisation_form(objective_matrix(out, objectives, plan.spec.model), objectives, plan.spec.model)
    primary_sign = -1.0 if plan.spec.model.objectives[objectives[0]][1] == "maximize" else 1.0
    n = len(ans["trials"])
    coverage = 0.0
    if exact is not None and len(exact["front"]):
        met = found[ans["meets"]]
        hits = 0
        for q in exact["front"]:
            if len(met) and np.any(np.all(np.abs(met - q) <= EXACT_RTOL * np.maximum(np.abs(q), 1e-300), axis=1)):
                hits += 1
        coverage = hits / len(exact["front"])
    rows = []
    for i in range(n):
        row = {k: out[k][i] for k in out}
        row["study_name"] = stats.name
        row["method"] = "optuna"
        row["objective"] = "+".join(objectives)
        row["objective_value"] = float(objective_matrix(out, objectives, plan.spec.model)[i, 0])
        row["rank"] = i
        row["meets_constraints"] = bool(ans["meets"][i])
        row["reason"] = ans["reason"]
        row["trial_number"] = int(ans["trials"][i].number)
        row["trials"] = ans["n_complete"]
        row["feasible_trials"] = ans["n_feasible"]
        row["enumerable"] = exact is not None
        row["space_size"] = float(search.space_size)
        if exact is None:
            row.update(exact_value=primary_sign * math.inf, exact_point="", exact_points=0, exact_feasible=0,
                       gap_rel=math.inf, found_exact=False, front_coverage=0.0)
        elif not len(exact["front"]):  # nothing feasible anywhere: agreeing is exact
            row.update(exact_value=primary_sign * math.inf, exact_point="", exact_points=exact["points"],
                       exact_feasible=0, gap_rel=0.0 if not ans["meets"][i] else math.inf,
                       found_exact=not bool(ans["meets"][i]), front_coverage=1.0)
            if not ans["meets"][i]:
                row["reason"] = (f"no point of the {exact['points']} combinations meets every constraint "
                                 "(exact check); " + ans["reason"])
        elif not ans["meets"][i]:
            j = 0
            row.update(exact_value=float(primary_sign * exact["front"][j, 0]),
                       exact_point=_point_label(plan, exact["front_x"][j], exact["sizes"]),
                       exact_points=exact["points"], exact_feasible=exact["feasible"],
                       gap_rel=math.inf, found_exact=False, front_coverage=coverage)
        else:
            g, j = _gap(found[i], exact["front"])
            row.update(exact_value=float(primary_sign * exact["front"][j, 0]),
                       exact_point=_point_label(plan, exact["front_x"][j], exact["sizes"]),
                       exact_points=exact["points"], exact_feasible=exact["feasible"],
                       gap_rel=g, found_exact=g <= EXACT_RTOL,
                       front_coverage=coverage if search.multi_objective else float(g <= EXACT_RTOL))
        row["seed"] = search.seed
        row["storage"] = _hide_password(search.storage)
        rows.append(row)
    return rows


def _result(plan: _Plan, rows: list[dict[str, Any]], ev: BatchEvaluator) -> SearchResult:
    """The answers as declared columns: string columns as dictionary codes."""
    columns = (*SEARCH_META_FIRST, *plan.columns, *SEARCH_META_LAST)
    dictionaries = table_dictionaries([m.name for m in plan.spec.models], [g.name for g in plan.gpus],
                                      decisions=False, gpu_keys=plan.spec.model.part_gpu_keys)
    data: dict[str, np.ndarray] = {}
    for c in columns:
        col = [r[c.name] for r in rows]
        if c.dtype == "dict" and c.name not in dictionaries:
            names = sorted({str(x) for x in col})
            dictionaries[c.name] = names
            data[c.name] = np.array([names.index(str(x)) for x in col], dtype=np.int32)
        elif c.dtype == "dict":
            data[c.name] = np.asarray(col, dtype=np.int32)
        else:
            data[c.name] = np.asarray(col, dtype={"float64": np.float64, "int64": np.int64,
                                                  "bool": np.bool_}[c.memory_dtype])
    meta = {
        "grid_name": plan.spec.name,
        "grid_file": plan.spec.source,
        "grid_sha256": plan.spec.sha256,
        "objectives": list(plan.search.objectives),
        "searched": list(plan.search.keys),
        "trials": plan.search.trials,
        "batch": plan.search.batch,
        "seed": plan.search.seed,
        "storage": _hide_password(plan.search.storage),
        "exact_limit": EXACT_LIMIT,
        "compilations": ev.compilations(),
        "studies": [s.__dict__ for s in plan.stats],
    }
    return SearchResult(columns, data, dictionaries, meta)
