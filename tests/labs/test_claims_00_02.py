"""The figures labs 00-02 state, recomputed from the data they come from (issue 25, item 2).

Each test reads the lab's source text and the recorded data or model it quotes, and fails when the
two disagree, so an edit to either side cannot leave the text behind.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "labs" / "src"
RECORDED = ROOT / "gdrlab" / "data" / "recorded"


def _text(name: str) -> str:
    return (SRC / name).read_text(encoding="utf-8")


def _h200_gpu() -> dict:
    return json.loads((RECORDED / "h200-doctor.json").read_text())["report"]["gpus"][0]


def test_h200_memory_as_recorded_not_141e9():
    """N10: the H200's memory is the driver's byte count; "141GB" is neither 141e9 nor 141 GiB."""
    mem = _h200_gpu()["total_mem_bytes"]
    assert mem != 141 * 10**9 and mem != 141 * 2**30
    assert f"{mem:,}" in _text("01-bar1-exposure.py")
    gib = f"{mem / 2**30:.1f} GiB"
    assert gib in _text("01-bar1-exposure.py")
    lab00 = _text("00-setup-check.py")
    assert "141 * 10**9   #" not in lab00 and 'h200["gpus"][0]["total_mem_bytes"]' in lab00
    from gdrlab.labsupport import lab00 as support
    assert support.H200_FACTS["gpus"][0]["total_mem_bytes"] == mem


def test_h200_bar1_is_the_next_power_of_two_above_its_memory():
    gpu = _h200_gpu()
    bar1, mem = gpu["bar1_total_bytes"], gpu["total_mem_bytes"]
    assert bar1 == 1 << (mem - 1).bit_length() == 256 * 2**30
    assert "256 GiB" in _text("01-bar1-exposure.py") and "256 GiB" in _text("00-setup-check.py")


def test_bar1_baseline_and_growth_on_the_h200():
    """Lab 01: "about 1 GiB per GiB allocated, above a baseline of about 0.5 GiB"."""
    from gdrlab import grading

    text = _text("01-bar1-exposure.py")
    assert "about 1 GiB per GiB allocated, above a baseline of about 0.5 GiB" in text
    df = grading.dataset("h200-bar1")
    base = df.loc[df["allocated_bytes"] == 0, "bar1_used_bytes"].iloc[0] / 2**30
    assert round(base, 1) == 0.5
    growth = (df["bar1_used_bytes"] - df["bar1_used_bytes"].iloc[0]) / df["allocated_bytes"].where(df["allocated_bytes"] > 0)
    assert growth.dropna().between(0.95, 1.05).all()


def test_copy_floor_and_rate_quoted_in_lab02():
    """Lab 02: small copies "5-7 us" and "about 55 GB/s pinned" on the H200."""
    from gdrlab import grading

    text = _text("02-p2p-dma.py")
    assert "5-7 us" in text and "about 55 GB/s pinned" in text
    for name in ("h200-copy-h2d-pinned", "h200-copy-d2h-pinned", "h200-copy-h2d-pageable"):
        d = grading.dataset(name)
        small = d.loc[d["size"] <= 4096, "lat_p50_us"]
        assert 5.0 <= small.min() and small.max() <= 7.0, name
    for name in ("h200-copy-h2d-pinned", "h200-copy-d2h-pinned"):
        d = grading.dataset(name)
        assert round(float(d.loc[d["size"] == d["size"].max(), "bw_gbps"].iloc[0])) == 55, name


def test_pageable_factor_quoted_in_lab02():
    """Lab 02: pageable costs "a factor of about 3 (H2D) to 4 (D2H)" at large sizes."""
    from gdrlab import grading

    text = _text("02-p2p-dma.py")
    assert "about 3 (H2D) to 4 (D2H)" in text
    for d, want in (("h2d", 3), ("d2h", 4)):
        pin, pag = grading.dataset(f"h200-copy-{d}-pinned"), grading.dataset(f"h200-copy-{d}-pageable")
        n = max(set(pin["size"]) & set(pag["size"]))
        ratio = float(pin.loc[pin["size"] == n, "bw_gbps"].iloc[0] / pag.loc[pag["size"] == n, "bw_gbps"].iloc[0])
        assert round(ratio) == want, (d, ratio)


def test_perftest_mb_per_sec_is_two_to_the_twenty_bytes():
    """N14: perftest #241's "11000" and "23000" MB/sec (2^20 B/s) are 11.5 and 24.1 GB/s."""
    text = _text("02-p2p-dma.py")
    for mbs, gbs in ((11000, "11.5"), (23000, "24.1")):
        assert f"{mbs * 2**20 / 1e9:.1f}" == gbs
        assert f"{gbs} GB/s" in text


def test_pcie_placement_table_has_good_and_poor_placements():
    """N8: under one switch GDR runs near the NIC's line rate; across sockets it falls."""
    from gdrlab.labsupport import lab02

    df = lab02.placement_table()
    assert (df["gdr_gbps_same-switch"] > df["gdr_gbps_cross-socket"]).all()
    assert df.attrs["provenance"]["kind"] == "modelled"
    assert "lab02.placement_table()" in _text("02-p2p-dma.py")


def test_k20_gen2_bound():
    """Lab 02: PCIe Gen2 x16 carries 8 GB/s per direction after 8b/10b encoding."""
    assert 5e9 * 16 * 8 / 10 / 8 / 1e9 == pytest.approx(8.0)
    assert "8 GB/s per direction on paper (5 GT/s × 16" in _text("02-p2p-dma.py")


def test_no_graded_number_in_what_you_saw():
    """Issue 24 item 2: the summaries name no value an exercise grades."""
    saw = {name: _text(name).split('id="' + name[:2] + '-you-saw"')[1].split("# %%")[0]
           for name in ("00-setup-check.py", "01-bar1-exposure.py", "02-p2p-dma.py")}
    assert "staged`, `shared`, `pipelined`" not in saw["00-setup-check.py"]
    for graded in ("224 MiB", "three 64 MiB", "240 MiB"):
        assert graded not in saw["01-bar1-exposure.py"]
    for graded in ("10x", "4x lower"):
        assert graded not in saw["02-p2p-dma.py"]


def test_seed_4mb_380gbps_3us_is_computed_through_units():
    """Seed error 7 (third figure): 4 MiB at 380 Gb/s takes about 88 µs, not 3 µs; the lab computes
    it through gdrlab.units."""
    from gdrlab import units

    assert units.to_gbps(380, "Gb/s") == pytest.approx(47.5)
    assert 4 * 2**20 * 8 / 380e9 * 1e6 == pytest.approx(88.3, abs=0.1)     # by hand: bits over bit rate
    text = _text("02-p2p-dma.py")
    cell = text[text.index('id="02-seed-4mb-arithmetic"'):text.index('id="02-exercise-3-2-points"')]
    assert 'units.to_gbps(380, "Gb/s")' in cell and "88" not in cell      # printed from the arithmetic
