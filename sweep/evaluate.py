"""Chunked evaluation of a grid: the only place that batches (jit + vmap).

A grid is never materialised. A chunk is `chunk_size` consecutive flat indices; inside one
jitted call each index is decoded into axis coordinates (mixed radix over the axes in
canonical order), the axis values and catalog attributes are gathered, and
`kernels.evaluate_point` is vmapped over the chunk. Every chunk has the same shape (the
last one is padded by repeating the final index and trimmed on the host), so a run
compiles once. Dispatch is asynchronous: `iter_chunks` queues the next chunk's compute
before handing back the current one, so the caller's writing overlaps the next compute.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from sweep import decide, kernels
from sweep.spec import GridSpec

jax.config.update("jax_enable_x64", True)

DEFAULT_CHUNK = 1 << 16
SERVICE_SOURCES = ("given", "fitted", "roofline")


@dataclass(frozen=True)
class Chunk:
    """One evaluated chunk: rows [start, stop) of the grid, columns in file units."""

    index: int
    start: int
    stop: int
    columns: dict[str, np.ndarray]  # per point, (stop - start,)
    rows: dict[str, np.ndarray]  # per (group, replicas) row, (n_rows,); see sweep.decide

    def __len__(self) -> int:
        return self.stop - self.start


class Evaluator:
    """Evaluates a `GridSpec` chunk by chunk. Build once per run; compiles on first use."""

    def __init__(self, spec: GridSpec, chunk_size: int = DEFAULT_CHUNK) -> None:
        self.spec = spec
        self.n_points = spec.n_points
        self.row_size = len(spec.axis("batch_window_ms")) * len(spec.axis("batch_size"))
        self.group_size = self.row_size * len(spec.axis("replicas"))
        # Chunks hold whole groups, so every decision reduces inside one chunk.
        groups = max(1, min(chunk_size, self.n_points) // self.group_size)
        self.chunk_size = groups * self.group_size
        self.n_chunks = math.ceil(self.n_points / self.chunk_size)
        self._axes = axis_arrays(spec)
        self._tables = catalog_tables(spec)
        static = dict(
            keys=tuple(a.key for a in spec.axes),
            shape=spec.shape,
            chunk_size=self.chunk_size,
            row_size=self.row_size,
            n_batch=len(spec.axis("batch_size")),
            n_replicas=len(spec.axis("replicas")),
            **kernel_options(spec),
        )
        self.simulation = spec.simulation
        static["reduce"] = self.simulation is None
        self._fn = _compiled_chunk(tuple(sorted(static.items())))
        if self.simulation is not None:
            self._decide = _compiled_decide(tuple(sorted(dict(
                row_size=self.row_size, n_batch=static["n_batch"], n_replicas=static["n_replicas"],
                use_simulated=spec.options.latency_model == "simulated",
            ).items())))

    def dispatch(self, start: int, stop: int | None = None) -> dict[str, jax.Array]:
        """Queue the chunk of points [start, min(start + chunk_size, stop)) on the device;
        returns device arrays without waiting. `start` is a multiple of the group size."""
        stop = self.n_points if stop is None else stop
        return self._fn(
            jnp.asarray(start, dtype=jnp.int64), jnp.asarray(stop, dtype=jnp.int64), self._axes, self._tables
        )

    def fetch(self, start: int, stop: int | None, device_out: dict[str, jax.Array]) -> Chunk:
        stop = min(start + self.chunk_size, self.n_points if stop is None else stop)
        index = start // self.chunk_size
        host = jax.device_get(device_out)
        n = stop - start
        if self.simulation is not None:
            host = jax.device_get(self._decide(host, self._simulate(host, n)))
        rows = host.pop("_rows")
        n_rows = n // self.row_size
        return Chunk(
            index, start, stop,
            {k: np.asarray(v)[:n] for k, v in host.items()},
            {k: np.asarray(v)[:n_rows] for k, v in rows.items()},
        )

    def chunk(self, index: int) -> Chunk:
        start = index * self.chunk_size
        return self.fetch(start, None, self.dispatch(start))

    def iter_chunks(self, start: int = 0, stop: int | None = None) -> Iterator[Chunk]:
        """Yield the chunks covering points [start, stop) in order, the next one computing
        while the caller handles this one (JAX dispatches asynchronously)."""
        stop = self.n_points if stop is None else stop
        pending: tuple[int, dict[str, jax.Array]] | None = None
        for begin in range(start, stop, self.chunk_size):
            queued = (begin, self.dispatch(begin, stop))
            if pending is not None:
                yield self.fetch(pending[0], stop, pending[1])
            pending = queued
        if pending is not None:
            yield self.fetch(pending[0], stop, pending[1])

    def _simulate(self, host: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        """Simulate the chunk's first `n` points (the rest is padding) and pad the results."""
        from sweep.simulate import SimSettings, simulate

        sim = self.simulation
        assert sim is not None
        params = {
            "lam": host["lambda_per_replica_rps"][:n],
            "b_max": host["batch_size"][:n].astype(np.float64),
            "t_max_s": host["batch_window_ms"][:n] * 1e-3,
            "t_fixed_s": host["t_fixed_ms"][:n] * 1e-3,
            "t_req_s": host["t_req_ms"][:n] * 1e-3,
            "workers": host["workers"][:n].astype(np.float64),
            "queue_capacity": host["queue_capacity"][:n],
            "service_cv": host["service_cv"][:n],
        }
        settings = SimSettings(n_requests=sim.n_requests, warmup=sim.warmup, replications=sim.replications, seed=sim.seed)
        trace = np.asarray(sim.trace_times) if sim.trace_times else None
        out = simulate(params, settings, percentile=host["percentile"][:n], trace=trace,
                       scenario_ids=host["point_id"][:n])
        pad = np.minimum(np.arange(self.chunk_size), n - 1)
        return {k: np.asarray(v)[pad] for k, v in out.items()}

    def compile_count(self) -> int:
        """Number of compiled variants of the chunk function (1 after any number of chunks)."""
        return self._fn._cache_size()  # noqa: SLF001 - jax exposes no public counter


