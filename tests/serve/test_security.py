"""Security properties of the tcp wire and the serve command: loopback by default, a token
required elsewhere and compared without shortcuts, nothing from the wire deserialized as code,
frame sizes bounded, the token never echoed."""
from __future__ import annotations

import pathlib
import re
import socket
import struct

import pytest

from gdrlab import engine
from gdrlab.errors import AuthError, ProtocolError

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gdrlab"
NATIVE = ROOT / "native"
MAGIC = 0x4C524447
HELLO, REJECT, ERROR = 1, 3, 6

pytestmark = pytest.mark.timeout(120)


def _header(ftype: int, seq: int, length: int) -> bytes:
    return struct.pack("<IHHII", MAGIC, 1, ftype, seq, length)


def _read_frame(s: socket.socket) -> tuple[int, bytes]:
    def exact(n):
        buf = b""
        while len(buf) < n:
            c = s.recv(n - len(buf))
            if not c:
                raise ConnectionError("closed")
            buf += c
        return buf

    _, _, ftype, _, length = struct.unpack("<IHHII", exact(16))
    return ftype, exact(length) if length else b""


# --------------------------------------------------------------------------- where serve listens
def test_serve_listens_on_loopback_by_default():
    from gdrlab.cli import build_parser

    args = build_parser().parse_args(["serve"])
    assert args.listen.rpartition(":")[0] == "127.0.0.1"


