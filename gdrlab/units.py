"""Message sizes as people write them: ``8``, ``4K``, ``1M``, ``8,4K,1M`` and ranges ``8:64M``."""
from __future__ import annotations

import re
from typing import Iterable, Union, cast

__all__ = ["parse_size", "parse_sizes", "format_size"]

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """``"4K"`` -> 4096. Units are binary (K = 1024). Raises ValueError for anything else."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m or m.group(2).upper() not in _UNITS:
            raise ValueError(f"not a size: {text!r} (examples: 8, 4K, 1M, 1G)")
        value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value <= 0:
        raise ValueError(f"size must be at least 1 byte, got {text!r}")
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
                raise ValueError(f"range {item!r} runs backwards")
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
