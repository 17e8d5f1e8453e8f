"""Request-level simulator of disaggregated prefill and decode (SPEC 11), many replications at once.

The model (one replication of one scenario)
-------------------------------------------
``n`` requests arrive, Poisson at ``arrival_rps``. Request ``i`` has ``P_i`` prompt and
``O_i >= 1`` output tokens (``max(1, round(X))``, ``X`` lognormal of the given mean and
CV, as in SPEC 10) and keeps its identity through both pools:

1. **Routing.** It goes to prefill replica ``floor(u_i R_p)`` (``u_i`` uniform: random
   routing; each replica then sees a Poisson stream at ``arrival_rps / R_p``).
2. **Prefill.** Each prefill replica is the seed's dynamic batcher with one worker and no
   queue limit, exactly `sweep.models.dynamic.batch_sim`'s (SPEC 7): window ``T_max``,
   cap ``B_max``, a batch of ``b`` served in ``(t_fixed + t_req b) X`` with ``X``
   lognormal of mean 1 and CV ``prefill_service_cv`` drawn per batch (the opener's
   normal). The request's first token is emitted when its batch ends: ``TTFT = batch
   end - arrival`` = its wait for the window and the worker (``prefill_wait``) + the
   batch's service (``prefill_service``). End of input: at the replication's last
   arrival ``a_end`` a replica's open window that is not full is dispatched at
   ``max(worker free, min(opener + T_max, a_end))`` (the batcher is flushed when the
   input ends; with one prefill replica this is `batch_sim`'s own convention).
3. **Transfer.** A request with ``O >= 2`` then moves its KV cache:
   ``transfer = link_latency_s + kv_bytes_per_token P / link_bytes_per_s`` (a fixed delay
   is ``kv_bytes_per_token = 0``). A request with ``O = 1`` is complete at its first token
   (no transfer, no decode: ``E2E = TTFT``).
4. **Decode.** It arrives at decode replica ``floor(v_i R_d)`` (``v_i`` uniform) at
   ``first token + transfer``. Each decode replica is SPEC 10's continuous-batching
   engine with prompts already cached (`sweep.models.continuous.sim` with
   ``cached=True``): FCFS admission under the cap ``N`` and the reservation ``P + O``
   (paged) within ``C``; no step carries its prompt; ``n_ctx`` counts its ``P`` cached
   tokens; it emits tokens ``2 .. O``, one per step, from the step it is admitted at.
   Arrivals that tie are taken in request order. A request whose reservation exceeds
   ``C`` is rejected, and one that finds ``queue_capacity`` waiting is dropped: neither
   has an E2E (both count in ``drop_rate``).

Per request: ``TTFT = first token - arrival``; ``TPOT = (finish - admission) / (O - 1)``
for ``O >= 2``: the decode pool's own interval between tokens, the mean step over the
request's ``O - 1`` steps, as the analytic ``tpot_*`` columns mean it (docs/disaggregated.md);
``client_TPOT = (finish - first token) / (O - 1)``, what a client measures (the transfer and
the wait for a decode slot are in it); ``E2E = finish - arrival``; and the terms:
``prefill_batching`` (arrival to the earlier of the batch's dispatch and the arrival that
fills it to ``B_max``: the accumulation delay), ``prefill_wait`` (the rest of the wait for
the dispatch: a full batch waiting for the worker), ``prefill_service``, ``transfer``,
``decode_wait`` (decode arrival to admission, the step in progress included) and
``decode_sojourn`` (decode arrival to the last token).

Measurement (as SPEC 10's): requests ``[warmup:]`` in arrival order are measured; per
replication the mean and q-quantile (linear interpolation) of TTFT and ``prefill_wait``
(every measured request), of TPOT, client TPOT, ``decode_wait`` and ``decode_sojourn``
(completed, ``O >= 2``) and of E2E (completed), and the means of the other terms; then
the mean over replications with the 95% Student-t half-width. A replication is not
steady when, between the first and the last quarter of its measured requests, the mean
TTFT or the mean of ``E2E - TTFT`` (the decode side) more than doubles; a scenario with
any such replication is ``stable = False`` with ``+inf`` latencies.

Formulation: the pools are simulated one after the other, each vectorized over all its
replicas of all replications: the requests of each prefill replica (in arrival order) form
one lane of `batch_sim.simulate_lane` (vmapped), padded to a common length with arrivals
at ``+inf`` that only follow the real ones; the decode arrivals of each decode replica
(sorted) form one job of `continuous.sim.simulate_jobs`, padded with requests long after
the replica has drained (checked: a lane whose real requests are not all finished by then
makes its replication not steady). No Python loop runs per request.

Randomness: replication ``r`` of scenario ``s`` draws, per request, its arrival gap,
lengths, both routes and its batch-noise normal from ``fold_in(fold_in(fold_in(
PRNGKey(seed), s), r), _STREAM)`` (six 32-bit draws); decode replica ``d``'s step noise is
`simulate_jobs`'s for job (``s``, ``(r + 1) 2^16 + d``). Results do not depend on chunking.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import ndtri
from numpy.typing import ArrayLike

from sweep.errors import SweepError
from sweep.models.continuous.sim import (
    SCHEDULER_KEYS,
    CBSimSettings,
    lengths,
    percentile_tag,
    simulate_jobs,
    student_t975,
)
from sweep.models.dynamic.batch_sim import simulate_lane

__all__ = [
    "DECODE_KEYS",
    "PARAM_KEYS",
    "PREFILL_KEYS",
    "SYSTEM_KEYS",
    "WORKLOAD_KEYS",
    "DisaggSimSettings",
    "DisaggSimulationError",
    "replication_draws",
    "simulate_disaggregated",
    "simulate_disaggregated_requests",
]

WORKLOAD_KEYS = ("arrival_rps", "prompt_mean", "prompt_cv", "output_mean", "output_cv")
PREFILL_KEYS = ("prefill_b_max", "prefill_t_max_s", "prefill_t_fixed_s", "prefill_t_req_s", "prefill_service_cv")
LINK_KEYS = ("kv_bytes_per_token", "link_bytes_per_s", "link_latency_s")
DECODE_KEYS = tuple(f"decode_{k}" for k in SCHEDULER_KEYS)  # decode_cap, ..., decode_t_fixed (s), ...
SYSTEM_KEYS = ("prefill_replicas", "decode_replicas", *PREFILL_KEYS, *LINK_KEYS, *DECODE_KEYS)
PARAM_KEYS = WORKLOAD_KEYS + SYSTEM_KEYS

_STREAM = 0x0D15A6  # folds the request draws away from the continuous simulator's streams
_DECODE_REP = 1 << 16  # decode replica d of replication r: noise job (r + 1) 2^16 + d
_PAD = 64  # lane lengths are rounded up to a multiple of this (few compiled shapes)
_BYTES_PER_REQUEST = 400  # host and device bytes per request and replication (chunking)
_MEM_BUDGET = 1 << 29
#: measured with their mean and quantiles: (name, which requests: "all" measured or "decoded")
_QUANTILED = (("ttft", "all"), ("tpot", "decoded"), ("e2e", "completed"), ("client_tpot", "decoded"),
              ("decode_wait", "decoded"), ("decode_sojourn", "decoded"), ("prefill_wait", "all"))
#: measured with their mean only (every measured request that has the term)
_TERMS = ("prefill_batching", "prefill_service", "transfer")


class DisaggSimulationError(SweepError, ValueError):
    """Disaggregated-serving simulation input is invalid (shape, domain)."""


#: Replications' sizes and seed: the continuous simulator's (measured arrivals per replication,
#: leading arrivals discarded, replications, seed)
DisaggSimSettings = CBSimSettings
_SETTINGS = DisaggSimSettings()  # the defaults (frozen)


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------


def _validate(params: Mapping[str, ArrayLike], keys: tuple[str, ...], who: str) -> dict[str, np.ndarray]:
    missing = [k for k in keys if k not in params]
    if missing:
        raise DisaggSimulationError(f"{who}: missing parameter(s) {missing}; need {list(keys)}")
    unknown = sorted(set(params) - set(keys))
    if unknown:
        raise DisaggSimulationError(f"{who}: unknown parameter(s) {unknown}")
    arrs = {k: np.atleast_1d(np.asarray(params[k], np.float64)) for k in keys}
    for k, v in arrs.items():
        if v.ndim != 1:
            raise DisaggSimulationError(f"{who}: {k} must be 1-D, got shape {v.shape}")
    if len({v.shape[0] for v in arrs.values()}) != 1:
        raise DisaggSimulationError(f"{who}: parameter arrays differ in length: "
                                    f"{ {k: v.shape[0] for k, v in arrs.items()} }")

    def integer(v, lo):
        return np.isfinite(v) & (v == np.round(v)) & (v >= lo)

    def int_or_inf(v, lo):
        return (v == np.inf) | integer(v, lo)

    rules = [
        (("arrival_rps", "prompt_mean", "output_mean"), lambda v: np.isfinite(v) & (v > 0),
         "must be finite and > 0"),
        (("link_bytes_per_s",), lambda v: v > 0, "must be > 0 bytes/s (inf: no size term)"),
        (("prompt_cv", "output_cv", "prefill_t_fixed_s", "prefill_t_req_s", "prefill_service_cv",
          "kv_bytes_per_token", "link_latency_s", "decode_t_fixed", "decode_t_token", "decode_t_ctx",
          "decode_service_cv"), lambda v: np.isfinite(v) & (v >= 0), "must be finite and >= 0"),
        (("prefill_replicas", "decode_replicas", "prefill_b_max", "decode_cap", "decode_block_tokens"),
         lambda v: integer(v, 1), "must be an integer >= 1"),
        (("prefill_t_max_s",), lambda v: (v >= 0) & ~np.isnan(v), "must be >= 0 seconds (inf: no window)"),
        (("decode_max_batched_tokens",), lambda v: int_or_inf(v, 1), "must be an integer >= 1 or inf"),
        (("decode_kv_capacity_tokens",), lambda v: v > 0, "must be > 0 tokens (inf allowed)"),
        (("decode_queue_capacity",), lambda v: int_or_inf(v, 0), "must be an integer >= 0 or inf"),
    ]
    for names, ok, rule in rules:
        for k in names:
            if k in arrs and not np.all(ok(arrs[k])):
                i = int(np.argmax(~ok(arrs[k])))
                raise DisaggSimulationError(f"{who}: {k}[{i}] = {float(arrs[k][i])!r}: {rule}")
    many = arrs["decode_replicas"] >= _DECODE_REP
    if np.any(many):
        i = int(np.argmax(many))
        raise DisaggSimulationError(f"{who}: decode_replicas[{i}] = {float(arrs['decode_replicas'][i])!r}: must be "
                                    f"< {_DECODE_REP} (each replica keys its own random stream)")
    low = arrs["decode_max_batched_tokens"] < arrs["decode_cap"]
    if np.any(low):
        i = int(np.argmax(low))
        m, c = float(arrs["decode_max_batched_tokens"][i]), float(arrs["decode_cap"][i])
        raise DisaggSimulationError(f"{who}: decode_max_batched_tokens[{i}] = {m!r} < decode_cap {c!r}: the budget "
                                    "must hold one token per running sequence (e.g. 2048 for a cap of 64)")
    return arrs


# --------------------------------------------------------------------------------------
# randomness
# --------------------------------------------------------------------------------------


def _draws(seed, scenario, rep, lam, pm, pcv, om, ocv, n):
    """Arrivals, prompt and output tokens, prefill and decode route uniforms, batch-noise
    normals: float64[n] each (six 32-bit threefry draws per request)."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), scenario), rep),
                             _STREAM)
    u = (jax.random.bits(key, (6, n), dtype=jnp.uint32).astype(jnp.float64) + 0.5) * 2.0**-32
    _, arrivals = lax.scan(lambda c, x: (c + x, c + x), jnp.zeros_like(lam), -jnp.log(u[0]) / lam)
    return arrivals, lengths(ndtri(u[1]), pm, pcv), lengths(ndtri(u[2]), om, ocv), u[3], u[4], ndtri(u[5])


