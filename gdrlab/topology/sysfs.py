"""Build a :class:`Topology` from a Linux sysfs tree (live ``/`` or a recorded copy).

The PCIe tree is the directory chain under ``sys/devices/pciDDDD:BB/``: the ``pciDDDD:BB``
directory is a host bridge, every PCI address below it is a bridge or a device. RDMA NICs come
from ``sys/class/infiniband/*/device``. NUMA locality is each device's ``numa_node``.
"""
from __future__ import annotations

import os
import socket as _socket
import warnings
from pathlib import Path

from ..errors import InvalidArgument
from ..hw.sysfs import check_root, numa_cpus, pci_devices, rdma_devices, read_text
from ._check import PciTreeWarning, check_pci_tree, format_problems
from ._topo import Topology
from ._tree import MAX_LISTED, Node, assign_bridge_roles, parse_cpulist

__all__ = ["from_sysfs"]


def _socket_of_cpu(root: Path, cpu: int) -> int | None:
    t = read_text(root / f"sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id")
    try:
        return int(t) if t is not None else None
    except ValueError:
        return None


def from_sysfs(root: str | os.PathLike[str] = "/", nvlinks: dict | None = None) -> Topology:
    """Read the PCIe tree of ``root`` (``/`` for this machine).

    Parameters
    ----------
    root : path
        A sysfs root: a directory holding ``sys/bus/pci/devices`` etc.
    nvlinks : dict, optional
        ``{(bus_id_a, bus_id_b): links}`` between GPUs. By default, for the live root, NVLink
        counts come from NVML when it is present; for a recorded tree there are none.
    """
    r = check_root(root)
    try:
        topo = _read(r, nvlinks)
    except MemoryError:
        raise InvalidArgument(f"sysfs root {r}: not enough memory to read its PCI tree") from None
    if topo.pci_problems:
        warnings.warn(PciTreeWarning(f"{r}: {format_problems(topo.pci_problems)}"), stacklevel=2)
    return topo


def _node_cpus(r: Path) -> dict[int, list[int]]:
    """NUMA node -> its CPUs; MAX_LISTED CPUs in all, checked before a range is expanded."""
    out: dict[int, list[int]] = {}
    left = MAX_LISTED
    for n, text in numa_cpus(r).items():
        try:
            out[n] = parse_cpulist(text, limit=left)
        except ValueError as exc:
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise InvalidArgument(f"{r / f'sys/devices/system/node/node{n}/cpulist'}: {shown!r} is not a CPU list "
                                  f"({exc}; in all NUMA nodes at most {MAX_LISTED} CPUs are read)") from None
        left -= len(out[n])
    return out


def _read(r: Path, nvlinks: dict | None) -> Topology:
    live = str(r.resolve()) == "/"
    devs = pci_devices(r)
    node_cpus = _node_cpus(r)
    single_numa = next(iter(node_cpus)) if len(node_cpus) == 1 else None
    if not node_cpus and live:
        single_numa = None

    machine = Node("machine", _socket.gethostname() if live else r.name or str(r))
    hostbridges, pci_nodes = _build_tree(r, machine, devs)
    _place_host_bridges(r, machine, hostbridges, node_cpus, single_numa)

    devices: list[tuple[dict, Node]] = []
    gpus = sorted((n for n in pci_nodes.values() if n.kind == "device" and n.vendor_id == 0x10DE
                   and n.class_id in (0x0300, 0x0302)), key=lambda n: n.bus_id or "")
    for i, g in enumerate(gpus):
        devices.append((_device(f"GPU{i}", "gpu", g, single_numa), g))
    for nic in rdma_devices(r):
        n = pci_nodes.get(nic["pci_bus_id"] or "")
        if n is not None:
            devices.append((_device(nic["name"], "nic", n, single_numa), n))

    links, note = _nvlinks(nvlinks, live, gpus)
    source = (f"live sysfs of host {machine.label}" if live
              else f"recorded sysfs tree {r.name} ({r})")
    problems = check_pci_tree(machine)
    return Topology(machine, devices, source=source, provenance="live" if live else "recorded",
                    nvlinks=links, cpus_by_numa=node_cpus, nvlink_note=note, pci_problems=problems)


def _build_tree(r: Path, machine: Node, devs: list[dict]) -> tuple[dict[str, Node], dict[str, Node]]:
    """Host bridges and PCI functions below ``machine``, from each function's sysfs chain."""
    by_bus = {d["pci_bus_id"]: d for d in devs}
    hostbridges: dict[str, Node] = {}
    pci_nodes: dict[str, Node] = {}
    for d in devs:
        chain = d["sysfs_path"]
        if not chain:
            continue
        hb_name = chain[0]
        hb = hostbridges.get(hb_name)
        if hb is None:
            hb = machine.add(Node("hostbridge", f"HostBridge {hb_name}"))
            hostbridges[hb_name] = hb
        parent = hb
        for part in chain[1:]:
            bus = part.lower()
            n = pci_nodes.get(bus)
            if n is None:
                info = by_bus.get(bus, {})
                kind = "bridge" if info.get("is_bridge") else "device"
                cls = info.get("class_id")
                n = parent.add(Node(kind, "PCI bridge" if kind == "bridge" else "PCI device", bus_id=bus,
                                    vendor_id=info.get("vendor_id"), device_id=info.get("device_id"),
                                    class_id=(cls >> 8) if cls is not None else None))
                n.attrs["sysfs"] = info
                if kind == "bridge":
                    n.attrs["bus_range"] = _bridge_range(r, bus)
                pci_nodes[bus] = n
            parent = n
    for name, hb in hostbridges.items():
        hb.attrs["bus_range"] = _root_range(name, hb)
    return hostbridges, pci_nodes


