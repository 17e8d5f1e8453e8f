"""The `sweep` command: parse arguments, call the library, map errors to exit codes.

Owns argument parsing, the terminal summaries and the quick-answer commands; every
computation is a call into the library.
"""

from __future__ import annotations

from sweep.cli.main import main

__all__ = ["main"]
