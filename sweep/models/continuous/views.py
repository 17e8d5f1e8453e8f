"""How continuous batching's results read (`sweep.models.views`): the cap N on running
sequences and the token budget M (vLLM's max_num_seqs and max_num_batched_tokens), the
TTFT / TPOT / E2E checks, the per-point tables, and the report's figures (TTFT and TPOT
against the cap and against load, load against the cap, the KV cache at the answers'
points, throughput per GPU against throughput per user)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sweep.models.continuous.confidence import LOAD_MAX
from sweep.models.continuous.slos import SLOS
from sweep.models.views import (
    AgainstLoad,
    Answers,
    Axis,
    CapLines,
    Card,
    Caveat,
    Cell,
    Check,
    Explain,
    Frontier,
    KvBudget,
    Mark,
    Note,
    Panel,
    Plan,
    PointTable,
    Regions,
    Scatter,
    Threshold,
    Utilisation,
    Value,
    Views,
    fixed,
)


def _engine_line(r: Mapping[str, Any]) -> str:
    """The report's line under a scenario row's table: the load, the lengths, the step, the KV."""
    return (f"lambda {fixed(r.get('lambda_per_replica_rps'), 3)} req/s per replica; prompts "
            f"{fixed(r.get('prompt_tokens'), 0)} and outputs {fixed(r.get('output_tokens'), 0)} tokens on average; "
            f"step t_fixed {fixed(r.get('t_step_fixed_ms'), 3)} ms, t_token {fixed(r.get('t_token_ms'), 4)} ms, "
            f"t_ctx {fixed(r.get('t_ctx_ms'), 6)} ms; KV capacity {fixed(r.get('kv_capacity_tokens'), 0)} tokens "
            f"beside {fixed(r.get('weights_gb'), 0)} GB of weights")


_RHO = Cell("rho", "rho", percent=True, flag="stable", flag_text=" (unstable)")

VIEWS = Views(
    loads=(("arrival_rps", "arrival", " req/s"), ("clients", "clients", "")),
    axes=(
        Axis("max_batched_tokens", symbol="M", title="token budget M (tokens per step)", short="token budget M",
             hover="token budget", inf="no budget", inf_text="no token budget", legend_inf="no token budget (inf)",
             value="budget {:g} tokens", noun="token budget", engine="max_num_batched_tokens"),
        Axis("batch_size", symbol="N", title="cap N on running sequences (batch_size)", short="cap N (batch_size)",
             hover="N", noun="cap on running sequences", engine="max_num_seqs"),
    ),
    checks=tuple(Check(latency, name) for name, latency, _ in SLOS),
    point_table=PointTable(
        title="per point (times in ms; N = cap on running sequences, M = tokens per step)",
        cells=(Cell("N", "batch_size", fmt="{:.0f}"), Cell("M", "max_batched_tokens", fmt="{:.0f}"),
               Cell("running", "mean_running"), Cell("step", "step_mean_ms", 2), Cell("TTFT {q}", "ttft_p_ms"),
               Cell("TPOT {q}", "tpot_p_ms", 2), Cell("E2E {q}", "e2e_p_ms"), Cell("tok/s/GPU", "tok_s_per_gpu"),
               Cell("tok/s/user", "tok_s_per_user", undefined="-"), _RHO)),
    report_table=PointTable(
        cells=(Cell("budget M", "max_batched_tokens", fmt="{:g}", left=True), Cell("N", "batch_size", 0),
               Cell("running", "mean_running"), Cell("step", "step_mean_ms", 2), Cell("TTFT {q}", "ttft_p_ms"),
               Cell("TPOT {q}", "tpot_p_ms", 2), Cell("E2E {q}", "e2e_p_ms", 0), Cell("sim TTFT {q}", "sim_ttft_p_ms"),
               Cell("sim TPOT {q}", "sim_tpot_p_ms", 2), Cell("tok/s/GPU", "tok_s_per_gpu", 0),
               Cell("tok/s/user", "tok_s_per_user", undefined="-"), _RHO, Cell("KV util", "kv_util", percent=True)),
        note=Note(_engine_line),
        legend="From {source}; times in ms; bold rows are the answers' points (b_max_slo, SLO optimum, knee).",
        marks=("b_max_slo", "slo_opt", "knee"), mark_points=True),
    explain=Explain(headline=("model", "gpu", "gpus_per_replica", "arrival_rps", "replicas", "batch_size",
                              "max_batched_tokens", "prompt_tokens", "output_tokens", "slo_ms", "ttft_slo_ms",
                              "tpot_slo_ms", "percentile"),
                    docs="docs/continuous.md"),
    answers=Answers(
        cards=(Card("b_max_slo", "largest cap meeting every SLO (b_max_slo)", "the largest cap meeting every SLO"),
               Card("slo_opt", "SLO optimum (most tok/s per GPU meeting every SLO)", "the SLO optimum"),
               Card("knee", "knee of the frontier", "the frontier's knee"),
               Card("b_latency_opt", "lowest mean E2E (b_latency_opt)", "the lowest mean E2E")),
        values=(Value("TTFT {} ms", "ttft_p_ms"), Value("TPOT {} ms", "tpot_p_ms", 2),
                Value("{} tok/s per GPU", "tok_s_per_gpu"), Value("{} tok/s per user", "tok_s_per_user"),
                Value("rho {}%", "rho", percent=True)),
        replicas="fewest replicas meeting every SLO (replicas_min)"),
    plan=Plan(cells=(Cell("batch", "batch_size", fmt="{:g}"), Cell("token budget", "max_batched_tokens", fmt="{:g}"),
                     Cell("TTFT ms", "ttft_p_ms"), Cell("TPOT ms", "tpot_p_ms", 2)),
              workload=("prompt_tokens", "output_tokens", "ttft_slo_ms", "tpot_slo_ms", "slo_ms"),
              shown=(("prompt_tokens", "prompt tokens"), ("output_tokens", "output tokens")),
              choices="cap, token budget"),
    figures=(
        CapLines("latency", "TTFT and TPOT against the cap",
                 "TTFT and TPOT at the grid's percentile against the cap on running sequences, one line per token "
                 "budget, each SLO dashed, the knee and the SLO optimum of the frontier; caps where the engine cannot "
                 "keep up or out of memory marked along the top.",
                 panels=(Panel("ttft_p_ms", "TTFT {q}", "TTFT {q} (ms)", slo="ttft_slo_ms",
                               slo_name="TTFT SLO {slo:g} ms"),
                         Panel("tpot_p_ms", "TPOT {q}", "TPOT {q} (ms)", slo="tpot_slo_ms",
                               slo_name="TPOT SLO {slo:g} ms")),
                 marks=(Mark("out of memory (latency unbounded)",
                             "the weights or a mean request's reservation do not fit", false="mem_ok"),
                        Mark("unstable (latency unbounded)", "the load exceeds the capacity at this cap and budget",
                             true=("mem_ok",), false="stable"))),
        Utilisation("utilisation", "Load against the cap",
                    "rho = lambda / capacity_rps per token budget, with the operating thresholds rho_max and rho_min.",
                    series=(("rho (load / capacity)", "rho"),),
                    thresholds=(Threshold("rho_max", "rho_max (near saturation above)", "upper"),
                                Threshold("rho_min", "rho_min (overprovisioned below)", "lower")),
                    regions=Regions()),
        KvBudget("kv-budget", "KV budget of one replica",
                 "HBM per replica: the weights, the KV cache reserved on average at the answers' points (kv_util x C), "
                 "and the rest of the KV capacity C.",
                 share="kv_util", capacity="kv_capacity_tokens",
                 marks=(("b_max_slo", "largest cap under the SLOs"), ("slo_opt", "SLO optimum"), ("knee", "knee"))),
        Frontier("frontier", "Pareto frontiers",
                 "Each row's frontier: tok/s per GPU up, tok/s per user up (continuous batching); the knee (star) and "
                 "the SLO optimum (diamond) of every row. One colour per GPU; hover for the scenario.",
                 x="tok_s_per_user", y="tok_s_per_gpu", x_title="tok/s per user", y_title="tok/s per GPU"),
        Scatter("throughput", "Throughput per GPU against throughput per user",
                "Continuous batching: every stable point; up and to the right is better.",
                x="tok_s_per_user", y="tok_s_per_gpu", x_title="tok/s per user (1000 / tpot_mean_ms)",
                y_title="tok/s per GPU"),
        AgainstLoad("ttft-tpot", "TTFT and TPOT against load",
                    "Continuous batching: time to first token and time per output token at the grid's percentile "
                    "against the load per replica, one line per configuration; gaps are unstable.",
                    panels=(("ttft_p_ms", "TTFT", "ttft_slo_ms"), ("tpot_p_ms", "TPOT", "tpot_slo_ms")),
                    config=("model", "gpu", "gpus_per_replica", "prompt_tokens", "output_tokens", "batch_size",
                            "max_batched_tokens", "replicas")),
    ),
    mean_name="mean E2E",
    engine_names={"gpus_per_replica": "tensor_parallel_size"},
    caveats=(Caveat(
        "analytic_trusted",
        "{n} of the {shown} decisions above rest on a point outside the region where the analytic model was shown "
        "accurate (analytic_trusted = false: a cap that is nearly always full, a load at or above "
        f"{LOAD_MAX:.0%} of the capacity). Check them with the "
        "simulator: add "
        "latency_model = \"simulated\" under [options] (the simulator then decides), or a [simulation] table "
        "(sim_* columns beside the analytic ones), and rerun those scenarios (docs/continuous.md).",
        latency_models=("analytic",)),),
)
