"""Test material shipped with the package, as `optuna.testing` ships its sampler tests:

* `models`: the serving-model contract as plain functions (grids from a model's examples and
  `contract_variants`, points drawn from its domains, the checks), for any model;
* `pytest_models`: those checks as pytest tests over every registered model
  (`from sweep.testing.pytest_models import *` in a test module);
* `cb_reference`: the plain-Python reference scheduler the continuous-batching simulator is
  checked against;
* `toy`: queues with closed forms (M/M/1, M/D/1) as serving modes, and their Lindley
  simulation, that tandems of stage models (`sweep.models.compose`) are checked against."""
