"""`serving = "disaggregated"` (SPEC 11): the prefill pool (the greedy batcher over prefill
batches), the KV transfer and the decode pool (continuous batching with prompts already
cached), through the real CLI on one tiny grid (one compilation for the module).

Reference values, and where they come from:

* Light load (arrival_rps = 0.001: one request in the system at a time), given step
  coefficients t_f = 10 ms, t_t = 0.05 ms, t_c = 1e-4 ms, P = 1000, O = 100, prefill
  batch_size 1 and batch_window_ms 0 (a lone prompt is dispatched at once):
  - prefill service T_svc(1) = t_f + (t_t + t_c) P = 10 + 0.0501 x 1000 = 60.1 ms, so
    TTFT -> 60.1 ms (no wait, no batching delay);
  - TPOT of a lone decoding sequence: its steps j = 1..O-1 each take t_f + t_t + t_c (P + j),
    averaging t_f + t_t + t_c (P + O / 2) = 10 + 0.05 + 1e-4 x 1050 = 10.155 ms;
  - decode sojourn (O - 1) TPOT = 99 x 10.155 = 1005.345 ms, after a wait of the step in
    progress only (u TPOT / 2, u = lambda (O - 1) TPOT the busy share: 0.00255 ms);
  - transfer: Llama 3.1 8B caches 32 layers x 2 x 8 KV heads x 128 = 65,536 elements per
    token (its catalog entry), 2 bytes each: 131,072 bytes; over InfiniBand NDR (400 Gb/s =
    5e10 bytes/s, 10 us): 131,072 x 1000 / 5e10 s + 0.01 ms = 2.62144 + 0.01 = 2.63144 ms;
  - E2E mean = 60.1 + 2.63144 + 1005.345 = 1068.07644 ms;
  - GPUs: prefill 1 x 1 and decode 2 x 1 -> 3; cost 3 x 2.5 USD/h (the h100-sxm entry).
"""

from __future__ import annotations

import contextlib
import io
import math

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest

from sweep.cli import main
from sweep.models import get_model
from sweep.models.continuous.analytic import cb_point
from sweep.models.disaggregated import LINKS, DisaggregatedModel

jax.config.update("jax_enable_x64", True)

GRID = """
name = "dg"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
arrival_rps = [0.001, 6.0]
prompt_tokens = 1000
output_tokens = 100
t_fixed_ms = 10.0
t_token_ms = 0.05
t_ctx_ms = 0.0001
ttft_slo_ms = 400
tpot_slo_ms = 30
link = "ib-ndr"
prefill_replicas = [1, 2]
decode_replicas = [1, 2]
prefill_batch_window_ms = 0
prefill_batch_size = [1, 4]
decode_batch_size = [64]
{extra}
[options]
serving = "disaggregated"
"""

TTFT, TPOT, TRANSFER = 60.1, 10.155, 2.63144
E2E = TTFT + TRANSFER + 99 * TPOT


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    base = tmp_path_factory.mktemp("dg")
    grid = base / "dg.toml"
    grid.write_text(GRID.format(extra=""))
    rc, text, err = _run(["run", str(grid), "--out", str(base / "run"), "--progress", "none"])
    assert rc == 0, (text, err)
    return pq.read_table(base / "run" / "points").to_pylist(), text


def test_the_mode_is_registered():
    assert isinstance(get_model("disaggregated"), DisaggregatedModel)
    keys = [p.key for p in DisaggregatedModel.params]
    for key in ("prefill_replicas", "decode_replicas", "prefill_gpus_per_replica", "decode_gpus_per_replica",
                "decode_batch_size", "decode_max_batched_tokens", "prefill_batch_size", "link_bytes_per_s"):
        assert key in keys, key
    assert DisaggregatedModel.decisions.size == "total_gpus"


