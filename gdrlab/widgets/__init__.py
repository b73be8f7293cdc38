"""Widgets and figures for the labs.

- :func:`plot_sweep` : a plain plotly figure of sweeps (live, recorded, modelled, imported), no widgets needed.
- :class:`SweepWidget` : a FigureWidget that fills in while a background thread measures.
- :func:`model_explorer` : sliders over a profile's parameters that redraw model curves.
- controls: :func:`size_range`, :func:`path_dropdown`, :func:`chunk_slider`, :func:`profile_dropdown`,
  :func:`placement_dropdown` (the same names and ranges in every lab).
- :func:`diagram` : schematic drawings of the data paths (boxes and arrows).
- :func:`quick_mode` : ``GDRLAB_QUICK=1`` or the autograder: small sweeps, no threads.

Importing this package imports neither plotly nor ipywidgets; each helper imports what it needs,
so ``gdrlab`` works without the ``[lab]`` extra until a figure is asked for.
"""
from __future__ import annotations

from .controls import (chunk_slider, path_dropdown, placement_dropdown, profile_dropdown, selected_sizes,
                       size_range)
from .diagrams import block_diagram, diagram
from .explorer import ModelExplorer, model_explorer, profile_names, profile_params
from .plots import axis_title, model_frame, model_frames, plot_sweep, y_column
from .quick import quick_mode, quick_sizes, sweep_sizes
from .sweep import SweepWidget

__all__ = [
    "quick_mode", "quick_sizes", "sweep_sizes", "plot_sweep", "axis_title", "y_column", "model_frame",
    "model_frames", "SweepWidget", "ModelExplorer", "model_explorer", "profile_names", "profile_params",
    "diagram", "block_diagram", "size_range", "selected_sizes", "path_dropdown", "chunk_slider",
    "profile_dropdown", "placement_dropdown",
]
