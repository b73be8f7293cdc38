"""gdrlab: learn GPUDirect RDMA by measuring it.

Importing gdrlab loads neither the CUDA driver nor libibverbs: they are opened on first use.
``gdrlab.bench`` and ``gdrlab.copy_bench`` are :mod:`gdrlab.engine`'s.
"""
from __future__ import annotations

from typing import Any

from . import errors
from ._version import __version__

__all__ = ["bench", "copy_bench", "errors", "__version__"]


def __getattr__(name: str) -> Any:
    # bench and copy_bench come from the engine facade on first use, so `import gdrlab` stays light
    # and the package never imports the modules below it at import time.
    if name in ("bench", "copy_bench"):
        from . import engine
        return getattr(engine, name)
    raise AttributeError(f"module 'gdrlab' has no attribute {name!r}")
