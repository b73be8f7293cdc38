"""``gdrlab bench --wire mpi``: the MPI library moves the buffers itself, between two ranks started
by ``mpirun -n 2`` (or ``srun -n 2``), through mpi4py.

Rank 0 keeps its message in ``--src-mem``, rank 1 in ``--dst-mem`` (``device``: a CuPy array in GPU
memory; ``pinned``: CuPy's page-locked host memory; ``pageable``: NumPy). With GPU memory on either
side the MPI library must be CUDA-aware: it is handed GPU pointers and chooses how to move them
(GPUDirect RDMA, CUDA IPC, staging through host memory): that choice is the library's, so rows
carry ``path`` = ``mpi`` and the library's name in ``protocol``. Awareness is asked of the loaded
library (:func:`gdrlab.transfer.mpi.cuda_support`); when it is missing, or CuPy or a GPU is, both
ranks stop before any transfer and rank 0 says what is missing in one line.

Measurements follow the OSU micro-benchmarks: latency is half the round trip of a blocking
send/receive ping-pong (osu_latency); bandwidth sends a window of non-blocking messages and waits
for a small reply (osu_bw). Every size ends with a verified transfer of a pattern.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import provenance
from ..errors import InvalidArgument, Unavailable
from ..vocab import CUDA_MEMORY_KINDS, MEMORY_KINDS
from .mpi import _abort, cuda_support, import_mpi, world_rank
from .stats import auto_counts, result_columns, summarize

__all__ = ["bench_mpi_wire", "needs_cuda", "check_ready"]

TAG_LAT, TAG_BW, TAG_ACK, TAG_CHECK = 81, 82, 83, 84
# Rank 1's status when both ranks stop and rank 0 says why: 0, so that mpirun does not end the job
# (killing rank 0) before rank 0 has printed the reason; the job's status is rank 0's.
_QUIET = 0


def needs_cuda(src_mem: str, dst_mem: str) -> bool:
    return src_mem in CUDA_MEMORY_KINDS or dst_mem in CUDA_MEMORY_KINDS


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise Unavailable(f"CuPy is not installed ({exc}): pip install cupy-cuda12x (or -cuda13x)") from None
    return cupy


def check_ready(MPI: Any, mem: str, device: int) -> list[str]:
    """What this rank lacks to send from or receive into ``mem`` (empty when nothing)."""
    missing: list[str] = []
    if mem == "device":
        aware, why = cuda_support(MPI)
        if not aware:
            missing.append(why)
    if mem in CUDA_MEMORY_KINDS:
        try:
            cp = _cupy()
            n = cp.cuda.runtime.getDeviceCount()
            if device >= n:
                missing.append(f"GPU {device} not found (this rank sees {n} GPU{'s' if n != 1 else ''})")
        except Unavailable as exc:
            missing.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - CuPy raises its own CUDA error types
            missing.append(f"CuPy cannot reach a GPU: {exc}")
    return missing


def _buffer(mem: str, size: int, device: int) -> Any:
    if mem == "pageable":
        return np.empty(size, dtype=np.uint8)
    cp = _cupy()
    if mem == "pinned":
        import cupyx
        return cupyx.empty_pinned((size,), dtype=np.uint8)
    with cp.cuda.Device(device):
        return cp.empty(size, dtype=np.uint8)


def _fill(buf: Any, size: int, seed: int) -> None:
    pattern = ((np.arange(size, dtype=np.int64) * 131 + seed) % 251).astype(np.uint8)
    if isinstance(buf, np.ndarray):
        buf[:] = pattern
    else:
        import cupy as cp
        buf.set(pattern) if hasattr(buf, "set") else cp.copyto(buf, cp.asarray(pattern))


def _host(buf: Any) -> np.ndarray:
    return buf if isinstance(buf, np.ndarray) else buf.get()


def _sync(buf: Any) -> None:
    """GPU work on the buffer done before MPI reads it (mpi4py leaves this to the caller)."""
    if not isinstance(buf, np.ndarray):
        import cupy as cp
        cp.cuda.get_current_stream().synchronize()


def _latency(comm: Any, rank: int, buf: Any, warmup: int, iters: int) -> np.ndarray:
    samples = np.empty(iters)
    comm.Barrier()
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        if rank == 0:
            comm.Send(buf, dest=1, tag=TAG_LAT)
            comm.Recv(buf, source=1, tag=TAG_LAT)
        else:
            comm.Recv(buf, source=0, tag=TAG_LAT)
            comm.Send(buf, dest=0, tag=TAG_LAT)
        if i >= warmup:
            samples[i - warmup] = (time.perf_counter() - t0) / 2
    return samples


def _bandwidth(MPI: Any, comm: Any, rank: int, buf: Any, window: int, warmup: int, reps: int) -> np.ndarray:
    samples = np.empty(reps)
    ack = np.zeros(1, dtype=np.int32)
    comm.Barrier()
    for i in range(warmup + reps):
        t0 = time.perf_counter()
        if rank == 0:
            MPI.Request.Waitall([comm.Isend(buf, dest=1, tag=TAG_BW) for _ in range(window)])
            comm.Recv(ack, source=1, tag=TAG_ACK)
        else:
            MPI.Request.Waitall([comm.Irecv(buf, source=0, tag=TAG_BW) for _ in range(window)])
            comm.Send(ack, dest=0, tag=TAG_ACK)
        if i >= warmup:
            samples[i - warmup] = (time.perf_counter() - t0) / window
    return samples


def _verify(comm: Any, rank: int, buf: Any, size: int, seed: int) -> bool:
    """Rank 0 sends a pattern; rank 1 checks it and both learn the answer."""
    if rank == 0:
        _fill(buf, size, seed)
        _sync(buf)
        comm.Send(buf, dest=1, tag=TAG_CHECK)
    else:
        comm.Recv(buf, source=0, tag=TAG_CHECK)
        _sync(buf)
    ok = None
    if rank == 1:
        want = ((np.arange(size, dtype=np.int64) * 131 + seed) % 251).astype(np.uint8)
        ok = bool(np.array_equal(_host(buf), want))
    return bool(comm.bcast(ok, root=1))


def bench_mpi_wire(sizes: list[int], *, src_mem: str | None = None, dst_mem: str | None = None,
                   mode: str = "both", iters: int | None = None, warmup: int | None = None,
                   window: int | None = None, device: int = 0,
                   progress: Callable[..., Any] | None = None) -> tuple[int, Any]:
    """Measure the MPI library between rank 0 (``src_mem``) and rank 1 (``dst_mem``), both GPU
    memory unless given. Returns ``(exit status, DataFrame or None)``: the rows on rank 0, None on
    rank 1; rank 0 raises the reason when the ranks cannot start, and a failure in the middle of a
    measurement aborts the job (``MPI_Abort``) so that the other rank never waits forever."""
    import pandas as pd
    MPI = import_mpi()
    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    src_mem, dst_mem = src_mem or "device", dst_mem or "device"
    problem = None
    if nranks != 2:
        problem = InvalidArgument(f"--wire mpi needs exactly 2 ranks (mpirun -n 2 or srun -n 2); this job has {nranks}")
    for mem in (src_mem, dst_mem):
        if problem is None and mem not in MEMORY_KINDS:
            problem = InvalidArgument(f"memory kind {mem!r}: use one of {', '.join(MEMORY_KINDS)}")
    if problem is not None:  # every rank sees the same arguments: all stop, rank 0 says why
        if rank == 0:
            raise problem
        return _QUIET, None
    mine = src_mem if rank == 0 else dst_mem
    missing = comm.allgather(check_ready(MPI, mine, device))
    if any(missing):
        if rank == 0:
            said: dict[str, list[str]] = {}  # the same reason on both ranks is said once
            for r, (m, kind) in enumerate(zip(missing, (src_mem, dst_mem))):
                if m:
                    said.setdefault("; ".join(m), []).append(f"rank {r} ({kind} memory)")
            lines = [f"{' and '.join(who)}: {why}" for why, who in said.items()]
            raise Unavailable("--wire mpi cannot move these buffers: " + " | ".join(lines))
        return _QUIET, None
    library = MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip()
    aware = cuda_support(MPI)[0] if needs_cuda(src_mem, dst_mem) else None
    try:
        rows = _measure(MPI, comm, rank, sizes, mine, mode, iters, warmup, window, device, progress,
                        library, src_mem, dst_mem)
    except Exception as exc:  # noqa: BLE001 - the other rank is inside a blocking call: end the job
        _abort(comm, f"{type(exc).__name__}: {exc}")
        return 1, None
    if rank != 0:
        return 0, None
    df = pd.DataFrame(rows)
    bad = [r["size"] for r in rows if not r["verified"]]
    if bad:
        raise Unavailable(f"--wire mpi: the data rank 1 received at {bad[0]} bytes did not match what rank 0 sent")
    return 0, provenance.attach(df, provenance.live({"launcher": "mpi", "ranks": 2, "mpi": library,
                                                     "cuda_aware": aware, "src_mem": src_mem, "dst_mem": dst_mem}))


def _measure(MPI: Any, comm: Any, rank: int, sizes: list[int], mine: str, mode: str, iters: int | None,
             warmup: int | None, window: int | None, device: int, progress: Callable[..., Any] | None,
             library: str, src_mem: str, dst_mem: str) -> list[dict]:
    rows: list[dict] = []
    for n, size in enumerate(sizes):
        buf = _buffer(mine, size, device)
        _fill(buf, size, 7)
        _sync(buf)
        lat_iters, auto_window, reps = auto_counts(size)
        lat_iters = iters or lat_iters
        win = window or auto_window
        warm = warmup if warmup is not None else max(2, lat_iters // 10)
        lat = bw = None
        if mode != "bw":
            lat = summarize(_latency(comm, rank, buf, warm, lat_iters), size)
        if mode != "lat":
            bw = summarize(_bandwidth(MPI, comm, rank, buf, win, min(warm, 4), iters or reps), size)
        ok = _verify(comm, rank, buf, size, 11 + n)
        row = {"path": "mpi", "wire": "mpi", "size": size, "iters": lat_iters if lat else (iters or reps),
               **result_columns(lat, bw, ok, "mpi", 0, 0),
               "protocol": f"chosen by {library.split(',')[0]} (not reported by MPI)",
               "src_mem": src_mem, "dst_mem": dst_mem}
        rows.append(row)
        if rank == 0 and progress:
            progress(n + 1, len(sizes), row)
        if not ok:
            break
    comm.Barrier()
    return rows


# Options of `gdrlab bench` that another wire takes and this one does not (name: flag).
_NOT_HERE = {"peer": "--peer", "bidir": "--bidir", "rate": "--rate", "duration": "--duration",
             "streams": "--streams", "qps": "--qps", "chunk": "--chunk", "depth": "--depth",
             "explain": "--explain"}


def from_options(opts: dict, progress: Callable[..., Any] | None = None) -> tuple[int, Any]:
    """``gdrlab bench --wire mpi`` with the command's options (a dict of them, already checked):
    an option this wire does not take is refused in one line, by rank 0 only."""
    given = [flag for name, flag in _NOT_HERE.items() if opts.get(name) not in (None, False, 0)]
    if given:
        if world_rank() != 0:
            return _QUIET, None
        raise InvalidArgument(f"--wire mpi does not take {', '.join(given)}: the MPI library moves the data "
                              "between the two ranks mpirun started")
    path = opts.get("path")
    if path not in (None, "host", "mpi"):
        if world_rank() != 0:
            return _QUIET, None
        raise InvalidArgument(f"--wire mpi chooses its own path (rows say path=mpi); leave out --path {path} and "
                              "give the memory with --src-mem/--dst-mem")
    return bench_mpi_wire(list(opts["sizes"]), src_mem=opts.get("src_mem"), dst_mem=opts.get("dst_mem"),
                          mode=opts.get("mode") or "both", iters=opts.get("iters"), warmup=opts.get("warmup"),
                          window=opts.get("window"), device=int(opts.get("device") or 0), progress=progress)
