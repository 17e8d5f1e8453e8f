"""`[search]` under `serving = "disaggregated"` (`sweep.search.study` over the two pools):
the searched keys and objectives the mode declares, the constraints graded from its
end-to-end columns, bad tables refused in one line, and, through the real CLI, Optuna's
answer against the exhaustive grid's `replicas_min` over the same finite space.

Reference values, and where they come from:

* The split test's reference is the exact grid reduction over the same finite space: the
  grid of the same file (`prefill_replicas` and `decode_replicas` in 1..4,
  `prefill_batch_size` in {1, 4}, `decode_batch_size` in {16, 64}: 64 combinations per
  rate) evaluated point by point, its `replicas_min` row in optimum.parquet (the split with
  the fewest GPUs that is feasible, meets every SLO and has rho <= rho_max).
* What that reduction finds (measured with this grid, one H100 SXM per replica at 2.5 USD/h):
  6 requests/s -> (1, 1), 2 GPUs, 5 USD/h; 25 requests/s -> (3, 1), 4 GPUs, 10 USD/h (the
  only split of 4 GPUs that meets every rule); 50 requests/s -> no split (4 prefill
  replicas of batch 1 still miss the 400 ms TTFT).
* Constraint grades: load / capacity - 1 with load = arrival_rps and capacity = the fleet's
  end-to-end `capacity_rps` (the smaller pool's replicas x capacity); rho - rho_max; each
  latency over its SLO minus 1 (the worst); memory +-1 (the mode reports no batch bound).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tomllib

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from sweep import grid as spec_mod
from sweep.cli import main
from sweep.grid.search_table import searchable
from sweep.models import REGISTRY, get_model
from sweep.search import make_plan
from sweep.search.study import CONSTRAINTS, constraint_values, reduced_keys

GRID = """
name = "dgs"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
arrival_rps = {rates}
prompt_tokens = 1000
output_tokens = 100
t_fixed_ms = 10.0
t_token_ms = 0.05
t_ctx_ms = 0.0001
ttft_slo_ms = 400
tpot_slo_ms = 30
link = "ib-ndr"
prefill_batch_window_ms = 0
{grid}
[options]
serving = "disaggregated"
[search]
objective = {objective}
trials = {trials}
batch = 32
seed = 0
storage = "{storage}"
[search.params]
{params}
"""

SPACE_GRID = """prefill_replicas = [1, 2, 3, 4]
decode_replicas = [1, 2, 3, 4]
prefill_batch_size = [1, 4]
decode_batch_size = [16, 64]"""
SPACE_PARAMS = """prefill_replicas = {low = 1, high = 4}
decode_replicas = {low = 1, high = 4}
prefill_batch_size = [1, 4]
decode_batch_size = [16, 64]"""


def _text(rates: str = "6.0", grid: str = "", objective: str = '"min_cost"', trials: int = 64,
          storage: str = "memory", params: str = SPACE_PARAMS) -> str:
    return GRID.format(rates=rates, grid=grid, objective=objective, trials=trials, storage=storage, params=params)


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_the_mode_declares_its_search_space_and_objectives():
    model = get_model("disaggregated")
    assert searchable(model) == (
        "gpu", "prefill_gpus_per_replica", "decode_gpus_per_replica", "prefill_replicas", "decode_replicas",
        "prefill_batch_window_ms", "prefill_batch_size", "decode_max_batched_tokens", "decode_batch_size")
    # each pool's key is shown searched under its own name in messages
    assert model.param_by_key["decode_replicas"].search_example.startswith("decode_replicas = {")
    assert {o: c for o, (c, _) in model.objectives.items()} == {
        "min_cost": "cost_usd_per_hour", "max_capacity": "capacity_rps", "min_latency": "e2e_p_ms",
        "min_gpus": "total_gpus", "min_cost_per_mtok": "cost_usd_per_mtok", "min_ttft": "ttft_p_ms",
        "min_tpot": "tpot_p_ms"}
    columns = {c.name for c in model.columns}
    assert set(reduced_keys(model)) <= columns and "arrival_rps" in reduced_keys(model)


@pytest.mark.parametrize("key", sorted(REGISTRY), ids=lambda k: "/".join(k))
def test_every_mode_declares_a_search_it_can_run(key):
    """What the search reads of a model exists in the model: the searched keys are its
    parameters, and the columns of its objectives and constraints are its columns."""
    model = REGISTRY[key]
    assert set(searchable(model)) <= set(model.param_by_key)
    assert set(reduced_keys(model)) <= {c.name for c in model.columns}
    assert all(direction in ("minimize", "maximize") for _, direction in model.objectives.values())


def test_a_disaggregated_search_loads_and_splits_by_rate():
    text = _text(rates="[6.0, 25.0]")
    spec = spec_mod.build(tomllib.loads(text), source="dgs.toml", text=text)
    assert spec.search.keys == ("prefill_replicas", "decode_replicas", "prefill_batch_size", "decode_batch_size")
    assert spec.search.enumerable and spec.search.space_size == 64
    assert len(make_plan(spec).studies) == 2  # one study per arrival rate


def test_constraints_are_graded_from_the_end_to_end_columns_never_nan():
    """Four points: feasible; the busier pool unstable (capacity 5 < 6 requests/s); a decode
    replica that holds no request (capacity 0, latencies +inf, memory failed); TTFT over its
    SLO with rho above rho_max. Expected values from the module docstring's grades."""
    model = get_model("disaggregated")
    inf = math.inf
    out = {
        "arrival_rps": np.array([6.0, 6.0, 6.0, 6.0]),
        "capacity_rps": np.array([12.0, 5.0, 0.0, 6.5]),
        "stable": np.array([True, False, False, True]),
        "mem_ok": np.array([True, True, False, True]),
        "rho": np.array([0.5, 1.2, inf, 0.95]),
        "rho_max": np.array([0.9, 0.9, 0.9, 0.9]),
        "decode_batch_size": np.array([64.0, 64.0, 64.0, 64.0]),
        "ttft_p_ms": np.array([200.0, inf, inf, 500.0]),
        "ttft_slo_ms": np.array([400.0, 400.0, 400.0, 400.0]),
        "tpot_p_ms": np.array([15.0, inf, inf, 20.0]),
        "tpot_slo_ms": np.array([30.0, 30.0, 30.0, 30.0]),
        "e2e_p_ms": np.array([1500.0, inf, inf, 2600.0]),
        "slo_ms": np.array([inf, inf, inf, inf]),
    }
    cons, feasible = constraint_values(out, model)
    assert feasible.tolist() == [True, False, False, False]
    table = np.array([cons[name] for name in CONSTRAINTS]).T
    assert np.isfinite(table).all()
    assert (table[0] <= 0).all()
    assert cons["stable"][0] == pytest.approx(6.0 / 12.0 - 1.0) and cons["stable"][1] == pytest.approx(6.0 / 5.0 - 1.0)
    assert cons["stable"][2] > 0 and cons["memory"][2] == 1.0 and cons["memory"][0] == -1.0
    assert cons["slo"][0] == pytest.approx(max(200 / 400, 15 / 30) - 1.0)
    assert cons["slo"][3] == pytest.approx(500 / 400 - 1.0) and cons["rho"][3] == pytest.approx(0.95 - 0.9)
    assert cons["rho"][0] == pytest.approx(0.5 - 0.9) and cons["slo"][1] > 0 and cons["rho"][2] > 0


