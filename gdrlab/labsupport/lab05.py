"""Lab 05, topology pitfalls: PCIe distance codes, the nearest NIC, NCCL's GDR rule and NUMA.

Reads this machine's tree (``gdrlab.topology.from_sysfs``), recorded hwloc exports of real
machines (``gdrlab.topology.recorded_machines``) and a real DGX A100's ``nvidia-smi topo -m``
matrix (``gdrlab.topology.recorded_matrices``); shows NCCL's GPUDirect RDMA decisions from
published NET/IB log excerpts and the recorded all-reduce figures; and predicts configuration A
(GPU and NIC under one PCIe switch) against configuration B (GPU and NIC on different sockets)
with the model.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import provenance
from ..nccl import versions as nccl_versions
from ..topology import CODE_ORDER
from . import modelled_provenance, profile_with_level

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from ..topology import Topology, TopoMatrix

__all__ = [
    "CODE_ORDER", "own_topology", "own_pairs", "recorded_topology", "machine_names", "pair_table", "gpu_nic_pairs",
    "config_ab_table", "config_ab_figure", "describe",
    "tree_text", "tree_figure", "recorded_matrix", "matrix_frame", "ib_gdr_lines", "allreduce_figures",
    "AB_PROFILES", "link_data_gbps", "FDR_X4_DATA_GBPS", "pair_code_counts", "pair_code_note", "ab_summary",
    "ab_note", "prediction_feedback", "sys_within_one_socket_note", "gdr_line_history",
]

# NCCL's levels in order; nvidia-smi's NODE is NCCL's PHB (NCCL's CPU node is a whole NUMA node).


def own_topology(root: str = "/") -> tuple[Topology | None, str]:
    """This machine's PCIe tree and one sentence about what it holds."""
    from ..topology import from_sysfs

    try:
        topo = from_sysfs(root)
    except Exception as exc:  # no /sys (not Linux), unreadable tree: explain and go on
        return None, f"could not read this machine's PCIe tree: {type(exc).__name__}: {exc}"
    g, n = len(topo.gpus), len(topo.nics)
    if g == 0 and n == 0:
        msg = ("this machine shows no NVIDIA GPU and no RDMA NIC on its PCIe tree, so there is no pair "
               "to classify here: the rest of the lab uses recorded machines")
    elif n == 0:
        msg = (f"this machine has {g} GPU(s) and no RDMA NIC (/sys/class/infiniband is empty): GPU/GPU "
               "codes only; the GPU/NIC questions use recorded machines")
    else:
        msg = f"this machine has {g} GPU(s) and {n} RDMA NIC(s)"
    return topo, f"{topo.source}: {msg}"


_OWN_CLASSES = {0x01: "storage", 0x02: "network", 0x03: "display", 0x12: "accelerator"}


def _own_name(root: str, bus_id: str, base_class: int, counts: dict[str, int]) -> str:
    """``eth0``/``nvme0`` where sysfs names the device's interface, else ``network0``/``display0``."""
    from ..hw.sysfs import check_root

    d = check_root(root) / "sys/bus/pci/devices" / bus_id
    for sub in ("net", "nvme", "infiniband", "drm"):
        try:
            names = sorted(p.name for p in (d / sub).iterdir())
        except OSError:
            continue
        names = [n for n in names if not n.startswith("renderD")]
        if names:
            return names[0]
    kind = _OWN_CLASSES[base_class]
    counts[kind] = counts.get(kind, -1) + 1
    return f"{kind}{counts[kind]}"


