"""Lab 06 (GPUDirect's siblings): its support code, and the claims its text makes, recomputed.

The lab runs without a GPU and without a storage recording. The lab's storage and GPU-initiated
tables are adapters over gdrlab.model.storage and gdrlab.model.initiated; every sentence of the lab
about a model result is recomputed here from gdrlab.model (not from the lab's code) and checked
against the text. The reading of a recording is checked on a synthetic one and the shipped one.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gdrlab.labsupport import lab06
from gdrlab.model import initiated as I
from gdrlab.model import storage as S

ROOT = Path(__file__).resolve().parents[2]
SRC = (ROOT / "labs" / "src" / "06-siblings.py").read_text(encoding="utf-8")
TEXT = re.sub(r"\s*\n#\s*", " ", SRC)        # markdown lines joined, so sentences read across line breaks
MiB, GiB = 1 << 20, 1 << 30


def _bw(df) -> dict[str, float]:
    return dict(zip(df["method"], df["bw_gbps"], strict=True))


# ------------------------------------------------------------------ the storage model: the package's
def test_storage_params_are_the_packages_drive_with_levels_and_sources():
    params = lab06.storage_params()
    assert params == S.drive("nvme-gen4")
    for name, (value, level, source) in params.items():
        assert value > 0 and level in ("published", "measured", "fitted", "assumed") and source, name


def test_storage_model_is_predict_storage_in_the_labs_columns():
    sizes = [4096, MiB, MiB + 1, GiB]
    lab = lab06.storage_model(sizes=sizes, placement="cross socket")
    ref = S.predict_storage("h200-lab", sizes, placement="cross-socket").set_index(["method", "size"])
    got = lab.set_index(["method", "size"])
    assert set(got.index) == set(ref.index)
    for key in ref.index:
        assert got.loc[key, "t_us"] == pytest.approx(ref.loc[key, "lat_us"], rel=1e-12), key
        assert got.loc[key, "bw_gbps"] == pytest.approx(ref.loc[key, "bw_gbps"], rel=1e-12), key
    prov = lab.attrs["provenance"]
    assert prov["kind"] == "modelled" and prov["profile"] == "h200-lab" and prov["level"]
    assert prov["drive_placement"] == "cross-socket" and prov["storage_levels"]["drive_read_gbps"] == "published"
    compat = got.xs("cufile-compat")
    assert list(compat.loc[[MiB, MiB + 1, GiB], "chunks"]) == [1, 2, GiB // MiB]
    assert compat.loc[MiB + 1, "last_chunk"] == 1
    over = lab06.storage_model({"drive_read_gbps": 3.0}, sizes=[GiB])
    assert over.attrs["provenance"]["storage_levels"]["drive_read_gbps"] == "override"


def test_cold_and_page_cache_rankings_agree_with_the_text():
    cold = _bw(S.predict_storage("h200-lab", [GiB]))
    warm = _bw(S.predict_storage("h200-lab", [GiB], page_cache=True))
    # "from a cold drive it is the slowest of the four, below both plain read() paths; GDS proper ... the fastest"
    assert cold["gds"] > cold["read-pinned"] > cold["read-pageable"] > cold["cufile-compat"]
    assert "from a cold drive it is the slowest of the four, below both plain `read()` paths" in TEXT
    assert "GDS proper, which never touches host memory, is the fastest" in TEXT
    assert max(warm, key=warm.get) == "gds"
    # "expect it at or below pinned_read_copy, never above it"
    assert cold["cufile-compat"] <= cold["read-pinned"] and warm["cufile-compat"] <= warm["read-pinned"]
    assert "expect it at or below `pinned_read_copy`, never above it" in TEXT
    # "compat mode, paying the drive's latency per bounce-buffer piece, the slowest"
    assert min(cold, key=cold.get) == "cufile-compat"
    assert "compat mode, paying the drive's latency per bounce-buffer piece, the slowest" in TEXT
    # the rendered ranking is computed in the cell, not typed: no model rate at 1 GiB appears in the text
    for bw in list(cold.values()) + list(warm.values()):
        assert f"{bw:.2f}" not in SRC and f"{bw:.1f} GB/s" not in SRC


def test_bounce_buffer_steps_agree_with_the_text():
    b = int(S.drive("nvme-gen4")["bounce_bytes"][0])
    t = S.predict_storage("h200-lab", [b, b + 1], ["cufile-compat"]).set_index("size")["lat_us"]
    # one more piece costs one more read's fixed cost (the drive's first byte, cold)
    assert t[b + 1] - t[b] >= S.drive("nvme-gen4")["drive_lat_us"][0]
    assert "pays the drive's first-byte latency again for every piece" in TEXT
    assert "STEP_NOTE" in SRC and "watch the fixed costs per chunk take over" in TEXT


def test_placement_claims_agree_with_the_model():
    g = GiB
    h_same = _bw(S.predict_storage("h200-lab", [g], placement="same-switch"))
    h_far = _bw(S.predict_storage("h200-lab", [g], placement="cross-socket"))
    assert h_far["gds"] == pytest.approx(h_same["gds"])       # no placement cost for one Gen4 drive on h200-lab
    why = S.explain_storage("h200-lab", "gds", g, placement="cross-socket")
    assert why["slowest_link"] == "drive" and why["links_gbps"]["peer-write"] > why["links_gbps"]["drive"]
    assert S.drive("nvme-gen4")["drive_read_gbps"][0] == 7.0
    assert "one PCIe 4.0 x4 drive (7 GB/s) is slower than even the cross-socket peer write" in TEXT
    assert "the model finds no placement cost there" in TEXT
    k_same = _bw(S.predict_storage("kepler-snb-2013", [g], placement="same-switch"))
    k_far = _bw(S.predict_storage("kepler-snb-2013", [g], placement="cross-socket"))
    assert S.explain_storage("kepler-snb-2013", "gds", g, placement="cross-socket")["slowest_link"] == "peer-write"
    assert k_far["gds"] < min(v for k, v in k_far.items() if k != "gds") and k_same["gds"] > max(k_same.values()) - 1e-9
    assert "GDS proper falls below every bounce-buffer method" in TEXT
    assert "(`kepler-snb-2013` in the model; not one Gen4 drive on `h200-lab`)" in TEXT
    assert "cross-socket factor" not in TEXT


def test_exercise_1_after_text_matches_its_numbers():
    # "On that made-up machine GDS proper still wins, but by little" (the exercise's own made-up inputs)
    bounce = (GiB // (4 << 20)) * 28.0 + GiB / 12e3 + GiB / 24e3
    gds = 20.0 + GiB / 9e3
    assert 1.0 < bounce / gds < 1.3
    assert "GDS proper still wins, but by little" in TEXT and "(9 GB/s, below the drive's 12)" in TEXT


# ------------------------------------------------------------------ GPU-initiated: the package's model
def test_proxy_model_is_predict_initiated_in_the_labs_columns():
    lab = lab06.proxy_model([8, 4096]).set_index(["initiator", "size"])
    ref = I.predict_initiated("hopper-ndr", [8, 4096]).set_index(["initiator", "size"])
    for (who, size), row in ref.iterrows():
        name = {"proxy": "CPU proxy", "gpu": "GPU-initiated"}[who]
        assert lab.loc[(name, size), "mops"] == pytest.approx(row["mops"]) and lab.loc[(name, size), "limit"] == row["limit"]
    prov = lab06.proxy_model([8]).attrs["provenance"]
    assert prov["kind"] == "modelled" and prov["profile"] == "hopper-ndr" and prov["level"]


def test_initiated_claims_agree_with_the_model():
    sizes = [2 ** k for k in range(3, 23)]
    df = I.predict_initiated("hopper-ndr", sizes)
    rate = df.set_index(["initiator", "size"])
    # "one proxy thread caps small messages"; the GPU's "own posting is still the limit, not the NIC"
    assert rate.loc[("proxy", 8), "limit"] == "proxy thread"
    assert rate.loc[("gpu", 8), "limit"] == "GPU posting"
    assert "one proxy thread caps small messages at a few million per second" in TEXT
    assert 1 <= rate.loc[("proxy", 8), "mops"] < 10
    assert "their own posting is still the limit, not the NIC" in TEXT
    assert "move the limit to the NIC or the link" not in TEXT
    # "raise the rate many times over"
    assert rate.loc[("gpu", 8), "mops"] / rate.loc[("proxy", 8), "mops"] >= 5
    # "the wire limits the GPU's rate from under 1 KiB and the proxy's from above 8 KiB"
    first_wire = {who: int(g.loc[g["limit"] == "wire", "size"].min()) for who, g in df.groupby("initiator")}
    assert first_wire["gpu"] <= 1024 and rate.loc[("gpu", first_wire["gpu"] // 2), "limit"] != "wire"
    assert first_wire["proxy"] > 8192
    assert "the wire limits the GPU's rate from under 1 KiB and the proxy's from above 8 KiB" in TEXT
    assert "by the wire from under 1 KiB" in TEXT
    # "the GPU's single put is slower"
    assert rate.loc[("gpu", 8), "lat_us"] > rate.loc[("proxy", 8), "lat_us"]
    assert "so the GPU's single put is slower" in TEXT and "one message's latency is a little higher from the GPU" in TEXT
    # "The NIC's message rate is a published figure; every other parameter is assumed"
    levels = {k: v.level for k, v in I.INITIATED_PARAMS.items()}
    assert levels.pop("nic_mops") == "published" and set(levels.values()) == {"assumed"}
    assert "The NIC's message rate is a published figure; every other parameter is **assumed**" in TEXT
    assert f"{rate.loc[('gpu', 8), 'mops'] / rate.loc[('proxy', 8), 'mops']:.0f}x" not in TEXT


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
