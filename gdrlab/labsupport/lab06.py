"""Lab 06, GPUDirect's siblings: GPUDirect Storage (cuFile) and GPU-initiated networking.

Storage: this machine's cuFile status (:mod:`gdrlab.hw.storage`), a live read of a file into GPU
memory three ways where a GPU and libcufile exist, the recorded runs of ``bench/record_storage.py``
where they ship (``gdrlab/data/recorded/*-storage-*.csv`` with their JSON sidecar), and a model of
the three ways plus GDS proper. GPU-initiated networking: a model of the message rate with and
without a CPU proxy thread. Every table carries its provenance.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import provenance
from ..hw import storage
from ..recorded import data_dir, load
from . import SIZE_TICKS, lab05

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

__all__ = ["METHOD_NAMES", "NO_RECORDING", "gpu_nvme_pairs", "live_storage", "proxy_figure", "proxy_model",
           "recorded_mode_note", "recorded_storage", "storage_figure", "storage_model", "storage_params",
           "storage_status"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
METHOD_NAMES = {"cufile": "cuFile into GPU memory", "pinned_read_copy": "read() to pinned + copy",
                "pageable_read_copy": "read() to pageable + copy"}
NO_RECORDING = ("no recording of this machine is shipped: gdrlab/data/recorded holds no *-storage-*.csv "
                "(bench/record_storage.py makes one on a GPU machine)")


def storage_status() -> tuple[dict[str, Any], str]:
    """This machine's cuFile probe (``gdrlab.hw.storage.probe``) and one paragraph about it."""
    rep = storage.probe()
    return rep, "\n".join(line.strip() for line in storage.doctor_lines(rep)[1:])


