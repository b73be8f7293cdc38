"""What the lines of an ``NCCL_DEBUG=INFO`` log mean: the reasons :func:`gdrlab.nccl.log.parse_log`
lists (environment variables, warnings, network and GDR decisions) and the names of NCCL's path types
by version, from :mod:`gdrlab.nccl.versions`."""
from __future__ import annotations

import re

from ..errors import InvalidArgument
from . import versions

__all__ = ["path_type_name", "Reasons", "add_reason", "gdr_reasons", "version_tuple", "MAX_DIGITS",
           "ENV_MEANING", "REASONS", "NETWORK_MEANING", "PATH_TYPES"]

# A field longer than this is no number NCCL prints (64-bit counters have 20 digits); it is
# refused before int(), which Python refuses beyond 4,300 digits, and the line is read as any
# other line that does not match: skipped (a prefix without its device, a fact left out).
MAX_DIGITS = 20

ENV_MEANING = {
    "NCCL_P2P_DISABLE": "P2P transport (peer DMA over NVLink or PCIe) switched off: GPUs of one node use "
                        "shared host memory or the network instead",
    "NCCL_SHM_DISABLE": "shared-memory transport switched off: GPUs of one node talk through the network",
    "NCCL_IB_DISABLE": "InfiniBand/RoCE transport switched off: the network is TCP sockets",
    "NCCL_NVLS_ENABLE": "NVLink SHARP (multicast) collectives: 0 is off",
    "NCCL_NET_GDR_LEVEL": "how close a GPU and NIC must be for GPUDirect RDMA",
}
# (pattern on the message, meaning); {0}, {1}... are the pattern's groups
REASONS = [
    (re.compile(r"NET/IB : No device found"),
     "no InfiniBand/RoCE device: NCCL cannot use its IB network, so no GPUDirect RDMA"),
    (re.compile(r"Failed to initialize NET plugin IB"),
     "the IB network plugin did not start; NCCL falls back to sockets"),
    (re.compile(r"dlvsym failed on (mlx5dv_reg_dmabuf_mr)"),
     "this rdma-core's libmlx5 has no {0}: no dma-buf registration through mlx5 direct verbs"),
    (re.compile(r"P2P is disabled between connected GPUs (\d+) and (\d+)"),
     "peer access impossible between GPUs {0} and {1}: no P2P transport between them"),
]
NETWORK_MEANING = "network transport for traffic between nodes (and within a node when P2P and SHM are off): {0}"
PATH_TYPES = {"NVL": "by NVLink", "NVB": "by NVLink through another GPU", "PIX": "through one PCIe switch",
               "PXB": "through several PCIe switches", "PXN": "through another GPU's PCIe switch",
               "PHB": "through the CPU's PCIe host bridge", "SYS": "across CPU sockets"}


class Reasons(dict):
    """message -> reason entry (``{"message", "meaning", "source", "ranks"}``), with the ranks of
    each entry also in a set beside its list, so that adding one is O(1) however many logged it."""

    def __init__(self) -> None:
        super().__init__()
        self.ranks_seen: dict[str, set[int]] = {}


def add_reason(reasons: Reasons, msg: str, meaning: str, who: int | None, source: str = "net") -> None:
    entry = reasons.get(msg)
    if entry is None:
        entry = reasons[msg] = {"message": msg, "meaning": meaning, "source": source, "ranks": []}
        reasons.ranks_seen[msg] = set()
    seen = reasons.ranks_seen[msg]
    if who is not None and who not in seen:
        seen.add(who)
        entry["ranks"].append(who)


def version_tuple(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of ``2.19.3+cuda12.2``; None when absent or unreadable."""
    parts = (version or "").split("+", 1)[0].split(".")
    if len(parts) < 2 or not all(p.isdecimal() and len(p) <= MAX_DIGITS for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def path_type_name(number: int, version: str | None) -> str | None:
    """The name of NCCL's path type ``number`` (the ``distance`` of its GPU Direct RDMA lines) in
    NCCL ``version`` (``"2.19.3"``, ``"2.28.9+cuda13.0"``), from :mod:`gdrlab.nccl.versions`; None
    when the version is unknown, outside 2.12-2.30 or the number is out of range. The numbering
    changed in 2.18 (NET), 2.26 (C2C inserted as 3) and 2.27 (P2C)."""
    v = version_tuple(version)
    if v is None or not (versions.OLDEST[:2] <= v <= versions.NEWEST[:2]):
        return None
    try:
        names = versions.path_types(version)
    except InvalidArgument:
        return None
    return names[number] if 0 <= number < len(names) else None


def _numbering(version: str) -> str:
    names = versions.path_types(version)
    return ", ".join(f"{n} {names.index(n)}" for n in ("PIX", "PXB", "PHB", "SYS"))


def _default_level(version: str | None) -> str:
    """NCCL_NET_GDR_LEVEL's default as the log's version sets it, from the version table."""
    try:
        level, why = versions.default_gdr_level(version) if version_tuple(version) else (None, "")
    except InvalidArgument:
        level = None
    if level is None:
        return "default PXB (P2C from NCCL 2.29 with NCCL_NET_GDR_C2C=1, which admits the same PCIe paths)"
    return f"default {level} in this log's NCCL ({why})"


def gdr_reasons(out: dict, reasons: Reasons) -> None:
    """One reason per distinct GDR line, with the path types named when the log's version allows."""
    for g in out["gdr"]:
        d, lim = path_type_name(g["distance"], out["version"]), path_type_name(g["limit"], out["version"])
        g["distance_type"], g["limit_type"] = d, lim
        named = (f" ({d} {g['op']} {lim})" if d and lim else
                 " (path type numbers, whose names depend on the NCCL version and this log's version does not "
                 f"settle: NCCL 2.12 to 2.25 number {_numbering('2.25')}; 2.26 {_numbering('2.26')}; "
                 f"2.27.5 and later {_numbering('2.30')})")
        verdict = "uses GPUDirect RDMA" if g["enabled"] else "does not use GPUDirect RDMA (it stages through host memory)"
        add_reason(reasons, g["message"], f"topology decision: NCCL {verdict} between GPU {g['gpu']} and HCA "
                    f"{g['hca']}, path type {g['distance']} {g['op']} limit {g['limit']}{named}; the limit is "
                    f"NCCL_NET_GDR_LEVEL, {_default_level(out['version'])}", g["rank"])
    for h in out["gdr_hca"]:
        if h["transport"] == "NET/Socket":
            meaning = (f"not a topology decision: the socket transport cannot do GPUDirect RDMA at all, so it "
                       f"says Disabled for every NIC ({h['name']})")
        elif h["enabled"]:
            meaning = (f"{h['transport'] or 'the network'} can register GPU memory with NIC {h['name']} (a peer-memory "
                       "module or dma-buf); whether a given GPU uses it is the per-GPU distance decision")
        else:
            meaning = (f"{h['transport'] or 'the network'} cannot register GPU memory with NIC {h['name']} (no "
                       "peer-memory module and no dma-buf): data to or from GPUs is staged through host memory")
        add_reason(reasons, h["message"], meaning, h["rank"])
