"""Predictions: one-way latency and streaming bandwidth of every path against message size.

Each stage costs ``fixed + size / rate`` (plus, for copy-engine copies, a measured ramp). A path is
the sum of its stages for one message (latency); its streaming bandwidth is set by the busiest
resource when messages follow each other (sender CPU, NIC, receiver CPU). ``pipelined`` is a
three-stage pipeline of fixed-size chunks: fill, steady state at the slowest stage, drain.
Sizes are numpy arrays, so a 30-point sweep of every path costs well under a millisecond per path.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgument, Unavailable
from ..units import parse_sizes
from ..vocab import NETWORK_PATHS, PATHS
from .profile import Profile, get_profile

__all__ = ["PATHS", "NETWORK_PATHS", "STAGES", "WIRES", "latency_us", "bandwidth_gbps", "evaluate",
           "predict", "predict_all", "stage_us", "available_paths", "check_path", "as_sizes"]

STAGES = ("copy-h2d-pinned", "copy-d2h-pinned", "copy-h2d-pageable", "copy-d2h-pageable", "memcpy",
          "wire-verbs", "wire-tcp", "gdrcopy-write", "gdrcopy-read", "p2p", "p2p-staged")
WIRES = ("verbs", "tcp")


def as_sizes(sizes: Any) -> np.ndarray:
    """Sizes in bytes as a float array; accepts ``"8:1M"``, ``"8,4K"``, ints, lists and arrays."""
    if isinstance(sizes, np.ndarray):
        arr = sizes.astype(float, copy=False)
    elif isinstance(sizes, str):
        try:
            arr = np.asarray(parse_sizes(sizes), dtype=float)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
    else:
        try:
            arr = np.atleast_1d(np.asarray(sizes, dtype=float))
        except (TypeError, ValueError):
            raise InvalidArgument(f"sizes must be numbers or a size spec like '8:1M', got {sizes!r}") from None
    if arr.size == 0:
        raise InvalidArgument("no sizes given")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise InvalidArgument("sizes must be positive byte counts (at least 1 byte)")
    return arr


# ---------------------------------------------------------------------------- stages
def _rate(gbps: float) -> float:
    return gbps * 1e3  # bytes per microsecond


def ce_rate_gbps(p: dict) -> float:
    return p["gpu_pcie_gbps"] * p["ce_eff"]


def _ce(p: dict, direction: str, s: np.ndarray, memory: str = "pinned") -> np.ndarray:
    if memory == "pageable":
        # The driver copies pageable memory through its own pinned buffers in chunks: a memcpy of
        # the first chunk before any DMA (fill), then memcpy and DMA overlap at the steady rate.
        fill = np.minimum(s, p["pageable_chunk_bytes"]) / _rate(p["cpu_memcpy_gbps"])
        return p[f"pageable_{direction}_us"] + fill + s / _rate(p[f"pageable_{direction}_gbps"])
    launch = p[f"ce_launch_{direction}_us"]
    # Measured copies approach the streaming rate gradually: an extra cost that grows with size and
    # saturates (half of it at ce_ramp_bytes). Empirical; 0 where nothing was measured.
    rb = p["ce_ramp_bytes"]
    ramp = p[f"ce_ramp_{direction}_us"] * (s / (s + rb) if rb > 0 else 1.0)
    return launch + ramp + s / _rate(ce_rate_gbps(p))


def _memcpy(p: dict, s):
    return p["memcpy_us"] + s / _rate(p["cpu_memcpy_gbps"])


def _host_wire_gbps(p: dict) -> float:
    return min(p["nic_wire_gbps"], p["nic_pcie_gbps"] * p["pcie_eff"])


def _wire(p: dict, s, wire: str):
    if wire == "verbs":
        return p["doorbell_us"] + p["nic_lat_us"] + p["completion_us"] + s / _rate(_host_wire_gbps(p))
    return p["tcp_lat_us"] + s / _rate(p["tcp_gbps"])


def _wire_busy(p: dict, s, wire: str):
    """How long the wire is occupied per message when messages stream back to back."""
    if wire == "verbs":
        return s / _rate(_host_wire_gbps(p))
    return p["tcp_msg_us"] + s / _rate(p["tcp_gbps"])


def _cpu_wire(p: dict, s, wire: str):
    """CPU time a side spends on the wire per message: a TCP send or receive copies the data in
    the kernel (the thread is busy); a verbs post or poll is counted in the fixed costs."""
    return _wire_busy(p, s, wire) if wire == "tcp" else 0.0


def _send_fixed(p: dict, wire: str) -> float:
    return p["sw_overhead_us"] + (p["doorbell_us"] if wire == "verbs" else 0.0)


def _recv_fixed(p: dict, wire: str) -> float:
    return p["completion_us"] if wire == "verbs" else 0.0


def gdr_rate_gbps(p: dict, placement: str) -> float:
    """The slowest of: wire, NIC link, NIC reading the sender's GPU, NIC writing the receiver's."""
    from .params import PLACEMENT_SUFFIX
    sfx = PLACEMENT_SUFFIX[placement]
    return min(_host_wire_gbps(p), p[f"p2p_read_gbps_{sfx}"], p[f"p2p_write_gbps_{sfx}"])


def _gdrcopy(p: dict, kind: str, s):
    return p[f"gdrcopy_{kind}_us"] + s / _rate(p[f"gdrcopy_{kind}_gbps"])


def _p2p_staged(p: dict, s):
    # The driver stages through host memory in chunks: the first chunk's D2H copy is the pipeline
    # fill, then the two copies overlap at the steady rate.
    fill = np.minimum(s, p["p2p_staged_chunk_bytes"]) / _rate(ce_rate_gbps(p))
    return p["p2p_staged_lat_us"] + fill + s / _rate(p["p2p_staged_gbps"])


def stage_us(profile: Profile | str, stage: str, sizes: Any, **overrides) -> np.ndarray:
    """Time in microseconds of one stage alone (a copy, a memcpy, one wire crossing, ...)."""
    prof = get_profile(profile, **overrides)
    s = as_sizes(sizes)
    p = prof.params
    if stage.startswith("copy-"):
        try:
            _, direction, memory = stage.split("-")
        except ValueError:
            direction = memory = ""
        if direction in ("h2d", "d2h") and memory in ("pinned", "pageable"):
            return _ce(p, direction, s, memory)
    elif stage == "memcpy":
        return _memcpy(p, s)
    elif stage in ("wire-verbs", "wire-tcp"):
        return _wire(p, s, stage[5:]) + 0 * s
    elif stage in ("gdrcopy-write", "gdrcopy-read"):
        return _gdrcopy(p, stage[8:], s)
    elif stage == "p2p":
        return p["p2p_lat_us"] + s / _rate(p["p2p_gbps"])
    elif stage == "p2p-staged":
        return _p2p_staged(p, s)
    raise InvalidArgument(f"unknown stage {stage!r}; valid: {', '.join(STAGES)}")


# ---------------------------------------------------------------------------- paths
def _pipeline(p: dict, s, wire: str, chunk: float, depth: float):
    """Latency and streaming period of ``shared`` cut into chunks over ``depth`` buffers per side."""
    n = np.ceil(s / chunk)
    r = s - (n - 1) * chunk  # the last chunk, 1..chunk bytes
    c = np.minimum(s, chunk)
    fns = (lambda x: _ce(p, "d2h", x), lambda x: _wire(p, x, wire), lambda x: _ce(p, "h2d", x))
    t_c = np.stack([f(c) for f in fns])      # per-stage time of a full chunk
    t_r = np.stack([f(r) for f in fns])      # per-stage time of the last chunk
    # A buffer is busy from the start of its copy until the wire has drained it (on each side), so
    # with `depth` buffers one chunk cannot start more often than (copy + wire) / depth.
    period = np.maximum(t_c.max(axis=0),
                        np.maximum(t_c[0] + t_c[1], t_c[1] + t_c[2]) / depth)
    k = t_c.argmax(axis=0)                   # the bottleneck stage
    idx = np.arange(3)[:, None]
    fill = np.where(idx < k, t_c, 0.0).sum(axis=0)
    drain = np.where(idx >= k, t_r, 0.0).sum(axis=0)
    finish_last = fill + (n - 1) * period + drain
    finish_prev = t_c.sum(axis=0) + np.maximum(n - 2, 0) * period  # the last full chunk's drain
    lat = np.where(n > 1, np.maximum(finish_last, finish_prev), t_c.sum(axis=0))
    total = t_c * (n - 1) + t_r              # busy time per stage for the whole message
    busy = np.maximum(total.max(axis=0), np.maximum(total[0] + total[1], total[1] + total[2]) / depth)
    busy = np.maximum(busy, n * _send_fixed(p, wire))
    return lat, busy


def evaluate(prof: Profile, path: str, s: np.ndarray, *, wire: str, chunk: float, depth: float):
    """(latency_us, bw_gbps) arrays for a checked profile, path and wire."""
    p = prof.params
    sw = p["sw_overhead_us"]
    send, recv = _send_fixed(p, wire), _recv_fixed(p, wire)
    if path in ("staged", "shared", "gdrcopy"):
        cpu = _cpu_wire(p, s, wire)
        send, recv = send + cpu, recv + cpu
    if path == "host":
        lat = sw + _wire(p, s, wire)
        busy = np.maximum(np.maximum(send, _wire_busy(p, s, wire)), recv)
    elif path == "staged":
        d2h, h2d, mc = _ce(p, "d2h", s), _ce(p, "h2d", s), _memcpy(p, s)
        lat = sw + d2h + mc + _wire(p, s, wire) + mc + h2d
        busy = np.maximum(np.maximum(send + d2h + mc, _wire_busy(p, s, wire)), recv + mc + h2d)
    elif path == "shared":
        d2h, h2d = _ce(p, "d2h", s), _ce(p, "h2d", s)
        lat = sw + d2h + _wire(p, s, wire) + h2d
        busy = np.maximum(np.maximum(send + d2h, _wire_busy(p, s, wire)), recv + h2d)
    elif path == "pipelined":
        lat, busy = _pipeline(p, s, wire, chunk, depth)
        lat = lat + sw
    elif path == "gdr":
        hop = p["xsocket_hop_us"] if prof.placement == "cross-socket" else 0.0
        move = s / _rate(gdr_rate_gbps(p, prof.placement))
        lat = sw + p["doorbell_us"] + p["nic_lat_us"] + p["completion_us"] + p["gdr_extra_us"] + hop + move
        busy = np.maximum(np.maximum(send, move), recv)
    elif path == "gdrcopy":
        rd, wr = _gdrcopy(p, "read", s), _gdrcopy(p, "write", s)
        lat = sw + rd + _wire(p, s, wire) + wr
        busy = np.maximum(np.maximum(send + rd, _wire_busy(p, s, wire)), recv + wr)
    elif path == "p2p":
        lat = p["p2p_lat_us"] + s / _rate(p["p2p_gbps"])
        busy = lat  # synchronous copies, as gdrlab.engine.p2p_bench times them
    elif path == "p2p-staged":
        lat = _p2p_staged(p, s)
        busy = lat
    else:  # pragma: no cover - check_path rejects it first
        raise InvalidArgument(f"unknown path {path!r}")
    return lat, s / (busy * 1e3)


def available_paths(profile: Profile | str) -> list[str]:
    """The paths this profile's hardware can run."""
    prof = get_profile(profile)
    out = []
    for path in PATHS:
        try:
            check_path(prof, path)
        except Unavailable:
            continue
        out.append(path)
    return out


