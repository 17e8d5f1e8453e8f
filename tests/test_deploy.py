"""sweep.deploy: launch and benchmark commands checked against the engines' real flags, the
memory knobs against the model's KV capacity (closed form), the predicted figures against
the row's columns, and the `[options] engine` key and `hf_id` field.

The engines' flags: tests/data/engine_flags.json, collected from the source files of vLLM
0.34.0 and SGLang 0.5.23 (their PyPI wheels; neither parser imports without torch and a GPU
stack) and of TensorRT-LLM's trtllm-serve (tensorrt_llm/commands/serve.py; its PyPI package is
a stub); the file names each version, file and hash.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sweep.catalog import packaged_catalog
from sweep.deploy import ENGINES, deployment, kv_share
from sweep.deploy.bench import MAX_RANGE_RATIO, lengths, prompts
from sweep.deploy.memory import knob_text
from sweep.errors import CatalogError, DeployError, GridError

ROOT = Path(__file__).resolve().parents[1]
FLAGS = json.loads((ROOT / "tests" / "data" / "engine_flags.json").read_text())
CAT = packaged_catalog()

#: The command words before the flags (and the positional MODEL after them, where there is one).
PREFIX = {"vllm": (["vllm", "serve"], True), "sglang": (["python", "-m", "sglang.launch_server"], False),
          "trtllm": (["trtllm-serve"], True)}
#: The knob each engine's launch sets from the memory plan; a fraction in (0, 1].
KNOBS = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static",
         "trtllm": "--kv_cache_free_gpu_memory_fraction"}


def row_for(model: str = "llama-3.1-70b", gpu: str = "h100-sxm", tp: int = 4, replicas: int = 2, cap: int = 64,
            budget: float = 2048, kv: float = 1.0, weights: float = 1.0, reserve: float = 0.1, paged: bool = True,
            block: int = 16, stable: bool = True, percentile: float = 0.99, **extra: Any) -> dict[str, Any]:
    """A continuous point's row with the model's KV capacity: free = g H (1 - r) - W,
    C = floor(free / k / b) b (sweep/models/continuous/model.py, `_engine` and
    `kv_capacity_tokens`); the latency columns are distinct made-up numbers the tests trace."""
    m, g = CAT.model(model), CAT.gpu(gpu)
    free = tp * g.hbm_bytes * (1 - reserve) - m.weights_bytes(weights)
    b = block if paged else 1
    c = math.floor(max(free, 0.0) / m.kv_bytes_per_token(kv) / b) * b
    row = {"point_id": 7, "model": model, "gpu": gpu, "gpus_per_replica": tp, "replicas": replicas,
           "arrival_rps": 10.0, "lambda_per_replica_rps": 10.0 / replicas, "prompt_tokens": 1000.0, "prompt_cv": 0.3,
           "output_tokens": 200.0, "output_cv": 0.3, "batch_size": cap,
           "max_batched_tokens": budget, "weight_bytes_per_param": weights, "kv_bytes_per_elem": kv,
           "kv_capacity_tokens": float(c), "weights_gb": m.weights_bytes(weights) * 1e-9, "mem_ok": True,
           "stable": stable, "slo_ok": stable, "rho": 0.5, "rho_max": 0.85, "mean_running": 30.0,
           "percentile": percentile, "ttft_mean_ms": 101.0, "ttft_p_ms": 102.0, "tpot_mean_ms": 21.0,
           "tpot_p_ms": 22.0, "itl_p_ms": 23.0, "e2e_mean_ms": 4001.0, "e2e_p_ms": 4002.0, "cost_usd_per_hour": 20.0,
           "cost_usd_per_mtok": 2.78, "analytic_trusted": True}
    row.update(extra)
    return row


def meta(engine: str = "vllm", reserve: float = 0.1, paged: bool = True, block: int = 16) -> dict[str, Any]:
    return {"grid": "t", "source": "t.toml", "engine": engine, "kv_allocation": "paged" if paged else "contiguous",
            "block_tokens": block, "reserve_fraction": reserve, "latency_model": "analytic",
            "service_source": "roofline"}


# --------------------------------------------------------------------------- flags


def _known(engine: str, kind: str) -> dict[str, str]:
    """The engine's flags and value types; vLLM's bool fields are --X / --no-X switches."""
    flags = dict(FLAGS[engine][kind])
    for flag, t in list(flags.items()):
        if t == "bool":
            flags["--no-" + flag[2:]] = "bool"
    return flags


def check_argv(argv: list[str], engine: str, kind: str) -> dict[str, str | None]:
    """Every flag of `argv` exists in the engine's parser and its value has the declared type
    (a fraction knob in (0, 1], a choice among the source's choices); returns flag -> value."""
    known = _known(engine, kind)
    choices = FLAGS[engine].get("choices", {}) if kind == "serve" else {}
    if kind == "serve":
        prefix, positional = PREFIX[engine]
    else:
        prefix, positional = ["vllm", "bench", "serve"], False
    assert argv[: len(prefix)] == prefix
    rest = argv[len(prefix):]
    if positional:
        assert not rest[0].startswith("-")  # MODEL
        rest = rest[1:]
    seen: dict[str, str | None] = {}
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag.startswith("--"), f"{engine} {kind}: stray word {flag!r} in {argv}"
        assert flag in known, f"{engine} {kind}: {flag} is not a flag of the engine's parser"
        assert flag not in seen, f"{flag} given twice"
        t = known[flag]
        if t in ("flag", "bool"):
            seen[flag] = None
            i += 1
            continue
        value = rest[i + 1]
        if t == "int":
            int(value)
        elif t == "float":
            float(value)
        if flag in choices:
            assert value in choices[flag], f"{flag} {value} not among {choices[flag]}"
        if flag in KNOBS.values():
            assert 0.0 < float(value) <= 1.0
        seen[flag] = value
        i += 2
    return seen


VARIANTS = list(itertools.product(ENGINES, (2048.0, math.inf), (2.0, 1.0), (2.0, 1.0), (True, False)))


@pytest.mark.parametrize(("engine", "budget", "kv", "weights", "paged"), VARIANTS)
def test_commands_use_only_real_flags(engine: str, budget: float, kv: float, weights: float, paged: bool) -> None:
    dep = deployment(row_for(budget=budget, kv=kv, weights=weights, paged=paged), meta(engine, paged=paged))
    launch = check_argv(dep.launch, engine, "serve")
    exact = check_argv(dep.launch_exact, engine, "serve")
    bench = check_argv(dep.bench, "vllm", "bench")
    # the knobs the grid sets are all there, with the grid's values
    names = {"vllm": ("--tensor-parallel-size", "--max-num-seqs"), "sglang": ("--tp-size", "--max-running-requests"),
             "trtllm": ("--tp_size", "--max_batch_size")}[engine]
    assert (launch[names[0]], launch[names[1]]) == ("4", "64")
    assert KNOBS[engine] in launch and KNOBS[engine] not in exact
    assert bench["--request-rate"] == "5" and bench["--random-input-len"] == "1000"
    assert bench["--random-output-len"] == "200" and "--ignore-eos" in bench
    if engine == "vllm":
        assert launch["--kv-cache-dtype"] == ("fp8" if kv == 1.0 else "auto")
        assert ("--max-num-batched-tokens" in launch) == math.isfinite(budget)
        assert ("--enable-chunked-prefill" if math.isfinite(budget) else "--no-enable-chunked-prefill") in launch
        assert ("--quantization" in launch) == (weights == 1.0)
    if engine == "sglang":
        assert launch["--chunked-prefill-size"] == ("2048" if math.isfinite(budget) else "-1")
        assert exact["--max-total-tokens"] == str(int(dep.memory.kv_capacity_tokens))
    if engine == "trtllm":
        assert ("--max_num_tokens" in launch) == math.isfinite(budget)
        yaml_keys = FLAGS["trtllm"]["config_yaml"]
        for argv, pinned in ((launch, False), (exact, True)):
            tables = yaml_tables(dep.files[argv["--extra_llm_api_options"]])
            assert list(tables) == ["kv_cache_config", "scheduler_config"]
            table = tables["kv_cache_config"]
            assert set(table) <= set(yaml_keys["kv_cache_config"])
            # the plan reserves prompt + output at admission: the engine's default policy, written out
            assert tables["scheduler_config"] == {"capacity_scheduler_policy": "GUARANTEED_NO_EVICT"}
            assert 0.0 < float(table["free_gpu_memory_fraction"]) <= 1.0
            assert table["dtype"] == ("fp8" if kv == 1.0 else "auto")
            assert ("tokens_per_block" in table) == paged
            assert table.get("max_tokens") == (str(int(dep.memory.kv_capacity_tokens)) if pinned else None)
        # the YAML's table replaces the command line's: the fraction is in both
        assert table_of(dep, launch)["free_gpu_memory_fraction"] == launch["--kv_cache_free_gpu_memory_fraction"]


def yaml_tables(text: str) -> dict[str, dict[str, str]]:
    """The YAML file sweep writes for TensorRT-LLM: top-level tables of `key: value` lines."""
    tables: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if not line.startswith(" "):
            assert line.endswith(":"), line
            tables[line[:-1]] = current = {}
        else:
            key, value = line.strip().split(": ")
            current[key] = value
    return tables


def table_of(dep: Any, launch: Mapping[str, str | None]) -> dict[str, str]:
    return yaml_tables(dep.files[launch["--extra_llm_api_options"]])["kv_cache_config"]


def test_vendored_flags_name_their_source() -> None:
    for engine in ENGINES:
        e = FLAGS[engine]
        assert e["version"] and e["source"] and e["files"]
        assert len(e["serve"]) > 30  # the whole parser, not a hand-picked subset
    assert FLAGS["vllm"]["version"] == "0.34.0" and FLAGS["sglang"]["version"] == "0.5.23"
    # flags the brief's own sketch used that the engines do not have (SGLang's --tp is no flag of 0.5.23)
    assert "--tp" not in FLAGS["sglang"]["serve"] and "--tp-size" in FLAGS["sglang"]["serve"]


# --------------------------------------------------------------------------- memory


def test_knobs_by_hand() -> None:
    """Llama 3.1 70B on 4 H100 (80e9 B), FP8 weights and KV, reserve 0.1, 16-token blocks:
    W = 70,553,706,496 B (catalog n_params x 1), k = 80 layers x 2 x 8 heads x 128 x 1 B = 163,840 B,
    free = 4 x 80e9 x 0.9 - W = 217,446,293,504 B, C = floor(free / k / 16) x 16 = 1,327,184 tokens;
    SGLang f = (W/4 + C k / 4) / 80e9 = (17,638,426,624 + 54,361,456,640) / 80e9 = 0.89999854."""
    row = row_for()
    assert row["kv_capacity_tokens"] == 1_327_184
    dep = deployment(row, meta("sglang"))
    assert dep.memory.sglang_mem_fraction() == pytest.approx(71_999_883_264 / 80e9, rel=1e-15)
    assert dep.knob == ("--mem-fraction-static", "0.9000")
    # vLLM: U = (W/4 + C k / 4 + 0.1 x 80e9) / 80e9 = 0.99999854: the whole GPU, which vLLM refuses
    # (it needs U x total <= the memory free at start-up), so the command caps it at 0.95 and says
    # what that holds on exactly 80e9 B: (0.95 x 80e9 - W/4 - 8e9) / (k / 4) = 50,361,573,376 / 40,960
    # = 1,229,530.6 -> 1,229,520 tokens in whole 16-token blocks, of the modelled 1,327,184
    v = deployment(row, meta("vllm"))
    assert v.memory.vllm_utilization() == pytest.approx(79_999_883_264 / 80e9)
    assert v.knob == ("--gpu-memory-utilization", "0.9500")
    assert v.memory.tokens_from_vllm(0.95) == 1_229_520
    assert any("U = 0.95" in n and "1,229,520 of the modelled 1,327,184" in n for n in v.notes)
    assert v.launch_exact[-3:] == ["54361456640", "--port", "8000"]


CASES = [dict(model=m, gpu=g, tp=tp, kv=kv, weights=w, reserve=r, paged=p)
         for m, g, tp, kv, w, r, p in [
             ("llama-3.1-70b", "h100-sxm", 4, 1.0, 1.0, 0.1, True),
             ("llama-3.1-70b", "a100-80gb", 8, 2.0, 2.0, 0.05, True),
             ("llama-3.1-8b", "l4", 1, 2.0, 2.0, 0.2, False),
             ("qwen2.5-72b", "h200", 2, 1.0, 2.0, 0.0, True),
             ("mixtral-8x7b", "b200", 2, 1.0, 1.0, 0.15, True),
             ("qwen3-32b", "mi300x", 1, 2.0, 1.0, 0.1, False),
         ]]


@pytest.mark.parametrize("case", CASES)
def test_knobs_give_the_modelled_kv_back(case: Mapping[str, Any]) -> None:
    """Each engine's knob, read back the way the engine reads it (the closed-form inverses),
    gives the model's C exactly; the printed value (rounded up at 4 decimals) gives C plus at
    most the tokens of 1e-4 of the GPU's memory."""
    row = row_for(**case)
    c = row["kv_capacity_tokens"]
    m = deployment(row, meta("vllm", reserve=case["reserve"], paged=case["paged"])).memory
    assert m.fits and c > 0
    assert m.tokens_from_vllm(m.vllm_utilization()) == c
    assert m.tokens_from_sglang(m.sglang_mem_fraction()) == c
    assert m.tokens_from_trtllm(m.trtllm_free_fraction()) == c
    slack = math.ceil(1e-4 * m.hbm_bytes / (m.kv_bytes_per_token * m.kv_share) / m.block_tokens + 1) * m.block_tokens
    for knob, back in ((m.vllm_utilization(), m.tokens_from_vllm), (m.sglang_mem_fraction(), m.tokens_from_sglang),
                       (m.trtllm_free_fraction(), m.tokens_from_trtllm)):
        printed = float(knob_text(knob))
        assert c <= back(printed) <= c + slack or printed == 1.0
    assert m.kv_bytes_pin() >= m.kv_per_gpu and m.kv_bytes_pin() - m.kv_per_gpu < 1


def test_kv_share() -> None:
    assert kv_share("gqa", 8, 4) == 0.25
    assert kv_share("gqa", 8, 16) == 1 / 8  # more ranks than KV heads: a whole head each
    assert kv_share("mha", 96, 8) == 1 / 8
    assert kv_share("latent", 128, 8) == 1.0  # MLA: every rank keeps the latent cache whole


def test_replicated_kv_does_not_fit_and_says_so() -> None:
    """DeepSeek-R1's latent cache on 8 H200: the model shares it over 8 GPUs, the engines keep
    it whole on each, so the planned capacity does not fit; no memory knob, the exact pin stays."""
    row = row_for(model="deepseek-r1", gpu="h200", tp=8, kv=1.0, weights=1.0, reserve=0.1)
    for engine in ENGINES:
        dep = deployment(row, meta(engine))
        assert not dep.memory.fits and dep.knob[1] is None
        assert KNOBS[engine] not in dep.launch
        assert dep.memory.tokens_that_fit < row["kv_capacity_tokens"]
        assert any("copies of each KV element" in w for w in dep.warnings)
        check_argv(dep.launch, engine, "serve")


def test_zero_reserve_warns() -> None:
    dep = deployment(row_for(reserve=0.0), meta("vllm", reserve=0.0))
    assert any("reserve_fraction = 0" in w for w in dep.warnings)
    assert not any("reserve_fraction = 0" in w for w in deployment(row_for(), meta("vllm")).warnings)


# --------------------------------------------------------------------------- predictions


def _figures(dep: Any) -> dict[tuple[str, str], Any]:
    return {(f.metric, f.stat): f for f in dep.predicted}


def test_predicted_figures_are_the_rows_columns() -> None:
    f = _figures(deployment(row_for(), meta()))
    assert [f[("TTFT", "Mean")].value_ms, f[("TTFT", "P99")].value_ms] == [101.0, 102.0]
    assert [f[("TPOT", "Mean")].value_ms, f[("TPOT", "P99")].value_ms] == [21.0, 22.0]
    assert [f[("E2EL", "Mean")].value_ms, f[("E2EL", "P99")].value_ms] == [4001.0, 4002.0]
    # ITL: its mean is the mean step (TPOT's), its percentile the per-token gap law's column
    assert f[("ITL", "Mean")].value_ms == 21.0 and f[("ITL", "P99")].value_ms == 23.0
    assert "itl_p_ms" in f[("ITL", "P99")].why
    assert all(f[(m, "Median")].value_ms is None and "percentile is 0.99" in f[(m, "Median")].why
               for m in ("TTFT", "TPOT", "E2EL"))
    assert "steady state" in f[("TTFT", "Mean")].why
    # a grid at percentile 0.5 predicts the median: the same column, under the benchmark's P50
    g = _figures(deployment(row_for(percentile=0.5), meta()))
    assert g[("TTFT", "Median")].value_ms == 102.0
    assert g[("ITL", "Median")].value_ms == 23.0


def test_itl_under_multi_step_is_the_gap_between_messages() -> None:
    """k steps a decision stream their tokens together: the mean ITL is k mean steps (the
    benchmark's gap between messages), the percentile the row's itl_p_ms (k steps already)."""
    f = _figures(deployment(row_for(), {**meta(), "scheduler_steps": 4}))
    assert f[("ITL", "Mean")].value_ms == 4 * 21.0 and f[("ITL", "P99")].value_ms == 23.0
    assert "gap between messages, 4 steps" in f[("ITL", "Mean")].why


def test_itl_of_a_run_without_the_gap_column_is_not_predicted() -> None:
    row = {k: v for k, v in row_for().items() if k != "itl_p_ms"}
    f = _figures(deployment(row, meta()))
    assert f[("ITL", "P99")].value_ms is None and "no itl_p_ms column" in f[("ITL", "P99")].why


def test_unstable_point_predicts_nothing() -> None:
    dep = deployment(row_for(stable=False, ttft_mean_ms=None, ttft_p_ms=None), meta())
    assert all(f.value_ms is None for f in dep.predicted)
    assert any("stable = false" in w for w in dep.warnings)
    assert dep.span is None and dep.prompts >= 1000


def test_simulated_columns_ride_along() -> None:
    row = row_for(sim_steady=True, sim_ttft_mean_ms=99.0, sim_ttft_p_ms=120.0)
    f = _figures(deployment(row, meta()))
    assert f[("TTFT", "Mean")].simulated_ms == 99.0 and f[("TTFT", "P99")].simulated_ms == 120.0
    assert "simulated (ms)" in deployment(row, meta()).text()


def test_lengths_and_prompt_count() -> None:
    # uniform on [L(1-r), L(1+r)] has CV r / sqrt(3): r = sqrt(3) cv, cut at 4 decimals
    ln = lengths(1000.0, 0.3)
    assert (ln.mean, ln.ratio) == (1000, 0.5196) and ln.cv_bench == pytest.approx(0.3, abs=1e-4)
    assert lengths(1000.0, 1.0).ratio == MAX_RANGE_RATIO  # wider than uniform lengths reach
    assert lengths(0.4, 0.0).mean == 1
    # N = max(1000, 20 W, 300 s x rate) with W = R / (1 - rho)
    assert prompts(5.0, 30.0, 0.5) == (1500, 60.0)
    assert prompts(5.0, 300.0, 0.5) == (12000, 600.0)
    assert prompts(1.0, None, None) == (1000, None)


# --------------------------------------------------------------------------- errors, files, grid key


def test_bad_inputs_are_one_line_errors() -> None:
    with pytest.raises(DeployError, match="did you mean 'vllm'"):
        deployment(row_for(), meta("vlm"))
    with pytest.raises(DeployError, match=r"gpt3-175b\.hf_id"):
        deployment(row_for(model="gpt3-175b", tp=8, weights=2.0, kv=2.0), meta())
    assert deployment(row_for(model="gpt3-175b", tp=8, weights=2.0, kv=2.0), meta(),
                      model_id="/models/gpt3").model_id == "/models/gpt3"
    with pytest.raises(DeployError, match="TensorRT-LLM has no KV cache dtype"):
        deployment(row_for(kv=0.5), meta("trtllm"))
    row = row_for()
    del row["kv_capacity_tokens"]
    with pytest.raises(DeployError, match="continuous-serving point"):
        deployment(row, meta())


def test_write(tmp_path: Path) -> None:
    for engine in ENGINES:
        dep = deployment(row_for(), meta(engine))
        written = {p.name for p in dep.write(tmp_path)}
        assert {"README.md", "launch.sh", "bench.sh"} <= written
        folder = tmp_path / "deploy"
        for script, argv in (("launch.sh", dep.launch), ("bench.sh", dep.bench)):
            path = folder / script
            assert path.stat().st_mode & 0o111
            subprocess.run(["bash", "-n", str(path)], check=True)
            body = path.read_text().replace("\\\n", " ")
            command = next(line for line in body.splitlines() if line.startswith(argv[0]))
            assert shlex.split(command) == argv
        assert (folder / "README.md").read_text() == dep.text()
        for name, text in dep.files.items():
            assert (folder / name).read_text() == text


def test_deploy_imports_no_jax() -> None:
    """The deploy package is pure Python (STYLE: display and writers stay out of the kernels)."""
    for path in (ROOT / "sweep" / "deploy").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("jax", "numpy") for n in names), path


