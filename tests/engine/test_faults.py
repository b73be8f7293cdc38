"""Fault injection against a real ``gdrlab serve`` process and the in-process engine Server.

Every fault must end with a clear error within the timeout, the serving side must still answer
the next well-formed client, and no file descriptor may be left behind. Frames are built here
with ``struct`` from the layout documented in native/src/wire/frame.h, not with the engine's encoder,
so a wrong encoder cannot hide a wrong decoder.
"""
from __future__ import annotations

import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from gdrlab import engine
from gdrlab.errors import AuthError, PeerClosed, PeerTimeout, ProtocolError

MAGIC = 0x4C524447  # "GDRL"
VERSION = 1
HELLO, WELCOME, REJECT, SETUP, READY, ERROR, DATA, ACK, VERDICT, BYE = range(1, 11)
MAX_CONTROL = 64 * 1024
MAX_DATA = 1 << 30
FAULT_DEADLINE_S = 5.0

pytestmark = pytest.mark.timeout(120)


# --------------------------------------------------------------------------- raw frames
def header(ftype: int, seq: int, length: int, magic: int = MAGIC, version: int = VERSION) -> bytes:
    return struct.pack("<IHHII", magic, version, ftype, seq, length)


def string(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def hello_frame(token: str, seq: int = 0, version: int = VERSION) -> bytes:
    body = struct.pack("<I", version) + string(token.encode())
    return header(HELLO, seq, len(body)) + body


def spec_body(path: int = 0, mode: int = 0, size: int = 8, iters: int = 1, warmup: int = 0, window: int = 1,
              seed: int = 1) -> bytes:
    return struct.pack("<BBQIIIQIIQ", path, mode, size, iters, warmup, window, 0, 0, 0, seed)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:  # closed with our unread bytes still queued: a close too
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def read_frame(sock: socket.socket) -> tuple[int, int, bytes] | None:
    """(type, seq, body) of the next frame, or None if the peer closed."""
    h = recv_exact(sock, 16)
    if h is None:
        return None
    magic, version, ftype, seq, length = struct.unpack("<IHHII", h)
    assert magic == MAGIC and version == VERSION, f"server sent a bad header {h!r}"
    body = recv_exact(sock, length) if length else b""
    return ftype, seq, body or b""


def error_text(body: bytes) -> str:
    (n,) = struct.unpack_from("<I", body, 1)
    return body[5:5 + n].decode()


def raw_connect(port: int, timeout_s: float = FAULT_DEADLINE_S) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    s.settimeout(timeout_s)
    return s


def handshake(sock: socket.socket, token: str) -> None:
    sock.sendall(hello_frame(token))
    frame = read_frame(sock)
    assert frame is not None and frame[0] == WELCOME, f"expected WELCOME, got {frame!r}"


def close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


# --------------------------------------------------------------------------- servers under test
class Target:
    """What the fault tests need from either server: port, token, its fd count, and a check that
    it still serves a well-formed client."""

    def __init__(self, kind: str, port: int, token: str, fd_pid):
        self.kind, self.port, self.token, self.fd_pid = kind, port, token, fd_pid

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.fd_pid}/fd"))

    def good_client(self) -> None:
        """A verified host transfer within the deadline: the server is still usable."""
        t0 = time.monotonic()
        with engine.Connection("127.0.0.1", self.port, self.token, timeout_s=FAULT_DEADLINE_S) as c:
            samples, nbytes, ok = c.run("host", 4099, mode="lat", iters=3, warmup=1)
        assert ok and len(samples) == 3 and nbytes == 4099
        assert time.monotonic() - t0 < 2 * FAULT_DEADLINE_S

    def wait_fds_at_most(self, limit: int, timeout_s: float = 3.0) -> int:
        """The server closes a client's socket just after the session ends: poll briefly."""
        deadline = time.monotonic() + timeout_s
        n = self.fds()
        while n > limit and time.monotonic() < deadline:
            time.sleep(0.02)
            n = self.fds()
        return n


@pytest.fixture(params=["process", "native"])
def target(request, serve_process, native_server):
    if request.param == "process":
        t = Target("process", serve_process.port, serve_process.token, serve_process.pid)
    else:
        t = Target("native", native_server.port, native_server.token, "self")
    t.good_client()  # warm up: imports, CUDA probe, first allocations
    time.sleep(0.2)  # the server closes the warm-up client's socket just after the session
    t.baseline_fds = t.fds()
    return t


def _after_fault(t: Target) -> None:
    t.good_client()
    n = t.wait_fds_at_most(t.baseline_fds)
    assert n <= t.baseline_fds, f"{t.kind} server holds {n - t.baseline_fds} more fds than before the fault"


