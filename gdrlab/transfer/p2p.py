"""GPU-to-GPU copies between every pair of GPUs: the ``p2p`` and ``p2p-staged`` paths as matrices.

What CUDA's ``p2pBandwidthLatencyTest`` sample shows, measured with the engine's
``cuMemcpyPeerAsync`` loop (:func:`p2p_bench`):

- ``can_access_peer``: ``cuDeviceCanAccessPeer`` for every ordered pair;
- unidirectional and bidirectional bandwidth at a large size, peer access on (``p2p``: DMA over
  NVLink or PCIe) and off (``p2p-staged``: the driver stages through host memory);
- latency at a small size, peer access on and off;
- with ``diagonal``, each GPU copying its own memory (the sample's diagonal), and with
  :func:`copy_measure` the copy engine or the SM copy kernel of the destination GPU reading the
  peer (the sample's ``--p2p_read``, with ``--sm_copy`` for the kernel).

Every figure is a median. The functions that assemble and format the matrices take the
measurement as an argument, so they run (and are tested) without GPUs.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from .. import provenance
from .. import provenance as _prov
from ..errors import InvalidArgument, Unavailable
from ..units import format_size, parse_sizes
from ..vocab import P2P_PATHS as _P2P_PATH_NAMES
from .buffers import machine, native
from .copies import ENGINES, d2d_leg, run_legs, sweep_copies
from .stats import ProgressFn, Summary

__all__ = [
    "P2P_PATHS", "p2p_bench", "bench_path", "MATRICES", "DEFAULT_LAT_SIZE", "DEFAULT_BW_SIZE", "Measure", "CanAccess",
    "choose_sizes", "require_gpus", "live_measure", "live_can_access", "p2p_matrix", "format_matrix", "format_report",
    "recorded_matrix", "copy_measure",
]

DEFAULT_LAT_SIZE = 8
DEFAULT_BW_SIZE = 256 << 20

#: (key, what the key holds, unit) for every measured matrix, in the order they are printed.
MATRICES = (
    ("uni_bw_gbps", "Unidirectional bandwidth", "GB/s"),
    ("bidir_bw_gbps", "Bidirectional bandwidth (both directions at once, bytes of both counted)", "GB/s"),
    ("lat_us", "Latency (one copy, start to completion)", "us"),
)
_ACCESS = {True: "peer_on", False: "peer_off"}
_ACCESS_TEXT = {"peer_on": "peer access on: p2p", "peer_off": "peer access off: p2p-staged, through host memory"}

#: the two GPU-to-GPU paths of the vocabulary and the peer-access setting each one means
P2P_PATHS = dict(zip(_P2P_PATH_NAMES, (True, False)))

#: ``measure(src, dst, size_bytes, peer_access, bidirectional)`` -> ``{"lat_p50_us", "bw_gbps"}``
Measure = Callable[[int, int, int, bool, bool], dict]
#: ``can_access(a, b)`` -> bool
CanAccess = Callable[[int, int], bool]


def choose_sizes(sizes: str | int | Iterable | None) -> tuple[int, int]:
    """``(lat_size, bw_size)`` from a size list: the smallest size is used for latency and the
    largest for bandwidth (``"8,256M"``). One size is used for both. None gives 8 B and 256 MiB."""
    if sizes is None:
        return DEFAULT_LAT_SIZE, DEFAULT_BW_SIZE
    size_list = parse_sizes(sizes)
    return min(size_list), max(size_list)


def require_gpus(n_gpus: int, reason: str = "") -> None:
    """Raise :class:`Unavailable` naming the GPU count when there are fewer than two GPUs."""
    if n_gpus < 2:
        why = f" ({reason})" if reason else ""
        raise Unavailable(f"GPU-to-GPU paths (p2p, p2p-staged) need two or more GPUs; this machine has "
                          f"{n_gpus}{why}")


def p2p_bench(src: int = 0, dst: int = 1, sizes: Any = "8:256M", iters: int | None = None, *,
              peer_access: bool = True, bidirectional: bool = False, warmup: int | None = None,
              progress: ProgressFn | None = None, keep_samples: bool = False) -> Any:
    """GPU ``src`` to GPU ``dst`` with cuMemcpyPeerAsync, peer access on (P2P DMA over NVLink or
    PCIe) or off (the driver stages through host memory). Raises Unavailable on one GPU.
    Columns: src, dst, peer_access, bidirectional, size, iters, lat_min_us, lat_p50_us,
    lat_p99_us, bw_gbps, source; ``attrs["samples"]`` with ``keep_samples``."""
    import pandas as pd

    def sample(size: int, n: int, wu: int) -> tuple[Any, float]:
        s = native().peer_samples(src, dst, size, n, wu, peer_access, bidirectional)
        return s, size * (2 if bidirectional else 1)

    def row(size: int, n: int, summ: Summary) -> dict:
        return {"src": src, "dst": dst, "peer_access": peer_access, "bidirectional": bidirectional,
                "size": size, "iters": n, "lat_min_us": summ.min_us, "lat_p50_us": summ.p50_us,
                "lat_p99_us": summ.p99_us, "bw_gbps": summ.gbps}

    rows, kept = sweep_copies(sizes, "GPU-to-GPU copies need GPUs", sample, row, iters=iters, warmup=warmup,
                              auto_iters=lambda size: int(max(20, min(1000, (8 << 30) // size))),
                              progress=progress, keep_samples=keep_samples)
    df = provenance.attach(pd.DataFrame(rows), provenance.live(
        {"what": f"p2p_bench {src}->{dst} peer_access={peer_access}"}, machine()))
    if keep_samples:
        df.attrs["samples"] = kept
    return df


def bench_path(path: str = "p2p", src: int = 0, dst: int = 1, sizes: Any = "8:256M", iters: int | None = None, *,
               bidirectional: bool = False, warmup: int | None = None, progress: ProgressFn | None = None,
               keep_samples: bool = False) -> Any:
    """Measure the ``p2p`` (peer DMA) or ``p2p-staged`` (through host memory) path from GPU ``src``
    to GPU ``dst``, or both ways at once with ``bidirectional``. One DataFrame row per size, as
    :func:`p2p_bench`, with ``path`` and ``direction`` columns added."""
    if path not in P2P_PATHS:
        raise InvalidArgument(f"unknown GPU-to-GPU path {path!r}; valid: {', '.join(P2P_PATHS)}")
    df = p2p_bench(src, dst, sizes, iters, peer_access=P2P_PATHS[path], bidirectional=bidirectional,
                   warmup=warmup, progress=progress, keep_samples=keep_samples)
    df.insert(0, "path", path)
    df.insert(1, "direction", f"GPU{src}<->GPU{dst}" if bidirectional else f"GPU{src}->GPU{dst}")
    return df


def live_measure(iters: int | None = None) -> Measure:
    """A :data:`Measure` that runs the engine's ``cuMemcpyPeerAsync`` loop on this machine (a GPU
    to itself: ``cuMemcpyDtoDAsync``, through :func:`copy_measure`)."""
    local = copy_measure("ce", read=False, iters=iters)

    def measure(src: int, dst: int, size: int, peer_access: bool, bidirectional: bool) -> dict:
        if src == dst:
            return local(src, dst, size, peer_access, bidirectional)
        row = p2p_bench(src, dst, [size], iters, peer_access=peer_access, bidirectional=bidirectional).iloc[0]
        return {"lat_p50_us": float(row["lat_p50_us"]), "bw_gbps": float(row["bw_gbps"])}
    return measure


def copy_measure(engine: str = "ce", *, read: bool = False, iters: int | None = None) -> Measure:
    """A :data:`Measure` through the engine's copy runs: ``engine`` "ce" (cuMemcpyPeerAsync) or
    "sm" (the copy kernel), issued on the source GPU (it writes the peer) or with ``read`` on the
    destination GPU (it reads the peer, as p2pBandwidthLatencyTest ``--p2p_read``). Bidirectional:
    the reverse copy at the same time, issued the same way. Host-clock medians, as :func:`live_measure`.
    With peer access off the SM kernel cannot reach the peer: those copies go through the copy
    engines (staged through host memory), as the sample falls back to cudaMemcpyPeerAsync."""
    if engine not in ENGINES:
        raise InvalidArgument(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")

    def measure(src: int, dst: int, size: int, peer_access: bool, bidirectional: bool) -> dict:
        legs = [d2d_leg(src, dst, read)] + ([d2d_leg(dst, src, read)] if bidirectional else [])
        use = engine if (peer_access or src == dst) else "ce"
        peer = "auto" if src == dst else ("on" if peer_access else "off")
        row = run_legs(legs, [size], iters, engine=use, peer=peer)[0]
        return {"lat_p50_us": float(row["host_lat_p50_us"]), "bw_gbps": float(row["host_bw_gbps"])}
    return measure


def live_can_access(a: int, b: int) -> bool:
    """``cuDeviceCanAccessPeer(a, b)`` through the engine."""
    return bool(native().can_access_peer(a, b))


def _square(n: int) -> list[list]:
    return [[None] * n for _ in range(n)]


def p2p_matrix(n_gpus: int, measure: Measure, can_access: CanAccess, *, lat_size: int = DEFAULT_LAT_SIZE,
               bw_size: int = DEFAULT_BW_SIZE, progress: Callable[[int, int, str], None] | None = None,
               provenance: dict | None = None, diagonal: bool = False, only: Iterable[str] | None = None) -> dict:
    """Measure every ordered pair of ``n_gpus`` GPUs with peer access on and off.

    Returns ``{"n_gpus", "lat_size", "bw_size", "can_access_peer", "uni_bw_gbps", "bidir_bw_gbps",
    "lat_us", "diagonal", "notes", "provenance"}``. Each measured key holds ``{"peer_on": M, "peer_off": M}``
    where ``M[src][dst]`` is a number, or None where peer access is impossible (the reason is in
    ``notes``) and on the diagonal unless ``diagonal``: then ``M[a][a]`` is GPU ``a`` copying its
    own memory (measured once, the same in both tables: no peer is involved), and one GPU is enough.
    ``only`` limits the matrices to those keys of :data:`MATRICES`. ``can_access_peer[a][b]`` is a
    bool (None on the diagonal). Raises :class:`Unavailable` with fewer than two GPUs (one with
    ``diagonal``).
    """
    if not isinstance(n_gpus, int) or isinstance(n_gpus, bool) or n_gpus < 0:
        raise InvalidArgument(f"n_gpus must be a non-negative integer, got {n_gpus!r}")
    if not diagonal or n_gpus < 1:
        require_gpus(n_gpus)
    for name, size in (("lat_size", lat_size), ("bw_size", bw_size)):
        if not isinstance(size, int) or size <= 0:
            raise InvalidArgument(f"{name} must be a positive number of bytes, got {size!r}")
    keys = [k for k, _, _ in MATRICES]
    wanted = keys if only is None else list(only)
    if not wanted or any(k not in keys for k in wanted):
        raise InvalidArgument(f"matrices to measure: one or more of {', '.join(keys)}, got {wanted!r}")
    pairs = [(a, b) for a in range(n_gpus) for b in range(n_gpus) if a != b]
    access = _square(n_gpus)
    for a, b in pairs:
        access[a][b] = bool(can_access(a, b))
    out: dict = {"n_gpus": n_gpus, "lat_size": lat_size, "bw_size": bw_size, "can_access_peer": access,
                 "diagonal": diagonal}
    for key in wanted:
        out[key] = {"peer_on": _square(n_gpus), "peer_off": _square(n_gpus)}
    # (matrix key, size, bidirectional, field of the measurement)
    plan = [p for p in [("uni_bw_gbps", bw_size, False, "bw_gbps"), ("bidir_bw_gbps", bw_size, True, "bw_gbps"),
                        ("lat_us", lat_size, False, "lat_p50_us")] if p[0] in wanted]
    steps: list[tuple[int, int, bool | None]] = [(a, b, on) for on in (True, False) for a, b in pairs]
    steps += [(a, a, None) for a in range(n_gpus)] if diagonal else []
    total, done = len(steps) * len(plan), 0
    for a, b, peer_access in steps:
        for key, size, bidir, field in plan:
            done += 1
            if peer_access and not access[a][b]:
                continue
            value = measure(a, b, size, bool(peer_access) or a == b, bidir)[field]
            value = None if value is None else float(value)
            modes = [_ACCESS[peer_access]] if peer_access is not None else list(_ACCESS.values())
            for mode in modes:
                out[key][mode][a][b] = value
            if progress is not None:
                progress(done, total, f"GPU{a}->GPU{b} {key} {modes[0] if len(modes) == 1 else 'diagonal'}")
    notes = [f"GPU{a} cannot access GPU{b} as a peer (cuDeviceCanAccessPeer = 0): only the staged path runs "
             "between them" for a, b in pairs if not access[a][b]]
    if diagonal:
        notes.append("diagonal: each GPU copying its own memory (no peer involved: the same figure in both tables)")
    out["notes"] = notes
    out["provenance"] = dict(provenance or _prov.live())
    return out


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "us":
        return f"{value:.1f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _size_text(size: int) -> str:
    text = format_size(size)
    return f"{size} B" if text == str(size) else f"{text}iB"


def format_matrix(matrix: list[list], unit: str = "", diagonal: str = "X") -> str:
    """A square matrix as text, rows are sources and columns destinations (``D\\D`` like
    ``p2pBandwidthLatencyTest``). None shows as ``-``, or ``diagonal`` on the diagonal."""
    n = len(matrix)
    cells = [[diagonal if i == j and v is None else (("1" if v else "0") if isinstance(v, bool) else _fmt(v, unit))
              for j, v in enumerate(row)] for i, row in enumerate(matrix)]
    width = max([6] + [len(c) + 1 for row in cells for c in row])
    lines = ["   D\\D" + "".join(f"{j:>{width}}" for j in range(n))]
    lines += [f"{i:>6}" + "".join(f"{c:>{width}}" for c in row) for i, row in enumerate(cells)]
    return "\n".join(lines)


def format_report(result: dict) -> str:
    """All matrices of :func:`p2p_matrix` as text, in ``p2pBandwidthLatencyTest``'s order."""
    parts = ["P2P connectivity (cuDeviceCanAccessPeer; 1 = peer access possible)",
             format_matrix(result["can_access_peer"])]
    for key, title, unit in MATRICES:
        if key not in result:
            continue
        size = result["lat_size"] if unit == "us" else result["bw_size"]
        for mode in ("peer_off", "peer_on"):
            parts.append("")
            parts.append(f"{title}, {_size_text(size)}, median, {unit} ({_ACCESS_TEXT[mode]})")
            parts.append(format_matrix(result[key][mode], unit))
    for note in result.get("notes", []):
        parts.append("")
        parts.append("note: " + note)
    prov = result.get("provenance", {})
    parts.append("")
    parts.append("provenance: " + ", ".join(f"{k}={v}" for k, v in prov.items()))
    return "\n".join(parts)


def recorded_matrix() -> dict:
    """The GPU0 -> GPU1 figures recorded on a machine with two NVLinked H200s (NV18, 2026-11) in
    the shape of :func:`p2p_matrix`; pairs that were not recorded are None."""
    out: dict = {"n_gpus": 2, "lat_size": 8, "bw_size": 256 << 20,
                 "can_access_peer": [[None, True], [True, None]]}
    for key, _, _ in MATRICES:
        out[key] = {"peer_on": _square(2), "peer_off": _square(2)}
    # cudaMemcpyPeerAsync medians: peer access on 4.7 us / 393 GB/s, off 18.7 us / 38.2 GB/s
    out["uni_bw_gbps"]["peer_on"][0][1] = 393.0
    out["uni_bw_gbps"]["peer_off"][0][1] = 38.2
    out["lat_us"]["peer_on"][0][1] = 4.7
    out["lat_us"]["peer_off"][0][1] = 18.7
    out["notes"] = ["recorded GPU0 -> GPU1 only; the other entries were not recorded"]
    out["provenance"] = _prov.recorded("2x NVIDIA H200, NVLink NV18, driver 580, CUDA 13.0", "2026-11",
                                       what="cuMemcpyPeerAsync GPU0->GPU1, medians")
    return out
