"""The report in a real browser: headless Chromium (Debian's package) driven by Playwright.

Each report is opened from a file:// URL. The tests record every console message, page
error and request, and assert: no console error, no request other than the file itself
(the page's CSP forbids them, and a route aborts anything else), every figure drew marks
(SVG points, lines, bars, heatmap cells; WebGL figures: coloured pixels in a screenshot),
every figure that is not drawn says why, the model/GPU filters and the scenario picker
work, and the print layout fits the page. A screenshot goes to the test's tmp folder, and
to docs/report.png only with SWEEP_UPDATE_SCREENSHOT=1 (tests never dirty the tree).

Chromium: `.ci/install-browser` installs Debian's package. Playwright's own browser
download (`playwright install`) is not used. Without Chromium these tests skip.
"""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _report_runs import ROOT, run_folder
from playwright.sync_api import sync_playwright

from sweep.reporting import build_report
from sweep.reporting import figures as F


def _chromium() -> str | None:
    for name in (os.environ.get("SWEEP_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (found := shutil.which(name)):
            return found
    return None


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (run .ci/install-browser: "
                                                          "Debian's chromium package)")
LOCAL_SCHEMES = ("file:", "data:", "blob:")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    base = tmp_path_factory.getbasetemp() / "report-runs"
    base.mkdir(exist_ok=True)
    out = tmp_path_factory.mktemp("reports")
    paths = {name: build_report(run_folder(base, name), out=out / f"{name}.html").path
             for name in ("multi", "sim", "continuous")}
    gl, F.GL_THRESHOLD = F.GL_THRESHOLD, 10  # the reduced run's frontier and plan in WebGL, as a fleet's are
    try:
        paths["reduced-gl"] = build_report(run_folder(base, "reduced"), out=out / "reduced-gl.html").path
    finally:
        F.GL_THRESHOLD = gl
    return paths


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-dev-shm-usage", "--enable-unsafe-swiftshader",
                                    "--use-angle=swiftshader"])
        yield b
        b.close()


class Page:
    """A report opened in a fresh page, with everything it logged and requested."""

    def __init__(self, browser, path: Path) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        self.page = self.context.new_page()
        self.console: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.blocked: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("requestfailed", lambda r: self.blocked.append(r.url))

        def route(r):
            if r.request.url.startswith(LOCAL_SCHEMES):
                r.continue_()
            else:
                self.blocked.append(r.request.url)
                r.abort()

        self.context.route("**/*", route)
        self.url = path.resolve().as_uri()
        self.page.goto(self.url, wait_until="load", timeout=120_000)
        self.page.wait_for_selector("body[data-ready='1']", state="attached", timeout=60_000)
        self.page.wait_for_timeout(300)  # WebGL draws on the next animation frame

    def close(self) -> None:
        self.context.close()

    def assert_clean(self) -> None:
        errors = [t for kind, t in self.console if kind == "error"]
        assert not errors, errors
        assert not self.errors, self.errors
        assert self.requests == [self.url], self.requests  # the file itself and nothing else
        assert not self.blocked, self.blocked

    def marks(self, fid: str) -> dict[str, int]:
        return self.page.eval_on_selector(f"#plot-{fid}", """el => {
            const n = s => el.querySelectorAll(s).length;
            const gl = (el._fullData || []).filter(t => t.type === 'scattergl' && t.visible === true);
            return {points: n('.scatterlayer .point'), lines: n('.scatterlayer path.js-line'),
                    fills: n('.scatterlayer path.js-fill'), bars: n('.barlayer .point'),
                    cells: n('.heatmaplayer image'), gl_traces: gl.length,
                    gl_points: gl.reduce((a, t) => a + (t._length || 0), 0),
                    width: el._fullLayout ? el._fullLayout.width : 0,
                    height: el._fullLayout ? el._fullLayout.height : 0};
        }""")

    def drawn(self) -> list[str]:
        return self.page.eval_on_selector_all("section[data-drawn='1']", "els => els.map(e => e.dataset.figure)")

    def not_drawn(self) -> list[str]:
        return self.page.eval_on_selector_all(
            "section[data-drawn='0'] .skipped", "els => els.map(e => e.offsetParent ? e.textContent : '')")


