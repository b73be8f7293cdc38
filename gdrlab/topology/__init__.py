"""PCIe topology of GPUs and RDMA NICs: nvidia-smi's distance codes, nearest NIC, NCCL's GDR rule.

Read a tree from this machine (:func:`from_sysfs`) or from a recorded hwloc XML export
(:func:`from_hwloc`; :func:`recorded_machines` lists the ones shipped with gdrlab), then ask
the :class:`Topology` for ``matrix()``, ``nearest_nic()``, ``gdr_decision()`` and
``numa_binding()``, or draw it with :func:`figure`.
"""
from __future__ import annotations

from pathlib import Path

from ._topo import NCCL_DEFAULT_GDR_LEVEL, Topology, parse_gdr_level
from .hwloc import from_hwloc
from .sysfs import from_sysfs

__all__ = ["Topology", "from_hwloc", "from_sysfs", "figure", "recorded_machines",
           "parse_gdr_level", "NCCL_DEFAULT_GDR_LEVEL"]

_DATA = Path(__file__).resolve().parent.parent / "data" / "hwloc"


def recorded_machines() -> dict[str, Path]:
    """Shipped hwloc XML exports of real machines: name -> path.

    ``nvidiaDGX2`` (16 V100 on NVSwitch, PLX switches, two sockets), ``power8gpudistances``
    (IBM POWER8 "Minsky", 4 P100 with NVLink to each other and to the CPUs) and
    ``32em64t-2n8c2t-pci-normalio`` (dual-socket Xeon E5 with NVIDIA GPUs and a ConnectX-4).
    From hwloc's test suite (BSD-3-Clause); see ``gdrlab/data/hwloc/README.md``.
    """
    return {p.stem: p for p in sorted(_DATA.glob("*.xml"))}


def figure(topo: Topology, highlight=None):
    """A plotly drawing of the tree; see :func:`gdrlab.topology.plot.figure`."""
    from .plot import figure as _figure
    return _figure(topo, highlight=highlight)
