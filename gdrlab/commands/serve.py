"""``gdrlab serve``: the remote side of ``gdrlab bench``."""
from __future__ import annotations

import json
import os
import sys

from ._common import add_json_flag


def add_parser(sub):
    p = sub.add_parser(
        "serve", help="serve bench clients (the remote side of `gdrlab bench --peer`)",
        description="Accept `gdrlab bench --peer HOST:PORT` clients one at a time. Listens on "
                    "127.0.0.1 by default; any other address requires a token (--token or $GDRLAB_TOKEN).")
    p.add_argument("--listen", default="127.0.0.1:18515", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:18515; port 0 picks a free port)")
    p.add_argument("--token", default=None, help="shared secret clients must present (default $GDRLAB_TOKEN)")
    p.add_argument("--device", type=int, default=0, help="GPU used for GPU paths (default 0)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds any blocking call may wait (default 10)")
    p.add_argument("--once", action="store_true", help="serve one client, then exit")
    p.add_argument("--announce", action="store_true",
                   help='print {"port": N} on stdout once listening (for scripts)')
    add_json_flag(p)
    return p


def run(args) -> int:
    from ..engine import _check_timeout, _parse_peer, native

    host, port = _parse_peer(args.listen)
    _check_timeout(args.timeout)
    token = args.token if args.token is not None else os.environ.get("GDRLAB_TOKEN", "")
    server = native().Server(host, port, token, int(args.timeout * 1000))
    if args.announce or args.json:
        print(json.dumps({"port": server.port, "host": host}), flush=True)
    else:
        print(f"gdrlab serve: listening on {host}:{server.port}" + (" (token required)" if token else ""),
              file=sys.stderr, flush=True)
    failures = 0
    while True:
        came, error = server.serve_one(500)  # wake twice a second so Ctrl-C works
        if not came:
            continue
        if error:
            failures += 1
            print(f"gdrlab serve: client ended with {error}", file=sys.stderr, flush=True)
        if args.once:
            return 1 if error else 0
