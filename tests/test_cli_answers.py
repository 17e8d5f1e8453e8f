"""The terminal answers (issue 13, items 1 and 7): `sweep run` ends with the decisions per
scenario group and a search's best trials, naming the latency that was checked; `sweep show`
prints the same from a finished run; the CLI's --version, --help epilogs and one-line usage
errors; shard summaries count the shard's points."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sweep.cli import main

ROOT = Path(__file__).resolve().parents[1]
GRID = """
name = "answers"
[grid]
model = "llama-3.1-8b"
gpu = ["h100-sxm", "a100-80gb"]
arrival_rps = [50.0, 2000.0]
batch_size = [1, 4, 16, 64]
batch_window_ms = [5.0, inf]
replicas = [1, 2, 4]
seq_len = 2048
t_fixed_ms = 10.0
t_req_ms = 1.0
slo_ms = 150.0
"""


@pytest.fixture(scope="module")
def answered(tmp_path_factory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("answers")
    grid = base / "answers.toml"
    grid.write_text(GRID)
    out = base / "run"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["run", str(grid), "--out", str(out), "--progress", "none"]) == 0
    return out, buf.getvalue()


def table_rows(block: str) -> list[dict[str, str]]:
    """The first rich table of `block` as one dict per row (header lines joined per column)."""
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┃"))
    heads: list[str] = []
    rows: list[dict[str, str]] = []
    for line in lines[start:]:
        if line.startswith("┃"):
            cells = [c.strip() for c in line.strip().strip("┃").split("┃")]
            heads = cells if not heads else [f"{a}{'' if a.endswith('_') else ' '}{b}".strip()
                                             for a, b in zip(heads, cells)]
        elif line.startswith("│"):
            rows.append(dict(zip(heads, (c.strip() for c in line.strip().strip("│").split("│")))))
        elif line.startswith("└"):
            break
    return rows


def test_run_ends_with_the_decisions_cheapest_first(answered):
    out, text = answered
    assert "recommendation per scenario group, cheapest first" in text and "P99 gaussian" in text
    assert "replicas" in text and "batch_size" in text and "batch_window_ms" in text and "USD/h" in text
    assert f"full tables: {out}/optimum.parquet" in text and "sweep show" in text
    # the 4 groups (gpu x arrival_rps): the cheap ones listed, the overloaded ones counted with a reason
    answers, closest = text.split("scenario groups: no replica count")
    costs = [float(r["USD/h"]) for r in table_rows(answers)]
    assert costs == sorted(costs) and len(costs) == 2
    # the groups without an answer, at their most replicas (4): cheapest first too
    costs = [float(m) for m in re.findall(r"│\s+([0-9.]+) │\n", closest)]
    assert costs == sorted(costs) and len(costs) == 2
    assert "scenario groups: no replica count of the grid meets the SLO" in text


def test_show_prints_the_same_from_the_files(answered, capsys):
    out, text = answered
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    table = lambda t: t[t.index("recommendation per"):t.index("full tables")]  # noqa: E731
    assert table(shown) == table(text)
    assert main(["show", str(out), "gpu=h100-sxm", "arrival_rps=50", "--top", "1"]) == 0
    one = capsys.readouterr().out
    assert "h100-sxm" in one and "a100-80gb" not in one.split("recommendation per")[1]


def test_show_refuses_in_one_line(tmp_path, answered, capsys):
    out, _ = answered
    assert main(["show", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not a finished run" in err and len(err.strip().splitlines()) == 1
    assert main(["show", str(out), "colour=red"]) == 2
    err = capsys.readouterr().err
    assert "no column 'colour'" in err and len(err.strip().splitlines()) == 1
    assert main(["show", str(out), "gpu"]) == 2
    assert "key=value" in capsys.readouterr().err


def test_the_checked_latency_is_named_and_shown(tmp_path, capsys):
    grid = tmp_path / "b.toml"
    grid.write_text(GRID.replace('gpu = ["h100-sxm", "a100-80gb"]', 'gpu = "h100-sxm"')
                    .replace("arrival_rps = [50.0, 2000.0]", "arrival_rps = 400.0")
                    .replace("replicas = [1, 2, 4]", "replicas = 1") + '[options]\nlatency_model = "batcher"\n')
    assert main(["run", str(grid), "--out", str(tmp_path / "o"), "--progress", "none"]) == 0
    text = capsys.readouterr().out
    # the per-point table has the batcher model's P99 beside both proxy estimates, and says which was checked
    assert "P99 gauss" in text and "P99 exp" in text and "P99 batcher model" in text
    assert "action and SLO checked against P99 batcher model (latency_ms)" in text


def test_a_search_run_prints_its_answers_not_the_placeholder_grid(tmp_path, capsys):
    grid = ROOT / "tests" / "golden" / "grids" / "search.toml"
    assert main(["run", str(grid), "--out", str(tmp_path / "s"), "--progress", "none"]) == 0
    text = capsys.readouterr().out
    assert "search: each study's best trials" in text and "min_cost+max_capacity" in text
    assert "placeholder value" in text and "recommendation per scenario group" not in text
    assert main(["show", str(tmp_path / "s")]) == 0
    assert "search: each study's best trials" in capsys.readouterr().out


def test_shard_summaries_count_the_shards_points(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    assert main(["run", str(grid), "--out", str(tmp_path / "o"), "--shard", "2/2", "--progress", "none"]) == 0
    text = capsys.readouterr().out
    manifest = json.loads((tmp_path / "o" / "shards" / "0002-of-0002" / "manifest.json").read_text())
    n = manifest["rows"]["shard_points"]
    assert n < manifest["rows"]["grid_points"]
    assert f": {n:,} points (shard 2 of 2 of a {manifest['rows']['grid_points']:,}-point grid)" in text


# --------------------------------------------------------------------------- the CLI


def test_version(capsys):
    from sweep import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"sweep {__version__}"


@pytest.mark.parametrize("argv", [[], ["bogus"], ["run"], ["--nope"]])
def test_top_level_usage_errors_are_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sweep"), err


def test_every_help_has_examples_and_exit_codes(capsys):
    from sweep.cli.main import _parser

    parser = _parser()
    names = list(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert {"run", "show", "explain", "merge", "search", "fit", "kv", "catalog", "calibrate", "report"} <= set(names)
    for argv in [[], *([n] for n in names)]:
        assert main([*argv, "--help"]) == 0
        text = capsys.readouterr().out
        assert "examples:\n  " in text and "exit codes:\n  0" in text and "\n  2 " in text, argv


def test_chunk_size_and_memory_limit_together_are_refused_in_one_line(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    out = tmp_path / "o"
    assert main(["run", str(grid), "--out", str(out), "--chunk-size", "64", "--memory-limit", "2000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "both set the chunk size" in err[0]
    assert not out.exists()  # refused before any work: nothing written


# --------------------------------------------------------------------------- continuous serving

CONTINUOUS = """
name = "cb-answers"
[grid]
model = ["llama-3.1-8b", "mixtral-8x7b"]
gpu = "h100-sxm"
arrival_rps = [2.0, 40.0]
prompt_tokens = 512
prompt_cv = 1.0
output_tokens = 128
output_cv = 1.0
batch_size = [16, 64]
max_batched_tokens = [2048, inf]
replicas = [1, 4]
ttft_slo_ms = 500
tpot_slo_ms = 40
[options]
serving = "continuous"
kv_allocation = "paged"
"""


def test_a_continuous_run_answers_in_ttft_and_tpot(tmp_path, capsys):
    """The decisions of a continuous grid name both SLO checks (TTFT, TPOT against their
    SLOs), the cap and the token budget, from optimum.parquet; groups whose model does not
    fit (Mixtral 8x7B in bf16 on one 80 GB H100) are counted, not shown as a closest point."""
    grid = tmp_path / "cb.toml"
    grid.write_text(CONTINUOUS)
    out = tmp_path / "o"
    assert main(["run", str(grid), "--out", str(out), "--progress", "none"]) == 0
    text = capsys.readouterr().out
    assert "TTFT P99" in text and "TPOT P99" in text and "tok/s/user" in text  # the per-point table
    assert "action and SLOs checked against the P99 analytic estimates: ttft_p_ms <= 500 ms, tpot_p_ms <= 40 ms" in text
    decisions = text[text.index("recommendation per scenario group"):text.index("full tables")]
    for head in ("batch_size", "max_batched_tokens", "TTFT P99 ms", "TTFT SLO ms", "TPOT P99 ms", "TPOT SLO ms",
                 "tok_s_per_user", "USD/h"):
        assert head in decisions, head
    assert "latency_ms" not in decisions and "window" not in decisions
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    at = opt[opt.is_recommended].sort_values("recommended_cost_usd_per_hour")
    first = at.iloc[0]
    row = table_rows(decisions)[0]
    assert int(row["batch_size"]) == first.recommended_batch
    # the budget is the same on both shown rows: stated once above the table
    assert f"max_batched_tokens = {first.recommended_max_batched_tokens:.0f}" in decisions
    assert float(row["TTFT P99 ms"]) == pytest.approx(first.recommended_ttft_p_ms, abs=0.05)
    assert "no replica count of the grid meets every SLO" in decisions and "out_of_memory 2" in decisions
    assert "without an answer" not in decisions  # no feasible point to show there
    assert main(["show", str(out), "model=llama-3.1-8b", "arrival_rps=40"]) == 0
    shown = capsys.readouterr().out
    assert "TTFT P99 ms" in table_rows(shown.split("recommendation per")[1])[0]
    assert "mixtral" not in shown.split("recommendation per")[1]


def test_a_continuous_search_prints_its_answers(tmp_path, capsys):
    grid = tmp_path / "cbs.toml"
    grid.write_text(CONTINUOUS.replace('model = ["llama-3.1-8b", "mixtral-8x7b"]', 'model = "llama-3.1-8b"')
                    .replace("arrival_rps = [2.0, 40.0]", "arrival_rps = 40.0") + """
