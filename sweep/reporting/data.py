"""The report's queries: what it reads from a run folder, and how much.

Every query is bounded. `optimum.parquet` (one row per scenario group and replica count)
is read with a few projected columns to choose what to show; `points/` and
`frontier.parquet` are only read for the chosen rows (`point_id BETWEEN` ranges, which
DuckDB prunes by row-group statistics, or a join on `row_id`), or sampled. Nothing reads
every point of `points/`.

Unbounded and missing values: the engine writes `+inf` today and will write NULL (with a
flag column) later; "no answer" is batch 0 / point -1 today and NULL later. Results here
turn NULL into NaN, and `unbounded(x)` / `no_answer(x)` treat both spellings alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sweep.decide.tables import answer_name
from sweep.errors import SweepError
from sweep.io.published import check_run
from sweep.models import SERVING_MODES, ServingModel, get_model
from sweep.models.views import AgainstSimulator, Frontier, Views

#: Scenario rows whose per-batch figures and tables are embedded (the picker lists them).
MAX_SCENARIOS = 128
#: Points embedded for those rows, all of them together (fewer scenarios when rows are long).
MAX_DETAIL_POINTS = 60_000
#: Frontier points embedded; above it whole rows are sampled, evenly across model x GPU.
FRONTIER_BUDGET = 100_000
#: Points of the proxy-against-simulator figure (a repeatable sample above it).
SIM_BUDGET = 20_000
#: Cells of the action maps, all scenarios together.
ACTION_CELLS = 60_000
#: Points of each figure drawn over every point of the run (a scatter, lines against load).
POINTS_BUDGET = 50_000
#: Lines of the replica-plan figure.
PLAN_BUDGET = 60_000
#: Schedule groups drawn in the schedule figure (one line set each).
SCHEDULE_GROUPS = 6


class ReportError(SweepError):
    """The run folder cannot be reported on (missing, incomplete, unreadable)."""


Columns = dict[str, np.ndarray]


def unbounded(x: Any) -> bool:
    """+inf (today's spelling) or NULL/NaN (tomorrow's): no finite value."""
    return x is None or not math.isfinite(float(x))


def no_answer(batch: Any) -> bool:
    """An answer column's batch: 0 (today) or NULL (tomorrow) means there is none."""
    return batch is None or not math.isfinite(float(batch)) or float(batch) <= 0


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def to_columns(table: pa.Table) -> Columns:
    """Arrow -> numpy: numbers as float64 (NULL -> NaN), bools (NULL -> False), strings."""
    out: Columns = {}
    for name, col in zip(table.column_names, table.columns):
        t = col.type
        if pa.types.is_dictionary(t):
            col = col.cast(t.value_type)
            t = t.value_type
        if pa.types.is_boolean(t):
            out[name] = np.asarray(col.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
        elif pa.types.is_integer(t) or pa.types.is_floating(t):
            # NULL -> NaN in Arrow first: a chunked array with nulls would convert through pandas
            # (a second's import, and a copy)
            out[name] = np.asarray(col.cast(pa.float64()).fill_null(math.nan).to_numpy(zero_copy_only=False),
                                   dtype=np.float64)
        else:
            out[name] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=object)
    return out


def take(cols: Columns, index: np.ndarray) -> Columns:
    return {k: v[index] for k, v in cols.items()}


@dataclass
class Sample:
    """A bounded read: the rows, and how many there were to choose from."""

    cols: Columns
    shown: int
    total: int
    rows_shown: int = 0
    rows_total: int = 0
    source: str = ""
    notes: list[str] = field(default_factory=list)