def check_path(prof: Profile, path: str, wire: str | None = None) -> str:
    """Raise if ``prof`` cannot run ``path`` over ``wire``; return the wire used."""
    if path not in PATHS:
        raise InvalidArgument(f"unknown path {path!r}; valid: {', '.join(PATHS)}")
    wire = wire or prof.wire
    if wire not in WIRES:
        raise InvalidArgument(f"unknown wire {wire!r}; valid: {', '.join(WIRES)}")
    if wire == "verbs" and not prof.has_nic and path in NETWORK_PATHS:
        raise Unavailable(f"profile {prof.name!r} has no RDMA NIC, so no verbs wire (use wire='tcp')")
    if path == "gdr" and not prof.has_nic:
        raise Unavailable(f"path 'gdr' needs an RDMA NIC and profile {prof.name!r} has none; for a what-if, "
                          f"gdrlab.model.borrow_nic({prof.name!r}, 'hopper-ndr') (CLI: --borrow-nic hopper-ndr)")
    if path == "gdr" and wire != "verbs":
        raise InvalidArgument("path 'gdr' runs over the verbs wire only")
    if path in ("p2p", "p2p-staged") and prof.n_gpus < 2:
        raise Unavailable(f"path {path!r} needs two GPUs and profile {prof.name!r} has {prof.n_gpus}")
    if path == "p2p" and not prof.topology.get("peer_access", True):
        raise Unavailable(f"path 'p2p' is not possible on profile {prof.name!r}: "
                          f"{prof.topology.get('peer_access_reason', 'no peer access between the GPUs')}; "
                          "p2p-staged is")
    return wire


