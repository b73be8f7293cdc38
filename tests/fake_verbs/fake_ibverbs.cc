// A stand-in for libibverbs.so.1 used by tests/verbs/test_verbs_fake.py: one InfiniBand device whose
// "HCA" is memcpy inside one process. It exports the same calls the engine resolves and fills the
// context's ops table (post_send, post_recv, poll_cq), so the engine's real code paths run:
// loader, queue-pair state machine, connection exchange, RDMA WRITE WITH IMM, completions.
//
// It checks what a real provider and the kernel check: modify_qp's attribute masks per state
// transition (required and allowed bits, as the kernel's qp_state_table), posting only in the
// right states, lkey/rkey bounds and REMOTE_WRITE access. A receive-not-ready write waits for a
// receive, as RNR retry with rnr_retry = 7 does.
//
// Built with fake_ibverbs.map, it exports the IBVERBS_1.1 calls, IBVERBS_1.5's ibv_get_pkey_index,
// IBVERBS_1.8's ibv_reg_mr_iova2 and IBVERBS_1.11's _ibv_query_gid_table under those version
// names, but not IBVERBS_1.12's ibv_reg_dmabuf_mr. Built with -DFAKE_IBV_WITH_DMABUF and
// fake_ibverbs_dmabuf.map it exports that one too.
//
// Environment: FAKE_IBV_CORRUPT=1 flips one byte of every non-empty write (to prove that
// verification catches it); FAKE_IBV_MAX_MR=N fails registrations larger than N bytes with ENOMEM.
// FAKE_IBV_LINK=roce makes the port Ethernet with four GIDs, as mlx5 lists one IPv4 address:
// 0 fe80:: v1, 1 fe80:: v2, 2 ::ffff:10.0.0.1 v1, 3 ::ffff:10.0.0.1 v2 (no sysfs types exist);
// FAKE_IBV_NO_GID_TABLE=1 makes _ibv_query_gid_table fail (EOPNOTSUPP), as before rdma-core 32.
// FAKE_IBV_GRH_REQUIRED=1 sets IBV_QPF_GRH_REQUIRED on the port: an address vector without a GRH
// is refused with EINVAL, as the kernel's rdma_check_ah_attr does. The P_Key table is
// {0xffff, 0x8001}; a QP given an index past it is refused. FAKE_IBV_DMABUF_ERRNO=NAME makes
// ibv_reg_dmabuf_mr fail with that errno (EPROTONOSUPPORT, ENOTTY, EOPNOTSUPP, EINVAL, EFAULT);
// unset, it registers like ibv_reg_mr. FAKE_IBV_SLOW_RECV_US=N makes a poll that returns a
// receive completion take N microseconds more (a receiver slower than its sender).
// FAKE_IBV_GIDS="2 ::ffff:10.0.0.1,1 fe80::11,..." replaces the RoCE table: one "<RoCE version>
// <IPv6 text>" per index (an address of "::" is an empty slot).
//
// FAKE_IBV_KIND=efa makes the devices EFA-like (names rdmap<N>s0, vendor 0x1d0f, node and transport
// type UNSPECIFIED, link layer UNSPECIFIED, no RC queue pairs: ibv_create_qp(RC) fails with
// EOPNOTSUPP); FAKE_IBV_KIND=iwarp makes them iWARP-like (irdma<N>, node type RNIC, transport
// IWARP, link layer Ethernet; a WRITE WITH IMMEDIATE is refused at post time). FAKE_IBV_DEV_DIR=D
// drops every device whose D/uverbs<N> does not exist, as libibverbs does with /dev/infiniband
// (rdma-core init.c). FAKE_IBV_CHECK_MEMLOCK=1 refuses ibv_reg_mr, ibv_create_cq and
// ibv_create_qp with EPERM while RLIMIT_MEMLOCK is 0, as the kernel's ib_umem_get does without
// CAP_IPC_LOCK (the stand-in ignores capabilities).
//
// RDMA READ is modelled as NCCL's GPUDirect flush uses it: the target region needs REMOTE_READ,
// the target QP (the destination, here possibly the poster itself) REMOTE_READ in its access
// flags and max_dest_rd_atomic >= 1, the poster max_rd_atomic >= 1, the local region LOCAL_WRITE.
// fake_ibv_reads() reports how many READs were posted and what the last one named;
// FAKE_IBV_FAIL_READ=N completes the N-th READ of the process and every later one with
// IBV_WC_REM_ACCESS_ERR.
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "verbs/abi.h"

