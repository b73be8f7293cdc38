"""``gdrlab doctor --cluster``: the checks users post about in perftest, NCCL, nccl-tests and UCX
issues, each with the evidence it read and the command that fixes it.

Every check reads below a root (``/`` live, or a recorded tree), so tests run them on recorded
trees. Readings sysfs does not hold come from files a recording may add beside ``sys/``:

- ``proc/self/limits`` and ``proc/self/status`` (memlock limit, CAP_IPC_LOCK), ``proc/cmdline``;
- ``dev/infiniband/`` (the device nodes a container was given);
- ``gdrlab-acs.txt``: one ``BDF ACSCTL`` per line, what ``setpci -s BDF ECAP_ACS+0x6.w`` printed
  (live, setpci runs; it needs root, and says so when it cannot read).

Each check is ``{"id", "title", "status" ("ok" | "warn" | "fail" | "unknown"), "evidence", "fix"}``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

from .capability import gdr_capability
from .sysfs import numa_cpus, pci_devices, rdma_devices, read_text

__all__ = ["ACS_REDIRECT_BITS", "cluster_checks", "acs_readings", "bridges_between"]

# ACS Control bits that send peer-to-peer requests or completions up to the root complex.
ACS_REDIRECT_BITS = {2: "RequestRedirect", 3: "CompletionRedirect", 5: "EgressControl"}


def _check(cid: str, title: str, status: str, evidence: str, fix: str = "") -> dict[str, str]:
    return {"id": cid, "title": title, "status": status, "evidence": evidence, "fix": fix if status != "ok" else ""}


def _live(root: Path) -> bool:
    return str(root.resolve()) == "/"


def _pci_path(root: Path, bdf: str) -> list[str]:
    """The PCI functions from the host bridge down to ``bdf`` (resolved sysfs path components)."""
    p = root / "sys/bus/pci/devices" / bdf
    try:
        parts = os.path.realpath(p).split(os.sep)
    except OSError:
        return []
    return [c for c in parts if re.match(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", c) or c.startswith("pci")]


def bridges_between(root: Path, a: str, b: str) -> list[str]:
    """The PCI bridges on the path between two functions below their common ancestor (the switch
    ports a peer-to-peer transfer crosses); [] when they share no host bridge."""
    pa, pb = _pci_path(root, a), _pci_path(root, b)
    if not pa or not pb or pa[0] != pb[0]:
        return []
    n = 0
    while n < min(len(pa), len(pb)) and pa[n] == pb[n]:
        n += 1
    out = [c for c in pa[n:-1] + pb[n:-1] if not c.startswith("pci")]
    return sorted(set(out))


def _hops(root: Path, a: str, b: str) -> int:
    pa, pb = _pci_path(root, a), _pci_path(root, b)
    if not pa or not pb:
        return 1 << 20
    n = 0
    while n < min(len(pa), len(pb)) and pa[n] == pb[n]:
        n += 1
    return (len(pa) - n) + (len(pb) - n) + (0 if n else 100)


def acs_readings(root: Path, bdfs: list[str]) -> dict[str, int | str]:
    """``{bdf: ACSCtl value}`` or ``{bdf: why not}``: from ``gdrlab-acs.txt`` in a recorded tree,
    from setpci live."""
    out: dict[str, int | str] = {}
    rec = root / "gdrlab-acs.txt"
    if not _live(root):
        table = {}
        for line in (read_text(rec) or "").splitlines():
            f = line.split()
            if len(f) >= 2:
                table[f[0]] = f[1]
        for b in bdfs:
            v = table.get(b)
            out[b] = int(v, 16) if v and re.match(r"^[0-9a-fA-F]+$", v) else (v or "not recorded")
        return out
    setpci = shutil.which("setpci")
    for b in bdfs:
        if not setpci:
            out[b] = "setpci not installed (pciutils)"
            continue
        try:
            r = subprocess.run([setpci, "-s", b, "ECAP_ACS+0x6.w"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            out[b] = f"setpci failed: {exc}"
            continue
        v = r.stdout.strip()
        out[b] = int(v, 16) if r.returncode == 0 and re.match(r"^[0-9a-fA-F]+$", v) else (
            (r.stderr.strip() or "no ACS capability") + (" (setpci needs root)" if os.geteuid() else ""))
    return out


def _pairs(root: Path) -> list[tuple[dict, dict]]:
    """Each GPU with its nearest RDMA NIC (by PCIe hops)."""
    pci = pci_devices(root)
    gpus = [d for d in pci if d["vendor_id"] == 0x10DE and d["class_id"] is not None and (d["class_id"] >> 8) in (0x0300, 0x0302)]
    nics = {d["pci_bus_id"]: d for d in pci}
    rdma = [r for r in rdma_devices(root) if r["pci_bus_id"] in nics]
    out = []
    for g in gpus:
        # nearest in the PCIe tree; across host bridges, one on the GPU's NUMA node first
        best = min(rdma, key=lambda r: (_hops(root, g["pci_bus_id"], r["pci_bus_id"]),
                                        nics[r["pci_bus_id"]].get("numa_node") != g.get("numa_node")), default=None)
        if best is not None:
            out.append((g, dict(nics[best["pci_bus_id"]], rdma=best)))
    return out


def _c_dev_nodes(root: Path, report: dict) -> dict:
    sys_names = [d["name"] for d in report.get("rdma_devices") or []]
    title = "/dev/infiniband in this container"
    if not sys_names:
        return _check("dev_infiniband", title, "unknown", "no RDMA device in /sys/class/infiniband")
    if not _live(root) and not (root / "dev").is_dir():
        return _check("dev_infiniband", title, "unknown", "the recording has no dev/ directory")
    uverbs = root / "sys/class/infiniband_verbs"
    want = {u: (read_text(uverbs / u / "ibdev") or "?") for u in (sorted(os.listdir(uverbs)) if uverbs.is_dir() else [])}
    if not want:
        return _check("dev_infiniband", title, "fail", f"{', '.join(sys_names)} listed but /sys/class/infiniband_verbs is "
                      "empty", "sudo modprobe ib_uverbs")
    missing = [f"/dev/infiniband/{u} ({ib})" for u, ib in want.items() if not (root / "dev/infiniband" / u).exists()]
    fix = ("docker/podman run --device /dev/infiniband (with --ulimit memlock=-1); Kubernetes: request the RDMA device "
           "plugin's resource (rdma/<resource> or nvidia.com/<resource>) in resources.limits")
    if missing:
        return _check("dev_infiniband", title, "fail", "missing: " + ", ".join(missing), fix)
    return _check("dev_infiniband", title, "ok", "present: " + ", ".join(f"/dev/infiniband/{u} ({ib})" for u, ib in want.items()))


def _c_memlock(root: Path, report: dict) -> dict:
    limits = read_text(root / "proc/self/limits") or ""
    status = read_text(root / "proc/self/status") or ""
    m = re.search(r"^Max locked memory\s+(\S+)\s+(\S+)", limits, re.M)
    cap = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status, re.M)
    if not m:
        return _check("memlock", "locked-memory limit and CAP_IPC_LOCK", "unknown", "no proc/self/limits to read")
    soft = m.group(1)
    ipc = bool(cap and (int(cap.group(1), 16) >> 14) & 1)
    ev = f"Max locked memory {soft} (hard {m.group(2)}); CAP_IPC_LOCK {'held' if ipc else 'not held'}"
    fix = ("ulimit -l unlimited (limits.conf: * - memlock unlimited); docker --ulimit memlock=-1 or --cap-add IPC_LOCK; "
           "Kubernetes: securityContext.capabilities.add: [\"IPC_LOCK\"]")
    if soft == "unlimited" or ipc:
        return _check("memlock", "locked-memory limit and CAP_IPC_LOCK", "ok", ev)
    small = soft.isdigit() and int(soft) < (64 << 20)
    return _check("memlock", "locked-memory limit and CAP_IPC_LOCK", "fail" if soft == "0" else ("warn" if small else "ok"),
                  ev + (": every registration, CQ and QP fails with EPERM" if soft == "0" else
                        ": host and staged paths of a few MiB fail with ENOMEM" if small else ""), fix)


def _c_peermem(root: Path, report: dict, cap: dict) -> dict:
    pm = cap["peer_memory"]
    if pm["loaded"]:
        return _check("peer_memory", "nvidia-peermem or nv_peer_mem loaded", "ok",
                      f"{pm['module']} {pm['version'] or ''}".strip() + f" ({pm['evidence']})")
    status = "ok" if cap["dmabuf"]["usable"] else "fail"
    return _check("peer_memory", "nvidia-peermem or nv_peer_mem loaded", "warn" if status == "ok" else "fail",
                  pm["evidence"] + ("; dma-buf is usable, so gdr works without it" if status == "ok" else ""),
                  "sudo modprobe nvidia-peermem (MLNX_OFED before 5.x: the nvidia-peer-memory package, nv_peer_mem)")


def _c_dmabuf(root: Path, report: dict, cap: dict) -> dict:
    d = cap["dmabuf"]
    status = "ok" if d["usable"] else ("unknown" if d["source"] == "kernel" and "unknown" in d["reason"] else "warn")
    return _check("dmabuf", "dma-buf registration accepted by the NIC", status, f"{d['source']}: {d['reason']}",
                  "Linux 5.12+ (or an MLNX_OFED with dma-buf), rdma-core 34+, open GPU kernel modules, CUDA 11.7+; "
                  "meanwhile nvidia-peermem")


def _c_acs(root: Path, report: dict) -> list[dict]:
    out = []
    for g, n in _pairs(root):
        bridges = bridges_between(root, g["pci_bus_id"], n["pci_bus_id"])
        title = f"ACS between GPU {g['pci_bus_id']} and {n['rdma']['name']}"
        if not bridges:
            out.append(_check("acs", title, "unknown", "no PCIe switch between them (they meet at a root complex, or "
                              "on different ones): ACS does not apply; see the NUMA check"))
            continue
        vals = acs_readings(root, bridges)
        bad = {b: v for b, v in vals.items() if isinstance(v, int) and any(v >> bit & 1 for bit in ACS_REDIRECT_BITS)}
        ev = ", ".join(f"{b} ACSCtl={'0x%04x' % v if isinstance(v, int) else v}" for b, v in vals.items())
        if bad:
            names = sorted({ACS_REDIRECT_BITS[bit] for v in bad.values() for bit in ACS_REDIRECT_BITS if v >> bit & 1})
            out.append(_check("acs", title, "fail", ev + f" ({', '.join(names)} set: peer-to-peer goes up to the root "
                              "complex)", "; ".join(f"sudo setpci -s {b} ECAP_ACS+0x6.w=0000" for b in bad) +
                              " (until reboot; or disable ACS in the BIOS; keep it where VMs need isolation)"))
        elif all(isinstance(v, int) for v in vals.values()):
            out.append(_check("acs", title, "ok", ev))
        else:
            out.append(_check("acs", title, "unknown", ev, "run as root with pciutils installed: sudo gdrlab doctor --cluster"))
    return out


def _c_iommu(root: Path, report: dict) -> dict:
    cmdline = read_text(root / "proc/cmdline") or ""
    types = {}
    for g, n in _pairs(root):
        for d in (g, n):
            t = read_text(root / "sys/bus/pci/devices" / d["pci_bus_id"] / "iommu_group/type")
            if t:
                types[d["pci_bus_id"]] = t
    iommus = sorted(os.listdir(root / "sys/class/iommu")) if (root / "sys/class/iommu").is_dir() else []
    opts = " ".join(w for w in cmdline.split() if "iommu" in w) or "no iommu option"
    ev = f"kernel command line: {opts}; IOMMUs: {', '.join(iommus) or 'none'}"
    if types:
        ev += "; domains: " + ", ".join(f"{b} {t}" for b, t in types.items())
    translated = [b for b, t in types.items() if t.startswith("DMA")]
    if translated:
        return _check("iommu", "IOMMU mode", "warn", ev + " (translated: every GPUDirect access goes through the IOMMU, "
                      "and peer-to-peer may be redirected)", "boot with iommu=pt (intel_iommu=on iommu=pt, or "
                      "amd_iommu=on iommu=pt), or set the group to identity: echo identity > "
                      "/sys/bus/pci/devices/<bdf>/iommu_group/type (with the device unbound)")
    if not iommus and not cmdline and not types:
        return _check("iommu", "IOMMU mode", "unknown", "no IOMMU readings in this tree")
    return _check("iommu", "IOMMU mode", "ok", ev)


def _gen(speed: str | None) -> str:
    m = re.match(r"([\d.]+)", speed or "")
    return {"2.5": "Gen1", "5.0": "Gen2", "8.0": "Gen3", "16.0": "Gen4", "32.0": "Gen5", "64.0": "Gen6"}.get(
        m.group(1) if m else "", speed or "?")


def _c_links(root: Path, report: dict) -> list[dict]:
    out = []
    for g, n in _pairs(root):
        for d, what in ((g, "GPU"), (n, n["rdma"]["name"])):
            p = root / "sys/bus/pci/devices" / d["pci_bus_id"]
            cs, ms = read_text(p / "current_link_speed"), read_text(p / "max_link_speed")
            cw, mw = read_text(p / "current_link_width"), read_text(p / "max_link_width")
            title = f"PCIe link of {what} {d['pci_bus_id']}"
            if not (cs and ms and cw and mw):
                out.append(_check("pcie_link", title, "unknown", "link speed/width not readable"))
                continue
            ev = f"{_gen(cs)} x{cw} of {_gen(ms)} x{mw}"
            if cw != mw:
                out.append(_check("pcie_link", title, "fail", ev + ": trained narrower than the slot",
                                  "reseat the card or the riser/cable, check the slot's bifurcation in the BIOS"))
            elif _gen(cs) != _gen(ms):
                out.append(_check("pcie_link", title, "warn", ev + (": GPUs lower the speed when idle, re-check under "
                                  "load" if what == "GPU" else ": trained slower than it can"),
                                  "nvidia-smi -q -d PCIE under load; lspci -vv -s " + d["pci_bus_id"] + " (LnkSta)"))
            else:
                out.append(_check("pcie_link", title, "ok", ev))
    return out


def _c_bar1(root: Path, report: dict) -> list[dict]:
    out = []
    for g in report.get("gpus") or []:
        bar, mem = g.get("bar1_total_bytes"), g.get("total_mem_bytes")
        title = f"BAR1 of GPU {g['pci_bus_id']}"
        if not bar or not mem:
            out.append(_check("bar1", title, "unknown", f"BAR1 {bar or '?'} bytes, GPU memory {mem or '?'} bytes"))
        elif bar < mem:
            out.append(_check("bar1", title, "warn", f"BAR1 {bar >> 20} MiB < GPU memory {mem >> 20} MiB: only that "
                              "much GPU memory can be registered at once", "enable Resizable BAR / large BAR in the "
                              "BIOS (and above-4G decoding); on VMs, give the guest a 64-bit MMIO window large enough"))
        else:
            out.append(_check("bar1", title, "ok", f"BAR1 {bar >> 20} MiB >= GPU memory {mem >> 20} MiB"))
    return out


def _c_numa(root: Path, report: dict) -> list[dict]:
    cpus = numa_cpus(root)
    out = []
    for g, n in _pairs(root):
        gn, nn = g.get("numa_node"), n.get("numa_node")
        title = f"NUMA of GPU {g['pci_bus_id']} and {n['rdma']['name']}"
        gcpu = cpus.get(gn, "") if isinstance(gn, int) else ""
        bind = f"numactl --cpunodebind={gn} --membind={gn}" if isinstance(gn, int) and gn >= 0 else ""
        if not isinstance(gn, int) or not isinstance(nn, int) or gn < 0 or nn < 0:
            out.append(_check("numa", title, "unknown", f"numa_node GPU {gn}, NIC {nn}"))
        elif gn != nn:
            out.append(_check("numa", title, "fail", f"GPU on node {gn} (CPUs {gcpu}), NIC on node {nn}: GPUDirect "
                              "crosses the socket link (NCCL: SYS)", f"use a GPU and NIC of one node; bind to the "
                              f"GPU's CPUs: {bind} (or taskset -c {gcpu})"))
        else:
            out.append(_check("numa", title, "ok", f"both on node {gn}; bind with {bind} (CPUs {gcpu})"))
    return out


def _c_ports(root: Path, report: dict) -> list[dict]:
    out = []
    for d in report.get("rdma_devices") or []:
        kind = d.get("no_rc_kind") or ""
        for p in d.get("ports") or []:
            title = f"{d['name']} port {p['port']}"
            ndev = read_text(root / "sys/class/infiniband" / d["name"] / f"ports/{p['port']}/gid_attrs/ndevs/0")
            mtu = read_text(root / "sys/class/net" / ndev / "mtu") if ndev else None
            ev = (f"state {p['state']}, phys {p['phys_state']}, rate {p['rate']}, link layer {p['link_layer']}"
                  + (f", netdev {ndev} MTU {mtu}" if ndev else ""))
            if kind:
                out.append(_check("port", title, "fail", ev + f"; {kind}: no RC queue pairs with immediate data",
                                  "EFA: SRD through libfabric (aws-ofi-nccl); iWARP: RoCE mode or another NIC"))
            elif (p["state"] or "").upper() != "ACTIVE":
                out.append(_check("port", title, "fail", ev, "connect the cable; InfiniBand: start a subnet manager "
                                  "(opensm) or check the switch; RoCE: ip link set dev <netdev> up"))
            elif mtu and mtu.isdigit() and int(mtu) < 4200 and (p["link_layer"] or "") == "Ethernet":
                out.append(_check("port", title, "warn", ev + ": RoCE path MTU is capped below 4096",
                                  f"ip link set dev {ndev} mtu 9000 (and on the switch ports)"))
            else:
                out.append(_check("port", title, "ok", ev))
    return out


def cluster_checks(root: str | os.PathLike = "/", report: dict[str, Any] | None = None,
                   probe: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """Every check, in the order of docs/cluster.md's first-run checklist."""
    r = Path(os.fspath(root))
    if report is None:
        from . import discover
        report = discover(r)
    cap = gdr_capability(r, probe=probe)
    steps: list[Callable[[], Any]] = [
        lambda: _c_dev_nodes(r, report), lambda: _c_memlock(r, report), lambda: _c_ports(r, report),
        lambda: _c_peermem(r, report, cap), lambda: _c_dmabuf(r, report, cap), lambda: _c_numa(r, report),
        lambda: _c_acs(r, report), lambda: _c_iommu(r, report), lambda: _c_links(r, report),
        lambda: _c_bar1(r, report)]
    out: list[dict[str, str]] = []
    for s in steps:
        got = s()
        out.extend(got if isinstance(got, list) else [got])
    return out
