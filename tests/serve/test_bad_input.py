"""Bad input, through the Python API and through the CLI: a clear error of the right class, never a
traceback from deep inside, never a hang. The CLI answers with a non-zero exit, one line on stderr
and, with --json, one JSON error document on stdout."""
from __future__ import annotations

import json

import numpy as np
import pytest

from gdrlab import engine
from gdrlab.errors import InvalidArgument, PeerClosed, Unavailable

pytestmark = pytest.mark.timeout(120)
GIB = 1 << 30


def _cuda_usable() -> bool:
    return engine.cuda_status()["usable"]


no_gpu_only = pytest.mark.skipif(_cuda_usable(), reason="checks the no-GPU answer; this machine has a GPU")


# --------------------------------------------------------------------------- Python API: sizes
@pytest.mark.parametrize("size", [0, -1, -(2**40), 1.5, "8", True, None])
def test_buffer_bad_size(size):
    with pytest.raises(InvalidArgument, match="size"):
        engine.Buffer(size)


def test_buffer_unknown_kind():
    with pytest.raises(InvalidArgument, match="unknown memory kind 'shiny'.*pageable, pinned, device"):
        engine.Buffer(64, kind="shiny")


@pytest.mark.parametrize("sizes,pattern", [
    (0, "at least 1 byte"),
    (-8, "at least 1 byte"),
    ("0", "at least 1 byte"),
    ("2G", "exceeds the tcp wire's maximum"),
    ([GIB + 1], "exceeds the tcp wire's maximum"),
    ("", "no sizes"),
    ("abc", "not a size"),
    ("4Q", "not a size"),
    ("1.5K", "not a size"),
    ("-8", "not a size"),
    ("64M:8", "runs backwards"),
    ("8:", "not a size"),
    (":8", "not a size"),
])
def test_bench_bad_sizes(sizes, pattern):
    with pytest.raises(ValueError, match=pattern):
        engine.bench("host", sizes=sizes, iters=1)


@pytest.mark.parametrize("kw,pattern", [
    ({"path": "warp"}, "unknown path 'warp'.*host, staged, shared, pipelined"),
    ({"path": "gdr"}, "does not run over the tcp wire"),
    ({"mode": "fast"}, "unknown mode 'fast'"),
    ({"wire": "carrier-pigeon"}, "unknown wire 'carrier-pigeon'"),
    ({"iters": 0}, "iters must be at least 1"),
    ({"timeout_s": 0}, "timeout"),
    ({"timeout_s": float("nan")}, "timeout"),
    ({"timeout_s": 1e12}, "timeout"),
])
def test_bench_bad_options(kw, pattern):
    args = {"path": "host", "sizes": "8", "iters": 1}
    args.update(kw)
    with pytest.raises(InvalidArgument, match=pattern):
        engine.bench(**args)


@no_gpu_only
@pytest.mark.parametrize("path", ["staged", "shared", "pipelined"])
def test_gpu_path_without_gpu_is_unavailable_with_reason(path):
    reason = engine.cuda_status()["reason"]
    assert reason, "cuda_status gave no reason"
    with pytest.raises(Unavailable) as ei:
        engine.bench(path, sizes="8", iters=1)
    assert path in str(ei.value) and reason in str(ei.value)


@no_gpu_only
def test_copy_and_p2p_bench_without_gpu_are_unavailable():
    with pytest.raises(Unavailable, match="need a GPU|need GPUs"):
        engine.copy_bench("h2d", sizes="8")
    with pytest.raises(Unavailable, match="need GPUs"):
        engine.p2p_bench(0, 1, sizes="8")


@pytest.mark.parametrize("kw,pattern", [
    ({"direction": "up"}, "unknown direction 'up'"),
    ({"memory": "sticky"}, "unknown host memory kind 'sticky'"),
])
def test_copy_bench_bad_names(kw, pattern):
    args = {"direction": "h2d", "sizes": "8", "memory": "pinned"}
    args.update(kw)
    with pytest.raises(InvalidArgument, match=pattern):
        engine.copy_bench(**args)


