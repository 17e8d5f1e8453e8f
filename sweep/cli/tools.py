"""Quick command-line answers: `sweep fit`, `sweep kv`, `sweep catalog`, `sweep calibrate`
(no grid file needed), and `sweep report` (an HTML report of a finished run; `sweep.reporting`).

`add_commands(sub)` registers them on the `sweep` parser (`sweep.cli`). Each handler calls
one pure library function (`sweep.fit.fit_file`, `sweep.quick.kv_answer`, the catalog,
`sweep.grid.calibrate`) and prints rich tables; bad input raises a `SweepError`, which
`sweep.cli.main` turns into one line on stderr and exit code 2. Argument errors are also one
line, exit 2. Only `calibrate --out DIR` writes files (the catalog overlay).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.errors import CatalogError, OutputError, ProfileError, ResourceError, close_matches, disk_full

if TYPE_CHECKING:
    from sweep.models.base import Param


def add_commands(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register `fit`, `kv`, `catalog`, `calibrate` and `report` on the subparsers action
    `sub`; `command(sub, name, help, examples)` makes a parser with examples and exit codes
    in its --help and one-line argument errors (`sweep.cli.main.command`)."""
    f = command(sub, "fit", "fit service times to a profile CSV: T_svc(B) = T_fixed + t_req B "
                "(batch_size,latency_ms), or the continuous step time t_fixed + t_token n_tok + t_ctx n_ctx "
                "from steps (n_tokens,n_ctx,step_ms) or a serving benchmark "
                "(concurrency,prompt_tokens,output_tokens,ttft_ms,tpot_ms), or from the result files of "
                "vllm bench serve, SGLang bench_serving or GenAI-Perf",
                ["sweep fit grids/profiles/gpt3-a100.csv",
                 "sweep fit grids/profiles/llama-3.1-8b-h100-nim.csv   # a serving benchmark: the step time",
                 "sweep fit results/vllm-4.0qps-*.json results/vllm-inf-concurrency*.json   # vllm bench serve "
                 "--save-result files"])
    f.add_argument("profile", type=Path, nargs="+",
                   help="one CSV whose header names the shape ('#' comments allowed), or serving benchmark result "
                        "files (JSON / JSONL: vllm bench serve, SGLang bench_serving, GenAI-Perf), fitted together")
    f.set_defaults(handler=cmd_fit)

    k = command(sub, "kv", "KV-cache memory and the largest batch that fits, one model on one GPU type",
                ["sweep kv --model llama-3.1-70b --gpu h100-sxm --gpus 4 --seq-len 8192",
                 "sweep kv --model llama-3.1-70b --gpu h100-sxm --gpus 4 --seq-len 8192 --mean-seq-len 2000 "
                 "--kv-dtype fp8"])
    k.add_argument("--model", required=True, help="model catalog name, e.g. llama-3.1-70b")
    k.add_argument("--gpu", required=True, help="GPU catalog name, e.g. h100-sxm")
    k.add_argument("--gpus", type=grid_value("gpus_per_replica"), default=1,
                   help=f"GPUs per replica, {_range('gpus_per_replica')} (default 1)")
    k.add_argument("--seq-len", type=grid_value("seq_len"), required=True,
                   help=f"S_max, tokens a request may reach, {_range('seq_len')}")
    k.add_argument("--mean-seq-len", type=grid_value("mean_seq_len"), default=None,
                   help=f"S_mean for the paged reservation, {_range('mean_seq_len')} (default: --seq-len)")
    k.add_argument("--kv-dtype", type=grid_value("kv_bytes_per_elem"), default=2.0,
                   help=f"KV-cache dtype: fp16/bf16 (default), fp8, int8, int4, "
                        f"or bytes in {_range('kv_bytes_per_elem')}")
    k.add_argument("--weight-dtype", type=grid_value("weight_bytes_per_param"), default=2.0,
                   help=f"weights dtype: bf16/fp16 (default), fp8, int8, int4, "
                        f"or bytes in {_range('weight_bytes_per_param')}")
    k.add_argument("--block-tokens", type=grid_value("block_tokens"), default=16,
                   help=f"paged block size, {_range('block_tokens')} (default 16)")
    k.add_argument("--reserve-fraction", type=grid_value("reserve_fraction"), default=0.0,
                   help=f"share of HBM kept free for activations etc., {_range('reserve_fraction')} (default 0)")
    _catalog_arg(k)
    k.set_defaults(handler=cmd_kv)

    c = command(sub, "catalog", "list the model and GPU catalogs, or `catalog show NAME` for one entry",
                ["sweep catalog", "sweep catalog show llama-3.1-8b", "sweep catalog --catalog my-catalog"])
    c.add_argument("action", nargs="?", choices=("list", "show"), default="list", help="list (default) or show")
    c.add_argument("name", nargs="?", help="with show: a model or GPU name")
    _catalog_arg(c)
    c.set_defaults(handler=cmd_catalog)

    cal = command(sub, "calibrate", "fit the refined roofline's (docs/roofline.md) eta_bw, eta_flops and collective "
                                    "latency per (model, gpu, tensor parallel) to measured steps",
                  ["sweep calibrate steps.csv",
                   "sweep calibrate steps.csv --out my-catalog   # then: --catalog my-catalog",
                   "sweep calibrate tests/data/gpu_measurements.csv --table sweep/catalog/efficiency.toml"])
    cal.add_argument("profile", type=Path, help="CSV: model,gpu,tensor_parallel,phase,batch,prompt_tokens,"
                                                "context_tokens,measured_ms (see sweep.grid.calibrate)")
    cal.add_argument("--out", type=Path, default=None, metavar="DIR",
                     help="write the fits as a catalog overlay folder (DIR/gpus/<gpu>-<model>-tp<g>.toml)")
    cal.add_argument("--table", type=Path, default=None, metavar="FILE",
                     help="instead, fit the efficiency table per (gpu, size class, tensor parallel) and write it "
                          "to FILE (the packaged one: sweep/catalog/efficiency.toml; docs/roofline.md)")
    _catalog_arg(cal)
    cal.set_defaults(handler=cmd_calibrate)

    r = command(sub, "report", "write one self-contained HTML report of a finished run (needs sweep-capacity[report])",
                ["sweep report runs/gpt3", "sweep report runs/fleet --out fleet.html --png figures/"])
    r.add_argument("run_dir", type=Path, help="a finished run folder (the --out of `sweep run`)")
    r.add_argument("--out", type=Path, default=None, metavar="FILE", help="the HTML file (default RUN_DIR/report.html)")
    r.add_argument("--png", type=Path, default=None, metavar="DIR", help="also write each figure as DIR/<figure>.png")
    r.set_defaults(handler=cmd_report)


