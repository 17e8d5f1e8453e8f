"""The simulator as a host pass: measured latencies beside (or instead of) the estimates.

A grid simulates when it has a `[simulation]` table or `latency_model = "simulated"`.
`Simulation` runs the vectorized simulator of the dynamic batcher
(`sweep.models.dynamic.batch_sim`, SPEC 7) on every point of a chunk and adds the `sim_*` columns
and `proxy_rel_err`. With `latency_model = "simulated"` (`SimulatedModel`) it also decides:
the SLO is checked against the simulated percentile, the measured utilisation drives the
operating rules, and with `c` workers sharing a queue a replica keeps up when
lambda T_svc(B) < c B and serves c B / T_svc(B).

A point whose simulated backlog grew across the run (a replication's last quarter of
requests waited on average more than twice as long as its first quarter: `sim_steady`
false) has unbounded simulated latencies, and with latency_model = "simulated" is not
stable: a finite simulation of an unstable queue does not pass for a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from sweep._lazy import lazy_module
from sweep.models.base import HostPass

if TYPE_CHECKING:
    from sweep.grid.spec import SimulationOptions
    from sweep.models.dynamic import batch_sim
else:
    batch_sim = lazy_module("sweep.models.dynamic.batch_sim")

MS = 1e3


class Simulation(HostPass):
    """Simulate one chunk's points (the simulator keys each point's random streams by its
    point id, so the result does not depend on how the grid is chunked)."""

    def __init__(self, options: SimulationOptions, *, decides: bool) -> None:
        self.options = options
        self.decides = decides
        self.trace = np.asarray(options.trace_times) if options.trace_times else None

    def __call__(self, cols: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        o = self.options
        params = {
            "lam": cols["lambda_per_replica_rps"][:n],
            "b_max": cols["batch_size"][:n].astype(np.float64),
            "t_max_s": cols["batch_window_ms"][:n] * 1e-3,
            "t_fixed_s": cols["t_fixed_ms"][:n] * 1e-3,
            "t_req_s": cols["t_req_ms"][:n] * 1e-3,
            "workers": cols["workers"][:n].astype(np.float64),
            "queue_capacity": cols["queue_capacity"][:n],
            "service_cv": cols["service_cv"][:n],
        }
        settings = batch_sim.SimSettings(n_requests=o.n_requests, warmup=o.warmup, replications=o.replications,
                                         seed=o.seed)
        sim = batch_sim.simulate(params, settings, percentile=cols["percentile"][:n], trace=self.trace,
                                 scenario_ids=cols["point_id"][:n], memory_budget_bytes=o.memory_budget_bytes)
        pad = np.minimum(np.arange(len(cols["point_id"])), n - 1)
        sim = {k: np.asarray(v)[pad] for k, v in sim.items()}
        out: dict[str, np.ndarray] = {f"sim_{key}_ms": sim[f"{key}_s"] * MS
                                      for key in ("mean", "p50", "p90", "p99", "p999", "p")}
        out["sim_p_hw_ms"] = sim["p_hw_s"] * MS
        out["sim_mean_batch"] = sim["mean_batch"]
        out["sim_utilization"] = sim["utilization"]
        out["sim_drop_rate"] = sim["drop_rate"]
        out["sim_steady"] = sim["steady"]
        e, m = cols["e_resp_ms"], out["sim_mean_ms"]
        both = np.isfinite(e) & np.isfinite(m) & (m > 0)
        safe_m = np.where(both, m, 1.0)
        out["proxy_rel_err"] = np.where(both, (e - safe_m) / safe_m, np.inf)
        if self.decides:
            workers = cols["workers"].astype(np.float64)
            lam, b = cols["lambda_per_replica_rps"], cols["batch_size"].astype(np.float64)
            # Capacity (c workers serve c B / T_svc(B)) and the measurement agree: a backlog
            # that grew across the run is unstable whatever the formula says.
            out["stable"] = (lam * (cols["t_svc_ms"] * 1e-3) < workers * b) & sim["steady"]
            out["capacity_rps"] = cols["capacity_rps"] * workers
            out["fleet_capacity_rps"] = cols["fleet_capacity_rps"] * workers
            out["latency_ms"] = out["sim_p_ms"]
            out["_rho_rules"] = out["sim_utilization"]  # measured utilisation drives the rules
        return out
