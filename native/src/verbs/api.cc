#include "verbs/api.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/loaded.h"
#include "core/knobs.h"
#include "verbs/resources.h"

namespace gdrlab {
namespace {

constexpr const char* kDefaultLibrary = "libibverbs.so.1";

using Loaded = LoadedLibrary<VerbsApi>;

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

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = opendir(path.c_str());
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(d);
  return names;
}

std::string first_line(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return "";
  char buf[256] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  std::string s = ok ? buf : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> sysfs_devices() {
  std::vector<std::string> names;
  DIR* d = opendir((sysfs_root() + "/class/infiniband").c_str());
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

bool memlock_zero() {
  rlimit rl{};
  return getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == 0;
}

// Whether this process holds CAP_IPC_LOCK (bit 14 of CapEff), which lifts RLIMIT_MEMLOCK for pinning.
bool has_cap_ipc_lock() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return false;
  char line[256];
  unsigned long long eff = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "CapEff: %llx", &eff) == 1) break;
  std::fclose(f);
  return (eff >> 14) & 1ull;
}

// The fixes for a locked-memory limit, inside and outside containers.
std::string memlock_fix() {
  return std::string("RLIMIT_MEMLOCK = ") + memlock_text() + (has_cap_ipc_lock() ? ", CAP_IPC_LOCK held" : ", no CAP_IPC_LOCK") +
         "; raise it (`ulimit -l unlimited`, /etc/security/limits.conf memlock, docker/podman --ulimit memlock=-1) or "
         "grant CAP_IPC_LOCK (docker --cap-add IPC_LOCK; Kubernetes securityContext.capabilities.add: [\"IPC_LOCK\"]), "
         "the usual fix in a pod, where ulimit -l cannot be raised from inside";
}

}  // namespace

std::string dev_root() {
  const char* e = knob_env(Knob::DevRoot).value;
  return e ? e : "/dev";
}

std::string devices_dropped_reason(const std::vector<std::string>& sys) {
  // libibverbs lists a device only when its /dev/infiniband/uverbsN exists (rdma-core init.c):
  // in a container without the device nodes it drops every HCA without a word. Tell that apart
  // from a missing provider before naming a fix.
  std::string names;
  for (const auto& x : sys) names += (names.empty() ? "" : ", ") + x;
  const std::string head = "RDMA devices exist in /sys/class/infiniband (" + names + ") but libibverbs lists none: ";
  const std::string uverbs_dir = sysfs_root() + "/class/infiniband_verbs";
  const std::vector<std::string> uverbs = list_dir(uverbs_dir);
  if (uverbs.empty())
    return head + "no uverbs interface exists (" + uverbs_dir + " is empty): the ib_uverbs module is not loaded "
           "(modprobe ib_uverbs)";
  const std::string devdir = dev_root() + "/infiniband";
  struct stat sb;
  if (stat(devdir.c_str(), &sb) != 0)
    return head + devdir + " does not exist in this process's view (a container started without the RDMA "
           "device nodes): pass them (docker/podman run --device /dev/infiniband; Kubernetes: request the RDMA "
           "device plugin's resource, e.g. rdma/rdma_shared_device_a, rdma/hca or nvidia.com/<sriov resource>, "
           "in the pod's resources.limits)";
  std::string missing, denied;
  for (const std::string& u : uverbs) {
    const std::string ib = first_line(uverbs_dir + "/" + u + "/ibdev");
    const std::string node = devdir + "/" + u;
    if (stat(node.c_str(), &sb) != 0)
      missing += (missing.empty() ? "" : ", ") + node + (ib.empty() ? "" : " (" + ib + ")");
    else if (access(node.c_str(), R_OK | W_OK) != 0)
      denied += (denied.empty() ? "" : ", ") + node + (ib.empty() ? "" : " (" + ib + ")");
  }
  if (!missing.empty() && denied.empty())
    return head + "its device nodes are missing: " + missing + "; pass /dev/infiniband/uverbs* into the container "
           "(--device /dev/infiniband) or request the RDMA device plugin's resource for these HCAs";
  if (!denied.empty())
    return head + "no read/write permission on " + denied + " (rdma-core needs both): add the user to the group "
           "owning them (often `rdma`), or fix the udev rule / the container's device cgroup";
  return head + "its provider library is missing (install ibverbs-providers, rdma-core's providers such as "
         "libmlx5; /etc/libibverbs.d names them)";
}

std::string verbs_library_name() {
  static const std::string name = [] {
    const char* e = knob_env(Knob::IbverbsLib).value;
    return std::string(e ? e : kDefaultLibrary);
  }();
  return name;
}

const VerbsApi& verbs() { return state().require(); }

const VerbsApi* verbs_if_loaded() noexcept { return table_if_loaded(state); }

bool verbs_usable(std::string* why) { return state().usable(why); }

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
      s.reason = devices_dropped_reason(sys);
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
  const bool pins = reg || call.find("create_cq") != std::string::npos || call.find("create_qp") != std::string::npos;
  // ib_umem_get answers EPERM, not ENOMEM, when nothing may be locked at all (limit 0, no CAP_IPC_LOCK):
  // every MR, CQ and QP then fails, and /dev/infiniband permissions are not the cause.
  if (pins && err == EPERM && memlock_zero())
    return "the locked-memory limit is 0, so the kernel may pin nothing for this " +
           std::string(reg ? "registration" : "queue") + " (" + memlock_fix() + ")";
  if (reg && err == ENOMEM && gpu_memory)
    return "BAR1 space exhausted (see nvidia-smi -q -d MEMORY, BAR1) or locked-memory limit too low (" +
           memlock_fix() + ")";
  if (reg && err == ENOMEM) return "locked-memory limit too low (" + memlock_fix() + ")";
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
  if (err == EPERM || err == EACCES)
    return "no permission on /dev/infiniband/uverbs* (or a limit the kernel enforces as EPERM: " + memlock_fix() + ")";
  if (call.find("modify_qp") != std::string::npos && err == EINVAL)
    return "the HCA rejected the queue-pair attributes (wrong port, LID, GID index, P_Key index or MTU for this link, "
           "or a port that requires a GRH)";
  if (call.find("modify_qp") != std::string::npos &&
      (err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == EADDRNOTAVAIL || err == ENODATA))
    return "RoCE could not resolve the peer's GID to a MAC address: the two GIDs are in different subnets or "
           "VLANs, or the peer's IP is not reachable through this port's netdev (ping it; check "
           "GDRLAB_IB_GID_INDEX against show_gids)";
  if (call.find("create_qp") != std::string::npos && err == ENOMEM)
    return "queue too deep for this HCA, or locked-memory limit too low (" + memlock_fix() + ")";
  if (call.find("create_cq") != std::string::npos && err == ENOMEM)
    return "completion queue too deep for this HCA, or locked-memory limit too low (" + memlock_fix() + ")";
  if (call.find("create_qp") != std::string::npos && (err == EOPNOTSUPP || err == ENOTSUP || err == EINVAL))
    return "this device may not offer RC queue pairs (EFA offers only UD and SRD)";
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
