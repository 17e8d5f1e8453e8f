"""`sweep deploy RUN_DIR`: the launch and benchmark commands of a finished run's recommended
configuration, for a serving model whose points an iteration-level engine runs
(`sweep.deploy`), printed and written to RUN_DIR/deploy/.

The point: `--point ID`, else the scenario group's recommendation in optimum.parquet
(`recommended_point_id` where the run has it, else `replicas_min_point_id`: the fewest replicas
meeting every SLO within rho_max, at the largest such cap), narrowed by KEY=VALUE filters to one.
Its columns come from points/ where the run wrote them, else the point is evaluated again
(`sweep.api.explain`: the same kernel, one point)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sweep.deploy.engines import ENGINES
from sweep.errors import SweepError

#: optimum.parquet columns naming a group's recommended point, the first present wins.
POINT_COLUMNS = ("recommended_point_id", "replicas_min_point_id")
#: Candidates listed when a selection holds several groups.
SHOWN = 5


class DeployChoiceError(SweepError):
    """The run and filters do not name exactly one point to deploy."""


def add_command(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register `sweep deploy` (`command` as in `sweep.cli.main.command`)."""
    d = command(sub, "deploy", "the engine launch command and the benchmark that checks it, for a finished "
                               "run's recommended configuration (printed, and written to RUN_DIR/deploy/)",
                ["sweep deploy runs/chat",
                 "sweep deploy runs/chat --engine sglang gpus_per_replica=4",
                 "sweep deploy runs/chat --point 13 --model-id /models/llama-3.1-70b-instruct --no-write"])
    d.add_argument("run_dir", type=Path, help="a finished run folder (a serving model an iteration-level engine runs)")
    d.add_argument("filters", nargs="*", metavar="KEY=VALUE",
                   help="keep the scenario groups whose column KEY equals VALUE, down to one")
    d.add_argument("--point", type=int, default=None, metavar="ID", help="deploy this point_id instead")
    d.add_argument("--engine", choices=ENGINES, default=None,
                   help="the engine (default: the grid's [options] engine, else vllm)")
    d.add_argument("--model-id", default=None, metavar="ID",
                   help="the checkpoint to load (default: the catalog's hf_id of the model)")
    d.add_argument("--no-write", action="store_true", help="print only; write nothing to RUN_DIR/deploy/")
    d.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                   help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    d.set_defaults(handler=cmd_deploy)


def cmd_deploy(args: argparse.Namespace) -> int:
    from sweep.catalog import load_catalog
    from sweep.cli.answers import RunFolder, parse_filters, run_grid_spec
    from sweep.deploy import deployment, meta_of
    from sweep.deploy.plan import NEEDED

    run = RunFolder.open(args.run_dir, parse_filters(args.filters))
    lacking = [k for k in NEEDED if k not in {c.name for c in run.model.columns}]
    if lacking:
        raise DeployChoiceError(f"{args.run_dir}: serving = \"{run.model.serving}\" has no {lacking[0]} column: "
                                "sweep deploy writes the commands of an iteration-level engine (a grid whose "
                                "serving model declares the KV capacity, the cap and the token budget)")
    spec = run_grid_spec(args.run_dir, load_catalog(args.catalog) if args.catalog else None)
    pid = args.point if args.point is not None else _recommended(run)
    row = _row(run, spec, pid)
    dep = deployment(row, meta_of(spec), engine=args.engine, model_id=args.model_id)
    print(dep.text(), end="")
    if not args.no_write:
        written = dep.write(args.run_dir)
        print(f"\nwritten: {', '.join(str(p) for p in written)}")
    return 0


def _recommended(run: Any) -> int:
    """The one point the filtered optimum rows recommend (`POINT_COLUMNS`)."""
    import pyarrow.parquet as pq

    present = set(pq.read_schema(run.path / "optimum.parquet").names)
    column = next((c for c in POINT_COLUMNS if c in present), None)
    if column is None:
        raise DeployChoiceError(f"{run.path / 'optimum.parquet'}: names no recommended point "
                                f"({' or '.join(POINT_COLUMNS)}); give one: sweep deploy {run.path} --point ID")
    keys = [c for c in ("model", "gpu", "gpus_per_replica", "arrival_rps", "replicas") if c in present]
    table = run.optimum([column, *keys]).to_pylist()
    ids = {r[column] for r in table if r[column] is not None}
    where = f" ({', '.join(f'{k}={v}' for k, v in run.filters.items())})" if run.filters else ""
    if not ids:
        raise DeployChoiceError(f"{run.path}: no scenario group{where} has a configuration meeting every SLO within "
                                f"rho_max ({column} is NULL); nothing to deploy (see sweep show {run.path})")
    if len(ids) > 1:
        seen: dict[int, Mapping[str, Any]] = {}
        for r in table:
            if r[column] is not None:
                seen.setdefault(int(r[column]), r)
        shown = "; ".join(f"point {p}: " + ", ".join(f"{k}={r[k]}" for k in keys if k != "replicas")
                          for p, r in list(seen.items())[:SHOWN])
        more = f" and {len(seen) - SHOWN} more" if len(seen) > SHOWN else ""
        raise DeployChoiceError(f"{run.path}: {len(seen)} scenario groups{where} each recommend a point ({shown}"
                                f"{more}); narrow to one with KEY=VALUE filters or --point ID")
    return int(ids.pop())


def _row(run: Any, spec: Any, pid: int) -> dict[str, Any]:
    """Point `pid`'s columns: from points/ when the run wrote it whole, else evaluated again."""
    from sweep.deploy.plan import NEEDED

    folder = run.path / "points"
    if folder.is_dir() and any(folder.rglob("*.parquet")):
        import pyarrow.dataset as ds

        dataset = ds.dataset(folder, format="parquet", partitioning="hive")
        rows = dataset.to_table(filter=ds.field("point_id") == pid).to_pylist()
        if rows and all(k in rows[0] for k in NEEDED):
            return {k: (str(v) if k in ("model", "gpu") and v is not None else v) for k, v in rows[0].items()}
    from sweep.api import explain

    return explain(spec, point_id=pid).row
