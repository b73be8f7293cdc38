"""The storage route: reading a file into GPU memory, four ways.

* ``gds``: GPUDirect Storage proper. The drive (or a storage NIC) DMAs the file's blocks straight
  into GPU memory through the GPU's BAR1 window, peer to peer. It needs the ``nvidia_fs`` kernel
  module (or the kernel's PCI P2PDMA), a filesystem GDS supports and an ``O_DIRECT`` file, so the
  page cache never holds the bytes. The peer write crosses whatever joins the drive and the GPU:
  one PCIe switch (full rate), the CPU's host bridge, or the inter-socket link, at the profile's
  ``p2p_write_gbps_*`` for that placement (the same physics as a NIC writing GPU memory).
* ``cufile-compat``: cuFile's compatibility mode. Same API, but cuFile reads the file with POSIX
  reads into a pinned host bounce buffer of ``bounce_bytes`` and copies each piece to the GPU,
  one piece after the other.
* ``read-pinned``: ``read()`` into pinned host memory, then one host-to-device copy.
* ``read-pageable``: ``read()`` into ordinary host memory, then a pageable copy (the driver stages
  it through its own pinned buffers: :func:`gdrlab.model.routes.copy_us`).

A ``read()`` either finds the bytes in the page cache (``page_cache=True``: a system call, then
the kernel copies them at ``pagecache_gbps``) or reads them from the drive (the drive's first
byte after ``drive_lat_us``, then the slower of the drive and the kernel's copy, which readahead
overlaps). GDS proper always reads from the drive.

The drive's parameters live here, not in the hardware profile: a drive (``DRIVES``) is combined
with any profile, whose GPU link, copy engine and peer-write rates the route reuses. Times are
microseconds, rates GB/s (bytes per ns), sizes bytes. Each read is timed alone (no reads in
flight at once), as ``bench/record_storage.py`` times them; ``bw_gbps`` is size over time.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import provenance
from ..errors import InvalidArgument
from . import routes as R
from .core import as_sizes
from .params import PLACEMENT_SUFFIX, PLACEMENTS
from .profile import Profile, get_profile

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DRIVES",
    "STEP_NOTE",
    "STORAGE_METHODS",
    "STORAGE_PARAMS",
    "drive",
    "drive_names",
    "explain_storage",
    "fit_drive",
    "predict_storage",
    "storage_route",
    "storage_us",
]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: The four ways, in the order tables show them.
STORAGE_METHODS = ("gds", "cufile-compat", "read-pinned", "read-pageable")


class StorageParam(NamedTuple):
    unit: str
    meaning: str


STORAGE_PARAMS: dict[str, StorageParam] = {
    "drive_read_gbps": StorageParam("GB/s", "the drive's sequential read rate"),
    "drive_lat_us": StorageParam("us", "time from a read's command to the drive's first byte (flash read)"),
    "drive_pcie_gbps": StorageParam("GB/s", "the drive's PCIe link, theoretical, per direction"),
    "pagecache_gbps": StorageParam("GB/s", "the kernel's copy from the page cache into the reader's buffer"),
    "read_syscall_us": StorageParam("us", "fixed cost of one read() whose bytes are in the page cache"),
    "bounce_bytes": StorageParam("bytes", "cuFile compat mode's bounce buffer (per_buffer_cache_size_kb)"),
    "gds_io_bytes": StorageParam("bytes", "GDS proper splits a read into pieces of this size (max_direct_io_size_kb)"),
    "gds_io_us": StorageParam("us", "nvidia-fs and cuFile cost per GDS piece"),
}

_GEN4_X4 = 16 * 4 * 128 / 130 / 8          # GB/s: 16 GT/s, 4 lanes, 128b/130b
_GEN5_X4 = 2 * _GEN4_X4

# name -> description, params {name: (value, level, source)}
DRIVES: dict[str, dict[str, Any]] = {
    "nvme-gen4": {
        "description": "a data-centre PCIe 4.0 x4 NVMe drive (e.g. Samsung PM1733), local, ext4 or xfs",
        "params": {
            "drive_read_gbps": (7.0, "published", ("Samsung PM1733 product brief: sequential read up to 7,000 MB/s "
                                                 "(a vendor's maximum, at high queue depth)")),
            "drive_lat_us": (80.0, "assumed", "a TLC NAND page read plus the NVMe command, one read in flight"),
            "drive_pcie_gbps": (round(_GEN4_X4, 4), "published", "PCIe 4.0 x4: 16 GT/s x 4 lanes x 128/130 / 8"),
            "pagecache_gbps": (4.78, "measured", ("H200 host (Sapphire Rapids VM): read() from the page cache at "
                                                "64 MiB-1 GiB, h200-storage-reads.csv (see h200-vda)")),
            "read_syscall_us": (2.58, "measured", ("H200 host: read() of 4 KiB from the page cache, "
                                                 "h200-storage-reads.csv (see h200-vda)")),
            "bounce_bytes": (float(MiB), "published", ("per_buffer_cache_size_kb: 1024 in the stock /etc/cufile.json "
                                                      "(cuFile 1.15)")),
            "gds_io_bytes": (16.0 * MiB, "published", ("max_direct_io_size_kb: 16384 in the stock /etc/cufile.json "
                                                      "(and cuFileDriverGetProperties on the H200)")),
            "gds_io_us": (5.0, "assumed", "nvidia-fs's per-IO work (page pinning, DMA mapping); no published figure held"),
        },
    },
    "nvme-gen5": {
        "description": "a PCIe 5.0 x4 NVMe drive (e.g. Micron 9550), local; costs as nvme-gen4",
        "params": {
            "drive_read_gbps": (14.0, "published", ("Micron 9550 product brief: sequential read up to 14,000 MB/s "
                                                  "(a vendor's maximum)")),
            "drive_pcie_gbps": (round(_GEN5_X4, 4), "published", "PCIe 5.0 x4: 32 GT/s x 4 lanes x 128/130 / 8"),
        },
        "base": "nvme-gen4",
    },
    "h200-vda": {
        "description": ("the H200 machine's virtual disk (/dev/vda, ext4, a KVM guest's virtio block device), "
                        "fitted to h200-storage-reads.csv; no nvidia_fs, so GDS proper is a what-if there"),
        "params": {
            # fit_drive(recording) reproduces these (tests/model/test_model_storage.py)
            "drive_read_gbps": (1.88, "fitted", ("h200-storage-reads.csv: disk/cold read part at 256 MiB and 1 GiB, "
                                                "both host methods (fit_drive)")),
            "drive_lat_us": (54.3, "fitted", ("h200-storage-reads.csv: disk/cold read part at 4 KiB, both host "
                                             "methods (fit_drive)")),
            "drive_pcie_gbps": (round(_GEN4_X4, 4), "assumed", ("a virtio disk has no PCIe link of its own; "
                                                               "the host's drive taken as PCIe 4.0 x4")),
            "pagecache_gbps": (4.78, "fitted", ("h200-storage-reads.csv: tmpfs and disk/warm read part at "
                                               "64 MiB-1 GiB, both host methods (fit_drive)")),
            "read_syscall_us": (2.58, "fitted", ("h200-storage-reads.csv: tmpfs and disk/warm read part at 4 KiB "
                                               "(fit_drive)")),
        },
        "base": "nvme-gen4",
    },
}

#: Why a compat-mode curve has steps (printed beside its rows).
STEP_NOTE = ("cuFile compat mode reads in pieces of the bounce buffer: its time steps up by one read's fixed "
             "cost (and a copy launch) at every multiple of bounce_bytes; a feature of the mode, not rounding")


def drive_names() -> list[str]:
    return list(DRIVES)


def drive(name: str = "nvme-gen4") -> dict[str, tuple[float, str, str]]:
    """A drive's parameters: ``{name: (value, level, source)}`` (levels: published, measured,
    fitted, assumed), its base's values filling what it does not set."""
    if name not in DRIVES:
        raise InvalidArgument(f"unknown drive {name!r}; valid: {', '.join(DRIVES)}")
    doc = DRIVES[name]
    out = dict(drive(doc["base"])) if doc.get("base") else {}
    out.update(doc["params"])
    missing = [k for k in STORAGE_PARAMS if k not in out]
    if missing:  # pragma: no cover - a table error, caught by the tests
        raise InvalidArgument(f"drive {name!r} lacks {', '.join(missing)}")
    return out


