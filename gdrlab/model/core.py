"""Predictions: one-way latency and streaming bandwidth of every path against message size.

Each stage costs a fixed part plus bytes over the slowest link it crosses (:mod:`.routes` names
every link on a path's route). A path's latency is its stages in sequence; its streaming bandwidth
is set by its busiest resource (a thread, a link, a buffer pool), which every row names as the
bottleneck. ``pipelined`` runs the exact chunk schedule of :mod:`.pipeline`. Sizes are numpy
arrays, so a 30-point sweep of every path costs a few milliseconds per profile.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import provenance
from .._version import __version__

from ..errors import InvalidArgument, Unavailable
from ..units import parse_sizes
from ..vocab import COPY_PATHS, HOST_BUFFER_PATHS, HOST_MEMORY_KINDS, NETWORK_PATHS, P2P_PATHS, PATHS, WIRES, path_info
from . import routes as R
from .pipeline import schedule
from .profile import Profile, get_profile

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["PATHS", "NETWORK_PATHS", "STAGES", "WIRES", "latency_us", "bandwidth_gbps", "evaluate", "evaluate_full",
           "explain", "default_paths",
           "predict", "predict_all", "stage_us", "available_paths", "check_path", "as_sizes"]

#: One stage of a route, as stage_us() prices it: copies per direction and host memory kind, the
#: CPU memcpy, a wire, a gdrcopy access and the GPU-to-GPU copies (names from the vocabulary).
STAGES = (tuple(f"copy-{d}-{m}" for m in reversed(HOST_MEMORY_KINDS) for d in ("h2d", "d2h")) + ("memcpy",)
          + tuple(f"wire-{w}" for w in reversed(WIRES)) + ("gdrcopy-write", "gdrcopy-read") + P2P_PATHS)


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
def stage_us(profile: Profile | str, stage: str, sizes: Any, **overrides: Any) -> np.ndarray:
    """Time in microseconds of one stage alone (a copy, a memcpy, one wire crossing, ...)."""
    prof = get_profile(profile, **overrides)
    s = as_sizes(sizes)
    p = prof.params
    if stage.startswith("copy-"):
        try:
            _, direction, memory = stage.split("-")
        except ValueError:
            direction = memory = ""
        if direction in ("h2d", "d2h") and memory in HOST_MEMORY_KINDS:
            return R.copy_us(p, direction, s, memory)
    elif stage == "memcpy":
        return R.memcpy_us(p, s)
    elif stage in ("wire-verbs", "wire-tcp"):
        links = R.route(p, "host", prof.placement, stage[5:])
        return R.wire_us(p, s, stage[5:], R.rate_of(links, R.WIRE_LINKS)) + 0 * s
    elif stage in ("gdrcopy-write", "gdrcopy-read"):
        # The CPU doing the copy sits where the profile's placement puts it: across sockets it
        # reaches gdrcopy_remote_eff of the local rate and pays one hop, as in the gdrcopy path.
        links = R.route(p, "gdrcopy", prof.placement, "tcp")
        return R.gdrcopy_us(p, stage[8:], s, links[f"bar1-{stage[8:]}"], prof.placement == "cross-socket")
    elif stage == "p2p":
        return R.p2p_us(p, s, R.route(p, "p2p", prof.placement, "tcp", _nvlink(prof))["peer-link"])
    elif stage == "p2p-staged":
        return R.p2p_staged_us(p, s, R.rate_of(R.route(p, "p2p-staged", prof.placement, "tcp"),
                                               ("driver-staging", "copy-d2h", "copy-h2d")))
    raise InvalidArgument(f"unknown stage {stage!r}; valid: {', '.join(STAGES)}")


def _nvlink(prof: Profile) -> bool:
    return prof.topology.get("peer_link", "nvlink") == "nvlink"


def _send_fixed(p: dict, wire: str) -> float:
    return p["sw_overhead_us"] + (p["doorbell_us"] if wire == "verbs" else 0.0)


def _recv_fixed(p: dict, wire: str) -> float:
    return p["completion_us"] if wire == "verbs" else 0.0


# ---------------------------------------------------------------------------- paths
def _pipeline(p: dict, s: np.ndarray, wire: str, chunk: float, depth: float,
              links: dict) -> tuple[np.ndarray, dict[str, Any]]:
    """Latency and busy resources of ``shared`` cut into chunks over ``depth`` buffers per side."""
    wrate = R.rate_of(links, R.WIRE_LINKS)
    n = np.ceil(s / chunk)
    c = float(chunk)
    r = s - (n - 1) * chunk                  # the last chunk, 1..chunk bytes

    def parts(x: Any) -> tuple[tuple[Any, Any, Any], tuple[Any, Any, Any]]:
        o1, d1 = R.copy_parts(p, "d2h", x, links["copy-d2h"])
        o2, d2 = R.wire_parts(p, x, wire, wrate)
        o3, d3 = R.copy_parts(p, "h2d", x, links["copy-h2d"])
        return (o1, o2, o3), (d1, d2, d3)

    a_full, d = parts(c)
    a_last = np.stack([np.broadcast_to(np.asarray(v, dtype=float), s.shape) for v in parts(r)[0]])
    lat = schedule([float(v) for v in a_full], a_last, [float(v) for v in d], n.astype(np.int64), int(depth),
                   streamed=wire == "tcp")
    tot = [a_full[k] * (n - 1) + a_last[k] for k in range(3)]
    busy = {"copy-d2h": tot[0], _wire_name(links): tot[1], "copy-h2d": tot[2],
            "sender buffers": (tot[0] + n * d[0] + tot[1]) / depth,
            "receiver buffers": (tot[1] + (0.0 if wire == "tcp" else n * d[1]) + tot[2]) / depth,
            "sender cpu": n * _send_fixed(p, wire)}
    # One thread per side takes messages in turn: it issues every copy and waits for the last one
    # (and on tcp carries the bytes through the kernel), so messages do not overlap on it.
    tcp = tot[1] if wire == "tcp" else 0.0
    busy["sender thread"] = n * _send_fixed(p, wire) + tot[0] + d[0] + tcp
    busy["receiver thread"] = n * _recv_fixed(p, wire) + tot[2] + d[2] + tcp
    return lat, busy


def _wire_name(links: dict) -> str:
    return min((n for n in R.WIRE_LINKS if n in links), key=lambda n: links[n])


def evaluate_full(prof: Profile, path: str, s: np.ndarray, *, wire: str, chunk: float,
                  depth: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(latency_us, bw_gbps, bottleneck names) arrays for a checked profile, path and wire."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        lat, bw, neck = _evaluate(prof, path, s, wire=wire, chunk=chunk, depth=depth)
    if not (np.all(np.isfinite(lat)) and np.all(np.isfinite(bw))):
        changed = ", ".join(f"{k}={v:g}" for k, v in prof.overrides.items()) or "none"
        raise InvalidArgument(f"the model of path {path!r} overflows with these parameters (overrides: {changed}); "
                              "use values nearer the profile's")
    return lat, bw, neck


def _evaluate(prof: Profile, path: str, s: np.ndarray, *, wire: str, chunk: float,
              depth: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p = prof.params
    sw = p["sw_overhead_us"]
    links = R.route(p, path, prof.placement, wire, _nvlink(prof))
    send, recv = _send_fixed(p, wire), _recv_fixed(p, wire)
    wname = _wire_name(links) if path in NETWORK_PATHS else ""
    wrate = links[wname] if wname else 0.0
    if path in HOST_BUFFER_PATHS:
        wire_t = R.wire_us(p, s, wire, wrate)
        wire_busy = s / (wrate * 1e3)
        if wire == "tcp":  # the kernel copies the data: the thread is busy for the whole send
            cpu = R.wire_parts(p, s, wire, wrate)[0]
            send, recv, wire_busy = send + cpu, recv + cpu, wire_busy + p["tcp_msg_us"]
    if path == "host":
        lat = sw + wire_t
        busy = {"sender cpu": send + 0 * s, wname: wire_busy, "receiver cpu": recv + 0 * s}
    elif path_info(path).route == "copy":  # staged, shared
        d2h = R.copy_us(p, "d2h", s, rate=links["copy-d2h"])
        h2d = R.copy_us(p, "h2d", s, rate=links["copy-h2d"])
        mc = R.memcpy_us(p, s) if path == "staged" else 0.0 * s
        lat = sw + d2h + mc + wire_t + mc + h2d
        busy = {"sender (d2h copy" + (" + memcpy)" if path == "staged" else ")"): send + d2h + mc,
                wname: wire_busy, "receiver (" + ("memcpy + " if path == "staged" else "") + "h2d copy)": recv + mc + h2d}
    elif path == "pipelined":
        lat, busy = _pipeline(p, s, wire, chunk, depth, links)
        lat = lat + sw
    elif path == "gdr":
        hop = p["xsocket_hop_us"] if prof.placement == "cross-socket" else 0.0
        lname = min(links, key=lambda k: links[k])
        move = s / (links[lname] * 1e3)
        lat = sw + p["doorbell_us"] + p["nic_lat_us"] + p["completion_us"] + p["gdr_extra_us"] + hop + move
        busy = {"sender cpu": send + 0 * s, lname: move, "receiver cpu": recv + 0 * s}
    elif path == "gdrcopy":
        remote = prof.placement == "cross-socket"
        rd = R.gdrcopy_us(p, "read", s, links["bar1-read"], remote)
        wr = R.gdrcopy_us(p, "write", s, links["bar1-write"], remote)
        lat = sw + rd + wire_t + wr
        busy = {"sender (bar1 read)": send + rd, wname: wire_busy, "receiver (bar1 write)": recv + wr}
    elif path == "p2p":
        lat = R.p2p_us(p, s, links["peer-link"])
        busy = {"peer-link": s / (links["peer-link"] * 1e3), "copy call": lat - s / (links["peer-link"] * 1e3)}
    elif path == "p2p-staged":
        rate = R.rate_of(links, links)
        lat = R.p2p_staged_us(p, s, rate)
        lname = min(links, key=lambda k: links[k])
        busy = {lname: s / (rate * 1e3), "copy call": lat - s / (rate * 1e3)}
    else:  # pragma: no cover - check_path rejects it first
        raise InvalidArgument(f"unknown path {path!r}")
    names = list(busy)
    mat = np.stack([np.broadcast_to(np.asarray(busy[k], dtype=float), s.shape) for k in names])
    if path in P2P_PATHS:
        total = lat  # synchronous copies, as gdrlab.engine.p2p_bench times them
    else:
        total = mat.max(axis=0)
    neck = np.asarray(names, dtype=object)[mat.argmax(axis=0)]
    return lat, s / (total * 1e3), neck


def evaluate(prof: Profile, path: str, s: np.ndarray, *, wire: str, chunk: float,
             depth: float) -> tuple[np.ndarray, np.ndarray]:
    """(latency_us, bw_gbps) arrays for a checked profile, path and wire."""
    lat, bw, _ = evaluate_full(prof, path, s, wire=wire, chunk=chunk, depth=depth)
    return lat, bw


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


def default_paths(profile: Profile | str, wire: str | None = None) -> list[str]:
    """The paths a sweep shows by default: those the profile can run over ``wire`` (gdr needs verbs)."""
    prof = get_profile(profile)
    w = wire or prof.wire
    return [p for p in available_paths(prof) if not (p == "gdr" and w != "verbs")]


def explain(profile: Profile | str, path: str, size: float, *, placement: str | None = None,
            chunk: int | None = None, depth: int | None = None, wire: str | None = None,
            **overrides: float) -> dict[str, Any]:
    """Why ``path`` takes what it takes at ``size``: every link on its route with its rate, the
    bottleneck of streaming, latency and bandwidth."""
    prof, c, d = _resolve(profile, placement, chunk, depth, wire, overrides)
    w = check_path(prof, path, wire if path in NETWORK_PATHS else None)
    s = as_sizes([size])
    lat, bw, neck = evaluate_full(prof, path, s, wire=w, chunk=c, depth=d)
    links = R.route(prof.params, path, prof.placement, w if path in NETWORK_PATHS else "tcp", _nvlink(prof))
    if path not in NETWORK_PATHS:
        links = {k: v for k, v in links.items() if k != "tcp"}
    return {"path": path, "size": int(s[0]), "wire": w if path in NETWORK_PATHS else None,
            "links_gbps": links, "slowest_link": min(links, key=lambda k: links[k]),
            "bottleneck": str(neck[0]), "lat_us": float(lat[0]), "bw_gbps": float(bw[0]),
            "profile": prof.name, "level": prof.level, "placement": prof.placement,
            "link_layer": prof.link_layer if path in NETWORK_PATHS and w == "verbs" else None}


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
    if path in P2P_PATHS and prof.n_gpus < 2:
        raise Unavailable(f"path {path!r} needs two GPUs and profile {prof.name!r} has {prof.n_gpus}")
    if path == "p2p" and not prof.topology.get("peer_access", True):
        raise Unavailable(f"path 'p2p' is not possible on profile {prof.name!r}: "
                          f"{prof.topology.get('peer_access_reason', 'no peer access between the GPUs')}; "
                          "p2p-staged is")
    return wire


def _resolve(profile: Profile | str, placement: str | None, chunk: float | None, depth: float | None,
             wire: str | None, overrides: dict[str, Any]) -> tuple[Profile, float, float]:
    prof = get_profile(profile, placement=placement, **overrides)
    chunk_b = float(chunk) if chunk is not None else prof.params["chunk_bytes"]
    depth_n = float(depth) if depth is not None else prof.params["depth"]
    if chunk_b < 1:
        raise InvalidArgument(f"chunk must be at least 1 byte, got {chunk}")
    if not 1 <= depth_n <= 1024 or depth_n != int(depth_n):
        raise InvalidArgument(f"depth must be a whole number from 1 to 1024, got {depth}")
    return prof, chunk_b, depth_n


def latency_us(profile: Profile | str, path: str, sizes: Any, *, placement: str | None = None,
               chunk: int | None = None, depth: int | None = None, wire: str | None = None,
               **overrides: float) -> np.ndarray:
    """One-way latency in microseconds of ``path`` at each size (the fast core behind sliders)."""
    prof, c, d = _resolve(profile, placement, chunk, depth, wire, overrides)
    w = check_path(prof, path, wire)
    return evaluate(prof, path, as_sizes(sizes), wire=w, chunk=c, depth=d)[0]


def bandwidth_gbps(profile: Profile | str, path: str, sizes: Any, **kw: Any) -> np.ndarray:
    """Streaming bandwidth in GB/s (1e9 B/s) of ``path`` at each size."""
    prof, c, d = _resolve(profile, kw.pop("placement", None), kw.pop("chunk", None), kw.pop("depth", None),
                          kw.get("wire"), {k: v for k, v in kw.items() if k != "wire"})
    w = check_path(prof, path, kw.get("wire"))
    return evaluate(prof, path, as_sizes(sizes), wire=w, chunk=c, depth=d)[1]


def _provenance(prof: Profile, wire: str, overrides: dict, chunk: float, depth: float) -> dict:
    return provenance.modelled(prof.name, prof.level, placement=prof.placement, wire=wire,
                               overrides=dict(prof.overrides), follows=prof.follows, chunk=int(chunk),
                               depth=int(depth), gdrlab=__version__)


def predict(profile_or_name: Profile | str, path: str, sizes: Any = "8:64M", *, placement: str | None = None,
            chunk: int | None = None, depth: int | None = None, wire: str | None = None,
            **overrides: float) -> pd.DataFrame:
    """Modelled latency and bandwidth of one path: DataFrame with columns path, size, lat_us,
    bw_gbps, and its modelled provenance (:func:`gdrlab.provenance.modelled`) in ``attrs``."""
    import pandas as pd

    prof, c, d = _resolve(profile_or_name, placement, chunk, depth, wire, overrides)
    w = check_path(prof, path, wire)
    s = as_sizes(sizes)
    lat, bw, neck = evaluate_full(prof, path, s, wire=w, chunk=c, depth=d)
    df = pd.DataFrame({"path": path, "size": s.astype(np.int64), "lat_us": lat, "bw_gbps": bw,
                       "bottleneck": neck, "level": prof.level})
    return provenance.attach(df, _provenance(prof, w, overrides, c, d), column=False)


def predict_all(profile_or_name: Profile | str, sizes: Any = "8:64M", paths: Iterable[str] | None = None,
                **kw: Any) -> pd.DataFrame:
    """:func:`predict` for every path the profile can run (or ``paths``), stacked."""
    import pandas as pd

    prof, c, d = _resolve(profile_or_name, kw.pop("placement", None), kw.pop("chunk", None),
                          kw.pop("depth", None), kw.get("wire"), {k: v for k, v in kw.items() if k != "wire"})
    wire = kw.get("wire")
    todo = list(paths) if paths is not None else default_paths(prof, wire)
    s = as_sizes(sizes)
    size_col = s.astype(np.int64)
    frames = []
    for path in todo:
        w = check_path(prof, path, wire if path in NETWORK_PATHS else None)
        lat, bw, neck = evaluate_full(prof, path, s, wire=w, chunk=c, depth=d)
        frames.append(pd.DataFrame({"path": path, "size": size_col, "lat_us": lat, "bw_gbps": bw,
                                    "bottleneck": neck, "level": prof.level}))
    df = pd.concat(frames, ignore_index=True)
    overrides = {k: v for k, v in kw.items() if k != "wire"}
    return provenance.attach(df, _provenance(prof, wire or prof.wire, overrides, c, d), column=False)
