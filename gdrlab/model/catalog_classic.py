"""The builtin profiles of 2013-2024 hardware: Kepler on Sandy and Ivy Bridge, DGX-1, HGX H100/H200.

Parameters that follow from a profile's links and host class (:data:`gdrlab.model.relations.DERIVED`)
are left out here and filled in by the relations; the rest carry their own source.
"""
from __future__ import annotations

from .catalog_sources import (
    EDR,
    FDR,
    GDRCOPY,
    H200,
    H200X2,
    ISSUE,
    LOADS,
    MV2,
    NDR,
    NV2014,
    PCIE2_X16,
    PCIE3_X8,
    PCIE3_X16,
    PCIE5_X16,
    PERFTEST241,
    RDMA_DOC,
    REMOTE,
    RESERVED,
    SEED1,
    SWITCH,
    GiB,
    KiB,
    MiB,
)

__all__ = ["kepler_snb", "kepler_ivb", "volta_dgx1", "hopper_ndr"]


def _kepler_topology(gpu: dict) -> dict:
    return {"sockets": 2, "peer_access": False, "peer_link": "pcie", "host_class": "sandy-bridge",
            "peer_access_reason": "GPU0 and GPU1 sit on different sockets and Sandy/Ivy Bridge "
                                  "do not carry peer-to-peer traffic across QPI",
            "devices": {
                "GPU0": {**gpu, "socket": 0, "host_bridge": "socket0", "switch": None},
                "NIC0": {"kind": "nic", "name": "ConnectX-3 FDR (mlx4_0)", "socket": 0, "host_bridge": "socket0",
                         "switch": None},
                "GPU1": {**gpu, "socket": 1, "host_bridge": "socket1", "switch": None},
            }}


