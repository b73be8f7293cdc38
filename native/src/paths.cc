#include "paths.h"

#include <cstring>

#include "error.h"

namespace gdrlab {

static const char* const kPathNames[kPathCount] = {"host", "staged", "shared", "pipelined"};

const char* path_name(Path p) { return kPathNames[static_cast<int>(p)]; }

Path path_from_name(const std::string& name) {
  for (int i = 0; i < kPathCount; ++i)
    if (name == kPathNames[i]) return static_cast<Path>(i);
  throw_invalid("unknown path '" + name + "' for the tcp wire; valid: host, staged, shared, pipelined");
}

Path path_from_code(uint8_t code) {
  if (code >= kPathCount) throw_protocol("unknown path code " + std::to_string(code));
  return static_cast<Path>(code);
}

bool path_needs_gpu(Path p) { return p != Path::Host; }

void check_endpoint(const char* wire, const char* path, bool gpu, bool pipelined, size_t size, size_t* chunk,
                    int depth, const Buffer* user, size_t offset, const char* gpu_paths) {
  if (size == 0) throw_invalid("message size must be at least 1 byte");
  if (size > kMaxDataBytes)
    throw_invalid("message size " + std::to_string(size) + " exceeds the " + wire + " wire's maximum of " +
                  std::to_string(kMaxDataBytes) + " bytes (1 GiB)");
  if (gpu) {
    std::string why;
    if (!cuda_usable(&why)) throw_unavailable(std::string("path '") + path + "' needs a GPU: " + why);
  }
  if (pipelined) {
    if (*chunk == 0) throw_invalid("pipelined chunk size must be at least 1 byte");
    if (depth < 1 || depth > 64) throw_invalid("pipelined depth must be between 1 and 64 buffers");
    if (*chunk > size) *chunk = size;
  }
  if (!user) return;
  if (gpu && user->kind() != MemKind::Device)
    throw_invalid(std::string("path '") + path + "' moves GPU memory, but the buffer is " + mem_kind_name(user->kind()) +
                  " host memory");
  if (!gpu && user->kind() == MemKind::Device)
    throw_invalid(std::string("path 'host' moves host memory, but the buffer is GPU memory; use ") + gpu_paths);
  if (offset > user->size() || size > user->size() - offset)
    throw_invalid("message of " + std::to_string(size) + " bytes at offset " + std::to_string(offset) +
                  " does not fit the " + std::to_string(user->size()) + "-byte buffer");
}

PathEndpoint::PathEndpoint(const PathConfig& cfg, Buffer* user, size_t offset) : cfg_(cfg), offset_(offset) {
  const bool gpu = path_needs_gpu(cfg_.path);
  check_endpoint("tcp", path_name(cfg_.path), gpu, cfg_.path == Path::Pipelined, cfg_.size, &cfg_.chunk, cfg_.depth,
                 user, offset, "staged, shared or pipelined");
  if (user) {
    user_ = user;
  } else {
    own_user_ = std::make_unique<Buffer>(gpu ? MemKind::Device : MemKind::Pageable, cfg_.size + offset, cfg_.device);
    user_ = own_user_.get();
  }
  if (!gpu) return;

  const CudaApi& api = cuda();
  cuda_use(user_->device());
  switch (cfg_.path) {
    case Path::Staged:
      bounce_ = std::make_unique<Buffer>(MemKind::Pinned, cfg_.size, user_->device());
      wire_ = std::make_unique<Buffer>(MemKind::Pageable, cfg_.size, user_->device());
      break;
    case Path::Shared:
      wire_ = std::make_unique<Buffer>(MemKind::Pinned, cfg_.size, user_->device());
      break;
    case Path::Pipelined:
      for (int i = 0; i < cfg_.depth; ++i) {
        slots_.push_back(std::make_unique<Buffer>(MemKind::Pinned, cfg_.chunk, user_->device()));
        CUevent ev = nullptr;
        GDRLAB_CU(api.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
        events_.push_back(ev);
      }
      break;
    case Path::Host: break;
  }
  GDRLAB_CU(api.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
}

PathEndpoint::~PathEndpoint() {
  if (stream_ || !events_.empty()) {
    const CudaApi& api = cuda();
    api.cuCtxSetCurrent(cuda_context(user_->device()));
    if (stream_) api.cuStreamSynchronize(stream_);
    for (CUevent ev : events_) api.cuEventDestroy(ev);
    if (stream_) api.cuStreamDestroy(stream_);
  }
}

void PathEndpoint::send(TcpWire& wire) {
  const size_t n = cfg_.size;
  switch (cfg_.path) {
    case Path::Host:
      wire.send_data(static_cast<char*>(user_->host_ptr()) + offset_, n);
      return;
    case Path::Staged: {
      const CudaApi& api = cuda();
      cuda_use(user_->device());
      GDRLAB_CU(api.cuMemcpyDtoHAsync(bounce_->host_ptr(), user_->device_ptr() + offset_, n, stream_));
      GDRLAB_CU(api.cuStreamSynchronize(stream_));
      std::memcpy(wire_->host_ptr(), bounce_->host_ptr(), n);
      wire.send_data(wire_->host_ptr(), n);
      return;
    }
    case Path::Shared: {
      const CudaApi& api = cuda();
      cuda_use(user_->device());
      GDRLAB_CU(api.cuMemcpyDtoHAsync(wire_->host_ptr(), user_->device_ptr() + offset_, n, stream_));
      GDRLAB_CU(api.cuStreamSynchronize(stream_));
      wire.send_data(wire_->host_ptr(), n);
      return;
    }
    case Path::Pipelined:
      send_pipelined(wire);
      return;
  }
}

void PathEndpoint::recv(TcpWire& wire) {
  const size_t n = cfg_.size;
  switch (cfg_.path) {
    case Path::Host:
      wire.expect_data(n);
      wire.recv_raw(static_cast<char*>(user_->host_ptr()) + offset_, n);
      return;
    case Path::Staged: {
      wire.expect_data(n);
      wire.recv_raw(wire_->host_ptr(), n);
      std::memcpy(bounce_->host_ptr(), wire_->host_ptr(), n);
      const CudaApi& api = cuda();
      cuda_use(user_->device());
      GDRLAB_CU(api.cuMemcpyHtoDAsync(user_->device_ptr() + offset_, bounce_->host_ptr(), n, stream_));
      GDRLAB_CU(api.cuStreamSynchronize(stream_));
      return;
    }
    case Path::Shared: {
      wire.expect_data(n);
      wire.recv_raw(wire_->host_ptr(), n);
      const CudaApi& api = cuda();
      cuda_use(user_->device());
      GDRLAB_CU(api.cuMemcpyHtoDAsync(user_->device_ptr() + offset_, wire_->host_ptr(), n, stream_));
      GDRLAB_CU(api.cuStreamSynchronize(stream_));
      return;
    }
    case Path::Pipelined:
      recv_pipelined(wire);
      return;
  }
}

// Sender: keep up to `depth` device-to-host chunk copies in flight; send each chunk as soon as its
// copy completes, then reuse its slot for the chunk `depth` places ahead.
void PathEndpoint::send_pipelined(TcpWire& wire) {
  const CudaApi& api = cuda();
  cuda_use(user_->device());
  const size_t n = cfg_.size, chunk = cfg_.chunk;
  const size_t nchunks = (n + chunk - 1) / chunk;
  const size_t depth = slots_.size();
  auto issue = [&](size_t i) {
    size_t off = i * chunk, len = std::min(chunk, n - off);
    size_t s = i % depth;
    GDRLAB_CU(api.cuMemcpyDtoHAsync(slots_[s]->host_ptr(), user_->device_ptr() + offset_ + off, len, stream_));
    GDRLAB_CU(api.cuEventRecord(events_[s], stream_));
  };
  for (size_t i = 0; i < std::min(depth, nchunks); ++i) issue(i);
  wire.send_data_header(n);
  for (size_t i = 0; i < nchunks; ++i) {
    size_t s = i % depth;
    size_t off = i * chunk, len = std::min(chunk, n - off);
    GDRLAB_CU(api.cuEventSynchronize(events_[s]));
    wire.send_raw(slots_[s]->host_ptr(), len);
    if (i + depth < nchunks) issue(i + depth);
  }
}

// Receiver: receive chunk i into slot i % depth once that slot's previous host-to-device copy has
// completed, then start its copy to the GPU; the wire never waits for the last copy but one.
void PathEndpoint::recv_pipelined(TcpWire& wire) {
  const CudaApi& api = cuda();
  cuda_use(user_->device());
  const size_t n = cfg_.size, chunk = cfg_.chunk;
  const size_t nchunks = (n + chunk - 1) / chunk;
  const size_t depth = slots_.size();
  wire.expect_data(n);
  for (size_t i = 0; i < nchunks; ++i) {
    size_t s = i % depth;
    size_t off = i * chunk, len = std::min(chunk, n - off);
    if (i >= depth) GDRLAB_CU(api.cuEventSynchronize(events_[s]));
    wire.recv_raw(slots_[s]->host_ptr(), len);
    GDRLAB_CU(api.cuMemcpyHtoDAsync(user_->device_ptr() + offset_ + off, slots_[s]->host_ptr(), len, stream_));
    GDRLAB_CU(api.cuEventRecord(events_[s], stream_));
  }
  GDRLAB_CU(api.cuStreamSynchronize(stream_));
}

}  // namespace gdrlab
