"""`sweep report`: the queries against real run folders, the figures' numbers against the
Parquet files, the HTML's self-containment, the payload bound on a large frontier, the
continuous-serving figures, +inf and NULL read alike, `--png`, and
the command's exit codes."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from _report_runs import reseal, run_folder, tiled_frontier

from sweep.cli import main
from sweep.reporting import ReportError, build_report
from sweep.reporting import data as D
from sweep.reporting import figures as F


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    base = tmp_path_factory.getbasetemp() / "report-runs"
    base.mkdir(exist_ok=True)
    return lambda name: run_folder(base, name)


def _payload(html_path: Path) -> dict:
    text = html_path.read_text()
    m = re.search(r"<script type='application/json' id='report-data'>(.*?)</script>", text, re.DOTALL)
    assert m, "the report's data block is missing"
    return json.loads(m.group(1).replace("<\\/", "</"))


def _figure(payload: dict, fid: str) -> dict:
    return next(f for f in payload["figures"] if f["id"] == fid)


def _decode(v):
    """A figure array back to floats (lists, or Plotly typed arrays)."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype="<f4").astype(float)
    return np.array([math.nan if x is None else x for x in v], dtype=float)


# --------------------------------------------------------------------------- queries


def test_actions_are_the_kernels_actions():
    from sweep.decide.verdict import ACTIONS

    assert F.ACTIONS == ACTIONS


