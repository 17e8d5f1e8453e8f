"""The study a search leaves behind, read as Optuna Dashboard reads it.

Optuna Dashboard (optuna/optuna-dashboard) takes a trial's constraints from one system
attribute: `_serializer.py` serialises `trial_system_attrs.get("constraints", [])` (its
`CONSTRAINTS_KEY`), and every plot that marks feasibility (`PlotHistory.tsx`,
`PlotTimeline.tsx`, `PlotSlice.tsx`, `GraphRank.tsx`, ...) calls a trial feasible when
`trial.constraints.every((c) => c <= 0)`; a trial without the attribute has `[]` and counts
as feasible. These tests read the storage with Optuna alone and apply that rule."""

from __future__ import annotations

import optuna
from _search import rows, seed_spec

from sweep.search import run_search
from sweep.search.study import CONSTRAINTS, CONSTRAINTS_ATTR


def _dashboard_feasible(trial: optuna.trial.FrozenTrial) -> bool:
    """The dashboard's rule: `trial_system_attrs.get("constraints", [])`, every value <= 0."""
    return all(c <= 0 for c in trial.system_attrs.get("constraints", []))


def test_dashboard_reads_the_feasibility_the_answer_has(tmp_path):
    # the seed example searched over batch_size 1..64 x replicas 1..8 at P99 300 ms:
    # small caps are unstable at 100 requests/s, so the study has infeasible trials
    result = run_search(seed_spec(trials=64, batch=32, storage="sqlite"), tmp_path)
    (answer,) = rows(result)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'search.db'}")
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == answer["trials"] == 64
    for t in complete:  # one list a trial, in the documented order, as Optuna's own reader sees it
        assert len(t.system_attrs[CONSTRAINTS_ATTR]) == len(CONSTRAINTS)
        assert t.constraints == {str(i): v for i, v in enumerate(t.system_attrs[CONSTRAINTS_ATTR])}
    assert study.user_attrs["sweep_search"]["constraints"] == list(CONSTRAINTS)
    feasible = [t for t in complete if _dashboard_feasible(t)]
    assert 0 < len(feasible) < len(complete)
    assert len(feasible) == answer["feasible_trials"]
    # the dashboard's feasible set holds the answer, and its cheapest feasible value is the answer's
    best = min(feasible, key=lambda t: (t.value, t.number))
    assert best.number == answer["trial_number"] == study.best_trial.number
    assert answer["meets_constraints"] and best.value == answer["objective_value"]
    assert all(not _dashboard_feasible(t) for t in complete if t not in feasible)
    assert CONSTRAINTS_ATTR == optuna.study._constrained_optimization._CONSTRAINTS_KEY


def test_infeasible_study_has_no_dashboard_feasible_trial(tmp_path):
    # the seed's own SLO, P99 200 ms, is infeasible everywhere in this space (tests/_search.py)
    result = run_search(seed_spec(slo=200.0, trials=32, batch=32, storage="sqlite"), tmp_path)
    (answer,) = rows(result)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'search.db'}")
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert not answer["meets_constraints"] and complete
    assert not any(_dashboard_feasible(t) for t in complete)
