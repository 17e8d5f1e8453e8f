"""`deployment(row, meta)`: one continuous-serving configuration as the commands that deploy and
check it, with the figures the check should print (docs/deploy.md)."""

from __future__ import annotations

import math
import os
import shlex
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweep.catalog import Gpu, Model, packaged_catalog
from sweep.deploy import bench as b
from sweep.deploy.engines import ENGINES, KV_DTYPES, PORTS, Knobs, launch
from sweep.deploy.memory import VLLM_MAX_UTILIZATION, Memory, kv_share
from sweep.errors import DeployError, did_you_mean

if TYPE_CHECKING:
    from sweep.grid.spec import GridSpec

#: The columns a row must carry to be deployed (a continuous-serving point).
NEEDED = ("model", "gpu", "gpus_per_replica", "replicas", "batch_size", "kv_capacity_tokens",
          "kv_bytes_per_elem", "weight_bytes_per_param", "prompt_tokens", "output_tokens", "arrival_rps")

#: Written under a run folder by `Deployment.write`.
FOLDER = "deploy"

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def meta_of(spec: GridSpec) -> dict[str, Any]:
    """What `deployment` needs from a grid besides the row: its options and catalog entries."""
    return {
        "grid": spec.name, "source": spec.source, "engine": spec.options.engine,
        "kv_allocation": spec.options.kv_allocation, "block_tokens": spec.options.block_tokens,
        "reserve_fraction": spec.options.reserve_fraction, "latency_model": spec.options.latency_model,
        "service_source": spec.service_source, "scheduler_policy": spec.options.scheduler_policy,
        "scheduler_steps": spec.options.scheduler_steps, "kv_admission": spec.options.kv_admission,
        "models": {m.name: m for m in spec.models}, "gpus": {g.name: g for g in spec.gpus},
    }


