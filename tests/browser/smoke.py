"""A tiny notebook that exercises the same front-end pieces as the labs.

A plotly ``FigureWidget`` (an anywidget with plotly >= 6) beside an ipywidgets
``Dropdown`` that redraws it. The browser harness proves itself on this notebook
first, so a failure on a lab points at the lab, not at the harness. In quick mode
(``GDRLAB_QUICK=1``) the sweep has sizes 2**3 .. 2**8, six points; the full sweep
has twenty.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["QUICK_POINTS", "KIT_SWEEP_SIZES", "write_smoke_notebook", "write_kit_widgets_notebook",
           "count_code_cells"]

# 2**3 .. 2**8 inclusive, worked out by hand from the range below.
QUICK_POINTS = 6

_IMPORTS = """\
import os
import numpy as np
import ipywidgets as widgets
import plotly.graph_objects as go
from IPython.display import display"""

_SIZES = """\
quick = os.environ.get("GDRLAB_QUICK") == "1"
sizes = [2 ** k for k in range(3, 9 if quick else 23)]
print(f"sweep points: {len(sizes)}")"""

_WIDGET = """\
def curve(shape):
    # numpy arrays: plotly >= 6 sends them base64-encoded, as the labs' DataFrame columns are.
    x_kib = np.asarray(sizes, dtype=float) / 1024
    return x_kib if shape == "linear" else x_kib ** 2

fig = go.FigureWidget(data=[go.Scatter(x=sizes, y=curve("linear"), mode="lines+markers", name="sweep")])
fig.update_layout(height=360, title="smoke: shape of the curve", xaxis_type="log")
shape = widgets.Dropdown(options=["linear", "quadratic"], value="linear", description="shape")

def on_shape(change):
    with fig.batch_update():
        fig.data[0].y = curve(change["new"])

shape.observe(on_shape, names="value")
display(widgets.VBox([shape, fig]))"""

_BROKEN = 'raise RuntimeError("deliberate failure in the smoke notebook")'


def write_smoke_notebook(path: Path, broken: bool = False) -> Path:
    """Write the smoke notebook to ``path``.

    Parameters
    ----------
    broken : bool
        Insert a cell that raises before the widget cell, to prove the harness
        reports errors.
    """
    import nbformat  # here, so a machine without it skips the browser test instead of failing to import

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [
        nbformat.v4.new_markdown_cell("# Browser smoke test"),
        nbformat.v4.new_code_cell(_IMPORTS),
        nbformat.v4.new_code_cell(_SIZES),
    ]
    if broken:
        cells.append(nbformat.v4.new_code_cell(_BROKEN))
    cells += [
        nbformat.v4.new_code_cell(_WIDGET),
        # An empty cell never gets an execution count; the harness must not wait for it.
        nbformat.v4.new_code_cell(""),
    ]
    nb.cells = cells
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


# "8:64M" is every power of two from 2**3 to 2**26: 24 sizes, worked out by hand.
KIT_SWEEP_SIZES = 24

_KIT_IMPORTS = """\
from gdrlab.widgets import SweepWidget, model_explorer, quick_mode
print("quick mode:", quick_mode())"""

# A measurement with a known answer (bandwidth = size / 1e6), so the plotted points can be checked.
_KIT_SWEEP = """\
sweep = SweepWidget(lambda n: {"size": n, "bw_gbps": n / 1e6}, "8:64M", y="bw_gbps",
                    name="synthetic", title="synthetic sweep")
sweep"""

_KIT_EXPLORER = """\
explorer = model_explorer("kepler-snb-2013", paths=["gdr", "pipelined"], sizes="8:64M")
explorer"""


def write_kit_widgets_notebook(path: Path) -> Path:
    """A notebook showing the kit's own widgets: a SweepWidget (Start button, streaming
    points) over a synthetic measurement, and the model explorer (profile dropdown)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (_KIT_IMPORTS, _KIT_SWEEP, _KIT_EXPLORER)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def count_code_cells(path: Path) -> int:
    """Number of code cells with source, the ones that get an execution count."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    return sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())
