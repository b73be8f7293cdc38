"""The builtin profiles of the hardware learners meet in 2026: DGX A100, GH200, HGX B200 with
ConnectX-8, L40S PCIe servers on RoCE v2, and AWS p5 with EFA.

Each starts from ``hopper-ndr`` (:func:`.catalog_classic.hopper_ndr`) and replaces what its
hardware changes, each value with its source; a value kept from hopper-ndr says so ("as
hopper-ndr, assumed alike"). Parameters that follow from links and host class come from
:mod:`.relations`. Link rates are arithmetic on published link generations; most per-message
costs of these machines are not published in a form this kit holds and are marked assumed.
"""
from __future__ import annotations

from typing import Any

from .catalog_classic import hopper_ndr
from .catalog_sources import PCIE5_X16, RESERVED, SWITCH, GiB, KiB

__all__ = ["a100_hdr", "gh200", "b200_xdr", "l40s_pcie", "aws_p5_efa"]

PCIE4_X16 = "PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b = 31.5 GB/s per direction"
PCIE6_X16 = "PCIe 6.0 x16: 64 GT/s x 16 lanes, FLIT mode 242/256 = 121 GB/s per direction"
HDR = "InfiniBand HDR 4x (ConnectX-6): 200 Gb/s data rate = 25 GB/s"
XDR = "InfiniBand XDR 4x (ConnectX-8 SuperNIC): 800 Gb/s data rate = 100 GB/s"
NVLINK_SHARE = ("assumed: the share of the NVLink rate a peer copy reaches on the 2x H200 machine "
                "(393 of 450 GB/s per direction, kit's curriculum notes): 0.87")
CURR_PCIE4 = "kit curriculum: pinned copies on PCIe 4 about 25 GB/s; 25 / 31.5"
PERF241 = ("perftest issue #241: ib_write_bw --use_cuda across sockets about 11 GB/s (A30, 200 Gb/s mlx5, "
           "AMD host)")


def _variant(name: str, description: str, follows: str, host_class: str, topology: dict, params: dict[str, Any],
             placement: str = "same-switch") -> dict:
    base = hopper_ndr()
    kept = {k: (v, f"as hopper-ndr, assumed alike: {s}") for k, (v, s) in base["params"].items()}
    return {"name": name, "description": description, "follows": follows, "placement": placement,
            "level": "verbs", "topology": {**topology, "host_class": host_class}, "params": {**kept, **params}}


def _eight(gpu: str, nic: str, *, per_switch: int = 1, link_layer: str = "InfiniBand", mtu: int = 4096,
           peer_link: str = "nvlink", sockets: int = 2) -> dict:
    """Eight GPUs and eight NICs, ``per_switch`` GPU/NIC pairs under each PCIe switch, half per socket."""
    devices: dict[str, dict] = {}
    for g in range(8):
        sock, sw = (g * sockets) // 8, f"pcie-sw{g // per_switch}"
        devices[f"GPU{g}"] = {"kind": "gpu", "name": gpu, "socket": sock, "host_bridge": f"socket{sock}",
                              "switch": sw}
        devices[f"NIC{g}"] = {"kind": "nic", "name": nic, "socket": sock, "host_bridge": f"socket{sock}",
                              "switch": sw, "link_layer": link_layer, "mtu": mtu}
    return {"sockets": sockets, "peer_link": peer_link, "devices": devices}


