"""Plotly figure dictionaries for the report, built from the bounded query results.

Each figure is a plain `{"data": [...], "layout": {...}}` dictionary: the browser draws it
with the inlined plotly.js, and `--png` hands the same dictionary to kaleido. Traces that
belong to one model and GPU carry `meta = {"model": ..., "gpu": ...}`; the page's filters
show and hide them. Arrays may stay numpy arrays here; `html.dumps` encodes large ones as
Plotly typed arrays (`{"dtype", "bdata"}`) and turns +inf and NULL (NaN) into gaps.

Unbounded values (+inf today, NULL tomorrow) are never drawn as numbers: a latency with no
finite value is a marker on the top edge labelled as such, and a region of batch sizes
that is unstable or out of memory is shaded from the row's own figures in
optimum.parquet (`b_min_stable_int`, `b_mem_max`), so the shading is right even when the
run kept no points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sweep.reporting.data import Columns, by_pair, row_keys, unbounded

#: The seed's operating rules in order (sweep.kernels.ACTIONS; a test keeps them equal).
ACTIONS = ("out_of_memory", "unstable", "slo_violated", "near_saturation", "overprovisioned", "ok")
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
WINDOW_DASH = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
UNSTABLE_FILL = "rgba(198, 40, 40, 0.10)"
OOM_FILL = "rgba(123, 50, 148, 0.12)"
#: Above this many points a scatter uses WebGL (scattergl); below, SVG (prints sharply).
GL_THRESHOLD = 5000

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


def batch_axis(bmin: float, bmax: float, continuous: bool = False) -> dict[str, Any]:
    """Batch sizes (continuous serving: the cap on running sequences) on a log axis with
    powers of two as ticks (linear when the range is short)."""
    title = "cap N on running sequences (batch_size)" if continuous else "batch size B (requests)"
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


def fmt(x: Any, digits: int = 1) -> str:
    """A number for a table cell or a label: unbounded (+inf or NULL) reads as inf."""
    if x is None:
        return "inf"
    x = float(x)
    if not math.isfinite(x):
        return "inf" if x > 0 or math.isnan(x) else "-inf"
    return f"{x:,.{digits}f}"


#: The decision knob a row varies besides the cap: the window (dynamic), the token budget
#: (continuous serving); the figures draw one line per value.
KNOBS = ("batch_window_ms", "max_batched_tokens")


def window_label(w: float, knob: str = "batch_window_ms") -> str:
    if knob == "max_batched_tokens":
        return "no token budget (inf)" if unbounded(w) else f"budget {w:g} tokens"
    return "full batches (window inf)" if unbounded(w) else f"window {w:g} ms"


def _knob(cols: Columns) -> str:
    return next((k for k in KNOBS if k in cols), "batch_window_ms")


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


def _regions(row: dict[str, Any], bmin: float, bmax: float) -> list[dict[str, Any]]:
    """Unstable (B < b_min_stable_int) and out-of-memory (B > b_mem_max) bands."""
    out = []
    lo, hi = bmin / 1.25, bmax * 1.25
    stable_from = row.get("b_min_stable_int")
    if "b_min_stable_int" not in row:  # continuous serving: no B_min; its points carry `stable`
        pass
    elif unbounded(stable_from):
        out.append(_band(lo, hi, "unstable (no batch keeps up)", UNSTABLE_FILL,
                         "unstable at every batch size: lambda >= B / T_svc(B)"))
    elif stable_from is not None and stable_from > bmin:
        out.append(_band(lo, _between(stable_from), f"unstable (B < {stable_from:g})", UNSTABLE_FILL,
                         f"unstable: B < b_min_stable_int = {stable_from:g}"))
    mem = row.get("b_mem_max")
    if row.get("weights_fit") is False or (mem is not None and not unbounded(mem) and mem <= 0):
        out.append(_band(lo, hi, "out of memory (weights do not fit)", OOM_FILL, "the weights do not fit in HBM"))
    elif mem is not None and not unbounded(mem) and mem < bmax:
        out.append(_band(_between(mem + 1), hi, f"out of memory (B > {mem:g})", OOM_FILL,
                         f"out of memory: B > b_mem_max = {mem:g}"))
    return out


def _answer(row: dict[str, Any], prefix: str, column: str = "latency_ms") -> tuple[float, float] | None:
    """(batch, value) of an answer of optimum.parquet, or None when there is none
    (batch 0 or NULL, or an unbounded value)."""
    b = row.get(prefix if prefix != "replicas_min" else "replicas_min_batch")
    v = row.get(f"{prefix}_{column}")
    if b is None or unbounded(b) or b <= 0 or v is None or unbounded(v):
        return None
    return float(b), float(v)


def _top_markers(x: np.ndarray, name: str, hover: str) -> dict[str, Any]:
    return {"type": "scatter", "x": x, "y": np.full(len(x), 0.97), "yaxis": "y9", "mode": "markers",
            "name": name, "marker": {"symbol": "triangle-up", "size": 9, "color": "#c62828"},
            "hovertemplate": f"B %{{x}}: {hover}<extra></extra>"}


def _y9() -> dict[str, Any]:
    return {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True}


# --------------------------------------------------------------------------- per scenario


def latency_figure(row: dict[str, Any], pts: Columns, brange: tuple[float, float] = (1.0, 1.0),
                   empty: str = "") -> dict[str, Any]:
    """Latency against batch size for one scenario row: one line per window, the SLO,
    the knee and the SLO optimum, and the unstable and out-of-memory regions (over
    `brange` when the row has no points; `empty` then says why)."""
    b = pts["batch_size"]
    windows = _windows(pts) if len(b) else []
    q = row.get("percentile", 0.99)
    qlabel = f"P{100 * q:g}" if not unbounded(q) else "latency"
    traces: list[dict[str, Any]] = []
    bmin, bmax = (min(float(np.nanmin(b)), brange[0]), max(float(np.nanmax(b)), brange[1])) if len(b) else brange
    traces += _regions(row, bmin, bmax)
    lat = pts["latency_ms"]
    for i, w in enumerate(windows):
        m = _window_mask(pts, w)
        order = np.argsort(b[m])
        custom = np.stack([pts.get("e_resp_ms", lat)[m][order], pts.get("rho", lat)[m][order]], axis=1)
        traces.append({
            "type": "scatter", "mode": "lines+markers", "x": b[m][order], "y": lat[m][order],
            "name": f"{qlabel} estimate, {window_label(w)}" if len(windows) > 1 else f"{qlabel} estimate (latency_ms)",
            "line": {"color": PALETTE[i % len(PALETTE)], "dash": "solid", "width": 2},
            "marker": {"size": 6}, "customdata": custom, "connectgaps": False,
            "hovertemplate": "B %{x}<br>latency %{y:,.1f} ms<br>E[T] %{customdata[0]:,.1f} ms"
                             "<br>rho %{customdata[1]:.1%}<extra>" + window_label(w) + "</extra>",
        })
        if len(windows) == 1 and "e_resp_ms" in pts:
            traces.append({"type": "scatter", "mode": "lines", "x": b[m][order], "y": pts["e_resp_ms"][m][order],
                           "name": "mean E[T]", "line": {"color": "#777", "dash": "dot", "width": 1.5},
                           "hovertemplate": "B %{x}<br>E[T] %{y:,.1f} ms<extra></extra>"})
    inf = ~finite(lat) & (pts["stable"] if "stable" in pts else np.ones(len(lat), bool))
    if inf.any():
        traces.append(_top_markers(np.unique(b[inf]), "latency unbounded (proxy rho >= 1)",
                                   "stable, but the latency estimate is unbounded"))
    slo = row.get("slo_ms")
    if slo is not None and not unbounded(slo):
        traces.append({"type": "scatter", "mode": "lines", "x": [bmin / 1.25, bmax * 1.25], "y": [slo, slo],
                       "name": f"SLO {qlabel} {slo:g} ms", "line": {"color": "#222", "dash": "dash", "width": 1.5},
                       "hovertemplate": f"SLO {slo:g} ms<extra></extra>"})
    traces += _answer_markers(row, "latency_ms")
    ratio = _log_ratio(np.concatenate([lat[finite(lat)], [slo] if slo and not unbounded(slo) else []]))
    ylog = ratio > 30
    yaxis = axis(f"latency_ms ({qlabel}, ms)", log=ylog)
    if slo is not None and not unbounded(slo):
        rng = capped_range(lat, 20 * slo, ylog)
        if rng is not None:
            yaxis["range"] = rng
    layout = base_layout(440, xaxis=batch_axis(bmin, bmax), yaxis=yaxis, yaxis9=_y9())
    if empty:
        layout["annotations"] = [{"xref": "paper", "yref": "paper", "x": 0.5, "y": 0.55, "showarrow": False,
                                  "text": empty, "font": {"size": 13, "color": "#555"}, "bgcolor": "#fff"}]
    return {"data": traces, "layout": layout}


def _answer_markers(row: dict[str, Any], column: str, scale: float = 1.0) -> list[dict[str, Any]]:
    marks = []
    for prefix, name, symbol, colour in (("knee", "knee", "star", "#111"),
                                         ("slo_opt", "SLO optimum", "diamond", "#2e7d32")):
        ans = _answer(row, prefix, column)
        if ans is None:
            continue
        bx, val = ans
        marks.append({"type": "scatter", "mode": "markers", "x": [bx], "y": [val * scale], "name": f"{name} (B = {bx:g})",
                      "marker": {"symbol": symbol, "size": 15, "color": colour, "line": {"color": "#fff", "width": 1}},
                      "hovertemplate": f"{name}: B %{{x}}, %{{y:,.3g}}<extra></extra>"})
    return marks


def utilisation_figure(row: dict[str, Any], pts: Columns, brange: tuple[float, float] = (math.inf, -math.inf)
                       ) -> dict[str, Any]:
    """Utilisation against batch size: the proxy's rho per window (and the batcher
    model's or the simulator's where the run has them), with rho_target, rho_max, rho_min."""
    b = pts["batch_size"]
    bmin, bmax = min(float(np.nanmin(b)), brange[0]), max(float(np.nanmax(b)), brange[1])
    traces: list[dict[str, Any]] = _regions(row, bmin, bmax)
    windows = _windows(pts)
    rho_all = []
    knob = _knob(pts)
    rho_name = "rho (load / capacity)" if knob == "max_batched_tokens" else "rho (proxy)"
    for name, col, dash in ((rho_name, "rho", "solid"), ("batcher model rho", "batcher_rho", "dash"),
                            ("simulated utilisation", "sim_utilization", "dot")):
        if col not in pts:
            continue
        for i, w in enumerate(windows):
            m = _window_mask(pts, w)
            order = np.argsort(b[m])
            y = pts[col][m][order]
            rho_all.append(y[finite(y)])
            label = f"{name}, {window_label(w, knob)}" if len(windows) > 1 else name
            traces.append({"type": "scatter", "mode": "lines+markers", "x": b[m][order], "y": y, "name": label,
                           "line": {"color": PALETTE[i % len(PALETTE)], "dash": dash, "width": 2},
                           "marker": {"size": 5},
                           "hovertemplate": f"B %{{x}}<br>{name} %{{y:.1%}}<extra>{window_label(w, knob)}</extra>"})
    for key, label, colour in (("rho_max", "rho_max (near saturation above)", "#f2a900"),
                               ("rho_target", "rho_target", "#2e7d32"),
                               ("rho_min", "rho_min (overprovisioned below)", "#64b5f6")):
        v = row.get(key)
        if v is None or unbounded(v):
            continue
        traces.append({"type": "scatter", "mode": "lines", "x": [bmin / 1.25, bmax * 1.25], "y": [v, v],
                       "name": f"{label} {v:.0%}", "line": {"color": colour, "dash": "dash", "width": 1.2},
                       "hovertemplate": f"{key} {v:.0%}<extra></extra>"})
    top = max([1.05] + [float(np.max(r)) * 1.05 for r in rho_all if len(r)])
    layout = base_layout(400, xaxis=batch_axis(bmin, bmax, knob == "max_batched_tokens"),
                         yaxis=axis("utilisation", tickformat=".0%", range=[0, min(top, 2.0)]), yaxis9=_y9())
    return {"data": traces, "layout": layout}


def kv_figure(row: dict[str, Any], pts: Columns | None) -> dict[str, Any] | None:
    """The KV budget of one replica: weights, the KV reservation at the batch sizes that
    matter (the answers, B = 1 and the memory limit), and what stays free."""
    weights, free, per_req = row.get("weights_gb"), row.get("free_gb"), row.get("kv_gb_per_req")
    if weights is None or free is None or per_req is None or unbounded(weights) or unbounded(free):
        return None
    usable = weights + free
    marks: list[tuple[str, float]] = [("B = 1", 1.0)]
    for prefix, label in (("b_max_slo", "largest batch under the SLO"), ("slo_opt", "SLO optimum"),
                          ("knee", "knee")):
        b = row.get(prefix)
        if b is not None and not unbounded(b) and b > 0:
            marks.append((f"{label}, B = {b:g}", float(b)))
    mem = row.get("b_mem_max")
    if mem is not None and not unbounded(mem) and mem > 0:
        marks.append((f"memory limit, B = {mem:g} (b_mem_max)", float(mem)))
    if pts is not None and "batch_size" in pts and len(pts["batch_size"]):
        marks.append((f"largest batch in the grid, B = {np.nanmax(pts['batch_size']):g}",
                      float(np.nanmax(pts["batch_size"]))))
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


def cb_latency_figure(row: dict[str, Any], pts: Columns, brange: tuple[float, float] = (1.0, 1.0)) -> dict[str, Any]:
    """Continuous serving, one scenario row: TTFT (top) and TPOT (bottom) at the grid's
    percentile against the cap, one line per token budget, each SLO as a dashed line, the
    knee and the SLO optimum marked; caps where the engine cannot keep up or the memory
    does not suffice are marked along the top (their latencies are unbounded)."""
    b = pts["batch_size"]
    q = row.get("percentile", 0.99)
    qlabel = f"P{100 * q:g}" if not unbounded(q) else "P(q)"
    bmin, bmax = (min(float(np.nanmin(b)), brange[0]), max(float(np.nanmax(b)), brange[1])) if len(b) else brange
    traces: list[dict[str, Any]] = []
    budgets = _windows(pts) if len(b) else []
    for panel, (name, col, slo_key, yaxis) in enumerate((("TTFT", "ttft_p_ms", "ttft_slo_ms", "y"),
                                                        ("TPOT", "tpot_p_ms", "tpot_slo_ms", "y2"))):
        if col not in pts:
            continue
        for i, w in enumerate(budgets):
            m = _window_mask(pts, w)
            order = np.argsort(b[m])
            traces.append({
                "type": "scatter", "mode": "lines+markers", "x": b[m][order], "y": pts[col][m][order], "yaxis": yaxis,
                "name": f"{name} {qlabel}, {window_label(w, 'max_batched_tokens')}",
                "legendgroup": f"w{i}", "line": {"color": PALETTE[i % len(PALETTE)], "width": 2,
                                                 "dash": "solid" if panel == 0 else "dot"},
                "marker": {"size": 6}, "connectgaps": False,
                "hovertemplate": f"N %{{x}}<br>{name} {qlabel} %{{y:,.1f}} ms<extra>{window_label(w, 'max_batched_tokens')}</extra>",
            })
        slo = row.get(slo_key)
        if slo is not None and not unbounded(slo):
            traces.append({"type": "scatter", "mode": "lines", "x": [bmin / 1.25, bmax * 1.25], "y": [slo, slo],
                           "yaxis": yaxis, "name": f"{name} SLO {slo:g} ms",
                           "line": {"color": "#222", "dash": "dash", "width": 1.5},
                           "hovertemplate": f"{name} SLO {slo:g} ms<extra></extra>"})
        for prefix, label, symbol, colour in (("knee", "knee", "star", "#111"), ("slo_opt", "SLO optimum", "diamond", "#2e7d32")):
            ans = _answer(row, prefix, col)
            if ans is not None:
                traces.append({"type": "scatter", "mode": "markers", "x": [ans[0]], "y": [ans[1]], "yaxis": yaxis,
                               "name": f"{label} (N = {ans[0]:g})", "legendgroup": prefix, "showlegend": panel == 0,
                               "marker": {"symbol": symbol, "size": 14, "color": colour, "line": {"color": "#fff", "width": 1}},
                               "hovertemplate": f"{label}: N %{{x}}, {name} %{{y:,.3g}} ms<extra></extra>"})
    if len(b):
        stable = pts["stable"].astype(bool) if "stable" in pts else np.ones(len(b), bool)
        mem = pts["mem_ok"].astype(bool) if "mem_ok" in pts else np.ones(len(b), bool)
        if (~mem).any():
            traces.append(_top_markers(np.unique(b[~mem]), "out of memory (latency unbounded)",
                                       "the weights or a mean request's reservation do not fit"))
        if (mem & ~stable).any():
            traces.append(_top_markers(np.unique(b[mem & ~stable]), "unstable (latency unbounded)",
                                       "the load exceeds the capacity at this cap and budget"))
    ttft = pts.get("ttft_p_ms", np.array([]))
    tpot = pts.get("tpot_p_ms", np.array([]))
    layout = base_layout(
        540, xaxis={**batch_axis(bmin, bmax, True), "anchor": "y2"},
        yaxis={**axis(f"TTFT {qlabel} (ms)", log=_log_ratio(ttft) > 30), "domain": [0.56, 1.0], "anchor": "x"},
        yaxis2={**axis(f"TPOT {qlabel} (ms)", log=_log_ratio(tpot) > 30), "domain": [0.0, 0.44], "anchor": "x"},
        yaxis9=_y9())
    return {"data": traces, "layout": layout}


def cb_kv_figure(row: dict[str, Any], pts: Columns | None) -> dict[str, Any] | None:
    """Continuous serving, one scenario row's replica: the weights, the KV capacity C (what
    is free for the cache) and, at the answers' points, the KV cache reserved on average
    (kv_util x C)."""
    weights, free = row.get("weights_gb"), row.get("free_gb")
    if weights is None or free is None or unbounded(weights) or unbounded(free):
        return None
    labels, used = [], []
    if pts is not None and "kv_util" in pts and "point_id" in pts:
        for prefix, label in (("b_max_slo", "largest cap under the SLOs"), ("slo_opt", "SLO optimum"), ("knee", "knee")):
            pid = row.get(f"{prefix}_point_id")
            if pid is None or unbounded(pid):
                continue
            m = pts["point_id"] == pid
            if m.any():
                labels.append(f"{label}, N = {row.get(prefix):g}")
                used.append(float(pts["kv_util"][m][0]) * max(free, 0.0))
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
    layout = base_layout(120 + 46 * len(labels), barmode="stack", xaxis=axis("GB per replica (1 GB = 1e9 bytes)"),
                         yaxis={"automargin": True, "autorange": "reversed"},
                         margin={"l": 20, "r": 20, "t": 40, "b": 50},
                         annotations=[{"xref": "paper", "yref": "paper", "x": 1, "y": 1, "yanchor": "bottom",
                                       "showarrow": False, "font": {"size": 11},
                                       "text": f"KV capacity C = {fmt(row.get('kv_capacity_tokens'), 0)} tokens"}])
    layout["legend"]["y"] = 1.10
    return {"data": traces, "layout": layout}


def action_figure(cells: Columns) -> dict[str, Any]:
    """Action map of one configuration: arrival rate x batch size, coloured by action,
    one panel per batching window."""
    windows = _windows(cells)
    knob = _knob(cells)
    lat_name = "latency" if "latency_ms" in cells else "TTFT"
    n = len(windows)
    batches = np.unique(cells["batch_size"][finite(cells["batch_size"])])
    rates = np.unique(cells["arrival_rps"][finite(cells["arrival_rps"])])
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
    for k, w in enumerate(windows):
        m = _window_mask(cells, w)
        z = np.full((len(rates), len(batches)), np.nan)
        text = np.full((len(rates), len(batches)), "", dtype=object)
        for bb, rr, act, lat, rho in zip(cells["batch_size"][m], cells["arrival_rps"][m], cells["action"][m],
                                         cells.get("latency_ms", cells.get("ttft_p_ms", cells["batch_size"]))[m],
                                         cells.get("rho", cells["batch_size"])[m]):
            i, j = ri[float(rr)], bi[float(bb)]
            z[i, j] = code.get(act, np.nan) + 0.5
            text[i, j] = f"{ACTION_LABELS.get(act, act)}<br>{lat_name} {fmt(lat)} ms<br>rho {fmt(100 * rho)}%"
        suffix = "" if k == 0 else str(k + 1)
        traces.append({
            "type": "heatmap", "x": [f"{v:g}" for v in batches], "y": [f"{v:g}" for v in rates], "z": z.tolist(),
            "text": text.tolist(), "zmin": 0, "zmax": len(ACTIONS), "colorscale": scale, "showscale": False,
            "xgap": 1, "ygap": 1, "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
            "hovertemplate": "arrival %{y} req/s, B %{x}<br>%{text}<extra>" + window_label(w, knob) + "</extra>",
        })
        layout[f"xaxis{suffix}"] = axis("cap N (batch_size)" if knob == "max_batched_tokens" else "batch size B", type="category", domain=[k * (width + gap), k * (width + gap) + width],
                                        anchor=f"y{suffix}", showgrid=False)
        layout[f"yaxis{suffix}"] = axis("arrival rate (req/s, fleet)" if k == 0 else "", type="category",
                                        anchor=f"x{suffix}", showgrid=False, showticklabels=k == 0)
        layout.setdefault("annotations", []).append(
            {"text": window_label(w, knob), "xref": "paper", "yref": "paper", "x": k * (width + gap) + width / 2,
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


def _windows(cols: Columns) -> list[float]:
    """The values of the row's second knob (window or token budget); NULL (NaN) is inf."""
    knob = _knob(cols)
    if knob not in cols:
        return [math.inf]
    w = cols[knob]
    return sorted({float(v) if math.isfinite(v) else math.inf for v in w.tolist()})


