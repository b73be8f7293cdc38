// Verbs objects with owners: a Context (an opened HCA) owns protection domains and completion
// queues; a protection domain owns memory regions and queue pairs. Teardown goes QP, then CQ and
// MRs, then PD, then the device; destructors never throw. Children hold a shared_ptr to their parent,
// so a parent is never freed under a live child whatever order Python drops them in.
//
// Memory regions over GPU memory try dma-buf first (cuMemGetHandleForAddressRange exports the
// range, ibv_reg_dmabuf_mr imports it: upstream kernel path, no extra module), then fall back to
// plain ibv_reg_mr on the GPU pointer, which works only when the nvidia_peermem module is loaded.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "verbs/abi.h"
#include "verbs/api.h"

namespace gdrlab {

class Context;

// The fields PortInfo and DeviceInfo copy from ibv_port_attr and ibv_device_attr under the same
// names: one list for the copy here and for the dictionaries the binding builds.
#define GDRLAB_PORT_FIELDS(X) \
  X(state) X(max_mtu) X(active_mtu) X(lid) X(link_layer) X(gid_tbl_len) X(active_width) X(active_speed)
#define GDRLAB_DEVICE_FIELDS(X)                                                                   \
  X(node_guid) X(vendor_id) X(vendor_part_id) X(phys_port_cnt) X(max_qp) X(max_qp_wr) X(max_cqe) \
  X(max_mr) X(max_mr_size)

struct PortInfo {
  int port = 0;
  int state = 0;        // ibv_port_state
  int max_mtu = 0;      // ibv_mtu
  int active_mtu = 0;   // ibv_mtu
  int lid = 0;
  int link_layer = 0;   // 1 InfiniBand, 2 Ethernet (RoCE)
  int gid_tbl_len = 0;
  int active_width = 0;
  int active_speed = 0;  // the IBVERBS_1.1 query's code: 0 on XDR and newer, which only
                         // active_speed_ex (not filled by that query) can express
  std::string rate;      // sysfs ports/<n>/rate, e.g. "800 Gb/sec (4X XDR)"; "" where unreadable
};

struct DeviceInfo {
  std::string name;
  std::string fw_ver;
  uint64_t node_guid = 0;  // as the HCA reports it (network byte order)
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  int phys_port_cnt = 0;
  int max_qp = 0;
  int max_qp_wr = 0;
  int max_cqe = 0;
  int max_mr = 0;
  uint64_t max_mr_size = 0;
  int node_type = 1;       // ibv_node_type of the device (1 CA, 4 RNIC, 7 unspecified: EFA)
  int transport_type = 0;  // ibv_transport_type (0 IB, covering RoCE; 1 iWARP; 4 unspecified)
  std::vector<PortInfo> ports;
};

// "" when the device can carry the verbs wire (RC queue pairs with RDMA WRITE WITH IMMEDIATE:
// InfiniBand or RoCE), else one line saying what the device is and what it supports instead
// (EFA: SRD through libfabric; iWARP: no immediate data, RDMA-CM only).
std::string rc_unsupported_reason(const DeviceInfo& d);

PortInfo port_info(int port, const ibv::ibv_port_attr& a);

// Every device libibverbs lists, with attributes; empty when there is none.
std::vector<DeviceInfo> verbs_devices();

// The sysfs mount: $GDRLAB_SYSFS_ROOT if set (containers that bind-mount the host's elsewhere),
// else /sys.
std::string sysfs_root();

// True when a GPU peer-memory client is loaded: nvidia_peermem, or MLNX_OFED's legacy nv_peer_mem
// (module or /kernel/mm/memory_peers/nv_mem*). *version gets "<name> <version>" when readable.
bool peermem_loaded(std::string* version = nullptr);

// True when ibv_reg_dmabuf_mr's errno says the kernel/provider has no dma-buf support, so Auto
// falls back to peer memory; false for real errors (EINVAL, EFAULT, EBADF...), which are raised.
bool dmabuf_errno_means_unsupported(int err);

// NCCL's dma-buf probe (net_ib/init.cc): ibv_reg_dmabuf_mr(pd, 0, 0, 0, fd = -1, 0) on a fresh PD.
// A kernel and provider that support dma-buf look at the descriptor and answer EBADF (or another
// error about the arguments); one without answers EOPNOTSUPP / EPROTONOSUPPORT / ENOTTY / ENOSYS.
// This sees MLNX_OFED backports that the kernel version hides. `errno_out` gets the answer (0:
// the library lacks the symbol). Opens nothing but a PD on `ctx`.
bool dmabuf_probe(const std::shared_ptr<Context>& ctx, int* errno_out);

// Calls ibv_fork_init once per process before the first registration (GDRLAB_IB_FORK_INIT=0: not).
void fork_protect_once();

// RoCE version of a GID table entry from sysfs (.../gid_attrs/types/<index>): 2 for "RoCE v2",
// 1 for "IB/RoCE v1", 0 when unknown or not readable.
int gid_roce_version(const std::string& device, int port, int index);

class Context {
 public:
  // name "" picks, among the devices GDRLAB_IB_HCA (or NCCL_IB_HCA) allows, one with an ACTIVE
  // port, nearest CUDA device `gpu` in the PCIe tree (gpu < 0, no GPU, or an unreadable sysfs: the
  // first listed). With gpu >= 0, an HCA the GPU reaches only through the CPU prints a warning
  // (gpu_distance_warning) on stderr. Throws Unavailable when no device exists (with verbs_status's reason) or the
  // named device is not there.
  // warn_distance false (the host path, which chooses by the GPU but never touches its memory):
  // no distance warning.
  explicit Context(const std::string& name = "", int gpu = -1, bool warn_distance = true);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ibv::ibv_context* get() const { return ctx_; }
  const std::string& name() const { return name_; }
  const DeviceInfo& info() const { return info_; }
  // Port attributes, freshly queried (state and MTU may change while the process runs).
  ibv::ibv_port_attr port_attr(int port) const;
  ibv::ibv_gid gid(int port, int index) const;
  // The port chosen with the device (GDRLAB_IB_HCA's), else the first ACTIVE port, or throws
  // Unavailable naming the ports and their states.
  int active_port() const;
  // PCIe hops between this HCA and the GPU it was chosen for; -1 when not chosen by distance.
  int gpu_hops() const { return gpu_hops_; }
  // cpu_crossing_code between this HCA and the GPU it was opened for ("PHB", "NODE", "SYS"), or
  // "" (below one root port, no GPU, or unknown). A non-empty code prints one warning per process.
  const std::string& gpu_distance() const { return gpu_distance_; }

