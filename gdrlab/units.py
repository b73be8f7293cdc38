"""Message sizes as people write them: ``8``, ``4K``, ``1M``, ``8,4K,1M`` and ranges ``8:64M``;
and the rates and times other tools print, converted to the kit's units (GB/s = 1e9 bytes per
second, one-way microseconds)."""
from __future__ import annotations

import re
from typing import Iterable, Union, cast

__all__ = ["parse_size", "parse_sizes", "format_size", "MAX_SIZE", "RATE_UNITS", "to_gbps", "one_way_us",
           "ns_to_us"]

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
# ASCII only: Python's int() and \d also take other scripts' digits (full-width "８" and the like).
_SIZE = re.compile(r"^\s*([0-9]+)\s*([A-Za-z]*)\s*$", re.ASCII)
#: The largest size accepted: what a signed 64-bit integer holds (8 EiB less one byte).
MAX_SIZE = 2**63 - 1
_MAX_DIGITS = len(str(MAX_SIZE))


def _shown(text: object, limit: int = 40) -> str:
    """``text`` for one line of an error: quoted, non-ASCII and control characters escaped
    (``'\\uff18'``), cut at ``limit`` characters."""
    shown = ascii(text)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(str(text))} characters)"


def parse_size(text: str | int) -> int:
    """``"4K"`` -> 4096. Units are binary (K = 1024); digits are ASCII 0-9; at most
    :data:`MAX_SIZE`. Raises ValueError, with one line saying why, for anything else."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        value = text
    else:
        text = str(text)
        m = _SIZE.match(text)
        if not m or m.group(2).upper() not in _UNITS:
            ascii_note = "" if text.isascii() else "digits 0-9 and units in ASCII; "
            raise ValueError(f"not a size: {_shown(text)} ({ascii_note}examples: 8, 4K, 1M, 1G)")
        digits = m.group(1).lstrip("0")
        if len(digits) > _MAX_DIGITS:  # before int(): Python refuses more than 4300 digits
            raise ValueError(f"{digits[:20]}... ({len(digits)} digits) is too large (at most {MAX_SIZE} bytes)")
        value = int(digits or "0") * _UNITS[m.group(2).upper()]
    if value <= 0:
        raise ValueError(f"size must be at least 1 byte, got {_shown(text)}")
    if value > MAX_SIZE:
        raise ValueError(f"{_shown(text)} is too large (at most {MAX_SIZE} bytes)")
    return value


def parse_sizes(spec: str | int | Iterable[str | int]) -> list[int]:
    """A list of sizes from ``"8,4K,1M"``, a range ``"8:64M"`` (every power of two from the first
    to the last; both ends included even if not powers of two), a mix of the two, an int, or an
    iterable of those."""
    items: list[str | int]
    if isinstance(spec, str):
        items = [p for p in spec.split(",") if p.strip()]
    elif isinstance(spec, int) and not isinstance(spec, bool):
        items = [spec]
    else:
        items = list(cast(Iterable[Union[str, int]], spec))  # a bool is refused here: not iterable
    if not items:
        raise ValueError("no sizes given")
    out: list[int] = []
    for item in items:
        if isinstance(item, str) and ":" in item:
            lo_s, _, hi_s = item.partition(":")
            lo, hi = parse_size(lo_s), parse_size(hi_s)
            if lo > hi:
                raise ValueError(f"range {_shown(item)} runs backwards")
            size = lo
            while size <= hi:
                out.append(size)
                size = 1 << size.bit_length() if size & (size - 1) else size * 2
            if out[-1] != hi:
                out.append(hi)
        else:
            out.append(parse_size(item))
    return sorted(set(out))


def format_size(n: int) -> str:
    """4096 -> '4K', 1536 -> '1536'."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


#: Bytes per second in one unit of each rate the benchmark tools print. ``MiB/s`` is perftest's
#: "MB/sec" and ucx_perftest's "MB/s" (2**20 bytes); ``MB/s`` is OSU's (10**6 bytes); ``Gb/s`` is
#: perftest's ``--report_gbits`` "Gb/sec" (10**9 bits); ``GB/s`` is nccl-tests' and nvbandwidth's
#: (10**9 bytes), the kit's own unit.
RATE_UNITS: dict[str, float] = {"MiB/s": float(1 << 20), "MB/s": 1e6, "Gb/s": 1e9 / 8, "GB/s": 1e9}


def to_gbps(value: float, unit: str) -> float:
    """``value`` in ``unit`` (a key of :data:`RATE_UNITS`) as GB/s (10**9 bytes per second)."""
    try:
        scale = RATE_UNITS[unit]
    except KeyError:
        raise ValueError(f"unknown rate unit {_shown(unit)}; known: {', '.join(RATE_UNITS)}") from None
    return float(value) * scale / 1e9


def one_way_us(round_trip_us: float) -> float:
    """Half of a round-trip time: the one-way latency the kit reports (as perftest and OSU do)."""
    return float(round_trip_us) / 2.0


def ns_to_us(value_ns: float) -> float:
    """Nanoseconds as microseconds."""
    return float(value_ns) / 1000.0
