"""Plotly figure dictionaries for the report, built from the bounded query results.

Each figure is a plain `{"data": [...], "layout": {...}}` dictionary: the browser draws it
with the inlined plotly.js, and `--png` hands the same dictionary to kaleido. Traces that
belong to one model and GPU carry `meta = {"model": ..., "gpu": ...}`; the page's filters
show and hide them. Arrays may stay numpy arrays here; `html.dumps` encodes large ones as
Plotly typed arrays (`{"dtype", "bdata"}`) and turns +inf and NULL (NaN) into gaps.

The figures are the few generic kinds of `sweep.models.views` (lines against the cap,
utilisation against the cap, the KV budget, frontiers, analytic against simulated, a
scatter, lines against load) plus the action map, the replica plan and the schedule; each
reads the serving model's declarations for its columns, names and axes.

Unbounded values (+inf today, NULL tomorrow) are never drawn as numbers: a latency with no
finite value is a marker on the top edge labelled as such, and a region of caps that is
unstable or out of memory is shaded from the row's own columns in optimum.parquet (the
model's `Regions`), so the shading is right even when the run kept no points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sweep.decide.layouts import FIGURE_LINES, SHARED_KEYS
from sweep.decide.verdict import ACTIONS
from sweep.models import ServingModel
from sweep.models.views import (
    AgainstLoad,
    AgainstSimulator,
    CapLines,
    Frontier,
    KvBudget,
    Regions,
    Scatter,
    Utilisation,
)
from sweep.models.views import fixed as fmt
from sweep.reporting.data import Columns, answer_column, by_pair, row_keys, unbounded

ACTION_COLOURS = {
    "out_of_memory": "#7b3294",
    "unstable": "#c62828",
    "slo_violated": "#ef6c00",
    "near_saturation": "#f2c12e",
    "overprovisioned": "#64b5f6",
    "ok": "#2e7d32",
}
ACTION_LABELS = {
    "out_of_memory": "out of memory",
    "unstable": "unstable",
    "slo_violated": "SLO violated",
    "near_saturation": "near saturation",
    "overprovisioned": "overprovisioned",
    "ok": "ok",
}
#: Qualitative palette (Tableau 10), one colour per GPU.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")
UNSTABLE_FILL = "rgba(198, 40, 40, 0.10)"
OOM_FILL = "rgba(123, 50, 148, 0.12)"
#: Colours of the utilisation figure's thresholds, by role.
THRESHOLD_COLOURS = {"upper": "#f2a900", "target": "#2e7d32", "lower": "#64b5f6"}
#: Markers of the analytic-against-simulated figure, by series style.
SIM_STYLES = (("circle", "#4e79a7"), ("x", "#f28e2b"), ("square", "#59a14f"), ("diamond", "#e15759"),
              ("triangle-down", "#b07aa1"))
#: Lines of a series, by its position (the utilisation figure's series).
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
#: Above this many points a scatter uses WebGL (scattergl); below, SVG (prints sharply).
GL_THRESHOLD = 5000
#: Hover labels of the generic columns (a row axis is named by its `Axis.hover`).
HOVER_NAMES = {"arrival_rps": "arrival req/s", "replicas": "replicas", "gpus_per_replica": "GPUs/replica"}

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"



@dataclass
class Figure:
    """One figure of the report: a figure dictionary, or one per scenario / configuration,
    or a note saying why it is not drawn."""

    id: str
    title: str
    caption: str = ""
    fig: dict[str, Any] | None = None
    per: str = ""  # "" (one figure), "scenario" or "config": which picker key selects it
    figs: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: str = ""  # not drawn: why
    notes: list[str] = field(default_factory=list)  # drawn: what the reader should know

    @property
    def drawn(self) -> bool:
        return self.fig is not None or bool(self.figs)

    def default(self) -> dict[str, Any] | None:
        return self.fig if self.fig is not None else next(iter(self.figs.values()), None)


def base_layout(height: int = 420, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": height,
        "autosize": True,
        "font": {"family": FONT, "size": 12, "color": "#222"},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "margin": {"l": 70, "r": 20, "t": 40, "b": 60},
        "hovermode": "closest",
        "hoverlabel": {"font": {"family": FONT, "size": 12}},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "font": {"size": 11}},
    }
    layout.update(extra)
    return layout


def axis(title: str, log: bool = False, **extra: Any) -> dict[str, Any]:
    a: dict[str, Any] = {"title": {"text": title}, "type": "log" if log else "linear", "showline": True,
                         "linecolor": "#888", "gridcolor": "#e6e6e6", "zeroline": False, "ticks": "outside",
                         "tickcolor": "#888"}
    if log and "dtick" not in extra and "tickvals" not in extra:
        a["dtick"] = "D2"  # 1, 2, 5 per decade: fewer labels than Plotly's every digit
    a.update(extra)
    return a


def batch_axis(bmin: float, bmax: float, title: str) -> dict[str, Any]:
    """The cap (a batch size, a cap on running sequences) on a log axis with powers of two
    as ticks (linear when the range is short)."""
    if bmax / max(bmin, 1.0) <= 8:
        return axis(title)
    ticks = [2 ** k for k in range(18) if bmin / 2 <= 2 ** k <= bmax * 2]
    return axis(title, log=True, tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])


def capped_range(values: np.ndarray, cap: float, log: bool) -> list[float] | None:
    """An axis range that ends at `cap` when some values lie far beyond it (near
    saturation a latency can reach 1e20 ms; the modebar's autoscale still shows all)."""
    v = values[finite(values) & (values > 0)]
    if not len(v) or not math.isfinite(cap) or v.max() <= cap:
        return None
    lo = float(v.min())
    if log:
        return [math.log10(lo / 1.3), math.log10(cap)]
    return [0.0, cap]


def finite(x: np.ndarray) -> np.ndarray:
    return np.isfinite(np.asarray(x, dtype=np.float64))


def colour_map(names: list[str]) -> dict[str, str]:
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(sorted(set(names)))}


def _log_ratio(values: np.ndarray) -> float:
    v = values[finite(values) & (values > 0)]
    return float(v.max() / v.min()) if len(v) else 1.0


def _between(b: float) -> float:
    """The point between integer batch b-1 and b on a log axis."""
    return math.sqrt(max(b - 1, 0.5) * b)


def _band(x0: float, x1: float, name: str, colour: str, hover: str) -> dict[str, Any]:
    """A shaded band of batch sizes, in data coordinates on the hidden 0..1 axis y9 (so
    it stays right on log axes and shows in the legend)."""
    return {"type": "scatter", "x": [x0, x1, x1, x0, x0], "y": [0, 0, 1, 1, 0], "yaxis": "y9",
            "fill": "toself", "fillcolor": colour, "line": {"width": 0}, "mode": "lines", "name": name,
            "hoverinfo": "text", "text": hover, "hoveron": "fills"}




def _y9() -> dict[str, Any]:
    return {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True}


def _qlabel(q: Any) -> str:
    return f"P{100 * q:g}" if q is not None and not unbounded(q) else "P(q)"