def _coloured_pixels(png: bytes) -> int:
    """Pixels of a screenshot that are neither white nor grey (a minimal PNG decoder:
    8-bit RGB or RGBA, not interlaced, as Chromium writes them)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    count = 0
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for x in range(0, stride, channels):
            r, g, bl = line[x], line[x + 1], line[x + 2]
            if max(r, g, bl) - min(r, g, bl) > 40:  # saturated: a trace's colour, not text or grid
                count += 1
        prev = line
    return count


def test_multi_model_report_renders_and_filters(browser, reports, tmp_path):
    pg = Page(browser, reports["multi"])
    try:
        drawn = pg.drawn()
        assert {"latency", "utilisation", "kv-budget", "action-map", "frontier", "replica-plan"} <= set(drawn)
        for fid in drawn:
            m = pg.marks(fid)
            assert m["width"] > 600 and m["height"] > 200, (fid, m)
            assert m["points"] + m["lines"] + m["bars"] + m["cells"] > 0, (fid, m)
        assert pg.marks("frontier")["points"] >= 10
        assert pg.marks("action-map")["cells"] == 2  # one heatmap per batching window
        assert pg.marks("kv-budget")["bars"] >= 6
        assert all(t.startswith("Not drawn:") for t in pg.not_drawn())
        assert len(pg.not_drawn()) == 3  # proxy-sim, throughput, ttft-tpot
        rows = pg.page.locator("table.seed tbody tr").count()
        assert rows == 8  # 4 batch sizes x 2 windows of the scenario row

        # the GPU filter: frontier traces, scenario list and plan table follow it
        before = pg.marks("frontier")["points"]
        pg.page.uncheck("input[data-filter='gpu'][value='a100-80gb']")
        hidden = pg.page.eval_on_selector("#plot-frontier", """el => el.data.filter(
            t => t.meta && t.meta.gpu === 'a100-80gb').every(t => t.visible === false)""")
        assert hidden
        assert 0 < pg.marks("frontier")["points"] < before
        options = pg.page.eval_on_selector_all("#scenario option", "os => os.map(o => o.textContent)")
        assert options and not any("a100-80gb" in o for o in options)
        pg.page.click("button[data-all='gpu'][data-value='1']")
        assert pg.marks("frontier")["points"] == before
        # the model filter also narrows the cheapest-plan table
        assert pg.page.locator("table.plan tr[data-model='llama-3.1-70b']:visible").count() > 0
        pg.page.uncheck("input[data-filter='model'][value='llama-3.1-70b']")
        assert pg.page.locator("table.plan tr[data-model='llama-3.1-70b']:visible").count() == 0
        pg.page.check("input[data-filter='model'][value='llama-3.1-70b']")

        # the scenario picker swaps the per-scenario table and figures
        first_table = pg.page.inner_html("[data-scenario-html='table']")
        values = pg.page.eval_on_selector_all("#scenario option", "os => os.map(o => o.value)")
        opened = pg.page.input_value("#scenario")
        pg.page.select_option("#scenario", next(v for v in values if v != opened))
        assert pg.page.inner_html("[data-scenario-html='table']") != first_table
        assert pg.marks("latency")["points"] > 0

        pg.page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        if os.environ.get("SWEEP_UPDATE_SCREENSHOT") == "1":
            pg.page.select_option("#scenario", opened)
            pg.page.wait_for_timeout(300)
            pg.page.screenshot(path=str(ROOT / "docs" / "report.png"), full_page=True,
                               clip={"x": 0, "y": 0, "width": 1280, "height": 1720})

        # print: every figure is resized to the page, nothing is cut off, and a PDF comes out
        pg.page.emulate_media(media="print")
        pg.page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
        widths = [pg.marks(f)["width"] for f in drawn]
        assert max(widths) <= 700, widths
        pdf = pg.page.pdf(format="A4", print_background=True)
        assert pdf[:5] == b"%PDF-" and len(pdf) > 50_000
        pg.page.evaluate("window.dispatchEvent(new Event('afterprint'))")
        pg.assert_clean()
    finally:
        pg.close()


def test_simulated_report_draws_proxy_against_simulator(browser, reports):
    pg = Page(browser, reports["sim"])
    try:
        assert "proxy-sim" in pg.drawn()
        m = pg.marks("proxy-sim")
        assert m["points"] >= 12, m  # 12 simulated points, several estimates each
        pg.assert_clean()
    finally:
        pg.close()


def test_webgl_frontier_draws_pixels(browser, reports):
    """A fleet-sized frontier uses WebGL (scattergl): check the canvas really has colour."""
    pg = Page(browser, reports["reduced-gl"])
    try:
        m = pg.marks("frontier")
        assert m["gl_traces"] > 0 and m["gl_points"] > 0, m
        shot = pg.page.locator("#plot-frontier").screenshot()
        assert _coloured_pixels(shot) > 200
        pg.page.click("button[data-all='gpu'][data-value='0']")
        pg.page.wait_for_timeout(300)
        assert pg.marks("frontier")["gl_traces"] == 0
        assert _coloured_pixels(pg.page.locator("#plot-frontier").screenshot()) < _coloured_pixels(shot) / 4
        assert "action-map" not in pg.drawn()  # reduced output: no points/
        pg.assert_clean()
    finally:
        pg.close()


def test_continuous_report_draws_its_figures(browser, reports, tmp_path_factory):
    pg = Page(browser, reports["continuous"])
    try:
        drawn = set(pg.drawn())
        assert {"throughput", "ttft-tpot", "frontier", "latency", "utilisation", "kv-budget", "action-map"} <= drawn
        # one mark per stable point of the run (tests/_report_runs.py, CONTINUOUS: 32 points)
        run = run_folder(tmp_path_factory.getbasetemp() / "report-runs", "continuous")  # made by `reports`
        pts = pq.read_table(run / "points", columns=["stable"])
        stable = sum(pts.column("stable").to_pylist())
        assert 0 < stable < 32 and pg.marks("throughput")["points"] == stable
        assert pg.marks("ttft-tpot")["lines"] >= 8
        pg.assert_clean()
    finally:
        pg.close()
