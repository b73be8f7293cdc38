"""Lab 03, peer-memory registration: what happens inside ``ibv_reg_mr`` and why caches exist.

The lab tries three registrations (host memory, a raw GPU pointer, a GPU buffer through dma-buf)
with whatever this machine has, draws the registration state machine, and puts a cost model of
registration next to the published gdrcopy figure (``gdr_pin_buffer`` of 64 KB: about 1.3 ms on
a V100). Everything here runs without a GPU or an HCA and says what it could not do.
"""
from __future__ import annotations

import dataclasses
import math
import os
import platform
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypedDict

import numpy as np

from .. import provenance as prov
from . import SIZE_TICKS, optional_module
from .softroce import (
    PYVERBS_BESIDE_GDRLAB,
    RegistrationAttempt,
    pyverbs_registrations,
    soft_roce_status,
)

if TYPE_CHECKING:
    import ipywidgets as w
    import pandas as pd
    import plotly.graph_objects as go

    from ..verbs import MemoryRegion
    from ..widgets.quick import SizeSpec

__all__ = [
    "GPU_PAGE_BYTES", "HOST_PAGE_BYTES", "RegistrationModel", "REGISTRATION_MODELS", "peer_memory_status",
    "pyverbs_status", "verbs_status", "measure_registration", "registration_summary", "registration_explorer",
    "try_registrations", "registration_cost_table", "registration_figure", "state_machine_figure",
    "soft_roce_status", "pyverbs_registrations",
    "PYVERBS_BESIDE_GDRLAB", "RegistrationAttempt", "PeerMemoryStatus", "RegistrationRoute", "GpuRegistration",
    "DmabufImport",
]

GPU_PAGE_BYTES = 64 * 1024   # NVIDIA's peer-to-peer pages (nvidia_p2p_get_pages) are 64 KiB
HOST_PAGE_BYTES = 4 * 1024   # x86-64 base page


@dataclasses.dataclass(frozen=True)
class RegistrationModel:
    """Registration cost ``fixed_us + per_page_us * pages`` (pages of ``page_bytes``).

    Pinning touches every page (get_user_pages for host memory, nvidia_p2p_get_pages for GPU
    memory) and builds the HCA's translation table, hence the per-page term; the fixed term is
    the system call, the driver round trip and the MR object itself.
    """

    name: str
    fixed_us: float
    per_page_us: float
    page_bytes: int
    source: str

    def pages(self, size_bytes: float | np.ndarray | Sequence[float]) -> np.ndarray:
        """Pages covered by a page-aligned buffer of ``size_bytes``."""
        size = np.asarray(size_bytes, dtype=float)
        if np.any(size <= 0):
            raise ValueError("sizes must be positive byte counts")
        return np.ceil(size / self.page_bytes)

    def cost_us(self, size_bytes: float | np.ndarray | Sequence[float]) -> np.ndarray:
        """Predicted registration time in microseconds."""
        return self.fixed_us + self.per_page_us * self.pages(size_bytes)


# Parameters. The GPU entry is anchored on gdrcopy's README (gdr_pin_buffer of 64 KB about 1.3 ms
# on a V100: one 64 KiB page, so fixed + per_page = 1300 us). The host entry is illustrative (a few
# microseconds of fixed cost and a fraction of a microsecond per 4 KiB page, the shape reported for
# pinning host memory); it is labelled so in every plot.
REGISTRATION_MODELS: dict[str, RegistrationModel] = {
    "host (ibv_reg_mr)": RegistrationModel(
        "host (ibv_reg_mr)", fixed_us=10.0, per_page_us=0.25, page_bytes=HOST_PAGE_BYTES,
        source="illustrative parameters"),
    "GPU (peer memory / dma-buf)": RegistrationModel(
        "GPU (peer memory / dma-buf)", fixed_us=1250.0, per_page_us=50.0, page_bytes=GPU_PAGE_BYTES,
        source="anchored on gdrcopy README: gdr_pin_buffer(64 KB) about 1.3 ms, V100; per-page slope illustrative"),
}


class RegistrationRoute(TypedDict):
    """Whether one way of registering memory could work here, and why (not)."""

    possible: bool
    why: str


