"""The answers of a finished run, for a person at a terminal: what `sweep run` ends with and
what `sweep show RUN_DIR` prints.

Everything is read from the run's files (`manifest.json`, `optimum.parquet`,
`search.parquet`, `points/`), through the serving model's declarations (its decision axes,
answer fields, SLO checks and `views`: the SLO latencies' short names, what `inf` means on a
knob), so a new serving model's runs print the same way. Reads are
bounded: `optimum.parquet` with a few projected columns, `points/` only when the selection
is small.

- **Decisions**, per scenario group (top N, cheapest first): the recommendation
  (`sweep.decide.recommend`: the cheapest configuration meeting every SLO with rho <=
  rho_max), its replicas, GPUs, cap and knobs (headers name the engine's flags), the latency
  checked against the SLO (its latency model and percentile named), its price per hour and
  per million tokens or requests, the `[uncertainty]` / `[sensitivity]` columns the grid
  asked for, and the runner-up. Groups with no such configuration are counted with the
  constraint that binds. Tables fit the console (`sweep.cli.fit`): no value is ever cut.
- **Search answers** (`[search]`): each study's best trials with their searched values,
  checked latency, cost and gap to the exact optimum.
- **Where the full tables are**, and a query to start from.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.cli.fit import fit_table
from sweep.decide import layouts as L
from sweep.decide.recommend import PREFIXES, answer_name, band_columns, group_order, shown_columns
from sweep.errors import SweepError
from sweep.io.published import check_run
from sweep.models import ServingModel, get_model
from sweep.models.views import Caveat

#: Scenario groups shown by default (the rest are counted).
TOP = 10
#: A selection of at most this many points prints the per-point table.
POINT_TABLE_ROWS = 64


class ShowError(SweepError):
    """The folder is not a finished run, or a filter names no column."""


@dataclass
class RunFolder:
    """A finished run folder: its manifest, its model and its files."""

    path: Path
    manifest: dict[str, Any]
    model: ServingModel
    filters: dict[str, str] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | Path, filters: Mapping[str, str] | None = None) -> RunFolder:
        path = Path(path)
        manifest = check_run(path)  # one line naming the damaged file, before anything is read
        serving, latency_model = manifest.get("serving"), manifest.get("latency_model")
        try:  # a manifest older than serving modes is the default mode's
            model = get_model(serving, latency_model) if serving else get_model(latency_model=latency_model)
        except KeyError as exc:
            raise ShowError(f"{path / 'manifest.json'}: {exc.args[0]} (is the serving model registered?)") from None
        return cls(path, manifest, model, dict(filters or {}))

    # ------------------------------------------------------------------ facts

    @property
    def latency_model(self) -> str:
        return str(self.manifest.get("latency_model", self.model.name))

    @property
    def latency_name(self) -> str:
        """The latency model as labels name it (`batcher model`)."""
        return self.model.views.latency_name(self.latency_model)

    @property
    def varying(self) -> list[str]:
        """Scenario axes with more than one value (the decision axes excluded), and a pool's
        own GPU wherever the grid names one (`part_gpu_keys`: it differs from `gpu`)."""
        skip = {*self.model.row_axes, *self.model.group_axes}
        return [k for k, n in self.manifest.get("axes", {}).items()
                if (n > 1 or k in self.model.part_gpu_keys) and k not in skip]

    def grid_doc(self) -> dict[str, Any]:
        try:
            return tomllib.loads(self.manifest.get("grid", {}).get("toml", ""))
        except tomllib.TOMLDecodeError:
            return {}

    def placeholders(self) -> list[str]:
        """Searched keys that [grid] leaves out: the grid beside the search evaluated them at a
        placeholder value, so its decisions are not the search's answers."""
        doc = self.grid_doc()
        searched = list(doc.get("search", {}).get("params", {}))
        return [k for k in searched if k not in doc.get("grid", {})]

    # ------------------------------------------------------------------ reads

    def _filter(self, table: pa.Table) -> pa.Table:
        for key, text in self.filters.items():
            if key not in table.column_names:
                raise ShowError(f"{self.path}: filter {key}={text}: no column {key!r}; filter on the scenario "
                                f"columns, e.g. {', '.join(self.varying[:3] or ['model', 'gpu'])}")
            col = table.column(key)
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            if pa.types.is_string(col.type):
                mask = pc.equal(col, text)
            elif pa.types.is_boolean(col.type):
                mask = pc.equal(col, text.lower() in ("1", "true", "yes"))
            else:
                value = _number(key, text)
                mask = pc.is_null(col) if math.isinf(value) else pc.equal(col.cast(pa.float64()), value)
            table = table.filter(pc.fill_null(mask, False))
        return table

    def optimum(self, columns: Sequence[str]) -> pa.Table:
        path = self.path / "optimum.parquet"
        present = set(pq.read_schema(path).names)
        wanted = [c for c in dict.fromkeys([*columns, *self.filters]) if c in present]
        return self._filter(pq.read_table(path, columns=wanted))

    def search(self) -> pa.Table | None:
        path = self.path / "search.parquet"
        return self._filter(pq.read_table(path)) if path.exists() else None

    def points(self, limit: int = POINT_TABLE_ROWS) -> pa.Table | None:
        """The selection's points when there are at most `limit` of them (else None)."""
        folder = self.path / "points"
        if not folder.is_dir() or not any(folder.rglob("*.parquet")):
            return None
        dataset = ds.dataset(folder, format="parquet", partitioning="hive")
        if dataset.count_rows() > 4 * limit and not self.filters:
            return None
        expr = None
        for key, text in self.filters.items():
            if key not in dataset.schema.names:
                return None
            field_type = dataset.schema.field(key).type
            if pa.types.is_dictionary(field_type) or pa.types.is_string(field_type):
                term = ds.field(key) == text
            else:
                value = _number(key, text)
                term = ds.field(key).is_null() if math.isinf(value) else ds.field(key) == value
            expr = term if expr is None else expr & term
        scanner = dataset.scanner(filter=expr)
        table = scanner.head(limit + 1)
        return table if table.num_rows <= limit else None


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ShowError(f"filter {key}={text}: {key} is numeric; give a number, e.g. {key}=100") from None