def _window_mask(cols: Columns, w: float) -> np.ndarray:
    knob = _knob(cols)
    if knob not in cols:
        return np.ones(len(cols["batch_size"]), bool)
    v = cols[knob]
    return ~finite(v) if math.isinf(w) else v == w


# --------------------------------------------------------------------------- across scenarios


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


def frontier_figure(front: Columns, x: str, y: str, gpu_colour: dict[str, str]) -> dict[str, Any]:
    """Pareto frontiers of the scenario rows (capacity up, latency down; continuous
    serving: throughput per user up, per GPU up), one colour per GPU, knee and SLO
    optimum marked. WebGL above GL_THRESHOLD points."""
    n = len(front["row_id"])
    kind = "scattergl" if n > GL_THRESHOLD else "scatter"
    traces: list[dict[str, Any]] = []
    pairs = by_pair(front)
    shown_gpu: set[str] = set()
    hover_cols = [c for c in ("batch_size", "batch_window_ms", "arrival_rps", "replicas", "gpus_per_replica")
                  if c in front]
    xlabel, ylabel = _frontier_labels(x, y)
    template = (f"{xlabel.split(' (')[0]} %{{x:,.4g}}<br>{ylabel.split(' (')[0]} %{{y:,.4g}}"
                + "".join(f"<br>{_HOVER_NAMES[c]} %{{customdata[{i}]:,.4g}}" for i, c in enumerate(hover_cols)))
    for model, gpu, m in pairs:
        cols = _gaps(front[x][m], front[y][m], front["row_id"][m], *(front[c][m] for c in hover_cols))
        colour = gpu_colour.get(gpu, "#444")
        traces.append({
            "type": kind, "mode": "lines+markers", "x": cols[0], "y": cols[1],
            "customdata": np.stack(cols[2:], axis=1) if hover_cols else None,
            "name": gpu, "legendgroup": gpu, "showlegend": gpu not in shown_gpu, "connectgaps": False,
            "legendrank": 100 + sorted(gpu_colour).index(gpu) if gpu in gpu_colour else 1000,
            "line": {"color": colour, "width": 1}, "marker": {"color": colour, "size": 3 if kind == "scattergl" else 5},
            "opacity": 0.75, "meta": {"model": model, "gpu": gpu},
            "hovertemplate": template + f"<extra>{model} on {gpu}</extra>",
        })
        shown_gpu.add(gpu)
    for flag, name, symbol, colour in (("is_knee", "knee", "star", "#111"),
                                       ("is_slo_opt", "SLO optimum", "diamond", "#2e7d32")):
        if flag not in front:
            continue
        first = True
        many = int(front[flag].sum()) > 200  # thousands of rows: small marks, or they hide the curves
        size, outline = (5, 0) if many else (11, 1)
        for model, gpu, members in pairs:
            m = members[front[flag][members]]
            if not len(m):
                continue
            traces.append({"type": kind, "mode": "markers", "x": front[x][m], "y": front[y][m], "name": name,
                           "legendgroup": name, "showlegend": first, "meta": {"model": model, "gpu": gpu},
                           "marker": {"symbol": symbol, "size": size, "color": colour, "opacity": 0.8 if many else 1,
                                      "line": {"color": "#fff", "width": outline}},
                           "hovertemplate": f"{name}<br>%{{x:,.4g}}, %{{y:,.4g}}<extra>{model} on {gpu}</extra>"})
            first = False
    slos = np.unique(front["slo_ms"][finite(front["slo_ms"])]) if "slo_ms" in front and y == "latency_ms" else np.zeros(0)
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


