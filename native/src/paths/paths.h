// The transfer paths of DESIGN.md over the tcp wire. A PathEndpoint owns the intermediate buffers
// one side needs to send and receive messages of one size over one path:
//   host       host buffer -> wire -> host buffer
//   staged     GPU -D2H-> pinned bounce -memcpy-> wire buffer -> wire (mirror on receive)
//   shared     GPU -D2H-> pinned wire buffer -> wire (GPUDirect 1.0: one host copy fewer)
//   pipelined  shared cut into chunks over `depth` pinned buffers, copies overlapping the wire
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
#include "core/vocab.h"
#include "wire/frame.h"
#include "wire/session.h"
#include "wire/tcp.h"

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

class PathEndpoint : public TestEndpoint {
 public:
  // user: the application's buffer (nullptr: allocate one of the path's kind). Messages live at
  // user[offset, offset+size) and move over `wire`.
  PathEndpoint(const PathConfig& cfg, TcpWire& wire, Buffer* user = nullptr, size_t offset = 0);
  // What the constructor allocates for cfg without a user buffer (a serving side), cfg already
  // checked (chunk clamped to the message): the server reserves it from its budget first.
  static MemoryNeed serving_memory(const PathConfig& cfg);
  PathEndpoint(const PathEndpoint&) = delete;
  PathEndpoint& operator=(const PathEndpoint&) = delete;

  void send(bool last) override;
  void recv() override;
  void send_ack() override { wire_.send_control(FrameType::Ack); }
  void expect_ack() override { wire_.expect(FrameType::Ack); }
  Buffer& user() override { return *user_; }
  size_t offset() const override { return offset_; }
  std::string describe() const override;
  const PathConfig& config() const { return cfg_; }

 private:
  void send_pipelined();
  void recv_pipelined();
  void to_host(void* dst);
  void to_device(const void* src);

  PathConfig cfg_;
  TcpWire& wire_;
  size_t offset_ = 0;
  // Declared in the order they are made: a constructor that throws half way, and the destructor,
  // release them in reverse (events and stream first, then the memory they touch).
  std::unique_ptr<Buffer> own_user_;
  Buffer* user_ = nullptr;
  std::unique_ptr<Buffer> bounce_;  // staged: CUDA-pinned bounce buffer
  std::unique_ptr<Buffer> host_;    // staged: the wire's pageable buffer; shared: pinned
  std::vector<std::unique_ptr<Buffer>> slots_;  // pipelined: pinned chunk buffers
  const CudaApi* api_ = nullptr;    // GPU paths: kept so no message looks CUDA up
  CUcontext ctx_ = nullptr;         // GPU paths: the user buffer's context
  CudaStream stream_;
  std::vector<CudaEvent> events_;   // pipelined: one per slot
};

}  // namespace gdrlab
