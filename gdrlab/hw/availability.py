"""Which transfer paths of DESIGN's vocabulary can run here, why not, and what would fix it.

Driven by the path table (:data:`gdrlab.vocab.PATH_TABLE`): each path lists what it ``needs``
(``gpu``, ``two-gpus``, ``rdma``, ``gdrcopy``) and this module checks each need once; a path the
engine runs over no wire (``wires == ()``) is covered by the model only.
"""
from __future__ import annotations

from typing import Callable

from ..vocab import PATH_TABLE, PATHS, PathInfo

__all__ = ["PATHS", "path_availability"]


def _entry(ok: bool, reason: str, fix: str = "") -> dict:
    return {"available": bool(ok), "reason": reason, "fix": "" if ok else fix}


def _gdr_entry(gpus: list[dict], no_gpu_reason: str, libs: dict, rdma: list[dict], peer: dict) -> dict:
    """gdr needs a GPU, libibverbs, an active RDMA port and a way to register GPU memory."""
    missing, fixes = [], []
    if not gpus:
        missing.append(no_gpu_reason)
        fixes.append("an NVIDIA GPU with its driver")
    elif not any(g.get("gdr_supported") for g in gpus):
        missing.append("no GPU reports CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED")
        fixes.append("a data-centre GPU and driver that support GPUDirect RDMA")
    verbs = libs.get("libibverbs.so.1") or {}
    if not verbs.get("found"):
        missing.append(f"libibverbs.so.1 not found ({verbs.get('reason') or 'not probed'})")
        fixes.append("install rdma-core (apt install libibverbs1 ibverbs-providers)")
    if not rdma:
        missing.append("no RDMA device found (/sys/class/infiniband is empty)")
        fixes.append("an InfiniBand or RoCE HCA with its driver (e.g. mlx5_core, mlx5_ib)")
    elif all(d.get("no_rc_kind") for d in rdma):
        missing.append("; ".join(f"{d['name']} is {d['no_rc_kind']}: no RC queue pairs with RDMA WRITE WITH IMMEDIATE"
                                 for d in rdma))
        fixes.append("an InfiniBand or RoCE HCA; on EFA use SRD through libfabric (NCCL: aws-ofi-nccl)")
    elif not any(d.get("active") for d in rdma):
        missing.append("no RDMA port is ACTIVE (" + ", ".join(
            f"{d['name']}: {'/'.join(str(p.get('state')) for p in d.get('ports') or []) or 'no ports'}"
            for d in rdma) + ")")
        fixes.append("connect the cable / bring the port up (subnet manager for InfiniBand)")
    peermem = peer.get("peer_memory_loaded", peer.get("nvidia_peermem_loaded") or peer.get("nv_peer_mem_loaded"))
    if not (peer.get("dmabuf_usable") or peermem):
        missing.append("no way to register GPU memory with the HCA: no peer-memory client is loaded (nvidia_peermem, "
                       f"or MLNX_OFED's nv_peer_mem) and dma-buf is not usable ({peer.get('dmabuf_reason') or 'unknown'})")
        fixes.append("`sudo modprobe nvidia-peermem`, or use dma-buf (Linux 5.12+, CUDA 11.7+, "
                     "open GPU kernel modules, rdma-core with ibv_reg_dmabuf_mr)")
    if missing:
        return _entry(False, "; ".join(missing), "; ".join(fixes))
    via = "dma-buf" if peer.get("dmabuf_usable") else (peer.get("peer_memory_module") or "nvidia_peermem")
    names = ", ".join(d["name"] for d in rdma if d.get("active") and not d.get("no_rc_kind"))
    return _entry(True, f"GPU memory can be registered with {names} via {via}")


