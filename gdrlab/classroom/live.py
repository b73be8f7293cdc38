"""The dashboard's live updates: server-sent events (``text/event-stream``), bounded.

:class:`LiveHub` counts the open streams (at most ``max_clients``) and wakes them when something
changes; :func:`event_stream` is one stream: a ``state`` event at once and after every change,
a comment line as heartbeat while nothing changes (so a dead client is noticed, and proxies keep
the connection), and a ``bye`` event, then the end, when the hub closes (the server shutting
down), so uvicorn does not wait on open streams.
"""
from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

__all__ = ["COALESCE_S", "LiveHub", "event_stream"]

#: After a change, how long a stream waits for more before it sends (a room submitting at once).
COALESCE_S = 0.1


class LiveHub:
    """Who is streaming the dashboard live, and the wake-up when something changes. Thread-safe:
    :meth:`notify` and :meth:`close` may be called from any thread (a signal handler included)."""

    def __init__(self, max_clients: int) -> None:
        self.max_clients = max_clients
        self.closed = False
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._lock = threading.Lock()

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._waiters)

    def enter(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> bool:
        with self._lock:
            if self.closed or len(self._waiters) >= self.max_clients:
                return False
            self._waiters.add((loop, event))
            return True

    def leave(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        with self._lock:
            self._waiters.discard((loop, event))

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop has closed
                pass

    def close(self) -> None:
        """Ends every stream (each sees ``closed`` on waking) and refuses new ones."""
        self.closed = True
        self.notify()


async def event_stream(hub: LiveHub, loop: asyncio.AbstractEventLoop, wake: asyncio.Event,
                       state: Callable[[int], Awaitable[dict[str, Any]]], since: int,
                       heartbeat_s: float) -> AsyncIterator[str]:
    """One client's stream (``hub.enter(loop, wake)`` already granted): the state after
    ``since``, then after every change; the event id is the last submission id, so a browser that
    reconnects resumes with ``Last-Event-ID``."""
    cursor = since
    try:
        yield "retry: 2000\n\n"
        while not hub.closed:
            wake.clear()
            doc = await state(cursor)
            cursor = doc["max_id"]
            yield f"id: {cursor}\nevent: state\ndata: {json.dumps(doc, separators=(',', ':'))}\n\n"
            while not hub.closed:
                try:
                    await asyncio.wait_for(wake.wait(), heartbeat_s)
                    await asyncio.sleep(COALESCE_S)  # a burst of submissions: one event for all of it
                    break
                except asyncio.TimeoutError:
                    yield ": heartbeat\n\n"
        yield "event: bye\ndata: {}\n\n"
    finally:
        hub.leave(loop, wake)