@pytest.mark.parametrize("objective, params, key, words", [
    ('"max_tok_s_per_gpu"', SPACE_PARAMS, "search.objective", "unknown objective"),
    ('["min_gpus", "min_throughput"]', SPACE_PARAMS, "search.objective", "use one of min_cost"),
    ('"min_cost"', "replicas = {low = 1, high = 4}", "search.params.replicas",
     "unknown searched parameter; did you mean 'decode_replicas'?"),
    ('"min_cost"', "gpus_per_replica = [1, 2]", "search.params.gpus_per_replica",
     "a search varies gpu, prefill_gpus_per_replica"),
    ('"min_cost"', "batch_window_ms = {low = 0.0, high = 5.0}", "search.params.batch_window_ms",
     "unknown searched parameter"),
    ('"min_cost"', "decode_replicas = {low = 0, high = 4}", "search.params.decode_replicas.low", "must"),
    ('"min_cost"', "decode_max_batched_tokens = [64, 1024]\ndecode_batch_size = [16, 128]\nprefill_batch_size = [1, 4]",
     "search.params.decode_max_batched_tokens", "must be >= search.params.decode_batch_size 128"),
])
def test_bad_disaggregated_search_is_one_line_exit_2_nothing_written(tmp_path, objective, params, key, words):
    grid = tmp_path / "bad.toml"
    grid.write_text(_text(objective=objective, params=params))
    rc, out, err = _run(["run", str(grid), "--out", str(tmp_path / "run"), "--progress", "none"])
    assert rc == 2, (out, err)
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1 and f"{grid}: {key} = " in lines[0] and words in lines[0], err
    assert not (tmp_path / "run").exists()


def test_a_searched_decode_replica_too_small_for_one_request_is_refused_over_its_domain(tmp_path):
    """Llama 3.1 70B's weights (bf16, 141 GB) do not fit one 80 GB H100: a decode replica of
    one GPU holds no request, so a search reaching down to 1 GPU per decode replica is
    refused, on the searched key (the grid rule over the searched domain)."""
    text = _text(params=SPACE_PARAMS + "\ndecode_gpus_per_replica = [1, 2, 4]").replace(
        'model = "llama-3.1-8b"', 'model = "llama-3.1-70b"').replace(
        "[grid]\n", "[grid]\nprefill_gpus_per_replica = 2\n")
    grid = tmp_path / "bad.toml"
    grid.write_text(text)
    rc, out, err = _run(["run", str(grid), "--out", str(tmp_path / "run"), "--progress", "none"])
    assert rc == 2, (out, err)
    (line,) = [ln for ln in err.strip().splitlines() if ln]
    assert "search.params.decode_gpus_per_replica = 1" in line and "fewer than one transferred request" in line
    assert not (tmp_path / "run").exists()
    # from 2 GPUs up every decode replica holds one: the search loads
    ok = text.replace("decode_gpus_per_replica = [1, 2, 4]", "decode_gpus_per_replica = [2, 4]")
    spec = spec_mod.build(tomllib.loads(ok), source="ok.toml", text=ok)
    assert spec.search.param("decode_gpus_per_replica").choices == (2, 4)


