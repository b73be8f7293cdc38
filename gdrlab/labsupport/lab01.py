"""Lab 01, BAR1 exposure: BAR sizes from sysfs and NVML, BAR1 use while allocating, a dma-buf
export the CPU cannot map, and the K20's 256 MB wall in the model.

Live where a GPU is; elsewhere the recorded H200 files (``h200-bar1``, ``h200-dmabuf``) when they
ship, and the model (:func:`gdrlab.model.register_mr`) everywhere.
"""
from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Any, Iterable, TypedDict

from .. import provenance as prov
from . import modelled_provenance

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from ..recorded import LiveOrRecorded
    from ..widgets import SweepWidget
    from ..widgets.quick import SizeSpec

__all__ = ["MiB", "GiB", "K20_PROFILE", "errno_name", "bar_table", "own_bars", "gpu_bars", "KEPLER_RESOURCE",
           "h200_resource", "nvml_bar1", "h200_bars", "bar1_measure",
           "bar1_recorded", "bar1_data", "bar1_sweep_widget", "bar1_figure", "dmabuf_probe", "live_or_recorded_dmabuf", "register_table",
           "bar1_model_figure", "Bar1Sample", "DmabufProbe"]

MiB, GiB = 1 << 20, 1 << 30
K20_PROFILE = "kepler-snb-2013"  # Tesla K20 + ConnectX-3 on Sandy Bridge: 256 MB BAR1
_KERNEL_ERRNO = {524: "ENOTSUPP (524: 'operation is not supported', a kernel-internal code)"}


class Bar1Sample(TypedDict):
    """BAR1 use around one allocation of ``size`` bytes of GPU memory (NVML's figures)."""

    size: int
    allocated_bytes: int
    bar1_used_before_bytes: int
    bar1_used_bytes: int
    bar1_delta_bytes: int
    bar1_total_bytes: int


class DmabufProbe(TypedDict):
    """One dma-buf export: bytes asked for, the fd's size, and the errno of the CPU's mmap of it."""

    size: int
    fd_size: int
    cpu_mmap_errno: int


class _LiveArgs(TypedDict):
    live: bool
    why_not_live: str


def errno_name(code: int | None) -> str:
    """``524`` -> ``"ENOTSUPP (524: ...)"``; ``12`` -> ``"ENOMEM (Cannot allocate memory)"``."""
    if code is None:
        return "none (the mapping worked)"
    code = int(code)
    if code == 0:
        return "0 (the mapping worked)"
    if code in _KERNEL_ERRNO:
        return _KERNEL_ERRNO[code]
    return f"{errno.errorcode.get(code, str(code))} ({os.strerror(code)})"


def _bars_frame(bars: list[dict[str, Any]], bus: str | None, label: bool = True) -> pd.DataFrame:
    """BARs as a table; ``label`` names NVIDIA's BAR0/BAR1 by the order of the memory BARs (from
    their flags), never by slot number or size."""
    import pandas as pd

    from ..hw.bars import nvidia_bar_name

    rows, mem_index = [], 0
    for b in bars:
        if b.get("bar") == "rom":
            continue
        is_mem = not b.get("io")
        name = nvidia_bar_name({"mem_index": mem_index if is_mem else None})
        mem_index += is_mem
        size = b.get("size_bytes")
        rows.append({"pci_bus_id": bus, "sysfs_bar": b.get("bar"), "size_bytes": size,
                     "size": _human(size), "prefetchable": b.get("prefetchable"), "is_64bit": b.get("is_64bit"),
                     **({"nvidia_calls_it": name} if label else {})})
    return pd.DataFrame(rows).dropna(axis=1, how="all")


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def _resource(root: str, bus_id: str) -> str | None:
    from ..hw.sysfs import check_root, read_text

    return read_text(check_root(root) / "sys/bus/pci/devices" / bus_id / "resource")


def bar_table(text: str | None, bus_id: str | None = None, label: bool = False) -> pd.DataFrame:
    """The BARs of one ``resource`` file as a table laid out by their flags.

    Columns: ``pci_bus_id``, ``sysfs_bar`` (slot), ``slots`` (``"2-3"`` for a 64-bit BAR),
    ``kind`` (mem/io), ``size_bytes``, ``size``, ``flags`` (hex, as in the file), ``is_64bit``
    (``flags & IORESOURCE_MEM_64``), ``prefetchable``, and with ``label`` ``nvidia_calls_it``.
    """
    import pandas as pd

    from ..hw.bars import bar_layout, nvidia_bar_name

    rows = [{"pci_bus_id": bus_id, "sysfs_bar": b["slot"], "slots": b["slots"], "kind": b["kind"],
             "size_bytes": b["size_bytes"], "size": _human(b["size_bytes"]), "flags": f"0x{b['flags']:08x}",
             "is_64bit": b["is_64bit"], "prefetchable": b["prefetchable"],
             **({"nvidia_calls_it": nvidia_bar_name(b)} if label else {})} for b in bar_layout(text)]
    return pd.DataFrame(rows)


