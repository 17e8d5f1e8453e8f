"""The replica schedule (SPEC 12, time of day): replicas per hour meeting the SLO, exactly.

Inputs are the run's (scenario group, replicas) rows: whether some configuration of the row
(a batch, a window or token budget: the row axes) meets the SLO with rho <= rho_max, the
same test as `replicas_min` (SPEC 6, `sweep.decide.reduce`). The profile's hourly rates are
the grid's `arrival_rps` axis, so a *schedule group* is a scenario group without
`arrival_rps`, and hour h of it reads the scenario group at that hour's rate.

For one schedule group, with the replica counts `v` (the grid's `replicas` axis, plus 0,
allowed only in hours without traffic) and `ok[h, j]` (count `v[j]` meets the SLO at hour
h's rate), the plan is a cyclic sequence `r[0..H-1]` (the day or week repeats) minimising

    sum_h  r[h] + warmup_hours * max(0, r[h] - r[h-1])          (replica-hours per period)

subject to `ok[h, r[h]]` and, with a ramp k, `|r[h] - r[h-1]| <= k` (h - 1 taken mod H).
Cost and GPU-hours are this times the group's price and GPUs per replica, the same for every
hour, so the same sequence minimises all three.

Why the answer is exact (`plan_cycle`): fix the count at hour 0 to `v[s]`. The objective is
a sum of terms each depending on one pair (r[h-1], r[h]), so dynamic programming over hours
(`best[h][b] = min_a best[h-1][a] + step(a, b)`) gives the least cost of every path from
`v[s]` at hour 0 to each count at hour H-1 (Bellman's principle: any prefix of an optimal
path is optimal); closing the cycle adds step(r[H-1], v[s]). The minimum over every `s` is
the minimum over every feasible cyclic sequence. `tests/test_decide_schedule.py` checks it
against enumeration of every sequence on small cases. Cost: O(H n^3) for n counts.

Without a ramp and warm-up the hours are independent and `r[h]` is the fewest replicas
meeting the SLO at hour h (`replicas_required`). The flat fleet runs the fewest replicas
meeting the SLO at every hour (the peak-sized fleet when more replicas never hurt) all
period, with no starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sweep.models.base import NO_ANSWER, Column, ServingModel

INF = np.inf

#: The per-row facts the planner needs, beside the group's axis values (private to a run).
ROW_FACTS: tuple[Column, ...] = (
    Column("group_id", "int64", "-", "Scenario group."),
    Column("replicas", "float64", "replicas", "The row's replicas."),
    Column("replicas_ok", "bool", "-", "Some configuration of the row meets the SLO with rho <= rho_max."),
    Column("cost_usd_per_hour", "float64", "USD/h", "The row's cost."),
    Column("gpus_per_replica", "float64", "GPUs", "GPUs per replica."),
)

SCHEDULE_HEAD: tuple[Column, ...] = (
    Column("schedule_group_id", "int64", "-", "Schedule group: a scenario group without arrival_rps (the profile gives the rate), numbered in grid order."),
)

SCHEDULE_BODY: tuple[Column, ...] = (
    Column("hour", "int64", "h", "Hour of the profile's period: 0-23 for a day, 0-167 for a week (0 = Monday 00:00-01:00)."),
    Column("day", "int64", "-", "hour // 24: 0 for a daily profile, 0 (Monday) to 6 for a weekly one."),
    Column("hour_of_day", "int64", "h", "hour % 24."),
    Column("arrival_rps", "float64", "requests/s", "The hour's mean arrival rate, total for the fleet (the profile's value)."),
    Column("replicas_required", "int64", "replicas", "The fewest replicas of the grid's replicas axis for which some configuration meets the SLO with rho <= rho_max at this hour's rate (replicas_min; docs/model.md, decisions); 0 in an hour without traffic; NULL when none does.", null_when="feasible"),
    Column("replicas", "int64", "replicas", "The planned replicas for the hour: replicas_required, raised where the ramp or the warm-up cost makes that cheaper over the period (exact minimum); NULL on every hour when no plan exists.", null_when="schedule_ok"),
    Column("replicas_started", "int64", "replicas", "Replicas started for this hour: max(0, replicas - replicas of the hour before, cyclically); NULL when no plan exists.", null_when="schedule_ok"),
    Column("gpu_hours", "float64", "GPU-h", "(replicas + warmup_hours x replicas_started) x gpus_per_replica: the hour's serving plus the warm-up of the replicas it starts; NULL when no plan exists.", null_when="schedule_ok"),
    Column("cost_usd", "float64", "USD", "gpu_hours x usd_per_gpu_hour; NULL when no plan exists.", null_when="schedule_ok"),
    Column("feasible", "bool", "-", "Some replica count of the grid meets the SLO at this hour's rate (replicas_required is finite)."),
    Column("schedule_ok", "bool", "-", "A plan exists for the whole period (every hour feasible and the ramp satisfiable). On every row of the group."),
    Column("flat_replicas", "int64", "replicas", "The flat fleet: the fewest replicas meeting the SLO at every hour, run all period; NULL when none. On every row of the group.", null_when=NO_ANSWER),
    Column("gpu_hours_per_day", "float64", "GPU-h/day", "The plan's GPU-hours over the period divided by its days (warm-up included); NULL when no plan exists.", null_when="schedule_ok"),
    Column("cost_usd_per_day", "float64", "USD/day", "The plan's cost over the period divided by its days; NULL when no plan exists.", null_when="schedule_ok"),
    Column("flat_gpu_hours_per_day", "float64", "GPU-h/day", "flat_replicas x gpus_per_replica x 24; NULL when there is no flat fleet.", null_when=NO_ANSWER),
    Column("flat_cost_usd_per_day", "float64", "USD/day", "flat_replicas x gpus_per_replica x usd_per_gpu_hour x 24; NULL when there is no flat fleet.", null_when=NO_ANSWER),
    Column("saving_usd_per_day", "float64", "USD/day", "flat_cost_usd_per_day - cost_usd_per_day; NULL when only the plan exists (no flat fleet to save on), 0 when neither does.", null_when=NO_ANSWER),
    Column("saving_frac", "float64", "-", "saving_usd_per_day / flat_cost_usd_per_day (1 when only the plan exists, 0 when neither does or the flat fleet is free)."),
)


def group_keys(model: ServingModel) -> tuple[str, ...]:
    """The parameters that name a schedule group, in grid order."""
    skip = {"arrival_rps", *model.decisions.decision_axes}
    return tuple(p.key for p in model.params if p.key not in skip)


def schedule_columns(model: ServingModel, point_columns: Sequence[Column]) -> tuple[Column, ...]:
    """schedule.parquet: one row per (schedule group, hour)."""
    present = {c.name: c for c in point_columns}
    return (*SCHEDULE_HEAD, *(present[k] for k in group_keys(model) if k in present), *SCHEDULE_BODY)


def row_fact_columns(model: ServingModel, point_columns: Sequence[Column]) -> tuple[Column, ...]:
    """The staged per-row facts: `ROW_FACTS` and the group's axis columns (string columns as codes)."""
    present = {c.name: c for c in point_columns}
    keys = [k for k in group_keys(model) if k in present and k != "gpus_per_replica"]
    # in-memory dtypes: a private file, where +inf (an unlimited input) stays +inf
    axes = [Column(k, "int64" if present[k].dtype == "dict" else present[k].memory_dtype, present[k].unit, present[k].doc)
            for k in keys]
    return (*ROW_FACTS, *axes)


