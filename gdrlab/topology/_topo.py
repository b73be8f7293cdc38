"""The :class:`Topology` object: devices, distance matrices, nearest NIC, NCCL's GDR rule, NUMA."""
from __future__ import annotations

import re
from typing import Any

from .. import provenance
from ..errors import InvalidArgument
from ..nccl import versions as nccl_versions
from ._tree import CODE_ORDER, Node, PairCodes, format_cpulist

__all__ = ["Topology", "parse_gdr_level", "gdr_verdict", "NCCL_DEFAULT_GDR_LEVEL", "MAX_DEVICES"]

# The most GPUs and NICs a reader takes (nvidia-smi matrices and hwloc exports alike): every
# matrix is n x n, and the largest real machines have a few dozen.
MAX_DEVICES = 512

# NCCL's path types and defaults by version live in one table (gdrlab.nccl.versions), read at
# NCCL's release tags; a level admits every path type numbered up to it in that version.
_NCCL_PATHS = nccl_versions.path_types()  # the newest version's order
# NCCL's "old style" numeric levels (levelsOldToNew in src/graph/paths.cc, the same 2.12-2.30).
_NCCL_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
NCCL_DEFAULT_GDR_LEVEL = "PXB"  # NCCL_NET_GDR_C2C=0, or NCCL 2.12-2.28; see nccl_versions.default_gdr_level
# NCCL has no NODE: the CPU node it builds is the whole NUMA node, so NODE paths are PHB there.
_SMI_TO_NCCL = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}


def parse_gdr_level(level: Any, nccl_version: Any = None) -> str:
    """An ``NCCL_NET_GDR_LEVEL`` value as NCCL reads it: a path name or an old numeric level.

    Names: the path types of ``nccl_version`` (default: the newest in the table), e.g. LOC, NVL,
    NVB, C2C (2.26+), PIX, PXB, P2C (2.27+), PXN, PHB, SYS (NCCL compares them case-sensitively;
    we accept any case). Numbers: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS.
    """
    names = nccl_versions.path_types(nccl_version)
    if isinstance(level, bool):
        raise InvalidArgument(f"NCCL_NET_GDR_LEVEL must be a level name or number, got {level!r}")
    if isinstance(level, int):
        if level < 0:
            raise InvalidArgument(f"NCCL_NET_GDR_LEVEL must be 0-5 or a name, got {level}")
        return _NCCL_OLD_LEVELS[min(level, len(_NCCL_OLD_LEVELS) - 1)]
    text = str(level).strip()
    if text.upper() in names and text.upper() != "NET":
        return text.upper()
    if text[:1].isdigit():
        try:
            return parse_gdr_level(int(text, 0), nccl_version)
        except ValueError:
            pass
    where = "" if nccl_version is None else f" in NCCL {nccl_versions.format_version(nccl_versions.parse_version(nccl_version))}"
    raise InvalidArgument(
        f"NCCL_NET_GDR_LEVEL={text[:40]!r} is not a level NCCL knows{where}: use one of "
        f"{', '.join(n for n in names if n != 'NET')} or a number 0-5")


def gdr_verdict(gpu: str, nic: str, code: str, why: str, level: Any = None, nccl_version: Any = None, *,
                compute_capability: int | None = None, nvlink: bool | None = None) -> dict:
    """NCCL's GPUDirect RDMA rule for one GPU/NIC pair whose nvidia-smi code is ``code`` (``why``
    says what lies between them), as NCCL ``nccl_version`` applies it (default: the newest version
    in :mod:`gdrlab.nccl.versions`, named in the reason): GDR when the path is no farther than
    ``NCCL_NET_GDR_LEVEL`` (``level``; None is that version's default). ``use_gdr`` is that
    distance rule, which decides the receiving side; ``send`` adds NCCL_NET_GDR_READ's rule for
    the sending side (``compute_capability`` as 70/80/90 and ``nvlink``, whether the GPU has an
    NVLink to another GPU or is the only one, decide it; None where unknown). Shared by the tree
    readers and the matrix reader."""
    if code == "SOC":  # drivers before 2017 printed SOC for SYS
        code = "SYS"
    if code not in _SMI_TO_NCCL:
        raise InvalidArgument(f"{gpu} to {nic} is {code!r}, not a PCIe path code (PIX, PXB, PHB, NODE, SYS)")
    version = nccl_versions.format_version(
        nccl_versions.NEWEST if nccl_version is None else nccl_versions.parse_version(nccl_version))
    names = nccl_versions.path_types(version)
    if level is None:
        lvl, origin = nccl_versions.default_gdr_level(version)
    else:
        lvl = parse_gdr_level(level, version)
        origin = f"NCCL_NET_GDR_LEVEL={level} ({lvl}) in NCCL {version}"
    if nccl_version is None:
        origin += " (the newest NCCL this kit's table knows; pass an NCCL version for another)"
    path = _SMI_TO_NCCL[code]
    use = names.index(path) <= names.index(lvl)
    alias = f" (NCCL calls it {path})" if path != code else ""
    verdict = "uses" if use else "does not use"
    reason = (f"{gpu} to {nic} is {code}{alias}: {why}; with {origin} NCCL {verdict} "
              f"GPUDirect RDMA ({path} {'<=' if use else '>'} {lvl})")
    if use:
        send_ok, send_why = nccl_versions.send_side_gdr(version, compute_capability, nvlink)
    else:
        send_ok, send_why = False, "the path is too far for GDR on either side"
    return {"use_gdr": bool(use), "code": code, "nccl_path": path, "level": lvl, "nccl_version": version,
            "send": {"use_gdr": send_ok, "reason": send_why}, "reason": reason}


