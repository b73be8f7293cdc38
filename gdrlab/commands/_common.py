"""Helpers shared by the subcommands."""
from __future__ import annotations

import argparse
import json
import math
import re
import string
import sys
from typing import Any, Callable, Mapping, Sequence, TypeAlias

#: What ``gdrlab.cli`` hands each command's ``add_parser``.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_command(sub: Subparsers, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """The parser of one subcommand: ``help`` is its line in ``gdrlab --help``, ``description``
    heads its own ``--help``; it has the ``--json`` every command offers."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout and nothing else")
    return parser


def printable(text: str, limit: int = 200) -> str:
    """``text`` safe for one terminal line: non-ASCII, undecodable bytes (surrogates) and control
    characters (newlines, escape codes) escaped; cut at ``limit`` characters."""
    shown = "".join(f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff"  # an undecodable byte
                    else c.encode("unicode_escape").decode("ascii") for c in text)
    return shown if len(shown) <= limit else shown[:limit] + f"... ({len(text)} characters)"


def utf8_text(what: str, text: str, show: Callable[[str], str] = printable) -> str:
    """``text`` when it is valid UTF-8; command-line and environment text arrive with undecodable
    bytes as surrogates, refused with one line naming ``what``."""
    from ..errors import InvalidArgument
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} is not valid UTF-8 text ({show(text)})") from None
    return text


# ASCII digits only: int() and float() also take other scripts' digits ("\uff18", full-width 8),
# "1_000", "nan" and "1e400"; a number the user typed is a plain decimal.
_WHOLE = re.compile(r"[+-]?([0-9]+)", re.ASCII)
_DECIMAL = re.compile(r"[+-]?([0-9]*)(?:\.[0-9]*)?", re.ASCII)


def _number(flag: str, text: str, hi: float, decimal: bool) -> tuple[str, float]:
    """(the text as shown, its value) once it is a plain ASCII number of at most ``hi``'s digits."""
    from ..errors import InvalidArgument

    text = str(text).strip(string.whitespace)
    shown = printable(text, 40)
    m = (_DECIMAL if decimal else _WHOLE).fullmatch(text)
    if not m or not any("0" <= c <= "9" for c in text):
        kind = "a number (digits 0-9, e.g. 2.5)" if decimal else "a whole number (digits 0-9)"
        raise InvalidArgument(f"{flag}: '{shown}' is not {kind}")
    digits = m.group(1).lstrip("0")
    if len(digits) > len(str(int(hi))):  # before int(): it refuses 4300+ digits
        shown = f"'{text}'" if len(text) <= 40 else f"{text[:20]}... ({len(digits)} digits)"
        raise InvalidArgument(f"{flag}: {shown} is too large (at most {_plain(hi)})")
    return shown, float(text) if decimal else int(text)


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def parse_whole(flag: str, text: str, lo: int, hi: int) -> int:
    """A whole number the user wrote for ``flag``, from ``lo`` to ``hi``, in ASCII digits 0-9
    (int() also takes other scripts' digits, "1_000" and 4300-digit numbers it then refuses with
    a message about sys.set_int_max_str_digits); InvalidArgument naming ``flag`` otherwise."""
    from ..errors import InvalidArgument

    shown, value = _number(flag, text, hi, decimal=False)
    if not lo <= value <= hi:
        raise InvalidArgument(f"{flag} {shown}: must be {lo}..{hi}")
    return int(value)


def parse_decimal(flag: str, text: str, lo: float, hi: float) -> float:
    """Like :func:`parse_whole` for a number with an optional fraction (``2.5``), more than ``lo``
    and at most ``hi``; no exponent, nan or inf (float() takes those, and other scripts' digits)."""
    from ..errors import InvalidArgument

    shown, value = _number(flag, text, hi, decimal=True)
    if not lo < value <= hi:
        raise InvalidArgument(f"{flag} {shown}: must be more than {_plain(lo)} and at most {_plain(hi)}")
    return value


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
