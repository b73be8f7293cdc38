"""Copies inside one machine, timed by the engine: host/device copies (``copy_bench``), the copy
runs of ``gdrlab copy`` (``copy_sweep``: copy engines or the SM copy kernel, one or several copies
at once, host-clock and CUDA-event timing) and the loop all of them and the GPU-to-GPU paths
(:mod:`.p2p`) run over a list of sizes."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import provenance
from ..errors import InvalidArgument, Unavailable
from ..units import parse_sizes
from ..vocab import HOST_MEMORY_KINDS, MEMORY_KINDS
from .buffers import cuda_status, machine, native
from .stats import ProgressFn, Summary, summarize

__all__ = ["sweep_copies", "copy_bench", "DIRECTIONS", "HOST_MEMORY", "ENGINES", "PATTERNS", "PEER_MODES", "Leg",
           "copy_legs", "d2d_leg", "nvbandwidth_testcase", "run_legs", "copy_sweep", "sm_kernel"]
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


# --------------------------------------------------------------------------- gdrlab copy
#: who moves the bytes: the GPU's copy engines (cuMemcpy*Async) or its SMs (the copy kernel)
ENGINES = ("ce", "sm")
#: one copy (or two with bidir), the host to every GPU at once, every other GPU to one GPU at once
PATTERNS = ("one-to-one", "host-to-all", "all-to-one")
#: peer access between two GPUs of a copy: on where possible, off, or required
PEER_MODES = {"auto": -1, "off": 0, "on": 1}
_DEVICE = MEMORY_KINDS[-1]
#: one copy: (source memory, its GPU, destination memory, its GPU, GPU whose stream runs it)
Leg = tuple[str, int, str, int, int]


def _ends(direction: str, src_mem: str | None, dst_mem: str | None) -> tuple[str, str]:
    """The memory kinds of a copy's two ends, checked against its direction."""
    if direction not in DIRECTIONS:
        raise InvalidArgument(f"unknown direction {direction!r}; valid: {', '.join(DIRECTIONS)}")
    host_src, host_dst = direction == "h2d", direction == "d2h"
    out = []
    for flag, given, host in (("--src-mem", src_mem, host_src), ("--dst-mem", dst_mem, host_dst)):
        want = HOST_MEMORY if host else (_DEVICE,)
        kind = given if given is not None else want[-1]
        if kind not in want:
            side = "host" if host else "GPU"
            raise InvalidArgument(f"{flag} {kind}: the {side} end of a {direction} copy is {' or '.join(want)} memory")
        out.append(kind)
    return out[0], out[1]


def copy_legs(direction: str = "h2d", *, pattern: str = "one-to-one", src_mem: str | None = None,
              dst_mem: str | None = None, bidir: bool = False, device: int = 0, dst_device: int | None = None,
              read: bool = False, n_gpus: int = 1) -> list[Leg]:
    """The copies one sample of ``gdrlab copy`` makes at once. ``device`` is the GPU of a host
    copy, the source of a d2d copy and the one GPU of all-to-one; ``dst_device`` the destination
    of a d2d copy (default ``device``). ``read``: a d2d copy runs on the destination GPU (it reads
    the peer), else on the source (it writes the peer). ``bidir`` adds the reverse of every copy."""
    if pattern not in PATTERNS:
        raise InvalidArgument(f"unknown pattern {pattern!r}; valid: {', '.join(PATTERNS)}")
    s_kind, d_kind = _ends(direction, src_mem, dst_mem)
    dst_device = device if dst_device is None else dst_device
    for flag, d in (("--device", device), ("--dst-device", dst_device)):
        if not isinstance(d, int) or d < 0:
            raise InvalidArgument(f"{flag} must be a GPU index (0 or more), got {d!r}")
    if pattern == "host-to-all" and direction == "d2d":
        raise InvalidArgument("--pattern host-to-all copies between the host and every GPU: use --dir h2d or d2h")
    if pattern == "all-to-one" and direction != "d2d":
        raise InvalidArgument("--pattern all-to-one copies from every other GPU to one GPU: use --dir d2d")
    if pattern != "one-to-one" and n_gpus < 2:
        raise Unavailable(f"--pattern {pattern} needs two or more GPUs; this machine has {n_gpus}")
    for d in {device, dst_device}:
        if d >= n_gpus:
            raise InvalidArgument(f"GPU {d} does not exist: this machine has {n_gpus} GPU(s)")

    def leg(src: int, dst: int) -> Leg:
        if direction == "d2d":
            return d2d_leg(src, dst, read)
        gpu = dst if direction == "h2d" else src
        return (s_kind, gpu, d_kind, gpu, gpu)

    def reverse(lg: Leg) -> Leg:
        sk, sd, dk, dd, ex = lg
        if direction != "d2d":
            return (dk, dd, sk, sd, ex)  # the same GPU runs both directions
        return (dk, dd, sk, sd, sd if read else dd)

    if pattern == "one-to-one":
        legs = [leg(device, dst_device)]
    elif pattern == "host-to-all":
        legs = [leg(g, g) for g in range(n_gpus)]
    else:
        legs = [leg(g, device) for g in range(n_gpus) if g != device]
    return legs + [reverse(lg) for lg in legs] if bidir else legs


def d2d_leg(src: int, dst: int, read: bool = False) -> Leg:
    """GPU ``src``'s memory to GPU ``dst``'s, issued on ``dst`` with ``read`` (it reads the peer), else
    on ``src`` (it writes the peer)."""
    return (_DEVICE, src, _DEVICE, dst, dst if read else src)


