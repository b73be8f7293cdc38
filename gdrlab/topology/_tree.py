"""The PCIe tree both readers (hwloc XML and sysfs) build, and nvidia-smi's distance codes on it.

A tree is made of :class:`Node` objects: the machine, CPU packages (sockets), PCIe host bridges,
PCI bridges and PCI devices. Bridges get a role (``rootport``, ``usp`` or ``dsp``) so that a PCIe
switch, which Linux and hwloc show as one upstream port with several downstream ports below it,
can be counted as *one* switch, as nvidia-smi and NCCL count it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np

__all__ = ["Node", "pcie_code", "path_between", "assign_bridge_roles", "format_cpulist",
           "parse_cpulist", "CODE_ORDER", "PairCodes", "MAX_PUS", "MAX_LISTED", "MAX_BITMAP_WORDS",
           "BitmapTooWide", "bitmap_value", "bitmap_bits", "parse_bitmap"]

# From closest to farthest; NV# is handled separately (it wins over PCIe where present).
CODE_ORDER = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
# Processing units (CPU threads): a bitmap or CPU list names PUs below MAX_PUS (2**21, 256 times
# the 8,192 PUs of the largest real hwloc export), and a reader lists at most MAX_LISTED CPUs and
# NUMA nodes in all (32 times that export): a bitmap costs a bit per PU, a list ~40 bytes an entry.
MAX_PUS = 1 << 21
MAX_LISTED = 1 << 18
MAX_BITMAP_WORDS = MAX_PUS // 32  # an hwloc bitmap's 32-bit words
_MAX_WORD_CHARS = 10  # "0xffffffff"; hwloc writes no spaces, a few are let through
_HEX_WORD = re.compile(r"(?:0[xX])?[0-9a-fA-F]{1,8}")
_HWLOC_WORDS = re.compile(r"0x[0-9a-fA-F]{8}(?:,0x[0-9a-fA-F]{8})*")  # as lstopo writes them


@dataclass(eq=False)
class Node:
    """One object of the tree.

    ``kind`` is one of ``machine``, ``package``, ``hostbridge``, ``bridge`` or ``device``.
    ``numa_nodes`` is the set of NUMA nodes the object is local to (empty when unknown).
    """

    kind: str
    label: str
    parent: "Node | None" = None
    children: list["Node"] = field(default_factory=list)
    bus_id: str | None = None
    vendor_id: int | None = None
    device_id: int | None = None
    class_id: int | None = None  # 16-bit base class + subclass, e.g. 0x0302
    numa_nodes: frozenset[int] = frozenset()
    socket: int | None = None
    role: str = ""  # bridges: rootport, usp, dsp
    switch_id: int | None = None
    attrs: dict = field(default_factory=dict)

    def add(self, child: "Node") -> "Node":
        child.parent = self
        self.children.append(child)
        return child

    def ancestors(self) -> list["Node"]:
        """Self first, then parent, ..., root."""
        out: list[Node] = []
        node: Node | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def walk(self) -> Iterator["Node"]:
        """Self, then every descendant, depth first in child order (no recursion: any depth)."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def host_bridge(self) -> "Node | None":
        for a in self.ancestors():
            if a.kind == "hostbridge":
                return a
        return None

    def locality(self) -> frozenset[int]:
        """NUMA nodes of the nearest ancestor (or self) that knows them."""
        for a in self.ancestors():
            if a.numa_nodes:
                return a.numa_nodes
        return frozenset()

    def describe(self) -> str:
        if self.bus_id:
            return f"{self.label} ({self.bus_id})"
        return self.label


def assign_bridge_roles(root: Node) -> None:
    """Label bridges as root port, switch upstream port (usp) or downstream port (dsp).

    A bridge right below a host bridge is a root port. Below a root port or a downstream port,
    a bridge is the upstream port of a new switch; below an upstream port it is one of that
    switch's downstream ports. Every PCIe switch is built this way (one upstream port, an
    internal bus, downstream ports), so the alternation needs no config-space reads.
    """
    next_id = 0
    for child in root.walk():  # parents come before their children
        p = child.parent
        if child.kind != "bridge" or p is None:
            continue
        if p.kind not in ("bridge", "device"):  # below a host bridge (or a package/machine)
            child.role, child.switch_id = "rootport", None
        elif p.kind == "bridge" and p.role == "usp":
            child.role, child.switch_id = "dsp", p.switch_id
        else:  # below a root port, a downstream port or (oddly) a device
            child.role, child.switch_id = "usp", next_id
            next_id += 1