def row_facts(cols: Mapping[str, np.ndarray], rows: Mapping[str, np.ndarray], row_size: int,
              group_size: int, names: Sequence[str], size: str) -> dict[str, np.ndarray]:
    """The per-row facts of one evaluated chunk (`cols` per point, `rows` per row); `size`
    is the model's `Decisions.size`, the count the plan chooses per hour."""
    starts = np.arange(len(rows["replicas_ok"])) * row_size
    out = {name: cols[name][starts] for name in names if name in cols}
    out["group_id"] = cols["point_id"][starts] // group_size
    out["replicas"] = cols[size][starts].astype(np.float64)
    out["replicas_ok"] = rows["replicas_ok"].astype(bool)
    return out


# --------------------------------------------------------------------------- the exact plan


def plan_cycle(values: np.ndarray, allowed: np.ndarray, ramp: float = INF, warmup_hours: float = 0.0) -> np.ndarray:
    """The cheapest cyclic replica sequence (module docstring).

    `values`: (n,) candidate counts, ascending; `allowed`: (H, n) whether count j meets the
    SLO at hour h. Returns (H,) counts, all +inf when no sequence satisfies the constraints.
    Ties go to the smaller counts.
    """
    values = np.asarray(values, dtype=np.float64)
    allowed = np.asarray(allowed, dtype=bool)
    hours, n = allowed.shape
    if not allowed.any(axis=1).all():
        return np.full(hours, INF)
    if ramp == INF and warmup_hours == 0.0:  # independent hours: the fewest allowed each
        return values[np.argmax(allowed, axis=1)]
    diff = values[None, :] - values[:, None]  # [a, b]: b - a
    step = warmup_hours * np.maximum(diff, 0.0)
    step = np.where(np.abs(diff) <= ramp, step, INF)
    node = np.where(allowed, values[None, :], INF)  # (H, n)
    starts = np.flatnonzero(allowed[0])
    if starts.size == 0:
        return np.full(hours, INF)
    best = np.full((starts.size, n), INF)
    best[np.arange(starts.size), starts] = node[0, starts]
    parent = np.zeros((hours, starts.size, n), dtype=np.int64)
    for h in range(1, hours):
        total = best[:, :, None] + step[None, :, :]  # (start, a, b)
        parent[h] = np.argmin(total, axis=1)
        best = np.min(total, axis=1) + node[h][None, :]
    close = best + step[:, starts].T  # (start, a): back to the start's count
    last = np.argmin(close, axis=1)
    cycle = close[np.arange(starts.size), last]
    k = int(np.argmin(cycle))
    if not np.isfinite(cycle[k]):
        return np.full(hours, INF)
    path = np.empty(hours, dtype=np.int64)
    path[-1] = last[k]
    for h in range(hours - 1, 0, -1):
        path[h - 1] = parent[h, k, path[h]]
    return values[path]


