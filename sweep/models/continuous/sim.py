"""Iteration-level JAX simulator of continuous batching (SPEC 10), many lanes at once.

The model (one replica, one lane = one scenario x one replication)
-------------------------------------------------------------------
Requests arrive (Poisson at ``lam``, or a replayed trace) with ``P`` prompt and ``O >= 1``
output tokens: ``max(1, round(X))``, ``X`` lognormal with the given mean and CV (CV 0:
exactly the mean). The engine runs steps; a step carrying ``n_tok`` new tokens whose
sequences hold ``n_ctx`` cached tokens after it takes
``(t_fixed + t_token n_tok + t_ctx n_ctx) * exp(mu + sigma z_k)`` (lognormal noise of mean
1 and CV ``service_cv``, ``z_k`` one standard normal per step ``k``). The scheduler is
SPEC 10's, rule by rule, with the conventions written out in ``sweep/testing/cb_reference.py``
(the plain-Python reference this module matches request by request):

1. a step starts when the previous one ends, or at the next arrival when idle; an
   arrival at ``a <= s`` is in time for the step starting at ``s``;
2. arrivals join the queue (or are dropped when ``K`` requests are waiting: arrived, not
   admitted, not rejected), then admission from the head, FCFS without skipping:
   reservation ``r = ceil((P + O) / block) block``; ``r > C`` rejected at the head;
   admitted while fewer than ``N`` run and ``r <= C - reserved``;
3. one decode token per running sequence whose prefill is done, then prompt chunks in
   admission order within ``M - decodes``;
4. ``n_ctx`` = cache held once the step's tokens are written (prompt so far + tokens
   emitted before the step);
5. at the step end prefills that complete emit the first token, decoders one token, and
   a sequence with ``O`` tokens leaves.

Formulation: work per event, not per step
-----------------------------------------
Everything the scheduler does is FCFS, so the state is a handful of pointers and sums
per lane, plus the departure steps of the decoding sequences:

* the head ``h`` of the queue is an arrival index (admission, rejection and skipping of
  dropped requests all consume the queue in arrival order);
* admitted requests get consecutive *admission ranks*; prefill proceeds in that order, so
  prefilling sequences are the rank range ``[pf, n_adm)``. Each admitted request stores
  ``bound`` = the total prompt tokens admitted up to and including it; with ``F`` the
  prompt tokens prefilled so far, rank ``j`` has finished its prefill iff
  ``bound[j] <= F``. A step prefills ``min(A - F, M - decodes)`` tokens (``A`` = prompt
  tokens admitted) and advances ``pf`` over the ranks it completes;
* decoding sequences emit one token per step, so a sequence whose first token comes at
  step ``f`` leaves at step ``f + O - 1``: a per-lane table of ``slots >= N`` entries
  holds each decoding sequence's departure step (and the cache and reservation it frees);
  a departure step's end time is logged, and each request's finish time is looked up
  from that log after the loop;
* ``n_ctx`` is a running sum: the cache of running sequences grows by the step's prompt
  chunk and one token per emission, and a departing sequence takes ``P + O`` with it;
  decoders = running - prefilling.

Event jumps: one ``lax.while_loop`` iteration handles, per lane, in SPEC order: the step
start; a window of arrivals joining or dropped; one queue head resolved; once nothing
more can be admitted, a *run*: the step itself and, when no sequence is prefilling, every
following pure-decode step up to the next event (the next departure, the first step
that starts after the queue's head could be admitted, the measurement span's ends, the
end of the noise block) in closed form: step ``i`` of a run lasts ``(alpha + beta i) m_i``
(``m_i`` the noise multiplier), so the run's start offsets are ``alpha G0 + beta G1`` and
its cached-token area needs ``G2`` (``G_p`` prefix sums of ``i^p m_i`` over a block of
512 steps of noise, drawn when a lane reaches the block's end; without noise they are
polynomials). The run's length is the quadratic's root without noise, a binary search in
the prefix sums with it. Then every departure of the run's last step and one prefill
completion. The summation order differs from the reference's step-by-step sums: event
times agree to ~1e-14 relative. Rejections need no write: a request not dropped whose
reservation exceeds ``C`` was rejected.

Lanes: replications are jobs on a fixed set of lanes (an explicit leading axis: ``vmap``
of a ``while_loop`` with a batched predicate would ``select`` every carried array); a
lane whose job ends files its statistics and takes the next one (longest jobs first), so
lanes do not idle behind the slowest replication. Per-lane reads are gathers; per-lane
writes into per-job arrays are loops over the lanes of in-place dynamic-slice updates.

One kernel: on XLA:CPU every fused operation of a loop body is a separately dispatched
"thunk" (~1 us each, and, on a loaded machine, hand-offs between threads that cost far
more), ~300 per iteration here. The whole ``while_loop`` is therefore compiled into a
single kernel: it is a nested ``jit`` whose call is tagged ``xla_cpu_small_call`` (and not
inlinable), the hook XLA:CPU's own small-loop pass uses (``jax.experimental.xla_metadata``).
Such a kernel cannot contain scatters, sorts, custom calls or library fusions, hence
the loops above instead of scatters, integer (not float) reductions, and an associative
scan (not ``cumsum``) for the prefix sums; nor a zero-size array in its state. Inside
it, what costs is the work: ~1.2 us per lane-iteration (benchmarks/cb_sim.py; the
environment variable ``SWEEP_CB_SINGLE_KERNEL=0`` reverts to XLA's default execution).
The ``pin`` divisions by a 1 XLA cannot see through stop it from recomputing a lane's
whole chain of arithmetic in every consumer that broadcasts it over a second axis.

Randomness: lane (scenario id ``s``, replication ``r``) uses ``fold_in(fold_in(PRNGKey(seed),
s), r)``, split into a request key (arrival gaps, prompt and output normals: one 3 x 32-bit
threefry draw per request) and a step key (``z_k = ndtri(u)`` from
``bits(fold_in(step_key, k))``): results do not depend on chunking or lane order, and
:func:`step_normals` / :func:`replication_draws` give a reference the very same draws.

Statistics (SPEC 10, "Measurement conventions"; per replication, then averaged over
replications with 95% Student-t half-widths): requests ``[warmup:]`` are measured; mean
and q-quantile (linear interpolation) of TTFT, TPOT (O >= 2) and E2E over the admitted
ones; over the span from the first to the last measured arrival the time-average running
count, reserved KV / C (``kv_util``; 0 when C is infinite) and cached KV / C
(``kv_cached_util``), output tokens emitted per second, and the mean duration of the
steps that start in it; the drop rate (queue-full drops plus rejections). A replication
is not steady when the mean TTFT of the admitted requests among its last quarter of
measured arrivals exceeds twice that among its first quarter; a scenario with any such
replication has ``stable = False`` and ``+inf`` latencies.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.xla_metadata import set_xla_metadata
from jax.scipy.special import betainc, ndtri
from numpy.typing import ArrayLike

from sweep.errors import SweepError

__all__ = [
    "PARAM_KEYS",
    "SCHEDULER_KEYS",
    "CBSimSettings",
    "CBSimulationError",
    "lengths",
    "percentile_tag",
    "replication_draws",
    "simulate_continuous",
    "simulate_jobs",
    "simulate_requests",
    "step_normals",
    "student_t975",
]

PARAM_KEYS = (
    "lam", "prompt_mean", "prompt_cv", "output_mean", "output_cv", "cap",
    "max_batched_tokens", "kv_capacity_tokens", "block_tokens", "queue_capacity",
    "t_fixed", "t_token", "t_ctx", "service_cv",
)
DROPPED, REJECTED = 1, 2
_STATS = ("ttft_mean", "tpot_mean", "e2e_mean", "ttft_p", "tpot_p", "e2e_p", "mean_running",
          "step_mean", "output_tok_s", "kv_util", "kv_cached_util", "drop_rate")
_MEM_BUDGET = 1 << 30  # bytes of per-request device buffers per chunk
_BYTES_PER_REQUEST = 112  # per lane and request: draws, state, outputs
_DEFAULT_MAX_LANES = 512  # replications (jobs) per compiled chunk
_DEFAULT_LANES = 64  # lanes simulating them: a lane that finishes a job takes the next
_TRACES = 0  # compilations of the batched kernel (tests count them)
_NOISE_BLOCK = 512  # steps of service noise a lane holds at a time (prefix sums)
_ARR_WINDOW = 8  # arrivals joining or dropped per iteration (finite queue)
_L_CAP = 1 << 30  # the longest run; also an empty departure slot
# XLA:CPU splits loop fusions that read large arrays over its thread pool; at a few
# microseconds per operation the hand-offs cost more than they save (and much more on a
# loaded machine), so the simulator's kernels run on one thread
_XLA_OPTIONS = {"xla_disable_hlo_passes": "cpu-parallel-task-assigner"}
# `jax.jit(compiler_options=...)` and `set_xla_metadata` on a value (not only as a context
# manager) arrived after the oldest JAX this package supports (0.4.35, .ci/floors): there
# the simulator runs with XLA's defaults, the same algorithm and draws, only slower
_JIT_OPTIONS: dict[str, Any] = (
    {"compiler_options": _XLA_OPTIONS} if "compiler_options" in inspect.signature(jax.jit).parameters else {})
_TAGS_VALUES = "x" in inspect.signature(set_xla_metadata).parameters
# The engine loop is compiled into ONE kernel (see _run); SWEEP_CB_SINGLE_KERNEL=0 falls
# back to XLA's default (one runtime dispatch per fused operation, ~5x slower here)
_SINGLE_KERNEL = os.environ.get("SWEEP_CB_SINGLE_KERNEL", "1") != "0" and _TAGS_VALUES


def _lane_set(writes, n_lanes):
    """Per-lane writes: for each ``(x, idx, v, m)`` of ``writes``,
    ``x[idx[0][j], idx[1][j], ...] = v[j]`` for every lane ``j`` with ``m[j]``; returns
    the updated arrays. One loop over the lanes of in-place dynamic-slice updates, not
    scatters, which the single-kernel loop (see :func:`_run`) cannot contain; there a lane
    costs a few nanoseconds per write."""
    if not _SINGLE_KERNEL:  # scatters; a masked lane writes out of bounds (dropped)
        return [x.at[(jnp.where(m, idx[0], x.shape[0]), *idx[1:])].set(v, mode="drop")
                for x, idx, v, m in writes]

    def body(j, xs):
        out = []
        for x, (_, idx, v, m) in zip(xs, writes):
            k = len(idx)
            size = (1,) * k + x.shape[k:]
            start = tuple(i[j].astype(jnp.int32) for i in idx) + (jnp.int32(0),) * (x.ndim - k)
            old = lax.dynamic_slice(x, start, size)
            out.append(lax.dynamic_update_slice(x, jnp.where(m[j], v[j].reshape(size), old),
                                                start))
        return out

    return lax.fori_loop(0, n_lanes, body, [w[0] for w in writes])


class CBSimulationError(SweepError, ValueError):
    """Continuous-batching simulation input is invalid (shape, domain)."""


@dataclass(frozen=True)
class CBSimSettings:
    n_requests: int = 4_000  # measured arrivals per replication
    warmup: int = 500  # leading arrivals discarded
    replications: int = 4
    seed: int = 0


class _Params(NamedTuple):
    """Per-lane scheduler parameters, float64[L] each."""

    cap: jax.Array
    budget: jax.Array  # M (inf allowed)
    kv: jax.Array  # C (inf allowed)
    block: jax.Array
    queue: jax.Array  # K (inf allowed)
    t_fixed: jax.Array
    t_token: jax.Array
    t_ctx: jax.Array
    cv: jax.Array


class _Out(NamedTuple):
    status: jax.Array  # int32[L, n]: 0 admitted, 1 dropped (queue full), 2 rejected (r > C)
    admit_s: jax.Array  # float64[L, n]: step start at admission (inf if not admitted)
    first_s: jax.Array
    finish_s: jax.Array
    steps: jax.Array  # int32[L]: steps run
    stats: jax.Array  # float64[L, 6]: areas of running, reserved, cached; tokens in span;
    #                    duration sum and count of steps starting in span
    rec: jax.Array  # float64[L, R, 8] per-step records (R static, may be 0)


# --------------------------------------------------------------------------------------
# the engine, all lanes of a chunk at once
# --------------------------------------------------------------------------------------


def _prefix_sums(x):
    """Inclusive prefix sums along the last axis (an associative scan: element-wise
    operations only, which the single-kernel loop can contain; ``jnp.cumsum`` lowers to a
    reduce-window, quadratic in the length on XLA:CPU)."""
    return lax.associative_scan(jnp.add, x, axis=x.ndim - 1)


def _run(a, prompt, output, p: _Params, noise, t0, t1, *, slots: int, block: int, record: int,
         max_iters: jax.Array, n_lanes: int, prefill_first: bool = False, cached: bool = False) -> _Out:
    """Simulate J jobs (replications) on ``n_lanes`` (static, <= J) lanes. ``a``,
    ``prompt``, ``output`` float64[J, n] (sorted arrivals, integer-valued lengths); ``p``
    float64[J] per job; ``noise(job, ks)`` -> float64[B] the standard normals of steps
    ``ks`` (int32[B]) of one job (int32 scalar); ``t0``/``t1`` float64[J] the measurement
    span. Static: ``slots`` a power of two >= every job's cap (running sequences);
    ``block`` the steps of noise a lane holds at a time; ``record``
    per-step records kept for lane 0's first job (0 = none); ``prefill_first``: the
    scheduler policy of that name (a step with prompt tokens carries no decode token);
    ``cached``: prompts arrive already cached (see :func:`simulate_requests`; every
    ``output >= 2``): an admitted request goes straight to the decoding table (departure at
    decode step ``kd + O - 2``, ``kd`` the decode clock when it is admitted), its cache
    ``P + 1`` (prompt and first token) joins the running sum, and the first column of ``fs``
    holds its admission time.

    Departures are kept on the *decode clock* ``kd``, the steps that carried every decoding
    sequence's token: every step under ``chunked`` (``kd == k``), the steps without prompt
    tokens under ``prefill_first``. A sequence whose prefill completes when ``kd`` steps
    have decoded emits its last token at the end of decode step ``kd + O - 2``.

    A lane that finishes its job takes the next one (a work queue). One loop iteration
    handles, per lane, in SPEC order: the step start (phase 0); up to ``_ARR_WINDOW``
    arrivals joining or dropped; one head of the queue resolved (phase 1); then, once
    nothing more can be admitted, a *run*: the step itself, and when no sequence is
    prefilling, every following step up to the next event (the next departure, the
    step at which the head of the queue can be admitted, the end of the noise block, the
    measurement span's ends) in closed form; then every departure of the run's last step
    and one prefill completion (phase 2). A lane with several admissions or completions
    at one step spends extra iterations on them.
    """
    n_jobs, n = a.shape
    f64, i32 = jnp.float64, jnp.int32
    lane = jnp.arange(n_lanes, dtype=i32)
    i64 = jnp.int64
    big = jnp.int32(_L_CAP)
    req = jnp.stack([a, prompt, output], axis=2)  # [J, n, 3]: one gather reads a request

    zero_i = jnp.zeros(n_lanes, i32)
    zero_f = jnp.zeros(n_lanes, f64)
    inf_l = jnp.full(n_lanes, jnp.inf)
    fresh = dict(  # a lane's scalar state at the start of a job
        k=zero_i, kd=zero_i, t=jnp.full(n_lanes, -jnp.inf), start=zero_f, ph=zero_i, h=zero_i, ia=zero_i,
        q=zero_i, dlo=jnp.full(n_lanes, -1, i32), dhi=jnp.full(n_lanes, -1, i32),
        running=zero_i, n_adm=zero_i, pf=zero_i, reserved=zero_f, cache=zero_f,
        adm_tok=zero_f, pre_tok=zero_f, nb=inf_l, nj=zero_f, np_=zero_f, no=zero_f,
        logn=zero_i, bs=jnp.full(n_lanes, -block, i32),
        stats=jnp.zeros((n_lanes, 6), f64))

    def job_inputs(job):
        """Per-lane copies of a job's parameters and span."""
        jc = jnp.minimum(job, n_jobs - 1)
        return dict(pl=_Params(*(v[jc] for v in p)), t0=t0[jc], t1=t1[jc])

    st = dict(
        fresh, **job_inputs(lane), job=lane, next_job=jnp.int32(n_lanes),
        fs=jnp.full((n_jobs, n, 2), jnp.inf),  # per request: first-token time, departure step
        logk=jnp.full((n_jobs, n), big), logt=jnp.zeros((n_jobs, n), f64),
        ring=jnp.zeros((n_lanes, slots, 4), f64),  # prefilling ranks: bound, request, P, O
        dep=jnp.full((n_lanes, slots), big),  # decoding sequences: departure step (big: free)
        pay_c=jnp.zeros((n_lanes, slots), i64),  # ... their cache at departure (P + O)
        pay_r=jnp.zeros((n_lanes, slots), i64),  # ... and reservation
        nzb=jnp.zeros((n_lanes, block + 1, 4), f64),  # noise: prefix sums
        out_stats=jnp.zeros((n_jobs, 6), f64), out_steps=jnp.zeros(n_jobs, i32),
        it=jnp.int32(0),
        one=jnp.where(jnp.isnan(a[0, 0]), 2.0, 1.0),  # 1, unknown to the compiler (pin)
    )
    # optional state only when used (a zero-size array in the single-kernel loop trips
    # XLA:CPU's emitter)
    st["skip"] = jnp.zeros((n_jobs, n), i32)  # a dropped range [lo, hi): skip[lo] = hi
    if record:
        st["admit_s"] = jnp.full((n_jobs, n), jnp.inf)
        st["rec"] = jnp.zeros((n_lanes, record, 8), f64)

    def pin(s, *xs):
        """The values ``xs`` (float64, int32 or bool [L] each) computed once, here. XLA
        fuses element-wise producers into their consumers; a consumer that broadcasts a
        lane value over a second axis (a search over steps, the slot table) would
        recompute the whole chain of per-lane arithmetic behind it per element. A float
        division is "expensive" to XLA, so it is neither duplicated nor fused into such
        consumers: dividing the stacked values by a 1 it cannot see through materialises
        them (exactly: x / 1 == x) in one fused loop."""
        m = jnp.stack([x.astype(f64) for x in xs], axis=1) / s["one"]
        return tuple(m[:, i] != 0.0 if x.dtype == jnp.bool_ else m[:, i].astype(x.dtype)
                     for i, x in enumerate(xs))

    def alive_of(s):
        return (s["job"] < n_jobs) & ((s["running"] > 0) | (s["h"] < n) | (s["ph"] == 2))

    def regenerate(s, alive):
        """Lanes whose run reached the end of their noise block draw the next block:
        multipliers ``m`` of the steps ``[bs, bs + B)`` and prefix sums of ``m``, ``i m``,
        ``i^2 m`` (``i`` the step's index in the block), one lane at a time."""
        noisy = s["pl"].cv > 0.0
        need = alive & noisy & (s["k"] >= s["bs"] + block)
        sig2 = jnp.log1p(s["pl"].cv * s["pl"].cv)
        jj = jnp.arange(block, dtype=f64)

        def body(c):
            need, nzb, bs = c
            ln = jnp.argmax(need).astype(i32)
            k0 = (s["k"][ln] // block) * block
            z = noise(s["job"][ln], k0 + jnp.arange(block, dtype=i32))
            m = jnp.exp(-0.5 * sig2[ln] + jnp.sqrt(sig2[ln]) * z)
            cs = _prefix_sums(jnp.stack([m, jj * m, jj * jj * m], axis=0)).T  # [B, 3]
            row = jnp.concatenate([jnp.concatenate([jnp.zeros((1, 3), f64), cs], axis=0),
                                   jnp.concatenate([m, jnp.zeros(1, f64)])[:, None]], axis=1)
            nzb = lax.dynamic_update_slice(nzb, row[None], (ln, jnp.int32(0), jnp.int32(0)))
            hit = lane == ln
            return need & ~hit, nzb, jnp.where(hit, k0, bs)

        _, s["nzb"], s["bs"] = lax.while_loop(lambda c: jnp.any(c[0]), body,
                                              (need, s["nzb"], s["bs"]))

    def iteration(s):
        s = dict(s)
        alive = alive_of(s)
        regenerate(s, alive)
        job = s["job"]
        jc = jnp.minimum(job, n_jobs - 1)
        p = s["pl"]  # this lane's job's parameters
        t0, t1 = s["t0"], s["t1"]

        later: list[tuple[str, tuple, Any, Any]] = []  # per-lane writes read after the loop

        def putj(key, i, v, m, now=False):  # per-job arrays [J, m]
            w = (key, (job, i), v, m & (i >= 0) & (i < s[key].shape[1]))
            if now:
                (s[key],) = _lane_set([(s[key], *w[1:])], n_lanes)
            else:
                later.append(w)

        def reserve(pp, oo):
            return jnp.ceil((pp + oo) / p.block) * p.block

        def head(h):
            """The head of the queue at or after ``h`` (skipping a dropped range) and its
            arrival, prompt and output."""
            sk = s["skip"][jc, jnp.clip(h, 0, n - 1)]
            h = jnp.where((sk > h) & (h < n), sk, h)
            row = req[jc, jnp.clip(h, 0, n - 1)]
            return h, row[:, 0], row[:, 1], row[:, 2]

        # -- phase 0: the step start (when the previous step ends, or the next arrival) ---
        ph0 = alive & (s["ph"] == 0)
        # arrivals in a window from the next one to join or drop
        widx = s["ia"][:, None] + jnp.arange(_ARR_WINDOW + 1, dtype=i32)[None, :]
        aw = req[jc[:, None], jnp.clip(widx, 0, n - 1), 0]
        nxt_a = jnp.where(s["q"] > 0, s["t"], aw[:, 0])  # someone waiting: no idling
        start = jnp.where(ph0, jnp.where(s["running"] > 0, s["t"], jnp.maximum(s["t"], nxt_a)),
                          s["start"])
        s["start"] = start
        s["ph"] = jnp.where(ph0, 1, s["ph"])
        in1 = alive & (s["ph"] == 1)
        # -- phase 1a: arrivals in time for this step join, or are dropped (finite K) -------
        inw = (aw <= start[:, None]) & (widx < n)
        c = jnp.where(in1, jnp.sum(inw[:, :_ARR_WINDOW], axis=1).astype(i32), 0)
        room = jnp.maximum(p.queue - s["q"].astype(f64), 0.0)
        join = jnp.minimum(c.astype(f64), room).astype(i32)
        lo, hi = s["ia"] + join, s["ia"] + c
        drop = c > join
        # a dropped range [lo, hi) extends the previous one when adjacent and not yet
        # passed by the head; the head jumps a whole range (skip[lo] = hi)
        merge = (lo == s["dhi"]) & (s["h"] <= s["dlo"])
        at = jnp.where(merge, s["dlo"], lo)
        putj("skip", at, hi, drop, now=True)  # read by head() below
        s["dlo"] = jnp.where(drop, at, s["dlo"])
        s["dhi"] = jnp.where(drop, hi, s["dhi"])
        s["q"] = s["q"] + join
        s["ia"] = s["ia"] + c
        arrivals_done = ~(in1 & inw[:, _ARR_WINDOW])
        adm_ok = in1 & arrivals_done

        # -- phase 1b: resolve the head of the queue (skip dropped, reject, admit) ----------
        def resolvable(h, ha, hp, ho, running, reserved):
            r = reserve(hp, ho)
            over = r > p.kv
            fits = (running.astype(f64) < p.cap) & (r <= p.kv - reserved)
            arrived = ha <= start
            arrived = arrived & (h < s["ia"])
            return (h < n) & arrived & (over | fits), over, fits, r

        h, ha, hp, ho = head(s["h"])
        ok, over, _, r = resolvable(h, ha, hp, ho, s["running"], s["reserved"])
        can = adm_ok & ok
        adm = can & ~over  # a rejection (over) needs no write: status is derived
        if record:
            putj("admit_s", h, start, adm)
        if cached:  # no prefill: straight to the decoding table, token 2 at step k's end
            d_adm = s["kd"] + ho.astype(i32) - 2
            slot = jnp.argmax(s["dep"] == big, axis=1).astype(i32)
            hot = adm[:, None] & (jnp.arange(slots, dtype=i32)[None, :] == slot[:, None])
            s["dep"] = jnp.where(hot, d_adm[:, None], s["dep"])
            s["pay_c"] = jnp.where(hot, (hp + ho).astype(i64)[:, None], s["pay_c"])
            s["pay_r"] = jnp.where(hot, r.astype(i64)[:, None], s["pay_r"])
            s["cache"] = s["cache"] + jnp.where(adm, hp + 1.0, 0.0)
            later.append(("fs", (job, h), jnp.stack([start, d_adm.astype(f64)], axis=1),
                          adm & (job < n_jobs)))
        else:
            adm_tok = s["adm_tok"] + jnp.where(adm, hp, 0.0)
            row = jnp.stack([adm_tok, h.astype(f64), hp, ho], axis=1)
            (s["ring"],) = _lane_set([(s["ring"], (lane, s["n_adm"] & (slots - 1)), row, adm)],
                                     n_lanes)
            first_rank = adm & (s["n_adm"] == s["pf"])  # it is the next prefill to complete
            s["nb"] = jnp.where(first_rank, adm_tok, s["nb"])
            s["nj"] = jnp.where(first_rank, h.astype(f64), s["nj"])
            s["np_"] = jnp.where(first_rank, hp, s["np_"])
            s["no"] = jnp.where(first_rank, ho, s["no"])
            s["adm_tok"] = adm_tok
            s["n_adm"] = s["n_adm"] + adm.astype(i32)
        s["running"] = s["running"] + adm.astype(i32)
        s["reserved"] = s["reserved"] + jnp.where(adm, r, 0.0)
        s["q"] = s["q"] - can.astype(i32)
        h, ha, hp, ho = head(h + can.astype(i32))
        s["h"] = h
        more, over2, fits2, _ = resolvable(h, ha, hp, ho, s["running"], s["reserved"])
        ready = adm_ok & ~more
        start, h, ha, over2, fits2, ready = pin(s, start, h, ha, over2, fits2, ready)

        # -- the run: this step, and the pure-decode steps up to the next event ------------
        run = ready & (s["running"] > 0)
        empty = ready & (s["running"] == 0)  # nothing admitted: not a step, no time passes
        k = s["k"]
        running = s["running"].astype(f64)
        n_pre = s["n_adm"] - s["pf"]
        n_dec = running - n_pre.astype(f64)
        if prefill_first:  # a step with prompt tokens pauses every decoder, and has the whole budget
            prefilling = run & (n_pre > 0)
            chunk = jnp.where(prefilling, jnp.minimum(s["adm_tok"] - s["pre_tok"], p.budget), 0.0)
            n_dec = jnp.where(prefilling, 0.0, n_dec)
        else:
            chunk = jnp.where(run & (n_pre > 0), jnp.minimum(s["adm_tok"] - s["pre_tok"], p.budget - n_dec),
                              0.0)
        decode = run & (n_pre == 0)  # a pure-decode step: it may run on
        n_tok = n_dec + chunk
        held0 = s["cache"] + chunk  # the KV held once the step's tokens are written
        if prefill_first:  # ... of which the step reads the prefilling sequences' only
            ctx0 = jnp.where(n_pre > 0, s["pre_tok"] - (s["nb"] - s["np_"]) + chunk, held0)
        else:
            ctx0 = held0
        alpha = p.t_fixed + p.t_token * n_tok + p.t_ctx * ctx0  # step i of the run lasts
        beta = p.t_ctx * n_dec  # (alpha + beta i) m_i
        l_dep = jnp.minimum(jnp.min(s["dep"], axis=1) - s["kd"], _L_CAP - 1) + 1  # the next departure
        # the run stops before the first step that starts at or after tau: the head's
        # arrival when it could then be resolved, and the measurement span's ends
        tau_h = jnp.where((h < n) & (over2 | fits2) & (ha > start), ha, jnp.inf)
        tau_s = jnp.where(start < t0, t0, jnp.where(start <= t1, jnp.nextafter(t1, jnp.inf), jnp.inf))
        tau = jnp.minimum(tau_h, tau_s)
        l_max = jnp.minimum(l_dep, _L_CAP)
        (run, empty, decode, running, n_dec, chunk, n_tok, ctx0, held0, alpha, beta, tau,
         l_max) = pin(s, run, empty, decode, running, n_dec, chunk, n_tok, ctx0, held0, alpha,
                      beta, tau, l_max)

        def f_det(i):  # start offset of step i of the run, no noise
            fi = i.astype(f64)
            return alpha[:, None] * fi + beta[:, None] * (fi * (fi - 1.0) * 0.5)

        delta = tau - start
        b2 = alpha - 0.5 * beta
        root = jnp.where(jnp.isfinite(delta),
                         2.0 * delta / (b2 + jnp.sqrt(b2 * b2 + 2.0 * beta * delta)), jnp.inf)
        c0 = jnp.clip(jnp.ceil(root), 1.0, float(_L_CAP)).astype(i32)
        cand = jnp.maximum(c0[:, None] + jnp.arange(-1, 2, dtype=i32)[None, :], 1)
        okc = start[:, None] + f_det(cand - 1) < tau[:, None]
        l_run = jnp.minimum(jnp.max(jnp.where(okc, cand, 1), axis=1), l_max)
        noisy = p.cv > 0.0
        i0 = jnp.clip(k - s["bs"], 0, block)
        l_max = jnp.where(noisy, jnp.minimum(l_max, s["bs"] + block - k), l_max)
        base = s["nzb"][lane, i0]  # [L, 4]

        tau_n, i0f = pin(s, tau, i0.astype(f64))

        def f_noisy(i):  # start offset of step i of the run (i [L] or [L, m], <= block - i0)
            def col(x):  # a lane vector against i
                return x.reshape(x.shape + (1,) * (i.ndim - 1))

            g = s["nzb"][col(lane), jnp.clip(col(i0) + i, 0, block)]
            g0 = g[..., 0] - col(base[:, 0])
            g1 = (g[..., 1] - col(base[:, 1])) - col(i0f) * g0
            return col(alpha) * g0 + col(beta) * g1

        # binary search for the steps of the run that start before tau: step i starts
        # at start + alpha G0(i) + beta G1(i), increasing in i (prefix sums of the block)
        # (skipped when no lane runs noisy decode steps)
        searching = noisy & decode

        def search(lo, hi):
            for _ in range(block.bit_length()):
                mid = (lo + hi) // 2
                before = start + f_noisy(mid) < tau_n
                lo, hi = jnp.where(before, mid, lo), jnp.where(before, hi, mid)
            return lo

        lo = jnp.zeros(n_lanes, i32)  # step lo starts before tau (step 0 does)
        hi = jnp.where(searching, jnp.maximum(l_max, 1), 1)  # steps >= hi are not in the run
        lo = lax.cond(jnp.any(searching), search, lambda lo, hi: lo, lo, hi)
        l_run = jnp.where(noisy, lo + 1, l_run)
        n_run = jnp.where(decode, jnp.maximum(l_run, 1), 1)
        (n_run,) = pin(s, n_run)
        ln = n_run.astype(f64)
        # sums over the run: G0 = sum m_i, G1 = sum i m_i, G2 = sum i^2 m_i
        g0, g1, g2 = ln, ln * (ln - 1.0) * 0.5, (ln - 1.0) * ln * (2.0 * ln - 1.0) / 6.0
        m0 = jnp.ones(n_lanes, f64)
        f_last = alpha * (ln - 1.0) + beta * ((ln - 1.0) * (ln - 2.0) * 0.5)
        ends = s["nzb"][lane[:, None],
                        jnp.clip(i0[:, None] + n_run[:, None] - 1 + jnp.arange(2, dtype=i32)[None, :], 0, block)]
        i0f = i0.astype(f64)
        e0 = ends[:, 1, 0] - base[:, 0]
        e1 = (ends[:, 1, 1] - base[:, 1]) - i0f * e0
        e2 = (ends[:, 1, 2] - base[:, 2]) - 2.0 * i0f * (ends[:, 1, 1] - base[:, 1]) + i0f * i0f * e0
        l0 = ends[:, 0, 0] - base[:, 0]
        l1 = (ends[:, 0, 1] - base[:, 1]) - i0f * l0
        g0, g1, g2 = jnp.where(noisy, e0, g0), jnp.where(noisy, e1, g1), jnp.where(noisy, e2, g2)
        f_last = jnp.where(noisy, alpha * l0 + beta * l1, f_last)
        m0 = jnp.where(noisy, base[:, 3], m0)
        f_run = jnp.where(n_run == 1, alpha * m0, alpha * g0 + beta * g1)
        f_last = jnp.where(n_run == 1, 0.0, f_last)
        end = start + f_run
        s_last = start + f_last
        ctx_last = held0 + n_dec * (ln - 1.0)  # held, paused sequences included
        # statistics over [t0, t1]: a run starting before t0 stops at the first step that
        # starts at or after it, one starting inside at the first that starts after t1, so
        # only its last step can cross either end
        inside = run & (start >= t0) & (start <= t1)
        before = run & (start < t0)
        ov_last = jnp.maximum(0.0, jnp.minimum(end, t1) - jnp.maximum(s_last, t0))
        ov_in = jnp.minimum(end, t1) - start
        ctx_dur = jnp.where(n_run == 1, held0 * f_run,
                            held0 * alpha * g0 + (held0 * beta + n_dec * alpha) * g1 + n_dec * beta * g2)
        cached_in = ctx_dur - ctx_last * jnp.maximum(0.0, end - t1)
        end_in = (end >= t0) & (end <= t1)
        ov = jnp.where(inside, ov_in, jnp.where(before, ov_last, 0.0))
        s["stats"] = s["stats"] + jnp.stack([
            running * ov, s["reserved"] * ov,
            jnp.where(inside, cached_in, jnp.where(before, ctx_last * ov_last, 0.0)),
            jnp.where(inside, n_dec * (ln - 1.0 + end_in.astype(f64)),
                      jnp.where(before & end_in, n_dec, 0.0)),
            jnp.where(inside, f_run, 0.0), jnp.where(inside, ln, 0.0)], axis=1)
        if record:
            idx = jnp.arange(record, dtype=i32)[None, :]
            ir = idx - k[:, None]
            valid = run[:, None] & (ir >= 0) & (ir < n_run[:, None])
            ir = jnp.maximum(ir, 0)
            f_i = f_det(ir)
            m_i = jnp.ones(ir.shape, f64)
            f_i = jnp.where(noisy[:, None], f_noisy(ir), f_i)
            m_i = jnp.where(noisy[:, None],
                            s["nzb"][lane[:, None], jnp.clip(i0[:, None] + ir, 0, block), 3], 1.0)
            ctx_i = ctx0[:, None] + n_dec[:, None] * ir.astype(f64)
            dur_i = (p.t_fixed[:, None] + p.t_token[:, None] * n_tok[:, None]
                     + p.t_ctx[:, None] * ctx_i) * m_i
            f_i = jnp.where(ir == 0, 0.0, f_i)
            bc = jnp.broadcast_to
            rrow = jnp.stack([start[:, None] + f_i, dur_i, bc(n_tok[:, None], ir.shape),
                              bc(chunk[:, None], ir.shape), ctx_i,
                              bc(running[:, None], ir.shape), bc(s["reserved"][:, None], ir.shape),
                              bc(n_dec[:, None], ir.shape)], axis=2)
            s["rec"] = jnp.where(valid[..., None], rrow, s["rec"])
        s["t"] = jnp.where(run, end, jnp.where(empty, start, s["t"]))
        k = k + jnp.where(run, n_run, 0)
        s["k"] = k
        decoded = run & (n_dec > 0) if prefill_first else run  # the decode clock moved
        s["kd"] = s["kd"] + jnp.where(decoded, n_run, 0)
        s["pre_tok"] = s["pre_tok"] + chunk
        s["cache"] = s["cache"] + jnp.where(run, chunk + n_dec * ln, 0.0)
        s["ph"] = jnp.where(run, 2, jnp.where(empty, 0, s["ph"]))
        run, end, k, decoded = pin(s, run, end, k, decoded)

        # -- phase 2: every departure of the run's last step, one prefill completion -------
        kd_last, k_last = s["kd"] - 1, k - 1
        dmask = decoded[:, None] & (s["dep"] == kd_last[:, None])
        n_gone = jnp.sum(dmask, axis=1).astype(i32)
        # integer sums (exact; XLA:CPU would hand a float reduction to a library kernel,
        # which the single-kernel loop cannot contain)
        gone_c = jnp.sum(jnp.where(dmask, s["pay_c"], 0), axis=1).astype(f64)
        gone_r = jnp.sum(jnp.where(dmask, s["pay_r"], 0), axis=1).astype(f64)
        logged = n_gone > 0  # the end of a departure step, looked up by the departing requests
        putj("logk", s["logn"], kd_last, logged)
        putj("logt", s["logn"], end, logged)
        s["logn"] = s["logn"] + logged.astype(i32)
        in2 = alive & (s["ph"] == 2)
        t_end = s["t"]
        cmp = in2 & (s["pf"] < s["n_adm"]) & (s["nb"] <= s["pre_tok"])
        j = s["nj"].astype(i32)
        o1 = s["no"] == 1.0  # O = 1: leaves at the end of its prefill step
        book = cmp & ~o1
        d_step = s["kd"] + s["no"].astype(i32) - 2  # its O - 1 decode steps are the next ones
        later.append(("fs", (job, j), jnp.stack([t_end, d_step.astype(f64)], axis=1),
                      cmp & (job < n_jobs)))
        free = jnp.argmax((s["dep"] == big) | dmask, axis=1).astype(i32)
        onehot = book[:, None] & (jnp.arange(slots, dtype=i32)[None, :] == free[:, None])
        r_j = reserve(s["np_"], s["no"])
        s["dep"] = jnp.where(onehot, d_step[:, None], jnp.where(dmask, big, s["dep"]))
        s["pay_c"] = jnp.where(onehot, (s["np_"] + s["no"]).astype(i64)[:, None], s["pay_c"])
        s["pay_r"] = jnp.where(onehot, r_j.astype(i64)[:, None], s["pay_r"])
        leave_now = cmp & o1
        s["running"] = s["running"] - n_gone - leave_now.astype(i32)
        s["reserved"] = s["reserved"] - gone_r - jnp.where(leave_now, r_j, 0.0)
        s["cache"] = (s["cache"] - gone_c + cmp.astype(f64)
                      - jnp.where(leave_now, s["np_"] + s["no"], 0.0))
        s["pf"] = s["pf"] + cmp.astype(i32)
        nxt = s["ring"][lane, s["pf"] & (slots - 1)]
        more_pf = s["pf"] < s["n_adm"]
        s["nb"] = jnp.where(cmp, jnp.where(more_pf, nxt[:, 0], jnp.inf), s["nb"])
        s["nj"] = jnp.where(cmp, nxt[:, 1], s["nj"])
        s["np_"] = jnp.where(cmp, nxt[:, 2], s["np_"])
        s["no"] = jnp.where(cmp, nxt[:, 3], s["no"])
        tok_in = cmp & (t_end >= t0) & (t_end <= t1)
        s["stats"] = s["stats"] + jnp.where(jnp.arange(6)[None, :] == 3, tok_in.astype(f64)[:, None], 0.0)
        if record:
            kr = jnp.clip(k_last, 0, record - 1)
            later.append(("rec", (lane, kr),
                          s["rec"][lane, kr] + (jnp.arange(8) == 7).astype(f64)[None, :],
                          cmp & (k_last >= 0) & (k_last < record)))
        pending = s["nb"] <= s["pre_tok"]
        s["ph"] = jnp.where(in2 & ~pending, 0, s["ph"])
        s["it"] = s["it"] + 1
        done = (job < n_jobs) & ~alive_of(s)
        # file the ended jobs' statistics; their lanes take the next job
        later.append(("out_stats", (job,), s["stats"], done))
        later.append(("out_steps", (job,), s["k"], done))
        for key, *w in later:  # (one loop per array: a loop carrying several is slower)
            (s[key],) = _lane_set([(s[key], *w)], n_lanes)
        return next_job(s, done)

    def next_job(s, done):
        """Lanes whose job just ended take the next job (fresh scalar state)."""
        s = dict(s)
        job = s["job"]
        rank = jnp.cumsum(done.astype(i32)).astype(i32) - 1
        cand = s["next_job"] + rank
        new = jnp.where(done, jnp.where(cand < n_jobs, cand, n_jobs), job)
        s["next_job"] = s["next_job"] + jnp.sum(done.astype(i32)).astype(i32)
        load = dict(fresh, **job_inputs(new))
        for key, v in load.items():
            if key == "pl":
                s[key] = _Params(*(jnp.where(done, nv, ov) for nv, ov in zip(v, s[key])))
            elif key == "stats":
                s[key] = jnp.where(done[:, None], v, s[key])
            else:
                s[key] = jnp.where(done, v, s[key])
        s["job"] = new
        return s

    loop = jax.jit(lambda st: lax.while_loop(
        lambda s: jnp.any(s["job"] < n_jobs) & (s["it"] < max_iters), iteration, st))
    st = loop(st)
    if _SINGLE_KERNEL:
        st = set_xla_metadata(st, inlineable="false", xla_cpu_small_call="true")
    # every request was resolved (the engine drains): a request not dropped was admitted
    # unless its reservation exceeds C, which rejects it at the head; a dropped range
    # [lo, hi) is skip[lo] = hi
    blk = p.block[:, None]
    over = jnp.ceil((prompt + output) / blk) * blk > p.kv[:, None]
    dropped = lax.cummax(st["skip"], axis=1) > jnp.arange(n, dtype=i32)[None, :]
    status = jnp.where(dropped, DROPPED, jnp.where(over, REJECTED, 0)).astype(i32)
    admitted = status == 0
    first = jnp.where(admitted, st["fs"][:, :, 0], jnp.inf)
    d_step = jnp.where(admitted & (output >= 2.0), st["fs"][:, :, 1], -1.0).astype(i32)
    at = jax.vmap(jnp.searchsorted)(st["logk"], d_step)
    fin = jnp.take_along_axis(st["logt"], jnp.clip(at, 0, n - 1), axis=1)
    finish = jnp.where(admitted, jnp.where(output >= 2.0, fin, first), jnp.inf)
    none = jnp.zeros((n_jobs, 0), f64)
    return _Out(status, st.get("admit_s", none), first, finish, st["out_steps"], st["out_stats"],
                st.get("rec", jnp.zeros((n_lanes, 0, 8), f64)))


# --------------------------------------------------------------------------------------
# randomness
# --------------------------------------------------------------------------------------


def _lane_keys(seed, scenario, rep):
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), scenario), rep)
    k_req, k_step = jax.random.split(key)
    return k_req, k_step