class GpuRegistration(TypedDict):
    """A GPU and the two ways an RDMA device can reach its memory."""

    name: str
    dmabuf_supported: bool
    gdr_supported: bool


class DmabufImport(TypedDict):
    """Whether libibverbs exports ``ibv_reg_dmabuf_mr`` (and why not)."""

    exported: bool
    reason: str


class PeerMemoryStatus(TypedDict):
    """What :func:`peer_memory_status` found (its docstring says what each key holds)."""

    rdma_devices: list[str]
    nvidia_peermem: bool
    pyverbs: dict[str, Any]
    ibv_reg_dmabuf_mr: DmabufImport
    nvidia_peermem_version: str | None
    nv_peer_mem: bool
    kernel: str
    kernel_dmabuf: bool
    gpus: list[GpuRegistration]
    cuda: dict[str, Any]
    routes: dict[str, RegistrationRoute]


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def peer_memory_status(root: str = "/") -> PeerMemoryStatus:
    """What this machine offers for registering GPU memory, read from sysfs and the CUDA driver.

    Keys: ``rdma_devices`` (names in /sys/class/infiniband), ``nvidia_peermem`` (module loaded,
    with its version if known), ``nv_peer_mem`` (the pre-2021 out-of-tree module), ``kernel``
    (release; dma-buf import by RDMA needs 5.12+), ``gpus`` (name, dmabuf_supported,
    gdr_supported), ``cuda`` (usable, reason), ``routes`` (which registration routes could work
    here, each with a reason).
    """
    base = Path(root)
    ib = base / "sys/class/infiniband"
    rdma = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
    peermem = (base / "sys/module/nvidia_peermem").is_dir()
    old = (base / "sys/module/nv_peer_mem").is_dir()
    kernel = platform.release() if root == "/" else _read(base / "proc/sys/kernel/osrelease")
    try:
        major, minor = (int(x) for x in kernel.split(".")[:2])
        kernel_dmabuf = (major, minor) >= (5, 12)
    except ValueError:
        kernel_dmabuf = False
    gpus: list[GpuRegistration] = []
    cuda: dict[str, Any] = {"usable": False, "reason": "not checked"}
    try:
        from .. import engine
        cuda = engine.cuda_status()
        gpus = [{"name": g["name"], "dmabuf_supported": bool(g.get("dmabuf_supported")),
                 "gdr_supported": bool(g.get("gdr_supported"))} for g in engine.gpus()]
    except Exception as exc:  # the engine may be unbuilt; the lab still explains
        cuda = {"usable": False, "reason": str(exc)}
    routes = {
        "host memory (ibv_reg_mr)": (bool(rdma), "an RDMA device is present" if rdma
                                     else "no RDMA device (/sys/class/infiniband is empty or missing)"),
        "GPU pointer via nvidia-peermem": (
            bool(rdma and gpus and peermem),
            "GPU, RDMA device and nvidia-peermem present" if rdma and gpus and peermem else
            "needs " + ", ".join(w for w, ok in (("an RDMA device", rdma), ("a CUDA GPU", gpus),
                                                  ("the nvidia-peermem module", peermem)) if not ok)),
        "GPU buffer via dma-buf": (
            bool(rdma and any(g["dmabuf_supported"] for g in gpus) and kernel_dmabuf),
            "GPU with DMA_BUF_SUPPORTED, RDMA device and kernel 5.12+ present"
            if rdma and any(g["dmabuf_supported"] for g in gpus) and kernel_dmabuf else
            "needs " + ", ".join(w for w, ok in (("an RDMA device", rdma),
                                                  ("a GPU with DMA_BUF_SUPPORTED", any(g["dmabuf_supported"] for g in gpus)),
                                                  ("Linux 5.12+", kernel_dmabuf)) if not ok)),
    }
    verbs, _st = verbs_status()
    try:
        libverbs = verbs.peer_memory_status() if verbs is not None else {
            "reg_dmabuf_mr": False, "reg_dmabuf_mr_reason": _st.get("reason", "")}
    except Exception as exc:  # report, do not fail the lab
        libverbs = {"reg_dmabuf_mr": False, "reg_dmabuf_mr_reason": f"{type(exc).__name__}: {exc}"}
    return {"rdma_devices": rdma, "nvidia_peermem": peermem, "pyverbs": pyverbs_status(),
            "ibv_reg_dmabuf_mr": {"exported": bool(libverbs.get("reg_dmabuf_mr")),
                                  "reason": libverbs.get("reg_dmabuf_mr_reason", "")},
            "nvidia_peermem_version": _read(base / "sys/module/nvidia_peermem/version") or None,
            "nv_peer_mem": old, "kernel": kernel, "kernel_dmabuf": kernel_dmabuf, "gpus": gpus,
            "cuda": cuda, "routes": {k: {"possible": v[0], "why": v[1]} for k, v in routes.items()}}


