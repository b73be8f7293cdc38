"""The engine on any machine: host path over the tcp wire, buffers, patterns, errors."""
import json
import subprocess
import sys

import numpy as np
import pytest

import gdrlab
from gdrlab import engine, errors

nat = engine.native()


def test_import_loads_no_driver_library():
    code = ("import gdrlab, gdrlab.engine, gdrlab.cli; import sys;"
            "maps=open('/proc/self/maps').read(); print('libcuda' in maps, 'libibverbs' in maps)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_pattern_matches_independent_definition():
    # Byte i of the pattern is byte (i % 8) of splitmix64(seed ^ (i // 8)), little-endian.
    def splitmix(x):
        m = (1 << 64) - 1
        x = (x + 0x9E3779B97F4A7C15) & m
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
        return x ^ (x >> 31)
    seed = 12345
    expected = b"".join(splitmix(seed ^ w).to_bytes(8, "little") for w in range(4))[:29]
    assert nat.pattern_bytes(seed, 29) == expected


def test_buffer_numpy_view_and_pattern_check():
    buf = engine.Buffer(1000, "pageable")
    view = np.asarray(buf)
    assert view.shape == (1000,) and view.dtype == np.uint8
    buf.fill_pattern(7)
    assert bytes(view) == nat.pattern_bytes(7, 1000)
    assert buf.check_pattern(7) == -1
    view[613] ^= 0xFF
    assert buf.check_pattern(7) == 613
    # A window starting at an offset is checked relative to its own start.
    buf.fill_pattern(9, offset=100, length=50)
    assert buf.check_pattern(9, offset=100, length=50) == -1


def test_buffer_from_numpy_shares_memory():
    arr = np.zeros(4096, dtype=np.uint8)
    buf = engine.Buffer.from_array(arr)
    assert buf.address == arr.ctypes.data and buf.size == 4096 and buf.kind == "pageable"
    buf.fill_pattern(3)
    assert arr.tobytes() == nat.pattern_bytes(3, 4096)


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_buffer_bad_size(size):
    with pytest.raises(errors.InvalidArgument):
        engine.Buffer(size)


def test_unknown_memory_kind():
    with pytest.raises(errors.InvalidArgument, match="pageable, pinned, device"):
        engine.Buffer(64, "gpu")


def test_bench_host_rows_and_provenance():
    df = gdrlab.bench(path="host", sizes="8,4K,1M", iters=20)
    assert list(df["size"]) == [8, 4096, 1 << 20]
    for col in ["path", "wire", "size", "iters", "lat_min_us", "lat_p50_us", "lat_p99_us", "bw_gbps", "verified"]:
        assert col in df.columns
    assert df["verified"].all()
    assert (df["lat_min_us"] <= df["lat_p50_us"]).all() and (df["lat_p50_us"] <= df["lat_p99_us"]).all()
    assert (df["bw_gbps"] > 0).all()
    assert df.attrs["provenance"]["kind"] == "live"


def test_bench_progress_callback():
    seen = []
    gdrlab.bench(path="host", sizes="8,64", iters=5, mode="lat", progress=lambda d, t, row: seen.append((d, t, row["size"])))
    assert seen == [(1, 2, 8), (2, 2, 64)]


def test_connection_transfer_at_odd_offset():
    with engine.LocalPeer() as peer, engine.Connection("127.0.0.1", peer.port, peer.token) as conn:
        arr = np.zeros(10_007, dtype=np.uint8)
        buf = engine.Buffer.from_array(arr)
        assert conn.transfer(buf, "host", size=5_003, offset=1_001)
        # The peer sent back pattern(seed+1) over the same window; nothing outside it changed.
        assert not arr[:1_001].any() and not arr[6_004:].any()


def test_gpu_path_without_gpu_is_unavailable():
    if engine.cuda_status()["usable"]:
        pytest.skip("this machine has a usable GPU")
    with pytest.raises(errors.Unavailable, match="needs a GPU"):
        gdrlab.bench(path="pipelined", sizes="8")


def test_unknown_path_and_wire():
    with pytest.raises(errors.InvalidArgument, match="valid over tcp"):
        gdrlab.bench(path="teleport", sizes="8")
    with pytest.raises(errors.InvalidArgument, match="tcp, verbs"):
        gdrlab.bench(path="host", sizes="8", wire="carrier-pigeon")
    with pytest.raises(errors.InvalidArgument, match="--wire verbs"):
        gdrlab.bench(path="gdr", sizes="8")


def test_oversized_message_refused_before_connecting():
    with pytest.raises(errors.InvalidArgument, match="1 GiB"):
        gdrlab.bench(path="host", sizes="2G")


def test_cli_bench_json_is_one_document():
    r = subprocess.run([sys.executable, "-m", "gdrlab", "bench", "--sizes", "8,1K", "--iters", "10", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [row["size"] for row in doc["rows"]] == [8, 1024]
    assert all(row["verified"] for row in doc["rows"])
    assert doc["provenance"]["kind"] == "live"


def test_cli_bad_sizes_one_line_error():
    r = subprocess.run([sys.executable, "-m", "gdrlab", "bench", "--sizes", "4X"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "4X" in lines[0]


def test_cli_help_lists_commands():
    r = subprocess.run([sys.executable, "-m", "gdrlab", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for cmd in ("bench", "serve"):
        assert cmd in r.stdout