def path_between(a: Node, b: Node) -> tuple[list[Node], Node]:
    """The nodes from ``a`` up to the common ancestor and down to ``b``; and that ancestor."""
    up_a = a.ancestors()
    up_b = b.ancestors()
    ids_b = {id(n) for n in up_b}
    lca = next(n for n in up_a if id(n) in ids_b)
    left = up_a[: up_a.index(lca) + 1]
    right = up_b[: up_b.index(lca)]
    return left + list(reversed(right)), lca


class _Chain:
    """What the codes need of one node, read once: its ancestors from the root down, the number
    of PCIe units (switches, lone bridges) on the way down to each, and its NUMA locality."""

    __slots__ = ("down", "loc", "loc_key", "units")

    def __init__(self, node: Node, loc_keys: dict[frozenset[int], int]) -> None:
        up = node.ancestors()
        self.down = up[::-1]
        # units[i]: distinct PCIe units among down[0..i]. A switch is its upstream port and the
        # downstream port below it, always adjacent on a chain, so a unit is counted where it starts.
        units: list[int] = []
        count, prev = 0, None
        for n in self.down:
            key = _unit(n)
            if key is not None and key != prev:
                count += 1
            prev = key
            units.append(count)
        self.units = units
        hb = next((a for a in up if a.kind == "hostbridge"), None)
        start = up.index(hb) if hb is not None else 0
        self.loc: frozenset[int] = next((a.numa_nodes for a in up[start:] if a.numa_nodes), frozenset())
        self.loc_key = loc_keys.setdefault(self.loc, len(loc_keys))


def _unit(n: Node) -> tuple[str, int | None] | None:
    if n.kind != "bridge":
        return None
    # A switch's upstream and downstream ports are one unit; a root port is its own.
    return ("switch", n.switch_id) if n.role in ("usp", "dsp") else ("bridge", id(n))


class PairCodes:
    """nvidia-smi's PCIe codes for many pairs of nodes of one tree.

    Each node's ancestor chain is read once (:class:`_Chain`); a pair then costs a binary search
    for the common ancestor (O(log depth)) and a few lookups, so a matrix of n devices is O(n^2)
    pairs at O(log depth) each, plus O(n * depth) once. The tree must not change while in use.
    """

    def __init__(self) -> None:
        self._chains: dict[int, tuple[Node, _Chain]] = {}
        self._loc_keys: dict[frozenset[int], int] = {}

    def _chain(self, node: Node) -> _Chain:
        got = self._chains.get(id(node))
        if got is None:
            got = self._chains[id(node)] = (node, _Chain(node, self._loc_keys))  # the node keeps its id
        return got[1]

    def code(self, a: Node, b: Node, reason: bool = True) -> tuple[str, str]:
        """The code between ``a`` and ``b`` and, when ``reason``, why in words (else "")."""
        if a is b:
            return "X", "same device"
        ca, cb = self._chain(a), self._chain(b)
        da, db = ca.down, cb.down
        if da[0] is not db[0]:
            raise ValueError(f"{a.describe()} and {b.describe()} are not in one tree")
        lo, hi = 0, min(len(da), len(db)) - 1  # da[lo] is db[lo]; find the deepest such lo
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if da[mid] is db[mid]:
                lo = mid
            else:
                hi = mid - 1
        lca = da[lo]
        if lca.kind in ("bridge", "device"):
            # units on the path a..lca..b: those below the lca on each side, plus the lca's own
            units = ca.units[-1] + cb.units[-1] - 2 * ca.units[lo] + (1 if lca.kind == "bridge" else 0)
            if units <= 1:
                return "PIX", (f"through one PCIe switch or bridge ({lca.describe()})" if reason else "")
            return "PXB", (f"through {units} PCIe switches, no host bridge (meet at {lca.describe()})"
                           if reason else "")
        if lca.kind == "hostbridge":
            return "PHB", (f"through PCIe host bridge {lca.describe()}" if reason else "")
        loc_a, loc_b = ca.loc, cb.loc
        if loc_a and ca.loc_key == cb.loc_key and len(loc_a) == 1:
            return "NODE", (f"between two host bridges of NUMA node {next(iter(loc_a))}" if reason else "")
        if not reason:
            return "SYS", ""
        if loc_a and loc_b:
            return "SYS", (f"across the SMP interconnect (NUMA {format_cpulist(sorted(loc_a))} to "
                           f"{format_cpulist(sorted(loc_b))})")
        return "SYS", "between host bridges whose NUMA locality is unknown (assumed across the SMP interconnect)"


