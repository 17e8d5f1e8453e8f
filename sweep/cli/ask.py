"""`sweep ask`: a capacity question from flags, answered by the grid a planner would write.

The flags name the model, the GPU(s), the workload (mean prompt and output lengths, their
lognormal CVs, the arrival rate) and the SLOs. From them `build_ask_grid` writes a small
continuous-serving grid: every tensor-parallel size in {1, 2, 4, 8} whose weights fit the
GPU with room for a KV cache, caps on running sequences (vLLM `max_num_seqs`) and token
budgets (`max_num_batched_tokens`) around the engines' defaults, and every replica count from
1 to a bound sized from the rate. The grid runs through the library path of `sweep run`
(same compilation cache, same output folder layout, same summary) into `--out` (default
runs/ask-<slug>), then one answer is printed: the cheapest configuration that meets every
SLO within `rho_max`, its price per hour and per million output (and total) tokens, and the
runner-up. `--save-grid FILE` writes the grid as TOML; `sweep run FILE` reproduces the run.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweep.cli.tools import finite_number, int_at_least_one, seq_us
from sweep.errors import GridError, OutputError

#: Tensor-parallel sizes tried (GPUs per replica); a size whose weights leave no KV room is left out.
TP_SIZES = (1, 2, 4, 8)
#: Caps on running sequences (vLLM max_num_seqs; its default is 256 on most GPUs).
CAPS = (16, 32, 64, 128, 256)
#: Token budgets per step (vLLM max_num_batched_tokens with chunked prefill; 2048 and 8192 are
#: its defaults for online serving on small and large GPUs).
BUDGETS = (2048, 8192, 16384)
#: The least share of a GPU's usable memory left for the KV cache for a TP size to be tried.
MIN_KV_SHARE = 0.1
#: vLLM's default share of HBM the engine leaves to others (gpu_memory_utilization 0.9).
RESERVE_FRACTION = 0.1
#: The replica counts tried run from 1 to this many per req/s of the rate (at least
#: N_REPLICAS, at most MAX_REPLICAS; --max-replicas overrides): a replica serving fewer
#: than 0.25 req/s is not a plan anybody buys.
REPLICAS_PER_RPS = 4
MAX_REPLICAS = 1024
#: How many replica counts are tried: every count up to the bound when it is at most this,
#: else this many spread geometrically (dense at the low end). A fixed number keeps the grid's
#: shape, and so its compiled kernel, the same for every question on one GPU: a second
#: question finds it in the compilation cache.
N_REPLICAS = 64


@dataclass(frozen=True)
class AskQuestion:
    """The question, as given by the flags (lengths are means in tokens, rate in req/s)."""

    model: str
    gpus: tuple[str, ...]
    rate_rps: float
    prompt_tokens: float
    output_tokens: float
    prompt_cv: float | None = None
    output_cv: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    percentile: float = 0.99
    rho_max: float | None = None
    weights: str = "bf16"
    kv_dtype: str = "bf16"
    max_replicas: int | None = None
    t_seq_us: float | None = None

    def slug(self) -> str:
        """A folder-safe name for the question, e.g. llama-3.1-70b-h100-sxm-40rps-1500x300."""
        text = f"{self.model}-{'-'.join(self.gpus)}-{self.rate_rps:g}rps-{self.prompt_tokens:g}x{self.output_tokens:g}"
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def _dtype_bytes(value: str, flag: str) -> float:
    from sweep.models.base import DTYPE_BYTES

    if value.lower() not in DTYPE_BYTES:
        from sweep.errors import did_you_mean

        raise GridError("sweep ask", flag, value, f"unknown dtype{did_you_mean(value.lower(), DTYPE_BYTES)}; "
                                                  f"use one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[value.lower()]


def replica_counts(bound: int, n: int = N_REPLICAS) -> list[int]:
    """At most `n` distinct replica counts from 1 to `bound` (every one when `bound` <= n),
    geometrically spread above the dense low end, 1 and `bound` included."""
    if bound <= n:
        return list(range(1, bound + 1))
    m, values = n, set[int]()
    while len(values) < n:  # more geometric points until n distinct counts (rounding merges low ones)
        values = {max(1, round(bound ** (k / (m - 1)))) for k in range(m)}
        m += 1
    counts = sorted(values)
    while len(counts) > n:  # drop the inner count whose neighbours are closest
        k = min(range(1, len(counts) - 1), key=lambda i: counts[i + 1] - counts[i - 1])
        del counts[k]
    return counts


def tp_sizes(model: Any, gpu: Any, weight_bytes: float) -> list[int]:
    """The TP sizes of TP_SIZES at which the model's weights, split evenly, leave at least
    MIN_KV_SHARE of each GPU's usable memory (HBM less RESERVE_FRACTION) for the KV cache."""
    usable = gpu.hbm_bytes * (1.0 - RESERVE_FRACTION)
    per_gpu = model.weights_bytes(weight_bytes)
    return [tp for tp in TP_SIZES if per_gpu / tp <= (1.0 - MIN_KV_SHARE) * usable]


