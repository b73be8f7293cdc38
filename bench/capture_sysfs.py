#!/usr/bin/env python3
"""Record the parts of sysfs that gdrlab's topology and doctor read, into a folder.

    python bench/capture_sysfs.py OUTDIR [--root /]

The copy keeps the directory and symlink structure of ``/sys/bus/pci/devices``,
``/sys/devices/pci*``, ``/sys/class/infiniband`` and ``/sys/module/nvidia_peermem``, and copies
only small text attributes (class, vendor, device, resource, link speed/width, numa_node,
local_cpulist, RDMA port state/rate/link layer, NUMA node CPU lists). It never opens BAR
resource files (resource0 ...), ``config`` or anything else binary, and needs no root.
``gdrlab topo --sysfs OUTDIR`` and ``gdrlab doctor --sysfs OUTDIR`` then read the recording.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import sys
from pathlib import Path

PCI_ATTRS = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device", "revision",
             "resource", "current_link_speed", "current_link_width", "max_link_speed",
             "max_link_width", "numa_node", "local_cpulist", "local_cpus")
IB_ATTRS = ("node_type", "fw_ver", "node_guid", "sys_image_guid", "hca_type", "board_id")
PORT_ATTRS = ("state", "phys_state", "rate", "link_layer")
PCI_ADDR = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def _copy_text(src: Path, dst: Path) -> bool:
    """Copy one text attribute; skip it quietly when unreadable (some need root)."""
    try:
        data = src.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(data, encoding="utf-8")
    return True


def _mirror_link(root: Path, out: Path, link: Path) -> Path | None:
    """Recreate ``link`` (inside root) in ``out`` with the same relative target; return the
    real directory it points to, inside root."""
    try:
        target = os.readlink(link)
    except OSError:
        return None
    rel = link.relative_to(root)
    dst = out / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if os.path.isabs(target):
        # make it relative so the recording stays self-contained
        target = os.path.relpath(str(root) + target if str(root) != "/" else target, str(link.parent))
    if not dst.is_symlink():
        os.symlink(target, dst)
    real = Path(os.path.normpath(os.path.join(str(link.parent), target)))
    (out / real.relative_to(root)).mkdir(parents=True, exist_ok=True)
    return real


def capture(root: Path, out: Path) -> dict:
    counts = {"pci": 0, "rdma": 0, "numa_nodes": 0}
    pci = root / "sys/bus/pci/devices"
    if pci.is_dir():
        for name in sorted(os.listdir(pci)):
            if not PCI_ADDR.match(name):
                continue
            real = _mirror_link(root, out, pci / name)
            if real is None:
                continue
            for a in PCI_ATTRS:
                _copy_text(real / a, out / real.relative_to(root) / a)
            counts["pci"] += 1
    ib = root / "sys/class/infiniband"
    if ib.is_dir():
        (out / "sys/class/infiniband").mkdir(parents=True, exist_ok=True)
        for name in sorted(os.listdir(ib)):
            link = ib / name
            real = _mirror_link(root, out, link) if link.is_symlink() else link
            if real is None:
                continue
            dst = out / real.relative_to(root)
            dst.mkdir(parents=True, exist_ok=True)
            for a in IB_ATTRS:
                _copy_text(real / a, dst / a)
            if (real / "device").is_symlink():
                _mirror_link(root, out, real / "device")
            ports = real / "ports"
            if ports.is_dir():
                for p in os.listdir(ports):
                    for a in PORT_ATTRS:
                        _copy_text(ports / p / a, dst / "ports" / p / a)
            counts["rdma"] += 1
    for mod in ("nvidia_peermem", "nv_peer_mem", "nvidia"):
        m = root / "sys/module" / mod
        if m.is_dir():
            (out / "sys/module" / mod).mkdir(parents=True, exist_ok=True)
            _copy_text(m / "version", out / "sys/module" / mod / "version")
    nodes = root / "sys/devices/system/node"
    if nodes.is_dir():
        for n in os.listdir(nodes):
            if re.match(r"^node\d+$", n):
                _copy_text(nodes / n / "cpulist", out / "sys/devices/system/node" / n / "cpulist")
                counts["numa_nodes"] += 1
    cpus = root / "sys/devices/system/cpu"
    if cpus.is_dir():
        for c in os.listdir(cpus):
            if re.match(r"^cpu\d+$", c):
                _copy_text(cpus / c / "topology/physical_package_id",
                           out / "sys/devices/system/cpu" / c / "topology/physical_package_id")
    _copy_text(root / "proc/sys/kernel/osrelease", out / "proc/sys/kernel/osrelease")
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", help="folder to write the recording into (created)")
    ap.add_argument("--root", default="/", help="sysfs root to record (default /)")
    args = ap.parse_args(argv)
    root, out = Path(args.root), Path(args.outdir)
    if not (root / "sys").is_dir():
        print(f"capture_sysfs: {root}/sys does not exist", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    counts = capture(root, out)
    manifest = {"host": platform.node(), "kernel": platform.release(),
                "captured_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "root": str(root), **counts}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
