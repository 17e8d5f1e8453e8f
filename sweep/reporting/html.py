"""The HTML document: one file, every script and style inline, no network.

Layout: a header with the run's provenance, the filter bar (model and GPU checkboxes, the
scenario picker), then one section per figure or table. The figures' dictionaries and the
per-scenario tables travel in one `<script type="application/json">` block; a small
controller (below, `CONTROLLER_JS`) draws them with the inlined plotly.js, shows and hides
traces for the filters, swaps the per-scenario figures, and resizes every figure to the
page width before printing. Nothing is fetched: no fonts, no CDN, no images.
"""

from __future__ import annotations

import base64
import html
import json
import math
from typing import Any

import numpy as np

#: Arrays longer than this are written as Plotly typed arrays (base64 float32).
TYPED_ARRAY_MIN = 256


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _plain(x: Any) -> Any:
    """JSON-safe value: numpy scalars to Python, non-finite floats to null (a gap)."""
    if isinstance(x, (np.floating, float)):
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def _array(a: np.ndarray) -> Any:
    if a.dtype.kind in "fiu" and a.size >= TYPED_ARRAY_MIN:
        f = np.asarray(a, dtype=np.float32)  # +inf and NaN alike: NaN, a gap
        f = np.where(np.isfinite(f), f, np.float32("nan")).astype("<f4")
        spec: dict[str, Any] = {"dtype": "f4", "bdata": base64.b64encode(f.tobytes()).decode("ascii")}
        if f.ndim == 2:
            spec["shape"] = f"{f.shape[0]},{f.shape[1]}"
        return spec
    return [_encode(v) for v in a.tolist()] if a.ndim > 1 else [_plain(v) for v in a.tolist()]


def _encode(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _encode(v) for k, v in obj.items() if v is not None or k in ("x", "y")}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _array(obj)
    return _plain(obj)


