"""NCCL, observed: run an all-reduce across the GPUs present and read which transport NCCL chose.

NCCL prints its decisions when ``NCCL_DEBUG=INFO`` is set: one ``Channel ... via TRANSPORT`` line
per connection (``P2P/CUMEM``, ``P2P/IPC``, ``P2P/direct pointer``, ``SHM/direct/direct``,
``NET/IB/0/GDRDMA``, ``NET/Socket/0``) and the facts behind them (``NET/IB : No device found.``,
``GPU Direct RDMA Disabled for HCA 0 'eth0'``, ``NCCL_P2P_DISABLE set by environment to 1``, the
topology paths it computed). :func:`parse_log` turns a log into data; :func:`run_allreduce` starts
one process per GPU (PyTorch's ``torch.distributed``, else CuPy's ``cupy.cuda.nccl``), captures
the log and measures bus bandwidth as nccl-tests defines it for all-reduce:
``algbw = bytes / time``, ``busbw = algbw * 2 (n - 1) / n``.

Three real logs from two NVLinked H200s ship as recorded data (:func:`recorded_logs`,
:func:`recorded_summary`). NVLink multicast (NVLS) is always off in the runs started here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Iterable

from .errors import GdrlabError, InvalidArgument, PeerTimeout, Unavailable
from .units import parse_sizes

__all__ = [
    "DISABLE_ENV", "COMPARE_CONFIGS", "DEFAULT_SIZES", "bus_bandwidth", "classify_via", "parse_log",
    "explain", "recorded_logs", "recorded_summary", "backend", "nccl_env", "run_allreduce", "compare",
    "format_result_line",
]

#: what ``--disable`` accepts, and the variable each one sets to 1
DISABLE_ENV = {"p2p": "NCCL_P2P_DISABLE", "shm": "NCCL_SHM_DISABLE", "ib": "NCCL_IB_DISABLE"}
#: the three generations of the story: peer DMA, host shared memory, the network stack
COMPARE_CONFIGS = (("default", ()), ("p2p_off", ("p2p",)), ("p2p_shm_off", ("p2p", "shm")))
DEFAULT_SIZES = "8,64K,1M,16M,256M"
_DATA = Path(__file__).resolve().parent / "data" / "nccl"
_RECORDED_PROVENANCE = {
    "kind": "recorded", "hardware": "2x NVIDIA H200, NVLink NV18 (KVM guest, no RDMA device)",
    "software": "NCCL 2.28.9+cuda13.0 through PyTorch torch.distributed, 2 ranks", "date": "2026-11",
}

# ----------------------------------------------------------------------------------- parsing
_PREFIX = re.compile(r"(?:(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] )?NCCL (?P<level>INFO|WARN|TRACE) (?P<msg>.*)$")
_VIA = re.compile(r"Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[[0-9a-fA-Fx]+\] -> (?P<dst>\d+)\[[0-9a-fA-Fx]+\]"
                  r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$")
_VERSION = re.compile(r"NCCL version (\S+)")
_DRIVER = re.compile(r"cudaDriverVersion (\d+)")
_RANK = re.compile(r"ncclCommInitRank\w* comm (?P<comm>\S+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
                   r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)")
_NODES = re.compile(r"comm \S+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)")
_ENV = re.compile(r"(NCCL_\w+) set by environment to (\S+?)\.?$")
_RINGS = re.compile(r"Connected all rings, use ring PXN (\d+) GDR (\d+)")
_NETWORK = re.compile(r"Using network (.+?)\s*$")
_TOPO_PATH = re.compile(r"^(GPU/[\w-]+) :(.*)$")
_TOPO_HOP = re.compile(r"(GPU/[\w-]+) \((\d+)/([\d.]+)/(\w+)\)")
_GRAPH = re.compile(r"Pattern (\d+), crossNic (\d+), nChannels (\d+), bw ([\d.]+)/([\d.]+), type (\w+)/(\w+)")
_RESULT = re.compile(r"^\s*(?P<op>[a-z_]+)\s+(?P<size>\d+) B\s+(?P<time>[\d.]+) us\s+algbw\s+(?P<alg>[\d.]+) GB/s"
                     r"\s+busbw\s+(?P<bus>[\d.]+) GB/s")

_ENV_MEANING = {
    "NCCL_P2P_DISABLE": "P2P transport (peer DMA over NVLink or PCIe) switched off: GPUs of one node use "
                        "shared host memory or the network instead",
    "NCCL_SHM_DISABLE": "shared-memory transport switched off: GPUs of one node talk through the network",
    "NCCL_IB_DISABLE": "InfiniBand/RoCE transport switched off: the network is TCP sockets",
    "NCCL_NVLS_ENABLE": "NVLink SHARP (multicast) collectives: 0 is off",
    "NCCL_NET_GDR_LEVEL": "how close a GPU and NIC must be for GPUDirect RDMA",
}
# (pattern on the message, meaning); {0}, {1}... are the pattern's groups
_REASONS = [
    (re.compile(r"NET/IB : No device found"),
     "no InfiniBand/RoCE device: NCCL cannot use its IB network, so no GPUDirect RDMA"),
    (re.compile(r"Failed to initialize NET plugin IB"), "the IB network plugin did not start; NCCL falls back to sockets"),
    (re.compile(r"GPU Direct RDMA Disabled for HCA \d+ '([^']+)'"),
     "GPUDirect RDMA is off for NIC {0}: network data to or from a GPU is staged through host memory"),
    (re.compile(r"GPU Direct RDMA (?:\(\w+\) )?[Ee]nabled for HCA \d+ '([^']+)'"),
     "GPUDirect RDMA is possible with NIC {0}"),
    (re.compile(r"GPU Direct RDMA (Enabled|Disabled) for GPU (\S+) / HCA (\d+) \(distance (\d+) ([<>]=?) (\d+)\)"),
     "GPUDirect RDMA {0} between GPU {1} and HCA {2}: topology distance {3} {4} {5} (NCCL_NET_GDR_LEVEL)"),
    (re.compile(r"dlvsym failed on (mlx5dv_reg_dmabuf_mr)"),
     "this rdma-core's libmlx5 has no {0}: no dma-buf registration through mlx5 direct verbs"),
    (re.compile(r"P2P is disabled between connected GPUs (\d+) and (\d+)"),
     "peer access impossible between GPUs {0} and {1}: no P2P transport between them"),
    (re.compile(r"Using network (.+?)\s*$"), "network transport for traffic between nodes (and intra-node "
                                            "fallback): {0}"),
]


def classify_via(via: str) -> dict:
    """What a ``via ...`` string means: ``{"kind", "transport", "gdr", "read"}``.

    ``kind`` is P2P, SHM, NET (or another first word); ``transport`` a short label:
    ``P2P/CUMEM``, ``P2P/IPC``, ``P2P/direct`` (``direct pointer``, same process),
    ``SHM/direct/direct``, ``NET/IB``, ``NET/IB/GDRDMA``, ``NET/Socket``; ``gdr`` is True or
    False for the network (whether the NIC moves GPU memory directly), None otherwise.
    """
    parts = [p.strip() for p in via.strip().split("/")]
    kind = parts[0].upper()
    out = {"kind": kind, "transport": kind, "gdr": None, "read": False}
    if kind == "P2P" and len(parts) > 1:
        out["transport"] = "P2P/" + parts[1].split()[0]  # "direct pointer" -> "direct"
        out["read"] = "read" in parts[2:]
    elif kind == "SHM":
        out["transport"] = "/".join(parts[:3])
    elif kind in ("NET", "COLLNET") and len(parts) > 1:
        out["gdr"] = any(p.startswith("GDRDMA") for p in parts)
        out["transport"] = f"{kind}/{parts[1]}" + ("/GDRDMA" if out["gdr"] else "")
    return out


def _messages(text: str) -> Iterable[tuple[int | None, str, str, str]]:
    """(rank or cuda device, level, message, host) for every NCCL line."""
    for line in text.splitlines():
        m = _PREFIX.search(line)
        if m:
            dev = m.group("dev")
            yield (int(dev) if dev is not None else None, m.group("level"), m.group("msg").rstrip(), m.group("host") or "")


_SOURCES = ("env", "topology", "net", "warning")
_PATH_TYPES = {"NVL": "by NVLink", "NVB": "by NVLink through another GPU", "PIX": "through one PCIe switch",
               "PXB": "through several PCIe switches", "PXN": "through another GPU's PCIe switch",
               "PHB": "through the CPU's PCIe host bridge", "SYS": "across CPU sockets"}


def _add_reason(reasons: dict, msg: str, meaning: str, who, source: str = "net") -> None:
    entry = reasons.setdefault(msg, {"message": msg, "meaning": meaning, "source": source, "ranks": []})
    if who is not None and who not in entry["ranks"]:
        entry["ranks"].append(who)


def parse_log(text: str) -> dict:
    """Read an ``NCCL_DEBUG=INFO`` log (any number of ranks, interleaved or not).

    Returns ``{"version", "cuda_driver_version", "nranks", "nnodes", "ranks", "connections",
    "env", "network", "ring_flags", "topology", "graphs", "warnings", "results", "summary"}``.
    ``connections`` has one entry per ``via`` line (rank that logged it, channel, src, dst,
    direction, via, kind, transport, gdr); ``summary`` gives ``pairs`` (``"0->1"``: transports
    with their channel counts), the most used ``transport`` and the ``reasons`` found, each with
    its log ``message``, its ``meaning`` and the ``ranks`` that logged it.
    """
    if not isinstance(text, str):
        raise InvalidArgument("parse_log needs the log's text (str); read the file first")
    out: dict = {"version": None, "cuda_driver_version": None, "nranks": None, "nnodes": None, "ranks": [],
                 "connections": [], "env": {}, "network": None, "ring_flags": None, "topology": {},
                 "graphs": [], "warnings": [], "results": []}
    ranks: dict[int, dict] = {}
    reasons: dict[str, dict] = {}
    for who, level, msg, host in _messages(text):
        if level == "WARN":
            out["warnings"].append(msg)
            _add_reason(reasons, msg, "NCCL warning", who, "warning")
        if (m := _VIA.search(msg)):
            conn = {"rank": who, "channel": int(m["ch"]), "conn": None if m["conn"] is None else int(m["conn"]),
                    "src": int(m["src"]), "dst": int(m["dst"]), "direction": m["dir"], "via": m["via"]}
            conn.update(classify_via(m["via"]))
            out["connections"].append(conn)
            continue
        if out["version"] is None and (m := _VERSION.search(msg)):
            out["version"] = m[1]
        elif out["cuda_driver_version"] is None and (m := _DRIVER.search(msg)):
            out["cuda_driver_version"] = int(m[1])
        elif (m := _RANK.search(msg)):
            r = int(m["rank"])
            ranks.setdefault(r, {"rank": r, "nranks": int(m["nranks"]), "cuda_dev": int(m["dev"]),
                                 "nvml_dev": None if m["nvml"] is None else int(m["nvml"]), "bus_id": m["bus"],
                                 "host": host})
            out["nranks"] = int(m["nranks"])
        elif (m := _NODES.search(msg)):
            out["nnodes"] = int(m[3])
        elif (m := _ENV.search(msg)):
            out["env"][m[1]] = m[2]
            _add_reason(reasons, f"{m[1]}={m[2]}", _ENV_MEANING.get(m[1], "set in the environment"), who, "env")
        elif (m := _RINGS.search(msg)):
            out["ring_flags"] = {"PXN": int(m[1]), "GDR": int(m[2])}
        elif (m := _GRAPH.search(msg)):
            graph = {"pattern": int(m[1]), "cross_nic": int(m[2]), "nchannels": int(m[3]), "bw_intra": float(m[4]),
                     "bw_inter": float(m[5]), "type_intra": m[6], "type_inter": m[7]}
            if graph not in out["graphs"]:
                out["graphs"].append(graph)
        elif (m := _TOPO_PATH.search(msg.strip())):
            for dst, _hops, bw, kind in _TOPO_HOP.findall(m[2]):
                if dst != m[1]:
                    out["topology"][f"{m[1]}->{dst}"] = {"type": kind, "bw_gbps": float(bw)}
        if (m := _NETWORK.search(msg)):
            out["network"] = m[1]
        for pattern, meaning in _REASONS:
            if (m := pattern.search(msg)):
                _add_reason(reasons, m[0].strip(), meaning.format(*m.groups()), who)
    for line in text.splitlines():
        if "NCCL" not in line and (m := _RESULT.match(line)):
            out["results"].append({"op": m["op"], "size": int(m["size"]), "time_us": float(m["time"]),
                                   "algbw_gbps": float(m["alg"]), "busbw_gbps": float(m["bus"])})
    out["ranks"] = [ranks[r] for r in sorted(ranks)]
    if out["nranks"] is None and ranks:
        out["nranks"] = len(ranks)
    for path, hop in out["topology"].items():
        a, b = path.split("->")
        if a < b:  # one line per pair of GPUs: NCCL's paths are symmetric
            how = _PATH_TYPES.get(hop["type"], f"by a {hop['type']} path")
            _add_reason(reasons, f"{a} <-> {b}: {hop['type']}", f"NCCL's topology joins the two GPUs {how} "
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
    counts = Counter(t for p in pairs.values() for t, n in p["transports"].items() for _ in range(n))
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
    lines += [f"{r['message']}: {r['meaning']}" for r in parsed["summary"]["reasons"]]
    return lines


# ----------------------------------------------------------------------------------- recorded
def recorded_logs() -> dict[str, Path]:
    """The shipped NCCL logs: ``{name: path}``, e.g. ``"h200x2-nvlink-default"``."""
    return {p.stem: p for p in sorted(_DATA.glob("*.log"))}


_GENERATION = {"P2P": "GPU to GPU by peer DMA (GPUDirect P2P)", "SHM": "staged through shared host memory",
               "NET/Socket": "through the network stack (TCP sockets)",
               "NET/IB": "RDMA NIC, staged through host memory", "NET/IB/GDRDMA": "RDMA NIC reads GPU memory (GPUDirect RDMA)"}


def _generation(transport: str | None) -> str:
    if not transport:
        return "unknown"
    return _GENERATION.get(transport) or _GENERATION.get(transport.split("/")[0], transport)


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
            "transport": transport, "generation": _generation(transport),
            "busbw_size": big["size"] if big else None, "busbw_gbps": big["busbw_gbps"] if big else None,
            "time_size": small["size"] if small else None, "time_us": small["time_us"] if small else None,
            "results": res,
        })
    order = {name: i for i, (name, _) in enumerate(COMPARE_CONFIGS)}
    runs.sort(key=lambda r: order.get(r["name"], len(order)))
    return {"runs": runs, "provenance": dict(_RECORDED_PROVENANCE, source="gdrlab/data/nccl")}


# ----------------------------------------------------------------------------------- running
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


def backend() -> str:
    """``"torch"`` or ``"cupy"``: what :func:`run_allreduce` will use. Raises Unavailable."""
    if importlib.util.find_spec("torch") is not None:
        return "torch"
    if importlib.util.find_spec("cupy") is not None:
        return "cupy"
    raise Unavailable("running NCCL needs PyTorch (pip install torch) or CuPy (pip install cupy-cuda12x); "
                      "neither is installed. Recorded logs still parse: gdrlab nccl recorded")


def nccl_env(disable: Iterable[str] = (), base: dict | None = None) -> dict:
    """The environment of an NCCL run: NCCL_DEBUG=INFO, NVLink multicast off, and each transport
    in ``disable`` (p2p, shm, ib) switched off."""
    env = dict(os.environ if base is None else base)
    for key in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_DEBUG_FILE"):
        env.pop(key, None)  # only the caller's choice counts; logs must reach our capture
    env["NCCL_DEBUG"] = "INFO"
    env["NCCL_NVLS_ENABLE"] = "0"
    for name in disable:
        if name not in DISABLE_ENV:
            raise InvalidArgument(f"cannot disable {name!r}; valid: {', '.join(DISABLE_ENV)}")
        env[DISABLE_ENV[name]] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_allreduce(sizes=DEFAULT_SIZES, disable: Iterable[str] = (), *, nranks: int | None = None,
                  iters: int | None = None, timeout_s: float = 300.0, use: str | None = None) -> dict:
    """All-reduce through NCCL with one process per GPU on this machine, ``NCCL_DEBUG=INFO``.

    Returns ``{"nranks", "backend", "disable", "env", "results", "parsed", "explain", "log",
    "provenance"}``; ``results`` rows have size, iters, time_us (slowest rank), algbw_gbps,
    busbw_gbps and verified. Raises :class:`Unavailable` with fewer than two GPUs or without
    PyTorch/CuPy, :class:`PeerTimeout` when the ranks do not finish within ``timeout_s``.
    """
    from .engine import _provenance, cuda_status, gpus

    size_list = parse_sizes(sizes)
    disable = tuple(d.strip() for d in disable if d.strip())
    env = nccl_env(disable)
    n_gpus = len(gpus())
    if n_gpus < 2:
        st = cuda_status()
        raise Unavailable(f"an NCCL all-reduce between GPUs needs two or more GPUs; this machine has {n_gpus}"
                          + ("" if st["usable"] else f" ({st['reason']})")
                          + ". Recorded logs: gdrlab nccl recorded")
    nranks = n_gpus if nranks is None else nranks
    if not 2 <= nranks <= n_gpus:
        raise InvalidArgument(f"nranks must be between 2 and the {n_gpus} GPUs here, got {nranks}")
    if iters is not None and iters < 1:
        raise InvalidArgument("iters must be at least 1")
    use = use or backend()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="gdrlab-nccl-") as tmp:
        result_file = Path(tmp) / "results.json"
        procs, logs = [], []
        try:
            for rank in range(nranks):
                logs.append(open(Path(tmp) / f"rank{rank}.log", "w+"))
                cmd = [sys.executable, "-m", "gdrlab.nccl", "worker",
                       "--rank", str(rank), "--nranks", str(nranks), "--port", str(port), "--backend", use,
                       "--sizes", ",".join(map(str, size_list)), "--iters", str(iters or 0),
                       "--result", str(result_file), "--rendezvous", tmp, "--timeout", str(timeout_s)]
                procs.append(subprocess.Popen(cmd, stdout=logs[-1], stderr=subprocess.STDOUT, env=env,
                                              stdin=subprocess.DEVNULL))
            deadline = time.monotonic() + timeout_s
            while any(p.poll() is None for p in procs):
                if time.monotonic() > deadline:
                    raise PeerTimeout(f"the NCCL ranks did not finish within {timeout_s:.0f} s")
                if any(p.poll() not in (None, 0) for p in procs):
                    time.sleep(2.0)  # let the other ranks notice and exit before they are stopped
                    break
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            texts = []
            for f in logs:
                f.seek(0)
                texts.append(f.read())
                f.close()
        log = "\n".join(texts)
        failed = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            tail = "\n".join(log.strip().splitlines()[-15:])
            raise GdrlabError(f"NCCL rank {failed[0][0]} exited with code {failed[0][1]}; end of the log:\n{tail}")
        results = json.loads(result_file.read_text())
    parsed = parse_log(log)
    return {"nranks": nranks, "backend": use, "disable": list(disable),
            "env": {k: env[k] for k in sorted(env) if k.startswith("NCCL_")}, "results": results,
            "parsed": parsed, "explain": explain(parsed), "log": log,
            "provenance": _provenance({"what": "NCCL all-reduce, one process per GPU", "nccl": parsed["version"],
                                       "backend": use})}


def compare(sizes=DEFAULT_SIZES, configs=COMPARE_CONFIGS, **kw) -> dict:
    """:func:`run_allreduce` once per ``(name, disable)`` config; ``rows`` has one line per run
    (name, transport, time at the smallest size, bus bandwidth at the largest)."""
    runs, rows = {}, []
    for name, disable in configs:
        run = run_allreduce(sizes, disable, **kw)
        runs[name] = run
        res = run["results"]
        big, small = max(res, key=lambda r: r["size"]), min(res, key=lambda r: r["size"])
        transport = run["parsed"]["summary"]["transport"]
        rows.append({"name": name, "disable": ",".join(disable) or "-", "transport": transport,
                     "generation": _generation(transport), "time_size": small["size"], "time_us": small["time_us"],
                     "busbw_size": big["size"], "busbw_gbps": big["busbw_gbps"]})
    return {"rows": rows, "runs": runs}


# ----------------------------------------------------------------------------------- one rank
def _iters_for(size: int) -> int:
    # about a second per size on sockets (3 GB/s), many samples for small sizes
    return int(max(20, min(500, (4 << 30) // max(size, 1))))


def _torch_rank(a, sizes: list[int]) -> list[dict]:
    import datetime

    import torch
    import torch.distributed as dist

    if not dist.is_nccl_available():
        raise Unavailable("this PyTorch build has no NCCL backend")
    torch.cuda.set_device(a.rank)
    dev = torch.device("cuda", a.rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.nranks,
                            timeout=datetime.timedelta(seconds=a.timeout))
    try:
        def step(x):
            dist.all_reduce(x)

        def make(count, value):
            return torch.full((count,), float(value), dtype=torch.float32, device=dev)

        def first_last(x):
            return float(x[0].item()), float(x[-1].item())

        def slowest(dt):
            t = torch.tensor([dt], dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t.item())
        return _measure(a, sizes, make, step, torch.cuda.synchronize, first_last, slowest)
    finally:
        dist.destroy_process_group()


def _cupy_rank(a, sizes: list[int]) -> list[dict]:
    import cupy as cp
    from cupy.cuda import nccl

    cp.cuda.Device(a.rank).use()
    uid_file = Path(a.rendezvous) / "nccl_uid.json"
    if a.rank == 0:
        tmp = uid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(list(nccl.get_unique_id())))
        tmp.rename(uid_file)  # atomic: the other ranks never read half a file
    deadline = time.monotonic() + a.timeout
    while not uid_file.exists():
        if time.monotonic() > deadline:
            raise PeerTimeout("rank 0 did not publish the NCCL unique id")
        time.sleep(0.05)
    comm = nccl.NcclCommunicator(a.nranks, tuple(json.loads(uid_file.read_text())), a.rank)
    stream = cp.cuda.Stream(non_blocking=True)

    def step(x, op=nccl.NCCL_SUM):
        dtype = nccl.NCCL_FLOAT64 if x.dtype == cp.float64 else nccl.NCCL_FLOAT32
        comm.allReduce(x.data.ptr, x.data.ptr, x.size, dtype, op, stream.ptr)

    def slowest(dt):
        t = cp.array([dt], dtype=cp.float64)
        step(t, nccl.NCCL_MAX)
        stream.synchronize()
        return float(t.get()[0])
    try:
        return _measure(a, sizes, lambda count, value: cp.full(count, value, dtype=cp.float32), step,
                        stream.synchronize, lambda x: (float(x[0].get()), float(x[-1].get())), slowest)
    finally:
        comm.destroy()


def _measure(a, sizes, make, step, sync, first_last, slowest) -> list[dict]:
    """Check one all-reduce per size (each rank adds rank+1), then time ``iters`` of them; the
    time of a size is the slowest rank's mean, as nccl-tests reports it."""
    rows = []
    expect = a.nranks * (a.nranks + 1) / 2
    for size in sizes:
        count = max(1, size // 4)
        x = make(count, a.rank + 1)
        step(x)
        sync()
        verified = first_last(x) == (expect, expect)
        x = make(count, 0)
        iters = a.iters or _iters_for(count * 4)
        for _ in range(max(2, iters // 10)):
            step(x)
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            step(x)
        sync()
        dt = slowest((time.perf_counter() - t0) / iters)
        algbw, busbw = bus_bandwidth(count * 4, dt * 1e6, a.nranks)
        rows.append({"size": count * 4, "iters": iters, "time_us": dt * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": busbw, "verified": bool(verified)})
    return rows


def _worker_main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gdrlab.nccl worker")
    for name, typ in (("--rank", int), ("--nranks", int), ("--port", int), ("--backend", str), ("--sizes", str),
                      ("--iters", int), ("--result", str), ("--rendezvous", str), ("--timeout", float)):
        ap.add_argument(name, type=typ, required=True)
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    rows = (_torch_rank if a.backend == "torch" else _cupy_rank)(a, sizes)
    if a.rank == 0:
        for row in rows:
            print(format_result_line(row), flush=True)
        tmp = Path(a.result + ".tmp")
        tmp.write_text(json.dumps(rows))
        tmp.rename(a.result)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        sys.exit("usage: python -m gdrlab.nccl worker ... (started by gdrlab.nccl.run_allreduce)")
    sys.exit(_worker_main(sys.argv[2:]))