def a100_hdr() -> dict:
    return _variant(
        "a100-hdr",
        "DGX A100: 8x A100-SXM4-80GB (PCIe Gen4 x16, NVLink 3 through NVSwitch), 8x ConnectX-6 HDR 200 Gb/s "
        "InfiniBand, two GPUs and two NICs under each of four PCIe Gen4 switches, two AMD EPYC 7742 (Rome) "
        "sockets. Same-switch GDR runs at the HDR wire rate; across sockets the NIC reads GPU memory at "
        "about 11 GB/s (the AMD host's figure), below pipelined staging at large sizes.",
        "published link rates (DGX A100 user guide topology); copy rates from the kit's curriculum", "epyc",
        _eight("A100-SXM4-80GB", "ConnectX-6 HDR (mlx5)", per_switch=2),
        {"gpu_pcie_gbps": (31.5, "A100 SXM4 is a PCIe 4.0 x16 device: " + PCIE4_X16),
         "ce_eff": (0.79, CURR_PCIE4), "ce_eff_d2h": (0.79, CURR_PCIE4),
         "nic_pcie_gbps": (31.5, "ConnectX-6 HDR is a PCIe 4.0 x16 device: " + PCIE4_X16),
         "nic_wire_gbps": (25.0, HDR),
         "nic_lat_us": (0.7, "assumed: ConnectX-6 ib_write_lat, sub-microsecond class"),
         "xsocket_gbps": (32.0, "assumed: one AMD Infinity Fabric (xGMI-2) x16 link at 16 GT/s, 32 GB/s per "
                                "direction, carries one PCIe flow"),
         "p2p_read_gbps_switch": (31.5, SWITCH + " (PCIe 4.0 x16 ports)"),
         "p2p_write_gbps_switch": (31.5, SWITCH + " (PCIe 4.0 x16 ports)"),
         "p2p_read_gbps_bridge": (20.0, "assumed: an EPYC root complex forwards peer reads at most of a Gen4 link"),
         "p2p_write_gbps_bridge": (24.0, "assumed: posted writes cross the host bridge well"),
         "p2p_read_gbps_xsocket": (11.0, PERF241), "p2p_write_gbps_xsocket": (11.0, PERF241),
         "tcp_gbps": (10.0, "assumed: one TCP stream over IPoIB HDR"),
         "bar1_bytes": (128 * GiB, "A100-80GB: 128 GiB BAR1 (kit curriculum, nvidia-smi logs)"),
         "p2p_gbps": (0.87 * 300.0, "NVLink 3: 12 links x 25 GB/s = 300 GB/s per direction (A100 whitepaper); "
                                    + NVLINK_SHARE)})


def gh200() -> dict:
    devices = {"GPU0": {"kind": "gpu", "name": "GH200 (H100 96GB on NVLink-C2C)", "socket": 0,
                        "host_bridge": "grace0", "switch": None},
               "NIC0": {"kind": "nic", "name": "ConnectX-7 NDR (mlx5_0), on Grace's PCIe", "socket": 0,
                        "host_bridge": "grace0", "switch": None, "link_layer": "InfiniBand", "mtu": 4096}}
    c2c = "NVLink-C2C: 900 GB/s total, 450 GB/s per direction between Grace and Hopper (GH200 datasheet)"
    return _variant(
        "gh200",
        "GH200 Grace Hopper superchip: the GPU's host link is NVLink-C2C (450 GB/s per direction), not PCIe, so "
        "copies between host and GPU memory run several times faster than on any PCIe machine and staging "
        "costs little bandwidth; one ConnectX-7 NDR NIC hangs off Grace's PCIe Gen5, so GDR crosses Grace's "
        "root complex and C2C (NCCL calls this P2C and forces a GDR flush). The wire, not the host link, "
        "bounds every network path. One GPU: no p2p.",
        "published link rates (GH200 datasheet); copy efficiencies and costs assumed", "grace",
        {"sockets": 1, "peer_link": "nvlink", "devices": devices},
        {"gpu_pcie_gbps": (450.0, c2c + " (the GPU's host link takes this parameter's place)"),
         "ce_eff": (0.85, "assumed: a copy engine reaches about 0.85 of C2C (no measurement held here)"),
         "ce_eff_d2h": (0.85, "assumed: as ce_eff"),
         "pcie_eff": (0.9, "assumed: 512-byte TLP payloads on the NIC's PCIe Gen5 link"),
         "xsocket_gbps": (100.0, "assumed: a second superchip reached over its own link (what-if only: one socket)"),
         "p2p_read_gbps_switch": (63.0, SWITCH + " (what-if: no switch here)"),
         "p2p_write_gbps_switch": (63.0, SWITCH + " (what-if: no switch here)"),
         "p2p_read_gbps_bridge": (50.0, "assumed: Grace's root complex forwards the NIC's reads onto C2C near its "
                                        "Gen5 x16 link rate"),
         "p2p_write_gbps_bridge": (55.0, "assumed: posted writes cross Grace's root complex well"),
         "bar1_bytes": (128 * GiB, "assumed: the GH200's 96 GB HBM3 fully mapped, rounded to a power of two"),
         "gdrcopy_remote_eff": (0.7, "unused: one socket"),
         "p2p_gbps": (393.0, "unused: one GPU"), "p2p_lat_us": (4.7, "unused: one GPU")},
        placement="same-host-bridge")