def own_pairs(root: str = "/") -> tuple[pd.DataFrame, str]:
    """``(DataFrame of every pair of this machine's storage, network and display devices with
    nvidia-smi's PCIe code and why, what was found)``, live from sysfs.

    The same rule as ``nvidia-smi topo -m`` (a PCIe switch counts as one bridge), applied to the
    devices any machine has: an NVMe drive and a network card are as near or as far apart as a
    GPU and an RDMA NIC would be in those slots.
    """
    import pandas as pd

    from ..hw.bars import device_kind
    from ..topology import Topology, from_sysfs

    try:
        topo = from_sysfs(root)
    except Exception as exc:  # no /sys (not Linux), unreadable tree: explain and go on
        return pd.DataFrame(), f"could not read this machine's PCIe tree: {type(exc).__name__}: {exc}"
    picked: list[tuple[dict[str, Any], Any]] = []
    counts: dict[str, int] = {}
    for n in topo.root.walk():
        cls = n.class_id
        if n.kind != "device" or cls is None or (cls >> 8) not in _OWN_CLASSES or n.bus_id is None:
            continue
        name = _own_name(root, n.bus_id, cls >> 8, counts)
        picked.append(({"name": name, "kind": device_kind(cls << 8), "pci_bus_id": n.bus_id,
                        "numa_node": None}, n))
    if len(picked) < 2:
        return pd.DataFrame(), (f"{topo.source}: {len(picked)} storage, network or display device(s) on the "
                                "PCIe tree: no pair to classify here")
    own = Topology(topo.root, picked, source=topo.source,
                   provenance=topo.provenance)
    rows = []
    for i, (a, _) in enumerate(picked):
        for b, _ in picked[i + 1:]:
            code, why = own.pcie_code(str(a["name"]), str(b["name"]))
            rows.append({"a": a["name"], "a_kind": a["kind"], "b": b["name"], "b_kind": b["kind"],
                         "code": code, "why": why})
    table = pd.DataFrame(rows)
    where = (provenance.live({"topology": topo.source}) if topo.provenance == "live"
             else provenance.recorded(topo.source))
    provenance.attach(table, where, column=False)
    return table, f"{topo.source}: {len(picked)} devices, {len(rows)} pairs"


def machine_names() -> dict[str, str]:
    """``{name: path}`` of the recorded hwloc exports that ship with gdrlab."""
    from ..topology import recorded_machines

    return {name: str(path) for name, path in recorded_machines().items()}


def _find_machine(keyword: str) -> str:
    names = machine_names()
    for name, path in names.items():
        if keyword.lower() in name.lower() or keyword.lower() in str(path).lower():
            return name
    raise KeyError(f"no recorded machine matching {keyword!r}; shipped: {', '.join(names)}")


def recorded_topology(keyword: str) -> Topology:
    """The recorded machine whose name (or file) contains ``keyword``, as a Topology."""
    from ..topology import from_hwloc

    return from_hwloc(machine_names()[_find_machine(keyword)])


def describe(topo: Topology) -> pd.DataFrame:
    """The devices of a topology as a DataFrame (name, kind, model, PCI bus id, NUMA node, socket)."""
    import pandas as pd

    cols = ["name", "kind", "model", "pci_bus_id", "numa_node", "socket"]
    return pd.DataFrame([{c: d.get(c) for c in cols} for d in topo.devices], columns=cols)


def gpu_nic_pairs(topo: Topology) -> list[tuple[str, str]]:
    """Every (GPU, NIC) pair of a topology."""
    return [(g, n) for g in topo.gpus for n in topo.nics]


def pair_table(topo: Topology, level: Any = None) -> pd.DataFrame:
    """One row per GPU/NIC pair: code, why, nearest NIC of the GPU, NCCL's GDR choice."""
    import pandas as pd

    rows = []
    for g, n in gpu_nic_pairs(topo):
        code, why = topo.pcie_code(g, n)
        dec = topo.gdr_decision(g, n, level)
        rows.append({"gpu": g, "nic": n, "code": code, "path": why, "nearest_nic": topo.nearest_nic(g),
                     "nccl_uses_gdr": dec["use_gdr"]})
    return pd.DataFrame(rows, columns=["gpu", "nic", "code", "path", "nearest_nic", "nccl_uses_gdr"])


