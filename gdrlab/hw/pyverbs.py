"""Whether rdma-core's Python binding, pyverbs, is usable here, and exactly why not.

pyverbs is built with rdma-core and must match the installed ``libibverbs`` (it uses its private
symbols). Debian and Ubuntu ship it as ``python3-pyverbs`` for the system Python, in
``/usr/lib/python3/dist-packages``; a virtual environment sees it only when created with
``--system-site-packages`` and with the same Python version.
"""
from __future__ import annotations

from typing import Any

import glob
import importlib
import sys
import sysconfig
from pathlib import Path

__all__ = ["DEBIAN_DIST_PACKAGES", "pyverbs_status"]

DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"


def _system_copy(dist_packages: str) -> tuple[str | None, list[str]]:
    """The system pyverbs directory if there is one, and the Python ABI tags its modules were built for."""
    d = Path(dist_packages) / "pyverbs"
    if not d.is_dir():
        return None, []
    tags = sorted({p.name.split(".")[1] for p in d.glob("*.so") if p.name.count(".") >= 2})
    return str(d), tags


def _why_not_importable(exc: BaseException, dist_packages: str) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if "IBVERBS_PRIVATE" in text:
        return (f"pyverbs was built for a different rdma-core than this machine's libibverbs ({text}); "
                "use the distribution's python3-pyverbs, built with the installed rdma-core")
    if "libibverbs" in text or "librdmacm" in text:
        return f"pyverbs is installed but its libraries are missing ({text}): install rdma-core (libibverbs1, librdmacm1)"
    if not isinstance(exc, ModuleNotFoundError):
        return f"pyverbs failed to import ({text})"
    system, tags = _system_copy(dist_packages)
    if system is None:
        return ("pyverbs is not installed: on Debian/Ubuntu `apt install python3-pyverbs` (for the system "
                "Python; a venv sees it when created with --system-site-packages)")
    here = sysconfig.get_config_var("SOABI") or ""
    if tags and here and here not in tags:
        return (f"python3-pyverbs in {system} was built for {', '.join(tags)}, and this interpreter is {here}: "
                "use the system Python, or a venv of that version made with --system-site-packages")
    return (f"python3-pyverbs is installed in {system}, but this interpreter ({sys.executable}) does not see "
            "the system site-packages: recreate the venv with --system-site-packages")


def pyverbs_status(dist_packages: str = DEBIAN_DIST_PACKAGES) -> dict:
    """Whether pyverbs imports and can list RDMA devices; never raises.

    Returns
    -------
    dict
        ``importable`` (bool), ``usable`` (bool: imports *and* sees at least one RDMA device),
        ``version`` (str or None), ``devices`` (names pyverbs lists) and ``reason`` (one sentence:
        what works, or exactly what is missing and how to fix it).
    """
    out: dict[str, Any] = {"importable": False, "usable": False, "version": None, "devices": [], "reason": ""}
    try:
        pyverbs = importlib.import_module("pyverbs")
        device = importlib.import_module("pyverbs.device")
    except Exception as exc:  # ImportError, or pyverbs' own errors raised at import
        out["reason"] = _why_not_importable(exc, dist_packages)
        return out
    out["importable"] = True
    out["version"] = getattr(pyverbs, "__version__", None)
    no_device = ("pyverbs imports but there is no RDMA device: add a Soft-RoCE one with "
                 "`rdma link add rxe0 type rxe netdev IFACE`"
                 + (" (rdma_rxe is loaded)" if glob.glob("/sys/module/rdma_rxe") else " after `modprobe rdma_rxe`"))
    try:
        names = [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in device.get_device_list()]
    except Exception as exc:  # PyverbsRDMAError: libibverbs fails to list when the class is empty
        out["reason"] = (no_device if not glob.glob("/sys/class/infiniband/*") else
                         f"pyverbs imports but cannot list RDMA devices ({type(exc).__name__}: {exc})")
        return out
    out["devices"] = names
    if not names:
        out["reason"] = no_device
        return out
    out["usable"] = True
    out["reason"] = f"pyverbs {out['version'] or '(version unknown)'} sees {', '.join(names)}"
    return out