def _gpu_need(report: dict, gpus: list[dict]) -> tuple[bool, str, str]:
    if gpus:
        cuda = report.get("cuda") or {}
        v = int(cuda.get("driver_version") or 0)
        ver = f"CUDA {v // 1000}.{(v % 1000) // 10}" if v else "CUDA"
        return True, f"{len(gpus)} GPU(s) usable through the {ver} driver; the engine runs it over tcp", ""
    why = (report.get("cuda") or {}).get("reason") or "no CUDA GPU found"
    return False, f"no usable CUDA GPU: {why}", ("run on a machine with an NVIDIA GPU and its driver (libcuda.so.1); "
                                                 "elsewhere use the recorded data and gdrlab.model")


def _two_gpus_need(report: dict, gpus: list[dict]) -> tuple[bool, str, str]:
    if len(gpus) >= 2:
        return True, f"{len(gpus)} GPUs", ""
    return False, f"needs 2 or more GPUs, found {len(gpus)}", "a machine with two NVIDIA GPUs; elsewhere use recorded data"


def _rdma_need(report: dict, gpus: list[dict]) -> tuple[bool, str, str]:
    e = _gdr_entry(gpus, _gpu_need(report, gpus)[1], report.get("libraries") or {}, report.get("rdma_devices") or [],
                   report.get("peer_memory") or {})
    return e["available"], e["reason"], e["fix"]


def _gdrcopy_need(report: dict, gpus: list[dict]) -> tuple[bool, str, str]:
    gdrapi = (report.get("libraries") or {}).get("libgdrapi.so.2") or {}
    dev = report.get("gdrdrv_present")
    if not gdrapi.get("found"):
        tail = "" if dev else "; /dev/gdrdrv is missing too (gdrdrv module not loaded)"
        return False, f"libgdrapi.so.2 not found ({gdrapi.get('reason') or 'not probed'}){tail}", (
            "install gdrcopy (libgdrapi.so.2) and load its gdrdrv kernel module; meanwhile gdrlab.model predicts this path")
    note = "" if dev else " (and /dev/gdrdrv is missing: gdrdrv not loaded)"
    return True, note, ""


#: One check per need a path of the table can list: (met, reason, fix).
NEEDS: dict[str, Callable[[dict, list[dict]], tuple[bool, str, str]]] = {
    "gpu": _gpu_need, "two-gpus": _two_gpus_need, "rdma": _rdma_need, "gdrcopy": _gdrcopy_need}


def _path_entry(info: PathInfo, report: dict, gpus: list[dict]) -> dict:
    """The availability of one path: its needs in the table's order; the first unmet one says why
    (the ``rdma`` check names every missing part itself)."""
    if not info.needs:
        return _entry(True, f"{info.summary}: needs nothing")
    reason = ""
    for need in ("rdma",) if "rdma" in info.needs else info.needs:
        ok, why, fix = NEEDS[need](report, gpus)
        if not ok:
            return _entry(False, why, fix)
        reason = why
    if not info.wires:
        return _entry(False, "not implemented by this gdrlab version (the model covers it)" + reason,
                      f"use gdrlab.model for {info.name} predictions")
    if "rdma" in info.needs:  # the rdma check's reason names the HCAs and how GPU memory registers
        return _entry(True, reason)
    if "two-gpus" in info.needs:
        return _entry(True, f"{reason}: {info.summary}")
    return _entry(True, f"{info.summary}: {reason}")


def path_availability(report: dict) -> dict[str, dict]:
    """``{path: {"available": bool, "reason": str, "fix": str}}`` from a doctor report.

    The report is what :func:`gdrlab.hw.discover` returns; only its ``cuda``, ``gpus``,
    ``rdma_devices``, ``peer_memory``, ``libraries`` and ``gdrdrv_present`` keys are used, so a
    hand-made report works too (labs use that to ask "what if this machine had an HCA?").
    """
    cuda = report.get("cuda") or {}
    gpus = [g for g in report.get("gpus") or [] if g.get("cuda_usable", cuda.get("usable"))]
    return {info.name: _path_entry(info, report, gpus) for info in PATH_TABLE}
