"""Readers of Linux sysfs under a root path, so a recorded tree can stand in for ``/``.

Only text attributes are read (``class``, ``vendor``, ``resource``, ``numa_node``, ...). BAR
resource files (``resource0`` ...) and ``config`` are never opened: reading them can need root
and touching a BAR is not a harmless act. Nothing here needs root.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument

__all__ = ["check_root", "read_text", "pci_devices", "rdma_devices", "peer_memory",
           "pci_device_path", "norm_bus_id", "numa_cpus", "PCI_ADDR"]

PCI_ADDR = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_HOSTBRIDGE = re.compile(r"^pci([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2})$")


def norm_bus_id(bus_id: str) -> str:
    """``00000000:34:00.0`` (NVML) or ``0000:34:00.0`` -> ``0000:34:00.0`` (lower case)."""
    m = PCI_ADDR.match(bus_id.strip())
    if not m:
        return bus_id.strip().lower()
    dom, bus, dev, fn = m.groups()
    return f"{int(dom, 16):04x}:{bus.lower()}:{dev.lower()}.{fn}"


def check_root(root: str | os.PathLike) -> Path:
    """The root as a Path; a clear error when it does not exist."""
    p = Path(os.fspath(root))
    if not p.is_dir():
        raise InvalidArgument(f"sysfs root {p} does not exist or is not a directory")
    return p


def read_text(path: Path) -> str | None:
    """A sysfs attribute's text, stripped; None when absent or unreadable."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _int(text: str | None, base: int = 0) -> int | None:
    if text is None:
        return None
    try:
        return int(text.split()[0], base)
    except (ValueError, IndexError):
        return None


def _resolve(root: Path, link: Path) -> Path | None:
    """Follow a sysfs symlink inside ``root`` (absolute targets are re-rooted)."""
    try:
        target = os.readlink(link)
    except OSError:
        return link if link.is_dir() else None
    if os.path.isabs(target):
        return Path(os.path.normpath(str(root) + target))
    return Path(os.path.normpath(os.path.join(os.path.dirname(str(link)), target)))


def pci_device_path(root: Path, bus_id: str) -> list[str] | None:
    """The chain below ``sys/devices`` for a PCI function: ``["pci0000:00", "0000:00:03.0", ...]``."""
    real = _resolve(root, root / "sys/bus/pci/devices" / bus_id)
    if real is None:
        return None
    try:
        rel = real.relative_to(root / "sys/devices")
    except ValueError:
        return None
    parts = list(rel.parts)
    for i, part in enumerate(parts):
        if _HOSTBRIDGE.match(part):
            return parts[i:]
    return None


def _bars(text: str | None) -> list[dict]:
    """BAR sizes from the text file ``resource`` (one "start end flags" line per BAR)."""
    out: list[dict] = []
    if not text:
        return out
    for i, line in enumerate(text.splitlines()):
        f = line.split()
        if len(f) < 3:
            continue
        try:
            start, end, flags = int(f[0], 16), int(f[1], 16), int(f[2], 16)
        except ValueError:
            continue
        if end == 0 and start == 0:
            continue
        out.append({"bar": i if i < 6 else "rom", "size_bytes": end - start + 1,
                    "prefetchable": bool(flags & 0x2000), "is_64bit": bool(flags & 0x100000),
                    "io": bool(flags & 0x100)})
    return out


def _link(text: str | None) -> float | None:
    """``"32.0 GT/s PCIe"`` -> 32.0; ``"Unknown"`` -> None."""
    if not text:
        return None
    m = re.match(r"([0-9.]+)\s*GT/s", text)
    return float(m.group(1)) if m else None


_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}



def _listing(base: Path) -> list[str]:
    """The sorted entries of a sysfs folder; [] when the tree has no such folder."""
    return sorted(os.listdir(base)) if base.is_dir() else []

def pci_devices(root: str | os.PathLike = "/") -> list[dict]:
    """Every PCI function under ``ROOT/sys/bus/pci/devices`` with its sysfs attributes.

    Each dict has ``pci_bus_id``, ``class_id`` (24-bit), ``vendor_id``, ``device_id``,
    ``is_bridge``, ``bars`` (size of each BAR from ``resource``), ``current_link_gts``,
    ``current_link_width``, ``max_link_gts``, ``max_link_width``, ``pcie_gen`` (from the current
    speed), ``numa_node`` (None for -1), ``local_cpulist`` and ``sysfs_path`` (the chain from
    the host bridge down). Empty when the tree has no PCI bus (a container, say).
    """
    r = check_root(root)
    base = r / "sys/bus/pci/devices"
    out = []
    for name in _listing(base):
        if not PCI_ADDR.match(name):
            continue
        d = base / name
        cls = _int(read_text(d / "class"), 16)
        numa = _int(read_text(d / "numa_node"), 10)
        cur = _link(read_text(d / "current_link_speed"))
        out.append({
            "pci_bus_id": norm_bus_id(name),
            "class_id": cls,
            "vendor_id": _int(read_text(d / "vendor"), 16),
            "device_id": _int(read_text(d / "device"), 16),
            "is_bridge": cls is not None and (cls >> 8) == 0x0604,
            "bars": _bars(read_text(d / "resource")),
            "current_link_gts": cur,
            "current_link_width": _int(read_text(d / "current_link_width"), 10),
            "max_link_gts": _link(read_text(d / "max_link_speed")),
            "max_link_width": _int(read_text(d / "max_link_width"), 10),
            "pcie_gen": _GEN_BY_GTS.get(cur) if cur else None,
            "numa_node": numa if numa is not None and numa >= 0 else None,
            "local_cpulist": read_text(d / "local_cpulist"),
            "sysfs_path": pci_device_path(r, name),
        })
    return out


