"""Support code of labs 00-02 (gdrlab.labsupport.lab00/01/02), checked against the figures measured
on the H200 machines (CURRICULUM: BAR1 256 GiB, BARs 16 MiB / 256 GiB / 32 MiB, dma-buf mmap errno
524, ~1 GiB BAR1 per GiB allocated, pinned copies ~55 GB/s, P2P 393 vs 38.2 GB/s at 256 MiB)."""
from __future__ import annotations

import numpy as np
import pytest

from gdrlab import engine, recorded
from gdrlab.labsupport import lab00, lab01, lab02

GiB, MiB = 1 << 30, 1 << 20
CUDA = engine.cuda_status()
needs_gpu = pytest.mark.skipif(not CUDA["usable"], reason="no CUDA GPU: " + CUDA["reason"])


def _has(name):
    return name in recorded.available()


# ------------------------------------------------------------------------------------ lab 00
def test_h200_report_matches_the_machine():
    report, where = lab00.h200_report()
    assert report["provenance"]["kind"] == "recorded" and where
    runnable = {p for p, v in report["paths"].items() if v["available"]}
    assert runnable == {"host", "staged", "shared", "pipelined"}  # one GPU, no HCA, no gdrcopy
    assert "no RDMA device" in report["paths"]["gdr"]["reason"]
    assert report["gpus"][0]["bar1_total_bytes"] == 256 * GiB
    # What lab 00's exercise 3 relies on: DMA_BUF_SUPPORTED = 1 and libibverbs there, so an HCA is
    # the only missing part and no peer-memory module is needed.
    import copy

    from gdrlab.hw import path_availability

    whatif = copy.deepcopy(report)
    whatif["rdma_devices"] = [{"name": "mlx5_0", "active": True}]
    gdr = path_availability(whatif)["gdr"]
    assert gdr["available"] and "dma-buf" in gdr["reason"]


def test_paths_table_lists_every_path():
    from gdrlab.hw import PATHS

    report, _ = lab00.h200_report()
    table = lab00.paths_table(report)
    assert list(table.index) == list(PATHS)
    assert set(table.columns) >= {"available", "reason", "fix"}


def test_host_sweep_runs_live_anywhere(monkeypatch):
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    live, model = lab00.host_sweep("8:64K")
    assert list(live["size"]) == [8, 512, 65536]  # quick: first, middle, last power of two
    assert live["verified"].all() and live.attrs["provenance"]["kind"] == "live"
    if model is not None:
        assert model.attrs["provenance"]["kind"] == "modelled"


# ------------------------------------------------------------------------------------ lab 01
def test_errno_names():
    assert lab01.errno_name(524).startswith("ENOTSUPP")
    assert lab01.errno_name(12).startswith("ENOMEM")
    assert "worked" in lab01.errno_name(0)


def test_h200_bars_as_sysfs_lists_them():
    bars = lab01.h200_bars()
    assert dict(zip(bars["sysfs_bar"], bars["size_bytes"])) == {0: 16 * MiB, 2: 256 * GiB, 4: 32 * MiB}
    labelled = lab01.h200_bars(label=True)
    assert list(labelled.loc[labelled["nvidia_calls_it"] == "BAR1", "sysfs_bar"]) == [2]


def test_k20_wall_in_the_model():
    table = lab01.register_table(lab01.K20_PROFILE, [64 * MiB, 256 * MiB, GiB])
    # 64 MiB fits in a 256 MB BAR1; the whole 256 MiB cannot (the driver keeps some for itself).
    assert list(table["registered"]) == [True, False, False]
    assert table["error"].iloc[1].startswith("ENOMEM")
    # kepler-snb-2013 is calibrated on MVAPICH2 runs: its label says MPI level (not verbs).
    assert table.attrs["provenance"] == {"kind": "modelled", "profile": lab01.K20_PROFILE, "level": "MPI"}