def parse_filters(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ShowError(f"filter {item!r}: expected key=value, e.g. model=llama-3.1-70b or arrival_rps=100")
        out[key.strip()] = value.strip()
    return out


def to_host(table: pa.Table) -> dict[str, np.ndarray]:
    """Arrow -> NumPy for printing: strings decoded, NULL numbers as +inf (unbounded / none)."""
    out: dict[str, np.ndarray] = {}
    for name, col in zip(table.column_names, table.columns):
        t = col.type
        if pa.types.is_dictionary(t):
            col, t = col.cast(t.value_type), t.value_type
        if pa.types.is_boolean(t):
            out[name] = np.asarray(col.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
        elif pa.types.is_integer(t) and col.null_count == 0:
            out[name] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)
        elif pa.types.is_integer(t) or pa.types.is_floating(t):
            out[name] = np.asarray(col.cast(pa.float64()).fill_null(math.inf).to_numpy(zero_copy_only=False),
                                   dtype=np.float64)
        else:
            out[name] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=object)
    return out


# --------------------------------------------------------------------------- formatting


def fmt(x: Any, digits: int = 1) -> str:
    """A number for a cell: unbounded or missing reads `inf` / `-`; no NumPy warning ever."""
    if isinstance(x, str):
        return x
    x = float(x)
    if math.isnan(x):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if float(x).is_integer() and abs(x) < 1e15 and digits == 0:
        return f"{int(x)}"
    return f"{x:,.{digits}f}"


def latency_label(name: str, percentile: Any) -> str:
    """The latency the SLO was checked against, named (`name`: the latency model as labels
    name it, `Views.latency_name`): `P99 gaussian`, `P99.9 simulated`, `P(q) batcher model`."""
    if isinstance(percentile, int | float):
        q: list[float] = [float(percentile)]
    else:
        q = sorted({float(v) for v in ([] if percentile is None else percentile) if math.isfinite(float(v))})
    if len(q) == 1:
        return f"P{100 * q[0]:g} {name}"
    return f"P(q) {name}"


