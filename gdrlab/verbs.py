"""Memory registration as a subject: the verbs objects, one Python class per verbs object.

``Device`` (an opened HCA) owns ``ProtectionDomain`` objects, which own ``MemoryRegion`` objects.
A parent closes its children before itself, and every object is a context manager::

    with gdrlab.verbs.Device() as dev, dev.alloc_pd() as pd:
        mr = pd.reg_mr(host_buffer)                  # ibv_reg_mr
        gpu_mr = pd.reg_gpu(device_buffer)           # dma-buf first, then nvidia-peermem
        print(gpu_mr.mechanism, gpu_mr.reg_us)

A failing verbs call raises :class:`gdrlab.errors.VerbsError` with ``.errno`` and the likely cause
(EFAULT on a GPU pointer: no peer-memory client; ENOMEM: BAR1 or RLIMIT_MEMLOCK). Nothing here
loads libibverbs until it is used; ``status()`` says whether it can be.
"""
from __future__ import annotations

import time
from typing import Any, TypeVar

import numpy as np

from . import provenance as _prov
from .transfer.buffers import Buffer, cuda_status, gpus, machine, native
from .errors import GdrlabError, InvalidArgument, Unavailable
from .units import parse_sizes

__all__ = [
    "status", "devices", "peer_memory_status", "pyverbs_status", "bar1_usage", "registration_cost",
    "Device", "ProtectionDomain", "MemoryRegion", "ACCESS_DEFAULT",
]

_C = TypeVar("_C")
_O = TypeVar("_O", bound="_Owner")

ACCESS_DEFAULT = 1 | 2  # IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE: the engine's default; RDMA READ is never needed


def _v() -> Any:
    return native().verbs


def status() -> dict:
    """``{"library_found": bool, "reason": str, "devices": [names], "library": name}``, never raises.

    ``reason`` is "" when devices exist, "libibverbs.so.1 not found ..." without the library, and
    "no RDMA device found (/sys/class/infiniband is empty)" with the library but no HCA.
    """
    return dict(_v().status())


def devices() -> list[dict]:
    """Every RDMA device with its attributes and ports; [] when there is none."""
    if not status()["devices"]:
        return []
    return list(_v().devices())


def peer_memory_status() -> dict:
    """How GPU memory could be registered here: ``peer_memory_loaded`` with ``peer_memory_module``
    (``nvidia_peermem`` or MLNX_OFED's legacy ``nv_peer_mem``, and its version),
    ``nvidia_peermem_loaded`` (and its version), ``reg_dmabuf_mr`` (libibverbs exports it,
    IBVERBS_1.12) and ``cuda_dmabuf`` (the driver can export dma-bufs), each with a reason when
    false; and ``gpu_flush``, how the ``gdr`` path makes the HCA's writes visible in GPU 0:
    ``"none"`` (the device orders them), ``"cuFlushGPUDirectRDMAWrites"`` or ``"rdma-read"`` (None,
    with ``gpu_flush_reason``, without a usable GPU or with a bad ``*_GDR_FLUSH_DISABLE``)."""
    loaded, module = _v().peermem_loaded()
    st = status()
    name, _, version = (module or "").partition(" ")
    nvidia = bool(loaded) and name == "nvidia_peermem"
    out: dict[str, Any] = {"peer_memory_loaded": bool(loaded), "peer_memory_module": module or None,
                           "nvidia_peermem_loaded": nvidia, "nvidia_peermem_version": (version or None) if nvidia else None}
    if st["library_found"]:
        out["reg_dmabuf_mr"] = bool(_v().has_reg_dmabuf_mr())
        out["reg_dmabuf_mr_reason"] = "" if out["reg_dmabuf_mr"] else "libibverbs older than rdma-core 34 (IBVERBS_1.12)"
    else:
        out["reg_dmabuf_mr"] = False
        out["reg_dmabuf_mr_reason"] = st["reason"]
    cs = cuda_status()
    if cs["usable"]:
        g = gpus()
        out["cuda_dmabuf"] = bool(g and g[0]["dmabuf_supported"])
        out["cuda_dmabuf_reason"] = "" if out["cuda_dmabuf"] else "GPU 0 reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0"
        try:
            out["gpu_flush"], out["gpu_flush_reason"] = _v().gpu_flush(0), ""
        except GdrlabError as exc:
            out["gpu_flush"], out["gpu_flush_reason"] = None, str(exc)
    else:
        out["cuda_dmabuf"] = False
        out["cuda_dmabuf_reason"] = cs["reason"]
        out["gpu_flush"], out["gpu_flush_reason"] = None, cs["reason"]
    return out


