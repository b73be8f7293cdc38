"""Live RDMA without an HCA: Soft-RoCE (the kernel's ``rdma_rxe``) and rdma-core's pyverbs.

Soft-RoCE turns any Ethernet interface into an RDMA device: real ``ibv_reg_mr``, real keys, real
pinning limits, all in software. :func:`soft_roce_status` says whether this machine has one, and
if not, the exact commands to make one and what stands in the way. :func:`pyverbs_registrations`
does lab 03's host-memory registration through pyverbs, with pyverbs's objects (``Context``,
``PD``, ``MR``), beside gdrlab's own (``Device``, ``alloc_pd()``, ``reg_mr()``).
"""
from __future__ import annotations

import platform
from pathlib import Path
from typing import TypedDict

from ..hw.pyverbs import pyverbs_status

__all__ = ["soft_roce_status", "pyverbs_registrations", "PYVERBS_BESIDE_GDRLAB", "SoftRoceStatus",
           "RegistrationAttempt", "PyverbsAttempt"]


class SoftRoceStatus(TypedDict):
    """What :func:`soft_roce_status` found."""

    rdma_devices: list[str]
    rxe_devices: list[str]
    module: str
    module_reason: str
    netdev: str | None
    commands: list[str]
    reason: str


class RegistrationAttempt(TypedDict):
    """One registration tried: what (``attempt``), how it went (``outcome``), the errno (0 when none)
    and ``detail`` (the keys on success, else the error)."""

    attempt: str
    outcome: str
    errno: int
    detail: str


class PyverbsAttempt(RegistrationAttempt):
    """A :class:`RegistrationAttempt` through pyverbs: ``api`` ("pyverbs") and the RDMA ``device``."""

    api: str
    device: str

# The same registration, object for object, in the two APIs.
PYVERBS_BESIDE_GDRLAB = [
    {"step": "open the device", "ibverbs": "ibv_open_device", "gdrlab.verbs": "verbs.Device(name)",
     "pyverbs": "pyverbs.device.Context(name=name)"},
    {"step": "protection domain", "ibverbs": "ibv_alloc_pd", "gdrlab.verbs": "dev.alloc_pd()",
     "pyverbs": "pyverbs.pd.PD(ctx)"},
    {"step": "register host memory", "ibverbs": "ibv_reg_mr", "gdrlab.verbs": "pd.reg_mr(engine.Buffer(n))",
     "pyverbs": "pyverbs.mr.MR(pd, n, access)"},
    {"step": "register a GPU pointer", "ibverbs": "ibv_reg_mr (needs nvidia-peermem)",
     "gdrlab.verbs": "pd.reg_mr(engine.Buffer(n, 'device'))", "pyverbs": "pyverbs.mr.MR(pd, n, access, address=ptr)"},
    {"step": "register GPU memory by dma-buf", "ibverbs": "ibv_reg_dmabuf_mr",
     "gdrlab.verbs": "pd.reg_gpu(buf, how='dmabuf')", "pyverbs": "pyverbs.mr.DmaBufMR (needs the dma-buf fd)"},
    {"step": "the keys", "ibverbs": "mr->lkey, mr->rkey", "gdrlab.verbs": "mr.lkey, mr.rkey",
     "pyverbs": "mr.lkey, mr.rkey"},
]


def _ifaces(root: Path) -> list[str]:
    """Ethernet interfaces that are up (not loopback), physical ones first."""
    base = root / "sys/class/net"
    try:
        names = sorted(p.name for p in base.iterdir())
    except OSError:
        return []
    up: list[tuple[bool, str]] = []
    for name in names:
        d = base / name
        try:
            state = (d / "operstate").read_text().strip()
            kind = (d / "type").read_text().strip()
        except OSError:
            continue
        if name != "lo" and kind == "1" and state in ("up", "unknown"):
            up.append((not (d / "device").exists(), name))
    return [name for _, name in sorted(up)]


