"""gdrlab.widgets: figures carry provenance and units; sweeps run in a thread that ends cleanly."""
from __future__ import annotations

import sys
import threading
import time
import types

import pandas as pd
import pytest

pytest.importorskip("plotly")
pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")  # plotly>=6 FigureWidget needs it

from gdrlab import widgets  # noqa: E402


@pytest.fixture()
def not_quick(monkeypatch):
    monkeypatch.delenv("GDRLAB_QUICK", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)


def _frame(kind, **prov):
    df = pd.DataFrame({"size": [8, 1024, 1 << 20], "bw_gbps": [0.001, 0.2, 40.0], "lat_p50_us": [6.0, 6.5, 26.0]})
    df.attrs["provenance"] = {"kind": kind, **prov}
    return df


@pytest.mark.parametrize("env,expected", [({}, False), ({"GDRLAB_QUICK": "1"}, True), ({"GDRLAB_QUICK": "0"}, False),
                                          ({"NBGRADER_EXECUTION": "autograde"}, True)])
def test_quick_mode_follows_the_environment(monkeypatch, env, expected):
    monkeypatch.delenv("GDRLAB_QUICK", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert widgets.quick_mode() is expected


def test_quick_sizes_keep_both_ends():
    # 24 powers of two (2^3..2^26); the middle pick is index round(23/2) = 12, i.e. 2^15.
    assert widgets.quick_sizes("8:64M", 3) == [8, 1 << 15, 64 << 20]
    assert widgets.quick_sizes([8, 16], 3) == [8, 16]


def test_plot_sweep_labels_provenance_and_units():
    fig = widgets.plot_sweep({"pinned": _frame("recorded", hardware="NVIDIA H200", date="2026-11")},
                             model=[_frame("modelled", profile="h200")], y="bw_gbps", title="H2D")
    names = [t.name for t in fig.data]
    assert names[0] == "pinned — recorded on NVIDIA H200 (2026-11)"
    assert names[1] == "modelled, profile h200"
    assert fig.layout.title.text == "H2D (recorded + modelled)"
    assert fig.layout.xaxis.title.text == "message size (bytes)" and fig.layout.xaxis.type == "log"
    assert fig.layout.yaxis.title.text == "bandwidth (GB/s)"
    assert fig.data[1].line.dash == "dash"


def test_plot_sweep_uses_model_latency_for_measured_latency_column():
    model = _frame("modelled", profile="k20").rename(columns={"lat_p50_us": "lat_us"})
    fig = widgets.plot_sweep([_frame("live", host="n1")], model=model, y="lat_p50_us")
    assert list(fig.data[1].y) == [6.0, 6.5, 26.0]
    assert fig.layout.yaxis.type == "log" and "µs" in fig.layout.yaxis.title.text


def test_plot_sweep_refuses_data_without_provenance():
    with pytest.raises(ValueError, match="provenance"):
        widgets.plot_sweep(pd.DataFrame({"size": [1], "bw_gbps": [1.0]}))
    with pytest.raises(ValueError, match="cannot plot 'bw_gbps'"):
        df = pd.DataFrame({"size": [1]})
        df.attrs["provenance"] = {"kind": "live"}
        widgets.plot_sweep(df)


def test_sweep_runs_in_a_thread_fills_the_figure_and_ends(not_quick):
    seen_threads = set()

    def measure(n):
        seen_threads.add(threading.current_thread().name)
        return {"size": n, "bw_gbps": n / 1e6}

    sw = widgets.SweepWidget(measure, "8:1M", redraw_s=0.0)
    sw.start()
    assert sw.join(10), "the sweep thread did not end"
    assert seen_threads == {"gdrlab-sweep"}
    df = sw.result()
    assert list(df["size"]) == [2 ** k for k in range(3, 21)]
    assert df.attrs["provenance"]["kind"] == "live"
    assert list(sw.figure.data[-1].x) == list(df["size"])
    assert sw.progress.value == sw.progress.max == 18
    assert sw.status.value == "done: 18 sizes"
    assert not sw.start_button.disabled and sw.stop_button.disabled


def test_stop_ends_the_sweep_early(not_quick):
    release, measuring = threading.Event(), threading.Event()

    def measure(n):
        measuring.set()
        release.wait(5)
        return {"size": n, "bw_gbps": 1.0}

    sw = widgets.SweepWidget(measure, "8:1M")
    sw.start()
    assert measuring.wait(30)  # the first size is being measured
    sw._stop.set()  # what the Stop button does
    release.set()
    assert sw.join(10)
    assert 1 <= len(sw.rows) < 18
    assert sw.status.value.startswith("stopped after")


def test_measurement_errors_are_shown_not_raised(not_quick):
    def measure(n):
        if n > 64:
            raise RuntimeError("GPU fell off the bus")
        return {"size": n, "bw_gbps": 1.0}

    sw = widgets.SweepWidget(measure, "8:1K")
    sw.start(wait=True)
    assert isinstance(sw.error, RuntimeError)
    assert len(sw.rows) == 4 and sw.status.value == "stopped: RuntimeError"
    assert any("GPU fell off the bus" in o.get("text", "") for o in sw.out.outputs)


def test_quick_mode_sweep_uses_no_thread(monkeypatch):
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    names = []

    def measure(n):
        names.append(threading.current_thread().name)
        return pd.DataFrame({"size": [n], "bw_gbps": [2.0]})

    sw = widgets.SweepWidget(measure, "8:64M")
    sw.start()
    assert names == [threading.current_thread().name] * 3
    assert sw._thread is None and len(sw.result()) == 3


def test_sweep_rejects_non_callables():
    with pytest.raises(TypeError, match="callable"):
        widgets.SweepWidget(42, "8:1K")


@pytest.fixture()
def fake_model(monkeypatch):
    """A stand-in model: latency = alpha_us + size / (bw_gbps * 1e3), per profile."""
    import numpy as np

    mod = types.ModuleType("gdrlab.model")
    base = {"h200": {"alpha_us": 6.0, "bw_gbps": 55.0, "name": "h200"}, "k20": {"alpha_us": 8.0, "bw_gbps": 6.0}}
    mod.PATHS = ("staged", "shared")
    mod.profiles = lambda: list(base)
    mod.get_profile = lambda name, **o: {**base[name], **o}
    mod.latency_us = lambda prof, path, sizes: prof["alpha_us"] * (2 if path == "staged" else 1) + \
        np.asarray(sizes) / (prof["bw_gbps"] * 1e3)
    monkeypatch.setitem(sys.modules, "gdrlab.model", mod)
    import gdrlab
    monkeypatch.setattr(gdrlab, "model", mod, raising=False)
    return mod


def test_model_explorer_redraws_when_a_slider_moves(fake_model):
    ex = widgets.model_explorer("h200", sizes="8,1M", params=["alpha_us", "bw_gbps"])
    assert set(ex.sliders) == {"alpha_us", "bw_gbps"}
    assert ex.figure.data[0].y[0] == pytest.approx(12.0 + 8 / 55e3)
    ex.sliders["alpha_us"].value = 1.0
    staged = ex.figure.data[0]
    assert staged.y[0] == pytest.approx(2.0 + 8 / 55e3)
    assert "modelled, profile h200" in staged.name
    ex.profile_box.value = "k20"
    assert ex.figure.data[1].y[1] == pytest.approx(8.0 + (1 << 20) / 6e3)


def test_model_explorer_redraws_as_a_whole_new_figure(fake_model):
    """A browser reload restores a widget from its state, and a FigureWidget's state is the figure
    it was built with: each redraw must build a new one holding the curves, and close the old."""
    ex = widgets.model_explorer("h200", sizes="8,1M", params=["alpha_us"])
    first = ex.figure
    ex.sliders["alpha_us"].value = 1.0
    assert ex.figure is not first and first.comm is None, "the old figure is replaced and closed"
    assert ex.widget.children[-1] is ex.figure
    state = ex.figure.get_state()
    traces = state["_widget_data"]
    assert [t["name"] for t in traces] == ["staged — modelled, profile h200", "shared — modelled, profile h200"]
    # staged: 2 * alpha + size / (bw * 1e3) with alpha moved to 1 us and bw 55 GB/s
    assert traces[0]["y"] == pytest.approx([2.0 + 8 / 55e3, 2.0 + (1 << 20) / 55e3])
    assert state["_widget_layout"]["xaxis"]["type"] == "log"
    assert "profile h200" in state["_widget_layout"]["title"]["text"]


def test_model_explorer_bandwidth_and_bad_input(fake_model):
    ex = widgets.model_explorer("h200", sizes="1M", y="bw_gbps", params=["bw_gbps", "nonsense"])
    assert ex.figure.data[1].y[0] == pytest.approx((1 << 20) / (6.0 + (1 << 20) / 55e3) / 1e3)
    assert "nonsense" in ex.message.value
    with pytest.raises(ValueError, match="unknown profile"):
        widgets.model_explorer("k80")


def test_model_explorer_on_the_real_model():
    from gdrlab import model

    ex = widgets.model_explorer("hopper-ndr", paths=["p2p", "p2p-staged"], sizes="256M", y="bw_gbps",
                                params=["p2p_gbps"])
    before = ex.figure.data[0].y[0]
    assert before == pytest.approx(float(model.bandwidth_gbps("hopper-ndr", "p2p", [256 << 20])[0]), rel=1e-3)
    ex.sliders["p2p_gbps"].value = 24.0  # the seed's PCIe-era P2P figure
    assert ex.figure.data[0].y[0] < 24.0 < before


@pytest.mark.parametrize("name", ["transfer-paths", "bar1", "copy-engine", "p2p"])
def test_diagrams_say_they_are_not_data(name):
    fig = widgets.diagram(name)
    assert fig.layout.title.text.endswith("(diagram, not data)")
    assert len(fig.layout.shapes) >= 3 and len(fig.layout.annotations) >= 3
    with pytest.raises(ValueError, match="unknown diagram"):
        widgets.diagram("nope")


@pytest.mark.notebook
def test_thread_output_lands_in_the_widget_under_a_real_kernel(tmp_path, not_quick):
    """Under ipykernel 7 the sweep thread's messages go to the Output captured at creation."""
    pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell(
        "import threading\n"
        "from gdrlab.widgets import SweepWidget\n"
        "def m(n):\n"
        "    if n > 64: raise RuntimeError('boom from ' + threading.current_thread().name)\n"
        "    return {'size': n, 'bw_gbps': 1.0}\n"
        "sw = SweepWidget(m, '8:1K')\n"
        "display(sw)\n"
        "sw.start()\n"
        # Joined in the same cell: nbclient keeps only messages whose parent is the running cell
        # (a browser keeps them all), so the thread's messages must arrive while this cell runs.
        "assert sw.join(30)\n"
        "import time; time.sleep(0.5)\n"), new_code_cell("print(sw.status.value, len(sw.rows))\n")])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert nb.cells[1].outputs[0]["text"].strip() == "stopped: RuntimeError 4"
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    outputs = [o for v in state.values() if v["model_name"] == "OutputModel" for o in v["state"].get("outputs", [])]
    assert any("boom from gdrlab-sweep" in o.get("text", "") for o in outputs)
    # Nothing leaked into the cell that created the widget, nor the next one.
    assert not any("boom" in str(o) for c in nb.cells for o in c.outputs)


