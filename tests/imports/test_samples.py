"""Every cited sample under tests/data/imports read to the rows worked out by hand from its text.

Expected values are the printed numbers with the tool's unit definition applied by hand:
perftest MB/sec x 1048576 / 1e9, perftest Gb/sec / 8, OSU MB/s / 1000, ucx_perftest MB/s x 1048576
/ 1e9, ib_read_lat / 2; nccl-tests and nvbandwidth GB/s and one-way latencies as printed."""
from __future__ import annotations

import math

import pytest

from gdrlab import imports
from gdrlab.imports import nccl_tests

MIB = 1048576


def _one(df, **where):
    sel = df
    for k, v in where.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, f"{len(sel)} rows match {where}"
    return sel.iloc[0]


def _approx(value, expected):
    assert value == pytest.approx(expected, rel=1e-9, abs=1e-12)


def _imported(df, tool, file):
    prov = df.attrs["provenance"]
    assert prov["kind"] == "imported" and prov["tool"] == tool and prov["file"] == file
    assert set(df["source"]) == {df["source"].iloc[0]} and df["source"].iloc[0].startswith(f"imported from {tool}")
    return prov


# ----------------------------------------------------------------------------------------- perftest
def test_perftest_report_gbits_post_list(sample):
    df = imports.read(sample("perftest_write_bw_gbits_postlist.txt"))
    prov = _imported(df, "perftest", "perftest_write_bw_gbits_postlist.txt")
    assert len(df) == 1
    r = df.iloc[0]
    assert (r["path"], r["size"], r["iters"], r["direction"]) == ("ib_write_bw", 8, 224958464, "uni")
    _approx(r["bw_gbps"], 0.48 / 8)
    peak = r.get("bw_peak_gbps")
    assert peak is None or math.isnan(peak)          # printed 0.00: not measured
    _approx(r["msg_rate_mps"], 7.498617)
    assert any("Gb/sec" in c for c in prov["converted"])
    assert "Device: ib0" in prov["options"]


def test_perftest_bidirectional_report_gbits_sweep(sample):
    df = imports.read(sample("perftest_write_bw_bidir_gbits.txt"), tool="perftest")
    prov = _imported(df, "perftest", "perftest_write_bw_bidir_gbits.txt")
    assert list(df["size"]) == [2 ** k for k in range(1, 24)]
    assert set(df["direction"]) == {"bidir"} and set(df["iters"]) == {5000}
    r = _one(df, size=65536)
    _approx(r["bw_gbps"], 203.85 / 8)
    _approx(r["bw_peak_gbps"], 204.12 / 8)
    _approx(r["msg_rate_mps"], 0.388818)
    first = _one(df, size=2)
    _approx(first["bw_gbps"], 0.012281 / 8)
    _approx(first["bw_peak_gbps"], 0.142947 / 8)
    assert any("both directions" in n for n in prov["notes"])


def test_perftest_mb_per_sec_is_binary(sample):
    df = imports.read(sample("perftest_read_bw_mb.txt"))
    prov = _imported(df, "perftest", "perftest_read_bw_mb.txt")
    assert list(df["size"]) == [2, 4, 8] and set(df["path"]) == {"ib_read_bw"}
    r = _one(df, size=8)
    _approx(r["bw_gbps"], 19.50 * MIB / 1e9)
    _approx(r["bw_peak_gbps"], 19.51 * MIB / 1e9)
    assert any("2^20" in c for c in prov["converted"])


def test_perftest_read_latency_is_a_full_round_trip_halved(sample):
    df = imports.read(sample("perftest_read_lat.txt"))
    prov = _imported(df, "perftest", "perftest_read_lat.txt")
    r = df.iloc[0]
    assert (r["path"], r["size"], r["iters"]) == ("ib_read_lat", 2, 1000)
    _approx(r["lat_min_us"], 6.88 / 2)
    _approx(r["lat_max_us"], 16.81 / 2)
    _approx(r["lat_p50_us"], 7.04 / 2)    # t_typical is the median
    _approx(r["lat_mean_us"], 7.06 / 2)
    _approx(r["lat_p99_us"], 7.38 / 2)
    assert any("halved" in c for c in prov["converted"])


