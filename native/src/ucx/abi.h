// The small part of UCX's UCP API the ucx wire calls, declared here so the engine builds without
// UCX's headers (libucp.so.0 is opened with dlopen, ucx/api.cc). Matched against UCX 1.22.0's
// public headers (openucx/ucx v1.22.0: src/ucp/api/ucp.h, ucp_def.h, ucp_compat.h,
// src/ucs/type/status.h, thread_mode.h, src/ucs/memory/memory_type.h); every layout below is
// unchanged since UCX 1.10, where the *_nbx calls and ucp_request_param_t appeared, and
// ucp_request_query since 1.12. Structures are declared up to the last member this engine sets:
// UCX reads only the members a field_mask names, so a shorter prefix is safe.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gdrlab {
namespace ucp {

using ucs_status_ptr_t = void*;
using ucp_context_h = struct ucp_context*;
using ucp_worker_h = struct ucp_worker*;
using ucp_ep_h = struct ucp_ep*;
using ucp_config_t = struct ucp_config;
using ucp_address_t = struct ucp_address;
using ucp_tag_t = uint64_t;
using ucp_datatype_t = uint64_t;

// ucs_status_t is a C enum (int-sized); it is passed and returned as int.
using status_int = int;
constexpr status_int UCS_OK = 0;
constexpr status_int UCS_INPROGRESS = 1;
constexpr status_int UCS_ERR_BUSY = -15;
constexpr status_int UCS_ERR_CANCELED = -16;
constexpr intptr_t UCS_ERR_LAST = -100;

inline bool ptr_is_err(const void* p) {
  return reinterpret_cast<uintptr_t>(p) >= static_cast<uintptr_t>(UCS_ERR_LAST);
}
inline status_int ptr_status(const void* p) { return static_cast<status_int>(reinterpret_cast<intptr_t>(p)); }

// ucs_thread_mode_t, ucs_memory_type_t
constexpr int UCS_THREAD_MODE_SINGLE = 0;
constexpr int UCS_MEMORY_TYPE_HOST = 0;
constexpr int UCS_MEMORY_TYPE_CUDA = 1;

// ucp_params_field, ucp_feature
constexpr uint64_t UCP_PARAM_FIELD_FEATURES = 1ull << 0;
constexpr uint64_t UCP_PARAM_FIELD_MT_WORKERS_SHARED = 1ull << 5;
constexpr uint64_t UCP_PARAM_FIELD_NAME = 1ull << 8;
constexpr uint64_t UCP_FEATURE_TAG = 1ull << 0;
constexpr uint64_t UCP_FEATURE_WAKEUP = 1ull << 4;

struct ucp_params_t {
  uint64_t field_mask;
  uint64_t features;
  size_t request_size;
  void (*request_init)(void*);
  void (*request_cleanup)(void*);
  uint64_t tag_sender_mask;
  int mt_workers_shared;
  size_t estimated_num_eps;
  size_t estimated_num_ppn;
  const char* name;
};

// ucp_worker_params_field
constexpr uint64_t UCP_WORKER_PARAM_FIELD_THREAD_MODE = 1ull << 0;
struct ucp_worker_params_t {
  uint64_t field_mask;
  int thread_mode;  // ucs_thread_mode_t; the members after it are never set here
};

// ucp_ep_params_field, ucp_err_handling_mode_t
constexpr uint64_t UCP_EP_PARAM_FIELD_REMOTE_ADDRESS = 1ull << 0;
constexpr uint64_t UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = 1ull << 1;
constexpr uint64_t UCP_EP_PARAM_FIELD_ERR_HANDLER = 1ull << 2;
constexpr int UCP_ERR_HANDLING_MODE_NONE = 0;
constexpr int UCP_ERR_HANDLING_MODE_PEER = 1;
using ucp_err_handler_cb_t = void (*)(void* arg, ucp_ep_h ep, status_int status);
struct ucp_err_handler_t {
  ucp_err_handler_cb_t cb;
  void* arg;
};
struct ucp_ep_params_t {
  uint64_t field_mask;
  const ucp_address_t* address;
  int err_mode;  // ucp_err_handling_mode_t
  ucp_err_handler_t err_handler;
};

// ucp_op_attr_t
constexpr uint32_t UCP_OP_ATTR_FIELD_FLAGS = 1u << 4;
constexpr uint32_t UCP_OP_ATTR_FIELD_MEMORY_TYPE = 1u << 6;
constexpr uint32_t UCP_OP_ATTR_FLAG_NO_IMM_CMPL = 1u << 16;
constexpr uint32_t UCP_EP_CLOSE_FLAG_FORCE = 1u << 0;

struct ucp_request_param_t {
  uint32_t op_attr_mask;
  uint32_t flags;
  void* request;
  void* cb;  // a union of callback pointers
  ucp_datatype_t datatype;
  void* user_data;
  void* reply_buffer;
  int memory_type;  // ucs_memory_type_t
  void* recv_info;  // a union of pointers
  void* memh;
  ucp_datatype_t remote_datatype;
  const void* remote;
  size_t remote_count;
};

// ucp_request_attr_field
constexpr uint64_t UCP_REQUEST_ATTR_FIELD_INFO_STRING = 1ull << 0;
constexpr uint64_t UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE = 1ull << 1;
struct ucp_request_attr_t {
  uint64_t field_mask;
  char* debug_string;
  size_t debug_string_size;
  int status;
  int mem_type;
};

// The entry points, by name.
using fn_get_version = void (*)(unsigned*, unsigned*, unsigned*);
using fn_get_version_string = const char* (*)();
using fn_config_read = status_int (*)(const char*, const char*, ucp_config_t**);
using fn_config_modify = status_int (*)(ucp_config_t*, const char*, const char*);
using fn_config_release = void (*)(ucp_config_t*);
using fn_init_version = status_int (*)(unsigned, unsigned, const ucp_params_t*, const ucp_config_t*, ucp_context_h*);
using fn_cleanup = void (*)(ucp_context_h);
using fn_worker_create = status_int (*)(ucp_context_h, const ucp_worker_params_t*, ucp_worker_h*);
using fn_worker_destroy = void (*)(ucp_worker_h);
using fn_worker_get_address = status_int (*)(ucp_worker_h, ucp_address_t**, size_t*);
using fn_worker_release_address = void (*)(ucp_worker_h, ucp_address_t*);
using fn_worker_progress = unsigned (*)(ucp_worker_h);
using fn_worker_get_efd = status_int (*)(ucp_worker_h, int*);
using fn_worker_arm = status_int (*)(ucp_worker_h);
using fn_ep_create = status_int (*)(ucp_worker_h, const ucp_ep_params_t*, ucp_ep_h*);
using fn_ep_close_nbx = ucs_status_ptr_t (*)(ucp_ep_h, const ucp_request_param_t*);
using fn_ep_flush_nbx = ucs_status_ptr_t (*)(ucp_ep_h, const ucp_request_param_t*);
using fn_tag_send_nbx = ucs_status_ptr_t (*)(ucp_ep_h, const void*, size_t, ucp_tag_t, const ucp_request_param_t*);
using fn_tag_recv_nbx = ucs_status_ptr_t (*)(ucp_worker_h, void*, size_t, ucp_tag_t, ucp_tag_t,
                                             const ucp_request_param_t*);
using fn_request_check_status = status_int (*)(void*);
using fn_request_cancel = void (*)(ucp_worker_h, void*);
using fn_request_free = void (*)(void*);
using fn_request_query = status_int (*)(void*, ucp_request_attr_t*);  // UCX 1.12+
using fn_status_string = const char* (*)(status_int);

// ucp_context_query (ucp.h, UCX 1.12+): which memory types the loaded transports can move
constexpr uint64_t UCP_ATTR_FIELD_MEMORY_TYPES = 1ull << 2;
struct ucp_context_attr_t {
  uint64_t field_mask;
  size_t request_size;
  int thread_mode;        // ucs_thread_mode_t
  uint64_t memory_types;  // UCS_BIT(ucs_memory_type_t) of each type a loaded transport handles
  char name[32];          // UCP_ENTITY_NAME_MAX
};
using fn_context_query = status_int (*)(ucp_context_h, ucp_context_attr_t*);

}  // namespace ucp
}  // namespace gdrlab
