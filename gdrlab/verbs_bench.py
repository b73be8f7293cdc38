"""``gdrlab bench --wire verbs``: the transfer paths over an RC queue pair (RDMA WRITE WITH IMM).

Same loops, same summaries and the same DataFrame columns as the tcp wire (``engine.bench``), so
staged, shared, pipelined and gdr are compared on one NIC, like for like. Which HCA each side
uses comes from ``GDRLAB_IB_DEV`` (``mlx5_0`` or ``mlx5_0:1``), ``GDRLAB_IB_GID_INDEX`` (RoCE) and
``GDRLAB_GDR_REG`` (``auto``, ``dmabuf``, ``peermem``), read by each process.
"""
from __future__ import annotations

import contextlib
import os
import secrets
from typing import Any

import numpy as np

from .engine import (LocalPeer, ProgressFn, _auto_counts, result_columns, _parse_peer, _provenance, cuda_status, native,
                     summarize)
from .errors import InvalidArgument, Unavailable
from .units import parse_sizes

__all__ = ["VERBS_PATHS", "bench_verbs", "VerbsConnection"]

VERBS_PATHS = ("host", "staged", "shared", "pipelined", "gdr")
_MODES = {"lat": 0, "bw": 1, "verify": 2}
_MAX_MESSAGE = 1 << 30


class VerbsConnection:
    """A tcp session with ``gdrlab serve`` whose tests run over a queue pair."""

    def __init__(self, host: str, port: int, token: str = "", timeout_s: float = 10.0):
        if timeout_s <= 0:
            raise InvalidArgument("timeout_s must be positive")
        self._c = native().verbs.Client(host, int(port), token or "", int(timeout_s * 1000))
        self.peer = f"{host}:{port}"

    @property
    def server_description(self) -> str:
        return self._c.server_description

    def run(self, path: str, size: int, *, mode: str = "lat", iters: int = 100, warmup: int = 10, window: int = 1,
            chunk: int = 256 * 1024, depth: int = 4, device: int = 0, seed: int | None = None, buffer=None,
            offset: int = 0):
        """One test: ``(samples_s, bytes_per_sample, verified, info)``; ``info`` names the HCA,
        port, link layer, GID index, path MTU and both sides' registration mechanisms."""
        if mode not in _MODES:
            raise InvalidArgument(f"unknown mode {mode!r}; valid: {', '.join(_MODES)}")
        if path not in VERBS_PATHS:
            raise InvalidArgument(f"unknown path {path!r} for the verbs wire; valid: {', '.join(VERBS_PATHS)}")
        if seed is None:
            seed = secrets.randbits(63)
        nb = buffer._b if buffer is not None else None
        s, nbytes, ok, info = self._c.run(path, _MODES[mode], int(size), int(iters), int(warmup), int(window),
                                          int(chunk), int(depth), int(device), int(seed), nb, int(offset))
        return s, nbytes, ok, dict(info)

    def close(self) -> None:
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _require_verbs(path: str) -> None:
    st = native().verbs.status()
    if not st["devices"]:
        raise Unavailable(f"the verbs wire needs an RDMA device: {st['reason']}")
    if path != "host":
        cs = cuda_status()
        if not cs["usable"]:
            raise Unavailable(f"path {path!r} needs a GPU: {cs['reason']}")


def bench_verbs(path: str = "gdr", sizes: Any = "8:1M", iters: int | None = None, mode: str = "both",
                peer: str | None = None, token: str | None = None, chunk: int = 256 * 1024, depth: int = 4,
                device: int = 0, timeout_s: float = 10.0, progress: ProgressFn | None = None):
    """Measure ``path`` over the verbs wire at each size; columns as :func:`gdrlab.engine.bench`.

    ``attrs["provenance"]`` adds the HCA, port, link layer, GID index, path MTU and how each side
    registered its memory (``registration``/``peer_registration``: host, dmabuf or peermem).
    Raises Unavailable, before starting anything, on a machine with no RDMA device.
    """
    import pandas as pd

    if path not in VERBS_PATHS:
        raise InvalidArgument(f"unknown path {path!r} for the verbs wire; valid: {', '.join(VERBS_PATHS)}")
    if mode not in ("lat", "bw", "both"):
        raise InvalidArgument(f"unknown mode {mode!r}; valid: lat, bw, both")
    size_list = parse_sizes(sizes)
    for s in size_list:
        if s > _MAX_MESSAGE:
            raise InvalidArgument(f"size {s} exceeds the verbs wire's largest message of {_MAX_MESSAGE} bytes (1 GiB)")
    if iters is not None and iters < 1:
        raise InvalidArgument("iters must be at least 1")
    _require_verbs(path)

    info: dict = {}
    with contextlib.ExitStack() as stack:
        if peer is None:
            local = stack.enter_context(LocalPeer(device=device, timeout_s=timeout_s))
            conn = stack.enter_context(VerbsConnection("127.0.0.1", local.port, local.token, timeout_s))
        else:
            host, port = _parse_peer(peer)
            tok = token if token is not None else os.environ.get("GDRLAB_TOKEN", "")
            conn = stack.enter_context(VerbsConnection(host, port, tok, timeout_s))
        rows = []
        for i, size in enumerate(size_list):
            lat_iters, window, reps = _auto_counts(size)
            n_lat = iters or lat_iters
            n_bw = iters or reps
            wu = max(2, min(n_lat // 10, 50))
            row = {"path": path, "wire": "verbs", "size": size, "iters": n_lat}
            verified = True
            lat = bw = None
            if mode in ("lat", "both"):
                s, nbytes, ok, info = conn.run(path, size, mode="lat", iters=n_lat, warmup=wu, chunk=chunk,
                                               depth=depth, device=device)
                lat = summarize(s, nbytes)
                verified &= bool(ok)
            if mode in ("bw", "both"):
                s, nbytes, ok, info = conn.run(path, size, mode="bw", iters=n_bw, warmup=max(1, n_bw // 10),
                                               window=window, chunk=chunk, depth=depth, device=device)
                bw = summarize(s, nbytes)
                verified &= bool(ok)
                if mode == "bw":
                    row["iters"] = n_bw
            row.update(result_columns(lat, bw, verified, path, chunk, depth))
            rows.append(row)
            if progress is not None:
                progress(i + 1, len(size_list), row)
        description = conn.server_description
    df = pd.DataFrame(rows)
    df.attrs["provenance"] = _provenance({
        "what": f"gdrlab bench --path {path} --wire verbs", "peer": peer or "local process",
        "peer_description": description, "hca": info.get("device"), "hca_port": info.get("port"),
        "link_layer": info.get("link_layer"), "gid_index": info.get("gid_index"),
        "path_mtu_bytes": info.get("path_mtu_bytes"), "registration": info.get("mechanism"),
        "peer_registration": info.get("peer_mechanism"),
    })
    return df
