"""The `sweep` command: parse arguments, call the library, map errors to exit codes.

Exit codes (documented for schedulers in the README):
    0  success
    1  internal error (a bug: please report it with the traceback)
    2  bad input: grid file, catalog, profile or arguments; nothing was written
    130 interrupted (Ctrl-C / SIGINT); nothing half-written looks complete
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from sweep.errors import SweepError

EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or EXIT_OK)
    except SweepError as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("sweep: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sweep", description="Capacity planning for batched inference serving.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="evaluate a grid file and write Parquet")
    r.add_argument("grid", type=Path, help="grid file (TOML), see grids/example.toml")
    r.add_argument("--out", type=Path, required=True, help="output folder")
    r.add_argument("--chunk-size", type=_positive_int, default=None, help="points per evaluation chunk (bounds memory; default 65536)")
    r.add_argument("--quiet", action="store_true", help="print nothing but errors")
    r.add_argument("--catalog", type=Path, action="append", default=[], metavar="DIR",
                   help="extra catalog folder with models/ and/or gpus/ subfolders (repeatable; later wins)")
    r.set_defaults(handler=_cmd_run)
    from sweep import cli_tools

    cli_tools.add_commands(sub)  # sweep fit, sweep kv, sweep catalog
    return p


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def _cmd_run(args: argparse.Namespace) -> int:
    from sweep import report, spec
    from sweep.evaluate import DEFAULT_CHUNK
    from sweep.run import run_grid

    from sweep.catalog import load_catalog

    grid = spec.load(args.grid, catalog=load_catalog(args.catalog) if args.catalog else None)
    result = run_grid(grid, args.out, chunk_size=args.chunk_size or DEFAULT_CHUNK)
    if not args.quiet:
        report.print_summary(grid, result)
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
