"""Lab 06, GPUDirect's siblings: GPUDirect Storage (cuFile) and GPU-initiated networking.

Storage: this machine's cuFile status (:mod:`gdrlab.hw.storage`), a live read of a file into GPU
memory three ways where a GPU and libcufile exist, the recorded runs of ``bench/record_storage.py``
where they ship (``gdrlab/data/recorded/*-storage-*.csv`` with their JSON sidecar), and a model of
the three ways plus GDS proper (:mod:`gdrlab.model.storage`). GPU-initiated networking: the message
rate with and without a CPU proxy thread (:mod:`gdrlab.model.initiated`). Every table carries its
provenance.
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
from ..model.initiated import INITIATED_PARAMS, predict_initiated
from ..model.storage import drive, predict_storage
from ..recorded import data_dir
from . import SIZE_TICKS, lab05

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

__all__ = ["INITIATED_PROFILE", "INITIATOR_NAMES", "METHOD_NAMES", "NO_RECORDING", "STORAGE_DRIVE", "STORAGE_PROFILE",
           "gpu_nvme_pairs", "initiated_param_table", "live_storage", "proxy_figure", "proxy_model",
           "recorded_mode_note", "recorded_storage", "storage_figure", "storage_model", "storage_params",
           "storage_ranking", "storage_status"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
METHOD_NAMES = {"cufile": "cuFile into GPU memory", "pinned_read_copy": "read() to pinned + copy",
                "pageable_read_copy": "read() to pageable + copy",
                "gds": "GDS proper (peer-to-peer)", "cufile-compat": "cuFile compat (bounce buffer)",
                "read-pinned": "read() to pinned + copy", "read-pageable": "read() to pageable + copy"}
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
#: The profile and drive the lab's storage model runs on unless a cell names others.
STORAGE_PROFILE, STORAGE_DRIVE = "h200-lab", "nvme-gen4"
_PLACEMENT = {"same switch": "same-switch", "same host bridge": "same-host-bridge", "cross socket": "cross-socket"}


def storage_params(drive_name: str = STORAGE_DRIVE) -> dict[str, tuple[float, str, str]]:
    """The storage model's drive parameters (:func:`gdrlab.model.storage.drive`): ``{name: (value,
    level, source)}``; the GPU link, copy and peer-write rates come from the profile."""
    return dict(drive(drive_name))


def storage_model(params: dict[str, Any] | None = None, sizes: list[int] | None = None,
                  placement: str = "same switch", *, profile: str = STORAGE_PROFILE,
                  drive_name: str = STORAGE_DRIVE, page_cache: bool = False) -> pd.DataFrame:
    """:func:`gdrlab.model.storage.predict_storage` in the lab's columns: per method (``gds``,
    ``cufile-compat``, ``read-pinned``, ``read-pageable``) and size, ``t_us``, ``bw_gbps``, the
    ``bottleneck`` part, and for compat mode the bounce-buffer ``chunks`` and ``last_chunk``.
    ``params``: drive parameters overriding :func:`storage_params`; ``placement``: where the drive
    sits relative to the GPU ("same switch", "same host bridge", "cross socket"). The provenance is
    the model's (profile, its level, the drive, every parameter's level)."""
    sizes = sizes or [4 * KiB * 4 ** k for k in range(10)]
    df = predict_storage(profile, sizes, page_cache=page_cache, placement=_PLACEMENT.get(placement, placement),
                         drive_name=drive_name, **(params or {}))
    prov = provenance.of(df)
    assert prov is not None, "gdrlab.model.storage gives every table its provenance"
    bounce = float(prov["storage_params"]["bounce_bytes"])
    out = df.rename(columns={"lat_us": "t_us"})
    compat = out["method"] == "cufile-compat"
    n = (out["size"] / bounce).apply(math.ceil)
    out["chunks"] = n.where(compat, 1).astype(int)
    out["last_chunk"] = (out["size"] - (n - 1) * bounce).where(compat, out["size"]).astype(int)
    return provenance.attach(out, prov, column=False)


def storage_ranking(df: pd.DataFrame, size: int) -> list[tuple[str, float]]:
    """``[(method, GB/s)]`` at ``size``, fastest first."""
    g = df[df["size"] == size].sort_values("bw_gbps", ascending=False)
    return [(str(m), float(b)) for m, b in zip(g["method"], g["bw_gbps"], strict=True)]


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
#: The profile the lab's GPU-initiated model runs on (it needs an RDMA NIC; h200-lab has none).
INITIATED_PROFILE = "hopper-ndr"
INITIATOR_NAMES = {"proxy": "CPU proxy", "gpu": "GPU-initiated"}


def proxy_model(sizes: list[int] | None = None, profile: str = INITIATED_PROFILE, **params: Any) -> pd.DataFrame:
    """:func:`gdrlab.model.initiated.predict_initiated` in the lab's columns: per initiator ("CPU
    proxy", "GPU-initiated") and message size, the message rate ``mops`` (millions per second),
    ``bw_gbps``, what ``limit``s the rate, and one put's ``lat_us``. ``params``: the model's
    parameters (``INITIATED_PARAMS``) to override. The provenance is the model's."""
    sizes = sizes or [2 ** k for k in range(3, 23)]
    df = predict_initiated(profile, sizes, **params)
    prov = provenance.of(df)
    assert prov is not None, "gdrlab.model.initiated gives every table its provenance"
    out = df.assign(initiator=df["initiator"].map(INITIATOR_NAMES))
    return provenance.attach(out, prov, column=False)


def initiated_param_table() -> pd.DataFrame:
    """The GPU-initiated model's parameters with their levels and sources."""
    import pandas as pd

    return pd.DataFrame([{"parameter": k, "value": v.value, "unit": v.unit, "level": v.level, "source": v.source}
                         for k, v in INITIATED_PARAMS.items()])


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
