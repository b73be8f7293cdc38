"""`gdrlab serve` stops cleanly (serve probe E1, E13), loopback only.

- SIGTERM and Ctrl-C, right after concurrent clients or in the middle of their tests, end the
  server with 143 / 130: no `terminate called`, no core, no nanobind leak report, sessions
  told the server is going.
- A stderr nobody reads (a full pipe) delays neither serving nor a stop: the log waits in a
  bounded backlog and the last lines are dropped rather than block.

Every wait is on a condition (the process's exit, the announce line), never a fixed sleep.
"""
from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import TIME_SCALE, start_serve, wait_until
from gdrlab import engine
from gdrlab.commands.serve import _LogWriter

pytestmark = pytest.mark.timeout(300)
F_SETPIPE_SZ = 1031


def _clients_running(port: int, token: str, n: int, stop: threading.Event) -> list[threading.Thread]:
    """n clients, each in a loop of short verified host tests until stop is set; errors (the
    server going away mid-test) end a client quietly."""
    started = threading.Barrier(n + 1)

    def loop() -> None:
        try:
            with engine.Connection("127.0.0.1", port, token, timeout_s=10 * TIME_SCALE) as c:
                started.wait(30)
                while not stop.is_set():
                    c.run("host", 64 * 1024, iters=20, warmup=0)
        except Exception:  # noqa: BLE001 - the server stops under it: expected
            try:
                started.wait(0)
            except threading.BrokenBarrierError:
                pass

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    started.wait(60)
    return threads


@pytest.mark.parametrize("sig, rc", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_while_eight_clients_run_tests_is_clean(sig, rc, tmp_path):
    for _ in range(3):
        sp = start_serve(timeout_s=5)
        stop = threading.Event()
        threads = _clients_running(sp.port, sp.token, 8, stop)
        try:
            sp.proc.send_signal(sig)
            _, err_b = sp.proc.communicate(timeout=20 * TIME_SCALE)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        err = err_b.decode(errors="replace")
        assert sp.proc.returncode == rc, err
        assert "terminate called" not in err and "leaked" not in err and "Traceback" not in err, err
        if sig == signal.SIGINT:
            assert err.rstrip().endswith("gdrlab: interrupted"), err


def _full_pipe() -> tuple[int, int]:
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
    except OSError:
        pass  # the default size: filled all the same
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    return r, w


def test_a_stderr_nobody_reads_delays_neither_serving_nor_the_stop():
    r, w = _full_pipe()
    env = dict(os.environ, GDRLAB_TOKEN="t0ken", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "gdrlab", "serve", "--listen", "127.0.0.1:0", "--announce",
                             "--timeout", "5"], stdout=subprocess.PIPE, stderr=w, stdin=subprocess.DEVNULL, env=env)
    os.close(w)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60 * TIME_SCALE)
        assert ready, "no announce line"
        port = json.loads(proc.stdout.readline())["port"]
        for _ in range(20):  # each writes log lines into the full pipe
            with engine.Connection("127.0.0.1", port, "t0ken", timeout_s=10) as c:
                assert c.run("host", 4096, iters=2)[2]
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: proc.poll() is not None, 10, "serve to stop with its stderr full")
        assert proc.returncode == 143
        assert time.monotonic() - t < 5 * TIME_SCALE
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(r)
        proc.stdout.close()


def test_the_log_writer_never_blocks_and_bounds_its_backlog():
    r, w = _full_pipe()
    stream = os.fdopen(w, "w")
    out = _LogWriter(stream)
    t = time.monotonic()
    for i in range(3000):
        out.write([f"line {i} " + "y" * 1000])
    assert time.monotonic() - t < 10 * TIME_SCALE
    assert len(out._pending) <= _LogWriter.MAX_BACKLOG + 4096
    # Drain the pipe: the backlog goes out, with a count of the lines it had to drop.
    got = b""
    os.set_blocking(r, False)
    deadline = time.monotonic() + 30 * TIME_SCALE
    while b"log lines dropped (stderr was not read)" not in got and time.monotonic() < deadline:
        try:
            got += os.read(r, 1 << 16)
        except BlockingIOError:
            pass
        out.write([])
    assert b"log lines dropped (stderr was not read)" in got
    assert b"line 2999 " in got or out._pending  # the newest lines are kept, not the oldest
    t = time.monotonic()
    out.close(0.3)
    assert time.monotonic() - t < 2
    stream.close()
    os.close(r)