def pyverbs_status() -> dict[str, Any]:
    """Whether rdma-core's Python binding (pyverbs) is usable here, and exactly why not:
    :func:`gdrlab.hw.pyverbs.pyverbs_status` plus ``available`` (it imports)."""
    from ..hw.pyverbs import pyverbs_status as status

    st = status()
    return {"available": st["importable"], **st}


def _attempt(label: str, fn: Callable[[], object], success: str = "registered") -> RegistrationAttempt:
    try:
        detail = fn()
        return {"attempt": label, "outcome": success, "errno": 0, "detail": str(detail)}
    except Exception as exc:
        code = getattr(exc, "errno", None) or getattr(exc, "code", None) or 0
        name = os.strerror(code) if isinstance(code, int) and code > 0 else ""
        kind = "not possible here" if type(exc).__name__ in ("Unavailable", "NotImplementedError") else "failed"
        return {"attempt": label, "outcome": kind, "errno": code if isinstance(code, int) else 0,
                "detail": f"{type(exc).__name__}: {exc}" + (f" [{name}]" if name else "")}


def verbs_status() -> tuple[ModuleType | None, dict[str, Any]]:
    """``(gdrlab.verbs or None, its status())``; the status says why when the module, the
    library or the device is missing (never raises)."""
    verbs, why = optional_module("gdrlab.verbs")
    if verbs is None:
        return None, {"library_found": False, "devices": [], "reason": why}
    try:
        return verbs, dict(verbs.status())
    except Exception as exc:  # an engine built without verbs support
        return None, {"library_found": False, "devices": [], "reason": f"gdrlab.verbs is unusable here: {exc}"}


def _row(label: str, outcome: str, detail: str, errno: int = 0) -> RegistrationAttempt:
    return {"attempt": label, "outcome": outcome, "errno": errno, "detail": detail}


def _describe_mr(mr: MemoryRegion) -> str:
    return (f"lkey=0x{mr.lkey:x} rkey=0x{mr.rkey:x} via {mr.mechanism}, "
            f"registered in {mr.reg_us:,.0f} µs")


