"""The engine's wire vocabulary and peer errors, driven with frames built here with ``struct`` from
the layout in native/src/wire/frame.h: every enum read from the wire is checked against its
sentinel, a peer's ERROR frame maps to the gdrlab.errors class of its kind, and text a peer sends
can never raise UnicodeDecodeError (an ERROR frame with invalid UTF-8 before HELLO leaves the
server serving)."""
from __future__ import annotations

import errno
import socket
import struct
import threading

import pytest

from conftest import TIME_SCALE
from gdrlab import _native, errors

MAGIC, VERSION = 0x4C524447, 1
HELLO, WELCOME, REJECT, SETUP, READY, ERROR = 1, 2, 3, 4, 5, 6
TOKEN = "wire-test-token"
TIMEOUT_MS = int(3000 * TIME_SCALE)


def frame(ftype: int, seq: int, body: bytes = b"") -> bytes:
    return struct.pack("<IHHII", MAGIC, VERSION, ftype, seq, len(body)) + body


def string(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def spec_body(path: int, size: int = 8) -> bytes:
    # path, mode, size, iters, warmup, window, chunk, depth, device, seed
    return struct.pack("<BBQIIIQIIQ", path, 0, size, 1, 0, 1, 0, 0, 0, 1)


def read_frame(s: socket.socket) -> tuple[int, bytes]:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            assert chunk, "peer closed"
            buf += chunk
        return buf
    _, _, ftype, _, length = struct.unpack("<IHHII", exact(16))
    return ftype, exact(length)


class ServingThread:
    """A native Server answering `clients` connections in a thread; records what each returned."""

    def __init__(self, clients: int):
        self.server = _native.Server("127.0.0.1", 0, TOKEN, TIMEOUT_MS)
        self.results: list[tuple[bool, str]] = []
        self.raised: list[BaseException] = []
        self.thread = threading.Thread(target=self._serve, args=(clients,))
        self.thread.start()

    def _serve(self, clients: int) -> None:
        try:
            for _ in range(clients):
                self.results.append(self.server.serve_one(TIMEOUT_MS * 2))
        except BaseException as e:  # noqa: BLE001 - the test asserts that nothing escapes
            self.raised.append(e)

    def join(self) -> None:
        self.thread.join(30 * TIME_SCALE)
        assert not self.thread.is_alive(), "the serving thread did not finish"


def test_invalid_utf8_error_frame_before_hello_leaves_the_server_serving():
    peer = ServingThread(clients=2)
    with socket.create_connection(("127.0.0.1", peer.server.port), timeout=10) as s:
        s.sendall(frame(ERROR, 0, bytes([3]) + string(b"bad \xff\xfe\xc3( text")))
        # The server answers with its own ERROR (a protocol error: HELLO was expected) and closes.
        ftype, _ = read_frame(s)
        assert ftype == ERROR
    client = _native.Client("127.0.0.1", peer.server.port, TOKEN, TIMEOUT_MS)
    _, _, verified = client.run("host", 0, 64, 2, 0, 1, 0, 0, 0, 7)
    client.close()
    peer.join()
    assert not peer.raised, f"serve_one raised: {peer.raised!r}"
    (came, err), (came2, err2) = peer.results
    assert came and came2 and verified and err2 == ""
    # The peer's bytes reach the error text with replacement characters, as a str.
    assert "bad \ufffd\ufffd\ufffd( text" in err and err.startswith("ProtocolError: ")


@pytest.fixture
def answering_server():
    """A listener that answers the first HELLO with the bytes a test gives it."""
    lst = socket.create_server(("127.0.0.1", 0))
    answers: list[bytes] = []

    def serve() -> None:
        conn, _ = lst.accept()
        with conn:
            read_frame(conn)
            conn.sendall(answers[0])
            conn.recv(1)  # until the client goes

    def start(answer: bytes) -> int:
        answers.append(answer)
        threading.Thread(target=serve, daemon=True).start()
        return lst.getsockname()[1]

    yield start
    lst.close()


@pytest.mark.parametrize("kind,cls", [(200, errors.ProtocolError), (len(_native.ERROR_CLASS_NAMES), errors.ProtocolError),
                                      (0, errors.Unavailable), (6, errors.AuthError)])
def test_peer_error_kind_maps_to_its_class_and_unknown_kinds_to_protocol(answering_server, kind, cls):
    port = answering_server(frame(ERROR, 0, bytes([kind]) + string(b"from the peer \xff")))
    with pytest.raises(errors.GdrlabError) as info:
        _native.Client("127.0.0.1", port, TOKEN, TIMEOUT_MS)
    assert type(info.value) is cls
    assert info.value.text == "from the peer \ufffd" and info.value.call == "handshake"


def test_reject_and_welcome_text_from_a_peer_is_decoded_with_replacement(answering_server):
    port = answering_server(frame(REJECT, 0, string(b"go away \xc0\xaf")))
    with pytest.raises(errors.AuthError, match="go away \ufffd\ufffd"):
        _native.Client("127.0.0.1", port, TOKEN, TIMEOUT_MS)


def test_every_error_kind_names_a_gdrlab_errors_class():
    names = _native.ERROR_CLASS_NAMES
    assert len(set(names)) == len(names)
    for n in names:
        cls = getattr(errors, n)
        assert issubclass(cls, errors.GdrlabError) and n in errors.__all__


def test_os_failure_is_a_system_call_error_with_errno():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        with pytest.raises(errors.SystemCallError) as info:
            _native.Server("127.0.0.1", taken.getsockname()[1], TOKEN, TIMEOUT_MS)
    assert info.value.errno == errno.EADDRINUSE and isinstance(info.value, OSError)


def test_vocabulary_tables_agree_with_the_wire():
    paths, wire_paths = _native.PATH_NAMES, _native.WIRE_PATHS
    assert set(_native.WIRE_NAMES) == set(wire_paths) == {"tcp", "verbs"}
    assert set(_native.MODE_NAMES) == {"lat", "bw", "verify"}
    # DESIGN.md: gdr is the verbs wire's own path; both wires carry the four copy paths.
    assert set(wire_paths["verbs"]) == set(paths) and set(paths) - set(wire_paths["tcp"]) == {"gdr"}
    for p in wire_paths["tcp"]:
        # A path's code on the wire is its index in PATH_NAMES (first byte of a SETUP body).
        assert _native.encode_spec(p, 0, 8, 1, 0, 1, 0, 0, 0, 1)[0] == paths.index(p)
    with pytest.raises(errors.InvalidArgument, match="valid: " + ", ".join(wire_paths["tcp"]) + "$"):
        _native.encode_spec("gdr", 0, 8, 1, 0, 1, 0, 0, 0, 1)
    assert (_native.DEFAULT_CHUNK_BYTES, _native.DEFAULT_PIPELINE_DEPTH) == (256 * 1024, 4)


@pytest.mark.parametrize("ftype", [0, 13, 0xFFFF])
def test_frame_types_outside_the_enum_are_refused(ftype):
    with pytest.raises(errors.ProtocolError, match=f"unknown frame type {ftype}"):
        _native.validate_header(struct.pack("<IHHII", MAGIC, VERSION, ftype, 0, 0), 0)
    _native.validate_header(struct.pack("<IHHII", MAGIC, VERSION, 12, 0, 0), 0)  # UCX_CONNECT: the last type


@pytest.mark.parametrize("code", ["gdr", "sentinel"])
def test_setup_with_a_path_the_tcp_wire_does_not_carry_ends_the_session(code):
    path = _native.PATH_NAMES.index("gdr") if code == "gdr" else len(_native.PATH_NAMES)
    peer = ServingThread(clients=1)
    with socket.create_connection(("127.0.0.1", peer.server.port), timeout=10) as s:
        s.sendall(frame(HELLO, 0, struct.pack("<I", VERSION) + string(TOKEN.encode())))
        assert read_frame(s)[0] == WELCOME
        s.sendall(frame(SETUP, 1, spec_body(path)))
        ftype, body = read_frame(s)
    peer.join()
    assert ftype == ERROR and body[0] == _native.ERROR_CLASS_NAMES.index("ProtocolError")
    assert f"unknown path code {path} for the tcp wire" in body[5:].decode()
    assert peer.results[0][0] and "unknown path code" in peer.results[0][1]


def test_both_ways_server_stops_sending_when_the_client_stops():
    # A client that asks for a both-ways test and then sends nothing, only drains: the server's
    # receive fails on the end of input, and its sending thread must stop with it instead of
    # streaming every window (here a million 1 MiB windows, a terabyte) to a peer that only reads.
    host = _native.PATH_NAMES.index("host")
    both_ways_bw = 0x80 | 1
    body = struct.pack("<BBQIIIQIIQ", host, both_ways_bw, 1 << 20, 1_000_000, 0, 1, 0, 0, 0, 1)
    peer = ServingThread(clients=1)
    with socket.create_connection(("127.0.0.1", peer.server.port), timeout=10) as s:
        s.sendall(frame(HELLO, 0, struct.pack("<I", VERSION) + string(TOKEN.encode())))
        assert read_frame(s)[0] == WELCOME
        s.sendall(frame(SETUP, 1, body))
        assert read_frame(s)[0] == READY
        s.shutdown(socket.SHUT_WR)
        drained = 0
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            drained += len(chunk)
            assert drained < 64 << 30, "the server kept sending after its receive side failed"
    peer.join()
    assert peer.results[0][0] and peer.results[0][1], "the session should end with an error"