def _knobs(model: ServingModel, cols: Columns) -> list[str]:
    """The row axes outside the cap that the columns have (one line or panel per value)."""
    return [k for k in model.decisions.knobs if k in cols]


def _combos(cols: Columns, knobs: list[str]) -> list[tuple[float, ...]]:
    """The knobs' value combinations, sorted (NULL, NaN here, is the grid's inf)."""
    if not knobs:
        return [()]
    values = zip(*(cols[k].tolist() for k in knobs))
    return sorted({tuple(float(v) if math.isfinite(v) else math.inf for v in combo) for combo in values})


def _combo_mask(cols: Columns, knobs: list[str], combo: tuple[float, ...], n: int) -> np.ndarray:
    m = np.ones(n, bool)
    for k, w in zip(knobs, combo):
        v = cols[k]
        m &= ~finite(v) if math.isinf(w) else v == w
    return m


def _combo_label(model: ServingModel, knobs: list[str], combo: tuple[float, ...]) -> str:
    """A combination of knob values in a legend: `window 5 ms`, `no token budget (inf)`."""
    return ", ".join(model.views.axis(k).legend(w) for k, w in zip(knobs, combo))


def _regions(row: dict[str, Any], bmin: float, bmax: float, regions: Regions, symbol: str) -> list[dict[str, Any]]:
    """Unstable (cap below `stable_from`) and out-of-memory (cap above `memory_to`, or the
    weights do not fit) bands, from the row's own columns."""
    out = []
    lo, hi = bmin / 1.25, bmax * 1.25
    if regions.stable_from and regions.stable_from in row:
        stable_from = row.get(regions.stable_from)
        if unbounded(stable_from):
            out.append(_band(lo, hi, regions.none_stable, UNSTABLE_FILL, regions.none_stable_hover))
        elif stable_from is not None and stable_from > bmin:
            out.append(_band(lo, _between(stable_from), f"unstable ({symbol} < {stable_from:g})", UNSTABLE_FILL,
                             f"unstable: {symbol} < {regions.stable_from} = {stable_from:g}"))
    mem = row.get(regions.memory_to) if regions.memory_to else None
    if row.get("weights_fit") is False or (mem is not None and not unbounded(mem) and mem <= 0):
        out.append(_band(lo, hi, "out of memory (weights do not fit)", OOM_FILL, "the weights do not fit in HBM"))
    elif mem is not None and not unbounded(mem) and mem < bmax:
        out.append(_band(_between(mem + 1), hi, f"out of memory ({symbol} > {mem:g})", OOM_FILL,
                         f"out of memory: {symbol} > {regions.memory_to} = {mem:g}"))
    return out


def _answer(model: ServingModel, row: dict[str, Any], prefix: str, column: str) -> tuple[float, float] | None:
    """(cap, value of `column`) of an answer of optimum.parquet, or None when there is none
    (cap 0 or NULL, or an unbounded value)."""
    b = row.get(answer_column(model, prefix, model.decisions.cap) or prefix)
    name = answer_column(model, prefix, column)
    v = row.get(name) if name else None
    if b is None or unbounded(b) or b <= 0 or v is None or unbounded(v):
        return None
    return float(b), float(v)


def _top_markers(x: np.ndarray, name: str, hover: str, symbol: str) -> dict[str, Any]:
    return {"type": "scatter", "x": x, "y": np.full(len(x), 0.97), "yaxis": "y9", "mode": "markers",
            "name": name, "marker": {"symbol": "triangle-up", "size": 9, "color": "#c62828"},
            "hovertemplate": f"{symbol} %{{x}}: {hover}<extra></extra>"}


def _cap_range(pts: Columns, cap: str, brange: tuple[float, float]) -> tuple[float, float]:
    b = pts[cap]
    return (min(float(np.nanmin(b)), brange[0]), max(float(np.nanmax(b)), brange[1])) if len(b) else brange


# --------------------------------------------------------------------------- per scenario


def cap_lines_figure(spec: CapLines, model: ServingModel, row: dict[str, Any], pts: Columns,
                     brange: tuple[float, float] = (1.0, 1.0), empty: str = "") -> dict[str, Any]:
    """Kind `CapLines` for one scenario row: each panel's column against the cap, one line
    per knob value, its SLO, the knee and the SLO optimum, the shaded regions and the caps
    marked along the top (over `brange` when the row has no points; `empty` then says why)."""
    cap = model.decisions.cap
    sym = model.views.axis(cap).symbol
    b = pts[cap]
    knobs = _knobs(model, pts)
    combos = _combos(pts, knobs) if len(b) else []
    qlabel = _qlabel(row.get("percentile", 0.99))
    bmin, bmax = _cap_range(pts, cap, brange)
    traces: list[dict[str, Any]] = _regions(row, bmin, bmax, spec.regions, sym) if spec.regions else []
    multi = len(spec.panels) > 1
    layout_y: dict[str, Any] = {}
    n_panels = len(spec.panels)
    gap = 0.12
    height = (1 - gap * (n_panels - 1)) / max(n_panels, 1)
    for n, panel in enumerate(spec.panels):
        yaxis = "y" if n == 0 else f"y{n + 1}"
        name = panel.name.format(q=qlabel)
        y = pts.get(panel.column, np.full(len(b), np.nan))
        on = {"yaxis": yaxis} if multi else {}
        for i, combo in enumerate(combos):
            m = _combo_mask(pts, knobs, combo, len(b))
            order = np.argsort(b[m])
            legend = _combo_label(model, knobs, combo)
            label = (f"{name}{panel.alone}" if len(combos) == 1 and panel.alone else
                     f"{name}, {legend}" if legend else name)
            trace: dict[str, Any] = {
                "type": "scatter", "mode": "lines+markers", "x": b[m][order], "y": y[m][order], **on, "name": label,
                "line": {"color": PALETTE[i % len(PALETTE)], "dash": "solid" if n == 0 else "dot", "width": 2},
                "marker": {"size": 6}, "connectgaps": False,
                "hovertemplate": f"{sym} %{{x}}<br>{name} %{{y:,.1f}} ms"
                                 + "".join(f"<br>{h[0]} %{{customdata[{j}]:{h[2]}}}{h[3]}"
                                           for j, h in enumerate(panel.hover))
                                 + f"<extra>{legend}</extra>",
            }
            if multi:
                trace["legendgroup"] = f"w{i}"
            if panel.hover:
                trace["customdata"] = np.stack([pts.get(h[1], y)[m][order] for h in panel.hover], axis=1)
            traces.append(trace)
            if len(combos) == 1 and panel.mean is not None and panel.mean[0] in pts:
                traces.append({"type": "scatter", "mode": "lines", "x": b[m][order], "y": pts[panel.mean[0]][m][order],
                               **on, "name": panel.mean[1], "line": {"color": "#777", "dash": "dot", "width": 1.5},
                               "hovertemplate": f"{sym} %{{x}}<br>{panel.mean[1]} %{{y:,.1f}} ms<extra></extra>"})
        if not multi:  # one panel: its caps of unbounded latency before its SLO
            traces += _marks(spec, pts, cap, sym)
        slo = row.get(panel.slo) if panel.slo else None
        has_slo = slo is not None and not unbounded(slo)
        if has_slo:
            slo_name = panel.slo_name.format(q=qlabel, slo=slo)
            traces.append({"type": "scatter", "mode": "lines", "x": [bmin / 1.25, bmax * 1.25], "y": [slo, slo], **on,
                           "name": slo_name, "line": {"color": "#222", "dash": "dash", "width": 1.5},
                           "hovertemplate": f"{slo_name}<extra></extra>"})
        for prefix, label, symbol, colour in (("knee", "knee", "star", "#111"),
                                              ("slo_opt", "SLO optimum", "diamond", "#2e7d32")):
            ans = _answer(model, row, prefix, panel.column)
            if ans is None:
                continue
            mark: dict[str, Any] = {
                "type": "scatter", "mode": "markers", "x": [ans[0]], "y": [ans[1]], **on,
                "name": f"{label} ({sym} = {ans[0]:g})",
                "marker": {"symbol": symbol, "size": 14 if multi else 15, "color": colour,
                           "line": {"color": "#fff", "width": 1}},
                "hovertemplate": f"{label}: {sym} %{{x}}, {name} %{{y:,.3g}}<extra></extra>"}
            if multi:
                mark.update(legendgroup=prefix, showlegend=n == 0)
            traces.append(mark)
        values = y[finite(y)]
        ratio = _log_ratio(np.concatenate([values, [slo] if has_slo and panel.cap_at_slo else []]))
        ylog = ratio > 30
        ax = axis(panel.axis.format(q=qlabel), log=ylog)
        if has_slo and panel.cap_at_slo:
            rng = capped_range(y, panel.cap_at_slo * float(slo or 0.0), ylog)
            if rng is not None:
                ax["range"] = rng
        if multi:
            top = 1 - n * (height + gap)
            ax.update(domain=[round(max(top - height, 0.0), 6), round(top, 6)], anchor="x")
        layout_y["yaxis" if n == 0 else f"yaxis{n + 1}"] = ax
    if multi:
        traces += _marks(spec, pts, cap, sym)
    xaxis = batch_axis(bmin, bmax, model.views.axis(cap).title)
    if multi:
        xaxis["anchor"] = f"y{n_panels}"
    layout = base_layout(440 + 100 * (n_panels - 1), xaxis=xaxis, **layout_y, yaxis9=_y9())
    if empty:
        layout["annotations"] = [{"xref": "paper", "yref": "paper", "x": 0.5, "y": 0.55, "showarrow": False,
                                  "text": empty, "font": {"size": 13, "color": "#555"}, "bgcolor": "#fff"}]
    return {"data": traces, "layout": layout}


