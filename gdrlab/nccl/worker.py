"""One rank of :func:`gdrlab.nccl.run_allreduce`: ``python -m gdrlab.nccl.worker --rank R ...``.

Checks one all-reduce per size, then times many; rank 0 prints the results in the format of the
recorded logs and writes them as JSON for the parent process."""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import PeerTimeout, Unavailable
from .log import bus_bandwidth, format_result_line


def _iters_for(size: int) -> int:
    # about a second per size on sockets (3 GB/s), many samples for small sizes
    return int(max(20, min(500, (4 << 30) // max(size, 1))))


def _torch_rank(a: argparse.Namespace, sizes: list[int]) -> list[dict]:
    import datetime

    import torch
    import torch.distributed as dist

    if not dist.is_nccl_available():
        raise Unavailable("this PyTorch build has no NCCL backend")
    torch.cuda.set_device(a.rank)
    dev = torch.device("cuda", a.rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.nranks,
                            timeout=datetime.timedelta(seconds=a.timeout))
    try:
        def step(x: Any) -> None:
            dist.all_reduce(x)

        def make(count: int, value: float) -> Any:
            return torch.full((count,), float(value), dtype=torch.float32, device=dev)

        def first_last(x: Any) -> tuple[float, float]:
            return float(x[0].item()), float(x[-1].item())

        def slowest(dt: float) -> float:
            t = torch.tensor([dt], dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t.item())
        return _measure(a, sizes, make, step, torch.cuda.synchronize, first_last, slowest)
    finally:
        dist.destroy_process_group()


def _cupy_rank(a: argparse.Namespace, sizes: list[int]) -> list[dict]:
    import cupy as cp
    from cupy.cuda import nccl

    cp.cuda.Device(a.rank).use()
    uid_file = Path(a.rendezvous) / "nccl_uid.json"
    if a.rank == 0:
        tmp = uid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(list(nccl.get_unique_id())))
        tmp.rename(uid_file)  # atomic: the other ranks never read half a file
    deadline = time.monotonic() + a.timeout
    while not uid_file.exists():
        if time.monotonic() > deadline:
            raise PeerTimeout("rank 0 did not publish the NCCL unique id")
        time.sleep(0.05)
    comm = nccl.NcclCommunicator(a.nranks, tuple(json.loads(uid_file.read_text())), a.rank)
    # the default stream: the fills that cp.full queues there are ordered before the all-reduces
    stream = cp.cuda.get_current_stream()

    def step(x: Any, op: int = nccl.NCCL_SUM) -> None:
        dtype = nccl.NCCL_FLOAT64 if x.dtype == cp.float64 else nccl.NCCL_FLOAT32
        comm.allReduce(x.data.ptr, x.data.ptr, x.size, dtype, op, stream.ptr)

    def slowest(dt: float) -> float:
        t = cp.array([dt], dtype=cp.float64)
        step(t, nccl.NCCL_MAX)
        stream.synchronize()
        return float(t.get()[0])
    try:
        return _measure(a, sizes, lambda count, value: cp.full(count, value, dtype=cp.float32), step,
                        stream.synchronize, lambda x: (float(x[0].get()), float(x[-1].get())), slowest)
    finally:
        comm.destroy()


def _measure(a: argparse.Namespace, sizes: list[int], make: Callable[[int, float], Any], step: Callable[[Any], None],
             sync: Callable[[], Any], first_last: Callable[[Any], tuple[float, float]],
             slowest: Callable[[float], float]) -> list[dict]:
    """Check one all-reduce per size (each rank adds rank+1), then time ``iters`` of them; the
    time of a size is the slowest rank's mean, as nccl-tests reports it."""
    rows = []
    expect = a.nranks * (a.nranks + 1) / 2
    for size in sizes:
        count = max(1, size // 4)
        x = make(count, a.rank + 1)
        step(x)
        sync()
        verified = first_last(x) == (expect, expect)
        x = make(count, 0)
        iters = a.iters or _iters_for(count * 4)
        for _ in range(max(2, iters // 10)):
            step(x)
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            step(x)
        sync()
        dt = slowest((time.perf_counter() - t0) / iters)
        algbw, busbw = bus_bandwidth(count * 4, dt * 1e6, a.nranks)
        rows.append({"size": count * 4, "iters": iters, "time_us": dt * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": busbw, "verified": bool(verified)})
    return rows


def _worker_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m gdrlab.nccl.worker")
    for name, typ in (("--rank", int), ("--nranks", int), ("--port", int), ("--backend", str), ("--sizes", str),
                      ("--iters", int), ("--result", str), ("--rendezvous", str), ("--timeout", float)):
        ap.add_argument(name, type=typ, required=True)
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    rows = (_torch_rank if a.backend == "torch" else _cupy_rank)(a, sizes)
    if a.rank == 0:
        for row in rows:
            print(format_result_line(row), flush=True)
        tmp = Path(a.result + ".tmp")
        tmp.write_text(json.dumps(rows))
        tmp.rename(a.result)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
