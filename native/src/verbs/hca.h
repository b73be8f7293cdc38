// Which HCA a test uses when GDRLAB_IB_DEV does not name one: GDRLAB_IB_HCA (or NCCL_IB_HCA), in
// NCCL's syntax, filters the devices, and among those with an ACTIVE port the one nearest the GPU
// in the PCIe tree wins, as NCCL picks its NIC (the same walk as `gdrlab topo`).
//
//   mlx5_0:1,mlx5_1   prefixes of device names, each with an optional port
//   ^mlx5_3           every device except these
//   =mlx5_1           exact names instead of prefixes (^= combines both)
#pragma once
#include <string>
#include <vector>

namespace gdrlab {

struct HcaFilter {
  bool exclude = false;
  bool exact = false;
  struct Item {
    std::string name;
    int port = 0;  // 0: any port
  };
  std::vector<Item> items;  // empty: every device
};

// Throws InvalidArgument naming `source` (the variable) for an empty item or a bad port.
HcaFilter parse_hca_filter(const std::string& spec, const std::string& source = "GDRLAB_IB_HCA");
// GDRLAB_IB_HCA, else NCCL_IB_HCA, else no filter.
HcaFilter hca_filter_from_env();
bool hca_allowed(const HcaFilter& f, const std::string& device, int port);

// Hops between two PCI device paths in sysfs (after resolving links): the components below their
// deepest common ancestor, counted on both sides. -1 when either path is empty.
int pci_hops(const std::string& a, const std::string& b);
// The resolved sysfs path of an HCA's PCI function, or "" where sysfs does not show it.
std::string hca_pci_path(const std::string& device);
// The resolved sysfs path of CUDA device `ordinal`'s PCI function, or "" without a usable GPU.
std::string gpu_pci_path(int ordinal);

// nvidia-smi's code for a GPU-HCA path that goes through the CPU: "PHB" (across the host bridge
// of one PCIe root complex), "NODE" (between host bridges of one NUMA node), "SYS" (across the
// link between NUMA nodes; also where the NUMA nodes are unknown on a machine with several, as
// `gdrlab topo` assumes). "" when both sit below one root port (PIX or PXB, not told apart here)
// or a path is unknown. *why gets the reason in words.
std::string cpu_crossing_code(const std::string& gpu_path, const std::string& hca_path, std::string* why = nullptr);
// What NCCL does for a GPU-HCA pair with that code: its NCCL_NET_GDR_LEVEL rule (src/graph/paths.cc,
// ncclTopoCheckGdr: GPUDirect RDMA only where the path type <= the level; default PXB), with the
// level from $NCCL_NET_GDR_LEVEL when set. NCCL has no NODE: its CPU node is the NUMA node, so a
// NODE path is PHB to NCCL.
std::string nccl_gdr_verdict(const std::string& code);
// The one-line warning for a GPU path whose HCA is reached only through the CPU; "" otherwise.
std::string gpu_distance_warning(int gpu_ordinal, const std::string& gpu_path, const std::string& hca,
                                 const std::string& hca_path);

}  // namespace gdrlab