# --------------------------------------------------------------------------- Python API: connections
@pytest.fixture
def conn(native_server):
    with engine.Connection("127.0.0.1", native_server.port, native_server.token, timeout_s=5) as c:
        yield c


@pytest.mark.parametrize("size", [0, -1, GIB + 1, 2**40, 1.0])
def test_run_bad_size(conn, size):
    with pytest.raises(InvalidArgument):
        conn.run("host", size, iters=1)
    assert conn.run("host", 8, iters=1)[2]  # the session survives bad input


@pytest.mark.parametrize("kw,pattern", [
    ({"path": "warp"}, "unknown path 'warp'"),
    ({"mode": "sideways"}, "unknown mode 'sideways'"),
    ({"iters": -1}, ">= 0"),
    ({"warmup": -1}, ">= 0"),
    ({"window": 0}, ">= 1"),
    ({"depth": 0}, ">= 1"),
    ({"chunk": 0}, ">= 1"),
    ({"offset": -1}, "offset"),
    ({"device": -1}, "device"),
    ({"iters": 2**32}, "at most"),
    ({"iters": 10_000_001}, "too many iterations"),
    ({"window": 5000, "mode": "bw"}, "window must be between 1 and 4096"),
])
def test_run_bad_options(conn, kw, pattern):
    args = {"path": "host", "size": 8, "iters": 1}
    args.update(kw)
    with pytest.raises(InvalidArgument, match=pattern):
        conn.run(args.pop("path"), args.pop("size"), **args)
    assert conn.run("host", 8, iters=1)[2]


def test_buffer_too_small_for_message(conn):
    buf = engine.Buffer.from_array(np.zeros(100, np.uint8))
    with pytest.raises(InvalidArgument, match="does not fit"):
        conn.transfer(buf, "host", size=64, offset=50)
    with pytest.raises(InvalidArgument, match="does not fit"):
        conn.transfer(buf, "host", size=1, offset=100)
    assert conn.transfer(buf, "host", size=50, offset=50)


@no_gpu_only
def test_host_buffer_on_gpu_path_without_gpu_is_unavailable(conn):
    buf = engine.Buffer.from_array(np.zeros(64, np.uint8))
    with pytest.raises(Unavailable, match="needs a GPU"):
        conn.transfer(buf, "staged")
    assert conn.run("host", 8, iters=1)[2]


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["staged", "shared", "pipelined"])
def test_host_buffer_on_gpu_path_is_invalid_argument(gpu, conn, path):
    buf = engine.Buffer.from_array(np.zeros(64, np.uint8))
    with pytest.raises(InvalidArgument, match="moves GPU memory, but the buffer is pageable host memory"):
        conn.transfer(buf, path)
    assert conn.run("host", 8, iters=1)[2]


@pytest.mark.gpu
def test_device_buffer_on_host_path_is_invalid_argument(gpu, conn):
    buf = engine.Buffer(64, kind="device")
    with pytest.raises(InvalidArgument, match="path 'host' moves host memory, but the buffer is GPU memory"):
        conn.transfer(buf, "host")
    assert conn.run("host", 8, iters=1)[2]


def test_from_array_bad_arrays():
    with pytest.raises(InvalidArgument, match="C-contiguous"):
        engine.Buffer.from_array(np.zeros((8, 8), np.uint8)[:, ::2])
    with pytest.raises(InvalidArgument, match="empty"):
        engine.Buffer.from_array(np.zeros(0, np.uint8))


@pytest.mark.parametrize("peer,exc,pattern", [
    ("nohostport", InvalidArgument, "HOST:PORT"),
    ("127.0.0.1:", InvalidArgument, "HOST:PORT"),
    ("127.0.0.1:0", InvalidArgument, "out of range"),
    ("127.0.0.1:99999", InvalidArgument, "out of range"),
    ("127.0.0.1:1", PeerClosed, "cannot connect"),
])
def test_connect_bad_peer(peer, exc, pattern):
    with pytest.raises(exc, match=pattern):
        engine.connect(peer, token="t", timeout_s=2)


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), 1e12])
def test_connection_bad_timeout(native_server, timeout_s):
    with pytest.raises(InvalidArgument, match="timeout"):
        engine.Connection("127.0.0.1", native_server.port, native_server.token, timeout_s=timeout_s)


