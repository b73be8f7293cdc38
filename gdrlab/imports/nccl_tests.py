"""nccl-tests (NVIDIA/nccl-tests): all_reduce_perf and the other collectives, as printed on stdout
or written with ``-J file.json``, with the ``-I`` per-iteration columns where present.

Units as nccl-tests defines them (doc/PERFORMANCE.md, src/*.cu): ``time`` is the mean time of one
collective in microseconds (not half a round trip); ``algbw`` = size / time and ``busbw`` = algbw
times the collective's factor (2(n-1)/n for all-reduce), both in GB/s = 10**9 bytes per second,
the kit's unit: ``bw_gbps`` holds algbw, ``busbw_gbps`` busbw. Each size gives an out-of-place row
and an in-place row (``in_place``).
"""
from __future__ import annotations

import re
from typing import Any

from ._common import BadOutput, Result, clean, loads, number, row, whole

TOOL = "nccl-tests"
_VERSION = re.compile(r"#\s*nccl-tests version\s+(\S+)")
_NCCL = re.compile(r"NCCL version\s+(\S+)")
_TEST = re.compile(r"#\s*Collective test starting:\s*(\w+)")
_CONFIG = re.compile(r"#?\s*(nThread\s+\d+.*)$")
_HOST = re.compile(r"#\s*Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)")
_TIMES = ("time", "cputime")


def _header(lines: list[str]) -> tuple[int, list[str]] | None:
    """(line index, column names) of the results header: the '#' line naming size, count and time."""
    for i, line in enumerate(lines):
        cols = line.lstrip("#").split()
        if line.lstrip().startswith("#") and cols[:2] == ["size", "count"] and any(c in _TIMES for c in cols):
            return i, cols
    return None


def _meta(res: Result, lines: list[str]) -> str | None:
    hosts: list[str] = []
    test = None
    for line in lines:
        if (m := _VERSION.search(line)) and res.version is None:
            res.version = clean(m.group(1), 30)
        elif (m := _NCCL.search(line)):
            res.note(f"NCCL version {clean(m.group(1), 30)}")
        elif (m := _TEST.search(line)):
            test = clean(m.group(1), 40)
        elif (m := _CONFIG.search(line)) and res.options is None:
            res.options = clean(m.group(1), 200)
        elif (m := _HOST.search(line)):
            host = clean(m.group(1), 60)
            if host not in hosts:
                hosts.append(host)
    if hosts:
        res.host = ",".join(hosts[:8]) + ("..." if len(hosts) > 8 else "")
    return test


def read_text(text: str, file: str, test: str | None = None) -> Result:
    """Rows from nccl-tests' stdout."""
    res = Result(TOOL)
    lines = text.splitlines()
    name = _meta(res, lines) or test or "nccl-tests"
    found = _header(lines)
    if found is None:
        raise BadOutput(f"{clean(file, 200)}: no nccl-tests results header ('#  size  count ... time algbw busbw')")
    at, cols = found
    at_time = [i for i, c in enumerate(cols) if c in _TIMES]
    first, second = at_time[0], (at_time[1] if len(at_time) > 1 else None)
    lead = cols[:first]
    halves = [(False, cols[first:second] if second else cols[first:], first)]
    if second:
        halves.append((True, cols[second:], second))
    for line in lines[at + 1:]:
        tokens = line.split()
        if not tokens or line.lstrip().startswith("#") or whole(tokens[0]) is None or len(tokens) < len(cols):
            continue
        base = dict(zip(lead, tokens))
        for in_place, names, start in halves:
            values = dict(zip(names, tokens[start:start + len(names)]))
            res.rows.append(_row(res, name, base, values, in_place))
    _units(res)
    return res


def _units(res: Result) -> None:
    res.note("nccl-tests time is the mean time of one collective (not a half round trip): in lat_mean_us")
    res.note("bw_gbps holds algbw (size/time); busbw_gbps holds busbw (algbw times the collective's "
             "bus factor); both GB/s = 10^9 B/s, no conversion")


def _wrong(token: str | None) -> bool | None:
    v = number(token) if token is not None else None
    return None if v is None else v == 0


def _row(res: Result, name: str, base: dict[str, str], values: dict[str, str], in_place: bool) -> dict[str, Any]:
    time = values.get("time", values.get("cputime"))
    wrong = values.get("#wrong", values.get("error"))
    return row(path=name, test=name, size=whole(base.get("size", "")), in_place=in_place,
               lat_mean_us=number(time) if time else None, bw_gbps=number(values.get("algbw", "")),
               busbw_gbps=number(values.get("busbw", "")), verified=_wrong(wrong),
               lat_min_us=number(values.get("i_min", "")), lat_max_us=number(values.get("i_max", "")),
               lat_p99_us=number(values.get("i_p99", "")))


def _version(code: Any) -> str | None:
    """NCCL's version code (22807) as 2.28.7."""
    if not isinstance(code, int) or code <= 0:
        return None
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def read_json(text: str, file: str) -> Result:
    """Rows from a ``-J file.json`` document (nccl-tests' src/util.cu writer)."""
    doc = loads(text, clean(file, 200))
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        raise BadOutput(f"{clean(file, 200)}: no 'results' list (not nccl-tests -J output?)")
    res = Result(TOOL)
    nccl = _version(doc.get("nccl_version"))
    if nccl:
        res.note(f"NCCL version {nccl}")
    args = doc.get("args")
    if isinstance(args, list):
        res.options = clean(" ".join(str(a) for a in args[1:]), 200) or None
    name = clean(str(args[0]).rsplit("/", 1)[-1], 40) if isinstance(args, list) and args else "nccl-tests"
    hosts = [clean(d.get("hostname"), 60) for d in doc.get("devices") or [] if isinstance(d, dict) and d.get("hostname")]
    if hosts:
        res.host = ",".join(dict.fromkeys(hosts))
    for item in results:
        if not isinstance(item, dict):
            continue
        for in_place, key in ((False, "out_of_place"), (True, "in_place")):
            half = item.get(key)
            if isinstance(half, dict):
                res.rows.append(_json_row(name, item, half, item.get(f"{key}_per_iter"), in_place))
    _units(res)
    return res


def _f(d: Any, key: str) -> float | None:
    v = d.get(key) if isinstance(d, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _json_row(name: str, item: dict[str, Any], half: dict[str, Any], per_iter: Any, in_place: bool) -> dict[str, Any]:
    size = item.get("size")
    nwrong = _f(half, "nwrong")
    return row(path=name, test=name, size=size if isinstance(size, int) and not isinstance(size, bool) else None,
               in_place=in_place, iters=item.get("actual_iterations") if isinstance(item.get("actual_iterations"), int) else None,
               lat_mean_us=_f(half, "time") if "time" in half else _f(half, "cpu_time"),
               bw_gbps=_f(half, "alg_bw"), busbw_gbps=_f(half, "bus_bw"),
               verified=None if nwrong is None else nwrong == 0,
               lat_min_us=_f(per_iter, "min_us"), lat_max_us=_f(per_iter, "max_us"),
               lat_p50_us=_f(per_iter, "p50_us"), lat_p99_us=_f(per_iter, "p99_us"))
