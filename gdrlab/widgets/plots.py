"""Plain plotly figures of sweeps, usable without widgets: every trace says where its points came
from (live, recorded on named hardware, modelled with a profile, imported from another tool's
output) and both axes carry units."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, TypedDict, Union

from ..recorded import provenance_label

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from ..model import Profile
    from .quick import SizeSpec

__all__ = ["AXIS_TITLES", "axis_title", "y_column", "plot_sweep", "model_frame", "model_frames",
           "add_frame_trace", "frames_from", "byte_ticks", "Ticks", "Frames"]


class Ticks(TypedDict):
    """Tick positions and their labels, as plotly's axis ``tickvals`` and ``ticktext`` take them."""

    tickvals: list[int]
    ticktext: list[str]


#: Sweeps to plot: one DataFrame, several, or ``{label: DataFrame}`` (None entries are skipped).
Frames = Union["pd.DataFrame", Iterable[Union["pd.DataFrame", None]], Mapping[Any, Union["pd.DataFrame", None]], None]

AXIS_TITLES = {
    "size": "message size (bytes)",
    "bw_gbps": "bandwidth (GB/s)",
    "lat_us": "latency (µs)",
    "lat_p50_us": "latency, median (µs)",
    "lat_min_us": "latency, minimum (µs)",
    "lat_p99_us": "latency, 99th percentile (µs)",
    "lat_mean_us": "latency, mean (µs)",
    "allocated_bytes": "allocated (bytes)",
    "bar1_used_bytes": "BAR1 used (bytes)",
    "bar1_delta_bytes": "BAR1 used, increase (bytes)",
    "bar1_free_after_bytes": "BAR1 left after registering (bytes)",
}
# A model frame has lat_us; measured frames have lat_p50_us etc. Plot the nearest match.
_Y_FALLBACKS = {"lat_p50_us": ("lat_us",), "lat_min_us": ("lat_us",), "lat_mean_us": ("lat_us",),
                "lat_p99_us": ("lat_us",), "lat_us": ("lat_p50_us",)}
_DASH = {"live": "solid", "recorded": "dot", "modelled": "dash", "fitted": "dashdot", "imported": "longdashdot"}
_SYMBOL = {"live": "circle", "recorded": "square", "modelled": None, "fitted": None, "imported": "diamond"}


def byte_ticks(low: float, high: float) -> Ticks:
    """Tick values and labels in binary units (``4K``, ``1M``, ``256G``) for a log axis of bytes
    from ``low`` to ``high``; plotly's own labels would write 1e9 as ``1B`` (billion), not bytes."""
    import math

    lo = max(0, math.floor(math.log2(max(low, 1))))
    hi = max(lo + 1, math.ceil(math.log2(max(high, 1))))
    step = 2 if hi - lo <= 16 else 4 if hi - lo <= 32 else 6
    vals = [1 << k for k in range(lo - lo % step, hi + step, step)]
    names = []
    for v in vals:
        for unit, k in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
            if v >= 1 << k:
                names.append(f"{v >> k}{unit}")
                break
        else:
            names.append(str(v))
    return {"tickvals": vals, "ticktext": names}


def _is_bytes(column: str) -> bool:
    return column == "size" or column.endswith("_bytes")


def _axis(column: str, log: bool, values: list[float]) -> dict[str, Any]:
    axis: dict[str, Any] = {"title": axis_title(column), "type": "log" if log else "linear"}
    finite = [v for v in values if v is not None and v == v and v > 0]
    if log and _is_bytes(column) and finite:
        axis.update(byte_ticks(min(finite), max(finite)))
    return axis


def axis_title(column: str) -> str:
    """``"bw_gbps"`` -> ``"bandwidth (GB/s)"``; unknown columns keep their name."""
    return AXIS_TITLES.get(column, column)


def y_column(df: pd.DataFrame, y: str) -> str:
    """The column of ``df`` to plot for ``y`` (a model's ``lat_us`` stands in for ``lat_p50_us``)."""
    if y in df.columns:
        return y
    for alt in _Y_FALLBACKS.get(y, ()):
        if alt in df.columns:
            return alt
    raise ValueError(f"cannot plot {y!r}: the data has columns {', '.join(map(str, df.columns))}")


def frames_from(data: Frames) -> list[tuple[str | None, pd.DataFrame]]:
    """Normalise a DataFrame, a list of DataFrames or a ``{label: DataFrame}`` mapping."""
    if data is None:
        return []
    if hasattr(data, "columns"):
        return [(None, data)]
    if isinstance(data, Mapping):
        return [(str(k), v) for k, v in data.items() if v is not None]
    return [(None, d) for d in data if d is not None]


def _kind(df: pd.DataFrame) -> str:
    prov = df.attrs.get("provenance") if hasattr(df, "attrs") else None
    if not isinstance(prov, dict):
        raise ValueError("every dataset needs a provenance: set df.attrs['provenance'] = "
                         "{'kind': 'live'|'recorded'|'modelled'|'imported', ...} (gdrlab.provenance)")
    if prov.get("kind") == "modelled" and prov.get("fit"):
        return "fitted"   # a learner's fit, drawn like a model line but not called the kit's model
    return str(prov.get("kind", ""))


