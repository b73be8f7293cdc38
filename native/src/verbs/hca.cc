#include "verbs/hca.h"

#include <dirent.h>

#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/cuda_api.h"
#include "core/error.h"
#include "core/knobs.h"
#include "verbs/resources.h"

namespace gdrlab {
namespace {

std::string resolved(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

std::vector<std::string> components(const std::string& p) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    if (j > i) out.push_back(p.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// numa_node of a PCI function in sysfs; -1 where unknown.
int numa_node_of(const std::string& pci_path) {
  std::ifstream f(pci_path + "/numa_node");
  int n = -1;
  if (!(f >> n)) return -1;
  return n;
}

// NUMA nodes listed under devices/system/node (node0, node1, ...).
int numa_node_count() {
  DIR* d = opendir((sysfs_root() + "/devices/system/node").c_str());
  if (!d) return 0;
  int n = 0;
  while (dirent* e = readdir(d))
    if (std::strncmp(e->d_name, "node", 4) == 0 && std::isdigit(static_cast<unsigned char>(e->d_name[4]))) ++n;
  closedir(d);
  return n;
}

// Index of the host-bridge component ("pci0000:80") in a sysfs device path, or -1.
int host_bridge_index(const std::vector<std::string>& c) {
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i].compare(0, 3, "pci") == 0 && c[i].find(':') != std::string::npos) return static_cast<int>(i);
  return -1;
}

}  // namespace

HcaFilter parse_hca_filter(const std::string& spec, const std::string& source) {
  HcaFilter f;
  std::string s = spec;
  if (!s.empty() && s[0] == '^') {
    f.exclude = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s[0] == '=') {
    f.exact = true;
    s.erase(0, 1);
  }
  if (s.empty()) return f;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    HcaFilter::Item it;
    size_t colon = item.find(':');
    it.name = item.substr(0, colon);
    if (it.name.empty()) throw_invalid(source + "='" + spec + "': an empty device name");
    if (colon != std::string::npos) {
      std::string p = item.substr(colon + 1);
      char* end = nullptr;
      long port = std::strtol(p.c_str(), &end, 10);
      if (p.empty() || *end || port < 1 || port > 255)
        throw_invalid(source + "='" + spec + "': port '" + p + "' must be 1..255");
      it.port = static_cast<int>(port);
    }
    f.items.push_back(it);
    i = j + 1;
  }
  return f;
}

HcaFilter hca_filter_from_env() {
  const EnvSetting s = knob_env(Knob::IbHca);
  return s.value ? parse_hca_filter(s.value, s.name) : HcaFilter();
}

bool hca_allowed(const HcaFilter& f, const std::string& device, int port) {
  if (f.items.empty()) return true;
  bool listed = false;
  for (const HcaFilter::Item& it : f.items) {
    const bool name_ok = f.exact ? device == it.name : device.compare(0, it.name.size(), it.name) == 0;
    if (name_ok && (it.port == 0 || it.port == port)) listed = true;
  }
  return f.exclude ? !listed : listed;
}

int pci_hops(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return -1;
  std::vector<std::string> x = components(a), y = components(b);
  size_t common = 0;
  while (common < x.size() && common < y.size() && x[common] == y[common]) ++common;
  return static_cast<int>(x.size() - common + y.size() - common);
}

std::string hca_pci_path(const std::string& device) {
  return resolved(sysfs_root() + "/class/infiniband/" + device + "/device");
}

std::string gpu_pci_path(int ordinal) {
  if (ordinal < 0 || !cuda_usable(nullptr)) return "";
  const CudaApi& api = cuda();
  CUdevice dev = 0;
  char bus[32] = {};
  if (api.cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS || api.cuDeviceGetPCIBusId(bus, sizeof bus, dev) != CUDA_SUCCESS)
    return "";
  if (!bus[0]) return "";
  std::string id(bus);  // "0000:3B:00.0": sysfs spells the hex digits in lower case
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return resolved(sysfs_root() + "/bus/pci/devices/" + id);
}

