// What the transfer paths of DESIGN.md need on either wire: one test's path parameters, the
// checks every endpoint makes, the message and staging buffers, and the pipelined path's sending
// half. The wires' endpoints (tcp/tcp.h TcpEndpoint, verbs/path.h VerbsEndpoint) are built on it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/budget.h"
#include "core/buffer.h"
#include "core/cuda_api.h"
#include "core/cuda_raii.h"
#include "core/spec.h"
#include "core/vocab.h"

namespace gdrlab {

// One test's path parameters, as both wires' endpoints take them.
struct PathConfig {
  Path path = Path::Host;
  size_t size = 0;
  size_t chunk = kDefaultChunkBytes;
  int depth = kDefaultPipelineDepth;
  int device = 0;
};

// The PathConfig a spec asks for (0 chunk or depth: the defaults); throws Protocol when the
// spec's path is not one `wire` carries.
PathConfig path_config(const TestSpec& spec, Wire wire);

// Checks every wire's endpoints share, in this order: message size (1 byte to 1 GiB), a usable
// GPU for a GPU path, the pipeline's chunk and depth (chunk clamped to the message; pipelined
// only), and that a caller's buffer is of the kind the path moves and holds the message.
void check_endpoint(Wire wire, PathConfig* cfg, const Buffer* user, size_t offset);

// The application's buffer: `user`, or one of the path's kind (GPU or pageable) of `bytes`
// allocated into *own.
Buffer* message_buffer(Buffer* user, const PathConfig& cfg, size_t bytes, std::unique_ptr<Buffer>* own);
// The host buffers a path copies through, of `size` bytes on the GPU's side: staged, a CUDA-pinned
// bounce buffer (*bounce) and the pageable buffer the wire reads (*host); shared, one pinned
// buffer (*host); other paths none.
void make_staging(Path path, size_t size, int device, std::unique_ptr<Buffer>* bounce, std::unique_ptr<Buffer>* host);

// The sending half of the pipelined path, for every wire: up to `depth` (= events.size())
// device-to-host chunk copies of [src, src+n) in flight on `stream`; begin() runs once the first
// copies are queued, transmit(i, slot, offset, length) as soon as chunk i's copy ends, after which
// the slot takes the chunk `depth` places ahead. reuse(slot) runs before a slot is written again
// (verbs: wait until its last write has left).
template <class SlotPtr, class Reuse, class Begin, class Transmit>
void pipeline_send(const CudaApi& api, CUstream stream, const std::vector<CudaEvent>& events, CUdeviceptr src,
                   size_t n, size_t chunk, SlotPtr slot_ptr, Reuse reuse, Begin begin, Transmit transmit) {
  const size_t nchunks = (n + chunk - 1) / chunk;
  const size_t depth = events.size();
  auto issue = [&](size_t i) {
    const size_t off = i * chunk, s = i % depth;
    reuse(s);
    GDRLAB_CU(api, cuMemcpyDtoHAsync, slot_ptr(s), src + off, std::min(chunk, n - off), stream);
    GDRLAB_CU(api, cuEventRecord, events[s].get(), stream);
  };
  for (size_t i = 0; i < std::min(depth, nchunks); ++i) issue(i);
  begin();
  for (size_t i = 0; i < nchunks; ++i) {
    const size_t off = i * chunk, s = i % depth;
    GDRLAB_CU(api, cuEventSynchronize, events[s].get());
    transmit(i, s, off, std::min(chunk, n - off));
    if (i + depth < nchunks) issue(i + depth);
  }
}

}  // namespace gdrlab