@pytest.mark.slow
def test_light_load_matches_the_closed_forms(points):
    rows, _ = points
    r = next(r for r in rows if r["arrival_rps"] == 0.001 and r["prefill_replicas"] == 1
             and r["decode_replicas"] == 2 and r["prefill_batch_size"] == 1)
    assert r["prefill_t_svc_ms"] == pytest.approx(TTFT, rel=1e-12)
    assert r["ttft_mean_ms"] == pytest.approx(TTFT, rel=1e-3)
    assert r["prefill_wait_mean_ms"] < 1e-3 * TTFT and r["prefill_batching_mean_ms"] < 1e-3 * TTFT
    assert r["tpot_mean_ms"] == pytest.approx(TPOT, rel=1e-4)
    assert r["decode_sojourn_mean_ms"] == pytest.approx(99 * TPOT, rel=1e-4)
    # no slot wait (64 slots); the step in progress, u TPOT / 2 with the busy share
    # u = lambda (O - 1) TPOT = 0.0005/s x 1.005 s: 0.00255 ms
    assert r["decode_wait_mean_ms"] == pytest.approx(0.0005 * 99 * TPOT / 1e3 * TPOT / 2, rel=1e-2)
    assert r["transfer_ms"] == pytest.approx(TRANSFER, rel=1e-12)
    assert r["e2e_mean_ms"] == pytest.approx(E2E, rel=1e-4)
    assert (r["prefill_gpus"], r["decode_gpus"], r["total_gpus"]) == (1, 2, 3)
    assert r["cost_usd_per_hour"] == pytest.approx(3 * 2.5)
    assert r["cost_usd_per_mtok"] == pytest.approx(7.5 / (0.001 * 100 * 3600) * 1e6)
    # the percentiles lie above the means
    assert r["ttft_p_ms"] >= r["ttft_mean_ms"] and r["e2e_p_ms"] >= r["e2e_mean_ms"]
    # `sweep explain`'s derivation: the three stages and the end to end, with these numbers
    steps = DisaggregatedModel().derivation(r)
    assert [s.title.split(":")[0] for s in steps] == ["Prefill pool", "KV transfer", "Decode pool", "End to end"]
    assert steps[1].lines[0][1].startswith("125.0 MiB") and steps[3].lines[2][2] == "3 GPUs"


@pytest.mark.slow
@pytest.mark.slow
def test_end_to_end_percentile_adds_the_pools_excesses_in_quadrature(points):
    """E2E at q = the means and the transfer, plus the pools' excesses of the percentile over
    the mean in quadrature (`compose.QuadratureSum`, exact for independent gaussian sojourns),
    so between the larger of (one pool's percentile + the other's mean) and the sum of the
    percentiles, plus the transfer."""
    rows, _ = points
    checked = 0
    for r in rows:
        if not r["stable"]:
            assert r["e2e_p_ms"] is None
            continue
        m1, q1 = r["ttft_mean_ms"], r["ttft_p_ms"]
        m2, q2 = r["decode_sojourn_mean_ms"], r["decode_sojourn_p_ms"]
        t = r["transfer_ms"]
        assert r["e2e_p_ms"] == pytest.approx(m1 + m2 + t + math.hypot(q1 - m1, q2 - m2), rel=1e-12)
        assert max(q1 + m2, m1 + q2) + t <= r["e2e_p_ms"] * (1 + 1e-12)
        assert r["e2e_p_ms"] <= (q1 + q2 + t) * (1 + 1e-12)
        checked += 1
    assert checked >= 8


def test_the_split_with_the_fewest_gpus_is_the_answer(points):
    rows, text = points
    loaded = [r for r in rows if r["arrival_rps"] == 6.0]
    # at 6 requests/s one prefill replica of batch 1 serves 1 / 60.1 ms = 16.6 prompts/s and
    # one decode replica holds the load: the smallest split meets every SLO
    ok = [r for r in loaded if r["slo_ok"] and r["feasible"]]
    assert ok and min(r["total_gpus"] for r in ok) == 2
    assert "prefill_replicas" in text and "TTFT" in text


def test_transfer_term_against_its_closed_form():
    """kv_bytes_per_token x P / bandwidth + latency, from the link catalog's figures."""
    import jax.numpy as jnp

    link = DisaggregatedModel.link
    x = {"kv_elems_per_token": jnp.float64(65536.0), "kv_bytes_per_elem": jnp.float64(1.0),
         "prompt_tokens": jnp.float64(4000.0), "link_bytes_per_s": jnp.float64(LINKS["roce-100g"].bytes_per_s),
         "link_latency_s": jnp.float64(LINKS["roce-100g"].latency_s), "link_bw": jnp.float64(450e9)}
    # 65,536 x 1 x 4000 bytes over 100 Gb/s = 1.25e10 bytes/s: 20.97152 ms, plus 20 us
    assert float(link.delay_ms(x)) == pytest.approx(20.97152 + 0.02, rel=1e-12)
    del x["link_bytes_per_s"]  # the nvlink link: the GPU entry's interconnect
    assert float(link.delay_ms(x)) == pytest.approx(65536 * 4000 / 450e9 * 1e3 + 0.02, rel=1e-12)


