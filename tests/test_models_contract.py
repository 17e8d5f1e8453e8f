"""The serving-model contract (`sweep.testing`), run on every registered model.

The tests themselves ship with the package (`sweep.testing.pytest_models`, parametrised over
`sweep.models.REGISTRY`); the checks draw points from each model's declared domains and
examples and build its grids from its own `contract_variants`, so a new model passes them
by being registered: this file needs no edit. Below: the proof, on a copy registered as a
new serving mode.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from sweep.models import ServingModel, get_model, register, unregister
from sweep.testing import models as contract
from sweep.testing.pytest_models import *  # noqa: F403
from sweep.testing.pytest_models import contract_models

COPY = "contract-copy"


@pytest.fixture
def copied() -> Iterator[ServingModel]:
    """dynamic/exponential registered again as serving mode "contract-copy" (its first grid only)."""
    original = get_model("dynamic", "exponential")
    cls = type("ContractCopy", (type(original),),
               {"serving": COPY, "contract_variants": original.contract_variants[:1]})
    try:
        yield register(cls())
    finally:
        unregister(COPY)


def test_a_new_serving_mode_passes_the_shipped_contract_unedited(copied):
    assert (f"{COPY}/exponential", copied) in contract_models()  # collected after registration: parametrised
    contract.check_model(copied, seed=contract.seed_of(copied))


# --------------------------------------------------------------------------- the checks can fail
# Each check on outputs made up to pass it, then broken one way (no evaluation, no compilation).

_DTYPES = {"float64": np.float64, "int64": np.int64, "bool": np.bool_, "dict": np.int32}


def _passing(variant: contract.Variant) -> dict[str, np.ndarray]:
    """Outputs that pass every check: finite ones, half the points stable (and every flag with them)."""
    declared = {c.name: c for c in variant.model.columns}
    stable = np.arange(8) < 4
    out = {name: np.ones(8, _DTYPES[declared[name].memory_dtype])
           for name in (*variant.column_names, "slo_ok", "feasible", "action")}
    for name, values in out.items():
        if values.dtype == np.bool_:
            out[name] = stable.copy()
    for latency, _ in variant.model.slo_checks:
        out[latency] = np.where(stable, 1.0, np.inf)
    return out


def _set(out, name, value, at=slice(None)):
    out[name] = out[name].copy()
    out[name][at] = value


BREAKS = {
    "nan": lambda out: _set(out, "capacity_rps", np.nan, 0),
    "inf_not_nullable": lambda out: _set(out, "capacity_rps", np.inf, 0),
    "inf_with_its_flag_true": lambda out: _set(out, "e_resp_ms", np.inf, 0),
    "dtype": lambda out: out.update(capacity_rps=out["capacity_rps"].astype(np.float32)),
    "missing": lambda out: out.pop("capacity_rps"),
    "finite_where_unstable": lambda out: _set(out, "latency_ms", 1.0),
    "feasible_where_unstable": lambda out: _set(out, "feasible", True),
    "too_few_stable": lambda out: _set(out, "stable", False, slice(1, None)),
    "none_unstable": lambda out: _set(out, "stable", True),
}


@pytest.mark.parametrize("how", BREAKS)
def test_each_check_fails_on_outputs_that_break_it(how):
    variant = contract.variants(get_model("dynamic", "gaussian"))[0]
    out = _passing(variant)
    for check in (contract.check_columns, contract.check_verdicts, contract.check_sample):
        check(variant, out)
    BREAKS[how](out)
    with pytest.raises(contract.ContractFailure):
        for check in (contract.check_columns, contract.check_verdicts, contract.check_sample):
            check(variant, out)


def test_variants_merge_onto_the_examples_and_none_removes():
    assert (contract.merge({"a": 1, "t": {"x": 1, "y": 2}}, {"a": None, "t": {"y": None, "z": 3}})
            == {"t": {"x": 1, "z": 3}})
    model = get_model("continuous", "analytic")
    given, roofline = contract.grid_documents(model)
    assert "eta_bw" not in given["grid"] and given["grid"]["t_fixed_ms"] == 12.0
    assert "t_fixed_ms" not in roofline["grid"] and roofline["options"]["kv_allocation"] == "paged"


def test_a_variant_that_is_no_valid_grid_is_reported(copied):
    type(copied).contract_variants = ({"grid": {"batch_size": None}},)  # required: refused by fill
    with pytest.raises(contract.ContractFailure, match="batch_size"):
        contract.variants(copied)
