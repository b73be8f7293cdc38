"""A live sweep: a plotly FigureWidget that fills in point by point while a background thread
measures, with a progress bar, a stop button and model curves overlaid.

Output from the thread goes to an ``Output`` widget captured when the widget is created, so under
ipykernel 7 messages land under the cell that made the widget, not under whichever cell runs now.
"""
from __future__ import annotations

import platform
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .. import provenance as _prov
from ..units import format_size, parse_sizes
from .controls import selected_sizes, size_range
from .plots import add_frame_trace, axis_title, byte_ticks, frames_from
from .quick import quick_mode, quick_sizes

if TYPE_CHECKING:
    import pandas as pd

    from .plots import Frames
    from .quick import SizeSpec

__all__ = ["SweepWidget"]


def _row_of(result: object, size: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A measurement's result as a dict row, plus its provenance if it carried one."""
    prov = None
    if hasattr(result, "iloc"):  # a one-row DataFrame from the engine
        df: pd.DataFrame = result
        prov = df.attrs.get("provenance")
        if len(df) == 0:
            raise ValueError(f"the measurement for {size} bytes returned no rows")
        result = df.iloc[-1].to_dict()
    if not isinstance(result, Mapping):
        raise TypeError(f"measure_fn must return a dict or a DataFrame, got {type(result).__name__}")
    row = dict(result)
    row.setdefault("size", size)
    return row, prov


class SweepWidget:
    """Measure ``measure_fn(size)`` at each size in a background thread and plot as points arrive.

    Parameters
    ----------
    measure_fn : callable
        ``measure_fn(size_bytes) -> dict`` (or a one-row DataFrame) holding at least column ``y``.
        For example ``lambda n: gdrlab.engine.copy_bench("h2d", [n])``.
    sizes : sizes accepted by :func:`gdrlab.units.parse_sizes` (``"8:64M"``, a list...).
    y : str
        Column to plot: ``"bw_gbps"`` or ``"lat_p50_us"``.
    name : str
        Legend name of the live trace.
    model : DataFrame, list or mapping of DataFrames, optional
        Curves drawn before the sweep starts (recorded or modelled, with provenance).
    redraw_s : float
        At most one figure update per this many seconds (updates are batched).
    x_title : str, optional
        Title of the x axis when ``size`` is not a message size (e.g. bytes allocated).

    In quick mode (:func:`gdrlab.widgets.quick_mode`) :meth:`start` measures a few sizes in the
    calling thread and starts no background thread.
    """

    def __init__(self, measure_fn: Callable[[int], Mapping[str, Any] | pd.DataFrame], sizes: SizeSpec, *,
                 y: str = "bw_gbps", name: str = "live", title: str = "", model: Frames = None,
                 redraw_s: float = 0.25, log_y: bool | None = None, x_title: str | None = None) -> None:
        import ipywidgets as w
        import plotly.graph_objects as go

        if not callable(measure_fn):
            raise TypeError("measure_fn must be callable: measure_fn(size_bytes) -> dict or DataFrame")
        self.measure_fn = measure_fn
        self.sizes = parse_sizes(sizes)
        self.y = y
        self.redraw_s = float(redraw_s)
        self.rows: list[dict[str, Any]] = []
        self.provenance: dict[str, Any] = _prov.live()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

        self.figure = go.FigureWidget()
        for label, df in frames_from(model):
            add_frame_trace(self.figure, df, y=y, label=label)
        self.figure.add_scatter(x=[], y=[], mode="lines+markers", name=f"{name} — live on {platform.node()}",
                                line={"width": 3})
        self._live = self.figure.data[-1]
        log_y = (y != "bw_gbps") if log_y is None else log_y
        self.figure.update_layout(
            title=f"{title} (live + overlays)" if title else "live sweep", height=420,
            xaxis={"title": x_title or axis_title("size"), "type": "log",
                   **byte_ticks(self.sizes[0], self.sizes[-1])},
            yaxis={"title": axis_title(y), "type": "log" if log_y else "linear"},
            legend={"orientation": "h", "y": -0.25})
        # The learner narrows the sweep here; a change applies at the next Start.
        self.size_control = size_range(self.sizes)
        self.progress = w.IntProgress(value=0, min=0, max=len(self.sizes), description="progress")
        self.status = w.Label(value="ready")
        self.start_button = w.Button(description="Start", icon="play", button_style="success")
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.start_button.on_click(lambda _b: self.start())
        self.stop_button.on_click(lambda _b: self.stop(wait=False))
        # Captured now: the thread writes here, so its text appears under this widget's cell.
        self.out = w.Output()
        self.widget = w.VBox([w.HBox([self.start_button, self.stop_button, self.progress, self.status]),
                              self.size_control, self.figure, self.out])

    # ----------------------------------------------------------------- control
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, wait: bool = False) -> None:
        """Begin the sweep (again). ``wait=True`` blocks until it ends."""
        if self.running:
            return
        self._stop.clear()
        self.rows = []
        self.error = None
        self._live.x, self._live.y = [], []
        sizes = selected_sizes(self.size_control)
        if quick_mode():
            # No thread under CI or the autograder: a few sizes, measured right here.
            self.progress.max = len(quick_sizes(sizes))
            self._run(quick_sizes(sizes))
            return
        self.progress.max = len(sizes)
        self._thread = threading.Thread(target=self._run, args=(sizes,), daemon=True,
                                        name="gdrlab-sweep")
        self._thread.start()
        if wait:
            self.join()

    def stop(self, wait: bool = True, timeout_s: float | None = 30.0) -> None:
        """Ask the sweep to stop after the size being measured; ``wait`` joins the thread."""
        self._stop.set()
        if wait:
            self.join(timeout_s)

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the thread; True when it has ended."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
                self._thread = None
        return self._thread is None

    # ----------------------------------------------------------------- worker
    def _run(self, sizes: list[int]) -> None:
        self.start_button.disabled, self.stop_button.disabled = True, False
        self.progress.value = 0
        last_draw = 0.0
        try:
            for i, size in enumerate(sizes):
                if self._stop.is_set():
                    self.status.value = f"stopped after {i} of {len(sizes)} sizes"
                    break
                self.status.value = f"measuring {format_size(size)} B"
                row, prov = _row_of(self.measure_fn(size), size)
                if prov:
                    self.provenance = dict(prov)
                with self._lock:
                    self.rows.append(row)
                self.progress.value = i + 1
                now = time.monotonic()
                if now - last_draw >= self.redraw_s:
                    self._draw()
                    last_draw = now
            else:
                self.status.value = f"done: {len(sizes)} sizes"
        except Exception as exc:  # shown to the learner; the sweep ends cleanly
            self.error = exc
            self.status.value = f"stopped: {type(exc).__name__}"
            self.out.append_stderr(f"measurement failed: {type(exc).__name__}: {exc}\n")
        finally:
            close = getattr(self.measure_fn, "close", None)
            if callable(close):  # e.g. an engine.Sweep: its peer and connection end with the run
                try:
                    close()
                except Exception as exc:  # noqa: BLE001 - said, the sweep's rows stand
                    self.out.append_stderr(f"closing the measurement failed: {type(exc).__name__}: {exc}\n")
            self._draw()
            self.start_button.disabled, self.stop_button.disabled = False, True

    def _draw(self) -> None:
        with self._lock:
            rows = [r for r in self.rows if self.y in r]
        xs = [r["size"] for r in rows]
        ys = [r[self.y] for r in rows]
        with self.figure.batch_update():
            self._live.x, self._live.y = xs, ys

    # ----------------------------------------------------------------- results
    def result(self) -> pd.DataFrame:
        """The points measured so far as a DataFrame with ``attrs["provenance"]`` (live)."""
        import pandas as pd

        with self._lock:
            df = pd.DataFrame(list(self.rows))
        return _prov.attach(df, self.provenance, column=False)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
