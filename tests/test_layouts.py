"""Disaggregate or not (`sweep.decide.layouts`): a disaggregated grid's recommendation beside
the best aggregated (continuous) configuration of the same workload, in optimum.parquet, the
terminal answer, `sweep show`, `sweep explain` and the report.

References, and where they come from:

* The decision rule (`test_the_verdict_rule_case_by_case`): hand-built answers, one per case
  of the rule in the module's docstring (cheaper, a tie, only one layout, neither).
* The companion grid (`test_the_companion_grid_spans_the_same_gpus`): the largest split of
  the grid below, 3 prefill x 2 GPUs + 2 decode x 1 GPU = 8 GPUs, so one-GPU replicas up to 8.
* The flip (`flip_run`): given step coefficients t_f = 8 ms, t_t = 0.05 ms/token,
  t_c = 1e-4 ms, 8 requests/s of 50-token answers under a 14 ms TPOT.
  - Prompts of 4,000 tokens (prefill-bound): in one pool every step that carries a prompt
    chunk of the smallest budget the companion tries (512 tokens) takes at least
    t_f + 512 t_t = 33.6 ms, and 8 x 4,000 = 32,000 prompt tokens/s keep such steps in
    every request's 49 decode steps, so the decode phase's P99 TPOT stays above 14 ms
    (prefill interference, the case for disaggregation: DistServe, OSDI 2024); a decode
    pool's steps carry no prompt (8 + 0.05 r + 1e-4 r (P + j) ms), so only the split meets
    the SLO.
  - Prompts of 200 tokens (decode-bound): the split needs at least one GPU per pool (2);
    one pool of one GPU meets both SLOs, so the verdict goes to one pool and saves a GPU.
* The aggregated answer equals the same continuous grid planned on its own
  (`sweep.api.decide`): a self-consistency check, stated as such.
"""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sweep
from sweep.cli import main
from sweep.decide.layouts import (
    COMPANION_BUDGETS,
    LAYOUT_COLUMNS,
    LAYOUT_REASONS,
    SHARED_KEYS,
    aggregated_grid,
    layout_rows,
    verdict_text,
)

FLIP = """
name = "flip"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
arrival_rps = 8.0
prompt_tokens = [4000, 200]
output_tokens = 50
t_fixed_ms = 8.0
t_token_ms = 0.05
t_ctx_ms = 0.0001
ttft_slo_ms = 2000
tpot_slo_ms = 14
prefill_replicas = [1, 2, 3, 4]
decode_replicas = [1, 2, 3, 4]
prefill_batch_window_ms = 0
prefill_batch_size = [1, 4]
decode_batch_size = [64, 256]
[options]
serving = "disaggregated"
"""


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _spec(**grid):
    doc = {"name": "t", "options": {"serving": "disaggregated"}, "grid": {
        "model": "llama-3.1-8b", "gpu": "h100-sxm", "arrival_rps": 8.0, "prompt_tokens": 2000, "output_tokens": 200,
        "ttft_slo_ms": 500, "tpot_slo_ms": 30, "prefill_replicas": [1, 2], "decode_replicas": [1, 2],
        "prefill_batch_size": [1, 4], "decode_batch_size": [32, 64], **grid}}
    return sweep.grid_from_dict(doc)


def test_the_companion_grid_spans_the_same_gpus():
    spec = _spec(prefill_replicas=[1, 3], prefill_gpus_per_replica=2, decode_replicas=[1, 2],
                 decode_max_batched_tokens=[1000, math.inf], tpot_slo_ms=[15, 30])
    doc = aggregated_grid(spec)
    grid = doc["grid"]
    assert doc["options"]["serving"] == "continuous"
    assert grid["gpus_per_replica"] == [1, 2]
    assert grid["replicas"] == list(range(1, 9))  # 3 x 2 + 2 x 1 = 8 GPUs of one-GPU replicas
    assert grid["max_batched_tokens"] == sorted({1000, *COMPANION_BUDGETS})  # the finite decode budget too
    assert grid["batch_size"] == [32, 64]
    assert grid["tpot_slo_ms"] == [15.0, 30.0] and grid["arrival_rps"] == 8.0 and grid["model"] == "llama-3.1-8b"
    sweep.grid_from_dict(doc)  # a valid continuous grid


