"""Toy serving models with closed forms: single-server queues, alone or as tandem stages.

Each replica is one FIFO server; `replicas` split Poisson arrivals at random, so one replica
sees lambda = arrival_rps / replicas. The row axis is `service_ms` (the mean service time: the
work per request a decision can afford, `b_max_slo` the largest that meets the SLO), the
group axis `replicas`. Everything is in ms; rho = lambda service_ms.

* `MM1Queue` (serving "toy-mm1"): exponential service. The sojourn is Exp(mu - lambda):
  mean service_ms / (1 - rho), percentile -ln(1 - q) service_ms / (1 - rho).
* `MD1Queue` (serving "toy-md1"): deterministic service D = service_ms. Mean sojourn by
  Pollaczek-Khinchine, D + rho D / (2 (1 - rho)); the waiting time's exact distribution
  (below) gives the percentile. Fed by arrivals at least D apart (`_arrival_gap_ms`, from a
  tandem's link) it never waits: the sojourn is D.

The M/D/1 waiting time W (FIFO; Crommelin 1932, in the stable form of Franx 2001,
"A simple solution for the M/D/c waiting time distribution", Oper. Res. Lett. 29, c = 1):
for w = k D + u, 0 <= u < D,

    P(W <= w) = sum_{j=0}^{k} Q_{k+1-j} e^{-m} m^j / j!,   m = lambda (D - u),

with Q_n = P(N <= n) the stationary number in system, from the level-crossing recursion of
the embedded chain (up- and down-crossings of each level balance; Tijms, "A First Course in
Stochastic Models", 2003, on the M/G/1 queue), all of whose terms are non-negative:

    pi_0 = 1 - rho,   pi_j a_0 = pi_0 abar_j + sum_{k=1}^{j-1} pi_k abar_{j-k+1},

a_k = e^{-rho} rho^k / k! and abar_n = sum_{k>=n} a_k. (Erlang's 1909 alternating sum is the
same function; its terms grow as e^{lambda w}, so float64 loses most digits by w ~ 30 D.)
Beyond `EXACT_SPAN` D the exponential tail P(W > w) = C e^{-theta w} is used, theta the
positive root of lambda (e^{theta D} - 1) = theta and C = (1 - rho) / (rho e^{theta D} - 1)
(the dominant pole of W's transform (1 - rho) s / (s - lambda + lambda e^{-s D})). There the
other poles add ~3e-12 of the tail at rho = 0.5 and less above; at lower loads more (4e-8
at rho = 0.1), but of a tail below 1e-25. `tests/test_testing_toy.py` checks both parts
against Erlang's sum in 100-digit decimals.

`simulate` is the plain-NumPy reference they are all checked against by simulation: FIFO
single servers in series by Lindley's recursion, with `batch_means` confidence intervals.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.scipy.special import gammaln
from scipy import stats

from sweep._numerics import safe_div
from sweep.errors import GridError
from sweep.models import base
from sweep.models.base import UNLIMITED, Column, Decisions, Domain, Param, ServingModel
from sweep.models.compose import ARRIVAL_GAP, DEPARTURE_GAP
from sweep.models.shared import columns as shared
from sweep.models.shared.sojourn import Sojourn, exponential, regula_falsi

if TYPE_CHECKING:
    from sweep.grid.spec import GridSpec

INF = jnp.inf
#: The M/D/1 waiting time is exact up to this many service times, an exponential tail beyond.
EXACT_SPAN = 16
#: Newton steps for theta (monotone from the right; ~35 linear steps at rho = 1e-15, then quadratic).
THETA_STEPS = 64

DOMAINS: dict[str, Domain] = {
    **shared.DOMAINS,
    # 1 ns to 2.8 hours per request
    "service_ms": Domain(1e-6, 1e7, "ms"),
    "slo_ms": Domain(0, 1e9, "ms", lo_open=True, inf=True),
}

PARAMS: tuple[Param, ...] = (
    # the queue reads neither; the engine indexes the catalog by them, the cost reads the GPU's price
    Param("model", "name", "llama-3.1-8b", example='model = "llama-3.1-8b"'),
    Param("gpu", "name", "h100-sxm", example='gpu = "h100-sxm"'),
    Param("arrival_rps", "float", None, DOMAINS["arrival_rps"], example="arrival_rps = [10, 50]"),
    Param("slo_ms", "float", math.inf, DOMAINS["slo_ms"], example="slo_ms = 100"),
    Param("percentile", "float", 0.99, DOMAINS["percentile"], example="percentile = 0.99"),
    Param("rho_max", "float", 0.85, DOMAINS["rho_max"], example="rho_max = 0.85"),
    Param("rho_min", "float", 0.5, DOMAINS["rho_min"], example="rho_min = 0.5"),
    Param("replicas", "int", 1, DOMAINS["replicas"], example="replicas = [1, 2, 4]"),
    Param("service_ms", "float", None, DOMAINS["service_ms"], example="service_ms = [5, 10, 20]"),
)
REQUIRED: tuple[str, ...] = ("arrival_rps", "service_ms")

COLUMNS: tuple[Column, ...] = (
    base.POINT_ID,
    shared.MODEL,
    shared.GPU,
    shared.ARRIVAL_RPS,
    shared.REPLICAS,
    Column("service_ms", "float64", "ms", "Mean service time of one request at one server."),
    Column("slo_ms", "float64", "ms", "Latency SLO at `percentile`; NULL (the grid's inf, the default) = none.",
           null_when=UNLIMITED),
    Column("percentile", "float64", "-", "Percentile q of the SLO."),
    Column("rho_max", "float64", "-", "Near-saturation threshold (action, replicas_min)."),
    Column("rho_min", "float64", "-", "Over-provisioning threshold (action)."),
    Column("lambda_per_replica_rps", "float64", "requests/s", "arrival_rps / replicas."),
    Column("capacity_rps", "float64", "requests/s", "1000 / service_ms: one server's capacity."),
    Column("fleet_capacity_rps", "float64", "requests/s", "replicas x capacity_rps."),
    Column("rho", "float64", "-", "lambda x service_ms: the server's utilisation."),
    Column("stable", "bool", "-", "rho < 1."),
    Column("e_wait_ms", "float64", "ms", "Mean wait before service.", null_when="stable"),
    Column("e_resp_ms", "float64", "ms", "Mean sojourn (wait + service).", null_when="stable"),
    Column("latency_ms", "float64", "ms", "Sojourn at `percentile`.", null_when="stable"),
    base.SLO_OK,
    Column("mem_ok", "bool", "-", "Always true: the toy has no memory model."),
    base.FEASIBLE,
    base.ACTION,
    Column("cost_usd_per_hour", "float64", "USD/h", "replicas x usd_per_gpu_hour (a replica is one GPU)."),
)

DECISIONS = Decisions(
    row_axes=("service_ms",),
    group_axes=("replicas",),
    size="replicas",
    capacity="capacity_rps",
    latency="latency_ms",
    mean_latency="e_resp_ms",
    utilisation="rho",
    answer_fields=(
        ("", "service_ms", "float64", "ms"),
        ("_latency_ms", "latency_ms", "float64", "ms"),
        ("_e_resp_ms", "e_resp_ms", "float64", "ms"),
        ("_capacity_rps", "capacity_rps", "float64", "requests/s"),
        ("_rho", "rho", "float64", "-"),
        ("_point_id", "point_id", "int64", "-"),
    ),
)


class Queue(ServingModel):
    """One FIFO server per replica (module docstring); a subclass gives the sojourn."""

    name: ClassVar[str] = "analytic"
    params: ClassVar[tuple[Param, ...]] = PARAMS
    columns: ClassVar[tuple[Column, ...]] = COLUMNS
    echo: ClassVar[tuple[str, ...]] = ("model", "gpu", "arrival_rps", "replicas", "service_ms", "slo_ms", "percentile",
                                       "rho_max", "rho_min")
    decisions: ClassVar[Decisions] = DECISIONS
    row_constant: ClassVar[tuple[str, ...]] = ("model", "gpu", "arrival_rps", "replicas", "slo_ms", "percentile",
                                               "rho_max", "rho_min", "lambda_per_replica_rps", "cost_usd_per_hour")
    coefficient_keys: ClassVar[tuple[str, ...]] = ()
    monotone_in_load: ClassVar[tuple[str, ...]] = ("lambda_per_replica_rps", "rho", "e_wait_ms", "e_resp_ms",
                                                   "latency_ms")

    def fill(self, values: dict[str, list[Any]], where: Callable[[str], str],
             source: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        for key in REQUIRED:
            if key not in values:
                raise GridError(source, where(key), None, f"is required, e.g. {self.param_by_key[key].example}")
        out, facts = super().fill(values, where, source)
        return out, {**facts, "service_source": "given"}

    def static(self, spec: GridSpec) -> dict[str, Any]:
        return {}

    @abc.abstractmethod
    def sojourn(self, x: Mapping[str, Array], out: Mapping[str, Array] | None = None, **static: Any) -> Sojourn:
        """The sojourn distribution at one point (ms; `out` unused: it follows from `x`)."""

    def point(self, x: Mapping[str, Array], *args: Any, **static: Any) -> dict[str, Array]:
        lam = x["arrival_rps"] / x["replicas"]
        d = x["service_ms"]
        rho = lam * d * 1e-3
        stable = rho < 1.0
        t = self.sojourn(x)
        mean = t.mean()
        return {
            "lambda_per_replica_rps": lam,
            "capacity_rps": 1e3 / d,
            "fleet_capacity_rps": x["replicas"] * 1e3 / d,
            "rho": rho,
            "stable": stable,
            "e_wait_ms": mean - d,
            "e_resp_ms": mean,
            "latency_ms": t.quantile(x["percentile"]),
            "mem_ok": jnp.ones_like(stable),
            "cost_usd_per_hour": x["replicas"] * x["usd_per_gpu_hour"],
            "_rho_rules": rho,
            **self.departures(x),
        }

    def departures(self, x: Mapping[str, Array]) -> dict[str, Array]:
        """What a tandem's link reads of this stage's output (none: no spacing known)."""
        return {}


class MM1Queue(Queue):
    """M/M/1: the sojourn is Exp(mu - lambda), mu - lambda = (1 - rho) / service_ms."""

    serving: ClassVar[str] = "toy-mm1"

    def sojourn(self, x: Mapping[str, Array], out: Mapping[str, Array] | None = None, **static: Any) -> Sojourn:
        d = x["service_ms"]
        rho = x["arrival_rps"] / x["replicas"] * d * 1e-3
        stable = rho < 1.0
        return exponential(safe_div(1.0 - rho, d, stable, 1.0), stable)


class MD1Queue(Queue):
    """M/D/1: the waiting time's exact distribution (module docstring); no wait where the
    arrivals are spaced at least D apart."""

    serving: ClassVar[str] = "toy-md1"

    def departures(self, x: Mapping[str, Array]) -> dict[str, Array]:
        """One deterministic server: consecutive departures are at least D apart."""
        return {DEPARTURE_GAP: x["service_ms"]}

    def sojourn(self, x: Mapping[str, Array], out: Mapping[str, Array] | None = None, **static: Any) -> Sojourn:
        d = x["service_ms"]
        rho = x["arrival_rps"] / x["replicas"] * d * 1e-3
        stable = rho < 1.0
        gap = x[ARRIVAL_GAP] if ARRIVAL_GAP in x else jnp.zeros_like(d)
        spaced = stable & (gap >= d)
        rho = jnp.where(stable, rho, 0.5)  # a stand-in where unbounded (masked by `bounded`)
        cdf, quantile = md1_wait(rho, d)
        wait = rho * d / (2.0 * (1.0 - rho))  # Pollaczek-Khinchine with E[S^2] = D^2

        def cdf_w(w: Array) -> Array:
            return jnp.where(spaced, jnp.where(w >= 0.0, 1.0, 0.0), cdf(w))

        def quantile_w(p: Array) -> Array:
            return jnp.where(spaced, 0.0, quantile(p))

        breaks = d * jnp.arange(1.0, EXACT_SPAN + 1.0)  # the density jumps at D, kinks at 2D, ...
        atom = jnp.where(spaced, 1.0, 1.0 - rho)
        return Sojourn(d, atom, d + jnp.where(spaced, 0.0, wait), cdf_w, quantile_w, stable, breaks)


def _poisson_pmfs(m: Array, n: int) -> Array:
    """e^-m m^j / j! for j = 0 .. n-1. m is kept >= 1e-300, so that log m is finite: the
    values are then right at m = 0 (1 for j = 0, 0 beyond), and so are their derivatives."""
    j = np.arange(n, dtype=np.float64)
    return jnp.exp(j * jnp.log(jnp.maximum(m, 1e-300)) - m - gammaln(j + 1.0))


def _poisson_pmfs_product(m: Array, n: int) -> Array:
    """The same as a running product from e^-m (m <= 1 here: nothing overflows), a few ulps
    closer than the logarithms where it is summed to an F near 1; unrolled, n is small."""
    pmf = [jnp.exp(-m)]
    for j in range(1, n):
        pmf.append(pmf[-1] * m / j)
    return jnp.stack(pmf)


def md1_wait(rho: Array, d: Array) -> tuple[Callable[[Array], Array], Callable[[Array], Array]]:
    """The M/D/1 waiting time's CDF and quantile function (ms) at utilisation rho < 1 and
    service time d (module docstring: exact below `EXACT_SPAN` d, the exponential tail above)."""
    n = EXACT_SPAN
    lam = rho / d
    a = _poisson_pmfs(rho, n + 40)  # Poisson(rho) beyond n + 40: < 1e-60
    abar = jnp.cumsum(a[::-1])[::-1]  # P(A >= j), the small terms first
    k = np.arange(n + 1)

    def level(j: int, pi: Array) -> Array:  # crossings between levels j - 1 and j
        inner = jnp.where((k >= 1) & (k < j), pi * abar[jnp.clip(j - k + 1, 0, n + 39)], 0.0)
        return pi.at[j].set((pi[0] * abar[j] + jnp.sum(inner)) / a[0])

    pi = jax.lax.fori_loop(1, n + 1, level, jnp.zeros(n + 1).at[0].set(1.0 - rho))
    q_table = jnp.cumsum(pi)  # Q_0 .. Q_n

    def newton(_: int, x: Array) -> Array:
        return x - (rho * jnp.expm1(x) - x) / (rho * jnp.expm1(x) - (1.0 - rho))

    x0 = jnp.minimum(2.0 * (1.0 - rho) / rho, 2.0 * jnp.log(2.0 / rho))  # both right of the root
    x = jax.lax.fori_loop(0, THETA_STEPS, newton, x0)  # theta d
    c = (1.0 - rho) / (x - (1.0 - rho))  # (1 - rho) / (rho e^x - 1) at the root
    span = n * d
    terms = jnp.arange(n, dtype=jnp.float64)  # j of the sum

    def cdf(w: Array) -> Array:
        ws = jnp.clip(w, 0.0, span)
        whole = jnp.minimum(jnp.floor(ws / d), n - 1.0)  # w = whole D + u
        m = lam * jnp.maximum(d - (ws - whole * d), 0.0)
        q = q_table[jnp.clip(whole + 1.0 - terms, 0.0, n).astype(jnp.int32)]  # Q_{k+1-j}
        exact = jnp.sum(jnp.where(terms <= whole, q * _poisson_pmfs_product(m, n), 0.0))
        tail = 1.0 - c * jnp.exp(-x * jnp.maximum(w, span) / d)
        return jnp.where(w < 0.0, 0.0, jnp.where(w < span, exact, tail))

    def quantile(p: Array) -> Array:
        beyond = p > 1.0 - c * jnp.exp(-x * n)
        tail = jnp.log(c / jnp.where(beyond, 1.0 - p, 1.0)) * d / x
        inner = regula_falsi(cdf, p, jnp.zeros_like(d), span)
        return jnp.where(p <= 1.0 - rho, 0.0, jnp.where(beyond, jnp.maximum(tail, span), inner))

    return cdf, quantile


#: The toy modes: each queue alone (register one in a test to run it through the engine).
MODELS: tuple[Queue, ...] = (MM1Queue(), MD1Queue())


# --------------------------------------------------------------------------- simulation


def fifo_departures(arrivals: np.ndarray, services: np.ndarray) -> np.ndarray:
    """Departure times of a FIFO single server from sorted arrival times and service times
    (ms). Lindley's recursion W_n = max(0, W_{n-1} + S_{n-1} - (A_n - A_{n-1})) is solved as
    a reflected random walk, W_n = P_n - min_{k <= n} P_k with P_0 = 0 and P_n the partial
    sums of S_{n-1} - (A_n - A_{n-1}), so one pass of NumPy does it."""
    steps = services[:-1] - np.diff(arrivals)
    walk = np.concatenate([[0.0], np.cumsum(steps)])
    return arrivals + (walk - np.minimum.accumulate(walk)) + services


def simulate(rng: np.random.Generator, n: int, arrival_rps: float, stages: Sequence[tuple[str, float, int]],
             transfer_ms: float = 0.0) -> np.ndarray:
    """End-to-end sojourns (ms) of `n` Poisson arrivals through FIFO single-server stages in
    series, each (kind, service_ms, replicas): kind "M" (exponential service of mean
    service_ms) or "D" (exactly service_ms); each request picks a replica at random at every
    stage, and waits `transfer_ms` between two stages. The reference of the tandem tests."""
    start = np.cumsum(rng.exponential(1e3 / arrival_rps, n))
    t = start
    for i, (kind, service_ms, replicas) in enumerate(stages):
        t = t + (transfer_ms if i else 0.0)
        service = rng.exponential(service_ms, n) if kind == "M" else np.full(n, float(service_ms))
        replica = rng.integers(replicas, size=n)
        done = np.empty(n)
        order = np.argsort(t, kind="stable")  # arrival order at this stage
        for r in range(replicas):
            mine = order[replica[order] == r]
            done[mine] = fifo_departures(t[mine], service[mine])
        t = done
    return t - start


def batch_means(samples: np.ndarray, statistic: Callable[[np.ndarray], float], batches: int = 20,
                level: float = 0.999) -> tuple[float, float]:
    """A statistic of a simulated run and the half-width of its `level` confidence interval
    by batch means: the run cut into `batches` consecutive batches, long enough that their
    statistics are nearly independent, and Student's t over them."""
    values = np.array([statistic(b) for b in np.array_split(samples, batches)])
    half = stats.t.ppf(0.5 + 0.5 * level, batches - 1) * values.std(ddof=1) / math.sqrt(batches)
    return float(values.mean()), float(half)
