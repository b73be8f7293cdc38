#include "verbs/resources.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>

#include "core/cuda_api.h"
#include "core/error.h"
#include "core/knobs.h"
#include "core/vocab.h"
#include "verbs/hca.h"

namespace gdrlab {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_line(const std::string& path);  // first line of a (sysfs) file, "" if unreadable

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const char* port_state_name(int s) {
  switch (s) {
    case ibv::IBV_PORT_DOWN: return "DOWN";
    case ibv::IBV_PORT_INIT: return "INIT";
    case ibv::IBV_PORT_ARMED: return "ARMED";
    case ibv::IBV_PORT_ACTIVE: return "ACTIVE";
    case ibv::IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

ibv::ibv_port_attr query_port(const VerbsApi& api, ibv::ibv_context* ctx, int port) {
  // Zeroed first, as verbs.h's inline wrapper does: the exported call fills only the prefix it
  // knows, newer fields must read as 0.
  ibv::ibv_port_attr a;
  std::memset(&a, 0, sizeof a);
  int rc = api.query_port(ctx, static_cast<uint8_t>(port), &a);
  if (rc) throw_verbs("ibv_query_port", rc > 0 ? rc : errno, "port " + std::to_string(port));
  return a;
}

DeviceInfo describe(const VerbsApi& api, ibv::ibv_context* ctx, const std::string& name) {
  DeviceInfo d;
  d.name = name;
  ibv::ibv_device_attr a;
  std::memset(&a, 0, sizeof a);
  int rc = api.query_device(ctx, &a);
  if (rc) throw_verbs("ibv_query_device", rc > 0 ? rc : errno, name);
  d.fw_ver = std::string(a.fw_ver, strnlen(a.fw_ver, sizeof a.fw_ver));
  if (ctx->device) {
    d.node_type = ctx->device->node_type;
    d.transport_type = ctx->device->transport_type;
  }
#define GDRLAB_COPY(f) d.f = a.f;
  GDRLAB_DEVICE_FIELDS(GDRLAB_COPY)
#undef GDRLAB_COPY
  for (int p = 1; p <= a.phys_port_cnt; ++p) {
    d.ports.push_back(port_info(p, query_port(api, ctx, p)));
    d.ports.back().rate = read_line(sysfs_root() + "/class/infiniband/" + name + "/ports/" + std::to_string(p) + "/rate");
  }
  return d;
}

}  // namespace

PortInfo port_info(int port, const ibv::ibv_port_attr& a) {
  PortInfo pi;
  pi.port = port;
#define GDRLAB_COPY(f) pi.f = a.f;
  GDRLAB_PORT_FIELDS(GDRLAB_COPY)
#undef GDRLAB_COPY
  return pi;
}

namespace {

// The first port of an open device that is ACTIVE and passes the filter, or 0.
int allowed_active_port(const VerbsApi& api, ibv::ibv_context* c, const std::string& nm, const HcaFilter& filter) {
  ibv::ibv_device_attr a;
  std::memset(&a, 0, sizeof a);
  if (api.query_device(c, &a) != 0) return 0;
  for (int p = 1; p <= a.phys_port_cnt; ++p) {
    ibv::ibv_port_attr pa;
    std::memset(&pa, 0, sizeof pa);
    if (hca_allowed(filter, nm, p) && api.query_port(c, static_cast<uint8_t>(p), &pa) == 0 &&
        pa.state == ibv::IBV_PORT_ACTIVE)
      return p;
  }
  return 0;
}

// Opens the named device, or, for "", the device with an ACTIVE port that passes the filter
// and lies nearest `gpu_path` in the PCIe tree (ties, or no GPU: the first listed).
ibv::ibv_context* open_named(const VerbsApi& api, const std::string& want, const HcaFilter& filter,
                             const std::string& gpu_path, std::string* name, int* port, int* hops) {
  int n = 0;
  errno = 0;
  ibv::ibv_device** list = api.get_device_list(&n);
  if (!list) {
    int err = errno;
    require_rdma_device();  // throws with the precise reason when there is no device
    throw_verbs("ibv_get_device_list", err ? err : ENODEV);
  }
  ibv::ibv_context* chosen = nullptr;
  int best_hops = INT_MAX;
  std::string names;
  int open_errno = 0;
  for (int i = 0; i < n; ++i) {
    std::string nm = api.get_device_name(list[i]);
    names += (names.empty() ? "" : ", ") + nm;
    if (!want.empty() && nm != want) continue;
    if (want.empty() && !hca_allowed(filter, nm, 0) && filter.exclude) continue;
    ibv::ibv_context* c = api.open_device(list[i]);
    if (!c) {
      open_errno = errno;
      if (!want.empty()) break;
      continue;
    }
    if (!want.empty()) {
      chosen = c;
      *name = nm;
      break;
    }
    const int p = allowed_active_port(api, c, nm, filter);
    int h = p ? pci_hops(gpu_path, hca_pci_path(nm)) : -1;
    if (h < 0) h = INT_MAX - 1;  // unknown distance: after every known one, before none
    if (p && (!chosen || h < best_hops)) {
      if (chosen) api.close_device(chosen);
      chosen = c;
      *name = nm;
      *port = p;
      best_hops = h;
    } else {
      api.close_device(c);
    }
  }
  api.free_device_list(list);
  *hops = best_hops >= INT_MAX - 1 ? -1 : best_hops;
  if (chosen) return chosen;
  if (n == 0) require_rdma_device();  // throws with the precise reason
  if (open_errno) throw_verbs("ibv_open_device", open_errno, want.empty() ? names : want);
  if (!want.empty()) throw_unavailable("RDMA device '" + want + "' not found; this machine has: " + names);
  if (!filter.items.empty())
    throw_unavailable("no RDMA device with an ACTIVE port passes GDRLAB_IB_HCA/NCCL_IB_HCA (devices: " + names + ")");
  throw_unavailable("no RDMA device has an ACTIVE port (devices: " + names +
                    "); check cables and the subnet manager (ibstat)");
}

// PCIe relaxed ordering lets the root complex reorder the HCA's writes, which matters for GPU
// memory on several platforms; NCCL and perftest ask for it where the library can express it
// (IBVERBS_1.8's ibv_reg_mr_iova2; optional access flags are ignored by devices without it).
// GDRLAB_IB_RELAXED_ORDERING=0 turns it off.
bool relaxed_ordering_wanted() {
  static const bool on = [] {
    const char* e = knob_env(Knob::IbRelaxedOrdering).value;
    return !(e && std::string(e) == "0");
  }();
  return on;
}

ibv::ibv_mr* reg_plain(const VerbsApi& api, ibv::ibv_pd* pd, void* addr, size_t length, int access) {
  if (api.reg_mr_iova2 && relaxed_ordering_wanted())
    return api.reg_mr_iova2(pd, addr, length, reinterpret_cast<uint64_t>(addr),
                            static_cast<unsigned>(access | ibv::IBV_ACCESS_RELAXED_ORDERING));
  return api.reg_mr(pd, addr, length, access);
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (f) std::getline(f, s);
  return s;
}

}  // namespace

std::string rc_unsupported_reason(const DeviceInfo& d) {
  const std::string need = "the verbs wire needs RC queue pairs with RDMA WRITE WITH IMMEDIATE (InfiniBand or RoCE)";
  bool unspecified_link = !d.ports.empty();
  for (const PortInfo& p : d.ports) unspecified_link = unspecified_link && p.link_layer == ibv::IBV_LINK_LAYER_UNSPECIFIED;
  if (d.vendor_id == 0x1d0f || d.node_type == ibv::IBV_NODE_UNSPECIFIED ||
      d.transport_type == ibv::IBV_TRANSPORT_UNSPECIFIED || unspecified_link)
    return d.name + " is an AWS Elastic Fabric Adapter (EFA" + (d.vendor_id == 0x1d0f ? ", vendor 0x1d0f" : "") +
           "): it has no RC queue pairs, only UD and SRD; " + need +
           ". On EFA use SRD through libfabric's efa provider (NCCL: aws-ofi-nccl; fi_pingpong -p efa to test)";
  if (d.transport_type == ibv::IBV_TRANSPORT_IWARP || d.node_type == ibv::IBV_NODE_RNIC)
    return d.name + " is an iWARP device: iWARP has no immediate data and connects through RDMA-CM only; " + need +
           ". Switch the NIC to RoCE where it can (irdma: the roce_ena module option) or use a RoCE/InfiniBand HCA";
  if (d.transport_type == ibv::IBV_TRANSPORT_USNIC || d.transport_type == ibv::IBV_TRANSPORT_USNIC_UDP)
    return d.name + " is a Cisco usNIC: it has only UD-style queue pairs; " + need;
  return "";
}

std::vector<DeviceInfo> verbs_devices() {
  std::vector<DeviceInfo> out;
  VerbsStatus st = verbs_status();
  if (st.devices.empty()) return out;
  for (const std::string& nm : st.devices) {
    Context c(nm);
    out.push_back(c.info());
  }
  return out;
}

std::string sysfs_root() {
  const char* e = knob_env(Knob::SysfsRoot).value;
  return e ? e : "/sys";
}

bool peermem_loaded(std::string* version) {
  // As NCCL (net_ib/gdr.cc): the open driver's nvidia_peermem, or MLNX_OFED's legacy nv_peer_mem
  // (the nvidia-peer-memory package), which registers as a peer-memory client "nv_mem".
  const std::string root = sysfs_root();
  struct Probe {
    const char* dir;
    const char* version;
  };
  static const Probe probes[] = {{"/module/nvidia_peermem", "/module/nvidia_peermem/version"},
                                 {"/module/nv_peer_mem", "/module/nv_peer_mem/version"},
                                 {"/kernel/mm/memory_peers/nv_mem", "/kernel/mm/memory_peers/nv_mem/version"},
                                 {"/kernel/mm/memory_peers/nv_mem_nc", "/kernel/mm/memory_peers/nv_mem_nc/version"}};
  struct stat sb;
  for (const Probe& p : probes) {
    if (stat((root + p.dir).c_str(), &sb) != 0) continue;
    if (version) {
      const std::string v = read_line(root + p.version);
      *version = std::string(p.dir).substr(std::string(p.dir).rfind('/') + 1) + (v.empty() ? "" : " " + v);
    }
    return true;
  }
  return false;
}

int gid_roce_version(const std::string& device, int port, int index) {
  std::string t = read_line(sysfs_root() + "/class/infiniband/" + device + "/ports/" + std::to_string(port) +
                            "/gid_attrs/types/" + std::to_string(index));
  if (t.find("RoCE v2") != std::string::npos) return 2;
  if (t.find("RoCE v1") != std::string::npos || t.find("IB/RoCE") != std::string::npos) return 1;
  return 0;
}

bool dmabuf_errno_means_unsupported(int err) {
  // The library has the symbol (rdma-core 34+) but the kernel or provider lacks the method:
  // EOPNOTSUPP/ENOTSUP from the provider, EPROTONOSUPPORT when uverbs has no REG_DMABUF_MR method
  // (kernels < 5.12, old MLNX_OFED), ENOTTY without the ioctl path at all, ENOSYS from old stubs.
  // Anything else (EINVAL, EFAULT, EBADF, ENOMEM...) is a real error with a real cause.
  return err == EOPNOTSUPP || err == ENOTSUP || err == EPROTONOSUPPORT || err == ENOTTY || err == ENOSYS;
}

bool dmabuf_probe(const std::shared_ptr<Context>& ctx, int* errno_out) {
  const VerbsApi& api = verbs();
  if (errno_out) *errno_out = 0;
  if (!api.reg_dmabuf_mr) return false;
  ProtectionDomain pd(ctx);
  errno = 0;
  ibv::ibv_mr* mr = api.reg_dmabuf_mr(pd.get(), 0, 0, 0, -1, 0);
  const int err = errno;
  if (mr) {  // nothing should accept fd -1; give it back all the same
    api.dereg_mr(mr);
    return true;
  }
  if (errno_out) *errno_out = err;
  return !dmabuf_errno_means_unsupported(err);
}

void fork_protect_once() {
  // Kernels before 5.13 do not copy pinned pages on fork: a fork (IPython `!cmd`, subprocess,
  // multiprocessing) while a host region is registered leaves the HCA writing into pages the
  // parent no longer owns. ibv_fork_init marks registered ranges MADV_DONTFORK, as NCCL does at
  // init; libibverbs does the same by itself when RDMAV_FORK_SAFE is set. GDRLAB_IB_FORK_INIT=0
  // skips it.
  static std::once_flag once;
  std::call_once(once, [] {
    const char* off = knob_env(Knob::IbForkInit).value;
    if (off && std::string(off) == "0") return;
    const VerbsApi& api = verbs();
    if (api.fork_init) api.fork_init();  // its failure (e.g. EINVAL after a registration) is not fatal
  });
}

// --------------------------------------------------------------------------------- Context
Context::Context(const std::string& name, int gpu, bool warn_distance) {
  const VerbsApi& api = verbs();
  const HcaFilter filter = name.empty() ? hca_filter_from_env() : HcaFilter();
  const std::string gpu_path = gpu_pci_path(gpu);
  ctx_ = open_named(api, name, filter, name.empty() ? gpu_path : "", &name_, &preferred_port_, &gpu_hops_);
  try {
    info_ = describe(api, ctx_, name_);
  } catch (...) {
    api.close_device(ctx_);
    throw;
  }
  // Chosen as the nearest or named: either way, say so when the GPU reaches it only through the
  // CPU. Once per process and pair (a server opens the device for every test).
  const std::string hca_path = hca_pci_path(name_);
  gpu_distance_ = cpu_crossing_code(gpu_path, hca_path);
  if (!gpu_distance_.empty() && warn_distance) {
    static std::mutex mu;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(gpu_path + "|" + hca_path).second) {
      const std::string line = gpu_distance_warning(gpu, gpu_path, name_, hca_path);
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    }
  }
}

Context::~Context() {
  if (const VerbsApi* api = verbs_if_loaded(); api && ctx_) api->close_device(ctx_);
}

ibv::ibv_port_attr Context::port_attr(int port) const {
  if (port < 1 || port > info_.phys_port_cnt)
    throw_invalid(name_ + " has ports 1.." + std::to_string(info_.phys_port_cnt) + ", not " + std::to_string(port));
  return query_port(verbs(), ctx_, port);
}

ibv::ibv_gid Context::gid(int port, int index) const {
  ibv::ibv_gid g;
  std::memset(&g, 0, sizeof g);
  int rc = verbs().query_gid(ctx_, static_cast<uint8_t>(port), index, &g);
  if (rc) throw_verbs("ibv_query_gid", rc > 0 ? rc : errno, name_ + " port " + std::to_string(port) +
                                                              " index " + std::to_string(index));
  return g;
}

int Context::active_port() const {
  if (preferred_port_ > 0 && port_attr(preferred_port_).state == ibv::IBV_PORT_ACTIVE) return preferred_port_;
  std::string states;
  for (int p = 1; p <= info_.phys_port_cnt; ++p) {
    ibv::ibv_port_attr a = port_attr(p);
    if (a.state == ibv::IBV_PORT_ACTIVE) return p;
    states += (states.empty() ? "" : ", ") + std::to_string(p) + ": " + port_state_name(a.state);
  }
  throw_unavailable(name_ + " has no ACTIVE port (" + states + ")");
}

// ------------------------------------------------------------------------- ProtectionDomain
ProtectionDomain::ProtectionDomain(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {
  fork_protect_once();  // before the first registration, which needs a protection domain
  errno = 0;
  pd_ = verbs().alloc_pd(ctx_->get());
  if (!pd_) throw_verbs("ibv_alloc_pd", errno ? errno : ENOMEM, ctx_->name());
}

ProtectionDomain::~ProtectionDomain() {
  if (const VerbsApi* api = verbs_if_loaded(); api && pd_) api->dealloc_pd(pd_);
}

// ----------------------------------------------------------------------------- MemoryRegion
const char* mr_mechanism_name(MrMechanism m) {
  static constexpr const char* kNames[] = {"host", "dmabuf", "peermem"};
  return enum_name(kNames, m);
}

std::unique_ptr<MemoryRegion> MemoryRegion::register_host(std::shared_ptr<ProtectionDomain> pd, void* addr,
                                                          size_t length, int access) {
  if (!addr || length == 0) throw_invalid("memory region needs a non-null address and a length of at least 1 byte");
  const VerbsApi& api = verbs();
  std::unique_ptr<MemoryRegion> m(new MemoryRegion());
  m->pd_ = std::move(pd);
  auto t0 = Clock::now();
  errno = 0;
  m->mr_ = reg_plain(api, m->pd_->get(), addr, length, access);
  m->reg_s_ = since(t0);
  if (!m->mr_) throw_verbs("ibv_reg_mr", errno ? errno : EINVAL, std::to_string(length) + " bytes of host memory");
  m->addr_ = reinterpret_cast<uint64_t>(addr);
  m->length_ = length;
  m->mechanism_ = MrMechanism::Host;
  return m;
}

std::unique_ptr<MemoryRegion> MemoryRegion::register_device(std::shared_ptr<ProtectionDomain> pd, uint64_t addr,
                                                            size_t length, int device, int access,
                                                            GpuRegistration how) {
  if (!addr || length == 0) throw_invalid("memory region needs a non-null address and a length of at least 1 byte");
  const VerbsApi& api = verbs();
  const CudaApi& cu = cuda();
  std::unique_ptr<MemoryRegion> m(new MemoryRegion());
  m->pd_ = std::move(pd);
  m->addr_ = addr;
  m->length_ = length;
  std::string dmabuf_why;

  if (how == GpuRegistration::Auto || how == GpuRegistration::DmaBuf) {
    if (!api.reg_dmabuf_mr) {
      dmabuf_why = api.library + " has no ibv_reg_dmabuf_mr (IBVERBS_1.12, rdma-core 34+)";
    } else if (!cu.cuMemGetHandleForAddressRange) {
      dmabuf_why = "the CUDA driver has no cuMemGetHandleForAddressRange (CUDA 11.7+)";
    } else {
      // The exported range must start and end on host page boundaries; the MR covers only
      // [addr, addr+length) inside it, at I/O virtual address addr (so remote peers use addr).
      const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
      const uint64_t base = addr & ~(page - 1);
      const uint64_t offset = addr - base;
      const uint64_t span = (offset + length + page - 1) / page * page;
      cuda_use(device);
      int fd = -1;
      // Timed with the import: peer memory's ibv_reg_mr includes nvidia_p2p_get_pages, so a
      // dma-buf registration's cost is the export plus the import.
      const auto t_export = Clock::now();
      CUresult r = cu.cuMemGetHandleForAddressRange(&fd, base, span, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
      m->export_s_ = since(t_export);
      if (r != CUDA_SUCCESS) {
        try {
          cuda_check(r, "cuMemGetHandleForAddressRange", __FILE__, __LINE__);
        } catch (const Error& e) {
          dmabuf_why = std::string("dma-buf export refused: ") + e.what();
        }
      } else {
        auto t0 = Clock::now();
        errno = 0;
        const int flags = access | (relaxed_ordering_wanted() ? ibv::IBV_ACCESS_RELAXED_ORDERING : 0);
        m->mr_ = api.reg_dmabuf_mr(m->pd_->get(), offset, length, addr, fd, flags);
        m->reg_s_ = m->export_s_ + since(t0);
        int err = errno ? errno : EINVAL;
        // The MR holds its own reference to the dma-buf; our descriptor is no longer needed.
        ::close(fd);
        if (m->mr_) {
          m->mechanism_ = MrMechanism::DmaBuf;
          return m;
        }
        if (how == GpuRegistration::DmaBuf || !dmabuf_errno_means_unsupported(err))
          throw_verbs("ibv_reg_dmabuf_mr", err, std::to_string(length) + " bytes of GPU memory", true);
        dmabuf_why = std::string("ibv_reg_dmabuf_mr failed: ") + std::strerror(err);
      }
    }
    if (how == GpuRegistration::DmaBuf) throw_unavailable("dma-buf registration unavailable: " + dmabuf_why);
  }

  std::string peermem_version;
  if (how != GpuRegistration::Raw && !peermem_loaded(&peermem_version)) {
    std::string text = "GPU memory cannot be registered here: ";
    if (how == GpuRegistration::Auto) text += dmabuf_why + "; and ";
    text += "no peer-memory module is loaded (neither nvidia_peermem nor the legacy nv_peer_mem; "
            "modprobe nvidia_peermem)";
    throw_unavailable(text);
  }
  auto t0 = Clock::now();
  errno = 0;
  m->mr_ = reg_plain(api, m->pd_->get(), reinterpret_cast<void*>(addr), length, access);
  m->reg_s_ = since(t0);
  if (!m->mr_) throw_verbs("ibv_reg_mr", errno ? errno : EINVAL, std::to_string(length) + " bytes of GPU memory", true);
  m->mechanism_ = MrMechanism::PeerMem;
  m->export_s_ = 0;  // a refused export attempt is not part of this registration
  m->fallback_ = dmabuf_why;
  return m;
}

void MemoryRegion::close() {
  if (!mr_) return;
  auto t0 = Clock::now();
  int rc = verbs().dereg_mr(mr_);
  dereg_s_ = since(t0);
  mr_ = nullptr;
  pd_.reset();
  if (rc) throw_verbs("ibv_dereg_mr", rc > 0 ? rc : errno);
}

MemoryRegion::~MemoryRegion() {
  if (const VerbsApi* api = verbs_if_loaded(); api && mr_) api->dereg_mr(mr_);
}

// -------------------------------------------------------------------------- CompletionQueue
CompletionQueue::CompletionQueue(std::shared_ptr<Context> ctx, int entries) : ctx_(std::move(ctx)) {
  errno = 0;
  cq_ = verbs().create_cq(ctx_->get(), entries, nullptr, nullptr, 0);
  if (!cq_) throw_verbs("ibv_create_cq", errno ? errno : ENOMEM, std::to_string(entries) + " entries");
}

CompletionQueue::~CompletionQueue() {
  if (const VerbsApi* api = verbs_if_loaded(); api && cq_) api->destroy_cq(cq_);
}

// ------------------------------------------------------------------------------- QueuePair
QueuePair::QueuePair(std::shared_ptr<ProtectionDomain> pd, ibv::ibv_qp_init_attr* attr) : pd_(std::move(pd)) {
  errno = 0;
  qp_ = verbs().create_qp(pd_->get(), attr);
  if (!qp_) throw_verbs("ibv_create_qp", errno ? errno : ENOMEM, pd_->context()->name());
}

QueuePair::~QueuePair() {
  if (const VerbsApi* api = verbs_if_loaded(); api && qp_) api->destroy_qp(qp_);
}

void QueuePair::post_rdma(ibv::ibv_wr_opcode opcode, uint64_t wr_id, ibv::ibv_sge* sge, uint64_t raddr, uint32_t rkey,
                          bool signaled, uint32_t imm_be, const std::string& context) {
  ibv::ibv_send_wr wr;
  std::memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.sg_list = sge;
  wr.num_sge = sge ? 1 : 0;
  wr.opcode = opcode;
  wr.send_flags = signaled ? ibv::IBV_SEND_SIGNALED : 0;
  wr.imm_data = imm_be;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  ibv::ibv_send_wr* bad = nullptr;
  if (int rc = ibv::post_send(qp_, &wr, &bad)) throw_verbs("ibv_post_send", rc, context);
}

}  // namespace gdrlab