@pytest.mark.slow  # three compilations of the two-pool kernel (grid, search, exact check): about 3 min on 2 busy cores
def test_search_finds_the_grids_cheapest_split_through_the_cli(tmp_path):
    """One `sweep run` of a grid that lists the finite space AND searches it: the grid's
    points give the exhaustive reduction (optimum.parquet's `replicas_min`), the search gives
    Optuna's answer per arrival rate (search.parquet); they must agree (module docstring)."""
    grid = tmp_path / "dgs.toml"
    grid.write_text(_text(rates="[6.0, 25.0, 50.0]", grid=SPACE_GRID, storage="sqlite"))
    out = tmp_path / "run"
    rc, text, err = _run(["run", str(grid), "--out", str(out), "--progress", "none"])
    assert rc == 0, (text, err)

    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    pts = ds.dataset(out / "points", partitioning="hive").to_table().to_pandas()
    search = pq.read_table(out / "search.parquet").to_pylist()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["search"]["file"] == "search.parquet" and manifest["search"]["rows"] == 3
    assert manifest["search"]["searched"] == ["prefill_replicas", "decode_replicas", "prefill_batch_size",
                                              "decode_batch_size"]
    assert [r["arrival_rps"] for r in search] == [6.0, 25.0, 50.0]
    # infeasible is data: an unbounded float is NULL with its flag, never +-inf or NaN
    assert all(v is None or math.isfinite(v) for r in search for v in r.values() if isinstance(v, float))

    expected = {6.0: (1, 1, 2, 5.0), 25.0: (3, 1, 4, 10.0)}  # measured (module docstring)
    for row in search:
        rate = row["arrival_rps"]
        assert row["method"] == "optuna" and row["objective"] == "min_cost" and row["trials"] == 64
        assert row["enumerable"] and row["exact_points"] == 64
        chosen = opt[(opt.arrival_rps == rate) & opt.is_replicas_min]
        meets = pts[(pts.arrival_rps == rate) & pts.feasible & pts.slo_ok & (pts.rho <= pts.rho_max)]
        if rate not in expected:
            # no split of the space meets every rule: the grid has no replicas_min, the search
            # shows its least-violating trial and says why
            assert chosen.empty and meets.empty
            assert not row["meets_constraints"] and row["objective_value"] == row["cost_usd_per_hour"]
            assert "no point of the 64 combinations meets every constraint" in row["reason"]
            assert row["found_exact"] and row["exact_feasible"] == 0
            continue
        (ref,) = chosen.itertuples()
        assert (ref.prefill_replicas, ref.decode_replicas, ref.total_gpus, ref.cost_usd_per_hour) == expected[rate]
        # the cheapest feasible split is unique at these rates, so the split must be the grid's
        cheapest = meets[meets.cost_usd_per_hour == meets.cost_usd_per_hour.min()]
        assert set(zip(cheapest.prefill_replicas, cheapest.decode_replicas)) == {expected[rate][:2]}
        assert row["meets_constraints"] and row["found_exact"] and row["gap_rel"] == 0.0
        assert (row["prefill_replicas"], row["decode_replicas"]) == (ref.prefill_replicas, ref.decode_replicas)
        assert row["total_gpus"] == ref.replicas_min_total_gpus == ref.total_gpus
        assert row["objective_value"] == row["cost_usd_per_hour"] == pytest.approx(ref.replicas_min_cost_usd_per_hour)
        assert row["exact_value"] == pytest.approx(meets.cost_usd_per_hour.min())
        # the answer meets every rule the grid's decision applies, read from its own columns
        assert row["stable"] and row["mem_ok"] and row["slo_ok"] and row["rho"] <= row["rho_max"]
        assert row["ttft_p_ms"] <= row["ttft_slo_ms"] and row["tpot_p_ms"] <= row["tpot_slo_ms"]
        assert max(row["prefill_rho"], row["decode_rho"]) == row["rho"]

    # every trial of every study carries four finite constraint values, > 0 where it fails
    import optuna

    storage = optuna.storages.RDBStorage(f"sqlite:///{out / 'search.db'}")
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        for t in study.trials:
            cons = t.system_attrs["constraints"]
            assert len(cons) == len(CONSTRAINTS) and all(math.isfinite(c) for c in cons)
            assert all(math.isfinite(v) or v == math.inf for v in t.values)
        if "arrival_rps=50.0" in summary.study_name:
            assert all(max(t.system_attrs["constraints"]) > 0 for t in study.trials)
    storage.engine.dispose()
