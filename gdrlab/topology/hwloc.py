"""Build a :class:`Topology` from an hwloc XML export (``lstopo --of xml``), hwloc 1.x, 2.x or 3.x.

What is read: Package and NUMA locality (cpuset/nodeset), host bridges (``bridge_type="0-1"``),
PCI bridges and devices (``pci_busid``, ``pci_type``), GPU and OpenFabrics OS devices, and the
``NVLinkBandwidth`` distance matrix that hwloc's NVML backend records.
"""
from __future__ import annotations

import os
import re
import warnings
import xml.etree.ElementTree as ET
from typing import overload
from pathlib import Path

from defusedxml import DefusedXmlException, DTDForbidden, EntitiesForbidden, ExternalReferenceForbidden
from defusedxml.ElementTree import fromstring as _safe_fromstring

from ..errors import InvalidArgument
from ._check import PciTreeWarning, check_pci_tree, format_problems
from ._topo import MAX_DEVICES, Topology
from ._tree import (MAX_BITMAP_WORDS, MAX_LISTED, BitmapTooWide, Node, assign_bridge_roles, bitmap_bits,
                    bitmap_value, parse_bitmap)

__all__ = ["MAX_BITMAP_WORDS", "bitmap_value", "from_hwloc", "parse_bitmap", "recorded_machines"]

_DATA = Path(__file__).resolve().parent.parent / "data" / "hwloc"
# hwloc 3 stores osdev_type as a bit mask; hwloc 1.x/2.x as an enum.
_OSDEV3_GPU, _OSDEV3_OPENFABRICS = 1 << 2, 1 << 5
_OSDEV2_GPU, _OSDEV2_OPENFABRICS = 1, 3
_PCI_TYPE = re.compile(r"([0-9a-fA-F]{4}) +\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")
_BUSID = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_BRIDGE_PCI = re.compile(r"([0-9a-fA-F]{4,8}):\[([0-9a-fA-F]{2})-([0-9a-fA-F]{2})\]")
# The deepest real export nests about a dozen objects; a PCIe hierarchy cannot be deeper than
# its 256 bus numbers. Deeper input is not an hwloc export, and the drawing code recurses.
MAX_DEPTH = 300
MAX_BYTES = 64 * 1024 * 1024  # the largest real exports (thousands of PUs) are a few MB
# Bitmaps (cpuset, nodeset) are refused beyond MAX_BITMAP_WORDS words, from their length, and kept
# as ints (a bit per PU); NUMA nodes' CPUs, NUMA sets and packages' CPUs (to place hwloc 1.x host
# bridges) are listed, MAX_LISTED entries in all (see _tree.py).
# The NVLinkBandwidth matrix joins GPUs, NVSwitches and CPUs: n objects, n * n values.
MAX_NVLINK_OBJECTS = 2 * MAX_DEVICES
_MAX_U64_DIGITS = 20
_TOKEN = re.compile(r"\S+")


def recorded_machines() -> dict[str, Path]:
    """Shipped hwloc XML exports: name -> path (see ``gdrlab/data/hwloc/README.md``).

    ``nvidiaDGX2`` (16 V100 on NVSwitch, PLX switches, two sockets; the export has no NICs)
    and ``power8gpudistances`` (IBM POWER8 with 4 NVLink-attached P100) are real machines from
    hwloc's test suite (BSD-3-Clause). ``32em64t-2n8c2t-pci-normalio``, where it is still
    shipped, is a hand-edited hwloc test fixture, not a real machine: it fails
    :func:`check_pci_tree` and loading it warns.
    """
    return {p.stem: p for p in sorted(_DATA.glob("*.xml"))}


def _shown(value: str, limit: int = 40) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")


