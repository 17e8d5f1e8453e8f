"""Optuna search over a grid's `[search]` table (`sweep.search.study`).

Budgets are stated per test; every answer is checked against the exact optimum found by
evaluating every combination through the same kernel."""

from __future__ import annotations

import math
import random
import tomllib

import numpy as np
import pytest
from _search import SEED_GRID, rows, seed_spec

from sweep import grid as spec_mod
from sweep.search import make_plan, pareto_front, run_search


@pytest.mark.parametrize("objective, trials", [('"min_cost"', 64), ('"min_latency"', 128), ('"max_capacity"', 128)])
def test_seed_example_reaches_exact_optimum(tmp_path, objective, trials):
    table = run_search(seed_spec(objective, trials=trials, batch=32), tmp_path)
    (row,) = rows(table)
    assert row["method"] == "optuna" and row["enumerable"] and row["exact_points"] == 512
    assert row["meets_constraints"] and row["trials"] == trials
    assert row["latency_ms"] <= row["slo_ms"] and row["rho"] <= row["rho_max"] and row["stable"] and row["mem_ok"]
    # The gap to the exact optimum is bounded, not required to be zero: TPE is a sampler.
    # Cost moves in whole replicas of 8 x A100 (14.4 USD/h each): at most one replica more
    # than the optimum (the exact answer is 1 replica); latency and capacity within 15%.
    # Measured over seeds 0-5 at these budgets: min_cost exact 6 of 6; min_latency exact 5 of
    # 6 (seed 0: 10.8%); max_capacity exact 3 of 6, else 1.9% or 5.6%.
    assert row["gap_rel"] <= (1.0 if objective == '"min_cost"' else 0.15)
    assert row["found_exact"] == (row["gap_rel"] == 0.0)
    if objective == '"min_cost"':
        assert row["exact_value"] == pytest.approx(14.4)


def _random_space_toml(rng: random.Random) -> str:
    gpus = rng.sample(["a100-80gb", "h100-sxm", "h200", "l40s", "mi300x"], k=rng.randint(1, 3))
    gpr = sorted(rng.sample([1, 2, 4, 8], k=rng.randint(1, 3)))
    replicas_hi = rng.randint(8, 32)
    batches = sorted(rng.sample([1, 2, 4, 8, 16, 32, 64, 128, 256], k=rng.randint(5, 9)))
    model = rng.choice(["llama-3.1-8b", "llama-3.1-70b", "mistral-7b"])
    rate = rng.choice([50.0, 200.0, 800.0])
    slo = rng.choice([300.0, 1000.0, 3000.0])
    objective = rng.choice(['"min_cost"', '"min_latency"', '"max_capacity"'])
    return f"""
name = "random-space"
[grid]
arrival_rps = {rate}
model = "{model}"
seq_len = 4096
mean_seq_len = 1024
slo_ms = {slo}
[options]
kv_allocation = "paged"
[search]
objective = {objective}
trials = 256
batch = 32
seed = 1
storage = "memory"
[search.params]
gpu = {gpus!r}
gpus_per_replica = {gpr}
replicas = {{low = 1, high = {replicas_hi}}}
batch_size = {batches}
""".replace("'", '"')


@pytest.mark.parametrize("case", range(4))
def test_random_small_spaces_reach_exact_optimum_within_256_trials(tmp_path, case):
    """Random roofline spaces (1-3 GPUs x 1-3 TP degrees x 1..8-32 replicas x 5-9 batch
    caps, up to 2,592 combinations), budget 256 trials (8 batches of 32): Optuna's answer
    equals the exact optimum (40 of 40 generated spaces did when this was written)."""
    text = _random_space_toml(random.Random(1000 + case))
    spec = spec_mod.build(tomllib.loads(text), source="random.toml", text=text)
    (row,) = rows(run_search(spec, tmp_path))
    assert row["enumerable"]
    if row["exact_feasible"] == 0:  # nothing feasible: Optuna must agree
        assert not row["meets_constraints"] and row["found_exact"] and row["reason"]
    else:
        assert row["meets_constraints"], text
        assert row["found_exact"], (text, row["objective_value"], row["exact_value"], row["exact_point"])


def test_infeasible_everywhere_reports_reason_and_agrees_with_exact(tmp_path):
    (row,) = rows(run_search(seed_spec(slo=200.0, trials=32, batch=32), tmp_path))
    assert not row["meets_constraints"] and "least-violating" in row["reason"]
    assert row["exact_feasible"] == 0 and row["found_exact"] and math.isinf(row["exact_value"])


def test_each_batch_is_one_kernel_call_and_compiles_once(tmp_path):
    # two studies (arrival_rps is a list axis), 100 trials each in batches of 32: 4 calls each
    spec = seed_spec(trials=100, batch=32, rates="[100.0, 150.0]")
    table = run_search(spec, tmp_path)
    meta = table.meta
    assert len(meta["studies"]) == 2 and table.num_rows == 2
    for s in meta["studies"]:
        assert s["trials_run"] == 100 and s["search_calls"] == 4 and s["answer_calls"] == 1
    assert meta["compilations"] == 1
    names = [r["study_name"] for r in rows(table)]
    assert (names[0].startswith("seed-search/arrival_rps=100.0/")
            and names[1].startswith("seed-search/arrival_rps=150.0/"))
    assert [r["arrival_rps"] for r in rows(table)] == [100.0, 150.0]


