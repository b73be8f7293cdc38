"""``gdrlab class``: the class view (instructor server, learner join and submissions, export).

    gdrlab class serve --listen 0.0.0.0:8731 --db class.sqlite --gen-token     (instructor)
    gdrlab class join 'http://HOST:8731/?join=TOKEN' --name "Ada"              (each learner, once)
    gdrlab class submit [bench.json ...]                                       (each learner, any time)
    gdrlab class export --db class.sqlite -o class.csv                         (instructor)
    gdrlab class export --db class.sqlite -o class.parquet --anonymise         (a dataset for next year)
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import sys
from typing import Any

from ..errors import InvalidArgument
from ._common import Subparsers, emit_json, printable

HELP = "the class view: an instructor's dashboard of every learner's machine and results"
DESCRIPTION = ("The class view. The instructor runs `gdrlab class serve` and shares the join URL it prints; "
               "each learner runs `gdrlab class join URL --name NAME` once, then `gdrlab class submit` (the "
               "doctor report and any result files) or, from a lab, gdrlab.classroom.submit(df). The dashboard "
               "shows every machine and every learner's sweeps, live.")
DEFAULT_LISTEN = "127.0.0.1:8731"


def _sub(sub: Any, name: str, help: str, description: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=description)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
    return p


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = sub.add_parser("class", help=HELP, description=DESCRIPTION)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
    cmds = p.add_subparsers(dest="class_command", metavar="SUBCOMMAND")

    s = _sub(cmds, "serve", "start the class view server (instructor)",
             "Serve the dashboard and take learners' submissions. Stores into SQLite (--db FILE, the default "
             "class.sqlite) or PostgreSQL (--db postgresql://USER@HOST/DB). The instructor token guards the "
             "dashboard; learners join with the join URL printed at start. Listens on 127.0.0.1 by default; "
             "any other address requires a token of at least 16 characters.")
    s.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to listen on (default {DEFAULT_LISTEN}; 0.0.0.0:8731 for the whole room; "
                        "[::]:PORT for IPv6; port 0 picks a free port)")
    s.add_argument("--db", default="class.sqlite", metavar="FILE|URL",
                   help="SQLite file (default class.sqlite) or a PostgreSQL URL (postgresql://USER:PW@HOST/DB)")
    tok = s.add_mutually_exclusive_group()
    tok.add_argument("--token-file", metavar="FILE", help="read the instructor token from FILE "
                                                          "(default: $GDRLAB_TOKEN)")
    tok.add_argument("--gen-token", action="store_true",
                     help="generate a strong instructor token and print it once")
    s.add_argument("--new-join-token", action="store_true",
                   help="replace the class's join token (learners already joined keep their keys)")
    s.add_argument("--public-url", metavar="URL",
                   help="the URL learners reach this server at, for the printed join URL (default: from --listen)")
    s.add_argument("--max-bytes", type=int, default=None, metavar="BYTES",
                   help="largest submission accepted (default 8 MiB)")
    s.add_argument("--rate-limit", type=float, default=60.0, metavar="PER_MINUTE",
                   help="submissions per learner per minute, after a burst of half as many (default 60)")
    s.add_argument("--max-learners", type=int, default=1000, metavar="N", help="learners who may join (default 1000)")
    s.add_argument("--max-live", type=int, default=16, metavar="N",
                   help="dashboards updated live (server-sent events) at once; more of them poll (default 16)")

    j = _sub(cmds, "join", "join a class (learner, once)",
             "Join the class at URL (the join URL your instructor shared) as NAME; the key the server hands "
             "back is kept in your config folder ($GDRLAB_CONFIG_DIR, else ~/.config/gdrlab/class.json).")
    j.add_argument("url", metavar="URL", help="the join URL, http://HOST:PORT/?join=TOKEN")
    j.add_argument("--name", required=True, help="your name as the instructor will see it")

    u = _sub(cmds, "submit", "send this machine's doctor report and result files (learner)",
             "Send this machine's doctor report and topology and the given result files (the --json output of "
             "gdrlab bench, copy, p2p or import: rows with provenance) to the class view. Sending the same "
             "results again stores nothing new.")
    u.add_argument("files", nargs="*", metavar="FILE", help="result files (JSON written by gdrlab ... --json)")
    u.add_argument("--lab", metavar="LAB", help="the lab these results belong to (e.g. 04)")
    u.add_argument("--no-doctor", action="store_true", help="send only the files, not the doctor report")
    u.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="give up after (default 30)")

    e = _sub(cmds, "export", "write every stored result row as CSV or Parquet (instructor)",
             "Read the class database and write every result row, with learner, anonymised learner, machine "
             "fingerprint, lab, measurement date and provenance, as CSV or Parquet (the result schema's column "
             "names). gdrlab.classroom.export.read_export reads either back.")
    e.add_argument("--db", default="class.sqlite", metavar="FILE|URL", help="the class database (default class.sqlite)")
    e.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    e.add_argument("--anonymise", action="store_true", help="learner-ID instead of names")
    e.add_argument("--format", choices=("csv", "parquet"), default=None,
                   help="csv or parquet (default: from the -o file's suffix, else csv); parquet needs -o")
    p.set_defaults(_class_parser=p)
    return p


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "class_command", None)
    if cmd is None:
        if args.json:
            emit_json({"error": {"type": "UsageError", "message": "gdrlab class: name a subcommand: "
                                 "serve, join, submit or export"}})
        args._class_parser.print_help(sys.stderr)
        return 2
    return {"serve": _serve, "join": _join, "submit": _submit, "export": _export}[cmd](args)


# --------------------------------------------------------------------------- serve
def _need_server_packages() -> None:
    missing = []
    for mod in ("starlette", "uvicorn", "sqlalchemy", "plotly"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise InvalidArgument(f"the class view server needs {', '.join(missing)}: pip install 'gdrlab[class]'")


def _serve(args: argparse.Namespace) -> int:
    from .serve import is_loopback, parse_listen, resolve_token
    _need_server_packages()
    from ..classroom.app import ClassConfig
    from ..classroom.server import bind, uvicorn_server
    from ..classroom.store import open_store

    host, port = parse_listen(args.listen)
    token, warnings, generated = resolve_token(argparse.Namespace(gen_token=args.gen_token, token_file=args.token_file,
                                                                  token=None), host)
    if not token:
        raise InvalidArgument("the dashboard needs an instructor token: --token-file FILE, $GDRLAB_TOKEN or --gen-token")
    if args.max_bytes is not None and not 1024 <= args.max_bytes <= 1 << 30:
        raise InvalidArgument(f"--max-bytes must be from 1024 to {1 << 30}, got {args.max_bytes}")
    if not 0 <= args.max_live <= 1000:
        raise InvalidArgument(f"--max-live must be from 0 to 1000, got {args.max_live}")
    if not 0 < args.rate_limit <= 100000:
        raise InvalidArgument(f"--rate-limit must be more than 0 and at most 100000, got {args.rate_limit!r}")
    try:
        store = open_store(args.db)
    except Exception as exc:  # noqa: BLE001 - one line: the database cannot be opened
        raise InvalidArgument(f"--db {printable(args.db)}: {type(exc).__name__}: {printable(str(exc), 300)}") from None
    if args.new_join_token:
        store.set_setting("join_token", secrets.token_urlsafe(16))
    join_token = store.setting("join_token", lambda: secrets.token_urlsafe(16)) or ""
    sock = bind(host, port)
    real_port = sock.getsockname()[1]
    if args.public_url:
        base = args.public_url if args.public_url.endswith("/") else args.public_url + "/"
    else:
        shown = host if host not in ("0.0.0.0", "::") else socket.getfqdn()
        base = f"http://{'[' + shown + ']' if ':' in shown else shown}:{real_port}/"
    quiet = args.json and not sys.stderr.isatty()

    def log(line: str) -> None:
        if not quiet:
            print(f"gdrlab class: {line}", file=sys.stderr, flush=True)

    config = ClassConfig(instructor_token=token, join_token=join_token, rate_per_minute=args.rate_limit,
                         rate_burst=max(5, int(args.rate_limit // 2)), max_learners=args.max_learners,
                         max_live=args.max_live, log=log)
    if args.max_bytes:
        config.max_body_bytes = args.max_bytes
    server = uvicorn_server(store, config)
    notes = [f"storing into {store.dialect} (schema version {store.version()})",
             "learners join with: gdrlab class join '" + base + "?join=" + join_token + "' --name NAME"]
    if not is_loopback(host) and base.startswith("http://"):
        warnings.append("plain HTTP: keys and tokens cross the network readable; put the server behind HTTPS "
                        "(a reverse proxy) outside a trusted room network")
    doc: dict[str, Any] = {"url": base, "dashboard": base + "dashboard", "join_url": f"{base}?join={join_token}",
                           "host": host, "port": real_port, "db": store.dialect, "schema_version": store.version()}
    if generated:
        doc["token"] = generated
    doc["warnings"] = warnings
    doc["notes"] = notes
    if args.json:
        print(json.dumps(doc), flush=True)
    else:
        for w in warnings:
            print(f"gdrlab class: warning: {w}", file=sys.stderr)
        print(f"gdrlab class: dashboard {base}dashboard" + (f" (instructor token, shown once: {generated})"
                                                             if generated else " (log in with the instructor token)"))
        print(f"gdrlab class: join URL  {base}?join={join_token}")
        print(f"gdrlab class: {notes[0]}; Ctrl-C stops", flush=True)
    # uvicorn catches SIGINT/SIGTERM for a graceful stop, then raises the signal again for the
    # handlers it found: these, which note it, so the database is closed before the exit
    # (128 + the signal's number, as `gdrlab serve`).
    signalled: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: signalled.append(signum))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        store.close()
    if signalled and signalled[0] == signal.SIGINT:
        print("gdrlab: interrupted", file=sys.stderr)
    return 128 + signalled[0] if signalled else 0


# --------------------------------------------------------------------------- learner side
def _join(args: argparse.Namespace) -> int:
    from ..classroom.client import join
    from ..classroom.schema import SchemaError, validate_name
    try:
        validate_name(args.name)
    except SchemaError as exc:
        raise InvalidArgument(f"--name: {str(exc).split(': ', 1)[-1]}") from None
    saved = join(args.url, args.name)
    out = {k: saved[k] for k in ("url", "learner_id", "name", "config")}
    if args.json:
        emit_json(out)
    else:
        print(f"joined {out['url']} as {printable(out['name'])} (learner {out['learner_id']}); "
              f"key kept in {out['config']}")
    return 0


def _submit(args: argparse.Namespace) -> int:
    from ..classroom.client import submit
    if not 0 < args.timeout <= 3600:
        raise InvalidArgument(f"--timeout must be more than 0 and at most 3600 seconds, got {args.timeout!r}")
    if args.no_doctor and not args.files:
        raise InvalidArgument("nothing to submit: --no-doctor and no FILE")
    reply = submit(files=args.files, doctor=not args.no_doctor, lab=args.lab, timeout=args.timeout)
    if args.json:
        emit_json(reply)
    else:
        print(f"submitted to {reply['url']}: {reply['stored']} new ({reply['rows']} result rows), "
              f"{reply['duplicates']} already there; machine {reply['fingerprint'][:8]}")
    return 0


def _export(args: argparse.Namespace) -> int:
    _need_server_packages()
    from ..classroom.export import export_parquet_bytes, export_rows_csv
    from ..classroom.store import open_store
    fmt = args.format or ("parquet" if (args.output or "").lower().endswith((".parquet", ".pq")) else "csv")
    if fmt == "parquet" and not args.output:
        raise InvalidArgument("--format parquet: name the file with -o FILE (Parquet is not written to a terminal)")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InvalidArgument("Parquet export needs pyarrow: pip install 'gdrlab[class]'") from None
    if "://" not in args.db and not os.path.isfile(args.db):
        raise InvalidArgument(f"--db {printable(args.db)}: no such class database")
    store = open_store(args.db)
    try:
        if fmt == "parquet":
            data = export_parquet_bytes(store, anonymise=args.anonymise)
            rows = store.counts()["rows"]
        else:
            text = export_rows_csv(store, anonymise=args.anonymise)
            rows = store.counts()["rows"]
    finally:
        store.close()
    if fmt == "parquet":
        with open(args.output, "wb") as fb:
            fb.write(data)
        if args.json:
            emit_json({"output": args.output, "rows": rows, "format": "parquet"})
        else:
            print(f"wrote {rows} rows to {args.output} (Parquet)", file=sys.stderr)
        return 0
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        if args.json:
            emit_json({"output": args.output, "rows": rows})
        else:
            print(f"wrote {rows} rows to {args.output}", file=sys.stderr)
    else:
        if args.json:
            emit_json({"rows": rows, "csv": text})
        else:
            sys.stdout.write(text)
    return 0
