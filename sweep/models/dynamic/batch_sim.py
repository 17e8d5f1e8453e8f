"""Discrete-event Monte-Carlo simulator of a dynamic batcher in front of ``c`` workers.

The model (one replica)
-----------------------
* Arrivals: Poisson at rate ``lam`` (1/s), or a replayed sorted arrival-time trace (s).
* One FIFO queue feeds ``c`` identical workers. Optional capacity ``K`` (``inf`` =
  unlimited): an arrival that finds ``K`` requests *waiting* (arrived, not yet
  dispatched) is dropped and counted.
* Batch formation, one window at a time, strictly FIFO: the oldest waiting request
  opens the window; the batch is dispatched at

      d_k = max(d_{k-1}, F_k, min(t_full, a_opener + T_max))

  where ``F_k`` is the earliest time any worker is free (the batch goes to that
  worker), ``t_full`` the arrival time of the ``B_max``-th waiting request counted from
  the opener, and ``d_{k-1}`` the previous dispatch (the next window opens only after the
  previous batch is dispatched; with ``c = 1`` this term is implied by ``F_k``). The
  batch holds every request waiting at ``d_k`` (arrival <= d_k), at most ``B_max``.
  ``T_max = inf`` is the full-batch regime.
* Service of a batch of size ``b``: ``(t_fixed + t_req * b) * X`` with ``X`` lognormal,
  mean 1, coefficient of variation ``service_cv`` (``X = 1`` when cv = 0). The batch
  *opened by request i* gets ``X = exp(mu + sigma * z[i])`` with ``z`` one standard normal
  per request (openers are distinct, so batches get independent draws, and a reference
  can replay the very same ones).
* Latency of a request = completion of its batch - its arrival.

Conventions that the rule above leaves open (the reference in
``tests/test_simulate.py`` implements the same ones):

* Simultaneous events: arrivals at time ``t`` are processed before a dispatch at ``t``
  (they see the queue the dispatch is about to take from and may join the batch).
* End of input: a final window that can no longer fill (no more arrivals) uses the
  last arrival time of the replication as ``t_full`` (the batcher is flushed when the
  input ends); this touches at most ``B_max - 1`` requests at the very end.

Formulation (``N`` scan steps, elementwise, vectorized over lanes)
------------------------------------------------------------------
One ``lax.scan`` step per *arrival* (``N = warmup + n_requests`` steps, static). Carry
(all lane-scalars except ``d_buf``): ``k`` index of the window being formed, ``nm`` its
member count, ``a_o`` / ``m_o`` opener arrival and noise multiplier, ``t_last`` arrival of
its newest member, ``d_prev`` previous dispatch, ``f_0 <= ... <= f_{C-1}`` the worker free
times (one scalar per static slot, sorted, slots beyond ``c`` held at ``+inf``), ``busy``
service time after ``t0``, and for the admission test a pointer ``g`` and ``d_buf[N+1]``
(dispatch time of batch ``k'``, ``+inf`` until dispatched). At step ``i`` (arrival ``t``):

1. *close* the open window if it is already decided: either it is full (``nm == B``;
   dispatched at ``max(E, min(t_last, a_o + T))``, ``E = max(d_prev, f_0)``) or its timer
   dispatch ``max(E, a_o + T)`` is strictly before ``t`` (it cannot grow any more). The
   two cases are exclusive, so a step closes at most one batch. The batch goes to the
   earliest free worker: with FIFO dispatch the free times are always the ``c`` largest
   completions so far, so the update is "drop ``f_0``, insert ``done`` in sorted order"
   (``2 C`` min/max ops, no argmin/scatter).
2. *admission*: waiting = ``nm`` + ``B`` x (closed batches whose dispatch is ``>= t``). A
   closed batch still waiting at ``t`` is always a full one (a timer-closed batch was
   dispatched before the arrival that closed it), so this is exact. ``g`` = number of
   batches dispatched before ``t`` only moves forward; a ``while_loop`` advances it while
   ``d_buf[g] < t`` (amortized O(1) per step; lanes with ``K = inf`` never iterate, and a
   chunk without any finite ``K`` skips it through a ``lax.cond`` on an unbatched flag).
3. the request (if admitted) joins window ``k`` (opening it if empty). The step emits
   ``batch index`` (-1 if dropped), ``closed?`` and the closed batch's completion.

After the scan a flush closes a pending window, and a reverse elementwise scan carries
"completion of the next batch to close" back to each request: the batch holding request
``i`` is the one closed at the first close step after ``i``. Latency = that - arrival
(``+inf`` if dropped).

Batching: the single-lane function :func:`simulate_lane` is vmapped over (scenario,
replication) lanes with the time axis first (``[N, lanes]``: each scan step reads/writes
one contiguous row, no transposes) and jitted; scenarios are processed in fixed-size
chunks (``max_lanes``; the last chunk is padded), the host sorts one chunk's latencies
for the quantiles while the next chunk runs. Static: ``N``, the worker-slot count
``C_max`` (``max(workers)`` rounded up to a power of two), replications, chunk size;
everything else is traced, so a second call with the same shapes does not recompile.

Randomness: lane ``(scenario s, replication r)`` uses ``fold_in(fold_in(PRNGKey(seed), s),
r)`` (threefry) with ``s`` the *global* scenario index, so results do not depend on
chunking; see ``_draws`` for the transform.

Statistics (per replication over the ``n_requests`` measured arrivals, after
``warmup``): mean and linear-interpolation quantiles (``numpy``'s default) of the
latencies of admitted requests; mean batch size over the batches holding measured
requests; utilization = service time after the first measured arrival / (c x time from
it to the last completion); drop rate = dropped / measured arrivals. Across replications
the point estimate is the mean of the replication estimates and ``p_hw_s`` /
``mean_hw_s`` the 95% Student-t half-width ``t_{0.975, R-1} * sd / sqrt(R)`` (``inf`` with
one replication or when a replication dropped everything).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import ndtri
from numpy.typing import ArrayLike

from sweep.errors import SimulationError
from sweep.models.dynamic.batching import never_fills

__all__ = [
    "LANE_OUT_AXES",
    "PARAM_KEYS",
    "LaneResult",
    "SimSettings",
    "SimulationError",
    "never_fills",
    "replication_draws",
    "simulate",
    "simulate_lane",
    "simulate_requests",
]

PARAM_KEYS = (
    "lam",
    "b_max",
    "t_max_s",
    "t_fixed_s",
    "t_req_s",
    "workers",
    "queue_capacity",
    "service_cv",
)

# Fixed quantiles reported for every scenario (the caller's one goes to ``p_s``).
_FIXED_Q = (0.5, 0.9, 0.99, 0.999)
_STAT_NAMES = ("mean_s", "p50_s", "p90_s", "p99_s", "p999_s", "p_s", "mean_batch", "utilization",
               "drop_rate", "steady")
_LATENCIES = ("mean_s", "p50_s", "p90_s", "p99_s", "p999_s", "p_s")
# Lanes (scenarios x replications) per compiled chunk; bounds memory (~70 B * N per lane).
_DEFAULT_MAX_LANES = 512
_MEM_BUDGET = 2 << 30  # bytes of device buffers per chunk (also caps lanes for long runs)
_BYTES_PER_REQUEST = 80  # per lane and arrival: draws, scan outputs, dispatch buffer, ...
_IN_FLIGHT = 1  # chunks dispatched ahead of the host-side quantile work
_TRACES = 0  # number of times the batched kernel has been traced (compiled)


@dataclass(frozen=True)
class SimSettings:
    n_requests: int = 20_000  # arrivals per replication (after warm-up)
    warmup: int = 2_000  # leading requests discarded from statistics
    replications: int = 8  # independent replications (CI by replication means / t)
    seed: int = 0


class LaneResult(NamedTuple):
    """Raw output of one lane (one scenario, one replication) with ``N`` arrivals.

    admitted:     bool[N], request ``i`` was admitted (not dropped).
    batch_index:  int32[N], batch of request ``i`` in dispatch order, ``-1`` if dropped.
    latency_s:    float64[N], completion - arrival, ``+inf`` if dropped.
    closed:       bool[N], a batch was dispatched while processing arrival ``i`` (before
                  admitting it); the final flush is not included.
    close_done_s: float64[N], completion time of that batch (garbage where not ``closed``).
    n_batches:    int32[], number of dispatched batches (flush included).
    busy_s:       float64[], total service time falling after ``t0`` (see simulate_lane).
    end_s:        float64[], last completion or last arrival, whichever is later.
    measured_*:   over requests ``[warmup:]``: admitted count (int32[]), sum of their
                  latencies (float64[]), number of batches holding them and the number of
                  requests (warm-up ones included) in those batches (int32[]).
    """

    admitted: jax.Array
    batch_index: jax.Array
    latency_s: jax.Array
    closed: jax.Array
    close_done_s: jax.Array
    n_batches: jax.Array
    busy_s: jax.Array
    end_s: jax.Array
    measured_admitted: jax.Array
    measured_latency_sum_s: jax.Array
    measured_batches: jax.Array
    measured_batch_members: jax.Array


# vmap axes of LaneResult for time-major batching (N axis first, lanes second)
LANE_OUT_AXES = LaneResult._make([1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0])


# --------------------------------------------------------------------------------------
# the single-lane event dynamics (this is what gets vmapped)
# --------------------------------------------------------------------------------------


def simulate_lane(
    arrivals: jax.Array,
    z: jax.Array,
    b_max: jax.Array,
    t_max_s: jax.Array,
    t_fixed_s: jax.Array,
    t_req_s: jax.Array,
    workers: jax.Array,
    queue_capacity: jax.Array,
    service_cv: jax.Array,
    t0: jax.Array | float = -np.inf,
    any_capacity: jax.Array | bool = True,
    *,
    max_workers: int,
    warmup: int = 0,
) -> LaneResult:
    """Simulate one replication of one scenario (``lax.scan``, one step per arrival).

    Shapes: ``arrivals`` float64[N] sorted arrival times (s); ``z`` float64[N] standard
    normal service-noise draws (the batch opened by request ``i`` is scaled by
    ``exp(mu + sigma * z[i])``); every parameter a float64 scalar (``b_max``, ``workers``
    integral valued; ``t_max_s``, ``queue_capacity`` may be ``inf``);
    ``t0`` the start of the utilization window (service before ``t0`` is not counted);
    ``any_capacity`` a bool scalar that may be ``False`` only if ``queue_capacity`` is
    infinite: it skips the admission pointer update (pass it *unbatched* under ``vmap`` so
    that the ``lax.cond`` stays a real branch).
    ``max_workers`` (static) >= ``workers`` is the number of worker slots; ``warmup``
    (static) the number of leading requests the ``measured_*`` fields leave out.

    Under ``vmap`` use ``in_axes=1`` for ``arrivals`` / ``z`` and ``out_axes=LANE_OUT_AXES``
    (time-major ``[N, lanes]``): the scan then reads and writes contiguous rows and no
    ``[lanes, N]`` transposes are needed.
    """
    arrivals = jnp.asarray(arrivals, jnp.float64)
    n = arrivals.shape[0]
    z = jnp.asarray(z, jnp.float64)
    b_f = jnp.minimum(jnp.asarray(b_max, jnp.float64).round(), n + 1.0)  # > N never fills
    b = b_f.astype(jnp.int32)
    t_max = jnp.asarray(t_max_s, jnp.float64)
    t_fixed = jnp.asarray(t_fixed_s, jnp.float64)
    t_req = jnp.asarray(t_req_s, jnp.float64)
    cap = jnp.asarray(queue_capacity, jnp.float64)
    finite_cap = jnp.isfinite(cap)
    cv = jnp.asarray(service_cv, jnp.float64)
    t0 = jnp.asarray(t0, jnp.float64)
    sigma2 = jnp.log1p(cv * cv)
    sigma = jnp.sqrt(sigma2)
    mu = -0.5 * sigma2
    c = jnp.asarray(workers, jnp.float64).round()
    # Worker free times, kept sorted ascending as one lane-scalar per slot (elementwise
    # ops only, no reductions); slots >= c hold +inf. With FIFO dispatch to the earliest
    # free worker the free times are always the c largest completion times so far, so
    # dispatching = dropping the smallest (f[0], the worker used) and inserting `done`
    # (>= f[0]) into the sorted list.
    f0 = tuple(jnp.where(j < c, 0.0, jnp.inf) for j in range(max_workers))
    mult = jnp.exp(mu + sigma * z)  # service-noise multiplier of a batch opened by request i

    def close(nm, m_o, d_prev, f, busy, do, d):
        """Dispatch the open window (if ``do``) at ``d`` to the earliest-free worker."""
        done = d + (t_fixed + t_req * nm.astype(jnp.float64)) * m_o
        new = [jnp.minimum(f[j + 1], jnp.maximum(done, f[j])) for j in range(len(f) - 1)]
        new.append(jnp.maximum(done, f[-1]))
        f = tuple(jnp.where(do, nj, fj) for nj, fj in zip(new, f))
        busy = busy + jnp.where(do, jnp.maximum(0.0, done - jnp.maximum(d, t0)), 0.0)
        return f, jnp.where(do, d, d_prev), busy, done

    def step(state, x):
        k, nm, a_o, t_last, m_o, d_prev, f, busy, g, d_buf = state
        t, m_i = x
        e = jnp.maximum(d_prev, f[0])
        timer = a_o + t_max
        full = nm >= b
        d_full = jnp.maximum(e, jnp.minimum(t_last, timer))
        d_time = jnp.maximum(e, timer)
        do = full | ((nm > 0) & (d_time < t))
        d = jnp.where(full, d_full, d_time)
        f, d_prev, busy, done = close(nm, m_o, d_prev, f, busy, do, d)

        k1 = k + do.astype(jnp.int32)

        # Admission test. Closed batches still waiting at t are all full (a timer-closed
        # batch was dispatched before the arrival that closed it), so
        # waiting = nm + B * (k1 - g) with g the number of batches dispatched before t.
        # g only moves forward: advance it while d_buf[g] < t (amortized O(1) per step;
        # d_buf[k'] = dispatch time of batch k', +inf while not dispatched). Lanes with
        # K = inf never advance (their test is always true), so the loop costs them one
        # predicate evaluation per step.
        d_buf = d_buf.at[k].set(jnp.where(do, d, jnp.inf))

        def advance(g):
            g = g + ((d_buf[g] < t) & finite_cap).astype(jnp.int32)  # common case, unrolled
            return lax.while_loop(lambda g: (d_buf[g] < t) & finite_cap, lambda g: g + 1, g)

        g = lax.cond(any_capacity, advance, lambda g: g, g)
        pending = k1 - g
        k = k1
        nm = jnp.where(do, 0, nm)
        waiting = nm.astype(jnp.float64) + b_f * pending.astype(jnp.float64)  # no int overflow
        admit = waiting < cap
        opens = admit & (nm == 0)
        a_o = jnp.where(opens, t, a_o)
        m_o = jnp.where(opens, m_i, m_o)
        t_last = jnp.where(admit, t, t_last)
        nm = nm + admit.astype(jnp.int32)
        return (k, nm, a_o, t_last, m_o, d_prev, f, busy, g, d_buf), (
            jnp.where(admit, k, -1), do, done)

    init = (
        jnp.int32(0), jnp.int32(0), jnp.float64(0.0), jnp.float64(0.0), jnp.float64(1.0),
        jnp.float64(-jnp.inf), f0, jnp.float64(0.0),
        jnp.int32(0), jnp.full((n + 1,), jnp.inf),
    )
    state, (bid, did, done_step) = lax.scan(step, init, (arrivals, mult))
    # end of input: flush the open window (t_full := last arrival if it is not full)
    k, nm, a_o, t_last, m_o, d_prev, f, busy, _, _ = state
    e = jnp.maximum(d_prev, f[0])
    t_fill = jnp.where(nm >= b, t_last, arrivals[-1])
    d_last = jnp.maximum(e, jnp.minimum(t_fill, a_o + t_max))
    flush = nm > 0
    f, _, busy, done_last = close(nm, m_o, d_prev, f, busy, flush, d_last)
    end = arrivals[-1]
    for fj in f:
        end = jnp.maximum(end, jnp.where(jnp.isfinite(fj), fj, -jnp.inf))
    # Request i's batch is the one closed at the first close step j > i (else the flush):
    # a reverse elementwise scan carries "completion of the next batch to close". It also
    # accumulates the per-lane statistics of the measured requests [warmup:] (column
    # reductions over the time-major [N, lanes] arrays are slow on XLA:CPU): it meets all
    # measured requests first, so lo (lowest measured batch) is final when it counts the
    # warm-up members of that batch.
    big = jnp.iinfo(jnp.int32).max

    def back(c, x):
        nxt, i, n_acc, lat_sum, lo, hi, members = c
        closed, done, bi, a = x
        adm = bi >= 0
        lat = jnp.where(adm, nxt - a, jnp.inf)
        meas = adm & (i >= warmup)
        n_acc = n_acc + meas.astype(jnp.int32)
        lat_sum = lat_sum + jnp.where(meas, lat, 0.0)
        lo = jnp.where(meas, jnp.minimum(lo, bi), lo)
        hi = jnp.where(meas, jnp.maximum(hi, bi), hi)
        members = members + (adm & (bi >= lo) & (bi <= hi)).astype(jnp.int32)
        nxt = jnp.where(closed, done, nxt)
        return (nxt, i - 1, n_acc, lat_sum, lo, hi, members), lat

    init_b = (done_last, jnp.int32(n - 1), jnp.int32(0), jnp.float64(0.0), jnp.int32(big),
              jnp.int32(-1), jnp.int32(0))
    (_, _, n_acc, lat_sum, lo, hi, members), latency = lax.scan(
        back, init_b, (did, done_step, bid, arrivals), reverse=True
    )
    return LaneResult(
        bid >= 0, bid, latency, did, done_step, k + flush.astype(jnp.int32), busy, end,
        n_acc, lat_sum, jnp.maximum(hi - lo + 1, 0), members,
    )


# --------------------------------------------------------------------------------------
# randomness
# --------------------------------------------------------------------------------------


def _draws(seed, scenario, rep, lam, n):
    """Poisson arrival times float64[n] (rate ``lam``) and standard normals float64[n].

    One threefry draw of 2 x 32 bits per request: ``-log(u1) / lam`` gaps and
    ``ndtri(u2)`` normals with ``u = (bits + 1/2) / 2**32`` (half the hashing of JAX's
    64-bit samplers; 32-bit resolution is ample here: gaps up to 22.9 / lam, normals
    within +-6.2)."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), scenario), rep)
    bits = jax.random.bits(key, (2, n), dtype=jnp.uint32).astype(jnp.float64)
    u = (bits + 0.5) * 2.0**-32
    gaps = -jnp.log(u[0]) / lam
    # a sequential scan is ~3x faster than XLA:CPU's cumsum (a reduce-window tree)
    _, arrivals = lax.scan(lambda c, x: (c + x, c + x), jnp.zeros_like(lam), gaps)
    return arrivals, ndtri(u[1])