_HOVER_NAMES = {"batch_size": "B", "batch_window_ms": "window ms", "arrival_rps": "arrival req/s",
                "replicas": "replicas", "gpus_per_replica": "GPUs/replica", "max_batched_tokens": "token budget"}


def _frontier_labels(x: str, y: str) -> tuple[str, str]:
    names = {"capacity_rps": "capacity per replica (req/s)", "latency_ms": "latency_ms (ms, the SLO's estimate)",
             "tok_s_per_user": "tok/s per user", "tok_s_per_gpu": "tok/s per GPU"}
    return names.get(x, x), names.get(y, y)


def plan_figure(plan: Columns, gpu_colour: dict[str, str]) -> dict[str, Any] | None:
    """The cheapest fleet meeting the SLO: replicas_min's cost against the arrival rate,
    one line per configuration (model, GPU, GPUs per replica, context...)."""
    cost = plan["replicas_min_cost_usd_per_hour"]
    ok = finite(cost) & finite(plan.get("replicas_min", cost))
    if not ok.any():
        return None
    p = {k: v[ok] for k, v in plan.items()}
    config_cols = [c for c in ("model", "gpu", "gpus_per_replica", "seq_len", "mean_seq_len", "slo_ms") if c in p]
    key = row_keys(p, config_cols)
    order = np.lexsort([p.get("arrival_rps", p["group_id"]), key])
    p = {k: v[order] for k, v in p.items()}
    key = key[order]
    traces: list[dict[str, Any]] = []
    shown: set[str] = set()
    hover = [c for c in ("replicas_min", "replicas_min_batch", "replicas_min_window_ms", "replicas_min_latency_ms",
                         "gpus_per_replica", "seq_len") if c in p]
    labels = {"replicas_min": "replicas", "replicas_min_batch": "batch", "replicas_min_window_ms": "window ms",
              "replicas_min_latency_ms": "latency ms", "gpus_per_replica": "GPUs/replica", "seq_len": "S_max"}
    template = ("arrival %{x:,.4g} req/s<br>cost %{y:$,.2f}/h"
                + "".join(f"<br>{labels[c]} %{{customdata[{i}]:,.4g}}" for i, c in enumerate(hover)))
    x = p.get("arrival_rps", p["group_id"])
    single = len(np.unique(x)) == 1
    kind = "scattergl" if len(x) > GL_THRESHOLD else "scatter"
    for model, gpu, m in by_pair(p):
        cols = _gaps(x[m], p["replicas_min_cost_usd_per_hour"][m], key[m], *(p[c][m] for c in hover))
        colour = gpu_colour.get(gpu, "#444")
        traces.append({"type": kind, "mode": "markers" if single else "lines+markers", "x": cols[0], "y": cols[1],
                       "customdata": np.stack(cols[2:], axis=1), "name": gpu, "legendgroup": gpu,
                       "showlegend": gpu not in shown, "connectgaps": False, "meta": {"model": model, "gpu": gpu},
                       "line": {"color": colour, "width": 1.2}, "marker": {"color": colour, "size": 6 if single else 4},
                       "hovertemplate": template + f"<extra>{model} on {gpu}</extra>"})
        shown.add(gpu)
    layout = base_layout(460, xaxis=axis("arrival rate (req/s, fleet)", log=_log_ratio(x) > 20),
                         yaxis=axis("fleet cost at replicas_min (USD/h)", log=_log_ratio(p["replicas_min_cost_usd_per_hour"]) > 20,
                                    tickprefix="$", dtick=1 if _log_ratio(p["replicas_min_cost_usd_per_hour"]) > 20 else None))
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
    layout = base_layout(460, xaxis=axis("hour" + (" of the week (0 = Monday 00:00)" if len(hours) > 24 else " of the day")),
                         yaxis=axis("replicas", rangemode="tozero"),
                         yaxis2=axis("arrival rate (req/s, fleet)", overlaying="y", side="right", rangemode="tozero",
                                     showgrid=False))
    layout["margin"] = {**layout["margin"], "r": 70}
    return {"data": traces, "layout": layout}