def pyverbs_status() -> tuple[bool, str]:
    """``(True, "pyverbs <version>")`` when rdma-core's Python bindings import, else
    ``(False, why)``; lab 03 shows the equivalent pyverbs calls only in the first case."""
    try:
        import pyverbs  # noqa: F401
        import pyverbs.device  # noqa: F401
    except ImportError as exc:
        text = str(exc)
        if "IBVERBS_PRIVATE" in text:
            return False, ("pyverbs is installed but was built for a different rdma-core than this machine's "
                           f"libibverbs ({text}); use the distribution's python3-pyverbs package")
        return False, (f"pyverbs is not importable ({text}): it comes with rdma-core (Debian/Ubuntu: "
                       "python3-pyverbs); the PyPI source package needs cython<3.1, libnl headers and the "
                       "same rdma-core version as the installed libibverbs")
    except Exception as exc:  # pyverbs raises its own errors when no provider is present
        return False, f"pyverbs failed to import: {type(exc).__name__}: {exc}"
    version = getattr(pyverbs, "__version__", "") or "unknown version"
    return True, f"pyverbs {version}"


def bar1_usage(device: int = 0) -> dict:
    """``{"used_bytes", "total_bytes", "reason"}`` of GPU ``device``'s BAR1 aperture from NVML
    (nvidia-ml-py); the byte fields are None with the reason when NVML is not usable."""
    try:
        import pynvml
    except ImportError:
        return {"used_bytes": None, "total_bytes": None,
                "reason": "nvidia-ml-py is not installed (pip install nvidia-ml-py): BAR1 use not measured"}
    try:
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(device)
            m = pynvml.nvmlDeviceGetBAR1MemoryInfo(h)
            return {"used_bytes": int(m.bar1Used), "total_bytes": int(m.bar1Total), "reason": ""}
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # pynvml.NVMLError has many subclasses; any of them means "not here"
        return {"used_bytes": None, "total_bytes": None, "reason": f"NVML unusable: {exc}"}


class _Owner:
    """Parent bookkeeping: children are closed, newest first, before the parent."""

    def __init__(self) -> None:
        self._children: list = []
        self._closed = False

    def _adopt(self, child: _C) -> _C:
        self._check_open()
        self._children.append(child)
        return child

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument(f"{type(self).__name__} is closed")

    def _close_children(self) -> None:
        while self._children:
            child = self._children[-1]
            child.close()
            if self._children and self._children[-1] is child:
                self._children.pop()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the children, newest first (subclasses then release their own object)."""
        self._close_children()
        self._closed = True

    def __enter__(self: _O) -> _O:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Device(_Owner):
    """An opened RDMA device (``ibv_open_device``). ``name=None`` picks the first device with an
    ACTIVE port. Raises Unavailable with ``status()``'s reason when there is none."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__()
        st = status()
        if not st["library_found"]:
            raise Unavailable(st["reason"])
        if not st["devices"]:
            raise Unavailable(st["reason"])
        self._n = _v().Context(name or "")

    name = property(lambda self: self._n.name)

    @property
    def info(self) -> dict:
        """``ibv_query_device`` attributes and every port's ``ibv_query_port`` attributes."""
        self._check_open()
        return dict(self._n.info)

    def port_attr(self, port: int = 1) -> dict:
        self._check_open()
        return dict(self._n.port_attr(port))

    def gid(self, port: int = 1, index: int = 0) -> bytes:
        self._check_open()
        return self._n.gid(port, index)

    def active_port(self) -> int:
        self._check_open()
        return self._n.active_port()

    def alloc_pd(self) -> "ProtectionDomain":
        """A protection domain (``ibv_alloc_pd``) owned by this device."""
        self._check_open()
        return self._adopt(ProtectionDomain(self))

    def close(self) -> None:
        """Close every protection domain (and their regions), then the device."""
        if self._closed:
            return
        self._close_children()
        self._n = None  # the native context is closed when its last reference goes
        self._closed = True

    def __repr__(self) -> str:
        return f"<Device {self.name if not self._closed else 'closed'}>"


