// NCCL's flush queue pair (see FlushReader in qp.h): a loopback RC QP that reads one byte.
#include <cerrno>
#include <chrono>
#include <cstring>
#include <unistd.h>

#include "core/error.h"
#include "verbs/qp.h"

namespace gdrlab {

// ------------------------------------------------------------------------------ FlushReader
FlushReader::FlushReader(std::shared_ptr<ProtectionDomain> pd, const RcLink& link)
    : pd_(std::move(pd)), timeout_ms_(link.config().timeout_ms) {
  const VerbsApi& api = verbs();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = nullptr;
  if (posix_memalign(&p, page, page) != 0) throw_verbs("posix_memalign", ENOMEM, "the flush's host page");
  std::memset(p, 0, page);
  sink_.reset(static_cast<uint64_t*>(p));
  sink_mr_ = MemoryRegion::register_host(pd_, sink_.get(), sizeof(uint64_t), ibv::IBV_ACCESS_LOCAL_WRITE);
  cq_ = std::make_unique<CompletionQueue>(pd_->context(), 4);
  ibv::ibv_qp_init_attr ia;
  std::memset(&ia, 0, sizeof ia);
  ia.send_cq = cq_->get();
  ia.recv_cq = cq_->get();
  ia.qp_type = ibv::IBV_QPT_RC;
  ia.cap.max_send_wr = 2;
  ia.cap.max_recv_wr = 0;  // it only reads; nothing is ever sent to it (as NCCL's flush QP)
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  qp_ = std::make_unique<QueuePair>(pd_, &ia);
  // The target side of the READ is this same QP: it must grant REMOTE_READ (the data QP does not).
  QpAttrs init = qp_init_attrs(link.port(), ibv::IBV_ACCESS_LOCAL_WRITE | ibv::IBV_ACCESS_REMOTE_READ,
                               link.pkey_index());
  int rc = api.modify_qp(qp_->get(), &init.attr, init.mask);
  if (rc) throw_verbs("ibv_modify_qp", rc, "RESET->INIT of the flush queue pair");
  // Connected to itself: our own LID (InfiniBand) or GID (RoCE), our own QP number.
  ConnInfo self = link.self_address();
  self.qpn = qp_num();
  self.psn = 0;
  QpAttrs rtr = qp_rtr_attrs(link.port(), link.link_layer(), link.active_mtu(), link.gid_index(), self,
                             link.address_options());
  rc = api.modify_qp(qp_->get(), &rtr.attr, rtr.mask);
  if (rc) throw_verbs("ibv_modify_qp", rc, "INIT->RTR of the flush queue pair (connected to itself)");
  QpAttrs rts = qp_rts_attrs(0);
  rc = api.modify_qp(qp_->get(), &rts.attr, rts.mask);
  if (rc) throw_verbs("ibv_modify_qp", rc, "RTR->RTS of the flush queue pair");
}

void FlushReader::flush(uint64_t addr, uint32_t rkey) {
  ibv::ibv_sge sge;
  sge.addr = reinterpret_cast<uint64_t>(sink_.get());
  sge.length = 1;
  sge.lkey = sink_mr_->lkey();
  qp_->post_rdma(ibv::IBV_WR_RDMA_READ, ++posted_, &sge, addr, rkey, true, 0,
                 "the RDMA READ that flushes GPUDirect RDMA writes");
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  unsigned empty = 0;
  while (completed_ < posted_) {
    ibv::ibv_wc wc;
    int n = ibv::poll_cq(cq_->get(), 1, &wc);
    if (n < 0) throw_verbs("ibv_poll_cq", EIO, "flush queue pair");
    if (n == 0) {
      if ((++empty & 4095u) == 0 && Clock::now() > deadline)
        throw Error(ErrorKind::PeerTimeout, "libibverbs", "ibv_poll_cq", 0,
                    "the RDMA READ that flushes GPUDirect RDMA writes did not complete within " +
                        std::to_string(timeout_ms_) + " ms");
      continue;
    }
    if (wc.status != ibv::IBV_WC_SUCCESS)
      throw Error(ErrorKind::Verbs, "libibverbs", "ibv_poll_cq", wc.status,
                  std::string("the 1-byte RDMA READ that makes the peer's writes visible in GPU memory failed: ") +
                      verbs().wc_status_str(wc.status) + " (vendor error " + std::to_string(wc.vendor_err) +
                      "); the received data cannot be trusted. The HCA must be able to read the GPU buffer it "
                      "writes (REMOTE_READ on its region and on the flush queue pair); NCCL_GDR_FLUSH_DISABLE=1 "
                      "skips this flush as it does in NCCL");
    if (wc.wr_id > completed_) completed_ = wc.wr_id;
  }
}

}  // namespace gdrlab