def kepler_snb() -> dict:
    gpu = {"kind": "gpu", "name": "Tesla K20"}
    return {
        "name": "kepler-snb-2013",
        "follows": "seed 1 (MPI-level latencies)",
        "description": (
            "Tesla K20 + ConnectX-3 FDR on a two-socket Sandy Bridge server, 2013. Latencies follow "
            "seed 1's MPI-level figures (host staging 17-19 us, GPUDirect RDMA 5-6 us); the MPI layer "
            "is the sw_overhead_us parameter. Corrects seed error 1 (direction of the hybrid switch): "
            "the NIC reads GPU memory slowly through the Sandy Bridge root complex (about 0.8 GB/s), so "
            "GDR wins for small messages and pipelined staging for large ones, crossover in the "
            "kilobytes (MVAPICH2-GDR: MV2_GPUDIRECT_LIMIT 8 KB), not the other way round. Also shows "
            "the K20's 256 MB BAR1 wall and why GDR across sockets is slower than staging. GPU1 sits "
            "on the other socket: no peer access across QPI, so p2p is unavailable (p2p-staged is)."),
        "placement": "same-host-bridge",
        "level": "MPI",
        "topology": _kepler_topology(gpu),
        "params": {
            "gpu_pcie_gbps": (8.0, "Tesla K20 is a PCIe 2.0 x16 card (board spec BD-06455): " + PCIE2_X16),
            "ce_eff": (0.75, "about 6 GB/s pinned copies on PCIe 2.0 x16 (the K20's practical rate, kit curriculum "
                             "error 7); 6 / 8.0"),
            "ce_eff_d2h": (0.75, "as ce_eff: no per-direction figure for the K20"),
            "ce_issue_us": (3.0, ISSUE),
            "pageable_h2d_us": (7.5, "assumed: a pinned copy's launch and a driver memcpy into its staging buffer"),
            "pageable_d2h_us": (7.5, "assumed: a pinned copy's launch and a driver memcpy into its staging buffer"),
            "pageable_chunk_bytes": (0.0, "no measurement: no fill modelled"),
            "memcpy_us": (0.1, "assumed: call overhead and first cache misses"),
            "nic_pcie_gbps": (7.88, "ConnectX-3 is a PCIe 3.0 x8 device: " + PCIE3_X8),
            "pcie_eff": (0.8, "assumed: ConnectX-3 FDR ib_write_bw tops out near 6.3 GB/s, x8-bound"),
            "nic_wire_gbps": (6.8, FDR),
            "nic_lat_us": (0.9, NV2014 + ": about 1.3 us for the IB step; 0.9 us of it NIC-to-NIC (split assumed)"),
            "doorbell_us": (0.2, "assumed share of the 1.3 us IB step (" + NV2014 + ")"),
            "completion_us": (0.2, "assumed share of the 1.3 us IB step (" + NV2014 + ")"),
            "xsocket_hop_us": (0.4, "assumed: one QPI hop for the NIC's PCIe reads"),
            "xsocket_gbps": (16.0, "QPI 1.1 at 8 GT/s: 16 GB/s per direction per link"),
            "p2p_read_gbps_switch": (15.75, SWITCH + " (a PCIe 3.0 switch, x16 ports: " + PCIE3_X16 + "); seed 1's "
                                     "9-10 GB/s is impossible over FDR (curriculum error 7)"),
            "p2p_read_gbps_bridge": (0.8, NV2014 + ": P2P read about 800 MB/s on Sandy Bridge"),
            "p2p_read_gbps_xsocket": (0.8, NV2014 + " (0.8 GB/s read limit) and " + SEED1 + " (about 1 GB/s)"),
            "p2p_write_gbps_switch": (15.75, SWITCH + " (PCIe 3.0 x16 ports)"),
            "p2p_write_gbps_bridge": (6.0, "assumed: " + NV2014 + " reports reads, not writes, as the limit"),
            "p2p_write_gbps_xsocket": (1.0, SEED1 + ": about 1 GB/s across sockets"),
            "sw_overhead_us": (3.6, "derived: the MPI layer's share of seed 1's 5-6 us GDR latency "
                                    "(raw verbs gives 1.9 us, " + NV2014 + ")"),
            "tcp_lat_us": (15.0, "assumed: 2013 kernel TCP over 10 GbE or IPoIB"),
            "tcp_gbps": (1.2, "assumed: one 10 GbE TCP stream"),
            "tcp_msg_us": (3.0, "assumed: two system calls per message"),
            "chunk_bytes": (256 * KiB, MV2 + ": MV2_CUDA_BLOCK_SIZE 262144"),
            "depth": (4, "assumed: the engine's default number of staging buffers"),
            "bar1_bytes": (256 * MiB, "Tesla K20: 256 MB BAR1 (seed 1, nvidia-smi)"),
            "bar1_reserved_bytes": (32 * MiB, RESERVED),
            "gpu_page_bytes": (64 * KiB, RDMA_DOC),
            "gdrcopy_read_us": (0.9, GDRCOPY + ": 0.9 us at 1 B"),
            "gdrcopy_read_load_us": (0.2, LOADS),
            "gdrcopy_remote_eff": (0.7, REMOTE),
            "p2p_lat_us": (8.0, "assumed; unused here: GPU0 and GPU1 are on different sockets"),
            "p2p_gbps": (10.0, "assumed; unused here: GPU0 and GPU1 are on different sockets"),
            "p2p_staged_lat_us": (16.0, "assumed: two cudaMemcpy launches and a host buffer"),
            "p2p_staged_chunk_bytes": (1 * MiB, "assumed driver staging chunk"),
        },
    }