 private:
  ibv::ibv_context* ctx_ = nullptr;
  std::string name_;
  int preferred_port_ = 0;
  int gpu_hops_ = -1;
  std::string gpu_distance_;
  DeviceInfo info_;
};

class ProtectionDomain {
 public:
  explicit ProtectionDomain(std::shared_ptr<Context> ctx);
  ~ProtectionDomain();
  ProtectionDomain(const ProtectionDomain&) = delete;
  ProtectionDomain& operator=(const ProtectionDomain&) = delete;
  ibv::ibv_pd* get() const { return pd_; }
  const std::shared_ptr<Context>& context() const { return ctx_; }

 private:
  std::shared_ptr<Context> ctx_;
  ibv::ibv_pd* pd_ = nullptr;
};

enum class MrMechanism { Host = 0, DmaBuf = 1, PeerMem = 2, Max };
const char* mr_mechanism_name(MrMechanism m);

// What register_device may use: Auto tries dma-buf, then peer memory. Raw passes the GPU pointer
// to ibv_reg_mr without checking for nvidia_peermem first (to show the EFAULT it then gives).
enum class GpuRegistration { Auto = 0, DmaBuf = 1, PeerMem = 2, Raw = 3 };

constexpr int kDefaultAccess =
    ibv::IBV_ACCESS_LOCAL_WRITE | ibv::IBV_ACCESS_REMOTE_WRITE;  // only RDMA WRITE is used: no REMOTE_READ

class MemoryRegion {
 public:
  // Host memory (pageable or pinned): ibv_reg_mr pins the pages itself.
  static std::unique_ptr<MemoryRegion> register_host(std::shared_ptr<ProtectionDomain> pd, void* addr,
                                                     size_t length, int access = kDefaultAccess);
  // GPU memory of CUDA device `device` at [addr, addr+length).
  static std::unique_ptr<MemoryRegion> register_device(std::shared_ptr<ProtectionDomain> pd, uint64_t addr,
                                                       size_t length, int device, int access = kDefaultAccess,
                                                       GpuRegistration how = GpuRegistration::Auto);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  void close();  // ibv_dereg_mr; idempotent

  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  uint64_t addr() const { return addr_; }
  size_t length() const { return length_; }
  MrMechanism mechanism() const { return mechanism_; }
  // Why dma-buf was not used when the mechanism is PeerMem (empty otherwise).
  const std::string& fallback_reason() const { return fallback_; }
  // The whole registration; for dma-buf the export (cuMemGetHandleForAddressRange) plus the
  // import (ibv_reg_dmabuf_mr), with the export alone in export_seconds (0 otherwise).
  double reg_seconds() const { return reg_s_; }
  double export_seconds() const { return export_s_; }
  double dereg_seconds() const { return dereg_s_; }
  bool closed() const { return mr_ == nullptr; }

 private:
  MemoryRegion() = default;
  std::shared_ptr<ProtectionDomain> pd_;
  ibv::ibv_mr* mr_ = nullptr;
  uint64_t addr_ = 0;
  size_t length_ = 0;
  MrMechanism mechanism_ = MrMechanism::Host;
  std::string fallback_;
  double reg_s_ = 0;
  double export_s_ = 0;
  double dereg_s_ = 0;
};

class CompletionQueue {
 public:
  CompletionQueue(std::shared_ptr<Context> ctx, int entries);
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  ibv::ibv_cq* get() const { return cq_; }

 private:
  std::shared_ptr<Context> ctx_;
  ibv::ibv_cq* cq_ = nullptr;
};

// A queue pair, destroyed before its completion queue and protection domain: an owner declares
// the CompletionQueue before the QueuePair (members go in reverse order), and the QP holds the PD.
class QueuePair {
 public:
  QueuePair(std::shared_ptr<ProtectionDomain> pd, ibv::ibv_qp_init_attr* attr);
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  ibv::ibv_qp* get() const { return qp_; }
  // Posts one RDMA work request (RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ) of `sge` (nullptr:
  // no data) against the peer's raddr in rkey's region; imm_be: the immediate, in network order.
  // Throws Verbs naming `context` when the post fails.
  void post_rdma(ibv::ibv_wr_opcode opcode, uint64_t wr_id, ibv::ibv_sge* sge, uint64_t raddr, uint32_t rkey,
                 bool signaled, uint32_t imm_be = 0, const std::string& context = "");

 private:
  std::shared_ptr<ProtectionDomain> pd_;
  ibv::ibv_qp* qp_ = nullptr;
};

}  // namespace gdrlab
