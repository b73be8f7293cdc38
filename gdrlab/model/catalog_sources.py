"""Source texts quoted by several builtin profiles (see :mod:`gdrlab.model.catalog`)."""
from __future__ import annotations

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

SEED1 = "seed 1 (Kepler + ConnectX-3 FDR 56 Gb/s, 2014 figures, MPI level)"
NV2014 = "NVIDIA blog 'Benchmarking GPUDirect RDMA on Modern Server Platforms' (2014)"
MV2 = "MVAPICH2-GDR user guide"
GDRCOPY = "gdrcopy README (V100)"
RDMA_DOC = "NVIDIA GPUDirect RDMA documentation (pinning granularity: 64 KiB GPU pages)"
PCIE3_X16 = "PCIe 3.0 x16: 8 GT/s x 16 lanes, 128b/130b = 15.75 GB/s per direction"
PCIE2_X16 = "PCIe 2.0 x16: 5 GT/s x 16 lanes, 8b/10b = 8.0 GB/s per direction"
PCIE3_X8 = "PCIe 3.0 x8: 8 GT/s x 8 lanes, 128b/130b = 7.88 GB/s per direction"
PCIE5_X16 = "PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b = 63.0 GB/s per direction"
FDR = "InfiniBand FDR 4x: 14.0625 Gb/s x 4 lanes, 64b/66b = 54.5 Gb/s = 6.8 GB/s"
EDR = "InfiniBand EDR 4x: 100 Gb/s data rate = 12.5 GB/s"
NDR = "InfiniBand NDR 4x (ConnectX-7): 400 Gb/s data rate = 50 GB/s"
ISSUE = "assumed: a cuMemcpyAsync queued behind others costs its launch (a few us), not the synchronous latency"
LOADS = ("assumed: an uncached 8-byte load through BAR1 is one PCIe read round trip (about 0.2 us); reads "
         "below 64 B chain such loads")
REMOTE = "assumed: a CPU on the other socket reaches about 70% of the local BAR1 copy rate (one QPI/UPI hop)"
SWITCH = ("a PCIe switch forwards peer traffic between its ports at their link rate: not a limit below the "
          "route's links (GPU link, NIC link, wire)")
H200 = "measured on an NVIDIA H200, PCIe Gen5 x16, CUDA 13.0 (kit's curriculum notes)"
H200X2 = "measured on a 2x H200 NVLink machine (kit's curriculum notes)"
RESERVED = ("assumed: the driver keeps part of BAR1 for its own mappings (NVML reports BAR1 in use "
            "on an idle GPU); 32 MiB kept back")
PERFTEST241 = ("scaled from perftest issue #241: ib_write_bw --use_cuda across sockets 11 GB/s vs "
               "23 GB/s from host memory (A30, 200 Gb/s): 0.48 of the wire")


