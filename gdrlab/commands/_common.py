"""Helpers shared by the subcommands."""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Mapping, Sequence, TypeAlias

#: What ``gdrlab.cli`` hands each command's ``add_parser``.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_command(sub: Subparsers, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """The parser of one subcommand: ``help`` is its line in ``gdrlab --help``, ``description``
    heads its own ``--help``; it has the ``--json`` every command offers."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout and nothing else")
    return parser


def _clean(obj: Any) -> Any:
    """NaN/inf are not JSON: they become null. numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (TypeError, ValueError):
            pass
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def emit_json(obj: Any) -> None:
    json.dump(_clean(obj), sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.stdout.flush()


def table(rows: Sequence[Mapping[str, Any]], columns: list[str]) -> str:
    """A plain fixed-width text table."""
    cells = [[str(r.get(c, "")) if r.get(c) is not None else "-" for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
