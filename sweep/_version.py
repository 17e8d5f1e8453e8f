"""The installed package's version (`sweep.__version__`), for provenance in every output."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

#: The distribution's name on PyPI (`pip install sweep-capacity`); the import package and the
#: command are `sweep` ("sweep" on PyPI is an unrelated project).
DISTRIBUTION = "sweep-capacity"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