@partial(jax.jit, static_argnames=("n",))
def _draws_rows(seed, sid, rid, lam, pm, pcv, om, ocv, *, n):
    return jax.vmap(_draws, in_axes=(None, 0, 0, 0, 0, 0, 0, 0, None))(seed, sid, rid, lam, pm, pcv, om, ocv, n)


def replication_draws(settings: DisaggSimSettings, scenario_id: int, replication: int, *,
                      arrival_rps: float, prompt_mean: float, prompt_cv: float, output_mean: float,
                      output_cv: float, n: int | None = None) -> dict[str, np.ndarray]:
    """The per-request draws :func:`simulate_disaggregated` uses for replication
    ``replication`` of scenario ``scenario_id``: ``arrival_s``, ``prompt``, ``output``,
    ``route_prefill_u``, ``route_decode_u`` (uniforms in (0, 1)) and ``batch_z`` (standard
    normals), float64[n] each; ``n`` defaults to ``warmup + n_requests``."""
    n = settings.warmup + settings.n_requests if n is None else int(n)
    out = _draws_rows(jnp.uint32(settings.seed), jnp.asarray([scenario_id], jnp.int32),
                      jnp.asarray([replication], jnp.int32),
                      *(jnp.asarray([x], jnp.float64) for x in (arrival_rps, prompt_mean, prompt_cv,
                                                                output_mean, output_cv)), n=n)
    names = ("arrival_s", "prompt", "output", "route_prefill_u", "route_decode_u", "batch_z")
    return {k: np.asarray(v[0]) for k, v in zip(names, out)}


