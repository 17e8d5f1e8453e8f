"""Error hierarchy: one root, one subclass per layer.

Every message is one line a user can act on: where (file, key), what (the value), the
rule, and where it helps a correct example. The CLI maps every `SweepError` to exit code 2.
"""

from __future__ import annotations


class SweepError(Exception):
    """Root of every error `sweep` raises on purpose (bad input, not a bug)."""


class GridError(SweepError):
    """A grid file is malformed: unknown key, wrong type, empty axis, out-of-domain value."""

    def __init__(self, source: str, key: str, value: object, rule: str) -> None:
        self.source, self.key, self.value, self.rule = source, key, value, rule
        super().__init__(f"{source}: {key} = {_show(value)}: {rule}")


class CatalogError(SweepError):
    """A catalog entry (packaged, inline or from a user folder) is malformed."""

    def __init__(self, source: str, key: str, value: object, rule: str) -> None:
        self.source, self.key, self.value, self.rule = source, key, value, rule
        super().__init__(f"{source}: {key} = {_show(value)}: {rule}")


class ProfileError(SweepError):
    """A profiling file (batch_size, latency_ms rows) cannot be fitted."""


class OutputError(SweepError):
    """The output folder cannot be written as asked."""


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