def test_bar1_model_figure_has_provenance_and_units():
    fig = lab01.bar1_model_figure()
    assert "(modelled)" in fig.layout.title.text
    assert all("modelled, profile" in t.name for t in fig.data)
    assert "bytes" in fig.layout.xaxis.title.text and "bytes" in fig.layout.yaxis.title.text
    k20 = np.array(fig.data[0].y, dtype=float)
    assert np.isnan(k20[-1]) and np.isfinite(k20[0])  # the K20 curve ends at its wall


@pytest.mark.skipif(not _has("h200-bar1"), reason="h200-bar1 not shipped")
def test_recorded_bar1_grows_about_one_gib_per_gib():
    df = lab01.bar1_recorded()
    slope = np.polyfit(df["allocated_bytes"], df["bar1_used_bytes"], 1)[0]
    assert slope == pytest.approx(1.0, rel=0.05)


@pytest.mark.skipif(CUDA["usable"] or not _has("h200-dmabuf"), reason="checks the recorded fallback")
def test_dmabuf_falls_back_to_the_h200_record():
    res = lab01.live_or_recorded_dmabuf()
    assert res.source == "recorded" and "no GPU here" in res.why
    assert (res.data["cpu_mmap_errno"] == 524).all()
    assert (res.data["fd_size"] == res.data["size"]).all()


# ------------------------------------------------------------------------------------ lab 02
def test_copy_model_of_the_h200():
    pinned = lab02.copy_model("h2d", "pinned", [256 * MiB], profile=lab02.copy_profile())
    assert pinned["bw_gbps"].iloc[0] == pytest.approx(55.0, rel=0.1)
    pageable = lab02.copy_model("h2d", "pageable", [256 * MiB])
    assert pinned["bw_gbps"].iloc[0] / pageable["bw_gbps"].iloc[0] > 2
    assert pinned.attrs["provenance"]["kind"] == "modelled"


def test_alpha_beta_frame_is_the_formula():
    df = lab02.alpha_beta_frame(5.0, 50.0, [8, MiB])
    assert df["lat_us"].tolist() == pytest.approx([5.0 + 8 / 50e3, 5.0 + MiB / 50e3])
    assert df.attrs["provenance"]["kind"] == "modelled"


def test_p2p_model_shows_the_peer_access_gap():
    m = lab02.p2p_model([256 * MiB])
    gain = m["peer access on"]["bw_gbps"].iloc[0] / m["peer access off"]["bw_gbps"].iloc[0]
    assert gain == pytest.approx(393 / 38.2, rel=0.1)


@pytest.mark.skipif(len(engine.gpus()) >= 2, reason="checks the recorded fallback")
def test_p2p_falls_back_to_the_2x_h200_figures():
    res = lab02.p2p_data()
    assert res.source == "recorded" and ("no GPU here" in res.why or "needs 2 GPUs" in res.why)
    assert set(res.data["peer_access"]) == {True, False}


def test_copy_panel_rebuilds_when_a_control_changes():
    pytest.importorskip("anywidget")
    panel = lab02.copy_panel("8:1K")
    direction, memory, _profile = panel.children[0].children
    first = panel.sweep()
    memory.value = "pageable"
    second = panel.sweep()
    assert second is not first and "h2d pageable" in second.figure.data[-1].name
    assert any("modelled" in t.name for t in second.figure.data)


# ------------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@needs_gpu
def test_bar1_grows_while_allocating_on_this_gpu():
    row = lab01.bar1_measure(GiB)
    assert 0 <= row["bar1_delta_bytes"] <= 1.1 * GiB
    if row["bar1_total_bytes"] >= 64 * GiB:  # a large-BAR GPU maps every allocation (H200: ~1 GiB)
        assert row["bar1_delta_bytes"] >= 0.9 * GiB


@pytest.mark.gpu
@needs_gpu
def test_dmabuf_export_cannot_be_mapped_by_the_cpu():
    row = lab01.dmabuf_probe(64 * MiB)
    assert row["fd_size"] == 64 * MiB
    assert row["cpu_mmap_errno"] not in (0, None)  # 524 (ENOTSUPP) on the H200


