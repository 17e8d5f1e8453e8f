"""A resumable search (`sweep.search.study`): a crash at any moment of the `[search]` phase,
rerun with the same call, continues the study, and its trials (parameters, values, states)
and answers equal those of an uninterrupted search with the same seed.

Crashes are injected with the `SWEEP_FAULT` hook (`NAME@N`: the N-th time the point is
reached) at every kind of point of a round: while reserving its trials, while drawing their
parameters (a trial left with none or one of two), after asking, after the kernel call,
between a trial's constraints and its tell, while telling.
`tests/test_cli_signals.py` does the same with real SIGKILL, SIGTERM and SIGINT.
"""

from __future__ import annotations

import pytest
from _search import rows, seed_spec

from sweep import _faults
from sweep._faults import FAULT_ENV, InjectedCrash
from sweep.search import run_search

#: 3 rounds of 8 trials then one of 4 (28 trials): crashes in the first and later rounds.
KW = dict(trials=28, batch=8)
CRASHES = ["search:ask0@1", "search:ask5@1", "search:ask3@3", "search:asked@2", "search:tell0@1", "search:tell6@2",
           "search:tell2@4", "search:asked@4",
           # trials reserved without their parameters, one parameter of two drawn, evaluated, half told
           "search:reserve3@2", "search:reserved@3", "search:param0@11", "search:evaluated@2", "search:constrained1@1"]


def _history(out, storage):
    import optuna

    url = f"sqlite:///{out}/search.db" if storage == "sqlite" else None
    if storage == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        url = JournalStorage(JournalFileBackend(str(out / "search.journal")))
    (summary,) = optuna.get_all_study_summaries(url)
    study = optuna.load_study(study_name=summary.study_name, storage=url)
    return [(t.number, t.state.name, t.params, t.values, t.user_attrs["sweep_round"]) for t in study.trials]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = {}
    for storage in ("sqlite", "journal"):
        d = tmp_path_factory.mktemp(f"clean-{storage}")
        answers = rows(run_search(seed_spec(storage=storage, **KW), d))
        out[storage] = (_history(d, storage), answers)
    return out


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
@pytest.mark.parametrize("crash", CRASHES)
def test_a_crash_anywhere_resumes_to_the_uninterrupted_result(clean, tmp_path, monkeypatch, storage, crash):
    _faults.reset()
    monkeypatch.setenv(FAULT_ENV, crash)
    with pytest.raises(InjectedCrash):
        run_search(seed_spec(storage=storage, **KW), tmp_path)
    monkeypatch.delenv(FAULT_ENV)
    result = run_search(seed_spec(storage=storage, **KW), tmp_path)
    history, answers = clean[storage]
    assert _history(tmp_path, storage) == history  # the same 28 trials: none asked twice, none lost
    keep = ("trial_number", "trials", "objective_value", "batch_size", "replicas", "gap_rel", "meets_constraints")
    assert [{k: r[k] for k in keep} for r in rows(result)] == [{k: r[k] for k in keep} for r in answers]


def test_a_half_written_journal_line_is_cut(tmp_path):
    run_search(seed_spec(storage="journal", trials=8, batch=8), tmp_path)
    journal = tmp_path / "search.journal"
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 5, "worker_id": "x", "trial_id"')  # killed mid-append
    more = run_search(seed_spec(storage="journal", trials=16, batch=8), tmp_path)
    assert rows(more)[0]["trials"] == 16 and journal.read_bytes().startswith(whole)


def test_a_crash_in_the_search_phase_of_a_run_resumes_to_the_clean_run(tmp_path, monkeypatch, root):
    """The audit's case: the grid's one segment is sealed, the reduced outputs assembled,
    then the search is cut short. The rerun resumes the segment and the study."""
    import pyarrow.parquet as pq

    from sweep import grid as spec
    from sweep.runner import run_grid

    text = ((root / "tests" / "golden" / "grids" / "search.toml").read_text()
            .replace('storage = "memory"', 'storage = "sqlite"'))
    (tmp_path / "g.toml").write_text(text)
    g = spec.load(tmp_path / "g.toml")
    clean = run_grid(g, tmp_path / "clean")
    _faults.reset()
    monkeypatch.setenv(FAULT_ENV, "search:tell3@2")
    with pytest.raises(InjectedCrash):
        run_grid(g, tmp_path / "out")
    monkeypatch.delenv(FAULT_ENV)
    again = run_grid(g, tmp_path / "out")
    assert again.manifest["chunks"]["resumed_segments"] == 1
    assert again.manifest["search"]["studies"][0]["name"] == clean.manifest["search"]["studies"][0]["name"]
    for name in ("optimum.parquet", "frontier.parquet", "search.parquet"):
        a, b = pq.read_table(tmp_path / "clean" / name), pq.read_table(tmp_path / "out" / name)
        assert a.drop_columns([]).to_pylist() == b.to_pylist(), name
