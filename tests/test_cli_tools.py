"""`sweep fit`, `sweep kv`, `sweep catalog`, and `sweep run --catalog`: output, exit codes,
and bad input as one line on stderr with exit code 2 and nothing written."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from sweep.catalog import packaged_catalog
from sweep.cli import main
from sweep.models.shared.memory import kv_answer


@pytest.fixture()
def in_tmp(tmp_path, monkeypatch):
    """Run in an empty folder, so 'writes nothing' is checkable."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _run(argv, capsys) -> tuple[int, str, str]:
    """main() return code, or SystemExit code for argument errors."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _assert_one_line_exit_2(rc, out, err, *fragments):
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    assert out == ""


# --------------------------------------------------------------------------- fit


def test_fit_prints_fit_and_residual_table(root, capsys):
    rc, out, err = _run(["fit", str(root / "grids" / "profiles" / "gpt3-a100.csv")], capsys)
    assert rc == 0 and err == ""
    t_fixed = float(re.search(r"T_fixed = ([\d.]+) ms", out).group(1))
    t_req = float(re.search(r"t_req   = ([\d.]+) ms", out).group(1))
    r2 = float(re.search(r"R\^2     = ([\d.]+)", out).group(1))
    assert abs(t_fixed - 50) < 0.5 and abs(t_req - 0.5) < 0.02 and r2 > 0.999
    assert "residual" in out
    rows = [ln for ln in out.splitlines() if re.match(r"^│\s+(1|8|32) │", ln)]
    assert len(rows) == 3


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("batch_size,latency_ms\n8,54\n8,55\n", ["two distinct batch sizes"]),
        ("batch_size,latency_ms\n1,50\n8,-3\n", ["row 3, column latency_ms", "-3", "in [0, 1e+07] ms"]),
        ("batch_size,latency_ms\n1,50\n8,nan\n", ["row 3, column latency_ms", "NaN"]),
        ("batch_size,latency_ms\n1,50\n2.5,51\n", ["row 3, column batch_size", "2.5", "integer in [1, 1e+06]"]),
        ("batch_size,latency_ms\n1,50\n8,\n", ["row 3, column latency_ms", "missing"]),
        ("bs,latency_ms\n1,50\n8,54\n", ["header", "batch_size"]),
    ],
)
def test_fit_bad_input_exits_2_with_one_line(in_tmp, capsys, text, fragments):
    (in_tmp / "p.csv").write_text(text)
    before = _files(in_tmp)
    rc, out, err = _run(["fit", "p.csv"], capsys)
    _assert_one_line_exit_2(rc, out, err, "p.csv", *fragments)
    assert _files(in_tmp) == before


def test_fit_missing_file(in_tmp, capsys):
    rc, out, err = _run(["fit", "nope.csv"], capsys)
    _assert_one_line_exit_2(rc, out, err, "nope.csv", "cannot be read")
    assert _files(in_tmp) == []


# --------------------------------------------------------------------------- kv


def test_kv_output_matches_the_formulas(capsys):
    argv = ["kv", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "4", "--seq-len", "8192",
            "--mean-seq-len", "3000", "--kv-dtype", "fp8", "--weight-dtype", "bf16", "--block-tokens", "16",
            "--reserve-fraction", "0.1"]
    rc, out, err = _run(argv, capsys)
    assert rc == 0 and err == ""
    # 2 x 80 layers x 8 KV heads x 128 x 1 B = 163,840 B/token
    assert "163,840 B" in out
    assert "1.342 GB" in out  # 163,840 x 8192 / 1e9
    assert "141.1 GB" in out  # 70.55e9 x 2 B
    assert "288.0 GB" in out  # 4 x 80 GB x 0.9
    assert "146.9 GB" in out  # free
    contiguous = re.search(r"contiguous │\s+8192 │\s+1\.342 │\s+63\.4% │\s+(\d+) │", out)
    paged = re.search(r"blocks\) │\s+3008 │\s+0\.493 │\s+0\.3% │\s+(\d+) │", out)
    assert contiguous and paged, out
    free = 4 * 80e9 * 0.9 - 70_553_706_496 * 2
    assert int(contiguous.group(1)) == int(free // (163_840 * 8192)) == 109
    assert int(paged.group(1)) == int(free // (163_840 * 3008)) == 298


def test_kv_answer_is_the_seed():
    cat = packaged_catalog()
    a = kv_answer(cat.model("gpt3-175b"), cat.gpu("a100-80gb"), gpus=8, seq_len=2048)
    assert round(a.contiguous.kv_gb_per_req, 2) == 9.66 and a.weights_gb == 350.0
    assert a.free_gb == pytest.approx(290.0) and a.contiguous.b_mem_max == 30
    assert a.paged.b_mem_max == 30 and a.paged.kv_waste_frac == 0.0


def test_kv_weights_do_not_fit(capsys):
    rc, out, _ = _run(["kv", "--model", "llama-3.1-405b", "--gpu", "l4", "--seq-len", "4096"], capsys)
    assert rc == 0 and "do not fit" in out
    assert re.search(r"contiguous │\s+4096 │\s+[\d.]+ │\s+0\.0% │\s+0 │", out)


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["--model", "llama-3.1-7b", "--gpu", "h100-sxm", "--seq-len", "10"],
         ["--model", "llama-3.1-7b", "unknown model"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100", "--seq-len", "10"], ["--gpu", "unknown GPU", "h100-sxm"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "0"],
         ["--seq-len", "integer in [1, 1e+08] tokens"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--gpus", "1.5"], ["--gpus"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--kv-dtype", "fp7"],
         ["--kv-dtype", "fp7"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--reserve-fraction", "1"],
         ["--reserve-fraction"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--mean-seq-len", "20"],
         ["--mean-seq-len", "<= --seq-len"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm"], ["--seq-len", "required"]),
        # the audit's extreme flags: the grid keys' domains, one line each (no OverflowError)
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--kv-dtype", "1e-320"],
         ["--kv-dtype", "1e-320", "[0.0625, 8] bytes"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--weight-dtype", "inf"],
         ["--weight-dtype", "[0.0625, 8] bytes"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--kv-dtype", "nan"],
         ["--kv-dtype", "[0.0625, 8] bytes"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", str(10**30)],
         ["--seq-len", "[1, 1e+08] tokens"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--mean-seq-len", "1e-300"],
         ["--mean-seq-len", "[1, 1e+08] tokens"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--gpus", "5000"],
         ["--gpus", "[1, 4096] GPUs"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--block-tokens", str(10**9)],
         ["--block-tokens", "[1, 1e+08] tokens"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--reserve-fraction=-1e-300"],
         ["--reserve-fraction", "[0, 1)"]),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "10", "--catalog", "nowhere"],
         ["nowhere", "not a folder"]),
    ],
)
def test_kv_bad_input_exits_2_with_one_line(in_tmp, capsys, argv, fragments):
    rc, out, err = _run(["kv", *argv], capsys)
    _assert_one_line_exit_2(rc, out, err, *fragments)
    assert _files(in_tmp) == []


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("model,gpu", [("deepseek-v3", "l4"), ("llama-2-7b", "b200")])
@pytest.mark.parametrize("flags", [
    ["--seq-len", "100000000", "--gpus", "4096", "--kv-dtype", "0.0625", "--weight-dtype", "8",
     "--block-tokens", "100000000", "--reserve-fraction", "0.9999999999999999"],
    ["--seq-len", "1", "--mean-seq-len", "1", "--kv-dtype", "8", "--weight-dtype", "0.0625", "--block-tokens", "1"],
    ["--seq-len", "100000000", "--mean-seq-len", "1", "--gpus", "4096", "--kv-dtype", "0.0625"],
], ids=["upper", "lower", "mixed"])
def test_kv_at_the_bounds_of_every_flag_prints_numbers(capsys, model, gpu, flags):
    rc, out, err = _run(["kv", "--model", model, "--gpu", gpu, *flags], capsys)
    assert rc == 0 and err == "", err
    assert "nan" not in out.lower() and "largest batch that fits" in out


# --------------------------------------------------------------------------- catalog


def test_catalog_lists_every_entry(capsys):
    rc, out, err = _run(["catalog"], capsys)
    assert rc == 0 and err == ""
    cat = packaged_catalog()
    for name in [*cat.models, *cat.gpus]:
        assert re.search(rf"│ {re.escape(name)}\s+│", out), name
    assert "4718.6" in out  # gpt3-175b KV KB/token at fp16
    assert "[catalog.models.NAME]" in out
    assert _run(["catalog", "list"], capsys)[1] == out


def test_catalog_show_has_sources(capsys):
    rc, out, _ = _run(["catalog", "show", "llama-3.1-70b"], capsys)
    assert rc == 0 and "config.json" in out and "327,680" in out and "70,553,706,496" in out
    rc, out, _ = _run(["catalog", "show", "h100-sxm"], capsys)
    assert rc == 0 and "3.35 TB/s" in out and "3,350,000,000,000" in out and "price note" in out


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["catalog", "show", "h100"], ["h100", "unknown model or GPU", "h100-sxm"]),
        (["catalog", "show"], ["needs a name"]),
        (["catalog", "list", "x"], ["only with show"]),
        (["catalog", "drop"], ["invalid choice"]),
        (["catalog", "--catalog", "nowhere"], ["nowhere", "not a folder"]),
    ],
)
def test_catalog_bad_input_exits_2_with_one_line(in_tmp, capsys, argv, fragments):
    rc, out, err = _run(argv, capsys)
    _assert_one_line_exit_2(rc, out, err, *fragments)
    assert _files(in_tmp) == []


@pytest.fixture()
def user_catalog(tmp_path):
    d = tmp_path / "mycat"
    (d / "models").mkdir(parents=True)
    (d / "gpus").mkdir()
    (d / "models" / "tiny-1b.toml").write_text(
        'attention = "gqa"\nn_layers = 16\nhidden = 2048\nn_heads = 32\nn_kv_heads = 8\nn_params = 1.2e9\n')
    (d / "gpus" / "h100-sxm.toml").write_text(
        "hbm_bytes = 94e9\nhbm_bandwidth_bytes_per_s = 3.9e12\nbf16_dense_flops = 989.5e12\nusd_per_gpu_hour = 3.0\n")
    return d


def test_user_catalog_folder_adds_and_overrides(user_catalog, capsys):
    rc, out, _ = _run(["catalog", "--catalog", str(user_catalog)], capsys)
    assert rc == 0 and re.search(r"│ tiny-1b\s+│", out) and str(user_catalog) in out
    assert re.search(r"│ h100-sxm\s+│\s+94 │", out)
    rc, out, _ = _run(["catalog", "show", "tiny-1b", "--catalog", str(user_catalog)], capsys)
    assert rc == 0 and "32,768" in out  # 2 x 16 layers x 8 KV heads x 64 head_dim x 2 B
    rc, out, _ = _run(["kv", "--model", "tiny-1b", "--gpu", "h100-sxm", "--seq-len", "1000",
                       "--catalog", str(user_catalog)], capsys)
    assert rc == 0 and "94.0 GB" in out


def test_run_accepts_catalog_folders(user_catalog, tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text('name = "u"\n[grid]\narrival_rps = 10.0\nbatch_size = [1, 4]\nseq_len = 1000\n'
                    'model = "tiny-1b"\ngpu = "h100-sxm"\nslo_ms = 500.0\n')
    out_dir = tmp_path / "out"
    rc, _, err = _run(["run", str(grid), "--out", str(out_dir), "--quiet"], capsys)
    _assert_one_line_exit_2(rc, "", err, "grid.model", "tiny-1b")
    assert not out_dir.exists()
    rc, _, err = _run(["run", str(grid), "--out", str(out_dir), "--quiet", "--catalog", str(user_catalog)], capsys)
    assert rc == 0, err
    m = json.loads((out_dir / "manifest.json").read_text())
    assert m["service_source"] == "roofline" and m["rows"]["grid_points"] == 2
    assert os.path.isdir(out_dir / "points")