def b200_xdr() -> dict:
    return _variant(
        "b200-xdr",
        "HGX B200 with ConnectX-8 XDR 800 Gb/s: 8x B200 (NVLink 5, 900 GB/s per direction), one ConnectX-8 per "
        "GPU under a PCIe switch, two Emerald Rapids sockets. The NIC's PCIe Gen6 x16 and the 100 GB/s wire "
        "outrun the GPU's PCIe Gen5 x16 link: GDR from one GPU is bound by the GPU link (about 57 GB/s), the "
        "lesson of every generation in a new place.",
        "published link rates (HGX B200 and ConnectX-8 datasheets); other costs as hopper-ndr, assumed",
        "emerald-rapids", _eight("B200", "ConnectX-8 XDR (mlx5)"),
        {"gpu_pcie_gbps": (63.0, "B200: PCIe Gen5 x16 host interface (HGX B200 datasheet: PCIe Gen5 128 GB/s "
                                 "both directions): " + PCIE5_X16),
         "nic_pcie_gbps": (121.0, "ConnectX-8 SuperNIC: PCIe Gen6 x16 (ConnectX-8 datasheet): " + PCIE6_X16),
         "nic_wire_gbps": (100.0, XDR),
         "xsocket_gbps": (40.0, "UPI 2.0 at 20 GT/s (Emerald Rapids): 40 GB/s per direction per link"),
         "bar1_bytes": (256 * GiB, "assumed: as the H200's 256 GiB (B200 carries 180 GB HBM3e)"),
         "p2p_gbps": (0.87 * 900.0, "NVLink 5: 18 links x 50 GB/s = 900 GB/s per direction (1.8 TB/s both, "
                                    "kit curriculum); " + NVLINK_SHARE)})


def l40s_pcie() -> dict:
    topo = _eight("L40S", "ConnectX-7 200GbE (mlx5), RoCE v2", per_switch=2, link_layer="Ethernet", mtu=4096,
                  peer_link="pcie")
    topo["peer_access"] = True
    return _variant(
        "l40s-pcie",
        "PCIe server with 8x L40S (PCIe Gen4 x16, no NVLink), two GPUs and one ConnectX-7 200 GbE port pair "
        "under each PCIe Gen4 switch, two Sapphire Rapids sockets, RoCE v2 over Ethernet. GPU to GPU runs as "
        "PCIe peer-to-peer under the switch (bounded by the Gen4 link), not NVLink; the wire is Ethernet, with "
        "its own framing (82 bytes a packet at RoCE MTU 4096) and a switch hop more than InfiniBand.",
        "published link rates (L40S and ConnectX-7 datasheets, RoCE v2 framing); costs assumed",
        "sapphire-rapids", topo,
        {"gpu_pcie_gbps": (31.5, "L40S is a PCIe 4.0 x16 card (L40S datasheet): " + PCIE4_X16),
         "ce_eff": (0.79, CURR_PCIE4), "ce_eff_d2h": (0.79, CURR_PCIE4),
         "nic_pcie_gbps": (31.5, "ConnectX-7 under a PCIe Gen4 switch trains at Gen4 x16: " + PCIE4_X16),
         "nic_wire_gbps": (25.0, "200 Gb Ethernet: 200 Gb/s MAC data rate (after 256b/257b and RS-FEC) = 25 GB/s"),
         "nic_lat_us": (1.1, "assumed: ConnectX-7 RoCE one way through one Ethernet switch, about 0.5 us more "
                             "than InfiniBand's 0.6"),
         "p2p_read_gbps_switch": (31.5, SWITCH + " (PCIe 4.0 x16 ports)"),
         "p2p_write_gbps_switch": (31.5, SWITCH + " (PCIe 4.0 x16 ports)"),
         "tcp_gbps": (5.0, "assumed: one TCP stream over 200 GbE"),
         "bar1_bytes": (64 * GiB, "assumed: the L40S's 48 GB mapped by a 64 GiB BAR1"),
         "p2p_lat_us": (8.0, "assumed: a peer copy through the switch costs a copy launch and a PCIe trip"),
         "p2p_gbps": (26.0, "assumed: PCIe Gen4 x16 peer writes reach about pinned copies' 0.8 of 31.5")})


