"""The verbs wire: the transfer paths over an RC queue pair (RDMA WRITE WITH IMM).

The session starts over tcp (the out-of-band channel that exchanges queue-pair numbers, GIDs and
keys), then every test runs over the queue pair. Which HCA each side uses comes from
``GDRLAB_IB_DEV`` (``mlx5_0`` or ``mlx5_0:1``; unset, the ACTIVE HCA nearest the GPU among those
``GDRLAB_IB_HCA`` or ``NCCL_IB_HCA`` allows), the RoCE GID (``GDRLAB_IB_GID_INDEX``, else chosen
under ``*_IB_ROCE_VERSION_NUM``, ``*_IB_ADDR_FAMILY`` and ``*_IB_ADDR_RANGE``, GDRLAB_ or NCCL_),
``GDRLAB_GDR_REG`` (``auto``, ``dmabuf``, ``peermem``) and ``GDRLAB_GDR_FLUSH_DISABLE`` (or
``NCCL_GDR_FLUSH_DISABLE``), read by each process; the traffic class,
service level and partition from ``GDRLAB_IB_TC``, ``GDRLAB_IB_SL`` and ``GDRLAB_IB_PKEY_INDEX``
(or NCCL's ``NCCL_IB_TC``, ``NCCL_IB_SL``, ``NCCL_IB_PKEY``), which :func:`apply_link_options` sets
for this process and the local peers it starts.
"""
from __future__ import annotations

import os
from typing import Any

from ..errors import GdrlabError, InvalidArgument, Unavailable
from ..vocab import DEFAULT_CHUNK_BYTES, DEFAULT_PIPELINE_DEPTH
from .buffers import Buffer, cuda_status, native
from .tcp_wire import Connection

__all__ = ["VerbsConnection", "require_verbs", "provenance_of_info", "apply_link_options", "link_options"]

# flag -> (environment variable the engine reads, NCCL's name, largest value)
_LINK_OPTIONS = {"--tclass": ("GDRLAB_IB_TC", "NCCL_IB_TC", 255), "--sl": ("GDRLAB_IB_SL", "NCCL_IB_SL", 15),
                 "--pkey-index": ("GDRLAB_IB_PKEY_INDEX", "NCCL_IB_PKEY", 65535)}


def apply_link_options(tclass: int | None = None, sl: int | None = None, pkey_index: int | None = None) -> None:
    """Sets the queue pair's GRH traffic class, service level and P_Key index for the verbs wire
    in this process (and local peers started from it); ``None`` leaves the environment as is.
    Raises InvalidArgument naming the flag for a value out of range."""
    for flag, value in (("--tclass", tclass), ("--sl", sl), ("--pkey-index", pkey_index)):
        if value is None:
            continue
        var, _, top = _LINK_OPTIONS[flag]
        if not 0 <= value <= top:
            raise InvalidArgument(f"{flag} {value}: must be 0..{top}")
        os.environ[var] = str(value)


def link_options() -> dict[str, int | str]:
    """This side's traffic class, service level and P_Key index as the engine will read them (a
    value the engine would refuse is returned as written)."""
    out: dict[str, int | str] = {}
    for flag, (var, nccl, _) in _LINK_OPTIONS.items():
        raw = os.environ.get(var) or os.environ.get(nccl) or "0"
        out[flag.lstrip("-").replace("-", "_")] = int(raw) if raw.isdigit() else raw
    return out


class VerbsConnection(Connection):
    """A tcp session with ``gdrlab serve`` whose tests run over a queue pair."""

    wire = "verbs"

    @staticmethod
    def _client_class() -> Any:
        return native().verbs.Client

    # returns the wire's info too, hence a wider tuple than Connection.run
    def run(self, path: str, size: int, *, mode: str = "lat",  # type: ignore[override]
            iters: int = 100, warmup: int = 10, window: int = 1, chunk: int = DEFAULT_CHUNK_BYTES,
            depth: int = DEFAULT_PIPELINE_DEPTH, device: int = 0, seed: int | None = None, buffer: Buffer | None = None,
            offset: int = 0) -> tuple[Any, float, bool, dict[str, Any]]:
        """One test: ``(samples_s, bytes_per_sample, verified, info)``; ``info`` names the HCA,
        port, link layer, GID index, path MTU and both sides' registration mechanisms."""
        return self.measure(path, size, mode=mode, iters=iters, warmup=warmup, window=window, chunk=chunk,
                            depth=depth, device=device, seed=seed, buffer=buffer, offset=offset)


def require_verbs(path: str) -> None:
    """Unavailable, saying why, unless an RDMA device (and a GPU for a GPU path) is here."""
    st = native().verbs.status()
    if not st["devices"]:
        raise Unavailable(f"the verbs wire needs an RDMA device: {st['reason']}")
    try:
        devs = list(native().verbs.devices())
    except GdrlabError:  # a device that cannot be opened says so when the test opens it
        devs = []
    if devs and all(d.get("rc_unsupported") for d in devs):  # EFA, iWARP: no RC with immediate data
        raise Unavailable("; ".join(d["rc_unsupported"] for d in devs))
    if path != "host":
        cs = cuda_status()
        if not cs["usable"]:
            raise Unavailable(f"path {path!r} needs a GPU: {cs['reason']}")


def provenance_of_info(info: dict[str, Any]) -> dict[str, Any]:
    """The provenance keys a verbs run adds: HCA, port, link layer, GID index, path MTU, how
    each side registered its memory (host, dmabuf or peermem), this side's traffic class, service
    level and P_Key index, the server's class and level, the PCIe hops between the HCA and the GPU it was chosen for (-1:
    named by GDRLAB_IB_DEV, or no GPU), and for bandwidth the windows streamed before the first ACK."""
    return {"hca": info.get("device"), "hca_port": info.get("port"), "link_layer": info.get("link_layer"),
            "gid_index": info.get("gid_index"), "path_mtu_bytes": info.get("path_mtu_bytes"),
            "registration": info.get("mechanism"), "peer_registration": info.get("peer_mechanism"),
            "ib_link_options": {**link_options(), **({"tclass": info["traffic_class"], "sl": info["service_level"]}
                                                     if "traffic_class" in info else {})},
            # the server adopts the client's class and level unless its own variables name them
            "peer_ib_link_options": ({"tclass": info["peer_traffic_class"], "sl": info["peer_service_level"]}
                                     if "peer_traffic_class" in info else None),
            "hca_gpu_pci_hops": info.get("gpu_pci_hops"),
            # bandwidth rows: windows streamed before the first ACK (1 would be a drain per window)
            "bw_windows_in_flight": info.get("bw_windows_in_flight")}
