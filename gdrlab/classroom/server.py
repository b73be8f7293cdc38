"""Running the class view's app under uvicorn: in the foreground (``gdrlab class serve``) or on
a background thread (tests, notebooks)."""
from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

from .app import ClassConfig, create_app
from .store import Store

__all__ = ["BackgroundServer", "bind", "request_exit", "uvicorn_server"]


def bind(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one). Bound before uvicorn starts, so
    the port is known at once and connections made meanwhile wait in the backlog."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def uvicorn_server(store: Store, config: ClassConfig, log_level: str = "warning") -> Any:
    """A uvicorn server of the class view whose exit (a signal, or :func:`request_exit`) first
    ends the live dashboards' event streams, so it does not wait on them."""
    import uvicorn

    app = create_app(store, config)
    hub = app.state.class_view.hub

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            hub.close()
            super().handle_exit(sig, frame)

    server = _Server(uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="off",
                                    timeout_graceful_shutdown=5, backlog=1024, server_header=False))
    server.class_hub = hub  # type: ignore[attr-defined]
    return server


def request_exit(server: Any) -> None:
    """Stops ``server`` (from :func:`uvicorn_server`) from any thread: the streams end, then uvicorn."""
    hub = getattr(server, "class_hub", None)
    if hub is not None:
        hub.close()
    server.should_exit = True


class BackgroundServer:
    """The app on a thread of this process, on 127.0.0.1 and a free port (or the ones given)."""

    def __init__(self, store: Store, config: ClassConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = store
        self.sock = bind(host, port)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}/"
        self.server = uvicorn_server(store, config)
        self.failed: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="gdrlab-class-server", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self.sock]))
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.failed.append(exc)

    def start(self) -> BackgroundServer:
        self.thread.start()
        return self

    def stop(self, within_s: float = 10.0) -> None:
        request_exit(self.server)
        self.thread.join(within_s)
        self.sock.close()
        if self.failed:
            raise self.failed[0]

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
