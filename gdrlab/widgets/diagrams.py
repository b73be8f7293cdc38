"""Schematic drawings (boxes and arrows, plotly shapes) of the data paths the labs measure.

They are pictures, not data: each title says "diagram". No images are fetched from anywhere.
"""
from __future__ import annotations

from typing import Iterable

__all__ = ["Box", "Arrow", "block_diagram", "diagram", "DIAGRAMS"]

Box = tuple  # (name, x0, y0, x1, y1, label, colour)
Arrow = tuple  # (from, to, label, colour, dash)

_GPU, _HOST, _NIC, _BUS, _CPU = "#76b900", "#9ecae1", "#fdae6b", "#d9d9d9", "#c6dbef"


def block_diagram(boxes: Iterable[Box], arrows: Iterable[Arrow] = (), title: str = "",
                  width: int = 760, height: int = 340):
    """A figure of labelled boxes joined by labelled arrows (box centres are the arrow ends)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    centre = {}
    for name, x0, y0, x1, y1, label, colour in boxes:
        fig.add_shape(type="rect", x0=x0, y0=y0, x1=x1, y1=y1, fillcolor=colour, opacity=0.9,
                      line={"color": "#333", "width": 1}, layer="below")
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=label, showarrow=False, font={"size": 12})
        centre[name] = ((x0 + x1) / 2, (y0 + y1) / 2, x0, y0, x1, y1)
    for i, (a, b, label, colour, dash) in enumerate(arrows):
        if a not in centre or b not in centre:
            raise ValueError(f"arrow {a!r} -> {b!r} joins an unknown box")
        xa, ya, *_ = centre[a]
        xb, yb, *_ = centre[b]
        off = 0.08 * (i % 3 - 1)  # keep parallel arrows apart
        fig.add_annotation(x=xb, y=yb + off, ax=xa, ay=ya + off, xref="x", yref="y", axref="x", ayref="y",
                           showarrow=True, arrowhead=3, arrowsize=1.2, arrowwidth=3 if dash == "solid" else 2,
                           arrowcolor=colour, text="", standoff=18, startstandoff=18)
        if label:
            fig.add_annotation(x=(xa + xb) / 2, y=(ya + yb) / 2 + off + 0.12, text=label, showarrow=False,
                               font={"size": 11, "color": colour}, bgcolor="rgba(255,255,255,0.8)")
    fig.update_layout(title=f"{title} (diagram, not data)" if title else "diagram", width=width, height=height,
                      xaxis={"visible": False, "range": [0, 10]}, yaxis={"visible": False, "range": [0, 4]},
                      margin={"l": 10, "r": 10, "t": 50, "b": 10}, plot_bgcolor="white", showlegend=False)
    return fig


def _paths():
    boxes = [("gpu", 0.3, 2.6, 2.3, 3.7, "GPU memory", _GPU), ("bounce", 3.0, 2.6, 5.0, 3.7, "pinned bounce<br>buffer", _HOST),
             ("wirebuf", 5.7, 2.6, 7.7, 3.7, "NIC's registered<br>host buffer", _HOST),
             ("nic", 8.2, 1.4, 9.8, 2.6, "NIC (HCA)", _NIC), ("pcie", 0.3, 0.2, 9.8, 0.9, "PCIe", _BUS)]
    arrows = [("gpu", "bounce", "staged: cudaMemcpy", "#d62728", "solid"),
              ("bounce", "wirebuf", "CPU memcpy", "#d62728", "solid"),
              ("wirebuf", "nic", "NIC DMA", "#d62728", "solid"),
              ("gpu", "nic", "gdr: NIC reads GPU memory through BAR1", "#2ca02c", "dot")]
    return block_diagram(boxes, arrows, "staged (red) vs GPUDirect RDMA (green)")


def _bar1():
    boxes = [("vram", 0.3, 2.4, 3.3, 3.8, "GPU memory (HBM)", _GPU),
             ("bar0", 4.0, 3.1, 6.4, 3.8, "BAR0: registers (16 MiB)", _CPU),
             ("bar1", 4.0, 2.2, 6.4, 2.9, "BAR1 window: 256 GiB on H200<br>(sysfs lists it as BAR2)", _GPU),
             ("bar3", 4.0, 1.3, 6.4, 2.0, "third BAR (sysfs BAR4, 32 MiB)", _CPU),
             ("nic", 7.4, 2.2, 9.7, 2.9, "NIC / other device", _NIC),
             ("cpu", 7.4, 0.3, 9.7, 1.0, "CPU (mmap)", _CPU)]
    arrows = [("nic", "bar1", "PCIe reads/writes", "#2ca02c", "solid"),
              ("bar1", "vram", "mapped pages", "#2ca02c", "solid"),
              ("cpu", "bar1", "gdrcopy maps it; dma-buf does not", "#7f7f7f", "dot")]
    return block_diagram(boxes, arrows, "a GPU's PCIe BARs: BAR1 exposes GPU memory to the bus")


def _copy():
    boxes = [("pageable", 0.3, 2.6, 2.5, 3.7, "pageable<br>host memory", _HOST),
             ("staging", 3.6, 2.6, 5.8, 3.7, "driver's pinned<br>staging buffer", _HOST),
             ("pinned", 0.3, 0.6, 2.5, 1.7, "pinned host memory<br>(cudaHostAlloc /<br>cudaHostRegister)", _HOST),
             ("ce", 6.6, 1.6, 8.0, 2.7, "copy engine<br>(DMA)", _GPU), ("gpu", 8.5, 1.6, 9.8, 2.7, "GPU<br>memory", _GPU)]
    arrows = [("pageable", "staging", "CPU copy", "#d62728", "solid"), ("staging", "ce", "DMA", "#d62728", "solid"),
              ("pinned", "ce", "DMA straight from your pages", "#2ca02c", "solid"),
              ("ce", "gpu", "", "#2ca02c", "solid")]
    return block_diagram(boxes, arrows, "pageable (red) vs pinned (green) host-to-device copies")


def _p2p():
    boxes = [("gpu0", 0.3, 2.4, 2.5, 3.6, "GPU 0", _GPU), ("gpu1", 7.5, 2.4, 9.7, 3.6, "GPU 1", _GPU),
             ("host", 3.9, 0.3, 6.1, 1.4, "host memory", _HOST), ("link", 3.9, 2.7, 6.1, 3.3, "NVLink / PCIe", _BUS)]
    arrows = [("gpu0", "gpu1", "peer access on: one DMA", "#2ca02c", "solid"),
              ("gpu0", "host", "peer access off:", "#d62728", "solid"),
              ("host", "gpu1", "two copies through host", "#d62728", "solid")]
    return block_diagram(boxes, arrows, "GPU to GPU: P2P DMA (green) vs staged through host (red)")


DIAGRAMS = {"transfer-paths": _paths, "bar1": _bar1, "copy-engine": _copy, "p2p": _p2p}


def diagram(name: str):
    """One of the named diagrams: ``transfer-paths``, ``bar1``, ``copy-engine``, ``p2p``."""
    if name not in DIAGRAMS:
        raise ValueError(f"unknown diagram {name!r}; known: {', '.join(DIAGRAMS)}")
    return DIAGRAMS[name]()
