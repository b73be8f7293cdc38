"""Schematic drawings (boxes and arrows, plotly shapes) of the data paths the labs measure.

They are pictures, not data: each title says "diagram". No images are fetched from anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, TypeAlias

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["Box", "Arrow", "Diagram", "block_diagram", "diagram", "DIAGRAMS"]

#: A box: (name, x0, y0, x1, y1, label, colour), on a 10 x 4 canvas.
Box: TypeAlias = tuple[str, float, float, float, float, str, str]
#: An arrow between two boxes: (from, to, label, colour, dash), optionally followed by the offset in
#: y of its label from the arrow's midpoint (default 0.18).
Arrow: TypeAlias = tuple[str, str, str, str, str] | tuple[str, str, str, str, str, float]
_LABEL_DY = 0.18

_GPU, _HOST, _NIC, _BUS, _CPU = "#76b900", "#9ecae1", "#fdae6b", "#d9d9d9", "#c6dbef"
_STAGED, _DIRECT, _GREY = "#d62728", "#2ca02c", "#7f7f7f"


def _edge(box: tuple[float, float, float, float, float, float], dx: float, dy: float) -> tuple[float, float]:
    """Where the ray from the centre of ``box`` along (dx, dy) leaves it."""
    cx, cy, x0, y0, x1, y1 = box
    tx = (x1 - x0) / 2 / abs(dx) if dx else float("inf")
    ty = (y1 - y0) / 2 / abs(dy) if dy else float("inf")
    t = min(tx, ty)
    return cx + t * dx, cy + t * dy


def block_diagram(boxes: Iterable[Box], arrows: Iterable[Arrow] = (), title: str = "",
                  width: int = 760, height: int = 340) -> go.Figure:
    """A figure of labelled boxes joined by labelled arrows (from edge to edge, along the line
    between the box centres); each label sits just above its arrow's midpoint."""
    import plotly.graph_objects as go

    fig = go.Figure()
    geo: dict[str, tuple[float, float, float, float, float, float]] = {}
    for name, x0, y0, x1, y1, label, colour in boxes:
        fig.add_shape(type="rect", x0=x0, y0=y0, x1=x1, y1=y1, fillcolor=colour, opacity=0.9,
                      line={"color": "#333", "width": 1}, layer="below")
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=label, showarrow=False, font={"size": 12})
        geo[name] = ((x0 + x1) / 2, (y0 + y1) / 2, x0, y0, x1, y1)
    for arrow in arrows:
        a, b, label, colour, dash = arrow[:5]
        label_dy = arrow[5] if len(arrow) == 6 else _LABEL_DY
        if a not in geo or b not in geo:
            raise ValueError(f"arrow {a!r} -> {b!r} joins an unknown box")
        dx, dy = geo[b][0] - geo[a][0], geo[b][1] - geo[a][1]
        xa, ya = _edge(geo[a], dx, dy)
        xb, yb = _edge(geo[b], -dx, -dy)
        fig.add_annotation(x=xb, y=yb, ax=xa, ay=ya, xref="x", yref="y", axref="x", ayref="y", text="",
                           showarrow=True, arrowhead=3, arrowsize=1.2, arrowwidth=3 if dash == "solid" else 2,
                           arrowcolor=colour)
        if label:
            fig.add_annotation(x=(xa + xb) / 2, y=(ya + yb) / 2 + label_dy, text=label, showarrow=False,
                               font={"size": 11, "color": colour}, bgcolor="rgba(255,255,255,0.85)")
    fig.update_layout(title=f"{title} (diagram, not data)" if title else "diagram", width=width, height=height,
                      xaxis={"visible": False, "range": [0, 10], "fixedrange": True},
                      yaxis={"visible": False, "range": [0, 4], "fixedrange": True},
                      margin={"l": 10, "r": 10, "t": 50, "b": 10}, plot_bgcolor="white", showlegend=False)
    return fig


@dataclass(frozen=True)
class Diagram:
    """A named drawing: its title, then the boxes and the arrows :func:`block_diagram` draws."""

    title: str
    boxes: tuple[Box, ...]
    arrows: tuple[Arrow, ...] = ()