_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22")


def add_frame_trace(fig: go.Figure, df: pd.DataFrame, *, x: str = "size", y: str = "bw_gbps",
                    label: str | None = None, split: str | None = None,
                    colours: dict[str, str] | None = None) -> None:
    """Add one trace per group of ``df`` (grouped by column ``split`` when given) to ``fig``.

    ``colours`` maps series names to colours and is filled as new names appear, so a measured
    series and the model of the same series share a colour (the model dashed)."""
    import plotly.graph_objects as go

    colours = {} if colours is None else colours

    kind = _kind(df)
    prov = provenance_label(df, short=True)
    ycol = y_column(df, y)
    groups = [(None, df)] if not split or split not in df.columns else list(df.groupby(split, sort=False))
    for key, g in groups:
        g = g.sort_values(x)
        name = " ".join(str(p) for p in (label, key) if p is not None)
        colour = colours.setdefault(name or prov, _PALETTE[len(colours) % len(_PALETTE)])
        fig.add_trace(go.Scatter(
            x=g[x].tolist(), y=g[ycol].tolist(), name=f"{name} — {prov}" if name else prov,
            # a model is a line; a few measured sizes far apart are points, not a curve between them
            mode="lines" if kind in ("modelled", "fitted") else ("markers" if len(g) < 6 else "lines+markers"),
            line={"dash": _DASH.get(kind, "solid"), "color": colour},
            marker={"symbol": _SYMBOL.get(kind) or "circle"},
            hovertemplate=f"%{{x:,}} B: %{{y:.4g}}<extra>{name or kind} ({kind})</extra>",
        ))


def plot_sweep(data: Frames, y: str = "bw_gbps", *, x: str = "size", split: str | None = None,
               model: Frames = None, title: str = "", log_x: bool = True, log_y: bool | None = None,
               height: int = 420, colours: dict[str, str] | None = None) -> go.Figure:
    """A figure of one or more sweeps against message size.

    Parameters
    ----------
    data : DataFrame, list of DataFrames or ``{label: DataFrame}``
        Measured or recorded sweeps; each must carry ``attrs["provenance"]``.
    y : str
        ``"bw_gbps"`` or a latency column (``"lat_p50_us"``...).
    split : str, optional
        A column whose values become separate traces (``"path"``, ``"memory"``...).
    model : same forms as ``data``, optional
        Modelled curves (from :func:`model_frame`) drawn dashed.
    log_y : bool, optional
        Default: log for latency, linear for bandwidth.
    colours : dict, optional
        ``{series name: colour}`` for series that must keep a colour (one a diagram uses);
        the others take the palette's next colour.

    Returns
    -------
    plotly.graph_objects.Figure
        Title ends with the provenance of the data shown; legend entries carry each trace's.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    kinds: list[str] = []
    colours = dict(colours or {})   # series name -> colour, e.g. to match a diagram's
    for label, df in frames_from(data) + frames_from(model):
        add_frame_trace(fig, df, x=x, y=y, label=label, split=split, colours=colours)
        kind = _kind(df)
        if kind not in kinds:
            kinds.append(kind)
    if log_y is None:
        log_y = y != "bw_gbps"
    what = " + ".join(kinds) if kinds else "no data"
    # The legend sits below the plot, one line per trace: grow the figure rather than the plot shrink.
    height = height + 20 * max(0, len(fig.data) - 3)
    fig.update_layout(
        title=f"{title} ({what})" if title else what, height=height,
        xaxis=_axis(x, log_x, [v for t in fig.data for v in (t.x or ())]),
        yaxis=_axis(y, log_y, [v for t in fig.data for v in (t.y or ())]),
        legend={"orientation": "h", "y": -0.25}, margin={"t": 60, "b": 40},
    )
    return fig


def model_frame(profile: str | Profile, path: str, sizes: SizeSpec, placement: str | None = None, *,
                chunk: int | None = None, depth: int | None = None, wire: str | None = None,
                **overrides: float) -> pd.DataFrame:
    """``gdrlab.model.predict`` with the provenance every plot needs (kind modelled, profile, and
    the keywords given: ``chunk``, ``depth``, ``wire`` and parameter overrides)."""
    from .. import model

    df = model.predict(profile, path, sizes, placement=placement, chunk=chunk, depth=depth, wire=wire, **overrides)
    from .. import provenance

    given: dict[str, float | str] = {k: v for k, v in (("chunk", chunk), ("depth", depth), ("wire", wire))
                                     if v is not None}
    given.update(overrides)
    prov = provenance.derived(df, overrides=given) if given else provenance.derived(df)
    return provenance.attach(df, prov, column=False)


def model_frames(profile: str | Profile, paths: Iterable[str], sizes: SizeSpec, placement: str | None = None, *,
                 chunk: int | None = None, depth: int | None = None, wire: str | None = None,
                 **overrides: float) -> dict[str, pd.DataFrame]:
    """``{path: model_frame(profile, path, sizes, ...)}`` for several paths."""
    return {p: model_frame(profile, p, sizes, placement, chunk=chunk, depth=depth, wire=wire, **overrides)
            for p in paths}
