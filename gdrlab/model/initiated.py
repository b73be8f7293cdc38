"""GPU-initiated networking: who posts a GPU's RDMA messages, a CPU proxy thread or the GPU itself.

A CUDA kernel that wants to put bytes into a remote GPU's memory can

* ``proxy``: write a request into a queue in host memory, where a CPU proxy thread polls for it,
  builds the work request and rings the NIC's doorbell (NVSHMEM's IBRC transport, NCCL GIN's
  Proxy backend, UCX's host-driven path), or
* ``gpu``: build the work request in GPU memory and ring the NIC's doorbell itself, an MMIO write
  from the GPU to the NIC's doorbell page (NVSHMEM's IBGDA, NCCL GIN's GDAKI backend from 2.28,
  UCX's GDAKI from 1.20). The NIC then reads the work request from GPU memory over PCIe.

Both need an RDMA NIC, and both move the payload by GPUDirect RDMA: only the control path differs.

Small-message latency (one-way, put of ``s`` bytes into remote GPU memory, seen at the target):

* proxy: ``gpu_enqueue_us`` (the GPU's write to host memory becomes visible) + half of
  ``proxy_poll_us`` (the thread is somewhere in its loop) + ``doorbell_us`` (the CPU's post, from
  the profile) + the put itself: ``nic_lat_us + gdr_extra_us`` + bytes over the route;
* gpu: ``gpu_post_us`` (one GPU thread writes the WQE: slower than a CPU thread, NVSHMEM's guide
  says so) + ``gpu_doorbell_us`` + one PCIe read round trip for the NIC to fetch the WQE from GPU
  memory (``gdr_extra_us``) + the same put.

Message rate (millions of messages per second, many messages in flight): the smallest of the
wire's rate over the message size, the NIC's message rate ``nic_mops``, and the posters' rate:
``proxy_threads / (proxy_msg_us)`` for a proxy (each message costs the thread a poll of the queue
entry and a post) and ``gpu_posters / gpu_post_us`` for the GPU (warps post in parallel, one QP
each). That is why GPU-initiated networking wins on rate for small messages and not on one
message's latency.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import provenance
from ..errors import InvalidArgument
from .core import as_sizes
from .profile import Profile, get_profile

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "INITIATED_PARAMS",
    "INITIATORS",
    "PUBLISHED",
    "initiated_latency_us",
    "initiated_params",
    "initiated_rate_mops",
    "predict_initiated",
]

INITIATORS = ("proxy", "gpu")


class InitParam(NamedTuple):
    unit: str
    value: float
    level: str
    source: str


INITIATED_PARAMS: dict[str, InitParam] = {
    "gpu_enqueue_us": InitParam("us", 1.0, "assumed",
                                "a GPU store to host memory crosses PCIe as a posted write, plus the fence "
                                "that orders it before the request's flag"),
    "proxy_poll_us": InitParam("us", 0.2, "assumed",
                               "one turn of the proxy's loop over its request queues (a busy-polling thread)"),
    "proxy_msg_us": InitParam("us", 0.25, "assumed",
                              "a proxy thread's time per message: read the request, build the WQE, post it "
                              "(the CPU's doorbell_us is part of it)"),
    "proxy_threads": InitParam("threads", 1.0, "assumed",
                               "one proxy thread per GPU process, the way NVSHMEM's IBRC transport runs its "
                               "proxy; a library may run more"),
    "gpu_post_us": InitParam("us", 1.0, "assumed",
                             "one GPU thread writing a WQE and updating the doorbell record; NVSHMEM's IBGDA "
                             "tuning guide: a GPU thread fills a WQE more slowly than a CPU thread, so one "
                             "message's latency is higher (docs.nvidia.com/nvshmem, best-practice guide, "
                             "'Tuning the queue-pair Type and Configuration for IBGDA')"),
    "gpu_doorbell_us": InitParam("us", 0.3, "assumed",
                                 "the GPU's MMIO write to the NIC's doorbell page, peer to peer over PCIe"),
    "gpu_posters": InitParam("warps", 64.0, "assumed",
                             "warps posting at once, each on its own QP (IBGDA's default QP mapping is per "
                             "warp or per CTA: NVSHMEM_IBGDA_NUM_DCI/NUM_RC_PER_PE)"),
    "nic_mops": InitParam("Mmsg/s", 200.0, "published",
                          "ConnectX-5: one message per 5 ns (Hoefler et al., 'sPIN: High-performance "
                          "streaming Processing in the Network', SC17 slides, slide 4); taken for later "
                          "NICs too (assumed)"),
}

#: Published figures the lab and docs show beside the model (not fitted: no parameter comes from them).
PUBLISHED = (
    {"figure": "up to 9.5x the throughput of the CPU proxy (IBRC) for block puts below 1 KiB",
     "what": "NVSHMEM IBGDA vs IBRC", "source": "Markthub et al., 'Improving Network Performance of HPC Systems "
     "Using NVIDIA Magnum IO NVSHMEM and GPUDirect Async', NVIDIA Technical Blog, 2022"},
    {"figure": "16.7 us round trip for small messages (GDAKI backend)", "what": "NCCL 2.28 GIN, H100 + InfiniBand",
     "source": "Hamidouche et al., 'GPU-Initiated Networking for NCCL', arXiv:2511.15076 (2025), abstract"},
    {"figure": "a GPU thread fills a WQE more slowly than a CPU thread: higher latency per message, higher "
               "message rate in parallel", "what": "NVSHMEM IBGDA transport",
     "source": "NVSHMEM best-practice guide, 'Tuning the queue-pair Type and Configuration for IBGDA'"},
)


def initiated_params(**overrides: Any) -> dict[str, float]:
    """The parameters' values, with ``overrides`` (names of :data:`INITIATED_PARAMS`) applied."""
    out = {k: v.value for k, v in INITIATED_PARAMS.items()}
    for key, value in overrides.items():
        if key not in INITIATED_PARAMS:
            raise InvalidArgument(f"unknown GPU-initiated parameter {key!r}; valid: {', '.join(INITIATED_PARAMS)}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise InvalidArgument(f"{key}: not a number: {value!r}") from None
        positive = key in ("proxy_msg_us", "gpu_post_us", "nic_mops", "proxy_threads", "gpu_posters")
        if not np.isfinite(v) or v < 0 or (positive and v <= 0):
            raise InvalidArgument(f"{key} must be {'positive' if positive else 'zero or more'}, got {value!r}")
        out[key] = v
    return out


def _need_nic(prof: Profile) -> None:
    if not prof.has_nic:
        raise InvalidArgument(f"profile {prof.name!r} has no RDMA NIC: GPU-initiated networking rings an RDMA NIC's "
                              f"doorbell, proxy or not (try --borrow-nic hopper-ndr)")


def _wire_gbps(prof: Profile) -> float:
    p = prof.params
    return min(p["nic_wire_gbps"] * p["wire_eff"], p["nic_pcie_gbps"] * p["pcie_eff"])


def _check(initiator: str) -> None:
    if initiator not in INITIATORS:
        raise InvalidArgument(f"unknown initiator {initiator!r}; valid: {', '.join(INITIATORS)}")


def latency_parts(profile: Profile | str, initiator: str, sizes: Any, **overrides: Any) -> dict[str, np.ndarray]:
    """Each part (us) of one put's one-way latency; the parts add up to it."""
    prof = get_profile(profile)
    _need_nic(prof)
    _check(initiator)
    p, g = prof.params, initiated_params(**overrides)
    s = as_sizes(sizes)
    put = {"NIC to NIC": p["nic_lat_us"] + 0 * s, "NIC reaches GPU memory": p["gdr_extra_us"] + 0 * s,
           "bytes on the wire": s / (_wire_gbps(prof) * 1e3)}
    if initiator == "proxy":
        return {"GPU writes the request to host memory": g["gpu_enqueue_us"] + 0 * s,
                "proxy notices it (half a poll)": g["proxy_poll_us"] / 2 + 0 * s,
                "CPU posts (doorbell)": p["doorbell_us"] + 0 * s, **put}
    return {"GPU thread writes the WQE": g["gpu_post_us"] + 0 * s,
            "GPU rings the doorbell": g["gpu_doorbell_us"] + 0 * s,
            "NIC fetches the WQE from GPU memory": p["gdr_extra_us"] + 0 * s, **put}


def initiated_latency_us(profile: Profile | str, initiator: str, sizes: Any, **overrides: Any) -> np.ndarray:
    parts = latency_parts(profile, initiator, sizes, **overrides)
    return np.sum(np.stack(list(parts.values())), axis=0)


def initiated_rate_mops(profile: Profile | str, initiator: str, sizes: Any,
                        **overrides: Any) -> tuple[np.ndarray, np.ndarray]:
    """(message rate in millions per second, the limit's name) at each size."""
    prof = get_profile(profile)
    _need_nic(prof)
    _check(initiator)
    g = initiated_params(**overrides)
    s = as_sizes(sizes)
    wire = _wire_gbps(prof) * 1e3 / s                       # messages per us = millions per second
    if initiator == "proxy":
        post = g["proxy_threads"] / g["proxy_msg_us"]
        poster = "proxy thread"
    else:
        post = g["gpu_posters"] / g["gpu_post_us"]
        poster = "GPU posting"
    mat = np.stack([wire, np.full_like(s, g["nic_mops"]), np.full_like(s, post)])
    names = np.asarray(["wire", "NIC message rate", poster], dtype=object)
    return mat.min(axis=0), names[mat.argmin(axis=0)]


def predict_initiated(profile: Profile | str = "hopper-ndr", sizes: Any = "8:1M", **overrides: Any) -> pd.DataFrame:
    """Rows (initiator, size, lat_us, mops, bw_gbps, limit, level) for the proxy and the GPU, with
    the modelled provenance (the profile, its level, every parameter with its level)."""
    import pandas as pd

    prof = get_profile(profile)
    s = as_sizes(sizes)
    frames = []
    for who in INITIATORS:
        lat = initiated_latency_us(prof, who, s, **overrides)
        rate, limit = initiated_rate_mops(prof, who, s, **overrides)
        frames.append(pd.DataFrame({"initiator": who, "size": s.astype(np.int64), "lat_us": lat, "mops": rate,
                                    "bw_gbps": rate * s / 1e3, "limit": limit, "level": prof.level}))
    df = pd.concat(frames, ignore_index=True)
    g = initiated_params(**overrides)
    prov = provenance.modelled(prof.name, prof.level, route="gpu-initiated", params=g,
                               param_levels={k: ("override" if k in overrides else v.level)
                                             for k, v in INITIATED_PARAMS.items()},
                               overrides={**dict(prof.overrides), **{k: float(v) for k, v in overrides.items()}})
    return provenance.attach(df, prov, column=False)
