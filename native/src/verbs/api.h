// libibverbs.so.1, loaded with dlopen at first use from one symbol list. Required symbols must
// all resolve or the library counts as unusable; optional ones (newer than IBVERBS_1.1) may be
// missing and are checked with `if (api.reg_dmabuf_mr)` before use. Symbols are looked up by
// version with dlvsym (then dlsym, for rebuilds without symbol versions), as the library exports an IBVERBS_1.0 compatibility twin of many calls.
#pragma once
#include <string>
#include <vector>

#include "verbs/abi.h"

namespace gdrlab {

// X(member, symbol, symbol version, return type, parameter list)
#define GDRLAB_IBV_SYMBOLS(REQ, OPT)                                                                    \
  REQ(get_device_list, "ibv_get_device_list", "IBVERBS_1.1", ibv::ibv_device**, (int*))                 \
  REQ(free_device_list, "ibv_free_device_list", "IBVERBS_1.1", void, (ibv::ibv_device**))               \
  REQ(get_device_name, "ibv_get_device_name", "IBVERBS_1.1", const char*, (ibv::ibv_device*))           \
  REQ(open_device, "ibv_open_device", "IBVERBS_1.1", ibv::ibv_context*, (ibv::ibv_device*))             \
  REQ(close_device, "ibv_close_device", "IBVERBS_1.1", int, (ibv::ibv_context*))                        \
  REQ(query_device, "ibv_query_device", "IBVERBS_1.1", int, (ibv::ibv_context*, ibv::ibv_device_attr*)) \
  REQ(query_port, "ibv_query_port", "IBVERBS_1.1", int,                                                 \
      (ibv::ibv_context*, uint8_t, ibv::ibv_port_attr*))                                                \
  REQ(query_gid, "ibv_query_gid", "IBVERBS_1.1", int, (ibv::ibv_context*, uint8_t, int, ibv::ibv_gid*)) \
  REQ(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1", ibv::ibv_pd*, (ibv::ibv_context*))                       \
  REQ(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1", int, (ibv::ibv_pd*))                                 \
  REQ(reg_mr, "ibv_reg_mr", "IBVERBS_1.1", ibv::ibv_mr*, (ibv::ibv_pd*, void*, size_t, int))            \
  REQ(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1", int, (ibv::ibv_mr*))                                     \
  REQ(create_cq, "ibv_create_cq", "IBVERBS_1.1", ibv::ibv_cq*,                                          \
      (ibv::ibv_context*, int, void*, ibv::ibv_comp_channel*, int))                                     \
  REQ(destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1", int, (ibv::ibv_cq*))                                 \
  REQ(create_qp, "ibv_create_qp", "IBVERBS_1.1", ibv::ibv_qp*, (ibv::ibv_pd*, ibv::ibv_qp_init_attr*))  \
  REQ(modify_qp, "ibv_modify_qp", "IBVERBS_1.1", int, (ibv::ibv_qp*, ibv::ibv_qp_attr*, int))           \
  REQ(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1", int, (ibv::ibv_qp*))                                 \
  REQ(wc_status_str, "ibv_wc_status_str", "IBVERBS_1.1", const char*, (ibv::ibv_wc_status))             \
  /* rdma-core 28+: register with an I/O virtual address different from the process address */        \
  OPT(reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8", ibv::ibv_mr*,                                    \
      (ibv::ibv_pd*, void*, size_t, uint64_t, unsigned))                                                \
  /* rdma-core 34+: register a dma-buf (GPU memory exported by the CUDA driver) */                     \
  OPT(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", ibv::ibv_mr*,                                 \
      (ibv::ibv_pd*, uint64_t, size_t, uint64_t, int, int))                                            \
  /* pins registered pages against fork's copy-on-write (a no-op on kernels with copy-on-fork) */      \
  OPT(fork_init, "ibv_fork_init", "IBVERBS_1.1", int, (void))                                          \
  /* rdma-core 35+: whether fork protection is on (0 disabled, 1 enabled, 2 unneeded: copy-on-fork) */ \
  OPT(is_fork_initialized, "ibv_is_fork_initialized", "IBVERBS_1.13", int, (void))                    \
  /* rdma-core 15+: P_Key value -> index in the port's P_Key table */                                 \
  OPT(get_pkey_index, "ibv_get_pkey_index", "IBVERBS_1.5", int, (ibv::ibv_context*, uint8_t, uint16_t)) \
  /* rdma-core 32+: the GID table with each entry's type (IB, RoCE v1, RoCE v2) in one call */        \
  OPT(query_gid_table, "_ibv_query_gid_table", "IBVERBS_1.11", long,                                   \
      (ibv::ibv_context*, ibv::ibv_gid_entry*, size_t, uint32_t, size_t))

struct VerbsApi {
#define GDRLAB_IBV_MEMBER(name, sym, ver, ret, args) ret(*name) args = nullptr;
  GDRLAB_IBV_SYMBOLS(GDRLAB_IBV_MEMBER, GDRLAB_IBV_MEMBER)
#undef GDRLAB_IBV_MEMBER
  std::string library;  // the name that was opened
};

// The library name: $GDRLAB_IBVERBS_LIB if set (read once, at first load), else libibverbs.so.1.
std::string verbs_library_name();
// Loads the library once. Throws Error(Unavailable) with the kept reason when it is missing or
// lacks a required symbol.
const VerbsApi& verbs();
// The loaded API, or nullptr when verbs() would throw. For destructors, which must not throw.
const VerbsApi* verbs_if_loaded() noexcept;
// The same probe without throwing.
bool verbs_usable(std::string* why);

// What `gdrlab.verbs.status()` and `--wire verbs` report before any device is opened:
// library_found false -> reason names the library; true with no devices -> reason says
// "no RDMA device found (/sys/class/infiniband is empty)".
struct VerbsStatus {
  bool library_found = false;
  std::string reason;
  std::vector<std::string> devices;
};
VerbsStatus verbs_status();
// The device nodes' root: $GDRLAB_DEV_ROOT if set (tests), else /dev.
std::string dev_root();
// Why libibverbs lists none of the devices sysfs shows (`sys`): ib_uverbs not loaded,
// /dev/infiniband absent or incomplete (containers), no permission on it, or no provider.
std::string devices_dropped_reason(const std::vector<std::string>& sys);
// Throws Error(Unavailable) with verbs_status().reason unless a device exists.
void require_rdma_device();

// Throws Error(Verbs, "libibverbs", call, err, text): text is strerror(err), then `context`, then
// the likely cause from verbs_hint.
[[noreturn]] void throw_verbs(const std::string& call, int err, const std::string& context = "",
                              bool gpu_memory = false);
// The likely cause of errno `err` from `call` (empty when there is nothing useful to add).
std::string verbs_hint(const std::string& call, int err, bool gpu_memory);

}  // namespace gdrlab