def _marks(spec: CapLines, pts: Columns, cap: str, sym: str) -> list[dict[str, Any]]:
    """The caps `spec.marks` mark along the top of a `CapLines` figure."""
    b = pts[cap]
    if not len(b):
        return []
    first = pts.get(spec.panels[0].column) if spec.panels else None
    out = []
    for mk in spec.marks:
        on_top = np.ones(len(b), bool)
        for c in mk.true:
            if c in pts:
                on_top &= pts[c].astype(bool)
        if mk.false:
            on_top &= ~pts[mk.false].astype(bool) if mk.false in pts else False
        if mk.unbounded:
            on_top &= ~finite(first) if first is not None else False
        if on_top.any():
            out.append(_top_markers(np.unique(b[on_top]), mk.name, mk.hover, sym))
    return out


def utilisation_figure(spec: Utilisation, model: ServingModel, row: dict[str, Any], pts: Columns,
                       brange: tuple[float, float] = (math.inf, -math.inf)) -> dict[str, Any]:
    """Kind `Utilisation`: each series per knob value against the cap, with the operating
    thresholds and the shaded regions."""
    cap = model.decisions.cap
    sym = model.views.axis(cap).symbol
    b = pts[cap]
    bmin, bmax = _cap_range(pts, cap, brange)
    traces: list[dict[str, Any]] = _regions(row, bmin, bmax, spec.regions, sym) if spec.regions else []
    knobs = _knobs(model, pts)
    combos = _combos(pts, knobs)
    rho_all = []
    for (name, col), dash in zip(spec.series, DASHES):
        if col not in pts:
            continue
        for i, combo in enumerate(combos):
            m = _combo_mask(pts, knobs, combo, len(b))
            order = np.argsort(b[m])
            y = pts[col][m][order]
            rho_all.append(y[finite(y)])
            legend = _combo_label(model, knobs, combo)
            label = f"{name}, {legend}" if len(combos) > 1 else name
            traces.append({"type": "scatter", "mode": "lines+markers", "x": b[m][order], "y": y, "name": label,
                           "line": {"color": PALETTE[i % len(PALETTE)], "dash": dash, "width": 2},
                           "marker": {"size": 5},
                           "hovertemplate": f"{sym} %{{x}}<br>{name} %{{y:.1%}}<extra>{legend}</extra>"})
    for t in spec.thresholds:
        v = row.get(t.column)
        if v is None or unbounded(v):
            continue
        traces.append({"type": "scatter", "mode": "lines", "x": [bmin / 1.25, bmax * 1.25], "y": [v, v],
                       "name": f"{t.label} {v:.0%}",
                       "line": {"color": THRESHOLD_COLOURS[t.role], "dash": "dash", "width": 1.2},
                       "hovertemplate": f"{t.column} {v:.0%}<extra></extra>"})
    top = max([1.05] + [float(np.max(r)) * 1.05 for r in rho_all if len(r)])
    layout = base_layout(400, xaxis=batch_axis(bmin, bmax, model.views.axis(cap).title),
                         yaxis=axis("utilisation", tickformat=".0%", range=[0, min(top, 2.0)]), yaxis9=_y9())
    return {"data": traces, "layout": layout}


def kv_figure(spec: KvBudget, model: ServingModel, row: dict[str, Any], pts: Columns | None) -> dict[str, Any] | None:
    """Kind `KvBudget` for one scenario row's replica: the weights, the KV cache (the
    reservation at the caps that matter, or the share reserved at the answers' points) and
    what stays free."""
    if spec.per_request:
        return _kv_reservation(spec, model, row, pts)
    return _kv_share(spec, model, row, pts)


