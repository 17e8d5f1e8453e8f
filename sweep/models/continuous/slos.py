"""Continuous serving's SLOs, declared once: (short name, latency column, SLO column).

Each is optional (`inf`, the default, sets none); a point meets its SLOs when every latency
at `percentile` is at most its SLO. The model's `slo_checks`, its validation, its
derivation and its views all read this table.
"""

from __future__ import annotations

SLOS: tuple[tuple[str, str, str], ...] = (
    ("TTFT", "ttft_p_ms", "ttft_slo_ms"),
    ("TPOT", "tpot_p_ms", "tpot_slo_ms"),
    ("E2E", "e2e_p_ms", "slo_ms"),
)
#: (latency column, SLO column) pairs: `ServingModel.slo_checks`.
SLO_CHECKS: tuple[tuple[str, str], ...] = tuple((lat, slo) for _, lat, slo in SLOS)
#: The `[grid]` keys that set an SLO.
SLO_KEYS: tuple[str, ...] = tuple(slo for _, _, slo in SLOS)
