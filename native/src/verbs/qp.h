// An RC queue pair and what the two sides exchange to connect it, as perftest and NCCL do:
// each side creates its QP, sends (LID, GID, QPN, PSN, MTU, rkey, address) over the tcp wire, and
// moves its QP RESET -> INIT -> RTR (needs the peer's data) -> RTS.
//
// The connection data is in verbs/conn_info.h, the GID choice in verbs/gid.h. The attribute
// choices are pure functions so tests can check them without an HCA:
//   path MTU      min(local port active_mtu, remote port active_mtu)
//   addressing    InfiniBand: destination LID (plus a GRH where the port requires one or the
//                 subnets differ); RoCE: GRH with the peer's GID and our GID index
//   GID index     RoCE v2 before v1, IPv4-mapped (::ffff:a.b.c.d) before other GIDs, link-local last;
//                 NCCL's ADDR_FAMILY / ADDR_RANGE / ROCE_VERSION_NUM knobs narrow it (GidPolicy)
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "verbs/abi.h"
#include "verbs/conn_info.h"
#include "verbs/gid.h"
#include "verbs/resources.h"

namespace gdrlab {

int choose_path_mtu(int local_active_mtu, int remote_active_mtu);  // ibv_mtu values 1..5
int mtu_bytes(int ibv_mtu);                                          // 256..4096

struct QpAttrs {
  ibv::ibv_qp_attr attr;
  int mask = 0;
};
QpAttrs qp_init_attrs(int port, int access, int pkey_index = 0);

// How packets are addressed and queued beyond the peer's data.
struct AddressOptions {
  int service_level = 0;   // IB SL (0..15): the virtual lane / RoCE priority mapping
  int traffic_class = 0;   // GRH traffic class (RoCE: DSCP << 2 | ECN), e.g. 106 for DSCP 26 + ECT
  bool grh_required = false;  // our port's IBV_QPF_GRH_REQUIRED (virtualised IB, SR-IOV VFs)
  bool have_local_gid = false;
  uint8_t local_gid[16] = {};  // InfiniBand: our GID 0, whose subnet prefix is compared with the peer's
  int local_roce_version = 0;  // RoCE: our GID's version; a known one that differs from the peer's is refused
};
// local_mtu: our port's active_mtu; sgid_index used on RoCE, and on InfiniBand when a GRH is
// needed (the port requires one, or the peers' subnet prefixes differ), as NCCL's ncclIbQpRtr.
// Throws Unavailable for an InfiniBand peer with LID 0 (no subnet manager) and for mixed link layers.
QpAttrs qp_rtr_attrs(int port, int local_link_layer, int local_mtu, int sgid_index, const ConnInfo& remote,
                     const AddressOptions& opt = AddressOptions());
QpAttrs qp_rts_attrs(uint32_t sq_psn);

struct LinkConfig {
  int port = 0;         // 0: the device's first ACTIVE port
  int gid_index = -1;   // -1: select_gid_index on RoCE
  int sq_depth = 256;   // send work requests in flight
  int rq_depth = 256;   // receive work requests posted (each absorbs one WRITE_WITH_IMM)
  int timeout_ms = 10000;
  int service_level = 0;   // AddressOptions::service_level
  int traffic_class = 0;   // AddressOptions::traffic_class
  int pkey_index = 0;      // index into the port's P_Key table
  int pkey = -1;           // a P_Key value (resolved to its index with ibv_get_pkey_index); -1: use pkey_index
  bool have_peer_gid = false;   // the peer's GID is known before ours is chosen (the passive side)
  uint8_t peer_gid[16] = {};
  bool gid_policy_set = false;  // false: gid_policy_from_env() when the index is chosen
  GidPolicy gid_policy;
};

// One RC queue pair on one completion queue, carrying RDMA WRITE WITH IMMEDIATE.
class RcLink {
 public:
  RcLink(std::shared_ptr<ProtectionDomain> pd, const LinkConfig& cfg);
  RcLink(const RcLink&) = delete;
  RcLink& operator=(const RcLink&) = delete;

  // Our half of the connection data; the caller fills rkey/addr/length.
  ConnInfo local_info() const;
  // RTR then RTS against the peer's data.
  void connect(const ConnInfo& remote);

