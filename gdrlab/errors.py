"""Exceptions raised by gdrlab.

Every failure of the engine arrives as one of these classes, carrying the library and call that
failed, the library's own code and its text. They also derive from the matching built-in
exception, so ``except TimeoutError`` or ``except ValueError`` work as expected.
"""
from __future__ import annotations

__all__ = [
    "GdrlabError", "Unavailable", "CudaError", "VerbsError", "ProtocolError", "PeerTimeout",
    "PeerClosed", "AuthError", "InvalidArgument", "VerifyError", "SystemCallError",
]


class GdrlabError(Exception):
    """Base class. ``library``, ``call``, ``code`` and ``text`` describe the failing call."""

    def __init__(self, message: str = "", *, library: str = "", call: str = "", code: int = 0,
                 text: str = "") -> None:
        super().__init__(message)
        self.library = library
        self.call = call
        self.code = code
        self.text = text or message


class Unavailable(GdrlabError, NotImplementedError):
    """The hardware, driver or library this needs is not on this machine; the message says which."""


class CudaError(GdrlabError, RuntimeError):
    """A CUDA driver call failed; ``code`` is the CUresult."""


class VerbsError(GdrlabError, RuntimeError):
    """A verbs call failed; ``errno`` is the errno it reported."""

    @property
    def errno(self) -> int:
        return int(self.code)


class ProtocolError(GdrlabError):
    """The peer broke the wire protocol (bad magic, version, sequence, length or message)."""


class PeerTimeout(ProtocolError, TimeoutError):
    """The peer did not answer within the timeout."""


class PeerClosed(ProtocolError, ConnectionError):
    """The connection to the peer was closed or lost (for example, the peer died)."""


class AuthError(ProtocolError, PermissionError):
    """The handshake was refused: wrong or missing token, or a wire version mismatch."""


class InvalidArgument(GdrlabError, ValueError):
    """A bad size, memory kind, path or option."""


class VerifyError(GdrlabError):
    """Received data differs from the pattern that was sent; the message gives the offset."""


class SystemCallError(GdrlabError, OSError):
    """An operating-system call failed (for example, the port is already in use)."""


def _from_native(kind: str, message: str, library: str, call: str, code: int, text: str) -> GdrlabError:
    """Called by the engine's exception translator; ``kind`` names one of the classes above
    (the engine's table of them is ``gdrlab._native.ERROR_CLASS_NAMES``)."""
    cls = globals().get(kind, GdrlabError)
    if not (isinstance(cls, type) and issubclass(cls, GdrlabError)):
        cls = GdrlabError
    exc = cls(message, library=library, call=call, code=code, text=text)
    if isinstance(exc, OSError) and code:
        exc.errno = code
    return exc