@pytest.mark.gpu
@needs_gpu
def test_live_copies_pinned_beat_pageable(monkeypatch):
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    pinned = lab02.copy_data("h2d", "pinned", "8:64M")
    pageable = lab02.copy_data("h2d", "pageable", "8:64M")
    assert pinned.source == pageable.source == "live"
    assert pinned.data["bw_gbps"].iloc[-1] > pageable.data["bw_gbps"].iloc[-1]


@pytest.mark.gpu
@pytest.mark.multigpu
@pytest.mark.skipif(len(engine.gpus()) < 2, reason="needs 2 GPUs: found %d" % len(engine.gpus()))
def test_live_p2p_peer_access_is_faster(monkeypatch):
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    res = lab02.p2p_data("8:256M")
    assert res.source == "live"
    big = res.data[res.data["size"] == res.data["size"].max()].set_index("peer_access")["bw_gbps"]
    assert big[True] > big[False]


@pytest.mark.skipif(not _has("h200-dmabuf"), reason="h200-dmabuf not shipped")
def test_a_failed_dmabuf_export_falls_back_with_the_reason(monkeypatch):
    from gdrlab.errors import CudaError

    monkeypatch.setattr(engine, "cuda_status", lambda: {"usable": True, "reason": "", "driver_version": 13000})

    def refuse(size, device=0):
        raise CudaError("cuMemGetHandleForAddressRange: CUDA_ERROR_NOT_SUPPORTED")

    monkeypatch.setattr(lab01, "dmabuf_probe", refuse)
    res = lab01.live_or_recorded_dmabuf()
    assert res.source == "recorded"
    assert "dma-buf export failed here" in res.why and "CUDA_ERROR_NOT_SUPPORTED" in res.why


# ----------------------------------------------------------------------------- BARs from flags
_Z = "0x0000000000000000 0x0000000000000000 0x0000000000000000"
# Kepler-era GPU as Linux prints it: BAR0 32-bit registers, BAR1 64-bit 256 MiB, a 64-bit 32 MiB BAR, I/O.
_KEPLER = ["0x00000000f5000000 0x00000000f5ffffff 0x0000000000040200",
           "0x00000000e0000000 0x00000000efffffff 0x000000000014220c", _Z,
           "0x00000000f0000000 0x00000000f1ffffff 0x000000000014220c", _Z,
           "0x000000000000e000 0x000000000000e07f 0x0000000000040101"]
_NVME = ["0x00000000fe600000 0x00000000fe603fff 0x0000000000140204", _Z, _Z, _Z, _Z, _Z]


def _machine(tmp_path):
    from sysfs_builder import BRIDGE_CLASS, GPU_CLASS, INTEL, NVIDIA, SysfsTree

    t = SysfsTree(tmp_path)
    t.pci("0000:00:01.0", "pci0000:00", cls=BRIDGE_CLASS, vendor=INTEL, bars=[1 << 20])
    t.pci("0000:01:00.0", "0000:00:01.0", cls=GPU_CLASS, vendor=NVIDIA, bars=[16 << 20, 0, 256 << 30, 0, 32 << 20])
    kepler = t.pci("0000:02:00.0", "pci0000:00", cls=GPU_CLASS, vendor=NVIDIA, device=0x1028)
    (kepler / "resource").write_text("\n".join(_KEPLER + [_Z] * 7) + "\n")
    nvme = t.pci("0000:03:00.0", "pci0000:00", cls=0x010802, vendor=0x144D)
    (nvme / "resource").write_text("\n".join(_NVME + [_Z] * 7) + "\n")
    return t


def test_bar_layout_reads_widths_from_the_flags():
    from gdrlab.hw.bars import bar_layout

    bars = bar_layout("\n".join(_KEPLER))
    assert [(b["slot"], b["slots"], b["kind"], b["is_64bit"]) for b in bars] == [
        (0, "0", "mem", False), (1, "1-2", "mem", True), (3, "3-4", "mem", True), (5, "5", "io", False)]
    assert [b["size_bytes"] for b in bars] == [16 * MiB, 256 * MiB, 32 * MiB, 128]
    assert bars[1]["prefetchable"] and not bars[0]["prefetchable"]
    assert bar_layout(None) == [] and bar_layout("") == []
    assert bar_layout("garbage\n0x1 nothex 0x200\n" + _Z) == [], "malformed lines are skipped"


