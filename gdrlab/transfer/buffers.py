"""Memory the engine moves (:class:`Buffer`) and the devices it runs on.

Host buffers expose ``__array_interface__`` and device buffers ``__cuda_array_interface__``, so
numpy and CuPy arrays pass in and out without copies.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from ..errors import InvalidArgument, Unavailable

__all__ = ["native", "cuda_status", "gpus", "machine", "Buffer", "export_dmabuf"]


def native() -> ModuleType:
    """The compiled engine module. Importing it loads no CUDA or verbs library."""
    try:
        from .. import _native
    except ImportError as exc:  # pragma: no cover - only when the build is broken
        raise Unavailable(f"the gdrlab engine is not built ({exc}); reinstall with `pip install .`") from exc
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


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], typestr: str) -> bool:
    expect = np.dtype(typestr).itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim > 1 and stride != expect:
            return False
        expect *= dim
    return True


class Buffer:
    """Memory the engine moves: ``kind`` is ``"pageable"``, ``"pinned"`` or ``"device"``.

    Host buffers expose ``__array_interface__`` (``numpy.asarray(buf)`` is a zero-copy view);
    device buffers expose ``__cuda_array_interface__`` (``cupy.asarray(buf)``).
    ``Buffer.from_array`` wraps a numpy or CuPy array without copying.
    """

    def __init__(self, size: int, kind: str = "pageable", device: int = 0, *, _native_buffer: Any = None,
                 _keepalive: Any = None) -> None:
        if _native_buffer is None:
            if not isinstance(size, (int, np.integer)) or isinstance(size, bool):
                raise InvalidArgument(f"size must be an integer number of bytes, got {size!r}")
            if size <= 0:
                raise InvalidArgument(f"size must be at least 1 byte, got {size}")
            _native_buffer = native().Buffer(kind, int(size), int(device))
        self._b = _native_buffer
        self._keepalive = _keepalive

    @classmethod
    def from_array(cls, array: Any, *, pin: bool = False) -> "Buffer":
        """Wrap a contiguous numpy array (host) or any object with ``__cuda_array_interface__``
        (device, e.g. CuPy). ``pin=True`` page-locks a host array with cuMemHostRegister."""
        cai = getattr(array, "__cuda_array_interface__", None)
        if cai is not None:
            ptr = int(cai["data"][0])
            nbytes = int(np.prod(cai["shape"], dtype=np.int64)) * np.dtype(cai["typestr"]).itemsize
            if cai.get("strides") not in (None, ()) and not _c_contiguous(cai["shape"], cai["strides"], cai["typestr"]):
                raise InvalidArgument("device array must be C-contiguous")
            dev = int(getattr(getattr(array, "device", None), "id", 0) or 0)
            return cls(0, _native_buffer=native().Buffer.wrap("device", ptr, nbytes, dev, False), _keepalive=array)
        arr = np.asarray(array)
        if not arr.flags["C_CONTIGUOUS"]:
            raise InvalidArgument("host array must be C-contiguous")
        if arr.nbytes == 0:
            raise InvalidArgument("array is empty")
        kind = "pinned" if pin else "pageable"
        return cls(0, _native_buffer=native().Buffer.wrap(kind, arr.ctypes.data, arr.nbytes, 0, pin), _keepalive=arr)

    kind = property(lambda self: str(self._b.kind), doc='``"pageable"``, ``"pinned"`` or ``"device"``.')
    size = property(lambda self: int(self._b.size), doc="Length in bytes.")
    nbytes = size
    device = property(lambda self: int(self._b.device), doc="The GPU of a device buffer (0 for host buffers).")
    address = property(lambda self: int(self._b.address),
                       doc="The first byte's address (a device pointer for device buffers).")

    def _interface(self, on_device: bool) -> dict[str, Any]:
        """The array interface of this buffer, for the side (host or device) it lives on."""
        if (self.kind == "device") != on_device:
            raise AttributeError("device buffer: use __cuda_array_interface__ (e.g. cupy.asarray)" if not on_device
                                 else "host buffer: use __array_interface__ (e.g. numpy.asarray)")
        out: dict[str, Any] = {"shape": (self.size,), "typestr": "|u1", "data": (self.address, False), "version": 3}
        if on_device:
            out.update(strides=None, stream=None)
        return out

    __array_interface__ = property(lambda self: self._interface(False))
    __cuda_array_interface__ = property(lambda self: self._interface(True))

    def fill_pattern(self, seed: int, offset: int = 0, length: int | None = None) -> None:
        """Write the verification pattern for ``seed`` into ``[offset, offset + length)``."""
        self._b.fill_pattern(seed, offset, self.size - offset if length is None else length)

    def check_pattern(self, seed: int, offset: int = 0, length: int | None = None) -> int:
        """-1 if the range holds the pattern for ``seed``, else the first differing offset."""
        return int(self._b.check_pattern(seed, offset, self.size - offset if length is None else length))

    def __repr__(self) -> str:
        return f"<gdrlab.Buffer {self.kind} {self.size} bytes at {self.address:#x}>"


def export_dmabuf(buffer: Buffer) -> Any:
    """Export a device buffer as a dma-buf fd (what ibv_reg_dmabuf_mr imports). Returns an object
    with ``fd``, ``size``, ``cpu_mmap_errno`` and ``close()``."""
    if not isinstance(buffer, Buffer):
        raise InvalidArgument("export_dmabuf needs a gdrlab.engine.Buffer of kind 'device'")
    return native().export_dmabuf(buffer._b)