def _resolve(path_or_text: str | bytes | os.PathLike[str]) -> tuple[bytes | str, str, str]:
    """(XML bytes or text, name for messages, machine name) from a path, a shipped name or text."""
    if isinstance(path_or_text, bytes):
        return path_or_text, "inline XML", "inline XML"
    s = os.fspath(path_or_text)
    if s.lstrip().startswith("<"):
        return s, "inline XML", "inline XML"
    p = Path(s)
    shipped = recorded_machines()
    if not p.is_file() and s in shipped:
        p = shipped[s]
    if not p.is_file():
        raise InvalidArgument(f"hwloc XML file not found: {s} (shipped machines: {', '.join(shipped)})")
    try:
        if p.stat().st_size > MAX_BYTES:
            raise InvalidArgument(f"{p}: {p.stat().st_size} bytes is larger than any hwloc export "
                                  f"({MAX_BYTES // 2**20} MiB at most)")
        return p.read_bytes(), str(p), p.stem
    except OSError as exc:
        raise InvalidArgument(f"cannot read hwloc XML {p}: {exc.strerror}") from exc


def _parse(data: bytes | str, name: str) -> ET.Element:
    """defusedxml: no entity declarations, no external references; a DOCTYPE naming hwloc's DTD
    (as every lstopo export has) is allowed and never fetched."""
    try:
        return _safe_fromstring(data)
    except EntitiesForbidden as exc:
        raise InvalidArgument(f"{name} declares the XML entity {exc.name!r}: refused (hwloc exports declare "
                              "no entities; entity expansion is how 'billion laughs' documents explode)") from None
    except (ExternalReferenceForbidden, DTDForbidden) as exc:
        raise InvalidArgument(f"{name} refers to an external resource ({type(exc).__name__}): refused") from None
    except DefusedXmlException as exc:
        raise InvalidArgument(f"{name} was refused by the XML parser's safety checks: {exc}") from None
    except ET.ParseError as exc:
        raise InvalidArgument(f"{name} is not well-formed hwloc XML ({exc}); "
                              "export it again with `lstopo --of xml FILE`") from None
    except UnicodeError as exc:
        raise InvalidArgument(f"{name} is not valid text ({getattr(exc, 'reason', exc)})") from None


def _check_depth(root: ET.Element, name: str) -> None:
    stack = [(root, 0)]
    while stack:
        el, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidArgument(f"{name} nests elements more than {MAX_DEPTH} deep: not an hwloc export "
                                  "(real ones nest about a dozen; PCIe has at most 256 buses)")
        stack.extend((c, depth + 1) for c in el)


def _load(data: bytes | str, name: str) -> ET.Element:
    """Parse; return the root element."""
    root = _parse(data, name)
    if root.tag != "topology":
        raise InvalidArgument(f"{name} is not an hwloc XML export: root element is <{root.tag[:40]}>, "
                              "expected <topology>")
    _check_depth(root, name)
    return root


def _info(el: ET.Element, key: str) -> str | None:
    for i in el.findall("info"):
        if i.get("name") == key:
            return i.get("value")
    return None


