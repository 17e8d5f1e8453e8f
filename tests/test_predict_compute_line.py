"""The step's compute-bound line (`roofline.compute_line`, `sweep.cli.predict.compute_line_of`)
and the reference scheduler's use of it (`cb_reference.simulate(compute_line=...)`), which
`sweep predict-benchmark` simulates with (docs/deploy.md, "How the simulated run prices a step").

Reference values: the refined roofline's own step time (`roofline.step_time`) of a step of
prompt tokens in its compute-bound regime, and a hand-traced burst."""

import jax.numpy as jnp
import pytest

from sweep.catalog import load_catalog, packaged_efficiencies
from sweep.cli.predict import compute_line_of
from sweep.models.base import gpu_figures, model_figures
from sweep.models.shared import roofline as rl
from sweep.testing.cb_reference import simulate


@pytest.mark.parametrize(("model", "gpu", "tp", "weight_bytes"), [
    ("llama-3.1-70b", "a100-80gb", 8, 2.0),  # eight A100s: the all-reduce's share is 15% of a token's price
    ("llama-3.1-8b", "h100-sxm", 1, 1.0),  # fp8 weights: the GEMMs at the FP8 peak, no collective
    ("llama-3.1-70b", "h100-sxm", 4, 2.0),
])
def test_compute_line_is_the_refined_step_where_compute_bounds_it(model, gpu, tp, weight_bytes):
    """A step of n prompt tokens that its GEMMs bound (no attention FLOPs, no KV) costs
    exactly t_fixed + t_token n in the refined roofline (`step_time`: compute + all-reduces +
    the prompt step's overhead), with the point's eta_flops and the efficiency table's cell."""
    cat = load_catalog()
    m, g = cat.model(model), cat.gpu(gpu)
    cell = packaged_efficiencies().lookup(m, g, tp)
    row = {"model": model, "gpu": gpu, "gpus_per_replica": float(tp), "weight_bytes_per_param": weight_bytes,
           "eta_flops": cell.eta_flops}
    t_fixed, t_token = compute_line_of(row, cat)
    x = {k: jnp.asarray(float(v)) for k, v in {**model_figures(m), **gpu_figures(g)}.items()}
    x.update(gpus_per_replica=jnp.asarray(float(tp)), weight_bytes_per_param=jnp.asarray(weight_bytes),
             gpu_t_overhead=jnp.asarray(cell.t_overhead_s), gpu_t_decode_overhead=jnp.asarray(cell.t_decode_overhead_s))
    p = rl.replica_params(x, cell.eta_bw, cell.eta_flops)
    for n in (8192.0, 16384.0):
        t, parts = rl.step_time(rl.Work(jnp.asarray(n), jnp.asarray(0.0), jnp.asarray(0.0), jnp.asarray(1.0)), p)
        assert float(parts.t_compute) > float(parts.t_mem)  # the regime the line stands for
        assert t_fixed + t_token * n == pytest.approx(float(t), rel=1e-12)
    # the secant it complements is cheaper per token there: the reason it exists
    assert t_token > 0.0 and t_fixed >= cell.t_overhead_s


def test_compute_line_needs_a_roofline_point():
    """A point with given step coefficients (no eta_flops) has no compute line: (0, 0)."""
    assert compute_line_of({"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus_per_replica": 1.0,
                            "weight_bytes_per_param": 2.0, "eta_flops": None}, load_catalog()) == (0.0, 0.0)


def test_reference_prices_a_burst_step_at_its_compute_line():
    """Hand-traced: four 100-token prompts at t = 0 (budget 1000, two output tokens each).
    Step 1 carries 400 prompt tokens: the line says 0.01 + 1e-4 x 400 = 0.05 s, the compute
    line 0.002 + 1e-3 x 400 = 0.402 s, and the step takes the larger; step 2 decodes four
    tokens: the line's 0.0104 s beats the compute line's 0.006 s. Without `compute_line`
    both steps are the line's."""
    kw = dict(cap=8, max_batched_tokens=1000, t_fixed=0.01, t_token=1e-4)
    args = ([0.0] * 4, [100] * 4, [2] * 4)
    res = simulate(*args, **kw, compute_line=(0.002, 1e-3))
    assert res.step_dur == pytest.approx([0.402, 0.0104], rel=1e-12)
    assert res.first_s == pytest.approx([0.402] * 4, rel=1e-12)
    assert res.finish_s == pytest.approx([0.4124] * 4, rel=1e-12)
    plain = simulate(*args, **kw)
    assert plain.step_dur == pytest.approx([0.05, 0.0104], rel=1e-12)
    assert simulate(*args, **kw, compute_line=(0.0, 0.0)).step_dur == plain.step_dur