def _field(model: ServingModel, source: str) -> str | None:
    """The answer suffix that carries point column `source` (None: the answers do not)."""
    for suffix, src, *_ in model.decisions.answer_fields:
        if src == source:
            return suffix
    return None


def _scenario_cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    return fmt(value, 0) if float(value).is_integer() else f"{float(value):g}"


@dataclass(frozen=True)
class AnswerView:
    """How a model's answers read in a table (from its declarations and `views`): the cap,
    the knobs, each SLO check (its latency answer field and SLO column), and the frontier
    objective the checks do not cover."""

    cap: str  # answer suffix of the cap ("" for the cap itself)
    cap_column: str  # the cap's point column (the table's first header)
    knobs: tuple[tuple[str, str, str, str], ...]  # (answer suffix, point column, dtype, what inf means) per knob
    checks: tuple[tuple[str, str, str], ...]  # (name, answer suffix, SLO column)
    # (point column, answer suffix): the frontier's second objective when no SLO checks it
    extra: tuple[str, str] | None

    @classmethod
    def of(cls, model: ServingModel) -> AnswerView:
        d, views = model.decisions, model.views
        fields = {src: (sfx, dtype) for sfx, src, dtype, _ in d.answer_fields}
        knobs = tuple((fields[k][0], k, fields[k][1], views.axis(k).inf)
                      for k in d.knobs if k in fields and fields[k][0])
        checks = tuple((views.check_name(lat), sfx, slo) for lat, slo in model.slo_checks
                       if (sfx := _field(model, lat)) is not None)
        checked = {lat for lat, _ in model.slo_checks}
        extra_sfx = _field(model, d.latency) if d.latency not in checked else None
        return cls(_field(model, d.cap) or "", d.cap, knobs, checks,
                   (d.latency, extra_sfx) if extra_sfx is not None else None)

    def columns(self, prefix: str) -> list[str]:
        """The optimum.parquet columns of answer `prefix` this view reads."""
        out = [answer_name(prefix, self.cap), *(answer_name(prefix, sfx) for _, sfx, _ in self.checks)]
        out += [answer_name(prefix, knob[0]) for knob in self.knobs]
        if self.extra is not None:
            out.append(answer_name(prefix, self.extra[1]))
        return out

    def slos(self) -> list[str]:
        return [slo for *_, slo in self.checks]

    def active(self, rows: Mapping[str, np.ndarray], picks: Iterable[int]) -> list[tuple[str, str, str]]:
        """The checks whose SLO some shown row sets (an SLO of inf, NULL in the file, is none)."""
        keep = [c for c in self.checks if any(math.isfinite(float(rows[c[2]][i])) for i in picks)]
        return keep or list(self.checks[:1])

    def headers(self, label: str, checks: Sequence[tuple[str, str, str]]) -> list[str]:
        heads = [self.cap_column, *(knob[1] for knob in self.knobs)]
        q = label.split(" ")[0]
        for name, _, _ in checks:
            heads += [f"{label} ms", "SLO ms"] if len(self.checks) == 1 else [f"{name} {q} ms", f"{name} SLO ms"]
        if self.extra is not None:
            heads.append(self.extra[0])
        return heads

    def cells(self, rows: Mapping[str, np.ndarray], i: int, prefix: str,
              checks: Sequence[tuple[str, str, str]]) -> list[str]:
        batch = rows[answer_name(prefix, self.cap)][i]
        out = [fmt(batch, 0)]
        for sfx, _, dtype, inf in self.knobs:
            v = float(rows[answer_name(prefix, sfx)][i])
            if math.isinf(float(batch)):
                out.append("-")
            elif math.isinf(v):
                out.append(inf)
            else:
                out.append(fmt(v, 0) if dtype == "int64" else fmt(v, 1))
        for _, sfx, slo in checks:
            out += [fmt(rows[answer_name(prefix, sfx)][i]), fmt(rows[slo][i])]
        if self.extra is not None:
            out.append(fmt(rows[answer_name(prefix, self.extra[1])][i]))
        return out


# --------------------------------------------------------------------------- decisions

#: The answer the decisions table shows per scenario group, and its runner-up.
REC, RUNNER = PREFIXES