def started(replicas: np.ndarray) -> np.ndarray:
    """Replicas started for each hour: max(0, r[h] - r[h-1]), cyclically; +inf without a plan."""
    if not np.all(np.isfinite(replicas)):
        return np.full(replicas.shape, INF)
    return np.maximum(replicas - np.roll(replicas, 1), 0.0)


def plan_group(values: np.ndarray, ok: np.ndarray, rate_index: Sequence[int], *, ramp: int | None,
               warmup_hours: float) -> dict[str, np.ndarray]:
    """One schedule group's hours. `values` (n,) the grid's replica counts ascending; `ok`
    (n_rates, n): count j meets the SLO at rate i; `rate_index` (H,) each hour's rate
    (-1: no traffic). Returns per hour `replicas_required`, `replicas`, `replicas_started`,
    `feasible`, and the group's `flat_replicas`."""
    idx = np.asarray(rate_index)
    cand = np.concatenate([[0.0], values])
    busy = ok[np.maximum(idx, 0)]  # (H, n)
    allowed = np.concatenate([(idx < 0)[:, None], np.where((idx < 0)[:, None], True, busy)], axis=1)
    feasible = np.asarray(allowed.any(axis=1))
    required = np.where(feasible, cand[np.argmax(allowed, axis=1)], INF)
    planned = plan_cycle(cand, allowed, INF if ramp is None else float(ramp), warmup_hours)
    everywhere = np.asarray(allowed.all(axis=0))
    everywhere[0] = False  # the flat fleet serves every hour; zero replicas serve none
    flat = cand[np.argmax(everywhere)] if everywhere.any() else INF
    return {"replicas_required": required, "replicas": planned, "replicas_started": started(planned),
            "feasible": feasible, "flat_replicas": np.asarray(flat, dtype=np.float64)}


def _times(units: np.ndarray, rate: float) -> np.ndarray:
    """units x rate, +inf where units is +inf (a free GPU must not make inf x 0 = NaN)."""
    finite = np.isfinite(units)
    return np.where(finite, np.where(finite, units, 0.0) * rate, INF)