def kepler_ivb() -> dict:
    doc = kepler_snb()
    p = doc["params"]
    doc["name"] = "kepler-ivb-2014"
    doc["follows"] = NV2014 + " (verbs-level latencies)"
    doc["description"] = (
        "Tesla K40m + Connect-IB FDR on a two-socket Ivy Bridge server, 2014. Latencies follow the NVIDIA "
        "2014 benchmark at the verbs level (GDR about 1.8 us, staging about 17 us: cudaMemcpy about 8 us "
        "each way + 1.3 us IB), not seed 1's MPI figures. Corrects seed error 1 (hybrid direction): Ivy "
        "Bridge reads GPU memory faster than Sandy Bridge, so the GDR-to-pipelined crossover moves to the "
        "hundreds of kilobytes (NVIDIA: GDR wins up to 400-500 KB). A NIC writing to a GPU on the other "
        "socket manages about 250 MB/s. GPU1 sits on the other socket: no p2p, p2p-staged only.")
    for dev in ("GPU0", "GPU1"):
        doc["topology"]["devices"][dev]["name"] = "Tesla K40m"
    doc["topology"]["devices"]["NIC0"]["name"] = "Connect-IB FDR (mlx5_0)"
    doc["level"] = "verbs"
    doc["topology"]["peer_link"] = "pcie"
    doc["topology"]["host_class"] = "ivy-bridge"
    p.update({
        "gpu_pcie_gbps": (15.75, "Tesla K40m is a PCIe 3.0 x16 card: " + PCIE3_X16),
        "ce_eff": (0.64, "Kepler pinned copies reach about 10 GB/s on PCIe 3 (rCUDA note: K40 "
                         "bandwidthTest 10.06 GB/s on Ivy Bridge); 10.06 / 15.75"),
        "ce_eff_d2h": (0.64, "as ce_eff: the rCUDA note gives one figure"),
        "nic_pcie_gbps": (15.75, "Connect-IB is a PCIe 3.0 x16 device: " + PCIE3_X16),
        "p2p_read_gbps_bridge": (3.5, "derived: puts the GDR vs pipelined-staging crossover at 400-500 KB as "
                                      + NV2014 + " reports for Ivy Bridge (faster than Sandy Bridge's 0.8)"),
        "p2p_read_gbps_xsocket": (1.0, SEED1 + ": about 1 GB/s across sockets"),
        "p2p_write_gbps_xsocket": (0.25, NV2014 + ": adapter writing to a GPU on the other socket, 250 MB/s"),
        "sw_overhead_us": (0.0, "verbs-level figures: no MPI layer"),
        "bar1_bytes": (16 * GiB, "Tesla K40: 16 GB BAR1 (large-BAR Kepler), nvidia-smi"),
    })
    return doc