class ProtectionDomain(_Owner):
    """``ibv_alloc_pd``: memory regions and queue pairs must share one to work together."""

    def __init__(self, device: Device) -> None:
        super().__init__()
        device._check_open()
        self.device = device
        self._n = _v().ProtectionDomain(device._n)

    def reg_mr(self, memory: Any, access: int = ACCESS_DEFAULT, *, length: int | None = None) -> "MemoryRegion":
        """Register host memory with ``ibv_reg_mr`` (it pins the pages). ``memory`` is a
        gdrlab Buffer (host kind), a numpy array, or an integer address with ``length``."""
        self._check_open()
        address, size, keep, kind = _address_of(memory, length)
        if kind == "device":
            # Passing a GPU pointer to plain ibv_reg_mr is what lab 03 demonstrates: it works
            # only with nvidia_peermem loaded, and fails with EFAULT (VerbsError) otherwise.
            n = _v().MemoryRegion.register_device(self._n, address, size, memory.device, access, "raw")
        else:
            if not isinstance(memory, Buffer):
                _check_fork_safe(address, size)
            n = _v().MemoryRegion.register_host(self._n, address, size, access)
        return self._adopt(MemoryRegion(self, n, keep))

    def reg_gpu(self, buffer: Buffer, access: int = ACCESS_DEFAULT, how: str = "auto") -> "MemoryRegion":
        """Register GPU memory: ``how="auto"`` tries dma-buf (``cuMemGetHandleForAddressRange`` +
        ``ibv_reg_dmabuf_mr``) and falls back to ``ibv_reg_mr`` when nvidia_peermem is loaded;
        ``"dmabuf"`` or ``"peermem"`` forces one. ``.mechanism`` says which was used."""
        self._check_open()
        if how not in ("auto", "dmabuf", "peermem"):
            raise InvalidArgument(f"unknown registration {how!r}; valid: auto, dmabuf, peermem")
        if not isinstance(buffer, Buffer) or buffer.kind != "device":
            raise InvalidArgument("reg_gpu needs a gdrlab.engine.Buffer of kind 'device'")
        n = _v().MemoryRegion.register_device(self._n, buffer.address, buffer.size, buffer.device, access, how)
        return self._adopt(MemoryRegion(self, n, buffer))

    def close(self) -> None:
        """Deregister every region, then deallocate the domain."""
        if self._closed:
            return
        self._close_children()
        self._n = None
        self._closed = True


class MemoryRegion:
    """A registered memory region: ``lkey``/``rkey`` name it to the HCA; ``mechanism`` is
    ``"host"``, ``"dmabuf"`` or ``"peermem"``; ``reg_us`` is how long registration took (for dma-buf
    the export, ``export_us``, and the import together, as peer memory's ``ibv_reg_mr`` includes
    its page lookup)."""

    def __init__(self, pd: ProtectionDomain, native_mr: Any, keepalive: Any = None) -> None:
        self.pd = pd
        self._n = native_mr
        self._keep = keepalive  # the memory must outlive the registration

    lkey = property(lambda self: self._n.lkey)
    rkey = property(lambda self: self._n.rkey)
    address = property(lambda self: self._n.address)
    length = property(lambda self: self._n.length)
    mechanism = property(lambda self: self._n.mechanism)
    fallback_reason = property(lambda self: self._n.fallback_reason)
    reg_us = property(lambda self: self._n.reg_seconds * 1e6)  # dma-buf: export + import
    export_us = property(lambda self: self._n.export_seconds * 1e6)  # dma-buf's export alone (0 otherwise)
    dereg_us = property(lambda self: self._n.dereg_seconds * 1e6)
    closed = property(lambda self: self._n.closed)

    def close(self) -> None:
        """``ibv_dereg_mr`` (idempotent)."""
        self._n.close()
        if self in self.pd._children:
            self.pd._children.remove(self)

    def __enter__(self) -> "MemoryRegion":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"lkey=0x{self.lkey:x} rkey=0x{self.rkey:x}"
        return f"<MemoryRegion {self.length} bytes via {self.mechanism} {state}>"