def schedule_table(facts: Mapping[str, np.ndarray], *, group_shape: Sequence[int], arrival_pos: int,
                   hourly_rps: Sequence[float], rate_index: Sequence[int], ramp: int | None,
                   warmup_hours: float, axis_names: Sequence[str]) -> dict[str, np.ndarray]:
    """Every schedule row from the run's per-row facts (`row_facts` of every chunk, joined).

    `group_shape`: the scenario-group axes' sizes in grid order, `arrival_pos` the position of
    `arrival_rps` among them; `axis_names`: the group axis columns carried in `facts`.
    """
    gid = np.asarray(facts["group_id"])
    rep = np.asarray(facts["replicas"], dtype=np.float64)
    values = np.unique(rep)
    n_groups = int(np.prod(group_shape))
    ok = np.zeros((n_groups, values.size), dtype=bool)
    ok[gid, np.searchsorted(values, rep)] = facts["replicas_ok"]
    first_row = np.full(n_groups, -1, dtype=np.int64)
    first_row[gid[::-1]] = np.arange(gid.size)[::-1]
    per_replica = np.asarray(facts["cost_usd_per_hour"])[first_row] / rep[first_row]
    gpus = np.asarray(facts["gpus_per_replica"], dtype=np.float64)[first_row]
    # scenario groups -> (schedule group, rate): arrival_rps is one of the group axes
    shape = list(group_shape)
    n_rates = shape[arrival_pos]
    order = np.moveaxis(np.arange(n_groups).reshape(shape), arrival_pos, -1).reshape(-1, n_rates)
    hours = len(hourly_rps)
    days = hours / 24.0
    hour = np.arange(hours)
    out: dict[str, list[np.ndarray]] = {c.name: [] for c in SCHEDULE_HEAD + SCHEDULE_BODY}
    for name in axis_names:
        out[name] = []
    for s, members in enumerate(order):
        g0 = members[0]
        plan = plan_group(values, ok[members], rate_index, ramp=ramp, warmup_hours=warmup_hours)
        ok_plan = bool(np.isfinite(plan["replicas"]).all())
        units = plan["replicas"] + warmup_hours * plan["replicas_started"] if ok_plan else np.full(hours, INF)
        gpu_hours = _times(units, gpus[g0])
        cost = _times(units, per_replica[g0])
        flat = plan["flat_replicas"]
        per_day = float(gpu_hours.sum() / days)
        cost_day = float(cost.sum() / days)
        flat_gpu = float(_times(np.array([flat]), gpus[g0] * 24.0)[0])
        flat_cost = float(_times(np.array([flat]), per_replica[g0] * 24.0)[0])
        if not ok_plan:
            saving, frac = (0.0, 0.0)
        elif not np.isfinite(flat_cost):
            saving, frac = (INF, 1.0)
        else:
            saving = flat_cost - cost_day
            frac = saving / flat_cost if flat_cost > 0 else 0.0
        const = {
            "schedule_group_id": s, "schedule_ok": ok_plan, "flat_replicas": flat,
            "gpu_hours_per_day": per_day, "cost_usd_per_day": cost_day,
            "flat_gpu_hours_per_day": flat_gpu, "flat_cost_usd_per_day": flat_cost,
            "saving_usd_per_day": saving, "saving_frac": frac,
        }
        for name in axis_names:
            const[name] = facts[name][first_row[g0]]
        for name, v in const.items():
            out[name].append(np.full(hours, v))
        out["hour"].append(hour)
        out["day"].append(hour // 24)
        out["hour_of_day"].append(hour % 24)
        out["arrival_rps"].append(np.asarray(hourly_rps, dtype=np.float64))
        for name in ("replicas_required", "replicas", "replicas_started", "feasible"):
            out[name].append(plan[name])
        out["gpu_hours"].append(gpu_hours)
        out["cost_usd"].append(cost)
    table = {k: np.concatenate(v) for k, v in out.items()}
    table["gpus_per_replica"] = np.repeat(gpus[order[:, 0]], hours).astype(np.int64)
    return table