def nvbandwidth_testcase(direction: str, pattern: str, engine: str, *, bidir: bool = False, read: bool = False,
                         same_gpu: bool = False) -> str | None:
    """The nvbandwidth testcase (``nvbandwidth -t NAME``) closest to a ``gdrlab copy`` run; None
    where nvbandwidth has none (a copy inside one GPU, bidirectional all-to-one)."""
    rw = "read" if read else "write"
    bi = "_bidirectional" if bidir else ""
    if pattern == "one-to-one":
        if direction == "d2d":
            return None if same_gpu else f"device_to_device{bi}_memcpy_{rw}_{engine}"
        name = "host_to_device" if direction == "h2d" else "device_to_host"
        return f"{name}{bi}_memcpy_{engine}"
    if pattern == "host-to-all":
        return f"{'host_to_all' if direction == 'h2d' else 'all_to_host'}{bi}_memcpy_{engine}"
    return None if bidir else f"all_to_one_{rw}_{engine}"


def sm_kernel() -> dict:
    """The SM copy kernel the engine embeds: its PTX text, PTX ISA version and declared target."""
    ptx, isa, target = native().sm_copy_ptx()
    return {"ptx": ptx, "ptx_isa": isa, "target": target}


def run_legs(legs: list[Leg], sizes: Any = "64M", iters: int | None = None, *, engine: str = "ce",
             warmup: int | None = None, check_every: int = 1, peer: str = "auto",
             progress: ProgressFn | None = None) -> list[dict]:
    """Run ``legs`` at once at each size: one row per size with both timings. ``host_*`` columns
    are the host clock (queue every copy, wait for all), ``event_*`` CUDA events around each copy
    on its stream (from the first start to the last end among the copies one GPU runs; a copy run by
    another GPU counts with its own time); bandwidth counts the bytes of every copy."""
    if engine not in ENGINES:
        raise InvalidArgument(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    if peer not in PEER_MODES:
        raise InvalidArgument(f"unknown peer mode {peer!r}; valid: {', '.join(PEER_MODES)}")
    if not isinstance(check_every, int) or check_every < 1:
        raise InvalidArgument(f"check_every must be at least 1, got {check_every!r}")
    last: dict = {}

    def sample(size: int, n: int, wu: int) -> tuple[Any, float]:
        last.update(native().copy_run(legs, size, n, wu, engine, PEER_MODES[peer], check_every))
        return last["host_s"], last["bytes_per_sample"]

    def row(size: int, n: int, host: Summary) -> dict:
        ev = summarize(last["event_s"], last["bytes_per_sample"])
        return {"size": size, "iters": n, "copies": len(legs), "bytes_per_sample": int(last["bytes_per_sample"]),
                "host_lat_min_us": host.min_us, "host_lat_p50_us": host.p50_us, "host_lat_p99_us": host.p99_us,
                "host_bw_gbps": host.gbps, "event_lat_min_us": ev.min_us, "event_lat_p50_us": ev.p50_us,
                "event_lat_p99_us": ev.p99_us, "event_bw_gbps": ev.gbps,
                "verified": last["checks"] > 0, "checks": int(last["checks"]),
                "sm_blocks": int(last["sm_blocks"]) or None, "sm_threads": int(last["sm_threads"]) or None}

    rows, _ = sweep_copies(sizes, "gdrlab copy needs a GPU", sample, row, iters=iters, warmup=warmup,
                           auto_iters=lambda size: int(max(20, min(2000, (4 << 30) // size))), progress=progress)
    return rows


def copy_sweep(direction: str = "h2d", sizes: Any = "64M", iters: int | None = None, *, engine: str = "ce",
               pattern: str = "one-to-one", src_mem: str | None = None, dst_mem: str | None = None,
               bidir: bool = False, device: int = 0, dst_device: int | None = None, read: bool = False,
               warmup: int | None = None, check_every: int = 1, peer: str = "auto",
               progress: ProgressFn | None = None) -> Any:
    """``gdrlab copy`` as a DataFrame: :func:`copy_legs` run by :func:`run_legs` at each size, with
    the run's settings and nvbandwidth's closest testcase as columns and live provenance."""
    import pandas as pd

    if engine not in ENGINES:
        raise InvalidArgument(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    s_kind, d_kind = _ends(direction, src_mem, dst_mem)
    parse_sizes(sizes)
    st = cuda_status()
    if not st["usable"]:
        raise Unavailable(f"gdrlab copy needs a GPU: {st['reason']}")
    n_gpus = len(native().gpu_infos())
    legs = copy_legs(direction, pattern=pattern, src_mem=s_kind, dst_mem=d_kind, bidir=bidir, device=device,
                     dst_device=dst_device, read=read, n_gpus=n_gpus)
    same = direction == "d2d" and pattern == "one-to-one" and legs[0][1] == legs[0][3]
    settings = {"direction": direction, "pattern": pattern, "engine": engine, "bidir": bidir, "read": read,
                "src_mem": s_kind, "dst_mem": d_kind, "device": device,
                "dst_device": legs[0][3] if direction == "d2d" else device,
                "nvbandwidth": nvbandwidth_testcase(direction, pattern, engine, bidir=bidir, read=read, same_gpu=same)}
    rows = run_legs(legs, sizes, iters, engine=engine, warmup=warmup, check_every=check_every, peer=peer,
                    progress=progress)
    df = pd.DataFrame([{**settings, **r} for r in rows])
    what = {"what": f"gdrlab copy {direction} {pattern} {engine}", "legs": [list(lg) for lg in legs]}
    if engine == "sm":
        k = sm_kernel()
        what["sm_kernel"] = f"PTX ISA {k['ptx_isa']}, target {k['target']}, JIT-compiled by the driver"
    return provenance.attach(df, provenance.live(what, machine()))