def config_ab_table(profile: str = "kepler-ivb-2014", sizes: Iterable[int] | None = None,
                    paths: Iterable[str] = ("gdr", "pipelined")) -> pd.DataFrame:
    """Modelled bandwidth of ``paths`` with the GPU and NIC under one switch (A) and on different
    sockets (B): DataFrame (config, placement, path, size, lat_us, bw_gbps), provenance modelled."""
    import pandas as pd

    from .. import model

    sizes = np.asarray(list(sizes) if sizes is not None else [2 ** k for k in range(3, 27)], dtype=np.int64)
    frames = []
    for config, placement in (("A", "same-switch"), ("B", "cross-socket")):
        for p in paths:
            lat = np.asarray(model.latency_us(profile, p, sizes.astype(float), placement=placement), dtype=float)
            frames.append(pd.DataFrame({"config": config, "placement": placement, "path": p, "size": sizes,
                                        "lat_us": lat, "bw_gbps": sizes / lat / 1e3}))
    df = pd.concat(frames, ignore_index=True)
    provenance.attach(df, modelled_provenance(profile), column=False)
    return df


def config_ab_figure(table: pd.DataFrame) -> go.Figure:
    """Bandwidth against size for configurations A and B (modelled, profile in the title)."""
    import plotly.graph_objects as go

    from . import SIZE_TICKS

    prof = table.attrs.get("provenance", {}).get("profile", "?")
    fig = go.Figure()
    for (config, placement, path), part in table.groupby(["config", "placement", "path"], sort=False):
        fig.add_trace(go.Scatter(x=part["size"], y=part["bw_gbps"], mode="lines",
                                 name=f"config {config} ({placement}): {path} — modelled, {profile_with_level(prof)}",
                                 line={"dash": "solid" if config == "A" else "dash"}))
    fig.update_layout(title=f"Config A (same switch) vs B (cross socket), modelled with profile {profile_with_level(prof)}",
                      xaxis_title="message size (bytes)", yaxis_title="bandwidth (GB/s)", height=460,
                      legend={"orientation": "h", "y": -0.3})
    fig.update_xaxes(type="log", **SIZE_TICKS)
    return fig


def tree_text(topo: Topology) -> str:
    """The PCIe tree as indented text, pruned to the branches that lead to a GPU or a NIC; each
    device line ends with its name in the distance matrix (``<- GPU2``)."""
    names = {id(topo.node(d["name"])): d["name"] for d in topo.devices}
    keep: set[int] = set()
    for d in topo.devices:
        keep.update(id(a) for a in topo.node(d["name"]).ancestors())
    kinds = {"machine": "Machine", "package": "Socket", "hostbridge": "Host bridge", "bridge": "Bridge",
             "device": "PCI device"}
    lines: list[str] = []

    def visit(node: Any, depth: int) -> None:
        if id(node) not in keep:
            return
        extra = ""
        if node.kind == "bridge" and node.role:
            extra = {"rootport": " [root port]", "usp": " [switch upstream]", "dsp": " [switch downstream]"}.get(node.role, "")
        if node.kind == "package" and node.numa_nodes:
            extra = f" [NUMA {', '.join(map(str, sorted(node.numa_nodes)))}]"
        tag = f"   <- {names[id(node)]}" if id(node) in names else ""
        lines.append("    " * depth + f"{kinds.get(node.kind, node.kind)}: {node.describe()}{extra}{tag}")
        for child in node.children:
            visit(child, depth + 1)

    visit(topo.root, 0)
    return "\n".join(lines) if lines else "(no GPU or NIC on this tree)"


def tree_figure(topo: Topology, highlight: tuple[str, ...] | None = None) -> go.Figure | None:
    """:func:`gdrlab.topology.figure` when it is available, else None (use :func:`tree_text`)."""
    try:
        from ..topology import figure
        return figure(topo, highlight=highlight)
    except (ImportError, AttributeError):
        return None


