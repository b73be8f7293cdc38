// The tcp wire's endpoint: the transfer paths of DESIGN.md with messages as DATA frames on the
// control channel itself. A TcpEndpoint owns the intermediate buffers one side needs to send and
// receive messages of one size over one path:
//   host       host buffer -> wire -> host buffer
//   staged     GPU -D2H-> pinned bounce -memcpy-> wire buffer -> wire (mirror on receive)
//   shared     GPU -D2H-> pinned wire buffer -> wire (GPUDirect 1.0: one host copy fewer)
//   pipelined  shared cut into chunks over `depth` pinned buffers, copies overlapping the wire
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/budget.h"
#include "core/buffer.h"
#include "core/cuda_api.h"
#include "core/cuda_raii.h"
#include "paths/paths.h"
#include "wire/channel.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace gdrlab {

class TcpEndpoint : public TestEndpoint {
 public:
  // user: the application's buffer (nullptr: allocate one of the path's kind). Messages live at
  // user[offset, offset+size) and move over `wire`.
  TcpEndpoint(const PathConfig& cfg, ControlChannel& wire, Buffer* user = nullptr, size_t offset = 0);
  // What the constructor allocates for cfg without a user buffer (a serving side), cfg already
  // checked (chunk clamped to the message): the server reserves it from its budget first.
  static MemoryNeed serving_memory(const PathConfig& cfg);
  TcpEndpoint(const TcpEndpoint&) = delete;
  TcpEndpoint& operator=(const TcpEndpoint&) = delete;

  void send(bool last) override;
  void recv() override;
  void send_ack() override { wire_.send_control(FrameType::Ack); }
  void expect_ack() override { wire_.expect(FrameType::Ack); }
  Buffer& user() override { return *user_; }
  size_t offset() const override { return offset_; }
  std::string describe() const override;
  const PathConfig& config() const { return cfg_; }

 private:
  void* wire_buffer();
  void send_pipelined();
  void recv_pipelined();
  void to_host(void* dst);
  void to_device(const void* src);

  PathConfig cfg_;
  ControlChannel& wire_;
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
