"""`sweep ask`: the grid it builds from flags, its refusals (one line, exit 2, nothing
written), and one end-to-end question whose answer is checked against the optimum table it
wrote and whose saved grid `sweep run` reproduces. Also: `--out` defaults to runs/<grid
file stem> for every command that takes it."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sweep.catalog import packaged_catalog
from sweep.cli import main
from sweep.cli.ask import (
    BUDGETS,
    CAPS,
    N_REPLICAS,
    TP_SIZES,
    AskQuestion,
    build_ask_grid,
    replica_counts,
    to_toml,
    tp_sizes,
)
from sweep.cli.main import _parser, default_out
from sweep.errors import CatalogError, GridError
from sweep.grid.load import build

#: The issue's question: Llama 3.1 70B on H100, 1,500/300-token chat, 40 req/s, P99 TTFT 2 s, TPOT 60 ms.
QUESTION = AskQuestion(model="llama-3.1-70b", gpus=("h100-sxm",), rate_rps=40.0, prompt_tokens=1500.0,
                       output_tokens=300.0, ttft_ms=2000.0, tpot_ms=60.0)
FLAGS = ["--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--prompt-tokens", "1500", "--output-tokens", "300",
         "--rate", "40", "--ttft-ms", "2000", "--tpot-ms", "60"]


def test_the_grid_a_planner_would_write() -> None:
    doc = build_ask_grid(QUESTION, packaged_catalog())
    g = doc["grid"]
    assert doc["name"] == "ask-llama-3.1-70b-h100-sxm-40rps-1500x300"
    assert doc["options"]["serving"] == "continuous"
    assert g["gpus_per_replica"] == list(TP_SIZES)
    assert g["batch_size"] == list(CAPS) and g["max_batched_tokens"] == list(BUDGETS)
    assert (g["arrival_rps"], g["prompt_tokens"], g["output_tokens"]) == (40.0, 1500.0, 300.0)
    assert (g["ttft_slo_ms"], g["tpot_slo_ms"], g["percentile"]) == (2000.0, 60.0, 0.99)
    assert "slo_ms" not in g  # no E2E SLO asked for: the grid's default (none)
    # 4 replicas per req/s of the rate: 160, in N_REPLICAS counts
    assert g["replicas"] == replica_counts(160) and len(g["replicas"]) == N_REPLICAS
    assert g["replicas"][0] == 1 and g["replicas"][-1] == 160


def test_tp_sizes_that_fit() -> None:
    cat = packaged_catalog()
    # 70,553,706,496 parameters (catalog) x 2 bytes = 141.1 GB of bf16 weights; an H100 has 80 GB, 72 usable at 0.9:
    # TP 2 holds 70.6 GB per GPU, more than 90% of 72 GB (64.8), so TP 4 is the least that leaves a KV cache
    model, gpu = cat.model("llama-3.1-70b"), cat.gpu("h100-sxm")
    assert tp_sizes(model, gpu, 2.0) == [4, 8]
    assert tp_sizes(cat.model("llama-3.1-8b"), gpu, 2.0) == [1, 2, 4, 8]


def test_replica_counts() -> None:
    assert replica_counts(10) == list(range(1, 11))
    for bound in (65, 160, 1024):
        counts = replica_counts(bound)
        assert len(counts) == N_REPLICAS and counts == sorted(set(counts))
        assert counts[0] == 1 and counts[-1] == bound
        assert counts[:8] == list(range(1, 9))  # dense where a step of one replica matters most


def test_saved_grid_reads_back_as_the_same_grid() -> None:
    doc = build_ask_grid(QUESTION, packaged_catalog())
    text = to_toml(doc, header="a header\nof two lines")
    assert tomllib.loads(text) == doc
    spec = build(tomllib.loads(text), source="<test>", text=text)
    assert spec.name == doc["name"]
    assert spec.n_points == len(TP_SIZES) * N_REPLICAS * len(CAPS) * len(BUDGETS)


def test_the_engines_per_sequence_cost_reaches_the_grid(capsys: pytest.CaptureFixture[str]) -> None:
    """`--t-seq-us` is the grid's `t_seq_us` (absent without it: the grid's default 0); out of
    its domain it is one line and exit 2."""
    from dataclasses import replace

    assert "t_seq_us" not in build_ask_grid(QUESTION, packaged_catalog())["grid"]
    doc = build_ask_grid(replace(QUESTION, t_seq_us=45.0), packaged_catalog())
    assert doc["grid"]["t_seq_us"] == 45.0
    text = to_toml(doc)
    assert build(tomllib.loads(text), source="<test>", text=text).n_points > 0
    assert main(["ask", *FLAGS, "--t-seq-us", "-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--t-seq-us" in err


@pytest.mark.parametrize(("flag", "value", "key", "hint"), [
    ("--model", "llama-3.1-70", "--model", "did you mean 'llama-3.1-70b'"),
    ("--gpu", "h100", "--gpu", "did you mean"),
    ("--weights", "fp88", "--weights", "did you mean 'fp8'"),
])
def test_unknown_names_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
                                           value: str, key: str, hint: str) -> None:
    argv = list(FLAGS)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    out, saved = tmp_path / "out", tmp_path / "g.toml"
    assert main(["ask", *argv, "--out", str(out), "--save-grid", str(saved)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{key} = '{value}'" in err and hint in err, err
    assert not out.exists() and not saved.exists()


def test_a_model_that_fits_no_tp_size_is_refused() -> None:
    q = AskQuestion(model="llama-3.1-405b", gpus=("l4",), rate_rps=1.0, prompt_tokens=100.0, output_tokens=10.0)
    with pytest.raises(GridError, match=r"--model = 'llama-3.1-405b': .* no room for a KV cache on 8 x l4"):
        build_ask_grid(q, packaged_catalog())


def test_unknown_model_names_the_closest() -> None:
    q = AskQuestion(model="qwen3-23b", gpus=("h200",), rate_rps=1.0, prompt_tokens=100.0, output_tokens=10.0)
    with pytest.raises(CatalogError, match="did you mean"):
        build_ask_grid(q, packaged_catalog())


def test_out_defaults_to_runs_grid_stem() -> None:
    assert default_out(Path("grids/llm-fleet.toml")) == Path("runs/llm-fleet")
    p = _parser()
    for argv in (["run", "g.toml"], ["plan", "g.toml"], ["search", "g.toml"]):
        assert p.parse_args(argv).out is None  # the handler fills runs/g in
    assert p.parse_args(["ask", *FLAGS]).out is None  # runs/ask-<question>


@pytest.mark.slow  # compiles the continuous-serving kernel once (about 25 s of CPU cold, seconds warm)
def test_ask_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["ask", *FLAGS, "--save-grid", "q.toml", "--quiet"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = Path("runs") / "ask-llama-3.1-70b-h100-sxm-40rps-1500x300"  # the default --out
    assert (out / "manifest.json").is_file() and Path("q.toml").is_file()
    # the answer is the run's recommendation: the cheapest recommended configuration over the
    # scenario groups of optimum.parquet (ties: the lower group_id), priced per output token by
    # USD/h / (rate x output tokens x 3600 s) x 1e6
    rows = [r for r in pq.read_table(out / "optimum.parquet").to_pylist() if r["is_recommended"]]
    best = min(rows, key=lambda r: (r["recommended_cost_usd_per_hour"], r["group_id"]))
    usd = best["recommended_cost_usd_per_hour"]
    answer = next(line for line in lines if line.startswith("answer: "))
    assert f"{best['recommended_replicas']} x h100-sxm TP {best['gpus_per_replica']}" in answer
    assert f"${usd:,.2f}/h" in answer
    assert f"${usd / (40.0 * 300.0 * 3600.0) * 1e6:,.3f} per M output tokens" in answer
    assert best["recommended_rho"] <= best["rho_max"] and best["recommended_tpot_p_ms"] <= 60.0
    assert any(line.startswith("runner-up: ") for line in lines)
    # without --quiet (the run is found complete) it also prints the launch and benchmark
    # commands of the recommendation and writes them beside the run (sweep deploy)
    assert main(["ask", *FLAGS]) == 0
    text = capsys.readouterr().out
    assert "vllm serve " in text and "vllm bench serve" in text
    assert f"--max-num-seqs {best['recommended_batch']}" in text
    assert (out / "deploy" / "launch.sh").is_file() and (out / "deploy" / "bench.sh").is_file()
    # the saved grid reproduces the run: into the same folder it is the identical finished run,
    # and into its default folder (runs/q) it writes the same answers
    assert main(["run", "q.toml", "--out", str(out)]) == 0
    assert "already complete" in capsys.readouterr().out
    assert main(["run", "q.toml", "--quiet"]) == 0
    again = pq.read_table(Path("runs") / "q" / "optimum.parquet").to_pylist()
    first = pq.read_table(out / "optimum.parquet").to_pylist()
    assert [r["replicas_min"] for r in again] == [r["replicas_min"] for r in first]
    assert all(math.isclose(a["cost_usd_per_hour"], b["cost_usd_per_hour"]) for a, b in zip(again, first, strict=True))