@partial(jax.jit, static_argnames=("n",))
def _draws_jit(seed, scenario, rep, lam, n):
    return _draws(seed, scenario, rep, lam, n)


def replication_draws(
    settings: SimSettings, scenario_index: int, replication: int, lam: float = 1.0,
    n: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The Poisson arrival times (rate ``lam``) and service noise ``z`` that
    :func:`simulate` uses for lane (``scenario_index``, ``replication``).

    ``n`` defaults to ``warmup + n_requests``. With a replayed trace :func:`simulate` uses
    the trace as arrivals and only ``z`` from here (``n = len(trace)``).
    """
    n = settings.warmup + settings.n_requests if n is None else int(n)
    a, z = _draws_jit(
        jnp.uint32(settings.seed), jnp.int32(scenario_index), jnp.int32(replication),
        jnp.float64(lam), n,
    )
    return np.asarray(a), np.asarray(z)


# --------------------------------------------------------------------------------------
# per-request access (one lane), used by tests and diagnostics
# --------------------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("max_workers",))
def _lane_jit(arrivals, z, b_max, t_max, t_fixed, t_req, workers, cap, cv, *, max_workers):
    return simulate_lane(
        arrivals, z, b_max, t_max, t_fixed, t_req, workers, cap, cv, max_workers=max_workers
    )


def simulate_requests(
    arrivals: ArrayLike,
    z: ArrayLike,
    *,
    b_max: float,
    t_max_s: float,
    t_fixed_s: float,
    t_req_s: float,
    workers: float,
    queue_capacity: float = np.inf,
    service_cv: float = 0.0,
    max_workers: int | None = None,
) -> dict[str, np.ndarray]:
    """Per-request outcome of one replication on given arrivals and noise draws.

    ``arrivals``: sorted float64[N] (s); ``z``: float64[>= N] standard normals (the batch
    opened by request ``i`` is scaled by ``exp(mu + sigma z[i])``). Returns
    ``latency_s`` [N] (``+inf`` when dropped), ``dropped`` bool[N], ``batch_index`` int[N]
    (-1 when dropped) and ``completion_s`` [n_batches] (per batch, dispatch order).
    ``max_workers`` (static worker slots, default ``workers`` rounded up to a power of two)
    only matters for compilation reuse.
    """
    a = np.asarray(arrivals, np.float64)
    zz = np.asarray(z, np.float64)[: a.shape[0]]
    if a.ndim != 1 or a.shape[0] == 0 or zz.shape != a.shape:
        raise SimulationError("arrivals must be a non-empty 1-D array and z at least as long")
    if np.any(np.diff(a) < 0):
        raise SimulationError("arrivals must be sorted")
    c_max = _pow2(int(round(workers))) if max_workers is None else int(max_workers)
    if c_max < round(workers):
        raise SimulationError(f"max_workers = {c_max} < workers = {workers}")
    res = _lane_jit(a, zz, b_max, t_max_s, t_fixed_s, t_req_s, workers, queue_capacity,
                    service_cv, max_workers=c_max)
    lat = np.asarray(res.latency_s)
    bid = np.asarray(res.batch_index)
    comp = np.asarray(res.close_done_s)[np.asarray(res.closed)]
    if int(res.n_batches) > comp.shape[0]:  # the final flush
        last = bid.max()
        comp = np.append(comp, (lat + a)[bid == last][0])
    return {"latency_s": lat, "dropped": bid < 0, "batch_index": bid, "completion_s": comp}


# --------------------------------------------------------------------------------------
# batched driver
# --------------------------------------------------------------------------------------


def _lane_stats(res: LaneResult, arrivals, workers, warmup):
    """Per-lane summary (float64[5]) over the measured requests ``[warmup:]``:
    mean latency, admitted count, mean batch size, utilization, drop rate."""
    m = arrivals.shape[0] - warmup
    n_acc = res.measured_admitted
    f64 = jnp.float64
    mean = jnp.where(n_acc > 0, res.measured_latency_sum_s / jnp.maximum(n_acc, 1).astype(f64),
                     jnp.inf)
    n_b = jnp.maximum(res.measured_batches, 1).astype(f64)
    mean_batch = jnp.where(n_acc > 0, res.measured_batch_members.astype(f64) / n_b, 0.0)
    # utilization over [first measured arrival, end of activity]
    span = res.end_s - arrivals[warmup]
    denom = jnp.round(workers) * jnp.where(span > 0, span, 1.0)
    util = jnp.where(span > 0, res.busy_s / denom, 0.0)
    drop_rate = (m - n_acc).astype(f64) / m
    return jnp.stack([mean, n_acc.astype(f64), mean_batch, util, drop_rate]), res.latency_s[warmup:]


@partial(jax.jit, static_argnames=("n", "warmup", "reps", "max_workers", "use_trace"))
def _chunk(seed, scen_idx, p, trace, *, n, warmup, reps, max_workers, use_trace):
    any_capacity = jnp.any(jnp.isfinite(p["queue_capacity"]))  # unbatched: a real branch
    """All lanes of one chunk; ``p`` dict of float64[S].

    Returns stats float64[S * R, 5] and measured latencies float64[n - warmup, S * R]
    (lane ``s * R + r``)."""
    global _TRACES
    _TRACES += 1  # Python side effect: runs once per compilation (tests count it)
    s_count = scen_idx.shape[0]
    lane_s = jnp.repeat(scen_idx, reps)
    lane_r = jnp.tile(jnp.arange(reps, dtype=jnp.int32), s_count)
    lp = {k: jnp.repeat(v, reps) for k, v in p.items()}
    a, z = jax.vmap(_draws, in_axes=(None, 0, 0, 0, None), out_axes=1)(
        seed, lane_s, lane_r, lp["lam"], n
    )
    if use_trace:
        a = jnp.broadcast_to(trace[:, None], a.shape)
    t0 = a[warmup]

    def lane(a, z, b, tm, tf, tr, c, cap, cv, t0):
        return simulate_lane(a, z, b, tm, tf, tr, c, cap, cv, t0, any_capacity,
                             max_workers=max_workers, warmup=warmup)

    res = jax.vmap(lane, in_axes=(1, 1) + (0,) * 8, out_axes=LANE_OUT_AXES)(
        a, z, lp["b_max"], lp["t_max_s"], lp["t_fixed_s"], lp["t_req_s"], lp["workers"],
        lp["queue_capacity"], lp["service_cv"], t0,
    )
    stats, lat = jax.vmap(_lane_stats, in_axes=(LANE_OUT_AXES, 1, 0, None), out_axes=(0, 1))(
        res, a, lp["workers"], warmup
    )
    return stats, lat


def _pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def _validate(params: Mapping[str, ArrayLike], use_trace: bool) -> dict[str, np.ndarray]:
    missing = [k for k in PARAM_KEYS if k not in params and not (k == "lam" and use_trace)]
    if missing:
        raise SimulationError(f"simulate: missing parameter(s) {missing}; need {list(PARAM_KEYS)}")
    arrs = {}
    for k in PARAM_KEYS:
        if k == "lam" and k not in params:
            continue
        v = np.atleast_1d(np.asarray(params[k], dtype=np.float64))
        if v.ndim != 1:
            raise SimulationError(f"simulate: {k} must be 1-D, got shape {v.shape}")
        arrs[k] = v
    sizes = {v.shape[0] for v in arrs.values()}
    if len(sizes) != 1:
        raise SimulationError(f"simulate: parameter arrays differ in length: "
                              f"{ {k: v.shape[0] for k, v in arrs.items()} }")
    (s,) = sizes
    if "lam" not in arrs:
        arrs["lam"] = np.ones(s)

    def bad(key, mask, rule):
        if np.any(mask):
            i = int(np.argmax(mask))
            raise SimulationError(f"simulate: {key}[{i}] = {arrs[key][i]!r}: {rule}")

    bad("lam", ~(np.isfinite(arrs["lam"]) & (arrs["lam"] > 0)), "must be finite and > 0")
    bad("b_max", ~(np.isfinite(arrs["b_max"]) & (arrs["b_max"] >= 1)), "must be finite and >= 1")
    bad("workers", ~(np.isfinite(arrs["workers"]) & (arrs["workers"] >= 1)),
        "must be finite and >= 1")
    bad("t_max_s", np.isnan(arrs["t_max_s"]) | (arrs["t_max_s"] < 0), "must be >= 0 (inf allowed)")
    for key in ("t_fixed_s", "t_req_s", "service_cv"):
        bad(key, ~(np.isfinite(arrs[key]) & (arrs[key] >= 0)), "must be finite and >= 0")
    bad("queue_capacity", np.isnan(arrs["queue_capacity"]) | (arrs["queue_capacity"] < 0),
        "must be >= 0 (inf allowed)")
    return arrs


def simulate(
    params: Mapping[str, ArrayLike],
    settings: SimSettings = SimSettings(),
    percentile: float | ArrayLike = 0.99,
    trace: np.ndarray | None = None,
    *,
    max_lanes: int = _DEFAULT_MAX_LANES,
    max_workers: int | None = None,
    scenario_ids: ArrayLike | None = None,
    memory_budget_bytes: int | None = None,
) -> dict[str, np.ndarray]:
    """Simulate every scenario; returns float64[n_scenarios] arrays (times in seconds).

    ``params``: equal-length 1-D arrays ``lam, b_max, t_max_s, t_fixed_s, t_req_s, workers,
    queue_capacity, service_cv`` (``lam`` unused / optional with ``trace``). ``percentile``
    scalar or per scenario, in [0, 1]. ``trace``: optional sorted 1-D arrival times shared
    by all scenarios and replications (then ``N = len(trace)``, the first
    ``settings.warmup`` are warm-up; replications differ only in service noise).

    Returns ``mean_s, p50_s, p90_s, p99_s, p999_s, p_s`` (replication means), ``p_hw_s`` and
    ``mean_hw_s`` (95% Student-t half-widths across replications), ``mean_batch``,
    ``utilization``, ``drop_rate`` and ``steady`` (bool: no replication's backlog grew, see
    `steady_lanes`). Latencies are ``+inf`` when every request is dropped, and where the
    point is not steady.
    ``max_lanes`` bounds scenarios x replications per compiled chunk (memory, ~70 bytes
    per request per lane). ``max_workers`` is the static number of worker slots (default:
    ``max(workers)`` rounded up to a power of two); pin it when sweeping worker counts so
    that calls with a different maximum reuse the compiled program. ``scenario_ids``: an
    integer per scenario that keys its random streams (default: its position); a grid
    passes its point ids, so results do not depend on how the grid is chunked.
    ``memory_budget_bytes`` bounds the device buffers of one chunk of lanes (default 2 GiB).
    """
    use_trace = trace is not None
    p = _validate(params, use_trace)
    s = p["b_max"].shape[0]
    reps = int(settings.replications)
    if reps < 1 or settings.warmup < 0:
        raise SimulationError("simulate: replications must be >= 1 and warmup >= 0")
    if use_trace:
        tr = np.asarray(trace, np.float64)
        if tr.ndim != 1 or tr.shape[0] <= settings.warmup:
            raise SimulationError(f"simulate: trace must be 1-D with more than warmup = "
                                  f"{settings.warmup} arrivals, got shape {tr.shape}")
        if np.any(~np.isfinite(tr)) or np.any(np.diff(tr) < 0) or tr[0] < 0:
            raise SimulationError("simulate: trace must be finite, >= 0 (workers are free "
                                  "from t = 0) and sorted ascending")
        n = tr.shape[0]
    else:
        if settings.n_requests < 1:
            raise SimulationError("simulate: n_requests must be >= 1")
        n = settings.warmup + settings.n_requests
        tr = np.zeros(1)
    try:
        q = np.broadcast_to(np.asarray(percentile, np.float64), (s,)).copy()
    except ValueError:
        raise SimulationError(f"simulate: percentile must be a scalar or one per scenario "
                              f"({s}), got shape {np.shape(percentile)}") from None
    if np.any(~((q >= 0) & (q <= 1))):
        raise SimulationError(f"simulate: percentile must lie in [0, 1], got {percentile!r}")
    bad_full = never_fills(p["t_max_s"], p["queue_capacity"], p["b_max"])
    if np.any(bad_full):
        i = int(np.argmax(bad_full))
        raise SimulationError(f"simulate: scenario {i}: t_max_s = inf with queue_capacity "
                              f"{p['queue_capacity'][i]} < b_max {p['b_max'][i]}: "
                              "a batch never fills")

    if s == 0:
        return {k: np.empty(0, dtype=bool if k == "steady" else np.float64)
                for k in (*_STAT_NAMES, "p_hw_s", "mean_hw_s")}
    ids = np.arange(s, dtype=np.int64) if scenario_ids is None else np.asarray(scenario_ids, np.int64).reshape(s)
    c_need = int(np.max(np.round(p["workers"])))
    c_max = _pow2(c_need) if max_workers is None else int(max_workers)
    if c_max < c_need:
        raise SimulationError(f"simulate: max_workers = {c_max} < max(workers) = {c_need}")
    # whole scenarios per chunk, bounded by max_lanes and by the memory budget
    budget = _MEM_BUDGET if memory_budget_bytes is None else memory_budget_bytes
    chunk = max(1, min(s, max_lanes // reps, budget // (_BYTES_PER_REQUEST * n * reps)))
    n_chunks = -(-s // chunk)
    out = np.empty((s, reps, len(_STAT_NAMES)))
    qs = np.asarray(_FIXED_Q)

    def submit(ci):
        lo = ci * chunk
        take = np.minimum(np.arange(lo, lo + chunk), s - 1)  # pad with the last scenario
        pc = {k: jnp.asarray(v[take]) for k, v in p.items()}
        return _chunk(
            jnp.uint32(settings.seed), jnp.asarray(ids[take] % (1 << 31), jnp.int32), pc,
            jnp.asarray(tr), n=n, warmup=int(settings.warmup), reps=reps, max_workers=c_max,
            use_trace=use_trace,
        )

    # _IN_FLIGHT chunks dispatched ahead (JAX dispatch is asynchronous): the host sorts
    # one chunk's latencies while the next ones run
    pending = deque(submit(ci) for ci in range(min(_IN_FLIGHT, n_chunks)))
    for ci in range(n_chunks):
        stats, lat = (np.asarray(x) for x in pending.popleft())
        if ci + _IN_FLIGHT < n_chunks:
            pending.append(submit(ci + _IN_FLIGHT))
        lo, hi = ci * chunk, min(s, (ci + 1) * chunk)
        lanes = (hi - lo) * reps
        stats, lat = stats[:lanes], lat[:, :lanes]
        n_acc = stats[:, 1].astype(np.int64)
        probs = np.concatenate(
            [np.broadcast_to(qs, (lanes, qs.size)), np.repeat(q[lo:hi], reps)[:, None]], axis=1
        )
        quant = _sorted_quantiles(np.sort(lat.T, axis=1), n_acc, probs)
        bounded = np.isfinite(np.repeat(p["queue_capacity"][lo:hi], reps))  # a finite queue cannot grow
        steady = np.maximum(steady_lanes(lat), bounded.astype(np.float64))
        o = np.concatenate([stats[:, :1], quant, stats[:, 2:], steady[:, None]], axis=1)
        out[lo:hi] = o.reshape(hi - lo, reps, -1)
    return _aggregate(out, reps)


def steady_lanes(lat: np.ndarray) -> np.ndarray:
    """1.0 per lane (column of `lat`, latencies in arrival order, +inf = dropped) whose
    backlog did not grow across the run, else 0.0: the mean latency of the last quarter of
    measured requests is at most twice that of the first quarter (SPEC 10's rule). The
    caller counts a finite queue (`queue_capacity`) as steady whatever its quarters say: it
    sheds load instead of growing."""
    q = max(1, lat.shape[0] // 4)

    def quarter_mean(x: np.ndarray) -> np.ndarray:
        ok = np.isfinite(x)
        return np.where(ok, x, 0.0).sum(axis=0) / np.maximum(ok.sum(axis=0), 1)

    first, last = quarter_mean(lat[:q]), quarter_mean(lat[-q:])
    return (last <= 2.0 * first).astype(np.float64)


def _sorted_quantiles(srt: np.ndarray, n_acc: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Linear-interpolation quantiles (numpy's default) of the first ``n_acc[l]`` entries
    of each sorted row ``srt[l]``; ``probs`` [lanes, k]; ``+inf`` where ``n_acc == 0``."""
    nn = np.maximum(n_acc, 1)[:, None]
    h = (nn - 1) * probs
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, nn - 1)
    v_lo = np.take_along_axis(srt, lo, axis=1)
    v_hi = np.take_along_axis(srt, hi, axis=1)
    frac = h - lo
    with np.errstate(invalid="ignore"):
        v = np.where(frac > 0, v_lo + frac * (v_hi - v_lo), v_lo)
    return np.where(n_acc[:, None] > 0, v, np.inf)


def _aggregate(out: np.ndarray, reps: int) -> dict[str, np.ndarray]:
    from scipy.stats import t as student_t

    with np.errstate(invalid="ignore"):
        res = {name: out[:, :, j].mean(axis=1) for j, name in enumerate(_STAT_NAMES)}
        tq = student_t.ppf(0.975, reps - 1) if reps > 1 else np.inf

        def hw(x):
            finite = np.all(np.isfinite(x), axis=1)
            if reps < 2:
                return np.full(x.shape[0], np.inf)
            sd = np.where(finite[:, None], x, 0.0).std(axis=1, ddof=1)
            return np.where(finite, tq * sd / np.sqrt(reps), np.inf)

        res["p_hw_s"] = hw(out[:, :, _STAT_NAMES.index("p_s")])
        res["mean_hw_s"] = hw(out[:, :, _STAT_NAMES.index("mean_s")])
    # One replication whose backlog grew makes the point unsteady: a finite simulation of
    # an unstable queue is not a measurement, so its latencies are unbounded.
    steady = out[:, :, _STAT_NAMES.index("steady")].min(axis=1) > 0.5
    res["steady"] = steady
    for key in (*_LATENCIES, "p_hw_s", "mean_hw_s"):
        res[key] = np.where(steady, res[key], np.inf)
    return res