# ------------------------------------------------------------------ nvidia-smi matrices, NCCL
def recorded_matrix(keyword: str) -> tuple[TopoMatrix, str]:
    """The shipped ``nvidia-smi topo -m`` matrix whose name contains ``keyword``, parsed, and a
    label naming its source (gdrlab/data/topo-matrix/README.md)."""
    from ..topology import parse_topo_matrix, recorded_matrices

    found = {name: path for name, path in recorded_matrices().items() if keyword.lower() in name.lower()}
    if not found:
        raise KeyError(f"no recorded matrix matching {keyword!r}; shipped: {', '.join(recorded_matrices())}")
    name, path = next(iter(found.items()))
    labels = {"dgx-a100-nccl-issue-1505": "a user's DGX A100 as posted in NVIDIA/nccl issue #1505 (2024-11-06); "
                                          "excerpt: header and rows GPU0-GPU3, verbatim"}
    return parse_topo_matrix(path.read_text(encoding="utf-8")), labels.get(name, f"recorded matrix {name}")


def matrix_frame(matrix: TopoMatrix) -> pd.DataFrame:
    """The rows a matrix holds as a DataFrame (devices as columns, then CPU and NUMA affinity)."""
    import pandas as pd

    rows = []
    for name in matrix.rows:
        row: dict[str, str] = dict(matrix.codes[name])
        row["CPU Affinity"] = matrix.cpu_affinity.get(name, "")
        row["NUMA Affinity"] = matrix.numa_affinity.get(name, "")
        rows.append(row)
    return pd.DataFrame(rows, index=matrix.rows)


def ib_gdr_lines() -> list[tuple[str, list[str]]]:
    """``[(label, explained lines)]`` for each published NET/IB log excerpt that ships
    (gdrlab/data/nccl/README.md): NCCL's per-pair GDR decisions and the channel transports."""
    from ..nccl import explain, parse_log, published_logs

    labels = {"nccl-issue-1151-gdr-distance": "published: NVIDIA/nccl issue #1151 (2024-01-18), one line as quoted",
              "nccl-issue-707-a100-gdrdma": "published: NVIDIA/nccl issue #707 (2022-07-22), 8x A100 with mlx5 "
                                            "NICs, NCCL 2.7.6, 12 channel lines"}
    out = []
    for name, path in published_logs().items():
        parsed = parse_log(path.read_text(encoding="utf-8", errors="replace"))
        out.append((labels.get(name, name), [line for line in explain(parsed) if not line.startswith("no connection")]))
    return out


_TRANSPORTS = {"default": "P2P over NVLink", "p2p_off": "SHM (staged through host memory)",
               "p2p_shm_off": "NET/Socket (TCP over eth0)"}


def allreduce_figures() -> pd.DataFrame:
    """The recorded all-reduce bus bandwidth at 256 MiB, two recordings side by side: the JSON
    dataset (``gdrlab nccl --compare --json``) and the ``allreduce`` lines of the three
    ``NCCL_DEBUG=INFO`` logs, each with its date; GB/s are 1e9 bytes/s."""
    import pandas as pd

    from .. import grading
    from ..nccl import recorded_summary

    ar = grading.dataset("h200x2-nccl-allreduce")
    prov = ar.attrs.get("provenance") or {}
    big = ar[ar["size"] == ar["size"].max()].set_index("config")
    logs = {r["name"]: r for r in recorded_summary()["runs"]}
    rows = []
    for config, transport in _TRANSPORTS.items():
        log_row = logs.get(config, {})
        rows.append({"config": config, "transport": transport, "size_bytes": int(big.loc[config, "size"]),
                     "time_us_json": float(big.loc[config, "time_us"]),
                     "busbw_gbps_json": float(big.loc[config, "busbw_gbps"]),
                     "busbw_gbps_log": log_row.get("busbw_gbps")})
    table = pd.DataFrame(rows)
    provenance.attach(table, provenance.recorded(prov.get("hardware", "2x NVIDIA H200"), prov.get("date")),
                      column=False)
    return table


# ----------------------------------------------------------------------------- claims computed from data
AB_PROFILES = ("kepler-ivb-2014", "aws-p5-efa", "l40s-pcie")