@functools.lru_cache(maxsize=32)
def _compiled_chunk(static: tuple[tuple[str, object], ...]):  # noqa: ANN202 - a jitted callable
    """One jitted chunk function per static configuration, shared by every run in the
    process (a second run of the same grid shape does not compile again)."""
    return jax.jit(functools.partial(_evaluate_chunk, **dict(static)))


def kernel_options(spec: GridSpec) -> dict[str, object]:
    """The static (compile-time) keywords of `evaluate_values` for a grid."""
    return dict(
        windowed=spec.windowed,
        full=spec.full_batch,
        paged=spec.options.kv_allocation == "paged",
        latency_model=spec.options.latency_model,
        service_source=spec.service_source,
        mean_follows=spec.mean_follows_seq_len,
        block_tokens=float(spec.options.block_tokens),
        reserve_fraction=spec.options.reserve_fraction,
    )


def axis_arrays(spec: GridSpec) -> dict[str, jax.Array]:
    """Numeric axis values as float64 device arrays; name axes as their index."""
    out: dict[str, jax.Array] = {}
    for axis in spec.axes:
        if axis.key in ("model", "gpu"):
            out[axis.key] = jnp.arange(len(axis), dtype=jnp.int32)
        else:
            out[axis.key] = jnp.asarray(np.asarray(axis.values, dtype=np.float64))
    return out


def catalog_tables(spec: GridSpec) -> dict[str, jax.Array]:
    """Catalog attributes indexed by the model/gpu axis coordinate."""
    f = lambda xs: jnp.asarray(np.asarray(xs, dtype=np.float64))  # noqa: E731
    return {
        "kv_elems_per_token": f([m.n_layers * m.kv_elems_per_token_per_layer for m in spec.models]),
        "n_params": f([m.n_params for m in spec.models]),
        "active_params": f([m.active_params for m in spec.models]),
        "hbm_bytes": f([g.hbm_bytes for g in spec.gpus]),
        "hbm_bw": f([g.hbm_bandwidth_bytes_per_s for g in spec.gpus]),
        "flops": f([g.bf16_dense_flops for g in spec.gpus]),
        "usd": f([g.usd_per_gpu_hour for g in spec.gpus]),
    }