def volta_dgx1() -> dict:
    devices = {}
    for sw in range(4):
        sock = sw // 2
        for g in (2 * sw, 2 * sw + 1):
            devices[f"GPU{g}"] = {"kind": "gpu", "name": "Tesla V100-SXM2-16GB", "socket": sock,
                                  "host_bridge": f"socket{sock}", "switch": f"plx{sw}"}
        devices[f"NIC{sw}"] = {"kind": "nic", "name": f"ConnectX-4 EDR (mlx5_{sw})", "socket": sock,
                               "host_bridge": f"socket{sock}", "switch": f"plx{sw}"}
    return {
        "name": "volta-dgx1",
        "follows": "published link rates; V100 figures from the gdrcopy README and seed 2",
        "description": (
            "DGX-1 (8x V100 SXM2, NVLink hybrid cube mesh, 4x EDR InfiniBand), two Broadwell sockets, each "
            "GPU pair sharing a PLX switch with one NIC: the topology that fixed the 2014 placement pitfall "
            "in hardware. Same-switch GDR runs at the EDR wire rate and wins at every size, so the hybrid "
            "direction of seed error 1 is platform-dependent: pick --placement cross-socket to see staging "
            "win again. Two V100s through host memory: about 12 GB/s (seed 2) vs P2P over NVLink."),
        "placement": "same-switch",
        "level": "verbs",
        "topology": {"sockets": 2, "peer_link": "nvlink", "host_class": "broadwell", "devices": devices},
        "params": {
            "gpu_pcie_gbps": (15.75, PCIE3_X16),
            "ce_eff": (0.76, "kit curriculum: pinned PCIe 3 copies about 12 GB/s (nvbandwidth, cuda-samples)"),
            "ce_eff_d2h": (0.76, "as ce_eff: the curriculum gives one figure for both directions"),
            "ce_issue_us": (2.5, ISSUE),
            "pageable_h2d_us": (7.0, "assumed: a pinned copy's launch and a driver memcpy into its staging buffer"),
            "pageable_d2h_us": (7.0, "assumed: a pinned copy's launch and a driver memcpy into its staging buffer"),
            "pageable_chunk_bytes": (0.0, "no measurement: no fill modelled"),
            "memcpy_us": (0.1, "assumed: call overhead and first cache misses"),
            "nic_pcie_gbps": (15.75, "ConnectX-4 EDR is a PCIe 3.0 x16 device: " + PCIE3_X16),
            "pcie_eff": (0.85, "assumed: 256-byte TLP payloads"),
            "nic_wire_gbps": (12.5, EDR),
            "nic_lat_us": (0.7, "assumed: ConnectX-4 EDR ib_write_lat, sub-microsecond class"),
            "doorbell_us": (0.1, "assumed: one WQE write and MMIO doorbell"),
            "completion_us": (0.1, "assumed: one CQ poll hit"),
            "xsocket_hop_us": (0.3, "assumed: one QPI hop"),
            "xsocket_gbps": (19.2, "QPI at 9.6 GT/s (Broadwell-EP): 19.2 GB/s per direction per link"),
            "p2p_read_gbps_switch": (15.75, SWITCH + " (PLX PCIe 3.0 x16 ports)"),
            "p2p_read_gbps_bridge": (10.0, "assumed: Broadwell forwards peer reads at most of the link rate"),
            "p2p_read_gbps_xsocket": (6.0, PERFTEST241),
            "p2p_write_gbps_switch": (15.75, SWITCH + " (PLX PCIe 3.0 x16 ports)"),
            "p2p_write_gbps_bridge": (11.0, "assumed: posted writes cross the host bridge well"),
            "p2p_write_gbps_xsocket": (6.0, PERFTEST241),
            "sw_overhead_us": (0.0, "verbs level: no MPI layer"),
            "tcp_lat_us": (10.0, "assumed: kernel TCP over IPoIB"),
            "tcp_gbps": (2.5, "assumed: one IPoIB TCP stream"),
            "tcp_msg_us": (2.0, "assumed: two system calls per message"),
            "chunk_bytes": (256 * KiB, MV2 + ": MV2_CUDA_BLOCK_SIZE 262144"),
            "depth": (4, "assumed: the engine's default number of staging buffers"),
            "bar1_bytes": (16 * GiB, "V100-16GB: 16 GiB BAR1 (nvidia-smi)"),
            "bar1_reserved_bytes": (32 * MiB, RESERVED),
            "gpu_page_bytes": (64 * KiB, RDMA_DOC),
            "gdrcopy_read_us": (0.9, GDRCOPY + ": 0.9 us at 1 B"),
            "gdrcopy_read_load_us": (0.2, LOADS),
            "gdrcopy_remote_eff": (0.7, REMOTE),
            "p2p_lat_us": (5.0, "assumed, near the 4.7 us NVLink figure of " + H200X2),
            "p2p_gbps": (24.0, "one NVLink 2 link: 25 GB/s per direction (V100 architecture whitepaper); "
                               "about 24 GB/s achieved assumed. Seed 2 quotes 24 GB/s for K20s over PCIe, which "
                               "a PCIe 3 x16 link (15.75 GB/s per direction) cannot carry one way"),
            "p2p_staged_lat_us": (16.0, "assumed: two cudaMemcpy launches and a host buffer"),
            "p2p_staged_chunk_bytes": (1 * MiB, "assumed driver staging chunk"),
        },
    }