def engine_legend(model: ServingModel, keys: Sequence[str]) -> str:
    """`engine flags: batch_size = max_num_seqs, ...` for the columns `keys` the serving
    engine names differently ("" when none does)."""
    pairs = [f"{k} = {e}" for k in dict.fromkeys(keys) if (e := model.views.engine(k))]
    return "engine flags: " + ", ".join(pairs) if pairs else ""


def _runner_up(run: RunFolder, view: AnswerView, rows: Mapping[str, np.ndarray], i: int) -> str:
    """The runner-up in one short cell: what differs from the recommendation (its cap and
    knobs by symbol, its group-axis values), then its cost or `same price`; `none`."""
    views, d = run.model.views, run.model.decisions
    if math.isinf(float(rows[answer_name(RUNNER, view.cap)][i])):
        return "none"
    fields = [(views.axis(d.cap).symbol or d.cap, view.cap, "int64", "inf"),
              *((views.axis(key).symbol or key, sfx, dtype, inf) for sfx, key, dtype, inf in view.knobs),
              *((g, "_" + g, "int64", "inf") for g in d.group_axes if answer_name(RUNNER, "_" + g) in rows)]
    parts = []
    for name, sfx, dtype, inf in fields:
        v, mine = float(rows[answer_name(RUNNER, sfx)][i]), float(rows[answer_name(REC, sfx)][i])
        if v != mine:
            parts.append(f"{name} {inf if math.isinf(v) else fmt(v, 0 if dtype == 'int64' else 1)}")
    cost, rec_cost = answer_name(RUNNER, "_cost_usd_per_hour"), answer_name(REC, "_cost_usd_per_hour")
    price = ("same price" if float(rows[cost][i]) == float(rows[rec_cost][i])
             else f"{fmt(rows[cost][i], 2)} USD/h")
    return f"{', '.join(parts) or 'the same'} ({price})"