def test_gpu_bar1_is_found_from_flags_not_from_the_slot(tmp_path):
    _machine(tmp_path)
    bars, why = lab01.gpu_bars(str(tmp_path))
    assert why == ""
    bar1 = bars[bars["nvidia_calls_it"] == "BAR1"].set_index("pci_bus_id")["sysfs_bar"].to_dict()
    assert bar1 == {"0000:01:00.0": 2, "0000:02:00.0": 1}, "64-bit BAR0: slot 2; 32-bit BAR0: slot 1"
    assert set(bars.loc[bars["nvidia_calls_it"] == "BAR1", "size_bytes"]) == {256 * GiB, 256 * MiB}


def test_own_bars_lists_every_device_but_bridges(tmp_path):
    _machine(tmp_path)
    mine, why = lab01.own_bars(str(tmp_path))
    assert why == "" and mine.attrs["provenance"]["kind"] == "live"
    assert "0000:00:01.0" not in set(mine["pci_bus_id"]), "bridges have windows, not device BARs"
    nvme = mine[mine["pci_bus_id"] == "0000:03:00.0"].iloc[0]
    assert nvme["device"] == "NVMe storage" and nvme["vendor"] == "0x144d"
    assert bool(nvme["is_64bit"]) and not bool(nvme["prefetchable"]) and nvme["size_bytes"] == 16 * 1024
    assert nvme["slots"] == "0-1" and nvme["flags"] == "0x00140204"
    assert "io" not in set(mine.get("kind", [])), "only memory BARs are listed"
    (tmp_path / "container").mkdir()
    empty, why = lab01.own_bars(str(tmp_path / "container"))
    assert len(empty) == 0 and "no PCI devices" in why
    empty, why = lab01.own_bars(str(tmp_path / "missing"))
    assert len(empty) == 0 and why.startswith("cannot read sysfs")


def test_recorded_h200_resource_round_trips_and_kepler_layout_is_32bit_bar0():
    h200 = lab01.bar_table(lab01.h200_resource(), label=True)
    assert dict(zip(h200["sysfs_bar"], h200["nvidia_calls_it"], strict=True)) == {0: "BAR0", 2: "BAR1", 4: ""}
    kepler = lab01.bar_table(lab01.KEPLER_RESOURCE, label=True)
    assert list(kepler.loc[kepler["nvidia_calls_it"] == "BAR1", "sysfs_bar"]) == [1]


def test_host_copy_live_measures_this_cpu_and_refuses_huge_buffers(monkeypatch):
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    df = lab02.host_copy_live("4K:1M", repeats=3)
    assert df.attrs["provenance"]["kind"] == "live" and "numpy.copyto" in df.attrs["provenance"]["what"]
    assert list(df["size"]) == sorted(df["size"]) and df["size"].iloc[0] == 4096 and df["size"].iloc[-1] == 1 << 20
    assert (df["lat_min_us"] <= df["lat_p50_us"]).all() and (df["lat_p50_us"] > 0).all() and df["verified"].all()
    # bw_gbps is bytes per microsecond / 1e3: the arithmetic of the row itself.
    row = df.iloc[-1]
    assert row["bw_gbps"] == pytest.approx(row["size"] / row["lat_p50_us"] / 1e3)
    with pytest.raises(ValueError, match="64 MiB"):
        lab02.host_copy_live([128 << 20], repeats=1)
    with pytest.raises(ValueError, match="repeats"):
        lab02.host_copy_live([4096], repeats=-1)


def test_paths_view_shows_reasons_and_fixes_in_full():
    """Issue 34 item 9: the display keeps the whole fix (a DataFrame's repr cut it at 50 characters)."""
    pytest.importorskip("jinja2")   # pandas' Styler; JupyterLab brings it
    report, _ = lab00.h200_report()
    html = lab00.paths_view(report).to_html()
    for v in lab00.paths_table(report)["fix"]:
        if v:
            assert str(v).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in html or str(v)[:60] in html
    assert "white-space: normal" in html