def _evaluate_chunk(
    offset: jax.Array,
    limit: jax.Array,
    axes: dict[str, jax.Array],
    tables: dict[str, jax.Array],
    *,
    keys: tuple[str, ...],
    shape: tuple[int, ...],
    chunk_size: int,
    row_size: int,
    n_batch: int,
    n_replicas: int,
    reduce: bool,
    **kernel_opts: object,
) -> dict[str, jax.Array]:
    """One chunk: decode, evaluate (`kernel_opts`: see `kernel_options`), and unless the
    grid simulates, reduce to the decisions in the same call."""
    # Past `limit` (the last chunk of a range) repeat the last point; the host trims it.
    idx = jnp.minimum(offset + jnp.arange(chunk_size, dtype=jnp.int64), limit - 1)
    v = decode(idx, axes, keys=keys, shape=shape)
    out = evaluate_values(v, tables, **kernel_opts)  # type: ignore[arg-type]
    out["point_id"] = idx
    if reduce:
        out.update(_reduce(out, row_size, n_batch, n_replicas))
    return out


@functools.lru_cache(maxsize=32)
def _compiled_decide(static: tuple[tuple[str, object], ...]):  # noqa: ANN202 - a jitted callable
    return jax.jit(functools.partial(_decide_simulated, **dict(static)))


def _decide_simulated(
    out: dict[str, jax.Array], sim: dict[str, jax.Array], *, row_size: int, n_batch: int, n_replicas: int, use_simulated: bool
) -> dict[str, jax.Array]:
    """Add the simulator's columns; with latency_model = simulated, check the SLO against the
    simulated percentile; then the decisions (SPEC 6) on the updated columns.

    With c workers a replica keeps up when lambda T_svc(B) < c B, and serves c B / T_svc(B).
    """
    out = dict(out)
    ms = 1e3
    for key in ("mean", "p50", "p90", "p99", "p999", "p"):
        out[f"sim_{key}_ms"] = sim[f"{key}_s"] * ms
    out["sim_p_hw_ms"] = sim["p_hw_s"] * ms
    out["sim_mean_batch"] = sim["mean_batch"]
    out["sim_utilization"] = sim["utilization"]
    out["sim_drop_rate"] = sim["drop_rate"]
    e, m = out["e_resp_ms"], out["sim_mean_ms"]
    both = jnp.isfinite(e) & jnp.isfinite(m) & (m > 0)
    out["proxy_rel_err"] = jnp.where(both, (e - jnp.where(both, m, 1.0)) / jnp.where(both, m, 1.0), jnp.inf)
    if use_simulated:
        workers = out["workers"].astype(jnp.float64)
        lam, b = out["lambda_per_replica_rps"], out["batch_size"].astype(jnp.float64)
        t_svc = out["t_svc_ms"] * 1e-3
        out["stable"] = lam * t_svc < workers * b
        out["capacity_rps"] = out["capacity_rps"] * workers
        out["fleet_capacity_rps"] = out["fleet_capacity_rps"] * workers
        latency = out["sim_p_ms"]
        out["latency_ms"] = latency
        out["slo_ok"] = latency <= out["slo_ms"]
        # Measured utilisation replaces the proxy's rho in the operating rules.
        out["rho_decide"] = out["sim_utilization"]
        out["action"] = kernels.action_code(out["mem_ok"], out["stable"], latency, out["slo_ms"], out["rho_decide"], out["rho_max"], out["rho_min"])
        out["feasible"] = out["stable"] & out["mem_ok"] & jnp.isfinite(latency)
    out.update(_reduce(out, row_size, n_batch, n_replicas))
    return out


