"""A full server tells a client "server busy" and the client waits for a place (serve-capacity
issue, E2/E3 of the serve probe), loopback only.

- The handshake places protect honest clients: a new connection past them closes the *oldest*
  unauthenticated one, which is told "server busy" with an ERROR frame and a clean end of stream,
  never a reset; one source (an address, all of loopback, an IPv6 /64) holds only its share.
- After a refused token, that source's next HELLO waits, unchecked, for its turn (no thread).
- The client retries a capacity refusal inside its timeout, then says how long it waited.
- A session thread that cannot be created is logged and answered "server busy".
- At start-up the server lowers what its process limits cannot hold, and says so.

Every wait here is on the server's own counters (handshakes in progress, sessions, busy
refusals), never on a fixed sleep.
"""
from __future__ import annotations

import json
import os
import re
import resource
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from conftest import SERVED_TOKEN, TIME_SCALE, UNDER_ASAN, start_serve, wait_until
from gdrlab import engine
from gdrlab.errors import AuthError, Unavailable
from standins import build_thread_failer

pytestmark = pytest.mark.timeout(300)
MAGIC, VERSION = 0x4C524447, 1
HELLO, REJECT, ERROR = 1, 3, 6


def _frame(ftype: int, body: bytes, seq: int = 0) -> bytes:
    return struct.pack("<IHHII", MAGIC, VERSION, ftype, seq, len(body)) + body


def _hello(token: bytes) -> bytes:
    return _frame(HELLO, struct.pack("<I", 1) + struct.pack("<I", len(token)) + token)


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(10 * TIME_SCALE)
    s.connect(("127.0.0.1", port))
    return s


def _answer(s: socket.socket) -> tuple[int, bytes, bytes]:
    """(frame type, body, what followed it) of the server's one answer; what followed is b"" for a
    clean end of stream. A reset raises ConnectionResetError here, failing the test."""
    head = s.recv(16, socket.MSG_WAITALL)
    assert len(head) == 16, f"no answer, only {head!r}"
    ftype, length = struct.unpack("<IHHII", head)[2], struct.unpack("<IHHII", head)[4]
    body = s.recv(length, socket.MSG_WAITALL) if length else b""
    return ftype, body, s.recv(64)


def _verified(conn: engine.Connection) -> bool:
    return bool(conn.run("host", 4096, iters=1, warmup=0)[2])


# --------------------------------------------------------------------------- the handshake places
def test_a_full_pool_tells_the_oldest_server_busy_and_serves_the_newcomer(served):
    s = served(max_handshakes=8)
    srv = s.server
    held = [_connect(srv.port) for _ in range(20)]
    try:
        for sock in held[:12]:  # half a HELLO each: the unread bytes must not turn the close into a reset
            sock.sendall(_hello(b"x" * 40)[:20])
        wait_until(lambda: srv.busy_refusals >= 12 and srv.handshakes_in_progress == 8, 10,
                   "12 evictions and 8 places taken")
        for sock in held[:12]:  # the 12 oldest
            ftype, body, after = _answer(sock)
            assert ftype == ERROR and b"server busy: all 8 handshake places taken (--max-handshakes 8)" in body, body
            assert after == b"", after  # end of stream, not a reset
        with s.connect() as c:  # while the 8 newest are still held
            assert _verified(c)
        assert srv.handshakes_in_progress <= 8
    finally:
        for sock in held:
            sock.close()
    s.quiet()
    log = srv.take_log()
    evictions = [ln for ln in log if "handshake places taken (--max-handshakes 8): told the oldest" in ln]
    assert len(evictions) == 1 and "127.0.0.1:" in evictions[0], log  # one line per interval


def test_one_source_holds_only_its_share_of_the_places(served):
    """Every loopback address is one source (a local user can bind any of 127.0.0.0/8): 10
    connections from 127.0.0.2 and 3 from 127.0.0.3 share its 4 places, the oldest told busy."""
    s = served(max_handshakes=16, max_handshakes_per_host=4)
    srv = s.server
    crowd = [_connect(srv.port, "127.0.0.2") for _ in range(10)]
    wait_until(lambda: srv.handshakes_in_progress == 4 and srv.busy_refusals == 6, 10, "4 places for loopback")
    others = [_connect(srv.port, "127.0.0.3") for _ in range(3)]
    try:
        wait_until(lambda: srv.handshakes_in_progress == 4 and srv.busy_refusals == 9, 10,
                   "127.0.0.3 counted with 127.0.0.2")
        for sock in crowd[:9]:
            ftype, body, _ = _answer(sock)
            assert ftype == ERROR and b"all 4 handshake places of address 127.0.0.0/8 taken" in body, body
        for sock in crowd[9:] + others:  # still waiting for their HELLO: nothing was sent to them
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in crowd + others:
            sock.close()


def test_sources_are_counted_by_address_loopback_range_and_ipv6_prefix():
    from gdrlab.engine import native
    key = native().rate_key
    assert key("192.0.2.7") == "192.0.2.7" and key("192.0.2.8") == "192.0.2.8"
    assert key("127.0.0.1") == key("127.1.2.3") == key("::1") == "127.0.0.0/8"
    assert key("2001:db8:1:2:aaaa::1") == key("2001:db8:1:2:ffff:1:2:3") == "2001:db8:1:2::/64"
    assert key("2001:db8:1:3::1") != key("2001:db8:1:2::1")
    assert key("::ffff:192.0.2.7") == "192.0.2.7" and key("::ffff:127.0.0.9") == "127.0.0.0/8"


