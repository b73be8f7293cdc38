"""Build a :class:`Topology` from an hwloc XML export (``lstopo --of xml``), hwloc 1.x, 2.x or 3.x.

What is read: Package and NUMA locality (cpuset/nodeset), host bridges (``bridge_type="0-1"``),
PCI bridges and devices (``pci_busid``, ``pci_type``), GPU and OpenFabrics OS devices, and the
``NVLinkBandwidth`` distance matrix that hwloc's NVML backend records.
"""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ..errors import InvalidArgument
from ._topo import Topology
from ._tree import Node, assign_bridge_roles

__all__ = ["from_hwloc", "parse_bitmap"]

# hwloc 3 stores osdev_type as a bit mask; hwloc 1.x/2.x as an enum.
_OSDEV3_GPU, _OSDEV3_OPENFABRICS = 1 << 2, 1 << 5
_OSDEV2_GPU, _OSDEV2_OPENFABRICS = 1, 3
_PCI_TYPE = re.compile(r"^([0-9a-fA-F]{4})\s+\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")


def parse_bitmap(text: str | None) -> list[int]:
    """An hwloc bitmap (``"0x00000303,0x03030000,,0x03030303"``) to the list of set bits."""
    if not text:
        return []
    words = text.strip().split(",")
    value = 0
    for w in words:
        w = w.strip()
        if w.lower().startswith("0xf...f"):
            w = "0x0"  # infinitely-set prefix: meaningless for real hardware
        value = (value << 32) | (int(w, 16) if w else 0)
    return [i for i in range(value.bit_length()) if value >> i & 1]


def _load(path_or_text) -> tuple[ET.Element, str, str]:
    """Parse; return (root element, machine name, text origin)."""
    if isinstance(path_or_text, bytes):
        text, name = path_or_text.decode("utf-8", "replace"), "inline XML"
    else:
        s = os.fspath(path_or_text)
        if s.lstrip().startswith("<"):
            text, name = s, "inline XML"
        else:
            p = Path(s)
            if not p.is_file():
                raise InvalidArgument(f"hwloc XML file not found: {p}")
            try:
                text = p.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise InvalidArgument(f"cannot read hwloc XML {p}: {exc.strerror}") from exc
            name = p.stem
    # Drop the DOCTYPE so ElementTree never looks for the DTD.
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise InvalidArgument(f"{name} is not well-formed hwloc XML ({exc}); "
                              "export it again with `lstopo --of xml FILE`") from exc
    if root.tag != "topology":
        raise InvalidArgument(f"{name} is not an hwloc XML export: root element is <{root.tag}>, "
                              "expected <topology>")
    return root, name, text


def _info(el: ET.Element, key: str) -> str | None:
    for i in el.findall("info"):
        if i.get("name") == key:
            return i.get("value")
    return None