def print_decisions(run: RunFolder, console: Console, top: int = TOP) -> None:
    """Per scenario group, cheapest first: the recommendation (the cheapest configuration
    meeting every SLO with rho <= rho_max), its price, the planning columns the grid asked
    for, and the runner-up; then the groups without one, with the constraint that binds."""
    model, d = run.model, run.model.decisions
    view = AnswerView.of(model)
    names = pq.read_schema(run.path / "optimum.parquet").names
    if "is_recommended" not in names:
        raise ShowError(f"{run.path / 'optimum.parquet'}: written by a sweep without the recommendation columns; "
                        "run the grid again (sweep run GRID --out DIR --force)")
    shown_cols = shown_columns(model, REC, names)
    bands = band_columns(model, REC, names)
    groups_at = [answer_name(REC, "_" + g) for g in d.group_axes]
    runner = [answer_name(RUNNER, view.cap), *(answer_name(RUNNER, k[0]) for k in view.knobs),
              *(answer_name(RUNNER, "_" + g) for g in d.group_axes), answer_name(RUNNER, "_cost_usd_per_hour")]
    caveats = _caveats(run)
    wanted = ["group_id", *d.group_axes, d.size, "reason", "group_reason", "is_recommended", "percentile",
              "cost_usd_per_hour", *view.slos(), *view.columns(REC), *groups_at, *(c for _, c, _ in shown_cols),
              *(c for b in bands for c in b[1:]), *runner, *view.columns("b_latency_opt"), *run.varying,
              *(col for _, col in caveats)]
    table = run.optimum(wanted)
    if table.num_rows == 0:
        console.print("decisions: no optimum row matches the filters" if run.filters
                      else "decisions: optimum.parquet is empty")
        return
    rows = to_host(table)
    groups = np.unique(rows["group_id"])
    order = group_order(rows, model, np.flatnonzero(rows["is_recommended"]))
    shown = order[:top]
    label = latency_label(run.latency_name, rows.get("percentile"))
    slo = "the SLO" if len(view.checks) == 1 else "every SLO"
    title = (f"recommendation per scenario group, cheapest first: the cheapest configuration meeting {slo} "
             f"(checked against {label}) with {d.utilisation} <= rho_max")
    checks = view.active(rows, shown)
    gpus = [c for role, c, _ in shown_cols if role == "gpus"]
    rest = [(c, lab) for role, c, lab in shown_cols if role != "gpus"]
    heads = [*run.varying, *(g for g in d.group_axes if answer_name(REC, "_" + g) in rows),
             *(["GPUs"] if gpus else []), *view.headers(label, checks),
        *(lab for _, lab in rest), *(f"{run.model.views.check_name(lat)} p5-p95 ms" for lat, _, _ in bands),
        "runner-up"]
    caveats = [(c, col) for c, col in caveats if col in rows]
    flagged = {c.flag: [int(i) for i in shown if not bool(rows[col][i])] for c, col in caveats}
    marked = {i for hits in flagged.values() for i in hits}
    cells_of = []
    for i in shown:
        cells = [_scenario_cell(rows[k][i]) for k in run.varying]
        cells += [fmt(rows[c][i], 0) for c in groups_at if c in rows]
        cells += [fmt(rows[c][i], 0) for c in gpus]
        answer = view.cells(rows, int(i), REC, checks)
        if int(i) in marked:  # the cap of an answer that rests on a flagged point
            answer[0] += "*"
        cells += answer
        cells += [fmt(rows[c][i], 3 if "/M" in lab or "P(" in lab else 2 if lab == "USD/h" else 1)
                  for c, lab in rest]
        cells += [f"{fmt(rows[lo][i])}-{fmt(rows[hi][i])}" for _, lo, hi in bands]
        cells.append(_runner_up(run, view, rows, int(i)))
        cells_of.append(cells)
    if len(shown):
        legend = engine_legend(model, [*run.varying, *d.group_axes, view.cap_column, *(k[1] for k in view.knobs)])
        fit_table(console, title, heads, cells_of, keep=(view.cap_column,), left=("runner-up",),
                  legend=legend)
    for c, _ in caveats:
        if flagged[c.flag]:
            console.print("* " + c.text.format(n=len(flagged[c.flag]), shown=len(shown)), markup=False,
                          soft_wrap=True)
    found = np.unique(rows["group_id"][order])
    if len(found) > len(shown):
        console.print(f"... {len(found) - len(shown):,} more scenario groups with an answer (--top N shows more)")
    missing = np.setdiff1d(groups, found)
    if len(missing):
        # Why: the constraint that binds in each group (group_reason: the furthest any row got).
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i in np.flatnonzero(np.isin(rows["group_id"], missing)):
            g = int(rows["group_id"][i])
            first.setdefault(g, int(i))
            if g not in last or rows[d.size][i] > rows[d.size][last[g]]:
                last[g] = int(i)
        reasons = Counter(str(rows["group_reason"][i]) for i in first.values())
        why = ", ".join(f"{r} {n:,}" for r, n in reasons.most_common())
        words = run.model.views
        console.print(f"{len(missing):,} of {len(groups):,} scenario groups: no {words.size_count} of the grid meets "
                      f"{slo} with {d.utilisation} <= rho_max (the constraint that binds: {why})")
        room = top - len(shown)
        # the closest configuration where there is one: a feasible point that misses the SLO
        near = [i for i in last.values() if math.isfinite(float(rows[answer_name("b_latency_opt", view.cap)][i]))]
        if room > 0 and near:
            picks = sorted(near, key=lambda i: (float(rows["cost_usd_per_hour"][i]), int(rows["group_id"][i])))
            _closest(run, view, rows, picks[:room], label, console)


def _caveats(run: RunFolder) -> list[tuple[Caveat, str]]:
    """The model's caveats (`Views.caveats`) that apply to this run, each with the
    optimum.parquet column of its flag at the recommendation."""
    out = []
    for c in run.model.views.caveats:
        sfx = _field(run.model, c.flag)
        if sfx is not None and (not c.latency_models or run.latency_model in c.latency_models):
            out.append((c, answer_name(REC, sfx)))
    return out


