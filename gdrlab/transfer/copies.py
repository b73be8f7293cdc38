"""Copies inside one machine, timed by the engine: host/device copies (``copy_bench``) and the
loop both it and the GPU-to-GPU paths (:mod:`.p2p`) run over a list of sizes."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import provenance
from ..errors import InvalidArgument, Unavailable
from ..units import parse_sizes
from ..vocab import HOST_MEMORY_KINDS
from .buffers import cuda_status, machine, native
from .stats import ProgressFn, Summary, summarize

__all__ = ["sweep_copies", "copy_bench", "DIRECTIONS", "HOST_MEMORY"]
DIRECTIONS = ("h2d", "d2h", "d2d")
HOST_MEMORY = HOST_MEMORY_KINDS

#: ``sample(size, iters, warmup)`` -> (samples_s, bytes_per_sample)
SampleFn = Callable[[int, int, int], "tuple[Any, float]"]
#: ``row(size, iters, summary)`` -> the row's columns
RowFn = Callable[[int, int, Summary], dict]


def sweep_copies(sizes: Any, need: str, sample: SampleFn, row: RowFn, *, iters: int | None, warmup: int | None,
                 auto_iters: Callable[[int], int], progress: ProgressFn | None = None,
                 keep_samples: bool = False) -> tuple[list[dict], dict[int, Any]]:
    """Run ``sample`` at each of ``sizes`` (parsed once) on this machine's GPU(s); ``need`` says
    what is missing when CUDA is unusable. Returns the rows and, with ``keep_samples``, the
    per-size latency samples in microseconds."""
    size_list = parse_sizes(sizes)
    if iters is not None and iters < 1:
        raise InvalidArgument("iters must be at least 1")
    if warmup is not None and warmup < 0:
        raise InvalidArgument("warmup must be at least 0")
    st = cuda_status()
    if not st["usable"]:
        raise Unavailable(f"{need}: {st['reason']}")
    rows, kept = [], {}
    for i, size in enumerate(size_list):
        n = iters or auto_iters(size)
        wu = warmup if warmup is not None else max(3, n // 20)
        s, nbytes = sample(size, n, wu)
        out = row(size, n, summarize(s, nbytes))
        rows.append(out)
        if keep_samples:
            kept[size] = {"lat_us": np.asarray(s) * 1e6}
        if progress is not None:
            progress(i + 1, len(size_list), out)
    return rows, kept


def copy_bench(direction: str = "h2d", sizes: Any = "8:64M", iters: int | None = None, *, memory: str = "pinned",
               device: int = 0, warmup: int | None = None, progress: ProgressFn | None = None) -> Any:
    """Copy-engine copies on this GPU: ``direction`` h2d, d2h or d2d; ``memory`` pinned or pageable.
    Each sample is one cuMemcpyAsync + stream synchronize, timed on the host clock.
    Columns: direction, memory, size, iters, lat_min_us, lat_p50_us, lat_p99_us, lat_mean_us, bw_gbps,
    source."""
    import pandas as pd

    if direction not in DIRECTIONS:
        raise InvalidArgument(f"unknown direction {direction!r}; valid: {', '.join(DIRECTIONS)}")
    if memory not in HOST_MEMORY:
        raise InvalidArgument(f"unknown host memory kind {memory!r}; valid: {', '.join(HOST_MEMORY)}")

    def sample(size: int, n: int, wu: int) -> tuple[Any, float]:
        return native().copy_samples(direction, size, n, wu, memory, device), size

    def row(size: int, n: int, summ: Summary) -> dict:
        return {"direction": direction, "memory": memory, "size": size, "iters": n,
                "lat_min_us": summ.min_us, "lat_p50_us": summ.p50_us, "lat_p99_us": summ.p99_us,
                "lat_mean_us": summ.mean_us, "bw_gbps": summ.gbps}

    rows, _ = sweep_copies(sizes, "copy-engine measurements need a GPU", sample, row, iters=iters, warmup=warmup,
                           auto_iters=lambda size: int(max(20, min(2000, (4 << 30) // size))), progress=progress)
    prov = provenance.live({"what": f"copy_bench {direction} {memory}"}, machine())
    return provenance.attach(pd.DataFrame(rows), prov)
