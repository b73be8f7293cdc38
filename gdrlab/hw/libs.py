"""Which shared libraries the paths need are present, with versions: probed in a child process.

The probe ``dlopen``\\ s each library in a separate Python process, so a library that misbehaves
when loaded (or a driver that hangs) cannot hurt the caller, and ``import gdrlab`` loads nothing.
"""
from __future__ import annotations

import json
import subprocess
import sys

__all__ = ["LIBRARIES", "probe_libraries"]

LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1", "libibverbs.so.1", "libgdrapi.so.2")

_PROBE = r'''
import ctypes, json, os, re, sys

def loaded_path(stem):
    # the file the dynamic loader picked, from our own memory map
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if os.path.basename(p).startswith(stem):
                    return p
    except OSError:
        pass
    return None

def version_from_path(path, stem):
    m = re.search(re.escape(stem) + r"\.so\.([0-9.]+)$", os.path.basename(path or ""))
    return m.group(1) if m else None

out = {}
for name in sys.argv[1:]:
    r = {"found": False, "path": None, "version": None, "reason": ""}
    try:
        lib = ctypes.CDLL(name)
    except OSError as exc:
        r["reason"] = str(exc)
        out[name] = r
        continue
    stem = name.split(".so")[0]
    r["found"] = True
    r["path"] = loaded_path(stem)
    try:
        if name == "libcuda.so.1":
            v = ctypes.c_int(0)
            rc = lib.cuDriverGetVersion(ctypes.byref(v))
            if rc == 0:
                r["version"] = f"{v.value // 1000}.{(v.value % 1000) // 10} (CUDA driver API)"
        elif name == "libnvidia-ml.so.1":
            init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
            if init() == 0:
                buf = ctypes.create_string_buffer(96)
                if lib.nvmlSystemGetDriverVersion(buf, 96) == 0:
                    r["version"] = "driver " + buf.value.decode()
                lib.nvmlShutdown()
            else:
                r["reason"] = "loaded, but nvmlInit failed (no NVIDIA driver loaded?)"
        elif name == "libibverbs.so.1":
            r["version"] = version_from_path(os.path.realpath(r["path"]) if r["path"] else None, "libibverbs")
            r["has_ibv_reg_dmabuf_mr"] = hasattr(lib, "ibv_reg_dmabuf_mr")
        elif name == "libgdrapi.so.2":
            if hasattr(lib, "gdr_runtime_get_version"):
                a, b = ctypes.c_int(0), ctypes.c_int(0)
                lib.gdr_runtime_get_version(ctypes.byref(a), ctypes.byref(b))
                r["version"] = f"{a.value}.{b.value}"
            else:
                r["version"] = version_from_path(os.path.realpath(r["path"]) if r["path"] else None, "libgdrapi")
    except Exception as exc:
        r["reason"] = f"loaded, version query failed: {exc}"
    out[name] = r
print(json.dumps(out))
'''


def probe_libraries(names: tuple[str, ...] = LIBRARIES, timeout_s: float = 30.0) -> dict[str, dict]:
    """``{library: {found, path, version, reason}}`` for each library, probed in a subprocess."""
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, *names], capture_output=True,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {n: {"found": False, "path": None, "version": None,
                    "reason": f"library probe timed out after {timeout_s:.0f} s"} for n in names}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return {n: {"found": False, "path": None, "version": None,
                    "reason": f"library probe failed: {why}"} for n in names}