def replicas_bound(q: AskQuestion) -> int:
    """The largest replica count the grid tries (see REPLICAS_PER_RPS)."""
    if q.max_replicas is not None:
        return q.max_replicas
    return int(min(MAX_REPLICAS, max(N_REPLICAS, math.ceil(REPLICAS_PER_RPS * q.rate_rps))))


def build_ask_grid(q: AskQuestion, catalog: Any) -> dict[str, Any]:
    """The grid document (shaped like a TOML file) that answers `q`; unknown model or GPU
    names and a model that fits no TP size raise a one-line `SweepError`."""
    model = catalog.model(q.model, source="sweep ask", key="--model")
    gpus = [catalog.gpu(g, source="sweep ask", key="--gpu") for g in q.gpus]
    wb = _dtype_bytes(q.weights, "--weights")
    _dtype_bytes(q.kv_dtype, "--kv-dtype")
    sizes = sorted({tp for g in gpus for tp in tp_sizes(model, g, wb)})
    if not sizes:
        gb = model.weights_bytes(wb) / 1e9
        biggest = max(gpus, key=lambda g: g.hbm_bytes)
        raise GridError("sweep ask", "--model", q.model,
                        f"{gb:,.0f} GB of {q.weights} weights leave no room for a KV cache on {TP_SIZES[-1]} x "
                        f"{biggest.name} ({biggest.hbm_bytes / 1e9:,.0f} GB each); try --weights fp8 or a larger GPU")
    grid: dict[str, Any] = {
        "model": [model.name],
        "gpu": [g.name for g in gpus],
        # every TP size, those that do not fit included (they come out as weights_fit = false
        # rows, with the reason): one shape for every model keeps the compiled kernel cached
        "gpus_per_replica": list(TP_SIZES),
        "arrival_rps": q.rate_rps,
        "replicas": replica_counts(replicas_bound(q)),
        "prompt_tokens": q.prompt_tokens,
        "output_tokens": q.output_tokens,
    }
    if q.prompt_cv is not None:
        grid["prompt_cv"] = q.prompt_cv
    if q.output_cv is not None:
        grid["output_cv"] = q.output_cv
    grid["batch_size"] = list(CAPS)
    grid["max_batched_tokens"] = list(BUDGETS)
    grid["weight_bytes_per_param"] = q.weights.lower()
    grid["kv_bytes_per_elem"] = q.kv_dtype.lower()
    if q.t_seq_us is not None:
        grid["t_seq_us"] = q.t_seq_us
    for key, value in (("ttft_slo_ms", q.ttft_ms), ("tpot_slo_ms", q.tpot_ms), ("slo_ms", q.e2e_ms)):
        if value is not None:
            grid[key] = value
    grid["percentile"] = q.percentile
    if q.rho_max is not None:
        grid["rho_max"] = q.rho_max
    slos = ", ".join(f"{k} {v:g} ms" for k, v in (("TTFT", q.ttft_ms), ("TPOT", q.tpot_ms), ("E2E", q.e2e_ms))
                     if v is not None) or "no latency SLO"
    return {
        "name": f"ask-{q.slug()}",
        "description": (f"sweep ask: {model.name} on {', '.join(g.name for g in gpus)}, {q.rate_rps:g} req/s of "
                        f"{q.prompt_tokens:g}/{q.output_tokens:g}-token requests, P{100 * q.percentile:g} {slos}"),
        "grid": grid,
        "options": {"serving": "continuous", "kv_allocation": "paged", "block_tokens": 16,
                    "reserve_fraction": RESERVE_FRACTION},
    }


