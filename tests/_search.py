"""The seed example with a [search] table, shared by the search tests."""

from __future__ import annotations

import tomllib

from sweep import grid as spec_mod

SEED_GRID = """
name = "seed-search"
[grid]
arrival_rps      = {rates}
batch_size       = [1, 4, 8, 16, 32]
batch_window_ms  = inf
seq_len          = 2048
model            = "gpt3-175b"
gpu              = "a100-80gb"
gpus_per_replica = 8
replicas         = 1
t_fixed_ms       = 50.0
t_req_ms         = 0.5
slo_ms           = {slo}
percentile       = 0.99
rho_target       = 0.75
[search]
objective = {objective}
trials    = {trials}
batch     = {batch}
seed      = 0
storage   = "{storage}"
[search.params]
batch_size = {{low = 1, high = 64}}
replicas   = {{low = 1, high = 8}}
"""


BASE = """
name = "bad"
[grid]
arrival_rps = 100.0
batch_size = 8
seq_len = 2048
model = "gpt3-175b"
gpu = "a100-80gb"
gpus_per_replica = 8
t_fixed_ms = 50.0
t_req_ms = 0.5
slo_ms = 300.0
"""


def seed_spec(objective='"min_cost"', trials=128, batch=64, storage="memory", slo=300.0, rates="100.0", extra=""):
    """The seed's worked example (grids/seed-gpt3.toml) with a [search] over batch_size in
    1..64 and replicas in 1..8 (512 combinations). The seed's own SLO (P99 200 ms) is
    infeasible everywhere in this space, so the exactness tests use 300 ms."""
    text = SEED_GRID.format(objective=objective, trials=trials, batch=batch, storage=storage, slo=slo,
                            rates=rates) + extra
    return spec_mod.build(tomllib.loads(text), source="seed-search.toml", text=text)


def rows(result):
    return result.records()
