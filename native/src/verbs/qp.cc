#include "verbs/qp.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/knobs.h"
#include "verbs/link_choice.h"

namespace gdrlab {

// ------------------------------------------------------------------------ queue pair attributes
int choose_path_mtu(int local_active_mtu, int remote_active_mtu) {
  for (int m : {local_active_mtu, remote_active_mtu})
    if (m < ibv::IBV_MTU_256 || m > ibv::IBV_MTU_4096)
      throw_invalid("MTU code " + std::to_string(m) + " is not an ibv_mtu value (1..5)");
  return std::min(local_active_mtu, remote_active_mtu);
}

int mtu_bytes(int m) {
  if (m < ibv::IBV_MTU_256 || m > ibv::IBV_MTU_4096) throw_invalid("MTU code " + std::to_string(m) + " is not 1..5");
  return 128 << m;
}

QpAttrs qp_init_attrs(int port, int access, int pkey_index) {
  if (pkey_index < 0 || pkey_index > 0xFFFF) throw_invalid("P_Key index " + std::to_string(pkey_index) + " is not 0..65535");
  QpAttrs q;
  std::memset(&q.attr, 0, sizeof q.attr);
  q.attr.qp_state = ibv::IBV_QPS_INIT;
  q.attr.pkey_index = static_cast<uint16_t>(pkey_index);
  q.attr.port_num = static_cast<uint8_t>(port);
  q.attr.qp_access_flags = static_cast<unsigned>(access);
  q.mask = ibv::IBV_QP_STATE | ibv::IBV_QP_PKEY_INDEX | ibv::IBV_QP_PORT | ibv::IBV_QP_ACCESS_FLAGS;
  return q;
}

QpAttrs qp_rtr_attrs(int port, int local_link_layer, int local_mtu, int sgid_index, const ConnInfo& remote,
                     const AddressOptions& opt) {
  if (opt.service_level < 0 || opt.service_level > 15)
    throw_invalid("service level " + std::to_string(opt.service_level) + " is not 0..15");
  if (opt.traffic_class < 0 || opt.traffic_class > 255)
    throw_invalid("traffic class " + std::to_string(opt.traffic_class) + " is not 0..255");
  if (local_link_layer != remote.link_layer)
    throw_unavailable(std::string("link layers differ: this port is ") +
                      (local_link_layer == ibv::IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand") + ", the peer's is " +
                      (remote.link_layer == ibv::IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand"));
  QpAttrs q;
  std::memset(&q.attr, 0, sizeof q.attr);
  q.attr.qp_state = ibv::IBV_QPS_RTR;
  q.attr.path_mtu = static_cast<ibv::ibv_mtu>(choose_path_mtu(local_mtu, remote.mtu));
  q.attr.dest_qp_num = remote.qpn;
  q.attr.rq_psn = remote.psn;
  q.attr.max_dest_rd_atomic = 1;
  q.attr.min_rnr_timer = 12;  // 0.64 ms before the sender retries after a receiver-not-ready NAK
  q.attr.ah_attr.port_num = static_cast<uint8_t>(port);
  q.attr.ah_attr.sl = static_cast<uint8_t>(opt.service_level);
  q.attr.ah_attr.src_path_bits = 0;
  if (remote.link_layer == ibv::IBV_LINK_LAYER_ETHERNET) {
    // RoCE has no LIDs: every packet carries a GRH addressed by GID. v1 (Ethernet frames) and
    // v2 (UDP/IP) do not interoperate: the first write would only time out (RETRY_EXC).
    if (opt.local_roce_version && remote.roce_version && opt.local_roce_version != remote.roce_version)
      throw_unavailable("RoCE versions differ: this side's GID (index " + std::to_string(sgid_index) + ") is RoCE v" +
                        std::to_string(opt.local_roce_version) + ", the peer's (index " +
                        std::to_string(remote.gid_index) + ") RoCE v" + std::to_string(remote.roce_version) +
                        "; set NCCL_IB_ROCE_VERSION_NUM=2 (or GDRLAB_IB_GID_INDEX to a RoCE v2 entry, see "
                        "show_gids) on both sides");
    q.attr.ah_attr.is_global = 1;
    std::memcpy(q.attr.ah_attr.grh.dgid.raw, remote.gid, 16);
    q.attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(sgid_index);
    q.attr.ah_attr.grh.hop_limit = 255;
    q.attr.ah_attr.grh.flow_label = 0;
    q.attr.ah_attr.grh.traffic_class = static_cast<uint8_t>(opt.traffic_class);
    q.attr.ah_attr.dlid = 0;
  } else {
    if (remote.lid == 0)
      throw_unavailable("the peer's InfiniBand port has LID 0: no subnet manager has configured it (run opensm or check ibstat)");
    // A GRH where the port demands one (the kernel's rdma_check_ah_attr refuses the AV otherwise)
    // or where the peer sits behind a router on another subnet. As NCCL (net_ib connect.cc): a
    // GID is | 10 bits fixed | 22 bits 0 | 16-bit FLID | 16-bit local subnet prefix | 64-bit EUI |,
    // subnets are compared on the local prefix alone (bytes 6-7), and across subnets the packet
    // goes to the peer's FLID (bytes 4-5), the router-forwardable LID, where the fabric has one.
    const bool other_subnet =
        opt.have_local_gid && (opt.local_gid[6] != remote.gid[6] || opt.local_gid[7] != remote.gid[7]);
    const uint16_t flid = static_cast<uint16_t>(remote.gid[4] << 8 | remote.gid[5]);
    q.attr.ah_attr.dlid = other_subnet && flid ? flid : remote.lid;
    q.attr.ah_attr.is_global = opt.grh_required || other_subnet ? 1 : 0;
    if (q.attr.ah_attr.is_global) {
      std::memcpy(q.attr.ah_attr.grh.dgid.raw, remote.gid, 16);
      q.attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(sgid_index);
      q.attr.ah_attr.grh.hop_limit = 255;
      q.attr.ah_attr.grh.traffic_class = static_cast<uint8_t>(opt.traffic_class);
    }
  }
  q.mask = ibv::IBV_QP_STATE | ibv::IBV_QP_AV | ibv::IBV_QP_PATH_MTU | ibv::IBV_QP_DEST_QPN | ibv::IBV_QP_RQ_PSN |
           ibv::IBV_QP_MAX_DEST_RD_ATOMIC | ibv::IBV_QP_MIN_RNR_TIMER;
  return q;
}

QpAttrs qp_rts_attrs(uint32_t sq_psn) {
  QpAttrs q;
  std::memset(&q.attr, 0, sizeof q.attr);
  q.attr.qp_state = ibv::IBV_QPS_RTS;
  q.attr.sq_psn = sq_psn & 0xFFFFFFu;
  q.attr.timeout = 14;   // 4.096 us * 2^14 = 67 ms per try, as perftest
  q.attr.retry_cnt = 7;
  q.attr.rnr_retry = 7;  // 7 = retry forever: a busy receiver slows the sender, never fails it
  q.attr.max_rd_atomic = 1;
  q.mask = ibv::IBV_QP_STATE | ibv::IBV_QP_TIMEOUT | ibv::IBV_QP_RETRY_CNT | ibv::IBV_QP_RNR_RETRY |
           ibv::IBV_QP_SQ_PSN | ibv::IBV_QP_MAX_QP_RD_ATOMIC;
  return q;
}

// ----------------------------------------------------------------------------------- RcLink
RcLink::RcLink(std::shared_ptr<ProtectionDomain> pd, const LinkConfig& cfg) : pd_(std::move(pd)), cfg_(cfg) {
  if (cfg_.sq_depth < 4 || cfg_.rq_depth < 4) throw_invalid("queue depths must be at least 4");
  if (cfg_.timeout_ms <= 0) throw_invalid("timeout must be positive");
  const VerbsApi& api = verbs();
  const Context& ctx = *pd_->context();
  if (const std::string why = rc_unsupported_reason(ctx.info()); !why.empty()) throw_unavailable(why);
  port_ = cfg_.port > 0 ? cfg_.port : ctx.active_port();
  ibv::ibv_port_attr pa = ctx.port_attr(port_);
  if (pa.state != ibv::IBV_PORT_ACTIVE)
    throw_unavailable(ctx.name() + " port " + std::to_string(port_) + " is not ACTIVE");
  link_layer_ = pa.link_layer == ibv::IBV_LINK_LAYER_ETHERNET ? ibv::IBV_LINK_LAYER_ETHERNET
                                                              : ibv::IBV_LINK_LAYER_INFINIBAND;
  mtu_ = pa.active_mtu;
  lid_ = pa.lid;
  grh_required_ = (pa.flags & ibv::IBV_QPF_GRH_REQUIRED) != 0;
  pkey_index_ = resolve_pkey_index(ctx, port_, cfg_, static_cast<int>(pa.pkey_tbl_len));
  if (link_layer_ == ibv::IBV_LINK_LAYER_ETHERNET) {
    gid_index_ = choose_gid_index(ctx, port_, cfg_, pa.gid_tbl_len, &roce_version_);
    gid_ = ctx.gid(port_, gid_index_);
  } else {
    // NCCL's choice: the GID at NCCL_IB_ROUTABLE_FLID_GID_INDEX (default 1) where it carries a
    // FLID (routed InfiniBand), so the peer can address this port through a router; else GID 0.
    gid_index_ = 0;
    const int routable = routable_flid_gid_index();
    if (routable > 0 && routable < pa.gid_tbl_len) {
      try {
        ibv::ibv_gid g = ctx.gid(port_, routable);
        if (g.raw[4] || g.raw[5]) gid_index_ = routable;
      } catch (const Error&) {
        // an index the port cannot answer: GID 0, as without routing
      }
    }
    gid_ = ctx.gid(port_, gid_index_);
  }

  cq_ = std::make_unique<CompletionQueue>(pd_->context(), cfg_.sq_depth + cfg_.rq_depth);
  ibv::ibv_qp_init_attr ia;
  std::memset(&ia, 0, sizeof ia);
  ia.send_cq = cq_->get();
  ia.recv_cq = cq_->get();
  ia.qp_type = ibv::IBV_QPT_RC;
  ia.sq_sig_all = 0;
  ia.cap.max_send_wr = static_cast<uint32_t>(cfg_.sq_depth);
  ia.cap.max_recv_wr = static_cast<uint32_t>(cfg_.rq_depth);
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  // No inline data: the CPU would have to read the payload, which it cannot do for GPU memory,
  // and host and gdr paths should post identical work requests.
  ia.cap.max_inline_data = 0;
  qp_ = std::make_unique<QueuePair>(pd_, &ia);
  QpAttrs init = qp_init_attrs(port_, kDefaultAccess, pkey_index_);
  int rc = api.modify_qp(qp_->get(), &init.attr, init.mask);
  if (rc) throw_verbs("ibv_modify_qp", rc, "RESET->INIT");
  std::random_device rd;
  psn_ = rd() & 0xFFFFFFu;
  // At most rq_depth immediates are queued before reposting stops, plus the receives still posted.
  imm_ring_.assign(2 * static_cast<size_t>(cfg_.rq_depth) + 1, 0);
  // Receives may be posted in INIT: the peer's first write can arrive as soon as we reach RTR.
  for (int i = 0; i < cfg_.rq_depth; ++i) post_recv_one();
}

ConnInfo RcLink::local_info() const {
  ConnInfo c;
  c.qpn = qp_->get()->qp_num;
  c.psn = psn_;
  c.lid = lid_;
  c.link_layer = static_cast<uint8_t>(link_layer_);
  c.mtu = static_cast<uint8_t>(mtu_);
  std::memcpy(c.gid, gid_.raw, 16);
  c.gid_index = static_cast<uint8_t>(gid_index_);
  c.roce_version = static_cast<uint8_t>(roce_version_);
  c.traffic_class = static_cast<uint8_t>(cfg_.traffic_class);
  c.service_level = static_cast<uint8_t>(cfg_.service_level);
  return c;
}

ConnInfo RcLink::self_address() const { return local_info(); }

AddressOptions RcLink::address_options() const {
  AddressOptions opt;
  opt.service_level = cfg_.service_level;
  opt.traffic_class = cfg_.traffic_class;
  opt.grh_required = grh_required_;
  opt.have_local_gid = link_layer_ == ibv::IBV_LINK_LAYER_INFINIBAND;
  opt.local_roce_version = roce_version_;
  std::memcpy(opt.local_gid, gid_.raw, 16);
  return opt;
}

void RcLink::connect(const ConnInfo& remote) {
  const VerbsApi& api = verbs();
  QpAttrs rtr = qp_rtr_attrs(port_, link_layer_, mtu_, gid_index_, remote, address_options());
  int rc = api.modify_qp(qp_->get(), &rtr.attr, rtr.mask);
  if (rc) throw_verbs("ibv_modify_qp", rc, "INIT->RTR");
  QpAttrs rts = qp_rts_attrs(psn_);
  rc = api.modify_qp(qp_->get(), &rts.attr, rts.mask);
  if (rc) throw_verbs("ibv_modify_qp", rc, "RTR->RTS");
}

void RcLink::post_recv_one() {
  // A WRITE WITH IMM consumes a receive but places its payload by rkey/address, so the receive
  // needs no scatter list.
  ibv::ibv_recv_wr wr;
  std::memset(&wr, 0, sizeof wr);
  wr.wr_id = 0;
  wr.num_sge = 0;
  ibv::ibv_recv_wr* bad = nullptr;
  int rc = ibv::post_recv(qp_->get(), &wr, &bad);
  if (rc) throw_verbs("ibv_post_recv", rc);
}

uint64_t RcLink::write_imm(uint64_t laddr, uint32_t lkey, uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t imm,
                           bool signal) {
  // Keep the send queue from overflowing: a signaled completion retires every earlier post.
  while (posted_ - completed_ >= static_cast<uint64_t>(cfg_.sq_depth) - 1) {
    if (last_signaled_ <= completed_) {
      drain();
      break;
    }
    wait_for([&] { return posted_ - completed_ < static_cast<uint64_t>(cfg_.sq_depth) - 1; }, "send queue space");
  }
  ibv::ibv_sge sge;
  sge.addr = laddr;
  sge.length = len;
  sge.lkey = lkey;
  const uint64_t seq = posted_ + 1;
  signal = signal || ++unsignaled_ >= cfg_.sq_depth / 4;
  qp_->post_rdma(ibv::IBV_WR_RDMA_WRITE_WITH_IMM, seq, len ? &sge : nullptr, raddr, rkey, signal, htonl(imm));
  posted_ = seq;
  if (signal) {
    last_signaled_ = seq;
    unsignaled_ = 0;
  }
  return seq;
}

void RcLink::wait_sent(uint64_t seq) {
  if (seq > last_signaled_) throw_invalid("wait_sent on a write that was not signaled");
  wait_for([&] { return completed_ >= seq; }, "a write completion");
}

void RcLink::drain() {
  if (completed_ >= posted_) return;
  if (last_signaled_ < posted_) {
    // A zero-length plain RDMA WRITE, signaled: its completion retires everything before it and
    // it consumes no receive on the peer. It names the peer's real region (set_drain_target), not
    // address 0 / rkey 0, which some adapters refuse even for zero bytes.
    if (!drain_rkey_) throw_invalid("drain before the peer's region is known");
    qp_->post_rdma(ibv::IBV_WR_RDMA_WRITE, ++posted_, nullptr, drain_addr_, drain_rkey_, true);
    last_signaled_ = posted_;
    unsignaled_ = 0;
  }
  const uint64_t target = posted_;
  wait_for([&] { return completed_ >= target; }, "outstanding writes");
}

void RcLink::wait_signaled() {
  const uint64_t target = last_signaled_;
  wait_for([&] { return completed_ >= target; }, "the last signaled write");
}

uint32_t RcLink::wait_imm() {
  wait_for([&] { return imm_count_ > 0; }, "a message from the peer");
  uint32_t v = imm_ring_[imm_head_];
  imm_head_ = (imm_head_ + 1) % imm_ring_.size();
  --imm_count_;
  if (recv_deficit_ > 0) {
    --recv_deficit_;
    post_recv_one();
  }
  return v;
}

int RcLink::poll_some() {
  ibv::ibv_wc wc[16];
  int n = ibv::poll_cq(cq_->get(), 16, wc);
  if (n < 0) throw_verbs("ibv_poll_cq", EIO);
  for (int i = 0; i < n; ++i) {
    const ibv::ibv_wc& w = wc[i];
    if (w.status != ibv::IBV_WC_SUCCESS) {
      std::string why = verbs().wc_status_str(w.status);
      if (w.status == ibv::IBV_WC_RETRY_EXC_ERR)
        why += ": the peer did not acknowledge (wrong LID/GID index, link down, or the peer's QP is gone)";
      else if (w.status == ibv::IBV_WC_REM_ACCESS_ERR)
        why += ": the peer refused the write (rkey/address outside its memory region)";
      else if (w.status == ibv::IBV_WC_LOC_PROT_ERR || w.status == ibv::IBV_WC_LOC_ACCESS_ERR)
        why += ": local buffer outside its memory region (lkey)";
      throw Error(ErrorKind::Verbs, "libibverbs", "ibv_poll_cq", w.status,
                  why + " (vendor error " + std::to_string(w.vendor_err) + ")");
    }
    if (w.opcode & ibv::IBV_WC_RECV) {
      size_t tail = (imm_head_ + imm_count_) % imm_ring_.size();
      imm_ring_[tail] = ntohl(w.imm_data);
      ++imm_count_;
      // Repost at once unless the messages pile up unread: then the peer waits (RNR) instead of
      // overrunning the ring.
      if (imm_count_ < static_cast<size_t>(cfg_.rq_depth)) post_recv_one();
      else ++recv_deficit_;
    } else if (w.wr_id > completed_) {
      completed_ = w.wr_id;  // RC completes in order: this retires every earlier post
    }
  }
  return n;
}

template <class Done>
void RcLink::wait_for(Done done, const char* waiting_for) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline{};
  unsigned empty = 0;
  while (!done()) {
    if (poll_some() > 0) {
      empty = 0;
      continue;
    }
    // Reading the clock costs more than a poll: check it every few thousand empty polls.
    if ((++empty & 4095u) == 0) {
      Clock::time_point now = Clock::now();
      if (deadline == Clock::time_point{}) deadline = now + std::chrono::milliseconds(cfg_.timeout_ms);
      else if (now > deadline)
        throw Error(ErrorKind::PeerTimeout, "libibverbs", "ibv_poll_cq", 0,
                    std::string("no completion within ") + std::to_string(cfg_.timeout_ms) + " ms while waiting for " +
                        waiting_for);
    }
  }
}

}  // namespace gdrlab
