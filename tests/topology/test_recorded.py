"""gdrlab.recorded: loading shipped measurements with provenance, and the live/recorded choice."""
from __future__ import annotations

import json

import pytest

from gdrlab import recorded
from gdrlab.errors import Unavailable


@pytest.fixture()
def rec_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GDRLAB_RECORDED_DIR", str(tmp_path))
    return tmp_path


def _write(d, name, doc):
    (d / f"{name}.json").write_text(json.dumps(doc))


def test_missing_file_is_a_file_not_found_error_naming_the_file(rec_dir):
    with pytest.raises(FileNotFoundError, match="no recorded data shipped for 'h200-bar1'"):
        recorded.load("h200-bar1")
    assert recorded.available() == []


def test_rows_become_a_dataframe_with_provenance(rec_dir):
    prov = {"kind": "recorded", "hardware": "NVIDIA H200", "date": "2026-11", "command": "x"}
    _write(rec_dir, "demo", {"provenance": prov, "rows": [{"size": 8, "bw_gbps": 1.5}, {"size": 16, "bw_gbps": 3.0}]})
    df = recorded.load("demo.json")
    assert list(df["size"]) == [8, 16]
    assert df.attrs["provenance"]["hardware"] == "NVIDIA H200"
    assert recorded.available() == ["demo"]
    assert recorded.provenance_label(df) == "recorded on NVIDIA H200 (2026-11)"


def test_report_documents_load_with_load_report_only(rec_dir):
    _write(rec_dir, "doc", {"provenance": {"kind": "recorded", "hardware": "H"}, "report": {"gpus": []}})
    rep = recorded.load_report("doc")
    assert rep["gpus"] == [] and rep["provenance"]["hardware"] == "H"
    with pytest.raises(recorded.RecordedDataInvalid, match="load_report"):
        recorded.load("doc")


@pytest.mark.parametrize("doc", [{"rows": []}, {"provenance": {"kind": "guessed"}, "rows": []}, [1, 2]])
def test_documents_without_valid_provenance_are_refused(rec_dir, doc):
    _write(rec_dir, "bad", doc)
    with pytest.raises(recorded.RecordedDataInvalid, match="provenance"):
        recorded.load("bad")


def test_invalid_json_and_path_like_names_are_refused(rec_dir):
    (rec_dir / "broken.json").write_text("{not json")
    with pytest.raises(recorded.RecordedDataInvalid, match="not valid JSON"):
        recorded.load("broken")
    with pytest.raises(recorded.RecordedDataInvalid, match="plain file names"):
        recorded.load("../etc/passwd")


def test_labels_for_each_kind():
    assert recorded.provenance_label({"kind": "live", "host": "n1", "gpu": "NVIDIA H200"}) == "live on n1 (NVIDIA H200)"
    assert recorded.provenance_label({"kind": "modelled", "profile": "k20"}) == "modelled, profile k20"
    with pytest.raises(ValueError, match="no provenance"):
        recorded.provenance_label({"kind": "rumour"})


def test_live_or_recorded_prefers_live(rec_dir):
    import pandas as pd

    res = recorded.live_or_recorded(lambda: pd.DataFrame({"size": [1]}), "anything")
    assert res.source == "live" and res.data.attrs["provenance"]["kind"] == "live"


def test_live_or_recorded_falls_back_and_says_why(rec_dir):
    _write(rec_dir, "rec", {"provenance": {"kind": "recorded", "hardware": "NVIDIA H200"}, "rows": [{"size": 8}]})

    def no_gpu():
        raise Unavailable("no CUDA driver (libcuda.so.1 not found)")

    res = recorded.live_or_recorded(no_gpu, "rec")
    assert res.source == "recorded"
    assert "libcuda.so.1 not found" in res.why and "NVIDIA H200" in res.why
    none = recorded.live_or_recorded(no_gpu, "absent")
    assert none.source == "none" and none.data is None
    assert "no recorded data shipped for 'absent'" in none.why
    skipped = recorded.live_or_recorded(lambda: pytest.fail("must not measure"), "rec", live=False)
    assert skipped.source == "recorded"


def test_live_or_recorded_does_not_hide_real_errors(rec_dir):
    def broken():
        raise RuntimeError("a bug, not missing hardware")

    with pytest.raises(RuntimeError, match="a bug"):
        recorded.live_or_recorded(broken, "rec")


def test_shipped_p2p_figures_match_the_curriculum():
    """The 2x H200 file holds the figures quoted in CURRICULUM.md (18.0 vs 138 GB/s at 1 MiB,
    38.2 vs 393 GB/s at 256 MiB, 18.7 vs 4.7 us at 8 B)."""
    df = recorded.load("h200x2-p2p-curriculum")
    by = {(bool(r.peer_access), int(r.size)): r for r in df.itertuples()}
    assert by[(False, 1 << 20)].bw_gbps == 18.0 and by[(True, 1 << 20)].bw_gbps == 138.0
    assert by[(False, 1 << 28)].bw_gbps == 38.2 and by[(True, 1 << 28)].bw_gbps == 393.0
    assert by[(False, 8)].lat_p50_us == 18.7 and by[(True, 8)].lat_p50_us == 4.7
    for r in df.itertuples():  # derived columns agree with size / time
        assert r.size / (r.lat_p50_us * 1e3) == pytest.approx(r.bw_gbps, rel=2e-3)
    assert df.attrs["provenance"]["kind"] == "recorded" and "H200" in df.attrs["provenance"]["hardware"]


def test_short_label_keeps_the_first_two_parts_of_the_hardware():
    prov = {"kind": "recorded", "hardware": "NVIDIA H200, PCIe Gen5 x16, driver 580.159.04, Xeon",
            "date": "2026-11-30T04:00:55+00:00"}
    assert recorded.provenance_label(prov, short=True) == "recorded on NVIDIA H200, PCIe Gen5 x16 (2026-11-30)"
    assert recorded.provenance_label(prov).startswith("recorded on NVIDIA H200, PCIe Gen5 x16, driver 580.159.04")
