"""The parameters a profile is made of: name, unit, meaning and physical range.

Every profile carries every parameter below, each with the source it came from. Units are in the
names: ``_us`` microseconds, ``_gbps`` GB/s (1e9 bytes per second), ``_bytes`` bytes. Rates in
GB/s are bytes per nanosecond, so ``size / (gbps * 1e3)`` is microseconds.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import InvalidArgument
from ..vocab import PLACEMENTS

__all__ = ["PARAMS", "Param", "KIND_OF_UNIT", "PLACEMENTS", "LEVELS", "PLACEMENT_SUFFIX", "ALIASES", "param_names",
           "check_value", "resolve_alias", "param_range"]

#: Where a GPU sits relative to the NIC it talks to (nvidia-smi's PIX/PXB, PHB/NODE, SYS).
#: What a profile's latencies include: raw transport calls (verbs) or an MPI library on top.
LEVELS = ("verbs", "MPI")
PLACEMENT_SUFFIX = {"same-switch": "switch", "same-host-bridge": "bridge", "cross-socket": "xsocket"}


class Param(NamedTuple):
    """What a parameter is: its ``unit``, the ``kind`` of physical range it must stay in (rate,
    time, bytes, fraction or count: see :func:`check_value`) and its ``meaning``."""

    unit: str
    kind: str
    meaning: str


#: The kind of range check each unit gets.
KIND_OF_UNIT = {"GB/s": "rate", "us": "time", "bytes": "bytes", "fraction": "fraction", "buffers": "count"}


def _params(table: dict[str, tuple[str, str]]) -> dict[str, Param]:
    return {name: Param(unit, KIND_OF_UNIT[unit], meaning) for name, (unit, meaning) in table.items()}


# name -> (unit, meaning), in the documented order.
PARAMS: dict[str, Param] = _params({
    # PCIe and the copy engine
    "gpu_pcie_gbps": ("GB/s", "GPU's PCIe link, theoretical, per direction"),
    "ce_eff": ("fraction", "share of the GPU link a pinned host-to-device copy reaches"),
    "ce_eff_d2h": ("fraction", "share of the GPU link a pinned device-to-host copy reaches"),
    "ce_issue_us": ("us", "copy-engine time of one copy queued on a stream behind others (launch "
                          "overlapped): what each pipeline chunk pays instead of the synchronous latency"),
    "ce_launch_h2d_us": ("us", "synchronous host-to-device cudaMemcpy of a few bytes"),
    "ce_launch_d2h_us": ("us", "synchronous device-to-host cudaMemcpy of a few bytes"),
    "ce_ramp_h2d_us": ("us", "extra time mid-size H2D copies pay over tiny ones (tiny H2D copies "
                             "travel inside the command stream; larger ones set up a DMA)"),
    "ce_ramp_d2h_us": ("us", "the same for D2H copies"),
    "ce_ramp_bytes": ("bytes", "size at which half of that ramp is paid"),
    "pageable_h2d_us": ("us", "synchronous host-to-device copy of a few bytes from pageable memory"),
    "pageable_d2h_us": ("us", "synchronous device-to-host copy of a few bytes into pageable memory"),
    "pageable_chunk_bytes": ("bytes", "the driver's pinned staging chunk for pageable copies: "
                                      "the first chunk's memcpy is not overlapped (pipeline fill)"),
    "pageable_h2d_gbps": ("GB/s", "host-to-device copy rate from pageable memory"),
    "pageable_d2h_gbps": ("GB/s", "device-to-host copy rate into pageable memory"),
    # host CPU
    "cpu_memcpy_gbps": ("GB/s", "one-thread host memcpy rate"),
    "memcpy_us": ("us", "fixed cost of one host memcpy call"),
    # RDMA NIC (verbs wire)
    "nic_pcie_gbps": ("GB/s", "NIC's PCIe link, theoretical, per direction"),
    "pcie_eff": ("fraction", "share of the NIC's PCIe link its DMA reaches (TLP overhead)"),
    "nic_wire_gbps": ("GB/s", "network data rate of one port (after line coding)"),
    "wire_eff": ("fraction", "share of the data rate left for payload (packet headers, acks)"),
    "nic_lat_us": ("us", "NIC to NIC one-way time of a small RDMA write, host memory both ends"),
    "doorbell_us": ("us", "posting a work request: WQE write + MMIO doorbell"),
    "completion_us": ("us", "noticing the completion: polling the CQ"),
    "gdr_extra_us": ("us", "extra small-message time when the NIC reads/writes GPU memory"),
    "xsocket_hop_us": ("us", "extra latency of crossing the inter-socket link (QPI/UPI)"),
    "xsocket_gbps": ("GB/s", "inter-socket link (QPI/UPI) rate one PCIe flow can use, per direction"),
    "p2p_read_gbps_switch": ("GB/s", "NIC reading GPU memory, both under one PCIe switch"),
    "p2p_read_gbps_bridge": ("GB/s", "NIC reading GPU memory through the CPU's host bridge"),
    "p2p_read_gbps_xsocket": ("GB/s", "NIC reading GPU memory on the other socket"),
    "p2p_write_gbps_switch": ("GB/s", "NIC writing GPU memory, both under one PCIe switch"),
    "p2p_write_gbps_bridge": ("GB/s", "NIC writing GPU memory through the CPU's host bridge"),
    "p2p_write_gbps_xsocket": ("GB/s", "NIC writing GPU memory on the other socket"),
    "sw_overhead_us": ("us", "messaging-layer cost per message (MPI matching, protocol); 0 for raw verbs"),
    # TCP wire
    "tcp_lat_us": ("us", "one-way time of a small message over TCP"),
    "tcp_gbps": ("GB/s", "one TCP stream's rate"),
    "tcp_msg_us": ("us", "per-message CPU cost while streaming over TCP (system calls)"),
    # pipelined staging defaults
    "chunk_bytes": ("bytes", "pipelined staging chunk (MV2_CUDA_BLOCK_SIZE)"),
    "depth": ("buffers", "pipelined staging buffers per side"),
    # BAR1
    "bar1_bytes": ("bytes", "BAR1 aperture of the GPU"),
    "bar1_reserved_bytes": ("bytes", "BAR1 kept by the driver for its own mappings"),
    "gpu_page_bytes": ("bytes", "granularity of GPU memory pinning for peers"),
    # gdrcopy (CPU through a BAR1 mapping)
    "gdrcopy_write_us": ("us", "CPU write of a few bytes into GPU memory through BAR1"),
    "gdrcopy_write_gbps": ("GB/s", "CPU write rate through BAR1 (write-combined)"),
    "gdrcopy_read_us": ("us", "CPU read of a few bytes from GPU memory through BAR1"),
    "gdrcopy_read_gbps": ("GB/s", "CPU read rate through BAR1 (uncached)"),
    "gdrcopy_read_load_us": ("us", "one uncached 8-byte load through BAR1: reads below 64 B are "
                                   "a chain of such loads (the small-read floor)"),
    "gdrcopy_remote_eff": ("fraction", "share of the local gdrcopy rate a CPU on the other "
                                       "socket reaches"),
    # GPU to GPU in one host
    "p2p_lat_us": ("us", "cudaMemcpyPeer of a few bytes, peer access on"),
    "p2p_gbps": ("GB/s", "peer DMA rate between the two GPUs (NVLink or PCIe)"),
    "p2p_staged_lat_us": ("us", "cudaMemcpyPeer of a few bytes, peer access off (through host)"),
    "p2p_staged_gbps": ("GB/s", "steady rate of the driver's staging through host memory"),
    "p2p_staged_chunk_bytes": ("bytes", "the driver's staging chunk (pipeline fill)"),
})

#: What-if ranges that keep every prediction finite: 1 kB/s to 1 PB/s, up to 1000 s, up to 1 PB.
RATE_RANGE = (1e-6, 1e6)
TIME_MAX = 1e9
BYTES_MAX = 1e15

#: Short names that mean "this quantity at the active placement".
ALIASES = {"p2p_read_gbps": "p2p_read_gbps_{}", "p2p_write_gbps": "p2p_write_gbps_{}"}


def param_names() -> list[str]:
    """All parameter names, in the documented order."""
    return list(PARAMS)


def resolve_alias(name: str, placement: str) -> str:
    """``p2p_read_gbps`` -> ``p2p_read_gbps_xsocket`` when the placement is cross-socket."""
    if name in ALIASES:
        return ALIASES[name].format(PLACEMENT_SUFFIX[placement])
    return name


def check_value(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is physically possible for ``name``; raise otherwise."""
    if name not in PARAMS:
        valid = ", ".join(list(PARAMS) + list(ALIASES))
        raise InvalidArgument(f"unknown model parameter {name!r}; valid: {valid}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"parameter {name} must be a number, got {value!r}") from None
    unit, kind = PARAMS[name].unit, PARAMS[name].kind
    if v != v or v in (float("inf"), float("-inf")):
        raise InvalidArgument(f"parameter {name} must be finite, got {value!r}")
    if kind == "rate" and not RATE_RANGE[0] <= v <= RATE_RANGE[1]:
        raise InvalidArgument(f"parameter {name} is a rate and must be between {RATE_RANGE[0]:g} and "
                              f"{RATE_RANGE[1]:g} {unit}, got {v:g}")
    if kind == "time" and not 0 <= v <= TIME_MAX:
        raise InvalidArgument(f"parameter {name} must be between 0 and {TIME_MAX:g} {unit}, got {v:g}")
    if kind == "bytes" and not 0 <= v <= BYTES_MAX:
        raise InvalidArgument(f"parameter {name} must be between 0 and {BYTES_MAX:g} {unit}, got {v:g}")
    if kind == "fraction" and not 0 < v <= 1:
        raise InvalidArgument(f"parameter {name} is a fraction and must be in (0, 1], got {v}")
    if kind == "count" and (v < 1 or v > 1024 or v != int(v)):
        raise InvalidArgument(f"parameter {name} must be a whole number >= 1, got {v}")
    if name in ("chunk_bytes", "gpu_page_bytes", "p2p_staged_chunk_bytes") and v < 1:
        raise InvalidArgument(f"parameter {name} must be at least 1 byte, got {v}")
    return v


def param_range(name: str, value: float) -> tuple[float, float]:
    """A what-if range for a slider on ``name`` around ``value`` that stays physically possible:
    rates, times and sizes from a tenth to ten times the value (0 to 10 us for a zero time),
    fractions up to 1, buffer counts 1 to 16."""
    if name not in PARAMS:
        check_value(name, value)  # raises the error that lists the valid names
    kind = PARAMS[name].kind
    if kind == "fraction":
        return (max(0.01, value / 10), 1.0)
    if kind == "count":
        return (1.0, 16.0)
    if value <= 0:
        return (0.0, 10.0 if kind == "time" else 1.0)
    return (value / 10, value * 10)