using namespace gdrlab::ibv;

namespace {

struct FakeCq {
  ibv_cq cq;
  std::deque<ibv_wc> wcs;
};

struct FakeQp {
  ibv_qp qp;
  uint32_t dest_qpn = 0;
  int port_mtu = IBV_MTU_4096;
  int posted_recvs = 0;
  std::deque<std::pair<uint64_t, uint32_t>> pending;  // (unused, imm) waiting for a receive
  std::deque<uint64_t> recv_ids;
  // Ranges written with an immediate whose receive completion the owner has not polled yet, in
  // arrival order (zero-length for ACKs): the receiver may still be copying them out.
  std::deque<std::pair<uint64_t, uint64_t>> unconsumed;
  unsigned access = 0;  // qp_access_flags from INIT
  int max_rd_atomic = 0, max_dest_rd_atomic = 0;
  long long data_since_recv = 0;  // data writes (length > 0) posted since this QP last polled a receive
};

struct FakeMr {
  ibv_mr mr;
  int access = 0;
  bool dmabuf = false;
};

// The last RDMA READ posted: opcode, length, whether the QP was connected to itself, whether the
// rkey's region was registered through dma-buf (GPU memory), the offset of the address in that
// region, the length of the lkey's region, whether lkey/rkey named valid regions, the QP's number.
struct ReadRecord {
  long long count = 0, opcode = -1, length = -1, self = -1, target_dmabuf = -1, target_offset = -1,
            local_region_length = -1, lkey_ok = -1, rkey_ok = -1, qp_num = -1;
} reads;

std::mutex mu;
constexpr uint16_t kPkeys[] = {0xffff, 0x8001};
constexpr int kRoceGids = 4;
// What the last INIT and RTR transitions asked for, for tests: pkey_index, is_global, sgid_index,
// traffic_class, sl, hop_limit.
int last_attrs[6] = {-1, -1, -1, -1, -1, -1};
int fork_inits = 0;
int device_opens = 0;       // ibv_open_device calls
int unaligned_regs = 0;     // host registrations that start inside a page
int max_recv_wr_seen = 0;   // the deepest receive queue asked for
// Bandwidth streaming: the most data writes one QP posted without polling a receive in between
// (a windowed sender polls the peer's ACK after every window), and writes with immediate that
// found no posted receive (a real responder answers those with a receiver-not-ready NAK).
long long max_data_since_recv = 0;
int rnr_arrivals = 0;
std::vector<std::pair<int, int>> rtr_log;  // (traffic_class, sl) of every INIT->RTR, in order
std::vector<int> rtr_sgid;                 // the source GID index of each (-1: no GRH)
// Writes that landed on bytes of an earlier message the receiver had not consumed yet.
int overwrites = 0;

std::string kind() {
  const char* v = std::getenv("FAKE_IBV_KIND");
  return v ? v : "";
}
// The kernel's ib_umem_get: EPERM when nothing may be locked (RLIMIT_MEMLOCK 0, no CAP_IPC_LOCK).
bool memlock_refused() {
  if (!std::getenv("FAKE_IBV_CHECK_MEMLOCK")) return false;
  rlimit rl{};
  return getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == 0;
}

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}
bool roce() {
  const char* v = std::getenv("FAKE_IBV_LINK");
  return v && std::strcmp(v, "roce") == 0;
}
// FAKE_IBV_GIDS, parsed: (RoCE version, GID) per index; empty when unset.
std::vector<std::pair<int, ibv_gid>> custom_gids() {
  std::vector<std::pair<int, ibv_gid>> out;
  const char* e = std::getenv("FAKE_IBV_GIDS");
  if (!e || !*e) return out;
  std::string all(e);
  size_t i = 0;
  while (i <= all.size()) {
    size_t j = all.find(',', i);
    if (j == std::string::npos) j = all.size();
    std::string item = all.substr(i, j - i);
    size_t sp = item.find(' ');
    ibv_gid g;
    std::memset(&g, 0, sizeof g);
    int version = std::atoi(item.substr(0, sp).c_str());
    if (sp == std::string::npos || inet_pton(AF_INET6, item.substr(sp + 1).c_str(), g.raw) != 1) {
      std::fprintf(stderr, "fake_ibverbs: bad FAKE_IBV_GIDS entry '%s'\n", item.c_str());
      std::abort();
    }
    out.push_back({version, g});
    i = j + 1;
  }
  return out;
}

