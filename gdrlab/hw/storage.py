"""GPUDirect Storage on this machine: is cuFile here, is ``nvidia_fs`` loaded, what does
``cufile.json`` allow, and so which mode will cuFile use; plus the measurement of lab 06 (a file
read into GPU memory three ways).

cuFile (``libcufile``) reads a file into GPU memory in one of two ways:

* **GDS proper**: the storage device (an NVMe drive, or a storage NIC) DMAs straight into GPU
  memory through the GPU's BAR1 window, peer to peer. It needs the ``nvidia_fs`` kernel module
  (or, in recent cuFile releases, the Linux kernel's PCI P2PDMA, ``use_pci_p2pdma`` in
  ``cufile.json``), a filesystem GDS supports, and a file opened with ``O_DIRECT``.
* **compatibility mode**: cuFile reads the file with ordinary POSIX reads into a host bounce
  buffer and copies it to the GPU. Same API, same answer, no peer-to-peer DMA. It runs when
  ``cufile.json`` allows it (``properties.allow_compat_mode``, on by default) and GDS proper
  cannot run.

Only the standard library is imported here (ctypes for ``libcufile.so.0`` and ``libcuda.so.1``,
opened with ``dlopen`` at first use the way the engine opens its libraries), so
``bench/record_storage.py`` can load this file on a GPU machine where gdrlab's other
dependencies are missing. ``import gdrlab`` loads nothing of it.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["CUFILE_JSON", "LIBCUFILE", "METHODS", "StorageReader", "cufile_config", "doctor_lines",
           "drop_file_cache", "expected_mode", "filesystem_of", "libcufile_status", "nvidia_fs_reads",
           "nvidia_fs_status", "parse_cufile_json", "probe", "resident_fraction"]

LIBCUFILE = "libcufile.so.0"
CUFILE_JSON = "/etc/cufile.json"
#: The three ways lab 06 reads a file into GPU memory.
METHODS = ("cufile", "pinned_read_copy", "pageable_read_copy")

# cufile.json properties that decide the mode (the stock file documents each)
_MODE_KEYS = ("allow_compat_mode", "force_compat_mode", "use_pci_p2pdma", "use_poll_mode")


def _strip_comments(text: str) -> str:
    """cufile.json carries // and /* */ comments, which JSON does not allow: drop them outside strings."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
        elif c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    # a trailing comma before } or ] is another thing the stock file's users leave behind
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def parse_cufile_json(text: str) -> dict[str, Any]:
    """The settings of a ``cufile.json`` text (comments allowed) as a dict; ValueError if it is not JSON."""
    try:
        doc = json.loads(_strip_comments(text))
    except json.JSONDecodeError as exc:
        raise ValueError(f"cufile.json is not valid JSON once its comments are removed: {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError("cufile.json should hold one JSON object")  # noqa: TRY004 (one error type for callers)
    return doc


def cufile_config(root: str = "/", path: str | None = None) -> dict[str, Any]:
    """Where cuFile reads its settings (``$CUFILE_ENV_PATH_JSON``, else ``/etc/cufile.json``) and the
    properties that decide its mode: ``{path, found, properties, reason}``."""
    if path is None:
        env = os.environ.get("CUFILE_ENV_PATH_JSON") if root == "/" else None
        path = env or CUFILE_JSON
    full = Path(root) / path.lstrip("/") if root != "/" else Path(path)
    out: dict[str, Any] = {"path": path, "found": False, "properties": {}, "reason": ""}
    try:
        text = full.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        out["reason"] = f"{path} not readable ({exc.strerror or exc})"
        return out
    out["found"] = True
    try:
        doc = parse_cufile_json(text)
    except ValueError as exc:
        out["reason"] = str(exc)
        return out
    found = doc.get("properties")
    props: dict[str, Any] = found if isinstance(found, dict) else {}
    out["properties"] = {k: props[k] for k in _MODE_KEYS if k in props}
    return out


def nvidia_fs_status(root: str = "/") -> dict[str, Any]:
    """Whether the ``nvidia_fs`` kernel module is loaded (``/sys/module/nvidia_fs``, ``/proc/modules``)
    and its version: ``{loaded, version, reason}``."""
    r = Path(root)
    loaded = (r / "sys/module/nvidia_fs").is_dir()
    if not loaded:
        try:
            loaded = any(line.split()[0] == "nvidia_fs"
                         for line in (r / "proc/modules").read_text().splitlines() if line.strip())
        except OSError:
            pass
    version = None
    for p in (r / "sys/module/nvidia_fs/version", r / "proc/driver/nvidia-fs/version"):
        try:
            version = p.read_text().strip().splitlines()[0].split(":")[-1].strip() or None
            break
        except (OSError, IndexError):
            continue
    reason = "loaded" if loaded else "not loaded (no /sys/module/nvidia_fs): cuFile cannot use it"
    return {"loaded": loaded, "version": version, "reason": reason}


def nvidia_fs_reads(root: str = "/") -> int | None:
    """The count of reads ``nvidia_fs`` has done (the ``Reads`` line of /proc/driver/nvidia-fs/stats):
    a count that grows during a cuFile read shows GDS proper at work. None without the module."""
    try:
        text = (Path(root) / "proc/driver/nvidia-fs/stats").read_text()
    except OSError:
        return None
    m = re.search(r"^\s*Reads\s*:\s*n=(\d+)", text, re.MULTILINE)
    return int(m.group(1)) if m else None


_PROBE = r'''
import ctypes, json, os, re, sys
r = {"found": False, "path": None, "version": None, "reason": ""}
try:
    lib = ctypes.CDLL(sys.argv[1])
except OSError as exc:
    r["reason"] = str(exc)
else:
    r["found"] = True
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if os.path.basename(p).startswith("libcufile.so"):
                    r["path"] = p
                    break
    except OSError:
        pass
    m = re.search(r"libcufile\.so\.([0-9.]+)$", os.path.basename(os.path.realpath(r["path"] or "")))
    if m and m.group(1).count(".") >= 1:
        r["version"] = m.group(1)
    fn = getattr(lib, "cuFileGetVersion", None)
    if fn is not None:
        class Err(ctypes.Structure):
            _fields_ = [("err", ctypes.c_int), ("cu_err", ctypes.c_int)]
        fn.restype = Err
        v = ctypes.c_int(0)
        try:
            e = fn(ctypes.byref(v))
            if e.err == 0 and v.value > 0:
                r["api_version"] = v.value
        except Exception:
            pass
print(json.dumps(r))
'''


def libcufile_status(timeout_s: float = 20.0) -> dict[str, Any]:
    """Whether ``libcufile.so.0`` loads here, from where, and its version (file name, and
    ``cuFileGetVersion`` where the library has it): probed in a child process, like the
    other libraries ``gdrlab doctor`` reports."""
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, LIBCUFILE], check=False, capture_output=True, text=True,
                              timeout=timeout_s)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {"found": False, "path": None, "version": None, "reason": f"probe timed out after {timeout_s:.0f} s"}
    except (json.JSONDecodeError, IndexError, OSError) as exc:
        return {"found": False, "path": None, "version": None, "reason": f"probe failed: {exc}"}


