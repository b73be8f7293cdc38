"""``gdrlab topo``: the GPU/NIC distance matrix as nvidia-smi prints it, nearest NIC, NCCL's GDR rule."""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import TYPE_CHECKING

from ..errors import InvalidArgument
from ..nccl.versions import parse_version
from ..topology import (
    PciTreeWarning,
    from_hwloc,
    from_sysfs,
    matrix_report,
    parse_gdr_level,
    parse_topo_matrix,
    recorded_machines,
    recorded_matrices,
)
from ..topology._topo import gdr_verdict
from ..topology.nvsmi import _MEANING
from ._common import Subparsers, add_command, emit_json

if TYPE_CHECKING:
    from ..topology import Topology

MAX_MATRIX_READ = 1 << 20  # the matrix reader's own limit; a larger file is refused by it, not read whole
HELP = "GPU/NIC distance matrix (nvidia-smi topo -m codes), nearest NIC, NCCL's GDR choice"
DESCRIPTION = ("Builds the PCIe tree from this machine's sysfs, a recorded sysfs tree or an hwloc "
               "XML export (lstopo --of xml), or reads the text `nvidia-smi topo -m` printed "
               "(--matrix), and classifies every GPU/GPU and GPU/NIC pair.")

LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""


NOTHING_FOUND_HINT = ("To look at real machines instead: gdrlab topo --list (the shipped ones), "
                      "then gdrlab topo --hwloc-xml NAME or gdrlab topo --matrix NAME")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "topo", HELP, DESCRIPTION)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--hwloc-xml", metavar="FILE",
                     help="an hwloc XML export, or the name of a shipped machine (see --list)")
    src.add_argument("--sysfs", metavar="ROOT", help="a sysfs root (default: this machine, /)")
    src.add_argument("--matrix", metavar="FILE",
                     help="the text `nvidia-smi topo -m` printed (saved to a file), or the name of a shipped "
                          "matrix (see --list)")
    src.add_argument("--list", action="store_true",
                     help="list the shipped recorded machines (hwloc XML) and nvidia-smi matrices")
    p.add_argument("--gdr-level", default=None,
                   help="NCCL_NET_GDR_LEVEL to apply (name or 0-5; default: $NCCL_NET_GDR_LEVEL, else the "
                        "NCCL version's default)")
    p.add_argument("--nccl-version", default=None, metavar="X.Y[.Z]",
                   help="apply the GDR rule of this NCCL release, 2.12 to 2.30 (default: the newest the kit knows)")
    return p


def render(topo: Topology, level: str | None = None, nccl_version: str | None = None) -> str:
    """The matrix laid out like ``nvidia-smi topo -m``, then nearest NIC, GDR and NUMA lines."""
    data = topo.to_json(level=level, nccl_version=nccl_version)
    names = [d["name"] for d in topo.devices]
    nics = topo.nics
    alias = {n: f"NIC{i}" for i, n in enumerate(nics)}
    col = [alias.get(n, n) for n in names]
    width = max([len(c) for c in col] + [5]) + 1
    lines = [f"Topology: {topo.source}"]
    if not names:
        lines += ["No GPU and no RDMA NIC found.", NOTHING_FOUND_HINT]
        return "\n".join(lines)
    cpu_w = max([len(topo.device(n).get("cpus") or "N/A") for n in names] + [len("CPU Affinity")]) + 2
    head = " " * width + "".join(c.ljust(width) for c in col) + "CPU Affinity".ljust(cpu_w) + "NUMA Affinity"
    lines.append(head)
    m = data["matrix"]
    for n, c in zip(names, col):
        d = topo.device(n)
        numa = d.get("numa_node")
        lines.append(c.ljust(width) + "".join(m[n][o].ljust(width) for o in names)
                     + (d.get("cpus") or "N/A").ljust(cpu_w) + (str(numa) if numa is not None else "N/A"))
    lines += ["", LEGEND]
    if nics:
        lines += ["", "NIC Legend:", ""] + [f"  {alias[n]}: {n}" for n in nics]
    if topo.nvlink_note:
        lines += ["", f"NVLink: {topo.nvlink_note}"]
    if topo.gpus:
        lines += ["", "Per GPU: nearest NIC, NCCL's GDR decision, NUMA binding"]
        for g in topo.gpus:
            nic = data["nearest_nic"][g]
            numa = data["numa"][g]
            lines.append(f"  {g}: nearest NIC {nic or 'none'}"
                         + (f"; {data['gdr'][g][nic]['reason']}" if nic else "")
                         + (f"; bind with `{numa['numactl']}`" if numa["numactl"] else f"; {numa['reason']}"))
    return "\n".join(lines)


