"""Every unknown key gets a did-you-mean: one line naming the file, the key, the value, the
rule and the closest known key (difflib), for the tables of a grid file and for catalog
files. Through the CLI: exit 2, nothing written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sweep.catalog import load_catalog
from sweep.cli import main
from sweep.errors import CatalogError, GridError
from sweep.grid import load

#: A small continuous-serving grid every case below breaks in one place.
GRID = textwrap.dedent("""\
    name = "dym"
    [grid]
    model = ["llama-3.1-8b"]
    gpu = ["h100-sxm"]
    arrival_rps = [5.0]
    prompt_tokens = [512]
    output_tokens = [128]
    batch_size = [16]
    ttft_slo_ms = 2000.0
    tpot_slo_ms = 50.0
    [options]
    serving = "continuous"
    """)


def _grid(tmp_path: Path, old: str, new: str, tail: str = "") -> Path:
    assert old in GRID
    p = tmp_path / "g.toml"
    p.write_text(GRID.replace(old, new, 1) + tail)
    return p


@pytest.mark.parametrize(("old", "new", "tail", "key", "suggestion"), [
    ("ttft_slo_ms", "ttft_slo", "", "grid.ttft_slo", "ttft_slo_ms"),
    ('serving = "continuous"', 'serving = "continuous"\nkv_alocation = "paged"', "", "options.kv_alocation",
     "kv_allocation"),
    ("", "", "[outptu]\npoints = \"none\"\n", "outptu", "output"),
    ("", "", "[output]\npoinst = \"none\"\n", "output.poinst", "points"),
    ("", "", "[search]\ntrails = 3\n", "search.trails", "trials"),
    ("", "", "[uncertainty]\nsampels = 16\n", "uncertainty.sampels", "samples"),
    ("", "", "[sensitivity]\nenabeld = true\n", "sensitivity.enabeld", "enabled"),
    ("arrival_rps = [5.0]", "arrival_rps = {start = 1.0, stop = 5.0, nmu = 3}", "", "grid.arrival_rps.nmu", "num"),
    ("", "", "[catalog.modles.x]\nn_layers = 1\n", "catalog.modles", "models"),
])
def test_unknown_grid_key_names_the_closest(tmp_path: Path, old: str, new: str, tail: str, key: str,
                                            suggestion: str) -> None:
    path = _grid(tmp_path, old, new, tail) if old else _grid(tmp_path, "name", "name", tail)
    with pytest.raises(GridError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {key} = ")
    assert f"did you mean '{suggestion}'?" in message


def test_unknown_catalog_field_names_the_closest(tmp_path: Path) -> None:
    packaged = Path(__file__).resolve().parents[1] / "sweep" / "catalog" / "gpus" / "h100-sxm.toml"
    (tmp_path / "gpus").mkdir()
    bad = tmp_path / "gpus" / "my-gpu.toml"
    bad.write_text(packaged.read_text().replace("hbm_bytes ", "hbm_byte ", 1))
    with pytest.raises(CatalogError) as info:
        load_catalog([tmp_path])
    message = str(info.value)
    assert "\n" not in message and "my-gpu.toml" in message and "hbm_byte" in message
    assert "did you mean 'hbm_bytes'?" in message


def test_cli_unknown_key_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _grid(tmp_path, "tpot_slo_ms", "tpot_slo")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "grid.tpot_slo" in err and "did you mean 'tpot_slo_ms'?" in err
    assert not out.exists()
