"""Build small synthetic sysfs trees, laid out exactly as Linux lays them out.

``/sys/bus/pci/devices/<bdf>`` is a relative symlink to ``/sys/devices/pciDDDD:BB/<bdf>/...``;
``/sys/class/infiniband/<name>`` links to ``.../<bdf>/infiniband/<name>`` whose ``device`` links
back to the PCI function. Two ready-made machines: :func:`gpu_nic_same_switch` and
:func:`gpu_nic_two_sockets`.
"""
from __future__ import annotations

import os
from pathlib import Path

GPU_CLASS, NIC_CLASS, BRIDGE_CLASS = 0x030200, 0x020700, 0x060400
NVIDIA, MELLANOX, PLX, INTEL = 0x10DE, 0x15B3, 0x10B5, 0x8086


class SysfsTree:
    """A sysfs root under ``path``; add host bridges, bridges and devices top-down."""

    def __init__(self, path):
        self.root = Path(path)
        (self.root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        (self.root / "sys/devices").mkdir(parents=True, exist_ok=True)
        self.dirs: dict[str, Path] = {}

    def _write(self, d: Path, name: str, text: str) -> None:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text + "\n")

    def numa_node(self, node: int, cpulist: str, socket: int | None = None) -> None:
        d = self.root / f"sys/devices/system/node/node{node}"
        self._write(d, "cpulist", cpulist)
        if socket is not None:
            from gdrlab.topology._tree import parse_cpulist
            for c in parse_cpulist(cpulist):
                self._write(self.root / f"sys/devices/system/cpu/cpu{c}/topology",
                            "physical_package_id", str(socket))

    def pci(self, bdf: str, parent: str, *, cls: int, vendor: int, device: int = 0x1234,
            numa: int = -1, cpulist: str = "", bars: list[int] | None = None,
            link: tuple[str, int] | None = None) -> Path:
        """Add one PCI function below ``parent`` (a host bridge "pci0000:00" or a bridge's BDF)."""
        base = self.root / "sys/devices" / parent if parent.startswith("pci") else self.dirs[parent]
        d = base / bdf
        d.mkdir(parents=True, exist_ok=True)
        self.dirs[bdf] = d
        self._write(d, "class", f"0x{cls:06x}")
        self._write(d, "vendor", f"0x{vendor:04x}")
        self._write(d, "device", f"0x{device:04x}")
        self._write(d, "numa_node", str(numa))
        self._write(d, "local_cpulist", cpulist)
        lines, start = [], 0x3800_0000_0000
        for size in (bars or []):
            lines.append(f"0x{start:016x} 0x{start + size - 1:016x} 0x000000000014220c" if size else
                         "0x0000000000000000 0x0000000000000000 0x0000000000000000")
            start += max(size, 1 << 20)
        lines += ["0x0000000000000000 0x0000000000000000 0x0000000000000000"] * (13 - len(lines))
        self._write(d, "resource", "\n".join(lines))
        if link:
            self._write(d, "current_link_speed", f"{link[0]} GT/s PCIe")
            self._write(d, "current_link_width", str(link[1]))
            self._write(d, "max_link_speed", f"{link[0]} GT/s PCIe")
            self._write(d, "max_link_width", str(link[1]))
        ln = self.root / "sys/bus/pci/devices" / bdf
        os.symlink(os.path.relpath(d, ln.parent), ln)
        return d

    def rdma(self, name: str, bdf: str, *, state: str = "4: ACTIVE", rate: str = "200 Gb/sec (4X HDR)",
             link_layer: str = "InfiniBand") -> None:
        d = self.dirs[bdf] / "infiniband" / name
        self._write(d, "node_type", "1: CA")
        self._write(d, "ports/1/state", state)
        self._write(d, "ports/1/phys_state", "5: LinkUp")
        self._write(d, "ports/1/rate", rate)
        self._write(d, "ports/1/link_layer", link_layer)
        os.symlink(os.path.relpath(self.dirs[bdf], d), d / "device")
        cls = self.root / "sys/class/infiniband"
        cls.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(d, cls), cls / name)

    def module(self, name: str, version: str = "1.0") -> None:
        self._write(self.root / "sys/module" / name, "version", version)

    def kernel(self, release: str) -> None:
        self._write(self.root / "proc/sys/kernel", "osrelease", release)