def sim_figure(sim: Columns) -> dict[str, Any] | None:
    """The proxy (and the batcher model) against the simulator: estimated percentile and
    mean against the simulated ones, with y = x. Unbounded estimates are markers on the
    top edge."""
    traces: list[dict[str, Any]] = []
    q = sim.get("percentile")
    qv = float(q[0]) if q is not None and len(q) else 0.99
    ql = f"P{100 * qv:g}"
    pairs = sorted(set(zip(sim["model"].tolist(), sim["gpu"].tolist())))
    series = [("p_gauss_ms", "sim_p_ms", f"{ql} gaussian proxy", "circle", "#4e79a7", "x", "y"),
              ("p_exp_ms", "sim_p_ms", f"{ql} exponential proxy", "x", "#f28e2b", "x", "y"),
              ("batcher_p_ms", "sim_p_ms", f"{ql} batcher model", "square", "#59a14f", "x", "y"),
              ("e_resp_ms", "sim_mean_ms", "mean E[T] proxy", "circle", "#4e79a7", "x2", "y2"),
              ("batcher_e_resp_ms", "sim_mean_ms", "mean, batcher model", "square", "#59a14f", "x2", "y2")]
    lims: dict[str, list[float]] = {"x": [], "x2": []}
    n_inf = 0
    for est, ref, name, symbol, colour, xa, ya in series:
        if est not in sim or ref not in sim:
            continue
        first = True
        for model, gpu in pairs:
            m = (sim["model"] == model) & (sim["gpu"] == gpu) & finite(sim[ref])
            ok = m & finite(sim[est])
            err = sim["sim_p_hw_ms"][ok] if ref == "sim_p_ms" and "sim_p_hw_ms" in sim else None
            trace = {"type": "scatter", "mode": "markers", "x": sim[ref][ok], "y": sim[est][ok], "name": name,
                     "legendgroup": name, "showlegend": first, "xaxis": xa, "yaxis": ya,
                     "meta": {"model": model, "gpu": gpu},
                     "marker": {"symbol": symbol, "size": 6, "color": colour, "opacity": 0.75,
                                "line": {"width": 0.5, "color": "#fff"} if symbol != "x" else {"width": 0}},
                     "customdata": np.stack([sim["batch_size"][ok], sim["batch_window_ms"][ok],
                                             sim["arrival_rps"][ok]], axis=1),
                     "hovertemplate": "simulated %{x:,.1f} ms<br>" + name + " %{y:,.1f} ms<br>B %{customdata[0]}, "
                                      "window %{customdata[1]} ms, %{customdata[2]:,.4g} req/s"
                                      f"<extra>{model} on {gpu}</extra>"}
            if err is not None:
                trace["error_x"] = {"type": "data", "array": err, "visible": True, "thickness": 1, "width": 0,
                                    "color": "#999"}
            traces.append(trace)
            lims[xa].append(sim[ref][ok])
            lims[xa].append(sim[est][ok])
            bad = m & ~finite(sim[est])
            n_inf += int(bad.sum())
            if bad.any():
                traces.append({"type": "scatter", "mode": "markers", "x": sim[ref][bad],
                               "y": np.full(int(bad.sum()), 0.97), "xaxis": xa, "yaxis": "y9" if ya == "y" else "y8",
                               "name": "estimate unbounded (proxy rho >= 1)", "legendgroup": "inf",
                               "showlegend": first and est == "p_gauss_ms", "meta": {"model": model, "gpu": gpu},
                               "marker": {"symbol": "triangle-up", "size": 9, "color": "#c62828"},
                               "hovertemplate": f"simulated %{{x:,.1f}} ms; {name} unbounded<extra>{model} on {gpu}</extra>"})
            first = False
    if not traces:
        return None
    layout = base_layout(460, grid=None)
    for xa, ya, dom, title in (("x", "y", [0, 0.46], f"{ql}: estimate against simulated"),
                               ("x2", "y2", [0.54, 1], "mean: estimate against simulated")):
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


