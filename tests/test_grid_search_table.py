"""The `[search]` table (`sweep.grid.search_table`): malformed tables refused in one line,
storage checked before any work, searched keys optional in `[grid]`."""

from __future__ import annotations

import tomllib

import pytest
from _search import BASE, seed_spec

from sweep import grid as spec_mod
from sweep.errors import GridError, StorageError
from sweep.grid.search_table import check_storage
from sweep.search import make_plan, run_search


def test_unreachable_storage_url_is_refused_fast(tmp_path):
    spec = seed_spec(storage="postgresql://nobody@127.0.0.1:1/x")
    with pytest.raises(StorageError) as exc:
        check_storage(spec.search, tmp_path)
    assert exc.value.key == "search.storage" and "\n" not in str(exc.value)
    assert "cannot reach 127.0.0.1:1" in exc.value.rule
    with pytest.raises(StorageError):
        run_search(spec, tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_password_in_the_grid_is_refused_and_not_shown():
    """The grid text is copied into the manifest and every Parquet file: a password belongs
    in the environment (PGPASSWORD, ~/.pgpass), never in the grid file."""
    with pytest.raises(GridError) as exc:
        seed_spec(storage="postgresql://me:secret@127.0.0.1:1/x")
    assert exc.value.key == "search.storage" and "PGPASSWORD" in exc.value.rule
    assert "secret" not in str(exc.value) and "\n" not in str(exc.value)


def test_search_fleet_example_grid_loads(root):
    spec = spec_mod.load(root / "grids" / "search-fleet.toml")
    assert spec.search is not None and spec.search.enumerable and len(make_plan(spec).studies) == 2
    assert spec_mod.load(root / "grids" / "example.toml").search is None


@pytest.mark.parametrize("table, key", [
    ('[search]\ntrials = 10\n[search.params]\nfoo = [1, 2]', "search.params.foo"),
    ('[search]\ntrials = 10\n[search.params]\nseq_len = [1, 2]', "search.params.seq_len"),
    ('[search]\ntrials = 10\n[search.params]\nreplicas = []', "search.params.replicas"),
    ('[search]\ntrials = 10\n[search.params]\nreplicas = {low = 8, high = 2}', "search.params.replicas.high"),
    ('[search]\ntrials = 10\n[search.params]\nreplicas = 4', "search.params.replicas"),
    ('[search]\ntrials = 10\n[search.params]\nreplicas = {low = 1.5, high = 4}', "search.params.replicas.low"),
    ('[search]\ntrials = 10\n[search.params]\nreplicas = {low = 0, high = 4}', "search.params.replicas.low"),
    ('[search]\ntrials = 10\n[search.params]\nbatch_size = {low = 1, high = 8, step = 2}',
     "search.params.batch_size.step"),
    ('[search]\ntrials = 10\n[search.params]\nbatch_window_ms = {low = 0.0, high = inf}',
     "search.params.batch_window_ms.high"),
    ('[search]\ntrials = 10\n[search.params]\nbatch_window_ms = {low = 0.0, high = 5.0, log = true}',
     "search.params.batch_window_ms.low"),
    ('[search]\ntrials = 10\n[search.params]\ngpu = ["a100-80gb", "no-such-gpu"]', "search.params.gpu"),
    ('[search]\ntrials = 10\n[search.params]\ngpu = {low = 1, high = 2}', "search.params.gpu"),
    ('[search]\ntrials = 10\n[search.params]\nreplicas = [1, 1]', "search.params.replicas"),
    ('[search]\ntrials = 10\n[search.params]\nbatch_size = [1, 8000]\nbatch_window_ms = [5.0]',
     "search.params.batch_size"),
    ('[search]\ntrials = 0\n[search.params]\nreplicas = [1, 2]', "search.trials"),
    ('[search]\ntrials = 2.5\n[search.params]\nreplicas = [1, 2]', "search.trials"),
    ('[search]\n[search.params]\nreplicas = [1, 2]', "search.trials"),
    ('[search]\ntrials = 10\nbatch = 0\n[search.params]\nreplicas = [1, 2]', "search.batch"),
    ('[search]\ntrials = 10\nseed = -1\n[search.params]\nreplicas = [1, 2]', "search.seed"),
    ('[search]\ntrials = 10\nobjective = "max_profit"\n[search.params]\nreplicas = [1, 2]', "search.objective"),
    ('[search]\ntrials = 10\nobjective = []\n[search.params]\nreplicas = [1, 2]', "search.objective"),
    ('[search]\ntrials = 10\nobjective = ["min_cost", "min_cost"]\n[search.params]\nreplicas = [1, 2]',
     "search.objective"),
    ('[search]\ntrials = 10\nstorage = "excel"\n[search.params]\nreplicas = [1, 2]', "search.storage"),
    ('[search]\ntrials = 10\nsampler = "tpe"\n[search.params]\nreplicas = [1, 2]', "search.sampler"),
    ('[search]\ntrials = 10', "search.params"),
    ('[search]\ntrials = 10\n[search.params]', "search.params"),
    ('search = 3', "search"),
])
def test_malformed_search_table_is_refused(table, key):
    text = (table + "\n" + BASE) if table.startswith("search =") else (BASE + table + "\n")
    with pytest.raises(GridError) as exc:
        spec_mod.build(tomllib.loads(text), source="bad.toml", text=text)
    assert exc.value.key == key, str(exc.value)
    assert "\n" not in str(exc.value) and str(exc.value).startswith("bad.toml: ")


def test_searched_key_may_be_omitted_from_grid():
    text = BASE.replace("batch_size = 8\n", "").replace('gpu = "a100-80gb"\n', "") + (
        '[search]\ntrials = 4\n[search.params]\nbatch_size = {low = 1, high = 16}\ngpu = ["a100-80gb", "h100-sxm"]\n')
    spec = spec_mod.build(tomllib.loads(text), source="ok.toml", text=text)
    assert spec.search.keys == ("batch_size", "gpu") and [g.name for g in spec.search.gpus] == ["a100-80gb", "h100-sxm"]
    assert spec.search.space_size == 32


def test_cli_refuses_a_malformed_search_table_with_exit_2(tmp_path, capsys):
    from sweep.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text(BASE + '[search]\ntrials = 10\n[search.params]\nreplicas = {low = 8, high = 2}\n')
    assert main(["run", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "search.params.replicas.high" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
