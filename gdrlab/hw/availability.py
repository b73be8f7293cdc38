"""Which transfer paths of DESIGN's vocabulary can run here, why not, and what would fix it."""
from __future__ import annotations

from ..vocab import PATHS

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


def path_availability(report: dict) -> dict[str, dict]:
    """``{path: {"available": bool, "reason": str, "fix": str}}`` from a doctor report.

    The report is what :func:`gdrlab.hw.discover` returns; only its ``cuda``, ``gpus``,
    ``rdma_devices``, ``peer_memory``, ``libraries`` and ``gdrdrv_present`` keys are used, so a
    hand-made report works too (labs use that to ask "what if this machine had an HCA?").
    """
    cuda = report.get("cuda") or {}
    gpus = [g for g in report.get("gpus") or [] if g.get("cuda_usable", cuda.get("usable"))]
    n_gpus = len(gpus)
    libs = report.get("libraries") or {}
    rdma = report.get("rdma_devices") or []
    peer = report.get("peer_memory") or {}
    out: dict[str, dict] = {}

    out["host"] = _entry(True, "host buffers over a tcp wire: needs nothing")
    if n_gpus:
        v = int(cuda.get("driver_version") or 0)
        ver = f"CUDA {v // 1000}.{(v % 1000) // 10}" if v else "CUDA"
        gpu_ok = (True, f"{n_gpus} GPU(s) usable through the {ver} driver; the engine runs it over tcp")
    else:
        why = cuda.get("reason") or "no CUDA GPU found"
        gpu_ok = (False, f"no usable CUDA GPU: {why}")
    gpu_fix = ("run on a machine with an NVIDIA GPU and its driver (libcuda.so.1); "
               "elsewhere use the recorded data and gdrlab.model")
    for p, what in (("staged", "D2H into a pinned bounce buffer, CPU memcpy, wire"),
                    ("shared", "D2H straight into the wire's pinned buffer"),
                    ("pipelined", "shared, cut into overlapping chunks")):
        ok, why = gpu_ok
        out[p] = _entry(ok, f"{what}: {why}" if ok else why, gpu_fix)

    out["gdr"] = _gdr_entry(gpus, gpu_ok[1], libs, rdma, peer)

    gdrapi = libs.get("libgdrapi.so.2") or {}
    dev = report.get("gdrdrv_present")
    if not gdrapi.get("found"):
        tail = "" if dev else "; /dev/gdrdrv is missing too (gdrdrv module not loaded)"
        out["gdrcopy"] = _entry(False, f"libgdrapi.so.2 not found ({gdrapi.get('reason') or 'not probed'}){tail}",
                                "install gdrcopy (libgdrapi.so.2) and load its gdrdrv kernel module; "
                                "meanwhile gdrlab.model predicts this path")
    else:
        note = "" if dev else " (and /dev/gdrdrv is missing: gdrdrv not loaded)"
        out["gdrcopy"] = _entry(False, "not implemented by this gdrlab version (the model covers it)" + note,
                                "use gdrlab.model for gdrcopy predictions")

    if n_gpus >= 2:
        out["p2p"] = _entry(True, f"{n_gpus} GPUs: peer DMA between them (peer access checked per pair)")
        out["p2p-staged"] = _entry(True, f"{n_gpus} GPUs: copies staged through host memory")
    else:
        why = f"needs 2 or more GPUs, found {n_gpus}"
        out["p2p"] = _entry(False, why, "a machine with two NVIDIA GPUs; elsewhere use recorded data")
        out["p2p-staged"] = _entry(False, why, "a machine with two NVIDIA GPUs; elsewhere use recorded data")
    return out