def throughput_figure(cont: Columns, gpu_colour: dict[str, str]) -> dict[str, Any] | None:
    """Continuous serving: throughput per GPU against throughput per user, every
    stable point, one colour per GPU."""
    ok = finite(cont["tok_s_per_gpu"]) & finite(cont["tok_s_per_user"])
    if "stable" in cont:
        ok &= cont["stable"]
    if not ok.any():
        return None
    kind = "scattergl" if ok.sum() > GL_THRESHOLD else "scatter"
    traces = []
    shown: set[str] = set()
    hover = [c for c in ("batch_size", "max_batched_tokens", "arrival_rps", "replicas") if c in cont]
    template = ("tok/s per user %{x:,.4g}<br>tok/s per GPU %{y:,.4g}"
                + "".join(f"<br>{_HOVER_NAMES.get(c, c)} %{{customdata[{i}]:,.4g}}" for i, c in enumerate(hover)))
    for model, gpu in sorted(set(zip(cont["model"][ok].tolist(), cont["gpu"][ok].tolist()))):
        m = ok & (cont["model"] == model) & (cont["gpu"] == gpu)
        colour = gpu_colour.get(gpu, "#444")
        traces.append({"type": kind, "mode": "markers", "x": cont["tok_s_per_user"][m], "y": cont["tok_s_per_gpu"][m],
                       "customdata": np.stack([cont[c][m] for c in hover], axis=1), "name": gpu, "legendgroup": gpu,
                       "showlegend": gpu not in shown, "meta": {"model": model, "gpu": gpu},
                       "marker": {"color": colour, "size": 6, "opacity": 0.8},
                       "hovertemplate": template + f"<extra>{model} on {gpu}</extra>"})
        shown.add(gpu)
    layout = base_layout(460, xaxis=axis("tok/s per user (1000 / tpot_mean_ms)"), yaxis=axis("tok/s per GPU"))
    return {"data": traces, "layout": layout}