def _module_state(root: Path, release: str) -> tuple[str, str]:
    if (root / "sys/module/rdma_rxe").is_dir():
        return "loaded", "rdma_rxe is loaded"
    mod_dir = root / "lib/modules" / release
    if any(mod_dir.glob("kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*")):
        return "available", "rdma_rxe is built for this kernel but not loaded (sudo modprobe rdma_rxe)"
    if mod_dir.is_dir():
        return "missing", (f"this kernel ({release}) has no rdma_rxe module: many cloud kernels leave it out "
                           "(Ubuntu ships it in linux-modules-extra-$(uname -r))")
    return "unknown", f"no /lib/modules/{release} here (a container?): rdma_rxe must be loaded on the host"


def soft_roce_status(root: str = "/") -> SoftRoceStatus:
    """What this machine has for live RDMA, and how to add a Soft-RoCE device if it has none.

    Returns
    -------
    dict
        ``rdma_devices`` (every name under ``/sys/class/infiniband``), ``rxe_devices`` (those that
        are Soft-RoCE), ``module`` (loaded/available/missing/unknown) with ``module_reason``,
        ``netdev`` (an Ethernet interface to put it on, or None), ``commands`` (the lines to run,
        with that interface) and ``reason`` (one sentence: ready, or what stands in the way).
    """
    r = Path(root)
    ib = r / "sys/class/infiniband"
    devices = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
    rxe = [d for d in devices if d.startswith("rxe") or (ib / d / "parent").is_file()]
    release = platform.release()
    try:
        release = (r / "proc/sys/kernel/osrelease").read_text().strip() or release
    except OSError:
        pass
    module, module_reason = _module_state(r, release)
    ifaces = _ifaces(r)
    netdev = ifaces[0] if ifaces else None
    iface = netdev or "IFACE"
    commands = ["sudo modprobe rdma_rxe", f"sudo rdma link add rxe0 type rxe netdev {iface}", "rdma link show",
                "ibv_devinfo -d rxe0", "sudo rdma link delete rxe0    # when done"]
    if devices:
        reason = f"RDMA device(s) here: {', '.join(devices)}" + (" (Soft-RoCE)" if rxe and rxe == devices else "")
    elif module in ("missing", "unknown"):
        reason = f"no RDMA device, and Soft-RoCE cannot be added here: {module_reason}"
    elif netdev is None:
        reason = "no RDMA device, and no Ethernet interface that is up to put a Soft-RoCE device on"
    else:
        reason = f"no RDMA device yet: {module_reason}; then add rxe0 on {netdev} (needs root)"
    return {"rdma_devices": devices, "rxe_devices": rxe, "module": module, "module_reason": module_reason,
            "netdev": netdev, "commands": commands, "reason": reason}


def pyverbs_registrations(size_bytes: int = 1 << 20) -> list[PyverbsAttempt]:
    """Lab 03's host-memory registration through pyverbs, one row per RDMA device; never raises.

    Each row: ``api`` ("pyverbs"), ``device``, ``attempt``, ``outcome``, ``errno``, ``detail``
    (the keys on success). Where pyverbs is not usable, one row says exactly why.
    """
    if size_bytes <= 0:
        raise ValueError("size_bytes must be positive")
    st = pyverbs_status()
    if not st["usable"]:
        return [{"api": "pyverbs", "device": "", "attempt": "host memory (MR)", "outcome": "not possible here",
                 "errno": 0, "detail": st["reason"]}]
    import pyverbs.enums as e
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD

    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    rows: list[PyverbsAttempt] = []
    for name in st["devices"]:
        try:
            with Context(name=name) as ctx, PD(ctx) as pd, MR(pd, size_bytes, access) as mr:
                outcome, code, detail = "registered", 0, f"lkey=0x{mr.lkey:x} rkey=0x{mr.rkey:x}, {size_bytes} bytes"
        except Exception as exc:  # PyverbsRDMAError carries the errno of the failing verb
            code = int(getattr(exc, "error_code", 0) or getattr(exc, "errno", 0) or 0)
            outcome, detail = "failed", f"{type(exc).__name__}: {exc}"
        rows.append({"api": "pyverbs", "device": name, "attempt": "host memory (MR)", "outcome": outcome,
                     "errno": code, "detail": detail})
    return rows