# --------------------------------------------------------------------------- TOML


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, Sequence):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {type(v).__name__}")


def to_toml(doc: Mapping[str, Any], header: str = "") -> str:
    """`doc` (top-level scalars, then one level of tables) as TOML text `tomllib` reads back."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"{k} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, Mapping)]
    for k, v in doc.items():
        if isinstance(v, Mapping):
            lines += ["", f"[{k}]", *(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items())]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the answer


def _groups(optimum_path: Path) -> dict[int, dict[str, Any]]:
    """Each scenario group's GPU and tensor-parallel size, by group_id."""
    import pyarrow.parquet as pq

    rows = pq.read_table(optimum_path, columns=["group_id", "gpu", "gpus_per_replica"]).to_pylist()
    return {int(r["group_id"]): {"gpu": str(r["gpu"]), "gpus_per_replica": r["gpus_per_replica"]} for r in rows}


def answer(out_dir: Path) -> dict[str, Any] | None:
    """The run's recommendation over every scenario group (`sweep.api.recommendation`): the
    cheapest configuration meeting every SLO within rho_max, and the runner-up."""
    from sweep.api import recommendation

    return recommendation(out_dir)


def answer_lines(q: AskQuestion, out_dir: Path) -> list[str]:
    """The recommendation and the runner-up as text lines (no answer: why, and what to widen)."""
    optimum_path = out_dir / "optimum.parquet"
    rec = answer(out_dir)
    if rec is None or rec.get("recommended") is None:
        return [f"no answer: no configuration of the grid meets every SLO within rho_max at {q.rate_rps:g} req/s; "
                f"the reasons per scenario group are in {optimum_path} (column group_reason); widen --max-replicas, "
                "relax an SLO or add a GPU"]
    groups = _groups(optimum_path)

    def line(label: str, r: dict[str, Any], group: int) -> str:
        g = groups[group]
        budget = r.get("max_batched_tokens")
        figures = ", ".join(f"{name} {r[col]:,.1f} ms" for name, col in (("TTFT", "ttft_p_ms"), ("TPOT", "tpot_p_ms"))
                            if r.get(col) is not None)
        price = f"${r['cost_usd_per_hour']:,.2f}/h"
        if r.get("cost_usd_per_m_output_tok") is not None:
            price += f", ${r['cost_usd_per_m_output_tok']:,.3f} per M output tokens"
        if r.get("cost_usd_per_m_total_tok") is not None:
            price += f" (${r['cost_usd_per_m_total_tok']:,.3f} per M tokens in + out)"
        rho = f", rho {r['rho']:.2f}" if r.get("rho") is not None else ""
        return (f"{label}: {r['replicas']} x {g['gpu']} TP {g['gpus_per_replica']} ({r['gpus']} GPUs), "
                f"max_num_seqs {r['batch_size']}, max_num_batched_tokens {'inf' if budget is None else budget}: "
                f"{price}; P{100 * q.percentile:g} {figures}{rho}")

    out = [line("answer", rec["recommended"], int(rec["group_id"]))]
    if rec.get("runner_up") is not None:
        out.append(line("runner-up", rec["runner_up"], int(rec["runner_up"].get("group_id", rec["group_id"]))))
    return out


def deploy_lines(out_dir: Path, grid: Any, rec: dict[str, Any] | None, *, write: bool = True) -> list[str]:
    """The recommendation's launch and benchmark commands (vLLM unless the grid names another
    engine), written to OUT/deploy/ (`sweep deploy`); empty when there is no recommendation."""
    if rec is None or rec.get("recommended") is None:
        return []
    from sweep.cli.answers import RunFolder
    from sweep.cli.deploy import _row
    from sweep.deploy import deployment, meta_of
    from sweep.deploy.plan import _shell

    pid = int(rec["recommended"]["point_id"])
    dep = deployment(_row(RunFolder.open(out_dir, {}), grid, pid), meta_of(grid))
    lines = ["launch (each replica):", *("  " + x for x in _shell(dep.launch).splitlines()),
             "check it (one replica at its share of the load):", *("  " + x for x in _shell(dep.bench).splitlines())]
    if write:
        written = dep.write(out_dir)
        lines.append(f"written: {written[0].parent}/ (the figures that benchmark should print: "
                     f"{written[0]}; sweep deploy {out_dir} --point {pid})")
    return lines


