// libucp.so.0 by dlopen at first use, as core/cuda_api.cc opens libcuda and verbs/api.cc
// libibverbs: one build runs where UCX is installed and where it is not, and says why.
//
// Where the library is looked for, first found wins: the path set_ucx_library() was given
// (gdrlab.transfer.ucx_wire passes the libucx wheel's), the libucx wheel beside this engine in
// the same site-packages folder (libucx/lib/libucp.so.0), then the system's libucp.so.0.
#pragma once
#include <string>
#include <vector>

#include "ucx/abi.h"

namespace gdrlab {

struct UcpApi {
  ucp::fn_get_version get_version = nullptr;
  ucp::fn_get_version_string get_version_string = nullptr;
  ucp::fn_config_read config_read = nullptr;
  ucp::fn_config_modify config_modify = nullptr;
  ucp::fn_config_release config_release = nullptr;
  ucp::fn_init_version init_version = nullptr;
  ucp::fn_cleanup cleanup = nullptr;
  ucp::fn_worker_create worker_create = nullptr;
  ucp::fn_worker_destroy worker_destroy = nullptr;
  ucp::fn_worker_get_address worker_get_address = nullptr;
  ucp::fn_worker_release_address worker_release_address = nullptr;
  ucp::fn_worker_progress worker_progress = nullptr;
  ucp::fn_worker_get_efd worker_get_efd = nullptr;
  ucp::fn_worker_arm worker_arm = nullptr;
  ucp::fn_ep_create ep_create = nullptr;
  ucp::fn_ep_close_nbx ep_close_nbx = nullptr;
  ucp::fn_ep_flush_nbx ep_flush_nbx = nullptr;
  ucp::fn_tag_send_nbx tag_send_nbx = nullptr;
  ucp::fn_tag_recv_nbx tag_recv_nbx = nullptr;
  ucp::fn_request_check_status request_check_status = nullptr;
  ucp::fn_request_cancel request_cancel = nullptr;
  ucp::fn_request_free request_free = nullptr;
  ucp::fn_request_query request_query = nullptr;  // optional (UCX 1.12+)
  ucp::fn_context_query context_query = nullptr;  // optional: the memory types UCX can move
  ucp::fn_status_string status_string = nullptr;  // libucs, reached through libucp's dependencies
};

// What `gdrlab doctor` and the wire's Unavailable say about UCX on this machine.
struct UcxStatus {
  bool loaded = false;
  std::string library;      // the file opened
  std::string version;      // "1.22.0"
  std::string reason;       // why it is not loaded
  std::string module_dir;   // UCX's transport modules (<libdir>/ucx)
  std::vector<std::string> modules;  // libuct_*.so found there (cma, cuda, ib, rdmacm, ...)
  bool has_verbs = false;   // a verbs transport module (libuct_ib*) is there: rc, dc, ud
  bool has_cuda = false;    // libuct_cuda: cuda_copy, cuda_ipc
};

// Must be called before the first use to take effect; "" goes back to the default search.
void set_ucx_library(const std::string& path);
// The table, or Error(Unavailable) saying why UCX cannot be used.
const UcpApi& ucp_api();
UcxStatus ucx_status();
// UCX's text for a status code.
std::string ucs_text(const UcpApi& api, int status);
// Error(Unavailable) for rc/dc on a UCX build without verbs; nothing otherwise.
void require_ucx_transports(const std::string& tls);

}  // namespace gdrlab
