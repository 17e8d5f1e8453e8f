"""The terminal answers (issue 13, items 1 and 7): `sweep run` ends with the decisions per
scenario group and a search's best trials, naming the latency that was checked; `sweep show`
prints the same from a finished run; the CLI's --version, --help epilogs and one-line usage
errors; shard summaries count the shard's points."""

from __future__ import annotations

import json
import re
from pathlib import Path

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


def test_run_ends_with_the_decisions_cheapest_first(answered):
    out, text = answered
    assert "decisions per scenario group, cheapest first" in text and "P99 gaussian" in text
    assert "replicas" in text and "batch_size" in text and "batch_window_ms" in text and "USD/h" in text
    assert f"full tables: {out}/optimum.parquet" in text and "sweep show" in text
    # the 4 groups (gpu x arrival_rps): the cheap ones listed, the overloaded ones counted with a reason
    answers, closest = text.split("scenario groups: no replica count")
    costs = [float(m) for m in re.findall(r"│\s+([0-9.]+) │\n", answers)]
    assert costs == sorted(costs) and len(costs) == 2
    # the groups without an answer, at their most replicas (4): cheapest first too
    costs = [float(m) for m in re.findall(r"│\s+([0-9.]+) │\n", closest)]
    assert costs == sorted(costs) and len(costs) == 2
    assert "scenario groups: no replica count of the grid meets the SLO" in text


def test_show_prints_the_same_from_the_files(answered, capsys):
    out, text = answered
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    table = lambda t: t[t.index("decisions per"):t.index("full tables")]  # noqa: E731
    assert table(shown) == table(text)
    assert main(["show", str(out), "gpu=h100-sxm", "arrival_rps=50", "--top", "1"]) == 0
    one = capsys.readouterr().out
    assert "h100-sxm" in one and "a100-80gb" not in one.split("decisions per")[1]


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
    assert "placeholder value" in text and "decisions per scenario group" not in text
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
