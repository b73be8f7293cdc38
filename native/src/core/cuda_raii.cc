#include "core/cuda_raii.h"

namespace gdrlab {

CudaStream::CudaStream(CUcontext ctx) : ctx_(ctx) {
  const CudaApi& api = cuda();
  cuda_set(ctx_);
  GDRLAB_CU(api, cuStreamCreate, &s_, CU_STREAM_NON_BLOCKING);
}

CudaStream::~CudaStream() { reset(); }

CudaStream& CudaStream::operator=(CudaStream&& o) noexcept {
  if (this != &o) {
    reset();
    ctx_ = o.ctx_;
    s_ = o.s_;
    o.s_ = nullptr;
  }
  return *this;
}

void CudaStream::reset() noexcept {
  if (!s_) return;
  if (const CudaApi* api = cuda_if_loaded()) {
    // Work still queued on the stream may read buffers that are about to be freed.
    api->cuCtxSetCurrent(ctx_);
    api->cuStreamSynchronize(s_);
    api->cuStreamDestroy(s_);
  }
  s_ = nullptr;
}

CudaEvent::CudaEvent(CUcontext ctx) : ctx_(ctx) {
  const CudaApi& api = cuda();
  cuda_set(ctx_);
  GDRLAB_CU(api, cuEventCreate, &e_, CU_EVENT_DISABLE_TIMING);
}

CudaEvent::~CudaEvent() { reset(); }

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    reset();
    ctx_ = o.ctx_;
    e_ = o.e_;
    o.e_ = nullptr;
  }
  return *this;
}

void CudaEvent::reset() noexcept {
  if (!e_) return;
  if (const CudaApi* api = cuda_if_loaded()) {
    api->cuCtxSetCurrent(ctx_);
    api->cuEventDestroy(e_);
  }
  e_ = nullptr;
}

std::vector<CudaEvent> make_events(CUcontext ctx, int n) {
  std::vector<CudaEvent> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) out.emplace_back(ctx);
  return out;
}

}  // namespace gdrlab