def test_the_verdict_rule_case_by_case():
    """Six workloads (arrival_rps 1..6), one per case of the rule: the split's price against
    the best aggregated configuration's (NULL: no answer)."""
    spec = _spec(arrival_rps=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    inf = math.inf
    split = [(5.0, 2), (5.0, 2), (7.5, 3), (5.0, 2), (inf, inf), (inf, inf)]  # (USD/h, GPUs)
    one = [(7.5, 3), (5.0, 2), (5.0, 2), None, (5.0, 2), None]
    optimum = pa.table({"group_id": np.arange(6, dtype=np.int64),
                        "recommended_cost_usd_per_hour": [None if math.isinf(c) else c for c, _ in split],
                        "recommended_gpus": [None if math.isinf(g) else int(g) for _, g in split]})
    keys = [k for k in SHARED_KEYS if any(a.key == k for a in spec.axes)]  # how the verdict matches workloads
    best = {}
    for i, agg in enumerate(one):
        if agg is not None:
            key = tuple(float(i + 1) if k == "arrival_rps" else spec.axis(k).values[0] for k in keys)
            best[key] = {"aggregated_cost_usd_per_hour": agg[0], "aggregated_gpus": float(agg[1])}
    out = layout_rows(spec, optimum, best)
    reason = [LAYOUT_REASONS[c] for c in out["layout_reason"]]
    assert reason == ["cheaper", "same_cost", "cheaper", "only_layout_meeting_slo", "only_layout_meeting_slo",
                      "neither_meets_slo"]
    assert out["disaggregate"].tolist() == [1.0, 0.0, 0.0, 1.0, 0.0, inf]  # inf: NULL in the file
    assert out["gpus_saved"].tolist() == [1.0, 0.0, -1.0, inf, inf, inf]
    assert out["usd_per_hour_saved"].tolist() == [2.5, 0.0, -2.5, inf, inf, inf]
    words = [verdict_text({"layout_reason": r, "disaggregate": d, "gpus_saved": g, "usd_per_hour_saved": u})
             for r, d, g, u in zip(reason, out["disaggregate"], out["gpus_saved"], out["usd_per_hour_saved"])]
    assert words[0] == "disaggregate: saves 1 GPU, 2.50 USD/h"
    assert words[1].startswith("aggregate: the split costs the same")
    assert words[2] == "aggregate: one pool saves 1 GPU, 2.50 USD/h"
    assert words[5] == "neither layout meets every SLO within the grid's GPUs"


@pytest.fixture(scope="module")
def flip_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("flip")
    grid = base / "flip.toml"
    grid.write_text(FLIP)
    rc, text, err = _run(["run", str(grid), "--out", str(base / "run"), "--progress", "none"])
    assert rc == 0, (text, err)
    return base, text


def _verdicts(run):
    t = pq.read_table(run / "optimum.parquet")
    t = t.filter(t.column("is_recommended"))
    return {r["prompt_tokens"]: r for r in t.to_pylist()}


def test_the_verdict_flips_between_prefill_and_decode_bound_mixes(flip_run):
    base, text = flip_run
    v = _verdicts(base / "run")
    heavy, light = v[4000.0], v[200.0]
    assert heavy["disaggregate"] is True and heavy["layout_reason"] == "only_layout_meeting_slo"
    assert heavy["aggregated_gpus"] is None and heavy["gpus_saved"] is None  # NULL, not a made-up number
    assert heavy["recommended_tpot_p_ms"] <= 14
    assert light["disaggregate"] is False and light["layout_reason"] == "cheaper"
    assert light["aggregated_gpus"] == 1 and light["recommended_gpus"] == 2 and light["gpus_saved"] == -1
    assert light["usd_per_hour_saved"] == pytest.approx(-2.5)
    assert "disaggregate or not" in text and "disaggregate: only the split meets every SLO" in text
    assert "aggregate: one pool saves 1 GPU, 2.50 USD/h" in text
    # every row of a group carries its group's verdict, and the schema says what each column is
    t = pq.read_table(base / "run" / "optimum.parquet")
    for c in LAYOUT_COLUMNS:
        assert c.name in t.column_names and t.schema.field(c.name).metadata[b"description"]
    per_group = {}
    for r in t.select(["group_id", "disaggregate", "layout_reason"]).to_pylist():
        assert per_group.setdefault(r["group_id"], (r["disaggregate"], r["layout_reason"])) == (
            r["disaggregate"], r["layout_reason"])


@pytest.mark.slow
def test_the_aggregated_answer_is_the_continuous_grid_planned_alone(flip_run):
    base, _ = flip_run
    light = _verdicts(base / "run")[200.0]
    spec = sweep.load_grid(base / "flip.toml")
    doc = aggregated_grid(spec)
    doc["grid"]["prompt_tokens"] = 200
    opt, _ = sweep.api.decide(sweep.grid_from_dict(doc))
    rec = opt.filter(opt.column("is_recommended")).to_pylist()
    cheapest = min(rec, key=lambda r: (r["recommended_cost_usd_per_hour"], r["recommended_gpus"]))
    assert light["aggregated_replicas"] == cheapest["recommended_replicas"]
    assert light["aggregated_batch_size"] == cheapest["recommended_batch"]
    assert light["aggregated_max_batched_tokens"] == cheapest["recommended_max_batched_tokens"]
    assert light["aggregated_tpot_p_ms"] == cheapest["recommended_tpot_p_ms"]
    assert light["aggregated_cost_usd_per_m_output_tok"] == cheapest["recommended_cost_usd_per_m_output_tok"]


@pytest.mark.slow
def test_show_explain_and_report_carry_the_verdict(flip_run, tmp_path):
    base, _ = flip_run
    run = base / "run"
    rc, shown, err = _run(["show", str(run)])
    assert rc == 0, err
    assert "disaggregate: only the split meets every SLO" in shown
    rc, said, err = _run(["explain", str(run), "prompt_tokens=200"])
    assert rc == 0, err
    assert "disaggregate or not" in said and "aggregate: one pool saves 1 GPU" in said
    pytest.importorskip("plotly")
    from sweep.reporting.api import build_report

    result = build_report(run, tmp_path / "r.html")
    assert "layouts" in result.figures or "layouts" in result.skipped
    page = (tmp_path / "r.html").read_text()
    assert "Disaggregate or not" in page and "disaggregate: only the split meets every SLO" in page


def test_a_pool_on_its_own_gpu_is_compared_with_one_pool_on_either_kind():
    """A group whose decode pool runs on another GPU kind is compared with the best one pool
    over the kinds its pools use (hand-built answers: one pool on the H100 at 5.00 USD/h, on
    the A100 at 4.30). Group 0 (both pools on the H100) sees the H100 only; group 1 (decode on
    the A100) sees both, and the cheaper names its GPU."""
    spec = _spec(decode_gpu=["h100-sxm", "a100-80gb"])
    assert aggregated_grid(spec)["grid"]["gpu"] == ["h100-sxm", "a100-80gb"]
    keys = [k for k in SHARED_KEYS if any(a.key == k for a in spec.axes)]
    at = keys.index("gpu")

    def key(gpu):
        return tuple(gpu if i == at else spec.axis(k).values[0] for i, k in enumerate(keys))

    best = {key("h100-sxm"): {"aggregated_cost_usd_per_hour": 5.0, "aggregated_gpus": 2.0,
                              "aggregated_cost_usd_per_m_output_tok": 0.868},
            key("a100-80gb"): {"aggregated_cost_usd_per_hour": 4.3, "aggregated_gpus": 2.0,
                               "aggregated_cost_usd_per_m_output_tok": 0.747}}
    decision = set(spec.model.decisions.decision_axes)
    scen = [a for a in spec.axes if a.key not in decision]
    assert [a.key for a in scen if len(a) > 1] == ["decode_gpu"]
    optimum = pa.table({"group_id": np.arange(2, dtype=np.int64), "recommended_cost_usd_per_hour": [5.0, 4.3],
                        "recommended_gpus": [2, 2]})
    out = layout_rows(spec, optimum, best)
    names = [g.name for g in spec.gpus]
    assert [names[c] for c in out["aggregated_gpu"]] == ["h100-sxm", "a100-80gb"]
    assert out["aggregated_cost_usd_per_hour"].tolist() == [5.0, 4.3]
    assert [LAYOUT_REASONS[c] for c in out["layout_reason"]] == ["same_cost", "same_cost"]
    assert out["disaggregate"].tolist() == [0.0, 0.0]
