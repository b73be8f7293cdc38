"""Timeouts of the serving side: the handshake has one deadline however slowly a client trickles,
and a connected client may sit idle between tests longer than the per-reply timeout."""
import re
import socket
import struct
import sys
import threading
import time

import pytest

from gdrlab import engine

nat = engine.native()


def _serve_in_thread(server):
    result = {}
    t = threading.Thread(target=lambda: result.update(r=server.serve_one(5000)), daemon=True)
    t.start()
    return t, result


def test_trickling_client_cannot_hold_the_handshake():
    server = nat.Server("127.0.0.1", 0, "tok", 1000)
    t, result = _serve_in_thread(server)
    s = socket.create_connection(("127.0.0.1", server.port))
    hello = nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, 1, 0, 200) + b"x" * 200
    t0 = time.monotonic()
    closed_at = None
    try:
        for b in hello:  # one byte every 0.3 s: each gap is inside the 1 s per-call timeout
            s.sendall(bytes([b]))
            time.sleep(0.3)
            if not t.is_alive():
                closed_at = time.monotonic() - t0
                break
    except OSError:
        closed_at = time.monotonic() - t0
    t.join(5)
    s.close()
    assert closed_at is not None and closed_at < 3.0, "server kept waiting past the handshake deadline"
    came, error = result["r"]
    assert came and "PeerTimeout" in error


def test_idle_client_between_tests_is_kept():
    server = nat.Server("127.0.0.1", 0, "tok", 1000)
    t, result = _serve_in_thread(server)
    with engine.Connection("127.0.0.1", server.port, "tok", timeout_s=1.0) as conn:
        assert conn.transfer(engine.Buffer(4096), "host")
        time.sleep(2.0)  # twice the per-reply timeout, idle between tests
        assert conn.transfer(engine.Buffer(4096), "host")
    t.join(5)
    assert result["r"] == (True, "")


def test_error_during_handshake_keeps_the_reason():
    # A server that answers HELLO with an ERROR frame: the client reports the server's text.
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)

    def fake():
        c, _ = ls.accept()
        c.recv(4096)
        body = bytes([0]) + (17).to_bytes(4, "little") + b"no GPU over there"
        c.sendall(nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, 6, 0, len(body)) + body)
        time.sleep(0.5)
        c.close()

    th = threading.Thread(target=fake, daemon=True)
    th.start()
    import pytest
    from gdrlab import errors
    with pytest.raises(errors.Unavailable, match="no GPU over there"):
        engine.Connection("127.0.0.1", ls.getsockname()[1], "", timeout_s=2.0)
    th.join(5)
    ls.close()


def test_a_server_that_trickles_its_welcome_cannot_hold_the_client():
    """One byte of WELCOME every 0.3 s, each inside the client's 1 s per-call timeout: the client's
    handshake deadline ends it after about 1 s instead of waiting for the whole frame (probe E9)."""
    import pytest
    from gdrlab import errors

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    done = threading.Event()
    body = (200).to_bytes(4, "little") + b"d" * 200
    welcome = nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, 2, 0, len(body)) + body

    def trickle():
        c, _ = ls.accept()
        c.recv(4096)
        try:
            for b in welcome:
                if done.wait(0.3):
                    break
                c.sendall(bytes([b]))
        except OSError:
            pass
        c.close()

    th = threading.Thread(target=trickle, daemon=True)
    th.start()
    t0 = time.monotonic()
    with pytest.raises(errors.PeerTimeout):
        engine.Connection("127.0.0.1", ls.getsockname()[1], "", timeout_s=1.0)
    took = time.monotonic() - t0
    done.set()
    th.join(5)
    ls.close()
    assert took < 3.0, f"the client waited {took:.1f} s for a trickled WELCOME"  # the whole frame takes 65 s


# ------------------------------------------------------------------------------ after the handshake
HDR = struct.Struct("<IHHII")
WELCOME, SETUP, READY, DATA = 2, 4, 5, 7


def _recv_exact(c, n):
    data = b""
    while len(data) < n:
        got = c.recv(n - len(data))
        if not got:
            raise ConnectionError("client went away")
        data += got
    return data


def _recv_frame(c):
    head = _recv_exact(c, 16)
    _magic, _version, ftype, _seq, length = HDR.unpack(head)
    return ftype, _recv_exact(c, length) if length else b""


class _HostileServer:
    """A server that speaks the handshake correctly, then answers the client's SETUP through
    `answer(conn)`, which may trickle. Pacing is the hostile behaviour itself (done.wait), so the
    trickle stops at once when the test is over; it also gives up after `give_up_s`, so a client
    without a deadline fails the test instead of hanging it."""

    def __init__(self, answer, give_up_s=8.0):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(1)
        self.port = self.ls.getsockname()[1]
        self.done = threading.Event()
        self.give_up_s = give_up_s
        self.answer = answer
        self.trickling = threading.Event()  # set once the hostile part has started
        self.error = None
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def trickle(self, conn, data, every_s=0.3):
        self.trickling.set()
        t0 = time.monotonic()
        for b in data:
            if self.done.wait(every_s) or time.monotonic() - t0 > self.give_up_s:
                return
            conn.sendall(bytes([b]))

    def _run(self):
        try:
            c, _ = self.ls.accept()
            with c:
                ftype, _ = _recv_frame(c)  # HELLO
                assert ftype == 1, ftype
                body = (6).to_bytes(4, "little") + b"hostile"[:6]
                c.sendall(nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, WELCOME, 0, len(body)) + body)
                ftype, _ = _recv_frame(c)  # SETUP
                assert ftype == SETUP, ftype
                self.answer(self, c)
        except (OSError, ConnectionError):
            pass
        except AssertionError as exc:
            self.error = exc

    def close(self):
        self.done.set()
        self.th.join(10)
        self.ls.close()