int gid_count() {
  const size_t n = custom_gids().size();  // FAKE_IBV_GIDS sets an InfiniBand port's table too
  if (!roce()) return n ? static_cast<int>(n) : 1;
  return n ? static_cast<int>(n) : kRoceGids;
}

int gid_version(int index) {
  const auto custom = custom_gids();
  if (!custom.empty()) return custom[static_cast<size_t>(index)].first;
  return index % 2 ? 2 : 1;
}

void fill_gid(int index, ibv_gid* g) {
  std::memset(g, 0, sizeof *g);
  const auto custom = custom_gids();
  if (!custom.empty()) {
    *g = custom[static_cast<size_t>(index)].second;
    return;
  }
  if (!roce() || index < 2) {  // fe80::11 (IB port GID, or the RoCE link-local pair)
    g->raw[0] = 0xfe;
    g->raw[1] = 0x80;
    g->raw[15] = 0x11;
    return;
  }
  g->raw[10] = g->raw[11] = 0xff;  // ::ffff:10.0.0.1
  g->raw[12] = 10;
  g->raw[15] = 1;
}
std::map<uint32_t, FakeQp*> qps;
std::vector<FakeMr*> mrs;
// Teardown out of order: a region deregistered or a PD freed while a QP of that PD still lives,
// a CQ destroyed under a live QP. A real HCA may still be writing into such a region.
int order_violations = 0;
uint32_t next_qpn = 0x100;
uint32_t next_key = 0x1000;
ibv_device the_devices[4];
ibv_device* the_list[5] = {};

int fake_poll_cq(ibv_cq* cq, int n, ibv_wc* wc);
int fake_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int fake_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);

FakeMr* find_mr(uint64_t addr, uint64_t len, uint32_t key, bool remote) {
  for (FakeMr* m : mrs) {
    uint32_t k = remote ? m->mr.rkey : m->mr.lkey;
    uint64_t a = reinterpret_cast<uint64_t>(m->mr.addr);
    if (k == key && addr >= a && addr + len <= a + m->mr.length) return m;
  }
  return nullptr;
}

void deliver(FakeQp* q) {
  while (q->posted_recvs > 0 && !q->pending.empty()) {
    ibv_wc w;
    std::memset(&w, 0, sizeof w);
    w.wr_id = q->recv_ids.front();
    q->recv_ids.pop_front();
    w.status = IBV_WC_SUCCESS;
    w.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    w.wc_flags = IBV_WC_WITH_IMM;
    w.imm_data = q->pending.front().second;
    w.qp_num = q->qp.qp_num;
    q->pending.pop_front();
    --q->posted_recvs;
    reinterpret_cast<FakeCq*>(q->qp.recv_cq)->wcs.push_back(w);
  }
}

// An address vector as the kernel and mlx5 check it: RoCE needs a GRH with a valid source GID;
// InfiniBand needs a LID, and a GRH where the port requires one.
bool address_ok(const ibv_ah_attr& ah) {
  if (ah.is_global) {
    if (ah.grh.sgid_index >= gid_count() || ah.grh.hop_limit == 0) return false;
    bool zero = true;
    for (uint8_t b : ah.grh.dgid.raw) zero = zero && b == 0;
    if (zero) return false;
  }
  if (roce()) return ah.is_global;
  return ah.dlid != 0 && (ah.is_global || !env_on("FAKE_IBV_GRH_REQUIRED"));
}

bool check_mask(int mask, int required, int optional) {
  return (mask & required) == required && (mask & ~(required | optional)) == 0;
}

}  // namespace