  // Posts one RDMA WRITE WITH IMM of [laddr, laddr+len) to the peer's raddr. len 0 sends only
  // the immediate. Returns the post's sequence number; wait_sent(seq) needs signal=true.
  uint64_t write_imm(uint64_t laddr, uint32_t lkey, uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t imm,
                     bool signal);
  void wait_sent(uint64_t seq);
  // Waits until every posted write completed; posts a signaled zero-length write when the last
  // post was unsignaled, so the peer's QP must still exist.
  void drain();
  // The peer's region that drain()'s zero-length write names.
  void set_drain_target(uint64_t addr, uint32_t rkey) {
    drain_addr_ = addr;
    drain_rkey_ = rkey;
  }
  // Waits for the last signaled write: posts nothing, safe while the peer tears down.
  void wait_signaled();
  // The next immediate value the peer sent (host byte order); the receive is reposted.
  uint32_t wait_imm();

  // What a queue pair on the same port needs to be addressed like this one (a loopback QP).
  ConnInfo self_address() const;
  AddressOptions address_options() const;
  const LinkConfig& config() const { return cfg_; }

  int port() const { return port_; }
  int gid_index() const { return gid_index_; }
  int pkey_index() const { return pkey_index_; }
  int link_layer() const { return link_layer_; }
  int active_mtu() const { return mtu_; }
  const std::string& device_name() const { return pd_->context()->name(); }
  const std::shared_ptr<ProtectionDomain>& pd() const { return pd_; }

 private:
  // Polls the CQ once, handling every completion found; returns how many.
  int poll_some();
  // Spins on poll_some until done() holds; throws PeerTimeout after cfg_.timeout_ms without it.
  template <class Done>
  void wait_for(Done done, const char* waiting_for);
  void post_recv_one();

  std::shared_ptr<ProtectionDomain> pd_;
  LinkConfig cfg_;
  // The CQ before the QP: members go in reverse, so the QP is destroyed first, and a constructor
  // that throws after creating the QP (a failed receive post) destroys it too.
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<QueuePair> qp_;
  // The port as connected: number, GID index (RoCE), link layer, active MTU, LID (InfiniBand).
  int port_ = 1, gid_index_ = 0, link_layer_ = 0, mtu_ = 0, pkey_index_ = 0, roce_version_ = 0;
  bool grh_required_ = false;
  uint16_t lid_ = 0;
  ibv::ibv_gid gid_{};
  uint32_t psn_ = 0;
  // Send-queue accounting: RC completes in order, so one signaled completion retires all before it.
  uint64_t posted_ = 0, completed_ = 0, last_signaled_ = 0;
  uint64_t drain_addr_ = 0;
  uint32_t drain_rkey_ = 0;
  int unsignaled_ = 0;
  std::vector<uint32_t> imm_ring_;  // immediates received, not yet consumed
  size_t imm_head_ = 0, imm_count_ = 0;
  int recv_deficit_ = 0;  // receives not reposted while too many immediates wait to be consumed
};

// NCCL's GPUDirect RDMA flush by the HCA itself (net_ib's gpuFlush QP and ncclIbIflush): an RC
// queue pair connected to itself reads one byte of the GPU buffer the peer's writes landed in,
// into a host word. PCIe ordering lets a read response pass no posted write ahead of it, so the
// READ completes only once every earlier inbound write to that buffer is visible to the GPU. Its
// QP alone grants REMOTE_READ: the peer's QP does not, so the rkey the peer holds stays write-only
// there even though the region is registered readable.
class FlushReader {
 public:
  // Same port, GID index, P_Key, SL and traffic class as `link`; its own CQ.
  FlushReader(std::shared_ptr<ProtectionDomain> pd, const RcLink& link);
  FlushReader(const FlushReader&) = delete;
  FlushReader& operator=(const FlushReader&) = delete;
  // One signaled 1-byte RDMA READ of addr (in the region of rkey), waited for. Throws Verbs on a
  // failed completion, PeerTimeout after the link's timeout.
  void flush(uint64_t addr, uint32_t rkey);
  uint32_t qp_num() const { return qp_->get()->qp_num; }
  uint64_t reads() const { return completed_; }

 private:
  std::shared_ptr<ProtectionDomain> pd_;
  int timeout_ms_ = 10000;
  // Reverse order on destruction: the QP first, then its CQ, then the host word's region.
  // A whole page of its own: with fork protection on (kernels before 5.13), registering it marks
  // its page MADV_DONTFORK, which must not take neighbouring heap objects with it.
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<uint64_t, FreeDeleter> sink_;
  std::unique_ptr<MemoryRegion> sink_mr_;
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<QueuePair> qp_;
  uint64_t posted_ = 0, completed_ = 0;
};

}  // namespace gdrlab
