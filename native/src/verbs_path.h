// The transfer paths of DESIGN.md over the verbs wire (RDMA WRITE WITH IMMEDIATE on an RC QP).
// Every side exposes one remote-writable region of `size` bytes, where the peer's messages land:
//   host       host buffer (ibv_reg_mr) -> HCA -> host buffer
//   gdr        GPU buffer registered with the HCA (dma-buf or nvidia-peermem): no host copy at all
//   staged     GPU -D2H-> CUDA-pinned bounce -memcpy-> registered host buffer -> HCA (mirror on receive)
//   shared     GPU -D2H-> registered pinned buffer -> HCA (one host copy fewer)
//   pipelined  shared cut into chunks over `depth` registered pinned slots; chunk i is written as
//              soon as its copy ends, and the receiver starts its host-to-device copy of chunk i
//              when chunk i's immediate arrives
// The immediate carries the message kind (data, ack) and the chunk index.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "buffer.h"
#include "verbs_qp.h"
#include "verbs_resources.h"

namespace gdrlab {

enum class VerbsPath : uint8_t { Host = 0, Staged = 1, Shared = 2, Pipelined = 3, Gdr = 4 };
constexpr int kVerbsPathCount = 5;
const char* verbs_path_name(VerbsPath p);
VerbsPath verbs_path_from_name(const std::string& name);  // throws InvalidArgument
VerbsPath verbs_path_from_code(uint8_t code);             // throws Protocol

constexpr uint32_t kImmData = 0x01000000u;
constexpr uint32_t kImmAck = 0x02000000u;
constexpr uint32_t kImmIndexMask = 0x00FFFFFFu;

struct VerbsPathConfig {
  VerbsPath path = VerbsPath::Host;
  size_t size = 0;
  size_t chunk = 256 * 1024;
  int depth = 4;
  int device = 0;
  GpuRegistration gpu_registration = GpuRegistration::Auto;
};

class VerbsEndpoint {
 public:
  VerbsEndpoint(const VerbsPathConfig& cfg, std::shared_ptr<ProtectionDomain> pd, RcLink& link,
                Buffer* user = nullptr, size_t offset = 0);
  ~VerbsEndpoint();
  VerbsEndpoint(const VerbsEndpoint&) = delete;
  VerbsEndpoint& operator=(const VerbsEndpoint&) = delete;

  // Our landing region, for the connection data.
  void describe_region(ConnInfo* c) const;
  // The peer's landing region; throws Protocol when it is smaller than a message.
  void set_remote(const ConnInfo& c);

  // signal: ask for a completion (the verification message, so finish() can wait for it).
  void send(bool signal = false);
  void recv();
  void send_ack();
  void expect_ack();
  // gdr: makes the HCA's writes into GPU memory visible to CUDA copies before the data is read
  // back for verification (cuFlushGPUDirectRDMAWrites where the driver has it). Not done inside
  // the timed loops, which, like perftest, time the data movement only.
  void flush_gpu_writes();
  // Waits for this side's last signaled write (send(true) is the last message of every test).
  void finish();

  Buffer& user() { return *user_; }
  size_t offset() const { return offset_; }
  const VerbsPathConfig& config() const { return cfg_; }
  // How GPU memory was registered ("dmabuf", "peermem"), or "host" for host memory.
  std::string mechanism() const;

 private:
  void send_pipelined();
  void recv_pipelined();
  uint32_t expect_data();

  VerbsPathConfig cfg_;
  std::shared_ptr<ProtectionDomain> pd_;
  RcLink& link_;
  size_t offset_ = 0;
  std::unique_ptr<Buffer> own_user_;
  Buffer* user_ = nullptr;
  std::unique_ptr<Buffer> bounce_;  // staged: CUDA-pinned bounce buffer
  std::unique_ptr<Buffer> wire_;    // staged (pageable), shared/pipelined (pinned): landing region
  std::unique_ptr<Buffer> slots_;   // pipelined: depth * chunk pinned send slots
  std::unique_ptr<MemoryRegion> land_mr_;  // the region the peer writes into (and host/gdr send from)
  std::unique_ptr<MemoryRegion> send_mr_;  // staged/shared: same buffer as land (unused); pipelined: slots
  uint64_t remote_addr_ = 0;
  uint32_t remote_rkey_ = 0;
  uint64_t last_send_seq_ = 0;
  std::vector<uint64_t> slot_seq_;
  CUstream stream_ = nullptr;
  std::vector<CUevent> events_;
};

}  // namespace gdrlab