def test_model_explorer_says_why_a_setting_is_impossible():
    ex = widgets.model_explorer("kepler-snb-2013", paths=["gdr"], params=["bar1_reserved_bytes", "ce_eff"])
    assert 10 ** ex.sliders["ce_eff"].max == pytest.approx(1.0)  # an efficiency cannot pass 1
    s = ex.sliders["bar1_reserved_bytes"]
    s.value = 10 ** s.max  # more reserved than the whole 256 MB BAR1
    assert "bar1_reserved_bytes must be smaller than bar1_bytes" in ex.message.value
    assert all(v is None for v in ex.figure.data[0].y)
    s.value = 1 << 20
    assert ex.message.value == "" and all(v is not None for v in ex.figure.data[0].y)


def test_byte_axes_use_binary_units_not_billions():
    from gdrlab.widgets.plots import byte_ticks

    ticks = byte_ticks(8, 256 << 20)
    assert dict(zip(ticks["ticktext"], ticks["tickvals"]))["1M"] == 1 << 20
    assert "4K" in ticks["ticktext"] and "256M" in ticks["ticktext"]
    big = byte_ticks(1 << 20, 512 << 30)
    assert big["tickvals"][-1] >= 512 << 30 and not any(t.endswith("B") for t in big["ticktext"])
    fig = widgets.plot_sweep(_frame("live", host="n1"), y="bw_gbps")
    assert list(fig.layout.xaxis.ticktext)[:2] == ["1", "16"]