# --------------------------------------------------------------------------- malformed frames
BAD_FIRST_FRAMES = {
    "bad_magic": (header(HELLO, 0, 0, magic=0xDEADBEEF), "bad frame magic"),
    "wrong_version": (header(HELLO, 0, 0, version=2), "wire version 2 not supported"),
    "out_of_sequence": (hello_frame("x", seq=5), "out of sequence"),
    "length_over_control_max": (header(HELLO, 0, MAX_CONTROL + 1), "exceeds the maximum"),
    "unknown_type": (header(99, 0, 0), "unknown frame type 99"),
    "data_before_hello": (header(DATA, 0, 4) + b"abcd", "expected HELLO"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIRST_FRAMES))
def test_bad_first_frame_is_refused_with_reason(target, case):
    frame, reason = BAD_FIRST_FRAMES[case]
    s = raw_connect(target.port)
    t0 = time.monotonic()
    try:
        s.sendall(frame)
        reply = read_frame(s)
        assert reply is not None, "server closed without saying why"
        assert reply[0] == ERROR, f"expected an ERROR frame, got type {reply[0]}"
        assert reason in error_text(reply[2])
        assert read_frame(s) is None, "server kept the connection open after a protocol error"
    finally:
        close_quietly(s)
    assert time.monotonic() - t0 < FAULT_DEADLINE_S
    _after_fault(target)


BAD_SESSION_FRAMES = {
    # after a good handshake, as frame seq 1
    "data_length_over_max": (header(DATA, 1, MAX_DATA + 1), "exceeds the maximum"),
    "server_frame_from_client": (header(READY, 1, 0), "expected SETUP or BYE, got READY"),
    "setup_body_short": (header(SETUP, 1, 10) + bytes(10), "frame body too short"),
    "setup_body_long": (header(SETUP, 1, 47) + spec_body() + b"!", "trailing bytes"),
    "setup_unknown_path": (header(SETUP, 1, 46) + spec_body(path=9), "unknown path code 9"),
    "setup_unknown_mode": (header(SETUP, 1, 46) + spec_body(mode=7), "unknown test mode 7"),
    "sequence_skips": (header(BYE, 2, 0), "out of sequence"),
    "sequence_repeats": (header(BYE, 0, 0), "out of sequence"),
}


@pytest.mark.parametrize("case", sorted(BAD_SESSION_FRAMES))
def test_bad_frame_after_handshake_is_refused_with_reason(target, case):
    frame, reason = BAD_SESSION_FRAMES[case]
    s = raw_connect(target.port)
    try:
        handshake(s, target.token)
        s.sendall(frame)
        reply = read_frame(s)
        assert reply is not None and reply[0] == ERROR, f"expected an ERROR frame, got {reply!r}"
        assert reason in error_text(reply[2])
        assert read_frame(s) is None
    finally:
        close_quietly(s)
    _after_fault(target)


def test_bad_setup_values_end_the_test_not_the_session(target):
    """A SETUP this side cannot run (size 0) is answered with ERROR; the session goes on."""
    s = raw_connect(target.port)
    try:
        handshake(s, target.token)
        s.sendall(header(SETUP, 1, 46) + spec_body(size=0))
        reply = read_frame(s)
        assert reply[0] == ERROR and "at least 1 byte" in error_text(reply[2])
        s.sendall(header(SETUP, 2, 46) + spec_body(size=MAX_DATA + 1))
        reply = read_frame(s)
        assert reply[0] == ERROR and "1 GiB" in error_text(reply[2])
        s.sendall(header(BYE, 3, 0))
        assert read_frame(s) is None  # orderly end
    finally:
        close_quietly(s)
    _after_fault(target)


def _vm_hwm_kb(pid) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_data_header_between_tests_does_not_allocate_its_length(serve_process):
    """A DATA header claiming 1 GiB where no test runs is refused before 1 GiB is allocated."""
    before = _vm_hwm_kb(serve_process.pid)
    s = raw_connect(serve_process.port)
    try:
        handshake(s, serve_process.token)
        s.sendall(header(DATA, 1, MAX_DATA))
        reply = read_frame(s)
        assert reply[0] == ERROR and "unexpected DATA" in error_text(reply[2])
    finally:
        close_quietly(s)
    grown_mib = (_vm_hwm_kb(serve_process.pid) - before) / 1024
    assert grown_mib < 256, f"server peak memory grew by {grown_mib:.0f} MiB for an empty 1 GiB DATA header"


# --------------------------------------------------------------------------- truncation, silence, hang-ups
TRUNCATIONS = {
    "header_cut": header(HELLO, 0, 18)[:7],
    "body_cut": hello_frame("abc")[:20],
    "nothing": b"",
}


@pytest.mark.parametrize("case", sorted(TRUNCATIONS))
def test_truncated_frame_then_close(target, case):
    s = raw_connect(target.port)
    s.sendall(TRUNCATIONS[case])
    s.shutdown(socket.SHUT_WR)
    assert read_frame(s) is None  # the server gives up on the client without a reply
    close_quietly(s)
    _after_fault(target)