def test_serve_socket_is_bound_to_loopback(serve_process):
    """The kernel's own view (/proc/PID/net/tcp): the listening socket is on 127.0.0.1 only."""
    port_hex = f"{serve_process.port:04X}"
    listening = []
    for table in ("tcp", "tcp6"):
        try:
            lines = pathlib.Path(f"/proc/{serve_process.pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, port = local.split(":")
            if port == port_hex and state == "0A":  # 0A: LISTEN
                listening.append(addr)
    assert listening == ["0100007F"], f"listening addresses (hex): {listening}"


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::"])
def test_native_server_refuses_wildcard_without_token(host):
    try:
        with pytest.raises(AuthError, match="requires a token"):
            engine.native().Server(host, 0, "", 1000)
    except OSError as exc:  # no IPv6 on this machine
        pytest.skip(f"{host!r}: {exc}")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost"])
def test_loopback_without_token_is_allowed(host):
    srv = engine.native().Server(host, 0, "", 1000)
    assert srv.port > 0


# --------------------------------------------------------------------------- the token
@pytest.mark.parametrize("variant", ["last_byte", "first_byte", "prefix", "extended", "empty", "case"])
def test_near_miss_tokens_are_refused(native_server, variant):
    tok = native_server.token
    wrong = {
        "last_byte": tok[:-1] + ("0" if tok[-1] != "0" else "1"),
        "first_byte": ("0" if tok[0] != "0" else "1") + tok[1:],
        "prefix": tok[:-1],
        "extended": tok + "0",
        "empty": "",
        "case": tok.upper() if tok.upper() != tok else tok + "X",
    }[variant]
    assert wrong != tok
    with pytest.raises(AuthError, match="wrong or missing token"):
        engine.Connection("127.0.0.1", native_server.port, wrong, timeout_s=5)
    with engine.Connection("127.0.0.1", native_server.port, tok, timeout_s=5) as c:
        assert c.run("host", 8, iters=1)[2]


def test_handshake_compares_tokens_with_tokens_equal():
    """The constant-time comparison is what the server uses (a plain == would stop at the first
    differing byte); and tokens_equal itself looks at every byte of the longer string."""
    src = "".join((NATIVE / "src" / "wire" / f).read_text() for f in ("session.cc", "server.cc"))
    assert re.search(r"tokens_equal\(\s*h\.token\s*,\s*token_\s*\)", src)
    assert not re.search(r"token_\s*[!=]=|[!=]=\s*token_|\.token\s*[!=]=", src)
    body = src[src.index("bool tokens_equal"):]
    body = body[:body.index("\n}\n")]
    assert "std::max(a.size(), b.size())" in body and "return diff == 0" in body
    assert "return false" not in body and "break" not in body


def test_reject_and_logs_never_echo_the_token(serve_factory):
    sp = serve_factory(token="s3cret-token-value")
    with socket.create_connection(("127.0.0.1", sp.port), timeout=5) as s:
        guess = b"s3cret-token-valuf"
        body = struct.pack("<I", 1) + struct.pack("<I", len(guess)) + guess
        s.sendall(_header(HELLO, 0, len(body)) + body)
        ftype, reply = _read_frame(s)
    assert ftype == REJECT
    assert b"s3cret" not in reply
    err = sp.stderr_text()
    assert "s3cret" not in err


def test_local_peer_token_is_not_on_the_command_line():
    """Other users can read /proc/PID/cmdline; the local peer gets its token through the environment."""
    with engine.LocalPeer() as peer:
        cmdline = pathlib.Path(f"/proc/{peer.proc.pid}/cmdline").read_bytes()
        assert peer.token.encode() not in cmdline
        with engine.Connection("127.0.0.1", peer.port, peer.token, timeout_s=5) as c:
            assert c.run("host", 8, iters=1)[2]


def test_over_long_token_in_hello_is_a_protocol_error(native_server):
    with socket.create_connection(("127.0.0.1", native_server.port), timeout=5) as s:
        tok = b"x" * 100_000  # would need a frame over the 64 KiB control maximum
        body = struct.pack("<I", 1) + struct.pack("<I", 300) + tok[:300]
        s.sendall(_header(HELLO, 0, len(body)) + body)
        ftype, reply = _read_frame(s)
    assert ftype == ERROR and b"exceeds 256" in reply


# --------------------------------------------------------------------------- frame bounds
def test_frame_size_limits():
    nat = engine.native()
    assert nat.MAX_DATA_BYTES == 1 << 30  # frame.h: 1 GiB, the largest message the tcp wire carries
    assert nat.MAX_CONTROL_BYTES == 64 * 1024
    assert nat.HEADER_BYTES == 16
    data, control = 7, 4
    nat.validate_header(_header(data, 0, 1 << 30), 0)
    nat.validate_header(_header(control, 0, 64 * 1024), 0)
    with pytest.raises(ProtocolError, match="exceeds the maximum"):
        nat.validate_header(_header(data, 0, (1 << 30) + 1), 0)
    with pytest.raises(ProtocolError, match="exceeds the maximum"):
        nat.validate_header(_header(control, 0, 64 * 1024 + 1), 0)
    with pytest.raises(ProtocolError, match="exceeds the maximum"):
        nat.validate_header(_header(data, 0, 0xFFFFFFFF), 0)


# --------------------------------------------------------------------------- no code from the wire
_DANGEROUS = [
    (r"\bimport\s+(pickle|cPickle|marshal|shelve|dill|cloudpickle)\b", "deserializer import"),
    (r"\bfrom\s+(pickle|marshal|shelve|dill|cloudpickle)\b", "deserializer import"),
    (r"\bpickle\.|\bmarshal\.loads|\bshelve\.", "deserializer call"),
    (r"(?<![\w.])(eval|exec)\s*\(", "eval/exec"),
    (r"\bcompile\s*\(\s*[^)]*['\"]exec['\"]", "compile(..., 'exec')"),
    (r"allow_pickle\s*=\s*True", "numpy pickle loading"),
    (r"yaml\.load\s*\((?![^)]*SafeLoader)", "unsafe yaml.load"),
    (r"shell\s*=\s*True", "shell=True"),
    (r"\bos\.system\s*\(", "os.system"),
]


def test_package_never_unpickles_or_evaluates():
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for pattern, what in _DANGEROUS:
                if re.search(pattern, code):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {what}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_engine_never_runs_commands():
    hits = []
    for path in sorted((NATIVE / "src").rglob("*.cc")) + sorted((NATIVE / "bind").glob("*.cc")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//", 1)[0]
            if re.search(r"(?<![\w.])(system|popen|execv\w*|execl\w*)\s*\(", code):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)