class _Builder:
    def __init__(self, major: int):
        self.major = major
        self.by_xml: dict[int, Node] = {}  # id(Element) -> Node
        self.gpu_osdevs: list[tuple[ET.Element, Node]] = []
        self.nic_osdevs: list[tuple[ET.Element, Node]] = []
        self.el_by_ref: dict[str, ET.Element] = {}
        self.node_by_el: dict[int, Node] = {}
        self.packages = 0
        self.package_cpus: dict[int, frozenset[int]] = {}
        self.cpus_by_numa: dict[int, list[int]] = {}

    def osdev_is(self, el: ET.Element, want: str) -> bool:
        raw = el.get("osdev_type")
        sub = (el.get("subtype") or "").lower()
        try:
            t = int(raw) if raw is not None else -1
        except ValueError:
            t = -1
        if self.major >= 3:
            bit = _OSDEV3_GPU if want == "gpu" else _OSDEV3_OPENFABRICS
            return t >= 0 and bool(t & bit)
        if want == "gpu":
            return t == _OSDEV2_GPU or sub in ("cuda", "nvml")
        return t == _OSDEV2_OPENFABRICS or sub == "openfabrics"

    def build(self, el: ET.Element, parent: Node | None, numa: frozenset[int], socket: int | None,
              cpus: frozenset[int] = frozenset()) -> Node | None:
        typ = el.get("type", "")
        for key in (f"{typ}:{el.get('gp_index')}", el.get("id")):
            if key:
                self.el_by_ref[key] = el
        node: Node | None = None
        nodeset = frozenset(parse_bitmap(el.get("nodeset"))) if el.get("nodeset") else None
        if typ in ("Package", "Socket"):
            self.packages += 1
            socket = int(el.get("os_index", self.packages - 1))
            self.package_cpus[socket] = frozenset(parse_bitmap(el.get("cpuset")))
        if el.get("cpuset"):
            cpus = frozenset(parse_bitmap(el.get("cpuset")))
        if nodeset is not None:
            numa = nodeset
        if typ == "NUMANode" and el.get("os_index") is not None:
            self.cpus_by_numa[int(el.get("os_index"))] = parse_bitmap(el.get("cpuset"))
        if typ == "Machine" or parent is None:
            node = Node("machine", _info(el, "DMIProductName") or _info(el, "PlatformModel") or "Machine",
                        numa_nodes=numa or frozenset())
        elif typ in ("Package", "Socket"):
            node = parent.add(Node("package", f"Package {socket}", numa_nodes=numa, socket=socket))
        elif typ == "Bridge":
            hostbridge = (el.get("bridge_type") or "").startswith("0-")
            if hostbridge:
                node = parent.add(Node("hostbridge", f"HostBridge {el.get('bridge_pci', '')}".strip(),
                                       numa_nodes=numa, socket=socket))
                node.attrs["cpuset"] = cpus
            else:
                node = parent.add(self._pci(el, "bridge", numa, socket))
        elif typ == "PCIDev":
            node = parent.add(self._pci(el, "device", numa, socket))
        elif typ == "OSDev":
            if parent.kind == "device":
                if self.osdev_is(el, "gpu"):
                    self.gpu_osdevs.append((el, parent))
                elif self.osdev_is(el, "openfabrics"):
                    self.nic_osdevs.append((el, parent))
            return None
        if node is not None:
            self.node_by_el[id(el)] = node
        here = node if node is not None else parent
        for child in el.findall("object"):
            self.build(child, here, numa, socket, cpus)
        return node

    def fill_sockets(self, root: Node) -> None:
        """hwloc 1.x hangs I/O below the NUMA node, beside the socket: find the socket whose
        CPUs cover the host bridge's locality."""
        for hb in (n for n in root.walk() if n.kind == "hostbridge" and n.socket is None):
            cs = hb.attrs.get("cpuset") or frozenset()
            owners = [s for s, cpus in self.package_cpus.items() if cs and cs <= cpus]
            if len(owners) == 1:
                for n in hb.walk():
                    n.socket = owners[0]

    def _pci(self, el: ET.Element, kind: str, numa, socket) -> Node:
        busid = el.get("pci_busid")
        m = _PCI_TYPE.match(el.get("pci_type") or "")
        cls, ven, dev = (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)) if m else (None, None, None)
        label = _info(el, "PCIDevice") or ("PCI bridge" if kind == "bridge" else "PCI device")
        n = Node(kind, label, bus_id=busid, vendor_id=ven, device_id=dev, class_id=cls,
                 numa_nodes=frozenset(), socket=socket)
        n.attrs["subtype"] = el.get("subtype")
        n.attrs["link_gbps"] = float(el.get("pci_link_speed") or 0.0) * 8 or None
        return n


