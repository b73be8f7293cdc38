"""The doctor report of one machine, or of a recorded sysfs tree: GPUs (NVML, CUDA, sysfs), RDMA
devices, peer memory, libraries and every path's availability (:mod:`.availability`)."""
from __future__ import annotations

import datetime as _dt
import os
import platform
from pathlib import Path

from .. import provenance as _prov
from .._engine import cuda_status, gpus as _engine_gpus
from .._version import __version__
from .availability import path_availability
from .capability import gdr_capability
from .libs import LIBRARIES, probe_libraries
from .nvml import GpuList, nvml_gpus
from .sysfs import check_root, norm_bus_id, pci_devices, rdma_devices
from .sysfs import peer_memory as _kernel_peer_memory

__all__ = ["discover", "doctor_report", "peer_memory", "cuda_gpus"]


def _is_live(root: str | os.PathLike[str]) -> bool:
    return str(Path(os.fspath(root)).resolve()) == "/"


def cuda_gpus() -> tuple[list[dict], dict]:
    """The engine's view: (GPUs with GDR/dma-buf attributes, cuda status); never raises."""
    try:
        status = cuda_status()
        return (_engine_gpus() if status["usable"] else []), status
    except Exception as exc:  # engine not built, or a driver oddity
        return [], {"usable": False, "reason": f"{type(exc).__name__}: {exc}", "driver_version": 0}


def peer_memory(root: str | os.PathLike = "/", gpus: list[dict] | None = None, libraries: dict | None = None) -> dict:
    """A peer-memory client loaded (nvidia_peermem, or MLNX_OFED's nv_peer_mem module or nv_mem
    client)? dma-buf usable (the HCA accepts it, by NCCL's fd=-1 probe where an HCA is here, else
    kernel 5.12+; a GPU with DMA_BUF_SUPPORTED; libibverbs with ``ibv_reg_dmabuf_mr``)? The reason
    says which part is missing. The capability itself is :func:`gdrlab.hw.capability.gdr_capability`."""
    out = _kernel_peer_memory(root)
    cap = gdr_capability(root, kernel_release=out["kernel_release"])
    out.update(peer_memory_loaded=cap["peer_memory"]["loaded"], peer_memory_module=cap["peer_memory"]["module"],
               peer_memory_version=cap["peer_memory"]["version"], dmabuf_source=cap["dmabuf"]["source"],
               dmabuf_probe=cap["dmabuf"]["reason"] if cap["dmabuf"]["source"] == "probe" else None)
    why = []
    if not cap["dmabuf"]["usable"]:
        why.append(cap["dmabuf"]["reason"])
    if gpus is not None and not any(g.get("dmabuf_supported") for g in gpus):
        why.append("no GPU reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED" if gpus else "no CUDA GPU")
    if libraries is not None:
        v = libraries.get("libibverbs.so.1") or {}
        if not v.get("found"):
            why.append("libibverbs.so.1 not found")
        elif v.get("has_ibv_reg_dmabuf_mr") is False and out["dmabuf_source"] != "probe":
            why.append("libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than v34)")
    checked = gpus is not None and libraries is not None
    out["dmabuf_usable"] = bool(checked and not why)
    out["dmabuf_reason"] = "; ".join(why) if why else (
        "kernel, GPU and libibverbs all support dma-buf" if checked else "GPU and library support not checked")
    return out


def _second_mem_bar(bars: list[dict]) -> int | None:
    """NVIDIA's "BAR1" is the second memory BAR (sysfs BAR1 on old GPUs, BAR2 on 64-bit layouts)."""
    mem = [b for b in bars if b["bar"] != "rom" and not b["io"]]
    return mem[1]["size_bytes"] if len(mem) >= 2 else None