def _no_rc_kind(node_type: str | None, vendor: str | None) -> str | None:
    """"EFA", "iWARP" or "usNIC" for devices without RC queue pairs with immediate data (the verbs
    wire's needs), from sysfs node_type ("1: CA", "4: RNIC", "7: unspecified") and PCI vendor."""
    code = (node_type or "").split(":", 1)[0].strip()
    if vendor == "0x1d0f" or code == "7":
        return "EFA"
    if code == "4":
        return "iWARP"
    if code in ("5", "6"):
        return "usNIC"
    return None


def rdma_devices(root: str | os.PathLike = "/") -> list[dict]:
    """RDMA devices under ``ROOT/sys/class/infiniband``: ports (state, rate, link layer) and PCI device."""
    r = check_root(root)
    base = r / "sys/class/infiniband"
    out = []
    for name in _listing(base):
        d = _resolve(r, base / name) or base / name  # the class entry links into sys/devices
        dev = _resolve(r, d / "device")
        bus = norm_bus_id(dev.name) if dev is not None and PCI_ADDR.match(dev.name) else None
        ports: list[dict[str, Any]] = []
        pdir = d / "ports"
        if pdir.is_dir():
            for p in sorted(os.listdir(pdir), key=lambda s: int(s) if s.isdigit() else 0):
                pd = pdir / p
                state = read_text(pd / "state") or ""
                ports.append({"port": int(p) if p.isdigit() else p,
                              "state": state.split(":", 1)[-1].strip() or None,
                              "phys_state": (read_text(pd / "phys_state") or "").split(":", 1)[-1].strip() or None,
                              "rate": read_text(pd / "rate"),
                              "link_layer": read_text(pd / "link_layer")})
        node_type = read_text(d / "node_type")
        out.append({"name": name, "pci_bus_id": bus, "node_type": node_type,
                    "fw_ver": read_text(d / "fw_ver"), "node_guid": read_text(d / "node_guid"),
                    "no_rc_kind": _no_rc_kind(node_type, read_text(dev / "vendor") if dev is not None else None),
                    "ports": ports,
                    "active": any((p["state"] or "").upper() == "ACTIVE" for p in ports)})
    return out


def _kernel_release(root: Path) -> str | None:
    if str(root) == "/":
        return os.uname().release
    return read_text(root / "proc/sys/kernel/osrelease")


def peer_memory(root: str | os.PathLike = "/") -> dict:
    """What the kernel offers for registering GPU memory with an RDMA device.

    ``nvidia_peermem_loaded`` (``/sys/module/nvidia_peermem``), the legacy ``nv_peer_mem``,
    and ``kernel_dmabuf`` (Linux 5.12 or newer has ``ibv_reg_dmabuf_mr`` support in the RDMA
    core). Whether dma-buf is *usable* also depends on the GPU and libibverbs; the doctor
    combines those (see :func:`gdrlab.hw.discover`).
    """
    r = check_root(root)
    mod = r / "sys/module/nvidia_peermem"
    legacy = r / "sys/module/nv_peer_mem"
    rel = _kernel_release(r)
    kernel_ok = None
    if rel:
        m = re.match(r"(\d+)\.(\d+)", rel)
        if m:
            kernel_ok = (int(m.group(1)), int(m.group(2))) >= (5, 12)
    return {
        "nvidia_peermem_loaded": mod.is_dir(),
        "nvidia_peermem_version": read_text(mod / "version") if mod.is_dir() else None,
        "nv_peer_mem_loaded": legacy.is_dir() or (r / "sys/kernel/mm/memory_peers/nv_mem").is_dir(),
        "kernel_release": rel,
        "kernel_dmabuf": kernel_ok,
    }


def numa_cpus(root: str | os.PathLike = "/") -> dict[int, str]:
    """NUMA node -> its CPU list text, from ``ROOT/sys/devices/system/node/node*/cpulist``."""
    r = check_root(root)
    base = r / "sys/devices/system/node"
    out: dict[int, str] = {}
    if not base.is_dir():
        return out
    for name in os.listdir(base):
        m = re.match(r"^node(\d+)$", name)
        if m:
            out[int(m.group(1))] = read_text(base / name / "cpulist") or ""
    return dict(sorted(out.items()))
