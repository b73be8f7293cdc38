"""Could this PCI tree exist? PCIe's bus-numbering rules, checked on a tree from hwloc XML or sysfs.

Every PCI-to-PCI bridge (a root port, a switch's upstream or downstream port) holds three bus
numbers: primary (its own bus), secondary (the bus right below it) and subordinate (the highest
bus below it). Configuration requests are routed by them, so firmware and the kernel must number
buses such that (PCI-to-PCI Bridge Architecture Specification 1.2, ch. 3: the Primary, Secondary
and Subordinate Bus Number registers of the type 1 header, and how type 1 configuration requests
are forwarded by them; PCI Express keeps that header for its ports):

* ``secondary-bus``: every function directly below a bridge is on the bridge's secondary bus;
* ``bus-range``: every function deeper below is inside secondary..subordinate, in the same domain;
* ``nesting``: a child bridge's range lies inside its parent's, after the parent's secondary bus
  (which is the child's own bus); ``secondary <= subordinate``;
* ``overlap``: two bridges below one parent have disjoint ranges (a request has one route);
* ``duplicate-address``: no two functions share one domain:bus:device.function;
* ``one-device-per-link``: a PCIe link joins one port to one device, so the functions below a
  root port or a switch's downstream port belong to one device (a PCIe Downstream Port leads to
  a link with only Device 0 on it: PCI Express Base Specification r3.1, §7.3.1, the rule Linux
  relies on in ``only_one_child()`` of drivers/pci/probe.c; under ARI that one device may
  have up to 256 functions). Functions of different vendors there are two
  devices on one link. A conventional PCI bus (a PCIe-to-PCI bridge) may hold several devices;
  hwloc's export does not say which bridges are conventional, so this rule reads them all as
  PCIe ports.

Where a bridge's range is not recorded (sysfs trees captured without ``secondary_bus_number``),
it is inferred from the buses of the devices below it, and only the rules that can still fail
are applied.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from ._tree import Node

if TYPE_CHECKING:
    from ._topo import Topology

_Add = Callable[[str, Node, str], None]  # (rule, node at fault, message)

__all__ = ["PciTreeWarning", "check_pci_tree", "format_problems"]


_RULE_ORDER = ("duplicate-address", "secondary-bus", "bus-range", "nesting", "overlap", "one-device-per-link")


class PciTreeWarning(UserWarning):
    """A PCI tree that no real machine can have (a hand-edited or damaged export)."""


def _bus(node: Node) -> tuple[int, int, int] | None:
    """(domain, bus, device number) of ``DDDD:BB:DD.F``; None when absent or malformed."""
    try:
        dom, bus, devfn = (node.bus_id or "").split(":")
        return int(dom, 16), int(bus, 16), int(devfn.split(".")[0], 16)
    except ValueError:
        return None


def _name(node: Node) -> str:
    return node.describe() if node.kind != "hostbridge" else node.label


def _ranges(root: Node) -> dict[int, tuple[int, int, int, bool]]:
    """id(bridge or host bridge) -> (domain, secondary, subordinate, inferred)."""
    out: dict[int, tuple[int, int, int, bool]] = {}
    order = list(root.walk())  # parents before children
    buses = {id(n): _bus(n) for n in order}
    # the highest bus below each node, children first: one pass, not a walk of every subtree
    highest: dict[int, int] = {}
    for n in reversed(order):
        top = -1
        for c in n.children:
            b = buses[id(c)]
            top = max(top, highest[id(c)], b[1] if b is not None else -1)
        highest[id(n)] = top
    for n in order:
        if n.kind not in ("bridge", "hostbridge"):
            continue
        known = n.attrs.get("bus_range")
        if known is not None:
            out[id(n)] = (*known, False)
            continue
        direct = [b for b in (buses[id(c)] for c in n.children) if b is not None]
        if direct:
            out[id(n)] = (direct[0][0], min(b[1] for b in direct), highest[id(n)], True)
    return out


def check_pci_tree(tree: Topology | Node) -> list[dict]:
    """Problems that make a PCI tree impossible on real hardware; ``[]`` when it could exist.

    Parameters
    ----------
    tree : Topology or Node
        A :class:`~gdrlab.topology.Topology` or the root :class:`Node` of its tree.

    Returns
    -------
    list of dict
        One per problem, the bus-numbering ones first: ``rule`` (``duplicate-address``,
        ``secondary-bus``, ``bus-range``, ``nesting``, ``overlap``, ``one-device-per-link``),
        ``where`` (the PCI address or host bridge at fault) and ``message`` (one sentence).
    """
    root = cast(Node, getattr(tree, "root", tree))  # a Topology gives its root; a Node is one
    ranges = _ranges(root)
    problems: list[dict] = []

    def add(rule: str, node: Node, message: str) -> None:
        problems.append({"rule": rule, "where": node.bus_id or node.label, "message": message})

    for n in root.walk():
        r = ranges.get(id(n))
        if r is not None and r[1] > r[2]:
            add("nesting", n, f"{_name(n)} has secondary bus {r[1]:02x} above its subordinate bus {r[2]:02x}")
        if n.kind in ("bridge", "device"):
            _check_function(n, ranges, add)
        if n.kind in ("bridge", "hostbridge"):
            _check_siblings(n, ranges, add)
        if n.kind == "bridge" and n.role in ("rootport", "dsp"):
            vendors = {c.vendor_id for c in n.children if c.vendor_id is not None}
            if len(vendors) > 1:
                shown = ", ".join(c.describe() for c in n.children)
                add("one-device-per-link", n, f"{_name(n)} is a PCIe port (one link, one device) but has "
                                              f"functions of {len(vendors)} vendors below it: {shown}")
    seen: dict[str, Node] = {}
    for n in root.walk():
        if n.kind in ("bridge", "device") and n.bus_id:
            if n.bus_id in seen:
                add("duplicate-address", n, f"{n.describe()} has the same PCI address as "
                                            f"{seen[n.bus_id].describe()}")
            seen.setdefault(n.bus_id, n)
    problems.sort(key=lambda p: _RULE_ORDER.index(p["rule"]))
    return problems


def _check_function(n: Node, ranges: dict, add: _Add) -> None:
    """``n`` against the nearest ancestor whose bus range is known."""
    me = _bus(n)
    if me is None:
        return
    anc = n.parent
    while anc is not None and id(anc) not in ranges:
        if anc.kind not in ("bridge", "hostbridge"):
            return  # below a device that hosts its own PCI domain (Intel VMD): its numbering is its own
        anc = anc.parent
    if anc is None:
        return
    dom, sec, sub, inferred = ranges[id(anc)]
    how = " (inferred from the devices below it)" if inferred else ""
    where = f"{_name(anc)}, range [{sec:02x}-{sub:02x}]{how}"
    if me[0] != dom:
        add("bus-range", n, f"{n.describe()} is in PCI domain {me[0]:04x} but below {where} of domain {dom:04x}")
    elif anc is n.parent and me[1] != sec:
        add("secondary-bus", n, f"{n.describe()} sits directly below {where} but is on bus {me[1]:02x}, "
                                f"not its secondary bus {sec:02x}")
    elif not (sec <= me[1] <= sub):
        add("bus-range", n, f"{n.describe()} is on bus {me[1]:02x}, outside {where}")
    mine = ranges.get(id(n))
    if mine is not None and anc is n.parent and not (sec < mine[1] and mine[2] <= sub):
        add("nesting", n, f"{n.describe()} routes buses [{mine[1]:02x}-{mine[2]:02x}], which do not fit below "
                          f"its own bus inside {where}")


def _check_siblings(n: Node, ranges: dict, add: _Add) -> None:
    kids = sorted(((ranges[id(c)][1:3], c) for c in n.children if id(c) in ranges and c.kind == "bridge"),
                  key=lambda t: t[0])
    for (a_range, a), (b_range, b) in zip(kids, kids[1:]):
        if b_range[0] <= a_range[1]:
            add("overlap", b, f"{b.describe()} [{b_range[0]:02x}-{b_range[1]:02x}] and {a.describe()} "
                              f"[{a_range[0]:02x}-{a_range[1]:02x}] below {_name(n)} route overlapping buses")


def format_problems(problems: list[dict]) -> str:
    """One line: how many problems, the first ones, and what that means."""
    shown = "; ".join(p["message"] for p in problems[:3])
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return (f"this PCI tree cannot exist on real hardware: {shown}{more}. It is hand-edited or damaged: "
            "do not read it as a real machine")
