"""Lab 00's spread of the first live curve (issue 34 item 4): the sentence is computed from the
measured frame, and the measurement itself runs on any machine (host path, loopback)."""
from __future__ import annotations

import pandas as pd
import pytest

from gdrlab import provenance
from gdrlab.labsupport import lab00


def _frame(p50, p99):
    df = pd.DataFrame({"repeat": range(1, len(p50) + 1), "size": 8, "iters": 100, "lat_p50_us": p50,
                       "lat_p99_us": p99, "verified": True})
    return provenance.attach(df, provenance.live({"what": "test"}, {"host": "box"}))


def test_spread_note_is_computed_from_the_frame():
    note = lab00.spread_note(_frame([5.0, 50.0, 6.0], [10.0, 60.0, 18.0]))
    # by hand: p50 range 5.0-50.0; p99/p50 = 2.0, 1.2, 3.0 -> median 2.0
    assert "3 tests of 8 B" in note and "p50 from 5.0 to 50.0 µs" in note and "median 2.0x" in note


def test_spread_figure_draws_each_test_with_units():
    fig = lab00.spread_figure(_frame([5.0, 50.0], [10.0, 60.0]))
    bars, points = fig.data
    assert list(points.y) == [5.0, 50.0] and list(bars.base) == [5.0, 50.0] and list(bars.y) == [5.0, 10.0]
    assert "µs" in fig.layout.yaxis.title.text and "live" in fig.layout.title.text


@pytest.mark.timeout(120)
def test_host_spread_measures_live_verified_rows():
    df = lab00.host_spread(size=8, repeats=2, iters=200)
    assert len(df) == 2 and df["verified"].all()
    assert (df["lat_p99_us"] >= df["lat_p50_us"]).all() and (df["lat_p50_us"] > 0).all()
    assert provenance.label(df).startswith("live")
