"""`sweep predict-benchmark --calibrate-from FILE`: the light-load calibration recovers the
HBM efficiency and the request latency a run was made with (a round trip: the "measured" file
is the simulation's own output at a known `eta_bw` and `request_latency_ms`, so the reference
values are those inputs), and a bad file or flag mix is refused in one line with exit 2
before any work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sweep.cli import main
from sweep.cli.predict import CAL_PROMPTS, calibration_update, light_run

FLAGS = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-num-seqs", "16", "--max-num-batched-tokens", "2048",
         "--input-len", "500", "--output-len", "40", "--input-cv", "0.3", "--output-cv", "0.3", "--replications", "2"]
LIGHT = ["--request-rate", "inf", "--max-concurrency", "1", "--num-prompts", "12"]


def _mean(text: str, label: str) -> float:
    """The simulated mean of a printed figure line."""
    line = next(x for x in text.splitlines() if x.startswith(label + ":"))
    return float(line[len(label) + 1:].split("+-")[0].replace(",", ""))


def _vllm_result(path: Path, *, ttft: float, tpot: float, e2e: float, throughput: float, completed: int = 12,
                 prompt: int = 500, output: int = 40, cap: int | None = 1, rate: float | str = "inf") -> Path:
    """A `vllm bench serve --save-result` file (vllm/benchmarks/serve.py's result_json fields)."""
    path.write_text(json.dumps({
        "date": "20261206-120000", "endpoint_type": "openai", "backend": "openai", "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": completed, "request_rate": rate,
        "burstiness": 1.0, "max_concurrency": cap, "duration": completed / throughput, "completed": completed,
        "failed": 0, "total_input_tokens": prompt * completed, "total_output_tokens": output * completed,
        "request_throughput": throughput, "output_throughput": throughput * output,
        "mean_ttft_ms": ttft, "median_ttft_ms": ttft, "p99_ttft_ms": ttft, "mean_tpot_ms": tpot,
        "median_tpot_ms": tpot, "p99_tpot_ms": tpot, "mean_itl_ms": tpot, "mean_e2el_ms": e2e}))
    return path


def test_the_update_rules() -> None:
    # an efficiency scales by predicted / measured within (0.001, 1]; the latency adds the TTFT gap, at least 0
    assert calibration_update("eta_bw", 0.6, 10.0, 12.0) == pytest.approx(0.5)
    assert calibration_update("eta_bw", 0.9, 20.0, 10.0) == 1.0
    assert calibration_update("eta_bw", 0.002, 1.0, 10.0) == 1e-3
    assert calibration_update("request_latency_ms", 2.0, 20.0, 25.0) == pytest.approx(7.0)
    assert calibration_update("request_latency_ms", 2.0, 30.0, 25.0) == 0.0


def test_a_round_trip_recovers_the_efficiency_and_latency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    eta, latency = 0.45, 6.0
    assert main(["predict-benchmark", *FLAGS, *LIGHT, "--eta-bw", str(eta), "--request-latency-ms", str(latency)]) == 0
    text = capsys.readouterr().out
    light = _vllm_result(tmp_path / "light.json", ttft=_mean(text, "Mean TTFT (ms)"),
                         tpot=_mean(text, "Mean TPOT (ms)"), e2e=_mean(text, "Mean E2EL (ms)"),
                         throughput=_mean(text, "Request throughput (req/s)"))
    heavy = ["--request-rate", "8", "--num-prompts", "30"]
    assert main(["predict-benchmark", *FLAGS, *heavy, "--calibrate-from", str(light)]) == 0
    text = capsys.readouterr().out
    fitted = re.search(r"in a grid: eta_bw = ([0-9.]+), request_latency_ms = ([0-9.]+)", text)
    assert fitted is not None
    # the printed figures carry 2 decimals (TPOT ~12 ms: 0.05%), hence the tolerances
    assert float(fitted.group(1)) == pytest.approx(eta, rel=0.005)
    assert float(fitted.group(2)) == pytest.approx(latency, abs=0.05)
    assert "12 requests simulated as run" in text
    # the benchmark asked for is predicted with both: the same block as with the flags themselves
    calibrated = text.split("configuration:", 1)[1]
    assert main(["predict-benchmark", *FLAGS, *heavy, "--eta-bw", fitted.group(1),
                 "--request-latency-ms", fitted.group(2)]) == 0
    direct = capsys.readouterr().out.split("configuration:", 1)[1]
    for label in ("Mean TTFT (ms)", "Mean TPOT (ms)", "Request throughput (req/s)"):
        assert _mean(calibrated, label) == pytest.approx(_mean(direct, label), rel=0.01), label


def test_the_lightest_run_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    lines = []
    for cap, ttft in ((8, 40.0), (1, 20.0), (4, 30.0)):
        p = _vllm_result(tmp_path / "one.json", ttft=ttft, tpot=10.0, e2e=400.0, throughput=cap * 2.5, cap=cap,
                         completed=1000)
        lines.append(p.read_text())
    path.write_text("\n".join(lines) + "\n")
    run, bench = light_run(path)
    assert run.concurrency == 1 and run.ttft_ms == 20.0
    assert bench.max_concurrency == 1 and bench.num_prompts == CAL_PROMPTS  # 1000 completed, at most CAL_PROMPTS


@pytest.mark.parametrize(("extra", "content", "needle"), [
    (["--eta-bw", "0.5"], None, "--eta-bw"),
    (["--request-latency-ms", "3"], None, "--request-latency-ms"),
    ([], "batch_size,latency_ms\n1,2\n", "light.json"),
    ([], '{"completed": 40}', "light.json"),
    ([], "one-token", "mean_tpot_ms"),
])
def test_refusals_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                      content: str | None, needle: str) -> None:
    path = tmp_path / "light.json"
    if content == "one-token":
        _vllm_result(path, ttft=20.0, tpot=0.0, e2e=20.0, throughput=40.0, output=1)
    elif content is not None:
        path.write_text(content)
    else:
        _vllm_result(path, ttft=20.0, tpot=10.0, e2e=400.0, throughput=2.5)
    assert main(["predict-benchmark", *FLAGS, "--request-rate", "4", "--calibrate-from", str(path), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and needle in captured.err


def test_not_with_a_run_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _vllm_result(tmp_path / "light.json", ttft=20.0, tpot=10.0, e2e=400.0, throughput=2.5)
    assert main(["predict-benchmark", "runs/x", "--point", "0", "--request-rate", "4",
                 "--calibrate-from", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--calibrate-from" in captured.err and "RUN_DIR" in captured.err
