"""NCCL's GPUDirect RDMA rule and log format, version by version (2.12 to 2.30), read from NCCL's
own source at each release tag (https://github.com/NVIDIA/nccl).

Every fact is a list of change points ``(first version, value, source)``: the value holds from that
version until the next change point. ``source`` names the file and the tag it was read at. Both
:mod:`gdrlab.topology` (NCCL's GDR decision for a GPU/NIC pair) and :mod:`gdrlab.nccl.reasons` (the
names of the path types a log prints as numbers) read this table; nothing else types these facts.

Use :func:`facts` for one version (``facts("2.28.9")``), :func:`path_types` for the numbering,
:func:`default_gdr_level`, :func:`send_side_gdr` for the sending side's extra rule, and
:data:`NEWEST` for the version a caller gets when it names none.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..errors import InvalidArgument

__all__ = ["OLDEST", "NEWEST", "TABLE", "parse_version", "facts", "path_types", "path_rank",
           "default_gdr_level", "send_side_gdr", "known_versions", "format_version"]

Version = tuple[int, int, int]

OLDEST: Version = (2, 12, 7)
NEWEST: Version = (2, 30, 7)

_REPO = "NVIDIA/nccl"


def _src(path: str, tag: str) -> str:
    return f"{_REPO} {path} @ {tag}"


# The path types by number (``#define PATH_X n``). 2.12-2.17 define no PATH_NET (PATH_DIS shares
# 7 with PATH_SYS); 2.18 adds NET 8; 2.26 inserts C2C as 3; 2.27.3 adds P2C after PXN; 2.27.5
# moves P2C before PXN. From 2.30 the defines live in src/include/graph.h.
_PATHS_2_12 = ("LOC", "NVL", "NVB", "PIX", "PXB", "PXN", "PHB", "SYS")
_PATHS_2_18 = _PATHS_2_12 + ("NET",)
_PATHS_2_26 = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "PHB", "SYS", "NET")
_PATHS_2_27_3 = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "P2C", "PHB", "SYS", "NET")
_PATHS_2_27_5 = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET")

TABLE: dict[str, list[tuple[Version, Any, str]]] = {
    "path_types": [
        ((2, 12, 7), _PATHS_2_12, _src("src/graph/topo.h", "v2.12.7-1")),
        ((2, 18, 1), _PATHS_2_18, _src("src/graph/topo.h", "v2.18.1-1")),
        ((2, 26, 2), _PATHS_2_26, _src("src/graph/topo.h", "v2.26.2-1")),
        ((2, 27, 3), _PATHS_2_27_3, _src("src/graph/topo.h", "v2.27.3-1")),
        ((2, 27, 5), _PATHS_2_27_5, _src("src/graph/topo.h", "v2.27.5-1")),
        ((2, 30, 3), _PATHS_2_27_5, _src("src/include/graph.h", "v2.30.3-1")),
    ],
    # NCCL_NET_GDR_C2C's default (NCCL_PARAM(NetGdrC2c, ...)); None: the variable does not exist
    "net_gdr_c2c_default": [
        ((2, 12, 7), None, _src("src/graph/paths.cc", "v2.12.7-1")),
        ((2, 26, 2), 0, _src("src/graph/paths.cc", "v2.26.2-1")),
        ((2, 27, 3), 1, _src("src/graph/paths.cc", "v2.27.3-1")),
    ],
    # NCCL_NET_GDR_LEVEL's default in ncclTopoCheckGdr: one level, or (with C2C on, with C2C off)
    "default_gdr_level": [
        ((2, 12, 7), ("PXB", "PXB"), _src("src/graph/paths.cc", "v2.12.7-1")),
        ((2, 29, 2), ("P2C", "PXB"), _src("src/graph/paths.cc", "v2.29.2-1")),
    ],
    # What NCCL_NET_GDR_C2C=1 does to a GPU whose NIC hangs off the CPU it reaches by C2C
    "c2c_rule": [
        ((2, 12, 7), "none", _src("src/graph/paths.cc", "v2.12.7-1")),
        ((2, 26, 2), "PHB path of a GPU whose CPU is reached by C2C counts as C2C",
         _src("src/graph/paths.cc", "v2.26.2-1")),
        ((2, 27, 3), "P2C path counts as C2C", _src("src/graph/paths.cc", "v2.27.3-1")),
        ((2, 29, 2), "the default level becomes P2C", _src("src/graph/paths.cc", "v2.29.2-1")),
    ],
    # NCCL_NET_GDR_READ unset (its default -2): which GPUs send (read) through GDR.
    # "nvlink": only a GPU with an NVLink to another GPU, or the only GPU; "pre-ampere-nvlink": that
    # condition for compute capability < 8.0 only, Ampere and newer always.
    "send_read_rule": [
        ((2, 12, 7), "nvlink", _src("src/graph/paths.cc", "v2.12.7-1")),
        ((2, 19, 1), "pre-ampere-nvlink", _src("src/graph/paths.cc", "v2.19.1-1")),
    ],
    # The per-pair line "GPU Direct RDMA Enabled|Disabled for ...": (log level, subsystems that print
    # it, format). TRACE lines exist only in builds compiled with ENABLE_TRACE (src/include/debug.h).
    "gdr_pair_line": [
        ((2, 12, 7), ("INFO", ("NET",), "GPU {busId:x} / HCA {netDev:d}"),
         _src("src/graph/paths.cc", "v2.12.7-1")),
        ((2, 21, 5), ("INFO", ("NET",), "GPU {busId:x} / HCA {netId:x}"),
         _src("src/graph/paths.cc", "v2.21.5-1")),
        ((2, 24, 3), ("INFO", ("NET",), "GPU {rank:d} / HCA {netId:x}"),
         _src("src/graph/paths.cc", "v2.24.3-1")),
        ((2, 27, 3), ("INFO", ("GRAPH", "NET"), "GPU {rank:d} / HCA {netId:x}"),
         _src("src/graph/paths.cc", "v2.27.3-1")),
        ((2, 29, 2), ("INFO", ("GRAPH", "NET"), "GPU/{sys}-{id} (rank {rank}) - NET/{sys}-{id}"),
         _src("src/graph/paths.cc", "v2.29.2-1")),
        ((2, 30, 3), ("TRACE", ("GRAPH", "NET"), "GPU/{sys}-{id} (rank {rank}) - NET/{sys}-{id}"),
         _src("src/graph/paths.cc", "v2.30.3-1")),
    ],
    # NCCL_DEBUG_SUBSYS when unset (the default debug mask)
    "debug_subsys_default": [
        ((2, 12, 7), ("INIT",), _src("src/debug.cc", "v2.12.7-1")),
        ((2, 16, 2), ("INIT", "ENV"), _src("src/debug.cc", "v2.16.2-1")),
        ((2, 23, 4), ("INIT", "BOOTSTRAP", "ENV"), _src("src/debug.cc", "v2.23.4-1")),
    ],
    # GPU-Initiated Networking: the line naming the communicator's GIN backend (None: no GIN, as in
    # 2.28.3, whose tree has no src/gin), and whether an "Assigned RMA plugin" line follows it
    "gin_assign_line": [
        ((2, 12, 7), None, _src("src/plugin/net.cc", "v2.12.7-1")),
        ((2, 28, 7), ("Assigned GIN plugin {name} to comm", False), _src("src/plugin/net.cc", "v2.28.7-1")),
        ((2, 29, 2), ("Assigned GIN plugin {name} to comm", True), _src("src/plugin/net.cc", "v2.29.2-1")),
        ((2, 30, 3), ("Assigned GIN plugin {name} to comm", True), _src("src/plugin/gin.cc", "v2.30.3-1")),
        ((2, 30, 7), ("GIN/Plugin: Assigned plugin {name} type {type} to comm", False),
         _src("src/plugin/gin.cc", "v2.30.7-1")),
    ],
    # NCCL_IB_TIMEOUT's default (NCCL_PARAM(IbTimeout, "IB_TIMEOUT", n))
    "ib_timeout_default": [
        ((2, 12, 7), 14, _src("src/transport/net_ib.cc", "v2.12.7-1")),
        ((2, 14, 3), 18, _src("src/transport/net_ib.cc", "v2.14.3-1")),
        ((2, 23, 4), 20, _src("src/transport/net_ib.cc", "v2.23.4-1")),
        ((2, 29, 2), 20, _src("src/transport/net_ib/connect.cc", "v2.29.2-1")),
    ],
}

# The releases the table was read at (every tag from 2.12 to 2.30).
_TAGS = ("2.12.7 2.12.10 2.12.12 2.13.4 2.14.3 2.15.1 2.15.5 2.16.2 2.16.5 2.17.1 2.18.1 2.18.3 2.18.5 "
         "2.18.6 2.19.1 2.19.3 2.19.4 2.20.3 2.20.5 2.21.5 2.22.3 2.23.4 2.24.3 2.25.1 2.26.2 2.26.3 "
         "2.26.5 2.26.6 2.27.3 2.27.5 2.27.6 2.27.7 2.28.3 2.28.7 2.28.9 2.29.2 2.29.3 2.29.7 2.30.3 "
         "2.30.4 2.30.7")


@lru_cache(maxsize=256)
def known_versions() -> list[Version]:
    """Every NCCL release from 2.12 to 2.30 the table was checked against."""
    return [tuple(int(p) for p in t.split(".")) for t in _TAGS.split()]  # type: ignore[misc]


def format_version(v: Version) -> str:
    return ".".join(str(p) for p in v)


@lru_cache(maxsize=256)
def parse_version(text: Any) -> Version:
    """``"2.28.9+cuda13.0"``, ``"2.28.9"``, ``"v2.28.9-1"`` or ``"2.28"`` as (2, 28, 9); a minor
    version alone means its last release the table knows (2.27 is 2.27.7). Outside 2.12-2.30, or
    unreadable: :class:`InvalidArgument` in one line."""
    if isinstance(text, tuple):
        text = ".".join(str(p) for p in text)
    raw = str(text).strip()
    core = raw.removeprefix("v").split("+", 1)[0].split("-", 1)[0]
    parts = core.split(".")
    if not (2 <= len(parts) <= 3 and all(p.isdecimal() and len(p) <= 4 for p in parts)):
        raise InvalidArgument(f"NCCL version {raw[:40]!r} is not a version like 2.28.9")
    nums = tuple(int(p) for p in parts)
    if len(nums) == 2:
        same = [v for v in known_versions() if v[:2] == nums]
        if not same:
            raise InvalidArgument(f"NCCL {raw[:40]} is outside the versions this table covers "
                                  f"({format_version(OLDEST)[:4]} to {format_version(NEWEST)[:4]})")
        return same[-1]
    v: Version = nums  # type: ignore[assignment]
    if not (OLDEST[:2] <= v[:2] <= NEWEST[:2]):
        raise InvalidArgument(f"NCCL {raw[:40]} is outside the versions this table covers "
                              f"({format_version(OLDEST)[:4]} to {format_version(NEWEST)[:4]})")
    return v


def _at(name: str, v: Version) -> tuple[Any, str]:
    value, source = None, ""
    for since, val, src in TABLE[name]:
        if v >= since:
            value, source = val, src
    if not source:  # 2.12.0-2.12.6: read as 2.12.7
        _, value, source = TABLE[name][0]
    return value, source


def facts(version: Any = None) -> dict:
    """Every fact of the table for one NCCL version (default :data:`NEWEST`), each with its source:
    ``{"version", "path_types", "net_gdr_c2c_default", "default_gdr_level", "c2c_rule",
    "send_read_rule", "gdr_pair_line", "debug_subsys_default", "ib_timeout_default", "sources"}``."""
    v = NEWEST if version is None else parse_version(version)
    out: dict = {"version": format_version(v), "sources": {}}
    for name in TABLE:
        out[name], out["sources"][name] = _at(name, v)
    level, subsys, fmt = out["gdr_pair_line"]
    out["gdr_pair_line"] = {"level": level, "subsys": list(subsys), "format": fmt}
    c2c_on, c2c_off = out["default_gdr_level"]
    out["default_gdr_level"] = {"c2c_on": c2c_on, "c2c_off": c2c_off}
    return out


@lru_cache(maxsize=256)
def path_types(version: Any = None) -> tuple[str, ...]:
    """NCCL's path types in the order of their numbers in ``version`` (default :data:`NEWEST`)."""
    return _at("path_types", NEWEST if version is None else parse_version(version))[0]