def _catalog_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                   help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")


def one_line_errors(p: argparse.ArgumentParser) -> None:
    """Argument errors as one line (`sweep kv: error: ...`), exit 2, like every bad input."""

    def error(self: argparse.ArgumentParser, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    p.error = types.MethodType(error, p)  # type: ignore[method-assign]


def int_at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be an integer >= 1")
    return value


def _continuous_domain(key: str) -> Callable[[str], float]:
    """An argparse type: a finite number in the continuous grid's domain of `key`, [0, hi]."""

    def parse(text: str) -> float:
        from sweep.models.continuous.model import DOMAINS

        v = finite_number(0.0, strict=False)(text)
        if v > DOMAINS[key].hi:
            raise argparse.ArgumentTypeError(f"must lie in [0, {DOMAINS[key].hi:g}] {DOMAINS[key].unit}")
        return v

    return parse


#: the continuous grid's `t_seq_us`, [0, 10000] microseconds
seq_us = _continuous_domain("t_seq_us")
#: the continuous grid's `request_latency_ms`, [0, 1e6] milliseconds
request_latency_ms = _continuous_domain("request_latency_ms")


def eta_value(text: str) -> float:
    """An argparse type: an efficiency of the continuous grid (`eta_bw`), in (0, 1]."""
    v = finite_number(0.0, strict=True)(text)
    if v > 1.0:
        raise argparse.ArgumentTypeError("must lie in (0, 1]: a share of the GPU's peak")
    return v


def finite_number(lo: float, *, strict: bool) -> Callable[[str], float]:
    """An argparse type: a finite number above `lo` (`strict`) or at least `lo`."""
    rule = f"{'>' if strict else '>='} {lo:g}"

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not ((v > lo if strict else v >= lo) and math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"{text} must be a finite number {rule}")
        return v

    return parse


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0 (NaN, inf, 0 and negatives refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of seconds > 0, e.g. 10")
    return value


def _param(key: str) -> Param:
    """The [grid] key (or numeric [options] key) a flag sets: its type and its domain."""
    from sweep.models.dynamic.model import PARAMS
    from sweep.models.shared.columns import OPTION_PARAMS

    return ({p.key: p for p in PARAMS} | OPTION_PARAMS)[key]


def _range(key: str) -> str:
    domain = _param(key).domain
    assert domain is not None
    return domain.text(integer=_param(key).kind == "int").replace("%", "%%")


def grid_value(key: str) -> Callable[[str], Any]:
    """An argparse type for a flag that sets a [grid] key (or numeric [options] key): parsed
    and bounded as in a grid file, by the same `Param` and domain (a dtype name where the key
    takes one), so a flag and a grid refuse the same values with the same rule."""
    from sweep.models.base import DTYPE_BYTES, DTYPE_KEYS

    param = _param(key)

    def parse(text: str) -> Any:
        if key in DTYPE_KEYS and text.lower() in DTYPE_BYTES:
            return DTYPE_BYTES[text.lower()]
        try:
            value = int(text) if param.kind == "int" else float(text)
        except ValueError:
            kind = "an integer" if param.kind == "int" else "a number"
            names = f" or one of {', '.join(DTYPE_BYTES)}" if key in DTYPE_KEYS else ""
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}{names}") from None
        try:
            problem = param.rule(float(value))
        except OverflowError:  # an integer beyond float64
            problem = param.rule(math.nan)
        if problem:
            raise argparse.ArgumentTypeError(f"{text} {problem}")
        return value

    parse.__name__ = key
    return parse


def _console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:  # logs, pipes and tests: never truncate a table
        console = Console(highlight=False, width=200)
    return console


def _catalog(args: argparse.Namespace):
    from sweep.catalog import load_catalog

    return load_catalog(args.catalog)


# --------------------------------------------------------------------------- sweep fit


def cmd_fit(args: argparse.Namespace) -> int:
    from sweep.grid import bench_results
    from sweep.grid.fit import fit_file
    from sweep.grid.step_fit import StepFit, read_text

    paths: list[Path] = args.profile
    console = _console()
    texts = [read_text(p) for p in paths]
    if len(paths) > 1 or bench_results.is_result_text(texts[0]):
        for p, text in zip(paths, texts):
            if not bench_results.is_result_text(text):
                raise ProfileError(f"{p}: <file> = 'not JSON': several files are fitted together only as serving "
                                   "benchmark results (JSON); fit a CSV profile on its own")
        runs = [run for p, text in zip(paths, texts) for run in bench_results.read_runs(text, str(p))]
        source = str(paths[0]) if len(paths) == 1 else f"{len(paths)} result files"
        _print_runs(console, runs)
        return _print_step_fit(console, Path(source), bench_results.fit_runs(runs, source))
    fit = fit_file(paths[0])
    if isinstance(fit, StepFit):
        return _print_step_fit(console, paths[0], fit)
    console.print(
        f"[bold]{paths[0]}[/bold]: T_svc(B) = T_fixed + t_req B fitted to {fit.n} rows, "
        f"{len(fit.residuals)} batch sizes"
    )
    se = fit.se_ms
    console.print(f"T_fixed = {fit.t_fixed_ms:.4f} ms" + (f"  (standard error {se[0]:.2g})" if se else ""))
    console.print(f"t_req   = {fit.t_req_ms:.4f} ms per request" + (f"  (standard error {se[1]:.2g})" if se else ""))
    console.print(f"R^2     = {fit.r2:.6f}   (RMS residual {fit.rmse_ms:.4f} ms)")
    _print_covariance(console, ("t_fixed_ms", "t_req_ms"), fit.cov_ms2)
    t = Table(title="residuals per batch size (ms; residual = mean measured - fitted)", title_justify="left")
    for name in ("batch_size", "rows", "mean measured", "fitted", "residual", "max |residual|"):
        t.add_column(name, justify="right")
    for r in fit.residuals:
        t.add_row(str(r.batch_size), str(r.n), f"{r.mean_latency_ms:.3f}", f"{r.fitted_ms:.3f}",
                  f"{r.residual_ms:+.3f}", f"{r.max_abs_residual_ms:.3f}")
    console.print(t)
    return 0


def _print_covariance(console: Any, names: tuple[str, ...], cov: Any) -> None:
    """The coefficients' covariance (ms^2), what `[uncertainty.profile] covariance = true` samples."""
    if not cov:
        console.print("covariance: not estimable (no residual degree of freedom: measure more rows)")
        return
    t = Table(title="covariance of the coefficients (ms^2; [uncertainty.profile] covariance = true samples it)",
              title_justify="left")
    t.add_column("")
    for name in names:
        t.add_column(name, justify="right")
    for name, row in zip(names, cov):
        t.add_row(name, *(f"{v:.4g}" for v in row))
    console.print(t)


def _print_runs(console: Any, runs: Sequence[Any]) -> None:
    """The benchmark runs read from result files: their load and the means the fit uses."""
    t = Table(title="benchmark runs (means; open loop: running count from Little's law)", title_justify="left")
    for name in ("run", "tool", "load", "mean running", "prompt", "output", "TTFT ms", "TPOT ms"):
        t.add_column(name, justify="left" if name in ("run", "tool") else "right")
    for r in runs:
        load = f"closed, {r.concurrency:g} clients" if r.workload == "closed" else f"open, {r.rate_rps:.4g} req/s"
        running = f"{r.mean_concurrency:.3g}" if math.isfinite(r.mean_concurrency) else "-"
        tpot = f"{r.tpot_ms:.4g}" if math.isfinite(r.tpot_ms) else "-"
        t.add_row(escape(r.where), r.tool, load, running, f"{r.prompt_tokens:.5g}", f"{r.output_tokens:.5g}",
                  f"{r.ttft_ms:.4g}", tpot)
    console.print(t)


def _print_step_fit(console: Any, path: Path, fit: Any) -> int:
    from sweep.grid.step_fit import PIN_SE

    what = "steps" if fit.shape == "step" else "benchmark runs (TTFT and TPOT equations)"
    console.print(f"[bold]{escape(str(path))}[/bold]: T_step = t_fixed + t_token n_tok + t_ctx n_ctx fitted to "
                  f"{fit.rows} {what}, {fit.n} equations")
    for (name, unit), value, se in zip((("t_fixed_ms", "ms"), ("t_token_ms", "ms per token"),
                                        ("t_ctx_ms", "ms per cached token")), fit.coefficients, fit.se_ms):
        pinned = "   (pinned at 0)" if name in fit.pinned else ""
        console.print(f"{name:<10} = {value:.6g} {unit}  (standard error {se:.2g}){pinned}")
    console.print(f"R^2        = {fit.r2:.6f}   (RMS residual {fit.rmse_ms:.4g} ms"
                  f"{', weighted by 1/measured^2' if fit.shape == 'request' else ''})")
    _print_covariance(console, ("t_fixed_ms", "t_token_ms", "t_ctx_ms"), fit.cov_ms2)
    t = Table(title="residuals (ms; residual = measured - fitted)", title_justify="left")
    for name in ("equation", "measured", "fitted", "residual", "relative"):
        t.add_column(name, justify="right")
    for label, m, f in zip(fit.labels, fit.measured_ms, fit.fitted_ms):
        rel = f"{(m - f) / m:+.1%}" if m > 0 else "-"
        t.add_row(label, f"{m:.4g}", f"{f:.4g}", f"{m - f:+.3g}", rel)
    console.print(t)
    bent = [f"{k} ({-z:.1f})" for k, z in fit.pinned_z.items() if z < -PIN_SE]
    if bent:
        console.print(f"note: the unconstrained fit put {', '.join(bent)} standard errors below 0: the measurements "
                      "bend away from a linear step time (below the roofline's ridge extra tokens cost little); "
                      "the pinned fit is the closest linear one, its residuals above show what it misses")
    console.print(escape("in a continuous grid: [profile] file = \"...\" "
                         "(or t_fixed_ms, t_token_ms, t_ctx_ms in [grid])"))
    return 0


# --------------------------------------------------------------------------- sweep kv


def _dtype_name(nbytes: float) -> str:
    names = {4.0: "fp32", 2.0: "fp16/bf16", 1.0: "fp8/int8", 0.5: "fp4/int4"}
    return f"{nbytes:g} B/elem ({names[nbytes]})" if nbytes in names else f"{nbytes:g} B/elem"


def cmd_kv(args: argparse.Namespace) -> int:
    from sweep.models.shared.memory import kv_answer

    if args.mean_seq_len is not None and args.mean_seq_len > args.seq_len:
        raise CatalogError("sweep kv", "--mean-seq-len", args.mean_seq_len,
                           f"must be <= --seq-len ({args.seq_len})")
    cat = _catalog(args)
    model = cat.model(args.model, source="sweep kv", key="--model")
    gpu = cat.gpu(args.gpu, source="sweep kv", key="--gpu")
    a = kv_answer(
        model, gpu, gpus=args.gpus, seq_len=args.seq_len, mean_seq_len=args.mean_seq_len,
        kv_bytes_per_elem=args.kv_dtype, weight_bytes_per_param=args.weight_dtype,
        block_tokens=args.block_tokens, reserve_fraction=args.reserve_fraction,
    )
    console = _console()
    console.print(
        f"[bold]{a.model}[/bold] on {a.gpus} x {a.gpu}: S_max {a.seq_len} tokens, S_mean {a.mean_seq_len:g}, "
        f"KV {_dtype_name(a.kv_bytes_per_elem)}, weights {_dtype_name(a.weight_bytes_per_param)}, "
        f"reserve {100 * a.reserve_fraction:g}%"
    )
    t = Table(show_header=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("KV bytes per token", f"{a.kv_bytes_per_token:,.0f} B")
    t.add_row("KV per request at S_max", f"{a.contiguous.kv_gb_per_req:.3f} GB")
    t.add_row("weights", f"{a.weights_gb:.1f} GB")
    t.add_row("usable HBM", f"{a.usable_gb:.1f} GB")
    t.add_row("free for KV", f"{a.free_gb:.1f} GB")
    console.print(t)
    t = Table(title="largest batch that fits (b_mem_max)", title_justify="left")
    for name in ("allocation", "tokens reserved/request", "KV GB/request", "waste", "max batch"):
        t.add_column(name, justify="right")
    for label, al in (("contiguous", a.contiguous), (f"paged ({a.block_tokens}-token blocks)", a.paged)):
        t.add_row(label, f"{al.s_alloc_tokens:g}", f"{al.kv_gb_per_req:.3f}", f"{100 * al.kv_waste_frac:.1f}%",
                  str(al.b_mem_max))
    console.print(t)
    if not a.weights_fit:
        console.print(f"the weights ({a.weights_gb:.1f} GB) do not fit in {a.usable_gb:.1f} GB: "
                      "more GPUs per replica, a smaller weight dtype, or a smaller reserve")
    return 0


# --------------------------------------------------------------------------- sweep catalog


def cmd_catalog(args: argparse.Namespace) -> int:
    cat = _catalog(args)
    console = _console()
    if args.action == "list":
        if args.name is not None:
            raise CatalogError("sweep catalog", "name", args.name, "only with show: sweep catalog show NAME")
        _list(cat, console)
        return 0
    if args.name is None:
        raise CatalogError("sweep catalog", "show", None, "needs a name, e.g. sweep catalog show llama-3.1-70b")
    if args.name in cat.models:
        _show_entry(console, "model", cat.models[args.name], _MODEL_ROWS)
    elif args.name in cat.gpus:
        _show_entry(console, "GPU", cat.gpus[args.name], _GPU_ROWS)
    else:
        known = sorted([*cat.models, *cat.gpus])
        near = close_matches(args.name.lower(), known, n=3)
        hint = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
        raise CatalogError("sweep catalog", "show", args.name,
                           f"unknown model or GPU; {hint}`sweep catalog` lists them")
    return 0


def _list(cat: Any, console: Console) -> None:
    t = Table(title="models (KV per token at fp16/bf16)", title_justify="left")
    for name in ("name", "attention", "layers", "hidden", "heads", "kv heads", "head dim",
                 "params (B)", "active (B)", "KV KB/token", "weights GB (bf16)", "origin"):
        t.add_column(name, justify="left" if name in ("name", "attention", "origin") else "right")
    for m in cat.models.values():
        kv_heads = "-" if m.attention == "latent" else str(m.n_kv_heads)
        if m.attention == "latent":
            kv_heads = f"latent {m.latent_width:g}"
        t.add_row(m.name, m.attention, str(m.n_layers), str(m.hidden), str(m.n_heads), kv_heads,
                  str(m.head_dim), f"{m.n_params / 1e9:.1f}", f"{m.active_params / 1e9:.1f}",
                  f"{m.kv_bytes_per_token(2.0) / 1e3:.1f}", f"{m.weights_bytes(2.0) / 1e9:.1f}",
                  _origin(m.origin))
    console.print(t)
    t = Table(title="GPUs", title_justify="left")
    for name in ("name", "HBM GB", "HBM TB/s", "bf16 dense TFLOP/s", "USD/GPU-hour", "price date", "origin"):
        t.add_column(name, justify="left" if name in ("name", "origin") else "right")
    for g in cat.gpus.values():
        t.add_row(g.name, f"{g.hbm_bytes / 1e9:g}", f"{g.hbm_bandwidth_bytes_per_s / 1e12:.3g}",
                  f"{g.bf16_dense_flops / 1e12:g}", f"{g.usd_per_gpu_hour:g}", g.price_date or "-",
                  _origin(g.origin))
    console.print(t)
    console.print("`sweep catalog show NAME` shows one entry with its sources; add entries with "
                  "--catalog DIR or inline [catalog.models.NAME] / [catalog.gpus.NAME] tables in a grid",
                  markup=False)


def _origin(origin: str) -> str:
    return "packaged" if origin.startswith("sweep/catalog/") else origin


_MODEL_ROWS = ("attention", "n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "latent_width",
               "n_params", "active_params", "n_experts", "experts_per_token", "expert_param_fraction")
_GPU_ROWS = ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "bf16_dense_flops", "fp8_dense_flops",
             "interconnect_bytes_per_s", "collective_latency_s", "eta_bw", "eta_flops", "usd_per_gpu_hour",
             "price_date")


def _value(value: Any) -> str:
    if isinstance(value, float):
        if abs(value) >= 1e6 and value == int(value):
            return f"{value:,.0f}"
        return f"{value:g}"
    return str(value)


def _show_entry(console: Console, what: str, entry: Any, fields: tuple[str, ...]) -> None:
    console.print(f"[bold]{escape(entry.name)}[/bold] ({what}, from {escape(entry.origin)})")
    if entry.description:
        console.print(entry.description, markup=False)
    t = Table()
    t.add_column("field")
    t.add_column("value", justify="right")
    t.add_column("source", overflow="fold")
    for key in fields:
        value = getattr(entry, key)
        if value is None or value == "" or (key in ("n_experts", "experts_per_token", "expert_param_fraction")
                                            and not value):
            continue
        t.add_row(key, _value(value), escape(entry.source.get(key, "-")))
    if what == "model":
        t.add_row("kv bytes/token (fp16)", f"{entry.kv_bytes_per_token(2.0):,.0f}",
                  "derived: n_layers x kv elems x 2 B")
    console.print(t)
    if getattr(entry, "price_note", ""):
        console.print(f"price note: {entry.price_note}", markup=False)


# --------------------------------------------------------------------------- sweep calibrate


def _se(value: float | None, scale: float = 1.0, fmt: str = ".3f") -> str:
    return "n/i" if value is None else f"{value * scale:{fmt}}"


def cmd_calibrate(args: argparse.Namespace) -> int:
    from sweep.grid.calibrate import calibrate, read_rows, write_overlay

    cat = _catalog(args)
    _check_calibrate_outputs(args.out, args.table)  # before any work: nothing printed, nothing written
    rows = read_rows(args.profile)
    if args.table is not None:
        return _calibrate_table(args, rows)
    fits = calibrate(rows, cat, source=str(args.profile))
    console = _console()
    console.print(f"[bold]{escape(str(args.profile))}[/bold]: {len(rows)} measured steps, {len(fits)} "
                  "(model, gpu, tensor parallel) groups; residual = estimate / measured - 1; "
                  "n/i = not identified by these rows")
    t = Table(title="fits", title_justify="left")
    for name in ("model", "gpu", "tp", "rows", "eta_bw", "+-", "eta_flops", "+-", "alpha us", "+-", "RMS resid"):
        t.add_column(name, justify="left" if name in ("model", "gpu") else "right")
    for f in fits:
        t.add_row(f.model, f.gpu, str(f.tensor_parallel), str(f.n), f"{f.eta_bw:.3f}", _se(f.eta_bw_se),
                  f"{f.eta_flops:.3f}", _se(f.eta_flops_se),
                  f"{f.alpha_s * 1e6:.2f}" if f.tensor_parallel > 1 else "-",
                  _se(f.alpha_se, 1e6, ".2f") if f.tensor_parallel > 1 else "-", f"{f.rms_rel:.3f}")
    console.print(t)
    t = Table(title="residuals per row", title_justify="left")
    for name in ("row", "model", "gpu", "tp", "measured ms", "fitted ms", "residual"):
        t.add_column(name, justify="left" if name in ("model", "gpu") else "right")
    for f in fits:
        for line, m, e, r in zip(f.lines, f.measured_ms, f.fitted_ms, f.residuals):
            t.add_row(str(line), f.model, f.gpu, str(f.tensor_parallel), f"{m:.3f}", f"{e:.3f}", f"{r:+.3f}")
    console.print(t)
    if args.out is not None:
        with _writing(args.out):
            paths = write_overlay(fits, args.out, cat)
        console.print(f"wrote {len(paths)} calibrated GPU entries to {escape(str(args.out))}/gpus/; plan on one with "
                      f"gpu = \"{escape(fits[0].overlay_name)}\" and --catalog {escape(str(args.out))}")
    return 0


def _check_calibrate_outputs(out: Path | None, table: Path | None) -> None:
    """`--out` is a folder (or not there yet) holding a gpus/ folder; `--table` a file."""
    if out is not None:
        for p in (out, out / "gpus"):
            if p.exists() and not p.is_dir():
                raise OutputError(f"{p}: --out {out} must be a folder for the catalog overlay (the fits go to "
                                  f"{out}/gpus/<gpu>-<model>-tp<g>.toml), and {p} is a file; name a folder")
        for p in (out, *out.parents):  # the nearest part that exists must be a folder
            if p.exists():
                if not p.is_dir():
                    raise OutputError(f"{p}: --out {out} lies under a file; name a folder")
                break
    if table is not None:
        if table.exists() and not table.is_file():
            raise OutputError(f"{table}: --table must name a file to write the efficiency table to, and this is not "
                              "a regular file (a folder?); e.g. --table my-efficiency.toml")
        for p in table.parents:
            if p.exists():
                if not p.is_dir():
                    raise OutputError(f"{p}: --table {table} lies under a file; name a file in a folder")
                break


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """`with _writing(path):` one line for a write that fails: a full disk (exit 1) or any
    other refusal (exit 2)."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or path
        if disk_full(exc):
            raise ResourceError(f"{where}: the disk is full ({exc.strerror}); free space and rerun") from None
        raise OutputError(f"{where}: cannot be written ({exc.strerror})") from None


def _calibrate_table(args: argparse.Namespace, rows: list) -> int:
    from sweep.grid import efficiency_fit as ef

    terms = ef.step_terms(rows, source=str(args.profile))
    cells = ef.fit_table(rows, terms, source=str(args.profile))
    text = ef.table_text(cells, str(args.profile), len(rows))
    before = terms.estimate_ms(*ef.DEFAULTS)
    after = ef.table_estimate_ms(rows, terms, ef.as_table(cells))
    console = _console()
    console.print(f"[bold]{escape(str(args.profile))}[/bold]: {len(rows)} measured figures, {len(cells)} rows of "
                  "the efficiency table (size class * = the GPU-wide row); residual = estimate / measured - 1")
    t = Table(title="efficiency table", title_justify="left")
    for name in ("gpu", "size class", "tp", "figures", "eta_bw", "eta_flops", "overhead ms, prompt step",
                 "decode step"):
        t.add_column(name, justify="left" if name in ("gpu", "size class") else "right")
    for c in cells:
        t.add_row(c.gpu, c.size_class, str(c.tensor_parallel or "*"), str(len(c.lines)), f"{c.eta_bw:.4g}",
                  f"{c.eta_flops:.4g}", f"{c.t_overhead_s * 1e3:.4g}", f"{c.t_decode_overhead_s * 1e3:.4g}")
    console.print(t)
    t = Table(title="residuals per row: the defaults, then the table", title_justify="left")
    for name in ("row", "model", "gpu", "tp", "measured ms", "defaults", "table"):
        t.add_column(name, justify="left" if name in ("model", "gpu") else "right")
    for r, b, a in zip(rows, before, after):
        t.add_row(str(r.line), r.model, r.gpu, str(r.tensor_parallel), f"{r.measured_ms:.4g}",
                  f"{b / r.measured_ms - 1:+.3f}", f"{a / r.measured_ms - 1:+.3f}")
    console.print(t)
    share = [sum(abs(e / r.measured_ms - 1) <= 0.2 for r, e in zip(rows, est)) for est in (before, after)]
    console.print(f"within 20%: {share[0]} of {len(rows)} at the defaults, {share[1]} with the table")
    with _writing(args.table):
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(text, encoding="utf-8")
    console.print(f"wrote {escape(str(args.table))}")
    return 0


# --------------------------------------------------------------------------- sweep report


def cmd_report(args: argparse.Namespace) -> int:
    from sweep.reporting import build_report

    result = build_report(args.run_dir, out=args.out, png_dir=args.png)
    console = _console()
    console.print(f"{result.path}: {result.bytes / 1e6:.1f} MB, {len(result.figures)} figures in "
                  f"{result.seconds:.1f} s; not drawn: " + (", ".join(result.skipped) or "none"), markup=False)
    for p in result.pngs:
        console.print(str(p), markup=False)
    return 0