def test_a_guess_after_a_refused_one_waits_unchecked_holding_a_place_but_no_thread(served):
    s = served(max_handshakes=4)
    srv = s.server
    first = _connect(srv.port)
    first.sendall(_hello(b"wrong-token-0123456789"))
    ftype, body, _ = _answer(first)  # no failure before it: checked at once
    assert ftype == REJECT and b"wrong or missing token" in body
    first.close()
    t0 = time.monotonic()
    guesses = []
    for _ in range(3):  # three at once: one check per delay (50, 100, 200 ms), one after another
        guesses.append(_connect(srv.port))
        guesses[-1].sendall(_hello(b"wrong-token-0123456789"))
    wait_until(lambda: srv.clients_served >= 2, 10, "the first waiting guess checked")
    answered = []
    for sock in guesses:
        ftype, body, after = _answer(sock)
        answered.append(time.monotonic() - t0)
        assert ftype == REJECT and after == b""
        sock.close()
    assert srv.session_threads == 0
    assert answered[2] >= 0.3 - 0.02, answered  # 50 + 100 + 200 ms of checks, one at a time
    assert answered[0] < answered[1] < answered[2], answered


# --------------------------------------------------------------------------- the client waits for a place
def test_a_client_waiting_for_a_place_gets_in_when_one_frees(served):
    s = served(max_clients=1)
    srv = s.server
    first = s.connect()
    outcome: dict = {}

    def second() -> None:
        try:
            with engine.Connection("127.0.0.1", srv.port, SERVED_TOKEN, timeout_s=30) as c:
                outcome["verified"] = _verified(c)
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["error"] = repr(exc)

    t = threading.Thread(target=second)
    t.start()
    wait_until(lambda: srv.busy_refusals >= 2, 10, "the second client to be told 'server busy' twice")
    assert "verified" not in outcome and "error" not in outcome  # still waiting
    first.close()
    t.join(30 * TIME_SCALE)
    assert outcome == {"verified": True}, outcome


def test_a_client_that_never_gets_a_place_says_how_long_it_waited(served):
    s = served(max_clients=1)
    with s.connect():
        t = time.monotonic()
        with pytest.raises(Unavailable) as exc:
            engine.Connection("127.0.0.1", s.server.port, SERVED_TOKEN, timeout_s=1.5)
        took = time.monotonic() - t
    msg = str(exc.value)
    assert re.search(r"server busy \(1 clients, --max-clients 1\); retried for \d+\.\d s "
                     r"\(raise --timeout, or ask the instructor to raise --max-clients\)", msg), msg
    assert 1.0 <= took < 1.5 + 5 * TIME_SCALE, took
    assert s.server.busy_refusals >= 3  # it retried, with backoff, rather than failing at once


def test_a_wrong_token_is_not_retried(served):
    s = served()
    t = time.monotonic()
    with pytest.raises(AuthError, match="wrong or missing token"):
        engine.Connection("127.0.0.1", s.server.port, "not-the-token", timeout_s=10)
    assert time.monotonic() - t < 5 * TIME_SCALE
    assert s.server.busy_refusals == 0


# --------------------------------------------------------------------------- no thread, process limits
@pytest.mark.skipif(UNDER_ASAN, reason="AddressSanitizer's own pthread_create interceptor comes first in the preload list")
def test_a_session_thread_that_cannot_start_is_logged_and_answered_busy(tmp_path):
    shim = build_thread_failer(tmp_path)
    flag = tmp_path / "no-threads"
    preload = " ".join(p for p in (os.environ.get("LD_PRELOAD", ""), str(shim)) if p)
    sp = start_serve(timeout_s=5, env={"LD_PRELOAD": preload, "FAIL_THREADS_FLAG": str(flag)})
    try:
        with engine.Connection("127.0.0.1", sp.port, sp.token, timeout_s=10) as c:  # serve's own threads run
            assert _verified(c)
        flag.touch()
        with pytest.raises(Unavailable, match=r"server busy: no thread for another session now .*retried for"):
            engine.Connection("127.0.0.1", sp.port, sp.token, timeout_s=1.0)
        flag.unlink()
        with engine.Connection("127.0.0.1", sp.port, sp.token, timeout_s=10) as c:  # threads again: served
            assert _verified(c)
    finally:
        err = sp.stderr_text()
    lines = [ln for ln in err.splitlines() if "no thread could be started for its session" in ln]
    assert len(lines) == 1 and "told 'server busy'" in lines[0], err  # rate-limited: one line per interval


def test_serve_lowers_what_its_open_file_limit_cannot_hold():
    def low_nofile() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    env = dict(os.environ, GDRLAB_TOKEN="tok", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "gdrlab", "serve", "--listen", "127.0.0.1:0", "--announce"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=low_nofile)
    try:
        doc = json.loads(proc.stdout.readline())
        notes = " ".join(doc["notes"])
        assert re.search(r"RLIMIT_NOFILE allows 256 open files \(ulimit -n; hard limit 256\), \d+ open now: "
                         r"lowered .*handshake places from 512 to \d+, answered sockets from 1024 to \d+", notes), notes
        places = int(re.search(r"handshake places from 512 to (\d+)", notes).group(1))
        assert 1 <= places < 256
        with engine.Connection("127.0.0.1", doc["port"], "tok", timeout_s=10) as c:
            assert _verified(c)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
