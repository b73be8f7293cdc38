"""Token guessing is slowed per source, not per connection (serve probe E4), loopback only.

After a refused token, the next HELLO from the same source waits, unchecked, for its turn (50 ms
after the first failure, doubling to 3 s), so parallel guessers, and guessers rotating through
127.0.0.0/8 (one source: any local user can bind any of it), get no more answers than one
guesser; a right token from that source waits as long as a wrong one (no timing oracle) and is
served (never a ban). A test's control traffic ends within --max-test-seconds however its peer
trickles (the probe's policy question).
"""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from conftest import SERVED_TOKEN, TIME_SCALE, wait_until
from gdrlab.engine import native

pytestmark = pytest.mark.timeout(300)
MAGIC, VERSION = 0x4C524447, 1
HELLO, WELCOME, REJECT, SETUP, READY, ERROR, DATA = 1, 2, 3, 4, 5, 6, 7


def _frame(ftype: int, body: bytes, seq: int = 0) -> bytes:
    return struct.pack("<IHHII", MAGIC, VERSION, ftype, seq, len(body)) + body


def _hello(token: bytes) -> bytes:
    return _frame(HELLO, struct.pack("<I", 1) + struct.pack("<I", len(token)) + token)


def _ask(port: int, token: bytes, source: str = "127.0.0.1", timeout: float = 20) -> tuple[int, float]:
    """(the answer's frame type, seconds it took) for one HELLO from source."""
    t = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((source, 0))
        s.settimeout(timeout * TIME_SCALE)
        s.connect(("127.0.0.1", port))
        s.sendall(_hello(token))
        head = s.recv(16, socket.MSG_WAITALL)
        assert len(head) == 16, head
        return struct.unpack("<IHHII", head)[2], time.monotonic() - t


def test_parallel_guessers_rotating_through_loopback_get_one_answer_per_delay(served):
    s = served()
    port = s.server.port
    rejects: list[float] = []
    lock = threading.Lock()
    t0 = time.monotonic()
    stop_at = t0 + 3.0

    def guesser(i: int) -> None:
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            try:
                ftype, _ = _ask(port, b"guess-%d-%d" % (i, n), source=f"127.{i + 1}.{n % 250}.{1 + n % 200}")
            except OSError:
                continue
            if ftype == REJECT:
                with lock:
                    rejects.append(time.monotonic() - t0)

    threads = [threading.Thread(target=guesser, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    within = [t for t in rejects if t <= 3.0]
    # One source: checks at 0, 50, 150, 350, 750, 1550, 3150 ms: at most 6 answers in 3 s
    # (16 connections per address each, before: 16 answers per delay step, hundreds in all).
    assert 1 <= len(within) <= 7, sorted(rejects)


def test_a_right_token_from_a_guessing_source_waits_as_long_then_is_served(served):
    s = served()
    port = s.server.port
    for i in range(5):  # next check 800 ms after the fifth refusal
        assert _ask(port, b"wrong-%d" % i)[0] == REJECT
    ftype_right, took_right = _ask(port, SERVED_TOKEN.encode(), source="127.0.0.7")
    assert ftype_right == WELCOME
    assert took_right >= 0.75, took_right  # the right token gets no quicker answer than a guess would
    with s.connect() as c:  # and the source is not banned
        assert c.run("host", 4096, iters=1, warmup=0)[2]


def test_a_guess_that_would_wait_too_long_is_told_busy_without_its_token_being_checked(served):
    s = served()
    port = s.server.port
    for i in range(8):  # the delay reaches its 3 s cap
        _ask(port, b"wrong-%d" % i)
    held = []
    for i in range(4):  # 4 at once: their checks fall 3 s apart; past 8 s the rest are told busy
        sock = socket.create_connection(("127.0.0.1", port), timeout=30 * TIME_SCALE)
        sock.sendall(_hello(b"more-%d" % i))
        held.append(sock)
    answers = []
    for sock in held:
        head = sock.recv(16, socket.MSG_WAITALL)
        ftype, length = struct.unpack("<IHHII", head)[2], struct.unpack("<IHHII", head)[4]
        answers.append((ftype, sock.recv(length, socket.MSG_WAITALL)))
        sock.close()
    kinds = [a[0] for a in answers]
    assert REJECT in kinds and ERROR in kinds, answers
    busy = [b for t, b in answers if t == ERROR]
    assert all(b"server busy: " in b and b"checked one at a time" in b for b in busy), busy


def test_a_test_trickled_past_the_per_test_limit_ends_the_session(served):
    s = served(test_ms=1500)
    srv = s.server
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10 * TIME_SCALE) as sock:
        sock.sendall(_hello(SERVED_TOKEN.encode()))
        head = sock.recv(16, socket.MSG_WAITALL)
        assert struct.unpack("<IHHII", head)[2] == WELCOME, head
        sock.recv(struct.unpack("<IHHII", head)[4], socket.MSG_WAITALL)  # the WELCOME's body
        spec = native().encode_spec("host", 0, 64 * 1024, 1, 0, 1, 0, 0, 0, 1)
        sock.sendall(_frame(SETUP, spec, seq=1))
        head = sock.recv(16, socket.MSG_WAITALL)
        assert struct.unpack("<IHHII", head)[2] == READY, head
        body_len = struct.unpack("<IHHII", head)[4]
        if body_len:
            sock.recv(body_len, socket.MSG_WAITALL)
        sock.sendall(struct.pack("<IHHII", MAGIC, VERSION, DATA, 2, 64 * 1024))
        t = time.monotonic()
        closed = False
        while time.monotonic() - t < 10 * TIME_SCALE:  # 1 byte every 0.2 s: each recv is well within --timeout
            try:
                sock.sendall(b"x")
                sock.settimeout(0.2)
                if sock.recv(1) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue
            except OSError:
                closed = True
                break
        assert closed, "the trickled test was not ended"
        assert 1.4 <= time.monotonic() - t < 6 * TIME_SCALE
    s.quiet()
    log = srv.take_log(final=True)
    assert any("--max-test-seconds" in ln for ln in log), log