def aws_p5_efa() -> dict:
    topo = _eight("H100 80GB SXM", "4x EFA 100 Gb/s (SRD), one group per GPU", link_layer="EFA", mtu=8192)
    return _variant(
        "aws-p5-efa",
        "AWS p5.48xlarge: 8x H100 SXM (NVLink 4), 32 EFA interfaces of 100 Gb/s (3200 Gb/s, four per GPU, "
        "modelled as one 400 Gb/s NIC per GPU), two AMD EPYC (Milan) sockets. EFA runs SRD, AWS's own "
        "reliable datagram transport, not InfiniBand or RoCE: multipath, out-of-order delivery, "
        "retransmission in the NIC, and a one-way time near ten microseconds, so small messages cost far "
        "more than on InfiniBand while large ones reach the aggregate rate; GDR through libfabric "
        "(FI_EFA_USE_DEVICE_RDMA). Latencies are at the libfabric level.",
        "published instance figures (AWS p5 documentation); SRD costs assumed", "epyc", topo,
        {"nic_wire_gbps": (50.0, "AWS p5.48xlarge: 3200 Gb/s EFA over 32 interfaces; four per GPU = 400 Gb/s = "
                                 "50 GB/s (AWS instance documentation)"),
         "nic_pcie_gbps": (63.0, "assumed: the four EFA interfaces of a GPU share PCIe Gen5 x16 bandwidth: "
                                 + PCIE5_X16),
         "nic_lat_us": (9.0, "assumed: SRD one way, about ten times InfiniBand's (SRD trades latency for "
                             "multipath; Shalev et al., 'A Cloud-Optimized Transport Protocol for Elastic and "
                             "Scalable HPC', IEEE Micro 2020, describes the design, not this figure)"),
         "doorbell_us": (0.5, "assumed: a libfabric EFA provider post (fi_write) over a user-space queue"),
         "completion_us": (0.5, "assumed: a libfabric completion-queue read (fi_cq_read)"),
         "xsocket_gbps": (32.0, "assumed: one AMD Infinity Fabric (xGMI) x16 link, 32 GB/s per direction"),
         "p2p_read_gbps_bridge": (40.0, "assumed: an EPYC root complex forwards peer reads at most of a Gen5 link"),
         "p2p_read_gbps_xsocket": (11.0, PERF241 + "; assumed alike on Milan"),
         "p2p_write_gbps_xsocket": (11.0, PERF241 + "; assumed alike on Milan"),
         "tcp_gbps": (5.0, "assumed: one TCP stream on an ENA interface"),
         "tcp_lat_us": (25.0, "assumed: TCP one way inside a placement group"),
         "chunk_bytes": (256 * KiB, "as hopper-ndr: MVAPICH2-GDR's MV2_CUDA_BLOCK_SIZE 262144"),
         "bar1_reserved_bytes": (32 * 1024 * 1024, RESERVED)})