class _Builder:
    """Turns the XML objects into :class:`Node` objects; every attribute it reads is checked,
    and a bad one is one error naming the file, the object and the attribute."""

    def __init__(self, major: int, name: str) -> None:
        self.major = major
        self.name = name
        self.nic_osdevs: list[tuple[ET.Element, Node]] = []
        self.gpu_parent: dict[int, Node] = {}  # id(GPU OS device element) -> its PCI device
        self.osdevs_of: dict[int, list[ET.Element]] = {}  # id(PCI device node) -> its GPU OS devices
        self.gpus = 0
        self.el_by_ref: dict[str, ET.Element] = {}
        self.node_by_el: dict[int, Node] = {}
        self.packages = 0
        # Bitmaps are kept as ints (bit i: PU or NUMA node i); only what a Topology lists is
        # expanded: NUMA nodes' CPUs, the NUMA sets of nodes, packages' CPUs: MAX_LISTED in all.
        self.package_cpus: dict[int, int] = {}
        self.cpus_by_numa: dict[int, list[int]] = {}
        self.numa_sets: dict[int, frozenset[int]] = {0: frozenset()}
        self.listed = 0

    # ------------------------------------------------------------------ checked attributes
    def bad(self, el: ET.Element, key: str, why: str) -> InvalidArgument:
        what = f"{el.get('type', el.tag)} object" + (f" {el.get('gp_index')}" if el.get("gp_index") else "")
        what = what if len(what) < 80 else what[:80] + "..."
        return InvalidArgument(f"{self.name}: attribute {key}={_shown(el.get(key) or '')} of {what} {why}")

    def bitmap(self, el: ET.Element, key: str) -> int:
        try:
            return bitmap_value(el.get(key))
        except BitmapTooWide as exc:
            raise self.bad(el, key, f"is refused: {exc}") from None
        except ValueError as exc:
            raise self.bad(el, key, f"is not an hwloc bitmap: {exc}") from None

    def listed_bits(self, value: int, what: str) -> list[int]:
        """The set bits of ``value``, counted against MAX_LISTED for the whole file first."""
        self.listed += value.bit_count()
        if self.listed > MAX_LISTED:
            raise InvalidArgument(f"{self.name}: its {what} list more than {MAX_LISTED} CPUs and NUMA nodes "
                                  "in all (the largest real export has 8,192 PUs): not an hwloc export")
        return bitmap_bits(value)

    def numa_set(self, value: int) -> frozenset[int]:
        """One frozenset per distinct nodeset, however many objects share it."""
        got = self.numa_sets.get(value)
        if got is None:
            got = self.numa_sets[value] = frozenset(self.listed_bits(value, "nodesets"))
        return got

    def count_device(self, el: ET.Element, what: str) -> None:
        """Refuse the file at its MAX_DEVICES + 1st GPU or RDMA NIC, before the rest is read."""
        if self.gpus + len(self.nic_osdevs) > MAX_DEVICES:
            raise InvalidArgument(f"{self.name}: more than {MAX_DEVICES} GPUs and RDMA NICs (the "
                                  f"{MAX_DEVICES + 1}th is {what} {_shown(el.get('pci_busid') or el.get('name') or '')}); "
                                  f"at most {MAX_DEVICES} are read, as for nvidia-smi matrices")

    @overload
    def integer(self, el: ET.Element, key: str, default: int) -> int: ...

    @overload
    def integer(self, el: ET.Element, key: str, default: None = None) -> int | None: ...

    def integer(self, el: ET.Element, key: str, default: int | None = None) -> int | None:
        raw = el.get(key)
        if raw is None:
            return default
        text = raw.strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 10:
            raise self.bad(el, key, "is not a non-negative integer")
        return int(text)

    def osdev_is(self, el: ET.Element, want: str) -> bool:
        raw = el.get("osdev_type")
        sub = (el.get("subtype") or "").lower()
        t = self.integer(el, "osdev_type", -1) if raw is not None and raw.strip().isdecimal() else -1
        if self.major >= 3:
            bit = _OSDEV3_GPU if want == "gpu" else _OSDEV3_OPENFABRICS
            return t >= 0 and bool(t & bit)
        if want == "gpu":
            return t == _OSDEV2_GPU or sub in ("cuda", "nvml")
        return t == _OSDEV2_OPENFABRICS or sub == "openfabrics"

    # ------------------------------------------------------------------ the walk
    def build(self, top: ET.Element) -> Node:
        """Walk the objects depth first with an explicit stack (no recursion limit)."""
        root: Node | None = None
        stack: list[tuple[ET.Element, Node | None, int, int | None, int]] = [(top, None, 0, None, 0)]
        while stack:
            el, parent, numa, socket, cpus = stack.pop()
            node, numa, socket, cpus = self.one(el, parent, numa, socket, cpus)
            if node is not None and root is None:
                root = node
            if el.get("type") == "OSDev":
                continue
            here = node if node is not None else parent
            stack.extend((c, here, numa, socket, cpus) for c in reversed(el.findall("object")))
        assert root is not None
        return root

    def one(self, el: ET.Element, parent: Node | None, numa: int, socket: int | None,
            cpus: int) -> tuple[Node | None, int, int | None, int]:
        """One object: its Node (or None) and the locality its children inherit (nodeset and
        cpuset as ints)."""
        typ = el.get("type", "")
        for key in (f"{typ}:{el.get('gp_index')}", el.get("id")):
            if key:
                self.el_by_ref[key] = el
        if el.get("nodeset"):
            numa = self.bitmap(el, "nodeset")
        if el.get("cpuset"):
            cpus = self.bitmap(el, "cpuset")
        if typ in ("Package", "Socket"):
            self.packages += 1
            socket = self.integer(el, "os_index", self.packages - 1)
            self.package_cpus[socket] = cpus
        if typ == "NUMANode" and (numa_index := self.integer(el, "os_index")) is not None:
            self.cpus_by_numa[numa_index] = self.listed_bits(cpus, "NUMA nodes' cpusets")
        node: Node | None = None
        if typ == "Machine" or parent is None:
            node = Node("machine", _info(el, "DMIProductName") or _info(el, "PlatformModel") or "Machine",
                        numa_nodes=self.numa_set(numa))
        elif typ in ("Package", "Socket"):
            node = parent.add(Node("package", f"Package {socket}", numa_nodes=self.numa_set(numa), socket=socket))
        elif typ == "Bridge" and (el.get("bridge_type") or "").startswith("0-"):
            node = parent.add(Node("hostbridge", f"HostBridge {el.get('bridge_pci', '')[:40]}".strip(),
                                   numa_nodes=self.numa_set(numa), socket=socket))
            node.attrs["cpuset"] = cpus  # an int, bit i for PU i
            node.attrs["bus_range"] = self.bus_range(el)
        elif typ in ("Bridge", "PCIDev"):
            node = parent.add(self._pci(el, "bridge" if typ == "Bridge" else "device", socket))
            if node.kind == "device" and node.vendor_id == 0x10DE and node.class_id in (0x0300, 0x0302):
                self.gpus += 1
                self.count_device(el, "GPU")
        elif typ == "OSDev" and parent.kind == "device":
            if self.osdev_is(el, "gpu"):
                self.gpu_parent[id(el)] = parent
                self.osdevs_of.setdefault(id(parent), []).append(el)
            elif self.osdev_is(el, "openfabrics"):
                self.nic_osdevs.append((el, parent))
                self.count_device(el, "RDMA NIC")
        if node is not None:
            self.node_by_el[id(el)] = node
        return node, numa, socket, cpus

    def fill_sockets(self, root: Node) -> None:
        """hwloc 1.x hangs I/O below the NUMA node, beside the socket: find the socket whose
        CPUs cover the host bridge's locality (the one package whose cpuset holds the host
        bridge's). A package that holds them holds the lowest of them, so only the packages of
        that CPU are tried: one per host bridge, as packages never share a CPU in an export."""
        hbs = [n for n in root.walk() if n.kind == "hostbridge" and n.socket is None]
        if not hbs or not self.package_cpus:
            return
        by_cpu: dict[int, list[int]] = {}  # CPU -> the packages whose cpuset holds it
        for sock, cpus in self.package_cpus.items():
            for cpu in self.listed_bits(cpus, "packages' cpusets"):
                by_cpu.setdefault(cpu, []).append(sock)
        shared = any(len(v) > 1 for v in by_cpu.values())
        if shared and len(hbs) * len(self.package_cpus) > 1 << 20:
            raise InvalidArgument(f"{self.name}: {len(self.package_cpus)} packages share CPUs, below which "
                                  f"{len(hbs)} host bridges would each be matched against every package: "
                                  "not an hwloc export (its packages never share a CPU)")
        owner_of: dict[int, int | None] = {}
        for hb in hbs:
            cs = hb.attrs.get("cpuset") or 0
            if not cs:
                continue
            if cs not in owner_of:
                lowest = (cs & -cs).bit_length() - 1
                owners = [sock for sock in by_cpu.get(lowest, ()) if cs & ~self.package_cpus[sock] == 0]
                owner_of[cs] = owners[0] if len(owners) == 1 else None
            owner = owner_of[cs]
            if owner is not None:
                for n in hb.walk():
                    n.socket = owner

    def bus_range(self, el: ET.Element) -> tuple[int, int, int] | None:
        """``bridge_pci="0000:[84-84]"``: (domain, secondary bus, subordinate bus)."""
        raw = el.get("bridge_pci")
        if raw is None:
            return None
        m = _BRIDGE_PCI.fullmatch(raw)
        if not m:
            raise self.bad(el, "bridge_pci", "is not DDDD:[SS-EE] (domain, secondary and subordinate bus)")
        return int(m[1], 16), int(m[2], 16), int(m[3], 16)

    def _pci(self, el: ET.Element, kind: str, socket: int | None) -> Node:
        busid = el.get("pci_busid")
        if busid is None or not _BUSID.fullmatch(busid):
            raise self.bad(el, "pci_busid", "is not a PCI address DDDD:BB:DD.F")
        m = _PCI_TYPE.match(el.get("pci_type") or "")
        cls, ven, dev = (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)) if m else (None, None, None)
        label = _info(el, "PCIDevice") or ("PCI bridge" if kind == "bridge" else "PCI device")
        n = Node(kind, label, bus_id=busid.lower(), vendor_id=ven, device_id=dev, class_id=cls,
                 numa_nodes=frozenset(), socket=socket)
        n.attrs["subtype"] = el.get("subtype")
        try:
            speed = float(el.get("pci_link_speed") or 0.0)
        except ValueError:
            speed = -1.0
        if not 0.0 <= speed < 1e6:  # GB/s of one link; also refuses nan and inf
            raise self.bad(el, "pci_link_speed", "is not a link speed in GB/s")
        n.attrs["link_gbps"] = speed * 8 or None
        if kind == "bridge":
            n.attrs["bus_range"] = self.bus_range(el)
        return n


