"""The class view (``gdrlab class serve``'s app) as a JupyterHub-managed service.

JupyterHub's proxy forwards ``/services/class/...`` to this process with the prefix kept, and
``gdrlab class serve`` answers at ``/``: this launcher serves the same app (gdrlab.classroom)
behind a small shim that takes the prefix off. The app's pages use relative links only, so they
work below the prefix unchanged. Started by the hub (jupyterhub_config.py) with
JUPYTERHUB_SERVICE_URL (where to listen), JUPYTERHUB_SERVICE_PREFIX and GDRLAB_TOKEN (the
instructor token the dashboard asks for); the learners' join URL is written to
$GDRLAB_CLASS_JOIN_FILE for the instructor to share.

    python class_service.py --db /srv/gdrlab/class.sqlite [--public-url https://hub.example.org]
"""
import argparse
import os
import secrets
import signal
import sys
import urllib.parse
from pathlib import Path

import uvicorn

from gdrlab.classroom.app import ClassConfig, create_app
from gdrlab.classroom.server import bind
from gdrlab.classroom.store import open_store


def strip_prefix(app, prefix: str):
    """An ASGI app that serves ``app`` at ``prefix`` (``/services/class/``), and at ``/`` too."""
    bare = prefix.rstrip("/")

    async def shim(scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            path = scope["path"]
            if path == bare or path.startswith(bare + "/"):  # else as it is: /healthz for a pod's probes
                inner = path[len(bare):] or "/"
                scope = dict(scope, path=inner, raw_path=inner.encode())
        await app(scope, receive, send)

    return shim


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default="class.sqlite", help="SQLite file or PostgreSQL URL (as gdrlab class serve)")
    p.add_argument("--public-url", default=os.environ.get("JUPYTERHUB_PUBLIC_URL", ""),
                   help="the hub's address as learners reach it, for the join URL")
    args = p.parse_args()
    token = os.environ.get("GDRLAB_TOKEN", "")
    if len(token) < 16:
        sys.exit("class_service.py: GDRLAB_TOKEN (the instructor token, 16 characters or more) is not set")
    listen = urllib.parse.urlsplit(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:8731"))
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/class/")
    store = open_store(args.db)
    join_token = store.setting("join_token", lambda: secrets.token_urlsafe(16)) or ""
    config = ClassConfig(instructor_token=token, join_token=join_token,
                         log=lambda line: print(f"class view: {line}", file=sys.stderr, flush=True))
    join_url = f"{args.public_url.rstrip('/')}{prefix}?join={join_token}"
    if os.environ.get("GDRLAB_CLASS_JOIN_FILE"):
        Path(os.environ["GDRLAB_CLASS_JOIN_FILE"]).write_text(join_url + "\n")
    print(f"class view: at {prefix} of the hub; learners join with: gdrlab class join '{join_url}' --name NAME",
          file=sys.stderr, flush=True)
    sock = bind(listen.hostname or "127.0.0.1", listen.port or 8731)
    server = uvicorn.Server(uvicorn.Config(strip_prefix(create_app(store, config), prefix), log_level="warning",
                                           access_log=False, lifespan="off", timeout_graceful_shutdown=5,
                                           server_header=False))
    # uvicorn stops gracefully on SIGINT/SIGTERM (the hub sends them), then raises the signal again
    # for the handlers it found: these, which only note it
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: None)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
