"""UCX's protocol choice as rows: the tables UCX prints with ``UCX_PROTO_INFO=y``.

With that variable set (UCX 1.15 and later; ``ucx_info -f`` documents it as "Enable printing
protocols information"), UCX prints, when an endpoint first selects protocols for an operation,
one table per operation and memory type on its log stream (stdout unless ``UCX_LOG_FILE`` says
otherwise), each line behind UCX's log prefix (``[time] [host:pid:thread]``). The layout is made by
``ucp_proto_select_elem_info`` in UCX's ``src/ucp/proto/proto_debug.c`` (openucx/ucx): a border
(``+---+``), the endpoint configuration's name (``<context name> intra-node cfg#0``) and the
selection (``tagged message by ucp_tag_send*(fast-completion) from host memory``), one or two cells
on one or two lines depending on the version, in UCX 1.22 a ``Range | Description | Config`` header,
then one row per message-size range: the range (``0``, ``1..16483``, ``256K..inf``, units of 1024),
the protocol (``(?)`` in front when its performance is an estimate, ``is_estimation`` in UCX) and
the lanes (``tcp/lo``, ``55% on knem/memory and 45% on rc_mlx5/mlx5_0:1``).

This module reads that text and nothing else (no engine, no UCX): :func:`parse_proto_info`.
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["PROTOCOL_COLUMNS", "parse_proto_info", "parse_range"]

#: The columns of a protocol row, in order.
PROTOCOL_COLUMNS = ("endpoint", "operation", "variant", "memory", "range", "min_bytes", "max_bytes", "protocol",
                    "estimated", "transports", "config")

_PREFIX = re.compile(r"^(?:\s*\[[^\]]*\])*\s*(?P<body>[|+].*?)\s*$")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = r"\d+(?:\.\d+)?[KMGT]?"
_RANGE = re.compile(rf"^(?P<lo>{_SIZE})(?:\.\.(?P<hi>{_SIZE}|inf))?$")
_SELECTION = re.compile(r"^(?P<op>.+?)(?:\((?P<attr>[^)]*)\))? (?:from|into) (?P<mem>\S+?)(?: memory)?"
                        r"(?: to (?P<dst>\S+))?$")
_LANE = re.compile(r"[A-Za-z0-9_]+/[A-Za-z0-9_.:\-]+")


def _size(text: str) -> int:
    unit = text[-1] if text[-1] in _UNITS else ""
    return int(float(text[: len(text) - len(unit)]) * _UNITS[unit])


def parse_range(text: str) -> tuple[int, int | None]:
    """``"0"`` -> (0, 0); ``"1..16483"`` -> (1, 16483); ``"256K..inf"`` -> (262144, None).
    ValueError for anything else."""
    m = _RANGE.match(text.strip())
    if not m:
        raise ValueError(f"not a UCX size range: {text!r}")
    lo = _size(m.group("lo"))
    hi = m.group("hi")
    if hi is None:
        return lo, lo
    return lo, None if hi == "inf" else _size(hi)


def _cells(body: str) -> list[str]:
    return [c.strip() for c in body.strip().strip("|").split("|")]


def _selection(title: str) -> dict[str, str]:
    m = _SELECTION.match(title)
    if not m:
        return {"operation": title, "variant": "", "memory": ""}
    mem = m.group("mem") + (f" to {m.group('dst')}" if m.group("dst") else "")
    return {"operation": m.group("op").strip(), "variant": (m.group("attr") or "").strip(), "memory": mem}


def parse_proto_info(text: str) -> list[dict[str, Any]]:
    """Every protocol table in ``text`` (UCX's log, other lines ignored) as rows with
    :data:`PROTOCOL_COLUMNS`; a table printed twice (two workers, two processes) once."""
    rows: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    titles: list[str] = []
    table: list[dict[str, Any]] = []

    def close() -> None:
        if not table:
            return
        endpoint = next((t for t in titles if "cfg#" in t), "")
        endpoint = re.sub(r"^0x[0-9a-f]+ ", "", endpoint)  # UCX 1.16 puts the context's address first
        sel = _selection(next((t for t in titles if " from " in t or " into " in t), ""))
        key = (endpoint, tuple(sorted(sel.items())), tuple((r["range"], r["protocol"], r["config"]) for r in table))
        if key not in seen:
            seen.add(key)
            rows.extend({"endpoint": endpoint, **sel, **r} for r in table)
        table.clear()

    for line in text.splitlines():
        m = _PREFIX.match(line)
        if not m:
            continue
        body = m.group("body")
        if body.startswith("+"):
            continue
        cells = _cells(body)
        if len(cells) == 3 and _RANGE.match(cells[0]):
            lo, hi = parse_range(cells[0])
            desc = cells[1]
            estimated = desc.startswith("(?)")
            config = cells[2]
            table.append({"range": cells[0], "min_bytes": lo, "max_bytes": hi,
                          "protocol": desc[3:].strip() if estimated else desc, "estimated": estimated,
                          "transports": ",".join(dict.fromkeys(_LANE.findall(config))), "config": config})
            continue
        if [c.lower() for c in cells] == ["range", "description", "config"]:
            continue
        if table:  # a title after rows: the next table begins
            close()
            titles = []
        titles.extend(c for c in cells if c)
    close()
    return rows