def _kv_reservation(spec: KvBudget, model: ServingModel, row: dict[str, Any], pts: Columns | None
                    ) -> dict[str, Any] | None:
    weights, free, per_req = row.get("weights_gb"), row.get("free_gb"), row.get(spec.per_request)
    if weights is None or free is None or per_req is None or unbounded(weights) or unbounded(free):
        return None
    cap = model.decisions.cap
    sym = model.views.axis(cap).symbol
    usable = weights + free
    marks: list[tuple[str, float]] = [(f"{sym} = 1", 1.0)]
    for prefix, label in spec.marks:
        b = row.get(answer_column(model, prefix, cap) or prefix)
        if b is not None and not unbounded(b) and b > 0:
            marks.append((f"{label}, {sym} = {b:g}", float(b)))
    mem = row.get(spec.limit) if spec.limit else None
    if mem is not None and not unbounded(mem) and mem > 0:
        marks.append((f"memory limit, {sym} = {mem:g} ({spec.limit})", float(mem)))
    if pts is not None and cap in pts and len(pts[cap]):
        marks.append((f"{spec.largest}, {sym} = {np.nanmax(pts[cap]):g}", float(np.nanmax(pts[cap]))))
    seen: dict[float, str] = {}
    for label, b in marks:
        seen[b] = seen[b] + "; " + label.split(",")[0] if b in seen else label
    labels = [seen[b] for b in sorted(seen)]
    batches = np.array(sorted(seen))
    kv = batches * per_req
    left = usable - weights - kv
    traces = [
        {"type": "bar", "orientation": "h", "y": labels, "x": np.full(len(labels), weights), "name": "weights",
         "marker": {"color": "#5b6770"}, "hovertemplate": "weights %{x:,.1f} GB<extra></extra>"},
        {"type": "bar", "orientation": "h", "y": labels, "x": np.minimum(kv, max(free, 0)), "name": "KV cache",
         "marker": {"color": "#4e79a7"}, "customdata": kv,
         "hovertemplate": "KV %{customdata:,.1f} GB<extra></extra>"},
        {"type": "bar", "orientation": "h", "y": labels, "x": np.maximum(left, 0), "name": "free",
         "marker": {"color": "#cfe3cf"}, "hovertemplate": "free %{x:,.1f} GB<extra></extra>"},
    ]
    over = np.maximum(-left, 0) if free >= 0 else kv
    if np.any(over > 0):
        traces.append({"type": "bar", "orientation": "h", "y": labels, "x": over, "name": "over the limit",
                       "marker": {"color": OOM_FILL.replace("0.12", "0.6"), "pattern": {"shape": "/"}},
                       "hovertemplate": "%{x:,.1f} GB beyond usable HBM<extra></extra>"})
    layout = base_layout(
        120 + 46 * len(labels), barmode="stack",
        xaxis=axis("GB per replica (1 GB = 1e9 bytes)"), yaxis={"automargin": True, "autorange": "reversed"},
        margin={"l": 20, "r": 20, "t": 40, "b": 50},
        shapes=[{"type": "line", "xref": "x", "yref": "paper", "x0": usable, "x1": usable, "y0": 0, "y1": 1,
                 "line": {"color": "#222", "dash": "dash", "width": 1.5}}],
        annotations=[{"xref": "x", "yref": "paper", "x": usable, "y": 1, "yanchor": "bottom", "showarrow": False,
                      "text": f"usable HBM {usable:,.0f} GB", "font": {"size": 11}}])
    layout["legend"]["y"] = 1.10
    return {"data": traces, "layout": layout}


def _kv_share(spec: KvBudget, model: ServingModel, row: dict[str, Any], pts: Columns | None) -> dict[str, Any] | None:
    weights, free = row.get("weights_gb"), row.get("free_gb")
    if weights is None or free is None or unbounded(weights) or unbounded(free):
        return None
    sym = model.views.axis(model.decisions.cap).symbol
    labels, used = [], []
    if pts is not None and spec.share in pts and "point_id" in pts:
        for prefix, label in spec.marks:
            pid = row.get(answer_column(model, prefix, "point_id") or f"{prefix}_point_id")
            if pid is None or unbounded(pid):
                continue
            m = pts["point_id"] == pid
            if m.any():
                labels.append(f"{label}, {sym} = "
                              f"{row.get(answer_column(model, prefix, model.decisions.cap) or prefix):g}")
                used.append(float(pts[spec.share][m][0]) * max(free, 0.0))
    if not labels:
        labels, used = ["this replica"], [0.0]
    used_arr = np.array(used)
    traces = [
        {"type": "bar", "orientation": "h", "y": labels, "x": np.full(len(labels), weights), "name": "weights",
         "marker": {"color": "#5b6770"}, "hovertemplate": "weights %{x:,.1f} GB<extra></extra>"},
        {"type": "bar", "orientation": "h", "y": labels, "x": used_arr, "name": "KV reserved (time average)",
         "marker": {"color": "#4e79a7"}, "hovertemplate": "KV %{x:,.1f} GB<extra></extra>"},
        {"type": "bar", "orientation": "h", "y": labels, "x": np.maximum(max(free, 0.0) - used_arr, 0.0),
         "name": "free KV capacity", "marker": {"color": "#cfe3cf"},
         "hovertemplate": "free %{x:,.1f} GB<extra></extra>"},
    ]
    if free < 0:
        traces.append({"type": "bar", "orientation": "h", "y": labels, "x": np.full(len(labels), -free),
                       "name": "weights beyond usable HBM", "marker": {"color": OOM_FILL.replace("0.12", "0.6")},
                       "hovertemplate": "%{x:,.1f} GB beyond usable HBM<extra></extra>"})
    annotations = []
    if spec.capacity:
        annotations.append({"xref": "paper", "yref": "paper", "x": 1, "y": 1, "yanchor": "bottom", "showarrow": False,
                            "font": {"size": 11}, "text": f"KV capacity C = {fmt(row.get(spec.capacity), 0)} tokens"})
    layout = base_layout(120 + 46 * len(labels), barmode="stack", xaxis=axis("GB per replica (1 GB = 1e9 bytes)"),
                         yaxis={"automargin": True, "autorange": "reversed"},
                         margin={"l": 20, "r": 20, "t": 40, "b": 50}, annotations=annotations)
    layout["legend"]["y"] = 1.10
    return {"data": traces, "layout": layout}


def load_axis(cells: Columns, model: ServingModel) -> tuple[str, str, str]:
    """The column that sets a run's load, its name and unit (the model's `Views.loads`): the
    first with finite values in `cells`, else the first."""
    loads = model.views.loads
    return next((ld for ld in loads if ld[0] in cells and finite(np.asarray(cells[ld[0]], dtype=float)).any()),
                loads[0])