@dataclass
class Deployment:
    """One replica's launch command, the benchmark that checks it, and what it should print.

    `launch` / `bench` are argv lists (shell-quote with `shlex.join`); `launch_exact` pins the KV
    capacity with the engine's exact flag instead of the memory fraction; `files` are the
    configuration files the commands read (TensorRT-LLM's YAML), written beside them."""

    engine: str
    model_id: str
    row: dict[str, Any]
    meta: dict[str, Any]
    memory: Memory
    launch: list[str]
    launch_exact: list[str]
    knob: tuple[str, str | None]
    files: dict[str, str]
    bench: list[str]
    prompts: int
    span: float | None
    prompt_lengths: b.Lengths
    output_lengths: b.Lengths
    predicted: list[b.Figure]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    # -- text --------------------------------------------------------------------------------

    def text(self) -> str:
        """The deployment as Markdown (also what the terminal prints)."""
        r, m = self.row, self.memory
        name = ENGINE_NAMES[self.engine]
        replicas, gpus = int(r["replicas"]), int(r["gpus_per_replica"])
        clients = b.closed_clients(r)
        if clients is None:
            lam = float(r.get("lambda_per_replica_rps") or float(r["arrival_rps"]) / replicas)
            load = f"{float(r['arrival_rps']):g} req/s in all, {lam:g} req/s a replica"
            bench_load = f"{lam:g} req/s"
        else:
            due = b._num(r, "lambda_per_replica_rps")
            load = (f"a closed loop of {float(r['clients']):g} clients in all, {clients} a replica"
                    + (f", due at most {due:g} req/s a replica" if due is not None else "")
                    + f" ({b._num(r, 'throughput_rps') or 0.0:.4g} req/s a replica)")
            bench_load = f"{clients} clients"
        pid = f", point_id {r['point_id']}" if r.get("point_id") is not None else ""
        grid = f" (grid {self.meta['grid']}{pid})" if self.meta.get("grid") else ""
        lines = [f"# Deploy {r['model']} on {r['gpu']} with {name}{grid}", ""]
        lines.append(f"{replicas} replica{'s' if replicas != 1 else ''} x {gpus} GPU{'s' if gpus != 1 else ''} "
                     f"(tensor parallel {gpus}; {replicas * gpus} GPUs), cap {int(r['batch_size'])} sequences, "
                     f"token budget {_budget_text(r)}, KV {_dtype(r['kv_bytes_per_elem'])}, weights "
                     f"{_dtype(r['weight_bytes_per_param'])}; KV capacity {m.kv_capacity_tokens:,.0f} tokens a "
                     f"replica; {load}" + _price(r) + ".")
        lines += ["", f"## Launch (each replica: {gpus} GPU{'s' if gpus != 1 else ''})", "", "```sh",
                  _shell(self.launch), "```", ""]
        flag, value = self.knob
        lines.append(self._knob_line(flag, value))
        lines += ["", "Or pin the KV capacity exactly, whatever the engine's working memory:", "", "```sh",
                  _shell(self.launch_exact), "```"]
        for fname, body in self.files.items():
            lines += ["", f"`{fname}`:", "", "```yaml", body.rstrip(), "```"]
        lines += ["", f"## Benchmark (one replica at its share of the load, {bench_load})", "", "```sh",
                  _shell(self.bench), "```", ""]
        lines.append(self._bench_line())
        lines += ["", "## What the benchmark should print", "", self._figure_table()]
        if self.warnings:
            lines += ["", "## Warnings", ""] + [f"- {w}" for w in self.warnings]
        if self.notes:
            lines += ["", "## Notes", ""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def _knob_line(self, flag: str, value: str | None) -> str:
        m = self.memory
        gb = 1e-9
        parts = (f"weights {m.weights_per_gpu * gb:.2f} GB + KV {m.kv_per_gpu * gb:.2f} GB + working memory "
                 f"{m.work_per_gpu * gb:.2f} GB (reserve_fraction {m.reserve_fraction:g}) of {m.hbm_bytes * gb:g} GB "
                 "a GPU")
        if value is None:
            return (f"No {flag}: the modelled KV does not fit this engine's layout ({parts}); the engine holds about "
                    f"{m.tokens_that_fit:,.0f} tokens a replica, not {m.kv_capacity_tokens:,.0f}.")
        formula = {"vllm": "(W/g + KV + A) / H", "sglang": "(W/g + KV) / H", "trtllm": "KV / (H - W/g - A)"}
        if self.engine == "vllm" and m.vllm_utilization() > VLLM_MAX_UTILIZATION:
            return (f"`{flag} {value}`: {formula[self.engine]} = {m.vllm_utilization():.4f} with {parts}, capped at "
                    f"{VLLM_MAX_UTILIZATION:.2f} so that vLLM starts (see the notes; docs/deploy.md, the memory knob).")
        return (f"`{flag} {value}` = {formula[self.engine]} with {parts}: the engine's KV cache then holds the "
                f"modelled {m.kv_capacity_tokens:,.0f} tokens (docs/deploy.md, the memory knob).")

    def _bench_line(self) -> str:
        p, o = self.prompt_lengths, self.output_lengths
        span = (f"the relaxation span is W = {self.span:,.0f} arrivals (mean running / (1 - rho)), so the first "
                f"~{2 * self.span:,.0f} requests see a filling engine and the last ones a draining one"
                if self.span is not None else "the relaxation span is unknown (no stable prediction)")
        clients = b.closed_clients(self.row)
        count = (f"{self.prompts:,} prompts (at least {b.MIN_PROMPTS:,}, and {b.SPANS} a client: the opening wave of "
                 f"every client's prompt at once is a small part of the run)" if clients is not None else
                 f"{self.prompts:,} prompts (at least {b.MIN_PROMPTS:,}, {b.SPANS} relaxation spans and "
                 f"{b.MIN_SECONDS:g} s of arrivals): {span}")
        return (f"{count}. Lengths: prompts {p.mean} tokens, outputs {o.mean}, "
                f"uniform with range ratio {p.ratio:g} / {o.ratio:g} (CV {p.cv_bench:.3g} / {o.cv_bench:.3g}; "
                f"the grid's lognormal CV {p.cv_grid:g} / {o.cv_grid:g}).")

    def _figure_table(self) -> str:
        sim = any(f.simulated_ms is not None for f in self.predicted)
        head = "| printed as | predicted (ms) |" + (" simulated (ms) |" if sim else "") + " what it is |"
        rule = "|---|---:|" + ("---:|" if sim else "") + "---|"
        rows = [head, rule]
        for f in self.predicted:
            value = f"{f.value_ms:,.1f}" if f.value_ms is not None else "-"
            cells = [f"{f.stat} {f.metric} (ms):", value]
            if sim:
                cells.append(f"{f.simulated_ms:,.1f}" if f.simulated_ms is not None else "-")
            cells.append(f.why + (f" (`{f.source}`)" if f.source and f.value_ms is not None else ""))
            rows.append("| " + " | ".join(cells) + " |")
        return "\n".join(rows)

    # -- files -------------------------------------------------------------------------------

    def write(self, run_dir: str | Path) -> list[Path]:
        """Write `deploy/README.md`, `launch.sh`, `bench.sh` (and the engine's config files)
        under `run_dir`; each file replaced whole. Returns the paths written."""
        folder = Path(run_dir) / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        head = "#!/usr/bin/env bash\n# written by `sweep deploy`; see README.md beside this file\nset -euo pipefail\n"
        launch_sh = (head + "cd \"$(dirname \"$0\")\"\n" + _shell(self.launch) + "\n\n"
                     "# or pin the KV capacity exactly, whatever the engine's working memory:\n"
                     + "\n".join("# " + line for line in _shell(self.launch_exact).splitlines()) + "\n")
        bench_sh = head + "cd \"$(dirname \"$0\")\"\n" + _shell(self.bench) + "\n"
        out = {"README.md": self.text(), "launch.sh": launch_sh, "bench.sh": bench_sh, **self.files}
        written = []
        for name, body in out.items():
            written.append(_replace(folder / name, body, executable=name.endswith(".sh")))
        return written


def deployment(row: Mapping[str, Any], meta: Mapping[str, Any], *, engine: str | None = None,
               model_id: str | None = None) -> Deployment:
    """The deployment of one continuous-serving point `row` (a points/ or optimum row with the
    point's columns, as `sweep.api.explain` or the Parquet files give it) of a grid described by
    `meta` (`meta_of(spec)`, or a mapping with the same keys). `engine` overrides the grid's
    `[options] engine`; `model_id` the catalog's `hf_id`. Bad input raises `DeployError`."""
    source = str(meta.get("source") or meta.get("grid") or "<row>")
    clients = b.closed_clients(row)
    # a pure closed loop has no arrival rate (NULL): its clients set the load
    missing = [k for k in NEEDED if row.get(k) is None and not (k == "arrival_rps" and clients is not None)]
    if missing:
        raise DeployError(source, missing[0], None,
                          "the row lacks this column: a deployment needs a continuous-serving point "
                          f"(serving = \"continuous\"; columns {', '.join(NEEDED)})")
    engine = engine or str(meta.get("engine") or "vllm")
    if engine not in ENGINES:
        raise DeployError(source, "engine", engine,
                          f"must be one of {', '.join(ENGINES)}{did_you_mean(engine.lower(), ENGINES)}")
    model, gpu = _entries(row, meta, source)
    model_id = model_id or model.hf_id
    if not model_id:
        raise DeployError(model.origin, f"{model.name}.hf_id", None,
                          "no checkpoint to load: give the model's Hugging Face id or folder, e.g. "
                          f"[catalog.models.{model.name}] hf_id = \"owner/name\" in the grid, or --model-id")
    kv_elem = float(row["kv_bytes_per_elem"])
    if kv_elem not in KV_DTYPES[engine]:
        sizes = ", ".join(f"{k:g} -> {v}" for k, v in KV_DTYPES[engine].items())
        raise DeployError(source, "kv_bytes_per_elem", kv_elem,
                          f"{ENGINE_NAMES[engine]} has no KV cache dtype of that size (bytes -> --kv-cache-dtype: "
                          f"{sizes})")
    paged = str(meta.get("kv_allocation", "contiguous")) == "paged"
    block = int(meta.get("block_tokens", 16)) if paged else 1
    gpus = int(row["gpus_per_replica"])
    memory = Memory(
        hbm_bytes=gpu.hbm_bytes,
        weights_bytes=model.weights_bytes(float(row["weight_bytes_per_param"])),
        kv_bytes_per_token=model.kv_bytes_per_token(kv_elem),
        kv_capacity_tokens=float(row["kv_capacity_tokens"]),
        gpus=gpus,
        reserve_fraction=float(meta.get("reserve_fraction", 0.0)),
        block_tokens=float(block),
        kv_share=kv_share(model.attention, model.n_kv_heads, gpus),
    )
    budget = b._num(row, "max_batched_tokens")
    knobs = Knobs(model_id=model_id, gpus=gpus, cap=int(row["batch_size"]),
                  budget=int(budget) if budget is not None else None, kv_bytes_per_elem=kv_elem,
                  weight_bytes_per_param=float(row["weight_bytes_per_param"]), paged=paged,
                  block_tokens=int(meta.get("block_tokens", 16)), kv_capacity_tokens=int(memory.kv_capacity_tokens),
                  memory=memory, scheduler_policy=str(meta.get("scheduler_policy", "chunked")),
                  scheduler_steps=int(meta.get("scheduler_steps", 1)),
                  kv_admission=str(meta.get("kv_admission", "reserve")))
    cmd = launch(engine, knobs)
    replicas = int(row["replicas"])
    if clients is None:
        lam = b._num(row, "lambda_per_replica_rps") or float(row["arrival_rps"]) / replicas
        n, span = b.prompts(lam, b._num(row, "mean_running") if row.get("stable") else None,
                            b._num(row, "rho") if row.get("stable") else None)
    else:  # the closed loop: its due rate (inf: none) and each replica's clients
        lam = b._num(row, "lambda_per_replica_rps") or math.inf
        n, span = b.closed_prompts(clients), None
    p = b.lengths(float(row["prompt_tokens"]), float(row.get("prompt_cv") or 0.0))
    o = b.lengths(float(row["output_tokens"]), float(row.get("output_cv") or 0.0))
    q = float(row.get("percentile") or 0.99)
    latency_model = str(meta.get("latency_model", "analytic"))
    dep = Deployment(
        engine=engine, model_id=model_id, row=dict(row), meta=dict(meta), memory=memory, launch=cmd.argv,
        launch_exact=cmd.exact_argv, knob=cmd.knob, files=cmd.files,
        bench=b.bench_argv(engine, model_id, lam, n, p, o, q, clients=clients), prompts=n, span=span,
        prompt_lengths=p, output_lengths=o, predicted=b.predicted(row, latency_model, knobs.scheduler_steps),
        notes=list(cmd.notes),
    )
    if clients is not None and (b._num(row, "think_time_s") or 0.0) > 0.0:
        dep.warnings.append(f"the plan's clients think {float(row['think_time_s']):g} s between requests; "
                            "`vllm bench serve` has no think time (each client sends at once): benchmark a grid "
                            "point with think_time_s = 0, or drive the server with a client that thinks")
    _caveats(dep, p, o)
    return dep


def _entries(row: Mapping[str, Any], meta: Mapping[str, Any], source: str) -> tuple[Model, Gpu]:
    models: Mapping[str, Model] = meta.get("models") or packaged_catalog().models
    gpus: Mapping[str, Gpu] = meta.get("gpus") or packaged_catalog().gpus
    name, gname = str(row["model"]), str(row["gpu"])
    if name not in models:
        raise DeployError(source, "model", name, f"is not in the catalog{did_you_mean(name, models)}")
    if gname not in gpus:
        raise DeployError(source, "gpu", gname, f"is not in the catalog{did_you_mean(gname, gpus)}")
    return models[name], gpus[gname]


def _caveats(dep: Deployment, p: b.Lengths, o: b.Lengths) -> None:
    """What a reader must know before trusting the numbers: warnings (the plan may not hold)
    and notes (how to read the figures)."""
    r, m, w = dep.row, dep.memory, dep.warnings
    if not r.get("stable"):
        w.append("the model says this configuration cannot sustain its load (stable = false): the benchmark's "
                 "latencies will grow with its length")
    elif r.get("slo_ok") is False:
        w.append("this configuration misses an SLO at the grid's percentile (slo_ok = false)")
    rho, rho_max = b._num(r, "rho"), b._num(r, "rho_max")
    if rho is not None and rho_max is not None and rho > rho_max:
        w.append(f"rho = {rho:.3g} exceeds rho_max = {rho_max:g}: near saturation, the latencies are steep in the "
                 "load and a small error in the step times moves them a lot")
    if r.get("mem_ok") is False:
        w.append("the weights or a mean request do not fit the memory (mem_ok = false)")
    if not m.fits:
        w.append(f"the engine keeps {m.kv_share * m.gpus:g} copies of each KV element across the {m.gpus} GPUs "
                 "(a latent cache, or more GPUs than KV heads), which the model does not: it holds about "
                 f"{m.tokens_that_fit:,.0f} of the modelled {m.kv_capacity_tokens:,.0f} tokens")
    elif m.reserve_fraction == 0.0 and dep.engine in ("vllm", "trtllm"):
        w.append("[options] reserve_fraction = 0: the model leaves the engine no working memory (activations, CUDA "
                 "graphs, communication buffers), so the engine finds that much less KV than modelled; set "
                 "reserve_fraction (e.g. 0.1) in the grid and rerun, or use the exact-KV command")
    if dep.knob[1] is not None:
        dep.notes.append(f"{dep.knob[0]} is computed on the catalog's hbm_bytes ({m.hbm_bytes * 1e-9:g} GB); the "
                         "engine applies it to the memory the device reports, which can differ (an \"80 GB\" part "
                         "reports about 79-80 GiB): where it does, the exact-KV command holds the planned capacity")
    if r.get("analytic_trusted") is False:
        w.append("the point lies outside the region where the analytic model was shown accurate "
                 "(analytic_trusted = false): check it with latency_model = \"simulated\"")
    for what, ln in (("prompt", p), ("output", o)):
        if abs(ln.cv_bench - ln.cv_grid) > 0.01:
            dep.notes.append(f"the benchmark's {what} lengths spread less than the grid's (CV {ln.cv_bench:.3g} "
                             f"against {ln.cv_grid:g}; `vllm bench serve` draws uniform lengths with a range "
                             "ratio below 1): its tails will be lighter than predicted, its means comparable")
    if dep.meta.get("service_source") == "roofline":
        dep.notes.append("step times come from the roofline estimate, not measurements: the benchmark's result "
                         "(bench-*.json) calibrates them (sweep fit, sweep calibrate)")
    dep.notes.append(f"the server listens on 127.0.0.1:{PORTS[dep.engine]} (the engine's default port); run one "
                     "such server per replica behind a load balancer, and benchmark one")


def _budget_text(row: Mapping[str, Any]) -> str:
    v = b._num(row, "max_batched_tokens")
    return f"{int(v):,} tokens" if v is not None else "none (whole prompts)"


def _dtype(nbytes: Any) -> str:
    names = {4.0: "fp32", 2.0: "bf16", 1.0: "fp8", 0.5: "4-bit"}
    return names.get(float(nbytes), f"{float(nbytes):g} bytes")


def _price(row: Mapping[str, Any]) -> str:
    h, t = b._num(row, "cost_usd_per_hour"), b._num(row, "cost_usd_per_mtok")
    parts = [f"{h:,.2f} USD/h" if h is not None else "", f"{t:,.2f} USD per million output tokens" if t is not None
             else ""]
    shown = ", ".join(x for x in parts if x)
    return f"; {shown}" if shown else ""


def _shell(argv: list[str]) -> str:
    """One command as a shell line, one flag (with its value) per continued line."""
    words = [shlex.quote(a) for a in argv]
    lines: list[str] = []
    for w in words:
        if w.startswith("--") or not lines:
            lines.append(w)
        else:
            lines[-1] += " " + w
    return " \\\n  ".join(lines)


def _replace(path: Path, body: str, *, executable: bool) -> Path:
    """Write `body` to `path` through a temporary file in the same folder (never half a file)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
        os.chmod(tmp, 0o755 if executable else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