def _closest(run: RunFolder, view: AnswerView, rows: dict[str, np.ndarray], picks: list[int], label: str,
             console: Console) -> None:
    """Groups without an answer but with a feasible point, at their most replicas (cheapest
    first): why, and the point with the lowest mean latency (b_latency_opt)."""
    d = run.model.decisions
    checks = view.active(rows, picks)
    heads = [*run.varying, *d.group_axes, "reason",
             *view.headers(label, checks), "USD/h"]
    cells_of = []
    for i in picks:
        cells = [_scenario_cell(rows[k][i]) for k in run.varying]
        cells += [*(fmt(rows[g][i], 0) for g in d.group_axes), str(rows["group_reason"][i]),
                  *view.cells(rows, i, "b_latency_opt", checks), fmt(rows["cost_usd_per_hour"][i], 2)]
        cells_of.append(cells)
    fit_table(console, f"without an answer, at the {run.model.views.size_most}: the {d.cap} with the lowest "
                       f"{d.mean_latency} (b_latency_opt)", heads, cells_of, keep=("reason", view.cap_column),
              left=("reason",))


# --------------------------------------------------------------------------- search


def print_search(run: RunFolder, console: Console, top: int = TOP) -> None:
    table = run.search()
    if table is None:
        return
    if table.num_rows == 0:
        console.print("search: no answer matches the filters")
        return
    meta = json.loads((table.schema.metadata or {}).get(b"sweep", b"{}")).get("search", {})
    searched = [k for k in meta.get("searched", []) if k in table.column_names]
    rows = to_host(table)
    label = latency_label(run.latency_name, rows.get("percentile"))
    q = label.split(" ")[0]
    order = np.lexsort((rows["rank"], rows["study_name"]))
    # each SLO check the answers carry (a point column and its SLO), those some answer sets
    views = run.model.views
    checks = [(views.check_name(lat), lat, slo) for lat, slo in run.model.slo_checks if lat in rows and slo in rows]
    checks = [c for c in checks if any(math.isfinite(float(rows[c[2]][i])) for i in order[:top])] or checks[:1]
    heads = [h for name, _, _ in checks for h in ((f"{label} ms", "SLO ms") if len(run.model.slo_checks) == 1
                                                   else (f"{name} {q} ms", f"{name} SLO ms"))]
    t = Table(title=f"search: each study's best trials (search.parquet; latency checked: {label})",
              title_justify="left")
    for name in ("study", "objective", "value", *searched, *heads, "USD/h", "meets", "gap"):
        t.add_column(name, justify="left" if name in ("study", "objective", "meets") else "right")
    for i in order[:top]:
        study = str(rows["study_name"][i]).split("/")
        scenario = study[1] if len(study) > 2 else "-"
        gap = ("n/a" if not rows["enumerable"][i]
               else "exact" if rows["found_exact"][i] else f"{100 * float(rows['gap_rel'][i]):.1f}%")
        value = float(rows["objective_value"][i])
        cells = [escape(scenario), str(rows["objective"][i]), f"{value:g}" if math.isfinite(value) else "-"]
        for k in searched:
            v = rows[k][i]
            unlimited = k in run.model.decisions.knobs and not isinstance(v, str) and math.isinf(float(v))
            cells.append(views.axis(k).inf if unlimited else escape(_scenario_cell(v)))
        cells += [c for _, lat, slo in checks for c in (fmt(rows[lat][i]), fmt(rows[slo][i]))]
        cells += [fmt(rows["cost_usd_per_hour"][i], 2),
                  "yes" if rows["meets_constraints"][i] else escape(str(rows["reason"][i]) or "no"), gap]
        t.add_row(*cells)
    console.print(t)
    if table.num_rows > top:
        console.print(f"... {table.num_rows - top:,} more answers (--top N shows more)")


# --------------------------------------------------------------------------- footer