def _place_host_bridges(r: Path, machine: Node, hostbridges: dict[str, Node], node_cpus: dict,
                        single_numa: int | None) -> None:
    """NUMA node and socket of each host bridge; host bridges hung below their socket."""
    # NUMA locality of a host bridge: what its devices report (all share one).
    for hb in hostbridges.values():
        nodes = {n.attrs["sysfs"].get("numa_node") for n in hb.walk() if n.kind in ("bridge", "device")}
        nodes.discard(None)
        if len(nodes) == 1:
            hb.numa_nodes = frozenset(nodes)
        elif not nodes and single_numa is not None:
            hb.numa_nodes = frozenset({single_numa})  # one-node machines often report -1
        if len(hb.numa_nodes) == 1:
            (numa,) = tuple(hb.numa_nodes)
            cpus = node_cpus.get(numa) or []
            hb.socket = _socket_of_cpu(r, cpus[0]) if cpus else None
    # Hang host bridges below their socket so the drawing shows sockets as hwloc does.
    packages: dict[int, Node] = {}
    moved: set[int] = set()
    numa_of: dict[int, set[int]] = {}
    for hb in list(hostbridges.values()):
        if hb.socket is None:
            continue
        pkg = packages.get(hb.socket)
        if pkg is None:
            pkg = packages[hb.socket] = machine.add(Node("package", f"Package {hb.socket}", socket=hb.socket))
        moved.add(id(hb))
        pkg.add(hb)
        numa_of.setdefault(hb.socket, set()).update(hb.numa_nodes)
    for sock, nodes in numa_of.items():
        packages[sock].numa_nodes = frozenset(nodes)
    # one pass, not a list.remove per host bridge
    machine.children = [c for c in machine.children if id(c) not in moved]
    for hb in hostbridges.values():  # every bridge and device is below exactly one host bridge
        for n in hb.walk():
            if n.kind in ("bridge", "device"):
                n.socket = hb.socket
    assign_bridge_roles(machine)


def _nvlinks(nvlinks: dict | None, live: bool, gpus: list[Node]) -> tuple[dict[tuple[str, str], int], str]:
    """NVLink counts between GPU names, and where they came from."""
    note = ("recorded sysfs has no NVLink information (PCIe codes only)" if not live
            else "no GPU, so no NVLink" if not gpus else "NVLink not queried")
    links: dict[tuple[str, str], int] = {}
    names = {g.bus_id: f"GPU{i}" for i, g in enumerate(gpus)}
    if nvlinks is None and live and gpus:
        from ..hw.nvml import nvlink_pairs
        nvlinks, note = nvlink_pairs()
    elif nvlinks is not None:
        note = "NVLink counts given by the caller"
    for (a, b), count in (nvlinks or {}).items():
        if a in names and b in names and count:
            links[(names[a], names[b])] = int(count)
    return links, note


def _bridge_range(root: Path, bus_id: str) -> tuple[int, int, int] | None:
    """(domain, secondary, subordinate) from the bridge's sysfs files; None where not recorded."""
    d = root / "sys/bus/pci/devices" / bus_id
    sec, sub = read_text(d / "secondary_bus_number"), read_text(d / "subordinate_bus_number")
    try:
        return int(bus_id.split(":")[0], 16), int(sec or ""), int(sub or "")
    except ValueError:
        return None


def _root_range(name: str, hb: Node) -> tuple[int, int, int] | None:
    """``pci0000:80``: domain 0, root bus 0x80; the highest bus below it is the subordinate."""
    try:
        dom, bus = (int(x, 16) for x in name.removeprefix("pci").split(":"))
    except ValueError:
        return None
    below = []
    for n in hb.walk():
        try:
            n_dom, n_bus, _ = (n.bus_id or "").split(":")
            if int(n_dom, 16) == dom:
                below.append(int(n_bus, 16))
        except ValueError:
            continue  # the host bridge itself, or a directory that is not a PCI address
    return dom, bus, max(below + [bus])


def _device(name: str, kind: str, n: Node, single_numa: int | None) -> dict:
    info = n.attrs.get("sysfs", {})
    numa = info.get("numa_node")
    inferred = False
    if numa is None and single_numa is not None:
        numa, inferred = single_numa, True
    return {"name": name, "kind": kind, "pci_bus_id": n.bus_id, "numa_node": numa,
            "numa_inferred": inferred, "socket": n.socket,
            "model": f"[{info.get('vendor_id') or 0:04x}:{info.get('device_id') or 0:04x}]",
            "cpus": info.get("local_cpulist"), "aliases": []}
