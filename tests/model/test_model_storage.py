"""The storage route (gdrlab.model.storage): hand derivations, the physics it must show, the fit
to the H200 recording and how close the model comes to that recording."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gdrlab import model
from gdrlab.errors import InvalidArgument
from gdrlab.model import storage as S

MiB, GiB = 1 << 20, 1 << 30
RECORDING = Path(__file__).resolve().parents[2] / "gdrlab" / "data" / "recorded" / "h200-storage-reads.csv"

# Round numbers, so every expected value below is worked out by hand in its comment.
PROF = model.get_profile("hopper-ndr").with_overrides(
    gpu_pcie_gbps=50, ce_eff=0.8, pcie_eff=0.9, ce_launch_h2d_us=5, ce_ramp_h2d_us=0, p2p_write_gbps_switch=30,
    p2p_write_gbps_xsocket=2, xsocket_gbps=20, pageable_h2d_us=8, pageable_h2d_gbps=10,
    pageable_chunk_bytes=1e6, cpu_memcpy_gbps=10)
DRIVE = {"drive_read_gbps": 4, "drive_lat_us": 100, "drive_pcie_gbps": 8, "pagecache_gbps": 5,
         "read_syscall_us": 2, "bounce_bytes": 1e6, "gds_io_bytes": 2e6, "gds_io_us": 5}


def t(method, size, **kw):
    return float(S.storage_us(PROF, method, [size], **{**DRIVE, **kw})[0])


def test_gds_by_hand():
    # 100 us to the first byte + 2 pieces x 5 us + 4e6 B at the drive's 4 GB/s (4e3 B/us) = 1110 us
    assert t("gds", 4e6) == pytest.approx(1110.0)
    # across sockets the peer write (2 GB/s) is the slowest link: 100 + 10 + 4e6 / 2e3 = 2110 us
    assert t("gds", 4e6, placement="cross-socket") == pytest.approx(2110.0)
    # the page cache plays no part: GDS reads the drive with O_DIRECT
    assert t("gds", 4e6, page_cache=True) == pytest.approx(1110.0)


def test_compat_by_hand():
    # 4 pieces of 1e6 B; each: read 100 + 1e6 / 4e3 = 350, copy 5 + 1e6 / 40e3 = 30 -> 380; x 4 = 1520 us
    assert t("cufile-compat", 4e6) == pytest.approx(1520.0)
    # from the page cache each read is 2 + 1e6 / 5e3 = 202 -> 232 a piece, 928 us
    assert t("cufile-compat", 4e6, page_cache=True) == pytest.approx(928.0)
    # 2.5e6 B: two full pieces (760) and a last of 0.5e6: read 100 + 125, copy 5 + 12.5 -> 1002.5 us
    assert t("cufile-compat", 2.5e6) == pytest.approx(1002.5)


def test_read_then_copy_by_hand():
    # read 100 + 4e6 / 4e3 = 1100, pinned copy 5 + 4e6 / 40e3 = 105 -> 1205 us
    assert t("read-pinned", 4e6) == pytest.approx(1205.0)
    # page cache: read 2 + 4e6 / 5e3 = 802, copy 105 -> 907 us
    assert t("read-pinned", 4e6, page_cache=True) == pytest.approx(907.0)
    # pageable copy: 8 + first chunk 1e6 / 1e4 (memcpy) + 4e6 / 1e4 (pageable rate) = 508; + 802 = 1310 us
    assert t("read-pageable", 4e6, page_cache=True) == pytest.approx(1310.0)


def test_compat_steps_at_every_bounce_multiple():
    """One byte past a multiple of the bounce buffer costs a whole extra read and copy launch."""
    for k in (1, 3, 7):
        jump = t("cufile-compat", k * 1e6 + 1) - t("cufile-compat", k * 1e6)
        assert jump == pytest.approx(100 + 5, abs=0.01)     # drive latency + copy launch (+ 1 B of bytes)
    # a bigger bounce buffer pays fewer of them
    assert t("cufile-compat", 64e6, bounce_bytes=16e6) < t("cufile-compat", 64e6)


def test_gds_needs_the_switch_on_an_old_host():
    """On Sandy Bridge the peer write across sockets is the bottleneck: GDS loses to compat mode there,
    and wins under one switch."""
    big = [GiB]
    xs = S.predict_storage("kepler-snb-2013", big, placement="cross-socket")
    same = S.predict_storage("kepler-snb-2013", big, placement="same-switch")
    lat = lambda df, m: float(df.loc[df["method"] == m, "lat_us"].iloc[0])
    assert lat(xs, "gds") > lat(xs, "cufile-compat")
    assert lat(same, "gds") < lat(same, "cufile-compat")
    assert S.explain_storage("kepler-snb-2013", "gds", GiB, placement="cross-socket")["slowest_link"] == "peer-write"


def test_rows_carry_level_and_provenance():
    df = S.predict_storage("h200-lab", "4K,1M", drive_name="h200-vda", drive_read_gbps=3)
    prov = df.attrs["provenance"]
    assert prov["kind"] == "modelled" and prov["level"] == "verbs" and prov["drive"] == "h200-vda"
    assert prov["storage_levels"]["drive_read_gbps"] == "override"
    assert prov["storage_levels"]["drive_lat_us"] == "fitted"
    assert set(df["method"]) == set(S.STORAGE_METHODS) and (df["level"] == "verbs").all()
    for name in S.drive_names():
        for key, (value, level, source) in S.drive(name).items():
            assert level in ("published", "measured", "fitted", "assumed") and source and value > 0, (name, key)


@pytest.mark.parametrize("kw, words", [({"drive_name": "floppy"}, "unknown drive"),
                                       ({"drive_read_gbps": 0}, "must be positive"),
                                       ({"warp_drive": 1}, "unknown storage parameter"),
                                       ({"placement": "next-door"}, "unknown drive placement")])
def test_bad_input_is_one_clear_line(kw, words):
    with pytest.raises(InvalidArgument, match=words) as exc:
        S.storage_us("h200-lab", "gds", [4096], **kw)
    assert "\n" not in str(exc.value)
    with pytest.raises(InvalidArgument, match="unknown storage method"):
        S.storage_us("h200-lab", "dma-by-pigeon", [4096])


# ----------------------------------------------------------------------------- the H200 recording
@pytest.fixture(scope="module")
def rec():
    return pd.read_csv(RECORDING)


def test_fit_reproduces_the_shipped_drive(rec):
    fitted = S.fit_drive(rec)
    shipped = S.drive("h200-vda")
    for key, value in fitted.items():
        assert shipped[key][0] == pytest.approx(value, rel=0.01), key
        assert shipped[key][1] == "fitted"


def _errors(rec):
    out = []
    for (storage, cache, method), g in rec.groupby(["storage", "cache", "method"]):
        m = {"pinned_read_copy": "read-pinned", "pageable_read_copy": "read-pageable"}[method]
        mod = S.storage_us("h200-lab", m, g["size"].to_numpy(), page_cache=cache != "cold", drive_name="h200-vda")
        for size, meas, pred in zip(g["size"], g["t_p50_us"], mod):
            out.append((storage, cache, m, int(size), (pred - meas) / meas))
    return pd.DataFrame(out, columns=["storage", "cache", "method", "size", "err"])


def test_model_against_the_recording_where_it_covers_it(rec):
    """Covered: page-cache reads at 64 KiB and below and at 64 MiB and up, drive reads at 64 MiB and
    up (docs/model.md gives the table). Every such row within 30 %."""
    e = _errors(rec)
    hot = e["cache"] != "cold"
    covered = (hot & ((e["size"] <= 64 << 10) | (e["size"] >= 64 * MiB))) | (~hot & (e["size"] >= 64 * MiB))
    worst = e[covered]["err"].abs().max()
    assert worst < 0.30, e[covered].sort_values("err")
    assert covered.sum() >= 20


def test_the_misses_go_the_way_the_docs_say(rec):
    """Not covered, and why: 256 KiB-16 MiB page-cache reads run at about 11 GB/s (source and buffer
    in the CPU's caches; the model's 4.8 GB/s is the memory-bound rate): the model is slower there.
    Cold reads of 64 KiB-4 MiB pay the drive's latency per readahead window: the model is faster."""
    e = _errors(rec)
    mid_hot = e[(e["cache"] != "cold") & (e["size"] >= 256 << 10) & (e["size"] <= 16 * MiB)
                & (e["method"] == "read-pinned")]
    assert (mid_hot["err"] > 0.3).mean() >= 0.5 and (mid_hot["err"] > 0).all()
    mid_cold = e[(e["cache"] == "cold") & (e["size"] >= 64 << 10) & (e["size"] <= 4 * MiB)]
    assert (mid_cold["err"] < -0.3).all()


def test_the_copy_part_checks_h200_lab_copies(rec):
    """h200-lab's copy parameters were fitted to other recordings: the pinned copy part of these
    reads is a check on them. Within 12 % from 16 MiB up; the small copies here cost more than
    copy_bench's (about 12 us at 4 KiB against 7 modelled)."""
    from gdrlab.model import routes as R

    p = model.get_profile("h200-lab").params
    g = rec[(rec["method"] == "pinned_read_copy") & (rec["size"] >= 16 * MiB)].groupby("size")["copy_p50_us"].median()
    mod = R.copy_us(p, "h2d", g.index.to_numpy(dtype=float))
    assert np.all(np.abs(mod / g.to_numpy() - 1) < 0.12)