extern "C" {

// FAKE_IBV_DEVICES=N (1..4, default 1): devices fake0..fake<N-1>, alike.
ibv_device** ibv_get_device_list(int* n) {
  const char* e = std::getenv("FAKE_IBV_DEVICES");
  const int count = e ? std::max(1, std::min(4, std::atoi(e))) : 1;
  const char* devdir = std::getenv("FAKE_IBV_DEV_DIR");
  int listed = 0;
  for (int i = 0; i < count; ++i) {
    struct stat sb;
    if (devdir && stat((std::string(devdir) + "/uverbs" + std::to_string(i)).c_str(), &sb) != 0) continue;
    ibv_device& d = the_devices[listed];
    const std::string k = kind();
    std::snprintf(d.name, sizeof d.name, k == "efa" ? "rdmap%ds0" : k == "iwarp" ? "irdma%d" : "fake%d", i);
    d.node_type = k == "efa" ? static_cast<ibv_node_type>(7) : k == "iwarp" ? IBV_NODE_RNIC : IBV_NODE_CA;
    d.transport_type = k == "efa" ? static_cast<ibv_transport_type>(4) : k == "iwarp" ? IBV_TRANSPORT_IWARP
                                                                                     : IBV_TRANSPORT_IB;
    the_list[listed++] = &d;
  }
  the_list[listed] = nullptr;
  if (n) *n = listed;
  return the_list;
}
void ibv_free_device_list(ibv_device**) {}
const char* ibv_get_device_name(ibv_device* d) { return d->name; }

ibv_context* ibv_open_device(ibv_device* d) {
  {
    std::lock_guard<std::mutex> l(mu);
    ++device_opens;
  }
  auto* c = static_cast<ibv_context*>(std::calloc(1, sizeof(ibv_context)));
  c->device = d;
  c->ops.poll_cq = fake_poll_cq;
  c->ops.post_send = fake_post_send;
  c->ops.post_recv = fake_post_recv;
  return c;
}
int ibv_close_device(ibv_context* c) {
  std::free(c);
  return 0;
}

int ibv_query_device(ibv_context*, ibv_device_attr* a) {
  std::memset(a, 0, sizeof *a);
  std::strcpy(a->fw_ver, "0.0.0-fake");
  a->phys_port_cnt = 1;
  a->max_qp = 1024;
  a->max_qp_wr = 4096;
  a->max_cqe = 65536;
  a->max_mr = 1024;
  a->max_mr_size = ~0ull;
  a->vendor_id = kind() == "efa" ? 0x1d0f : kind() == "iwarp" ? 0x8086 : 0x02c9;
  return 0;
}

int ibv_query_port(ibv_context*, uint8_t port, ibv_port_attr* a) {
  if (port != 1) return EINVAL;
  // Only the IBVERBS_1.1 prefix, as the real exported call; the caller zeroed the rest.
  std::memset(a, 0, offsetof(ibv_port_attr, port_cap_flags2) + 2);
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->lid = roce() ? 0 : 0x11;
  a->link_layer = kind() == "efa" ? IBV_LINK_LAYER_UNSPECIFIED
                  : (roce() || kind() == "iwarp") ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  a->gid_tbl_len = gid_count();
  a->pkey_tbl_len = 2;
  a->flags = env_on("FAKE_IBV_GRH_REQUIRED") ? IBV_QPF_GRH_REQUIRED : 0;
  return 0;
}

int ibv_query_gid(ibv_context*, uint8_t, int index, ibv_gid* g) {
  if (index < 0 || index >= gid_count()) return EINVAL;
  fill_gid(index, g);
  return 0;
}

// IBVERBS_1.11: every port's valid entries with their types.
long _ibv_query_gid_table(ibv_context*, ibv_gid_entry* entries, size_t max, uint32_t flags, size_t entry_size) {
  if (env_on("FAKE_IBV_NO_GID_TABLE")) return -EOPNOTSUPP;
  if (flags || entry_size < sizeof(ibv_gid_entry) || max < static_cast<size_t>(gid_count())) return -EINVAL;
  for (int i = 0; i < gid_count(); ++i) {
    ibv_gid_entry& e = entries[i];
    std::memset(&e, 0, sizeof e);
    fill_gid(i, &e.gid);
    e.gid_index = static_cast<uint32_t>(i);
    e.port_num = 1;
    e.gid_type = !roce() ? IBV_GID_TYPE_IB : (gid_version(i) == 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1);
  }
  return gid_count();
}

// IBVERBS_1.5: the index of a P_Key (network byte order) in the port's table, or -1.
int ibv_get_pkey_index(ibv_context*, uint8_t port, uint16_t pkey_be) {
  const uint16_t want = static_cast<uint16_t>((pkey_be >> 8) | (pkey_be << 8));
  for (int i = 0; port == 1 && i < 2; ++i)
    if (kPkeys[i] == want) return i;
  return -1;
}

// IBVERBS_1.13. FAKE_IBV_FORK=enabled: the answer of a kernel before 5.13 after ibv_fork_init.
int ibv_is_fork_initialized(void) {
  const char* v = std::getenv("FAKE_IBV_FORK");
  return v && std::strcmp(v, "enabled") == 0 ? 1 : 2;
}

int ibv_fork_init(void) {
  std::lock_guard<std::mutex> l(mu);
  ++fork_inits;
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* c) {
  auto* p = static_cast<ibv_pd*>(std::calloc(1, sizeof(ibv_pd)));
  p->context = c;
  return p;
}
int ibv_dealloc_pd(ibv_pd* p) {
  std::lock_guard<std::mutex> l(mu);
  for (auto& kv : qps) order_violations += kv.second->qp.pd == p;
  for (FakeMr* m : mrs)
    if (m->mr.pd == p) return EBUSY;  // a real provider refuses while regions remain
  std::free(p);
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t len, int access) {
  if (memlock_refused()) {
    errno = EPERM;
    return nullptr;
  }
  const char* max = std::getenv("FAKE_IBV_MAX_MR");
  if (max && len > std::strtoull(max, nullptr, 10)) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard<std::mutex> l(mu);
  unaligned_regs += (reinterpret_cast<uintptr_t>(addr) & 4095u) != 0;
  auto* m = new FakeMr();
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = len;
  m->mr.lkey = next_key++;
  m->mr.rkey = next_key++;
  m->access = access;
  mrs.push_back(m);
  return &m->mr;
}
// IBVERBS_1.8. The stand-in keeps the access flags, optional ones (relaxed ordering) included.
ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t len, uint64_t iova, unsigned access) {
  if (iova != reinterpret_cast<uint64_t>(addr)) {  // only identity-mapped regions are modelled
    errno = EINVAL;
    return nullptr;
  }
  return ibv_reg_mr(pd, addr, len, static_cast<int>(access));
}

