// Part of fake_ibverbs.cc (included there, after its state): the queries tests read through ctypes.
// Not a header of its own: it uses the stand-in's file-local state and exports C symbols.
#pragma once

extern "C" {

// For tests: how many live regions have every bit of `access` set.
int fake_ibv_mr_count_with_access(int access) {
  std::lock_guard<std::mutex> l(mu);
  int n = 0;
  for (FakeMr* m : mrs) n += (m->access & access) == access;
  return n;
}

// For tests: teardown steps taken out of order so far, and queue pairs still alive.
int fake_ibv_order_violations() {
  std::lock_guard<std::mutex> l(mu);
  return order_violations;
}
int fake_ibv_live_qps() {
  std::lock_guard<std::mutex> l(mu);
  return static_cast<int>(qps.size());
}

// For tests: the last INIT/RTR attributes (pkey_index, is_global, sgid_index, traffic_class, sl,
// hop_limit) and how often ibv_fork_init was called.
void fake_ibv_last_attrs(int* out) {
  std::lock_guard<std::mutex> l(mu);
  std::memcpy(out, last_attrs, sizeof last_attrs);
}
int fake_ibv_fork_inits() {
  std::lock_guard<std::mutex> l(mu);
  return fork_inits;
}
// For tests: writes into a range whose earlier write-with-immediate the receiver had not yet
// polled (it could still be copying that message out when the new bytes landed).
int fake_ibv_unconsumed_overwrites() {
  std::lock_guard<std::mutex> l(mu);
  return overwrites;
}

// For tests: the number of RDMA READs posted, and the last one's fields in `out` (9 values, in
// ReadRecord's order after count).
long long fake_ibv_reads(long long* out) {
  std::lock_guard<std::mutex> l(mu);
  const long long v[9] = {reads.opcode, reads.length, reads.self, reads.target_dmabuf, reads.target_offset,
                          reads.local_region_length, reads.lkey_ok, reads.rkey_ok, reads.qp_num};
  std::memcpy(out, v, sizeof v);
  return reads.count;
}

// For tests: ibv_open_device calls so far, the deepest receive queue asked for, and the
// (traffic_class, sl) of every INIT->RTR transition (up to `max` pairs into out; returns the count).
int fake_ibv_device_opens() {
  std::lock_guard<std::mutex> l(mu);
  return device_opens;
}
int fake_ibv_rtr_sgid(int n) {
  std::lock_guard<std::mutex> l(mu);
  return n >= 0 && static_cast<size_t>(n) < rtr_sgid.size() ? rtr_sgid[static_cast<size_t>(n)] : -2;
}
int fake_ibv_unaligned_regs() {
  std::lock_guard<std::mutex> l(mu);
  return unaligned_regs;
}
int fake_ibv_max_recv_wr() {
  std::lock_guard<std::mutex> l(mu);
  return max_recv_wr_seen;
}
// For tests: the most data writes one queue pair posted without polling a receive in between,
// and writes with immediate that found no receive posted (RNR NAKs on a real HCA).
long long fake_ibv_max_data_since_recv() {
  std::lock_guard<std::mutex> l(mu);
  return max_data_since_recv;
}
int fake_ibv_rnr_arrivals() {
  std::lock_guard<std::mutex> l(mu);
  return rnr_arrivals;
}
int fake_ibv_rtr_log(int* out, int max) {
  std::lock_guard<std::mutex> l(mu);
  int n = 0;
  for (const auto& [tc, sl] : rtr_log) {
    if (n >= max) break;
    out[2 * n] = tc;
    out[2 * n + 1] = sl;
    ++n;
  }
  return static_cast<int>(rtr_log.size());
}

}  // extern "C"