def pcie_code(a: Node, b: Node) -> tuple[str, str]:
    """nvidia-smi's PCIe code for two devices, with the reason in words.

    X: the same device. PIX: at most one PCIe switch (or one bridge) on the path. PXB: several
    switches, no host bridge. PHB: through a PCIe host bridge. NODE: between host bridges of one
    NUMA node. SYS: across the SMP interconnect between NUMA nodes (QPI/UPI/Infinity Fabric).
    For many pairs, :class:`PairCodes` reads each node's ancestors once.
    """
    return PairCodes().code(a, b)


def parse_cpulist(text: str, limit: int = MAX_LISTED) -> list[int]:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]``; raises ValueError on junk.

    CPU numbers must be below :data:`MAX_PUS` and the list may name at most ``limit`` CPUs
    (checked before a range is expanded), so a hostile ``0-4294967295`` costs nothing.
    """
    out: list[int] = []
    text = text.strip()
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            first, last = _cpu_number(lo), _cpu_number(hi)
            if len(out) + max(0, last - first + 1) > limit:
                raise ValueError(f"the CPU list names more than {limit} CPUs")
            out.extend(range(first, last + 1))
        elif part:
            if len(out) >= limit:
                raise ValueError(f"the CPU list names more than {limit} CPUs")
            out.append(_cpu_number(part))
    return out


def _cpu_number(token: str) -> int:
    t = token.strip()
    # bounded before int(): Python refuses (and is slow on) numbers of thousands of digits
    value = int(t) if len(t) <= len(str(MAX_PUS)) else -1
    if not 0 <= value < MAX_PUS:
        shown = t if len(t) <= 20 else t[:20] + "..."
        raise ValueError(f"{shown!r} is not a CPU number below {MAX_PUS}")
    return value


def format_cpulist(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"`` (the form numactl and sysfs use)."""
    cpus = sorted(set(int(c) for c in cpus))
    if not cpus:
        return ""
    parts, start, prev = [], cpus[0], cpus[0]
    for c in cpus[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
        if c is not None:
            start = prev = c
    return ",".join(parts)


class BitmapTooWide(ValueError):
    """A bitmap of more than :data:`MAX_BITMAP_WORDS` words."""


def bitmap_value(text: str | None, max_words: int = MAX_BITMAP_WORDS) -> int:
    """An hwloc bitmap (``"0x00000303,0x03030000,,0x03030303"``) as one int, bit i for PU i.

    Words are 32-bit hexadecimal, most significant first; an empty word is zero; a leading
    ``0xf...f`` (hwloc's "all higher bits set") is read as zero. The width is checked from the
    text (its length, then its commas) before any word is read: more than ``max_words`` words
    raise :class:`BitmapTooWide`. Linear in the text's length; raises ValueError for anything else.
    """
    if not text:
        return 0
    # Each word is at most 10 characters and a comma; a little slack for spaces around words.
    if len(text) > max_words * (_MAX_WORD_CHARS + 1) * 2 or text.count(",") >= max_words:
        raise BitmapTooWide(f"{text.count(',') + 1} words ({len(text)} characters) is wider than {max_words} 32-bit "
                            f"words ({max_words * 32} PUs; real exports have at most 8,192)")
    if _HWLOC_WORDS.fullmatch(text):  # the common case, without a string per word
        return int(text.replace(",0x", ""), 0)  # one 0x prefix: base 16, no limit on the digits
    words = text.strip().split(",")
    digits = []
    for i, w in enumerate(words):  # most significant word first
        w = w.strip()
        if not w or (i == 0 and w.lower().startswith("0xf...f")):
            digits.append("00000000")
            continue
        if not _HEX_WORD.fullmatch(w):
            shown = w if len(w) <= 20 else w[:20] + "..."
            raise ValueError(f"{shown!r} is not a 32-bit hexadecimal word")
        digits.append(w[2:].rjust(8, "0") if w[:2] in ("0x", "0X") else w.rjust(8, "0"))
    return int("".join(digits), 16)  # base 16: linear, and no limit on the digits


def bitmap_bits(value: int) -> list[int]:
    """The set bits of :func:`bitmap_value`'s int, in increasing order."""
    if value <= 0:
        return []
    raw = np.frombuffer(value.to_bytes((value.bit_length() + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()


def parse_bitmap(text: str | None) -> list[int]:
    """An hwloc bitmap (``"0x00000303,0x03030000,,0x03030303"``) to the sorted list of set bits.

    Words are 32-bit hexadecimal, most significant first; an empty word is zero; a leading
    ``0xf...f`` (hwloc's "all higher bits set") is read as zero. Linear in the text's length.
    Raises ValueError for anything else, and :class:`BitmapTooWide` (a ValueError) beyond
    :data:`MAX_BITMAP_WORDS` words, checked before anything is expanded.
    """
    return bitmap_bits(bitmap_value(text))