def own_bars(root: str = "/") -> tuple[pd.DataFrame, str]:
    """``(DataFrame of the memory BARs of this machine's PCI devices, why empty)``, live from sysfs.

    Bridges are left out (their windows are not BARs of a device); each row names the device's kind
    from its PCI class (NVMe storage, Ethernet NIC, display/GPU, ...) and its vendor ID.
    """
    import pandas as pd

    from ..hw.bars import device_kind
    from ..hw.sysfs import pci_devices

    try:
        devices = pci_devices(root)
    except (OSError, ValueError) as exc:
        return pd.DataFrame(), f"cannot read sysfs: {exc}"
    if not devices:
        return pd.DataFrame(), "no PCI devices in /sys/bus/pci/devices (a container, or not Linux)"
    frames = []
    for d in devices:
        if d["class_id"] is None or (d["class_id"] >> 16) == 0x06:  # bridges
            continue
        t = bar_table(_resource(root, d["pci_bus_id"]), d["pci_bus_id"])
        if len(t):
            t = t[t["kind"] == "mem"].drop(columns="kind")
            t.insert(1, "device", device_kind(d["class_id"]))
            t.insert(2, "vendor", f"0x{d['vendor_id']:04x}" if d["vendor_id"] is not None else "?")
            frames.append(t)
    if not frames:
        return pd.DataFrame(), "no PCI device here has a memory BAR that sysfs shows"
    out = pd.concat(frames, ignore_index=True)
    prov.attach(out, prov.live({"what": "sysfs resource files"}), column=False)
    return out, ""


def gpu_bars(root: str = "/") -> tuple[pd.DataFrame, str]:
    """``(DataFrame of every NVIDIA GPU's BARs from its sysfs resource file, why empty)``.

    NVIDIA's BAR1 is found from the flags (the second memory BAR), not from a slot number:
    slot 2 when BAR0 is 64-bit, slot 1 when BAR0 is 32-bit.
    """
    import pandas as pd

    from ..hw.sysfs import pci_devices

    try:
        devices = pci_devices(root)
    except (OSError, ValueError) as exc:
        return pd.DataFrame(), f"cannot read sysfs: {exc}"
    gpus = [d for d in devices if d["vendor_id"] == 0x10DE and d["class_id"] is not None
            and (d["class_id"] >> 8) in (0x0300, 0x0302)]
    frames = [bar_table(_resource(root, g["pci_bus_id"]), g["pci_bus_id"], label=True) for g in gpus]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(), "no NVIDIA GPU in /sys/bus/pci/devices"
    return pd.concat(frames, ignore_index=True), ""


def nvml_bar1() -> tuple[pd.DataFrame, str]:
    """``(DataFrame of BAR1 total/used per GPU from NVML, why empty)``."""
    import pandas as pd

    from ..hw import nvml_gpus

    gpus = nvml_gpus()
    rows = [{"index": g["index"], "name": g["name"], "bar1_total_bytes": g["bar1_total_bytes"],
             "bar1_total": _human(g["bar1_total_bytes"]), "bar1_used": _human(g["bar1_used_bytes"])} for g in gpus]
    return pd.DataFrame(rows), gpus.reason


_ZERO = "0x0000000000000000 0x0000000000000000 0x0000000000000000"
_FLAGS = {(True, True): 0x0014220C, (True, False): 0x00140204, (False, True): 0x00042208,
          (False, False): 0x00040200}  # (64-bit, prefetchable) -> flags as Linux prints them
# A Kepler-era GPU's resource file: BAR0 32-bit 16 MiB registers, BAR1 64-bit 256 MiB, a 64-bit
# 32 MiB BAR and an I/O BAR, the layout lspci shows for a Tesla K20. The addresses are made up.
KEPLER_RESOURCE = "\n".join([
    "0x00000000f5000000 0x00000000f5ffffff 0x0000000000040200",
    "0x00000000e0000000 0x00000000efffffff 0x000000000014220c", _ZERO,
    "0x00000000f0000000 0x00000000f1ffffff 0x000000000014220c", _ZERO,
    "0x000000000000e000 0x000000000000e07f 0x0000000000040101"])