def test_detail_reads_exactly_the_chosen_rows(runs):
    run = D.Run(runs("multi"))  # hive-partitioned points/
    scen = run.scenarios()
    assert scen.shown == scen.total == 16  # 2 models x 2 GPUs x 2 rates x 2 replica counts
    det = run.detail(scen.cols)
    assert det.source == "points/"
    # every point of every chosen row, and nothing else: point_id // n_points is the row
    n = int(scen.cols["n_points"][0])
    np.testing.assert_array_equal(np.unique(det.cols["point_id"] // n), np.sort(scen.cols["row_id"]))
    assert len(det.cols["point_id"]) == n * scen.shown
    np.testing.assert_array_equal(det.cols["row_id"], det.cols["point_id"] // n)  # each point knows its row
    # the values are the points' own
    ref = duckdb.sql(f"SELECT point_id, latency_ms, rho, action FROM read_parquet('{run.path}/points/**/*.parquet', "
                     "hive_partitioning = true) ORDER BY point_id").fetchnumpy()
    order = np.argsort(det.cols["point_id"])
    np.testing.assert_array_equal(det.cols["point_id"][order], ref["point_id"])
    np.testing.assert_array_equal(det.cols["latency_ms"][order], ref["latency_ms"])
    assert list(det.cols["action"][order]) == list(ref["action"])
    run.close()


def test_scenarios_are_bounded_and_cover_every_pair(runs, monkeypatch):
    monkeypatch.setattr(D, "MAX_SCENARIOS", 4)
    run = D.Run(runs("multi"))
    scen = run.scenarios()
    assert scen.shown == 4 and scen.total == 16 and scen.notes
    pairs = set(zip(scen.cols["model"], scen.cols["gpu"]))
    assert len(pairs) == 4  # one row per model x GPU pair
    run.close()


def test_frontier_sample_keeps_whole_rows_evenly(runs):
    run = D.Run(runs("multi"))
    full = run.frontier()
    assert full.shown == full.total and not full.notes
    budget = full.total // 3
    part = run.frontier(budget=budget)
    assert part.shown <= budget and part.total == full.total and "frontier points shown" in part.notes[0]
    # whole rows: every sampled row has all its frontier points
    sizes = dict(zip(run.row_index()["row_id"], run.row_index()["n_frontier"]))
    rows, counts = np.unique(part.cols["row_id"], return_counts=True)
    assert all(sizes[r] == c for r, c in zip(rows, counts))
    assert len(set(zip(part.cols["model"], part.cols["gpu"]))) == 4
    run.close()


def test_reduced_run_uses_frontier_points_and_skips_the_action_map(runs, tmp_path):
    result = build_report(runs("reduced"), out=tmp_path / "r.html")
    assert "action-map" in result.skipped and "points/" in result.skipped["action-map"]
    assert {"latency", "utilisation", "frontier", "kv-budget", "replica-plan"} <= set(result.figures)
    text = (tmp_path / "r.html").read_text()
    assert "Pareto points from frontier.parquet" in text


# --------------------------------------------------------------------------- the seed's numbers


def test_seed_report_table_and_figures_equal_the_parquet_values(runs, tmp_path):
    run_dir = runs("seed")
    result = build_report(run_dir, out=tmp_path / "seed.html")
    payload = _payload(result.path)
    sid = payload["scenarios"][0]["id"]
    table = payload["html"]["table"][sid]
    pts = pq.read_table(run_dir / "points").to_pydict()
    opt = pq.read_table(run_dir / "optimum.parquet").to_pylist()[0]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table)[1:]]
    assert len(cells) == 5
    for i, row in enumerate(cells):  # B, T_svc, req/s, rho, E[W], E[T_batch], E[T_svc], E[T], P99 gauss, P99 exp
        assert row[0] == f"{pts['batch_size'][i]:g}"
        assert row[1] == F.fmt(pts["t_svc_ms"][i])
        assert row[7] == F.fmt(pts["e_resp_ms"][i])
        assert row[8] == F.fmt(pts["p_gauss_ms"][i])
    # the seed's figures, as the README prints them
    assert [r[3] for r in cells] == ["505.0% (unstable)", "130.0% (unstable)", "67.5%", "36.3%", "20.6%"]
    assert [r[7] for r in cells] == ["inf", "inf", "145.1", "149.5", "229.6"]
    assert "B_min(rho_target=0.75) = 7.14 -&gt; 8" in table and "at most 30 requests in memory" in table
    # latency figure: the points' latency_ms, the SLO line, the knee of optimum.parquet
    lat = _figure(payload, "latency")["figs"][sid]
    line = next(t for t in lat["data"] if str(t.get("name", "")).startswith("P99 estimate"))
    np.testing.assert_allclose(_decode(line["x"]), pts["batch_size"])
    want = np.array([math.nan if x is None else x for x in pts["latency_ms"]])
    np.testing.assert_allclose(_decode(line["y"]), want)
    knee = next(t for t in lat["data"] if str(t.get("name", "")).startswith("knee"))
    assert knee["x"] == [opt["knee"]] and knee["y"] == [pytest.approx(opt["knee_latency_ms"])]
    slo = next(t for t in lat["data"] if str(t.get("name", "")).startswith("SLO"))
    assert slo["y"] == [200.0, 200.0]
    names = [t.get("name", "") for t in lat["data"]]
    assert "unstable (B < 6)" in names and "out of memory (B > 30)" in names
    # KV budget: weights and free from optimum.parquet
    kv = _figure(payload, "kv-budget")["figs"][sid]
    weights = next(t for t in kv["data"] if t["name"] == "weights")
    np.testing.assert_allclose(_decode(weights["x"]), opt["weights_gb"])
    usable = kv["layout"]["shapes"][0]["x0"]
    assert usable == pytest.approx(opt["weights_gb"] + opt["free_gb"])


def test_null_and_inf_read_alike(runs, tmp_path):
    """Tomorrow's outputs write NULL for unbounded values and for 'no answer' (batch 0,
    point -1): the report must say the same thing as with today's +inf and 0/-1."""
    src = runs("seed")
    nulled = tmp_path / "nulled"
    shutil.copytree(src, nulled)
    for path in [nulled / "optimum.parquet", nulled / "frontier.parquet",
                 *sorted((nulled / "points").glob("*.parquet"))]:
        t = pq.read_table(path)
        cols = []
        for name, col in zip(t.column_names, t.columns):
            if pa.types.is_floating(col.type):
                col = pc.if_else(pc.is_inf(col), pa.scalar(None, col.type), col)
            elif pa.types.is_integer(col.type) and (name.endswith("_point_id") or name in
                                                     ("b_max_slo", "slo_opt", "knee", "b_latency_opt",
                                                      "replicas_min_batch")):
                bad = pc.equal(col, -1) if name.endswith("_point_id") else pc.equal(col, 0)
                col = pc.if_else(bad, pa.scalar(None, col.type), col)
            cols.append(col)
        pq.write_table(pa.table(cols, names=t.column_names), path)
    reseal(nulled)
    a = _payload(build_report(src, out=tmp_path / "a.html").path)
    b = _payload(build_report(nulled, out=tmp_path / "b.html").path)
    assert a["html"] == b["html"]  # tables and answers, cell for cell
    for fid in ("latency", "utilisation", "kv-budget", "frontier"):
        assert json.dumps(_figure(a, fid)) == json.dumps(_figure(b, fid)), fid


# --------------------------------------------------------------------------- the file


def test_html_is_self_contained(runs, tmp_path):
    path = build_report(runs("sim"), out=tmp_path / "sim.html").path
    text = path.read_text()
    assert text.count("<script") == 3  # data, plotly.js, controller: all inline
    assert not re.search(r"<script[^>]+\bsrc\s*=", text)
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", text, re.DOTALL)
    plotly_js = [s for s in scripts if s.lstrip().startswith("/**") and "plotly.js v" in s[:200]]
    assert len(plotly_js) == 1  # the bundle, verbatim (its map-tile URLs are never used; the CSP forbids them)
    ours = [s for s in scripts if s is not plotly_js[0]]
    assert not any(re.search(r"https?://", s) for s in ours)  # the data and the controller name no URL
    text = re.sub(r"<script[^>]*>.*?</script>", "<script></script>", text, flags=re.DOTALL)  # the markup
    assert not re.search(r"<link\b", text, re.IGNORECASE)
    assert not re.search(r"<(img|iframe|source|video|audio|embed|object)\b[^>]*\b(src|data)\s*=", text, re.IGNORECASE)
    assert not re.search(r"\b(src|href)\s*=\s*['\"]?\s*(https?:)?//", text, re.IGNORECASE)
    assert "@import" not in text and "@font-face" not in text
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text, re.IGNORECASE)
    assert "default-src 'none'" in text  # and the page forbids any fetch outright


