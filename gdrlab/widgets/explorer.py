"""Sliders over a hardware profile's parameters that redraw the model's curves on every change.

The redraw calls ``gdrlab.model.latency_us`` directly (no DataFrames), so a 30-point sweep of
every path redraws instantly. Nothing runs in a thread: widgets only react to the learner.
"""
from __future__ import annotations

import dataclasses
import math
from types import ModuleType
from typing import TYPE_CHECKING, Iterable, Mapping

from ..units import parse_sizes
from ..vocab import GPU_PATHS
from .plots import axis_title, byte_ticks

if TYPE_CHECKING:
    import ipywidgets as w
    import numpy as np
    import plotly.graph_objects as go

    from .quick import SizeSpec

__all__ = ["ModelExplorer", "model_explorer", "profile_params", "profile_names"]


def profile_names() -> list[str]:
    """The names of the model's profiles, whatever form ``gdrlab.model.profiles()`` takes."""
    from .. import model

    names: list[str] = []
    for p in model.profiles():
        if isinstance(p, str):
            names.append(p)
        elif isinstance(p, dict):
            names.append(str(p.get("name")))
        else:
            names.append(str(getattr(p, "name", p)))
    return names


def profile_params(profile: object) -> dict[str, float]:
    """The top-level numeric parameters of a profile object (dict, dataclass or plain object)."""
    items: Mapping[str, object]
    if isinstance(profile, dict):
        items = profile.get("params", profile)
    elif dataclasses.is_dataclass(profile):
        items = {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile)}
    elif isinstance(getattr(profile, "params", None), dict):
        items = getattr(profile, "params")
    else:
        items = vars(profile)
    return {k: float(v) for k, v in items.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
            and not k.startswith("_")}


