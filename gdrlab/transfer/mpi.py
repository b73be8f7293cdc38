"""``gdrlab bench --mpi``: two ranks started by ``mpirun -n 2`` or ``srun -n 2``.

Rank 1 starts the engine's server and sends its address, port and a fresh token to rank 0 over
MPI (mpi4py); rank 0 measures with :func:`gdrlab.transfer.driver.run` (the driver's options, as `bench` checks them) and returns the result; rank 1
serves until rank 0 says it is done. Both ranks on one host talk over 127.0.0.1; on two hosts
rank 1 listens on the address its host uses to reach rank 0's host (``GDRLAB_MPI_HOST``
overrides it). Every wait has a deadline, and a rank that cannot go on calls ``MPI_Abort`` so
that the other never hangs.

mpi4py is imported here only, when ``--mpi`` is used.
"""
from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from types import ModuleType
from typing import Any, Callable

from .. import provenance
from ..errors import InvalidArgument, PeerTimeout, Unavailable
from .buffers import native
from .driver import BenchOptions, run

__all__ = ["import_mpi", "own_addresses", "listen_address", "bench_mpi", "world_rank", "cuda_support",
           "loaded_mpi_libraries"]

TAG_INFO, TAG_DONE = 71, 72


def import_mpi() -> ModuleType:
    """``mpi4py.MPI``, or :class:`Unavailable` saying what to install."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise Unavailable(f"--mpi needs mpi4py and an MPI library ({exc}); install Open MPI "
                          "(apt-get install openmpi-bin) and `pip install mpi4py`") from exc
    return MPI


def loaded_mpi_libraries(maps: str = "/proc/self/maps") -> list[str]:
    """The MPI libraries (``libmpi*.so*``) this process has loaded, from its memory map."""
    found: list[str] = []
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rstrip("\n").split(None, 5)[-1] if line.count(" ") >= 5 else ""
                name = os.path.basename(path)
                if name.startswith("libmpi") and ".so" in name and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def cuda_support(MPI: Any = None, libraries: list[str] | None = None) -> tuple[bool | None, str]:
    """Whether the loaded MPI library takes GPU pointers (is CUDA-aware): (True, False or None when
    it cannot tell, and why). Asks ``MPIX_Query_cuda_support()`` of the loaded library through
    ctypes: Open MPI (2.0 and later) and MVAPICH2 (2.3.4 and later) define it; it returns 1 when the
    library was built with CUDA and its runtime supports CUDA buffers, and is called after MPI_Init
    (importing ``mpi4py.MPI`` initialises MPI)."""
    import ctypes
    MPI = MPI or import_mpi()
    name = MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip()
    short = name.split(",")[0]
    libs = loaded_mpi_libraries() if libraries is None else libraries
    for path in libs:
        try:
            fn = getattr(ctypes.CDLL(path), "MPIX_Query_cuda_support", None)
        except OSError:
            continue
        if fn is None:
            continue
        fn.restype, fn.argtypes = ctypes.c_int, []
        if fn() == 1:
            return True, f"{short} is CUDA-aware (MPIX_Query_cuda_support() = 1)"
        return False, (f"{short} is not CUDA-aware: MPIX_Query_cuda_support() = 0 in {os.path.basename(path)} "
                       "(built without CUDA, or its CUDA support is off at run time); use an MPI library built with CUDA "
                       "support (e.g. Open MPI configured --with-cuda)")
    where = ", ".join(os.path.basename(p) for p in libs) or "no libmpi found in this process"
    return None, (f"cannot tell whether {short} is CUDA-aware: it has no MPIX_Query_cuda_support ({where}); "
                  "this check knows Open MPI and MVAPICH2")


def own_addresses() -> list[str]:
    """This host's non-loopback IPv4 addresses as its own resolver knows them (may be empty)."""
    try:
        return [a for a in socket.gethostbyname_ex(socket.gethostname())[2] if not a.startswith("127.")]
    except OSError:
        return []


def listen_address(my_host: str, peer_host: str, peer_addrs: list[str] | tuple = ()) -> str:
    """The address rank 1 listens on: loopback when both ranks share a host, otherwise the local
    address of the route to the peer (asking the kernel, so a multi-homed host picks the
    interface that actually reaches the peer), or $GDRLAB_MPI_HOST when set. The peer is tried
    by the addresses it reported (``peer_addrs``), then by resolving ``peer_host`` here."""
    override = os.environ.get("GDRLAB_MPI_HOST")
    if override:
        return override
    if my_host == peer_host:
        return "127.0.0.1"
    candidates = list(peer_addrs)
    try:
        candidates.append(socket.gethostbyname(peer_host))
    except OSError:
        pass
    for peer_ip in candidates:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((peer_ip, 9))  # UDP connect sends nothing; it only picks the route
                return s.getsockname()[0]
        except OSError:
            continue
    mine = own_addresses()
    if not mine:
        raise Unavailable(f"cannot find an address of this host that reaches {peer_host}; "
                          "set GDRLAB_MPI_HOST to the address rank 1 should listen on")
    return mine[0]


