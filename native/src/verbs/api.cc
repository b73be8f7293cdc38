#include "verbs/api.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "verbs/resources.h"

namespace gdrlab {
namespace {

constexpr const char* kDefaultLibrary = "libibverbs.so.1";

struct Loaded {
  VerbsApi api;
  bool ok = false;
  std::string why;
};

// Resolve a versioned symbol; fall back to the default version for libraries built without
// symbol versioning (some distribution rebuilds).
void* resolve(void* handle, const char* sym, const char* version) {
  void* p = dlvsym(handle, sym, version);
  return p ? p : dlsym(handle, sym);
}

Loaded& state() {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    Loaded& L = loaded;
    L.api.library = verbs_library_name();
    void* h = dlopen(L.api.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      L.why = std::string(kDefaultLibrary) + " not found";
      if (L.api.library != kDefaultLibrary) L.why += " (GDRLAB_IBVERBS_LIB=" + L.api.library + ")";
      L.why += std::string(": ") + (e ? e : "dlopen failed") +
               "; install rdma-core's libibverbs (Debian/Ubuntu: libibverbs1 ibverbs-providers)";
      return;
    }
    std::string missing;
#define GDRLAB_IBV_REQ(name, sym, ver, ret, args)                           \
  L.api.name = reinterpret_cast<ret(*) args>(resolve(h, sym, ver));         \
  if (!L.api.name) missing += std::string(missing.empty() ? "" : ", ") + sym + "@" + ver;
#define GDRLAB_IBV_OPT(name, sym, ver, ret, args) \
  L.api.name = reinterpret_cast<ret(*) args>(resolve(h, sym, ver));
    GDRLAB_IBV_SYMBOLS(GDRLAB_IBV_REQ, GDRLAB_IBV_OPT)
#undef GDRLAB_IBV_REQ
#undef GDRLAB_IBV_OPT
    if (!missing.empty()) {
      L.why = L.api.library + " lacks required symbols: " + missing;
      return;
    }
    L.ok = true;
  });
  return loaded;
}

std::vector<std::string> sysfs_devices() {
  std::vector<std::string> names;
  DIR* d = opendir("/sys/class/infiniband");
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(d);
  return names;
}

std::string memlock_text() {
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return "unknown";
  if (rl.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(rl.rlim_cur / 1024) + " KiB";
}

}  // namespace

std::string verbs_library_name() {
  static const std::string name = [] {
    const char* e = std::getenv("GDRLAB_IBVERBS_LIB");
    return std::string(e && *e ? e : kDefaultLibrary);
  }();
  return name;
}

const VerbsApi& verbs() {
  Loaded& L = state();
  if (!L.ok) throw_unavailable(L.why);
  return L.api;
}

const VerbsApi* verbs_if_loaded() noexcept {
  try {
    Loaded& L = state();
    return L.ok ? &L.api : nullptr;
  } catch (...) {
    return nullptr;
  }
}

bool verbs_usable(std::string* why) {
  Loaded& L = state();
  if (!L.ok && why) *why = L.why;
  return L.ok;
}

VerbsStatus verbs_status() {
  VerbsStatus s;
  std::string why;
  if (!verbs_usable(&why)) {
    s.reason = why;
    return s;
  }
  s.library_found = true;
  const VerbsApi& api = verbs();
  const std::vector<std::string> sys = sysfs_devices();
  std::string sys_names;
  for (const auto& x : sys) sys_names += (sys_names.empty() ? "" : ", ") + x;
  const std::string none = "no RDMA device found (/sys/class/infiniband is empty)";
  int n = 0;
  errno = 0;
  ibv::ibv_device** list = api.get_device_list(&n);
  if (!list) {
    int err = errno;
    // With no HCA at all libibverbs often fails here (ENOSYS: no uverbs ABI file in sysfs); that
    // is the same answer for the user: there is no device.
    if (sys.empty()) {
      s.reason = none;
    } else {
      s.reason = "RDMA devices exist in /sys/class/infiniband (" + sys_names + ") but ibv_get_device_list failed: " +
                 std::strerror(err) + (err == ENOSYS ? " (ib_uverbs is not loaded: modprobe ib_uverbs)" : "");
    }
    return s;
  }
  for (int i = 0; i < n; ++i) s.devices.push_back(api.get_device_name(list[i]));
  api.free_device_list(list);
  if (s.devices.empty()) {
    if (sys.empty()) {
      s.reason = none;
    } else {
      s.reason = "RDMA devices exist in /sys/class/infiniband (" + sys_names +
                 ") but libibverbs lists none: its provider library is missing (install ibverbs-providers)";
    }
  }
  return s;
}