def action_figure(cells: Columns, model: ServingModel) -> dict[str, Any]:
    """Action map of one configuration: arrival rate x cap, coloured by action, one panel
    per knob value; the hover names the first SLO latency and the utilisation."""
    cap = model.decisions.cap
    cap_axis = model.views.axis(cap)
    knobs = _knobs(model, cells)
    combos = _combos(cells, knobs)
    lat_col = model.slo_checks[0][0] if model.slo_checks else ""
    lat_name = model.views.check_name(lat_col)
    util = model.decisions.utilisation
    n = len(combos)
    batches = np.unique(cells[cap][finite(cells[cap])])
    load, load_name, load_unit = load_axis(cells, model)
    rates = np.unique(cells[load][finite(cells[load])])
    code = {a: i for i, a in enumerate(ACTIONS)}
    scale = []
    for i, a in enumerate(ACTIONS):
        scale += [[i / len(ACTIONS), ACTION_COLOURS[a]], [(i + 1) / len(ACTIONS), ACTION_COLOURS[a]]]
    traces: list[dict[str, Any]] = []
    layout = base_layout(140 + 26 * max(len(rates), 4))
    gap = 0.04
    width = (1 - gap * (n - 1)) / n
    bi = {float(v): j for j, v in enumerate(batches)}
    ri = {float(v): j for j, v in enumerate(rates)}
    for k, combo in enumerate(combos):
        m = _combo_mask(cells, knobs, combo, len(cells[cap]))
        legend = _combo_label(model, knobs, combo)
        z = np.full((len(rates), len(batches)), np.nan)
        text = np.full((len(rates), len(batches)), "", dtype=object)
        for bb, rr, act, lat, rho in zip(cells[cap][m], cells[load][m], cells["action"][m],
                                         cells.get(lat_col, cells[cap])[m], cells.get(util, cells[cap])[m]):
            i, j = ri[float(rr)], bi[float(bb)]
            z[i, j] = code.get(act, np.nan) + 0.5
            text[i, j] = f"{ACTION_LABELS.get(act, act)}<br>{lat_name} {fmt(lat)} ms<br>{util} {fmt(100 * rho)}%"
        suffix = "" if k == 0 else str(k + 1)
        traces.append({
            "type": "heatmap", "x": [f"{v:g}" for v in batches], "y": [f"{v:g}" for v in rates], "z": z.tolist(),
            "text": text.tolist(), "zmin": 0, "zmax": len(ACTIONS), "colorscale": scale, "showscale": False,
            "xgap": 1, "ygap": 1, "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
            "hovertemplate": (f"{load_name} %{{y}}{load_unit}, {cap_axis.symbol} %{{x}}<br>%{{text}}"
                              f"<extra>{legend}</extra>"),
        })
        layout[f"xaxis{suffix}"] = axis(cap_axis.short, type="category",
                                        domain=[k * (width + gap), k * (width + gap) + width],
                                        anchor=f"y{suffix}", showgrid=False)
        layout[f"yaxis{suffix}"] = axis((f"{load_name} ({load_unit.strip()}, fleet)" if load_unit else
                                         f"{load_name} (fleet)") if k == 0 else "", type="category",
                                        anchor=f"x{suffix}", showgrid=False, showticklabels=k == 0)
        layout.setdefault("annotations", []).append(
            {"text": legend, "xref": "paper", "yref": "paper", "x": k * (width + gap) + width / 2,
             "y": 1.0, "yanchor": "bottom", "showarrow": False, "font": {"size": 12}})
    present = {a for a in cells["action"]}
    for a in ACTIONS:
        if a in present:
            traces.append({"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": ACTION_LABELS[a],
                           "marker": {"symbol": "square", "size": 12, "color": ACTION_COLOURS[a]},
                           "hoverinfo": "skip", "xaxis": "x", "yaxis": "y"})
    layout["legend"]["y"] = 1.0 + 60 / layout["height"]
    layout["margin"]["t"] = 90
    return {"data": traces, "layout": layout}


# --------------------------------------------------------------------------- across scenarios


def _hover_columns(model: ServingModel, cols: Columns, extra: tuple[str, ...]) -> list[tuple[str, str]]:
    """(column, hover label) of the cap, the knobs and `extra`, those `cols` has."""
    d = model.decisions
    names = [(k, model.views.axis(k).hover) for k in (d.cap, *d.knobs)]
    names += [(c, HOVER_NAMES.get(c, c)) for c in extra]
    return [(c, label) for c, label in names if c in cols]


def _gaps(x: np.ndarray, y: np.ndarray, key: np.ndarray, *extra: np.ndarray) -> list[np.ndarray]:
    """Series separated by NaN wherever `key` changes (many lines as one trace)."""
    if len(x) == 0:
        return [x, y, *extra]
    cut = np.flatnonzero(key[1:] != key[:-1]) + 1
    out = []
    for arr in (x, y, *extra):
        arr = np.asarray(arr, dtype=np.float64)
        out.append(np.insert(arr, cut, np.nan))
    return out



def frontier_figure(front: Columns, spec: Frontier, model: ServingModel, gpu_colour: dict[str, str]) -> dict[str, Any]:
    """Kind `Frontier`: the Pareto frontiers of the scenario rows (`spec.x` against
    `spec.y`), one colour per GPU, knee and SLO optimum marked. WebGL above GL_THRESHOLD
    points."""
    x, y = spec.x, spec.y
    n = len(front["row_id"])
    kind = "scattergl" if n > GL_THRESHOLD else "scatter"
    traces: list[dict[str, Any]] = []
    pairs = by_pair(front)
    shown_gpu: set[str] = set()
    hover = _hover_columns(model, front, ("arrival_rps", "replicas", "gpus_per_replica"))
    xlabel, ylabel = spec.x_title or x, spec.y_title or y
    template = (f"{xlabel.split(' (')[0]} %{{x:,.4g}}<br>{ylabel.split(' (')[0]} %{{y:,.4g}}"
                + "".join(f"<br>{label} %{{customdata[{i}]:,.4g}}" for i, (_, label) in enumerate(hover)))
    for model_name, gpu, m in pairs:
        cols = _gaps(front[x][m], front[y][m], front["row_id"][m], *(front[c][m] for c, _ in hover))
        colour = gpu_colour.get(gpu, "#444")
        traces.append({
            "type": kind, "mode": "lines+markers", "x": cols[0], "y": cols[1],
            "customdata": np.stack(cols[2:], axis=1) if hover else None,
            "name": gpu, "legendgroup": gpu, "showlegend": gpu not in shown_gpu, "connectgaps": False,
            "legendrank": 100 + sorted(gpu_colour).index(gpu) if gpu in gpu_colour else 1000,
            "line": {"color": colour, "width": 1}, "marker": {"color": colour, "size": 3 if kind == "scattergl" else 5},
            "opacity": 0.75, "meta": {"model": model_name, "gpu": gpu},
            "hovertemplate": template + f"<extra>{model_name} on {gpu}</extra>",
        })
        shown_gpu.add(gpu)
    for flag, name, symbol, colour in (("is_knee", "knee", "star", "#111"),
                                       ("is_slo_opt", "SLO optimum", "diamond", "#2e7d32")):
        if flag not in front:
            continue
        first = True
        many = int(front[flag].sum()) > 200  # thousands of rows: small marks, or they hide the curves
        size, outline = (5, 0) if many else (11, 1)
        for model_name, gpu, members in pairs:
            m = members[front[flag][members]]
            if not len(m):
                continue
            traces.append({"type": kind, "mode": "markers", "x": front[x][m], "y": front[y][m], "name": name,
                           "legendgroup": name, "showlegend": first, "meta": {"model": model_name, "gpu": gpu},
                           "marker": {"symbol": symbol, "size": size, "color": colour, "opacity": 0.8 if many else 1,
                                      "line": {"color": "#fff", "width": outline}},
                           "hovertemplate": f"{name}<br>%{{x:,.4g}}, %{{y:,.4g}}<extra>{model_name} on {gpu}</extra>"})
            first = False
    slos = np.unique(front[spec.slo][finite(front[spec.slo])]) if spec.slo and spec.slo in front else np.zeros(0)
    ylog = _log_ratio(front[y]) > 30
    yaxis = axis(ylabel, log=ylog)
    if len(slos):
        rng = capped_range(front[y], 10 * float(slos.max()), ylog)
        if rng is not None:
            yaxis["range"] = rng
    layout = base_layout(520, xaxis=axis(xlabel, log=_log_ratio(front[x]) > 30), yaxis=yaxis)
    if len(slos) == 1:
        layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": slos[0],
                             "y1": slos[0], "line": {"color": "#222", "dash": "dash", "width": 1.2}}]
        # annotations on a log axis are placed in log10 units (shapes in data units)
        at = math.log10(slos[0]) if ylog else slos[0]
        layout["annotations"] = [{"xref": "paper", "x": 1, "xanchor": "right", "yref": "y", "y": at,
                                  "yanchor": "bottom", "showarrow": False, "text": f"SLO {slos[0]:g} ms"}]
    return {"data": traces, "layout": layout}