GPU_BARS = [16 << 20, 0, 256 << 30, 0, 32 << 20]  # H200-like: BAR0 16 MiB, BAR2 256 GiB, BAR4 32 MiB


def gpu_nic_same_switch(path) -> SysfsTree:
    """One socket; root port 00:01.0 -> PLX switch (USP 01:00.0, DSPs 02:08.0 and 02:10.0) ->
    GPU 03:00.0 and ConnectX 04:00.0 (mlx5_0). A second GPU 05:00.0 hangs off its own root port."""
    t = SysfsTree(path)
    t.numa_node(0, "0-15", socket=0)
    t.kernel("6.8.0-test")
    t.pci("0000:00:01.0", "pci0000:00", cls=BRIDGE_CLASS, vendor=INTEL, numa=0, cpulist="0-15")
    t.pci("0000:01:00.0", "0000:00:01.0", cls=BRIDGE_CLASS, vendor=PLX, device=0x9797, numa=0, cpulist="0-15")
    t.pci("0000:02:08.0", "0000:01:00.0", cls=BRIDGE_CLASS, vendor=PLX, device=0x9797, numa=0, cpulist="0-15")
    t.pci("0000:02:10.0", "0000:01:00.0", cls=BRIDGE_CLASS, vendor=PLX, device=0x9797, numa=0, cpulist="0-15")
    t.pci("0000:03:00.0", "0000:02:08.0", cls=GPU_CLASS, vendor=NVIDIA, device=0x2335, numa=0,
          cpulist="0-15", bars=GPU_BARS, link=("32.0", 16))
    t.pci("0000:04:00.0", "0000:02:10.0", cls=NIC_CLASS, vendor=MELLANOX, device=0x101B, numa=0,
          cpulist="0-15", bars=[32 << 20], link=("16.0", 16))
    t.rdma("mlx5_0", "0000:04:00.0")
    t.pci("0000:00:02.0", "pci0000:00", cls=BRIDGE_CLASS, vendor=INTEL, numa=0, cpulist="0-15")
    t.pci("0000:05:00.0", "0000:00:02.0", cls=GPU_CLASS, vendor=NVIDIA, device=0x2335, numa=0,
          cpulist="0-15", bars=GPU_BARS, link=("32.0", 16))
    return t


def gpu_nic_two_sockets(path) -> SysfsTree:
    """Two sockets: GPU 17:00.0 under host bridge pci0000:16 on NUMA 0; ConnectX 98:00.0
    (mlx5_0, RoCE, port down) under pci0000:97 on NUMA 1; a second ConnectX 3b:00.0 (mlx5_1)
    under another host bridge of NUMA 0, pci0000:3a. Kernel 5.4, nvidia_peermem loaded."""
    t = SysfsTree(path)
    t.numa_node(0, "0-7", socket=0)
    t.numa_node(1, "8-15", socket=1)
    t.kernel("5.4.0-old")
    t.module("nvidia_peermem", "580.1")
    t.pci("0000:16:01.0", "pci0000:16", cls=BRIDGE_CLASS, vendor=INTEL, numa=0, cpulist="0-7")
    t.pci("0000:17:00.0", "0000:16:01.0", cls=GPU_CLASS, vendor=NVIDIA, device=0x20B0, numa=0,
          cpulist="0-7", bars=[16 << 20, 0, 128 << 30, 0, 32 << 20], link=("16.0", 16))
    t.pci("0000:97:01.0", "pci0000:97", cls=BRIDGE_CLASS, vendor=INTEL, numa=1, cpulist="8-15")
    t.pci("0000:98:00.0", "0000:97:01.0", cls=NIC_CLASS, vendor=MELLANOX, device=0x1017, numa=1,
          cpulist="8-15", link=("8.0", 16))
    t.rdma("mlx5_0", "0000:98:00.0", state="1: DOWN", rate="10 Gb/sec (1X QDR)", link_layer="Ethernet")
    t.pci("0000:3a:01.0", "pci0000:3a", cls=BRIDGE_CLASS, vendor=INTEL, numa=0, cpulist="0-7")
    t.pci("0000:3b:00.0", "0000:3a:01.0", cls=NIC_CLASS, vendor=MELLANOX, device=0x1017, numa=0,
          cpulist="0-7", link=("8.0", 16))
    t.rdma("mlx5_1", "0000:3b:00.0")
    return t