#include "fake_ibverbs_counters.h"  // the fake_ibv_* queries tests read

#ifdef FAKE_IBV_WITH_DMABUF
// IBVERBS_1.12. The "dma-buf" is ignored: the stand-in's GPU memory is host memory at iova.
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) {
  static const std::pair<const char*, int> names[] = {{"EPROTONOSUPPORT", EPROTONOSUPPORT}, {"ENOTTY", ENOTTY},
                                                      {"EOPNOTSUPP", EOPNOTSUPP}, {"EINVAL", EINVAL},
                                                      {"EFAULT", EFAULT}, {"EBADF", EBADF}};
  if (const char* want = std::getenv("FAKE_IBV_DMABUF_ERRNO"))
    for (const auto& [name, err] : names)
      if (std::strcmp(want, name) == 0) {
        errno = err;
        return nullptr;
      }
  if (fd < 0 || (offset & 4095) != (iova & 4095)) {  // what the kernel's REG_DMABUF_MR checks
    errno = fd < 0 ? EBADF : EINVAL;
    return nullptr;
  }
  ibv_mr* mr = ibv_reg_mr(pd, reinterpret_cast<void*>(iova), len, access & ~IBV_ACCESS_RELAXED_ORDERING);
  if (mr) {
    std::lock_guard<std::mutex> l(mu);
    reinterpret_cast<FakeMr*>(mr)->dmabuf = true;
    unaligned_regs -= (iova & 4095u) != 0;  // GPU memory: fork protection does not touch it
  }
  return mr;
}
#endif