def _reduce(out: dict[str, jax.Array], row_size: int, n_batch: int, n_replicas: int) -> dict[str, jax.Array]:
    """SPEC 6 per row and per group, vmapped over the chunk's rows and groups."""
    n_rows = out["feasible"].shape[0] // row_size
    as_rows = lambda x: x.reshape(n_rows, row_size)  # noqa: E731
    row = decide.Row(
        feasible=as_rows(out["feasible"]),
        mem_ok=as_rows(out["mem_ok"]),
        stable=as_rows(out["stable"]),
        latency=as_rows(out["latency_ms"]),
        e_resp=as_rows(out["e_resp_ms"]),
        slo=as_rows(out["slo_ms"]),
        capacity=as_rows(out["capacity_rps"]),
        batch=as_rows(out["batch_size"]).astype(jnp.float64),
        rho=as_rows(out.get("rho_decide", out["rho"])),
        rho_max=as_rows(out["rho_max"]),
    )
    # The frontier: O(K) when capacity depends on the batch column only (the usual case,
    # checked here), else the general sort-based mask. The branch is per chunk, outside
    # vmap, so only one side runs.
    n_win = row_size // n_batch
    cap3 = row.capacity.reshape(n_rows, n_win, n_batch)
    frontier = jax.lax.cond(
        decide.columns_sorted(cap3),
        lambda: jax.vmap(decide.pareto_mask_columns)(
            cap3, row.latency.reshape(n_rows, n_win, n_batch), row.feasible.reshape(n_rows, n_win, n_batch)
        ).reshape(n_rows, row_size),
        lambda: jax.vmap(decide.pareto_mask)(row.capacity, row.latency, row.feasible),
    )
    red = jax.vmap(decide.reduce_row)(row, frontier)
    replicas = as_rows(out["replicas"])[:, 0].astype(jnp.float64).reshape(-1, n_replicas)
    rmin, is_rmin = jax.vmap(decide.reduce_group)(replicas, red["replicas_ok"].reshape(-1, n_replicas))
    pos = jnp.arange(row_size)[None, :]
    rows = dict(red)
    rows["replicas_min"] = jnp.repeat(rmin, n_replicas)
    rows["is_replicas_min"] = is_rmin.reshape(-1)
    return {
        "_rows": rows,
        "on_frontier": frontier.reshape(-1),
        "is_knee": (pos == red["knee_idx"][:, None]).reshape(-1),
        "is_slo_opt": (pos == red["slo_opt_idx"][:, None]).reshape(-1),
    }