def _resolve(profile, placement, chunk, depth, wire, overrides):
    prof = get_profile(profile, placement=placement, **overrides)
    chunk_b = float(chunk) if chunk is not None else prof.params["chunk_bytes"]
    depth_n = float(depth) if depth is not None else prof.params["depth"]
    if chunk_b < 1:
        raise InvalidArgument(f"chunk must be at least 1 byte, got {chunk}")
    if depth_n < 1 or depth_n != int(depth_n):
        raise InvalidArgument(f"depth must be a whole number >= 1, got {depth}")
    return prof, chunk_b, depth_n


def latency_us(profile: Profile | str, path: str, sizes: Any, *, placement: str | None = None,
               chunk: int | None = None, depth: int | None = None, wire: str | None = None,
               **overrides) -> np.ndarray:
    """One-way latency in microseconds of ``path`` at each size (the fast core behind sliders)."""
    prof, c, d = _resolve(profile, placement, chunk, depth, wire, overrides)
    w = check_path(prof, path, wire)
    return evaluate(prof, path, as_sizes(sizes), wire=w, chunk=c, depth=d)[0]


def bandwidth_gbps(profile: Profile | str, path: str, sizes: Any, **kw) -> np.ndarray:
    """Streaming bandwidth in GB/s (1e9 B/s) of ``path`` at each size."""
    prof, c, d = _resolve(profile, kw.pop("placement", None), kw.pop("chunk", None), kw.pop("depth", None),
                          kw.get("wire"), {k: v for k, v in kw.items() if k != "wire"})
    w = check_path(prof, path, kw.get("wire"))
    return evaluate(prof, path, as_sizes(sizes), wire=w, chunk=c, depth=d)[1]