def plan_figure(plan: Columns, model: ServingModel, gpu_colour: dict[str, str]) -> dict[str, Any] | None:
    """The cheapest fleet meeting the SLO: replicas_min's cost against the arrival rate,
    one line per configuration (model, GPU, GPUs per replica, the model's workload columns)."""
    cost = plan["replicas_min_cost_usd_per_hour"]
    ok = finite(cost) & finite(plan.get("replicas_min", cost))
    if not ok.any():
        return None
    view = model.views.plan
    p = {k: v[ok] for k, v in plan.items()}
    config_cols = [c for c in ("model", "gpu", "gpus_per_replica", *view.workload) if c in p]
    key = row_keys(p, config_cols)
    order = np.lexsort([p.get("arrival_rps", p["group_id"]), key])
    p = {k: v[order] for k, v in p.items()}
    key = key[order]
    traces: list[dict[str, Any]] = []
    shown: set[str] = set()
    labels = {"replicas_min": "replicas", "gpus_per_replica": "GPUs/replica", **dict(view.shown)}
    for cell in view.cells:
        name = answer_column(model, "replicas_min", cell.column)
        if name:
            labels[name] = cell.header
    hover = [c for c in ("replicas_min", *(answer_column(model, "replicas_min", cell.column) for cell in view.cells),
                         "gpus_per_replica", *(c for c, _ in view.shown)) if c and c in p]
    template = ("arrival %{x:,.4g} req/s<br>cost %{y:$,.2f}/h"
                + "".join(f"<br>{labels[c]} %{{customdata[{i}]:,.4g}}" for i, c in enumerate(hover)))
    x = p.get("arrival_rps", p["group_id"])
    single = len(np.unique(x)) == 1
    kind = "scattergl" if len(x) > GL_THRESHOLD else "scatter"
    for model_name, gpu, m in by_pair(p):
        cols = _gaps(x[m], p["replicas_min_cost_usd_per_hour"][m], key[m], *(p[c][m] for c in hover))
        colour = gpu_colour.get(gpu, "#444")
        traces.append({"type": kind, "mode": "markers" if single else "lines+markers", "x": cols[0], "y": cols[1],
                       "customdata": np.stack(cols[2:], axis=1), "name": gpu, "legendgroup": gpu,
                       "showlegend": gpu not in shown, "connectgaps": False, "meta": {"model": model_name, "gpu": gpu},
                       "line": {"color": colour, "width": 1.2}, "marker": {"color": colour, "size": 6 if single else 4},
                       "hovertemplate": template + f"<extra>{model_name} on {gpu}</extra>"})
        shown.add(gpu)
    layout = base_layout(460, xaxis=axis("arrival rate (req/s, fleet)", log=_log_ratio(x) > 20),
                         yaxis=axis("fleet cost at replicas_min (USD/h)",
                                    log=_log_ratio(p["replicas_min_cost_usd_per_hour"]) > 20, tickprefix="$",
                                    dtick=1 if _log_ratio(p["replicas_min_cost_usd_per_hour"]) > 20 else None))
    return {"data": traces, "layout": layout}


def _plain(v: Any) -> str:
    return str(v) if isinstance(v, str) else f"{float(v):g}"


def layout_figure(lay: Columns, varying: Sequence[str]) -> dict[str, Any] | None:
    """The layout verdict: the GPUs each layout needs against the arrival rate
    (`sweep.decide.layouts.FIGURE_LINES`: the split solid, one pool dashed), one pair of lines
    per workload (the varying keys other than the arrival rate); a missing point is a rate at
    which that layout meets no SLO within the grid's GPUs."""
    if not len(lay.get("group_id", [])) or "arrival_rps" not in lay:
        return None
    ys = [(lay[col].astype(float), name, dash) for col, name, dash in FIGURE_LINES]
    if not any(np.isfinite(y).any() for y, _, _ in ys):
        return None
    keys = [k for k in varying if k in lay and k in SHARED_KEYS and k != "arrival_rps"]  # the workload's keys
    n = len(lay["group_id"])
    label = np.array([", ".join(f"{k} {_plain(lay[k][i])}" for k in keys) for i in range(n)])
    palette = colour_map(sorted({str(v) for v in label}))
    x = lay["arrival_rps"].astype(float)
    traces: list[dict[str, Any]] = []
    for name in sorted({str(v) for v in label}):
        m = np.flatnonzero(label.astype(str) == name)
        m = m[np.argsort(x[m], kind="stable")]
        colour = palette[name]
        for y, what, dash in ys:
            yy = np.where(np.isfinite(y[m]), y[m], np.nan)  # no answer: a gap
            traces.append({"type": "scatter", "mode": "lines+markers", "x": x[m], "y": yy,
                           "name": f"{what}{' (' + name + ')' if name else ''}", "connectgaps": False,
                           "line": {"color": colour, "width": 2 if dash == "solid" else 1.5, "dash": dash},
                           "marker": {"color": colour, "size": 6, "symbol": "circle" if dash == "solid" else "x"},
                           "hovertemplate": f"arrival %{{x:,.4g}} req/s<br>%{{y}} GPUs<extra>{what} {name}</extra>"})
    layout = base_layout(460, xaxis=axis("arrival rate (req/s, fleet)", log=_log_ratio(x) > 20),
                         yaxis=axis("GPUs needed (fewest meeting every SLO)", rangemode="tozero"))
    return {"data": traces, "layout": layout}


def _closed(x: np.ndarray, *ys: np.ndarray) -> list[np.ndarray]:
    """Step lines ("hv") end at their last point: repeat it one hour on, so the last hour shows."""
    return [np.r_[x, x[-1] + 1]] + [np.r_[y, y[-1:]] for y in ys]