void require_rdma_device() {
  VerbsStatus s = verbs_status();
  if (s.devices.empty()) throw_unavailable(s.reason);
}

std::string verbs_hint(const std::string& call, int err, bool gpu_memory) {
  const bool reg = call.find("reg_") != std::string::npos;
  const bool dmabuf = call.find("dmabuf") != std::string::npos;
  if (reg && err == EFAULT && gpu_memory) {
    std::string loaded;
    if (!dmabuf && peermem_loaded(&loaded))
      return "the peer-memory module (" + loaded + ") refused the range: it pins whole 64 KiB GPU pages, so the "
             "range must lie inside one cudaMalloc/cuMemAlloc allocation; VMM memory made without "
             "gpuDirectRDMACapable (e.g. PyTorch expandable segments), managed memory and host memory are refused";
    if (!dmabuf)
      return "this is GPU memory and no peer-memory client claimed it: load nvidia_peermem "
             "(modprobe nvidia_peermem) or register through dma-buf (ibv_reg_dmabuf_mr)";
    return "the dma-buf range is outside the exported GPU allocation";
  }
  if (reg && err == EFAULT) return "the address range is not mapped in this process";
  if (reg && err == ENOMEM && gpu_memory)
    return "BAR1 space exhausted (see nvidia-smi -q -d MEMORY, BAR1) or locked-memory limit too low "
           "(RLIMIT_MEMLOCK = " + memlock_text() + ")";
  if (reg && err == ENOMEM)
    return "locked-memory limit too low (RLIMIT_MEMLOCK = " + memlock_text() +
           "; raise `ulimit -l` or the container's memlock limit)";
  if (reg && (err == EOPNOTSUPP || err == ENOTSUP || err == ENOSYS || err == EPROTONOSUPPORT || err == ENOTTY))
    return "the kernel has no dma-buf memory-region support (needs Linux 5.12+ or an MLNX_OFED with it, rdma-core "
           "34+ and a provider such as mlx5); GDRLAB_GDR_REG=peermem uses nvidia_peermem instead";
  if (dmabuf && err == EINVAL)
    return "the HCA driver rejected the dma-buf range (offset and I/O address on different page offsets, or a "
           "length the device cannot map)";
  if (dmabuf && err == EBADF) return "the dma-buf file descriptor from cuMemGetHandleForAddressRange is not valid";
  if (call.find("open_device") != std::string::npos && err == ENOENT)
    return "/dev/infiniband/uverbs* is missing: in a container pass the devices (docker --device "
           "/dev/infiniband, or the RDMA device plugin)";
  if (err == EPERM || err == EACCES) return "no permission on /dev/infiniband/uverbs*";
  if (call.find("modify_qp") != std::string::npos && err == EINVAL)
    return "the HCA rejected the queue-pair attributes (wrong port, LID, GID index, P_Key index or MTU for this link, "
           "or a port that requires a GRH)";
  if (call.find("modify_qp") != std::string::npos &&
      (err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == EADDRNOTAVAIL || err == ENODATA))
    return "RoCE could not resolve the peer's GID to a MAC address: the two GIDs are in different subnets or "
           "VLANs, or the peer's IP is not reachable through this port's netdev (ping it; check "
           "GDRLAB_IB_GID_INDEX against show_gids)";
  if (call.find("create_qp") != std::string::npos && err == ENOMEM)
    return "queue too deep for this HCA, or locked-memory limit too low (RLIMIT_MEMLOCK = " + memlock_text() + ")";
  return "";
}

void throw_verbs(const std::string& call, int err, const std::string& context, bool gpu_memory) {
  std::string text = std::strerror(err);
  if (!context.empty()) text += " (" + context + ")";
  std::string hint = verbs_hint(call, err, gpu_memory);
  if (!hint.empty()) text += "; likely cause: " + hint;
  throw Error(ErrorKind::Verbs, "libibverbs", call, err, text);
}

}  // namespace gdrlab
