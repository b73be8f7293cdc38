"""The server's memory budget and device (classroom-serve issue, D5/D6).

Every tcp test reserves its buffers from the server's budget before allocating; a request larger
than the budget is refused with one line naming the budget and its flag, the session goes on, and
a finished test gives its share back. GPU requests run on the server's own --device.
"""
from __future__ import annotations

import time

import pytest

from conftest import SERVED_TOKEN, TIME_SCALE
from gdrlab.engine import native
from gdrlab.errors import InvalidArgument, Unavailable

pytestmark = pytest.mark.timeout(120)
MiB = 1 << 20


def test_request_over_the_host_budget_is_refused_naming_it_and_the_session_goes_on(served):
    s = served(max_host_bytes=1 * MiB)
    with s.connect() as c:
        with pytest.raises(Unavailable) as exc:
            c.run("host", 2 * MiB, iters=1, warmup=0)
        msg = str(exc.value)
        assert "refused: session needs 2.0 MiB host memory" in msg, msg
        assert "server budget 1.0 MiB (--max-pinned)" in msg, msg
        assert c.run("host", 512 * 1024, iters=1, warmup=0)[2]  # same session, within the budget


def test_finished_tests_give_their_share_back(served):
    s = served(max_host_bytes=1 * MiB)
    with s.connect() as c:
        for _ in range(3):  # 3 x 768 KiB in turn: only possible if each test returns its share
            assert c.run("host", 768 * 1024, iters=1, warmup=0)[2]


def test_budget_is_shared_by_all_sessions(served):
    """Two sessions each within the budget run one after the other; a third that would need more
    than the whole budget is refused however idle the server is."""
    s = served(max_host_bytes=1 * MiB)
    with s.connect() as a, s.connect() as b:
        assert a.run("host", 700 * 1024, iters=1, warmup=0)[2]
        # a's server side gives its share back just after a's client returns: b may briefly be
        # told so ("other sessions hold ... try again later"), never refused for good
        deadline = time.monotonic() + 5 * TIME_SCALE
        while True:
            try:
                assert b.run("host", 700 * 1024, iters=1, warmup=0)[2]
                break
            except Unavailable as exc:
                assert "other sessions hold 700.0 KiB of it now, try again later" in str(exc)
                assert time.monotonic() < deadline, "the first session's share never came back"
                time.sleep(0.05)
        # 1 MiB + 1 B rounds to the budget's own "1.0 MiB": the refusal gives both in bytes (probe E14)
        with pytest.raises(Unavailable, match=r"needs 1048577 bytes host memory .*server budget 1048576 bytes \(--max-pinned\)"):
            b.run("host", 1 * MiB + 1, iters=1, warmup=0)


def test_invalid_limits_are_refused():
    with pytest.raises(InvalidArgument):
        native().Server("127.0.0.1", 0, SERVED_TOKEN, 5000, max_clients=0)
    with pytest.raises(InvalidArgument):
        native().Server("127.0.0.1", 0, SERVED_TOKEN, 5000, device=-1)


@pytest.mark.parametrize("flag,value,named", [
    ("--max-pinned", "lots", "argument --max-pinned: not a size"),
    ("--max-gpu-mem", "-1G", "argument --max-gpu-mem"),
    ("--idle-timeout", "0", "--idle-timeout must be between 0 and 86400 seconds"),
])
def test_bad_budget_flags_are_one_line(run_cli, flag, value, named):
    r = run_cli("serve", "--listen", "127.0.0.1:0", "--once", flag, value, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert any(named in ln for ln in lines), lines


# --------------------------------------------------------------------------- GPU (run by the lead)
@pytest.mark.gpu
def test_pipelined_depth_times_chunk_is_bounded_by_the_budget(served, gpu):
    s = served(max_host_bytes=4 * MiB)
    with s.connect() as c:
        with pytest.raises(Unavailable) as exc:  # 64 x 1 MiB chunks of pinned memory
            c.run("pipelined", 64 * MiB, iters=1, warmup=0, chunk=1 * MiB, depth=64)
        assert "needs 64.0 MiB host memory" in str(exc.value) and "(--max-pinned)" in str(exc.value)
        assert c.run("pipelined", 4 * MiB, iters=1, warmup=0, chunk=1 * MiB, depth=2)[2]


@pytest.mark.gpu
def test_gpu_budget_names_its_flag(served, gpu):
    s = served(max_gpu_bytes=1 * MiB)
    with s.connect() as c:
        with pytest.raises(Unavailable, match=r"needs 2\.0 MiB GPU memory, server budget 1\.0 MiB \(--max-gpu-mem\)"):
            c.run("staged", 2 * MiB, iters=1, warmup=0)


@pytest.mark.gpu
def test_server_device_serves_gpu_tests(served, gpu):
    """GPU tests run on the server's own device: a server on device 0 serves them, one pointed at
    a device that does not exist refuses them (the client's request does not pick the GPU)."""
    s = served(device=0)
    with s.connect() as c:
        assert c.run("staged", 64 * 1024, iters=1, warmup=0, device=0)[2]
    bad = served(device=1000)
    with bad.connect() as c:
        with pytest.raises(Unavailable, match="GPU 1000 does not exist"):
            c.run("staged", 64 * 1024, iters=1, warmup=0, device=0)
        assert c.run("host", 64, iters=1, warmup=0)[2]  # and still serves host tests