def _nvlink_matrix(root: ET.Element, b: _Builder, gpu_names: dict[int, str],
                   gpu_models: dict[str, str]) -> tuple[dict[tuple[str, str], int], str]:
    """GPU pairs -> NVLink count, from hwloc's NVLinkBandwidth matrix (MB/s per pair)."""
    mat = None
    for cand in root.iter():
        if cand.tag in ("distances2hetero", "distances2") and cand.get("name") == "NVLinkBandwidth":
            mat = cand
            break
    if mat is None:
        return {}, "no NVLink information in this XML (PCIe codes only)"
    refs = _tokens(" ".join(e.text or "" for e in mat.findall("indexes")), MAX_NVLINK_OBJECTS)
    n = len(refs)
    if n > MAX_NVLINK_OBJECTS:
        raise InvalidArgument(f"{b.name}: the NVLinkBandwidth matrix joins more than {MAX_NVLINK_OBJECTS} "
                              "objects; at most that many are read (a real one joins GPUs and NVSwitches)")
    words = _tokens(" ".join(e.text or "" for e in mat.findall("u64values")), n * n)
    # Counted and bounded before int(): a 5,000-digit value is damage, not Python's digit limit.
    if not all(w.isascii() and w.isdigit() and len(w) <= _MAX_U64_DIGITS for w in words):
        raise InvalidArgument(f"{b.name}: the NVLinkBandwidth <u64values> hold something that is not a "
                              "64-bit integer; the XML is damaged")
    if len(words) != n * n:
        shown = f"more than {n * n}" if len(words) > n * n else str(len(words))
        raise InvalidArgument(f"{b.name}: the NVLinkBandwidth matrix has {shown} values for {n} objects; "
                              "the XML is damaged")
    vals = [int(w) for w in words]
    ends: list[tuple[str, str]] = []  # (kind, name)
    for r in refs:
        el = b.el_by_ref.get(r)
        node = None
        if el is not None and el.get("type") == "OSDev":
            # the GPU OS device: its PCI parent is the GPU
            node = b.gpu_parent.get(id(el))
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


