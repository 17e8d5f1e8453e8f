"""The simulator of both pools as a host pass: measured latencies beside (or instead of) the
analytic ones.

A disaggregated grid simulates when it has a `[simulation]` table or `latency_model =
"simulated"`. `DisaggSimulation` runs `sweep.models.disaggregated.sim.simulate_disaggregated`
on every point of a chunk, with the point's own figures (the prefill pool's T_svc(B) line,
the KV per token and the link, the decode pool's step coefficients, KV capacity, cap and
budget), and adds the `sim_*` columns and the relative errors of the analytic means.

With `latency_model = "simulated"` (`SimulatedDisaggregated`) it also decides: the latency
columns the analytic model writes (TTFT, TPOT, E2E, the prefill wait, batching and service,
the decode wait and sojourn) become the simulator's, `stable` its steady-state verdict (and
the memory verdicts), and the SLO checks, `replicas_min` and the other decisions read those.
The columns the simulator does not measure (capacities, utilisations, the decode pool's mean
running count and step time) stay the analytic model's.

The simulator's TPOT is the analytic model's: the decode pool's interval between a
request's tokens, (finish - admission) / (O - 1). What a client measures from its first
token on, (finish - first token) / (O - 1), also counts the KV transfer and the wait for a
decode slot; it is `sim_client_tpot_*`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from sweep._lazy import lazy_module
from sweep.models.base import WHEN_SIMULATION, Column, HostPass

if TYPE_CHECKING:
    from sweep.grid.spec import SimulationOptions
    from sweep.models.disaggregated import sim
else:
    sim = lazy_module("sweep.models.disaggregated.sim")

MS = 1e3
#: The private output of `DisaggregatedModel.point` the simulator needs (bytes of KV per
#: prompt token, what the link carries).
KV_BYTES_PER_TOKEN = "_kv_bytes_per_token"

#: Measured with mean and percentile: (simulator name, what it is, the analytic column it
#: stands for in the simulated model's mean / percentile, "" where none)
MEASURED: tuple[tuple[str, str, str, str], ...] = (
    ("ttft", "TTFT (arrival to the end of the prefill batch)", "ttft_mean_ms", "ttft_p_ms"),
    ("tpot", "TPOT: the decode pool's interval between tokens, (finish - decode admission) / (O - 1)",
     "tpot_mean_ms", "tpot_p_ms"),
    ("e2e", "E2E (arrival to the last token)", "e2e_mean_ms", "e2e_p_ms"),
    ("client_tpot", "client-side TPOT, (finish - first token) / (O - 1): the KV transfer and the wait for a "
                    "decode slot included", "", ""),
    ("decode_wait", "wait for a decode slot (decode arrival to admission, the step in progress included)",
     "decode_wait_mean_ms", "decode_wait_p_ms"),
    ("decode_sojourn", "decode sojourn (decode arrival to the last token)", "decode_sojourn_mean_ms",
     "decode_sojourn_p_ms"),
    ("prefill_wait", "prefill wait: a full batch waiting for the worker (from the arrival that filled it to its "
                     "dispatch)", "prefill_wait_mean_ms", ""),
)
#: Measured with their mean only: (simulator name, what it is, the analytic column)
TERMS: tuple[tuple[str, str, str], ...] = (
    ("prefill_batching", "prefill batching delay (arrival to the earlier of the dispatch and the arrival that "
                         "fills the batch)", "prefill_batching_mean_ms"),
    ("prefill_service", "prefill service of the request's batch", "prefill_service_mean_ms"),
    ("transfer", "KV transfer", ""),
)
#: The relative errors of the analytic means: (column, the analytic mean, the simulator's)
REL_ERRORS: tuple[tuple[str, str, str], ...] = (
    ("ttft_rel_err", "ttft_mean_ms", "sim_ttft_mean_ms"),
    ("tpot_rel_err", "tpot_mean_ms", "sim_tpot_mean_ms"),
    ("e2e_rel_err", "e2e_mean_ms", "sim_e2e_mean_ms"),
)


def _measured_columns() -> list[Column]:
    out = []
    for m, what, _, _ in MEASURED:
        for k, stat, hw in (("mean", "mean", False), ("mean_hw", "mean", True), ("p", "percentile", False),
                            ("p_hw", "percentile", True)):
            half = " (95% half-width across replications)" if hw else ""
            out.append(Column(f"sim_{m}_{k}_ms", "float64", "ms", f"Simulated {stat} {what}{half}; NULL (unbounded) "
                              "where not steady.", WHEN_SIMULATION, "sim_steady"))
    for t, what, _ in TERMS:
        for k, hw in (("mean", False), ("mean_hw", True)):
            half = " (95% half-width across replications)" if hw else ""
            out.append(Column(f"sim_{t}_{k}_ms", "float64", "ms", f"Simulated mean {what}{half}; NULL (unbounded) "
                              "where not steady.", WHEN_SIMULATION, "sim_steady"))
    return out


#: The columns a simulating grid adds (docs/disaggregated.md, "Analytic against the simulator").
SIM_COLUMNS: tuple[Column, ...] = (
    *_measured_columns(),
    Column("sim_drop_rate", "float64", "-",
           "Simulated share of arrivals without an E2E: rejected at decode (a reservation P + O larger than the KV "
           "capacity; the lognormal lengths can draw one).", WHEN_SIMULATION),
    Column("sim_steady", "bool", "-",
           "Every replication reached a steady state (between its first and last quarters neither the mean TTFT nor "
           "the mean decode side doubled) and both pools' memory fits; where false the sim_* latencies are "
           "unbounded (NULL).", WHEN_SIMULATION),
    *(Column(name, "float64", "-", f"(analytic {a} - {s}) / {s}; NULL where either is unbounded.", WHEN_SIMULATION,
             "stable, sim_steady") for name, a, s in REL_ERRORS),
)

#: The analytic columns the simulated model overwrites with the simulator's (NULL where `stable`
#: is false, the simulator's verdict).
DECIDED: tuple[str, ...] = (*(c for _, _, mean, p in MEASURED for c in (mean, p) if c),
                            *(c for _, _, c in TERMS if c))


class DisaggSimulation(HostPass):
    """The simulator of both pools on one chunk's points (each point's random streams are
    keyed by its point id: the result does not depend on the chunking)."""

    def __init__(self, options: SimulationOptions, *, decides: bool, paged: bool, block_tokens: float) -> None:
        self.options = options
        self.decides = decides
        self.block = block_tokens if paged else 1.0

    def params(self, cols: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        """The simulator's inputs (`sim.PARAM_KEYS`, SI units) of the first `n` points."""
        def c(key: str) -> np.ndarray:
            return np.asarray(cols[key][:n], np.float64)

        return {
            "arrival_rps": c("arrival_rps"), "prompt_mean": c("prompt_tokens"), "prompt_cv": c("prompt_cv"),
            "output_mean": c("output_tokens"), "output_cv": c("output_cv"),
            "prefill_replicas": c("prefill_replicas"), "decode_replicas": c("decode_replicas"),
            "prefill_b_max": c("prefill_batch_size"), "prefill_t_max_s": c("prefill_batch_window_ms") / MS,
            "prefill_t_fixed_s": c("prefill_t_svc_fixed_ms") / MS,
            "prefill_t_req_s": c("prefill_t_svc_per_prompt_ms") / MS, "prefill_service_cv": c("service_cv"),
            "kv_bytes_per_token": c(KV_BYTES_PER_TOKEN), "link_bytes_per_s": c("link_bytes_per_s"),
            "link_latency_s": c("link_latency_s"),
            "decode_cap": c("decode_batch_size"), "decode_max_batched_tokens": c("decode_max_batched_tokens"),
            # a point whose memory does not fit is simulated on a token (its verdict is mem_ok's)
            "decode_kv_capacity_tokens": np.maximum(c("decode_kv_capacity_tokens"), 1.0),
            "decode_block_tokens": np.full(n, self.block), "decode_queue_capacity": np.full(n, math.inf),
            "decode_t_fixed": c("decode_step_fixed_ms") / MS, "decode_t_token": c("decode_step_token_ms") / MS,
            "decode_t_ctx": c("decode_step_ctx_ms") / MS, "decode_service_cv": c("service_cv"),
        }

    def __call__(self, cols: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        o = self.options
        settings = sim.DisaggSimSettings(n_requests=o.n_requests, warmup=o.warmup, replications=o.replications,
                                         seed=o.seed)
        res = sim.simulate_disaggregated(self.params(cols, n), settings, percentile=cols["percentile"][:n],
                                         scenario_ids=cols["point_id"][:n])
        pad = np.minimum(np.arange(len(cols["point_id"])), n - 1)
        res = {k: np.asarray(v)[pad] for k, v in res.items()}
        steady = res["stable"].astype(bool) & np.asarray(cols["mem_ok"], bool)
        out: dict[str, np.ndarray] = {}
        for m, _, _, _ in MEASURED:
            for k in ("mean", "mean_hw", "p", "p_hw"):
                out[f"sim_{m}_{k}_ms"] = np.where(steady, res[f"{m}_{k}_s"] * MS, np.inf)
        for t, _, _ in TERMS:
            for k in ("mean", "mean_hw"):
                out[f"sim_{t}_{k}_ms"] = np.where(steady, res[f"{t}_{k}_s"] * MS, np.inf)
        out["sim_drop_rate"] = res["drop_rate"]
        out["sim_steady"] = steady
        for name, a_col, s_col in REL_ERRORS:
            a, s = np.asarray(cols[a_col], np.float64), out[s_col]
            both = np.isfinite(a) & np.isfinite(s) & (s > 0)
            safe = np.where(both, s, 1.0)
            out[name] = np.where(both, (a - safe) / safe, np.inf)
        if self.decides:
            out.update(self.decide(cols, out, steady))
        return out

    @staticmethod
    def decide(cols: Mapping[str, np.ndarray], out: Mapping[str, np.ndarray],
               steady: np.ndarray) -> dict[str, np.ndarray]:
        """The analytic columns the simulator replaces (`DECIDED`, `stable`) and those that
        follow from `stable`: the fleet's output tokens/s and price per token."""
        new: dict[str, np.ndarray] = {"stable": steady}
        for m, _, mean, p in MEASURED:
            for col, k in ((mean, "mean"), (p, "p")):
                if col:
                    new[col] = out[f"sim_{m}_{k}_ms"]
        for t, _, col in TERMS:
            if col:
                new[col] = out[f"sim_{t}_mean_ms"]
        lam, o1 = np.asarray(cols["arrival_rps"], np.float64), np.asarray(cols["output_tokens"], np.float64)
        fleet = np.minimum(lam, np.asarray(cols["capacity_rps"], np.float64)) * o1
        tok_s = np.where(steady, lam * o1, fleet)
        ok = steady & (tok_s > 0)
        new["output_tok_s"] = tok_s
        new["cost_usd_per_mtok"] = np.where(
            ok, np.asarray(cols["cost_usd_per_hour"], np.float64) / np.where(ok, tok_s, 1.0) / 3600.0 * 1e6, np.inf)
        return new