def test_cached_prompts_at_light_load_against_the_closed_form():
    """The continuous analytic with prefilled=True, one sequence at a time (the module
    docstring's TPOT, and capacity 1 / ((O - 1) TPOT) for one slot)."""
    p, o, tf, tt, tc = 1000.0, 200.0, 0.012, 5e-5, 1e-8
    r = cb_point(1e-7, p, 0.0, o, 0.0, 1.0, math.inf, math.inf, 1.0, tf, tt, tc, 0.0, 0.99, prefilled=True)
    tpot = tf + tt + tc * (p + o / 2)
    assert float(r["tpot_mean"]) == pytest.approx(tpot, rel=1e-6)
    assert float(r["e2e_mean"]) == pytest.approx((o - 1) * tpot, rel=1e-6)
    assert float(r["capacity_rps"]) == pytest.approx(1.0 / ((o - 1) * tpot), rel=1e-12)
    assert float(r["ttft_prefill"]) == 0.0
    # aggregated, the same request also prefills: TTFT = t_f + (t_t + t_c) P, a lower capacity
    agg = cb_point(1e-7, p, 0.0, o, 0.0, 1.0, math.inf, math.inf, 1.0, tf, tt, tc, 0.0, 0.99)
    assert float(agg["ttft_prefill"]) == pytest.approx(tf + (tt + tc) * p, rel=1e-6)
    assert float(agg["capacity_rps"]) < float(r["capacity_rps"])


@pytest.mark.parametrize("extra, key, words", [
    ("prefill_replicas = 0", "grid.prefill_replicas", "must be"),
    ("decode_replicas = 0", "grid.decode_replicas", "must be"),
    ("link_bytes_per_s = 1e3\nslo_ms = 5000", "grid.link_bytes_per_s", "KV transfer alone"),
    ("prompt_tokens = 600000", "grid.decode_gpus_per_replica", "fewer than one transferred request"),
    ('link = "pigeon"', "grid.link", "is not a known link"),
    ('decode_gpu = "h100-sxn"', "grid.decode_gpu", "= 'h100-sxn': unknown GPU; did you mean 'h100-sxm'?"),
    ('prefill_gpu = ["a100-80gb", "h100-pcie-9000"]', "grid.prefill_gpu", "unknown GPU"),
    ('prefill_gpu = "a100-80gb"\ndecode_gpu = "l40s"', "grid.decode_gpu", "one pool only"),
    # the decode pool's own GPU holds the KV of a transferred request: 100,000 + 100 tokens of
    # 131,072 bytes (Llama 3.1 8B, bf16) = 13.1 GB, beside 16.06 GB of weights: not on an L4's
    # 24 GB (H100 SXM, the prefill pool's gpu here, would hold it)
    ('decode_gpu = "l4"\nprompt_tokens = 100000', "grid.decode_gpus_per_replica", "on 1 x l4 holds"),
])
def test_bad_splits_are_refused_in_one_line_and_nothing_is_written(tmp_path, extra, key, words):
    text = GRID.format(extra=extra if extra.startswith("[") else "")
    for line in ([] if extra.startswith("[") else extra.splitlines()):  # the override replaces the grid's own line
        k = line.split(" = ")[0]
        text = "\n".join(ln for ln in text.splitlines() if not ln.startswith(f"{k} = ")) + ""
        text = text.replace("[grid]\n", f"[grid]\n{line}\n")
    grid = tmp_path / "bad.toml"
    grid.write_text(text)
    rc, out, err = _run(["run", str(grid), "--out", str(tmp_path / "run"), "--progress", "none"])
    assert rc == 2, (out, err)
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1 and key in lines[0] and words in lines[0], err
    assert not (tmp_path / "run").exists()


def test_a_missing_pool_key_is_named_with_its_pool_in_the_example_too(tmp_path):
    grid = tmp_path / "missing.toml"
    grid.write_text("\n".join(ln for ln in GRID.format(extra="").splitlines()
                               if not ln.startswith("prefill_batch_size = ")))
    rc, out, err = _run(["run", str(grid), "--out", str(tmp_path / "run"), "--progress", "none"])
    assert rc == 2, (out, err)
    assert err.strip().endswith("grid.prefill_batch_size = None: is required, e.g. prefill_batch_size = [1, 8, 32]")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("prompt", [200.0, 2000.0, 8000.0])