def _wait_recv(comm: Any, MPI: Any, source: int, tag: int, deadline: float, what: str) -> Any:
    """A receive that gives up at ``deadline`` instead of blocking forever."""
    status = MPI.Status()
    while not comm.Iprobe(source=source, tag=tag, status=status):
        if time.monotonic() > deadline:
            raise PeerTimeout(f"rank {source} did not send {what} in time")
        time.sleep(0.01)
    return comm.recv(source=source, tag=tag)


def _abort(comm: Any, message: str) -> None:
    print(f"gdrlab bench --mpi (rank {comm.Get_rank()}): {message}; aborting the job", file=sys.stderr, flush=True)
    comm.Abort(1)


def _serve(comm: Any, MPI: Any, opts: BenchOptions) -> int:
    """Rank 1: start the server, publish it, serve clients until rank 0 reports it is done."""
    hosts = comm.allgather((socket.gethostname(), own_addresses()))
    info: dict
    try:
        host = listen_address(hosts[1][0], hosts[0][0], hosts[0][1])
        token = secrets.token_hex(16)
        server = native().Server(host, 0, token, int(opts.timeout_s * 1000), device=opts.device)
        info = {"ok": True, "host": host, "port": server.port, "token": token, "hosts": [h for h, _ in hosts]}
    except Exception as exc:  # noqa: BLE001 - reported to rank 0, which raises it
        info = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    comm.send(info, dest=0, tag=TAG_INFO)
    if not info["ok"]:
        return 1
    # rank 0 connects right after it receives the address; a long bench keeps serve_one busy
    first_deadline = time.monotonic() + max(60.0, 6 * opts.timeout_s)
    served = 0
    while True:
        if comm.Iprobe(source=0, tag=TAG_DONE):
            done = comm.recv(source=0, tag=TAG_DONE)
            return 0 if done.get("ok") else 1
        came, error = server.serve_one(200)
        if came:
            served += 1
            first_deadline = time.monotonic() + max(60.0, 6 * opts.timeout_s)
            if error:
                print(f"gdrlab bench --mpi (rank 1): client ended with {error}", file=sys.stderr, flush=True)
        elif time.monotonic() > first_deadline:
            _abort(comm, f"rank 0 neither connected nor finished ({served} clients served)")
            return 1


def _measure(comm: Any, MPI: Any, opts: BenchOptions, progress: Callable[..., Any] | None) -> Any:
    """Rank 0: receive the server's address, bench against it, tell rank 1 it is done."""
    comm.allgather((socket.gethostname(), own_addresses()))
    try:
        info = _wait_recv(comm, MPI, 1, TAG_INFO, time.monotonic() + max(60.0, 6 * opts.timeout_s),
                          "the server address")
    except PeerTimeout as exc:
        _abort(comm, str(exc))
        return None
    if not info["ok"]:
        raise Unavailable(f"rank 1 could not start its server: {info['error']}")
    outcome = {"ok": False}
    try:
        df = run(opts, peer=f"{info['host']}:{info['port']}", token=info["token"], progress=progress)
        outcome = {"ok": True}
    finally:
        comm.send(outcome, dest=1, tag=TAG_DONE)
    return provenance.attach(df, provenance.derived(
        df, launcher="mpi", ranks=2, hosts=info["hosts"],
        mpi=MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip()))


def world_rank() -> int:
    """This process's rank in MPI_COMM_WORLD."""
    return int(import_mpi().COMM_WORLD.Get_rank())


def bench_mpi(opts: BenchOptions, progress: Callable[..., Any] | None = None, *, peer: str | None = None,
              local_peer: str = "auto") -> tuple[int, Any]:
    """``gdrlab bench --mpi``: rank 0 measures, rank 1 serves. Returns ``(exit status, DataFrame
    or None)``: rank 0's result, None on rank 1 (which has nothing to print) and on failure.

    Needs exactly two ranks. ``--peer`` does not apply (the peer is rank 1).
    """
    MPI = import_mpi()
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    problem = None
    if peer:
        problem = "--mpi and --peer exclude each other: with --mpi the peer is rank 1"
    elif local_peer != "auto":
        problem = "--mpi and --local-peer exclude each other: with --mpi the peer is rank 1"
    elif size != 2:
        problem = f"--mpi needs exactly 2 ranks (mpirun -n 2 or srun -n 2); this job has {size}"
    if problem:
        # every rank sees the same arguments and size, so every rank stops here and nobody waits;
        # rank 0 alone says why, so --json still prints one document
        if rank == 0:
            raise InvalidArgument(problem)
        return 1, None
    if rank == 1:
        return _serve(comm, MPI, opts), None
    df = _measure(comm, MPI, opts, progress)
    return (0 if df is not None else 1), df
