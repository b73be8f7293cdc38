"""p2p-matrix's --diagonal, --bidir, --read and --engine sm: the matrix assembly with a recording
measure (no GPU), and the live measure and the command through the stand-in libcuda."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import TIME_SCALE
from standins import run_with_fake_cuda

from gdrlab.errors import InvalidArgument, Unavailable
from gdrlab.transfer import p2p


def recording():
    calls = []

    def measure(src, dst, size, peer_access, bidir):
        calls.append((src, dst, size, peer_access, bidir))
        return {"bw_gbps": 100.0 * (src + 1) + dst + (0.5 if bidir else 0), "lat_p50_us": 2.0 + src}
    return calls, measure


def test_diagonal_runs_on_one_gpu_and_fills_both_tables():
    calls, measure = recording()
    r = p2p.p2p_matrix(1, measure, lambda a, b: True, lat_size=8, bw_size=1 << 20, diagonal=True)
    assert sorted(calls) == [(0, 0, 8, True, False), (0, 0, 1 << 20, True, False), (0, 0, 1 << 20, True, True)]
    for mode in ("peer_on", "peer_off"):
        assert r["uni_bw_gbps"][mode] == [[100.0]] and r["bidir_bw_gbps"][mode] == [[100.5]]
        assert r["lat_us"][mode] == [[2.0]]
    assert r["diagonal"] is True and any("diagonal" in n for n in r["notes"])
    assert "100.5" in p2p.format_report(r)  # shown, not masked by the X of an empty diagonal
    with pytest.raises(Unavailable, match="this machine has 1"):
        p2p.p2p_matrix(1, measure, lambda a, b: True)


def test_diagonal_beside_the_pairs_and_only_the_bidirectional_matrix():
    calls, measure = recording()
    r = p2p.p2p_matrix(2, measure, lambda a, b: True, diagonal=True, only=["bidir_bw_gbps"])
    assert "uni_bw_gbps" not in r and "lat_us" not in r
    assert all(c[4] for c in calls), "only bidirectional copies were asked for"
    # two pairs x (peer on, off) + two diagonal entries
    assert len(calls) == 6
    assert r["bidir_bw_gbps"]["peer_on"] == [[100.5, 101.5], [200.5, 201.5]]
    assert r["bidir_bw_gbps"]["peer_off"][0][0] == 100.5
    text = p2p.format_report(r)
    assert "Unidirectional" not in text and "Bidirectional" in text
    with pytest.raises(InvalidArgument, match="matrices to measure"):
        p2p.p2p_matrix(2, measure, lambda a, b: True, only=["sideways"])


def test_without_diagonal_it_stays_empty():
    _, measure = recording()
    r = p2p.p2p_matrix(2, measure, lambda a, b: True)
    assert r["uni_bw_gbps"]["peer_on"][0][0] is None and r["diagonal"] is False
    assert p2p.format_matrix(r["uni_bw_gbps"]["peer_on"], "GB/s").splitlines()[1].split()[1] == "X"


MEASURE = """
    import ctypes, json
    from gdrlab.transfer import p2p
    fake = ctypes.CDLL("libcuda.so.1")
    m = p2p.copy_measure("{engine}", read={read}, iters=3)
    out = {{"uni": m(0, 1, 4096, True, False), "bi": m(0, 1, 4096, True, True), "off": m(0, 1, 4096, False, False),
           "diag": p2p.live_measure(3)(1, 1, 4096, True, False),
           "launches_on": [fake.fake_cuda_launches_on(d) for d in range(2)],
           "allocs": fake.fake_cuda_live_allocs()}}
    print(json.dumps(out))
"""


@pytest.mark.parametrize("read", [False, True])
def test_sm_measure_runs_on_the_reading_or_writing_gpu(fake_cuda_dir, read):
    out = run_with_fake_cuda(fake_cuda_dir, MEASURE.format(engine="sm", read=read), GDRLAB_FAKE_CUDA_DEVICES="2")
    # default warm-up for 3 iters is 3: 6 launches per copy; uni (1 copy) + bidir (2 copies, one
    # on each GPU); peer access off goes through the copy engines: no launch.
    runner, other = (1, 0) if read else (0, 1)
    assert out["launches_on"][runner] == 12 and out["launches_on"][other] == 6, out
    assert out["uni"]["bw_gbps"] > 0 and out["off"]["bw_gbps"] > 0 and out["diag"]["bw_gbps"] > 0
    assert out["allocs"] == 0


CLI = ("import sys; from gdrlab import cli; cli.COMMANDS = ['copy', 'p2p_matrix']; "
       "sys.exit(cli.main(sys.argv[1:]))")


def run_cli(fake_cuda_dir, *args, **env):
    e = dict(os.environ)
    e["LD_LIBRARY_PATH"] = f"{fake_cuda_dir}:{e.get('LD_LIBRARY_PATH', '')}"
    e.update(env)
    return subprocess.run([sys.executable, "-c", CLI, "p2p-matrix", *args], check=False, capture_output=True, text=True, env=e,
                          timeout=60 * TIME_SCALE)


def test_cli_diagonal_on_one_gpu_and_the_refusal_without_it(fake_cuda_dir):
    p = run_cli(fake_cuda_dir, "--diagonal", "--sizes", "8,64K", "--iters", "3", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["n_gpus"] == 1 and doc["uni_bw_gbps"]["peer_on"][0][0] > 0 and doc["lat_us"]["peer_off"][0][0] > 0
    p = run_cli(fake_cuda_dir)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and "--diagonal" in lines[0] and "this machine has 1" in lines[0]


def test_cli_read_sm_bidir_on_two_fake_gpus(fake_cuda_dir):
    p = run_cli(fake_cuda_dir, "--read", "--engine", "sm", "--bidir", "--sizes", "8,64K", "--iters", "3", "--json",
                GDRLAB_FAKE_CUDA_DEVICES="2")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert set(doc) >= {"bidir_bw_gbps", "can_access_peer"} and "uni_bw_gbps" not in doc
    assert (doc["engine"], doc["read"]) == ("sm", True)
    assert doc["bidir_bw_gbps"]["peer_on"][0][1] > 0 and doc["bidir_bw_gbps"]["peer_on"][0][0] is None
    assert any("SM copy kernel cannot reach" in n for n in doc["notes"])
    bad = run_cli(fake_cuda_dir, "--engine", "dma", GDRLAB_FAKE_CUDA_DEVICES="2")
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        "gdrlab p2p-matrix: InvalidArgument: --engine 'dma': valid values are ce, sm"]
