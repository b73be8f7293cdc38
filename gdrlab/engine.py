"""The transfer engine from Python: buffers, connections and the measurement loops.

The loops run in C++ with the GIL released (``gdrlab._native``); this module chooses iteration
counts, starts a local peer when none is given, computes summaries and returns pandas DataFrames
whose ``attrs["provenance"]`` says they are live and where they were measured.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import secrets
import select
import subprocess
import sys
import time
from typing import Any, Callable, Iterable

import numpy as np

from .errors import InvalidArgument, PeerTimeout, Unavailable
from .units import parse_sizes

__all__ = [
    "TCP_PATHS", "GPU_PATHS", "Buffer", "Connection", "LocalPeer", "ThreadPeer", "connect", "bench", "copy_bench",
    "p2p_bench", "summarize", "cuda_status", "gpus", "export_dmabuf", "native",
]

TCP_PATHS = ("host", "staged", "shared", "pipelined")
GPU_PATHS = ("staged", "shared", "pipelined")
DEFAULT_CHUNK = 256 * 1024  # MVAPICH2-GDR's MV2_CUDA_BLOCK_SIZE
DEFAULT_DEPTH = 4
_MODES = {"lat": 0, "bw": 1, "verify": 2}
# The engine takes timeouts as int milliseconds and counts as u32: larger values would not convert.
MAX_TIMEOUT_S = 86400.0
_U32_MAX = 2**32 - 1


def _check_timeout(timeout_s: float) -> None:
    if not 0 < timeout_s <= MAX_TIMEOUT_S:  # also refuses NaN
        raise InvalidArgument(f"timeout must be between 0 and {MAX_TIMEOUT_S:.0f} seconds, got {timeout_s!r}")

ProgressFn = Callable[[int, int, dict], Any]


def native():
    """The compiled engine module. Importing it loads no CUDA or verbs library."""
    try:
        from . import _native
    except ImportError as exc:  # pragma: no cover - only when the build is broken
        raise Unavailable(f"the gdrlab engine is not built ({exc}); reinstall with `pip install .`") from exc
    return _native


def cuda_status() -> dict:
    """``{"usable": bool, "reason": str, "driver_version": int}`` without raising."""
    ok, why, ver = native().cuda_probe()
    return {"usable": bool(ok), "reason": why, "driver_version": int(ver)}


def gpus() -> list[dict]:
    """The GPUs the CUDA driver sees, with GPUDirect-related attributes; [] when CUDA is unusable."""
    if not cuda_status()["usable"]:
        return []
    return list(native().gpu_infos())


# --------------------------------------------------------------------------- buffers
class Buffer:
    """Memory the engine moves: ``kind`` is ``"pageable"``, ``"pinned"`` or ``"device"``.

    Host buffers expose ``__array_interface__`` (``numpy.asarray(buf)`` is a zero-copy view);
    device buffers expose ``__cuda_array_interface__`` (``cupy.asarray(buf)``).
    ``Buffer.from_array`` wraps a numpy or CuPy array without copying.
    """

    def __init__(self, size: int, kind: str = "pageable", device: int = 0, *, _native_buffer=None,
                 _keepalive=None):
        if _native_buffer is None:
            if not isinstance(size, (int, np.integer)) or isinstance(size, bool):
                raise InvalidArgument(f"size must be an integer number of bytes, got {size!r}")
            if size <= 0:
                raise InvalidArgument(f"size must be at least 1 byte, got {size}")
            _native_buffer = native().Buffer(kind, int(size), int(device))
        self._b = _native_buffer
        self._keepalive = _keepalive

    @classmethod
    def from_array(cls, array, *, pin: bool = False) -> "Buffer":
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

    kind = property(lambda self: self._b.kind)
    size = property(lambda self: self._b.size)
    nbytes = size
    device = property(lambda self: self._b.device)
    address = property(lambda self: self._b.address)

    @property
    def __array_interface__(self):
        if self.kind == "device":
            raise AttributeError("device buffer: use __cuda_array_interface__ (e.g. cupy.asarray)")
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.address, False), "version": 3}

    @property
    def __cuda_array_interface__(self):
        if self.kind != "device":
            raise AttributeError("host buffer: use __array_interface__ (e.g. numpy.asarray)")
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.address, False), "version": 3,
                "strides": None, "stream": None}

    def fill_pattern(self, seed: int, offset: int = 0, length: int | None = None) -> None:
        self._b.fill_pattern(seed, offset, self.size - offset if length is None else length)

    def check_pattern(self, seed: int, offset: int = 0, length: int | None = None) -> int:
        """-1 if the range holds the pattern for ``seed``, else the first differing offset."""
        return self._b.check_pattern(seed, offset, self.size - offset if length is None else length)

    def __repr__(self) -> str:
        return f"<gdrlab.Buffer {self.kind} {self.size} bytes at {self.address:#x}>"


def _c_contiguous(shape, strides, typestr) -> bool:
    item = np.dtype(typestr).itemsize
    expect = item
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim > 1 and stride != expect:
            return False
        expect *= dim
    return True


# --------------------------------------------------------------------------- peers
def _parse_peer(peer: str) -> tuple[str, int]:
    host, sep, port = str(peer).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgument(f"peer must be HOST:PORT, got {peer!r}")
    return host.strip("[]"), int(port)


class LocalPeer:
    """A ``gdrlab serve --once`` process on 127.0.0.1 with a random token, stopped on exit."""

    def __init__(self, device: int = 0, timeout_s: float = 10.0, start_timeout_s: float = 30.0):
        self.token = secrets.token_hex(16)
        env = dict(os.environ, GDRLAB_TOKEN=self.token, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "gdrlab", "serve", "--listen", "127.0.0.1:0", "--once", "--announce",
               "--device", str(device), "--timeout", str(timeout_s)]
        # Run from the folder that holds this gdrlab package, so the peer imports the same build
        # even when the caller's working directory holds another (e.g. an unbuilt source tree).
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     stdin=subprocess.DEVNULL, cwd=pkg_root)
        try:
            line = self._read_announce(start_timeout_s)
        except BaseException:
            self.stop()
            raise
        import json
        self.port = int(json.loads(line)["port"])
        self.address = f"127.0.0.1:{self.port}"

    def _read_announce(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerTimeout(f"local peer did not start within {timeout_s:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    err = self.proc.stderr.read().decode(errors="replace").strip()
                    raise Unavailable(f"local peer exited before it was ready: {err or 'no message'}")
                buf += chunk
        return buf.split(b"\n", 1)[0].decode()

    def stop(self, wait_s: float = 5.0) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class ThreadPeer:
    """A native server on 127.0.0.1 in a thread of this process (GIL released while it serves).

    With one GPU, two processes that both copy to it share it by time-slicing between their
    CUDA contexts; a peer in the same process shares the caller's context instead, which is what
    two separate hosts (one GPU each) look like to each GPU."""

    def __init__(self, device: int = 0, timeout_s: float = 10.0):
        import threading

        self.token = secrets.token_hex(16)
        self._server = native().Server("127.0.0.1", 0, self.token, int(timeout_s * 1000))
        self.port = self._server.port
        self.address = f"127.0.0.1:{self.port}"
        self.error = ""
        self._thread = threading.Thread(target=self._serve, args=(int(timeout_s * 1000),), daemon=True,
                                        name="gdrlab-thread-peer")
        self._thread.start()

    def _serve(self, wait_ms: int) -> None:
        came, self.error = self._server.serve_one(wait_ms)
        if not came:
            self.error = "no client connected"

    def stop(self, wait_s: float = 15.0) -> None:
        self._thread.join(wait_s)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Connection:
    """A session with a ``gdrlab serve`` peer over the tcp wire."""

    def __init__(self, host: str, port: int, token: str = "", timeout_s: float = 10.0):
        _check_timeout(timeout_s)
        self._c = native().Client(host, int(port), token or "", int(timeout_s * 1000))
        self.peer = f"{host}:{port}"

    @property
    def server_description(self) -> str:
        return self._c.server_description

    def run(self, path: str, size: int, *, mode: str = "lat", iters: int = 100, warmup: int = 10,
            window: int = 1, chunk: int = DEFAULT_CHUNK, depth: int = DEFAULT_DEPTH, device: int = 0,
            seed: int | None = None, buffer: Buffer | None = None, offset: int = 0):
        """One test. Returns ``(samples_s, bytes_per_sample, verified)``; samples are one-way
        latencies (half round trips) for ``mode="lat"`` and window times for ``mode="bw"``."""
        if mode not in _MODES:
            raise InvalidArgument(f"unknown mode {mode!r}; valid: {', '.join(_MODES)}")
        if path not in TCP_PATHS:
            raise InvalidArgument(f"unknown path {path!r} for the tcp wire; valid: {', '.join(TCP_PATHS)}")
        if not isinstance(size, (int, np.integer)) or size <= 0:
            raise InvalidArgument(f"size must be a positive integer, got {size!r}")
        if iters < 0 or warmup < 0 or window < 1 or depth < 1 or chunk < 1 or offset < 0 or device < 0:
            raise InvalidArgument("iters, warmup and device must be >= 0; window, depth and chunk >= 1; offset >= 0")
        if max(iters, warmup, window, depth, device) > _U32_MAX:
            raise InvalidArgument(f"iters, warmup, window, depth and device must be at most {_U32_MAX}")
        if seed is None:
            seed = secrets.randbits(63)
        nb = buffer._b if buffer is not None else None
        return self._c.run(path, _MODES[mode], int(size), int(iters), int(warmup), int(window), int(chunk),
                           int(depth), int(device), int(seed), nb, int(offset))

    def transfer(self, buffer: Buffer, path: str, size: int | None = None, offset: int = 0, **kw) -> bool:
        """Send ``buffer[offset:offset+size]`` to the peer and back, verified; True on success."""
        size = buffer.size - offset if size is None else size
        return bool(self.run(path, size, mode="verify", iters=0, warmup=0, buffer=buffer, offset=offset, **kw)[2])

    def close(self) -> None:
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def connect(peer: str, token: str | None = None, timeout_s: float = 10.0) -> Connection:
    """Connect to ``gdrlab serve`` at ``HOST:PORT``; the token defaults to $GDRLAB_TOKEN."""
    host, port = _parse_peer(peer)
    return Connection(host, port, token if token is not None else os.environ.get("GDRLAB_TOKEN", ""), timeout_s)


# --------------------------------------------------------------------------- summaries
def summarize(samples_s: np.ndarray, bytes_per_sample: float) -> dict:
    """min/p50/p99/mean in microseconds and GB/s (1e9 bytes/s) at the median."""
    s = np.asarray(samples_s, dtype=float)
    if s.size == 0:
        return {"min_us": np.nan, "p50_us": np.nan, "p99_us": np.nan, "mean_us": np.nan, "gbps": np.nan}
    p50 = float(np.median(s))
    return {
        "min_us": float(s.min() * 1e6),
        "p50_us": p50 * 1e6,
        "p99_us": float(np.percentile(s, 99) * 1e6),
        "mean_us": float(s.mean() * 1e6),
        "gbps": bytes_per_sample / p50 / 1e9 if p50 > 0 else np.nan,
    }


def result_columns(lat: dict | None, bw: dict | None, verified: bool, path: str, chunk: int, depth: int) -> dict:
    """The measured columns of a bench row (CLI contract), from :func:`summarize` results; NaN for
    a half that was not measured. Shared by every wire."""
    return {
        "lat_min_us": lat["min_us"] if lat else np.nan,
        "lat_p50_us": lat["p50_us"] if lat else np.nan,
        "lat_p99_us": lat["p99_us"] if lat else np.nan,
        "lat_mean_us": lat["mean_us"] if lat else np.nan,
        "bw_gbps": bw["gbps"] if bw else np.nan,
        "verified": verified,
        "chunk": chunk if path == "pipelined" else np.nan,
        "depth": depth if path == "pipelined" else np.nan,
    }


def _auto_counts(size: int) -> tuple[int, int, int]:
    """(latency iterations, bandwidth window, bandwidth repetitions) that keep each size near a
    fraction of a second on a PCIe 5 machine and still give a median over many samples."""
    lat_iters = int(max(10, min(1000, (256 << 20) // size)))
    window = int(max(1, min(64, (64 << 20) // size)))
    reps = int(max(8, min(100, (1 << 30) // (size * window))))
    return lat_iters, window, reps


def _provenance(extra: dict) -> dict:
    prov = {
        "kind": "live",
        "host": platform.node(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gdrlab": __import__("gdrlab").__version__,
    }
    infos = gpus()
    if infos:
        prov["gpu"] = infos[0]["name"]
        prov["driver_version"] = cuda_status()["driver_version"]
    prov.update(extra)
    return prov


def bench(path: str = "host", sizes: Any = "8:1M", iters: int | None = None, *, mode: str = "both",
          wire: str = "tcp", peer: str | None = None, token: str | None = None, chunk: int = DEFAULT_CHUNK,
          depth: int = DEFAULT_DEPTH, device: int = 0, window: int | None = None, warmup: int | None = None,
          timeout_s: float = 10.0, progress: ProgressFn | None = None, keep_samples: bool = False,
          local_peer: str = "auto"):
    """Measure ``path`` over ``wire`` at each size; one DataFrame row per size.

    Columns: path, wire, size, iters, lat_min_us, lat_p50_us, lat_p99_us, lat_mean_us, bw_gbps,
    verified, chunk, depth. ``mode`` is ``"lat"``, ``"bw"`` or ``"both"``. With no ``peer`` a local
    peer is started and stopped: ``local_peer="process"`` (a ``gdrlab serve`` process) or ``"thread"``
    (in this process, sharing its CUDA context; see :class:`ThreadPeer`). ``"auto"`` (the default)
    takes a process for ``host`` and a thread for the GPU paths: on one GPU, two processes
    time-slice it between their contexts, which on an H200 added about 140 us to every copy of up
    to 16 KiB (recorded in gdrlab/data/recorded/h200-peer-context.json); two hosts with a GPU
    each, which the local peer stands in for, do not contend like that. ``progress(done, total, row)`` is called after
    each size. Every size ends with a verified exchange: no row is returned for corrupted data.
    """
    import pandas as pd

    if wire == "verbs":
        from .verbs_bench import bench_verbs  # noqa: PLC0415 - optional, needs an HCA
        return bench_verbs(path=path, sizes=sizes, iters=iters, mode=mode, peer=peer, token=token,
                           chunk=chunk, depth=depth, device=device, timeout_s=timeout_s, progress=progress)
    if wire != "tcp":
        raise InvalidArgument(f"unknown wire {wire!r}; valid: tcp, verbs")
    if path in ("p2p", "p2p-staged"):
        # GPU to GPU inside one machine: no wire; copies between GPU `device` and the next one.
        from .p2p import bench_path
        n = len(gpus())
        df = bench_path(path, device, (device + 1) % max(n, 1) if n > 1 else 1, sizes, iters, progress=progress)
        df.insert(2, "wire", "none")
        return df
    if path not in TCP_PATHS:
        if path in ("gdr", "gdrcopy"):
            raise InvalidArgument(f"path {path!r} does not run over the tcp wire "
                                  + ("(use --wire verbs)" if path == "gdr" else "(see `gdrlab doctor`)"))
        raise InvalidArgument(f"unknown path {path!r}; valid over tcp: {', '.join(TCP_PATHS)}")
    if mode not in ("lat", "bw", "both"):
        raise InvalidArgument(f"unknown mode {mode!r}; valid: lat, bw, both")
    size_list = parse_sizes(sizes)
    native_max = native().MAX_DATA_BYTES
    for s in size_list:
        if s > native_max:
            raise InvalidArgument(f"size {s} exceeds the tcp wire's maximum message of {native_max} bytes (1 GiB)")
    if iters is not None and iters < 1:
        raise InvalidArgument("iters must be at least 1")
    _check_timeout(timeout_s)
    if path in GPU_PATHS:
        st = cuda_status()
        if not st["usable"]:
            raise Unavailable(f"path {path!r} needs a GPU: {st['reason']}")

    with contextlib.ExitStack() as stack:
        if peer is None:
            if local_peer not in ("auto", "process", "thread"):
                raise InvalidArgument(f"local_peer must be 'auto', 'process' or 'thread', got {local_peer!r}")
            if local_peer == "auto":
                local_peer = "thread" if path in GPU_PATHS else "process"
            peer_cls = LocalPeer if local_peer == "process" else ThreadPeer
            local = stack.enter_context(peer_cls(device=device, timeout_s=timeout_s))
            conn = stack.enter_context(Connection("127.0.0.1", local.port, local.token, timeout_s))
        else:
            conn = stack.enter_context(connect(peer, token, timeout_s))
        rows, samples = [], {}
        # Warm the connection and both processes (page faults, caches, CPU clocks) before the
        # first measured size, so that size is not the odd one out.
        conn.run(path, min(size_list[0], 1 << 20), mode="lat", iters=50, warmup=20, chunk=chunk, depth=depth,
                 device=device)
        for i, size in enumerate(size_list):
            lat_iters, auto_window, reps = _auto_counts(size)
            n_lat = iters or lat_iters
            n_bw = iters or reps
            win = window or auto_window
            wu = warmup if warmup is not None else max(2, min(n_lat // 10, 50))
            row = {"path": path, "wire": wire, "size": size, "iters": n_lat}
            verified = True
            lat = bw = None
            if mode in ("lat", "both"):
                s, nbytes, ok = conn.run(path, size, mode="lat", iters=n_lat, warmup=wu, chunk=chunk, depth=depth,
                                         device=device)
                lat = summarize(s, nbytes)
                verified &= bool(ok)
                samples.setdefault(size, {})["lat_us"] = np.asarray(s) * 1e6
            if mode in ("bw", "both"):
                s, nbytes, ok = conn.run(path, size, mode="bw", iters=n_bw, warmup=max(1, n_bw // 10), window=win,
                                         chunk=chunk, depth=depth, device=device)
                bw = summarize(s, nbytes)
                verified &= bool(ok)
                samples.setdefault(size, {})["bw_gbps"] = nbytes / np.asarray(s) / 1e9
                if mode == "bw":
                    row["iters"] = n_bw
            row.update(result_columns(lat, bw, verified, path, chunk, depth))
            rows.append(row)
            if progress is not None:
                progress(i + 1, len(size_list), row)
        description = conn.server_description
    df = pd.DataFrame(rows)
    df.attrs["provenance"] = _provenance({"what": f"gdrlab bench --path {path} --wire {wire}",
                                          "peer": peer or f"local {local_peer}", "peer_description": description})
    if keep_samples:
        df.attrs["samples"] = samples
    return df


def copy_bench(direction: str = "h2d", sizes: Any = "8:64M", iters: int | None = None, *, memory: str = "pinned",
               device: int = 0, warmup: int | None = None, progress: ProgressFn | None = None):
    """Copy-engine copies on this GPU: ``direction`` h2d, d2h or d2d; ``memory`` pinned or pageable.
    Each sample is one cuMemcpyAsync + stream synchronize, timed on the host clock.
    Columns: direction, memory, size, iters, lat_min_us, lat_p50_us, lat_p99_us, lat_mean_us, bw_gbps."""
    import pandas as pd

    if direction not in ("h2d", "d2h", "d2d"):
        raise InvalidArgument(f"unknown direction {direction!r}; valid: h2d, d2h, d2d")
    if memory not in ("pinned", "pageable"):
        raise InvalidArgument(f"unknown host memory kind {memory!r}; valid: pinned, pageable")
    size_list = parse_sizes(sizes)
    st = cuda_status()
    if not st["usable"]:
        raise Unavailable(f"copy-engine measurements need a GPU: {st['reason']}")
    rows = []
    for i, size in enumerate(size_list):
        n = iters or int(max(20, min(2000, (4 << 30) // size)))
        wu = warmup if warmup is not None else max(3, n // 20)
        s = native().copy_samples(direction, size, n, wu, memory, device)
        summ = summarize(s, size)
        row = {"direction": direction, "memory": memory, "size": size, "iters": n,
               "lat_min_us": summ["min_us"], "lat_p50_us": summ["p50_us"], "lat_p99_us": summ["p99_us"],
               "lat_mean_us": summ["mean_us"], "bw_gbps": summ["gbps"]}
        rows.append(row)
        if progress is not None:
            progress(i + 1, len(size_list), row)
    df = pd.DataFrame(rows)
    df.attrs["provenance"] = _provenance({"what": f"copy_bench {direction} {memory}"})
    return df


def p2p_bench(src: int = 0, dst: int = 1, sizes: Any = "8:256M", iters: int | None = None, *,
              peer_access: bool = True, bidirectional: bool = False, progress: ProgressFn | None = None):
    """GPU ``src`` to GPU ``dst`` with cuMemcpyPeerAsync, peer access on (P2P DMA over NVLink or
    PCIe) or off (the driver stages through host memory). Raises Unavailable on one GPU."""
    import pandas as pd

    size_list = parse_sizes(sizes)
    st = cuda_status()
    if not st["usable"]:
        raise Unavailable(f"GPU-to-GPU copies need GPUs: {st['reason']}")
    rows = []
    for i, size in enumerate(size_list):
        n = iters or int(max(20, min(1000, (8 << 30) // size)))
        s = native().peer_samples(src, dst, size, n, max(3, n // 20), peer_access, bidirectional)
        summ = summarize(s, size * (2 if bidirectional else 1))
        row = {"src": src, "dst": dst, "peer_access": peer_access, "bidirectional": bidirectional,
               "size": size, "iters": n, "lat_min_us": summ["min_us"], "lat_p50_us": summ["p50_us"],
               "lat_p99_us": summ["p99_us"], "bw_gbps": summ["gbps"]}
        rows.append(row)
        if progress is not None:
            progress(i + 1, len(size_list), row)
    df = pd.DataFrame(rows)
    df.attrs["provenance"] = _provenance({"what": f"p2p_bench {src}->{dst} peer_access={peer_access}"})
    return df


def export_dmabuf(buffer: Buffer):
    """Export a device buffer as a dma-buf fd (what ibv_reg_dmabuf_mr imports). Returns an object
    with ``fd``, ``size``, ``cpu_mmap_errno`` and ``close()``."""
    if not isinstance(buffer, Buffer):
        raise InvalidArgument("export_dmabuf needs a gdrlab.engine.Buffer of kind 'device'")
    return native().export_dmabuf(buffer._b)