def _gpus(root: str | os.PathLike[str], live: bool, pci: list[dict]) -> tuple[list[dict], str, dict]:
    nvidia = {d["pci_bus_id"]: d for d in pci if d["vendor_id"] == 0x10DE and d["class_id"] is not None
              and (d["class_id"] >> 8) in (0x0300, 0x0302)}
    if live:
        cuda_list, status = cuda_gpus()
        nv = nvml_gpus()
    else:
        cuda_list, nv = [], GpuList(reason="recorded tree: NVML describes this machine, not the recording")
        status = {"usable": False, "reason": "recorded tree: CUDA not queried", "driver_version": 0}
    by_bus_cuda = {norm_bus_id(str(g.get("pci_bus_id", ""))): g for g in cuda_list}
    by_bus_nvml = {g["pci_bus_id"]: g for g in nv}
    buses = sorted(set(nvidia) | set(by_bus_cuda) | set(by_bus_nvml))
    out = []
    for bus in buses:
        c, n, s = by_bus_cuda.get(bus, {}), by_bus_nvml.get(bus, {}), nvidia.get(bus, {})
        bar1_sysfs = _second_mem_bar(s.get("bars", [])) if s else None
        out.append({
            "index": c.get("index") if c else None,
            "nvml_index": n.get("index") if n else None,
            "name": c.get("name") or n.get("name") or (f"NVIDIA [10de:{s['device_id']:04x}]" if s else None),
            "pci_bus_id": bus,
            "bar1_total_bytes": n.get("bar1_total_bytes") if n.get("bar1_total_bytes") is not None else bar1_sysfs,
            "bar1_used_bytes": n.get("bar1_used_bytes"),
            "bar1_source": "nvml" if n.get("bar1_total_bytes") is not None else ("sysfs" if bar1_sysfs else None),
            "bars": s.get("bars", []),
            "pcie_gen": n.get("pcie_gen") if n.get("pcie_gen") is not None else s.get("pcie_gen"),
            "pcie_width": n.get("pcie_width") if n.get("pcie_width") is not None else s.get("current_link_width"),
            "pcie_max_gen": n.get("pcie_max_gen"),
            "pcie_max_width": n.get("pcie_max_width") if n.get("pcie_max_width") is not None else s.get("max_link_width"),
            "numa_node": next((v for v in (s.get("numa_node"), n.get("numa_node"), c.get("host_numa_id"))
                               if isinstance(v, int) and v >= 0), None),
            "gdr_supported": bool(c["gdr_supported"]) if "gdr_supported" in c else None,
            "dmabuf_supported": bool(c["dmabuf_supported"]) if "dmabuf_supported" in c else None,
            "gdr_vmm_supported": bool(c["gdr_vmm_supported"]) if "gdr_vmm_supported" in c else None,
            "cuda_usable": bool(c),
            "total_mem_bytes": c.get("total_mem_bytes"),
            "compute_capability": c.get("compute_capability"),
        })
    out.sort(key=lambda g: (g["index"] is None, g["index"] if g["index"] is not None else 0, g["pci_bus_id"]))
    if out:
        reason = ""
    elif live:
        reason = f"no NVIDIA GPU on the PCI bus (NVML: {nv.reason})"
    else:
        reason = "no NVIDIA GPU in the recorded PCI tree"
    return out, reason, status


def discover(root: str | os.PathLike = "/", probe_libs: bool | None = None) -> dict:
    """The doctor report: GPUs, RDMA devices, peer memory, libraries and every path's availability.

    Parameters
    ----------
    root : path
        ``/`` for this machine, or a recorded sysfs tree.
    probe_libs : bool, optional
        Probe the shared libraries (in a child process). Default: only for the live root.
    """
    check_root(root)
    live = _is_live(root)
    if probe_libs is None:
        probe_libs = live
    pci = pci_devices(root)
    gpus, gpus_reason, status = _gpus(root, live, pci)
    libs = probe_libraries() if probe_libs else {
        n: {"found": False, "path": None, "version": None, "reason": "not probed (recorded tree)"}
        for n in LIBRARIES}
    rdma = rdma_devices(root)
    source = f"live, {platform.node()}" if live else f"recorded sysfs tree {os.fspath(root)}"
    report = {
        # the same provenance block as every other gdrlab dataset (gdrlab.recorded reads it)
        "provenance": (_prov.live({"hardware": source, "command": "gdrlab doctor"}) if live else
                       _prov.recorded(source, _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                      gdrlab=__version__, command=f"gdrlab doctor --sysfs {os.fspath(root)}")),
        "source": source,
        "cuda": status,
        "gpus": gpus,
        "gpus_reason": gpus_reason,
        "rdma_devices": rdma,
        "rdma_reason": "" if rdma else "no RDMA device found (/sys/class/infiniband is empty)",
        "peer_memory": peer_memory(root, [g for g in gpus if g["cuda_usable"]] if live else None,
                                   libs if probe_libs else None),
        "libraries": libs,
        "gdrdrv_present": Path(os.fspath(root), "dev/gdrdrv").exists(),
        "pci_device_count": len(pci),
    }
    report["paths"] = path_availability(report)
    return report


def doctor_report(root: str | os.PathLike = "/", probe_libs: bool | None = None) -> dict:
    """Same as :func:`discover`."""
    return discover(root, probe_libs=probe_libs)
