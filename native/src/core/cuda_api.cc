#include "core/cuda_api.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/loaded.h"

namespace gdrlab {
namespace {

using Loaded = LoadedLibrary<CudaApi>;

Loaded& state() {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    Loaded& L = loaded;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      L.why = std::string("libcuda.so.1 not found (no NVIDIA driver on this machine): ") +
              (e ? e : "dlopen failed");
      return;
    }
    std::string missing;
#define GDRLAB_CUDA_REQ(name, sym, ret, args)                              \
  L.api.name = reinterpret_cast<ret(*) args>(dlsym(h, sym));               \
  if (!L.api.name) missing += std::string(missing.empty() ? "" : ", ") + sym;
#define GDRLAB_CUDA_OPT(name, sym, ret, args) \
  L.api.name = reinterpret_cast<ret(*) args>(dlsym(h, sym));
    GDRLAB_CUDA_SYMBOLS(GDRLAB_CUDA_REQ, GDRLAB_CUDA_OPT)
#undef GDRLAB_CUDA_REQ
#undef GDRLAB_CUDA_OPT
    if (!missing.empty()) {
      L.why = "libcuda.so.1 lacks required symbols (driver too old?): " + missing;
      return;
    }
    CUresult r = L.api.cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* name = nullptr;
      const char* text = nullptr;
      L.api.cuGetErrorName(r, &name);
      L.api.cuGetErrorString(r, &text);
      L.why = std::string("cuInit failed: ") + (name ? name : "?") + ": " + (text ? text : "?");
      if (r == CUDA_ERROR_NO_DEVICE) L.why = "no CUDA-capable GPU: cuInit returned CUDA_ERROR_NO_DEVICE";
      return;
    }
    L.api.cuDriverGetVersion(&L.api.driver_version);
    L.ok = true;
  });
  return loaded;
}

}  // namespace

const CudaApi& cuda() { return state().require(); }

const CudaApi* cuda_if_loaded() noexcept { return table_if_loaded(state); }

bool cuda_usable(std::string* why) { return state().usable(why); }

void cuda_check(CUresult r, const char* call, const char* file, int line) {
  if (r == CUDA_SUCCESS) return;
  const CudaApi& api = state().api;
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(r, &text);
  // Keep the path inside the source tree ("paths/paths.cc"), not the build machine's.
  std::string where(file ? file : "");
  size_t src = where.rfind("/src/");
  if (src != std::string::npos) where = where.substr(src + 5);
  if (!where.empty()) where += ":" + std::to_string(line);
  throw Error(ErrorKind::Cuda, "libcuda", call, r,
              std::string(name ? name : "CUDA_ERROR") + ": " + (text ? text : "unknown error"), where);
}

int cuda_device_count() {
  const CudaApi& api = cuda();
  int n = 0;
  GDRLAB_CU(api, cuDeviceGetCount, &n);
  return n;
}

CUcontext cuda_context(int device) {
  const CudaApi& api = cuda();
  static std::mutex mu;
  static std::vector<CUcontext> contexts;
  std::lock_guard<std::mutex> lock(mu);
  int n = 0;
  GDRLAB_CU(api, cuDeviceGetCount, &n);
  if (device < 0 || device >= n) {
    throw Error(ErrorKind::Unavailable, "libcuda", "", 0,
                "GPU " + std::to_string(device) + " does not exist: this machine has " +
                    std::to_string(n) + " GPU(s)");
  }
  if (contexts.size() < static_cast<size_t>(n)) contexts.resize(n, nullptr);
  if (!contexts[device]) {
    CUdevice dev;
    GDRLAB_CU(api, cuDeviceGet, &dev, device);
    CUcontext ctx = nullptr;
    GDRLAB_CU(api, cuDevicePrimaryCtxRetain, &ctx, dev);
    contexts[device] = ctx;
  }
  return contexts[device];
}

void cuda_set(CUcontext ctx) { GDRLAB_CU(cuda(), cuCtxSetCurrent, ctx); }

void cuda_use(int device) { cuda_set(cuda_context(device)); }

}  // namespace gdrlab