class ModelExplorer:
    """A profile dropdown, one log slider per chosen parameter and a FigureWidget of model curves.

    Use :func:`model_explorer` to build one. ``overrides()`` gives the sliders' current values,
    ``redraw()`` recomputes the curves (called on every change) and shows them in a new
    ``figure``. A FigureWidget keeps, as widget state, only the figure it was built with (later
    edits travel as one-off messages), and a browser reload restores widgets from that state: built
    whole, the plot comes back as last drawn. Sliders redraw when released, not while dragged.
    """

    def __init__(self, profile: str = "h200-lab", paths: Iterable[str] | None = None, sizes: SizeSpec = "8:256M",
                 params: Iterable[str] | None = None, y: str = "lat_us", placement: str | None = None,
                 max_params: int = 6) -> None:
        import ipywidgets as w
        import numpy as np

        from .. import model

        self._model: ModuleType = model
        self.sizes = np.asarray(parse_sizes(sizes), dtype=float)
        self.paths = list(paths) if paths is not None else list(getattr(model, "PATHS", GPU_PATHS))
        if y not in ("lat_us", "bw_gbps"):
            raise ValueError(f"y must be 'lat_us' or 'bw_gbps', got {y!r}")
        self.y = y
        self.placement = placement
        names = profile_names()
        if profile not in names:
            raise ValueError(f"unknown profile {profile!r}; known: {', '.join(names)}")
        self.profile_box = w.Dropdown(options=names, value=profile, description="profile")
        self.param_names = list(params) if params is not None else None
        self.max_params = max_params
        self.sliders: dict[str, w.IntSlider | w.FloatLogSlider | w.FloatSlider] = {}
        self.slider_box = w.VBox([])
        self.message = w.Label(value="")
        self._note = ""
        self.figure: go.FigureWidget | None = None  # the first redraw makes it
        self.profile_box.observe(lambda _c: self._build_sliders(), names="value")
        self.widget = w.VBox([self.profile_box, self.slider_box, self.message])
        self._build_sliders()

    def _build_sliders(self) -> None:
        import ipywidgets as w

        base = profile_params(self._model.get_profile(self.profile_box.value))
        chosen = [n for n in (self.param_names or list(base)[: self.max_params]) if n in base]
        unknown = [n for n in (self.param_names or []) if n not in base]
        self._note = f"not parameters of this profile: {', '.join(unknown)}" if unknown else ""
        self.sliders = {}
        kinds = {k: spec[1] for k, spec in getattr(self._model, "PARAMS", {}).items()}
        for name in chosen:
            v = base[name]
            s: w.IntSlider | w.FloatLogSlider | w.FloatSlider
            if kinds.get(name) == "count":  # whole numbers only (e.g. pipeline depth)
                s = w.IntSlider(value=int(v), min=1, max=max(16, 4 * int(v)), description=name,
                                continuous_update=False, style={"description_width": "initial"})
            elif v > 0:
                # Two decades each way, but a fraction (an efficiency) cannot pass 1.
                top = 0.0 if kinds.get(name) == "fraction" else math.log10(v) + 2
                s = w.FloatLogSlider(value=v, base=10, min=math.log10(v) - 2, max=max(top, math.log10(v)),
                                     step=0.01, description=name, continuous_update=False,
                                     style={"description_width": "initial"}, readout_format=".3g")
            else:
                s = w.FloatSlider(value=v, min=-1.0, max=1.0, step=0.01, description=name,
                                  continuous_update=False, style={"description_width": "initial"})
            s.observe(lambda _c: self.redraw(), names="value")
            self.sliders[name] = s
        self.slider_box.children = tuple(self.sliders.values())
        self.redraw()

    def overrides(self) -> dict[str, float]:
        """Parameter values the sliders hold now."""
        return {k: float(s.value) for k, s in self.sliders.items()}

    def curves(self) -> dict[str, np.ndarray]:
        """``{path: array of y}`` for the current profile and slider values."""
        import numpy as np

        out: dict[str, np.ndarray] = {}
        notes = [self._note] if self._note else []
        try:
            prof = self._model.get_profile(self.profile_box.value, placement=self.placement, **self.overrides())
        except ValueError as exc:  # a combination the model refuses (InvalidArgument): say why
            self.message.value = "; ".join(notes + [str(exc)])
            return {p: np.full(self.sizes.shape, np.nan) for p in self.paths}
        for p in self.paths:
            try:
                lat_us = np.asarray(self._model.latency_us(prof, p, self.sizes), dtype=float)
            except Exception as exc:  # a path this profile cannot model: show why, keep the others
                notes.append(f"{p}: {exc}")
                lat_us = np.full(self.sizes.shape, np.nan)
            out[p] = lat_us if self.y == "lat_us" else self.sizes / lat_us / 1e3  # bytes/us -> GB/s
        self.message.value = "; ".join(notes)
        return out

    def plot(self) -> go.Figure:
        """The current curves as a plain figure (what :meth:`redraw` shows)."""
        import plotly.graph_objects as go

        curves = self.curves()
        profile = self.profile_box.value
        fig = go.Figure()
        for p in self.paths:
            fig.add_scatter(x=self.sizes.tolist(), y=[None if not math.isfinite(v) else float(v) for v in curves[p]],
                            mode="lines", name=f"{p} — modelled, profile {profile}", line={"dash": "dash"})
        fig.update_layout(title=f"model explorer (modelled, profile {profile})", height=420,
                          xaxis={"title": axis_title("size"), "type": "log",
                                 **byte_ticks(self.sizes.min(), self.sizes.max())},
                          yaxis={"title": axis_title(self.y), "type": "log" if self.y == "lat_us" else "linear"},
                          legend={"orientation": "h", "y": -0.25})
        return fig

    def redraw(self) -> None:
        """Show the current curves in a new FigureWidget and close the one shown before."""
        import plotly.graph_objects as go

        old, self.figure = self.figure, go.FigureWidget(self.plot())
        self.widget.children = (self.profile_box, self.slider_box, self.message, self.figure)
        if old is not None:
            old.close()

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


def model_explorer(profile: str = "h200-lab", paths: Iterable[str] | None = None, sizes: SizeSpec = "8:256M",
                   params: Iterable[str] | None = None, y: str = "lat_us", placement: str | None = None,
                   max_params: int = 6) -> ModelExplorer:
    """Sliders that redraw the model's curves instantly; see :class:`ModelExplorer`."""
    return ModelExplorer(profile, paths, sizes, params, y, placement, max_params)