def _check_fork_safe(address: int, size: int) -> None:
    """With fork protection on (kernels before 5.13, after ``ibv_fork_init``), a registration marks
    whole pages MADV_DONTFORK: any other object sharing the first or last page vanishes from a
    forked child (multiprocessing, ``!cmd`` in a notebook), which then crashes. rdma-core does not
    refuse it (its refusal, PR #1222, was reverted), so gdrlab does, for memory it did not allocate."""
    import mmap
    page = mmap.PAGESIZE
    if (address % page or size % page) and _v().fork_protection() == "enabled":
        raise InvalidArgument(
            f"unaligned host memory cannot be registered while fork protection is on (this kernel predates 5.13): "
            f"[0x{address:x}, +{size}) does not start and end on {page}-byte pages, and registering it would hide "
            "the rest of those pages from forked children; register a gdrlab.engine.Buffer(size, 'pageable') "
            "(page-aligned) or a page-aligned array (numpy: allocate with extra room and slice at a page boundary)")


def _address_of(memory: Any, length: int | None) -> tuple[int, int, Any, str]:
    if isinstance(memory, Buffer):
        return memory.address, memory.size if length is None else int(length), memory, memory.kind
    if isinstance(memory, (int, np.integer)) and not isinstance(memory, bool):
        if not length or length <= 0:
            raise InvalidArgument("registering a raw address needs length > 0")
        return int(memory), int(length), None, "host"
    arr = np.asarray(memory)
    if not arr.flags["C_CONTIGUOUS"] or arr.nbytes == 0:
        raise InvalidArgument("host arrays must be C-contiguous and non-empty")
    return arr.ctypes.data, arr.nbytes if length is None else int(length), arr, "host"


def registration_cost(sizes: Any = "4K:256M", memory: str = "host", *, repeats: int = 5, device: int = 0,
                      how: str = "auto", rdma_device: str | None = None) -> Any:
    """Time ``ibv_reg_mr`` / ``ibv_reg_dmabuf_mr`` and ``ibv_dereg_mr`` against size.

    ``memory`` is ``"host"`` (page-aligned host memory) or ``"device"`` (GPU memory). Each size is
    registered ``repeats`` times; one row per size with columns memory, size, mechanism, repeats,
    reg_us_min, reg_us_p50, dereg_us_p50, bar1_used_before_bytes, bar1_used_during_bytes (while
    the region is registered), bar1_used_after_bytes (after deregistration); the BAR1 figures are
    None for host memory, and None with the reason in ``attrs["bar1_reason"]`` without NVML.
    """
    import pandas as pd

    if memory not in ("host", "device"):
        raise InvalidArgument(f"unknown memory {memory!r}; valid: host, device")
    if repeats < 1:
        raise InvalidArgument("repeats must be at least 1")
    size_list = parse_sizes(sizes)
    if memory == "device":
        st = cuda_status()
        if not st["usable"]:
            raise Unavailable(f"registering GPU memory needs a GPU: {st['reason']}")
    rows = []
    bar1_reason = ""
    with Device(rdma_device) as dev, dev.alloc_pd() as pdom:
        for size in size_list:
            # Pageable host memory, not CUDA-pinned: ibv_reg_mr's own pinning is part of the cost.
            buf = Buffer(size, "device", device) if memory == "device" else Buffer(size, "pageable")
            before = bar1_usage(device) if memory == "device" else {"used_bytes": None, "reason": "host memory"}
            reg, dereg, during, mech = [], [], None, ""
            for r in range(repeats):
                mr = pdom.reg_gpu(buf, how=how) if memory == "device" else pdom.reg_mr(buf)
                if r == 0 and memory == "device":
                    during = bar1_usage(device)
                mech = mr.mechanism
                mr.close()
                reg.append(mr.reg_us)
                dereg.append(mr.dereg_us)
            after = bar1_usage(device) if memory == "device" else {"used_bytes": None}
            bar1_reason = before.get("reason", "") or (during or {}).get("reason", "")
            rows.append({
                "memory": memory, "size": size, "mechanism": mech, "repeats": repeats,
                "reg_us_min": float(np.min(reg)), "reg_us_p50": float(np.median(reg)),
                "dereg_us_p50": float(np.median(dereg)),
                "bar1_used_before_bytes": before.get("used_bytes"),
                "bar1_used_during_bytes": (during or {}).get("used_bytes"),
                "bar1_used_after_bytes": after.get("used_bytes"),
            })
        hca = dev.name
    df = pd.DataFrame(rows)
    _prov.attach(df, _prov.live({"what": f"registration_cost memory={memory}", "hca": hca,
                                 "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, machine()))
    df.attrs["bar1_reason"] = bar1_reason
    return df