def test_series_and_its_model_share_a_colour():
    fig = widgets.plot_sweep({"pinned": _frame("recorded", hardware="H")},
                             model={"pinned": _frame("modelled", profile="p")})
    assert fig.data[0].line.color == fig.data[1].line.color


def test_size_range_narrows_the_next_sweep(not_quick):
    sw = widgets.SweepWidget(lambda n: {"size": n, "bw_gbps": 1.0}, "8:1M")
    assert widgets.selected_sizes(sw.size_control) == [2 ** k for k in range(3, 21)]
    sw.size_control.index = (2, 4)  # 32 B .. 128 B
    sw.start(wait=True)
    assert list(sw.result()["size"]) == [32, 64, 128]
    assert sw.progress.max == 3


def test_standard_controls():
    from gdrlab import model

    assert widgets.path_dropdown().options == tuple(model.PATHS)
    chunk = widgets.chunk_slider()
    assert chunk.value == 256 * 1024 and chunk.label == "256K"
    with pytest.raises(ValueError, match="power of two"):
        widgets.chunk_slider(value=1000)
    assert widgets.placement_dropdown().options == tuple(model.PLACEMENTS)
    assert "hopper-ndr" in widgets.profile_dropdown().options
    with pytest.raises(ValueError, match="unknown profile"):
        widgets.profile_dropdown("k80")


