"""PCIe topology of GPUs and RDMA NICs: nvidia-smi's distance codes, nearest NIC, NCCL's GDR rule.

Read a tree from this machine (:func:`from_sysfs`) or from a recorded hwloc XML export
(:func:`from_hwloc`; :func:`recorded_machines` lists the ones shipped with gdrlab), then ask
the :class:`Topology` for ``matrix()``, ``nearest_nic()``, ``gdr_decision()`` and
``numa_binding()``, or draw it with :func:`figure`. Both readers check the PCI tree against
PCIe's bus-numbering rules (:func:`check_pci_tree`) and warn (:class:`PciTreeWarning`) when
no real machine could have it. :func:`parse_topo_matrix` reads the text of ``nvidia-smi topo -m``
(the codes nvidia-smi computed, without the tree); :func:`recorded_matrices` lists the real
machines' matrices shipped with gdrlab and :func:`matrix_report` gives a matrix's nearest NICs and
NCCL's GDR decisions.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._check import PciTreeWarning, check_pci_tree
from ._topo import NCCL_DEFAULT_GDR_LEVEL, Topology, parse_gdr_level
from ._tree import CODE_ORDER
from .hwloc import from_hwloc, recorded_machines
from .nvsmi import TopoMatrix, matrix_report, parse_topo_matrix, recorded_matrices
from .sysfs import from_sysfs

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["Topology", "from_hwloc", "from_sysfs", "figure", "recorded_machines", "check_pci_tree",
           "PciTreeWarning", "parse_gdr_level", "NCCL_DEFAULT_GDR_LEVEL", "TopoMatrix", "parse_topo_matrix",
           "recorded_matrices", "matrix_report", "CODE_ORDER"]


def figure(topo: Topology, highlight: Sequence[str] | None = None) -> go.Figure:
    """A plotly drawing of the tree; see :func:`gdrlab.topology.plot.figure`."""
    from .plot import figure as _figure
    return _figure(topo, highlight=highlight)