def schedule_figure(sched: Columns) -> dict[str, Any] | None:
    """The replica schedule (SPEC 12): planned and required replicas per hour (steps) and the
    flat peak fleet (dashed) against the hour's traffic (grey, right axis), per schedule group."""
    if not len(sched.get("hour", [])):
        return None
    traces: list[dict[str, Any]] = []
    groups = np.unique(sched["schedule_group_id"])
    palette = colour_map([str(int(g)) for g in groups])
    first = sched["schedule_group_id"] == groups[0]
    hours = sched["hour"][first]
    tx, ty = _closed(hours, sched["arrival_rps"][first])
    traces.append({"type": "scatter", "mode": "lines", "x": tx, "y": ty, "yaxis": "y2",
                   "name": "traffic (req/s)", "line": {"color": "#bbbbbb", "width": 2, "shape": "hv"},
                   "fill": "tozeroy", "fillcolor": "rgba(190,190,190,0.25)",
                   "hovertemplate": "hour %{x}<br>%{y:,.4g} req/s<extra>traffic</extra>"})
    for g in groups:
        m = sched["schedule_group_id"] == g
        label = f"{sched['model'][m][0]} on {int(sched['gpus_per_replica'][m][0])} x {sched['gpu'][m][0]}"
        if len(groups) > 1:
            label = f"{int(g)}: {label}"
        colour = palette[str(int(g))]
        x, planned, required, cost = _closed(
            sched["hour"][m],
            np.where(np.isfinite(sched["replicas"][m]), sched["replicas"][m], np.nan),  # +inf: no plan, a gap
            np.where(np.isfinite(sched["replicas_required"][m]), sched["replicas_required"][m], np.nan),
            sched["cost_usd"][m])
        flat = float(sched["flat_replicas"][m][0])
        traces.append({"type": "scatter", "mode": "lines", "x": x, "y": planned, "name": f"planned replicas ({label})",
                       "line": {"color": colour, "width": 2.5, "shape": "hv"}, "connectgaps": False,
                       "customdata": np.stack([required, cost], axis=1),
                       "hovertemplate": "hour %{x}<br>replicas %{y}<br>required %{customdata[0]}"
                                        "<br>cost %{customdata[1]:$,.2f}<extra>" + label + "</extra>"})
        traces.append({"type": "scatter", "mode": "lines", "x": x, "y": required, "name": f"required ({label})",
                       "line": {"color": colour, "width": 1, "dash": "dot", "shape": "hv"}, "connectgaps": False,
                       "hoverinfo": "skip"})
        if math.isfinite(flat):
            saving = float(sched["saving_frac"][m][0])
            traces.append({"type": "scatter", "mode": "lines", "x": [float(x.min()), float(x.max())], "y": [flat, flat],
                           "name": f"flat fleet ({label}; plan saves {100 * saving:.0f}%)",
                           "line": {"color": colour, "width": 1.2, "dash": "dash"},
                           "hovertemplate": "flat fleet %{y} replicas<extra>" + label + "</extra>"})
    layout = base_layout(460,
                         xaxis=axis("hour" + (" of the week (0 = Monday 00:00)" if len(hours) > 24 else " of the day")),
                         yaxis=axis("replicas", rangemode="tozero"),
                         yaxis2=axis("arrival rate (req/s, fleet)", overlaying="y", side="right", rangemode="tozero",
                                     showgrid=False))
    layout["margin"] = {**layout["margin"], "r": 70}
    return {"data": traces, "layout": layout}



def sim_figure(sim: Columns, spec: AgainstSimulator, model: ServingModel) -> dict[str, Any] | None:
    """Kind `AgainstSimulator`: each series' analytic estimate against the simulated value of
    the same points (the percentile panel with the simulator's half-width, the mean panel),
    with y = x. Unbounded estimates are markers on the top edge."""
    traces: list[dict[str, Any]] = []
    q = sim.get("percentile")
    ql = _qlabel(float(q[0]) if q is not None and len(q) else 0.99)
    pairs = sorted(set(zip(sim["model"].tolist(), sim["gpu"].tolist())))
    where = _hover_columns(model, sim, ("arrival_rps",))
    custom = ", ".join(f"{label} %{{customdata[{i}]}}" if c != "arrival_rps" else f"%{{customdata[{i}]:,.4g}} req/s"
                       for i, (c, label) in enumerate(where))
    lims: dict[str, list[np.ndarray]] = {"x": [], "x2": []}
    for k, s in enumerate(spec.series):
        est, ref = s.estimate, s.simulated
        if est not in sim or ref not in sim:
            continue
        name = s.name.format(q=ql)
        symbol, colour = SIM_STYLES[s.style % len(SIM_STYLES)]
        xa, ya = ("x", "y") if s.panel == 0 else ("x2", "y2")
        first = True
        for model_name, gpu in pairs:
            m = (sim["model"] == model_name) & (sim["gpu"] == gpu) & finite(sim[ref])
            ok = m & finite(sim[est])
            err = sim[spec.half_width][ok] if s.panel == 0 and spec.half_width in sim else None
            trace = {"type": "scatter", "mode": "markers", "x": sim[ref][ok], "y": sim[est][ok], "name": name,
                     "legendgroup": name, "showlegend": first, "xaxis": xa, "yaxis": ya,
                     "meta": {"model": model_name, "gpu": gpu},
                     "marker": {"symbol": symbol, "size": 6, "color": colour, "opacity": 0.75,
                                "line": {"width": 0.5, "color": "#fff"} if symbol != "x" else {"width": 0}},
                     "customdata": np.stack([sim[c][ok] for c, _ in where], axis=1) if where else None,
                     "hovertemplate": "simulated %{x:,.1f} ms<br>" + name + f" %{{y:,.1f}} ms<br>{custom}"
                                      f"<extra>{model_name} on {gpu}</extra>"}
            if err is not None:
                trace["error_x"] = {"type": "data", "array": err, "visible": True, "thickness": 1, "width": 0,
                                    "color": "#999"}
            traces.append(trace)
            lims[xa].append(sim[ref][ok])
            lims[xa].append(sim[est][ok])
            bad = m & ~finite(sim[est])
            if bad.any():
                traces.append({"type": "scatter", "mode": "markers", "x": sim[ref][bad],
                               "y": np.full(int(bad.sum()), 0.97), "xaxis": xa, "yaxis": "y9" if ya == "y" else "y8",
                               "name": spec.unbounded, "legendgroup": "inf",
                               "showlegend": first and k == 0, "meta": {"model": model_name, "gpu": gpu},
                               "marker": {"symbol": "triangle-up", "size": 9, "color": "#c62828"},
                               "hovertemplate": f"simulated %{{x:,.1f}} ms; {name} unbounded"
                                                f"<extra>{model_name} on {gpu}</extra>"})
            first = False
    if not traces:
        return None
    layout = base_layout(460, grid=None)
    for xa, ya, dom, title in (("x", "y", [0, 0.46], spec.panels[0].format(q=ql)),
                               ("x2", "y2", [0.54, 1], spec.panels[1].format(q=ql))):
        v = np.concatenate(lims[xa]) if lims[xa] else np.array([1.0, 10.0])
        v = v[finite(v) & (v > 0)]
        lo, hi = (float(v.min()) / 1.2, float(v.max()) * 1.2) if len(v) else (1.0, 10.0)
        log = hi / lo > 30
        rng = [math.log10(lo), math.log10(hi)] if log else [0, hi]
        suffix = xa[1:]
        layout[f"xaxis{suffix}"] = axis("simulated (ms)", log=log, domain=dom, anchor=ya, range=rng)
        layout[f"yaxis{suffix}"] = axis("estimated (ms)", log=log, anchor=xa, range=rng)
        traces.append({"type": "scatter", "mode": "lines", "x": [lo, hi], "y": [lo, hi], "xaxis": xa, "yaxis": ya,
                       "name": "y = x", "legendgroup": "yx", "showlegend": xa == "x",
                       "line": {"color": "#888", "dash": "dot", "width": 1}, "hoverinfo": "skip"})
        layout.setdefault("annotations", []).append(
            {"text": title, "xref": "paper", "yref": "paper", "x": (dom[0] + dom[1]) / 2, "y": 1.0,
             "yanchor": "bottom", "showarrow": False})
    layout["yaxis9"] = {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True}
    layout["yaxis8"] = {"overlaying": "y2", "anchor": "x2", "range": [0, 1], "visible": False, "fixedrange": True}
    layout["legend"]["y"] = 1.1
    layout["margin"]["t"] = 80
    return {"data": traces, "layout": layout}