def print_where(run: RunFolder, console: Console) -> None:
    """Where the full tables are, and a query to start from."""
    rows = run.manifest.get("rows", {})
    parts = [f"{run.path}/optimum.parquet ({rows.get('optimum', 0):,} rows)",
             f"{run.path}/frontier.parquet ({rows.get('frontier', 0):,} rows)"]
    if rows.get("points_written"):
        parts.append(f"{run.path}/points/ ({rows['points_written']:,} rows)")
    if (run.path / "search.parquet").exists():
        parts.append(f"{run.path}/search.parquet")
    console.print("full tables: " + ", ".join(parts), markup=False, soft_wrap=True)
    console.print(f"more: sweep show {run.path} [key=value ...] [--top N]; sweep report {run.path}; "
                  f"duckdb -c \"SELECT * FROM '{run.path}/optimum.parquet' WHERE is_recommended\"",
                  markup=False, soft_wrap=True)
    from sweep.deploy.plan import NEEDED

    if set(NEEDED) <= {c.name for c in run.model.columns}:  # a model sweep deploy can deploy
        console.print(f"deploy: sweep deploy {run.path} [key=value ...] prints the recommendation's engine launch and "
                      "benchmark commands and the figures the benchmark should print (docs/deploy.md)",
                      markup=False, soft_wrap=True)


def print_answers(run: RunFolder, console: Console, top: int = TOP) -> None:
    """The decisions (or, for a search, its answers first), and where the tables are."""
    if (run.path / "search.parquet").exists():
        print_search(run, console, top)
        placeholders = run.placeholders()
        if placeholders:
            console.print(f"the [grid] beside the search evaluated {', '.join(placeholders)} at a placeholder value "
                          "(its first searched value): its decisions are not the search's answers", markup=False)
        else:
            print_decisions(run, console, top)
    else:
        print_decisions(run, console, top)
    print_layouts(run, console, top)
    print_where(run, console)


def print_layouts(run: RunFolder, console: Console, top: int = TOP) -> None:
    """A run whose optimum.parquet carries a layout verdict (`sweep.decide.layouts`): per
    scenario group, the recommended layout against the other one."""
    names = pq.read_schema(run.path / "optimum.parquet").names
    if L.VERDICT_COLUMN not in names:
        return
    table = run.optimum(list(dict.fromkeys([*L.TABLE_COLUMNS, *run.varying])))
    if table.num_rows == 0:
        return
    rows = to_host(table)
    _, first = np.unique(rows["group_id"], return_index=True)
    shown = first[:top]
    p = _p_label(rows)
    heads = [*run.varying, *L.TABLE_TEXT, *(h.replace(" P ", f" {p} ") for h, _, _ in L.TABLE_CELLS)]
    cells_of = []
    for i in shown:
        row = {k: rows[k][i] for k in rows}
        cells = [_scenario_cell(rows[k][i]) for k in run.varying]
        cells += L.verdict_cells(row)
        cells += [fmt(rows[c][i], d) if math.isfinite(float(rows[c][i])) else "-" for _, c, d in L.TABLE_CELLS]
        cells_of.append(cells)
    fit_table(console, L.TABLE_TITLE, heads, cells_of, left=L.TABLE_TEXT)
    if len(first) > len(shown):
        console.print(f"... {len(first) - len(shown):,} more scenario groups (--top N shows more)")


def _p_label(rows: Mapping[str, np.ndarray]) -> str:
    """P99 (the run's percentile, when it has one) for a header."""
    qs: Any = np.unique(rows["percentile"]) if "percentile" in rows else []
    return f"P{100 * float(qs[0]):g}" if len(qs) == 1 else "P"


def run_grid_spec(run_dir: Path, catalog: Any) -> Any:
    """The grid a finished run was made from (its text, kept in the manifest), once the folder
    checks whole (`sweep explain RUN_DIR`, `sweep predict-benchmark RUN_DIR`, `sweep deploy`)."""
    from sweep.grid.load import build
    from sweep.io.published import DamagedRunError

    manifest = check_run(run_dir)
    grid = manifest.get("grid")
    grid = grid if isinstance(grid, dict) else {}
    text = grid.get("toml")
    if not text:
        raise DamagedRunError(f"{run_dir / 'manifest.json'}: keeps no grid text (grid.toml); use the grid file "
                              f"instead (e.g. sweep explain GRID --point ID)")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DamagedRunError(f"{run_dir / 'manifest.json'}: grid.toml is not valid TOML ({exc}); use the grid "
                              "file instead (e.g. sweep explain GRID --point ID)") from None
    return build(doc, source=str(grid.get("file") or run_dir / "manifest.json"), text=text, catalog=catalog)
