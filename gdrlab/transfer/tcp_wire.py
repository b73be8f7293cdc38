"""The tcp wire: a session with a ``gdrlab serve`` peer over real sockets.

The same session is the out-of-band channel of the verbs wire (:mod:`.verbs_wire` derives from
:class:`Connection`), so argument checks and the call into the engine are written once here.
"""
from __future__ import annotations

import os
import secrets
from typing import Any

import numpy as np

from ..errors import InvalidArgument, PeerClosed
from ..vocab import DEFAULT_CHUNK_BYTES, DEFAULT_PIPELINE_DEPTH, MODES, paths_over
from .buffers import Buffer, native
from .peers import check_timeout, parse_peer

__all__ = ["Connection", "connect", "U32_MAX"]

#: What the server's idle-close message says (wire/server.cc): the session may be opened again.
IDLE_CLOSE = "(--idle-timeout); connect again"
#: Counts cross into the engine as unsigned 32-bit integers.
U32_MAX = 2**32 - 1
#: The engine's both-ways bit in a test's mode byte (wire/session.h kBothWaysFlag).
BOTH_WAYS_FLAG = 0x80


def check_test(wire: str, paths: tuple[str, ...], path: str, size: int, mode: str, counts: dict[str, int],
               offset: int) -> None:
    """InvalidArgument naming the argument unless one test's arguments are in range for ``wire``."""
    if mode not in MODES:
        raise InvalidArgument(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    if path not in paths:
        raise InvalidArgument(f"unknown path {path!r} for the {wire} wire; valid: {', '.join(paths)}")
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size <= 0:
        raise InvalidArgument(f"size must be a positive integer, got {size!r}")
    least = {"iters": 0, "warmup": 0, "device": 0, "window": 1, "depth": 1, "chunk": 1}
    for name, value in counts.items():
        if value < least[name]:
            raise InvalidArgument(f"{name} must be >= {least[name]}, got {value}")
        if name != "chunk" and value > U32_MAX:
            raise InvalidArgument(f"{name} must be at most {U32_MAX}, got {value}")
    if offset < 0:
        raise InvalidArgument(f"offset must be >= 0, got {offset}")


def _check_utf8(what: str, text: str) -> None:
    """Command-line and environment text arrive with undecodable bytes as surrogates: one line
    instead of the engine's argument TypeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")[:200]
        raise InvalidArgument(f"{what} is not valid UTF-8 text ({shown})") from None


class Connection:
    """A session with a ``gdrlab serve`` peer over the tcp wire."""

    wire = "tcp"

    def __init__(self, host: str, port: int, token: str = "", timeout_s: float = 10.0) -> None:
        check_timeout(timeout_s)
        for what, text in (("the peer's host", host), ("the token", token or "")):
            _check_utf8(what, text)
        self._args = (host, int(port), token or "", int(timeout_s * 1000))
        self._c = self._client_class()(*self._args)
        self.peer = f"{host}:{port}"

    @staticmethod
    def _client_class() -> Any:
        return native().Client

    @property
    def server_description(self) -> str:
        """What the peer says about itself (host, GPU) in the handshake."""
        return str(self._c.server_description)

    def measure(self, path: str, size: int, *, mode: str = "lat", iters: int = 100, warmup: int = 10,
                window: int = 1, chunk: int = DEFAULT_CHUNK_BYTES, depth: int = DEFAULT_PIPELINE_DEPTH,
                device: int = 0, seed: int | None = None, buffer: Buffer | None = None,
                offset: int = 0, both_ways: bool = False) -> tuple[Any, float, bool, dict[str, Any]]:
        """One test on any wire: ``(samples_s, bytes_per_sample, verified, info)``; ``info`` is
        what the wire reports about itself ({} for tcp). ``both_ways`` (tcp, ``mode="bw"``): both
        sides stream at once (osu_bibw); bytes_per_sample then counts both directions."""
        check_test(self.wire, paths_over(self.wire), path, size, mode,
                   {"iters": iters, "warmup": warmup, "window": window, "depth": depth, "chunk": chunk,
                    "device": device}, offset)
        if both_ways and (self.wire != "tcp" or mode != "bw"):
            raise InvalidArgument(f"both directions at once is a bandwidth test of the tcp wire (got mode {mode!r} "
                                  f"on the {self.wire} wire)")
        if seed is None:
            seed = secrets.randbits(63)
        nb = buffer._b if buffer is not None else None
        call = (path, MODES.index(mode) | (BOTH_WAYS_FLAG if both_ways else 0), int(size), int(iters), int(warmup), int(window), int(chunk),
                int(depth), int(device), int(seed), nb, int(offset))
        try:
            out = self._c.run(*call)
        except PeerClosed as exc:
            # The server closes a session idle past its --idle-timeout and says so before the next
            # request is read: nothing of this test ran, so connect again once and run it. Any other
            # close (a server gone mid-test) is raised as it is.
            if IDLE_CLOSE not in str(exc):
                raise
            self._c = self._client_class()(*self._args)
            out = self._c.run(*call)
        info = dict(out[3]) if len(out) > 3 else {}
        return out[0], out[1], bool(out[2]), info

    def run(self, path: str, size: int, *, mode: str = "lat", iters: int = 100, warmup: int = 10,
            window: int = 1, chunk: int = DEFAULT_CHUNK_BYTES, depth: int = DEFAULT_PIPELINE_DEPTH,
            device: int = 0, seed: int | None = None, buffer: Buffer | None = None,
            offset: int = 0) -> tuple[Any, float, bool]:
        """One test. Returns ``(samples_s, bytes_per_sample, verified)``; samples are one-way
        latencies (half round trips) for ``mode="lat"`` and window times for ``mode="bw"``."""
        s, nbytes, ok, _ = self.measure(path, size, mode=mode, iters=iters, warmup=warmup, window=window,
                                        chunk=chunk, depth=depth, device=device, seed=seed, buffer=buffer,
                                        offset=offset)
        return s, nbytes, ok

    def transfer(self, buffer: Buffer, path: str, size: int | None = None, offset: int = 0, **kw: Any) -> bool:
        """Send ``buffer[offset:offset+size]`` to the peer and back, verified; True on success."""
        size = buffer.size - offset if size is None else size
        return bool(self.measure(path, size, mode="verify", iters=0, warmup=0, buffer=buffer, offset=offset,
                                 **kw)[2])

    def close(self) -> None:
        """End the session (the peer learns it at once)."""
        self._c.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect(peer: str, token: str | None = None, timeout_s: float = 10.0) -> Connection:
    """Connect to ``gdrlab serve`` at ``HOST:PORT``; the token defaults to $GDRLAB_TOKEN."""
    host, port = parse_peer(peer)
    return Connection(host, port, token if token is not None else os.environ.get("GDRLAB_TOKEN", ""), timeout_s)