def live_storage(sizes: list[int] | None = None, folder: str | None = None) -> tuple[pd.DataFrame | None, str]:
    """Read a file into GPU memory three ways now (cuFile where it loads), from ``folder`` (default:
    /dev/shm, else a temporary folder): ``(rows, why)``; ``(None, why)`` without a GPU."""
    import pandas as pd

    sizes = sizes or [64 * KiB, MiB, 16 * MiB]
    try:
        reader = storage.StorageReader(max(sizes))
    except RuntimeError as exc:
        return None, f"no live storage measurement here: {exc}"
    folder = folder or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir())
    rows = []
    fd, path = tempfile.mkstemp(prefix="gdrlab-lab06-", dir=folder)
    try:
        os.write(fd, os.urandom(max(sizes)))
        fh, no_cufile = None, reader.cufile_why if reader.cufile is None else ""
        if reader.cufile is not None:
            try:
                fh = reader.register(fd)
            except RuntimeError as exc:  # cuFile loads but refuses this file (a container without udev, say)
                no_cufile = f"cuFile refused the file ({exc}); its log (cufile.log) says why"
        for method in storage.METHODS:
            if method == "cufile" and fh is None:
                continue
            for size in sizes:
                times = []
                for _ in range(5):
                    if method == "cufile":
                        times.append(reader.read_cufile(fh, size))
                    else:
                        r, c = reader.read_host(fd, size, "pinned" if method.startswith("pinned") else "pageable")
                        times.append(r + c)
                p50 = sorted(times)[len(times) // 2]
                rows.append({"method": method, "size": size, "t_p50_us": p50 * 1e6, "bw_gbps": size / p50 / 1e9})
        if fh is not None:
            reader.deregister(fh)
    finally:
        reader.close()
        os.close(fd)
        os.unlink(path)
    fs = storage.filesystem_of(folder)
    df = pd.DataFrame(rows)
    mode = storage.probe()["mode"]
    provenance.attach(df, provenance.live({"file_on": f"{folder} ({fs['fstype']})", "cufile_mode": mode}))
    why = f"measured now, file on {folder} ({fs['fstype']})" + (f"; no cuFile rows: {no_cufile}" if no_cufile else "")
    return df, why


def recorded_storage(folder: str | None = None) -> tuple[pd.DataFrame | None, str]:
    """The recorded storage reads (``*-storage-*.csv`` and the JSON sidecar beside it, from
    ``gdrlab/data/recorded`` or ``folder``) as one DataFrame with the sidecar's provenance, and a
    line saying what it is; ``(None, NO_RECORDING)`` when none ships."""
    import pandas as pd

    d = Path(folder) if folder else data_dir()
    files = sorted(d.glob("*-storage-*.csv")) if d.is_dir() else []
    if not files:
        return None, NO_RECORDING
    frames, provs = [], []
    for f in files:
        side = f.with_suffix(".json")
        try:
            doc = json.loads(side.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue                      # a CSV without its provenance is not shown
        df = pd.read_csv(f)
        if df.empty:
            continue
        prov = dict(doc["provenance"])
        prov.pop("kind", None)
        hardware = prov.pop("hardware")
        date = prov.pop("date", None)
        prov["report"] = doc.get("report", {})
        frames.append(provenance.attach(df, provenance.recorded(hardware, date, **prov)))
        provs.append(f"{f.name}")
    if not frames:
        return None, NO_RECORDING + " (the CSV files found are empty or lack their JSON sidecar)"
    out = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    if len(frames) > 1:
        provenance.attach(out, provenance.derived(frames[0], files=provs), column=False)
    return out, f"{provenance.label(frames[0])} ({', '.join(provs)})"


def recorded_mode_note(df: pd.DataFrame) -> str:
    """What the recording says about the mode cuFile ran in, and why (from its sidecar)."""
    rep = (provenance.of(df) or {}).get("report", {})
    probe = rep.get("cufile_probe", {})
    modes = sorted({str(m) for m in df.loc[df["method"] == "cufile", "cufile_mode"].dropna()})
    props = rep.get("driver_properties") or {}
    parts = [f"cuFile mode in the recording: {', '.join(modes) or 'no cuFile rows'}"]
    if probe:
        parts.append(f"expected from the machine's set-up: {probe.get('mode')} ({probe.get('why')})")
    if props:
        parts.append(f"the library's driver properties: nvidia-fs version {props.get('nvfs_major_version')}."
                     f"{props.get('nvfs_minor_version')}, compat mode "
                     f"{'allowed' if props.get('allow_compat_mode') else 'not allowed'}")
    return "; ".join(parts)


# ----------------------------------------------------------------------------- the storage model
def _recorded_rate(name: str) -> tuple[float, float, str]:
    """(bw at the largest size GB/s, latency at the smallest size µs, label) of a recorded copy sweep."""
    df = load(name).sort_values("size")
    return float(df["bw_gbps"].iloc[-1]), float(df["lat_p50_us"].iloc[0]), provenance.label(df)


def storage_params() -> dict[str, tuple[float, str]]:
    """The storage model's parameters: ``{name: (value, source)}``. Copy rates come from the H200
    recordings; the drive is a PCIe Gen4 x4 NVMe drive at its link's data rate (an assumption:
    real drives read below it); the per-read cost is assumed."""
    gen4_x4 = 16e9 * 4 * 128 / 130 / 8 / 1e9          # 16 GT/s, 4 lanes, 128b/130b: bytes/s in GB/s
    params: dict[str, tuple[float, str]] = {
        "drive_gbps": (round(gen4_x4, 2), ("assumed: a PCIe Gen4 x4 NVMe drive reading at its link's data rate "
                                           "(16 GT/s x 4 lanes x 128/130 / 8)")),
        "read_setup_us": (10.0, "assumed: fixed cost of one read (system call, drive command); change it"),
        "bounce_chunk_bytes": (float(MiB), "per_buffer_cache_size_kb = 1024 in the stock cufile.json"),
        "cross_socket_factor": (round(11 / 23, 3), ("GPU memory across sockets about 11 GB/s vs 23 GB/s from host "
                                                    "memory (ib_write_bw, perftest issue #241, A30 + 200 Gb/s mlx5)")),
    }
    try:
        bw, lat, label = _recorded_rate("h200-copy-h2d-pinned")
        params["h2d_pinned_gbps"] = (round(bw, 2), f"{label}, largest size")
        params["copy_launch_us"] = (round(lat, 2), f"{label}, smallest size")
        bw, _, label = _recorded_rate("h200-copy-h2d-pageable")
        params["h2d_pageable_gbps"] = (round(bw, 2), f"{label}, largest size")
        cur = load("h200-curriculum")
        mem = cur.loc[cur.get("stage") == "memcpy", "bw_gbps"]
        params["memcpy_gbps"] = (float(mem.iloc[0]), f"{provenance.label(cur)}, host memcpy, one thread")
    except Exception as exc:  # noqa: BLE001  recordings missing: the model still runs, on stated assumptions
        why = f"assumed (recording unavailable: {type(exc).__name__})"
        params.setdefault("h2d_pinned_gbps", (25.0, why))
        params.setdefault("copy_launch_us", (6.0, why))
        params.setdefault("h2d_pageable_gbps", (8.0, why))
        params.setdefault("memcpy_gbps", (10.0, why))
    return params


def storage_model(params: dict[str, Any] | None = None, sizes: list[int] | None = None,
                  placement: str = "same switch") -> pd.DataFrame:
    """Modelled time to get ``size`` bytes from a cold NVMe drive into GPU memory, per method:
    GDS proper (the drive DMAs into GPU memory), cuFile compat (chunks through one bounce buffer,
    read then copy, one after the other), read() into pinned + copy, read() into pageable + copy
    (both read()s land in the page cache first, then a CPU copy). ``placement`` "cross socket"
    slows the peer-to-peer path by ``cross_socket_factor``. ``params``: values overriding
    :func:`storage_params` (plain numbers)."""
    import pandas as pd

    p = {k: v for k, (v, _) in storage_params().items()}
    p.update(params or {})
    sizes = sizes or [4 * KiB * 4 ** k for k in range(10)]
    drive, setup, chunk = p["drive_gbps"], p["read_setup_us"], p["bounce_chunk_bytes"]
    p2p = drive * (p["cross_socket_factor"] if placement == "cross socket" else 1.0)
    rows = []
    for s in sizes:
        n = math.ceil(s / chunk)
        last = s - (n - 1) * chunk
        t = {
            "GDS proper (peer-to-peer)": setup + s / (min(drive, p2p) * 1e3),
            "cuFile compat (bounce buffer)": (n * (setup + p["copy_launch_us"])
                                              + s / (drive * 1e3) + s / (p["h2d_pinned_gbps"] * 1e3)),
            "read() to pinned + copy": (setup + s / (drive * 1e3) + s / (p["memcpy_gbps"] * 1e3)
                                        + p["copy_launch_us"] + s / (p["h2d_pinned_gbps"] * 1e3)),
            "read() to pageable + copy": (setup + s / (drive * 1e3) + s / (p["memcpy_gbps"] * 1e3)
                                          + p["copy_launch_us"] + s / (p["h2d_pageable_gbps"] * 1e3)),
        }
        for method, us in t.items():
            rows.append({"method": method, "size": s, "t_us": us, "bw_gbps": s / us / 1e3,
                         "chunks": n if "compat" in method else 1, "last_chunk": last if "compat" in method else s})
    df = pd.DataFrame(rows)
    provenance.attach(df, provenance.modelled("lab 06 storage model", None, placement=placement,
                                              params={k: round(float(v), 4) for k, v in p.items()}))
    return df


def storage_figure(df: pd.DataFrame, y: str = "bw_gbps", measured: bool = False) -> go.Figure:
    """Bandwidth (or time) against size, one line per method (and storage/cache for measured rows)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    if measured:
        keys = ["storage", "cache", "method"] if "storage" in df else ["method"]
        tcol = "t_p50_us"
    else:
        keys, tcol = ["method"], "t_us"
    ycol = tcol if y != "bw_gbps" else "bw_gbps"
    for key, g in df.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        name = " / ".join(METHOD_NAMES.get(str(k), str(k)) for k in key)
        fig.add_trace(go.Scatter(x=g["size"], y=g[ycol], mode="lines+markers", name=name))
    fig.update_xaxes(type="log", title="size (B)", **SIZE_TICKS)
    fig.update_yaxes(type="log" if ycol != "bw_gbps" else "linear",
                     title="bandwidth (GB/s)" if ycol == "bw_gbps" else "time (µs)")
    fig.update_layout(title=f"file into GPU memory ({provenance.label(df)})", height=420)
    return fig


def gpu_nvme_pairs() -> tuple[pd.DataFrame, str]:
    """This machine's GPU/storage pairs with nvidia-smi's PCIe code (lab 05's topology code on the
    devices sysfs shows), and what was found."""
    table, why = lab05.own_pairs()
    if table.empty:
        return table, why
    def is_gpu(k: str) -> bool:
        return "GPU" in k
    def is_storage(k: str) -> bool:
        return "storage" in k
    keep = table.apply(lambda r: (is_gpu(r.a_kind) and is_storage(r.b_kind))
                       or (is_storage(r.a_kind) and is_gpu(r.b_kind)), axis=1)
    pairs = table[keep].reset_index(drop=True)
    if pairs.empty:
        kinds = sorted(set(table["a_kind"]) | set(table["b_kind"]))
        return pairs, f"{why}; no GPU/storage pair here (devices: {', '.join(kinds)})"
    return pairs, why


# ----------------------------------------------------------------------------- GPU-initiated networking
def proxy_model(sizes: list[int] | None = None, link_gbps: float = 50.0, nic_mops: float = 200.0,
                proxy_post_us: float = 0.5, proxy_threads: int = 1, gpu_post_us: float = 1.0,
                gpu_posters: int = 1024) -> pd.DataFrame:
    """Modelled message rate (millions of messages per second) against message size, with a CPU
    proxy thread posting every message and with GPU threads posting their own (GPU-initiated):
    each is the smallest of the link's rate, the NIC's message rate and the posters' rate
    (posters / time to post one). Every default is an assumption chosen to show the shape (a
    400 Gb/s link is 50 GB/s), not a measurement: change them."""
    import pandas as pd

    sizes = sizes or [2 ** k for k in range(3, 23)]
    rows = []
    for s in sizes:
        wire = link_gbps * 1e3 / s                       # messages per µs = millions per second
        for who, posters, post in (("CPU proxy", proxy_threads, proxy_post_us),
                                   ("GPU-initiated", gpu_posters, gpu_post_us)):
            post_rate = posters / post
            rate = min(wire, nic_mops, post_rate)
            limit = "link" if rate == wire else "NIC" if rate == nic_mops else "posting"
            rows.append({"initiator": who, "size": s, "mops": rate, "bw_gbps": rate * s / 1e3, "limit": limit})
    df = pd.DataFrame(rows)
    provenance.attach(df, provenance.modelled("lab 06 proxy model", None, link_gbps=link_gbps, nic_mops=nic_mops,
                                              proxy_post_us=proxy_post_us, proxy_threads=proxy_threads,
                                              gpu_post_us=gpu_post_us, gpu_posters=gpu_posters,
                                              assumptions="every parameter assumed, to show the shape"))
    return df


def proxy_figure(df: pd.DataFrame) -> go.Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    for who, g in df.groupby("initiator", sort=False):
        fig.add_trace(go.Scatter(x=g["size"], y=g["mops"], mode="lines+markers", name=str(who),
                                 text=g["limit"], hovertemplate="%{x} B: %{y:.3g} M msg/s (%{text})"))
    fig.update_xaxes(type="log", title="message size (B)", **SIZE_TICKS)
    fig.update_yaxes(type="log", title="messages per second (millions)")
    fig.update_layout(title=f"who posts the messages ({provenance.label(df)})", height=400)
    return fig
