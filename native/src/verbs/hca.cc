#include "verbs/hca.h"

#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/cuda_api.h"
#include "core/error.h"
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
  for (const char* var : {"GDRLAB_IB_HCA", "NCCL_IB_HCA"}) {
    const char* v = std::getenv(var);
    if (v && *v) return parse_hca_filter(v, var);
  }
  return HcaFilter();
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

}  // namespace gdrlab
