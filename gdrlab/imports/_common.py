"""What every reader shares: reading a file safely, one row of results, and the finished frame
with its ``imported`` provenance and the list of unit conversions made."""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from .. import provenance
from ..errors import InvalidArgument
from ..vocab import BENCH_COLUMNS

#: The most a tool's output file may hold. Real outputs are kilobytes (a full nvbandwidth run, a
#: 1-byte to 16 GiB nccl-tests sweep with -I, are well under a megabyte); a larger file is refused
#: after reading its size, before reading its text.
MAX_BYTES = 16 << 20
#: The columns a bench row has (``source`` is added by :func:`gdrlab.provenance.attach`).
ROW_COLUMNS: tuple[str, ...] = tuple(c.name for c in BENCH_COLUMNS if c.name != provenance.SOURCE_COLUMN)
#: Columns an imported row may add after the bench columns: what another tool reports and the
#: bench rows do not (the tool's test name, peak and bus bandwidth, message rate, direction...).
EXTRA_COLUMNS: tuple[str, ...] = ("test", "direction", "lat_max_us", "bw_peak_gbps", "busbw_gbps",
                                  "msg_rate_mps", "in_place", "src", "dst")
_FIELD_LIMIT = 120


class BadOutput(InvalidArgument):
    """A file that is not a readable output of the tool: one line saying why."""


def clean(text: object, limit: int = _FIELD_LIMIT) -> str:
    """A string from a tool's output made safe to carry and print: control characters and
    non-printable characters dropped, whitespace collapsed, cut at ``limit`` characters."""
    s = "".join(ch if ch.isprintable() else " " for ch in str(text))
    s = " ".join(s.split())
    return s if len(s) <= limit else s[:limit] + "..."


def read_text(path: str | os.PathLike[str]) -> str:
    """The text of ``path``: refused with one line when missing, not a file, empty, over
    :data:`MAX_BYTES`, or binary (a NUL byte). Undecodable bytes become U+FFFD."""
    name = clean(os.fspath(path), 200)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise BadOutput(f"cannot read {name}: {exc.strerror or exc}") from None
    if not os.path.isfile(path):
        raise BadOutput(f"{name} is not a regular file")
    if st.st_size == 0:
        raise BadOutput(f"{name} is empty")
    if st.st_size > MAX_BYTES:
        raise BadOutput(f"{name} is {st.st_size} bytes, over the {MAX_BYTES >> 20} MiB an imported "
                           "output may have (tool outputs are kilobytes; cut it to the run you want)")
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:  # grew after stat
        raise BadOutput(f"{name} is over the {MAX_BYTES >> 20} MiB an imported output may have")
    if b"\x00" in data:
        raise BadOutput(f"{name} is binary, not the text or JSON output of a benchmark tool")
    text = data.decode("utf-8", errors="replace")
    if not text.strip():
        raise BadOutput(f"{name} holds only whitespace")
    return text


def number(token: str) -> float | None:
    """A number a tool printed (``12.5``, ``1e+00``), None for ``N/A``, ``-`` and the like."""
    try:
        value = float(token)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


_INT = re.compile(r"[0-9]+", re.ASCII)


def whole(token: str) -> int | None:
    """A whole number of ASCII digits, None otherwise."""
    return int(token) if _INT.fullmatch(token) and len(token) <= 19 else None


def loads(text: str, what: str) -> Any:
    """``json.loads`` with a one-line error naming ``what`` and where it broke."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadOutput(f"{what} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                           f"{exc.msg}); was it cut short?") from None
    except RecursionError:
        raise BadOutput(f"{what} nests too deeply to be a tool's JSON output") from None


@dataclass
class Result:
    """What a reader found: rows (dicts keyed by :data:`ROW_COLUMNS` and :data:`EXTRA_COLUMNS`),
    the tool and what its output says of itself, and the notes for the reader of the import."""

    tool: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    version: str | None = None
    options: str | None = None
    host: str | None = None
    converted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def convert(self, note: str) -> None:
        """Record one unit conversion (once)."""
        if note not in self.converted:
            self.converted.append(note)

    def note(self, note: str) -> None:
        """Record one remark (once)."""
        if note not in self.notes:
            self.notes.append(note)


def row(**values: Any) -> dict[str, Any]:
    """One row: every bench and extra column, None where the tool does not say."""
    unknown = set(values) - set(ROW_COLUMNS) - set(EXTRA_COLUMNS)
    if unknown:
        raise KeyError(f"not a result column: {sorted(unknown)}")
    return {c: values.get(c) for c in ROW_COLUMNS + EXTRA_COLUMNS}


def frame(result: Result, file: str) -> Any:
    """The rows as a DataFrame with the bench columns first, extra columns the tool filled, and
    the ``imported`` provenance (tool, version, options, host, file, converted, notes)."""
    import pandas as pd

    if not result.rows:
        raise BadOutput(f"no result rows found in {clean(file, 200)} ({result.tool} output cut short, "
                           "or a run that failed before reporting?)")
    extras = [c for c in EXTRA_COLUMNS if any(r.get(c) is not None for r in result.rows)]
    df = pd.DataFrame(result.rows, columns=list(ROW_COLUMNS) + extras)
    for col in df.columns:
        if col in ("size", "iters"):
            df[col] = pd.array([None if v is None else int(v) for v in df[col]], dtype="Int64")
        elif col.endswith(("_us", "_gbps", "_mps")) or col in ("chunk", "depth"):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    prov = provenance.imported(result.tool, result.version, options=result.options, host=result.host,
                               file=os.path.basename(file), converted=list(result.converted),
                               notes=list(result.notes))
    return provenance.attach(df, prov)