class Run:
    """A finished run folder and a DuckDB connection over its files."""

    def __init__(self, path: str | Path) -> None:
        import duckdb

        self.path = Path(path)
        self.manifest: dict[str, Any] = check_run(self.path)  # one line naming a damaged file
        self.con = duckdb.connect()
        self.con.execute("SET threads TO 2")
        self.optimum_src = f"read_parquet({_sql_str(str(self.path / 'optimum.parquet'))})"
        self.frontier_src = f"read_parquet({_sql_str(str(self.path / 'frontier.parquet'))})"
        self.optimum_cols = set(pq.read_schema(self.path / "optimum.parquet").names)
        self.frontier_cols = set(pq.read_schema(self.path / "frontier.parquet").names)
        files = sorted((self.path / "points").rglob("*.parquet")) if (self.path / "points").is_dir() else []
        self.points_src: str | None = None
        self.points_cols: set[str] = set()
        if files:
            glob = str(self.path / "points") + "/**/*.parquet"
            self.points_src = f"read_parquet({_sql_str(glob)}, hive_partitioning = true, union_by_name = true)"
            self.points_cols = set(pq.read_schema(files[0]).names)
            rel = files[0].relative_to(self.path / "points").parts[:-1]
            self.points_cols |= {p.split("=", 1)[0] for p in rel if "=" in p}
        search = self.path / "search.parquet"
        self.search_path = search if search.exists() else None
        self.model: ServingModel = self._model()
        self.views: Views = self.model.views
        self.serving = self.model.serving
        decisions = self.manifest.get("decisions") or {}
        self.row_axes = tuple(decisions.get("row_axes") or self.model.row_axes)
        axes = self.manifest.get("axes") or {}
        self.axis_sizes: dict[str, int] = {k: int(v) for k, v in axes.items()}
        self.varying = [k for k, n in self.axis_sizes.items() if n > 1 and k not in self.row_axes
                        and k in self.optimum_cols]

    # ------------------------------------------------------------------ basics

    def _model(self) -> ServingModel:
        """The serving model of the run: the manifest's, else (a manifest older than serving
        modes) the first registered mode whose decision columns the files have."""
        m = self.manifest
        mode = m.get("serving") or (m.get("options") or {}).get("serving")
        if isinstance(mode, dict):
            mode = mode.get("mode")
        if not mode:
            have = self.points_cols | self.frontier_cols
            mode = next((s for s in SERVING_MODES if {(d := get_model(s).decisions).capacity, d.latency} <= have),
                        SERVING_MODES[0])
        try:
            return get_model(str(mode), m.get("latency_model"))
        except KeyError as exc:
            raise ReportError(f"{self.path}: {exc.args[0]} (is the serving model registered?)") from None

    @property
    def name(self) -> str:
        return str(self.manifest.get("grid_name") or self.path.name)

    def query(self, sql: str, params: list[Any] | None = None) -> Columns:
        rel = self.con.sql(sql, params=params or None)
        fetch = getattr(rel, "to_arrow_table", None) or rel.arrow  # DuckDB 2 / DuckDB 1
        table = fetch()
        if isinstance(table, pa.RecordBatchReader):
            table = table.read_all()
        return to_columns(table)

    def scalar(self, sql: str) -> Any:
        return self.con.sql(sql).fetchall()[0][0]

    def _select(self, wanted: tuple[str, ...] | list[str], have: set[str]) -> str:
        return ", ".join(_ident(c) for c in wanted if c in have)

    def close(self) -> None:
        self.con.close()

    # ------------------------------------------------------------------ scenarios

    def row_index(self) -> Columns:
        """The light projection of optimum.parquet every selection starts from."""
        wanted = ["row_id", "group_id", "model", "gpu", "reason", "is_replicas_min", "n_points",
                  "n_frontier", "n_feasible", *self.varying]
        cols = list(dict.fromkeys(c for c in wanted if c in self.optimum_cols))
        if not hasattr(self, "_row_index"):
            self._row_index = self.query(f"SELECT {self._select(cols, self.optimum_cols)} "
                                         f"FROM {self.optimum_src} ORDER BY row_id")
        return self._row_index

    def scenarios(self) -> Sample:
        """The optimum rows whose per-batch detail is embedded, every optimum column.

        All rows when there are few; otherwise, per model x GPU pair, rows spread evenly
        over the arrival rates among those at `replicas_min` that have an answer
        (any row where none has), so every pair of the filters has one.
        """
        idx = self.row_index()
        n = len(idx["row_id"])
        row_len = float(np.nanmax(idx["n_points"])) if n and "n_points" in idx else 1.0
        cap = int(max(1, min(MAX_SCENARIOS, MAX_DETAIL_POINTS // max(row_len, 1.0))))
        if n <= cap:
            chosen = np.arange(n)
        else:
            chosen = self._spread(idx, cap)
        row_ids = idx["row_id"][chosen]
        opt = self.query(f"SELECT * FROM {self.optimum_src} WHERE row_id IN "
                         f"(SELECT unnest(?::BIGINT[])) ORDER BY row_id", [row_ids.astype(np.int64).tolist()])
        order = np.lexsort([opt["row_id"], opt["gpu"].astype(str), opt["model"].astype(str)])
        opt = take(opt, order)
        notes = []
        if n > len(row_ids):
            notes.append(f"{len(row_ids):,} of {n:,} scenario rows are embedded (per model and GPU, rows at "
                         "replicas_min spread over the arrival rates); optimum.parquet has them all")
        return Sample(opt, len(row_ids), n, notes=notes)

    def _spread(self, idx: Columns, cap: int) -> np.ndarray:
        pairs = by_pair(idx)
        per_pair = max(1, cap // max(1, len(pairs)))
        good = idx.get("is_replicas_min", np.ones(len(idx["row_id"]), bool))
        if "reason" in idx:
            good = good & (idx["reason"] == "ok")
        arrival = idx.get("arrival_rps", idx["row_id"])
        chosen: list[int] = []
        for _, _, members in pairs:
            members = members[np.lexsort([idx["row_id"][members], arrival[members]])]
            pool, rest = members[good[members]], members[~good[members]]
            if len(pool) < per_pair:  # too few answered rows: spread over the others too
                pool = np.concatenate([pool, _spread_evenly(rest, per_pair - len(pool))])
            chosen.extend(_spread_evenly(pool, per_pair).tolist())
        return np.array(sorted(chosen)[: max(cap, len(pairs))], dtype=np.int64)

    # ------------------------------------------------------------------ per-batch detail

    def detail_columns(self) -> list[str]:
        """What the per-scenario tables and figures read: the row axes, the generic verdicts,
        the model's report table and its per-scenario figures' columns."""
        v = self.views
        cols = ["point_id", "row_id", *self.row_axes, self.model.decisions.utilisation, "stable", "mem_ok", "feasible",
                "slo_ok", "action"]
        if v.report_table is not None:
            cols += v.report_table.columns()
        for f in v.figures:
            if f.per == "scenario":
                cols += f.columns()
        return list(dict.fromkeys(cols))

    def detail(self, scen: Columns) -> Sample:
        """Every point of the chosen rows: from points/, or else the rows' frontier points."""
        row_ids = scen["row_id"].astype(np.int64)
        n_points = scen["n_points"].astype(np.int64) if "n_points" in scen else None
        notes: list[str] = []
        if self.points_src is not None and self.model.decisions.cap in self.points_cols and n_points is not None \
                and "point_id" in self.points_cols:
            lo, hi = row_ids * n_points, row_ids * n_points + n_points - 1
            ranges = " OR ".join(f"point_id BETWEEN {a} AND {b}" for a, b in zip(lo, hi))
            sel = self._select([c for c in self.detail_columns() if c != "row_id"], self.points_cols)
            cols = self.query(f"SELECT {sel} FROM {self.points_src} WHERE {ranges} ORDER BY point_id")
            order = np.argsort(lo)
            starts = np.searchsorted(lo[order], cols["point_id"], side="right") - 1
            cols["row_id"] = row_ids[order][np.clip(starts, 0, len(row_ids) - 1)].astype(np.float64)
            source = "points/"
            if self.manifest.get("rows", {}).get("points_mode") == "feasible":
                notes.append("points/ holds the feasible points only ([output] points = \"feasible\")")
        else:
            sel = self._select(self.detail_columns(), self.frontier_cols)
            cols = self.query(f"SELECT {sel} FROM {self.frontier_src} WHERE row_id IN "
                              f"(SELECT unnest(?::BIGINT[])) ORDER BY point_id", [row_ids.tolist()])
            source = "frontier.parquet"
            notes.append("this run wrote no points/ ([output] points = \"none\"), so these are the rows' "
                         "Pareto points from frontier.parquet; the shaded regions come from optimum.parquet")
        n = len(cols.get("row_id", []))
        return Sample(cols, n, n, source=source, notes=notes)

    def points_by_id(self, ids: Sequence[int]) -> Columns:
        """Every column of the given points (at most one per scenario shown: bounded), from
        points/ or, for the reduced outputs only, frontier.parquet (an answer's point is on
        its row's frontier except b_latency_opt's)."""
        ids = sorted({int(i) for i in ids})
        if not ids:
            return {}
        src = self.points_src if self.points_src is not None and "point_id" in self.points_cols else self.frontier_src
        return self.query(f"SELECT * FROM {src} WHERE point_id IN (SELECT unnest(?::BIGINT[])) ORDER BY point_id",
                          [ids])

    def action_cells(self, scen: Columns) -> Sample:
        """Points of the chosen scenarios' configurations across every arrival rate
        (points/ only: actions of infeasible points are not in the reduced outputs)."""
        cap = self.model.decisions.cap
        need = {cap, "action", "point_id"}
        if self.points_src is None or not need <= self.points_cols or "arrival_rps" not in self.optimum_cols:
            return Sample({}, 0, 0, notes=[f"needs points/ with {cap} and action; this run has "
                                           + ("none" if self.points_src is None else "other columns")])
        idx = self.row_index()
        config_axes = [a for a in self.varying if a not in self.load_keys]
        keys_all = _row_keys(idx, config_axes)
        keys_scen = _row_keys(scen, config_axes)
        wanted = np.isin(keys_all, np.unique(keys_scen))
        rows = idx["row_id"][wanted].astype(np.int64)
        n_points = idx["n_points"][wanted].astype(np.int64)
        notes = []
        total = int(n_points.sum())
        if total > ACTION_CELLS:
            # Keep whole configurations, in the scenarios' order, until the budget is used.
            keep_keys: list[str] = []
            used = 0
            for k in dict.fromkeys(keys_scen.tolist()):
                size = int(n_points[keys_all[wanted] == k].sum())
                if used + size > ACTION_CELLS and keep_keys:
                    break
                keep_keys.append(k)
                used += size
            mask = np.isin(keys_all[wanted], keep_keys)
            rows, n_points = rows[mask], n_points[mask]
            notes.append(f"action maps for {len(keep_keys)} of {len(set(keys_scen.tolist()))} configurations "
                         f"({ACTION_CELLS:,}-cell budget)")
        lo, hi = rows * n_points, rows * n_points + n_points - 1
        ranges = " OR ".join(f"point_id BETWEEN {a} AND {b}" for a, b in zip(lo, hi))
        first = self.model.slo_checks[:1]
        sel = self._select(list(dict.fromkeys(("point_id", *self.load_keys, *self.row_axes, "action",
                                               *(lat for lat, _ in first), self.model.decisions.utilisation))),
                           self.points_cols)
        cols = self.query(f"SELECT {sel} FROM {self.points_src} WHERE {ranges} ORDER BY point_id")
        order = np.argsort(lo)
        starts = np.searchsorted(lo[order], cols["point_id"], side="right") - 1
        row_of = rows[order][np.clip(starts, 0, len(rows) - 1)]
        key_of_row = dict(zip(idx["row_id"][wanted].astype(np.int64).tolist(), keys_all[wanted].tolist()))
        cols["config"] = np.array([key_of_row[r] for r in row_of.tolist()], dtype=object)
        return Sample(cols, len(cols["point_id"]), total, notes=notes)

    @property
    def load_keys(self) -> tuple[str, ...]:
        """The columns that set the run's load (the model's `Views.loads`): an action map runs
        over one of them, a configuration is the rest of the varying axes."""
        return tuple(k for k, *_ in self.model.views.loads)

    def config_key(self, scen: Columns) -> np.ndarray:
        return _row_keys(scen, [a for a in self.varying if a not in self.load_keys])

    # ------------------------------------------------------------------ frontier

    def frontier_axes(self) -> tuple[str, str]:
        """(x, y) of the frontier figure (`Views` `Frontier`), else the decisions' objectives."""
        f = next((f for f in self.views.figures if isinstance(f, Frontier)), None)
        if f is not None:
            return f.x, f.y
        d = self.model.decisions
        return d.capacity, d.latency

    def frontier(self, budget: int = FRONTIER_BUDGET) -> Sample:
        x, y = self.frontier_axes()
        if not {x, y, "row_id"} <= self.frontier_cols:
            return Sample({}, 0, 0, notes=[f"frontier.parquet lacks {x} or {y}"])
        idx = self.row_index()
        sizes = idx.get("n_frontier")
        total = int(np.nansum(sizes)) if sizes is not None else int(
            self.scalar(f"SELECT count(*) FROM {self.frontier_src}"))
        n_rows = int(np.sum(sizes > 0)) if sizes is not None else 0
        slo = next((f.slo for f in self.views.figures if isinstance(f, Frontier) and f.slo), None)
        cols = ("row_id", "point_id", "model", "gpu", x, y, *self.row_axes, "is_knee", "is_slo_opt", "arrival_rps",
                "replicas", "gpus_per_replica", *((slo,) if slo else ()))
        sel = self._select(list(dict.fromkeys(cols)), self.frontier_cols)
        notes = []
        if total <= budget or sizes is None:
            out = self.query(f"SELECT {sel} FROM {self.frontier_src} ORDER BY row_id, {_ident(x)}")
            rows_shown = n_rows
        else:
            chosen = _sample_rows(idx, sizes, budget)
            out = self.query(f"SELECT {sel} FROM {self.frontier_src} WHERE row_id IN "
                             f"(SELECT unnest(?::BIGINT[])) ORDER BY row_id, {_ident(x)}", [chosen.tolist()])
            rows_shown = len(chosen)
            notes.append(f"{len(out['row_id']):,} of {total:,} frontier points shown: {rows_shown:,} of "
                         f"{n_rows:,} rows, whole rows sampled evenly across model and GPU")
        return Sample(out, len(out["row_id"]), total, rows_shown, n_rows, "frontier.parquet", notes)

    # ------------------------------------------------------------------ replica plan

    def plan_columns(self) -> list[str]:
        """The replica plan's columns: the group, its configuration and workload, and the
        answer at replicas_min of each of the plan's cells (`Views.plan`)."""
        plan = self.views.plan
        answers = [answer_column(self.model, "replicas_min", c.column) for c in plan.cells]
        return list(dict.fromkeys(("group_id", "row_id", "model", "gpu", "gpus_per_replica", *plan.workload,
                                   "arrival_rps", "replicas", "replicas_min", "is_replicas_min",
                                   *(a for a in answers if a), "replicas_min_cost_usd_per_hour", "cost_usd_per_hour",
                                   "reason")))

    def replica_plan(self) -> Sample:
        """One row per scenario group: its fewest replicas and their cost (the rows at
        replicas_min; a group with none keeps its first row, with unbounded cost)."""
        need = {"replicas_min", "replicas_min_cost_usd_per_hour", "group_id"}
        if not need <= self.optimum_cols:
            return Sample({}, 0, 0, notes=["optimum.parquet has no replicas_min columns"])
        sel = self._select(self.plan_columns(), self.optimum_cols)
        flag = "is_replicas_min" if "is_replicas_min" in self.optimum_cols else "true"
        total = int(self.scalar(f"SELECT count(DISTINCT group_id) FROM {self.optimum_src}"))
        cols = self.query(
            f"SELECT {sel} FROM {self.optimum_src} "
            f"QUALIFY row_number() OVER (PARTITION BY group_id ORDER BY {flag} DESC, row_id) = 1 "
            f"ORDER BY group_id LIMIT {PLAN_BUDGET}")
        notes = [] if total <= PLAN_BUDGET else [f"the first {PLAN_BUDGET:,} of {total:,} scenario groups"]
        return Sample(cols, len(cols["group_id"]), total, notes=notes)

    def layouts(self) -> Sample | None:
        """The layout verdict per scenario group (one row each: `sweep.decide.layouts`'
        figure columns); None when the run's optimum.parquet has none."""
        from sweep.decide.layouts import FIGURE_COLUMNS, VERDICT_COLUMN

        if VERDICT_COLUMN not in self.optimum_cols:
            return None
        wanted = ["group_id", "model", "gpu", "arrival_rps", *self.varying, *FIGURE_COLUMNS]
        sel = self._select(list(dict.fromkeys(wanted)), self.optimum_cols)
        total = int(self.scalar(f"SELECT count(DISTINCT group_id) FROM {self.optimum_src}"))
        cols = self.query(f"SELECT {sel} FROM {self.optimum_src} "
                          "QUALIFY row_number() OVER (PARTITION BY group_id ORDER BY row_id) = 1 "
                          f"ORDER BY group_id LIMIT {PLAN_BUDGET}")
        notes = [] if total <= PLAN_BUDGET else [f"the first {PLAN_BUDGET:,} of {total:,} scenario groups"]
        return Sample(cols, len(cols["group_id"]), total, notes=notes)

    def schedule(self) -> Sample | None:
        """schedule.parquet's first `SCHEDULE_GROUPS` schedule groups, every hour; None when
        the run has no schedule (its grid had no [schedule])."""
        path = self.path / "schedule.parquet"
        if not path.exists():
            return None
        src = f"read_parquet({_sql_str(str(path))})"
        total = int(self.scalar(f"SELECT count(DISTINCT schedule_group_id) FROM {src}"))
        cols = self.query(f"SELECT * FROM {src} WHERE schedule_group_id < {SCHEDULE_GROUPS} "
                          "ORDER BY schedule_group_id, hour")
        shown = len(np.unique(cols["schedule_group_id"])) if cols else 0
        notes = [] if total <= SCHEDULE_GROUPS else [f"the first {SCHEDULE_GROUPS} of {total:,} schedule groups"]
        return Sample(cols, shown, total, notes=notes)

    def search(self) -> Sample:
        if self.search_path is None:
            return Sample({}, 0, 0)
        have = set(pq.read_schema(self.search_path).names)
        wanted = ("study_name", "objective", "rank", "meets_constraints", "reason", "model", "gpu",
                  "gpus_per_replica", "replicas", *self.row_axes, "arrival_rps",
                  *(lat for lat, _ in self.model.slo_checks), "cost_usd_per_hour", "trials", "feasible_trials",
                  "enumerable", "exact_value", "gap_rel", "found_exact")
        src = f"read_parquet({_sql_str(str(self.search_path))})"
        cols = self.query(f"SELECT {self._select(wanted, have)} FROM {src} ORDER BY study_name, rank LIMIT 200")
        return Sample(cols, len(cols.get("study_name", [])), len(cols.get("study_name", [])))

    # ------------------------------------------------------------------ simulator

    def simulated(self, spec: AgainstSimulator, budget: int = SIM_BUDGET) -> Sample:
        """The points an analytic-against-simulated figure draws (a repeatable sample above
        `budget`), from points/ or else frontier.parquet."""
        src, have, where = self._with(spec.needs)
        if src is None:
            return Sample({}, 0, 0, notes=[spec.missing])
        total = int(self.scalar(f"SELECT count(*) FROM {src}"))
        sample = f" USING SAMPLE reservoir({budget} ROWS) REPEATABLE (7)" if total > budget else ""
        wanted = ("point_id", "model", "gpu", "arrival_rps", "replicas", *self.row_axes, "stable", *spec.columns(),
                  "percentile")
        cols = self.query(f"SELECT {self._select(list(dict.fromkeys(wanted)), have)} FROM {src}{sample}")
        notes = [] if not sample else [f"a repeatable sample of {budget:,} of {total:,} simulated points"]
        if where == "frontier.parquet":
            notes.append("from frontier.parquet (this run wrote no points/): feasible Pareto points only")
        return Sample(cols, len(cols["point_id"]), total, source=where, notes=notes)

    def _with(self, needed: tuple[str, ...]) -> tuple[str | None, set[str], str]:
        if self.points_src is not None and set(needed) <= self.points_cols:
            return self.points_src, self.points_cols, "points/"
        if set(needed) <= self.frontier_cols:
            return self.frontier_src, self.frontier_cols, "frontier.parquet"
        return None, set(), ""

    # ------------------------------------------------------------------ every point

    def sampled(self, needs: Sequence[str], wanted: Sequence[str], budget: int = POINTS_BUDGET) -> Sample:
        """Points with every `needs` column (a repeatable sample above `budget`), their
        `wanted` columns, from points/ or else frontier.parquet."""
        src, have, where = self._with(tuple(needs))
        if src is None:
            return Sample({}, 0, 0, notes=[f"needs the columns {', '.join(needs)}"])
        total = int(self.scalar(f"SELECT count(*) FROM {src}"))
        sample = f" USING SAMPLE reservoir({budget} ROWS) REPEATABLE (7)" if total > budget else ""
        cols = self.query(f"SELECT {self._select(list(dict.fromkeys((*needs, *wanted))), have)} FROM {src}{sample}")
        notes = [] if not sample else [f"a repeatable sample of {budget:,} of {total:,} points"]
        if where == "frontier.parquet":
            notes.append("from frontier.parquet (this run wrote no points/): Pareto points only")
        return Sample(cols, len(cols[needs[0]]), total, source=where, notes=notes)


def answer_column(model: ServingModel, prefix: str, column: str) -> str | None:
    """The optimum.parquet column of answer `prefix` that carries point column `column`
    (`Decisions.answer_fields`), or None when the answers do not carry it."""
    for suffix, source, *_ in model.decisions.answer_fields:
        if source == column:
            return answer_name(prefix, suffix)
    return None


def by_pair(cols: Columns) -> list[tuple[str, str, np.ndarray]]:
    """(model, gpu, the row indices in their order) for each model x GPU pair, by name."""
    key = row_keys(cols, ["model", "gpu"]).astype(str)
    names, inverse = np.unique(key, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(names) + 1))
    out: list[tuple[str, str, np.ndarray]] = []
    for i, n in enumerate(names):
        model, gpu = str(n).split("|", 1)
        out.append((model, gpu, order[bounds[i]:bounds[i + 1]]))
    return out


def _spread_evenly(items: np.ndarray, k: int) -> np.ndarray:
    """k of `items` (or all), evenly spaced through them."""
    if len(items) <= k:
        return items
    return items[np.floor((np.arange(k) + 0.5) * len(items) / k).astype(int)]


def _row_keys(cols: Columns, axes: list[str]) -> np.ndarray:
    """One string per row naming its values of `axes` (a configuration's identity)."""
    return row_keys(cols, [a for a in axes if a in cols])


def row_keys(cols: Columns, names: Sequence[str]) -> np.ndarray:
    """Vectorised 'v1|v2|...' per row of the named columns (numbers to 12 digits).

    Each column is formatted once per distinct value and each distinct combination joined
    once (a fleet's optimum has 10^5 rows but a few thousand configurations)."""
    n = len(next(iter(cols.values()))) if cols else 0
    if not names:
        return np.full(n, "", dtype=object)
    texts, codes = [], []
    for name in names:
        v = cols[name]
        uniq, inverse = np.unique(v, return_inverse=True)
        texts.append(np.char.mod("%.12g", uniq) if v.dtype.kind == "f" else uniq.astype(str))
        codes.append(inverse.reshape(-1))
    combos, which = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
    joined = np.array(["|".join(str(t[c]) for t, c in zip(texts, combo)) for combo in combos.tolist()], dtype=object)
    return joined[which.reshape(-1)]


def _sample_rows(idx: Columns, sizes: np.ndarray, budget: int) -> np.ndarray:
    """Whole frontier rows, at most `budget` points in all, the same share for every
    model x GPU pair (unused shares pass on), in a fixed pseudo-random order."""
    rows = idx["row_id"].astype(np.int64)
    keep = sizes > 0
    rows, sizes = rows[keep], sizes[keep].astype(np.int64)
    pairs = by_pair({"model": idx["model"][keep], "gpu": idx["gpu"][keep]})
    scramble = (rows * 2654435761) % (1 << 32)
    chosen: list[np.ndarray] = []
    left = budget
    for i, (_, _, members) in enumerate(pairs):
        share = left // (len(pairs) - i)
        members = members[np.argsort(scramble[members], kind="stable")]
        picked, used = [], 0
        for j, size in zip(members.tolist(), sizes[members].tolist()):
            if used + size <= share:
                picked.append(j)
                used += size
        if not picked and len(members) and int(sizes[members].min()) <= left:
            j = int(members[np.argmin(sizes[members])])  # every pair shows at least one row
            picked, used = [j], int(sizes[j])
        chosen.append(rows[picked])
        left -= used
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)