def test_simulated_run_draws_proxy_against_simulator(runs, tmp_path):
    result = build_report(runs("sim"), out=tmp_path / "sim.html")
    assert "proxy-sim" in result.figures
    payload = _payload(result.path)
    sim = _figure(payload, "proxy-sim")["fig"]
    pts = pq.read_table(runs("sim") / "points").to_pydict()
    gauss = [t for t in sim["data"] if t.get("name", "").endswith("gaussian proxy")]
    xs = np.concatenate([_decode(t["x"]) for t in gauss])
    finite_pairs = [(s, p) for s, p in zip(pts["sim_p_ms"], pts["p_gauss_ms"]) if p is not None and s is not None]
    np.testing.assert_allclose(np.sort(xs), np.sort([s for s, _ in finite_pairs]))


def test_payload_is_bounded_on_a_large_frontier(runs, tmp_path):
    small = pq.ParquetFile(runs("reduced") / "frontier.parquet").metadata.num_rows
    big = tiled_frontier(runs("reduced"), tmp_path / "big", copies=int(1.3 * D.FRONTIER_BUDGET / small) + 1)
    n_front = pq.ParquetFile(big / "frontier.parquet").metadata.num_rows
    assert n_front > D.FRONTIER_BUDGET
    result = build_report(big, out=tmp_path / "big.html")
    payload = _payload(result.path)
    front = _figure(payload, "frontier")["fig"]
    lines = [t for t in front["data"] if t.get("mode") == "lines+markers"]
    drawn = sum(int(np.isfinite(_decode(t["x"])).sum()) for t in lines)
    assert 0.9 * D.FRONTIER_BUDGET <= drawn <= D.FRONTIER_BUDGET
    assert all(t["type"] == "scattergl" for t in lines)
    text = result.path.read_text()
    assert f"of {n_front:,} frontier points shown" in text
    figure_bytes = len(json.dumps(front))
    # float32 typed arrays, base64: x, y and five hover values are 37 bytes a point, plus row gaps and markers
    assert figure_bytes < 70 * D.FRONTIER_BUDGET
    assert result.bytes < 15e6


# --------------------------------------------------------------------------- continuous serving