def _tokens(text: str, most: int) -> list[str]:
    """The whitespace-separated words of ``text``, at most ``most + 1`` of them (one more says
    that there were too many): a hostile list is never split whole."""
    out = []
    for m in _TOKEN.finditer(text):
        out.append(m[0])
        if len(out) > most:
            break
    return out


def from_hwloc(path_or_text: str | bytes | os.PathLike[str]) -> Topology:
    """Read an hwloc XML export into a :class:`Topology`.

    ``path_or_text`` is a path, the name of a shipped machine (:func:`recorded_machines`, as
    ``gdrlab topo --hwloc-xml`` takes it) or the XML itself (str or bytes). The XML is parsed
    with defusedxml: entity declarations and external references are refused. The PCI tree is
    checked against PCIe's bus-numbering rules (:func:`check_pci_tree`); a tree no real machine
    can have gives a :class:`PciTreeWarning` and is listed in ``Topology.pci_problems``.

    GPUs are the NVIDIA display/3D controllers (vendor 10de, class 0300/0302), named GPU0,
    GPU1, ... in PCI bus order as nvidia-smi numbers them; NICs are the RDMA (OpenFabrics)
    devices, named as the kernel names them (mlx5_0, ...).

    Bounded in memory and time: bitmaps beyond :data:`MAX_BITMAP_WORDS` words, more than
    :data:`~gdrlab.topology._topo.MAX_DEVICES` GPUs and NICs or an NVLink matrix of more than
    :data:`MAX_NVLINK_OBJECTS` objects are refused with one line, and so is running out of memory.
    """
    data, name, machine_name = _resolve(path_or_text)
    try:
        topo = _read(data, name, machine_name)
    except MemoryError:
        raise InvalidArgument(f"{name}: not enough memory to read these {len(data)} bytes of hwloc XML; "
                              "a real export takes a few MB (`lstopo --of xml FILE`)") from None
    if topo.pci_problems:
        warnings.warn(PciTreeWarning(f"{name}: {format_problems(topo.pci_problems)}"), stacklevel=2)
    return topo