DIAGRAMS: dict[str, Diagram] = {
    "transfer-paths": Diagram(
        "staged (red) vs GPUDirect RDMA (green)",
        (("gpu", 0.3, 0.4, 2.5, 1.4, "GPU memory", _GPU),
         ("bounce", 2.0, 2.6, 4.4, 3.6, "pinned bounce buffer", _HOST),
         ("wirebuf", 5.6, 2.6, 8.0, 3.6, "NIC's registered<br>host buffer", _HOST),
         ("nic", 7.5, 0.4, 9.7, 1.4, "NIC (HCA)", _NIC)),
        (("gpu", "bounce", "1. cudaMemcpy", _STAGED, "solid"),
         ("bounce", "wirebuf", "2. CPU memcpy", _STAGED, "solid"),
         ("wirebuf", "nic", "3. NIC DMA", _STAGED, "solid"),
         ("gpu", "nic", "GPUDirect RDMA: the NIC reads GPU memory through BAR1", _DIRECT, "dot"))),
    "bar1": Diagram(
        "a GPU's PCIe BARs: BAR1 exposes GPU memory to the bus (sizes and sysfs slots: the H200)",
        (("vram", 0.3, 0.8, 2.6, 2.0, "GPU memory (HBM)", _GPU),
         ("bar0", 3.7, 3.1, 6.3, 3.7, "BAR0: registers<br>(H200: 16 MiB, sysfs slot 0)", _CPU),
         ("bar3", 3.7, 2.3, 6.3, 2.9, "third BAR, the driver's<br>(H200: 32 MiB, sysfs slot 4)", _CPU),
         ("bar1", 3.7, 1.0, 6.3, 1.8, "BAR1: window onto GPU memory<br>(H200: 256 GiB, sysfs slot 2;<br>"
          "slot 1 where BAR0 is 32-bit)", _GPU),
         ("nic", 8.0, 1.0, 9.8, 1.8, "NIC / other device", _NIC),
         ("cpu", 8.5, 0.05, 9.8, 0.6, "CPU (mmap)", _CPU)),
        (("nic", "bar1", "PCIe reads/writes", _DIRECT, "solid"),
         ("bar1", "vram", "mapped pages", _DIRECT, "solid"),
         ("cpu", "bar1", "gdrcopy maps BAR1 for the CPU;<br>driver 580 refuses to mmap a dma-buf fd", _GREY, "dot", -0.5))),
    "copy-engine": Diagram(
        "pageable (red) vs pinned (green) host-to-device copies",
        (("pageable", 0.3, 2.6, 2.5, 3.6, "pageable<br>host memory", _HOST),
         ("staging", 3.4, 2.6, 5.6, 3.6, "driver's pinned<br>staging buffer", _HOST),
         ("pinned", 0.3, 0.3, 2.5, 1.5, "pinned host memory<br>(cudaHostAlloc,<br>cudaHostRegister)", _HOST),
         ("ce", 6.3, 1.4, 7.9, 2.4, "copy engine<br>(DMA)", _GPU),
         ("gpu", 8.6, 1.4, 9.8, 2.4, "GPU<br>memory", _GPU)),
        (("pageable", "staging", "CPU copy", _STAGED, "solid"), ("staging", "ce", "DMA", _STAGED, "solid"),
         ("pinned", "ce", "DMA straight from your pages", _DIRECT, "solid"),
         ("ce", "gpu", "", _DIRECT, "solid"))),
    "p2p": Diagram(
        "GPU to GPU: P2P DMA (green) vs staged through host (red)",
        (("gpu0", 0.3, 2.4, 2.5, 3.4, "GPU 0", _GPU), ("gpu1", 7.5, 2.4, 9.7, 3.4, "GPU 1", _GPU),
         ("host", 3.9, 0.3, 6.1, 1.3, "host memory", _HOST)),
        (("gpu0", "gpu1", "peer access on: one DMA over NVLink or PCIe", _DIRECT, "solid"),
         ("gpu0", "host", "off: copy out", _STAGED, "solid"),
         ("host", "gpu1", "and copy in", _STAGED, "solid"))),
}


def diagram(name: str) -> go.Figure:
    """One of the named diagrams: ``transfer-paths``, ``bar1``, ``copy-engine``, ``p2p``."""
    if name not in DIAGRAMS:
        raise ValueError(f"unknown diagram {name!r}; known: {', '.join(DIAGRAMS)}")
    d = DIAGRAMS[name]
    return block_diagram(d.boxes, d.arrows, d.title)