def test_cached_prompts_decode_faster_than_aggregated_steps(prompt):
    """At the same load per replica, the decode pool's steps carry no prompt tokens: its TPOT
    is below the aggregated engine's and its capacity above (the aggregated engine also
    spends t_token P + t_ctx P of prefill work per request, step 1 of the analytic model's
    derivation); the gap grows with the prompt."""
    o, tf, tt, tc = 200.0, 0.010, 5e-5, 1e-7
    lam = 0.3 / ((o - 1) * (tf / 64 + tt + tc * (prompt + o / 2)) + (tt + tc) * prompt)  # 30% of the token work
    args = (lam, prompt, 0.0, o, 0.0, 64.0, math.inf, math.inf, 1.0, tf, tt, tc, 0.0, 0.99)
    dis, agg = cb_point(*args, prefilled=True), cb_point(*args)
    assert bool(dis["stable"]) and bool(agg["stable"])
    assert float(dis["tpot_mean"]) < float(agg["tpot_mean"])
    assert float(dis["capacity_rps"]) > float(agg["capacity_rps"])
    # with one slot the capacities are the closed forms 1 / E[S]: (O - 1) decode steps, plus
    # the prefill step t_f + (t_t + t_c) P aggregated
    one = (1e-9, prompt, 0.0, o, 0.0, 1.0, math.inf, math.inf, 1.0, tf, tt, tc, 0.0, 0.99)
    decode = (o - 1) * (tf + tt + tc * (prompt + o / 2))
    assert float(cb_point(*one, prefilled=True)["capacity_rps"]) == pytest.approx(1 / decode, rel=1e-12)
    assert float(cb_point(*one)["capacity_rps"]) == pytest.approx(1 / (decode + tf + (tt + tc) * prompt), rel=1e-12)


# --------------------------------------------------------------------------- a GPU kind per pool

MIXED = """
name = "pools"
[grid]
model = "llama-3.1-8b"
gpu = ["h100-sxm", "l40s"]
{pool_gpu}
arrival_rps = [1.0, 6.0]
prompt_tokens = 1000
output_tokens = 100
ttft_slo_ms = 400
tpot_slo_ms = 30
link = "nvlink"
prefill_replicas = [1, 2]
decode_replicas = [1, 2]
prefill_batch_window_ms = 0
prefill_batch_size = [1, 4]
decode_batch_size = [16, 64]
[options]
serving = "disaggregated"
"""


def _spec(pool_gpu: str = "", **grid: object):
    import tomllib

    from sweep.api import grid_from_dict

    doc = tomllib.loads(MIXED.format(pool_gpu=pool_gpu))
    doc["grid"].update(grid)
    return grid_from_dict(doc)


def test_a_pool_of_its_own_gpu_loads_its_gpu_and_columns():
    """`decode_gpu` names the decode pool's GPU (the prefill pool stays on `gpu`): the spec
    holds every GPU named, `gpu`'s first; the pool GPU columns are written only then."""
    spec = _spec('decode_gpu = ["a100-80gb", "l40s"]')
    assert [g.name for g in spec.gpus] == ["h100-sxm", "l40s", "a100-80gb"]
    assert spec.part_gpu_keys == ("decode_gpu",)
    names = [c.name for c in spec.point_columns()]
    assert names[:5] == ["point_id", "model", "gpu", "prefill_gpu", "decode_gpu"]
    plain = [c.name for c in _spec().point_columns()]
    assert "prefill_gpu" not in plain and "decode_gpu" not in plain
    # the decode memory rule reads the decode pool's GPU: an L4 prefill pool beside an H100
    # decode pool loads with prompts an L4 decode replica could not hold (the bad-input case)
    spec = _spec('decode_gpu = "h100-sxm"', gpu="l4", prompt_tokens=100000)
    assert [g.name for g in spec.gpus] == ["l4", "h100-sxm"]


def _rows(tmp_path, name: str, pool_gpu: str) -> tuple[list[dict], str, object]:
    grid = tmp_path / f"{name}.toml"
    grid.write_text(MIXED.format(pool_gpu=pool_gpu))
    rc, text, err = _run(["run", str(grid), "--out", str(tmp_path / name), "--progress", "none"])
    assert rc == 0, (text, err)
    return pq.read_table(tmp_path / name / "points").to_pylist(), text, tmp_path / name


