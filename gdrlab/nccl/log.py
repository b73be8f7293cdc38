"""Reading ``NCCL_DEBUG=INFO`` logs: the transport NCCL chose for each connection and why; the
recorded logs shipped with gdrlab; nccl-tests' bandwidth definitions for all-reduce. What each
line means (the reasons listed, the names of NCCL's path types) is in :mod:`gdrlab.nccl.reasons`."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from .. import provenance
from ..errors import InvalidArgument
from . import plugins, versions
from .reasons import (
    ENV_MEANING,
    MAX_DIGITS,
    NETWORK_MEANING,
    PATH_TYPES,
    REASONS,
    Reasons,
    add_reason,
    gdr_reasons,
    path_type_name,
)

__all__ = ["classify_via", "parse_log", "explain", "recorded_logs", "recorded_summary", "published_logs",
           "path_type_name", "plugin_logs", "bus_bandwidth", "format_result_line", "PATH_TYPES_2_12", "PATH_TYPES_2_26"]

_DATA = Path(__file__).resolve().parent.parent / "data" / "nccl"
_PUBLISHED = _DATA / "published"
_RECORDED_ORDER = ("default", "p2p_off", "p2p_shm_off")
_RECORDED_PROVENANCE = provenance.recorded(
    "2x NVIDIA H200, NVLink NV18 (KVM guest, no RDMA device)", "2026-11",
    software="NCCL 2.28.9+cuda13.0 through PyTorch torch.distributed, 2 ranks")

# Every pattern below runs in time linear in the line: each is anchored (``match`` at the start of
# the message, or led by a literal that cannot recur inside what follows it), and every quantifier
# is followed by a character its class excludes, so a failed attempt gives back at most one run
# and is never retried from a later start inside that run. Open-ended tails ("via X", "Using
# network X") are cut with string methods, not lazy quantifiers.
_LEVEL = re.compile(r"NCCL (INFO|WARN|TRACE) ")
_VIA = re.compile(r"Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : "
                  r"(?P<src>\d+)\[[0-9a-fA-Fx]+\] -> (?P<dst>\d+)\[[0-9a-fA-Fx]+\]"
                  r"(?: \[(?P<dir>send|receive)\])? via ")
_VERSION = re.compile(r"NCCL version (\S+)")
_DRIVER = re.compile(r"cudaDriverVersion (\d+)")
_RANK = re.compile(r"ncclCommInitRank\w* comm (?P<comm>\S+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) "
                   r"cudaDev (?P<dev>\d+)"
                   r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)")
_NODES = re.compile(r"comm \S+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)")
_ENV = re.compile(r"(NCCL_\w+) set by environment to ")
_RINGS = re.compile(r"Connected all rings, use ring PXN (\d+) GDR (\d+)")
_NETWORK = "Using network "
# NCCL's GDR lines (src/graph/topo.cc and src/graph/paths.cc), matched at the literal that starts them:
# "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'": can this transport hand GPU memory to the NIC;
# "GPU Direct RDMA Disabled for GPU ca000 / HCA 0 (distance 7 > 4)": the topology decision for one pair.
_GDR = "GPU Direct RDMA "
_GDR_HCA = re.compile(r"GPU Direct RDMA (?:\(\w{1,16}\) )?(Enabled|Disabled|enabled|disabled) for HCA (\d{1,4}) '([^']{1,64})'")
_GDR_PAIR = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for GPU ([0-9a-fA-F]{1,16}) / HCA ([0-9a-fA-F]{1,16}) "
                       r"\(distance (\d{1,3}) ([<>]=?) (\d{1,3})\)")
# From NCCL 2.29: "GPU Direct RDMA Disabled for GPU/0-1 (rank 0) - NET/0-0 (distance 9 > 6)", with
# " using PXN via GPU/S-I," inside the parentheses when a PXN proxy GPU decides (src/graph/paths.cc).
_GDR_PAIR_229 = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for GPU/(\d{1,20})-(\d{1,20}) \(rank (\d{1,9})\) - "
                           r"NET/(\d{1,20})-(\d{1,20}) \((?: using PXN via GPU/\d{1,20}-\d{1,20}, )?"
                           r"distance (\d{1,3}) ([<>]=?) (\d{1,3})")
# NCCL's path types by number (src/graph/topo.h), from the version table: 2.12 and 2.26 (C2C as 3).
PATH_TYPES_2_12 = versions.path_types("2.12")
PATH_TYPES_2_26 = versions.path_types("2.26")
_TOPO_PATH = re.compile(r"(GPU/[\w-]+) :")
_TOPO_HOP = re.compile(r"(GPU/[\w-]+) \((\d+)/([\d.]+)/(\w+)\)")
_GRAPH = re.compile(r"Pattern (\d+), crossNic (\d+), nChannels (\d+), bw ([\d.]+)/([\d.]+), type (\w+)/(\w+)")
_RESULT = re.compile(r"\s*(?P<op>[a-z_]+)\s+(?P<size>\d+) B\s+(?P<time>[\d.]+) us\s+algbw\s+(?P<alg>[\d.]+) GB/s"
                     r"\s+busbw\s+(?P<bus>[\d.]+) GB/s")



def classify_via(via: str) -> dict:
    """What a ``via ...`` string means: ``{"kind", "transport", "gdr", "read"}``.

    ``kind`` is P2P, SHM, NET (or another first word); ``transport`` a short label:
    ``P2P/CUMEM``, ``P2P/IPC``, ``P2P/direct`` (``direct pointer``, same process),
    ``SHM/direct/direct``, ``NET/IB``, ``NET/IB/GDRDMA``, ``NET/Socket``; ``gdr`` is True or
    False for the network (whether the NIC moves GPU memory directly), None otherwise; ``net_dev``
    the network device's index in NCCL's list (the ``5`` of ``NET/IB/5/GDRDMA``), else None.
    """
    parts = [p.strip() for p in via.strip().split("/")]
    kind = parts[0].upper()
    out: dict = {"kind": kind, "transport": kind, "gdr": None, "read": False, "net_dev": None}
    if kind == "P2P" and len(parts) > 1:
        out["transport"] = "P2P/" + parts[1].split()[0]  # "direct pointer" -> "direct"
        out["read"] = "read" in parts[2:]
    elif kind == "SHM":
        out["transport"] = "/".join(parts[:3])
    elif kind in ("NET", "COLLNET") and len(parts) > 1:
        out["gdr"] = any(p.startswith("GDRDMA") for p in parts)
        out["net_dev"] = int(parts[2]) if len(parts) > 2 and parts[2].isdecimal() and len(parts[2]) < 6 else None
        out["transport"] = f"{kind}/{parts[1]}" + ("/GDRDMA" if out["gdr"] else "")
    return out


_HOST_RUN = re.compile(r"[^\s:]*")
_MAX_FLOAT_CHARS = 40


def _prefix(before: str) -> tuple[str, int | None]:
    """(host, cuda device) from the ``host:pid:tid [dev] `` that ends the text before ``NCCL INFO``;
    ("", None) when it is absent. String methods only: a 10 MB token costs one pass."""
    if not before.endswith("] "):
        return "", None
    ids, bracket, dev = before[:-2].rpartition(" [")
    rest, colon1, tid = ids.rpartition(":")
    rest, colon2, pid = rest.rpartition(":")
    run = _HOST_RUN.match(rest[::-1])  # always matches, maybe empty
    host = run[0][::-1] if run else ""  # the run without whitespace or ':' ending ``rest``
    if not (bracket and colon1 and colon2 and host and dev.isdecimal() and len(dev) <= MAX_DIGITS
            and tid.isdecimal() and pid.isdecimal()):
        return "", None
    return host, int(dev)


def _messages(text: str) -> Iterable[tuple[int | None, str, str, str]]:
    """(rank or cuda device, level, message, host) for every NCCL line."""
    for line in text.splitlines():
        m = _LEVEL.search(line)
        if m:
            host, dev = _prefix(line[:m.start()])
            yield dev, m[1], line[m.end():].rstrip(), host


def _env_value(rest: str) -> str | None:
    """The value in ``NCCL_X set by environment to VALUE.``: one token, one trailing dot dropped."""
    if not rest or rest.split(None, 1)[0] != rest:
        return None
    return rest[:-1] if rest.endswith(".") and len(rest) > 1 else rest


_SOURCES = ("env", "topology", "net", "plugin", "warning")





def _fits(*fields: str | None) -> bool:
    """True when every field present (``\\d+``) is short enough to be a number NCCL prints."""
    return all(f is None or len(f) <= MAX_DIGITS for f in fields)


def _int(text: str) -> int | None:
    return int(text) if _fits(text) else None


def _float(text: str) -> float | None:
    """``[\\d.]+`` as a float; None for ``1.2.3``, ``.`` or a run too long to be a number."""
    if len(text) > _MAX_FLOAT_CHARS:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _read_fact(out: dict, ranks: dict, reasons: Reasons, body: str, who: int | None, host: str,
               graphs_seen: set[tuple]) -> None:
    """One message that is not a connection line: header facts, environment, graphs, paths."""
    if out["version"] is None and (m := _VERSION.match(body)):
        out["version"] = m[1]
    elif out["cuda_driver_version"] is None and (m := _DRIVER.match(body)):
        out["cuda_driver_version"] = _int(m[1])
    elif (m := _RANK.match(body)):
        if not _fits(m["rank"], m["nranks"], m["dev"], m["nvml"]):
            return
        r = int(m["rank"])
        ranks.setdefault(r, {"rank": r, "nranks": int(m["nranks"]), "cuda_dev": int(m["dev"]),
                             "nvml_dev": None if m["nvml"] is None else int(m["nvml"]), "bus_id": m["bus"],
                             "host": host})
        out["nranks"] = int(m["nranks"])
    elif (m := _NODES.match(body)):
        if (nnodes := _int(m[3])) is not None:
            out["nnodes"] = nnodes
    elif (m := _ENV.match(body)) and (value := _env_value(body[m.end():])) is not None:
        out["env"][m[1]] = value
        add_reason(reasons, f"{m[1]}={value}", ENV_MEANING.get(m[1], "set in the environment"), who, "env")
    elif (m := _RINGS.match(body)):
        if _fits(m[1], m[2]):
            out["ring_flags"] = {"PXN": int(m[1]), "GDR": int(m[2])}
    elif (m := _GRAPH.match(body)):
        bw_intra, bw_inter = _float(m[4]), _float(m[5])
        if not _fits(m[1], m[2], m[3]) or bw_intra is None or bw_inter is None:
            return
        graph = {"pattern": int(m[1]), "cross_nic": int(m[2]), "nchannels": int(m[3]), "bw_intra": bw_intra,
                 "bw_inter": bw_inter, "type_intra": m[6], "type_inter": m[7]}
        key = tuple(graph.values())
        if key not in graphs_seen:  # the set holds what the list holds: the list keeps the order
            graphs_seen.add(key)
            out["graphs"].append(graph)
    elif (m := _TOPO_PATH.match(body)):
        for dst, _hops, bw, kind in _TOPO_HOP.findall(body, m.end()):
            if dst != m[1] and (gbps := _float(bw)) is not None:
                out["topology"][f"{m[1]}->{dst}"] = {"type": kind, "bw_gbps": gbps}





def _read_gdr(out: dict, msg: str, who: int | None) -> bool:
    """A ``GPU Direct RDMA ...`` line into ``out["gdr"]`` (per GPU/NIC pair) or ``out["gdr_hca"]``
    (per NIC and transport); True when the line was one of them."""
    at = msg.find(_GDR)
    if at < 0:
        return False
    before = msg[:at].rstrip()
    words = before[:-1].split() if before.endswith(":") else []
    transport = words[-1] if words and len(words[-1]) <= 32 else ""
    if (m := _GDR_PAIR.match(msg, at)):
        out["gdr"].append({"rank": who, "gpu": m[2], "hca": m[3], "enabled": m[1] == "Enabled",
                           "distance": int(m[4]), "op": m[5], "limit": int(m[6]), "message": m[0]})
        return True
    if (m := _GDR_PAIR_229.match(msg, at)):
        end = msg.find(")", m.end())
        out["gdr"].append({"rank": who, "gpu": f"GPU/{m[2]}-{m[3]} (rank {m[4]})", "hca": f"NET/{m[5]}-{m[6]}",
                           "enabled": m[1] == "Enabled", "distance": int(m[7]), "op": m[8], "limit": int(m[9]),
                           "message": msg[at:end + 1 if end >= 0 else len(msg)].strip()})
        return True
    if (m := _GDR_HCA.match(msg, at)):
        out["gdr_hca"].append({"rank": who, "transport": transport or None, "hca": int(m[2]), "name": m[3],
                               "enabled": m[1].lower() == "enabled",
                               "message": f"{transport} : {m[0]}" if transport else m[0]})
        return True
    return False





def parse_log(text: str) -> dict:
    """Read an ``NCCL_DEBUG=INFO`` log (any number of ranks, interleaved or not).

    Returns ``{"version", "cuda_driver_version", "nranks", "nnodes", "ranks", "connections",
    "env", "network", "ring_flags", "topology", "graphs", "gdr", "gdr_hca", "warnings", "results",
    "summary"}``. ``gdr`` has one entry per ``GPU Direct RDMA Enabled|Disabled for GPU ... / HCA ...
    (distance D > L)`` line (rank, gpu, hca, enabled, distance, op, limit and, when the log's NCCL
    version names them, distance_type and limit_type); ``gdr_hca`` one per ``NET/X : GPU Direct
    RDMA Enabled|Disabled for HCA N 'name'`` line (rank, transport, hca, name, enabled).
    ``connections`` has one entry per ``via`` line (rank that logged it, channel, src, dst,
    direction, via, kind, transport, gdr); ``summary`` gives ``pairs`` (``"0->1"``: transports
    with their channel counts), the most used ``transport`` and the ``reasons`` found, each with
    its log ``message``, its ``meaning`` and the ``ranks`` that logged it. ``gin`` (NCCL 2.28+'s
    GPU-Initiated Networking: plugin, mode GDAKI or proxy, RMA plugin, errors) and ``ofi`` (the AWS
    OFI plugin: libfabric provider, NICs, protocol, dma-buf, ``gdr`` True/False/None with its
    ``gdr_evidence``, variables the plugin set) are None when the log has none of their lines.
    """
    if not isinstance(text, str):
        raise InvalidArgument("parse_log needs the log's text (str); read the file first")
    try:
        return _parse(text)
    except MemoryError:
        raise InvalidArgument(f"not enough memory to read this NCCL log ({len(text)} characters)") from None


def _parse(text: str) -> dict:
    out: dict = {"version": None, "cuda_driver_version": None, "nranks": None, "nnodes": None, "ranks": [],
                 "connections": [], "env": {}, "network": None, "ring_flags": None, "topology": {},
                 "graphs": [], "gdr": [], "gdr_hca": [], "warnings": [], "results": [],
                 "gin": plugins.new_gin(), "ofi": plugins.new_ofi()}
    seen_plugin = {"gin": False, "ofi": False}
    ranks: dict[int, dict] = {}
    reasons = Reasons()
    graphs_seen: set[tuple] = set()
    for who, level, msg, host in _messages(text):
        if level == "WARN":
            out["warnings"].append(msg)
        body = msg.lstrip()
        if (m := _VIA.match(body)):
            via = body[m.end():].strip()
            if via and _fits(m["ch"], m["conn"], m["src"], m["dst"]):
                conn = {"rank": who, "channel": int(m["ch"]), "conn": None if m["conn"] is None else int(m["conn"]),
                        "src": int(m["src"]), "dst": int(m["dst"]), "direction": m["dir"], "via": via}
                conn.update(classify_via(via))
                out["connections"].append(conn)
                continue
        _read_fact(out, ranks, reasons, body, who, host, graphs_seen)
        if _read_gdr(out, body, who):
            if level == "WARN":
                add_reason(reasons, msg, "NCCL warning", who, "warning")
            continue
        if (hit := plugins.read_gin(out["gin"], body)):
            seen_plugin["gin"] = True
            add_reason(reasons, hit[0], hit[1], who, "plugin")
        elif (hit := plugins.read_ofi(out["ofi"], body)):
            seen_plugin["ofi"] = True
            add_reason(reasons, hit[0], hit[1], who, "plugin")
        elif body.startswith("NET/OFI NIC group "):
            seen_plugin["ofi"] = True
        if level == "WARN" and not hit:
            add_reason(reasons, msg, "NCCL warning", who, "warning")
        for pattern, meaning in REASONS:
            if (m := pattern.search(msg)):
                add_reason(reasons, m[0].strip(), meaning.format(*m.groups()), who)
        if (at := msg.find(_NETWORK)) >= 0 and (net := msg[at + len(_NETWORK):].strip()):
            out["network"] = net
            add_reason(reasons, f"{_NETWORK}{net}", NETWORK_MEANING.format(net), who)
    for line in text.splitlines():
        if line.startswith("libfabric:"):
            if (hit := plugins.read_libfabric(out["ofi"], line)):
                seen_plugin["ofi"] = True
                add_reason(reasons, hit[0], hit[1], None, "plugin")
            continue
        if out["version"] is None and line.startswith("NCCL version ") and (m := _VERSION.match(line)):
            out["version"] = m[1]  # rank 0 of older NCCLs prints it without the prefix
        if "NCCL" not in line and (m := _RESULT.match(line)):
            size, nums = _int(m["size"]), [_float(m[k]) for k in ("time", "alg", "bus")]
            if size is not None and None not in nums:
                out["results"].append({"op": m["op"], "size": size, "time_us": nums[0],
                                       "algbw_gbps": nums[1], "busbw_gbps": nums[2]})
    gdr_reasons(out, reasons)
    for name, seen in seen_plugin.items():
        if not seen:
            out[name] = None
    if out["ofi"] is not None and out["ofi"]["gdr"] is None and any(
            c["gdr"] for c in out["connections"] if c["kind"] == "NET"):
        out["ofi"]["gdr"] = True
        out["ofi"]["gdr_evidence"].append("channel lines via NET/.../GDRDMA")
    out["ranks"] = [ranks[r] for r in sorted(ranks)]
    if out["nranks"] is None and ranks:
        out["nranks"] = len(ranks)
    for path, hop in out["topology"].items():
        a, b = path.split("->")
        if a < b:  # one line per pair of GPUs: NCCL's paths are symmetric
            how = PATH_TYPES.get(hop["type"], f"by a {hop['type']} path")
            add_reason(reasons, f"{a} <-> {b}: {hop['type']}", f"NCCL's topology joins the two GPUs {how} "
                                                                 f"({hop['bw_gbps']} GB/s)", None, "topology")
    ordered = sorted(reasons.values(), key=lambda r: _SOURCES.index(r["source"]))
    out["summary"] = _summarize(out["connections"], ordered)
    return out


def _summarize(connections: list[dict], reasons: list[dict]) -> dict:
    pairs: dict[str, dict] = {}
    seen = set()
    for c in connections:
        key = (c["channel"], c["conn"], c["src"], c["dst"], c["transport"])
        if key in seen:  # the sender and the receiver both log a network connection
            continue
        seen.add(key)
        entry = pairs.setdefault(f"{c['src']}->{c['dst']}", {"transports": {}, "channels": 0})
        entry["transports"][c["transport"]] = entry["transports"].get(c["transport"], 0) + 1
        entry["channels"] += 1
    counts: Counter = Counter()
    for p in pairs.values():
        counts.update(p["transports"])
    return {"pairs": dict(sorted(pairs.items())), "transport": counts.most_common(1)[0][0] if counts else None,
            "transports": dict(counts), "reasons": reasons}


def explain(parsed: dict) -> list[str]:
    """Sentences a learner can read: which transport each pair of ranks used, and why."""
    lines = []
    for pair, p in parsed["summary"]["pairs"].items():
        used = ", ".join(f"{t} on {n} channel{'s' if n != 1 else ''}" for t, n in p["transports"].items())
        lines.append(f"rank {pair.replace('->', ' -> rank ')}: {used}")
    if not parsed["summary"]["pairs"]:
        lines.append("no connection lines (`Channel ... via ...`): a single rank, or NCCL_DEBUG was not INFO")
    if (gin := parsed.get("gin")) and gin["plugin"]:
        lines.append(f"GPU-Initiated Networking (GIN): {gin['plugin']}, {gin['mode'] or 'unknown'} mode"
                     + (f"; one-sided operations through {gin['rma_plugin']}" if gin["rma_plugin"] else ""))
    if (ofi := parsed.get("ofi")):
        said = {True: "used", False: "not used (staged through host memory)",
                None: "not settled by these lines (a channel line via NET/.../GDRDMA would say it is used)"}
        lines.append(f"AWS OFI plugin (libfabric): provider {ofi['provider'] or 'not logged'}; GPUDirect RDMA "
                     f"{said[ofi['gdr']]}")
    lines += [f"{r['message']}: {r['meaning']}" for r in parsed["summary"]["reasons"]]
    return lines


# ----------------------------------------------------------------------------------- recorded
def recorded_logs() -> dict[str, Path]:
    """The shipped NCCL logs: ``{name: path}``, e.g. ``"h200x2-nvlink-default"``."""
    return {p.stem: p for p in sorted(_DATA.glob("*.log"))}


def plugin_logs() -> dict[str, Path]:
    """Verbatim excerpts of public logs with GIN (NCCL 2.28+) and AWS OFI plugin lines:
    ``{name: path}`` (each cited in ``gdrlab/data/nccl/plugins/README.md``)."""
    return {p.stem: p for p in sorted((_DATA / "plugins").glob("*.log"))}


def published_logs() -> dict[str, Path]:
    """Verbatim excerpts of NCCL logs from public sources with ``NET/IB`` lines: ``{name: path}``
    (each cited in ``gdrlab/data/nccl/README.md``); not measurements of this kit."""
    return {p.stem: p for p in sorted(_PUBLISHED.glob("*.log"))}


_GENERATION = {"P2P": "GPUDirect P2P: peer DMA between GPUs", "SHM": "staged through shared host memory",
               "NET/Socket": "through the network stack (TCP sockets)",
               "NET/IB": "RDMA NIC, staged through host memory",
               "NET/IB/GDRDMA": "RDMA NIC reads GPU memory (GPUDirect RDMA)"}


def _gpu_path(parsed: dict) -> str | None:
    """The path type NCCL's topology found between two GPUs (NVL, PIX, PHB, ...), if it logged one."""
    first: dict = next(iter(parsed["topology"].values()), {})
    return first.get("type")


