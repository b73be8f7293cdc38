#include "core/cuda_raii.h"

namespace gdrlab {

void StreamKind::create(CUcontext ctx, CUstream* s) {
  const CudaApi& api = cuda();
  cuda_set(ctx);
  GDRLAB_CU(api, cuStreamCreate, s, CU_STREAM_NON_BLOCKING);
}

void StreamKind::destroy(CUcontext ctx, CUstream s) noexcept {
  const CudaApi* api = cuda_if_loaded();
  if (!api) return;
  // Work still queued on the stream may read buffers that are about to be freed.
  api->cuCtxSetCurrent(ctx);
  api->cuStreamSynchronize(s);
  api->cuStreamDestroy(s);
}

void EventKind::create(CUcontext ctx, CUevent* e) {
  const CudaApi& api = cuda();
  cuda_set(ctx);
  GDRLAB_CU(api, cuEventCreate, e, CU_EVENT_DISABLE_TIMING);
}

void EventKind::destroy(CUcontext ctx, CUevent e) noexcept {
  if (const CudaApi* api = cuda_if_loaded()) {
    api->cuCtxSetCurrent(ctx);
    api->cuEventDestroy(e);
  }
}

std::vector<CudaEvent> make_events(CUcontext ctx, int n) {
  std::vector<CudaEvent> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) out.emplace_back(ctx);
  return out;
}

}  // namespace gdrlab