def _nvlink_matrix(root: ET.Element, b: _Builder, gpu_names: dict[int, str], gpu_models: dict[str, str]):
    """GPU pairs -> NVLink count, from hwloc's NVLinkBandwidth matrix (MB/s per pair)."""
    mat = None
    for el in root.iter():
        if el.tag in ("distances2hetero", "distances2") and el.get("name") == "NVLinkBandwidth":
            mat = el
            break
    if mat is None:
        return {}, "no NVLink information in this XML (PCIe codes only)"
    refs = " ".join(e.text or "" for e in mat.findall("indexes")).split()
    vals = [int(v) for v in " ".join(e.text or "" for e in mat.findall("u64values")).split()]
    n = len(refs)
    if len(vals) != n * n:
        raise InvalidArgument(f"NVLinkBandwidth matrix has {len(vals)} values for {n} objects; the XML is damaged")
    ends: list[tuple[str, str]] = []  # (kind, name)
    for r in refs:
        el = b.el_by_ref.get(r)
        node = None
        if el is not None and el.get("type") == "OSDev":
            # the GPU OS device: its PCI parent is the GPU
            node = next((p for e, p in b.gpu_osdevs if e is el), None)
            ends.append(("gpu", gpu_names.get(id(node), "")) if node is not None else ("other", r))
        elif el is not None and el.get("type") == "PCIDev":
            node = b.node_by_el.get(id(el))
            if node is not None and id(node) in gpu_names:
                ends.append(("gpu", gpu_names[id(node)]))
            elif node is not None and (node.attrs.get("subtype") == "NVSwitch" or node.vendor_id == 0x10DE):
                ends.append(("nvswitch", r))
            else:
                ends.append(("other", r))
        else:
            ends.append(("cpu", r))  # Package or other CPU-side object (POWER NVLink to CPU)
    off = [vals[i * n + j] for i in range(n) for j in range(n) if i != j and vals[i * n + j]]
    # hwloc's NVML backend adds 20000 MB/s per NVLink 1 link (P100) and 25000 per NVLink 2-4 link.
    models = " ".join(gpu_models.values())
    per_link = 20000 if ("P100" in models or (off and all(v % 25000 for v in off))) else 25000
    links: dict[tuple[str, str], int] = {}
    to_switch: dict[str, int] = {}
    for i in range(n):
        for j in range(n):
            if i == j or not vals[i * n + j] or ends[i][0] != "gpu":
                continue
            count = round(vals[i * n + j] / per_link)
            if ends[j][0] == "gpu" and i < j:
                links[(ends[i][1], ends[j][1])] = count
            elif ends[j][0] == "nvswitch":
                to_switch[ends[i][1]] = to_switch.get(ends[i][1], 0) + count
    note = f"NVLink from hwloc's NVLinkBandwidth matrix ({per_link} MB/s per link)"
    if to_switch:
        # NVML reports GPU-to-NVSwitch links only, never the trunks between switches; the
        # switches of one machine form one fabric (DGX-2 joins its two baseboards by trunks),
        # so two GPUs on NVSwitches talk over all the links each has into the fabric.
        names = sorted(to_switch)
        for x in range(len(names)):
            for y in range(x + 1, len(names)):
                a, c = names[x], names[y]
                links[(a, c)] = links.get((a, c), 0) + min(to_switch[a], to_switch[c])
        note += "; GPUs on NVSwitches are assumed to share one switch fabric"
    return links, note


def from_hwloc(path_or_text) -> Topology:
    """Read an hwloc XML export (a path, or the XML text itself) into a :class:`Topology`.

    GPUs are the NVIDIA display/3D controllers (vendor 10de, class 0300/0302), named GPU0,
    GPU1, ... in PCI bus order as nvidia-smi numbers them; NICs are the RDMA (OpenFabrics)
    devices, named as the kernel names them (mlx5_0, ...).
    """
    root_el, name, _ = _load(path_or_text)
    version = root_el.get("version") or "1.0"
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = 1
    top = root_el.find("object")
    if top is None:
        raise InvalidArgument(f"{name} has no objects: not an hwloc topology")
    b = _Builder(major)
    root = b.build(top, None, frozenset(), None)
    assert root is not None
    assign_bridge_roles(root)
    b.fill_sockets(root)
    pci = [n for n in root.walk() if n.kind in ("device", "bridge")]
    if not pci:
        raise InvalidArgument(f"{name} has no PCI objects: export it with I/O devices "
                              "(`lstopo --of xml` keeps them by default; hwloc must be built with PCI support)")
    gpus = sorted((n for n in root.walk() if n.kind == "device" and n.vendor_id == 0x10DE
                   and n.class_id in (0x0300, 0x0302)), key=lambda n: n.bus_id or "")
    devices: list[tuple[dict, Node]] = []
    gpu_names: dict[int, str] = {}
    gpu_models: dict[str, str] = {}
    for i, g in enumerate(gpus):
        osdevs = [e for e, p in b.gpu_osdevs if p is g]
        model = next((_info(e, "GPUModel") for e in osdevs if _info(e, "GPUModel")), None) or g.label
        gname = f"GPU{i}"
        gpu_names[id(g)] = gname
        gpu_models[gname] = model
        devices.append((_device(gname, "gpu", g, model, [e.get("name") for e in osdevs]), g))
    for e, p in sorted(b.nic_osdevs, key=lambda t: t[0].get("name") or ""):
        devices.append((_device(e.get("name") or f"nic@{p.bus_id}", "nic", p, p.label, []), p))
    links, note = _nvlink_matrix(root_el, b, gpu_names, gpu_models)
    machine = root.label if root.label != "Machine" else name
    return Topology(root, devices, source=f"recorded hwloc XML of machine {name} ({machine})",
                    provenance="recorded", nvlinks=links, cpus_by_numa=b.cpus_by_numa,
                    nvlink_note=note)


def _device(name: str, kind: str, node: Node, model: str, aliases: list) -> dict:
    loc = node.locality()
    return {"name": name, "kind": kind, "pci_bus_id": node.bus_id,
            "numa_node": next(iter(loc)) if len(loc) == 1 else None,
            "socket": node.socket, "model": model, "cpus": None,
            "aliases": [a for a in aliases if a]}