def _resource_line(start: int, bar: dict[str, Any]) -> str:
    flags = 0x00040101 if bar.get("io") else _FLAGS[(bool(bar["is_64bit"]), bool(bar["prefetchable"]))]
    return f"0x{start:016x} 0x{start + bar['size_bytes'] - 1:016x} 0x{flags:016x}"


def h200_resource() -> str:
    """The recorded H200's BARs written back as a sysfs ``resource`` file (slots, sizes and the
    64-bit/prefetchable flags as recorded; the addresses are made up)."""
    from .lab00 import h200_report

    report, _ = h200_report()
    lines, start = [_ZERO] * 6, 0x380000000000
    for bar in report["gpus"][0]["bars"]:
        if bar["bar"] != "rom":
            lines[bar["bar"]] = _resource_line(start, bar)
            start += max(bar["size_bytes"], 1 << 30)
    return "\n".join(lines)


def h200_bars(label: bool = False) -> pd.DataFrame:
    """The H200's BARs as sysfs listed them (from its recorded report); ``label`` marks BAR1."""
    from .lab00 import h200_report

    report, _ = h200_report()
    g = report["gpus"][0]
    df = _bars_frame(g.get("bars") or [], g.get("pci_bus_id"), label)
    prov.attach(df, prov.derived(report["provenance"]), column=False)
    return df


def _nvml_bar1_used(device: int) -> tuple[int, int]:
    from ..engine import gpus as cuda_gpus
    from ..errors import Unavailable
    from ..hw import nvml_gpus
    from ..hw.sysfs import norm_bus_id

    cuda = cuda_gpus()
    if device >= len(cuda):
        raise Unavailable(f"no CUDA GPU {device} (found {len(cuda)})")
    bus = norm_bus_id(str(cuda[device]["pci_bus_id"]))
    nv = nvml_gpus()
    for g in nv:
        if g["pci_bus_id"] == bus and g["bar1_used_bytes"] is not None:
            return int(g["bar1_used_bytes"]), int(g["bar1_total_bytes"])
    raise Unavailable(f"NVML reports no BAR1 use for GPU {device} ({nv.reason or 'not supported'})")


def bar1_measure(size: int, device: int = 0) -> Bar1Sample:
    """Allocate ``size`` bytes of GPU memory, read NVML's BAR1 used before and after, free it."""
    from ..engine import Buffer

    before, total = _nvml_bar1_used(device)
    buf = Buffer(int(size), "device", device)
    try:
        after, _ = _nvml_bar1_used(device)
    finally:
        del buf
    return {"size": int(size), "allocated_bytes": int(size), "bar1_used_before_bytes": before,
            "bar1_used_bytes": after, "bar1_delta_bytes": after - before, "bar1_total_bytes": total}


def bar1_recorded() -> pd.DataFrame:
    """The recorded H200 allocation sweep (``h200-bar1``) with a ``size`` column, or raise
    :class:`gdrlab.recorded.RecordedDataMissing`."""
    from ..recorded import load

    df = load("h200-bar1")
    df["size"] = df["allocated_bytes"]
    return df


def bar1_data(sizes: SizeSpec = "64M:16G", device: int = 0) -> LiveOrRecorded:
    """:class:`gdrlab.recorded.LiveOrRecorded`: allocations measured now (a few in quick mode)
    when a GPU is here, else the recorded H200 sweep, else nothing and why."""
    import pandas as pd

    from ..recorded import live_or_recorded
    from ..widgets import sweep_sizes

    def measure() -> pd.DataFrame:
        df = pd.DataFrame([bar1_measure(n, device) for n in sweep_sizes(sizes)])
        prov.attach(df, _live_provenance(), column=False)
        return df

    res = live_or_recorded(measure, "h200-bar1", **_live_args())
    if res.source == "recorded":
        res.data["size"] = res.data["allocated_bytes"]
    return res


def _live_args() -> _LiveArgs:
    from ..engine import cuda_status

    st = cuda_status()
    return {"live": st["usable"], "why_not_live": f"no GPU here ({st['reason']})"}


def _live_provenance() -> dict[str, Any]:
    from ..engine import machine

    return prov.live(machine=machine())


def bar1_sweep_widget(sizes: SizeSpec = "64M:16G", device: int = 0) -> SweepWidget:
    """A SweepWidget that allocates each size and plots BAR1 used, the recorded H200 overlaid."""
    from ..recorded import RecordedDataMissing
    from ..widgets import SweepWidget

    try:
        overlay = {"H200": bar1_recorded()}
    except RecordedDataMissing:
        overlay = None
    return SweepWidget(lambda n: bar1_measure(n, device), sizes, y="bar1_used_bytes", name="BAR1 used",
                       model=overlay, title="BAR1 used while GPU memory is allocated",
                       x_title="GPU memory allocated (bytes)", log_y=True)