@pytest.mark.parametrize("storage, file", [("sqlite", "search.db"), ("journal", "search.journal")])
def test_rerun_resumes_and_runs_only_the_remainder(tmp_path, storage, file):
    first = run_search(seed_spec(trials=12, batch=8, storage=storage), tmp_path).meta
    assert (tmp_path / file).exists() and first["studies"][0]["trials_run"] == 12
    again = run_search(seed_spec(trials=12, batch=8, storage=storage), tmp_path).meta
    assert again["studies"][0]["trials_run"] == 0 and again["studies"][0]["search_calls"] == 0
    more = run_search(seed_spec(trials=20, batch=8, storage=storage), tmp_path)
    meta = more.meta
    assert meta["studies"][0]["name"] == first["studies"][0]["name"]
    assert meta["studies"][0]["trials_run"] == 8 and rows(more)[0]["trials"] == 20


def test_changed_space_is_a_new_study(tmp_path):
    a = run_search(seed_spec(trials=8, batch=8, storage="journal"), tmp_path).meta
    b = run_search(seed_spec(trials=8, batch=8, storage="journal", slo=250.0), tmp_path).meta
    assert a["studies"][0]["name"] != b["studies"][0]["name"] and b["studies"][0]["trials_run"] == 8


def _seed_exact_front() -> set[tuple[int, int]]:
    """The seed search space's exact (cost, P99 latency) front, found without the search
    module: all 512 combinations through `sweep.api.evaluate`, every pair compared."""
    from sweep import api

    text = SEED_GRID.format(objective='"min_cost"', trials=8, batch=8, storage="memory", slo=300.0, rates="100.0")
    doc = tomllib.loads(text)
    doc.pop("search")
    doc["grid"].update(batch_size=list(range(1, 65)), replicas=list(range(1, 9)))
    t = api.evaluate(api.grid_from_dict(doc)).to_pydict()
    ok = [i for i in range(len(t["point_id"])) if t["feasible"][i]]
    f = {i: (t["cost_usd_per_hour"][i], t["latency_ms"][i]) for i in ok}
    dominated = {i for i in ok for j in ok if f[j][0] <= f[i][0] and f[j][1] <= f[i][1] and f[j] != f[i]}
    return {(t["batch_size"][i], t["replicas"][i]) for i in ok if i not in dominated}


def test_multi_objective_returns_the_pareto_set(tmp_path):
    import optuna

    spec = seed_spec('["min_cost", "min_latency"]', trials=256, batch=64, storage="journal")
    table = run_search(spec, tmp_path)
    got = rows(table)
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "search.journal")))
    study = optuna.load_study(study_name=got[0]["study_name"], storage=storage)
    best = {(t.params["batch_size"], t.params["replicas"]) for t in study.best_trials}
    assert {(r["batch_size"], r["replicas"]) for r in got} == best
    f = np.array([[r["cost_usd_per_hour"], r["latency_ms"]] for r in got])
    front, _ = pareto_front(f, np.arange(len(f)))
    assert len(front) == len(np.unique(f, axis=0))  # mutually non-dominated
    assert all(r["meets_constraints"] for r in got)
    assert [r["cost_usd_per_hour"] for r in got] == sorted(r["cost_usd_per_hour"] for r in got)
    # Exactness against the front found by brute force: a row is exact iff it is on it, and
    # coverage is the share of that front the search found.
    exact = _seed_exact_front()
    assert len(exact) == 6  # (batch_size, replicas) = (12, 1), (5, 2), (4, 3), (3, 4), (2, 5), (1, 8)
    on = {(r["batch_size"], r["replicas"]) for r in got} & exact
    assert all(r["found_exact"] == ((r["batch_size"], r["replicas"]) in exact) for r in got)
    assert all((r["gap_rel"] == 0.0) == r["found_exact"] for r in got)
    assert got[0]["front_coverage"] == pytest.approx(len(on) / len(exact), abs=1e-12)
    # How much of the front TPE finds in 256 trials is the sampler's luck, and it moves with
    # the library versions: measured over seeds 0-5, 6/6 five times and 4/6 once at
    # the current versions, 6/6 three times and 5/6 three times at .ci/floors.txt.
    assert len(on) >= 4


def test_float_range_is_not_enumerable(tmp_path):
    extra = "batch_window_ms = {low = 1.0, high = 100.0}\n"
    spec = seed_spec(trials=32, batch=32, extra=extra)
    assert not spec.search.enumerable
    (row,) = rows(run_search(spec, tmp_path))
    assert not row["enumerable"] and row["exact_value"] == math.inf and row["gap_rel"] == math.inf
    assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())
    assert not row["found_exact"] and 1.0 <= row["batch_window_ms"] <= 100.0
    static = dict(make_plan(spec).opts["static"])
    assert static["windowed"] and not static["full"]


def test_seeded_search_is_reproducible_and_bi_safe(tmp_path):
    import pyarrow as pa

    a = run_search(seed_spec('"min_latency"', trials=64, batch=32), tmp_path / "a")
    b = run_search(seed_spec('"min_latency"', trials=64, batch=32), tmp_path / "b")
    keep = ("trial_number", "batch_size", "replicas", "latency_ms")
    assert [{k: r[k] for k in keep} for r in rows(a)] == [{k: r[k] for k in keep} for r in rows(b)]
    from sweep.io.parquet import arrow_schema

    for f in arrow_schema(a.columns, {}):
        assert not pa.types.is_unsigned_integer(f.type) and not pa.types.is_nested(f.type)
        if pa.types.is_dictionary(f.type):
            assert pa.types.is_string(f.type.value_type)
    assert not any(isinstance(v, float) and math.isnan(v) for r in rows(a) for v in r.values())
