"""Hardware discovery: GPUs (NVML, CUDA, sysfs), PCI devices, RDMA devices, peer memory, libraries.

Every reader takes a ``root`` so that tests and labs can point it at a recorded sysfs tree.
With ``root="/"`` the GPU facts come from NVML and the CUDA driver of this machine; with any
other root only the recorded files are read (NVML and CUDA describe *this* machine, not the
recording) and the report says so (``provenance`` "recorded"). The report is built in
:mod:`.discover`; which paths can run, from the path table's ``needs``, in :mod:`.availability`.
"""
from __future__ import annotations

from .availability import PATHS, path_availability
from .discover import cuda_gpus, discover, doctor_report, peer_memory
from .libs import LIBRARIES
from .nvml import GpuList, nvml_gpus
from .sysfs import pci_devices, rdma_devices

__all__ = ["discover", "doctor_report", "pci_devices", "rdma_devices", "peer_memory", "nvml_gpus",
           "path_availability", "cuda_gpus", "GpuList", "PATHS", "LIBRARIES"]
