"""The `sweep run` command (`sweep.cli.main`): the seed's table in the terminal, one-line
argument errors with exit code 2."""

from __future__ import annotations

from _grids import WINDOWED

from sweep.cli import main


def test_bad_shard_and_output_options_exit_2(tmp_path, root, capsys):
    assert main(["run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(tmp_path / "o"), "--shard", "4/3"]) == 2
    assert "--shard" in capsys.readouterr().err
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED + '\n[output]\ncolumns = ["latency"]\n')
    assert main(["run", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "output.columns" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_summary_prints_the_seed_table(root, capsys, tmp_path):
    assert main(["run", str(root / "grids" / "seed-gpt3.toml"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    for fragment in ("54.0", "148.1", "67.5%", "56.1", "35.0", "145.1", "149.5", "229.6", "7.14 -> 8", "14.95", "5.80",
                     "9.66 GB"):
        assert fragment in out, fragment
