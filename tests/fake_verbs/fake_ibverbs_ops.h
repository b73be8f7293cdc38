// Part of fake_ibverbs.cc (included at its end): the context ops the engine calls through
// ibv_context::ops, as verbs.h's inline ibv_poll_cq / ibv_post_recv / ibv_post_send do.
#pragma once

namespace {

int fake_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  // FAKE_IBV_SLOW_RECV_US=N: a receiver slower than its sender, N microseconds per message.
  static const char* slow = std::getenv("FAKE_IBV_SLOW_RECV_US");
  bool got_recv = false;
  int k = 0;
  {
    std::lock_guard<std::mutex> l(mu);
    auto* f = reinterpret_cast<FakeCq*>(cq);
    while (k < n && !f->wcs.empty()) {
      wc[k] = f->wcs.front();
      f->wcs.pop_front();
      if (wc[k].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        got_recv = true;
        auto it = qps.find(wc[k].qp_num);
        if (it != qps.end() && !it->second->unconsumed.empty()) it->second->unconsumed.pop_front();
        if (it != qps.end()) it->second->data_since_recv = 0;
      }
      ++k;
    }
  }
  if (got_recv && slow) std::this_thread::sleep_for(std::chrono::microseconds(std::atoi(slow)));
  return k;
}

int fake_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  std::lock_guard<std::mutex> l(mu);
  auto* q = reinterpret_cast<FakeQp*>(qp);
  if (q->qp.state == IBV_QPS_RESET) {
    *bad = wr;
    return EINVAL;
  }
  // FAKE_IBV_FAIL_RECV_AFTER=n: the (n+1)-th receive post of the process fails (a full queue).
  static int recv_posts = 0;
  const char* fail_after = std::getenv("FAKE_IBV_FAIL_RECV_AFTER");
  if (fail_after && recv_posts++ >= std::atoi(fail_after)) {
    *bad = wr;
    return ENOMEM;
  }
  for (; wr; wr = wr->next) {
    ++q->posted_recvs;
    q->recv_ids.push_back(wr->wr_id);
  }
  deliver(q);
  return 0;
}

int fake_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  std::lock_guard<std::mutex> l(mu);
  auto* q = reinterpret_cast<FakeQp*>(qp);
  if (q->qp.state != IBV_QPS_RTS) {
    *bad = wr;
    return EINVAL;
  }
  const bool corrupt = std::getenv("FAKE_IBV_CORRUPT") != nullptr;
  for (; wr; wr = wr->next) {
    if ((wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM && wr->opcode != IBV_WR_RDMA_READ) ||
        (kind() == "iwarp" && wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {  // iWARP has no immediate data
      *bad = wr;
      return EINVAL;
    }
    ibv_wc_status status = IBV_WC_SUCCESS;
    uint64_t len = wr->num_sge ? wr->sg_list[0].length : 0;
    auto it = qps.find(q->dest_qpn);
    if (wr->opcode == IBV_WR_RDMA_READ) {
      FakeMr* local = wr->num_sge ? find_mr(wr->sg_list[0].addr, len, wr->sg_list[0].lkey, false) : nullptr;
      FakeMr* target = find_mr(wr->wr.rdma.remote_addr, len, wr->wr.rdma.rkey, true);
      ++reads.count;
      reads.opcode = wr->opcode;
      reads.length = static_cast<long long>(len);
      reads.self = q->dest_qpn == q->qp.qp_num;
      reads.target_dmabuf = target ? target->dmabuf : -1;
      reads.target_offset = target ? static_cast<long long>(wr->wr.rdma.remote_addr -
                                                           reinterpret_cast<uint64_t>(target->mr.addr)) : -1;
      reads.local_region_length = local ? static_cast<long long>(local->mr.length) : -1;
      reads.lkey_ok = local != nullptr;
      reads.rkey_ok = target != nullptr;
      reads.qp_num = q->qp.qp_num;
      if (it == qps.end() || it->second->qp.state < IBV_QPS_RTR) status = IBV_WC_RETRY_EXC_ERR;
      else if (!local || !(local->access & IBV_ACCESS_LOCAL_WRITE) || !len) status = IBV_WC_LOC_PROT_ERR;
      else if (q->max_rd_atomic < 1 || it->second->max_dest_rd_atomic < 1) status = IBV_WC_REM_INV_REQ_ERR;
      else if (!target || !(target->access & IBV_ACCESS_REMOTE_READ) || !(it->second->access & IBV_ACCESS_REMOTE_READ) ||
               (std::getenv("FAKE_IBV_FAIL_READ") && reads.count >= std::atoll(std::getenv("FAKE_IBV_FAIL_READ"))))
        status = IBV_WC_REM_ACCESS_ERR;
      else
        std::memmove(reinterpret_cast<void*>(wr->sg_list[0].addr), reinterpret_cast<void*>(wr->wr.rdma.remote_addr), len);
      ibv_wc w;
      std::memset(&w, 0, sizeof w);
      w.wr_id = wr->wr_id;
      w.status = status;
      w.opcode = IBV_WC_RDMA_READ;
      w.qp_num = q->qp.qp_num;
      reinterpret_cast<FakeCq*>(q->qp.send_cq)->wcs.push_back(w);  // READs here are always signaled
      continue;
    }
    if (it == qps.end() || it->second->qp.state < IBV_QPS_RTR) {
      status = IBV_WC_RETRY_EXC_ERR;
    } else if (!len && wr->opcode == IBV_WR_RDMA_WRITE && wr->wr.rdma.rkey == 0) {
      status = IBV_WC_REM_ACCESS_ERR;  // as adapters that validate even zero-length writes
    } else if (len) {
      FakeMr* src = find_mr(wr->sg_list[0].addr, len, wr->sg_list[0].lkey, false);
      FakeMr* dst = find_mr(wr->wr.rdma.remote_addr, len, wr->wr.rdma.rkey, true);
      if (!src) status = IBV_WC_LOC_PROT_ERR;
      else if (!dst || !(dst->access & IBV_ACCESS_REMOTE_WRITE)) status = IBV_WC_REM_ACCESS_ERR;
      else {
        const uint64_t a = wr->wr.rdma.remote_addr;
        for (const auto& [ua, ul] : it->second->unconsumed) overwrites += ul && a < ua + ul && ua < a + len;
        std::memmove(reinterpret_cast<void*>(wr->wr.rdma.remote_addr),
                     reinterpret_cast<void*>(wr->sg_list[0].addr), len);
        if (corrupt) reinterpret_cast<uint8_t*>(wr->wr.rdma.remote_addr)[len / 2] ^= 0x5a;
      }
    }
    if (status == IBV_WC_SUCCESS && wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      it->second->unconsumed.push_back({wr->wr.rdma.remote_addr, len});
      it->second->pending.push_back({0, wr->imm_data});
      deliver(it->second);
      if (!it->second->pending.empty()) ++rnr_arrivals;
      if (len) max_data_since_recv = std::max(max_data_since_recv, ++q->data_since_recv);
    }
    if ((wr->send_flags & IBV_SEND_SIGNALED) || status != IBV_WC_SUCCESS) {
      ibv_wc w;
      std::memset(&w, 0, sizeof w);
      w.wr_id = wr->wr_id;
      w.status = status;
      w.opcode = IBV_WC_RDMA_WRITE;
      w.qp_num = q->qp.qp_num;
      reinterpret_cast<FakeCq*>(q->qp.send_cq)->wcs.push_back(w);
    }
  }
  return 0;
}

}  // namespace
