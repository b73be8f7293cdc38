"""The p2p / p2p-staged matrices: assembly and formatting with fake measurements, the CLI's
answer on machines with fewer than two GPUs, and live checks on GPU machines."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gdrlab.transfer import p2p
from gdrlab.errors import InvalidArgument, Unavailable


def fake_measure(calls: list):
    """Bandwidth 10*src + dst, +100 with peer access, +1000 when bidirectional;
    latency 1 + src + dst/10, +50 without peer access. Every call is recorded."""
    def measure(src, dst, size, peer_access, bidirectional):
        calls.append((src, dst, size, peer_access, bidirectional))
        bw = 10 * src + dst + (100 if peer_access else 0) + (1000 if bidirectional else 0)
        lat = 1 + src + dst / 10 + (0 if peer_access else 50)
        return {"bw_gbps": bw, "lat_p50_us": lat}
    return measure


def no_access_0_2(a, b):
    return {a, b} != {0, 2}


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_gpus_is_unavailable_naming_the_count(n):
    with pytest.raises(Unavailable, match=f"this machine has {n}"):
        p2p.p2p_matrix(n, fake_measure([]), lambda a, b: True)


def test_bad_gpu_count_is_invalid():
    with pytest.raises(InvalidArgument):
        p2p.p2p_matrix(-1, fake_measure([]), lambda a, b: True)
    with pytest.raises(InvalidArgument):
        p2p.p2p_matrix(2, fake_measure([]), lambda a, b: True, bw_size=0)


def test_matrix_entries_land_at_src_dst_and_use_the_right_sizes():
    calls: list = []
    r = p2p.p2p_matrix(3, fake_measure(calls), no_access_0_2, lat_size=8, bw_size=1 << 20)
    # 6 ordered pairs x 3 measurements x 2 access modes, minus 3 for 0<->2 with peer access on
    # (0->2 and 2->0: uni, bidir, lat each; that is 6 skipped)
    assert len(calls) == 6 * 3 * 2 - 6
    assert {c[2] for c in calls} == {8, 1 << 20}
    assert all(not c[3] for c in calls if {c[0], c[1]} == {0, 2})  # never peer-on between 0 and 2
    # by hand from fake_measure
    assert r["uni_bw_gbps"]["peer_on"][1][2] == 112
    assert r["uni_bw_gbps"]["peer_on"][2][1] == 121
    assert r["uni_bw_gbps"]["peer_off"][1][2] == 12
    assert r["bidir_bw_gbps"]["peer_on"][0][1] == 1101
    assert r["bidir_bw_gbps"]["peer_off"][2][0] == 1020
    assert r["lat_us"]["peer_on"][1][0] == pytest.approx(2.0)
    assert r["lat_us"]["peer_off"][0][1] == pytest.approx(51.1)
    # diagonal and impossible peer access stay empty
    for key in ("uni_bw_gbps", "bidir_bw_gbps", "lat_us"):
        for mode in ("peer_on", "peer_off"):
            assert all(r[key][mode][i][i] is None for i in range(3))
        assert r[key]["peer_on"][0][2] is None and r[key]["peer_on"][2][0] is None
        assert r[key]["peer_off"][0][2] is not None
    assert r["can_access_peer"] == [[None, True, False], [True, None, True], [False, True, None]]
    assert any("GPU0 cannot access GPU2" in n for n in r["notes"])
    assert r["provenance"]["kind"] == "live"
    json.dumps(r)  # plain data, ready for --json


def test_latency_uses_small_size_and_bandwidth_large_size():
    calls: list = []
    p2p.p2p_matrix(2, fake_measure(calls), lambda a, b: True, lat_size=16, bw_size=4096)
    bidir = [c for c in calls if c[4]]
    assert bidir and all(c[2] == 4096 for c in bidir)
    # per pair and mode: uni at 4096, bidir at 4096, lat at 16
    sizes = sorted(c[2] for c in calls if c[:2] == (0, 1) and c[3])
    assert sizes == [16, 4096, 4096]


def test_progress_reports_every_step_up_to_the_total():
    seen = []
    p2p.p2p_matrix(2, fake_measure([]), lambda a, b: True, progress=lambda d, t, w: seen.append((d, t)))
    assert seen[-1] == (12, 12)  # 2 pairs x 3 measurements x 2 modes
    assert [d for d, _ in seen] == list(range(1, 13))


def test_choose_sizes():
    assert p2p.choose_sizes("8,256M") == (8, 256 * 1024 * 1024)
    assert p2p.choose_sizes("256M,8") == (8, 256 * 1024 * 1024)
    assert p2p.choose_sizes("64K") == (65536, 65536)
    assert p2p.choose_sizes(None) == (8, 1 << 28)
    with pytest.raises(ValueError):
        p2p.choose_sizes("eight")


def test_format_matrix_by_hand():
    text = p2p.format_matrix([[None, 393.04], [38.2, None]], "GB/s")
    assert text == ("   D\\D     0     1\n"
                    "     0     X 393.0\n"
                    "     1  38.2     X")
    assert p2p.format_matrix([[None, True], [False, None]]).splitlines()[1].split() == ["0", "X", "1"]
    assert p2p.format_matrix([[None, None], [1.5, None]], "us").splitlines()[1].split() == ["0", "X", "-"]


def test_report_has_every_matrix_and_the_provenance():
    r = p2p.p2p_matrix(2, fake_measure([]), lambda a, b: True, provenance={"kind": "modelled", "profile": "x"})
    text = p2p.format_report(r)
    assert "cuDeviceCanAccessPeer" in text
    assert text.count("Unidirectional bandwidth, 256MiB") == 2
    assert text.count("Bidirectional bandwidth") == 2
    assert text.count("Latency") == 2 and "8 B" in text
    assert "peer access off" in text and "peer access on" in text
    assert "kind=modelled" in text


def test_recorded_matrix_shows_the_nvlink_lesson():
    r = p2p.recorded_matrix()
    assert r["provenance"]["kind"] == "recorded" and "H200" in r["provenance"]["hardware"]
    # CURRICULUM: about 10x the bandwidth and 4x lower latency with peer access on
    on, off = r["uni_bw_gbps"]["peer_on"][0][1], r["uni_bw_gbps"]["peer_off"][0][1]
    assert 8 < on / off < 12
    assert 3 < r["lat_us"]["peer_off"][0][1] / r["lat_us"]["peer_on"][0][1] < 5


def _gpu_count() -> tuple[int, str]:
    from gdrlab import engine
    st = engine.cuda_status()
    return len(engine.gpus()), st["reason"]


def test_cli_below_two_gpus_says_unavailable_with_count():
    n, _ = _gpu_count()
    if n >= 2:
        pytest.skip(f"this machine has {n} GPUs")
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "p2p-matrix"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Unavailable" in lines[0] and f"this machine has {n}" in lines[0]
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "p2p-matrix", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["error"]["type"] == "Unavailable" and f"has {n}" in doc["error"]["message"]


@pytest.mark.gpu
def test_gpu_one_gpu_p2p_matrix_unavailable():
    n, _ = _gpu_count()
    if n != 1:
        pytest.skip(f"needs exactly one GPU, this machine has {n}")
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "p2p-matrix"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and "this machine has 1" in proc.stderr
    from gdrlab.engine import p2p_bench
    with pytest.raises(Unavailable, match="has 1"):
        p2p_bench(0, 1, [8])


@pytest.mark.gpu
@pytest.mark.multigpu
def test_multigpu_peer_on_beats_peer_off():
    n, _ = _gpu_count()
    proc = subprocess.run([sys.executable, "-m", "gdrlab", "p2p-matrix", "--sizes", "8,64M", "--json"],
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["n_gpus"] == n and r["bw_size"] == 64 << 20 and r["lat_size"] == 8
    assert r["provenance"]["kind"] == "live"
    compared = 0
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            off = r["uni_bw_gbps"]["peer_off"][a][b]
            assert off is not None and off > 0
            if r["can_access_peer"][a][b]:
                assert r["uni_bw_gbps"]["peer_on"][a][b] > off
                assert r["lat_us"]["peer_on"][a][b] > 0
                compared += 1
    if compared == 0:
        pytest.skip("no GPU pair here can use peer access (cuDeviceCanAccessPeer = 0 everywhere)")


def test_cli_with_a_faked_two_gpu_engine(monkeypatch, capsys):
    """The command's plumbing, without GPUs: engine calls replaced by fakes."""
    import pandas as pd

    from gdrlab import cli
    from gdrlab.transfer import buffers
    calls = []

    def fake_p2p_bench(src, dst, sizes, iters=None, *, peer_access=True, bidirectional=False, **kw):
        calls.append((src, dst, list(sizes), iters, peer_access, bidirectional))
        bw = 300.0 if peer_access else 30.0
        return pd.DataFrame([{"src": src, "dst": dst, "size": sizes[0], "lat_p50_us": 5.0 if peer_access else 20.0,
                              "bw_gbps": bw * (2 if bidirectional else 1)}])

    monkeypatch.setattr(buffers, "gpus", lambda: [{"name": "fake GPU"}, {"name": "fake GPU"}])
    monkeypatch.setattr(buffers, "cuda_status", lambda: {"usable": True, "reason": "", "driver_version": 1})
    monkeypatch.setattr(p2p, "p2p_bench", fake_p2p_bench)
    monkeypatch.setattr(p2p, "live_can_access", lambda a, b: True)
    assert cli.main(["p2p-matrix", "--sizes", "16,1M", "--iters", "7", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["uni_bw_gbps"]["peer_on"] == [[None, 300.0], [300.0, None]]
    assert r["bidir_bw_gbps"]["peer_off"] == [[None, 60.0], [60.0, None]]
    assert r["lat_us"]["peer_off"][1][0] == 20.0
    assert r["provenance"]["kind"] == "live" and r["provenance"]["gpus"] == ["fake GPU", "fake GPU"]
    assert {c[3] for c in calls} == {7} and {tuple(c[2]) for c in calls} == {(16,), (1 << 20,)}
    assert cli.main(["p2p-matrix", "--sizes", "16,1M", "--iters", "7"]) == 0
    text = capsys.readouterr().out
    assert "300.0" in text and "1MiB" in text and "16 B" in text


def test_bench_path_maps_names_to_peer_access(monkeypatch):
    import pandas as pd

    seen = []

    def fake(src, dst, sizes, iters=None, *, peer_access=True, bidirectional=False, **kw):
        seen.append((src, dst, peer_access, bidirectional))
        return pd.DataFrame([{"src": src, "dst": dst, "size": 8, "bw_gbps": 1.0}])

    monkeypatch.setattr(p2p, "p2p_bench", fake)
    df = p2p.bench_path("p2p-staged", 1, 0, "8")
    assert seen[-1] == (1, 0, False, False)
    assert list(df.columns[:2]) == ["path", "direction"] and df["direction"][0] == "GPU1->GPU0"
    df = p2p.bench_path("p2p", 0, 1, "8", bidirectional=True)
    assert seen[-1] == (0, 1, True, True) and df["path"][0] == "p2p" and df["direction"][0] == "GPU0<->GPU1"
    with pytest.raises(InvalidArgument, match="p2p, p2p-staged"):
        p2p.bench_path("nvlink")