def _provenance(prof: Profile, wire: str, overrides: dict, chunk: float, depth: float) -> dict:
    from .. import __version__
    return {"kind": "modelled", "profile": prof.name, "placement": prof.placement, "wire": wire,
            "overrides": dict(prof.overrides), "follows": prof.follows,
            "chunk": int(chunk), "depth": int(depth), "gdrlab": __version__}


def predict(profile_or_name: Profile | str, path: str, sizes: Any = "8:64M", *, placement: str | None = None,
            chunk: int | None = None, depth: int | None = None, wire: str | None = None, **overrides):
    """Modelled latency and bandwidth of one path: DataFrame with columns path, size, lat_us,
    bw_gbps and ``attrs["provenance"] = {"kind": "modelled", "profile": ..., ...}``."""
    import pandas as pd

    prof, c, d = _resolve(profile_or_name, placement, chunk, depth, wire, overrides)
    w = check_path(prof, path, wire)
    s = as_sizes(sizes)
    lat, bw = evaluate(prof, path, s, wire=w, chunk=c, depth=d)
    df = pd.DataFrame({"path": path, "size": s.astype(np.int64), "lat_us": lat, "bw_gbps": bw})
    df.attrs["provenance"] = _provenance(prof, w, overrides, c, d)
    return df


def predict_all(profile_or_name: Profile | str, sizes: Any = "8:64M", paths=None, **kw):
    """:func:`predict` for every path the profile can run (or ``paths``), stacked."""
    import pandas as pd

    prof, c, d = _resolve(profile_or_name, kw.pop("placement", None), kw.pop("chunk", None),
                          kw.pop("depth", None), kw.get("wire"), {k: v for k, v in kw.items() if k != "wire"})
    wire = kw.get("wire")
    todo = list(paths) if paths is not None else available_paths(prof)
    s = as_sizes(sizes)
    size_col = s.astype(np.int64)
    frames = []
    for path in todo:
        w = check_path(prof, path, wire if path in NETWORK_PATHS else None)
        lat, bw = evaluate(prof, path, s, wire=w, chunk=c, depth=d)
        frames.append(pd.DataFrame({"path": path, "size": size_col, "lat_us": lat, "bw_gbps": bw}))
    df = pd.concat(frames, ignore_index=True)
    overrides = {k: v for k, v in kw.items() if k != "wire"}
    df.attrs["provenance"] = _provenance(prof, wire or prof.wire, overrides, c, d)
    return df