def _grid(options: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": "t", "grid": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "arrival_rps": 1.0,
                                  "prompt_tokens": 100, "output_tokens": 10, "batch_size": 8, "ttft_slo_ms": 1000},
            "options": {"serving": "continuous", **options}}


def test_engine_option() -> None:
    from sweep.grid.load import build

    assert build(_grid({}), source="t.toml").options.engine == "vllm"
    assert build(_grid({"engine": "trtllm"}), source="t.toml").options.engine == "trtllm"
    with pytest.raises(GridError, match=r"options.engine = 'sglan': must be one of vllm, sglang, trtllm; "
                                        r"did you mean 'sglang'\?"):
        build(_grid({"engine": "sglan"}), source="t.toml")
    with pytest.raises(GridError, match=r"options\.engine = 3"):
        build(_grid({"engine": 3}), source="t.toml")
    doc = _grid({"engine": "vllm", "serving": "dynamic"})
    with pytest.raises(GridError, match='serving is "dynamic"'):
        build(doc, source="t.toml")


def test_hf_id_field() -> None:
    from sweep.catalog import Catalog

    assert CAT.model("llama-3.1-70b").hf_id == "meta-llama/Llama-3.1-70B"
    assert CAT.model("gpt3-175b").hf_id == ""  # no public weights
    assert all(m.hf_id for n, m in CAT.models.items() if n != "gpt3-175b")
    ok = CAT.with_entries({"llama-3.1-8b": {"hf_id": "/models/llama-8b-instruct"}}, None, "g.toml")
    assert ok.model("llama-3.1-8b").hf_id == "/models/llama-8b-instruct"
    with pytest.raises(CatalogError, match="hf_id"):
        Catalog.with_entries(CAT, {"llama-3.1-8b": {"hf_id": "not an id"}}, None, "g.toml")