def bar1_figure(df: pd.DataFrame) -> go.Figure:
    """BAR1 used against GPU memory allocated (live or recorded ``df``)."""
    from ..widgets import plot_sweep

    fig = plot_sweep(df, x="allocated_bytes", y="bar1_used_bytes", title="BAR1 used while allocating",
                     log_y=True)
    fig.update_layout(xaxis_title="GPU memory allocated (bytes)")
    return fig


def dmabuf_probe(size: int = 64 * MiB, device: int = 0) -> DmabufProbe:
    """Export ``size`` bytes of GPU memory as a dma-buf and try to mmap it from the CPU.

    Returns ``{"size", "fd_size", "cpu_mmap_errno"}``. Raises Unavailable with no GPU."""
    from ..engine import Buffer, cuda_status, export_dmabuf
    from ..errors import Unavailable

    st = cuda_status()
    if not st["usable"]:
        raise Unavailable(f"exporting a dma-buf needs a GPU: {st['reason']}")
    buf = Buffer(int(size), "device", device)
    exported = export_dmabuf(buf)
    try:
        return {"size": int(size), "fd_size": int(exported.size), "cpu_mmap_errno": exported.cpu_mmap_errno}
    finally:
        exported.close()
        del buf


def live_or_recorded_dmabuf(sizes: Iterable[int] = (2 * MiB, 64 * MiB), device: int = 0) -> LiveOrRecorded:
    """:class:`gdrlab.recorded.LiveOrRecorded` of dma-buf exports: live with a GPU, else ``h200-dmabuf``."""
    import pandas as pd

    from ..errors import CudaError, Unavailable
    from ..recorded import live_or_recorded

    def measure() -> pd.DataFrame:
        try:
            rows = [dmabuf_probe(int(n), device) for n in sizes]
        except CudaError as exc:  # a GPU or driver without dma-buf export: say so, show the record
            raise Unavailable(f"dma-buf export failed here: {exc}") from exc
        df = pd.DataFrame(rows)
        prov.attach(df, _live_provenance(), column=False)
        return df

    return live_or_recorded(measure, "h200-dmabuf", **_live_args())


def register_table(profile: str = K20_PROFILE, sizes: Iterable[int] = (64 * MiB, 128 * MiB, 192 * MiB, 224 * MiB,
                                                                      240 * MiB, 256 * MiB, 1 * GiB)) -> pd.DataFrame:
    """The model's ``ibv_reg_mr`` on GPU memory of each size, one at a time: registered or the error."""
    import pandas as pd

    from .. import model
    from ..errors import VerbsError

    rows = []
    for n in sizes:
        try:
            r = model.register_mr(profile, int(n))
            rows.append({"size": _human(int(n)), "size_bytes": int(n), "registered": True,
                         "bar1_left": _human(r["bar1_free_after_bytes"]), "error": ""})
        except VerbsError as exc:
            rows.append({"size": _human(int(n)), "size_bytes": int(n), "registered": False, "bar1_left": "",
                         "error": f"{errno_name(exc.errno)}: {exc}"})
    df = pd.DataFrame(rows)
    prov.attach(df, modelled_provenance(profile), column=False)
    return df


def bar1_model_figure(profiles: Iterable[str] = (K20_PROFILE, "volta-dgx1", "hopper-ndr"),
                      max_bytes: int = 512 * GiB) -> go.Figure:
    """BAR1 left after one registration of each size, per profile: the curve ends at the wall."""
    import numpy as np
    import pandas as pd

    from .. import model
    from ..errors import VerbsError
    from ..widgets import plot_sweep

    sizes = np.unique(np.logspace(20, np.log2(max_bytes), 60, base=2).astype(np.int64))
    frames = {}
    for prof in profiles:
        rows = []
        for n in sizes:
            try:
                left = model.register_mr(prof, int(n))["bar1_free_after_bytes"]
            except VerbsError:
                left = np.nan  # ENOMEM: past the wall
            rows.append({"size": int(n), "bar1_free_after_bytes": left})
        df = pd.DataFrame(rows)
        prov.attach(df, modelled_provenance(prof), column=False)
        frames[prof] = df
    fig = plot_sweep({}, model=list(frames.values()), y="bar1_free_after_bytes", log_y=True,
                     title="one ibv_reg_mr on GPU memory: BAR1 left, until ENOMEM")
    fig.update_layout(xaxis_title="GPU memory registered (bytes)")
    return fig