def test_continuous_run_draws_its_figures(runs, tmp_path):
    run_dir = runs("continuous")
    result = build_report(run_dir, out=tmp_path / "c.html")
    assert ({"throughput", "ttft-tpot", "frontier", "latency", "utilisation", "kv-budget", "action-map"}
            <= set(result.figures))
    payload = _payload(result.path)
    # per scenario row: TTFT and TPOT against the cap are the points' own (NULL: a gap), the
    # SLOs are the grid's (500 and 40 ms), the table lists every point with its action
    opt = pq.read_table(run_dir / "optimum.parquet").to_pylist()
    allpts = pq.read_table(run_dir / "points").to_pandas()
    lat = _figure(payload, "latency")["figs"]
    assert set(lat) == {f"r{r['row_id']}" for r in opt}
    for r in opt:
        fig = lat[f"r{r['row_id']}"]
        rows = allpts[allpts.point_id // r["n_points"] == r["row_id"]].sort_values("batch_size")
        for col, axis in (("ttft_p_ms", "y"), ("tpot_p_ms", "y2")):
            line = next(t for t in fig["data"]
                        if t.get("yaxis") == axis and t["name"].startswith(("TTFT P99", "TPOT P99")))
            np.testing.assert_allclose(_decode(line["y"]), rows[col].to_numpy(dtype=float))
        slos = {t["name"] for t in fig["data"] if " SLO " in t["name"]}
        assert slos == {"TTFT SLO 500 ms", "TPOT SLO 40 ms"}
        table = payload["html"]["table"][f"r{r['row_id']}"]
        assert table.count("<tr") == len(rows) + 1 and "TTFT P99" in table
        assert "SLOs: TTFT P99 &lt;= 500 ms, TPOT P99 &lt;= 40 ms" in payload["html"]["answers"][f"r{r['row_id']}"]
    thr = _figure(payload, "throughput")["fig"]
    pts = pq.read_table(run_dir / "points").to_pydict()
    stable = [i for i, s in enumerate(pts["stable"]) if s]
    assert 0 < len(stable) < len(pts["stable"])
    xs = np.concatenate([_decode(t["x"]) for t in thr["data"]])
    np.testing.assert_allclose(np.sort(xs), np.sort([pts["tok_s_per_user"][i] for i in stable]))
    ttl = _figure(payload, "ttft-tpot")["fig"]
    ttft = np.concatenate([_decode(t["y"]) for t in ttl["data"] if t["yaxis"] == "y"])
    assert np.isfinite(ttft).sum() == len(stable)  # the unstable points (+inf) are gaps
    assert {s["y0"] for s in ttl["layout"]["shapes"]} == {500.0, 40.0}
    front = _figure(payload, "frontier")["fig"]
    assert front["layout"]["xaxis"]["title"]["text"].startswith("tok/s per user")


def test_dynamic_run_notes_the_continuous_figures(runs, tmp_path):
    result = build_report(runs("seed"), out=tmp_path / "s.html")
    assert "serving = \"continuous\"" in result.skipped["throughput"]
    assert "did not simulate" in result.skipped["proxy-sim"]
    text = result.path.read_text()
    assert text.count("Not drawn:") == len(result.skipped)


# --------------------------------------------------------------------------- PNGs and the command


def test_png_writes_one_file_per_figure(runs, tmp_path):
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        pytest.skip("no Chromium (kaleido renders the PNGs with it): apt-get install chromium, or .ci/install-browser")
    pytest.importorskip("kaleido")
    result = build_report(runs("seed"), out=tmp_path / "s.html", png_dir=tmp_path / "png")
    names = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert names == sorted(f"{f}.png" for f in result.figures)
    for p in result.pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_cli_report_and_its_errors(runs, tmp_path, capsys):
    out = tmp_path / "x" / "report.html"
    assert main(["report", str(runs("seed")), "--out", str(out)]) == 0
    assert out.exists() and "figures" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such run folder" in err
    half = tmp_path / "half"
    half.mkdir()
    (half / "optimum.parquet").write_bytes(b"")
    assert main(["report", str(half)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "incomplete" in err
    assert not (half / "report.html").exists()


def test_missing_extra_is_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "plotly" else real(name, *a))
    with pytest.raises(ReportError, match=r"pip install 'sweep-capacity\[report\]'"):
        build_report("anything")