def _read(data: bytes | str, name: str, machine_name: str) -> Topology:
    root_el = _load(data, name)
    version = root_el.get("version") or "1.0"
    head = version.split(".")[0].strip()
    major = int(head) if head.isascii() and head.isdigit() and len(head) < 4 else 1
    top = root_el.find("object")
    if top is None:
        raise InvalidArgument(f"{name} has no objects: not an hwloc topology")
    b = _Builder(major, name)
    root = b.build(top)
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
        osdevs = b.osdevs_of.get(id(g), [])
        model = next((_info(e, "GPUModel") for e in osdevs if _info(e, "GPUModel")), None) or g.label
        gname = f"GPU{i}"
        gpu_names[id(g)] = gname
        gpu_models[gname] = model
        devices.append((_device(gname, "gpu", g, model, [e.get("name") for e in osdevs]), g))
    for e, p in sorted(b.nic_osdevs, key=lambda t: t[0].get("name") or ""):
        devices.append((_device(e.get("name") or f"nic@{p.bus_id}", "nic", p, p.label, []), p))
    links, note = _nvlink_matrix(root_el, b, gpu_names, gpu_models)
    machine = root.label if root.label != "Machine" else machine_name
    problems = check_pci_tree(root)
    return Topology(root, devices, source=f"recorded hwloc XML of machine {machine_name} ({machine})",
                    provenance="recorded", nvlinks=links, cpus_by_numa=b.cpus_by_numa,
                    nvlink_note=note, pci_problems=problems)


def _device(name: str, kind: str, node: Node, model: str, aliases: list) -> dict:
    loc = node.locality()
    return {"name": name, "kind": kind, "pci_bus_id": node.bus_id,
            "numa_node": next(iter(loc)) if len(loc) == 1 else None,
            "socket": node.socket, "model": model, "cpus": None,
            "aliases": [a for a in aliases if a]}
