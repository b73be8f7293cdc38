"""The PCIe tree both readers (hwloc XML and sysfs) build, and nvidia-smi's distance codes on it.

A tree is made of :class:`Node` objects: the machine, CPU packages (sockets), PCIe host bridges,
PCI bridges and PCI devices. Bridges get a role (``rootport``, ``usp`` or ``dsp``) so that a PCIe
switch, which Linux and hwloc show as one upstream port with several downstream ports below it,
can be counted as *one* switch, as nvidia-smi and NCCL count it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

__all__ = ["Node", "pcie_code", "path_between", "assign_bridge_roles", "format_cpulist",
           "parse_cpulist", "CODE_ORDER"]

# From closest to farthest; NV# is handled separately (it wins over PCIe where present).
CODE_ORDER = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(eq=False)
class Node:
    """One object of the tree.

    ``kind`` is one of ``machine``, ``package``, ``hostbridge``, ``bridge`` or ``device``.
    ``numa_nodes`` is the set of NUMA nodes the object is local to (empty when unknown).
    """

    kind: str
    label: str
    parent: "Node | None" = None
    children: list["Node"] = field(default_factory=list)
    bus_id: str | None = None
    vendor_id: int | None = None
    device_id: int | None = None
    class_id: int | None = None  # 16-bit base class + subclass, e.g. 0x0302
    numa_nodes: frozenset[int] = frozenset()
    socket: int | None = None
    role: str = ""  # bridges: rootport, usp, dsp
    switch_id: int | None = None
    attrs: dict = field(default_factory=dict)

    def add(self, child: "Node") -> "Node":
        child.parent = self
        self.children.append(child)
        return child

    def ancestors(self) -> list["Node"]:
        """Self first, then parent, ..., root."""
        out: list[Node] = []
        node: Node | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def walk(self) -> Iterator["Node"]:
        """Self, then every descendant, depth first in child order (no recursion: any depth)."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def host_bridge(self) -> "Node | None":
        for a in self.ancestors():
            if a.kind == "hostbridge":
                return a
        return None

    def locality(self) -> frozenset[int]:
        """NUMA nodes of the nearest ancestor (or self) that knows them."""
        for a in self.ancestors():
            if a.numa_nodes:
                return a.numa_nodes
        return frozenset()

    def describe(self) -> str:
        if self.bus_id:
            return f"{self.label} ({self.bus_id})"
        return self.label


def assign_bridge_roles(root: Node) -> None:
    """Label bridges as root port, switch upstream port (usp) or downstream port (dsp).

    A bridge right below a host bridge is a root port. Below a root port or a downstream port,
    a bridge is the upstream port of a new switch; below an upstream port it is one of that
    switch's downstream ports. Every PCIe switch is built this way (one upstream port, an
    internal bus, downstream ports), so the alternation needs no config-space reads.
    """
    next_id = 0
    for child in root.walk():  # parents come before their children
        p = child.parent
        if child.kind != "bridge" or p is None:
            continue
        if p.kind not in ("bridge", "device"):  # below a host bridge (or a package/machine)
            child.role, child.switch_id = "rootport", None
        elif p.kind == "bridge" and p.role == "usp":
            child.role, child.switch_id = "dsp", p.switch_id
        else:  # below a root port, a downstream port or (oddly) a device
            child.role, child.switch_id = "usp", next_id
            next_id += 1


def path_between(a: Node, b: Node) -> tuple[list[Node], Node]:
    """The nodes from ``a`` up to the common ancestor and down to ``b``; and that ancestor."""
    up_a = a.ancestors()
    up_b = b.ancestors()
    ids_b = {id(n) for n in up_b}
    lca = next(n for n in up_a if id(n) in ids_b)
    left = up_a[: up_a.index(lca) + 1]
    right = up_b[: up_b.index(lca)]
    return left + list(reversed(right)), lca


def pcie_code(a: Node, b: Node) -> tuple[str, str]:
    """nvidia-smi's PCIe code for two devices, with the reason in words.

    X: the same device. PIX: at most one PCIe switch (or one bridge) on the path. PXB: several
    switches, no host bridge. PHB: through a PCIe host bridge. NODE: between host bridges of one
    NUMA node. SYS: across the SMP interconnect between NUMA nodes (QPI/UPI/Infinity Fabric).
    """
    if a is b:
        return "X", "same device"
    path, lca = path_between(a, b)
    if lca.kind in ("bridge", "device"):
        units = set()
        for n in path:
            if n.kind != "bridge":
                continue
            # A switch's upstream and downstream ports are one unit; a root port is its own.
            units.add(("switch", n.switch_id) if n.role in ("usp", "dsp") else ("bridge", id(n)))
        if len(units) <= 1:
            return "PIX", f"through one PCIe switch or bridge ({lca.describe()})"
        return "PXB", f"through {len(units)} PCIe switches, no host bridge (meet at {lca.describe()})"
    if lca.kind == "hostbridge":
        return "PHB", f"through PCIe host bridge {lca.describe()}"
    hb_a, hb_b = a.host_bridge(), b.host_bridge()
    loc_a = (hb_a or a).locality()
    loc_b = (hb_b or b).locality()
    if loc_a and loc_a == loc_b and len(loc_a) == 1:
        (node,) = tuple(loc_a)
        return "NODE", f"between two host bridges of NUMA node {node}"
    if loc_a and loc_b:
        return "SYS", (f"across the SMP interconnect (NUMA {format_cpulist(sorted(loc_a))} to "
                       f"{format_cpulist(sorted(loc_b))})")
    return "SYS", "between host bridges whose NUMA locality is unknown (assumed across the SMP interconnect)"


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]``; raises ValueError on junk."""
    out: list[int] = []
    text = text.strip()
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def format_cpulist(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"`` (the form numactl and sysfs use)."""
    cpus = sorted(set(int(c) for c in cpus))
    if not cpus:
        return ""
    parts, start, prev = [], cpus[0], cpus[0]
    for c in cpus[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
        if c is not None:
            start = prev = c
    return ",".join(parts)