def render_matrix(report: dict) -> str:
    """A matrix report (:func:`gdrlab.topology.matrix_report`) laid out as :func:`render` lays out a
    tree: the rows the text holds, the legends, then nearest NIC, GDR and NUMA per GPU."""
    names = [d["name"] for d in report["devices"]]
    m = report["matrix"]
    width = max([len(c) for c in names] + [5]) + 1
    cpus = {g: report["numa"][g]["cpus"] or "N/A" for g in report["numa"]}
    cpu_w = max([len(c) for c in cpus.values()] + [len("CPU Affinity")]) + 2
    lines = [f"Topology: {report['source']}",
             " " * width + "".join(c.ljust(width) for c in names) + "CPU Affinity".ljust(cpu_w) + "NUMA Affinity"]
    for n in report["rows"]:
        numa = report["numa"].get(n, {}).get("numa_node")
        lines.append(n.ljust(width) + "".join((m[n][o] or "?").ljust(width) for o in names)
                     + (cpus.get(n, "N/A")).ljust(cpu_w) + (str(numa) if numa is not None else "N/A"))
    lines += ["", LEGEND]
    nics = [d for d in report["devices"] if d["kind"] == "nic"]
    if report["nic_legend"]:
        lines += ["", "NIC Legend:", ""] + [f"  {k}: {v}" for k, v in report["nic_legend"].items()]
    elif nics:
        lines += ["", f"NIC Legend: not in this text, so the NICs keep nvidia-smi's names ({nics[0]['name']}...)"]
    if report["gdr"]:
        lines += ["", "Per GPU: nearest NIC, NCCL's GDR decision, NUMA binding"]
        for g, per_nic in report["gdr"].items():
            nic = report["nearest_nic"][g]
            numa = report["numa"][g]
            lines.append(f"  {g}: nearest NIC {nic or 'unknown (no row for it here)'}"
                         + (f"; {per_nic[nic]['reason']}" if nic else "")
                         + (f"; bind with `{numa['numactl']}`" if numa["numactl"] else f"; {numa['reason']}"))
    if report["notes"]:
        lines += [""] + [f"Note: {n}" for n in report["notes"]]
    return "\n".join(lines)


def _with_version(report: dict, level: str | None, nccl_version: str | None) -> dict:
    """A matrix report's GDR verdicts redone by the rule of ``nccl_version`` (same codes, same why)."""
    if nccl_version is None:
        return report
    for g, per_nic in report["gdr"].items():
        for nic, old in per_nic.items():
            per_nic[nic] = gdr_verdict(g, nic, old["code"], _MEANING.get(old["code"], "as nvidia-smi printed it"),
                                       level, nccl_version)
    return report


def _run_matrix(args: argparse.Namespace, level: str | None) -> int:
    shipped = recorded_matrices()
    name = args.matrix
    if name in shipped and not os.path.exists(name):
        path, source = shipped[name], f"recorded nvidia-smi topo -m of {name} (shipped with gdrlab)"
    else:
        path, source = name, f"nvidia-smi topo -m text in {name}"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_MATRIX_READ + 1)
    except OSError as e:
        raise InvalidArgument(f"cannot read {name}: {e.strerror or e} (shipped matrices: "
                              f"{', '.join(shipped) or 'none'})") from None
    report = _with_version(matrix_report(parse_topo_matrix(text), source, level), level, args.nccl_version)
    if args.json:
        emit_json(report)
    else:
        print(render_matrix(report))
    return 0


def run(args: argparse.Namespace) -> int:
    machines = recorded_machines()
    if args.list:
        matrices = recorded_matrices()
        if args.json:
            emit_json({name: str(path) for name, path in {**machines, **matrices}.items()})
        else:
            w = max(len(n) for n in [*machines, *matrices, "x"])
            print("\n".join([f"{n.ljust(w)}  --hwloc-xml {n}   {p}" for n, p in machines.items()]
                            + [f"{n.ljust(w)}  --matrix {n}   {p}" for n, p in matrices.items()]))
        return 0
    level = args.gdr_level if args.gdr_level is not None else os.environ.get("NCCL_NET_GDR_LEVEL") or None
    if args.nccl_version is not None:
        parse_version(args.nccl_version)  # one clear line for a version the table does not cover
    if level is not None:
        parse_gdr_level(level, args.nccl_version)  # a bad value is a clear error here, not deep inside
    if args.matrix:
        return _run_matrix(args, level)
    # An impossible PCI tree is reported once: inside the document with --json (its `warnings`),
    # else as one line on stderr; never as Python's warning text with a source line.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PciTreeWarning)
        if args.hwloc_xml:
            path = args.hwloc_xml
            if path in machines and not os.path.exists(path):
                path = machines[path]
            elif path in recorded_matrices() and not os.path.exists(path):
                raise InvalidArgument(f"{path} is an nvidia-smi topo -m matrix, not an hwloc XML export: "
                                      f"gdrlab topo --matrix {path}")
            topo = from_hwloc(path)
        else:
            topo = from_sysfs(args.sysfs or "/")
    if topo.pci_problems and not args.json:
        print(f"gdrlab topo: warning: this PCI tree cannot exist on real hardware "
              f"({len(topo.pci_problems)} problems; `--json` lists them)", file=sys.stderr)
    if args.json:
        doc = topo.to_json(level=level, nccl_version=args.nccl_version)
        # DESIGN.md's ruling: a message a person reads goes inside the one JSON document
        doc["notes"] = [] if topo.devices else ["no GPU and no RDMA NIC in this topology. " + NOTHING_FOUND_HINT]
        emit_json(doc)
    else:
        print(render(topo, level, args.nccl_version))
    return 0
