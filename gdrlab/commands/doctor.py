"""``gdrlab doctor``: what this machine has for GPUDirect, and which paths can run here."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ..hw.storage import doctor_lines
from ..hw.storage import probe as storage_probe
from ..knobs import in_effect
from ..transfer.ucx_wire import ucx_library
from ._common import Subparsers, add_command, emit_json, table

HELP = "report GPUs, RDMA devices, peer memory, libraries and which paths can run"
DESCRIPTION = ("Reads NVML, the CUDA driver and sysfs (no root needed) and says, for every "
               "transfer path, whether it can run here, why not, and what would fix it.")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "doctor", HELP, DESCRIPTION)
    p.add_argument("--sysfs", default="/", metavar="ROOT",
                   help="read a recorded sysfs tree instead of this machine's (default /)")
    p.add_argument("--cluster", action="store_true",
                   help="also run the first-run checks for a two-node run: /dev/infiniband, memlock, ports, peer "
                        "memory, dma-buf probe, NUMA, ACS, IOMMU, PCIe links, BAR1 (docs/cluster.md)")
    p.add_argument("--bundle", metavar="FILE",
                   help="with --cluster: write one .tar.gz (doctor JSON, topology, rdma_pair rows) to attach to a "
                        "question; no token, no host names unless --include-hostnames")
    p.add_argument("--results", metavar="DIR", help="with --bundle: the rdma_pair.sh output directory to include")
    p.add_argument("--include-hostnames", action="store_true", help="with --bundle: keep host names")
    return p


def _size(n: object) -> str | None:
    from ..units import format_size
    return format_size(n) if isinstance(n, int) else None


def header(report: dict[str, Any]) -> str:
    """``gdrlab doctor (live, HOST, DATE)``: the kind of data once, then where it came from."""
    kind, source = report["provenance"]["kind"], report["source"]
    where = source if source.split(",")[0].split()[0] == kind else f"{kind}, {source}"
    return f"gdrlab doctor ({where}, {report['provenance']['date']})"


def verdict(report: dict[str, Any]) -> str:
    """One line: which paths run here and what the labs do about the others."""
    paths = report.get("paths") or {}
    runs = [k for k, v in paths.items() if v["available"]]
    if not paths:
        return "Here: no path report."
    if len(runs) == len(paths):
        return f"Here: every path runs ({', '.join(runs)})."
    what = ", ".join(runs) if runs else "no path"
    return (f"Here: {what} {'runs' if len(runs) == 1 else 'run'} live; for the other {len(paths) - len(runs)} "
            "the labs show recorded data and the model (reasons under Paths).")


def render(report: dict[str, Any]) -> str:
    """The report as text tables: a one-line verdict first, each long reason written once."""
    lines = [header(report), verdict(report), ""]
    cuda = report["cuda"]
    v = int(cuda.get("driver_version") or 0)
    lines.append(f"CUDA driver: usable, CUDA {v // 1000}.{(v % 1000) // 10}" if cuda["usable"]
                 else f"CUDA driver: {cuda['reason']}")
    lines += ["", "GPUs"]
    if report["gpus"]:
        rows = [dict(g, bar1_total=_size(g["bar1_total_bytes"]), bar1_used=_size(g["bar1_used_bytes"]),
                     pcie=f"Gen{g['pcie_gen']} x{g['pcie_width']}" if g["pcie_gen"] else None)
                for g in report["gpus"]]
        lines.append(table(rows, ["index", "name", "pci_bus_id", "bar1_total", "bar1_used", "pcie",
                                  "numa_node", "gdr_supported", "dmabuf_supported"]))
    else:
        lines.append(f"  none: {report['gpus_reason']}")
    lines += ["", "RDMA devices"]
    if report["rdma_devices"]:
        rows = []
        for d in report["rdma_devices"]:
            for p in d["ports"] or [{}]:
                rows.append({"name": d["name"], "pci_bus_id": d["pci_bus_id"], "port": p.get("port"),
                             "state": p.get("state"), "rate": p.get("rate"), "link_layer": p.get("link_layer")})
        lines.append(table(rows, ["name", "pci_bus_id", "port", "state", "rate", "link_layer"]))
    else:
        lines.append(f"  none: {report['rdma_reason']}")
    pm = report["peer_memory"]
    lines += ["", "Peer memory",
              f"  peer-memory client: {pm.get('peer_memory_module') or 'none'}"
              + (f" (version {pm['peer_memory_version']})" if pm.get("peer_memory_version") else ""),
              f"  dma-buf usable: {'yes' if pm['dmabuf_usable'] else 'no'} ({pm['dmabuf_reason']})",
              "", "Libraries"]
    rows = [{"library": k, "found": "yes" if v["found"] else "no",
             "version_or_reason": v.get("version") or v.get("reason") or "loaded, version unknown"}
            for k, v in report["libraries"].items()]
    lines.append(table(rows, ["library", "found", "version_or_reason"]))
    if "pyverbs" in report:
        pv = report["pyverbs"]
        lines.append(f"  pyverbs: {'usable' if pv['usable'] else 'not usable'}: {pv['reason']}")
    if "cluster_checks" in report:
        lines += ["", "Cluster checks (docs/cluster.md, first run)"]
        for c in report["cluster_checks"]:
            lines.append(f"  {c['status'].upper():<8}{c['title']}: {c['evidence']}")
            if c["fix"]:
                lines.append(f"  {'':<8}fix: {c['fix']}")
    if "knobs" in report:
        lines += ["", "Environment (docs/cluster.md; the values in effect, defaults in parentheses)"]
        lines += [f"  {k['name']:<34} {k['value']}" + (f"  (from {k['set_by']})" if k["set_by"] not in ("", k["name"])
                                                        else "") for k in report["knobs"]]
    lines += doctor_lines(report.get("storage"))
    lines += ["", "Paths"]
    said = str(cuda.get("reason") or "") if not cuda["usable"] else ""
    for k, v in report["paths"].items():
        reason = str(v["reason"])
        if len(said) > 40:   # the CUDA reason was printed above: point at it instead of repeating it
            reason = reason.replace(said, "see CUDA driver above")
        lines.append(f"  {k:<11} {'yes' if v['available'] else 'no ':<4} {reason}")
        if v["fix"]:
            lines.append(f"  {'':<11} {'':<4} fix: {v['fix']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..hw import discover
    from ..hw.pyverbs import pyverbs_status

    report = discover(args.sysfs)
    report["pyverbs"] = pyverbs_status()
    report["storage"] = storage_probe(args.sysfs)
    report["knobs"] = in_effect()
    if args.sysfs == "/":  # the ucx wire's library, as this process would load it
        report["libraries"]["libucp.so.0"] = ucx_library()
    if args.bundle and not args.cluster:
        from ..errors import InvalidArgument
        raise InvalidArgument("--bundle needs --cluster")
    if args.cluster:
        from ..hw.cluster import cluster_checks
        report["cluster_checks"] = cluster_checks(args.sysfs, report)
    if args.bundle:
        from ..hw.bundle import write_bundle
        write_bundle(args.bundle, report, report["cluster_checks"], args.sysfs, args.results,
                     args.include_hostnames)
        print(f"wrote {args.bundle}", file=sys.stderr)
    if args.json:
        emit_json(report)
    else:
        print(render(report))
    return 0
