"""Lab 06 (GPUDirect's siblings): its support code, and the claims its text makes, recomputed.

The lab runs without a GPU and without a storage recording; these tests check the model and the
reading of a recording (a synthetic one in a scratch folder, and the shipped one when it exists).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gdrlab.labsupport import lab06

ROOT = Path(__file__).resolve().parents[2]
SRC = (ROOT / "labs" / "src" / "06-siblings.py").read_text(encoding="utf-8")
GiB = 1 << 30


def test_model_parameters_name_their_sources():
    params = lab06.storage_params()
    assert {"drive_gbps", "h2d_pinned_gbps", "h2d_pageable_gbps", "memcpy_gbps", "copy_launch_us",
            "bounce_chunk_bytes", "read_setup_us", "cross_socket_factor"} <= set(params)
    for name, (value, source) in params.items():
        assert value > 0 and source, name
    # PCIe Gen4 x4 at 16 GT/s with 128b/130b: 7.88 GB/s of data
    assert params["drive_gbps"][0] == pytest.approx(16 * 4 * 128 / 130 / 8, abs=0.01)
    assert "recorded" in params["h2d_pinned_gbps"][1] and "H200" in params["h2d_pinned_gbps"][1]


def test_model_gds_wins_large_reads_and_loses_ground_across_sockets():
    same = lab06.storage_model(sizes=[4096, GiB]).set_index(["method", "size"])["bw_gbps"]
    far = lab06.storage_model(sizes=[GiB], placement="cross socket").set_index(["method", "size"])["bw_gbps"]
    gds, compat = "GDS proper (peer-to-peer)", "cuFile compat (bounce buffer)"
    assert same[(gds, GiB)] > same[(compat, GiB)] > same[("read() to pinned + copy", GiB)] \
        > same[("read() to pageable + copy", GiB)]
    assert far[(gds, GiB)] < same[(gds, GiB)]
    assert far[(compat, GiB)] == pytest.approx(same[(compat, GiB)])     # no peer-to-peer, no placement cost
    m = lab06.storage_model(sizes=[GiB])
    assert m.attrs["provenance"]["kind"] == "modelled"
    assert int(m.loc[m["method"] == compat, "chunks"].iloc[0]) == GiB // (1 << 20)


def test_exercise_1_after_text_matches_its_numbers():
    # "On that made-up machine GDS proper still wins, but by little"
    bounce = (GiB // (4 << 20)) * 28.0 + GiB / 12e3 + GiB / 24e3
    gds = 20.0 + GiB / 9e3
    assert 1.0 < bounce / gds < 1.3
    assert "GDS proper still wins, but by little" in SRC


def test_proxy_model_limits_match_the_text():
    df = lab06.proxy_model().set_index(["initiator", "size"])["limit"]
    # one proxy thread caps small messages; GPU threads move the limit to the NIC or the link
    assert df[("CPU proxy", 8)] == "posting"
    assert df[("GPU-initiated", 8)] in ("NIC", "link")
    assert df[("CPU proxy", 1 << 20)] == df[("GPU-initiated", 1 << 20)] == "link"
    assert lab06.proxy_model().attrs["provenance"]["kind"] == "modelled"


def _recording(folder: Path, rows: list[dict], sidecar: bool = True) -> None:
    cols = ["storage", "cache", "method", "size", "reps", "t_p50_us", "bw_gbps", "read_p50_us", "copy_p50_us",
            "cufile_mode", "verified"]
    lines = [",".join(cols)] + [",".join(str(r.get(c, "")) for c in cols) for r in rows]
    (folder / "h200-storage-reads.csv").write_text("\n".join(lines) + "\n")
    if sidecar:
        doc = {"provenance": {"kind": "recorded", "hardware": "NVIDIA H200, PCIe Gen5 x16, driver 580.159.04",
                              "date": "2026-12-04", "command": "python3 bench/record_storage.py OUTDIR"},
               "report": {"cufile_probe": {"mode": "compat", "why": "nvidia_fs is not loaded"},
                          "driver_properties": {"nvfs_major_version": 0, "nvfs_minor_version": 0,
                                                "allow_compat_mode": True}}}
        (folder / "h200-storage-reads.json").write_text(json.dumps(doc))


ROWS = [{"storage": "tmpfs", "cache": "memory", "method": m, "size": s, "reps": 5, "t_p50_us": s / 5e3,
         "bw_gbps": 5.0, "read_p50_us": "" if m == "cufile" else s / 1e4,
         "copy_p50_us": "" if m == "cufile" else s / 1e4, "cufile_mode": "compat" if m == "cufile" else "",
         "verified": True}
        for m in ("cufile", "pinned_read_copy", "pageable_read_copy") for s in (4096, 1 << 20)]


def test_recorded_storage_reads_csv_and_sidecar(tmp_path):
    _recording(tmp_path, ROWS)
    df, why = lab06.recorded_storage(str(tmp_path))
    assert len(df) == len(ROWS) and why.startswith("recorded") and "H200" in why
    prov = df.attrs["provenance"]
    assert prov["kind"] == "recorded" and prov["command"].startswith("python3 bench/record_storage.py")
    note = lab06.recorded_mode_note(df)
    assert "cuFile mode in the recording: compat" in note and "nvidia-fs version 0.0" in note
    fig = lab06.storage_figure(df, measured=True)
    assert len(fig.data) == 3 and "recorded" in fig.layout.title.text


def test_no_recording_or_no_sidecar_says_so(tmp_path):
    df, why = lab06.recorded_storage(str(tmp_path))
    assert df is None and why == lab06.NO_RECORDING and "no recording of this machine is shipped" in why
    _recording(tmp_path, ROWS, sidecar=False)
    df, why = lab06.recorded_storage(str(tmp_path))
    assert df is None and "lack their JSON sidecar" in why


def test_shipped_recording_if_any_agrees_with_the_text():
    df, why = lab06.recorded_storage()
    if df is None:
        pytest.skip(why)
    assert {"storage", "cache", "method", "size", "t_p50_us", "bw_gbps", "cufile_mode"} <= set(df.columns)
    assert df["verified"].astype(str).eq("True").all(), "every recorded read left the file's bytes in GPU memory"
    rep = df.attrs["provenance"]["report"]
    # the lab says: on the recorded H200 nvidia_fs is not loaded and cuFile runs in compatibility mode
    if "H200" in df.attrs["provenance"]["hardware"]:
        assert rep["cufile_probe"]["nvidia_fs"]["loaded"] is False
        assert set(df.loc[df["method"] == "cufile", "cufile_mode"]) <= {"compat"}


def test_lab_cites_its_published_figure_and_corrects_the_seed():
    assert "arXiv:2511.15076" in SRC and "16.7 µs" in SRC and "H100" in SRC
    assert "Neither is." in SRC and "needs an RDMA NIC" in SRC
