"""The compiled engine and what CUDA reports, at the bottom of the package.

``native()`` (the engine module, or :class:`~gdrlab.errors.Unavailable` when it is not built),
``cuda_status()``, ``gpus()`` and ``machine()``: hardware facts that ``hw``, ``nccl`` and the
transfer layer all read here, so none of them reaches up through :mod:`gdrlab.engine`. Importing
this module loads no CUDA or verbs library; the engine itself is imported on first use (it is
the one optional part of the package: an unbuilt checkout still runs the model and the docs).
"""
from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import Any

from .errors import Unavailable

__all__ = ["cuda_status", "gpus", "machine", "native", "ucx_wheel_library"]

_ucx_pointed = False


def ucx_wheel_library() -> str:
    """The libucx wheel's ``libucp.so.0`` that this Python imports, else ``""``."""
    try:
        spec = importlib.util.find_spec("libucx")
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin:
        return ""
    lib = os.path.join(os.path.dirname(spec.origin), "lib", "libucp.so.0")
    return lib if os.path.isfile(lib) else ""


def native() -> ModuleType:
    """The compiled engine module. Importing it loads no CUDA or verbs library."""
    try:
        from . import _native
    except ImportError as exc:  # pragma: no cover - only when the build is broken
        raise Unavailable(f"the gdrlab engine is not built ({exc}); reinstall with `pip install .`") from exc
    global _ucx_pointed
    if not _ucx_pointed:
        # Every user of the engine (a client, `gdrlab serve`, a thread peer, an MPI rank) opens the
        # UCX this Python imports, before the first use: the engine alone looks beside itself,
        # which misses a wheel on another path (an editable install, PYTHONPATH), and two
        # processes on different UCX versions cannot reach each other's worker addresses.
        _native.ucx.set_library(ucx_wheel_library())
        _ucx_pointed = True
    return _native


def cuda_status() -> dict[str, Any]:
    """``{"usable": bool, "reason": str, "driver_version": int}`` without raising."""
    ok, why, ver = native().cuda_probe()
    return {"usable": bool(ok), "reason": why, "driver_version": int(ver)}


def gpus() -> list[dict[str, Any]]:
    """The GPUs the CUDA driver sees, with GPUDirect-related attributes; [] when CUDA is unusable."""
    if not cuda_status()["usable"]:
        return []
    return list(native().gpu_infos())


def machine() -> dict[str, Any]:
    """What a live result's provenance says about this machine: the first GPU's name and the CUDA
    driver version when a GPU is usable, else nothing."""
    infos = gpus()
    if not infos:
        return {}
    return {"gpu": infos[0]["name"], "driver_version": cuda_status()["driver_version"]}
