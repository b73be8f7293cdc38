"""The version, read from the installed package's metadata (pyproject.toml is its one source)."""
from __future__ import annotations

from importlib import metadata

try:
    __version__: str = metadata.version("gdrlab")
except metadata.PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"
