"""The trusted region of continuous serving's analytic model
(`sweep.models.continuous.confidence`): the rule on hand-made inputs, and the
`analytic_trusted` column of the engine on a light-load point and a saturated one.

References: the rule's thresholds are the module's constants (issue 24, item 6's initial
rule); the reservation CV is the closed form sqrt((P cv_P)^2 + (O cv_O)^2) / (P + O) of
independent lengths; the engine's points are classified from their own columns.
"""

from __future__ import annotations

import tomllib

import numpy as np

from sweep import grid as spec
from sweep.engine import Evaluator
from sweep.models.continuous import confidence as cf


def _rule(**kw):
    base = dict(mean_running=4.0, slots=64.0, lam=1.0, capacity_rps=10.0, mem_ok=True)
    return bool(cf.analytic_trusted(**{**base, **kw}))


def test_each_clause_of_the_rule():
    assert _rule()  # light load, slots to spare, not KV-bound
    # a saturated cap: mean running at 0.9 of the slots
    assert not _rule(mean_running=cf.RUNNING_SHARE_MAX * 64.0)
    assert _rule(mean_running=0.89 * 64.0)
    # near saturation: load at 0.85 of the capacity (and an unstable point, beyond it)
    assert not _rule(lam=cf.LOAD_MAX * 10.0)
    assert not _rule(lam=20.0)
    assert _rule(lam=8.4)
    # out of memory: a closed form, inside whatever the rest says
    assert _rule(mem_ok=False, lam=20.0)


GRID = """
name = "trust"
[options]
serving = "continuous"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
arrival_rps = [0.05, 200.0]
prompt_tokens = 1000
output_tokens = 200
t_fixed_ms = 8.0
t_token_ms = 0.03
t_ctx_ms = 6e-5
batch_size = 64
max_batched_tokens = 4096
tpot_slo_ms = 100
"""


def test_the_column_on_a_light_load_and_a_saturated_point():
    """0.05 requests/s: about one request in flight now and then, far from the cap and the
    capacity (trusted); 200 requests/s: beyond the capacity, unstable (not trusted)."""
    g = spec.build(tomllib.loads(GRID), source="<test>", text=GRID)
    ev = Evaluator(g)
    c = ev.chunk(0).columns
    order = np.argsort(c["arrival_rps"][:2])
    light, heavy = (int(i) for i in order)
    assert c["stable"][light] and c["rho"][light] < 0.1 and c["mean_running"][light] < 1
    assert bool(c["analytic_trusted"][light])
    assert not c["stable"][heavy] and c["rho"][heavy] > 1
    assert not bool(c["analytic_trusted"][heavy])
