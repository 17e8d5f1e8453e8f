"""Test material shipped with the package, as `optuna.testing` ships its sampler tests: the
serving-model contract that every registered model (and any new one) must pass, the
plain-Python reference scheduler the continuous-batching simulator is checked against, and
toy queues with closed forms (`toy`: M/M/1, M/D/1 and their Lindley simulation) that
tandems of stage models (`sweep.models.compose`) are checked against."""