def test_truncated_data_payload_mid_test(target):
    s = raw_connect(target.port)
    try:
        handshake(s, target.token)
        s.sendall(header(SETUP, 1, 46) + spec_body(size=4096, iters=1))
        assert read_frame(s)[0] == READY
        s.sendall(header(DATA, 2, 4096) + bytes(1000))  # 3096 bytes never come
        s.shutdown(socket.SHUT_WR)
        assert read_frame(s) is None
    finally:
        close_quietly(s)
    _after_fault(target)


def test_silent_client_times_out_and_next_client_is_served(target):
    """A client that connects and sends nothing holds the server for at most its timeout (1 s
    here): the one-at-a-time server serves the client queued behind it then, the concurrent one at
    once; the silent client is closed (by `serve` with an ERROR naming the deadline first)."""
    silent = raw_connect(target.port)
    try:
        t0 = time.monotonic()
        target.good_client()  # the native server: waits in the backlog behind the silent one
        assert time.monotonic() - t0 < FAULT_DEADLINE_S
        silent.settimeout(FAULT_DEADLINE_S)
        said = b""
        while chunk := silent.recv(4096):  # a reset would raise here
            said += chunk
        assert said == b"" or (said[6] == 6 and b"no complete HELLO within 1000 ms" in said), said
    finally:
        close_quietly(silent)
    assert target.wait_fds_at_most(target.baseline_fds) <= target.baseline_fds


@pytest.mark.parametrize("when", ["after_connect", "mid_hello", "after_hello"])
def test_client_disconnects_during_handshake(target, when):
    s = raw_connect(target.port)
    if when == "mid_hello":
        s.sendall(hello_frame(target.token)[:10])
    elif when == "after_hello":
        s.sendall(hello_frame(target.token))
    # An abortive close (RST) is the harshest hang-up a peer can do.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    _after_fault(target)


# --------------------------------------------------------------------------- handshake refusals
@pytest.mark.parametrize("token", ["wrong-token", ""])
def test_wrong_or_missing_token_is_auth_error(target, token):
    t0 = time.monotonic()
    with pytest.raises(AuthError, match="wrong or missing token"):
        engine.Connection("127.0.0.1", target.port, token, timeout_s=FAULT_DEADLINE_S)
    assert time.monotonic() - t0 < FAULT_DEADLINE_S
    _after_fault(target)


def test_hello_with_other_wire_version_is_rejected(target):
    s = raw_connect(target.port)
    try:
        s.sendall(hello_frame(target.token, version=2))
        reply = read_frame(s)
        assert reply[0] == REJECT
        (n,) = struct.unpack_from("<I", reply[2])
        assert b"wire version mismatch" in reply[2][4:4 + n]
    finally:
        close_quietly(s)
    _after_fault(target)


# --------------------------------------------------------------------------- clients against bad servers
def _fake_server(behaviour):
    """A one-connection tcp server on loopback running ``behaviour(conn)`` in a thread."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)

    def serve():
        try:
            conn, _ = lst.accept()
            with conn:
                behaviour(conn)
        except OSError:
            pass
        finally:
            lst.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    return lst.getsockname()[1], th


@pytest.mark.parametrize("behaviour,exc,pattern", [
    ("silent", PeerTimeout, "did not answer"),
    ("close", PeerClosed, "closed|lost"),
    ("garbage", ProtocolError, "bad frame magic"),
    ("welcome_out_of_sequence", ProtocolError, "out of sequence"),
    ("huge_welcome", ProtocolError, "exceeds the maximum"),
])
def test_client_against_misbehaving_server(behaviour, exc, pattern, fd_count):
    stop = threading.Event()

    def act(conn):
        recv_exact(conn, 16)
        if behaviour == "close":
            return
        if behaviour == "silent":
            stop.wait(10)
        elif behaviour == "garbage":
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        elif behaviour == "welcome_out_of_sequence":
            conn.sendall(header(WELCOME, 3, 4) + string(b""))
        elif behaviour == "huge_welcome":
            conn.sendall(header(WELCOME, 0, 1 << 31))
        stop.wait(10)

    before = fd_count()
    port, th = _fake_server(act)
    t0 = time.monotonic()
    try:
        with pytest.raises(exc, match=pattern):
            engine.Connection("127.0.0.1", port, "t", timeout_s=0.5 if behaviour == "silent" else FAULT_DEADLINE_S)
        assert time.monotonic() - t0 < FAULT_DEADLINE_S
    finally:
        stop.set()
        th.join(5)
    assert fd_count() <= before


# --------------------------------------------------------------------------- killed peers
_CLIENT_SCRIPT = """
import sys
from gdrlab import engine
c = engine.Connection("127.0.0.1", int(sys.argv[1]), sys.argv[2], timeout_s=5)
print("connected", flush=True)
while True:
    c.run("host", 65536 + 3, mode="bw", iters=50, warmup=0, window=8)