def _timed_run(port, size, timeout_s):
    """Runs one latency test against the hostile server; (the exception, seconds taken)."""
    t0 = time.monotonic()
    try:
        with engine.Connection("127.0.0.1", port, "", timeout_s=timeout_s) as conn:
            conn.run("host", size, mode="lat", iters=1, warmup=0)
    except Exception as exc:  # noqa: BLE001 - the test looks at what it is
        return exc, time.monotonic() - t0
    return None, time.monotonic() - t0


@pytest.mark.parametrize("header_too", [False, True])
def test_a_server_that_trickles_ready_cannot_hold_the_client(header_too):
    """After a correct handshake the server sends a READY header claiming a 1,000-byte body and
    trickles the body (or the header too) one byte every 0.3 s, each gap inside the client's 1 s
    per-call timeout (the whole frame would take 5 min): the client's per-message deadline (timeout
    + size at 100 MB/s) ends it in about 1 s with a PeerTimeout naming READY, the bytes that came
    and the time waited (probe E9, second half)."""
    from gdrlab import errors

    def answer(srv, c):
        head = nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, READY, 1, 1000)
        if header_too:
            srv.trickle(c, head + b"r" * 1000)
        else:
            c.sendall(head)
            srv.trickle(c, b"r" * 1000)

    srv = _HostileServer(answer)
    try:
        exc, took = _timed_run(srv.port, 8, 1.0)
    finally:
        srv.close()
    assert srv.error is None, srv.error
    assert srv.trickling.is_set()
    assert isinstance(exc, errors.PeerTimeout), repr(exc)
    assert took < 3.0, f"the client waited {took:.1f} s for a trickled READY"
    text = str(exc)
    assert "\n" not in text
    what = r"\d+ of its 16 header bytes" if header_too else r"\d+ of its 1016 bytes"
    assert re.search(r"timed out waiting for READY from the server: " + what + r" came in \d+\.\d s; a message "
                     r"may take the timeout \(1\.0 s\) plus its size at 100 MB/s", text), text


@pytest.mark.parametrize("header_too", [False, True])
def test_a_server_that_trickles_data_cannot_hold_the_client(header_too):
    """READY at once, then the 4 KiB answer of a latency test trickled one byte every 0.3 s (its
    payload only, or its header too): ended after about the 1 s timeout, not after 20 min."""
    from gdrlab import errors
    size = 4096

    def answer(srv, c):
        c.sendall(nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, READY, 1, 0))
        ftype, payload = _recv_frame(c)  # the client's DATA
        assert ftype == DATA and len(payload) == size, (ftype, len(payload))
        head = nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, DATA, 2, size)
        if header_too:
            srv.trickle(c, head + payload)
        else:
            c.sendall(head)
            srv.trickle(c, payload)

    srv = _HostileServer(answer)
    try:
        exc, took = _timed_run(srv.port, size, 1.0)
    finally:
        srv.close()
    assert srv.error is None, srv.error
    assert srv.trickling.is_set()
    assert isinstance(exc, errors.PeerTimeout), repr(exc)
    assert took < 3.0, f"the client waited {took:.1f} s for a trickled DATA frame"
    what = r"\d+ of its 16 header bytes" if header_too else r"\d+ of its 4112 bytes"
    assert re.search(r"timed out waiting for DATA from the server: " + what + r" came in \d+\.\d s", str(exc)), exc


def test_bench_command_ends_on_a_trickled_ready_with_one_line(capsys):
    """`gdrlab bench --peer ... --timeout 1` against the trickling server: status 1, one line on
    stderr, the error class and READY named."""
    from gdrlab.cli import main

    def answer(srv, c):
        srv.trickle(c, nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, READY, 1, 1000) + b"r" * 1000)

    srv = _HostileServer(answer)
    t0 = time.monotonic()
    try:
        status = main(["bench", "--peer", f"127.0.0.1:{srv.port}", "--timeout", "1", "--sizes", "8",
                       "--iters", "1", "--warmup", "0", "--mode", "lat"])
    finally:
        took = time.monotonic() - t0
        srv.close()
    out = capsys.readouterr()
    assert took < 4.0, f"gdrlab bench waited {took:.1f} s"
    assert status == 1, (status, out)
    lines = [ln for ln in out.err.splitlines() if "warning" not in ln]
    assert len(lines) == 1, out.err
    assert "PeerTimeout" in lines[0] and "timed out waiting for READY from the server" in lines[0], lines[0]
    print(lines[0], file=sys.stderr)
