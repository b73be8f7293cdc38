"""Memory the engine moves (:class:`Buffer`) and the devices it runs on.

Buffers speak DLPack (``__dlpack__``/``__dlpack_device__``), and host buffers also expose
``__array_interface__`` and device buffers ``__cuda_array_interface__``, so numpy, CuPy and PyTorch
arrays pass in and out without copies, on the GPU they live on.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .._engine import cuda_status, gpus, machine, native
from ..errors import InvalidArgument, Unavailable

__all__ = ["native", "cuda_status", "gpus", "machine", "Buffer", "export_dmabuf"]


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], typestr: str) -> bool:
    expect = np.dtype(typestr).itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim > 1 and stride != expect:
            return False
        expect *= dim
    return True


# DLPack's DLDeviceType codes (dlpack.h), named for messages. The engine moves the first three.
DL_CPU, DL_CUDA, DL_CUDA_HOST = 1, 2, 3
_DL_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
                    10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi", 15: "webgpu",
                    16: "hexagon", 17: "maia"}


def _dlpack_device(array: Any) -> tuple[int, int] | None:
    """``array.__dlpack_device__()`` as two ints, or None when the array has no such method."""
    method = getattr(array, "__dlpack_device__", None)
    if method is None:
        return None
    got = method()
    try:
        code, ordinal = (int(v) for v in got)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"array's __dlpack_device__() returned {got!r}, not (device type, device id)") from exc
    _check_movable(code, ordinal)
    return code, ordinal


def _check_movable(code: int, ordinal: int) -> None:
    """One clear line for memory on a device the engine cannot move (ROCm, Metal, unknown...)."""
    if code not in (DL_CPU, DL_CUDA, DL_CUDA_HOST):
        where = (f"{_DL_DEVICE_NAMES[code]}:{ordinal}" if code in _DL_DEVICE_NAMES
                 else f"an unknown DLPack device type {code}")
        raise InvalidArgument(f"array is on {where}; gdrlab moves CPU and CUDA memory only")


def _recorded_gpu(array: Any) -> int | None:
    """The GPU the array object itself names: torch's ``device.index`` for ``device.type ==
    "cuda"``, CuPy's ``device.id``; None when it names none."""
    dev: Any = getattr(array, "device", None)
    index, ident = getattr(dev, "index", None), getattr(dev, "id", None)
    if getattr(dev, "type", None) == "cuda" and isinstance(index, int):
        return index
    if type(dev).__module__.startswith("cupy") and isinstance(ident, int):
        return ident
    return None


def _array_gpu(array: Any, address: int) -> int:
    """The GPU of a ``__cuda_array_interface__`` array with no ``__dlpack_device__``: the driver's
    answer for its address (cuPointerGetAttribute), else what the object records; never a guess."""
    try:
        ordinal = int(native().pointer_device(address))
    except Unavailable:
        ordinal = -1
    if ordinal < 0:
        recorded = _recorded_gpu(array)
        ordinal = -1 if recorded is None else recorded
    if ordinal < 0:
        raise InvalidArgument("cannot tell which GPU this array is on: it has no __dlpack_device__, CUDA does "
                              "not know its address, and it records no device")
    return ordinal


def _check_gpu(array: Any, ordinal: int, device: int | None) -> None:
    """One clear line when the array's GPU differs from the one asked for or the one it records."""
    recorded = _recorded_gpu(array)
    if recorded is not None and recorded != ordinal:
        raise InvalidArgument(f"array is on cuda:{ordinal} but its .device says GPU {recorded}")
    if device is not None and device != ordinal:
        raise InvalidArgument(f"array is on cuda:{ordinal} but the buffer was asked for GPU {device}")


def _cai_view(cai: dict[str, Any]) -> tuple[int, int, bool, bool]:
    """(address, nbytes, C-contiguous, read-only) from a ``__cuda_array_interface__``."""
    nbytes = int(np.prod(cai["shape"], dtype=np.int64)) * np.dtype(cai["typestr"]).itemsize
    contiguous = cai.get("strides") in (None, ()) or _c_contiguous(cai["shape"], cai["strides"], cai["typestr"])
    return int(cai["data"][0]), nbytes, contiguous, bool(cai["data"][1])


