"""The far side of a local benchmark: a ``gdrlab serve`` process or a server thread of this process.

Both listen on 127.0.0.1 with a fresh random token, serve one client and stop; both work for
every wire (the tcp session is also the verbs wire's out-of-band channel).
"""
from __future__ import annotations

import json
import os
import secrets
import select
import subprocess
import sys
import threading
import time
from typing import Any, Union

from ..errors import InvalidArgument, PeerTimeout, Unavailable
from .buffers import native

__all__ = ["MAX_TIMEOUT_S", "check_timeout", "parse_peer", "LocalPeer", "ThreadPeer", "Peer", "LOCAL_PEERS",
           "start_local_peer"]

# The engine takes timeouts as int milliseconds: larger values would not convert.
MAX_TIMEOUT_S = 86400.0
#: What ``bench(local_peer=...)`` accepts.
LOCAL_PEERS = ("auto", "process", "thread")


def check_timeout(timeout_s: float) -> None:
    """InvalidArgument unless ``0 < timeout_s <= MAX_TIMEOUT_S`` (NaN is refused too)."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise InvalidArgument(f"timeout must be between 0 and {MAX_TIMEOUT_S:.0f} seconds, got {timeout_s!r}")


def parse_peer(peer: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (or ``"[v6]:PORT"``) as ``(host, port)``; InvalidArgument otherwise."""
    host, sep, port = str(peer).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgument(f"peer must be HOST:PORT, got {peer!r}")
    return host.strip("[]"), int(port)


class LocalPeer:
    """A ``gdrlab serve --once`` process on 127.0.0.1 with a random token, stopped on exit."""

    def __init__(self, device: int = 0, timeout_s: float = 10.0, start_timeout_s: float = 30.0) -> None:
        self.token = secrets.token_hex(16)
        env = dict(os.environ, GDRLAB_TOKEN=self.token, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "gdrlab", "serve", "--listen", "127.0.0.1:0", "--once", "--announce",
               "--device", str(device), "--timeout", str(timeout_s)]
        # Run from the folder that holds this gdrlab package, so the peer imports the same build
        # even when the caller's working directory holds another (e.g. an unbuilt source tree).
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     stdin=subprocess.DEVNULL, cwd=pkg_root)
        try:
            line = self._read_announce(start_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.port = int(json.loads(line)["port"])
        self.address = f"127.0.0.1:{self.port}"

    def _read_announce(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerTimeout(f"local peer did not start within {timeout_s:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    err = self.proc.stderr.read().decode(errors="replace").strip()
                    raise Unavailable(f"local peer exited before it was ready: {err or 'no message'}")
                buf += chunk
        return buf.split(b"\n", 1)[0].decode()

    def stop(self, wait_s: float = 5.0) -> None:
        """Wait for the process to finish (it serves one client), killing it after ``wait_s``."""
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()

    def __enter__(self) -> "LocalPeer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class ThreadPeer:
    """A native server on 127.0.0.1 in a thread of this process (GIL released while it serves).

    With one GPU, two processes that both copy to it share it by time-slicing between their
    CUDA contexts; a peer in the same process shares the caller's context instead, which is what
    two separate hosts (one GPU each) look like to each GPU."""

    def __init__(self, device: int = 0, timeout_s: float = 10.0) -> None:
        self.token = secrets.token_hex(16)
        # The server's GPU tests use `device`, as the measuring side's do (it serves on device 0 otherwise).
        self._server = native().Server("127.0.0.1", 0, self.token, int(timeout_s * 1000), device=device)
        self.port: int = self._server.port
        self.address = f"127.0.0.1:{self.port}"
        self.error = ""
        self._thread = threading.Thread(target=self._serve, args=(int(timeout_s * 1000),), daemon=True,
                                        name="gdrlab-thread-peer")
        self._thread.start()

    def _serve(self, wait_ms: int) -> None:
        came, self.error = self._server.serve_one(wait_ms)
        if not came:
            self.error = "no client connected"

    def stop(self, wait_s: float = 15.0) -> None:
        """Wait up to ``wait_s`` for the serving thread to finish."""
        self._thread.join(wait_s)

    def __enter__(self) -> "ThreadPeer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


Peer = Union[LocalPeer, ThreadPeer]


def start_local_peer(local_peer: str, gpu_path: bool, device: int, timeout_s: float) -> tuple[Peer, str]:
    """Start the local peer ``bench(local_peer=...)`` asks for: ``"auto"`` takes a thread for GPU
    paths and a process otherwise. Returns ``(peer, "process" | "thread")``; the caller stops it."""
    if local_peer not in LOCAL_PEERS:
        raise InvalidArgument(f"local_peer must be 'auto', 'process' or 'thread', got {local_peer!r}")
    if local_peer == "auto":
        local_peer = "thread" if gpu_path else "process"
    if local_peer == "process":
        return LocalPeer(device=device, timeout_s=timeout_s), local_peer
    return ThreadPeer(device=device, timeout_s=timeout_s), local_peer