def ttft_tpot_figure(cont: Columns, gpu_colour: dict[str, str]) -> dict[str, Any] | None:
    """Continuous serving: TTFT and TPOT at the grid's percentile against the
    per-replica load, one line per configuration; unstable points are gaps."""
    x_col = "lambda_per_replica_rps" if "lambda_per_replica_rps" in cont else "arrival_rps"
    if x_col not in cont:
        return None
    config = [c for c in ("model", "gpu", "gpus_per_replica", "seq_len", "prompt_tokens", "output_tokens",
                          "batch_size", "max_batched_tokens", "replicas") if c in cont]
    key = row_keys(cont, config)
    order = np.lexsort([cont[x_col], key])
    c = {k: v[order] for k, v in cont.items()}
    key = key[order]
    stable = c["stable"] if "stable" in c else np.ones(len(key), bool)
    traces = []
    shown: set[str] = set()
    for model, gpu in sorted(set(zip(c["model"].tolist(), c["gpu"].tolist()))):
        m = (c["model"] == model) & (c["gpu"] == gpu)
        colour = gpu_colour.get(gpu, "#444")
        for col, ya, name, dash in (("ttft_p_ms", "y", "TTFT", "solid"), ("tpot_p_ms", "y2", "TPOT", "solid")):
            if col not in c:
                continue
            y = np.where(stable[m], c[col][m], np.nan)
            extra = [c[k][m] for k in ("batch_size", "max_batched_tokens") if k in c]
            cols = _gaps(c[x_col][m], y, key[m], *extra)
            traces.append({"type": "scatter", "mode": "lines+markers", "x": cols[0], "y": cols[1], "xaxis": "x" if ya == "y" else "x2",
                           "yaxis": ya, "name": gpu, "legendgroup": gpu, "showlegend": gpu not in shown,
                           "connectgaps": False, "meta": {"model": model, "gpu": gpu},
                           "customdata": np.stack(cols[2:], axis=1) if extra else None,
                           "line": {"color": colour, "width": 1.2, "dash": dash}, "marker": {"size": 4, "color": colour},
                           "hovertemplate": f"load %{{x:,.4g}} req/s per replica<br>{name} %{{y:,.1f}} ms"
                                            + ("<br>B %{customdata[0]}" if extra else "")
                                            + f"<extra>{model} on {gpu}</extra>"})
            shown.add(gpu)
    q = c.get("percentile")
    ql = f"P{100 * float(q[0]):g}" if q is not None and len(q) else "percentile"
    layout = base_layout(
        440, xaxis=axis("load (req/s per replica)", domain=[0, 0.46], anchor="y"),
        yaxis=axis(f"TTFT {ql} (ms)", anchor="x"),
        xaxis2=axis("load (req/s per replica)", domain=[0.54, 1], anchor="y2"),
        yaxis2=axis(f"TPOT {ql} (ms)", anchor="x2"))
    shapes = []
    for col, ya, xa in (("ttft_slo_ms", "y", "x"), ("tpot_slo_ms", "y2", "x2")):
        if col in c:
            v = c[col][finite(c[col])]
            if len(v) and np.all(v == v[0]):
                shapes.append({"type": "line", "xref": f"{xa} domain", "x0": 0, "x1": 1, "yref": ya, "y0": v[0],
                               "y1": v[0], "line": {"color": "#222", "dash": "dash", "width": 1.2}})
    if shapes:
        layout["shapes"] = shapes
    return {"data": traces, "layout": layout}