def test_perftest_out_json_with_bare_words(sample):
    df = imports.read(sample("perftest_write_lat_out_json_unquoted.json"))
    prov = _imported(df, "perftest", "perftest_write_lat_out_json_unquoted.json")
    r = df.iloc[0]
    assert (r["path"], r["size"], r["iters"]) == ("ib_write_lat", 128, 5000)
    for col, v in (("lat_min_us", 2.37), ("lat_max_us", 5.39), ("lat_p50_us", 2.42), ("lat_mean_us", 2.42),
                   ("lat_p99_us", 2.47)):
        _approx(r[col], v)                 # write latency is half a round trip already: as printed
    assert prov["converted"] == []
    assert "Device: rxe0" in prov["options"]


def test_perftest_out_json_units_need_saying(sample):
    path = sample("perftest_write_bw_bidir_out_json_gbits.json")
    gbits = imports.read(path, gbits=True).iloc[0]
    _approx(gbits["bw_gbps"], 203.85 / 8)
    _approx(gbits["bw_peak_gbps"], 204.12 / 8)
    assert (gbits["size"], gbits["iters"], gbits["direction"]) == (65536, 5000, "bidir")
    default = imports.read(path)
    _approx(default.iloc[0]["bw_gbps"], 203.85 * MIB / 1e9)
    assert any("--gbits" in n for n in default.attrs["provenance"]["notes"])


# --------------------------------------------------------------------------------------- nccl-tests
def test_nccl_tests_text_with_two_hosts(sample):
    df = imports.read(sample("nccl_all_reduce_spark.txt"))
    prov = _imported(df, "nccl-tests", "nccl_all_reduce_spark.txt")
    assert prov["version"] == "2.20.0" and prov["host"] == "spark-d708,spark-dbf4"
    assert prov["options"].startswith("nThread 1 nGpus 1 minBytes 8192")
    assert len(df) == 8 and set(df["path"]) == {"all_reduce_perf"}
    oop = _one(df, size=8192, in_place=False)
    _approx(oop["lat_mean_us"], 35.15)
    _approx(oop["bw_gbps"], 0.23)
    _approx(oop["busbw_gbps"], 0.23)
    assert bool(oop["verified"]) is True
    ip = _one(df, size=65536, in_place=True)
    _approx(ip["lat_mean_us"], 64.71)
    _approx(ip["bw_gbps"], 1.01)
    assert prov["converted"] == []


def test_nccl_tests_zero_sizes_and_no_header_lines(sample):
    df = imports.read(sample("nccl_reduce_scatter_zero_sizes.txt"))
    assert list(df["size"]) == [0] * 10 + [128, 128, 256, 256]
    r = _one(df, size=128, in_place=True)
    _approx(r["lat_mean_us"], 25.35)
    _approx(r["bw_gbps"], 0.01)
    _approx(r["busbw_gbps"], 0.00)


def test_nccl_tests_json(sample):
    df = imports.read(sample("nccl_all_reduce_J_constructed.json"))
    prov = _imported(df, "nccl-tests", "nccl_all_reduce_J_constructed.json")
    assert prov["host"] == "spark-d708,spark-dbf4" and "-b 8192" in prov["options"]
    assert "NCCL version 2.31.2" in prov["notes"]
    assert len(df) == 8 and set(df["iters"]) == {100}
    r = _one(df, size=32768, in_place=False)
    _approx(r["lat_mean_us"], 39.56)
    _approx(r["busbw_gbps"], 0.83)


# Two results lines in the layout of nccl-tests' writeResultHeader/writePerIterReport with -I
# (src/util.cu); there is no public -I output to cite, so this is written here to that layout.
PER_ITER = """#                                                       out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)
     1048576        262144     float     sum      -1    20.00   52.43   91.75       0    19.50    24.00    23.00     3.10    21.00   49.93   87.38       0    20.10    25.00    24.50     4.00
"""


def test_nccl_tests_per_iteration_columns():
    res = nccl_tests.read_text(PER_ITER, "inline")
    oop, ip = res.rows
    assert (oop["size"], oop["in_place"], ip["in_place"]) == (1048576, False, True)
    assert (oop["lat_mean_us"], oop["lat_min_us"], oop["lat_max_us"], oop["lat_p99_us"]) == (20.0, 19.5, 24.0, 23.0)
    assert (ip["lat_min_us"], ip["lat_max_us"], ip["lat_p99_us"], ip["bw_gbps"]) == (20.1, 25.0, 24.5, 49.93)


