"""Calibration: the fitter recovers known parameters, and h200-lab matches the recorded H200 data.

The recorded files under gdrlab/data/recorded/ are read here directly (whatever is there), and
compared with the shipped h200-lab profile row by row.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gdrlab import model
from gdrlab.errors import InvalidArgument
from gdrlab.model import calibrate_h200
from gdrlab.model.fit import predict_row, row_target

KiB, MiB = 1 << 10, 1 << 20
RECORDED = Path(calibrate_h200.__file__).resolve().parent.parent / "data" / "recorded"
SIZES = [2 ** k for k in range(3, 29, 1)]

# Stages whose recordings are smooth enough for a per-row 10% bound (the curriculum figures).
STRICT = ("copy-h2d-pinned", "copy-d2h-pinned", "p2p", "p2p-staged", "memcpy")


def _truth():
    return model.get_profile("hopper-ndr", ce_launch_h2d_us=4.0, ce_launch_d2h_us=5.0, ce_eff=0.8,
                             ce_ramp_h2d_us=2.0, ce_ramp_d2h_us=0.5, ce_ramp_bytes=4096, pageable_h2d_us=9.0,
                             pageable_d2h_us=8.0, pageable_h2d_gbps=15.0, pageable_d2h_gbps=11.0,
                             pageable_chunk_bytes=128 * KiB, cpu_memcpy_gbps=12.0, memcpy_us=0.2, p2p_lat_us=3.0,
                             p2p_gbps=300.0, p2p_staged_lat_us=20.0, p2p_staged_gbps=30.0,
                             p2p_staged_chunk_bytes=512 * KiB, tcp_lat_us=7.0, tcp_gbps=4.0, tcp_msg_us=3.0)


def _synthetic_rows(truth) -> pd.DataFrame:
    rows = []
    for d in ("h2d", "d2h"):
        for mem in ("pinned", "pageable"):
            t = model.stage_us(truth, f"copy-{d}-{mem}", SIZES)
            rows += [{"direction": d, "memory": mem, "size": s, "lat_p50_us": x, "bw_gbps": s / x / 1e3}
                     for s, x in zip(SIZES, t)]
    for pa, st in ((True, "p2p"), (False, "p2p-staged")):
        t = model.stage_us(truth, st, SIZES)
        rows += [{"src": 0, "dst": 1, "peer_access": pa, "bidirectional": False, "size": s, "lat_p50_us": x}
                 for s, x in zip(SIZES, t)]
    t = model.stage_us(truth, "memcpy", SIZES)
    rows += [{"stage": "memcpy", "size": s, "lat_p50_us": x} for s, x in zip(SIZES, t)]
    lat = model.latency_us(truth, "host", SIZES, wire="tcp")
    bw = model.bandwidth_gbps(truth, "host", SIZES, wire="tcp")
    rows += [{"path": "host", "wire": "tcp", "size": s, "lat_p50_us": a, "bw_gbps": b}
             for s, a, b in zip(SIZES, lat, bw)]
    df = pd.DataFrame(rows)
    df.attrs["provenance"] = {"kind": "modelled", "what": "synthetic test data"}
    return df


def test_calibration_recovers_known_parameters():
    truth = _truth()
    fitted, report = model.calibrate(_synthetic_rows(truth), base="volta-dgx1", name="synthetic")
    chosen = ["ce_launch_h2d_us", "ce_launch_d2h_us", "ce_eff", "ce_ramp_h2d_us", "ce_ramp_d2h_us",
              "ce_ramp_bytes", "pageable_h2d_us", "pageable_d2h_us", "pageable_h2d_gbps", "pageable_d2h_gbps",
              "pageable_chunk_bytes", "cpu_memcpy_gbps", "memcpy_us", "p2p_lat_us", "p2p_gbps",
              "p2p_staged_lat_us", "p2p_staged_gbps", "p2p_staged_chunk_bytes", "tcp_lat_us", "tcp_gbps",
              "tcp_msg_us"]
    # ce_eff is a share of the base's link: compare the copy rate itself.
    assert fitted.params["gpu_pcie_gbps"] * fitted.params["ce_eff"] == pytest.approx(63.0 * 0.8, rel=1e-3)
    for k in chosen:
        if k == "ce_eff":
            continue
        assert fitted.params[k] == pytest.approx(truth.params[k], rel=0.01, abs=1e-3), k
        assert fitted.sources[k].startswith("fitted to synthetic test data"), k
    assert report["max_abs_rel_err"] < 1e-3
    assert fitted.name == "synthetic" and "not constrained" in fitted.sources["nic_wire_gbps"]


def test_calibration_bad_input():
    with pytest.raises(InvalidArgument):
        model.calibrate(pd.DataFrame([{"size": 8, "foo": 1.0}]))
    with pytest.raises(InvalidArgument):
        model.calibrate(pd.DataFrame([{"direction": "h2d", "lat_p50_us": 5.0}]))


# ------------------------------------------------------------------------ h200-lab vs recorded data
def _recorded_rows() -> list[dict]:
    rows = []
    for path in sorted(set(RECORDED.glob("h200-*.json")) | set(RECORDED.glob("h200x2-*.json"))):
        doc = json.loads(path.read_text())
        for r in doc.get("rows", []):
            if "size" in r and row_target(r) is not None:
                rows.append({**r, "_file": path.name})
    return rows


def _compared_rows():
    """(row, metric, measured, predicted) for the rows h200-lab was fitted to."""
    prof = model.get_profile("h200-lab")
    calib = prof.calibration or {}
    superseded = set(calib.get("superseded_curriculum_targets", []))
    out = []
    for r in _recorded_rows():
        if "local_peer" in r:
            continue  # the peer-placement diagnosis, not fitted (see calibrate_h200.load_recorded)
        target = row_target(r)[1]
        if r["_file"] == calibrate_h200.CURRICULUM_FILE and target in superseded:
            continue  # a dedicated recording of the same thing replaced these figures
        if target.split("/")[0] in calibrate_h200._GPU_PATHS:
            continue  # compared only: both ends shared one GPU (see calibrate_h200.SHARED_GPU_REASON)
        pred = predict_row(prof, r)
        for metric, key in (("lat_us", "lat_p50_us"), ("bw_gbps", "bw_gbps")):
            meas = r.get(key)
            if meas is not None and np.isfinite(meas) and meas > 0:
                out.append((r, metric, float(meas), pred[metric]))
    return out


def test_h200_lab_is_up_to_date_with_the_recorded_files():
    prof = model.get_profile("h200-lab")
    present = {p.name for p in calibrate_h200.recorded_files()}
    assert present <= set(prof.calibration["files"]), (
        "recorded files were added after h200-lab was fitted: run python -m gdrlab.model.calibrate_h200")
    fresh, _ = calibrate_h200.build_h200_lab()
    # The fit is a least-squares solve; LAPACK builds differ in the last digits of an
    # ill-conditioned column (ce_ramp_d2h_us, about 0.01 us, moved by 2e-9 of itself between two
    # machines). A refit that matters moves a parameter by far more than a millionth of itself.
    for k, v in fresh.params.items():
        assert prof.params[k] == pytest.approx(v, rel=1e-6), k


def test_h200_lab_within_10_percent_on_smooth_recordings():
    """Every row within 10%; a row whose own spread is wider (the first size of a sweep carries
    warm-up: D2H 7.2 us at 8 B, 6.5 us from 32 B on) may instead fall inside its [min, p99]."""
    rows = [c for c in _compared_rows() if row_target(c[0])[1] in STRICT]
    assert len(rows) >= 20
    bad = [(row_target(r)[1], r["size"], m, meas, pred) for r, m, meas, pred in rows
           if abs(pred - meas) / meas > 0.10 and not _inside_distribution(r, m, pred)]
    assert not bad, bad
    within = sum(abs(pred - meas) / meas <= 0.10 for _, _, meas, pred in rows)
    assert within >= 0.95 * len(rows)


def _inside_distribution(r: dict, metric: str, pred: float) -> bool:
    lo, hi = r.get("lat_min_us"), r.get("lat_p99_us")
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return False
    if metric == "lat_us":
        return lo <= pred <= hi
    if "direction" in r:  # a synchronous copy's bandwidth is size / latency
        return r["size"] / hi / 1e3 <= pred <= r["size"] / lo / 1e3
    return False


def test_h200_lab_on_noisy_recordings():
    """Pageable copies and TCP loopback do not meet the 10%-per-row target, and this test says
    how far they are instead. The recordings are not smooth: TCP loopback streams 8.5 GB/s at
    512 KiB (buffers resident in the CPU caches) and 5.0 GB/s at 64 MiB (from DRAM); pageable D2H
    dips between 256 KiB and 2 MiB. A stage with one rate cannot follow a curve that rises and
    falls, so each stage must be right in the median (<= 10%) and no row may be off by more than
    half (the worst, TCP latency at 64 MiB, is about -45%)."""
    rows = [c for c in _compared_rows() if row_target(c[0])[1] not in STRICT]
    assert rows
    by_target: dict[str, list[float]] = {}
    for r, metric, meas, pred in rows:
        err = abs(pred - meas) / meas
        by_target.setdefault(row_target(r)[1], []).append(err)
        assert err <= 0.50, (row_target(r)[1], r["size"], metric, meas, pred)
    for target, errs in by_target.items():
        assert np.median(errs) <= 0.10, (target, np.median(errs))


def test_h200_lab_against_curriculum_figures():
    # Typed in from the curriculum's "Measured on an NVIDIA H200 machine" (ranges +-10%).
    def copy_gbps(d, s):
        return s / float(model.stage_us("h200-lab", f"copy-{d}-pinned", [s])[0]) / 1e3

    for d in ("h2d", "d2h"):
        assert copy_gbps(d, 256 * MiB) == pytest.approx(55.0, rel=0.10)
        assert 53 * 0.9 <= copy_gbps(d, 64 * MiB) <= 55 * 1.1
        assert 38 * 0.9 <= copy_gbps(d, MiB) <= 41 * 1.1
        assert 7 * 0.9 <= copy_gbps(d, 64 * KiB) <= 9 * 1.1
    assert float(model.stage_us("h200-lab", "copy-h2d-pinned", [8])[0]) == pytest.approx(5.9, rel=0.10)
    assert float(model.stage_us("h200-lab", "copy-d2h-pinned", [8])[0]) == pytest.approx(6.5, rel=0.10)
    pg = 256 * MiB / float(model.stage_us("h200-lab", "copy-h2d-pageable", [256 * MiB])[0]) / 1e3
    # The curriculum's pageable figures (7-13 GB/s, "3-8x slower") came from an earlier run; the
    # H200 recordings this profile is fitted to give 20.7 GB/s H2D at 256 MiB (2.7x slower than
    # pinned), twice on 2026-11-30. Check what both agree on: pageable well below pinned.
    assert 7 * 0.9 <= pg <= 55 / 2
    assert model.latency_us("h200-lab", "p2p", [8])[0] == pytest.approx(4.7, rel=0.10)
    assert model.bandwidth_gbps("h200-lab", "p2p", [256 * MiB])[0] == pytest.approx(393, rel=0.10)
    assert model.bandwidth_gbps("h200-lab", "p2p-staged", [MiB])[0] == pytest.approx(18.0, rel=0.10)
    assert model.bandwidth_gbps("h200-lab", "p2p-staged", [256 * MiB])[0] == pytest.approx(38.2, rel=0.10)
    assert model.get_profile("h200-lab").params["bar1_bytes"] == 256 * (1 << 30)


def test_calibration_of_verbs_host_and_gdr_rows():
    # A "live" two-node sweep on SNB-like hardware whose NIC reads GPU memory at 1.5 GB/s and pays
    # 0.9 us extra for GPU memory; the fit must find both from the gdr rows.
    truth = model.get_profile("kepler-snb-2013", p2p_read_gbps=1.5, gdr_extra_us=0.9, nic_lat_us=1.1)
    rows = []
    for path in ("host", "gdr"):
        lat = model.latency_us(truth, path, SIZES)
        bw = model.bandwidth_gbps(truth, path, SIZES)
        rows += [{"path": path, "wire": "verbs", "size": s, "lat_p50_us": a, "bw_gbps": b}
                 for s, a, b in zip(SIZES, lat, bw)]
    fitted, report = model.calibrate(pd.DataFrame(rows), base="kepler-snb-2013", name="two-node")
    assert fitted.params["p2p_read_gbps_bridge"] == pytest.approx(1.5, rel=0.01)
    assert fitted.params["gdr_extra_us"] == pytest.approx(0.9, rel=0.01)
    assert fitted.params["nic_lat_us"] == pytest.approx(1.1, rel=0.01)
    assert min(fitted.params["nic_wire_gbps"], 7.88 * 0.8) == pytest.approx(6.3, rel=0.01)  # x8-bound FDR
    assert report["max_abs_rel_err"] < 0.01
