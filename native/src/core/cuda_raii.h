// Owners for the CUDA objects an endpoint creates: a stream and its events. Each is created in
// the device's primary context and destroyed in it; destructors never throw (a failed destroy
// is ignored: the process keeps running). Members destroyed in reverse order of declaration,
// so a class that declares its stream before its events releases the events first, and a
// constructor that throws half way releases exactly what it had created.
#pragma once
#include <vector>

#include "core/cuda_api.h"

namespace gdrlab {

class CudaStream {
 public:
  CudaStream() = default;
  // A non-blocking stream in `ctx` (made current on this thread).
  explicit CudaStream(CUcontext ctx);
  ~CudaStream();
  CudaStream(CudaStream&& o) noexcept : ctx_(o.ctx_), s_(o.s_) { o.s_ = nullptr; }
  CudaStream& operator=(CudaStream&& o) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CUstream get() const { return s_; }

 private:
  void reset() noexcept;
  CUcontext ctx_ = nullptr;
  CUstream s_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent() = default;
  // An event without timing in `ctx` (made current on this thread).
  explicit CudaEvent(CUcontext ctx);
  ~CudaEvent();
  CudaEvent(CudaEvent&& o) noexcept : ctx_(o.ctx_), e_(o.e_) { o.e_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  CUevent get() const { return e_; }

 private:
  void reset() noexcept;
  CUcontext ctx_ = nullptr;
  CUevent e_ = nullptr;
};

// `n` events in `ctx`; if the k-th create fails, the k-1 made so far are destroyed.
std::vector<CudaEvent> make_events(CUcontext ctx, int n);

}  // namespace gdrlab