def decode(idx: jax.Array, axes: dict[str, jax.Array], *, keys: tuple[str, ...], shape: tuple[int, ...]) -> dict[str, jax.Array]:
    """Flat indices -> every axis's value (mixed radix, innermost axis fastest)."""
    v: dict[str, jax.Array] = {}
    stride = 1
    for key, n in zip(reversed(keys), reversed(shape)):
        coord = (idx // stride) % n if n > 1 else jnp.zeros_like(idx)
        v[key] = axes[key][coord]
        stride *= n
    return v


def evaluate_values(
    v: dict[str, jax.Array],
    tables: dict[str, jax.Array],
    *,
    windowed: bool,
    full: bool,
    paged: bool,
    latency_model: str,
    service_source: str,
    mean_follows: bool,
    block_tokens: float,
    reserve_fraction: float,
) -> dict[str, jax.Array]:
    """Every output column (file units) for points given by their parameter values.

    `v` maps each [grid] key to a 1-D array (model and gpu as catalog-table indices);
    this is what both a grid chunk and a search batch feed the kernel.
    """
    m, g = v["model"], v["gpu"]
    gpus = v["gpus_per_replica"]
    mean_seq = v["seq_len"] if mean_follows else v["mean_seq_len"]
    kv_per_token = tables["kv_elems_per_token"][m] * v["kv_bytes_per_elem"]
    weights = tables["n_params"][m] * v["weight_bytes_per_param"]
    if service_source == "roofline":
        t_fixed, t_req = kernels.roofline_times(
            weights, tables["active_params"][m], kv_per_token, mean_seq, v["tokens_per_request"],
            gpus, tables["hbm_bw"][g], tables["flops"][g], v["eta_bw"], v["eta_flops"],
        )
    else:
        t_fixed, t_req = v["t_fixed_ms"] * 1e-3, v["t_req_ms"] * 1e-3
    lam = v["arrival_rps"] / v["replicas"]
    point = kernels.Point(
        lam=lam,
        b_max=v["batch_size"],
        t_max=v["batch_window_ms"] * 1e-3,
        t_fixed=t_fixed,
        t_req=t_req,
        service_cv=v["service_cv"],
        q=v["percentile"],
        slo=v["slo_ms"] * 1e-3,
        rho_target=v["rho_target"],
        rho_max=v["rho_max"],
        rho_min=v["rho_min"],
        kv_bytes_per_token=kv_per_token,
        seq_len=v["seq_len"],
        mean_seq_len=mean_seq,
        block_tokens=jnp.full_like(lam, block_tokens),
        weights_bytes=weights,
        usable_hbm_bytes=gpus * tables["hbm_bytes"][g] * (1.0 - reserve_fraction),
    )
    kernel = functools.partial(
        kernels.evaluate_point, windowed=windowed, full=full, paged=paged, latency_model=latency_model
    )
    r = jax.vmap(kernel)(point)
    ms = 1e3
    n = lam.shape[0]
    out: dict[str, jax.Array] = {
        "model": m,
        "gpu": g,
        "gpus_per_replica": gpus.astype(jnp.int64),
        "seq_len": v["seq_len"].astype(jnp.int64),
        "mean_seq_len": mean_seq,
        "arrival_rps": v["arrival_rps"],
        "replicas": v["replicas"].astype(jnp.int64),
        "lambda_per_replica_rps": lam,
        "batch_size": v["batch_size"].astype(jnp.int64),
        "batch_window_ms": v["batch_window_ms"],
        "t_fixed_ms": t_fixed * ms,
        "t_req_ms": t_req * ms,
        "service_source": jnp.full((n,), SERVICE_SOURCES.index(service_source), dtype=jnp.int32),
        "weight_bytes_per_param": v["weight_bytes_per_param"],
        "kv_bytes_per_elem": v["kv_bytes_per_elem"],
        "slo_ms": v["slo_ms"],
        "percentile": v["percentile"],
        "rho_target": v["rho_target"],
        "rho_max": v["rho_max"],
        "rho_min": v["rho_min"],
        "workers": v["workers"].astype(jnp.int64),
        "queue_capacity": v["queue_capacity"],
        "service_cv": v["service_cv"],
        "t_svc_ms": r["t_svc"] * ms,
        "capacity_rps": r["capacity"],
        "fleet_capacity_rps": r["capacity"] * v["replicas"],
        "rho": r["rho"],
        "proxy_ok": r["proxy_ok"],
        "stable": r["stable"],
        "mean_batch": r["mean_batch"],
        "e_wait_ms": r["e_wait"] * ms,
        "e_batch_ms": r["e_batch"] * ms,
        "e_svc_ms": r["e_svc"] * ms,
        "e_resp_ms": r["e_resp"] * ms,
        "sd_resp_ms": r["sd_resp"] * ms,
        "p_gauss_ms": r["p_gauss"] * ms,
        "p_exp_ms": r["p_exp"] * ms,
        "latency_ms": r["latency"] * ms,
        "slo_ok": r["slo_ok"],
        "little_l": r["little_l"],
        "in_service": r["in_service"],
        "in_queue": r["in_queue"],
        "b_min_stable": r["b_min_stable"],
        "b_min_stable_int": r["b_min_stable_int"],
        "b_min_rho_target": r["b_min_rho_target"],
        "b_min_rho_target_int": r["b_min_rho_target_int"],
        "kv_gb_per_req": r["kv_bytes_per_req"] * 1e-9,
        "kv_gb_at_cap": r["kv_bytes_per_req"] * v["batch_size"] * 1e-9,
        "kv_waste_frac": r["kv_waste_frac"],
        "weights_gb": weights * 1e-9,
        "free_gb": r["free_bytes"] * 1e-9,
        "weights_fit": r["weights_fit"],
        "b_mem_max": r["b_mem_max"].astype(jnp.int64),
        "mem_ok": r["mem_ok"],
        "feasible": r["stable"] & r["mem_ok"] & jnp.isfinite(r["latency"]),
        "action": r["action"],
        "cost_usd_per_hour": v["replicas"] * gpus * tables["usd"][g],
        "rho_decide": r["rho_rules"],
    }
    if latency_model == "batcher":
        out["batcher_e_resp_ms"] = r["batcher_e_resp"] * ms
        out["batcher_p_ms"] = r["batcher_p"] * ms
        out["batcher_mean_batch"] = r["batcher_mean_batch"]
        out["batcher_rho"] = r["batcher_rho"]
    if service_source == "roofline":
        out["eta_bw"] = v["eta_bw"]
        out["eta_flops"] = v["eta_flops"]
        out["tokens_per_request"] = v["tokens_per_request"]
    return out
