"""`gdrlab import` on the command line (table, --json, --csv, --tool), the class view's export
reader (used when present, refused in one line when not), and imported frames in the lab plots."""
from __future__ import annotations

import csv
import io
import json
import sys
import types

import pytest

from gdrlab import imports, provenance
from gdrlab.errors import Unavailable


def test_json_is_one_document_with_rows_and_conversions(run_cli, sample):
    r = run_cli("import", sample("perftest_read_bw_mb.txt"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tool"] == "perftest" and doc["provenance"]["kind"] == "imported"
    assert [row["size"] for row in doc["rows"]] == [2, 4, 8]
    assert doc["rows"][0]["bw_gbps"] == pytest.approx(4.67 * 1048576 / 1e9)
    assert any("2^20" in c for c in doc["converted"])
    assert all(row["source"] == "imported from perftest" for row in doc["rows"])


def test_csv_has_the_bench_columns_first(run_cli, sample):
    r = run_cli("import", sample("osu_bw_cuda_v7.2.txt"), "--csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(rows[0])[:4] == ["path", "wire", "size", "iters"]
    assert float(rows[-1]["bw_gbps"]) == pytest.approx(93130.52 / 1000)
    assert "converted: bandwidth: OSU MB/s" in r.stderr


def test_table_says_what_was_converted(run_cli, sample):
    r = run_cli("import", sample("perftest_read_lat.txt"), "--tool", "perftest")
    assert r.returncode == 0, r.stderr
    assert "ib_read_lat" in r.stdout and "3.44" in r.stdout and "converted: latency" in r.stdout


def test_wrong_tool_is_one_line(run_cli, sample):
    r = run_cli("import", sample("osu_latency_v5.0.txt"), "--tool", "nvbandwidth")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no result rows" in r.stderr


def test_help_names_the_tools_and_units(run_cli):
    r = run_cli("import", "--help")
    assert r.returncode == 0
    for word in ("perftest", "nccl-tests", "osu", "nvbandwidth", "ucx_perftest", "2^20", "10^6", "--gbits"):
        assert word in r.stdout


# ------------------------------------------------------------------------------ class view export
def test_class_export_reader_is_called_when_present(monkeypatch, tmp_path):
    import pandas as pd

    seen = []

    def read_export(path: str):
        seen.append(path)
        return pd.DataFrame({"path": ["staged"], "size": [4096], "bw_gbps": [1.5]})

    monkeypatch.setitem(sys.modules, "gdrlab.classroom.export", types.SimpleNamespace(read_export=read_export))
    f = tmp_path / "class.csv"
    f.write_text("path,size,bw_gbps\nstaged,4096,1.5\n")
    df = imports.read(f, tool="class")
    assert seen == [str(f)] and df["bw_gbps"].iloc[0] == 1.5
    assert provenance.of(df)["kind"] == "imported" and df["source"].iloc[0].startswith("imported from")
    assert imports.read(tmp_path / "any.parquet").attrs["provenance"]["kind"] == "imported"  # parquet: no text check


def test_class_export_reader_missing_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "gdrlab.classroom.export", types.SimpleNamespace())
    assert imports.export_reader() is None
    with pytest.raises(Unavailable) as err:
        imports.read(tmp_path / "class.parquet")
    assert "read_export" in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------------------- plots
def test_plots_draw_imported_beside_live_recorded_and_modelled(sample):
    pytest.importorskip("plotly")
    import pandas as pd

    from gdrlab.widgets import plots

    imported = imports.read(sample("osu_bw_cuda_v7.2.txt"))
    recorded = provenance.attach(pd.DataFrame({"size": [1024, 1048576], "bw_gbps": [0.5, 20.0]}),
                                 provenance.recorded("test hardware"))
    fig = plots.plot_sweep([imported, recorded], y="bw_gbps")
    kinds = {t.name: (t.line.dash, t.marker.symbol) for t in fig.data}
    imported_trace = next(v for k, v in kinds.items() if "imported from osu" in k)
    recorded_trace = next(v for k, v in kinds.items() if "recorded on" in k)
    assert imported_trace[0] != recorded_trace[0] and imported_trace[1] == "diamond"
    assert "imported" in fig.layout.title.text