def try_registrations(size_bytes: int = 1 << 20) -> list[RegistrationAttempt]:
    """Try, with what this machine has: ``ibv_reg_mr`` on host memory, plain ``ibv_reg_mr`` on a
    GPU pointer, and the dma-buf route (``ibv_reg_dmabuf_mr`` where an HCA exists, otherwise the
    engine's dma-buf export alone). One dict per attempt (attempt, outcome, errno, detail);
    never raises: what cannot run says why."""
    if size_bytes <= 0:
        raise ValueError("size_bytes must be positive")
    status = peer_memory_status()
    from .. import engine

    verbs, vstat = verbs_status()
    rdma = verbs if vstat.get("devices") else None  # gdrlab.verbs, where it lists an RDMA device
    hca = rdma is not None
    gpu = bool(status["gpus"])
    no_gpu = "no CUDA GPU: " + str(status["cuda"].get("reason", ""))
    raw_label = ("GPU pointer, plain ibv_reg_mr (nvidia-peermem loaded)" if status["nvidia_peermem"]
                 else "GPU pointer, plain ibv_reg_mr (no peer-memory client)")
    results: list[RegistrationAttempt] = []
    if rdma is None:
        why = vstat.get("reason") or "no RDMA device on this machine"
        results.append(_row("host memory (ibv_reg_mr)", "not possible here", why))
        results.append(_row(raw_label, "not possible here", why))
    else:
        def reg_host() -> str:
            with rdma.Device() as dev, dev.alloc_pd() as pd, pd.reg_mr(engine.Buffer(size_bytes, "pageable")) as mr:
                return _describe_mr(mr)

        def reg_raw() -> str:
            if not gpu:
                raise engine.Unavailable(no_gpu)
            with rdma.Device() as dev, dev.alloc_pd() as pd, pd.reg_mr(engine.Buffer(size_bytes, "device")) as mr:
                return _describe_mr(mr)

        results.append(_attempt("host memory (ibv_reg_mr)", reg_host))
        results.append(_attempt(raw_label, reg_raw))

    def dmabuf() -> str:
        if not gpu:
            raise engine.Unavailable(no_gpu)
        buf = engine.Buffer(size_bytes, "device")
        if rdma is not None:
            with rdma.Device() as dev, dev.alloc_pd() as pd, pd.reg_gpu(buf, how="dmabuf") as mr:
                return _describe_mr(mr)
        exported = engine.export_dmabuf(buf)
        try:
            err = exported.cpu_mmap_errno
            return (f"exported fd {exported.fd} of {exported.size} bytes; the CPU's mmap of it fails with errno "
                    f"{err} ({os.strerror(err) if err > 0 else 'none'}): a dma-buf is for device importers such "
                    "as ibv_reg_dmabuf_mr; no RDMA device here to import it")
        finally:
            exported.close()

    results.append(_attempt("GPU buffer via dma-buf" + (" (ibv_reg_dmabuf_mr)" if hca else " (export only)"), dmabuf,
                            "registered" if hca else "exported, nothing to import it"))
    return results


def registration_cost_table(sizes: float | np.ndarray | Sequence[float],
                            models: dict[str, RegistrationModel] | None = None) -> pd.DataFrame:
    """Modelled registration cost per model and size: DataFrame (model, size, pages, reg_us)
    with ``attrs["provenance"]`` kind modelled."""
    import pandas as pd

    models = models or REGISTRATION_MODELS
    sizes = np.asarray(sizes, dtype=float)
    rows = []
    for m in models.values():
        for s, pages, cost in zip(sizes, m.pages(sizes), m.cost_us(sizes)):
            rows.append({"model": m.name, "size": int(s), "pages": int(pages), "reg_us": float(cost),
                         "source": m.source})
    df = pd.DataFrame(rows)
    prov.attach(df, prov.modelled("lab 03 registration model", sources={m.name: m.source for m in models.values()}),
                column=False)
    return df