def test_a_learners_fit_is_not_called_the_kits_model_and_sparse_points_are_not_joined():
    """Issue 34 item 9: the fit's provenance says who fitted it; three recorded sizes far apart are
    drawn as points (a line would suggest data between them); the title names each kind once."""
    import pandas as pd

    from gdrlab import provenance
    from gdrlab.labsupport import lab02
    from gdrlab.widgets import plot_sweep

    fit = lab02.alpha_beta_frame(5.0, 50.0, sizes="8:1M", label="your fit")
    assert provenance.label(fit) == "fitted by you"
    rec = provenance.attach(pd.DataFrame({"size": [8, 1 << 20, 1 << 28], "lat_p50_us": [5.0, 30.0, 5000.0]}),
                            provenance.recorded("test rig", date="2026-12-01"))
    fig = plot_sweep({"p2p": rec}, y="lat_p50_us", title="peer copies", model=[fit])
    modes = {t.name: t.mode for t in fig.data}
    assert any(m == "markers" for m in modes.values()) and any(m == "lines" for m in modes.values())
    title = fig.layout.title.text
    assert title == "peer copies (recorded + fitted)" and "modelled" not in title


def test_plot_sweep_keeps_the_colours_it_is_given():
    import pandas as pd

    from gdrlab import provenance
    from gdrlab.widgets import plot_sweep

    rec = provenance.recorded("test rig", date="2026-12-01")
    frames = {name: provenance.attach(pd.DataFrame({"size": [8, 64, 512], "bw_gbps": [1.0, 2.0, 3.0]}), rec)
              for name in ("peer access off", "peer access on")}
    fig = plot_sweep(frames, colours={"peer access on": "#2ca02c", "peer access off": "#d62728"})
    by_name = {t.name.split(" — ")[0]: t.line.color for t in fig.data}
    assert by_name == {"peer access off": "#d62728", "peer access on": "#2ca02c"}
