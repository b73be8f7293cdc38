#include "paths/paths.h"

#include <algorithm>

#include "core/error.h"

namespace gdrlab {

PathConfig path_config(const TestSpec& s, Wire wire) {
  PathConfig c;
  c.path = path_from_code(s.path, wire);
  c.size = static_cast<size_t>(s.size);
  c.chunk = s.chunk ? static_cast<size_t>(s.chunk) : kDefaultChunkBytes;
  c.depth = s.depth ? static_cast<int>(s.depth) : kDefaultPipelineDepth;
  c.device = static_cast<int>(s.device);
  return c;
}

void check_endpoint(Wire wire, PathConfig* cfg, const Buffer* user, size_t offset) {
  const char* path = path_name(cfg->path);
  const bool gpu = path_needs_gpu(cfg->path);
  const size_t size = cfg->size;
  if (size == 0) throw_invalid("message size must be at least 1 byte");
  if (size > kMaxDataBytes)
    throw_invalid("message size " + std::to_string(size) + " exceeds the " + wire_name(wire) +
                  " wire's maximum of " + std::to_string(kMaxDataBytes) + " bytes (1 GiB)");
  if (gpu) {
    std::string why;
    if (!cuda_usable(&why)) throw_unavailable(std::string("path '") + path + "' needs a GPU: " + why);
  }
  if (cfg->path == Path::Pipelined) {
    if (cfg->chunk < std::min(kMinChunkBytes, size))
      throw_invalid("pipelined chunk size must be at least " + std::to_string(kMinChunkBytes) +
                    " bytes (or the whole message), got " + std::to_string(cfg->chunk) +
                    ": every chunk costs a copy and an event on both sides");
    if (cfg->depth < 1 || cfg->depth > 64) throw_invalid("pipelined depth must be between 1 and 64 buffers");
    if (cfg->chunk > size) cfg->chunk = size;
  }
  if (!user) return;
  if (gpu && user->kind() != MemKind::Device)
    throw_invalid(std::string("path '") + path + "' moves GPU memory, but the buffer is " +
                  mem_kind_name(user->kind()) + " host memory");
  if (!gpu && user->kind() == MemKind::Device)
    throw_invalid("path 'host' moves host memory, but the buffer is GPU memory; use " + wire_path_list(wire, true));
  if (offset > user->size() || size > user->size() - offset)
    throw_invalid("message of " + std::to_string(size) + " bytes at offset " + std::to_string(offset) +
                  " does not fit the " + std::to_string(user->size()) + "-byte buffer");
}

Buffer* message_buffer(Buffer* user, const PathConfig& cfg, size_t bytes, std::unique_ptr<Buffer>* own) {
  if (user) return user;
  *own = std::make_unique<Buffer>(path_needs_gpu(cfg.path) ? MemKind::Device : MemKind::Pageable, bytes, cfg.device);
  return own->get();
}

void make_staging(Path path, size_t size, int device, std::unique_ptr<Buffer>* bounce, std::unique_ptr<Buffer>* host) {
  if (path == Path::Staged) {
    *bounce = std::make_unique<Buffer>(MemKind::Pinned, size, device);
    *host = std::make_unique<Buffer>(MemKind::Pageable, size, device);
  } else if (path == Path::Shared) {
    *host = std::make_unique<Buffer>(MemKind::Pinned, size, device);
  }
}

}  // namespace gdrlab
