"""``gdrlab ucx protocols``: which protocol UCX picks at each message size, as rows."""
from __future__ import annotations

import argparse
import csv
import re
import sys

from .. import provenance
from ..errors import InvalidArgument
from ..transfer.buffers import machine
from ..transfer.ucx_wire import PROBE_MEMORY, probe_output
from ..ucx import PROTOCOL_COLUMNS, parse_proto_info
from ._common import Subparsers, add_command, emit_json, table

HELP = "UCX's protocol choice per message size (UCX_PROTO_INFO) as rows"
DESCRIPTION = ("Runs a small verified UCX transfer in a process of its own with UCX_PROTO_INFO=y (UCX 1.15+) "
               "and turns the protocol tables UCX prints into rows: endpoint, operation, memory, size range, "
               "protocol, transports. Needs UCX: pip install 'gdrlab[ucx]'.")
_TLS = re.compile(r"^[A-Za-z0-9_^:,]+$")
#: The table view's columns (--json and --csv carry every column).
TABLE_COLUMNS = ["operation", "variant", "memory", "range", "protocol", "estimated", "transports"]


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "ucx", "UCX as the production stack beside gdrlab (protocols)",
                    "What UCX, the library production codes use, does with the same buffers.")
    inner = p.add_subparsers(dest="ucx_command", metavar="SUBCOMMAND")
    q = add_command(inner, "protocols", HELP, DESCRIPTION)
    q.add_argument("--mem", default="host", choices=list(PROBE_MEMORY),
                   help="memory on both sides: host (default) or cuda (needs a GPU and UCX's CUDA module)")
    q.add_argument("--tls", default=None, metavar="LIST",
                   help="UCX_TLS for the probe, e.g. tcp or tcp,cuda_copy (default: $UCX_TLS, else tcp, with "
                        "cuda_copy for --mem cuda)")
    q.add_argument("--all", action="store_true",
                   help="every operation UCX printed (default: tagged sends, the operation the ucx wire uses)")
    q.add_argument("--csv", action="store_true", help="rows as CSV on stdout")
    q.add_argument("--timeout", default=60.0, type=float, help="seconds the probe may take (default 60)")
    return p


def run(args: argparse.Namespace) -> int:
    if getattr(args, "ucx_command", None) != "protocols":
        raise InvalidArgument("gdrlab ucx: name a subcommand: protocols")
    if args.json and args.csv:
        raise InvalidArgument("--json and --csv exclude each other")
    if args.tls is not None and not _TLS.match(args.tls):
        raise InvalidArgument(f"--tls takes UCX transport names separated by commas, got {args.tls!r}")
    if not 0 < args.timeout <= 3600:
        raise InvalidArgument(f"--timeout must be between 0 and 3600 seconds, got {args.timeout}")
    text, meta = probe_output(args.mem, args.tls, args.timeout)
    rows = parse_proto_info(text)
    if not args.all:
        rows = [r for r in rows if r["operation"].startswith("tagged message")]
    notes = []
    if not rows:
        notes.append("UCX printed no protocol table (UCX_PROTO_INFO needs UCX 1.15 or later with its protocol "
                     f"selection v2; this is UCX {meta['ucx_version']})")
    prov = provenance.live({"what": f"gdrlab ucx protocols --mem {args.mem}", **meta}, machine())
    if args.json:
        emit_json({"rows": rows, "provenance": prov, "notes": notes})
    elif args.csv:
        w = csv.DictWriter(sys.stdout, fieldnames=list(PROTOCOL_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    else:
        print(f"UCX {meta['ucx_version']}, {args.mem} memory, UCX_TLS {meta['ucx_tls']}")
        print(table(rows, TABLE_COLUMNS))
        for n in notes:
            print(n)
    return 0