def expected_mode(lib_found: bool, nvidia_fs_loaded: bool, properties: dict[str, Any]) -> tuple[str, str]:
    """The mode cuFile will run in, from what is installed and configured: ``(mode, why)`` with
    mode one of ``"none"``, ``"compat"``, ``"gds"``, ``"gds or compat"`` (P2PDMA asked for: it
    runs only where the kernel, the GPU driver and the drive allow it) and ``"refuses"``."""
    allow = bool(properties.get("allow_compat_mode", True))
    if not lib_found:
        return "none", "libcufile is not installed: no cuFile, no GDS"
    if properties.get("force_compat_mode"):
        return "compat", "cufile.json sets force_compat_mode: every read goes through a host bounce buffer"
    if nvidia_fs_loaded:
        return "gds", ("nvidia_fs is loaded: GDS proper on supported filesystems (ext4/xfs on local NVMe, "
                       "NFS over RDMA, parallel filesystems) with O_DIRECT files; "
                       + ("compat mode elsewhere (tmpfs, overlay, unsupported filesystems)" if allow
                          else "elsewhere cuFile refuses (allow_compat_mode is false)"))
    if properties.get("use_pci_p2pdma"):
        return "gds or compat", ("nvidia_fs is not loaded but cufile.json asks for the kernel's PCI P2PDMA: "
                                 "GDS where the kernel, GPU driver and drive support it"
                                 + (", compat mode elsewhere" if allow else ", cuFile refuses elsewhere"))
    if allow:
        return "compat", ("nvidia_fs is not loaded and cufile.json allows compatibility mode: cuFile reads "
                          "with POSIX reads into a host bounce buffer, then copies to the GPU")
    return "refuses", "nvidia_fs is not loaded and cufile.json forbids compatibility mode: cuFile reads fail"