def path_rank(name: str, version: Any = None) -> int:
    """The number ``version`` gives the path type ``name``; InvalidArgument when it has none."""
    names = path_types(version)
    if name not in names:
        raise InvalidArgument(f"NCCL {format_version(parse_version(version or NEWEST))} has no path type "
                              f"{name} (it has {', '.join(names)})")
    return names.index(name)


@lru_cache(maxsize=256)
def default_gdr_level(version: Any = None, gdr_c2c: bool | None = None) -> tuple[str, str]:
    """(level, why) of NCCL_NET_GDR_LEVEL when unset, given NCCL_NET_GDR_C2C (None: its default)."""
    v = NEWEST if version is None else parse_version(version)
    (on, off), _ = _at("default_gdr_level", v)
    c2c_default, _ = _at("net_gdr_c2c_default", v)
    c2c = bool(c2c_default) if gdr_c2c is None else bool(gdr_c2c)
    level = on if c2c else off
    if on == off:
        return level, f"NCCL {format_version(v)}'s default level {level}"
    state = f"NCCL_NET_GDR_C2C={int(c2c)}" + (", its default" if gdr_c2c is None else "")
    return level, f"NCCL {format_version(v)}'s default level {level} ({state})"


@lru_cache(maxsize=256)
def send_side_gdr(version: Any = None, compute_capability: int | None = None,
                  nvlink: bool | None = None, gdr_read: int | None = None) -> tuple[bool | None, str]:
    """Whether the sending side may read GPU memory through GDR (NCCL_NET_GDR_READ's rule), before
    the distance rule: (True/False, or None when an unknown input decides it, and why).

    ``compute_capability`` as 70, 80, 90 (major*10+minor); ``nvlink``: the GPU has an NVLink to
    another GPU, or is the only GPU of the node; ``gdr_read``: NCCL_NET_GDR_READ (None: unset)."""
    v = NEWEST if version is None else parse_version(version)
    rule, _ = _at("send_read_rule", v)
    if gdr_read is not None and gdr_read >= 0:
        return (gdr_read != 0, f"NCCL_NET_GDR_READ={gdr_read} "
                + ("allows GDR on the sending side" if gdr_read else "keeps the sending side off GDR"))
    if rule == "pre-ampere-nvlink" and compute_capability is not None and compute_capability >= 80:
        return True, "an Ampere or newer GPU sends through GDR (NCCL 2.19 and later)"
    if nvlink is True:
        return True, "the GPU has an NVLink to another GPU (or is the only GPU), so it sends through GDR"
    older = "any GPU" if rule == "nvlink" else "a GPU older than Ampere"
    if nvlink is False and (rule == "nvlink" or compute_capability is not None):
        return False, (f"{older} without an NVLink to another GPU sends through host memory "
                       f"(NCCL_NET_GDR_READ unset, NCCL {format_version(v)})")
    unknown = "whether it has an NVLink peer" if nvlink is None else "its compute capability"
    return None, (f"{older} without an NVLink to another GPU sends through host memory in NCCL "
                  f"{format_version(v)}; {unknown} is not known here")
