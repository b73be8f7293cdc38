"""The class view's HTTP plumbing: one JSON error line per refusal, the security headers every
response carries, bodies read under a cap, bearer tokens, the learner key's hash, the dashboard's
cookie and a token-bucket rate limiter. :mod:`gdrlab.classroom.app` builds the endpoints on these."""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import schema

__all__ = ["CSP", "RateLimiter", "Refused", "bearer", "client_ip", "error_response", "guarded", "key_hash",
           "parse_json", "read_body", "secured", "session_cookie"]

# 'unsafe-eval': the plotly.min.js of the plotly package builds functions at run time (its WebGL
# parts, regl); learner data is never evaluated (the page sets only textContent, and plotly
# gets names with <, > and & escaped). No inline script, no inline event handler, no other origin.
CSP = ("default-src 'none'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; connect-src 'self'; font-src 'self' data:; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")


def key_hash(key: str) -> str:
    """What the database keeps of a learner's key (the key itself is only with the learner)."""
    return hashlib.sha256(("gdrlab-class-learner:" + key).encode()).hexdigest()


def session_cookie(instructor_token: str) -> str:
    return hmac.new(instructor_token.encode(), b"gdrlab-class-dashboard", hashlib.sha256).hexdigest()


class RateLimiter:
    """A token bucket per key: ``burst`` at once, then ``per_minute`` a minute."""

    def __init__(self, per_minute: float, burst: int) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._buckets: dict[Any, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: Any) -> float:
        """0 when allowed (one token taken), else the seconds until the next token."""
        now = time.monotonic()
        with self._lock:
            tokens, then = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - then) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate if self.rate > 0 else 3600.0


class Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return None


async def read_body(request: Request, cap: int) -> bytes:
    """The body, refused (413) as soon as it is known to exceed ``cap``: from Content-Length
    before a byte of it is read, else while it streams."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isascii() or not length.isdigit():
            raise Refused(400, "bad Content-Length header")
        if int(length) > cap:
            raise Refused(413, f"payload too large: {int(length)} bytes, the limit is {cap} bytes")
    chunks, got = [], 0
    async for chunk in request.stream():
        got += len(chunk)
        if got > cap:
            raise Refused(413, f"payload too large: more than {cap} bytes, the limit is {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(400, "malformed JSON: the body is not UTF-8 text") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise Refused(400, f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:
        raise Refused(400, f"malformed JSON: {exc}") from None
    except RecursionError:
        raise Refused(400, "malformed JSON: nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "?"


def secured(response: Response) -> Response:
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Content-Security-Policy"] = CSP
    return response


def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with every refusal turned into one JSON error line, and the security headers."""
    async def wrapped(request: Request) -> Response:
        try:
            response = await handler(request)
        except Refused as r:
            response = error_response(r.status, r.message, r.headers)
        except schema.SchemaError as exc:
            response = error_response(422, f"invalid submission: {exc}")
        return secured(response)
    return wrapped