class Topology:
    """GPUs and RDMA NICs on a PCIe tree, from live sysfs or a recorded hwloc XML.

    Attributes
    ----------
    devices : list of dict
        One dict per GPU and NIC: ``name`` ("GPU0", "mlx5_0"), ``kind`` ("gpu" or "nic"),
        ``pci_bus_id``, ``numa_node`` (None when unknown), ``socket``, ``model``, ``cpus``.
    source : str
        Where the tree came from, e.g. "live sysfs of host h200" or
        "recorded hwloc XML of machine nvidiaDGX2 (NVIDIA DGX-2H)".
    provenance : str
        "live" or "recorded".
    pci_problems : list of dict
        What :func:`gdrlab.topology.check_pci_tree` found wrong with the PCI tree (``[]`` for a
        tree a real machine can have).
    """

    def __init__(self, root: Node, devices: list[tuple[dict, Node]], *, source: str,
                 provenance: str, nvlinks: dict[tuple[str, str], int] | None = None,
                 cpus_by_numa: dict[int, list[int]] | None = None, nvlink_note: str = "",
                 pci_problems: list[dict] | None = None) -> None:
        self.root = root
        self._nodes = {d["name"]: n for d, n in devices}
        self.devices = [d for d, _ in devices]
        self._by_name: dict[str, dict] = {}
        for d in self.devices:
            self._by_name.setdefault(d["name"], d)  # the first of a name, as a scan would find
        self._codes = PairCodes()  # each device's ancestors, read once (the tree is not edited)
        self.source = source
        self.provenance = provenance
        self.nvlinks = dict(nvlinks or {})
        self.nvlink_note = nvlink_note
        self.cpus_by_numa = dict(cpus_by_numa or {})
        self.pci_problems = list(pci_problems or [])
        cpulists: dict[int, str] = {}  # once per NUMA node, however many devices share it
        for d in self.devices:
            node = d.get("numa_node")
            if d.get("cpus") is None and node is not None and node in self.cpus_by_numa:
                if node not in cpulists:
                    cpulists[node] = format_cpulist(self.cpus_by_numa[node])
                d["cpus"] = cpulists[node]

    # ------------------------------------------------------------------ lookups
    @property
    def gpus(self) -> list[str]:
        return [d["name"] for d in self.devices if d["kind"] == "gpu"]

    @property
    def nics(self) -> list[str]:
        return [d["name"] for d in self.devices if d["kind"] == "nic"]

    def device(self, name: str) -> dict:
        d = self._by_name.get(name)
        if d is not None:
            return d
        known = ", ".join(d["name"] for d in self.devices) or "none"
        raise InvalidArgument(f"no device named {name!r} in this topology (devices: {known})")

    def node(self, name: str) -> Node:
        self.device(name)
        return self._nodes[name]

    # ------------------------------------------------------------------ matrices
    def pcie_code(self, a: str, b: str) -> tuple[str, str]:
        """The PCIe-only code between two devices and why."""
        return self._codes.code(self.node(a), self.node(b))

    def nvlink_count(self, a: str, b: str) -> int:
        return self.nvlinks.get((a, b)) or self.nvlinks.get((b, a)) or 0

    def pcie_matrix(self) -> dict[str, dict[str, str]]:
        """PCIe-only codes (X, PIX, PXB, PHB, NODE, SYS) for every pair of devices."""
        names = [d["name"] for d in self.devices]
        nodes = [self.node(a) for a in names]
        code = self._codes.code
        return {a: {b: code(na, nb, False)[0] for b, nb in zip(names, nodes)} for a, na in zip(names, nodes)}

    def matrix(self) -> dict[str, dict[str, str]]:
        """Codes as ``nvidia-smi topo -m`` shows them: NV# where NVLink joins two GPUs."""
        return self._with_nvlinks(self.pcie_matrix())

    def _with_nvlinks(self, pcie: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        """A copy of ``pcie`` with NV# where NVLink joins two GPUs."""
        out = {a: dict(row) for a, row in pcie.items()}
        for (a, b), n in self.nvlinks.items():
            for x, y in ((a, b), (b, a)):
                if n and x != y and x in out and y in out[x]:
                    out[x][y] = f"NV{self.nvlink_count(x, y)}"
        return out

    # ------------------------------------------------------------------ NIC choice
    def nearest_nic(self, gpu_name: str) -> str | None:
        """The NIC with the closest PCIe code to this GPU (ties: the lower name); None if no NIC."""
        return self._nearest_nic(gpu_name, sorted(self.nics, key=_natural_key))

    def _nearest_nic(self, gpu_name: str, nics: list[str],
                     pcie: dict[str, dict[str, str]] | None = None) -> str | None:
        """:meth:`nearest_nic` over ``nics`` (already in natural order), codes from ``pcie`` if given."""
        gpu = self.node(gpu_name)
        best = None
        for nic in nics:
            code = pcie[gpu_name][nic] if pcie is not None else self._codes.code(gpu, self.node(nic), False)[0]
            rank = CODE_ORDER.index(code)
            if best is None or rank < best[0]:
                best = (rank, nic)
        return best[1] if best else None

    def gdr_decision(self, gpu: str, nic: str, level: Any = None, nccl_version: Any = None, *,
                     compute_capability: int | None = None) -> dict:
        """NCCL's default choice of GPUDirect RDMA for one GPU/NIC pair, from the topology alone.

        NCCL uses GDR when the GPU-NIC path is no farther than ``NCCL_NET_GDR_LEVEL`` (PXB by
        default; P2C from NCCL 2.29 with NCCL_NET_GDR_C2C=1, its default, which admits the same
        PCIe paths: at most PCIe switches, never through the CPU). ``level`` is that variable's
        value (a name such as "PHB" or a number 0-5); None means the version's default.
        ``nccl_version`` ("2.19.3", "2.28"): the rule of that release (default: the newest in
        :mod:`gdrlab.nccl.versions`, named in the reason). ``send`` in the result adds the
        sending side's rule (NCCL_NET_GDR_READ unset), which this topology's NVLinks decide for a
        GPU older than Ampere (``compute_capability`` 70, 80, 90; None: unknown). NCCL also needs
        both the GPU and the NIC to support GDR (driver, peer memory or dma-buf): that is the
        doctor's job, not the topology's.
        """
        if self.device(gpu)["kind"] != "gpu":
            raise InvalidArgument(f"{gpu} is not a GPU")
        if self.device(nic)["kind"] != "nic":
            raise InvalidArgument(f"{nic} is not a NIC")
        code, why = self.pcie_code(gpu, nic)
        gpus = self.gpus
        nvlink = len(gpus) == 1 or any(self.nvlink_count(gpu, g) for g in gpus if g != gpu)
        return gdr_verdict(gpu, nic, code, why, level, nccl_version,
                           compute_capability=compute_capability, nvlink=nvlink)

    # ------------------------------------------------------------------ NUMA
    def numa_binding(self, gpu: str) -> dict:
        """The NUMA node local to a device and the numactl prefix that keeps a process there."""
        d = self.device(gpu)
        node = d.get("numa_node")
        if node is None:
            return {"numa_node": None, "cpus": d.get("cpus") or "", "numactl": "",
                    "reason": f"the NUMA node of {gpu} is unknown (single-node machine or not reported)"}
        return {"numa_node": node, "cpus": d.get("cpus") or "",
                "numactl": f"numactl --cpunodebind={node} --membind={node}",
                "reason": f"{gpu} hangs off NUMA node {node}: run its process on that node's cores "
                          f"and memory so copies do not cross the SMP interconnect"}

    # ------------------------------------------------------------------ export
    def to_json(self, level: Any = None, nccl_version: Any = None) -> dict:
        gpus, nics = self.gpus, self.nics
        pcie = self.pcie_matrix()  # built once: the matrix, nearest NICs and GDR all read it
        by_name = sorted(nics, key=_natural_key)
        gdr: dict[str, dict[str, dict]] = {}
        for g in gpus:
            gdr[g] = {n: self.gdr_decision(g, n, level, nccl_version) for n in nics}
        return {
            "source": self.source,
            "provenance": (provenance.live({"hardware": self.source}) if self.provenance == "live"
                           else provenance.recorded(self.source)),
            "devices": [dict(d) for d in self.devices],
            "matrix": self._with_nvlinks(pcie),
            "pcie": pcie,
            "nvlink_note": self.nvlink_note,
            "nearest_nic": {g: self._nearest_nic(g, by_name, pcie) for g in gpus},
            "gdr": gdr,
            "numa": {g: self.numa_binding(g) for g in gpus},
            "pci_problems": [dict(p) for p in self.pci_problems],
            "warnings": [f"{p['where']}: {p['message']}" for p in self.pci_problems],
        }

    def __repr__(self) -> str:
        return f"<Topology {len(self.gpus)} GPUs, {len(self.nics)} NICs from {self.source}>"


def _natural_key(name: str) -> list[tuple[int, str] | str]:
    """``mlx5_10`` after ``mlx5_9``: a run of digits compares as its number does (by length without
    leading zeros, then digit by digit), with no int() of a run that may be thousands of digits."""
    parts: list[tuple[int, str] | str] = []
    for i, t in enumerate(_DIGITS.split(name)):
        parts.append((len(t.lstrip("0")), t.lstrip("0")) if i % 2 else t)
    return parts


_DIGITS = re.compile(r"(\d+)")
