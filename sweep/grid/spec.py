"""The validated grid: frozen records the loader builds and every later layer reads."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sweep.catalog import Gpu, Model
from sweep.models import ServingModel

if TYPE_CHECKING:
    from sweep.grid.schedule import ScheduleSpec
    from sweep.grid.search_table import SearchSpec
    from sweep.grid.uncertainty import UncertaintyOptions


@dataclass(frozen=True)
class Axis:
    """One grid parameter's values. Numbers are float64 in file units; names stay strings."""

    key: str
    values: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class Options:
    serving: str = "dynamic"
    latency_model: str = "gaussian"
    kv_allocation: str = "contiguous"
    block_tokens: int = 16
    reserve_fraction: float = 0.0
    #: the serving engine `sweep.deploy` writes launch and benchmark commands for
    #: (`serving = "continuous"`): vllm | sglang | trtllm
    engine: str = "vllm"
    #: how a continuous engine composes a step (docs/continuous.md, "Engine variants"):
    #: chunked | prefill_first
    scheduler_policy: str = "chunked"
    #: decode steps per scheduling decision (vLLM 0.6's --num-scheduler-steps); 1: every step decides
    scheduler_steps: int = 1
    #: KV blocks taken as tokens are cached, with recompute preemption (vLLM, SGLang: the
    #: default), or reserved for prompt + output at admission (TensorRT-LLM's
    #: GUARANTEED_NO_EVICT, TGI): on_demand | reserve
    kv_admission: str = "on_demand"
    #: how clients load a continuous engine: an open loop at arrival_rps, or a closed loop of
    #: `clients` that send their next request when the last one finished: open | closed
    workload: str = "open"


@dataclass(frozen=True)
class SimulationOptions:
    """`[simulation]`: the simulator's settings (SPEC 7). Present when the grid asks for
    simulated latencies (`latency_model = "simulated"`) or declares the table."""

    n_requests: int = 20_000  # arrivals per replication, after the warm-up
    warmup: int = 2_000  # leading arrivals discarded from the statistics
    replications: int = 8  # independent replications: the CI of the percentile
    seed: int = 0
    trace: str | None = None  # arrival-time trace (seconds), replayed instead of Poisson
    trace_times: tuple[float, ...] = ()
    memory_budget_bytes: int | None = None  # device buffers per simulated chunk (--memory-limit)


@dataclass(frozen=True)
class OutputOptions:
    points: str = "all"
    columns: tuple[str, ...] = ()  # empty: every point column
    partition_by: tuple[str, ...] = ()  # hive partitioning of points/ ("model", "gpu")
    row_group_rows: int = 1 << 18


@dataclass(frozen=True)
class GridSpec:
    """A validated grid: every parameter an axis (length >= 1) in the model's canonical order."""

    name: str
    source: str
    text: str
    sha256: str
    model: ServingModel
    axes: tuple[Axis, ...]
    options: Options
    output: OutputOptions
    service_source: str  # given | fitted | roofline
    models: tuple[Model, ...]
    #: every GPU the grid names: `gpu`'s values in order, then those only the model's
    #: `part_gpu_keys` name (the tables the engine gathers figures from)
    gpus: tuple[Gpu, ...]
    description: str = ""
    #: what the model's `fill` found out about the values (e.g. mean_seq_len follows seq_len)
    facts: Mapping[str, Any] = field(default_factory=dict)
    #: service_source "fitted": the profile fit (file, t_fixed_ms, t_req_ms, r2, n, residuals), else None
    fit: Mapping[str, Any] | None = None
    #: the validated `[search]` table, else None
    search: SearchSpec | None = None
    #: the simulator's settings when the grid simulates, else None
    simulation: SimulationOptions | None = None
    #: the `[uncertainty]` table, else None (docs/uncertainty.md)
    uncertainty: UncertaintyOptions | None = None
    #: a `[sensitivity]` table asks for the derivative and headroom columns
    sensitivity: bool = False
    #: the validated `[schedule]` (an hourly arrival profile), else None
    schedule: ScheduleSpec | None = None

    def axis(self, key: str) -> Axis:
        for a in self.axes:
            if a.key == key:
                return a
        raise KeyError(key)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.axes)

    @property
    def n_points(self) -> int:
        return math.prod(self.shape)

    @property
    def row_size(self) -> int:
        """Points per row (one scenario and one value of every group axis): the product of
        the row axes."""
        return math.prod(len(self.axis(k)) for k in self.model.decisions.row_axes)

    @property
    def rows_per_group(self) -> int:
        """Rows per scenario group: the product of the group axes (e.g. the replicas axis)."""
        return math.prod(len(self.axis(k)) for k in self.model.decisions.group_axes)

    @property
    def group_size(self) -> int:
        """Points per scenario group."""
        return self.row_size * self.rows_per_group

    @property
    def roofline(self) -> bool:
        return self.service_source == "roofline"

    @property
    def simulates(self) -> bool:
        return self.simulation is not None

    def point_columns(self) -> tuple[Any, ...]:
        """Every point column this grid's runs compute, in file order."""
        return self.model.point_columns(roofline=self.roofline, simulation=self.simulates,
                                        uncertainty=self.uncertainty is not None, sensitivity=self.sensitivity,
                                        part_gpu=bool(self.part_gpu_keys))

    @property
    def part_gpu_keys(self) -> tuple[str, ...]:
        """The model's `part_gpu_keys` this grid gives (a pool on a GPU of its own)."""
        return tuple(a.key for a in self.axes if a.key in self.model.part_gpu_keys)

    def gpu_index(self, name: str) -> int:
        """The position of a catalog GPU name in `gpus` (the code of the name columns)."""
        return next(i for i, g in enumerate(self.gpus) if g.name == name)
