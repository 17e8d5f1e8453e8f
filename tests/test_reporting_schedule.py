"""`sweep report` on a run with schedule.parquet: the schedule figure is drawn, its numbers
are the file's, and it renders to PNG; a run without a schedule has no such figure."""

from __future__ import annotations

import json
import math
import re
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from sweep.grid import load
from sweep.reporting import build_report
from sweep.runner import run_grid

GRID = """
name = "sched-report"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
seq_len = 1024
batch_size = 1
t_fixed_ms = 10.0
t_req_ms = 0.0
slo_ms = 1e6
replicas = {start = 1, stop = 6, step = 1}
[schedule]
hourly_rps = [40, 30, 20, 20, 30, 60, 120, 200, 300, 380, 400, 390, \
370, 350, 340, 360, 390, 420, 430, 380, 300, 200, 120, 70]
ramp = 1
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sched-report")
    (tmp / "g.toml").write_text(GRID)
    run_grid(load(tmp / "g.toml"), tmp / "o")
    return tmp / "o"


def _payload(path):
    m = re.search(r"<script type='application/json' id='report-data'>(.*?)</script>", path.read_text(), re.DOTALL)
    return json.loads(m.group(1).replace("<\\/", "</"))


def _floats(v):
    if isinstance(v, dict) and "bdata" in v:
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v.get("dtype", "f8")).astype(float)
    return np.array([math.nan if x is None else x for x in v], dtype=float)


def test_schedule_figure_draws_the_file(run_dir, tmp_path):
    pytest.importorskip("plotly")
    result = build_report(run_dir, out=tmp_path / "r.html")
    assert "schedule" in result.figures
    fig = next(f for f in _payload(result.path)["figures"] if f["id"] == "schedule")["fig"]
    sched = pq.read_table(run_dir / "schedule.parquet").to_pydict()
    planned = next(t for t in fig["data"] if t["name"].startswith("planned"))
    traffic = next(t for t in fig["data"] if t["name"].startswith("traffic"))
    # the step lines repeat the last hour once so it shows
    np.testing.assert_array_equal(_floats(planned["y"])[:24], sched["replicas"])
    np.testing.assert_array_equal(_floats(traffic["y"])[:24], sched["arrival_rps"])
    assert traffic["yaxis"] == "y2" and len(_floats(planned["x"])) == 25


def test_schedule_figure_renders_to_png(run_dir, tmp_path):
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        pytest.skip("no Chromium (kaleido renders the PNGs with it): apt-get install chromium, or .ci/install-browser")
    pytest.importorskip("kaleido")
    result = build_report(run_dir, out=tmp_path / "r.html", png_dir=tmp_path / "png")
    png = tmp_path / "png" / "schedule.png"
    assert png in result.pngs and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_browser_that_was_not_ready_renders_on_the_second_try(run_dir, tmp_path, monkeypatch):
    """Failure injection: kaleido's first render fails as it did on a loaded 2-core machine
    (the page script not loaded yet); the second renders. Any other failure is one error at
    once, with no retry."""
    kaleido = pytest.importorskip("kaleido")
    calls = []

    def flaky(jobs, **kw):
        calls.append(len(jobs))
        if len(calls) == 1:
            raise RuntimeError("{'description': 'ReferenceError: kaleido_scopes is not defined'}")
        for job in jobs:
            with open(job["path"], "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n")

    monkeypatch.setattr(kaleido, "write_fig_from_object_sync", flaky)
    result = build_report(run_dir, out=tmp_path / "r.html", png_dir=tmp_path / "png")
    assert len(calls) == 2 and (tmp_path / "png" / "schedule.png") in result.pngs

    def broken(jobs, **kw):
        calls.append(len(jobs))
        raise RuntimeError("Chrome not found")

    calls.clear()
    monkeypatch.setattr(kaleido, "write_fig_from_object_sync", broken)
    from sweep.reporting.data import ReportError

    with pytest.raises(ReportError, match="Chrome not found"):
        build_report(run_dir, out=tmp_path / "r2.html", png_dir=tmp_path / "png2")
    assert len(calls) == 1
