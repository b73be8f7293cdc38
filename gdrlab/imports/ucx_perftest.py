"""ucx_perftest (openucx/ucx, src/tools/perf): the results table it prints for tag_lat, tag_bw,
ucp_put_bw, ucp_am_lat and the other tests.

Units as UCX defines them: "MB/s" is ``UCS_MBYTE`` = 2**20 bytes per second (src/ucs/sys/math.h),
converted here to GB/s; for ping-pong tests (``*_lat``) the latency columns are already one-way
(libperf.c ``ucx_perf_calc_result`` divides the round trip by 2); bandwidth tests print a
per-message "overhead", which is not a latency and is not carried. The row taken is the ``Final:``
line where the run printed one, else the last line; ``typical``/``50.0%ile`` goes to
``lat_p50_us`` and ``overall`` to ``lat_mean_us`` and ``bw_gbps``.
"""
from __future__ import annotations

import re
from typing import Any

from ..units import to_gbps
from ._common import BadOutput, Result, clean, number, row, whole

TOOL = "ucx_perftest"
#: ucx_perftest's default message size when ``-s`` is not given (its usage text: "(8)").
DEFAULT_SIZE = 8
_BOX = re.compile(r"^\|\s*(Test|Message size|Send memory|Recv memory|API|Data layout):\s*(.*?)\s*\|\s*$")
_CMD = re.compile(r"ucx_perftest\b(.*)$")
_BANNER = re.compile(r"^=+\s+(\w+)\s+=+\s*$")
_LOG_HOST = re.compile(r"^\[\d+\.\d+\]\s+\[([^:\]\s]+):\d+")
_UCX_VERSION = re.compile(r"UCX\s+INFO\s+Version\s+(\S+)")
_ROW = re.compile(r"^\s*(?:\[thread\s+\d+\]|Final:)?\s*\d+\s+[-0-9.]+\s+[-0-9.]+\s+[-0-9.]+\s+[-0-9.]+\s+[-0-9.]+\s+\d+\s+\d+\s*$")


def _command(lines: list[str]) -> tuple[str | None, int | None, str | None]:
    """(test, size, options) from a ``ucx_perftest ... -t T [-s S]`` line, when the output has one; the
    size is ucx_perftest's default when the line has no ``-s``."""
    for line in lines:
        m = _CMD.search(line)
        if not m or "-t" not in m.group(1):
            continue
        args = m.group(1).split()
        test = args[args.index("-t") + 1] if "-t" in args[:-1] else None
        size = whole(args[args.index("-s") + 1]) if "-s" in args[:-1] else DEFAULT_SIZE
        return (clean(test, 40) if test else None), size, clean(" ".join(args), 200)
    return None, None, None


def read_text(text: str, file: str) -> Result:
    """Rows from ucx_perftest's stdout (the client's side)."""
    res = Result(TOOL)
    lines = text.splitlines()
    box = {m.group(1): clean(m.group(2), 60) for m in map(_BOX.match, lines) if m}
    test, size, options = _command(lines)
    banner = next((m.group(1) for m in map(_BANNER.match, lines) if m), None)
    test = test or (clean(banner, 40) if banner else None)
    res.options = options
    for line in lines:
        if (m := _LOG_HOST.match(line)) and res.host is None:
            res.host = clean(m.group(1), 60)
        if (m := _UCX_VERSION.search(line)):
            res.version = clean(m.group(1), 30)
    if whole(box.get("Message size", "")) is not None:
        size = whole(box["Message size"])
    elif size == DEFAULT_SIZE and options is not None and "-s" not in options.split():
        res.note(f"the command line has no -s: ucx_perftest's default message size, {DEFAULT_SIZE} bytes")
    if size is None:
        res.note("the output states no message size (no command line, no header box): size left empty")
    header = next((line for line in lines if "bandwidth (MB/s)" in line), None)
    if header is None:
        raise BadOutput(f"{clean(file, 200)}: no ucx_perftest results table ('bandwidth (MB/s)')")
    name = test or box.get("Test") or ("ucx_perftest latency" if "latency (usec)" in header else "ucx_perftest bandwidth")
    # older versions head every table "latency (usec)"; a *_bw test's column is a per-message overhead
    latency = "latency (usec)" in header and not name.endswith("_bw") and "bandwidth" not in name
    found = [line for line in lines if _ROW.match(line)]
    if not found:
        raise BadOutput(f"{clean(file, 200)}: no ucx_perftest result line (output cut short?)")
    final = next((line for line in found if line.lstrip().startswith("Final:")), None)
    if final is None and len(found) > 1:
        res.note("no 'Final:' line: the last progress line is taken")
    res.rows.append(_row(res, name, size, (final or found[-1]), latency))
    return res


def _row(res: Result, name: str, size: int | None, line: str, latency: bool) -> dict[str, Any]:
    tokens = re.sub(r"^\s*(\[thread\s+\d+\]|Final:)", "", line).split()
    iters, typical, _average, overall, _bw_avg, bw_overall, _rate_avg, rate_overall = tokens[:8]
    res.convert("bandwidth: ucx_perftest MB/s (2^20 B/s) -> GB/s (10^9 B/s)")
    bw = number(bw_overall)
    rate = number(rate_overall)
    values: dict[str, Any] = {"path": name, "test": name, "size": size, "iters": whole(iters),
                              "bw_gbps": None if bw is None else to_gbps(bw, "MiB/s"),
                              "msg_rate_mps": None if rate is None else rate / 1e6}
    if latency:
        res.note("ucx_perftest latency of a ping-pong test is one-way already (round trip / 2): no conversion")
        values.update(lat_p50_us=number(typical), lat_mean_us=number(overall))
    return row(**values)
