// Owners for the CUDA objects an endpoint creates: streams and events. Each is created in a
// context and destroyed in it; destructors never throw (a failed destroy is ignored: the process
// keeps running). Members go in reverse order of declaration, so a class that declares its
// buffers, then its stream, then its events releases the events first and the memory last, and
// a constructor that throws half way releases exactly what it had created.
#pragma once
#include <vector>

#include "core/cuda_api.h"

namespace gdrlab {

// One owned handle of a CUDA object kind: Kind supplies the handle type and create/destroy.
template <class Kind>
class CudaOwned {
 public:
  using Handle = typename Kind::Handle;
  CudaOwned() = default;
  // Creates the object in `ctx`, made current on this thread.
  explicit CudaOwned(CUcontext ctx) : ctx_(ctx) { Kind::create(ctx_, &h_); }
  ~CudaOwned() { reset(); }
  CudaOwned(CudaOwned&& o) noexcept : ctx_(o.ctx_), h_(o.h_) { o.h_ = nullptr; }
  CudaOwned& operator=(CudaOwned&& o) noexcept {
    if (this != &o) {
      reset();
      ctx_ = o.ctx_;
      h_ = o.h_;
      o.h_ = nullptr;
    }
    return *this;
  }
  CudaOwned(const CudaOwned&) = delete;
  CudaOwned& operator=(const CudaOwned&) = delete;
  Handle get() const { return h_; }

 private:
  void reset() noexcept {
    if (h_) Kind::destroy(ctx_, h_);
    h_ = nullptr;
  }
  CUcontext ctx_ = nullptr;
  Handle h_ = nullptr;
};

struct StreamKind {
  using Handle = CUstream;
  static void create(CUcontext ctx, CUstream* s);        // non-blocking
  static void destroy(CUcontext ctx, CUstream s) noexcept;  // waits for queued work first
};
struct EventKind {
  using Handle = CUevent;
  static void create(CUcontext ctx, CUevent* e);          // without timing
  static void destroy(CUcontext ctx, CUevent e) noexcept;
};

using CudaStream = CudaOwned<StreamKind>;
using CudaEvent = CudaOwned<EventKind>;

// `n` events in `ctx`; if the k-th create fails, the k-1 made so far are destroyed.
std::vector<CudaEvent> make_events(CUcontext ctx, int n);

}  // namespace gdrlab