def dumps(obj: Any) -> str:
    """JSON for a `<script>` block: typed arrays for long numeric arrays, no NaN or
    Infinity tokens, and no `</` that could close the script element."""
    text = json.dumps(_encode(obj), separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


CSS = r"""
:root { --ink: #1f2328; --muted: #5f6b76; --line: #d8dee4; --bg: #f6f8fa; --accent: #0b5cad; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); background: #fff; }
header.top { padding: 18px 28px 12px; border-bottom: 1px solid var(--line); background: var(--bg); }
header.top h1 { margin: 0 0 2px; font-size: 22px; font-weight: 650; }
header.top .desc { color: var(--muted); margin: 0 0 10px; }
dl.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 4px 18px; margin: 0; }
dl.facts div { display: flex; gap: 6px; min-width: 0; }
dl.facts dt { color: var(--muted); white-space: nowrap; }
dl.facts dd { margin: 0; font-weight: 550; overflow-wrap: anywhere; }
nav.controls { position: sticky; top: 0; z-index: 10; background: #fff; border-bottom: 1px solid var(--line);
               padding: 8px 28px; display: flex; flex-wrap: wrap; gap: 10px 24px; align-items: flex-start; }
nav.controls fieldset { border: 0; margin: 0; padding: 0; min-width: 0; }
nav.controls legend { font-weight: 600; padding: 0; margin-bottom: 2px; font-size: 12px; color: var(--muted);
                      text-transform: uppercase; letter-spacing: .04em; }
nav.controls label { margin-right: 10px; white-space: nowrap; cursor: pointer; }
nav.controls button { font: inherit; font-size: 12px; padding: 1px 8px; margin-right: 4px; border: 1px solid var(--line);
                      background: var(--bg); border-radius: 4px; cursor: pointer; }
nav.controls select { font: inherit; max-width: 60ch; padding: 2px 4px; }
.filter-state { display: none; color: var(--muted); }
main { padding: 8px 28px 40px; max-width: 1280px; }
section.block { margin: 22px 0 30px; }
section.block h2 { font-size: 17px; margin: 0 0 4px; font-weight: 650; }
section.block p.caption { margin: 0 0 8px; color: var(--muted); max-width: 100ch; }
.note { margin: 4px 0; color: var(--muted); font-size: 13px; }
.note::before { content: "\2139\FE0E  "; }
.skipped { border: 1px dashed var(--line); background: var(--bg); padding: 10px 14px; border-radius: 6px;
           color: var(--muted); }
.skipped strong { color: var(--ink); }
.plot { width: 100%; min-height: 120px; border: 1px solid var(--line); border-radius: 6px; }
.scenario-head { font-weight: 600; margin: 6px 0; }
table.data { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; margin: 6px 0; }
table.data th, table.data td { padding: 3px 8px; border-bottom: 1px solid var(--line); text-align: right;
                               white-space: nowrap; }
table.data th { background: var(--bg); font-weight: 600; position: sticky; top: 0; }
table.data td.l, table.data th.l { text-align: left; }
table.data tr.marked td { font-weight: 650; }
.scroll { overflow-x: auto; max-width: 100%; }
.chip { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 12px; color: #fff; }
.answers { display: grid; grid-template-columns: repeat(auto-fill, minmax(240px, 1fr)); gap: 6px 16px; margin: 8px 0; }
.answers div { border-left: 3px solid var(--accent); padding: 2px 8px; background: var(--bg); }
.the-answer { border: 2px solid var(--accent); padding: 6px 10px; margin: 8px 0; background: var(--bg); }
.the-answer b { display: block; font-size: 13px; font-weight: 700; }
.answers b { display: block; font-size: 12px; color: var(--muted); font-weight: 600; }
footer { padding: 14px 28px; color: var(--muted); border-top: 1px solid var(--line); font-size: 12px; }
@media print {
  @page { size: A4 portrait; margin: 12mm; }
  body { font-size: 10pt; }
  nav.controls { position: static; border: 0; padding: 0 0 6px; }
  nav.controls fieldset, nav.controls button { display: none; }
  .filter-state { display: block; }
  header.top { background: none; padding: 0 0 8px; }
  main { padding: 0; max-width: none; }
  section.block { break-inside: avoid; page-break-inside: avoid; margin: 0 0 14px; }
  section.block.long { break-inside: auto; page-break-inside: auto; }
  section.block h2 { break-after: avoid; page-break-after: avoid; }
  .plot { border: 0; break-inside: avoid; page-break-inside: avoid; }
  .scroll { overflow: visible; }
  table.data { font-size: 7.5pt; width: 100%; }
  table.data th, table.data td { padding: 1px 3px; white-space: normal; }
  table.data th { position: static; }
  thead { display: table-header-group; }
  tr { break-inside: avoid; page-break-inside: avoid; }
  .modebar-container { display: none !important; }
  footer { border: 0; padding: 8px 0 0; }
}
"""  # noqa: E501 (inline CSS: a rule on one line)


CONTROLLER_JS = r"""
(function () {
  "use strict";
  var t00 = performance.now();
  performance.mark("controller start");
  var R = JSON.parse(document.getElementById("report-data").textContent);
  performance.measure("parse data", {start: t00, end: performance.now()});
  var CONFIG = {displaylogo: false, responsive: true, scrollZoom: false,
                modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
                toImageButtonOptions: {format: "png", scale: 2}};
  var sel = {model: new Set(R.models), gpu: new Set(R.gpus)};
  var scenarioSelect = document.getElementById("scenario");
  var current = R.scenarios.find(function (s) { return s.default; }) || R.scenarios[0] || null;

  function passes(meta) {
    return !meta || meta.model === undefined || (sel.model.has(meta.model) && sel.gpu.has(meta.gpu));
  }
  function clone(o) { return JSON.parse(JSON.stringify(o)); }
  function figureFor(f) {
    if (f.per === "scenario") return current ? f.figs[current.id] : null;
    if (f.per === "config") return current ? f.figs[current.config] : null;
    return f.fig;
  }
  function draw(f) {
    var el = document.getElementById("plot-" + f.id);
    var spec = figureFor(f);
    var empty = document.getElementById("empty-" + f.id);
    if (!spec) {
      if (el.data) Plotly.purge(el);
      el.style.display = "none";
      if (empty) empty.style.display = "block";
      return;
    }
    el.style.display = "block";
    if (empty) empty.style.display = "none";
    var data = spec.data.map(function (t) {
      var c = Object.assign({}, t);
      if (c.meta && !passes(c.meta)) c.visible = false;
      return c;
    });
    var t0 = performance.now();
    Plotly.react(el, data, clone(spec.layout), CONFIG);
    performance.measure("draw " + f.id, {start: t0, end: performance.now()});
  }
  function applyFilters() {
    R.figures.forEach(function (f) {
      if (f.per) return;
      var el = document.getElementById("plot-" + f.id);
      if (!el || !el.data) return;
      var idx = [], vis = [];
      el.data.forEach(function (t, i) {
        var want = passes(t.meta);
        if (want !== (t.visible !== false)) { idx.push(i); vis.push(want); }
      });
      if (idx.length) Plotly.restyle(el, {visible: vis}, idx);
    });
    document.querySelectorAll("tr[data-model]").forEach(function (tr) {
      var ok = sel.model.has(tr.dataset.model) && (tr.dataset.gpu === undefined || sel.gpu.has(tr.dataset.gpu));
      tr.style.display = ok ? "" : "none";
    });
    fillScenarios();
    var txt = "Showing models: " + Array.from(sel.model).join(", ") + "; GPUs: " + Array.from(sel.gpu).join(", ");
    document.getElementById("filter-state").textContent = txt +
      (current ? ". Scenario: " + current.label : "");
  }
  function fillScenarios() {
    if (!scenarioSelect) return;
    var visible = R.scenarios.filter(function (s) { return passes(s); });
    scenarioSelect.innerHTML = "";
    visible.forEach(function (s) {
      var o = document.createElement("option");
      o.value = s.id; o.textContent = s.label; scenarioSelect.appendChild(o);
    });
    if (!visible.length) { setScenario(null); return; }
    if (!current || !passes(current)) setScenario(visible.find(function (s) { return s.ok; }) || visible[0]);
    else scenarioSelect.value = current.id;
    return true;
  }
  function setScenario(s) {
    current = s;
    if (scenarioSelect && s) scenarioSelect.value = s.id;
    document.querySelectorAll("[data-scenario-html]").forEach(function (el) {
      var key = el.dataset.scenarioHtml;
      el.innerHTML = s ? (R.html[key][s.id] || "") : "<p class='note'>No scenario matches the filters.</p>";
    });
    R.figures.forEach(function (f) { if (f.per) draw(f); });
  }
  function bindBoxes(kind) {
    document.querySelectorAll("input[data-filter='" + kind + "']").forEach(function (box) {
      box.addEventListener("change", function () {
        if (box.checked) sel[kind].add(box.value); else sel[kind].delete(box.value);
        applyFilters();
      });
    });
    document.querySelectorAll("button[data-all='" + kind + "']").forEach(function (b) {
      b.addEventListener("click", function () {
        var on = b.dataset.value === "1";
        document.querySelectorAll("input[data-filter='" + kind + "']").forEach(function (box) {
          box.checked = on; if (on) sel[kind].add(box.value); else sel[kind].delete(box.value);
        });
        applyFilters();
      });
    });
  }
  function resizeAll(width) {
    R.figures.forEach(function (f) {
      var el = document.getElementById("plot-" + f.id);
      if (el && el.data) Plotly.relayout(el, {width: width || null, autosize: !width});
    });
  }
  if (scenarioSelect) scenarioSelect.addEventListener("change", function () {
    var s = R.scenarios.find(function (x) { return x.id === scenarioSelect.value; });
    if (s) setScenario(s);
  });
  bindBoxes("model"); bindBoxes("gpu");
  var t0 = performance.now();
  R.figures.forEach(function (f) { if (!f.per) draw(f); });
  performance.measure("static figures", {start: t0, end: performance.now()});
  t0 = performance.now();
  applyFilters();
  performance.measure("filters", {start: t0, end: performance.now()});
  t0 = performance.now();
  setScenario(current);
  performance.measure("scenario", {start: t0, end: performance.now()});
  window.addEventListener("beforeprint", function () { resizeAll(680); });
  window.addEventListener("afterprint", function () { resizeAll(null); });
  window.sweepReport = {figures: R.figures.map(function (f) { return f.id; }), setScenario: function (id) {
    var s = R.scenarios.find(function (x) { return x.id === id; }); if (s) setScenario(s); }};
  document.body.setAttribute("data-ready", "1");
})();
"""


def facts(items: list[tuple[str, str]]) -> str:
    return "<dl class='facts'>" + "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in items) + "</dl>"


def checkboxes(kind: str, label: str, names: list[str]) -> str:
    if len(names) <= 1:
        boxes = "".join(f"<label><input type='checkbox' data-filter='{kind}' value='{esc(n)}' checked disabled> "
                        f"{esc(n)}</label>" for n in names)
        return f"<fieldset><legend>{esc(label)}</legend>{boxes}</fieldset>"
    boxes = "".join(f"<label><input type='checkbox' data-filter='{kind}' value='{esc(n)}' checked> {esc(n)}</label>"
                    for n in names)
    buttons = (f"<button type='button' data-all='{kind}' data-value='1'>all</button>"
               f"<button type='button' data-all='{kind}' data-value='0'>none</button>")
    return f"<fieldset><legend>{esc(label)}</legend>{buttons}{boxes}</fieldset>"


def document(*, title: str, header: str, controls: str, body: str, footer: str, data: dict[str, Any],
             plotly_js: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; script-src 'unsafe-inline' "
        "'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:; font-src data:; worker-src blob:\">\n"
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"{header}\n{controls}\n<main>\n{body}\n</main>\n<footer>{footer}</footer>\n"
        f"<script type='application/json' id='report-data'>{dumps(data)}</script>\n"
        f"<script>{plotly_js}</script>\n<script>{CONTROLLER_JS}</script>\n</body>\n</html>\n"
    )