# --------------------------------------------------------------------------- the command


def add_command(sub: Any, command: Any, exits: str) -> None:
    """Register `sweep ask` (`command` is main's sub-command factory)."""
    a = command(sub, "ask", "answer a capacity question from flags: build the continuous-serving grid a planner "
                            "would write, run it, print the cheapest configuration that meets the SLOs",
                ["sweep ask --model llama-3.1-70b --gpu h100-sxm --prompt-tokens 1500 --output-tokens 300 "
                 "--rate 40 --ttft-ms 2000 --tpot-ms 60",
                 "sweep ask --model llama-3.1-8b --gpu l40s --gpu h100-sxm --isl 512 --osl 128 --rate 20 "
                 "--tpot-ms 40 --save-grid my.toml   # then: sweep run my.toml"], exits)
    a.add_argument("--model", required=True, help="catalog model name (`sweep catalog` lists them)")
    a.add_argument("--gpu", required=True, action="append", metavar="GPU",
                   help="catalog GPU name (repeatable: each is tried)")
    a.add_argument("--rate", type=_positive, required=True, metavar="RPS", help="arrival rate, requests/s (Poisson)")
    a.add_argument("--prompt-tokens", "--isl", dest="prompt_tokens", type=_positive, required=True, metavar="N",
                   help="mean prompt length, tokens")
    a.add_argument("--output-tokens", "--osl", dest="output_tokens", type=_positive, required=True, metavar="N",
                   help="mean output length, tokens")
    a.add_argument("--prompt-cv", type=_non_negative, default=None, metavar="CV",
                   help="coefficient of variation of the prompt length (lognormal; default 0: every prompt the mean)")
    a.add_argument("--output-cv", type=_non_negative, default=None, metavar="CV",
                   help="coefficient of variation of the output length (lognormal; default 0)")
    a.add_argument("--ttft-ms", type=_positive, default=None, metavar="MS", help="time-to-first-token SLO at the "
                                                                                  "percentile")
    a.add_argument("--tpot-ms", type=_positive, default=None, metavar="MS", help="time-per-output-token SLO")
    a.add_argument("--e2e-ms", type=_positive, default=None, metavar="MS", help="end-to-end latency SLO")
    a.add_argument("--percentile", type=float, default=0.99, metavar="Q", help="the SLOs' percentile (default 0.99)")
    a.add_argument("--rho-max", type=float, default=None, metavar="R",
                   help="highest utilisation an answer may run at (the grid's default, 0.85)")
    a.add_argument("--weights", default="bf16", metavar="DTYPE", help="weight dtype: bf16 (default), fp8, int4, ...")
    a.add_argument("--kv-dtype", default="bf16", metavar="DTYPE", help="KV-cache dtype: bf16 (default), fp8, ...")
    a.add_argument("--t-seq-us", type=seq_us, default=None, metavar="US",
                   help="the engine's host time per sequence a step carries, microseconds (grid key t_seq_us; "
                        "default 0; docs/roofline.md, \"Per-sequence cost\")")
    a.add_argument("--max-replicas", type=int_at_least_one, default=None, metavar="N",
                   help=f"largest replica count tried (default: {REPLICAS_PER_RPS} per req/s of the rate, "
                        f"{N_REPLICAS} to {MAX_REPLICAS})")
    a.add_argument("--out", type=Path, default=None, metavar="DIR", help="output folder (default runs/ask-<question>)")
    a.add_argument("--save-grid", type=Path, default=None, metavar="FILE",
                   help="write the grid used as TOML (`sweep run FILE` reproduces the run)")
    a.add_argument("--force", action="store_true", help="run even if an identical finished run is in OUT")
    a.add_argument("--progress", choices=("auto", "bar", "log", "none"), default="auto",
                   help="auto: a bar on a terminal, JSON log lines otherwise")
    a.add_argument("--top", type=int_at_least_one, default=10, metavar="N",
                   help="scenario groups the summary shows (default 10)")
    a.add_argument("--quiet", action="store_true", help="print the answer lines only")
    a.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                   help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    a.set_defaults(handler=cmd_ask)