def _storage_values(name: str, overrides: dict[str, Any]) -> dict[str, float]:
    q = {k: float(v[0]) for k, v in drive(name).items()}
    for key, value in overrides.items():
        if key not in STORAGE_PARAMS:
            raise InvalidArgument(f"unknown storage parameter {key!r}; valid: {', '.join(STORAGE_PARAMS)}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise InvalidArgument(f"{key}: not a number: {value!r}") from None
        kind = STORAGE_PARAMS[key].unit
        if not math.isfinite(v) or v < 0 or (kind in ("GB/s", "bytes") and v <= 0):
            raise InvalidArgument(f"{key} must be {'positive' if kind in ('GB/s', 'bytes') else 'zero or more'}, "
                                  f"got {value!r}")
        q[key] = v
    return q


def storage_route(profile: Profile | str, method: str, placement: str | None = None, *, drive_name: str = "nvme-gen4",
                  **storage_overrides: Any) -> dict[str, float]:
    """Every link the file's bytes cross on ``method``'s route, with its usable rate in GB/s.
    ``placement``: where the drive sits relative to the GPU (default: same-switch)."""
    prof = get_profile(profile)
    p = prof.params
    q = _storage_values(drive_name, storage_overrides)
    where = _placement(placement)
    links = {"drive": q["drive_read_gbps"], "drive-pcie": q["drive_pcie_gbps"] * p["pcie_eff"]}
    _check_method(method)
    if method == "gds":
        links["peer-write"] = p[f"p2p_write_gbps_{PLACEMENT_SUFFIX[where]}"]
        links["gpu-pcie"] = p["gpu_pcie_gbps"] * p["pcie_eff"]
        if where == "cross-socket":
            links["socket-link"] = p["xsocket_gbps"]
        return links
    links["page-cache-copy"] = q["pagecache_gbps"]
    links["copy-h2d"] = R.ce_rate_gbps(p, "h2d")
    if method == "read-pageable":
        links["copy-h2d"] = min(p["pageable_h2d_gbps"], links["copy-h2d"])
    return links


def _placement(placement: str | None) -> str:
    where = placement or "same-switch"
    if where not in PLACEMENTS:
        raise InvalidArgument(f"unknown drive placement {where!r}; valid: {', '.join(PLACEMENTS)}")
    return where


def _check_method(method: str) -> None:
    if method not in STORAGE_METHODS:
        raise InvalidArgument(f"unknown storage method {method!r}; valid: {', '.join(STORAGE_METHODS)}")


def _read(q: dict[str, float], s: Any, page_cache: bool, drive_rate: float) -> tuple[Any, Any]:
    """(fixed part, byte part) of one read() of ``s`` bytes into host memory."""
    if page_cache:
        return q["read_syscall_us"] + 0 * s, s / (q["pagecache_gbps"] * 1e3)
    # from the drive: readahead overlaps the drive's DMA into the page cache with the kernel's copy out
    return q["drive_lat_us"] + 0 * s, s / (min(drive_rate, q["pagecache_gbps"]) * 1e3)


def storage_parts(profile: Profile | str, method: str, sizes: Any, *, page_cache: bool = False,
                  placement: str | None = None, drive_name: str = "nvme-gen4",
                  **storage_overrides: Any) -> dict[str, np.ndarray]:
    """The time (us) of each part of ``method`` at each size: the parts add up to its latency."""
    prof = get_profile(profile)
    p = prof.params
    q = _storage_values(drive_name, storage_overrides)
    s = as_sizes(sizes)
    links = storage_route(prof, method, placement, drive_name=drive_name, **storage_overrides)
    drive_rate = min(links["drive"], links["drive-pcie"])
    if method == "gds":
        rate = min(links.values())
        n_io = np.ceil(s / q["gds_io_bytes"])
        return {"drive latency": q["drive_lat_us"] + 0 * s, "gds per-piece cost": n_io * q["gds_io_us"],
                "bytes (peer DMA)": s / (rate * 1e3)}
    if method == "cufile-compat":
        b = q["bounce_bytes"]
        n = np.ceil(s / b)
        last = s - (n - 1) * b
        rf, rb = _read(q, b, page_cache, drive_rate)
        lf, lb = _read(q, last, page_cache, drive_rate)
        copy_full = R.copy_us(p, "h2d", np.asarray([b]))[0]
        copy_last = R.copy_us(p, "h2d", last)
        return {"read fixed costs": (n - 1) * rf + lf, "read bytes": (n - 1) * rb + lb,
                "copies to the GPU": (n - 1) * copy_full + copy_last}
    fixed, byte = _read(q, s, page_cache, drive_rate)
    memory = "pinned" if method == "read-pinned" else "pageable"
    return {"read fixed cost": fixed, "read bytes": byte, f"{memory} copy to the GPU": R.copy_us(p, "h2d", s, memory)}


def storage_us(profile: Profile | str, method: str, sizes: Any, **kw: Any) -> np.ndarray:
    """Modelled time (us) to read ``sizes`` bytes of a file into GPU memory by ``method``."""
    _check_method(method)
    parts = storage_parts(profile, method, sizes, **kw)
    return np.sum(np.stack(list(parts.values())), axis=0)


def predict_storage(profile: Profile | str = "h200-lab", sizes: Any = "4K:1G", methods: Any = None, *,
                    page_cache: bool = False, placement: str | None = None, drive_name: str = "nvme-gen4",
                    **storage_overrides: Any) -> pd.DataFrame:
    """Rows (method, size, lat_us, bw_gbps, bottleneck, level) for each method and size, with the
    modelled provenance (profile, its level, the drive, every storage parameter and its level)."""
    import pandas as pd

    prof = get_profile(profile)
    todo = list(methods) if methods else list(STORAGE_METHODS)
    for m in todo:
        _check_method(m)
    s = as_sizes(sizes)
    frames = []
    for m in todo:
        parts = storage_parts(prof, m, s, page_cache=page_cache, placement=placement, drive_name=drive_name,
                              **storage_overrides)
        names = list(parts)
        mat = np.stack([np.broadcast_to(parts[k], s.shape) for k in names])
        lat = mat.sum(axis=0)
        neck = np.asarray(names, dtype=object)[mat.argmax(axis=0)]
        frames.append(pd.DataFrame({"method": m, "size": s.astype(np.int64), "lat_us": lat,
                                    "bw_gbps": s / (lat * 1e3), "bottleneck": neck, "level": prof.level}))
    df = pd.concat(frames, ignore_index=True)
    q = _storage_values(drive_name, storage_overrides)
    levels = {k: ("override" if k in storage_overrides else drive(drive_name)[k][1]) for k in STORAGE_PARAMS}
    prov = provenance.modelled(prof.name, prof.level, route="storage", drive=drive_name,
                               drive_placement=_placement(placement), page_cache="hit" if page_cache else "miss",
                               storage_params={k: q[k] for k in STORAGE_PARAMS}, storage_levels=levels,
                               overrides={**dict(prof.overrides), **{k: float(v) for k, v in storage_overrides.items()}})
    return provenance.attach(df, prov, column=False)


def explain_storage(profile: Profile | str, method: str, size: float, **kw: Any) -> dict[str, Any]:
    """Why ``method`` takes what it takes at ``size``: the route's links and rates, the slowest
    link, each part of the time, and the parameters with their level and source."""
    prof = get_profile(profile)
    drive_name = kw.get("drive_name", "nvme-gen4")
    over = {k: v for k, v in kw.items() if k in STORAGE_PARAMS}
    links = storage_route(prof, method, kw.get("placement"), drive_name=drive_name, **over)
    parts = storage_parts(prof, method, [size], **kw)
    parts1 = {k: float(np.asarray(v).ravel()[0]) for k, v in parts.items()}
    total = sum(parts1.values())
    d = drive(drive_name)
    return {"method": method, "size": int(size), "profile": prof.name, "level": prof.level,
            "drive": drive_name, "links_gbps": links, "slowest_link": min(links, key=lambda k: links[k]),
            "parts_us": parts1, "lat_us": total, "bw_gbps": size / (total * 1e3),
            "params": {k: {"value": _storage_values(drive_name, over)[k], "unit": STORAGE_PARAMS[k].unit,
                           "level": "override" if k in over else d[k][1],
                           "source": "override" if k in over else d[k][2]} for k in STORAGE_PARAMS}}


# ----------------------------------------------------------------------------- fitting to a recording
def fit_drive(rows: pd.DataFrame) -> dict[str, float]:
    """The drive and page-cache parameters a recording of ``bench/record_storage.py`` pins down,
    from the read part of the two host methods (``read_p50_us``), medians over both methods:

    * ``read_syscall_us``: page-cache reads (tmpfs, disk/warm) at the smallest size;
    * ``pagecache_gbps``: page-cache reads at 64 MiB and up, size over time;
    * ``drive_lat_us``: cold disk reads at the smallest size;
    * ``drive_read_gbps``: cold disk reads at 256 MiB and up, bytes over (time - drive_lat_us)."""
    df = rows[rows["method"].isin(["pinned_read_copy", "pageable_read_copy"])].copy()
    if df.empty:
        raise InvalidArgument("no read() rows (pinned_read_copy, pageable_read_copy) to fit")
    df["read_p50_us"] = df["read_p50_us"].astype(float)
    hot = df[(df["cache"] == "memory") | (df["cache"] == "warm")]
    cold = df[df["cache"] == "cold"]
    if hot.empty or cold.empty:
        raise InvalidArgument("the recording needs page-cache rows (tmpfs or warm) and cold rows to fit a drive")
    smallest = hot[hot["size"] == hot["size"].min()]
    big = hot[hot["size"] >= 64 * MiB]
    lat = float(np.median(cold[cold["size"] == cold["size"].min()]["read_p50_us"]))
    cold_big = cold[cold["size"] >= 256 * MiB]
    if big.empty or cold_big.empty:
        raise InvalidArgument("the recording needs reads of 64 MiB and up (page cache) and 256 MiB and up (cold)")
    return {"read_syscall_us": float(np.median(smallest["read_p50_us"])),
            "pagecache_gbps": float(np.median(big["size"] / (big["read_p50_us"] * 1e3))),
            "drive_lat_us": lat,
            "drive_read_gbps": float(np.median(cold_big["size"] / ((cold_big["read_p50_us"] - lat) * 1e3)))}
