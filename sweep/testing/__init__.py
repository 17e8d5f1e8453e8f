"""Test material shipped with the package, as `optuna.testing` ships its sampler tests: the
serving-model contract that every registered model (and any new one) must pass, and the
plain-Python reference scheduler the continuous-batching simulator is checked against."""