def link_data_gbps(lanes: int, gbaud_per_lane: float, payload_bits: int, line_bits: int) -> float:
    """A serial link's data rate in GB/s (10^9 bytes/s) after line encoding: lanes x signalling
    rate (Gbaud) x payload/line bits / 8. FDR InfiniBand x4: 4 x 14.0625 x 64/66 / 8 = 6.82 GB/s."""
    return lanes * gbaud_per_lane * payload_bits / line_bits / 8


# InfiniBand FDR: 14.0625 Gbaud per lane, 64b/66b encoding, 4 lanes (the "56 Gb/s" port)
FDR_X4_DATA_GBPS = link_data_gbps(4, 14.0625, 64, 66)


def pair_code_counts(topo: Topology, pcie_only: bool = True) -> dict[str, int]:
    """How many unordered GPU pairs of ``topo`` have each code (PCIe codes by default)."""
    m = topo.pcie_matrix() if pcie_only else topo.matrix()
    gpus = list(topo.gpus)
    counts: dict[str, int] = {}
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            counts[m[a][b]] = counts.get(m[a][b], 0) + 1
    return {c: counts[c] for c in sorted(counts, key=lambda c: CODE_ORDER.index(c) if c in CODE_ORDER else 99)}


def pair_code_note(topo: Topology) -> str:
    """Which PCIe codes the GPU pairs of ``topo`` have, with one example pair of each."""
    m = topo.pcie_matrix()
    gpus = list(topo.gpus)
    counts = pair_code_counts(topo)
    examples: dict[str, str] = {}
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            examples.setdefault(m[a][b], f"{a}-{b}")
    parts = [f"{n} {c} (e.g. {examples[c]})" for c, n in counts.items()]
    return (f"Over PCIe, the {sum(counts.values())} GPU pairs of {topo.source} are: " + ", ".join(parts)
            + ". Only pairs within one PLX tree are PIX or PXB.")


def ab_summary(profiles: Iterable[str] = AB_PROFILES, size: int = 1 << 20) -> pd.DataFrame:
    """Per profile (modelled): GDR and pipelined bandwidth at ``size`` in configuration A (same
    switch) and B (cross socket), the faster path in B, and where pipelined first beats GDR
    across sockets (None: never)."""
    import pandas as pd

    from .. import model

    rows = []
    for prof in profiles:
        t = config_ab_table(prof, sizes=[size])
        bw = {(r.config, r.path): float(r.bw_gbps) for r in t.itertuples()}
        rows.append({"profile": profile_with_level(prof),
                     "A gdr (GB/s)": round(bw[("A", "gdr")], 2), "A pipelined (GB/s)": round(bw[("A", "pipelined")], 2),
                     "B gdr (GB/s)": round(bw[("B", "gdr")], 2), "B pipelined (GB/s)": round(bw[("B", "pipelined")], 2),
                     "faster in B": max(("gdr", "pipelined"), key=lambda p: bw[("B", p)]),
                     "B crossing (B)": model.crossover(prof, "gdr", "pipelined", placement="cross-socket")})
    df = pd.DataFrame(rows)
    provenance.attach(df, provenance.modelled(", ".join(profile_with_level(p) for p in profiles)), column=False)
    return df


def ab_note(table: pd.DataFrame) -> str:
    """The configuration A/B plot in words: the top GDR rate in A and B, and pipelined in B."""
    from .. import model

    prof = table.attrs.get("provenance", {}).get("profile", "kepler-ivb-2014")
    top = table.groupby(["config", "path"])["bw_gbps"].max()
    xs = {pl: model.crossover(prof, "gdr", "pipelined", placement=pl) for pl in ("same-switch", "cross-socket")}

    def where(v: int | None) -> str:
        return "never" if v is None else f"at {v:,} B"
    return (f"Modelled ({profile_with_level(prof)}): GDR tops out at {top[('A', 'gdr')]:.1f} GB/s in A, under the FDR "
            f"x4 data rate of {FDR_X4_DATA_GBPS:.2f} GB/s, and at {top[('B', 'gdr')]:.2f} GB/s in B, where pipelined "
            f"staging reaches {top[('B', 'pipelined')]:.1f} GB/s. Pipelined first beats GDR {where(xs['same-switch'])} "
            f"under one switch and {where(xs['cross-socket'])} across sockets.")