int ibv_dereg_mr(ibv_mr* mr) {
  std::lock_guard<std::mutex> l(mu);
  for (auto& kv : qps) order_violations += kv.second->qp.pd == mr->pd;
  for (size_t i = 0; i < mrs.size(); ++i)
    if (&mrs[i]->mr == mr) {
      delete mrs[i];
      mrs.erase(mrs.begin() + i);
      return 0;
    }
  return EINVAL;
}

ibv_cq* ibv_create_cq(ibv_context* c, int cqe, void*, ibv_comp_channel*, int) {
  if (memlock_refused()) {  // the CQ buffer is pinned with ib_umem_get too
    errno = EPERM;
    return nullptr;
  }
  auto* f = new FakeCq();
  std::memset(&f->cq, 0, sizeof f->cq);
  f->cq.context = c;
  f->cq.cqe = cqe;
  return &f->cq;
}
int ibv_destroy_cq(ibv_cq* cq) {
  std::lock_guard<std::mutex> l(mu);
  for (auto& kv : qps)
    if (kv.second->qp.send_cq == cq || kv.second->qp.recv_cq == cq) {
      ++order_violations;
      return EBUSY;
    }
  delete reinterpret_cast<FakeCq*>(cq);
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* a) {
  if (memlock_refused()) {
    errno = EPERM;
    return nullptr;
  }
  if (kind() == "efa" && a->qp_type == IBV_QPT_RC) {  // EFA offers UD and SRD only
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> l(mu);
  max_recv_wr_seen = std::max(max_recv_wr_seen, static_cast<int>(a->cap.max_recv_wr));
  auto* q = new FakeQp();
  std::memset(&q->qp, 0, sizeof q->qp);
  q->qp.context = pd->context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  q->qp.qp_num = next_qpn++;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  qps[q->qp.qp_num] = q;
  return &q->qp;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  std::lock_guard<std::mutex> l(mu);
  auto* q = reinterpret_cast<FakeQp*>(qp);
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  const int from = q->qp.state, to = a->qp_state;
  bool ok = false;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    ok = check_mask(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0) && a->port_num == 1 &&
         a->pkey_index < 2;
    last_attrs[0] = a->pkey_index;
    if (ok) q->access = a->qp_access_flags;
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    ok = check_mask(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                    IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX) &&
         address_ok(a->ah_attr) && a->ah_attr.port_num == 1 &&
         a->path_mtu >= IBV_MTU_256 && a->path_mtu <= q->port_mtu && qps.count(a->dest_qp_num) && a->rq_psn <= 0xFFFFFF;
    if (ok) {
      q->dest_qpn = a->dest_qp_num;
      q->max_dest_rd_atomic = a->max_dest_rd_atomic;
    }
    const ibv_ah_attr& ah = a->ah_attr;
    const int rtr[5] = {ah.is_global, ah.grh.sgid_index, ah.grh.traffic_class, ah.sl, ah.grh.hop_limit};
    std::memcpy(last_attrs + 1, rtr, sizeof rtr);
    rtr_log.push_back({ah.grh.traffic_class, ah.sl});
    rtr_sgid.push_back(ah.is_global ? ah.grh.sgid_index : -1);
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    ok = check_mask(mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC,
                    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                        IBV_QP_PATH_MIG_STATE) &&
         a->retry_cnt <= 7 && a->rnr_retry <= 7 && a->timeout <= 31 && a->sq_psn <= 0xFFFFFF;
    if (ok) q->max_rd_atomic = a->max_rd_atomic;
  }
  if (!ok) return EINVAL;
  q->qp.state = static_cast<ibv_qp_state>(to);
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp) {
  std::lock_guard<std::mutex> l(mu);
  qps.erase(qp->qp_num);
  delete reinterpret_cast<FakeQp*>(qp);
  return 0;
}

const char* ibv_wc_status_str(ibv_wc_status s) { return s == IBV_WC_SUCCESS ? "success" : "fake error"; }

}  // extern "C"

#include "fake_ibverbs_ops.h"  // poll_cq, post_recv, post_send: the data path