"""


def test_server_killed_at_random_points_client_fails_fast(serve_factory):
    """SIGKILL the serve process at a random moment of a streaming test: the client gets
    PeerClosed or PeerTimeout within the deadline, never a hang."""
    rng = random.Random(1234)
    fds_before = os.listdir("/proc/self/fd")
    for _ in range(6):
        sp = serve_factory(timeout_s=2.0)
        conn = engine.Connection("127.0.0.1", sp.port, sp.token, timeout_s=2.0)
        box: dict = {}

        def work():
            try:
                while True:
                    conn.run("host", 65536 + 3, mode="bw", iters=100, warmup=0, window=8)
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                box["exc"] = exc
                box["t"] = time.monotonic()

        th = threading.Thread(target=work, daemon=True)
        th.start()
        time.sleep(rng.uniform(0.0, 0.4))
        t_kill = time.monotonic()
        sp.proc.send_signal(signal.SIGKILL)
        sp.proc.wait()
        th.join(FAULT_DEADLINE_S + 1)
        assert not th.is_alive(), "client still blocked after the server was killed"
        assert isinstance(box.get("exc"), (PeerClosed, PeerTimeout)), repr(box.get("exc"))
        assert box["t"] - t_kill < FAULT_DEADLINE_S
        # The dead connection fails fast and cleanly afterwards too.
        with pytest.raises(PeerClosed):
            conn.run("host", 8, iters=1)
        conn.close()
        sp.stop()
    assert len(os.listdir("/proc/self/fd")) <= len(fds_before), "client side kept sockets of dead peers"


def test_client_killed_at_random_points_server_survives(serve_process):
    """SIGKILL a client process in the middle of its tests: the server drops it, logs why, and
    serves the next client; its fd count returns to where it was."""
    t = Target("process", serve_process.port, serve_process.token, serve_process.pid)
    t.good_client()
    baseline = t.wait_fds_at_most(10**6)
    rng = random.Random(99)
    for _ in range(5):
        p = subprocess.Popen([sys.executable, "-c", _CLIENT_SCRIPT, str(t.port), t.token],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        try:
            assert p.stdout.readline().strip() == b"connected"
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
        t.good_client()
        assert t.wait_fds_at_most(baseline) <= baseline
    assert serve_process.alive()


def test_abandoned_connection_object_releases_its_socket(serve_process, fd_count):
    before = fd_count()
    for _ in range(20):
        c = engine.Connection("127.0.0.1", serve_process.port, serve_process.token, timeout_s=FAULT_DEADLINE_S)
        c.run("host", 100, iters=1, warmup=0)
        del c  # no close(): the destructor must say BYE and close the socket
    assert fd_count() <= before


# --------------------------------------------------------------------------- serve misuse (CLI)
def test_serve_twice_on_one_port_is_a_clear_error(serve_process, run_cli):
    r = run_cli("serve", "--listen", f"127.0.0.1:{serve_process.port}", timeout=30)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "port already in use" in lines[0] and str(serve_process.port) in lines[0]
    assert "Traceback" not in r.stderr
    t = Target("process", serve_process.port, serve_process.token, serve_process.pid)
    t.good_client()  # the first server is untouched


def test_serve_twice_json_error_document(serve_process, run_cli):
    import json

    r = run_cli("serve", "--listen", f"127.0.0.1:{serve_process.port}", "--json", timeout=30)
    assert r.returncode != 0
    doc = json.loads(r.stdout)
    assert "port already in use" in doc["error"]["message"]


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "[::]:0"])
def test_serve_on_non_loopback_without_token_is_refused(run_cli, listen):
    r = run_cli("serve", "--listen", listen, env={"GDRLAB_TOKEN": ""}, timeout=30)
    if "Address family not supported" in r.stderr or "cannot resolve" in r.stderr:
        pytest.skip(f"{listen}: not available on this machine ({r.stderr.strip()})")
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "requires a token" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_native_server_non_loopback_without_token_raises_auth_error():
    with pytest.raises(AuthError, match="requires a token"):
        engine.native().Server("0.0.0.0", 0, "", 1000)


def test_serve_stops_cleanly_on_sigint(serve_process):
    """Ctrl-C on `gdrlab serve`: exit 130 within a second or so, one line, no traceback."""
    from conftest import TIME_SCALE

    t0 = time.monotonic()
    serve_process.proc.send_signal(signal.SIGINT)
    rc = serve_process.proc.wait(timeout=20 * TIME_SCALE)
    err = serve_process.stderr_text()
    assert rc == 130 and time.monotonic() - t0 < 3 * TIME_SCALE
    assert "Traceback" not in err and "interrupted" in err
