"""Running an all-reduce through NCCL with one process per GPU, NCCL_DEBUG=INFO captured."""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import provenance
from .._engine import cuda_status, gpus, machine
from ..errors import GdrlabError, InvalidArgument, PeerTimeout, Unavailable
from ..units import parse_sizes
from .log import _generation, _gpu_path, explain, parse_log

__all__ = ["DISABLE_ENV", "COMPARE_CONFIGS", "DEFAULT_SIZES", "backend", "nccl_env", "run_allreduce", "compare"]

#: what ``--disable`` accepts, and the variable each one sets to 1
DISABLE_ENV = {"p2p": "NCCL_P2P_DISABLE", "shm": "NCCL_SHM_DISABLE", "ib": "NCCL_IB_DISABLE"}
#: the three generations of the story: peer DMA, host shared memory, the network stack
COMPARE_CONFIGS = (("default", ()), ("p2p_off", ("p2p",)), ("p2p_shm_off", ("p2p", "shm")))
DEFAULT_SIZES = "8,64K,1M,16M,256M"


def backend() -> str:
    """``"torch"`` or ``"cupy"``: what :func:`run_allreduce` will use. Raises Unavailable."""
    if importlib.util.find_spec("torch") is not None:
        return "torch"
    if importlib.util.find_spec("cupy") is not None:
        return "cupy"
    raise Unavailable("running NCCL needs PyTorch (pip install torch) or CuPy (pip install cupy-cuda12x); "
                      "neither is installed. Recorded logs still parse: gdrlab nccl recorded")


def nccl_env(disable: Iterable[str] = (), base: dict | None = None) -> dict:
    """The environment of an NCCL run: NCCL_DEBUG=INFO, NVLink multicast off, and each transport
    in ``disable`` (p2p, shm, ib) switched off."""
    env = dict(os.environ if base is None else base)
    for key in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_DEBUG_FILE"):
        env.pop(key, None)  # only the caller's choice counts; logs must reach our capture
    env["NCCL_DEBUG"] = "INFO"
    env["NCCL_NVLS_ENABLE"] = "0"
    for name in disable:
        if name not in DISABLE_ENV:
            raise InvalidArgument(f"cannot disable {name!r}; valid: {', '.join(DISABLE_ENV)}")
        env[DISABLE_ENV[name]] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_allreduce(sizes: str | int | Iterable[str | int] = DEFAULT_SIZES, disable: Iterable[str] = (), *, nranks: int | None = None,
                  iters: int | None = None, timeout_s: float = 300.0, use: str | None = None) -> dict:
    """All-reduce through NCCL with one process per GPU on this machine, ``NCCL_DEBUG=INFO``.

    Returns ``{"nranks", "backend", "disable", "env", "results", "parsed", "explain", "log",
    "provenance"}``; ``results`` rows have size, iters, time_us (slowest rank), algbw_gbps,
    busbw_gbps and verified. Raises :class:`Unavailable` with fewer than two GPUs or without
    PyTorch/CuPy, :class:`PeerTimeout` when the ranks do not finish within ``timeout_s``.
    """
    size_list = parse_sizes(sizes)
    disable = tuple(d.strip() for d in disable if d.strip())
    env = nccl_env(disable)
    n_gpus = len(gpus())
    if n_gpus < 2:
        st = cuda_status()
        raise Unavailable(f"an NCCL all-reduce between GPUs needs two or more GPUs; this machine has {n_gpus}"
                          + ("" if st["usable"] else f" ({st['reason']})")
                          + ". Recorded logs: gdrlab nccl recorded")
    nranks = n_gpus if nranks is None else nranks
    if not 2 <= nranks <= n_gpus:
        raise InvalidArgument(f"nranks must be between 2 and the {n_gpus} GPUs here, got {nranks}")
    if iters is not None and iters < 1:
        raise InvalidArgument("iters must be at least 1")
    use = use or backend()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="gdrlab-nccl-") as tmp:
        result_file = Path(tmp) / "results.json"
        procs, logs = [], []
        try:
            for rank in range(nranks):
                logs.append(open(Path(tmp) / f"rank{rank}.log", "w+"))
                cmd = [sys.executable, "-m", "gdrlab.nccl.worker",
                       "--rank", str(rank), "--nranks", str(nranks), "--port", str(port), "--backend", use,
                       "--sizes", ",".join(map(str, size_list)), "--iters", str(iters or 0),
                       "--result", str(result_file), "--rendezvous", tmp, "--timeout", str(timeout_s)]
                procs.append(subprocess.Popen(cmd, stdout=logs[-1], stderr=subprocess.STDOUT, env=env,
                                              stdin=subprocess.DEVNULL))
            deadline = time.monotonic() + timeout_s
            while any(p.poll() is None for p in procs):
                if time.monotonic() > deadline:
                    raise PeerTimeout(f"the NCCL ranks did not finish within {timeout_s:.0f} s")
                if any(p.poll() not in (None, 0) for p in procs):
                    time.sleep(2.0)  # let the other ranks notice and exit before they are stopped
                    break
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            texts = []
            for f in logs:
                f.seek(0)
                texts.append(f.read())
                f.close()
        log = "\n".join(texts)
        failed = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            tail = "\n".join(log.strip().splitlines()[-15:])
            raise GdrlabError(f"NCCL rank {failed[0][0]} exited with code {failed[0][1]}; end of the log:\n{tail}")
        results = json.loads(result_file.read_text())
    parsed = parse_log(log)
    return {"nranks": nranks, "backend": use, "disable": list(disable),
            "env": {k: env[k] for k in sorted(env) if k.startswith("NCCL_")}, "results": results,
            "parsed": parsed, "explain": explain(parsed), "log": log,
            "provenance": provenance.live({"what": "NCCL all-reduce, one process per GPU", "nccl": parsed["version"],
                                           "backend": use}, machine())}


def compare(sizes: str | int | Iterable[str | int] = DEFAULT_SIZES,
            configs: Iterable[tuple[str, Iterable[str]]] = COMPARE_CONFIGS, **kw: Any) -> dict:
    """:func:`run_allreduce` once per ``(name, disable)`` config; ``rows`` has one line per run
    (name, transport, time at the smallest size, bus bandwidth at the largest)."""
    runs, rows = {}, []
    for name, disable in configs:
        run = run_allreduce(sizes, disable, **kw)
        runs[name] = run
        res = run["results"]
        big, small = max(res, key=lambda r: r["size"]), min(res, key=lambda r: r["size"])
        transport = run["parsed"]["summary"]["transport"]
        rows.append({"name": name, "disable": ",".join(disable) or "-", "transport": transport,
                     "generation": _generation(transport, _gpu_path(run["parsed"])),
                     "time_size": small["size"], "time_us": small["time_us"],
                     "busbw_size": big["size"], "busbw_gbps": big["busbw_gbps"]})
    return {"rows": rows, "runs": runs}
