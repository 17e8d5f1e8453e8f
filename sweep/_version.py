"""The installed package's version (`sweep.__version__`), for provenance in every output."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sweep")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
