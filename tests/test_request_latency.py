"""The server's fixed latency per request outside the engine's steps, `request_latency_ms`
(docs/continuous.md, "Request latency"): HTTP, chat template and tokenization, streaming.

References, all closed forms of the model's own definition (no fitted value):
- open loop: a request's TTFT and E2E (every percentile, analytic and simulated with the same
  draws) are the engine's plus exactly L; TPOT, ITL, the step times and the capacity do not move;
- closed loop: a client is off the engine for L as it is while it thinks, so the loop with
  latency L and no think time has the engine-side state of the loop with think time L and no
  latency (mean value analysis reads the think time's mean only), its TTFT and E2E L longer,
  and its throughput obeys the response-time law X (E2E + Z) = n with the client's E2E.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import sweep
from sweep.cli import main
from sweep.cli.predict import BenchConfig, Benchmark, analytic, simulate
from sweep.errors import GridError

L_MS = 30.0


def _rows(grid: dict, options: dict | None = None, simulation: dict | None = None) -> list[dict]:
    doc = {"name": "latency", "grid": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "prompt_tokens": 500.0,
                                       "prompt_cv": 0.5, "output_tokens": 60.0, "output_cv": 0.5, "batch_size": 32,
                                       "max_batched_tokens": 2048, "ttft_slo_ms": 2000, **grid},
           "options": {"serving": "continuous", **(options or {})}}
    if simulation is not None:
        doc["simulation"] = simulation
    return sweep.evaluate(sweep.grid_from_dict(doc)).to_pylist()


@pytest.mark.parametrize("options", [{}, {"scheduler_policy": "prefill_first"},
                                     {"scheduler_policy": "prefill_first", "scheduler_steps": 4}],
                         ids=["chunked", "prefill_first", "prefill_first-k4"])
def test_open_loop_ttft_and_e2e_move_by_exactly_the_latency(options):
    none, some = _rows({"arrival_rps": 6.0, "request_latency_ms": [0.0, L_MS]}, options)
    assert (none["request_latency_ms"], some["request_latency_ms"]) == (0.0, L_MS)
    for col in ("ttft_mean_ms", "ttft_p_ms", "e2e_mean_ms", "e2e_p_ms"):
        assert some[col] - none[col] == pytest.approx(L_MS, rel=1e-9), col
    for col in ("tpot_mean_ms", "tpot_p_ms", "itl_p_ms", "step_mean_ms", "capacity_rps", "t_step_fixed_ms",
                "mean_running", "output_tok_s"):
        assert some[col] == none[col], col


def test_the_latency_decides_a_ttft_slo():
    """The SLO holds on the client's TTFT: a TTFT SLO between the engine's P99 and that plus L
    is met without the latency and missed with it."""
    (base,) = _rows({"arrival_rps": 6.0})
    slo = base["ttft_p_ms"] + L_MS / 2
    none, some = _rows({"arrival_rps": 6.0, "ttft_slo_ms": slo, "request_latency_ms": [0.0, L_MS]})
    assert none["slo_ok"] and not some["slo_ok"]


def test_a_closed_loops_clients_spend_the_latency_off_the_engine():
    clients = 24
    lat, think = _rows({"clients": clients, "request_latency_ms": L_MS}, {"workload": "closed"})[0], \
        _rows({"clients": clients, "think_time_s": L_MS * 1e-3}, {"workload": "closed"})[0]
    for col in ("throughput_rps", "tpot_mean_ms", "mean_running", "step_mean_ms", "output_tok_s"):
        assert lat[col] == pytest.approx(think[col], rel=1e-12), col
    for col in ("ttft_mean_ms", "e2e_mean_ms"):
        assert lat[col] - think[col] == pytest.approx(L_MS, rel=1e-9), col
    # the response-time law with the client's E2E and no think time
    assert lat["throughput_rps"] * lat["e2e_mean_ms"] * 1e-3 == pytest.approx(clients, rel=1e-9)
    (none,) = _rows({"clients": clients}, {"workload": "closed"})
    assert lat["throughput_rps"] < none["throughput_rps"]


def test_simulated_columns_carry_the_latency():
    """The simulator's TTFT and E2E (same seed, same point, same draws) move by exactly L, their
    half-widths and the TPOT not at all."""
    sim = {"n_requests": 1000, "warmup": 100, "replications": 2, "seed": 3}
    # one grid each, so that both points are point 0: the simulator's streams follow the point id
    (none,) = _rows({"arrival_rps": 6.0}, simulation=sim)
    (some,) = _rows({"arrival_rps": 6.0, "request_latency_ms": L_MS}, simulation=sim)
    for m in ("ttft", "e2e"):
        for k in ("mean", "p"):
            assert some[f"sim_{m}_{k}_ms"] - none[f"sim_{m}_{k}_ms"] == pytest.approx(L_MS, rel=1e-9)
            assert some[f"sim_{m}_{k}_hw_ms"] == none[f"sim_{m}_{k}_hw_ms"]
    assert some["sim_tpot_mean_ms"] == none["sim_tpot_mean_ms"]
    assert some["ttft_rel_err"] != none["ttft_rel_err"]  # both sides carry L: the error is of the whole TTFT


def _small(**kw: object) -> BenchConfig:
    return BenchConfig(prompt_mean=300.0, prompt_cv=0.5, output_mean=30.0, output_cv=0.5, cap=16.0,
                       max_batched_tokens=1024.0, kv_capacity_tokens=math.inf, block_tokens=16.0, t_fixed=0.01,
                       t_token=3e-5, t_ctx=1e-7, service_cv=0.2, label="test", **kw)  # type: ignore[arg-type]


def test_a_benchmark_sees_the_latency_on_every_first_and_last_token():
    """`sweep predict-benchmark --request-latency-ms`: an open-loop run's TTFT and E2E
    (simulated with the same draws, and analytic) move by exactly L and its TPOT and ITL do
    not; a closed loop's clients send their next request L later, so it serves fewer requests
    a second, exactly as the analytic loop with that think time does."""
    lat = L_MS * 1e-3
    bench = Benchmark(120, 6.0, None)
    a, b = simulate(_small(), bench, 2, 3), simulate(_small(request_latency=lat), bench, 2, 3)
    for key in ("ttft_mean", "ttft_q0.5", "ttft_q0.99", "e2e_mean", "e2e_q0.5", "e2e_q0.99"):
        assert b[key][0] - a[key][0] == pytest.approx(lat, rel=1e-9), key
    for key in ("tpot_mean", "itl_mean", "itl_q0.99", "mean_running"):
        assert b[key] == a[key], key
    ma, mb = analytic(_small(), bench)[0], analytic(_small(request_latency=lat), bench)[0]
    assert mb["ttft_q0.5"] - ma["ttft_q0.5"] == pytest.approx(lat, rel=1e-9)
    assert mb["tpot_mean"] == ma["tpot_mean"]
    closed = Benchmark(120, math.inf, 8)
    sa, sb = simulate(_small(), closed, 2, 3), simulate(_small(request_latency=lat), closed, 2, 3)
    assert sb["request_rps"][0] < sa["request_rps"][0]
    m_lat = analytic(_small(request_latency=lat), closed)[0]
    m_think = analytic(_small(), replace(closed, think_s=lat))[0]
    assert m_lat["tpot_mean"] == pytest.approx(m_think["tpot_mean"], rel=1e-12)
    assert m_lat["ttft_mean"] - m_think["ttft_mean"] == pytest.approx(lat, rel=1e-9)


@pytest.mark.parametrize("value", ["-1", "2e6", "nan"])
def test_a_bad_latency_flag_is_one_line_exit_2(value, capsys):
    argv = ["predict-benchmark", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "500",
            "--output-len", "40", "--request-rate", "4", "--request-latency-ms", value]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "--request-latency-ms" in err


def test_a_bad_latency_key_names_the_key_and_its_domain():
    with pytest.raises(GridError) as err:
        _rows({"arrival_rps": 6.0, "request_latency_ms": -1.0})
    assert "grid.request_latency_ms" in str(err.value) and "must lie in [0, 1e+06] ms" in str(err.value)