CHAT = """name = "chat"
[grid]
model = "llama-3.1-70b"
gpu = "h100-sxm"
gpus_per_replica = [2, 4]
arrival_rps = 10.0
replicas = [1, 2]
prompt_tokens = 1000
output_tokens = 200
batch_size = [16, 64]
max_batched_tokens = [2048, inf]
weight_bytes_per_param = "fp8"
kv_bytes_per_elem = "fp8"
ttft_slo_ms = 1000
tpot_slo_ms = 50
[options]
serving = "continuous"
kv_allocation = "paged"
reserve_fraction = 0.1
engine = "sglang"
"""


@pytest.mark.slow
def test_sweep_deploy_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`sweep run` then `sweep deploy`: one group per filter, the grid's engine, its recommended
    point's row from points/, the files written; several groups without a filter: exit 2."""
    import pyarrow.parquet as pq

    from sweep.cli.main import main

    (tmp_path / "chat.toml").write_text(CHAT)
    out = tmp_path / "run"
    assert main(["run", str(tmp_path / "chat.toml"), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["deploy", str(out), "--no-write"]) == 2
    assert "2 scenario groups" in capsys.readouterr().err
    assert main(["deploy", str(out), "gpus_per_replica=4"]) == 0
    text = capsys.readouterr().out
    optimum = pq.read_table(out / "optimum.parquet").to_pylist()
    pid = next(r["replicas_min_point_id"] for r in optimum if r["gpus_per_replica"] == 4)
    assert f"point_id {pid}" in text and "python -m sglang.launch_server" in text
    assert (out / "deploy" / "README.md").read_text() in text
    assert main(["deploy", str(out), "--point", str(pid), "--engine", "trtllm", "--no-write"]) == 0
    assert "trtllm-serve meta-llama/Llama-3.1-70B" in capsys.readouterr().out
    assert main(["show", str(out)]) == 0  # the deploy/ folder leaves the run whole


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("policy", "steps", "admission"),
                         [("chunked", 1, "reserve"), ("prefill_first", 4, "on_demand")])
