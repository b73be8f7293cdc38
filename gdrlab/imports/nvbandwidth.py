"""nvbandwidth (NVIDIA/nvbandwidth): copy-engine and SM copy bandwidth between host and GPUs or
GPU pairs, as printed on stdout or with ``-j`` as JSON.

Units as nvbandwidth defines them (memcpy.cpp): bandwidth in GB/s = bytes/second times 1e-9, the
kit's unit; each matrix cell becomes one row with ``src`` and ``dst`` read from the matrix title
("CPU(row) -> GPU(column)", "<-" for the other way, "<->" for bidirectional). The output does not
state the buffer size (``-b``, MiB; 512 MiB by default in common.h), so ``size`` is left empty.
Latency matrices ("(ns)") are converted to microseconds.
"""
from __future__ import annotations

import re

from ..units import ns_to_us
from ._common import BadOutput, Result, clean, loads, number, row

TOOL = "nvbandwidth"
_VERSION = re.compile(r"nvbandwidth Version:\s*(\S+)")
_RUNNING = re.compile(r"^Running\s+(\w+)\.?\s*$")
_DESC = re.compile(r"(CPU|GPU)\(row\)\s*(<->|->|<-)\s*(CPU|GPU)\(column\)")
_SIZE_NOTE = ("nvbandwidth does not print its buffer size (-b, MiB; default 512 MiB): size left empty, "
              "so these rows plot against GPU pairs, not message size")


def _cells(res: Result, name: str, desc: str, matrix: list[list[str]]) -> None:
    m = _DESC.search(desc)
    row_kind, arrow, col_kind = (m.group(1), m.group(2), m.group(3)) if m else ("row", "->", "column")
    latency = "(ns)" in desc or "latency" in desc.lower()
    for r, cells in enumerate(matrix):
        for c, cell in enumerate(cells):
            v = number(cell)
            if v is None:
                continue
            a, b = f"{row_kind}{r}", f"{col_kind}{c}"
            if a == b and v == 0.0:  # a GPU to itself: printed 0.00 by older versions, not measured
                continue
            src, dst = (b, a) if arrow == "<-" else (a, b)
            if latency:
                res.convert("latency: nvbandwidth ns -> us")
                res.rows.append(row(path=name, test=name, src=src, dst=dst, lat_mean_us=ns_to_us(v)))
            else:
                res.rows.append(row(path=name, test=name, src=src, dst=dst, bw_gbps=v,
                                    direction="bidir" if arrow == "<->" else "uni"))


def _sum_name(lines: list[str]) -> str:
    """The test named by the 'SUM <testcase> <value>' line after a matrix whose 'Running' line is missing."""
    for line in lines[:3]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "SUM":
            return clean(parts[1], 60)
    return "nvbandwidth"


def read_text(text: str, file: str) -> Result:
    """Rows from nvbandwidth's stdout (one block per 'Running <testcase>.')."""
    res = Result(TOOL)
    lines = text.splitlines()
    for line in lines:
        if (m := _VERSION.search(line)):
            res.version = clean(m.group(1), 30)
        elif line.startswith("Driver Version:"):
            res.note(clean(line, 60))
    name: str | None = None
    i = 0
    while i < len(lines):
        if (m := _RUNNING.match(lines[i].strip())):
            name = clean(m.group(1), 60)
        elif "(row)" in lines[i] and "(column)" in lines[i]:
            desc, matrix, i = lines[i], [], i + 2  # skip the column-index line
            while i < len(lines) and lines[i].split() and number(lines[i].split()[0]) is not None:
                matrix.append(lines[i].split()[1:])
                i += 1
            _cells(res, name or _sum_name(lines[i:]), desc, matrix)
            name = None
            continue
        i += 1
    res.note(_SIZE_NOTE)
    res.note("nvbandwidth GB/s is 10^9 B/s, as the kit's: no conversion")
    return res


def read_json(text: str, file: str) -> Result:
    """Rows from ``nvbandwidth -j`` (json_output.cpp: {"nvbandwidth": {"testcases": [...]}})."""
    doc = loads(text, clean(file, 200))
    body = doc.get("nvbandwidth") if isinstance(doc, dict) else None
    cases = body.get("testcases") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(cases, list):
        raise BadOutput(f"{clean(file, 200)}: no nvbandwidth.testcases list (not nvbandwidth -j output?)")
    res = Result(TOOL)
    res.version = clean(body.get("version"), 30) if body.get("version") else None
    devices = body.get("GPU Device list")
    if isinstance(devices, list):
        hosts = [m.group(1) for d in devices if (m := re.search(r"\(([^()]+)\)\s*$", str(d)))]
        if hosts:
            res.host = clean(",".join(dict.fromkeys(hosts)), 120)
    for case in cases:
        if not isinstance(case, dict):
            continue
        matrix = case.get("bandwidth_matrix")
        if case.get("status") != "Passed" or not isinstance(matrix, list):
            if case.get("name"):
                res.note(f"{clean(case.get('name'), 60)}: {clean(case.get('status', 'no result'), 30)}")
            continue
        rows: list[list[str]] = [[str(v) for v in r] for r in matrix if isinstance(r, list)]
        _cells(res, clean(case.get("name", "nvbandwidth"), 60), str(case.get("bandwidth_description", "")), rows)
    res.note(_SIZE_NOTE)
    res.note("nvbandwidth GB/s is 10^9 B/s, as the kit's: no conversion")
    return res