def _generation(transport: str | None, gpu_path: str | None = None) -> str:
    if not transport:
        return "unknown"
    text = _GENERATION.get(transport) or _GENERATION.get(transport.split("/")[0], transport)
    if transport.startswith("P2P") and gpu_path:
        text += " over NVLink" if gpu_path in ("NVL", "NVB") else " over PCIe"
    return text


def recorded_summary() -> dict:
    """The three recorded runs on two NVLinked H200s, one row each: the transport NCCL chose, the
    bus bandwidth at the largest size and the time at the smallest, read from the logs."""
    runs = []
    for name, path in recorded_logs().items():
        parsed = parse_log(path.read_text())
        res = parsed["results"]
        big = max(res, key=lambda r: r["size"]) if res else None
        small = min(res, key=lambda r: r["size"]) if res else None
        transport = parsed["summary"]["transport"]
        runs.append({
            "name": name.removeprefix("h200x2-nvlink-"), "log": name,
            "env": {k: v for k, v in parsed["env"].items() if k != "NCCL_NVLS_ENABLE"},
            "transport": transport, "gpu_path": _gpu_path(parsed),
            "generation": _generation(transport, _gpu_path(parsed)),
            "busbw_size": big["size"] if big else None, "busbw_gbps": big["busbw_gbps"] if big else None,
            "time_size": small["size"] if small else None, "time_us": small["time_us"] if small else None,
            "results": res,
        })
    order = {name: i for i, name in enumerate(_RECORDED_ORDER)}
    runs.sort(key=lambda r: order.get(r["name"], len(order)))
    return {"runs": runs, "provenance": dict(_RECORDED_PROVENANCE, file="gdrlab/data/nccl")}


def bus_bandwidth(size_bytes: int, time_us: float, nranks: int) -> tuple[float, float]:
    """``(algbw_gbps, busbw_gbps)`` of an all-reduce, nccl-tests' definitions (GB = 1e9 bytes)."""
    if nranks < 1 or time_us <= 0:
        raise InvalidArgument("nranks must be >= 1 and time_us > 0")
    algbw = size_bytes / (time_us * 1e-6) / 1e9
    return algbw, algbw * 2 * (nranks - 1) / nranks


def format_result_line(row: dict) -> str:
    """One result in the format of the recorded logs (parsed back by :func:`parse_log`)."""
    return (f"allreduce {row['size']:>10d} B {row['time_us']:>11.1f} us  algbw {row['algbw_gbps']:>8.2f} GB/s  "
            f"busbw {row['busbw_gbps']:>8.2f} GB/s")
