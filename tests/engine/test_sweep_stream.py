"""The streaming driver: one peer and one connection for a whole sweep (engine.Sweep), which the
live widgets use, so a sweep of N sizes starts one local peer, not N. bench() goes through it
too, so both give the same columns."""
from __future__ import annotations

import pandas as pd
import pytest

from gdrlab import engine, provenance
from gdrlab.transfer import driver


@pytest.fixture
def peers_started(monkeypatch):
    started: list[str] = []
    real = driver.start_local_peer

    def counting(*a, **kw):
        peer, kind = real(*a, **kw)
        started.append(kind)
        return peer, kind

    monkeypatch.setattr(driver, "start_local_peer", counting)
    return started


@pytest.mark.parametrize("local_peer", ["thread", "process"])
def test_a_sweep_of_five_sizes_starts_one_peer(peers_started, local_peer):
    with engine.Sweep("host", local_peer=local_peer, iters=3, warmup=1) as sweep:
        rows = [sweep(n) for n in (8, 64, 512, 4096, 65536)]
    assert peers_started == [local_peer]
    df = pd.concat(rows, ignore_index=True)
    assert list(df["size"]) == [8, 64, 512, 4096, 65536] and df["verified"].all()
    assert provenance.of(rows[0])["kind"] == "live" and rows[0]["source"].iloc[0].startswith("live on ")


def test_bench_and_the_sweep_give_the_same_columns(peers_started):
    with engine.Sweep("host", local_peer="thread", iters=3, warmup=1) as sweep:
        one = sweep.measure(4096)
    whole = engine.bench("host", [8, 4096], iters=3, warmup=1, local_peer="thread")
    assert list(one.columns) == list(whole.columns)
    assert peers_started == ["thread", "thread"]  # one for the sweep, one for the whole bench() call


def test_a_sweep_starts_its_peer_again_when_the_old_one_is_gone(peers_started):
    sweep = engine.Sweep("host", local_peer="thread", iters=3, warmup=1)
    assert sweep(8)["verified"].all()
    sweep.close()  # as the widget does after a run: the next run starts afresh
    assert sweep(8)["verified"].all()
    sweep.close()
    assert peers_started == ["thread", "thread"]


def test_a_sweep_refuses_the_gpu_to_gpu_paths_and_bad_arguments():
    with pytest.raises(engine.InvalidArgument):
        engine.Sweep("p2p")
    with pytest.raises(engine.InvalidArgument):
        engine.Sweep("host", local_peer="elsewhere")
    with pytest.raises(engine.InvalidArgument):
        engine.Sweep("warp")


def test_the_widget_closes_its_sweep_when_the_run_ends(monkeypatch):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from gdrlab.widgets import SweepWidget

    monkeypatch.delenv("GDRLAB_QUICK", raising=False)

    class Measure:
        closed = 0

        def __call__(self, n: int) -> dict:
            return {"size": n, "bw_gbps": 1.0}

        def close(self) -> None:
            self.closed += 1

    m = Measure()
    w = SweepWidget(m, [8, 64, 512])
    w.start(wait=True)
    assert len(w.rows) == 3 and m.closed == 1


def test_a_sweep_with_a_duration_sizes_its_iterations_by_time(peers_started):
    """``duration`` is ``gdrlab bench --duration``: at 64 KiB the fixed count is 1000 round trips,
    a 0.01 s budget per size holds far fewer on any machine (a round trip of 64 KiB over loopback
    takes tens of microseconds at least). The provenance says which method measured the row."""
    from gdrlab.transfer.stats import auto_counts
    fixed_iters = auto_counts(65536)[0]
    with engine.Sweep("host", local_peer="thread", duration=0.01) as sweep:
        row = sweep.measure(65536)
    assert row["verified"].all() and row["iters"].iloc[0] < fixed_iters
    assert "ci_rel" in row.columns
    assert provenance.of(row)["what"].endswith("--duration 0.01")
    for bad in (0, -1, 4000, "fast"):
        with pytest.raises(engine.InvalidArgument):
            engine.Sweep("host", duration=bad)
    with pytest.raises(engine.InvalidArgument):
        engine.Sweep("host", duration=0.04, opts=driver.options("host", [8]))


def test_the_live_widgets_sweep_by_time():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from gdrlab.labsupport import lab00, lab04

    for w in (lab00.host_sweep_widget("8:64"), lab04.sweep_widget("host", "8:64")):  # a GPU path needs a GPU to build
        assert w.measure_fn.opts.parity.duration == driver.LIVE_DURATION_S
