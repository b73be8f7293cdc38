#include "ucx/api.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/loaded.h"

namespace gdrlab {
namespace {

std::mutex g_mu;
std::string g_path;  // set_ucx_library
LoadedLibrary<UcpApi>* g_lib = nullptr;
std::string g_opened;

// The libucx wheel in the site-packages folder this engine was installed into.
std::string wheel_beside_engine() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&wheel_beside_engine), &info) || !info.dli_fname) return "";
  std::string self(info.dli_fname);  // .../site-packages/gdrlab/_native...so
  size_t a = self.rfind('/');
  if (a == std::string::npos) return "";
  size_t b = self.rfind('/', a - 1);
  if (b == std::string::npos) return "";
  return self.substr(0, b) + "/libucx/lib/libucp.so.0";
}

template <class F>
bool sym(void* h, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  if (!*out && missing) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *out != nullptr;
}

LoadedLibrary<UcpApi> open_ucp(const std::string& explicit_path, std::string* opened) {
  LoadedLibrary<UcpApi> lib;
  std::vector<std::string> tries;
  if (!explicit_path.empty()) tries.push_back(explicit_path);
  const std::string wheel = wheel_beside_engine();
  if (!wheel.empty()) tries.push_back(wheel);
  tries.push_back("libucp.so.0");
  void* h = nullptr;
  std::string errors;
  for (const std::string& t : tries) {
    if (t.find('/') != std::string::npos) {
      if (FILE* f = std::fopen(t.c_str(), "rb")) std::fclose(f);
      else continue;
    }
    h = dlopen(t.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      *opened = t;
      break;
    }
    const char* e = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (e ? e : t);
  }
  if (!h) {
    lib.why = "UCX is not installed: libucp.so.0 was not found (pip install 'gdrlab[ucx]' installs the libucx-cu12 "
              "wheel; or a system UCX)" + (errors.empty() ? std::string() : " (" + errors + ")");
    return lib;
  }
  UcpApi& a = lib.api;
  std::string missing;
  sym(h, "ucp_get_version", &a.get_version, &missing);
  sym(h, "ucp_get_version_string", &a.get_version_string, &missing);
  sym(h, "ucp_config_read", &a.config_read, &missing);
  sym(h, "ucp_config_modify", &a.config_modify, &missing);
  sym(h, "ucp_config_release", &a.config_release, &missing);
  sym(h, "ucp_init_version", &a.init_version, &missing);
  sym(h, "ucp_cleanup", &a.cleanup, &missing);
  sym(h, "ucp_worker_create", &a.worker_create, &missing);
  sym(h, "ucp_worker_destroy", &a.worker_destroy, &missing);
  sym(h, "ucp_worker_get_address", &a.worker_get_address, &missing);
  sym(h, "ucp_worker_release_address", &a.worker_release_address, &missing);
  sym(h, "ucp_worker_progress", &a.worker_progress, &missing);
  sym(h, "ucp_worker_get_efd", &a.worker_get_efd, &missing);
  sym(h, "ucp_worker_arm", &a.worker_arm, &missing);
  sym(h, "ucp_ep_create", &a.ep_create, &missing);
  sym(h, "ucp_ep_close_nbx", &a.ep_close_nbx, &missing);
  sym(h, "ucp_ep_flush_nbx", &a.ep_flush_nbx, &missing);
  sym(h, "ucp_tag_send_nbx", &a.tag_send_nbx, &missing);
  sym(h, "ucp_tag_recv_nbx", &a.tag_recv_nbx, &missing);
  sym(h, "ucp_request_check_status", &a.request_check_status, &missing);
  sym(h, "ucp_request_cancel", &a.request_cancel, &missing);
  sym(h, "ucp_request_free", &a.request_free, &missing);
  sym(h, "ucs_status_string", &a.status_string, &missing);
  sym(h, "ucp_request_query", &a.request_query, nullptr);  // optional
  sym(h, "ucp_context_query", &a.context_query, nullptr);  // optional
  if (!missing.empty()) {
    lib.why = *opened + " lacks " + missing + " (UCX 1.12 or later is needed)";
    return lib;  // the handle stays open: dlclose of a half-used UCX is not worth the risk
  }
  lib.ok = true;
  return lib;
}

const LoadedLibrary<UcpApi>& loaded() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_lib) g_lib = new LoadedLibrary<UcpApi>(open_ucp(g_path, &g_opened));  // kept for the process
  return *g_lib;
}

std::string dir_of(const std::string& path) {
  size_t s = path.rfind('/');
  return s == std::string::npos ? "" : path.substr(0, s);
}

}  // namespace

void set_ucx_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_path = path;
}

const UcpApi& ucp_api() { return loaded().require(); }

std::string ucs_text(const UcpApi& api, int status) {
  const char* s = api.status_string ? api.status_string(status) : nullptr;
  return s ? s : "status " + std::to_string(status);
}

UcxStatus ucx_status() {
  UcxStatus st;
  const LoadedLibrary<UcpApi>& lib = loaded();
  st.loaded = lib.ok;
  st.reason = lib.why;
  if (!lib.ok) return st;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    st.library = g_opened;
  }
  unsigned ma = 0, mi = 0, rel = 0;
  lib.api.get_version(&ma, &mi, &rel);
  st.version = std::to_string(ma) + "." + std::to_string(mi) + "." + std::to_string(rel);
  // Where UCX itself was loaded from (a soname search leaves no folder in the name).
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(lib.api.get_version), &info) && info.dli_fname) st.library = info.dli_fname;
  st.module_dir = dir_of(st.library) + "/ucx";
  if (DIR* d = opendir(st.module_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n(e->d_name);
      const std::string pre = "libuct_", post = ".so";
      if (n.compare(0, pre.size(), pre) == 0 && n.size() > pre.size() + post.size() &&
          n.compare(n.size() - post.size(), post.size(), post) == 0)
        st.modules.push_back(n.substr(pre.size(), n.size() - pre.size() - post.size()));
    }
    closedir(d);
  }
  std::sort(st.modules.begin(), st.modules.end());
  for (const std::string& m : st.modules) {
    if (m.compare(0, 2, "ib") == 0) st.has_verbs = true;
    if (m == "cuda") st.has_cuda = true;
  }
  return st;
}

void require_ucx_transports(const std::string& tls) {
  std::stringstream ss(tls);
  std::string t;
  bool wants_verbs = false;
  while (std::getline(ss, t, ','))
    if (t == "rc" || t == "dc" || t == "ud" || t == "rc_x" || t == "dc_x" || t == "ud_x" || t == "rc_v" ||
        t == "ud_v" || t == "rc_mlx5" || t == "dc_mlx5" || t == "ud_mlx5" || t == "ib")
      wants_verbs = true;
  if (!wants_verbs) return;
  UcxStatus st = ucx_status();
  if (!st.loaded) throw_unavailable(st.reason);
  if (!st.has_verbs)
    throw_unavailable("UCX_TLS=" + tls + " needs UCX's verbs transports, and the UCX at " + st.library +
                      " was built without verbs (no libuct_ib in " + st.module_dir +
                      "; the PyPI wheel libucx-cu12 is built that way): install a UCX built with rdma-core "
                      "(conda-forge's ucx, or the system's) and uninstall the wheel, so the system's libucp.so.0 "
                      "is the one opened");
}

}  // namespace gdrlab