def test_token_too_long(native_server):
    with pytest.raises(InvalidArgument, match="token longer than 256 bytes"):
        engine.Connection("127.0.0.1", native_server.port, "x" * 257, timeout_s=2)


# --------------------------------------------------------------------------- CLI
def _assert_cli_error(r, pattern: str, *, json_mode: bool) -> None:
    import re

    assert r.returncode != 0, r
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{r.stderr}"
    assert re.search(pattern, lines[0]), lines[0]
    if json_mode:
        doc = json.loads(r.stdout)  # exactly one document, nothing else
        assert re.search(pattern, doc["error"]["message"]), doc
        assert doc["error"]["type"]
    else:
        assert r.stdout == ""


CLI_BAD = [
    (["bench", "--sizes", "0"], "at least 1 byte"),
    (["bench", "--sizes", "abc"], "not a size"),
    (["bench", "--sizes", "64M:8"], "runs backwards"),
    (["bench", "--sizes", "2G"], "exceeds the tcp wire's maximum"),
    (["bench", "--sizes", ""], "no sizes"),
    (["bench", "--path", "warp", "--sizes", "8"], "unknown path 'warp'"),
    (["bench", "--path", "gdr", "--sizes", "8"], "does not run over the tcp wire"),
    (["bench", "--iters", "0", "--sizes", "8"], "--iters 0: must be 1.."),
    (["bench", "--iters", "many", "--sizes", "8"], "--iters: 'many' is not a whole number"),
    (["bench", "--chunk", "abc", "--sizes", "8"], "not a size"),
    (["bench", "--chunk", "0", "--sizes", "8"], "--chunk: size must be at least 1 byte"),
    (["bench", "--timeout", "0", "--sizes", "8"], "timeout"),
    (["bench", "--timeout", "1e10", "--sizes", "8"], "timeout"),
    (["bench", "--iters", "5000000000", "--sizes", "8"], "--iters 5000000000: must be 1..4294967295"),
    (["bench", "--device", "-1", "--sizes", "8", "--iters", "1"], "device"),
    (["bench", "--peer", "nohostport", "--sizes", "8"], "HOST:PORT"),
    (["bench", "--peer", "127.0.0.1:1", "--sizes", "8"], "cannot connect"),
    (["serve", "--listen", "127.0.0.1:70000"], "out of range"),
    (["serve", "--listen", "nohostport"], "HOST:PORT"),
    (["serve", "--timeout", "0", "--listen", "127.0.0.1:0"], "timeout"),
    (["serve", "--timeout", "1e10", "--listen", "127.0.0.1:0"], "timeout"),
]


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("argv,pattern", CLI_BAD, ids=[" ".join(a) for a, _ in CLI_BAD])
def test_cli_bad_input(run_cli, argv, pattern, json_mode):
    r = run_cli(*argv, *(["--json"] if json_mode else []), timeout=60)
    _assert_cli_error(r, pattern, json_mode=json_mode)


@no_gpu_only
@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_cli_gpu_path_without_gpu(run_cli, json_mode):
    r = run_cli("bench", "--path", "staged", "--sizes", "8", *(["--json"] if json_mode else []), timeout=60)
    _assert_cli_error(r, r"path 'staged' needs a GPU: \S", json_mode=json_mode)
    assert ("Unavailable" in json.loads(r.stdout)["error"]["type"]) if json_mode else ("Unavailable:" in r.stderr)


@pytest.mark.parametrize("argv,pattern", [
    (["bench", "--wire", "foo"], "invalid choice: 'foo'"),
    (["bench", "--mode", "fast"], "invalid choice: 'fast'"),
])
def test_cli_argparse_errors_name_the_bad_value(run_cli, argv, pattern):
    r = run_cli(*argv, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert pattern in r.stderr.strip().splitlines()[-1]


def test_cli_argparse_error_with_json_gives_json_document(run_cli):
    r = run_cli("bench", "--wire", "foo", "--json", timeout=60)
    doc = json.loads(r.stdout)
    assert "foo" in doc["error"]["message"]