def registration_figure(table: pd.DataFrame,
                        measured: pd.DataFrame | Mapping[str, pd.DataFrame | None] | None = None) -> go.Figure:
    """Registration time against buffer size (log-log), one line per model, the gdrcopy point,
    and optional measured points: a DataFrame (size, reg_us, attrs provenance) or a mapping
    ``{label: DataFrame}``."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, part in table.groupby("model", sort=False):
        fig.add_trace(go.Scatter(x=part["size"], y=part["reg_us"], mode="lines",
                                 name=f"{name}: modelled ({part['source'].iloc[0]})"))
    fig.add_trace(go.Scatter(x=[65536], y=[1300.0], mode="markers", marker={"size": 12, "symbol": "star"},
                             name="published: gdr_pin_buffer 64 KB ≈ 1.3 ms (gdrcopy README, V100)"))
    from . import provenance_label
    frames = measured if isinstance(measured, Mapping) else {"": measured}
    for label, df in frames.items():
        if df is None or not len(df):
            continue
        where = provenance_label(df.attrs.get("provenance"), "live")
        fig.add_trace(go.Scatter(x=df["size"], y=df["reg_us"], mode="markers",
                                 name=f"{label}: {where}" if label else where))
    fig.update_layout(title="Memory registration cost: modelled (lab 03 model) vs published",
                      xaxis_title="buffer size (bytes)", yaxis_title="registration time (µs)",
                      legend={"orientation": "h", "y": -0.25}, height=480)
    fig.update_xaxes(type="log", **SIZE_TICKS)
    fig.update_yaxes(type="log")
    return fig


def state_machine_figure() -> go.Figure:
    """The registration state machine as a plotly diagram: ``ibv_reg_mr`` on host memory, on a
    GPU pointer (with and without a peer-memory client) and the dma-buf route."""
    import plotly.graph_objects as go

    boxes = {  # name: (x, y, text, colour)
        "call": (0.5, 5, "ibv_reg_mr(pd, addr, len)", "#dbe9f6"),
        "host": (0.5, 4, "ib_umem_get: is addr<br>ordinary host memory?", "#f2f2f2"),
        "pin": (0.5, 3, "pin pages (get_user_pages)<br>map for DMA (IOMMU)", "#f2f2f2"),
        "peer": (2.5, 4, "ask peer-memory clients:<br>does one own addr?", "#f2f2f2"),
        "p2p": (2.5, 3, "nvidia-peermem: nvidia_p2p_get_pages<br>(64 KiB GPU pages in BAR1)", "#f2f2f2"),
        "efault": (4.5, 4, "no client claims it:<br>EFAULT (\"Couldn't allocate MR\")", "#f8d0d0"),
        "mr": (1.5, 1.7, "MR created: HCA translation table<br>lkey / rkey returned", "#d4edd4"),
        "dcall": (4.5, 2.9, "cuMemGetHandleForAddressRange<br>(DMA_BUF_FD) → fd", "#dbe9f6"),
        "dreg": (4.5, 1.7, "ibv_reg_dmabuf_mr(pd, off, len, iova, fd)<br>dma_buf_attach + map", "#f2f2f2"),
    }
    arrows = [("call", "host", ""), ("host", "pin", "yes"), ("host", "peer", "no"), ("peer", "p2p", "yes"),
              ("peer", "efault", "no"), ("pin", "mr", ""), ("p2p", "mr", ""), ("dcall", "dreg", ""),
              ("dreg", "mr", "")]
    fig = go.Figure()
    w, h = 0.85, 0.33
    for x, y, text, colour in boxes.values():
        fig.add_shape(type="rect", x0=x - w, x1=x + w, y0=y - h, y1=y + h, fillcolor=colour,
                      line={"color": "#555"})
        fig.add_annotation(x=x, y=y, text=text, showarrow=False, font={"size": 11})
    for a, b, label in arrows:
        (xa, ya, *_), (xb, yb, *_) = boxes[a], boxes[b]
        # arrows start and end on box edges so the heads stay visible
        dx, dy = xb - xa, yb - ya
        sx = (w / abs(dx)) if dx else math.inf
        sy = (h / abs(dy)) if dy else math.inf
        s = min(sx, sy)
        fig.add_annotation(x=xb - dx * s, y=yb - dy * s, ax=xa + dx * s, ay=ya + dy * s, xref="x", yref="y",
                           axref="x", ayref="y", showarrow=True, arrowhead=3, arrowwidth=1.5, text="")
        if label:
            fig.add_annotation(x=(xa + xb) / 2, y=(ya + yb) / 2, text=f"<i>{label}</i>", showarrow=False,
                               font={"size": 11, "color": "#333"}, bgcolor="white")
    fig.add_annotation(x=4.5, y=3.45, text="<b>dma-buf route</b> (Linux 5.12+, CUDA 11.7+, no extra module)",
                       showarrow=False, font={"size": 11})
    fig.add_annotation(x=1.5, y=5.5, text="<b>classic route</b> (peer-memory client: nv_peer_mem, today nvidia-peermem)",
                       showarrow=False, font={"size": 11})
    fig.update_xaxes(visible=False, range=[-0.5, 5.5])
    fig.update_yaxes(visible=False, range=[1.2, 5.8])
    fig.update_layout(title="What ibv_reg_mr does with an address (diagram, no data)", height=520,
                      plot_bgcolor="white", margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def measure_registration(sizes: SizeSpec, memory: str = "host") -> tuple[pd.DataFrame | None, str]:
    """Live registration cost on this machine's HCA: ``(DataFrame with size and reg_us, why)``,
    or ``(None, why not)`` when there is no verbs module or no RDMA device."""
    verbs, st = verbs_status()
    if verbs is None or not st.get("devices"):
        return None, st.get("reason") or "no RDMA device on this machine"
    try:
        df = verbs.registration_cost(sizes, memory)
    except Exception as exc:  # no HCA, no GPU, EFAULT without a peer-memory client: say it
        return None, f"{type(exc).__name__}: {exc}"
    if "reg_us" not in df.columns and "reg_us_p50" in df.columns:
        df = df.rename(columns={"reg_us_p50": "reg_us"})
    if "reg_us" not in df.columns:
        cols = [c for c in df.columns if c.startswith("reg") and c.endswith("_us")]
        if not cols:
            return None, f"registration_cost returned no registration time column ({list(df.columns)})"
        df = df.rename(columns={cols[0]: "reg_us"})
    return df, "measured live"


def registration_summary(profile: str = "volta-dgx1", sizes: Sequence[int] | np.ndarray | None = None,
                         dereg_us: float = 677.0, lookup_us: float = 0.5) -> pd.DataFrame:
    """For each size: GPU pages, modelled GPU registration time, the modelled pinned D2H copy
    time of ``profile`` (what a pre-registered bounce buffer costs per message), the sends after
    which registering once pays off (deregistration ``dereg_us``: 677 µs by default, gdrcopy's
    README table for ``gdr_unpin_buffer`` of 64 KB on a V100), and whether the registration fits
    the profile's BAR1.
    DataFrame with ``attrs["provenance"]`` kind modelled."""
    import pandas as pd

    from .. import model

    sizes = np.asarray(sizes if sizes is not None else [1 << k for k in (12, 16, 20, 24, 28, 30)], dtype=np.int64)
    gpu = REGISTRATION_MODELS["GPU (peer memory / dma-buf)"]
    copy_us = np.asarray(model.stage_us(profile, "copy-d2h-pinned", sizes.astype(float)), dtype=float)
    rows = []
    saving = copy_us - lookup_us   # what each reuse saves over a copy into a bounce buffer
    for size, reg, copy, save in zip(sizes, gpu.cost_us(sizes), copy_us, saving):
        try:
            model.register_mr(profile, int(size))
            fits = "yes"
        except Exception as exc:  # ENOMEM past BAR1: the answer, not a failure of the lab
            fits = f"no (errno {getattr(exc, 'errno', '?')})"
        rows.append({"size": int(size), "gpu_pages": int(gpu.pages(size)), "reg_us": float(reg),
                     "copy_us": float(copy),
                     "breakeven_sends": (max(1, math.ceil((float(reg) + dereg_us) / float(save)))
                                         if save > 0 else None),
                     "fits_bar1": fits})
    df = pd.DataFrame(rows)
    prov.attach(df, prov.modelled(f"{profile} + lab 03 registration model"), column=False)
    return df


def registration_explorer(profile: str = "volta-dgx1") -> w.VBox | pd.DataFrame:
    """A size slider and a profile menu over :func:`registration_summary` (one row, redrawn on
    every change). In quick mode: the summary table for a few sizes."""
    from . import quick_mode

    if quick_mode():
        return registration_summary(profile)
    import ipywidgets as w

    from .. import model

    size_box = w.SelectionSlider(options=[(f"{(1 << k) >> 10} KiB" if k < 20 else f"{(1 << k) >> 20} MiB", 1 << k)
                                          for k in range(12, 31)], value=1 << 16, description="buffer")
    prof_box = w.Dropdown(options=list(model.profiles()), value=profile, description="profile")
    out = w.HTML()

    def redraw(_change: object = None) -> None:
        row = registration_summary(prof_box.value, [size_box.value]).iloc[0]
        out.value = (f"<b>modelled</b> ({prof_box.value} + lab 03 registration model): "
                     f"{row.gpu_pages} GPU pages; registration ≈ {row.reg_us:,.0f} µs; "
                     f"copy through a pre-registered buffer ≈ {row.copy_us:,.1f} µs per message; "
                     f"registering pays off after {row.breakeven_sends} sends; fits BAR1: {row.fits_bar1}")

    size_box.observe(redraw, names="value")
    prof_box.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([size_box, prof_box]), out])
