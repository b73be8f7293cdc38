"""gdrlab: learn GPUDirect RDMA by measuring it.

Importing gdrlab loads neither the CUDA driver nor libibverbs: they are opened on first use.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["bench", "copy_bench", "errors", "__version__"]

from . import errors


def bench(*args, **kwargs):
    """Measure one path over a wire; see :func:`gdrlab.engine.bench`."""
    from .engine import bench as _bench
    return _bench(*args, **kwargs)


def copy_bench(*args, **kwargs):
    """Measure copy-engine copies; see :func:`gdrlab.engine.copy_bench`."""
    from .engine import copy_bench as _copy_bench
    return _copy_bench(*args, **kwargs)
