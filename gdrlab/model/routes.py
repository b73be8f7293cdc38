"""Links on each path's route and the cost of each stage.

A path's bytes cross a chain of links: the GPU's PCIe link, the root complex or PCIe switch that
forwards peer traffic, the inter-socket link when GPU and NIC sit on different sockets, the NIC's
PCIe link and the wire. A stage's rate is the slowest link it crosses; :func:`route` names them so
the output can say which one is the bottleneck. Rates are GB/s (bytes per ns), times us.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..vocab import COPY_PATHS, GPU_PATHS
from .params import PLACEMENT_SUFFIX

__all__ = ["route", "rate_of", "ce_rate_gbps", "copy_us", "copy_parts", "memcpy_us", "wire_us",
           "wire_parts", "gdrcopy_us", "p2p_staged_us", "p2p_us"]

XS = "cross-socket"


def _r(gbps: float) -> float:
    return gbps * 1e3  # bytes per microsecond


def ce_rate_gbps(p: dict, direction: str) -> float:
    """Pinned copy-engine rate in one direction: the GPU link times that direction's efficiency."""
    return p["gpu_pcie_gbps"] * (p["ce_eff"] if direction == "h2d" else p["ce_eff_d2h"])


def route(p: dict, path: str, placement: str, wire: str, has_nvlink: bool = True) -> dict[str, float]:
    """Every link the streaming data of ``path`` crosses, with its usable rate in GB/s."""
    xs = placement == XS
    gpu_dma = p["gpu_pcie_gbps"] * p["pcie_eff"]       # a peer's DMA over the GPU's link
    links: dict[str, float] = {}
    if wire == "verbs":
        links["nic-pcie"] = p["nic_pcie_gbps"] * p["pcie_eff"]
        links["wire"] = p["nic_wire_gbps"] * p["wire_eff"]
    else:
        links["tcp"] = p["tcp_gbps"]
    if path in COPY_PATHS:
        links["copy-d2h"] = ce_rate_gbps(p, "d2h")
        links["copy-h2d"] = ce_rate_gbps(p, "h2d")
        if path == "staged":
            links["cpu-memcpy"] = p["cpu_memcpy_gbps"]
    elif path == "gdr":
        sfx = PLACEMENT_SUFFIX[placement]
        links = {"gpu-pcie": gpu_dma, "root-complex-read": p[f"p2p_read_gbps_{sfx}"],
                 "root-complex-write": p[f"p2p_write_gbps_{sfx}"], **links}
    elif path == "gdrcopy":
        f = p["gdrcopy_remote_eff"] if xs else 1.0
        links["bar1-read"] = min(p["gdrcopy_read_gbps"] * f, gpu_dma)
        links["bar1-write"] = min(p["gdrcopy_write_gbps"] * f, gpu_dma)
    elif path == "p2p":
        links = {"peer-link": p["p2p_gbps"] if has_nvlink else min(p["p2p_gbps"], gpu_dma)}
    elif path == "p2p-staged":
        links = {"driver-staging": p["p2p_staged_gbps"], "copy-d2h": ce_rate_gbps(p, "d2h"),
                 "copy-h2d": ce_rate_gbps(p, "h2d")}
    if xs and path in GPU_PATHS:
        links["socket-link"] = p["xsocket_gbps"]
    return links


def rate_of(links: dict[str, float], names: Iterable[str]) -> float:
    """The slowest of the named links that are on the route."""
    return min(links[n] for n in names if n in links)


WIRE_LINKS = ("nic-pcie", "wire", "tcp", "socket-link")


def copy_parts(p: dict, direction: str, s: Any, rate: float | None = None) -> tuple[Any, float]:
    """(occupancy when queued behind other copies, delay until the host sees it) of a pinned copy.

    Synchronous copy = ``ce_launch_<dir>_us + ramp + s / rate``; queued on a stream the copy engine
    is busy ``ce_issue_us + ramp + s / rate`` and the remainder of the launch is a delay."""
    rb = p["ce_ramp_bytes"]
    ramp = p[f"ce_ramp_{direction}_us"] * (s / (s + rb) if rb > 0 else 1.0)
    issue = min(p["ce_issue_us"], p[f"ce_launch_{direction}_us"])
    occ = issue + ramp + s / _r(rate if rate is not None else ce_rate_gbps(p, direction))
    return occ, p[f"ce_launch_{direction}_us"] - issue


def copy_us(p: dict, direction: str, s: Any, memory: str = "pinned", rate: float | None = None) -> Any:
    """A synchronous copy between host and GPU memory (pinned or pageable)."""
    if memory == "pageable":
        # The driver copies pageable memory through its own pinned buffers in chunks: a memcpy of
        # the first chunk before any DMA (fill), then memcpy and DMA overlap at the steady rate.
        fill = np.minimum(s, p["pageable_chunk_bytes"]) / _r(p["cpu_memcpy_gbps"])
        steady = min(p[f"pageable_{direction}_gbps"], ce_rate_gbps(p, direction))
        return p[f"pageable_{direction}_us"] + fill + s / _r(steady)
    occ, delay = copy_parts(p, direction, s, rate)
    return occ + delay


def memcpy_us(p: dict, s: Any) -> Any:
    return p["memcpy_us"] + s / _r(p["cpu_memcpy_gbps"])


def wire_parts(p: dict, s: Any, wire: str, rate: float) -> tuple[Any, float]:
    """(occupancy, flight delay) of one message on the wire at ``rate`` GB/s. Verbs: the post
    (doorbell) and the bytes occupy it, the NIC-to-NIC time and the completion are delay. TCP: the
    system calls and the bytes occupy it, the rest of the one-way latency is delay."""
    if wire == "verbs":
        return p["doorbell_us"] + s / _r(rate), p["nic_lat_us"] + p["completion_us"]
    return p["tcp_msg_us"] + s / _r(rate), max(p["tcp_lat_us"] - p["tcp_msg_us"], 0.0)


def wire_us(p: dict, s: Any, wire: str, rate: float) -> Any:
    occ, delay = wire_parts(p, s, wire, rate)
    return occ + delay


def gdrcopy_us(p: dict, kind: str, s: Any, rate: float, remote: bool) -> Any:
    """A CPU copy through a BAR1 mapping. Reads below 64 B are a chain of uncached 8-byte loads,
    each a PCIe round trip (the small-read floor); larger reads stream at the read rate."""
    fixed = p[f"gdrcopy_{kind}_us"] + (p["xsocket_hop_us"] if remote else 0.0)
    bulk = s / _r(rate)
    if kind == "read":
        loads = np.ceil(np.minimum(s, 64.0) / 8.0) * p["gdrcopy_read_load_us"]
        return fixed + np.maximum(bulk, loads)
    return fixed + bulk


def p2p_us(p: dict, s: Any, rate: float) -> Any:
    return p["p2p_lat_us"] + s / _r(rate)


def p2p_staged_us(p: dict, s: Any, rate: float) -> Any:
    # The driver stages through host memory in chunks: the first chunk's D2H copy is the pipeline
    # fill, then the two copies overlap at the steady rate.
    fill = np.minimum(s, p["p2p_staged_chunk_bytes"]) / _r(ce_rate_gbps(p, "d2h"))
    return p["p2p_staged_lat_us"] + fill + s / _r(rate)
