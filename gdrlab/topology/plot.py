"""A plotly drawing of the PCIe tree: sockets, host bridges, root ports, switches, GPUs and NICs."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import InvalidArgument
from ._topo import Topology
from ._tree import Node, path_between

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["figure"]

_STYLE = {  # kind: (colour, symbol, size)
    "machine": ("#444444", "square", 18),
    "package": ("#1f77b4", "square", 16),
    "hostbridge": ("#17becf", "diamond", 13),
    "rootport": ("#7f7f7f", "triangle-down", 10),
    "switch": ("#9467bd", "hexagon", 14),
    "gpu": ("#2ca02c", "circle", 16),
    "nic": ("#ff7f0e", "circle", 16),
    "device": ("#bbbbbb", "circle", 8),
}


_Drawn = tuple[dict[int, list[Node]], Callable[[Node], Node], Callable[[Node], str], Callable[[Node], str]]


def _drawn_tree(topo: Topology) -> _Drawn:
    """Collapse each switch's upstream and downstream ports into one node; keep only branches
    that lead to a GPU or NIC (and every socket, so the machine's shape stays visible)."""
    names = {id(n): name for name, n in topo._nodes.items()}
    wanted: set[int] = set()
    for n in topo._nodes.values():
        wanted.update(id(a) for a in n.ancestors())

    def rep(n: Node) -> Node:
        return n.parent if n.role == "dsp" and n.parent is not None else n

    def kind(n: Node) -> str:
        if id(n) in names:
            return topo.device(names[id(n)])["kind"]
        if n.kind == "bridge":
            return "switch" if n.role == "usp" else "rootport"
        return n.kind

    def label(n: Node) -> str:
        if id(n) in names:
            return names[id(n)]
        if n.kind == "package":
            return f"Socket {n.socket}" if n.socket is not None else n.label
        if n.kind == "bridge" and n.role == "usp":
            return f"switch {n.bus_id}"
        if n.kind == "bridge":
            return f"root port {n.bus_id}"
        if n.kind == "hostbridge":
            return n.label.replace("HostBridge ", "host bridge ")
        return n.label

    children: dict[int, list[Node]] = {}

    def visit(n: Node, drawn_parent: Node | None) -> None:
        me = rep(n)
        if me is not drawn_parent:
            if drawn_parent is not None:
                children.setdefault(id(drawn_parent), []).append(me)
            drawn_parent = me
        for c in n.children:
            if id(c) in wanted or c.kind == "package":
                visit(c, drawn_parent)

    visit(topo.root, None)
    return children, rep, kind, label


def _edge(i: int, j: int) -> tuple[int, int]:
    return (i, j) if i <= j else (j, i)


def _highlighted(topo: Topology, highlight: Sequence[str], rep: Callable[[Node], Node],
                 pos: dict[int, tuple[float, float]]) -> tuple[set[tuple[int, int]], str]:
    """The drawn edges on the path between the two named devices, and the title's note of its code."""
    a, b = highlight
    path, _ = path_between(topo.node(a), topo.node(b))
    seq: list[Node] = []
    for n in path:
        r = rep(n)
        if id(r) in pos and (not seq or seq[-1] is not r):
            seq.append(r)
    edges = {_edge(id(x), id(y)) for x, y in zip(seq, seq[1:])}
    code = topo.matrix()[a][b]
    pcie = topo.pcie_code(a, b)[0]
    return edges, f"<br>{a} to {b}: {code}" + (f" (PCIe path {pcie})" if pcie != code else "")


def figure(topo: Topology, highlight: Sequence[str] | None = None) -> go.Figure:
    """Draw ``topo``'s tree with plotly; ``highlight=("GPU0", "mlx5_0")`` colours that pair's path.

    Returns a ``plotly.graph_objects.Figure`` whose title names the source (live sysfs of host X
    or recorded hwloc XML of machine Y) and, with a highlight, the pair's code.
    """
    try:
        import plotly.graph_objects as go
    except ImportError as exc:  # pragma: no cover
        raise InvalidArgument("plotly is needed for topology figures (pip install plotly)") from exc
    children, rep, kind, label = _drawn_tree(topo)
    pos: dict[int, tuple[float, float]] = {}
    nodes: list[Node] = []
    next_x = [0.0]

    def place(n: Node, depth: int) -> float:
        kids = children.get(id(n), [])
        if kids:
            xs = [place(k, depth + 1) for k in kids]
            x = sum(xs) / len(xs)
        else:
            x = next_x[0]
            next_x[0] += 1.0
        pos[id(n)] = (x, -depth)
        nodes.append(n)
        return x

    place(topo.root, 0)
    hl_edges, title_tail = _highlighted(topo, highlight, rep, pos) if highlight else (set(), "")

    fig = go.Figure()
    for hl in (False, True):
        xs, ys = [], []
        for parent_id, kids in children.items():
            for k in kids:
                if (_edge(parent_id, id(k)) in hl_edges) != hl:
                    continue
                x0, y0 = pos[parent_id]
                x1, y1 = pos[id(k)]
                xs += [x0, x1, None]
                ys += [y0, y1, None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=hl and bool(xs),
                                 name="highlighted path" if hl else "PCIe link",
                                 line=dict(color="#d62728" if hl else "#c7c7c7", width=5 if hl else 1.5)))
    by_kind: dict[str, list[Node]] = {}
    for n in nodes:
        by_kind.setdefault(kind(n), []).append(n)
    for kname, members in by_kind.items():
        colour, symbol, size = _STYLE.get(kname, _STYLE["device"])
        hover = []
        for n in members:
            extra = [f"bus {n.bus_id}"] if n.bus_id else []
            loc = n.locality()
            if loc:
                extra.append("NUMA " + ",".join(str(i) for i in sorted(loc)))
            hover.append("<br>".join([label(n)] + extra))
        fig.add_trace(go.Scatter(
            x=[pos[id(n)][0] for n in members], y=[pos[id(n)][1] for n in members],
            mode="markers+text", name=kname, text=[label(n) for n in members], hovertext=hover,
            hoverinfo="text", textposition="bottom center", textfont=dict(size=9),
            marker=dict(color=colour, symbol=symbol, size=size, line=dict(color="white", width=1))))
    fig.update_layout(
        title=f"PCIe topology, {topo.source} ({topo.provenance}){title_tail}",
        xaxis=dict(visible=False), yaxis=dict(visible=False), plot_bgcolor="white",
        height=300 + 60 * (max((-p[1] for p in pos.values()), default=0)),
        margin=dict(l=20, r=20, t=80, b=20))
    fig.layout.meta = {"provenance": topo.provenance, "source": topo.source}
    return fig