# ---------------------------------------------------------------------------------------------- OSU
def test_osu_latency_is_one_way_as_printed(sample):
    df = imports.read(sample("osu_latency_v5.0.txt"))
    prov = _imported(df, "osu", "osu_latency_v5.0.txt")
    assert prov["version"] == "v5.0" and len(df) == 24 and set(df["path"]) == {"osu_latency"}
    _approx(_one(df, size=0)["lat_mean_us"], 1.84)
    _approx(_one(df, size=4194304)["lat_mean_us"], 497.37)
    assert prov["converted"] == []


def test_osu_bw_device_buffers(sample):
    df = imports.read(sample("osu_bw_cuda_v7.2.txt"))
    prov = _imported(df, "osu", "osu_bw_cuda_v7.2.txt")
    assert prov["version"] == "v7.2" and "DEVICE (D)" in prov["options"] and len(df) == 26
    _approx(_one(df, size=33554432)["bw_gbps"], 93130.52 / 1000)
    _approx(_one(df, size=1)["bw_gbps"], 1.01 / 1000)
    assert any("10^6" in c for c in prov["converted"])


def test_osu_bibw_sums_both_directions(sample):
    df = imports.read(sample("osu_bibw_v5.6.2.txt"))
    _imported(df, "osu", "osu_bibw_v5.6.2.txt")
    assert len(df) == 23 and set(df["direction"]) == {"bidir"} and set(df["path"]) == {"osu_bibw"}
    _approx(_one(df, size=1048576)["bw_gbps"], 20930.11 / 1000)


def test_osu_mbw_mr_rate_and_pairs(sample):
    df = imports.read(sample("osu_mbw_mr_v5.6.2.txt"))
    prov = _imported(df, "osu", "osu_mbw_mr_v5.6.2.txt")
    assert "pairs: 8" in prov["options"] and len(df) == 23
    r = _one(df, size=1)
    _approx(r["bw_gbps"], 50.68 / 1000)
    _approx(r["msg_rate_mps"], 50676756.16 / 1e6)


# -------------------------------------------------------------------------------------- nvbandwidth
def test_nvbandwidth_readme_matrix_direction(sample):
    df = imports.read(sample("nvbandwidth_readme_d2d_write_ce.txt"))
    prov = _imported(df, "nvbandwidth", "nvbandwidth_readme_d2d_write_ce.txt")
    assert len(df) == 8 * 8 - 8                      # the 0.00 diagonal is no measurement
    assert df["size"].isna().all() and any("buffer size" in n for n in prov["notes"])
    # "GPU(row) <- GPU(column)": the column's GPU writes into the row's
    _approx(_one(df, src="GPU1", dst="GPU0")["bw_gbps"], 276.07)
    _approx(_one(df, src="GPU0", dst="GPU6")["bw_gbps"], 274.89)


def test_nvbandwidth_na_cells_and_name_from_sum(sample):
    df = imports.read(sample("nvbandwidth_v0.8_d2d_read_ce.txt"))
    prov = _imported(df, "nvbandwidth", "nvbandwidth_v0.8_d2d_read_ce.txt")
    assert prov["version"] == "v0.8" and len(df) == 30
    assert set(df["path"]) == {"device_to_device_memcpy_read_ce"}
    _approx(_one(df, src="GPU0", dst="GPU3")["bw_gbps"], 21.95)
    assert df["bw_gbps"].sum() == pytest.approx(715.53, abs=0.05)   # the SUM line nvbandwidth printed


def test_nvbandwidth_json(sample):
    df = imports.read(sample("nvbandwidth_j_constructed.json"))
    prov = _imported(df, "nvbandwidth", "nvbandwidth_j_constructed.json")
    assert (prov["version"], prov["host"]) == ("v0.6", "node-a")
    assert list(df["dst"]) == [f"GPU{i}" for i in range(8)] and set(df["src"]) == {"CPU0"}
    _approx(_one(df, dst="GPU4")["bw_gbps"], 26.19)
    assert any("Waived" in n for n in prov["notes"])