def probe(root: str = "/") -> dict[str, Any]:
    """Everything ``gdrlab doctor`` says about storage: ``{libcufile, nvidia_fs, cufile_json, mode, why}``.
    With a recorded ``root`` (not ``/``) the library is not probed (it would describe this machine)."""
    if root == "/":
        lib = libcufile_status()
    else:
        lib = {"found": False, "path": None, "version": None,
               "reason": "not probed: a recorded sysfs tree holds no libraries"}
    fs = nvidia_fs_status(root)
    cfg = cufile_config(root)
    mode, why = expected_mode(bool(lib.get("found")), fs["loaded"], cfg["properties"])
    return {"libcufile": lib, "nvidia_fs": fs, "cufile_json": cfg, "mode": mode, "why": why}


def doctor_lines(report: dict[str, Any] | None) -> list[str]:
    """The doctor's "Storage" section for a :func:`probe` result."""
    if not report:
        return []
    lib, fs, cfg = report["libcufile"], report["nvidia_fs"], report["cufile_json"]
    if lib.get("found"):
        ver = lib.get("version") or (f"API {lib['api_version']}" if lib.get("api_version") else "version unknown")
        libline = f"libcufile {ver} ({lib.get('path') or LIBCUFILE})"
    else:
        libline = f"libcufile: not found ({lib.get('reason') or 'no reason given'})"
    props = ", ".join(f"{k}={json.dumps(v)}" for k, v in cfg["properties"].items()) or "defaults"
    cfgline = (f"{cfg['path']}: {props}" if cfg["found"] and not cfg["reason"]
               else f"{cfg['path']}: {cfg['reason'] or 'not found'}")
    fsline = f"nvidia_fs: {'loaded' + (' (version ' + fs['version'] + ')' if fs['version'] else '') if fs['loaded'] else 'not loaded'}"
    return ["", "Storage (GPUDirect Storage, cuFile)", f"  {libline}", f"  {fsline}", f"  {cfgline}",
            f"  cuFile mode: {report['mode']}: {report['why']}"]


def filesystem_of(path: str) -> dict[str, Any]:
    """The mount holding ``path`` (the longest mount point of /proc/mounts above it): ``{fstype, device,
    mount}``; ``fstype`` is ``"unknown"`` where /proc/mounts cannot be read."""
    real = os.path.realpath(path)
    best = {"fstype": "unknown", "device": None, "mount": None}
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best["mount"] or ""):
            best = {"fstype": parts[2], "device": parts[0], "mount": mnt}
    return best


# ----------------------------------------------------------------------------- measurement
class _Err(ctypes.Structure):
    _fields_ = [("err", ctypes.c_int), ("cu_err", ctypes.c_int)]


class _NvfsProps(ctypes.Structure):
    _fields_ = [("major_version", ctypes.c_uint), ("minor_version", ctypes.c_uint),
                ("poll_thresh_size", ctypes.c_size_t), ("max_direct_io_size", ctypes.c_size_t),
                ("dstatusflags", ctypes.c_uint), ("dcontrolflags", ctypes.c_uint)]


class _DrvProps(ctypes.Structure):
    # CUfileDrvProps_t of cufile.h
    _fields_ = [("nvfs", _NvfsProps), ("fflags", ctypes.c_uint), ("max_device_cache_size", ctypes.c_uint),
                ("per_buffer_cache_size", ctypes.c_uint), ("max_device_pinned_mem_size", ctypes.c_uint),
                ("max_batch_io_size", ctypes.c_uint), ("max_batch_io_timeout_msecs", ctypes.c_uint)]


class _Descr(ctypes.Structure):
    # CUfileDescr_t: type, union {int fd; void *handle}, fs_ops
    _fields_ = [("type", ctypes.c_int), ("handle", ctypes.c_void_p), ("fs_ops", ctypes.c_void_p)]