class Buffer:
    """Memory the engine moves: ``kind`` is ``"pageable"``, ``"pinned"`` or ``"device"``.

    Every buffer speaks DLPack (``numpy.from_dlpack(buf)`` for host buffers, ``cupy.from_dlpack``
    or ``torch.from_dlpack`` for device buffers); host buffers expose ``__array_interface__``
    (``numpy.asarray(buf)``), device buffers ``__cuda_array_interface__`` (``cupy.asarray(buf)``).
    ``Buffer.from_array`` wraps a numpy, CuPy, PyTorch or JAX array without copying.
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
    def from_array(cls, array: Any, *, pin: bool = False, device: int | None = None) -> Buffer:
        """Wrap an array's memory without copying.

        Parameters
        ----------
        array
            Anything exposing ``__dlpack__``/``__dlpack_device__`` (numpy, CuPy, PyTorch, JAX),
            ``__cuda_array_interface__`` or the host array interface / buffer protocol. It must be
            C-contiguous, writable and non-empty; it is kept alive by the buffer.
        pin
            Page-lock a CPU array with cuMemHostRegister (kind ``"pinned"``).
        device
            For a GPU array, the GPU it must be on (checked, never assumed); for a host array,
            the GPU whose context page-locks it (default 0).

        Returns
        -------
        Buffer
            Kind ``"device"`` on the array's GPU (from ``__dlpack_device__``, else the driver's
            pointer attributes, else the object's ``.device``), ``"pinned"`` for page-locked host
            memory (``kDLCUDAHost`` or ``pin=True``), else ``"pageable"``.

        Raises
        ------
        InvalidArgument
            The array is on another device than asked for, on a device the engine cannot move
            (ROCm, Metal...), non-contiguous, read-only or empty.
        """
        if device is not None and (not isinstance(device, (int, np.integer)) or isinstance(device, bool)
                                   or device < 0):
            raise InvalidArgument(f"device must be a GPU number (0, 1, ...), got {device!r}")
        dl = _dlpack_device(array)
        if dl is not None and dl[0] == DL_CUDA:
            _check_gpu(array, dl[1], device)  # before CUDA is touched: a stub or a wrong GPU fails here
        cai = getattr(array, "__cuda_array_interface__", None) if dl is None or dl[0] == DL_CUDA else None
        if cai is not None:
            address, nbytes, contiguous, readonly = _cai_view(cai)
            code, keep = DL_CUDA, array
            ordinal = dl[1] if dl is not None else _array_gpu(array, address)
        else:
            source = array if dl is not None or hasattr(array, "__dlpack__") else np.asarray(array)
            address, nbytes, code, ordinal, contiguous, readonly, view = native().array_view(source)
            keep = (array, view)
            if dl is not None and (code != dl[0] or (code == DL_CUDA and ordinal != dl[1])):
                raise InvalidArgument(f"array's __dlpack_device__() says {dl} but its DLPack tensor is on "
                                      f"{(code, ordinal)}")
            if dl is None:
                _check_movable(code, ordinal)
        if code == DL_CUDA:
            _check_gpu(array, ordinal, device)
        where = "device" if code == DL_CUDA else "host"
        if not contiguous:
            raise InvalidArgument(f"{where} array must be C-contiguous (copy it with .copy() or ascontiguousarray)")
        if readonly:
            raise InvalidArgument(f"{where} array is read-only: the engine writes received bytes into a buffer")
        if nbytes == 0:
            raise InvalidArgument("array is empty")
        if code == DL_CUDA:
            if pin:
                raise InvalidArgument(f"pin=True page-locks host memory, but this array is on cuda:{ordinal}")
            return cls(0, _native_buffer=native().Buffer.wrap("device", address, nbytes, ordinal, False),
                       _keepalive=keep)
        kind = "pinned" if pin or code == DL_CUDA_HOST else "pageable"
        gpu = 0 if device is None else int(device)
        return cls(0, _native_buffer=native().Buffer.wrap(kind, address, nbytes, gpu, pin and code == DL_CPU),
                   _keepalive=keep)

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

    def __dlpack_device__(self) -> tuple[int, int]:
        """DLPack's (device type, id): kDLCPU for pageable, kDLCUDAHost for pinned, kDLCUDA and
        the GPU for device buffers."""
        return {"pageable": (DL_CPU, 0), "pinned": (DL_CUDA_HOST, 0)}.get(self.kind, (DL_CUDA, self.device))

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """The buffer as a 1-D uint8 DLPack capsule sharing its memory (``numpy.from_dlpack``,
        ``cupy.from_dlpack``, ``torch.from_dlpack``); the capsule keeps the buffer alive.

        ``stream`` is accepted and needs no ordering: every engine call has finished its work on
        the buffer when it returns. ``copy=True`` and a ``dl_device`` other than the buffer's
        raise ``BufferError``, as the DLPack protocol asks.
        """
        kwargs = {"stream": stream, "max_version": max_version, "dl_device": dl_device, "copy": copy}
        view = native().buffer_dlpack(self._b, self)
        return view.__dlpack__(**{k: v for k, v in kwargs.items() if v is not None})

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