def hopper_ndr() -> dict:
    devices = {}
    for g in range(8):
        sock = g // 4
        devices[f"GPU{g}"] = {"kind": "gpu", "name": "H100/H200 SXM", "socket": sock,
                              "host_bridge": f"socket{sock}", "switch": f"pcie-sw{g}"}
        devices[f"NIC{g}"] = {"kind": "nic", "name": f"ConnectX-7 NDR (mlx5_{g})", "socket": sock,
                              "host_bridge": f"socket{sock}", "switch": f"pcie-sw{g}"}
    return {
        "name": "hopper-ndr",
        "follows": "published link rates; copy and NVLink figures measured on H200 machines",
        "description": (
            "H100/H200 SXM with one ConnectX-7 NDR 400 Gb/s NIC per GPU under a shared PCIe 5 switch "
            "(DGX/HGX H100 style), two sockets. GDR reaches close to the 400 Gb/s line rate and wins at "
            "every size when GPU and NIC share a switch or a host bridge: the 2013 read limit that set seed "
            "error 1's hybrid threshold is gone there. Across sockets the NIC reads GPU memory at about "
            "24 GB/s and pipelined staging (copies queued on streams, bound by the 32 GB/s UPI link) overtakes "
            "GDR above about 5-6 MB: the 2013 placement lesson again, at a larger size. Seed 2's 4 MB figures do not add up (4 MB at "
            "380 Gb/s takes 84-88 us, not 3 us); the model gives the arithmetic."),
        "placement": "same-switch",
        "level": "verbs",
        "topology": {"sockets": 2, "peer_link": "nvlink", "host_class": "sapphire-rapids", "devices": devices},
        "params": {
            "gpu_pcie_gbps": (63.0, PCIE5_X16),
            "ce_eff": (0.873, H200 + ": 55.0 GB/s pinned H2D at 256 MiB, of 63.0"),
            "ce_eff_d2h": (0.875, H200 + ": 55.1 GB/s pinned D2H at 256 MiB, of 63.0"),
            "ce_issue_us": (2.0, ISSUE),
            "pageable_h2d_us": (6.5, H200 + ": pageable 8 B H2D 5.7 us, 1 KiB 6.6 us"),
            "pageable_d2h_us": (7.5, H200 + ": pageable 8 B D2H 8.4 us, 1 KiB 7.4 us"),
            "pageable_chunk_bytes": (512 * KiB, "derived from " + H200 + ": pageable copies dip at 0.5-4 MiB"),
            "memcpy_us": (0.05, "assumed: call overhead"),
            "nic_pcie_gbps": (63.0, "ConnectX-7 is a PCIe 5.0 x16 device: " + PCIE5_X16),
            "pcie_eff": (0.9, "assumed: 512-byte TLP payloads"),
            "nic_wire_gbps": (50.0, NDR),
            "nic_lat_us": (0.6, "assumed: ConnectX-7 ib_write_lat, sub-microsecond class"),
            "doorbell_us": (0.1, "assumed: one WQE write and MMIO doorbell"),
            "completion_us": (0.1, "assumed: one CQ poll hit"),
            "xsocket_hop_us": (0.3, "assumed: one UPI hop"),
            "xsocket_gbps": (32.0, "UPI 2.0 at 16 GT/s (Sapphire Rapids): 32 GB/s per direction per link"),
            "p2p_read_gbps_switch": (63.0, SWITCH + " (PCIe 5.0 x16 ports: " + PCIE5_X16 + ")"),
            "p2p_read_gbps_bridge": (45.0, "assumed: modern root complexes forward peer traffic well "
                                           "(NCCL still uses GDR by default only for PIX/PXB)"),
            "p2p_read_gbps_xsocket": (24.0, PERFTEST241),
            "p2p_write_gbps_switch": (63.0, SWITCH + " (PCIe 5.0 x16 ports)"),
            "p2p_write_gbps_bridge": (50.0, "assumed: posted writes cross the host bridge well"),
            "p2p_write_gbps_xsocket": (24.0, PERFTEST241),
            "sw_overhead_us": (0.0, "verbs level: no MPI layer"),
            "tcp_lat_us": (10.0, "assumed: kernel TCP over IPoIB or Ethernet"),
            "tcp_gbps": (15.0, "seed 2: standard TCP/IP 120 Gb/s on a 400G network"),
            "tcp_msg_us": (2.0, "assumed: two system calls per message"),
            "chunk_bytes": (256 * KiB, MV2 + ": MV2_CUDA_BLOCK_SIZE 262144"),
            "depth": (4, "assumed: the engine's default number of staging buffers"),
            "bar1_bytes": (256 * GiB, H200 + ": BAR1 256 GiB"),
            "bar1_reserved_bytes": (32 * MiB, RESERVED),
            "gpu_page_bytes": (64 * KiB, RDMA_DOC),
            "gdrcopy_read_us": (0.9, GDRCOPY + "; assumed alike on Hopper"),
            "gdrcopy_read_load_us": (0.2, LOADS),
            "gdrcopy_remote_eff": (0.7, REMOTE),
            "p2p_lat_us": (4.7, H200X2 + ": 4.7 us at 8 B, peer access on"),
            "p2p_gbps": (393.0, H200X2 + ": 393 GB/s at 256 MiB over NVLink (seed: 900 GB/s bidirectional)"),
            "p2p_staged_lat_us": (18.7, H200X2 + ": 18.7 us at 8 B, peer access off"),
            "p2p_staged_chunk_bytes": (640 * KiB, "derived from " + H200X2 + ": 18.0 GB/s at 1 MiB"),
        },
    }