def scatter_figure(cols: Columns, spec: Scatter, model: ServingModel,
                   gpu_colour: dict[str, str]) -> dict[str, Any] | None:
    """Kind `Scatter`: `spec.x` against `spec.y` at every stable point, one colour per GPU."""
    ok = finite(cols[spec.x]) & finite(cols[spec.y])
    if "stable" in cols:
        ok &= cols["stable"]
    if not ok.any():
        return None
    kind = "scattergl" if ok.sum() > GL_THRESHOLD else "scatter"
    traces = []
    shown: set[str] = set()
    hover = _hover_columns(model, cols, ("arrival_rps", "replicas"))
    xname, yname = (spec.x_title or spec.x).split(" (")[0], (spec.y_title or spec.y).split(" (")[0]
    template = (f"{xname} %{{x:,.4g}}<br>{yname} %{{y:,.4g}}"
                + "".join(f"<br>{label} %{{customdata[{i}]:,.4g}}" for i, (_, label) in enumerate(hover)))
    for model_name, gpu in sorted(set(zip(cols["model"][ok].tolist(), cols["gpu"][ok].tolist()))):
        m = ok & (cols["model"] == model_name) & (cols["gpu"] == gpu)
        colour = gpu_colour.get(gpu, "#444")
        traces.append({"type": kind, "mode": "markers", "x": cols[spec.x][m], "y": cols[spec.y][m],
                       "customdata": np.stack([cols[c][m] for c, _ in hover], axis=1) if hover else None,
                       "name": gpu, "legendgroup": gpu,
                       "showlegend": gpu not in shown, "meta": {"model": model_name, "gpu": gpu},
                       "marker": {"color": colour, "size": 6, "opacity": 0.8},
                       "hovertemplate": template + f"<extra>{model_name} on {gpu}</extra>"})
        shown.add(gpu)
    layout = base_layout(460, xaxis=axis(spec.x_title or spec.x), yaxis=axis(spec.y_title or spec.y))
    return {"data": traces, "layout": layout}


def load_figure(cols: Columns, spec: AgainstLoad, model: ServingModel,
                gpu_colour: dict[str, str]) -> dict[str, Any] | None:
    """Kind `AgainstLoad`: each panel's latency at the grid's percentile against the
    per-replica load, one line per configuration; unstable points are gaps."""
    x_col = spec.x if spec.x in cols else "arrival_rps"
    if x_col not in cols:
        return None
    config = [c for c in spec.config if c in cols]
    key = row_keys(cols, config)
    order = np.lexsort([cols[x_col], key])
    c = {k: v[order] for k, v in cols.items()}
    key = key[order]
    stable = c["stable"] if "stable" in c else np.ones(len(key), bool)
    extra = [k for k, _ in _hover_columns(model, c, ())]
    cap_name = model.views.axis(model.decisions.cap).symbol
    panels = spec.panels
    gap = 0.08
    width = (1 - gap * (len(panels) - 1)) / max(len(panels), 1)
    traces = []
    shown: set[str] = set()
    for model_name, gpu in sorted(set(zip(c["model"].tolist(), c["gpu"].tolist()))):
        m = (c["model"] == model_name) & (c["gpu"] == gpu)
        colour = gpu_colour.get(gpu, "#444")
        for n, (col, name, _) in enumerate(panels):
            if col not in c:
                continue
            suffix = "" if n == 0 else str(n + 1)
            y = np.where(stable[m], c[col][m], np.nan)
            parts = _gaps(c[x_col][m], y, key[m], *(c[k][m] for k in extra))
            traces.append({"type": "scatter", "mode": "lines+markers", "x": parts[0], "y": parts[1],
                           "xaxis": f"x{suffix}", "yaxis": f"y{suffix}", "name": gpu, "legendgroup": gpu,
                           "showlegend": gpu not in shown, "connectgaps": False,
                           "meta": {"model": model_name, "gpu": gpu},
                           "customdata": np.stack(parts[2:], axis=1) if extra else None,
                           "line": {"color": colour, "width": 1.2, "dash": "solid"},
                           "marker": {"size": 4, "color": colour},
                           "hovertemplate": f"load %{{x:,.4g}} req/s per replica<br>{name} %{{y:,.1f}} ms"
                                            + (f"<br>{cap_name} %{{customdata[0]}}" if extra else "")
                                            + f"<extra>{model_name} on {gpu}</extra>"})
            shown.add(gpu)
    q = c.get("percentile")
    ql = f"P{100 * float(q[0]):g}" if q is not None and len(q) else "percentile"
    axes: dict[str, Any] = {}
    shapes = []
    for n, (_, name, slo) in enumerate(panels):
        suffix = "" if n == 0 else str(n + 1)
        axes[f"xaxis{suffix}"] = axis("load (req/s per replica)", domain=[n * (width + gap), n * (width + gap) + width],
                                      anchor=f"y{suffix}")
        axes[f"yaxis{suffix}"] = axis(f"{name} {ql} (ms)", anchor=f"x{suffix}")
        if slo and slo in c:
            v = c[slo][finite(c[slo])]
            if len(v) and np.all(v == v[0]):
                shapes.append({"type": "line", "xref": f"x{suffix} domain", "x0": 0, "x1": 1, "yref": f"y{suffix}",
                               "y0": v[0], "y1": v[0], "line": {"color": "#222", "dash": "dash", "width": 1.2}})
    layout = base_layout(440, **axes)
    if shapes:
        layout["shapes"] = shapes
    return {"data": traces, "layout": layout}