std::string cpu_crossing_code(const std::string& gpu_path, const std::string& hca_path, std::string* why) {
  if (gpu_path.empty() || hca_path.empty()) return "";
  const std::vector<std::string> x = components(gpu_path), y = components(hca_path);
  const int hx = host_bridge_index(x), hy = host_bridge_index(y);
  if (hx < 0 || hy < 0) return "";
  const bool same_bridge = hx == hy && std::equal(x.begin(), x.begin() + hx + 1, y.begin());
  if (same_bridge) {
    size_t common = 0;
    while (common < x.size() && common < y.size() && x[common] == y[common]) ++common;
    if (common > static_cast<size_t>(hx) + 1) return "";  // they meet below a root port
    if (why) *why = "through the CPU's PCIe host bridge " + x[static_cast<size_t>(hx)];
    return "PHB";
  }
  const int na = numa_node_of(gpu_path), nb = numa_node_of(hca_path);
  if (na >= 0 && nb >= 0) {
    if (why)
      *why = na == nb ? "between two host bridges of NUMA node " + std::to_string(na)
                      : "across the link between NUMA nodes " + std::to_string(na) + " and " + std::to_string(nb);
    return na == nb ? "NODE" : "SYS";
  }
  if (numa_node_count() == 1) {
    if (why) *why = "between two host bridges of this machine's one NUMA node";
    return "NODE";
  }
  if (why) *why = "between host bridges whose NUMA nodes are unknown (assumed across the link between NUMA nodes)";
  return "SYS";
}

std::string nccl_gdr_verdict(const std::string& code) {
  // NCCL's path types in order as NCCL 2.27.5 and later number them (src/graph/topo.h; P2C before
  // PXN, gdrlab/nccl/versions.py has every version) and its old numeric levels (0 LOC .. 4+ SYS).
  // Only PIX, PXB, PHB, NODE (PHB to NCCL) and SYS reach here, so the outcome is the same for the
  // older orders. The default level is P2C from NCCL 2.29.2 (NCCL_NET_GDR_C2C on by default) and
  // PXB before: either way a path through the CPU is not used by default.
  static const char* paths[] = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"};
  static const char* old_levels[] = {"LOC", "PIX", "PXB", "PHB", "SYS"};
  auto rank = [](const std::string& name) {
    for (int i = 0; i < 10; ++i)
      if (name == paths[i]) return i;
    return -1;
  };
  const std::string nccl_path = code == "NODE" ? "PHB" : code;
  // As NCCL's ncclGetLevel reads it: an exact (case-sensitive) path name, else a number when the
  // text starts with a digit (strtol base 0, clipped to 5), else ignored: the default stays.
  const char* env = knob_env(Knob::NetGdrLevel).value;
  const std::string by_default = "its default NCCL_NET_GDR_LEVEL (P2C from NCCL 2.29.2, PXB before)";
  std::string level = "P2C", origin = "at " + by_default;
  if (env && *env) {
    const std::string v(env);
    if (rank(v) >= 0) {
      level = v;
      origin = "with NCCL_NET_GDR_LEVEL=" + v;
    } else if (std::isdigit(static_cast<unsigned char>(v[0]))) {
      level = old_levels[std::min<long>(std::strtol(env, nullptr, 0), 4)];
      origin = "with NCCL_NET_GDR_LEVEL=" + v + " (" + level + ")";
    } else {
      origin = "ignoring NCCL_NET_GDR_LEVEL='" + v + "' (not a level it knows) and at " + by_default;
    }
  }
  const bool use = rank(nccl_path) <= rank(level);
  std::string alias = nccl_path != code ? " (a " + code + " path is " + nccl_path + " to NCCL)" : "";
  return "NCCL " + origin + (use ? " would use GPUDirect RDMA for this pair" :
                              " would not use GPUDirect RDMA for this pair but stage through host memory") + alias;
}

std::string gpu_distance_warning(int gpu_ordinal, const std::string& gpu_path, const std::string& hca,
                                 const std::string& hca_path) {
  std::string why;
  const std::string code = cpu_crossing_code(gpu_path, hca_path, &why);
  if (code.empty()) return "";
  const std::string bus = gpu_path.substr(gpu_path.rfind('/') + 1);
  return "gdrlab: warning: HCA " + hca + " is " + code + " from GPU " + std::to_string(gpu_ordinal) + " (" + bus +
         "): " + why + "; GPUDirect RDMA still works, but its traffic crosses the CPU, where PCIe peer-to-peer is "
         "often slower than through a switch; " + nccl_gdr_verdict(code);
}

}  // namespace gdrlab