_positive = finite_number(0.0, strict=True)
_non_negative = finite_number(0.0, strict=False)


def question(args: argparse.Namespace) -> AskQuestion:
    return AskQuestion(model=args.model, gpus=tuple(dict.fromkeys(args.gpu)), rate_rps=args.rate,
                       prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
                       prompt_cv=args.prompt_cv, output_cv=args.output_cv, ttft_ms=args.ttft_ms,
                       tpot_ms=args.tpot_ms, e2e_ms=args.e2e_ms, percentile=args.percentile, rho_max=args.rho_max,
                       weights=args.weights, kv_dtype=args.kv_dtype, max_replicas=args.max_replicas,
                       t_seq_us=args.t_seq_us)


def cmd_ask(args: argparse.Namespace) -> int:
    """Build the grid, validate it (nothing written on bad input), save it if asked, run it
    the way `sweep run` does, print the summary and the answer."""
    import tomllib

    from sweep.catalog import load_catalog
    from sweep.cli.summary import print_summary
    from sweep.grid.load import build
    from sweep.runner import run_grid
    from sweep.runner.progress import ProgressReporter, compile_cache_dir, enable_compile_cache

    q = question(args)
    catalog = load_catalog(args.catalog) if args.catalog else None
    doc = build_ask_grid(q, catalog if catalog is not None else load_catalog())
    cmd = " ".join(["sweep ask", *(a for a in _argv_of(args))])
    text = to_toml(doc, header=f"written by: {cmd}\nrun it again with: sweep run FILE")
    source = str(args.save_grid) if args.save_grid is not None else "<sweep ask>"
    grid = build(tomllib.loads(text), source=source, text=text, catalog=catalog)
    if args.save_grid is not None:
        try:
            args.save_grid.parent.mkdir(parents=True, exist_ok=True)
            args.save_grid.write_text(text)
        except OSError as exc:
            raise OutputError(f"{args.save_grid}: cannot write the grid ({exc.strerror or exc})") from None
    out = args.out if args.out is not None else Path("runs") / doc["name"]
    enable_compile_cache(compile_cache_dir())
    mode = "none" if args.quiet else args.progress
    with ProgressReporter(grid.name, mode, 10.0) as progress:
        result = run_grid(grid, out, force=args.force, progress=None if mode == "none" else progress,
                          note=progress.note)
    if not args.quiet:
        print_summary(grid, result, top=args.top)
        if args.save_grid is not None:
            print(f"grid: {args.save_grid} (sweep run {args.save_grid} --out {out} reproduces this run)")
    for line in answer_lines(q, result.out_dir):
        print(line)
    if not args.quiet:
        for line in deploy_lines(result.out_dir, grid, answer(result.out_dir)):
            print(line)
    return 0


def _argv_of(args: argparse.Namespace) -> list[str]:
    """The question's flags, for the saved grid's header."""
    out = [f"--model {args.model}", *(f"--gpu {g}" for g in args.gpu), f"--rate {args.rate:g}",
           f"--prompt-tokens {args.prompt_tokens:g}", f"--output-tokens {args.output_tokens:g}"]
    for flag, value in (("--prompt-cv", args.prompt_cv), ("--output-cv", args.output_cv),
                        ("--ttft-ms", args.ttft_ms), ("--tpot-ms", args.tpot_ms), ("--e2e-ms", args.e2e_ms),
                        ("--rho-max", args.rho_max), ("--max-replicas", args.max_replicas)):
        if value is not None:
            out.append(f"{flag} {value:g}")
    if args.percentile != 0.99:
        out.append(f"--percentile {args.percentile:g}")
    for flag, value in (("--weights", args.weights), ("--kv-dtype", args.kv_dtype)):
        if value != "bf16":
            out.append(f"{flag} {value}")
    return out