def test_the_commands_run_the_planned_scheduler(engine: str, policy: str, steps: int, admission: str) -> None:
    """The run's engine variant ([options] scheduler_policy, scheduler_steps, kv_admission, in its
    manifest) reaches the launch command where the engine has it, and a note says so where it
    does not. SGLang: prompt batches run alone (prefill_first) unless --enable-mixed-chunk, and
    --num-continuous-decode-steps is its multi-step decoding; TensorRT-LLM: the capacity
    scheduler policy, GUARANTEED_NO_EVICT (reserve) or MAX_UTILIZATION (on demand); vLLM V1 and
    SGLang always take KV blocks on demand; vLLM and TensorRT-LLM mix prompts into decode steps
    and decide every step. Every flag and YAML value is the engine's own (engine_flags.json)."""
    dep = deployment(row_for(), meta(engine) | {"scheduler_policy": policy, "scheduler_steps": steps,
                                                "kv_admission": admission})
    launch = check_argv(dep.launch, engine, "serve")
    notes = " ".join(dep.notes)
    if engine == "sglang":
        assert ("--enable-mixed-chunk" in launch) == (policy == "chunked")
        assert launch.get("--num-continuous-decode-steps") == (str(steps) if steps > 1 else None)
        assert "prefill_first" not in notes and "scheduler_steps" not in notes
    else:
        assert ("scheduler_policy = \"prefill_first\"" in notes) == (policy == "prefill_first")
        assert ("(scheduler_steps)" in notes) == (steps > 1)
    if engine == "trtllm":
        tables = yaml_tables(dep.files[launch["--extra_llm_api_options"]])
        policy_name = tables["scheduler_config"]["capacity_scheduler_policy"]
        assert policy_name in FLAGS["trtllm"]["config_yaml"]["scheduler_config"]["capacity_scheduler_policy"]
        assert policy_name == ("GUARANTEED_NO_EVICT" if admission == "reserve" else "MAX_UTILIZATION")
        assert "kv_admission" not in notes
    else:
        assert ("kv_admission = \"reserve\"" in notes) == (admission == "reserve")
