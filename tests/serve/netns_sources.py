"""Many real source addresses on one machine, for tests of what the server counts per source and
across all sources (serve probe E4 and the session-log policy). Run inside a private network
namespace (``unshare -rn python netns_sources.py CASE``): the loopback device is brought up and
all of 10.0.0.0/8 routed to it as local, so a client can bind any 10.x.y.z address and the server
sees each as a source of its own (127.0.0.0/8 counts as one source, on purpose). Prints one JSON
document with what it observed; tests/serve/test_serve_sources.py judges it.
"""
from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time

MAGIC, VERSION = 0x4C524447, 1
HELLO, WELCOME, REJECT, ERROR, BYE = 1, 2, 3, 6, 10
TOKEN = "sources-token-0123456789"
SERVER = "10.0.0.1"


def setup_namespace() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "route", "add", "local", "10.0.0.0/8", "dev", "lo", "table", "local"], check=True)


def start_server(**limits: object):
    from gdrlab.engine import native
    server = native().Server(SERVER, 0, TOKEN, int(limits.pop("timeout_ms", 5000)), **limits)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            server.serve_for(100)

    t = threading.Thread(target=loop, daemon=True)
    t.start()

    def close() -> list[str]:
        stop.set()
        t.join(30)
        server.stop(2000)
        return list(server.take_log(final=True))
    return server, close


def frame(ftype: int, body: bytes = b"", seq: int = 0) -> bytes:
    return struct.pack("<IHHII", MAGIC, VERSION, ftype, seq, len(body)) + body


def hello(token: bytes) -> bytes:
    return frame(HELLO, struct.pack("<I", 1) + struct.pack("<I", len(token)) + token)


def answer(s: socket.socket) -> tuple[int, bytes]:
    head = s.recv(16, socket.MSG_WAITALL)
    if len(head) < 16:
        return -1, head
    ftype, length = struct.unpack("<IHHII", head)[2], struct.unpack("<IHHII", head)[4]
    return ftype, s.recv(length, socket.MSG_WAITALL) if length else b""


def ask(port: int, source: str, data: bytes, timeout: float = 30) -> tuple[int, bytes]:
    with socket.socket() as s:
        s.bind((source, 0))
        s.settimeout(timeout)
        s.connect((SERVER, port))
        s.sendall(data)
        return answer(s)


def source(i: int, net: int = 1) -> str:
    return f"10.{net}.{i // 250 % 250}.{1 + i % 250}"


# --------------------------------------------------------------------------- cases
def rotating(seconds: float = 3.0, guessers: int = 64) -> dict:
    """``guessers`` threads, each guess from an address never used before: every source's first
    failure has no delay of its own, so only the budget of all sources together slows them."""
    server, close = start_server()
    port = server.port
    times: list[float] = []
    kinds: dict[str, int] = {}
    lock = threading.Lock()
    t0 = time.monotonic()
    stop_at = t0 + seconds

    def loop(i: int) -> None:
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            try:
                ftype, _ = ask(port, source(i * 1000 + n, net=1 + i // 100), hello(b"guess-%d-%d" % (i, n)))
            except OSError as exc:
                ftype = type(exc).__name__
            with lock:
                kinds[str(ftype)] = kinds.get(str(ftype), 0) + 1
                if ftype == REJECT:
                    times.append(time.monotonic() - t0)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(guessers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    took = time.monotonic() - t0
    close()
    return {"rejects": len(times), "seconds": took, "answers": kinds, "sources": sum(kinds.values())}


def forgetting(flood: int = 4600) -> dict:
    """Source A guesses until its delay is long; source B has refusals left out of the log. Then
    ``flood`` new sources each send a bad frame (remembered as sources, no token check), A touching
    the table meanwhile. With a remembered table of 4,096 sources, the least recently used go: B's
    count is said as it goes, A keeps its failures. Then A's next guess is refused and the one
    after is told busy, naming A's failure count."""
    server, close = start_server(timeout_ms=1000)  # a check that would wait past 1 s is told busy
    port = server.port
    a, b = "10.200.0.1", "10.201.0.1"
    for i in range(6):
        ftype, body = ask(port, a, hello(b"wrong-%d" % i))
        assert ftype == REJECT, (ftype, body)
    for _ in range(3):  # the first is logged, two are left out of the log
        ask(port, b, b"GET / HTTP/1.0\r\n\r\n")
    log: list[str] = list(server.take_log())
    for i in range(flood):
        try:
            ask(port, source(i, net=1), b"\x00" * 16)
        except OSError:
            pass
        if i % 200 == 0:
            ask(port, a, b"\x00" * 16)
            log += server.take_log()
    log += server.take_log()
    after = []
    for i in range(2):
        ftype, body = ask(port, a, hello(b"after-%d" % i))
        after.append([ftype, body.decode(errors="replace")])
    log += close()
    return {"after": after, "b_lines": [ln for ln in log if b in ln], "log_lines": len(log),
            "pooled": [ln for ln in log if " more sources (at most " in ln]}


def session_lines(clients: int = 150) -> dict:
    """``clients`` authenticated sessions, each from an address of its own, one at a time: each
    logs 'connected' and 'done' (one of each kind per source, far under the per-source limit)."""
    server, close = start_server()
    port = server.port
    welcomed = 0
    for i in range(clients):
        with socket.socket() as s:
            s.bind((source(i, net=3), 0))
            s.settimeout(30)
            s.connect((SERVER, port))
            s.sendall(hello(TOKEN.encode()))
            ftype, _ = answer(s)
            welcomed += ftype == WELCOME
            s.sendall(frame(BYE, seq=1))
            s.recv(64)
    deadline = time.monotonic() + 60
    while server.session_threads and time.monotonic() < deadline:
        time.sleep(0.01)
    log = close()
    return {"welcomed": welcomed, "log": log}


def refusal_lines(sources: int = 600) -> dict:
    """``sources`` addresses, each sending one bad frame (no token needed): one refusal each."""
    server, close = start_server()
    port = server.port
    log: list[str] = []
    for i in range(sources):
        try:
            ask(port, source(i, net=4), b"\x00" * 16)
        except OSError:
            pass
        if i % 100 == 0:
            log += server.take_log()
    deadline = time.monotonic() + 60
    while (server.handshakes_in_progress or server.closing_connections) and time.monotonic() < deadline:
        time.sleep(0.01)
    log += server.take_log()
    log += close()
    return {"log": log}


CASES = {"rotating": rotating, "forgetting": forgetting, "session_lines": session_lines, "refusal_lines": refusal_lines}

if __name__ == "__main__":
    setup_namespace()
    print(json.dumps(CASES[sys.argv[1]]()))