def lengths(z, mean, cv):
    """Token counts ``max(1, round(X))``, ``X = mean exp(sigma z - sigma^2 / 2)``,
    ``sigma^2 = ln(1 + cv^2)`` (lognormal of this mean and CV); cv = 0 gives
    ``max(1, round(mean))`` exactly."""
    s2 = jnp.log1p(cv * cv)
    x = jnp.where(cv > 0.0, mean * jnp.exp(jnp.sqrt(s2) * z - 0.5 * s2), mean)
    return jnp.maximum(1.0, jnp.round(x))


def _draws(seed, scenario, rep, lam, pm, pcv, om, ocv, n):
    """Arrivals float64[n] (Poisson, rate ``lam``), prompt and output tokens float64[n]."""
    k_req, _ = _lane_keys(seed, scenario, rep)
    bits = jax.random.bits(k_req, (3, n), dtype=jnp.uint32).astype(jnp.float64)
    u = (bits + 0.5) * 2.0**-32
    gaps = -jnp.log(u[0]) / lam
    _, arrivals = lax.scan(lambda c, x: (c + x, c + x), jnp.zeros_like(lam), gaps)
    return arrivals, lengths(ndtri(u[1]), pm, pcv), lengths(ndtri(u[2]), om, ocv)


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k1, k2, x1, x2):
    """The Threefry-2x32 hash (20 rounds) written out, bit for bit ``jax.random``'s:
    unrolled, it fuses into one loop (XLA:CPU lowers ``jax.random``'s with a rolled
    loop of small operations, ~100x slower here)."""
    u32 = jnp.uint32
    ks = (k1, k2, k1 ^ k2 ^ u32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ ((x2 << u32(r)) | (x2 >> u32(32 - r)))
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + u32(i + 1)
    return x1, x2


def _step_normal(k_step, k):
    """``z_k = ndtri(u)``, ``u`` from ``jax.random.bits(fold_in(k_step, k), (), uint32)``
    (the same bits, computed by :func:`_threefry2x32`); ``k_step`` uint32[..., 2] and
    ``k`` broadcast together."""
    zero = jnp.zeros(jnp.broadcast_shapes(jnp.shape(k), jnp.shape(k_step)[:-1]), jnp.uint32)
    y1, y2 = _threefry2x32(k_step[..., 0], k_step[..., 1], zero, zero + jnp.asarray(k).astype(jnp.uint32))
    b1, b2 = _threefry2x32(y1, y2, zero, zero)
    return ndtri(((b1 ^ b2).astype(jnp.float64) + 0.5) * 2.0**-32)


@partial(jax.jit, static_argnames=("n",))
def _draws_jit(seed, scenario, rep, lam, pm, pcv, om, ocv, n):
    return _draws(seed, scenario, rep, lam, pm, pcv, om, ocv, n)


def replication_draws(settings: CBSimSettings, scenario_id: int, replication: int, *,
                      lam: float, prompt_mean: float, prompt_cv: float, output_mean: float,
                      output_cv: float, n: int | None = None):
    """Arrival times, prompt and output tokens (float64[n] each) that
    :func:`simulate_continuous` uses for lane (``scenario_id``, ``replication``);
    ``n`` defaults to ``warmup + n_requests``."""
    n = settings.warmup + settings.n_requests if n is None else int(n)
    out = _draws_jit(jnp.uint32(settings.seed), jnp.int32(scenario_id), jnp.int32(replication),
                     *(jnp.float64(x) for x in (lam, prompt_mean, prompt_cv, output_mean,
                                                output_cv)), n)
    return tuple(np.asarray(x) for x in out)


@partial(jax.jit, static_argnames=("n_steps",))
def _step_normals_jit(seed, scenario, rep, n_steps):
    _, k_step = _lane_keys(seed, scenario, rep)
    return _step_normal(k_step, jnp.arange(n_steps, dtype=jnp.int32))


def step_normals(settings: CBSimSettings, scenario_id: int, replication: int, n_steps: int):
    """The per-step standard normals ``z_0 .. z_{n_steps-1}`` of a lane (service noise)."""
    return np.asarray(_step_normals_jit(jnp.uint32(settings.seed), jnp.int32(scenario_id),
                                        jnp.int32(replication), int(n_steps)))


# --------------------------------------------------------------------------------------
# per-request access (one lane): tests and diagnostics
# --------------------------------------------------------------------------------------


#: `scheduler_policy` values (docs/continuous.md, "Engine variants")
SCHEDULER_POLICIES = ("chunked", "prefill_first")


def _prefill_first(policy: str, who: str) -> bool:
    if policy not in SCHEDULER_POLICIES:
        raise CBSimulationError(f"{who}: scheduler_policy = {policy!r}: one of {', '.join(SCHEDULER_POLICIES)}")
    return policy == "prefill_first"


def _pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def _slots(cap_max, n: int) -> int:
    """Sequence slots per lane: a power of two >= the largest cap (no more than the
    requests of a replication can run), at least 16 so that most grids share a shape."""
    return max(16, _pow2(int(min(float(cap_max), n))))


@partial(jax.jit, static_argnames=("slots", "record", "prefill_first", "cached"),
         **_JIT_OPTIONS)
def _lane_jit(a, pp, oo, params, z, *, slots, record, prefill_first=False, cached=False):
    p = _Params(*(v[None] for v in params))
    nz = z.shape[0]

    def noise(job, ks):
        return z[jnp.clip(ks, 0, nz - 1)]

    n = a.shape[0]
    max_iters = jnp.int32(8 * n) + jnp.sum(pp + oo).astype(jnp.int32)
    return _run(a[None], pp[None], oo[None], p, noise, a[:1], a[-1:], slots=slots,
                block=_NOISE_BLOCK, record=record,
                max_iters=max_iters, n_lanes=1, prefill_first=prefill_first, cached=cached)


def simulate_requests(arrivals: ArrayLike, prompt: ArrayLike, output: ArrayLike, *,
                      cap: float, max_batched_tokens: float = np.inf,
                      kv_capacity_tokens: float = np.inf, block_tokens: float = 1.0,
                      queue_capacity: float = np.inf, t_fixed: float, t_token: float,
                      t_ctx: float = 0.0, service_cv: float = 0.0, z: ArrayLike | None = None,
                      record_steps: int = 0, scheduler_policy: str = "chunked",
                      cached: bool = False) -> dict[str, Any]:
    """Per-request outcome of ONE replication on given arrivals, lengths and step noise.

    ``arrivals`` sorted float64[n] (s); ``prompt``, ``output`` integers >= 1; ``z``
    standard normals, one per step (step ``k`` is scaled by ``exp(mu + sigma z[k])``; only
    read when ``service_cv > 0``; steps past its end reuse the last one). Returns
    ``status`` (0 admitted, 1 dropped on a full queue, 2 rejected: reservation > C),
    ``admit_s``, ``first_s``, ``finish_s``, ``ttft_s``, ``e2e_s`` (``inf`` unless admitted),
    ``tpot_s`` (NaN for O = 1 and for requests not admitted: no value), ``n_steps``, and
    with ``record_steps = R`` the first R steps' ``step_start``, ``step_dur``,
    ``step_tok``, ``step_prefill``, ``step_ctx``, ``step_running``, ``step_reserved``,
    ``step_emitted``.

    ``cached=True``: prompts arrive already cached (the decode pool of disaggregated
    serving, SPEC 11). A request arrives with its first token emitted and its ``P`` prompt
    tokens in KV; it is queued and admitted as in SPEC 10 (reservation ``P + O``, paged),
    no step carries its prompt tokens, ``n_ctx`` counts its ``P`` cached tokens plus the
    tokens emitted before the step (the first one included), and it emits tokens
    ``2 .. O``, one per step, from the step it is admitted at. Every ``output`` must be
    >= 2 (an O = 1 request is complete at its first token and never reaches a decode
    pool). Then ``admit_s`` is always returned, ``first_s`` is the arrival (the first
    token is in hand when the request arrives), ``ttft_s`` 0 and ``tpot_s = (finish -
    arrival) / (O - 1)`` (the wait for a slot included).
    """
    a = np.asarray(arrivals, np.float64)
    pp = np.asarray(prompt, np.float64)
    oo = np.asarray(output, np.float64)
    if a.ndim != 1 or a.size == 0 or pp.shape != a.shape or oo.shape != a.shape:
        raise CBSimulationError("simulate_requests: arrivals, prompt and output must be "
                                "equal-length non-empty 1-D arrays")
    if np.any(np.diff(a) < 0) or not np.all(np.isfinite(a)):
        raise CBSimulationError("simulate_requests: arrivals must be finite and sorted")
    if np.any(pp < 1) or np.any(oo < 1) or np.any(pp != np.round(pp)) or np.any(oo != np.round(oo)):
        raise CBSimulationError("simulate_requests: prompt and output must be integers >= 1")
    if cached and np.any(oo < 2):
        i = int(np.argmax(oo < 2))
        raise CBSimulationError(f"simulate_requests: output[{i}] = {oo[i]:g}: with cached prompts every "
                                "request must have O >= 2 (its first token was emitted before it arrived)")
    vals = dict(cap=cap, max_batched_tokens=max_batched_tokens,
                kv_capacity_tokens=kv_capacity_tokens, block_tokens=block_tokens,
                queue_capacity=queue_capacity, t_fixed=t_fixed, t_token=t_token, t_ctx=t_ctx,
                service_cv=service_cv)
    _check({k: np.atleast_1d(np.float64(v)) for k, v in vals.items()}, "simulate_requests")
    zz = np.zeros(1) if z is None else np.asarray(z, np.float64).reshape(-1)
    if service_cv > 0 and zz.size == 0:
        raise CBSimulationError("simulate_requests: service_cv > 0 needs z (one normal per step)")
    params = tuple(jnp.float64(v) for v in (cap, max_batched_tokens, kv_capacity_tokens,
                                            block_tokens, queue_capacity, t_fixed, t_token,
                                            t_ctx, service_cv))
    out = _lane_jit(a, pp, oo, params, zz if zz.size else np.zeros(1),
                    slots=_slots(cap, a.size), record=int(record_steps),
                    prefill_first=_prefill_first(scheduler_policy, "simulate_requests"), cached=bool(cached))
    status = np.asarray(out.status[0])
    first, finish = np.asarray(out.first_s[0]), np.asarray(out.finish_s[0])
    adm = status == 0
    admit = np.asarray(out.admit_s[0]) if record_steps else np.full(a.shape, np.nan)
    if cached:  # the kernel's first-token column holds the admission time
        admit, first = first, np.where(adm, a, np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(adm & (oo >= 2), (finish - first) / np.maximum(oo - 1.0, 1.0), np.nan)
    res: dict[str, Any] = {
        "status": status, "admit_s": admit, "first_s": first,
        "finish_s": finish, "ttft_s": np.where(adm, first - a, np.inf),
        "e2e_s": np.where(adm, finish - a, np.inf), "tpot_s": tpot,
        "n_steps": int(out.steps[0]),
    }
    if record_steps:
        m = min(int(out.steps[0]), int(record_steps))
        rec = np.asarray(out.rec[0, :m])
        for j, name in enumerate(("step_start", "step_dur", "step_tok", "step_prefill",
                                  "step_ctx", "step_running", "step_reserved", "step_emitted")):
            res[name] = rec[:, j]
    return res


SCHEDULER_KEYS = ("cap", "max_batched_tokens", "kv_capacity_tokens", "block_tokens", "queue_capacity",
                  "t_fixed", "t_token", "t_ctx", "service_cv")


@partial(jax.jit, static_argnames=("slots", "lanes", "cached"), **_JIT_OPTIONS)
def _jobs_jit(seed, sid, rid, a, pp, oo, params, *, slots, lanes, cached):
    step_keys = jax.vmap(lambda s, r: _lane_keys(seed, s, r)[1])(sid, rid)
    n_jobs, n = a.shape

    def noise(job, ks):
        return _step_normal(step_keys[jnp.minimum(job, n_jobs - 1)], ks)

    bound = jnp.sum(8.0 * n + jnp.sum(pp + oo, axis=1))  # iterations never exceed it
    max_iters = jnp.minimum(bound, 2.0**31 - 1).astype(jnp.int32)
    out = _run(a, pp, oo, _Params(*params), noise, a[:, 0], a[:, -1], slots=slots,
               block=_NOISE_BLOCK, record=0, max_iters=max_iters, n_lanes=min(lanes, n_jobs),
               cached=cached)
    # the whole record: returning only some of its fields trips XLA:CPU's emitter on the
    # single-kernel loop ("All or none of the slices should have an explicit index")
    return out


def simulate_jobs(arrivals: ArrayLike, prompt: ArrayLike, output: ArrayLike,
                  params: Mapping[str, ArrayLike], *, scenario_ids: ArrayLike, replications: ArrayLike,
                  seed: int = 0, cached: bool = False, lanes: int = _DEFAULT_LANES) -> dict[str, np.ndarray]:
    """Per-request outcomes of J independent replications (jobs) on given arrivals and
    lengths, all at once: the batched form of :func:`simulate_requests`.

    ``arrivals`` float64[J, n] (each row sorted), ``prompt``, ``output`` [J, n] integers
    >= 1 (>= 2 with ``cached``); ``params`` one value per job (float64[J]) for each of
    ``SCHEDULER_KEYS``; job ``j``'s step noise is that of :func:`simulate_continuous`'s lane
    (``scenario_ids[j]``, ``replications[j]``) under ``seed`` (:func:`step_normals`). Returns
    ``status`` int32[J, n] (0 admitted, 1 dropped, 2 rejected), ``admit_s`` (only with
    ``cached``; else NaN), ``first_s`` and ``finish_s`` float64[J, n] (``inf`` unless
    admitted; with ``cached`` ``first_s`` is the arrival, as in :func:`simulate_requests`).
    """
    a = np.asarray(arrivals, np.float64)
    pp = np.asarray(prompt, np.float64)
    oo = np.asarray(output, np.float64)
    if a.ndim != 2 or a.shape[1] == 0 or pp.shape != a.shape or oo.shape != a.shape:
        raise CBSimulationError("simulate_jobs: arrivals, prompt and output must be equal-shape [J, n] arrays")
    if not np.all(np.isfinite(a)) or np.any(np.diff(a, axis=1) < 0):
        raise CBSimulationError("simulate_jobs: arrivals must be finite and sorted in each row")
    if np.any(pp < 1) or np.any(oo < (2 if cached else 1)) or np.any(pp != np.round(pp)) or np.any(oo != np.round(oo)):
        raise CBSimulationError("simulate_jobs: prompt and output must be integers >= 1 (output >= 2 with "
                                "cached prompts)")
    n_jobs = a.shape[0]
    arrs = {}
    for k in SCHEDULER_KEYS:
        if k not in params:
            raise CBSimulationError(f"simulate_jobs: missing parameter {k}; need {list(SCHEDULER_KEYS)}")
        arrs[k] = np.broadcast_to(np.asarray(params[k], np.float64), (n_jobs,)).copy()
    _check(arrs, "simulate_jobs")
    sid = np.broadcast_to(np.asarray(scenario_ids, np.int64), (n_jobs,)) % (1 << 31)
    rid = np.broadcast_to(np.asarray(replications, np.int64), (n_jobs,)) % (1 << 31)
    out = _jobs_jit(
        jnp.uint32(seed), jnp.asarray(sid, jnp.int32), jnp.asarray(rid, jnp.int32), jnp.asarray(a),
        jnp.asarray(pp), jnp.asarray(oo), tuple(jnp.asarray(arrs[k]) for k in SCHEDULER_KEYS),
        slots=_slots(np.max(arrs["cap"]), a.shape[1]), lanes=int(lanes), cached=bool(cached))
    status, first, finish = np.asarray(out.status), np.asarray(out.first_s), np.asarray(out.finish_s)
    admit = np.full(a.shape, np.nan)
    if cached:
        admit, first = first, np.where(status == 0, a, np.inf)
    return {"status": status, "admit_s": admit, "first_s": first, "finish_s": finish}


# --------------------------------------------------------------------------------------
# batched driver
# --------------------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("n", "reps", "use_trace"))
def _chunk_draws(seed, ids, p, trace_a, trace_p, trace_o, *, n, reps, use_trace):
    """Draws for every lane of a chunk: float64[L, n] arrivals, prompts, outputs, and the
    largest output length."""
    lane_s = jnp.repeat(ids, reps)
    lane_r = jnp.tile(jnp.arange(reps, dtype=jnp.int32), ids.shape[0])
    lp = {k: jnp.repeat(v, reps) for k, v in p.items()}
    a, pp, oo = jax.vmap(_draws, in_axes=(None, 0, 0, 0, 0, 0, 0, 0, None))(
        seed, lane_s, lane_r, lp["lam"], lp["prompt_mean"], lp["prompt_cv"], lp["output_mean"],
        lp["output_cv"], n)
    if use_trace:
        shape = a.shape
        a = jnp.broadcast_to(trace_a[None, :], shape)
        pp = jnp.where(trace_p[None, :] > 0, jnp.broadcast_to(trace_p[None, :], shape), pp)
        oo = jnp.where(trace_o[None, :] > 0, jnp.broadcast_to(trace_o[None, :], shape), oo)
    return a, pp, oo, jnp.max(oo)


@partial(jax.jit, static_argnames=("warmup", "reps", "slots", "lanes", "prefill_first"),
         **_JIT_OPTIONS)
def _chunk_sim(seed, ids, p, a, pp, oo, *, warmup, reps, slots, lanes, prefill_first=False):
    """Simulate every replication (job) of a chunk on ``lanes`` lanes; per-job statistics
    and measured per-request TTFT / TPOT / E2E (``+inf`` where they do not exist)."""
    global _TRACES
    _TRACES += 1  # a Python side effect: runs once per compilation
    lane_s = jnp.repeat(ids, reps)
    lane_r = jnp.tile(jnp.arange(reps, dtype=jnp.int32), ids.shape[0])
    lp = {k: jnp.repeat(v, reps) for k, v in p.items()}
    params = _Params(lp["cap"], lp["max_batched_tokens"], lp["kv_capacity_tokens"],
                     lp["block_tokens"], lp["queue_capacity"], lp["t_fixed"], lp["t_token"],
                     lp["t_ctx"], lp["service_cv"])
    step_keys = jax.vmap(lambda s, r: _lane_keys(seed, s, r)[1])(lane_s, lane_r)
    n_jobs = step_keys.shape[0]

    def noise(job, ks):
        return _step_normal(step_keys[jnp.minimum(job, n_jobs - 1)], ks)

    n = a.shape[1]
    t0, t1 = a[:, warmup], a[:, -1]
    bound = jnp.sum(8.0 * n + jnp.sum(pp + oo, axis=1))  # iterations never exceed it
    max_iters = jnp.minimum(bound, 2.0**31 - 1).astype(jnp.int32)
    out = _run(a, pp, oo, params, noise, t0, t1, slots=slots, block=_NOISE_BLOCK, record=0,
               max_iters=max_iters,
               n_lanes=min(lanes, n_jobs), prefill_first=prefill_first)
    return _lane_summary(out, a, oo, params, warmup)


def _lane_summary(out: _Out, a, oo, p: _Params, warmup):
    f64 = jnp.float64
    n = a.shape[1]
    m = n - warmup
    adm = out.status == 0
    ttft = jnp.where(adm, out.first_s - a, jnp.inf)
    e2e = jnp.where(adm, out.finish_s - a, jnp.inf)
    has_tpot = adm & (oo >= 2.0)
    tpot = jnp.where(has_tpot, (out.finish_s - out.first_s) / jnp.maximum(oo - 1.0, 1.0), jnp.inf)
    meas = jnp.arange(n) >= warmup
    am = adm & meas[None, :]
    tm = has_tpot & meas[None, :]

    def mean(x, msk):
        c = jnp.sum(msk, axis=1).astype(f64)
        return jnp.where(c > 0, jnp.sum(jnp.where(msk, x, 0.0), axis=1) / jnp.maximum(c, 1), jnp.inf)

    quarter = m // 4
    idx = jnp.arange(n)
    first_q = am & (idx < warmup + quarter)[None, :]
    last_q = am & (idx >= n - quarter)[None, :]
    mf, ml = mean(ttft, first_q), mean(ttft, last_q)
    steady = ~((quarter > 0) & jnp.isfinite(mf) & jnp.isfinite(ml) & (ml > 2.0 * mf))
    span = a[:, -1] - a[:, warmup]
    ok = span > 0.0
    sp = jnp.where(ok, span, 1.0)
    st = out.stats
    kv_fin = jnp.isfinite(p.kv)
    kvd = jnp.where(kv_fin, p.kv, 1.0)
    summary = jnp.stack([
        mean(ttft, am), mean(tpot, tm), mean(e2e, am),
        jnp.where(ok, st[:, 0] / sp, 0.0),
        jnp.where(st[:, 5] > 0, st[:, 4] / jnp.maximum(st[:, 5], 1.0), 0.0),
        jnp.where(ok, st[:, 3] / sp, 0.0),
        jnp.where(ok & kv_fin, st[:, 1] / sp / kvd, 0.0),
        jnp.where(ok & kv_fin, st[:, 2] / sp / kvd, 0.0),
        (m - jnp.sum(am, axis=1)).astype(f64) / m,
        jnp.sum(am, axis=1).astype(f64), jnp.sum(tm, axis=1).astype(f64),
        steady.astype(f64), out.steps.astype(f64),
    ], axis=1)
    w = slice(warmup, None)
    return summary, ttft[:, w], tpot[:, w], e2e[:, w]


_SUMMARY = ("ttft_mean", "tpot_mean", "e2e_mean", "mean_running", "step_mean", "output_tok_s",
            "kv_util", "kv_cached_util", "drop_rate", "n_adm", "n_tpot", "steady", "steps")


def _check(arrs: dict[str, np.ndarray], who: str) -> None:
    def bad(key, mask, rule):
        if key in arrs and np.any(mask(arrs[key])):
            i = int(np.argmax(mask(arrs[key])))
            raise CBSimulationError(f"{who}: {key}[{i}] = {arrs[key][i]!r}: {rule}")

    def not_int(v):
        return ~np.isfinite(v) | (v != np.round(v))

    fin_pos = "must be finite and > 0"
    bad("lam", lambda v: ~(np.isfinite(v) & (v > 0)), fin_pos)
    for key in ("prompt_mean", "output_mean"):
        bad(key, lambda v: ~(np.isfinite(v) & (v > 0)), fin_pos + " (tokens)")
    for key in ("prompt_cv", "output_cv", "t_fixed", "t_token", "t_ctx", "service_cv"):
        bad(key, lambda v: ~(np.isfinite(v) & (v >= 0)), "must be finite and >= 0")
    bad("cap", lambda v: not_int(v) | (v < 1), "must be an integer >= 1 (e.g. 64)")
    bad("block_tokens", lambda v: not_int(v) | (v < 1), "must be an integer >= 1 (e.g. 16)")
    bad("max_batched_tokens", lambda v: np.isnan(v) | (v < 1) | (np.isfinite(v) & (v != np.round(v))),
        "must be an integer >= 1 or inf (e.g. 2048)")
    bad("kv_capacity_tokens", lambda v: np.isnan(v) | (v <= 0), "must be > 0 or inf")
    bad("queue_capacity", lambda v: np.isnan(v) | (v < 0) | (np.isfinite(v) & (v != np.round(v))),
        "must be an integer >= 0 or inf")
    if "cap" in arrs and "max_batched_tokens" in arrs:
        m = arrs["max_batched_tokens"] < arrs["cap"]
        if np.any(m):
            i = int(np.argmax(m))
            raise CBSimulationError(
                f"{who}: max_batched_tokens[{i}] = {arrs['max_batched_tokens'][i]!r} < cap "
                f"{arrs['cap'][i]!r}: SPEC 10 needs M >= N (e.g. 2048 for N = 64)")


def trace_arrays(trace: ArrayLike | Mapping[str, ArrayLike], warmup: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A replayed trace (arrival times, or a mapping with ``arrival_s`` and optional
    ``prompt_tokens`` / ``output_tokens``), checked: float64[n] arrivals, prompts and outputs,
    0 where the trace gives no length (the lane's own draw is used there)."""
    tr = trace if isinstance(trace, Mapping) else {"arrival_s": trace}
    tr_a = np.asarray(tr["arrival_s"], np.float64)
    if tr_a.ndim != 1 or tr_a.shape[0] <= warmup + 1:
        raise CBSimulationError(f"simulate_continuous: trace must be 1-D with more than "
                                f"warmup + 1 = {warmup + 1} arrivals")
    if not np.all(np.isfinite(tr_a)) or np.any(np.diff(tr_a) < 0):
        raise CBSimulationError("simulate_continuous: trace arrival_s must be finite and sorted")
    n = tr_a.shape[0]
    lengths = []
    for key in ("prompt_tokens", "output_tokens"):
        v = np.asarray(tr.get(key, np.zeros(n)), np.float64)
        if v.shape != (n,) or (key in tr and (np.any(v < 1) or np.any(v != np.round(v)))):
            raise CBSimulationError(f"simulate_continuous: trace {key} must be {n} integers >= 1")
        lengths.append(v)
    return tr_a, lengths[0], lengths[1]


def _validate(params: Mapping[str, ArrayLike], need_lam: bool) -> dict[str, np.ndarray]:
    keys = [k for k in PARAM_KEYS if need_lam or k != "lam"]
    missing = [k for k in keys if k not in params]
    if missing:
        raise CBSimulationError(f"simulate_continuous: missing parameter(s) {missing}; "
                                f"need {list(PARAM_KEYS)}")
    unknown = sorted(set(params) - set(PARAM_KEYS))
    if unknown:
        raise CBSimulationError(f"simulate_continuous: unknown parameter(s) {unknown}")
    arrs = {}
    for k in PARAM_KEYS:
        if k not in params:
            continue
        v = np.atleast_1d(np.asarray(params[k], dtype=np.float64))
        if v.ndim != 1:
            raise CBSimulationError(f"simulate_continuous: {k} must be 1-D, got shape {v.shape}")
        arrs[k] = v
    sizes = {v.shape[0] for v in arrs.values()}
    if len(sizes) != 1:
        raise CBSimulationError("simulate_continuous: parameter arrays differ in length: "
                                f"{ {k: v.shape[0] for k, v in arrs.items()} }")
    _check(arrs, "simulate_continuous")
    if "lam" not in arrs:
        arrs["lam"] = np.ones(next(iter(sizes)))
    return arrs


@lru_cache(maxsize=256)
def student_t975(dof: int) -> float:
    """0.975-quantile of Student's t with ``dof`` degrees of freedom (``inf`` for dof < 1):
    bisection on ``P(T <= t) = 1 - I_{dof/(dof+t^2)}(dof/2, 1/2) / 2`` (regularised
    incomplete beta), 200 halvings of [0, 1e3]: exact to float64 rounding."""
    if dof < 1:
        return float("inf")
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        tail = 0.5 * float(betainc(0.5 * dof, 0.5, dof / (dof + mid * mid)))
        lo, hi = (mid, hi) if tail > 0.025 else (lo, mid)
    return 0.5 * (lo + hi)


def _sorted_quantiles(x: np.ndarray, count: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Linear-interpolation q-quantile of the ``count[l]`` finite values of each row
    (``inf`` padding sorts last); ``inf`` for an empty row."""
    srt = np.sort(x, axis=1)
    nn = np.maximum(count, 1)
    h = (nn - 1) * q
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, nn - 1)
    r = np.arange(x.shape[0])
    v_lo, v_hi = srt[r, lo], srt[r, hi]
    frac = h - lo
    with np.errstate(invalid="ignore"):
        v = np.where(frac > 0, v_lo + frac * (v_hi - v_lo), v_lo)
    return np.where(count > 0, v, np.inf)


def simulate_continuous(
    params: Mapping[str, ArrayLike],
    settings: CBSimSettings = CBSimSettings(),
    *,
    percentile: float | ArrayLike = 0.99,
    more_percentiles: tuple[float, ...] = (),
    trace: ArrayLike | Mapping[str, ArrayLike] | None = None,
    scenario_ids: ArrayLike | None = None,
    max_lanes: int = _DEFAULT_MAX_LANES,
    lanes: int = _DEFAULT_LANES,
    scheduler_policy: str = "chunked",
) -> dict[str, np.ndarray]:
    """Simulate every scenario; float64[S] (bool for ``stable``) per output, SI units.

    ``params``: equal-length 1-D arrays, keys ``PARAM_KEYS`` (``lam`` 1/s, token counts,
    ``kv_capacity_tokens`` ``C`` and ``queue_capacity`` ``K`` may be ``inf``,
    ``max_batched_tokens`` ``M >= cap``, times in seconds). ``percentile`` a scalar or one
    per scenario in [0, 1]; ``more_percentiles`` further quantiles of every scenario from
    the same runs (each q in [0, 1]). ``trace``: arrival times (sorted, shared by every lane; then
    ``lam`` is optional and ``n = len(trace)``), or a mapping with ``arrival_s`` and
    optionally ``prompt_tokens`` / ``output_tokens`` (integers >= 1) replayed as well.
    ``scenario_ids`` key each scenario's random streams (default: positions).
    ``max_lanes`` bounds the replications (jobs) per compiled chunk (memory) and ``lanes``
    the lanes that run them, each taking the next job when its own ends. ``scheduler_policy``:
    ``"chunked"`` (SPEC 10's rule 3) or ``"prefill_first"`` (docs/continuous.md, "Engine
    variants").

    Returns, for each of ``ttft``, ``tpot``, ``e2e``: ``{name}_mean_s``, ``{name}_p_s``
    and their 95% half-widths ``{name}_mean_hw_s``, ``{name}_p_hw_s``; ``mean_running``,
    ``step_mean_s``, ``output_tok_s``, ``kv_util``, ``kv_cached_util``, ``drop_rate``
    (each with ``_hw``), ``preempt`` (0: no preemption under this scheduler), ``stable``,
    ``steady_frac`` (share of steady replications) and ``steps`` (mean steps per
    replication). Not stable -> every latency and its half-width is ``+inf``. For each q in
    ``more_percentiles``, ``{name}_p{tag}_s`` and ``{name}_p{tag}_hw_s`` with ``tag`` =
    `percentile_tag` (q) (e.g. ``ttft_p50_s`` for 0.5).
    """
    use_trace = trace is not None
    prefill_first = _prefill_first(scheduler_policy, "simulate_continuous")
    p = _validate(params, need_lam=not use_trace)
    s = p["cap"].shape[0]
    reps = int(settings.replications)
    if reps < 1 or settings.warmup < 0 or lanes < 1 or max_lanes < 1:
        raise CBSimulationError("simulate_continuous: replications, lanes and max_lanes must "
                                "be >= 1 and warmup >= 0")
    tr_a = tr_p = tr_o = np.zeros(1)
    if trace is not None:
        tr_a, tr_p, tr_o = trace_arrays(trace, settings.warmup)
        n = tr_a.shape[0]
    else:
        if settings.n_requests < 4:
            raise CBSimulationError("simulate_continuous: n_requests must be >= 4")
        n = settings.warmup + settings.n_requests
    try:
        q = np.broadcast_to(np.asarray(percentile, np.float64), (s,)).copy()
    except ValueError:
        raise CBSimulationError(f"simulate_continuous: percentile must be a scalar or one per "
                                f"scenario ({s}), got shape {np.shape(percentile)}") from None
    if np.any(~((q >= 0) & (q <= 1))):
        raise CBSimulationError(f"simulate_continuous: percentile must lie in [0, 1], got {percentile!r}")
    more = tuple(float(x) for x in more_percentiles)
    if any(not 0.0 <= x <= 1.0 for x in more):
        raise CBSimulationError(f"simulate_continuous: more_percentiles must lie in [0, 1], got {more_percentiles!r}")
    names = [f"{m}_{k}" for m in ("ttft", "tpot", "e2e") for k in ("mean_s", "p_s", "mean_hw_s", "p_hw_s")]
    names += [f"{k}{sfx}" for k in ("mean_running", "step_mean_s", "output_tok_s", "kv_util",
                                    "kv_cached_util", "drop_rate") for sfx in ("", "_hw")]
    if s == 0:
        out = {k: np.empty(0) for k in names + ["preempt", "steady_frac", "steps"]}
        out.update({f"{m}_p{percentile_tag(x)}{k}": np.empty(0) for x in more
                    for m in ("ttft", "tpot", "e2e") for k in ("_s", "_hw_s")})
        out["stable"] = np.empty(0, bool)
        return out
    ids = np.arange(s, dtype=np.int64) if scenario_ids is None else np.asarray(scenario_ids, np.int64).reshape(s)
    chunk = max(1, min(s, max(1, max_lanes // reps), _MEM_BUDGET // (_BYTES_PER_REQUEST * n * reps)))
    n_chunks = -(-s // chunk)
    # Longest jobs first (lanes take the next job when theirs ends, so the short ones fill
    # in behind the long ones instead of the long ones running alone at the end); results
    # do not depend on the order: each job's streams are keyed by its scenario id.
    order = np.argsort(-_expected_steps(p, n), kind="stable")
    per = np.empty((s, reps, len(_SUMMARY) + 3 * (1 + len(more))))
    for ci in range(n_chunks):
        lo, hi = ci * chunk, min(s, (ci + 1) * chunk)
        take = order[np.minimum(np.arange(lo, lo + chunk), s - 1)]  # pad with the last one
        pc = {k: jnp.asarray(v[take]) for k, v in p.items()}
        idc = jnp.asarray(ids[take] % (1 << 31), jnp.int32)
        seed = jnp.uint32(settings.seed)
        a, pp, oo, _ = _chunk_draws(seed, idc, pc, jnp.asarray(tr_a), jnp.asarray(tr_p),
                                    jnp.asarray(tr_o), n=n, reps=reps, use_trace=use_trace)
        summ, ttft, tpot, e2e = (np.asarray(x) for x in _chunk_sim(
            seed, idc, pc, a, pp, oo, warmup=int(settings.warmup), reps=reps,
            slots=_slots(np.max(p["cap"][take]), n),
            lanes=int(lanes), prefill_first=prefill_first))
        used = (hi - lo) * reps
        summ = summ[:used]
        n_adm = summ[:, _SUMMARY.index("n_adm")].astype(np.int64)
        n_tp = summ[:, _SUMMARY.index("n_tpot")].astype(np.int64)
        rows = order[lo:hi]
        quant = []
        for ql in [np.repeat(q[rows], reps)] + [np.full(used, x) for x in more]:
            quant += [_sorted_quantiles(ttft[:used], n_adm, ql), _sorted_quantiles(tpot[:used], n_tp, ql),
                      _sorted_quantiles(e2e[:used], n_adm, ql)]
        per[rows] = np.concatenate([summ, np.stack(quant, axis=1)], axis=1).reshape(hi - lo, reps, -1)
    return _aggregate(per, reps, more)


def percentile_tag(q: float) -> str:
    """The key tag of quantile ``q`` in `simulate_continuous`'s ``more_percentiles``
    outputs: 100 q without trailing zeros, ``_`` for the decimal point (0.5 -> ``50``,
    0.999 -> ``99_9``)."""
    return f"{100.0 * q:.6g}".replace(".", "_")


def _expected_steps(p: dict[str, np.ndarray], n: int) -> np.ndarray:
    """A rough step count per replication (only orders scenarios into chunks): each
    request needs about O steps, shared by the sequences running together, about
    ``lam O T`` of them with ``T`` a decode step at that occupancy (at least 1, at most
    the cap)."""
    t_step = p["t_fixed"] + p["t_token"] * (1.0 + p["lam"] * p["prompt_mean"] * p["t_fixed"])
    running = np.clip(p["lam"] * p["output_mean"] * t_step, 1.0, p["cap"])
    return n * p["output_mean"] / running


def _aggregate(per: np.ndarray, reps: int, more: tuple[float, ...] = ()) -> dict[str, np.ndarray]:
    col = {name: j for j, name in enumerate(_SUMMARY)}
    col.update(ttft_p=len(_SUMMARY), tpot_p=len(_SUMMARY) + 1, e2e_p=len(_SUMMARY) + 2)
    kinds = ["mean", "p"]
    for i, x in enumerate(more):
        tag = f"p{percentile_tag(x)}"
        kinds.append(tag)
        col.update({f"{m}_{tag}": len(_SUMMARY) + 3 * (i + 1) + j for j, m in enumerate(("ttft", "tpot", "e2e"))})
    tq = student_t975(reps - 1)
    steady = per[:, :, col["steady"]] > 0.5
    stable = np.all(steady, axis=1)

    def mean_hw(x):
        finite = np.all(np.isfinite(x), axis=1)
        with np.errstate(invalid="ignore"):
            m = x.mean(axis=1)
            if reps < 2:
                return m, np.full(x.shape[0], np.inf)
            sd = np.where(finite[:, None], x, 0.0).std(axis=1, ddof=1)
        return m, np.where(finite, tq * sd / np.sqrt(reps), np.inf)

    out: dict[str, np.ndarray] = {}
    for met in ("ttft", "tpot", "e2e"):
        for kind in kinds:
            m, hw = mean_hw(per[:, :, col[f"{met}_{kind}"]])
            out[f"{met}_{kind}_s"] = np.where(stable, m, np.inf)
            out[f"{met}_{kind}_hw_s"] = np.where(stable, hw, np.inf)
    for name, key in (("mean_running", "mean_running"), ("step_mean_s", "step_mean"),
                      ("output_tok_s", "output_tok_s"), ("kv_util", "kv_util"),
                      ("kv_cached_util", "kv_cached_util"), ("drop_rate", "drop_rate")):
        out[name], out[name + "_hw"] = mean_hw(per[:, :, col[key]])
    out["preempt"] = np.zeros(per.shape[0])
    out["stable"] = stable
    out["steady_frac"] = steady.mean(axis=1)
    out["steps"] = per[:, :, col["steps"]].mean(axis=1)
    return out
