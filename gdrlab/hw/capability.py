"""One answer to "can GPU memory be registered with the HCA here?", shared by the engine, doctor
and the labs (lab 00 and lab 03 may call :func:`gdr_capability`).

Two mechanisms, either enough:

- a peer-memory client: the open driver's ``nvidia_peermem``, or MLNX_OFED's legacy
  ``nv_peer_mem`` (the module, or the client it registers, ``/sys/kernel/mm/memory_peers/nv_mem``
  and ``nv_mem_nc``): the same four places the engine's ``peermem_loaded()`` looks, as NCCL does;
- dma-buf: judged by a real probe where an HCA is here (NCCL's: ``ibv_reg_dmabuf_mr`` with fd -1
  answers EOPNOTSUPP / EPROTONOSUPPORT without kernel support, an argument error with it), which
  sees MLNX_OFED backports; the kernel release (5.12+) is only the fallback for recorded trees.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = ["PEERMEM_PROBES", "peer_memory_client", "dmabuf_probe", "gdr_capability"]

# (name, directory under the root, version file): the engine's list (resources.cc peermem_loaded)
PEERMEM_PROBES = (("nvidia_peermem", "sys/module/nvidia_peermem", "version"),
                  ("nv_peer_mem", "sys/module/nv_peer_mem", "version"),
                  ("nv_mem", "sys/kernel/mm/memory_peers/nv_mem", "version"),
                  ("nv_mem_nc", "sys/kernel/mm/memory_peers/nv_mem_nc", "version"))


def peer_memory_client(root: str | os.PathLike = "/") -> dict[str, Any]:
    """``{"loaded", "module", "version", "evidence"}``: the first peer-memory client found."""
    r = Path(os.fspath(root))
    for name, d, vfile in PEERMEM_PROBES:
        p = r / d
        if p.is_dir():
            try:
                version = (p / vfile).read_text().strip() or None
            except OSError:
                version = None
            return {"loaded": True, "module": name, "version": version, "evidence": f"/{d} exists"}
    return {"loaded": False, "module": None, "version": None,
            "evidence": "none of " + ", ".join("/" + d for _, d, _ in PEERMEM_PROBES) + " exists"}


def dmabuf_probe(device: str | None = None) -> dict[str, Any]:
    """NCCL's probe on this machine's HCA: ``{"supported": bool | None, "errno": int | None,
    "reason": str}``; ``supported`` is None when it cannot run (no libibverbs, no device)."""
    import errno as _errno
    try:
        from .._native import verbs as v
        st = v.status()
        if not st["devices"]:
            return {"supported": None, "errno": None, "reason": f"not probed: {st['reason']}"}
        if not v.has_reg_dmabuf_mr():
            return {"supported": False, "errno": None,
                    "reason": "libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than v34)"}
        ctx = v.Context(device or "", -1)
        ok, err = v.dmabuf_probe(ctx)
    except Exception as exc:  # the engine or the device unusable: say so, never raise
        return {"supported": None, "errno": None, "reason": f"not probed: {type(exc).__name__}: {exc}"}
    name = ("EOPNOTSUPP" if err == _errno.EOPNOTSUPP else _errno.errorcode.get(err, str(err))) if err else "no error"
    if ok:
        return {"supported": True, "errno": err, "reason": f"ibv_reg_dmabuf_mr(fd=-1) on {ctx.name} answered {name}: "
                "the kernel and provider handle dma-buf"}
    return {"supported": False, "errno": err, "reason": f"ibv_reg_dmabuf_mr(fd=-1) on {ctx.name} answered {name}: "
            "no dma-buf support in this kernel/provider"}


def _kernel_ok(release: str | None) -> bool | None:
    m = re.match(r"(\d+)\.(\d+)", release or "")
    return (int(m.group(1)), int(m.group(2))) >= (5, 12) if m else None


def gdr_capability(root: str | os.PathLike = "/", probe: dict[str, Any] | None = None,
                   kernel_release: str | None = None) -> dict[str, Any]:
    """Whether GPU memory can be registered with an HCA, and how: ``peer_memory`` (from
    :func:`peer_memory_client`), ``dmabuf`` (``{"usable", "source", "reason"}``: the probe when
    given or, on the live root, run; else the kernel release), ``available``, ``via``
    (``"dma-buf"``, the peer-memory module's name, or None) and ``reason``. The GPU's and the CUDA
    driver's own dma-buf support are checked by the caller (doctor) where a GPU is visible."""
    live = str(Path(os.fspath(root)).resolve()) == "/"
    pm = peer_memory_client(root)
    if probe is None and live:
        probe = dmabuf_probe()
    if kernel_release is None:
        kernel_release = os.uname().release if live else None
        if not live:
            try:
                kernel_release = (Path(os.fspath(root)) / "proc/sys/kernel/osrelease").read_text().strip()
            except OSError:
                kernel_release = None
    kok = _kernel_ok(kernel_release)
    if probe is not None and probe.get("supported") is not None:
        dmabuf = {"usable": bool(probe["supported"]), "source": "probe", "reason": probe["reason"]}
    elif kok is None:
        dmabuf = {"usable": False, "source": "kernel", "reason": "kernel release unknown and no HCA to probe"}
    else:
        dmabuf = {"usable": kok, "source": "kernel",
                  "reason": f"kernel {kernel_release} is {'5.12 or newer' if kok else 'older than 5.12'} (not probed"
                            f"{', ' + probe['reason'].removeprefix('not probed: ') if probe else ''}; an MLNX_OFED backport is seen only by "
                            "the probe)"}
    via = "dma-buf" if dmabuf["usable"] else (pm["module"] if pm["loaded"] else None)
    if via:
        reason = f"GPU memory registers through {via}" + (
            f" (also {pm['module']})" if via == "dma-buf" and pm["loaded"] else "")
    else:
        reason = f"no peer-memory client ({pm['evidence']}) and dma-buf not usable ({dmabuf['reason']})"
    return {"peer_memory": pm, "dmabuf": dmabuf, "kernel_release": kernel_release, "available": via is not None,
            "via": via, "reason": reason}