# --------------------------------------------------------------------------------------
# the two pools
# --------------------------------------------------------------------------------------


def _lanes(lane: np.ndarray, n_lanes: int, order: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Requests (flat) grouped into lanes: ``order`` lists the requests lane by lane (each
    lane's in its own order); returns each request's position in its lane, the count per
    lane and the padded lane length (a multiple of ``_PAD`` above every count)."""
    counts = np.bincount(lane, minlength=n_lanes)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.empty(lane.shape[0], np.int64)
    pos[order] = np.arange(order.shape[0]) - start[lane[order]]
    width = -(-(int(counts.max(initial=0)) + 1) // _PAD) * _PAD  # at least one padding entry per lane
    return pos, counts, width


@jax.jit
def _batcher_lanes(a, z, b, tm, tf, tr, cv):
    one, inf = jnp.float64(1.0), jnp.float64(jnp.inf)

    def lane(a, z, b, tm, tf, tr, cv):
        r = simulate_lane(a, z, b, tm, tf, tr, one, inf, cv, any_capacity=False, max_workers=1)
        return r.batch_index, r.closed, r.close_done_s

    return jax.vmap(lane)(a, z, b, tm, tf, tr, cv)


def _prefill(a, zb, rp, sysp, a_end):
    """First-token times, dispatch times, batch service and the time its batch filled to
    ``B_max`` (``inf`` if it never did) of every request ([rows, n]), each prefill replica of
    each row one batcher lane (see the module docstring)."""
    rows, n = a.shape
    reps = sysp["prefill_replicas"].astype(np.int64)
    base = np.concatenate([[0], np.cumsum(reps)[:-1]])
    lane = (base[:, None] + rp).ravel()
    n_lanes = int(reps.sum())
    order = np.argsort(lane, kind="stable")  # lane by lane, each in arrival order
    pos, counts, width = _lanes(lane, n_lanes, order)
    row_of_lane = np.repeat(np.arange(rows), reps)
    la = np.full((n_lanes, width), np.inf)
    lz = np.zeros((n_lanes, width))
    la[lane, pos] = a.ravel()
    lz[lane, pos] = zb.ravel()

    def per_lane(key):
        return sysp[key][row_of_lane]

    b_max, t_max = per_lane("prefill_b_max"), per_lane("prefill_t_max_s")
    tf, tr, cv = per_lane("prefill_t_fixed_s"), per_lane("prefill_t_req_s"), per_lane("prefill_service_cv")
    bid, closed, comp_at = (np.asarray(x) for x in _batcher_lanes(
        *(jnp.asarray(x) for x in (la, lz, b_max, t_max, tf, tr, cv))))
    # batch k of a lane ends at the completion logged by the k-th closing step (every real
    # request's batch closes by the first padding step, except a last window that is
    # not full under T_max = inf, which the end-of-input rule below sets)
    comp = np.full((n_lanes, width + 1), np.nan)
    ll, kk = np.nonzero(closed)
    comp[ll, (np.cumsum(closed, axis=1) - 1)[ll, kk]] = comp_at[ll, kk]
    real = np.arange(width)[None, :] < counts[:, None]
    done = np.where(real, comp[np.arange(n_lanes)[:, None], np.clip(bid, 0, width)], np.nan)
    # batch sizes and openers (a lane's batch indices are non-decreasing along it)
    key = np.where(real, np.arange(n_lanes)[:, None] * (width + 1) + bid, -1).ravel()
    flat_real = real.ravel()
    uk, first_at, size = np.unique(key[flat_real], return_index=True, return_counts=True)
    flat_pos = np.flatnonzero(flat_real)
    opener = flat_pos[first_at]  # flat index (lane * width + position) of each batch's opener
    s2 = np.log1p(cv * cv)
    mult = np.exp(-0.5 * s2[:, None] + np.sqrt(s2)[:, None] * lz).ravel()
    b_of = np.zeros(n_lanes * width)
    o_of = np.zeros(n_lanes * width, np.int64)
    which = np.searchsorted(uk, key[flat_real])
    b_of[flat_real] = size[which]
    o_of[flat_real] = opener[which]
    # a full batch is full at its last member's arrival (members are consecutive in a lane)
    full_of = np.full(n_lanes * width, np.inf)
    last_member = flat_pos[first_at + size - 1]
    full = size >= b_max[last_member // width]
    full_of[flat_real] = np.where(full, la.ravel()[last_member], np.inf)[which]
    svc = (np.repeat(tf, width) + np.repeat(tr, width) * b_of) * mult[o_of]
    done = done.ravel()
    # end of input: a lane's last window, if not full, is dispatched at
    # max(worker free, min(opener + T_max, a_end)) (the scan left it to the padding)
    has = counts > 0
    last = np.arange(n_lanes) * width + np.maximum(counts - 1, 0)
    lo = o_of[last]
    open_last = has & (b_of[last] < b_max)
    prev = lo - 1
    free = np.where(lo % width > 0, done[np.maximum(prev, 0)], -np.inf)
    d_last = np.maximum(free, np.minimum(la.ravel()[lo] + t_max, a_end[row_of_lane]))
    ln = flat_pos // width
    fix = np.zeros(n_lanes * width, bool)
    fix[flat_pos] = open_last[ln] & (o_of[flat_pos] == lo[ln])  # the members of such a window
    done = np.where(fix, np.repeat(d_last, width) + svc, done)
    idx = lane * width + pos
    first = done[idx].reshape(rows, n)
    service = svc[idx].reshape(rows, n)
    return first, first - service, service, full_of[idx].reshape(rows, n)


def _decode(arr_d, pp, oo, rd, go, sysp, sid, rep, seed):
    """Admission and finish times and status ([rows, n]; NaN / -1 where ``go`` is false)
    of the requests that reach the decode pool, each decode replica of each row one job of
    `simulate_jobs` with cached prompts."""
    rows, n = arr_d.shape
    reps = sysp["decode_replicas"].astype(np.int64)
    base = np.concatenate([[0], np.cumsum(reps)[:-1]])
    n_lanes = int(reps.sum())
    ri, ci = np.nonzero(go)
    lane = base[ri] + rd[ri, ci]
    t = arr_d[ri, ci]
    order = np.lexsort((ri * n + ci, t, lane))  # lane by lane, by decode arrival, ties in request order
    pos, _, width = _lanes(lane, n_lanes, order)
    row_of_lane = np.repeat(np.arange(rows), reps)
    par = {k: sysp[f"decode_{k}"][row_of_lane] for k in SCHEDULER_KEYS}
    # padding: requests (P = 1, O = 2) after the lane's real ones have all finished. From
    # the last real arrival on, every step emits a real token while real requests remain,
    # so sum(O - 1) steps of at most step_most (noise-free) drain the lane; the noise
    # allowance exp(6 sigma) is not a bound, hence the check below (`drained`)
    p_real, o_real = pp[ri, ci], oo[ri, ci]
    sig = np.sqrt(np.log1p(par["service_cv"] ** 2))
    kv_most = np.minimum(par["kv_capacity_tokens"], par["cap"] * _lane_max(lane, p_real + o_real, n_lanes))
    step_most = (par["t_fixed"] + par["t_token"] * par["cap"] + par["t_ctx"] * kv_most) * np.exp(6.0 * sig)
    work = np.bincount(lane, weights=(o_real - 1.0), minlength=n_lanes) * step_most
    t_pad = _lane_max(lane, t, n_lanes) + 2.0 * work + 1.0
    la = np.repeat(t_pad[:, None], width, axis=1)
    lp = np.ones((n_lanes, width))
    lo_ = np.full((n_lanes, width), 2.0)
    la[lane, pos], lp[lane, pos], lo_[lane, pos] = t, p_real, o_real
    d = np.arange(n_lanes) - base[row_of_lane]
    res = simulate_jobs(la, lp, lo_, par, scenario_ids=sid[row_of_lane],
                        replications=(rep[row_of_lane] + 1) * _DECODE_REP + d, seed=seed, cached=True)
    status = np.full((rows, n), -1, np.int64)
    admit = np.full((rows, n), np.nan)
    finish = np.full((rows, n), np.nan)
    status[ri, ci] = res["status"][lane, pos]
    admit[ri, ci] = res["admit_s"][lane, pos]
    finish[ri, ci] = res["finish_s"][lane, pos]
    late = np.zeros(n_lanes, bool)
    ok = res["status"][lane, pos] == 0
    np.logical_or.at(late, lane[ok], res["finish_s"][lane, pos][ok] >= t_pad[lane[ok]])
    drained = np.ones(rows, bool)
    np.logical_and.at(drained, row_of_lane, ~late)
    return status, admit, finish, drained


def _lane_max(lane: np.ndarray, v: np.ndarray, n_lanes: int) -> np.ndarray:
    """Per-lane maximum of ``v`` (0 for an empty lane)."""
    out = np.full(n_lanes, -np.inf)
    np.maximum.at(out, lane, v)
    return np.where(np.isfinite(out), out, 0.0)


def _requests(a, pp, oo, rp_u, rd_u, zb, sysp, sid, rep, seed) -> dict[str, np.ndarray]:
    """Per-request outcome of every row (one replication of one scenario each); every
    input [rows, n] except ``sysp`` (per-row system parameters), ``sid`` and ``rep``."""
    rp = np.minimum(np.floor(rp_u * sysp["prefill_replicas"][:, None]), sysp["prefill_replicas"][:, None] - 1)
    rd = np.minimum(np.floor(rd_u * sysp["decode_replicas"][:, None]), sysp["decode_replicas"][:, None] - 1)
    rp, rd = rp.astype(np.int64), rd.astype(np.int64)
    first, dispatch, service, full_at = _prefill(a, zb, rp, sysp, a[:, -1])
    go = oo >= 2.0
    bw = sysp["link_bytes_per_s"][:, None]
    transfer = np.where(go, sysp["link_latency_s"][:, None]
                        + np.where(np.isinf(bw), 0.0, sysp["kv_bytes_per_token"][:, None] * pp / bw), np.nan)
    arr_d = np.where(go, first + transfer, np.nan)
    status_d, admit, finish_d, drained = _decode(arr_d, pp, oo, rd, go, sysp, sid, rep, seed)
    ok = ~go | (status_d == 0)
    finish = np.where(go, np.where(ok, finish_d, np.inf), first)
    with np.errstate(invalid="ignore"):
        tpot = np.where(go & ok, (finish - admit) / np.maximum(oo - 1.0, 1.0), np.nan)
        client_tpot = np.where(go & ok, (finish - first) / np.maximum(oo - 1.0, 1.0), np.nan)
    status = np.where(go, status_d, 0)
    batching = np.minimum(dispatch, full_at) - a
    return {
        "status": status, "prefill_replica": rp, "decode_replica": np.where(go, rd, -1),
        "dispatch_s": dispatch, "first_s": first, "decode_arrival_s": arr_d, "admit_s": admit,
        "finish_s": finish, "ttft_s": first - a, "tpot_s": tpot, "client_tpot_s": client_tpot,
        "e2e_s": np.where(ok, finish - a, np.inf), "prefill_batching_s": batching,
        "prefill_wait_s": dispatch - a - batching, "prefill_service_s": service, "transfer_s": transfer,
        "decode_wait_s": np.where(go & ok, admit - arr_d, np.nan),
        "decode_sojourn_s": np.where(go & ok, finish - arr_d, np.nan), "drained": drained,
    }


# --------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------


def simulate_disaggregated_requests(arrivals: ArrayLike, prompt: ArrayLike, output: ArrayLike,
                                    route_prefill_u: ArrayLike, route_decode_u: ArrayLike,
                                    params: Mapping[str, float], *, batch_z: ArrayLike | None = None,
                                    seed: int = 0, scenario_id: int = 0,
                                    replication: int = 0) -> dict[str, Any]:
    """Per-request outcome of ONE replication on given arrivals, lengths and routes.

    ``arrivals`` sorted float64[n] (s); ``prompt``, ``output`` integers >= 1;
    ``route_prefill_u``, ``route_decode_u`` in [0, 1): request ``i`` goes to prefill replica
    ``floor(u R_p)`` and decode replica ``floor(v R_d)``; ``batch_z`` standard normals (the
    prefill batch opened by request ``i`` is scaled by ``exp(mu + sigma z[i])``; default 0);
    ``params`` one float per key of ``SYSTEM_KEYS``; decode step noise is job
    (``scenario_id``, ``(replication + 1) 2^16 + d``) under ``seed``.

    Returns float64[n] each: ``first_s`` (first token), ``dispatch_s`` (its prefill batch
    starts), ``decode_arrival_s``, ``admit_s`` (decode slot), ``finish_s``; ``ttft_s``,
    ``tpot_s`` (the decode pool's interval), ``client_tpot_s``, ``e2e_s``,
    ``prefill_batching_s``, ``prefill_wait_s`` (their sum: dispatch - arrival),
    ``prefill_service_s``, ``transfer_s``, ``decode_wait_s``, ``decode_sojourn_s`` (NaN where
    a request has no such term: O = 1, or not admitted at decode; ``e2e_s`` is ``inf``
    then); ``status`` (0 completed, 1 dropped
    on a full decode queue, 2 rejected: reservation > C); ``prefill_replica``,
    ``decode_replica`` (-1 for O = 1); ``drained`` (bool: the decode padding came after
    every real request finished, see the module docstring).
    """
    a = np.asarray(arrivals, np.float64)
    pp, oo = np.asarray(prompt, np.float64), np.asarray(output, np.float64)
    up, ud = np.asarray(route_prefill_u, np.float64), np.asarray(route_decode_u, np.float64)
    zb = np.zeros(a.shape) if batch_z is None else np.asarray(batch_z, np.float64)
    if a.ndim != 1 or a.size == 0 or any(x.shape != a.shape for x in (pp, oo, up, ud, zb)):
        raise DisaggSimulationError("simulate_disaggregated_requests: arrivals, prompt, output, routes and "
                                    "batch_z must be equal-length non-empty 1-D arrays")
    if not np.all(np.isfinite(a)) or np.any(np.diff(a) < 0):
        raise DisaggSimulationError("simulate_disaggregated_requests: arrivals must be finite and sorted")
    if np.any(pp < 1) or np.any(oo < 1) or np.any(pp != np.round(pp)) or np.any(oo != np.round(oo)):
        raise DisaggSimulationError("simulate_disaggregated_requests: prompt and output must be integers >= 1")
    if np.any(~((up >= 0) & (up < 1))) or np.any(~((ud >= 0) & (ud < 1))):
        raise DisaggSimulationError("simulate_disaggregated_requests: route uniforms must lie in [0, 1)")
    sysp = _validate(params, SYSTEM_KEYS, "simulate_disaggregated_requests")
    out = _requests(a[None], pp[None], oo[None], up[None], ud[None], zb[None], sysp,
                    np.array([scenario_id]), np.array([replication]), seed)
    res: dict[str, Any] = {k: v[0] for k, v in out.items() if k != "drained"}
    res["drained"] = bool(out["drained"][0])
    return res


def simulate_disaggregated(params: Mapping[str, ArrayLike], settings: DisaggSimSettings = _SETTINGS, *,
                           percentile: float | ArrayLike = 0.99, more_percentiles: tuple[float, ...] = (),
                           scenario_ids: ArrayLike | None = None) -> dict[str, np.ndarray]:
    """Simulate every scenario; float64[S] (bool for ``stable``) per output, SI units.

    ``params``: equal-length 1-D arrays, keys ``PARAM_KEYS``: the workload
    (``arrival_rps`` total 1/s, ``prompt_mean``, ``prompt_cv``, ``output_mean``,
    ``output_cv``), the pools' sizes (``prefill_replicas``, ``decode_replicas``), the
    prefill batcher (``prefill_b_max``, ``prefill_t_max_s`` (inf: no window),
    ``prefill_t_fixed_s``, ``prefill_t_req_s``: T_svc(b) = t_fixed + t_req b,
    ``prefill_service_cv``), the link (``kv_bytes_per_token``, ``link_bytes_per_s`` (inf
    allowed), ``link_latency_s``) and the decode engine (``decode_`` + each of
    `continuous.sim.SCHEDULER_KEYS`: ``decode_cap``, ``decode_max_batched_tokens``,
    ``decode_kv_capacity_tokens``, ``decode_block_tokens``, ``decode_queue_capacity``,
    ``decode_t_fixed``, ``decode_t_token``, ``decode_t_ctx`` in s, ``decode_service_cv``).
    ``percentile`` a scalar or one per scenario; ``more_percentiles`` further quantiles
    from the same runs; ``scenario_ids`` key each scenario's random streams (default:
    positions).

    Returns, for each of ``ttft``, ``tpot`` (the decode pool's interval), ``e2e``,
    ``client_tpot``, ``decode_wait``, ``decode_sojourn``, ``prefill_wait``: ``{m}_mean_s``,
    ``{m}_p_s``, ``{m}_mean_hw_s``, ``{m}_p_hw_s`` (95% half-widths), and ``{m}_p{tag}_s`` /
    ``{m}_p{tag}_hw_s`` per extra quantile (`percentile_tag`); ``{term}_mean_s`` and
    ``{term}_mean_hw_s`` for ``prefill_batching``, ``prefill_service``, ``transfer``;
    ``drop_rate`` (with ``_hw``), ``stable`` and
    ``steady_frac``. Not stable -> every latency, term and half-width is ``+inf``.
    """
    p = _validate(params, PARAM_KEYS, "simulate_disaggregated")
    s = p["arrival_rps"].shape[0]
    reps = int(settings.replications)
    if not 1 <= reps <= 32766 or settings.warmup < 0 or settings.n_requests < 4:
        raise DisaggSimulationError("simulate_disaggregated: replications must be in [1, 32766], warmup >= 0 and "
                                    "n_requests >= 4")
    try:
        q = np.broadcast_to(np.asarray(percentile, np.float64), (s,)).copy()
    except ValueError:
        raise DisaggSimulationError(f"simulate_disaggregated: percentile must be a scalar or one per scenario "
                                    f"({s}), got shape {np.shape(percentile)}") from None
    more = tuple(float(x) for x in more_percentiles)
    if np.any(~((q >= 0) & (q <= 1))) or any(not 0.0 <= x <= 1.0 for x in more):
        raise DisaggSimulationError(f"simulate_disaggregated: percentiles must lie in [0, 1], got {percentile!r} "
                                    f"and {more_percentiles!r}")
    ids = np.arange(s, dtype=np.int64) if scenario_ids is None else np.asarray(scenario_ids, np.int64).reshape(s)
    n = settings.warmup + settings.n_requests
    tags = ["p"] + [f"p{percentile_tag(x)}" for x in more]
    per: dict[str, np.ndarray] = {}
    chunk = max(1, _MEM_BUDGET // (_BYTES_PER_REQUEST * n * reps))
    for lo in range(0, s, chunk):
        rows = np.arange(lo, min(s, lo + chunk))
        r_s, r_r = np.repeat(rows, reps), np.tile(np.arange(reps), rows.size)
        w = {k: jnp.asarray(p[k][r_s]) for k in WORKLOAD_KEYS}
        a, pp, oo, up, ud, zb = (np.asarray(x) for x in _draws_rows(
            jnp.uint32(settings.seed), jnp.asarray(ids[r_s] % (1 << 31), jnp.int32), jnp.asarray(r_r, jnp.int32),
            w["arrival_rps"], w["prompt_mean"], w["prompt_cv"], w["output_mean"], w["output_cv"], n=n))
        sysp = {k: p[k][r_s] for k in SYSTEM_KEYS}
        out = _requests(a, pp, oo, up, ud, zb, sysp, ids[r_s], r_r, settings.seed)
        stats = _replication_stats(out, oo, settings.warmup, [np.repeat(q[rows], reps)] + [
            np.full(r_s.size, x) for x in more], tags)
        for k, v in stats.items():
            per.setdefault(k, np.empty((s, reps)))[rows] = v.reshape(rows.size, reps)
    return _aggregate(per, reps, tags, s)


def _replication_stats(out, oo, warmup, qs, tags) -> dict[str, np.ndarray]:
    """Per row (replication): means and quantiles over the measured requests, drop rate and
    the steady flag (module docstring)."""
    n = oo.shape[1]
    meas = np.arange(n)[None, :] >= warmup
    done = meas & (out["status"] == 0)
    sets = {"all": meas, "decoded": done & (oo >= 2), "completed": done}
    st: dict[str, np.ndarray] = {}
    for m, which in _QUANTILED:
        x = np.where(sets[which], out[f"{m}_s"], np.nan)
        st[f"{m}_mean"] = _nanmean(x)
        for tag, ql in zip(tags, qs):
            st[f"{m}_{tag}"] = _row_quantile(x, ql)
    for term in _TERMS:
        st[f"{term}_mean"] = _nanmean(np.where(meas, out[f"{term}_s"], np.nan))
    st["drop_rate"] = 1.0 - done.sum(axis=1) / meas.sum(axis=1)
    quarter = (n - warmup) // 4
    idx = np.arange(n)[None, :]
    first_q, last_q = meas & (idx < warmup + quarter), meas & (idx >= n - quarter)
    steady = out["drained"].copy()
    dec = out["e2e_s"] - out["ttft_s"]
    for x, m1, m2 in ((out["ttft_s"], first_q, last_q), (dec, first_q & done, last_q & done)):
        f, ell = _nanmean(np.where(m1, x, np.nan)), _nanmean(np.where(m2, x, np.nan))
        steady &= ~((quarter > 0) & np.isfinite(f) & np.isfinite(ell) & (ell > 2.0 * f))
    st["steady"] = steady.astype(np.float64)
    return st


def _nanmean(x: np.ndarray) -> np.ndarray:
    """Row means of the non-NaN entries (``inf`` for a row without any)."""
    c = np.sum(~np.isnan(x), axis=1)
    return np.where(c > 0, np.nansum(x, axis=1) / np.maximum(c, 1), np.inf)


def _row_quantile(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Linear-interpolation q[r]-quantile of the non-NaN entries of each row (``inf`` for a
    row without any)."""
    srt = np.sort(np.where(np.isnan(x), np.inf, x), axis=1)
    c = np.sum(~np.isnan(x), axis=1)
    h = (np.maximum(c, 1) - 1) * q
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(c, 1) - 1)
    r = np.arange(x.shape[0])
    v_lo, v_hi = srt[r, lo], srt[r, hi]
    with np.errstate(invalid="ignore"):
        v = np.where(h > lo, v_lo + (h - lo) * (v_hi - v_lo), v_lo)
    return np.where(c > 0, v, np.inf)


def _aggregate(per: dict[str, np.ndarray], reps: int, tags: list[str], s: int) -> dict[str, np.ndarray]:
    tq = student_t975(reps - 1)

    def mean_hw(x):
        if x.shape[0] == 0:
            return np.empty(0), np.empty(0)
        finite = np.all(np.isfinite(x), axis=1)
        with np.errstate(invalid="ignore"):
            m = x.mean(axis=1)
            if reps < 2:
                return m, np.full(x.shape[0], np.inf)
            sd = np.where(finite[:, None], x, 0.0).std(axis=1, ddof=1)
        return m, np.where(finite, tq * sd / np.sqrt(reps), np.inf)

    def get(key):
        return per.get(key, np.empty((s, reps)))

    steady = get("steady") > 0.5
    stable = np.all(steady, axis=1)
    out: dict[str, np.ndarray] = {}
    for name in [f"{m}_{k}" for m, _ in _QUANTILED for k in ["mean", *tags]] + [f"{t}_mean" for t in _TERMS]:
        m, hw = mean_hw(get(name))
        out[f"{name}_s"] = np.where(stable, m, np.inf)
        out[f"{name}_hw_s"] = np.where(stable, hw, np.inf)
    out["drop_rate"], out["drop_rate_hw"] = mean_hw(get("drop_rate"))
    out["stable"] = stable
    out["steady_frac"] = steady.mean(axis=1) if s else np.empty(0)
    return out
