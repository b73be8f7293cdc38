"""The ``gdrlab`` command. Each subcommand lives in ``gdrlab/commands/<name>.py`` with two
functions: ``add_parser(subparsers)`` and ``run(args) -> int``. With ``--json`` a command prints
exactly one JSON document on stdout and nothing else; progress and messages go to stderr."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import NoReturn

from . import __version__
from .errors import GdrlabError

COMMANDS = ["doctor", "topo", "bench", "serve", "model", "p2p_matrix", "copy", "nccl", "lab", "classroom", "imports",
            "ucx"]


class _Parser(argparse.ArgumentParser):
    """Remembers the usage error it reports, so ``--json`` can repeat it as a JSON document."""

    last_error: str | None = None

    def error(self, message: str) -> NoReturn:
        _Parser.last_error = f"{self.prog}: {message}"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gdrlab",
        description="Learn GPUDirect RDMA by measuring it: discovery, topology, benchmarks and models.",
    )
    parser.add_argument("--version", action="version", version=f"gdrlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"gdrlab.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gdrlab.commands.{name}":
                continue  # command not part of this build
            raise
        p = mod.add_parser(sub)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        # argparse has printed usage and the reason on stderr; honour the --json contract too.
        if exc.code not in (0, None) and "--json" in argv:
            print(json.dumps({"error": {"type": "UsageError", "message": _Parser.last_error or "invalid arguments"}}))
        raise
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except BrokenPipeError:
        # Output piped into `head` and the like: not an error of ours.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("gdrlab: interrupted", file=sys.stderr)
        return 130
    except (GdrlabError, ValueError, OSError) as exc:
        # One line on stderr; with --json also a JSON error document on stdout.
        name = type(exc).__name__
        if getattr(args, "json", False):
            print(json.dumps({"error": {"type": name, "message": str(exc)}}))
        print(f"gdrlab {args.command}: {name}: {exc}", file=sys.stderr)
        return 1