@pytest.mark.slow
def test_each_pool_on_its_own_gpu_is_that_pool_on_that_gpu_alone(tmp_path):
    """Self-consistency, stated as such: with `decode_gpu` the prefill pool runs on `gpu` and
    the decode pool on `decode_gpu`; each pool's columns (roofline step times, memory, GPUs,
    price) equal that pool's in the run of the same grid where both pools share `gpu` = its
    GPU, the fleet's price is the two pools' prices summed, and the nvlink transfer runs at the
    slower GPU's interconnect (L40S: PCIe Gen4 x16, 32 GB/s one way; H100 SXM: 450 GB/s)."""
    mixed, text, run = _rows(tmp_path, "mixed", 'decode_gpu = ["l40s", "h100-sxm"]')
    alone, _, _ = _rows(tmp_path, "alone", "")
    knobs = ("arrival_rps", "prefill_replicas", "decode_replicas", "prefill_batch_size", "decode_batch_size")
    ref = {(r["gpu"], *(r[k] for k in knobs)): r for r in alone}
    prefill = [c for c in mixed[0] if c.startswith("prefill_") and c != "prefill_gpu"] + ["ttft_mean_ms", "ttft_p_ms"]
    decode = [c for c in mixed[0] if c.startswith("decode_") and c != "decode_gpu"] + ["tpot_mean_ms", "tpot_p_ms"]
    assert "prefill_t_svc_fixed_ms" in prefill and "decode_step_fixed_ms" in decode and "decode_free_gb" in decode
    pairs = set()
    for r in mixed:
        assert r["prefill_gpu"] == r["gpu"]
        pairs.add((r["prefill_gpu"], r["decode_gpu"]))
        p, d = ref[(r["prefill_gpu"], *(r[k] for k in knobs))], ref[(r["decode_gpu"], *(r[k] for k in knobs))]
        for cols, one in ((prefill, p), (decode, d)):
            for c in cols:
                assert r[c] == pytest.approx(one[c], rel=1e-12, abs=0.0) if isinstance(one[c], float) \
                    else r[c] == one[c], (c, r, one)
        assert r["cost_usd_per_hour"] == pytest.approx(p["prefill_cost_usd_per_hour"] + d["decode_cost_usd_per_hour"],
                                                       rel=1e-12)
        assert r["link_bytes_per_s"] == min(p["link_bytes_per_s"], d["link_bytes_per_s"])
        assert r["total_gpus"] == p["prefill_gpus"] + d["decode_gpus"]
        if r["cost_usd_per_mtok"] is not None:
            assert r["cost_usd_per_mtok"] == pytest.approx(
                r["cost_usd_per_hour"] / (r["output_tok_s"] * 3600) * 1e6, rel=1e-12)
    assert pairs == {(a, b) for a in ("h100-sxm", "l40s") for b in ("l40s", "h100-sxm")}
    # the decode GPU moves the decode pool's step times (not a comparison of equal rows)
    step = {r["decode_gpu"]: r["decode_step_ctx_ms"] for r in mixed}
    assert step["l40s"] > step["h100-sxm"]
    h100_l40s = next(r for r in mixed if (r["gpu"], r["decode_gpu"]) == ("h100-sxm", "l40s"))
    # the catalog's prices: H100 SXM 2.5 USD/h, L40S 1.1 USD/h per GPU; PCIe one way 32 GB/s
    assert h100_l40s["prefill_cost_usd_per_hour"] == pytest.approx(2.5 * h100_l40s["prefill_gpus"])
    assert h100_l40s["decode_cost_usd_per_hour"] == pytest.approx(1.1 * h100_l40s["decode_gpus"])
    assert h100_l40s["link_bytes_per_s"] == 32e9
    # the GPU names are dictionary-encoded like gpu, in points and optimum.parquet
    points, optimum = pq.read_schema(next(run.glob("points/*.parquet"))), pq.read_schema(run / "optimum.parquet")
    for schema in (points, optimum):
        for key in ("gpu", "prefill_gpu", "decode_gpu"):
            assert str(schema.field(key).type) == "dictionary<values=string, indices=int32, ordered=0>", key
    assert "decode_gpu" in text  # the terminal's answers name the decode pool's GPU


def test_a_searched_split_keeps_the_pools_own_gpu():
    """`[search]` beside a `decode_gpu` axis (one study per decode GPU): the plan's catalog
    tables hold the decode pool's GPUs after `gpu`'s, and each study feeds the kernel the
    index of its own decode GPU."""
    import tomllib

    from sweep.api import grid_from_dict
    from sweep.search import make_plan
    from sweep.search.study import kernel_values

    doc_search = {"objective": "min_cost", "trials": 8, "params": {"decode_replicas": {"low": 1, "high": 2}}}
    doc = tomllib.loads(MIXED.format(pool_gpu='decode_gpu = ["a100-80gb", "l40s"]'))
    doc["grid"].update(gpu="h100-sxm")
    doc["search"] = doc_search
    spec = grid_from_dict(doc)
    plan = make_plan(spec)
    names = [g.name for g in plan.gpus]
    assert names[0] == "h100-sxm" and {"a100-80gb", "l40s"} <= set(names)
    for scenario in plan.studies:
        v = kernel_values(plan, scenario, {"decode_replicas": np.array([1.0])}, 1)
        assert names[int(v["decode_gpu"][0])] == scenario["decode_gpu"][0]
        assert names[int(v["gpu"][0])] == "h100-sxm"