[search]
objective = "min_cost"
trials = 24
batch = 8
seed = 0
storage = "memory"
[search.params]
batch_size = [16, 32, 64]
replicas = {low = 1, high = 6}
""")
    assert main(["run", str(grid), "--out", str(tmp_path / "s"), "--progress", "none"]) == 0
    text = capsys.readouterr().out
    search = text[text.index("search: each study's best trials"):]
    assert "TTFT P99 ms" in search and "TPOT SLO ms" in search and "min_cost" in search


NEAR_CAPACITY = """
name = "cb-near"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
arrival_rps = {rate!r}
prompt_tokens = 1000
output_tokens = 200
t_fixed_ms = 8.0
t_token_ms = 0.03
t_ctx_ms = 6e-5
batch_size = 16
max_batched_tokens = 8192
replicas = 1
ttft_slo_ms = 60000
tpot_slo_ms = 1000
rho_max = 0.95
[options]
serving = "continuous"
kv_allocation = "paged"
"""


@pytest.mark.parametrize(("load", "caveat"), [(0.9, True), (0.5, False)])
def test_a_decision_on_an_untrusted_point_says_so_and_how_to_simulate(tmp_path, capsys, load, caveat):
    """One replica at 0.9 of its own capacity_rps (allowed by rho_max = 0.95, the SLOs loose)
    lies past `confidence.LOAD_MAX` (0.85): analytic_trusted is false and the decision rests on
    it; at 0.5 it is true. The capacity is read from a first run at a light load (the cap of 16
    and the step line fix it; the rate does not). The decisions mark an answer on an untrusted
    point with `*` and end with one line naming the simulator; with trusted answers there is
    no such line."""
    probe = tmp_path / "probe.toml"
    probe.write_text(NEAR_CAPACITY.format(rate=0.1))
    assert main(["run", str(probe), "--out", str(tmp_path / "p"), "--progress", "none"]) == 0
    capacity = float(pq.read_table(tmp_path / "p" / "points").column("capacity_rps")[0].as_py())
    capsys.readouterr()
    grid = tmp_path / "near.toml"
    grid.write_text(NEAR_CAPACITY.format(rate=round(load * capacity, 6)))
    out = tmp_path / "o"
    assert main(["run", str(grid), "--out", str(out), "--progress", "none"]) == 0
    text = capsys.readouterr().out
    decisions = text[text.index("recommendation per scenario group"):text.index("full tables")]
    opt = pq.read_table(out / "optimum.parquet").to_pandas()
    at = opt[opt.is_replicas_min]
    assert len(at) == 1 and (~at.replicas_min_analytic_trusted).all() == caveat
    line = "1 of the 1 decisions above rest on a point outside the region where the analytic model was shown accurate"
    assert (line in " ".join(decisions.split())) == caveat
    assert ('latency_model = "simulated"' in decisions) == caveat
    assert (f"{at.replicas_min_batch.iloc[0]}*" in decisions) == caveat