# ------------------------------------------------------------------------------------- ucx_perftest
def test_ucx_latency_progress_lines(sample):
    df = imports.read(sample("ucx_am_lat_progress.txt"))
    prov = _imported(df, "ucx_perftest", "ucx_am_lat_progress.txt")
    r = df.iloc[0]
    assert (r["path"], r["size"], r["iters"]) == ("ucp_am_lat", 30000, 121919)
    _approx(r["lat_p50_us"], 16.418)
    _approx(r["lat_mean_us"], 16.405)
    _approx(r["bw_gbps"], 1744.03 * MIB / 1e9)
    _approx(r["msg_rate_mps"], 60958 / 1e6)
    assert prov["host"] == "moss-0002" and any("Final" in n for n in prov["notes"])


def test_ucx_full_output_default_size(sample):
    df = imports.read(sample("ucx_tag_lat_rocm_full.txt"))
    r = df.iloc[0]
    assert (r["path"], r["size"], r["iters"]) == ("tag_lat", 8, 1000000)
    _approx(r["lat_p50_us"], 1.433)
    _approx(r["lat_mean_us"], 11.025)
    _approx(r["bw_gbps"], 0.69 * MIB / 1e9)


def test_ucx_bandwidth_final_line_without_size(sample):
    df = imports.read(sample("ucx_tag_bw_final.txt"))
    prov = _imported(df, "ucx_perftest", "ucx_tag_bw_final.txt")
    r = df.iloc[0]
    assert (r["path"], r["iters"]) == ("tag_bw", 1000)
    assert df["size"].isna().all()
    _approx(r["bw_gbps"], 46743.62 * MIB / 1e9)
    assert "lat_p50_us" not in df.columns or df["lat_p50_us"].isna().all()   # overhead is no latency
    assert any("no message size" in n for n in prov["notes"])


def test_every_sample_is_read_and_cited(sample):
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "imports"
    files = sorted(p for p in data.iterdir() if not p.name.endswith(".source") and p.name != "README.md")
    assert len(files) >= 19
    for p in files:
        source = (data / (p.name + ".source")).read_text()
        assert "github.com" in source or "commit" in source, p.name
        df = imports.read(p, gbits="gbits" in p.name and p.suffix == ".json")
        assert len(df) >= 1 and df.attrs["provenance"]["kind"] == "imported"


# The header box ucx_perftest prints before its table (lines as in openucx/ucx PR #7183's review
# thread); the results line after it is written here to the table's layout, not taken from a run.
UCX_BOX = """+------------------------------------------------------------------------------------------+
| API:          protocol layer                                                             |
| Test:         tag match latency                                                          |
| Data layout:  (automatic)                                                                |
| Send memory:  host                                                                       |
| Recv memory:  host                                                                       |
| Message size: 8                                                                          |
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
Final:                100000      1.000     1.100     1.050       6.94       7.27     909091    952381
"""


def test_ucx_header_box_gives_test_and_size():
    from gdrlab.imports import ucx_perftest

    res = ucx_perftest.read_text(UCX_BOX, "inline")
    (r,) = res.rows
    assert (r["path"], r["size"], r["iters"]) == ("tag match latency", 8, 100000)
    assert (r["lat_p50_us"], r["lat_mean_us"]) == (1.0, 1.05)
    assert r["bw_gbps"] == pytest.approx(7.27 * MIB / 1e9)


# OMB 7.x latency with -f and tail percentiles: the column names as OMB 7.x prints them (see e.g.
# the parsers that read them in public repositories); the two lines of numbers are written here.
OSU7 = """# OSU MPI Latency Test v7.3
# Datatype: MPI_CHAR.
# Size       Avg Latency(us)     Min Latency(us)     Max Latency(us)  Iterations   P50 Tail Lat(us)   P90 Tail Lat(us)   P99 Tail Lat(us)
1                       1.60                1.50                9.00       10000               1.58               1.70               2.10
8                       1.62                1.52                8.00       10000               1.60               1.72               2.20
"""


def test_osu7_full_latency_columns():
    from gdrlab.imports import osu

    res = osu.read_text(OSU7, "inline")
    assert [r["size"] for r in res.rows] == [1, 8]
    r = res.rows[1]
    assert (r["lat_mean_us"], r["lat_min_us"], r["lat_max_us"], r["iters"]) == (1.62, 1.52, 8.0, 10000)
    assert (r["lat_p50_us"], r["lat_p99_us"]) == (1.60, 2.20)
    assert res.version == "v7.3"
