"""PCI BARs from a sysfs ``resource`` file, laid out by their flags.

Each of the first six lines of ``/sys/bus/pci/devices/<bdf>/resource`` is one BAR *slot*:
``start end flags`` in hex. A 64-bit memory BAR (flag ``IORESOURCE_MEM_64``) uses two slots, its
own and the next one (the upper half, listed as zeros), so slot numbers depend on the widths of
the BARs before it. NVIDIA numbers a GPU's *memory* BARs in order (BAR0 registers, BAR1 the
window onto GPU memory), so BAR1 is the second memory BAR: slot 2 when BAR0 is 64-bit (Hopper),
slot 1 when BAR0 is 32-bit (most earlier GPUs). The flag values are those of
``include/linux/ioport.h``.
"""
from __future__ import annotations

__all__ = ["IORESOURCE_IO", "IORESOURCE_MEM", "IORESOURCE_PREFETCH", "IORESOURCE_MEM_64", "bar_layout",
           "nvidia_bar_name", "device_kind"]

IORESOURCE_IO = 0x00000100
IORESOURCE_MEM = 0x00000200
IORESOURCE_PREFETCH = 0x00002000
IORESOURCE_MEM_64 = 0x00100000
_SLOTS = 6  # lines 0-5 are BARs; 6 is the expansion ROM, 7-12 bridge windows

_KINDS = {0x0100: "SCSI storage", 0x0101: "IDE storage", 0x0106: "SATA storage", 0x0108: "NVMe storage",
          0x0180: "storage", 0x0200: "Ethernet NIC", 0x0207: "InfiniBand NIC", 0x0280: "network",
          0x0300: "VGA display (GPU)", 0x0302: "3D controller (GPU)", 0x0380: "display (GPU)",
          0x0403: "audio", 0x0c03: "USB controller", 0x0c05: "SMBus", 0x1080: "encryption",
          0x0880: "system peripheral", 0x0604: "PCI bridge", 0x0600: "host bridge",
          0xffff: "unassigned class (often a virtual device)"}


def device_kind(class_id: int | None) -> str:
    """A PCI class code (24-bit, as sysfs ``class``) in words: ``0x010802`` -> ``"NVMe storage"``."""
    if class_id is None:
        return "unknown"
    return _KINDS.get(class_id >> 8, f"class 0x{class_id:06x}")


def bar_layout(text: str | None) -> list[dict]:
    """The BARs a ``resource`` file describes, one dict per BAR (not per slot).

    Parameters
    ----------
    text : str or None
        The file's contents.

    Returns
    -------
    list of dict
        ``slot`` (sysfs/lspci number), ``slots`` (``"2-3"`` for a 64-bit BAR), ``kind`` (``"mem"`` or
        ``"io"``), ``size_bytes``, ``flags`` (int), ``is_64bit``, ``prefetchable`` and ``mem_index``
        (0 for the first memory BAR, 1 for the second, ...; None for I/O BARs). Empty slots and the
        upper halves of 64-bit BARs are left out; malformed lines are skipped.
    """
    lines = (text or "").splitlines()[:_SLOTS]
    out: list[dict] = []
    upper_half_of: int | None = None
    mem_index = 0
    for slot, line in enumerate(lines):
        fields = line.split()
        if upper_half_of is not None:  # the slot after a 64-bit BAR holds its upper address bits
            upper_half_of = None
            continue
        try:
            start, end, flags = (int(f, 16) for f in fields[:3])
        except ValueError:
            continue
        if len(fields) < 3 or (start == 0 and end == 0) or not flags & (IORESOURCE_MEM | IORESOURCE_IO):
            continue
        is_mem = bool(flags & IORESOURCE_MEM)
        is_64 = is_mem and bool(flags & IORESOURCE_MEM_64)
        if is_64:
            upper_half_of = slot
        out.append({"slot": slot, "slots": f"{slot}-{slot + 1}" if is_64 else str(slot),
                    "kind": "mem" if is_mem else "io", "size_bytes": end - start + 1, "flags": flags,
                    "is_64bit": is_64, "prefetchable": bool(flags & IORESOURCE_PREFETCH),
                    "mem_index": mem_index if is_mem else None})
        mem_index += is_mem
    return out


def nvidia_bar_name(bar: dict) -> str:
    """What NVIDIA calls a GPU's BAR from :func:`bar_layout`: ``"BAR0"``, ``"BAR1"`` or ``""``.

    NVIDIA's numbers follow the order of the memory BARs, whatever their slots: the second
    memory BAR is BAR1, the window GPUDirect RDMA maps GPU memory through.
    """
    index = bar.get("mem_index")
    return {0: "BAR0", 1: "BAR1"}.get(index, "") if isinstance(index, int) else ""