_FADV_DONTNEED = 4
_DSTATUS = {0: "lustre", 1: "wekafs", 2: "nfs", 3: "gpfs", 4: "nvme", 5: "nvmeof", 6: "scsi",
            7: "scaleflux_csd", 8: "nvmesh", 9: "beegfs", 11: "nvme_p2p"}


class StorageReader:
    """One GPU, one device buffer, one pinned and one pageable host buffer of ``capacity`` bytes,
    and cuFile where it loads: reads a file's first ``size`` bytes into GPU memory three ways and
    times each read (``time.perf_counter``, synchronous: the data is in GPU memory when it returns).

    CUDA through the driver API (``libcuda.so.1``) and cuFile through ``libcufile.so.0``, both by
    ctypes; raises RuntimeError with the reason when the GPU or the driver is missing.
    """

    def __init__(self, capacity: int, device: int = 0) -> None:
        self.capacity = int(capacity)
        self.notes: list[str] = []
        try:
            self.cu = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise RuntimeError(f"libcuda.so.1 not found (no NVIDIA driver): {exc}") from exc
        self._check(self.cu.cuInit(0), "cuInit")
        dev = ctypes.c_int(0)
        self._check(self.cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.dev = dev.value
        self._check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
        self._check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.dptr = ctypes.c_uint64(0)
        self._check(self.cu.cuMemAlloc_v2(ctypes.byref(self.dptr), ctypes.c_size_t(self.capacity)), "cuMemAlloc")
        self.pinned = ctypes.c_void_p()
        self._check(self.cu.cuMemHostAlloc(ctypes.byref(self.pinned), ctypes.c_size_t(self.capacity), 0),
                    "cuMemHostAlloc")
        self.pageable = bytearray(self.capacity)          # ordinary (pageable) process memory
        self._pageable_addr = ctypes.addressof((ctypes.c_char * self.capacity).from_buffer(self.pageable))
        self.pageable[::4096] = b"\x01" * len(self.pageable[::4096])   # touch every page once
        self.cufile: Any = None
        self.cufile_why = ""
        self.props: dict[str, Any] = {}
        self.buf_registered = False
        self._open_cufile()

    # -- plumbing
    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.cu.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: CUDA error {rc} {name.value.decode() if name.value else ''}".strip())

    def _open_cufile(self) -> None:
        try:
            lib = ctypes.CDLL(LIBCUFILE)
        except OSError as exc:
            self.cufile_why = f"{LIBCUFILE} not found: {exc}"
            return
        for name in ("cuFileDriverOpen", "cuFileDriverGetProperties", "cuFileHandleRegister", "cuFileBufRegister",
                     "cuFileBufDeregister"):
            getattr(lib, name).restype = _Err
        lib.cuFileRead.restype = ctypes.c_ssize_t
        lib.cuFileRead.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_longlong,
                                   ctypes.c_longlong]
        lib.cuFileHandleDeregister.restype = None
        lib.cuFileHandleDeregister.argtypes = [ctypes.c_void_p]
        e = lib.cuFileDriverOpen()
        if e.err != 0:
            self.cufile_why = f"cuFileDriverOpen failed: cuFile error {e.err} (CUDA {e.cu_err})"
            return
        self.cufile = lib
        p = _DrvProps()
        e = lib.cuFileDriverGetProperties(ctypes.byref(p))
        if e.err == 0:
            self.props = {"nvfs_major_version": p.nvfs.major_version, "nvfs_minor_version": p.nvfs.minor_version,
                          "allow_compat_mode": bool(p.nvfs.dcontrolflags >> 1 & 1),
                          "use_poll_mode": bool(p.nvfs.dcontrolflags & 1),
                          "supported": [v for k, v in _DSTATUS.items() if p.nvfs.dstatusflags >> k & 1],
                          "max_direct_io_size_kb": p.nvfs.max_direct_io_size,
                          "max_device_cache_size_kb": p.max_device_cache_size,
                          "per_buffer_cache_size_kb": p.per_buffer_cache_size}
        else:
            self.notes.append(f"cuFileDriverGetProperties failed: cuFile error {e.err}")
        e = lib.cuFileBufRegister(ctypes.c_void_p(self.dptr.value), ctypes.c_size_t(self.capacity), 0)
        self.buf_registered = e.err == 0
        if not self.buf_registered:
            self.notes.append(f"cuFileBufRegister refused the device buffer (cuFile error {e.err}): "
                              "cuFile reads through its own buffers")

    def close(self) -> None:
        if self.cufile is not None:
            if self.buf_registered:
                self.cufile.cuFileBufDeregister(ctypes.c_void_p(self.dptr.value))
            close = getattr(self.cufile, "cuFileDriverClose_v2", None) or self.cufile.cuFileDriverClose
            close.restype = _Err
            close()
            self.cufile = None
        if self.dptr.value:
            self.cu.cuMemFree_v2(self.dptr)
            self.dptr = ctypes.c_uint64(0)
        if self.pinned.value:
            self.cu.cuMemFreeHost(self.pinned)
            self.pinned = ctypes.c_void_p()
        self.cu.cuDevicePrimaryCtxRelease(self.dev)

    # -- the three reads
    @staticmethod
    def _read_into(fd: int, addr: int, size: int) -> None:
        view = (ctypes.c_char * size).from_address(addr)
        mv = memoryview(view).cast("B")
        done = 0
        while done < size:
            n = os.preadv(fd, [mv[done:]], done)
            if n <= 0:
                raise OSError(f"short read: {done} of {size} bytes")
            done += n

    def read_host(self, fd: int, size: int, memory: str) -> tuple[float, float]:
        """read() into pinned or pageable memory, then a host-to-device copy: (read s, copy s)."""
        addr = int(self.pinned.value or 0) if memory == "pinned" else self._pageable_addr
        t0 = time.perf_counter()
        self._read_into(fd, addr, size)
        t1 = time.perf_counter()
        self._check(self.cu.cuMemcpyHtoD_v2(self.dptr, ctypes.c_void_p(addr), ctypes.c_size_t(size)), "cuMemcpyHtoD")
        self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    def register(self, fd: int) -> Any:
        """A cuFile handle for an open file descriptor (deregister with :meth:`deregister`)."""
        d = _Descr(1, ctypes.c_void_p(fd), None)          # CU_FILE_HANDLE_TYPE_OPAQUE_FD
        fh = ctypes.c_void_p()
        self.cufile.cuFileHandleRegister.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_Descr)]
        e = self.cufile.cuFileHandleRegister(ctypes.byref(fh), ctypes.byref(d))
        if e.err != 0:
            raise RuntimeError(f"cuFileHandleRegister failed: cuFile error {e.err} (CUDA {e.cu_err})")
        return fh

    def deregister(self, fh: Any) -> None:
        self.cufile.cuFileHandleDeregister(fh)

    def read_cufile(self, fh: Any, size: int) -> float:
        """cuFileRead of the file's first ``size`` bytes into the device buffer: seconds."""
        t0 = time.perf_counter()
        n = self.cufile.cuFileRead(fh, ctypes.c_void_p(self.dptr.value), size, 0, 0)
        t1 = time.perf_counter()
        if n != size:
            raise RuntimeError(f"cuFileRead returned {n} for {size} bytes")
        return t1 - t0

    def device_bytes(self, offset: int, n: int = 8) -> bytes:
        """``n`` bytes of the device buffer at ``offset`` (to check what a read left there)."""
        out = ctypes.create_string_buffer(n)
        self._check(self.cu.cuMemcpyDtoH_v2(out, ctypes.c_uint64(self.dptr.value + offset), ctypes.c_size_t(n)),
                    "cuMemcpyDtoH")
        return out.raw

    def clear_device(self, size: int) -> None:
        self._check(self.cu.cuMemsetD8_v2(self.dptr, ctypes.c_ubyte(0), ctypes.c_size_t(size)), "cuMemsetD8")
        self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")


def drop_file_cache(fd: int) -> None:
    """Ask the kernel to drop this file's clean pages from the page cache (no root needed)."""
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, _FADV_DONTNEED)


def resident_fraction(fd: int, size: int) -> float | None:
    """The fraction of the file's first ``size`` bytes in the page cache (mincore), or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        addr = libc.mmap(None, size, 1, 1, fd, 0)              # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        pages = (size + 4095) // 4096
        vec = ctypes.create_string_buffer(pages)
        rc = libc.mincore(ctypes.c_void_p(addr), size, vec)
        libc.munmap(ctypes.c_void_p(addr), size)
        if rc != 0:
            return None
        return sum(b & 1 for b in vec.raw) / pages
    except (OSError, AttributeError):
        return None