def prediction_feedback(predicted_winner_b: Any, predicted_gdr_a_gbps: Any, table: pd.DataFrame) -> str:
    """Ungraded feedback on the configuration A/B prediction, once the plot is there: the winner
    in B against the model's, and GDR in A against what the link can carry (no more than the
    FDR x4 data rate, no less than half the model's figure)."""
    top = table.groupby(["config", "path"])["bw_gbps"].max()
    win = "gdr" if top[("B", "gdr")] > top[("B", "pipelined")] else "pipelined"
    out = []
    if predicted_winner_b is not None:
        out.append("winner in B: " + ("as in the model" if predicted_winner_b == win else "not the model's"))
    if predicted_gdr_a_gbps is not None:
        a = float(predicted_gdr_a_gbps)
        if a > FDR_X4_DATA_GBPS * 1.001:
            out.append("GDR in A: more than an FDR x4 port can carry after encoding")
        elif a < top[("A", "gdr")] / 2:
            out.append("GDR in A: under half the model's figure")
        else:
            out.append("GDR in A: within what the link carries and near the model")
    return "; ".join(out) or "no prediction committed"


def sys_within_one_socket_note(matrix: TopoMatrix, gpu: str = "GPU0", nic: str = "NIC2", other_gpu: str = "GPU2",
                               cores_per_socket: int = 64) -> str:
    """N7 on the DGX A100 matrix: ``gpu`` and ``nic`` are SYS apart although ``gpu`` and the GPU
    next to ``nic`` (``other_gpu``) sit on NUMA nodes of one socket (CPU affinity below
    ``cores_per_socket``: a DGX A100 has two 64-core AMD EPYC 7742 in NPS4 mode)."""
    aff = {g: matrix.cpu_affinity[g] for g in (gpu, other_gpu)}
    numa = {g: matrix.numa_affinity[g] for g in (gpu, other_gpu)}
    first = {g: int(str(aff[g]).split(",")[0].split("-")[0]) for g in aff}
    last = {g: int(str(aff[g]).split(",")[0].split("-")[-1]) for g in aff}
    same_socket = all(last[g] < cores_per_socket for g in aff)
    return (f"{gpu}-{nic} is {matrix.code(gpu, nic)}; {nic} is {matrix.code(other_gpu, nic)} from {other_gpu}. "
            f"{gpu} is on NUMA node {numa[gpu]} (CPUs {aff[gpu]}), {other_gpu} on NUMA node {numa[other_gpu]} "
            f"(CPUs {aff[other_gpu]}): with {cores_per_socket} cores per socket both are socket "
            f"{first[gpu] // cores_per_socket if same_socket else '?'}"
            + (", so this SYS crosses between NUMA nodes of one socket, not the inter-socket link."
               if same_socket else ".") )


def gdr_line_history() -> list[str]:
    """How NCCL's per-pair GPU Direct RDMA line reads, release range by release range, from the
    version table :mod:`gdrlab.nccl.versions` (each row read in NCCL's source at the tag it names):
    log level, the subsystems that print it, its form, and the default ``NCCL_DEBUG_SUBSYS`` then."""
    rows = nccl_versions.TABLE["gdr_pair_line"]
    newest = nccl_versions.format_version(nccl_versions.NEWEST)
    out = []
    for i, (since, (level, subsys, form), source) in enumerate(rows):
        until = (f"to before {nccl_versions.format_version(rows[i + 1][0])}" if i + 1 < len(rows)
                 else f"to {newest} (the newest checked)")
        default = nccl_versions.facts(since)["debug_subsys_default"]
        shown = ("printed only by builds compiled with tracing" if level == "TRACE" else
                 f"with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS naming {' or '.join(subsys)} "
                 f"(the default, {','.join(default)}, names neither)")
        out.append(f"NCCL {nccl_versions.format_version(since)} {until}: {level}, `GPU Direct RDMA Disabled for "
                   f"{form} (distance D > L)`, {shown} [{source}]")
    return out
