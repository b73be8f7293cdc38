#include "tcp/tcp.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace gdrlab {

MemoryNeed TcpEndpoint::serving_memory(const PathConfig& cfg) {
  const uint64_t n = cfg.size;
  switch (cfg.path) {
    case Path::Host: return {n, 0};            // the pageable message buffer
    case Path::Staged: return {2 * n, n};      // pinned bounce + pageable wire buffer
    case Path::Shared: return {n, n};          // one pinned buffer
    case Path::Pipelined:                      // depth pinned chunks
      return {static_cast<uint64_t>(cfg.depth) * std::min<uint64_t>(cfg.chunk, n), n};
    default: return {};
  }
}

TcpEndpoint::TcpEndpoint(const PathConfig& cfg, ControlChannel& wire, Buffer* user, size_t offset)
    : cfg_(cfg), wire_(wire), offset_(offset) {
  const bool gpu = path_needs_gpu(cfg_.path);
  check_endpoint(Wire::Tcp, &cfg_, user, offset);
  user_ = message_buffer(user, cfg_, cfg_.size + offset, &own_user_);
  if (!gpu) return;
  api_ = &cuda();
  ctx_ = user_->context();
  make_staging(cfg_.path, cfg_.size, user_->device(), &bounce_, &host_);
  if (cfg_.path == Path::Pipelined)
    for (int i = 0; i < cfg_.depth; ++i) slots_.push_back(std::make_unique<Buffer>(MemKind::Pinned, cfg_.chunk, user_->device()));
  stream_ = CudaStream(ctx_);
  if (cfg_.path == Path::Pipelined) events_ = make_events(ctx_, cfg_.depth);
}

std::string TcpEndpoint::describe() const { return std::string("path '") + path_name(cfg_.path) + "' (tcp wire)"; }

// The user's message to host memory at dst, and back.
void TcpEndpoint::to_host(void* dst) {
  GDRLAB_CU(*api_, cuCtxSetCurrent, ctx_);
  GDRLAB_CU(*api_, cuMemcpyDtoHAsync, dst, user_->device_ptr() + offset_, cfg_.size, stream_.get());
  GDRLAB_CU(*api_, cuStreamSynchronize, stream_.get());
}

void TcpEndpoint::to_device(const void* src) {
  GDRLAB_CU(*api_, cuCtxSetCurrent, ctx_);
  GDRLAB_CU(*api_, cuMemcpyHtoDAsync, user_->device_ptr() + offset_, src, cfg_.size, stream_.get());
  GDRLAB_CU(*api_, cuStreamSynchronize, stream_.get());
}

// Where the wire reads and writes a message: the user's buffer (host), else the host buffer the
// GPU copies go through (staged: the pageable one, shared: the pinned one).
void* TcpEndpoint::wire_buffer() {
  switch (cfg_.path) {
    case Path::Host: return static_cast<char*>(user_->host_ptr()) + offset_;
    case Path::Staged:
    case Path::Shared: return host_->host_ptr();
    default: break;
  }
  throw_invalid(std::string("path '") + path_name(cfg_.path) + "' is not carried by the tcp wire");
}

void TcpEndpoint::send(bool) {
  const size_t n = cfg_.size;
  if (cfg_.path == Path::Pipelined) return send_pipelined();
  void* out = wire_buffer();
  if (cfg_.path == Path::Staged) {  // GPU -> pinned bounce -> the wire's pageable buffer
    to_host(bounce_->host_ptr());
    std::memcpy(out, bounce_->host_ptr(), n);
  } else if (cfg_.path == Path::Shared) {
    to_host(out);
  }
  wire_.send_data(out, n);
}

void TcpEndpoint::recv() {
  const size_t n = cfg_.size;
  if (cfg_.path == Path::Pipelined) return recv_pipelined();
  void* in = wire_buffer();
  wire_.expect_data(n);
  wire_.recv_raw(in, n);
  if (cfg_.path == Path::Staged) {  // the wire's pageable buffer -> pinned bounce -> GPU
    std::memcpy(bounce_->host_ptr(), in, n);
    to_device(bounce_->host_ptr());
  } else if (cfg_.path == Path::Shared) {
    to_device(in);
  }
}

// Sender: the chunk copies overlap the wire; each chunk is sent as soon as its copy completes.
void TcpEndpoint::send_pipelined() {
  GDRLAB_CU(*api_, cuCtxSetCurrent, ctx_);
  pipeline_send(
      *api_, stream_.get(), events_, user_->device_ptr() + offset_, cfg_.size, cfg_.chunk,
      [&](size_t s) { return slots_[s]->host_ptr(); }, [](size_t) {}, [&] { wire_.send_data_header(cfg_.size); },
      [&](size_t, size_t s, size_t, size_t len) { wire_.send_raw(slots_[s]->host_ptr(), len); });
}

// Receiver: receive chunk i into slot i % depth once that slot's previous host-to-device copy has
// completed, then start its copy to the GPU; the wire never waits for the last copy but one.
void TcpEndpoint::recv_pipelined() {
  const CudaApi& api = *api_;
  GDRLAB_CU(api, cuCtxSetCurrent, ctx_);
  const size_t n = cfg_.size, chunk = cfg_.chunk;
  const size_t nchunks = (n + chunk - 1) / chunk;
  const size_t depth = slots_.size();
  wire_.expect_data(n);
  for (size_t i = 0; i < nchunks; ++i) {
    size_t s = i % depth;
    size_t off = i * chunk, len = std::min(chunk, n - off);
    if (i >= depth) GDRLAB_CU(api, cuEventSynchronize, events_[s].get());
    wire_.recv_raw(slots_[s]->host_ptr(), len);
    GDRLAB_CU(api, cuMemcpyHtoDAsync, user_->device_ptr() + offset_ + off, slots_[s]->host_ptr(), len, stream_.get());
    GDRLAB_CU(api, cuEventRecord, events_[s].get(), stream_.get());
  }
  GDRLAB_CU(api, cuStreamSynchronize, stream_.get());
}

}  // namespace gdrlab
