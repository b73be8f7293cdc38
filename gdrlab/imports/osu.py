"""OSU micro-benchmarks (MVAPICH): osu_latency, osu_bw, osu_bibw, osu_mbw_mr as printed on stdout.

Units as OMB defines them (README-OMB, mpi/pt2pt/*.c): latency is one-way, half of a ping-pong
round trip, in microseconds (the kit's definition, no conversion); "MB/s" is 10**6 bytes per
second (divided by 1000 here for GB/s); osu_bibw reports both directions summed and osu_mbw_mr
the sum over all sender/receiver pairs.
"""
from __future__ import annotations

import re
from typing import Any

from ..units import to_gbps
from ._common import BadOutput, Result, clean, number, row, whole

TOOL = "osu"
_TITLE = re.compile(r"^#\s*OSU\s+(.*?)\s+(v\S+)\s*$")
_TESTS = (("Multiple Bandwidth", "osu_mbw_mr"), ("Bi-Directional Bandwidth", "osu_bibw"),
          ("Bandwidth", "osu_bw"), ("Multi Latency", "osu_multi_lat"), ("Latency", "osu_latency"))


def _test(title: str) -> str:
    for words, name in _TESTS:
        if words.lower() in title.lower():
            return name
    return "osu"


def _columns(header: str) -> list[str]:
    """'# Size   Avg Latency(us)   Min Latency(us)' -> ['Size', 'Avg Latency(us)', 'Min Latency(us)']."""
    return [c.strip() for c in re.split(r"\s{2,}|\t", header.lstrip("#").strip()) if c.strip()]


def read_text(text: str, file: str) -> Result:
    """Rows from an OSU benchmark's stdout."""
    res = Result(TOOL)
    lines = text.splitlines()
    title = next((m for m in map(_TITLE.match, lines) if m), None)
    name = _test(title.group(1)) if title else "osu"
    if title:
        res.version = clean(title.group(2), 30)
        res.note(f"OSU {clean(title.group(1), 60)}")
    opts = [clean(line.lstrip("# "), 80) for line in lines
            if line.startswith("#") and ("Buffer on" in line or "pairs:" in line or "Datatype" in line)]
    res.options = "; ".join(opts) or None
    at = next((i for i, line in enumerate(lines) if re.match(r"^#\s*Size\b", line)), None)
    if at is None:
        raise BadOutput(f"{clean(file, 200)}: no '# Size ...' header (OSU output cut short?)")
    cols = _columns(lines[at])
    for line in lines[at + 1:]:
        tokens = line.split()
        if not tokens or whole(tokens[0]) is None or len(tokens) < 2:
            continue
        res.rows.append(_row(res, name, dict(zip(cols, tokens))))
    return res


def _pick(values: dict[str, str], *keys: str) -> float | None:
    for key in keys:
        for col, v in values.items():
            if col.replace(" ", "").lower() == key.replace(" ", "").lower():
                return number(v)
    return None


def _row(res: Result, name: str, values: dict[str, str]) -> dict[str, Any]:
    size = whole(values.get("Size", ""))
    if name in ("osu_bw", "osu_bibw", "osu_mbw_mr"):
        mbps = _pick(values, "Bandwidth (MB/s)", "MB/s")
        res.convert("bandwidth: OSU MB/s (10^6 B/s) -> GB/s (10^9 B/s)")
        if name != "osu_bw":
            res.note(f"{name}: bandwidth summed over {'both directions' if name == 'osu_bibw' else 'all pairs'}")
        rate = _pick(values, "Messages/s")
        return row(path=name, test=name, size=size, direction="bidir" if name == "osu_bibw" else "uni",
                   bw_gbps=None if mbps is None else to_gbps(mbps, "MB/s"),
                   msg_rate_mps=None if rate is None else rate / 1e6)
    res.note("OSU latency is one-way (half the ping-pong round trip), as the kit's: no conversion")
    return row(path=name, test=name, size=size, iters=whole(values.get("Iterations", "")),
               lat_mean_us=_pick(values, "Latency (us)", "Avg Latency(us)"),
               lat_min_us=_pick(values, "Min Latency(us)"), lat_max_us=_pick(values, "Max Latency(us)"),
               lat_p50_us=_pick(values, "P50 Tail Lat(us)"), lat_p99_us=_pick(values, "P99 Tail Lat(us)"))
