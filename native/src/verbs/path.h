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
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/cuda_raii.h"
#include "core/vocab.h"
#include "paths/paths.h"
#include "verbs/qp.h"
#include "verbs/resources.h"
#include "wire/session.h"

namespace gdrlab {

constexpr uint32_t kImmData = 0x01000000u;
constexpr uint32_t kImmAck = 0x02000000u;
constexpr uint32_t kImmCredit = 0x03000000u;  // a landing slot is free again
constexpr uint32_t kImmIndexMask = 0x00FFFFFFu;
// Staged, shared and pipelined messages land in host memory that the receiver copies out. The
// landing region has this many message slots, used in turn; the receiver hands a slot back with a
// credit once copied, and the sender waits for that credit before writing the slot again.
constexpr uint64_t kLandingSlots = 2;

struct VerbsPathConfig : PathConfig {
  GpuRegistration gpu_registration = GpuRegistration::Auto;
  // Data messages the peer sends inside the timed loop (its verification message is the next):
  // a message whose slot the peer will not write again earns no credit, so no credit is in
  // flight when the peer tears down.
  uint64_t peer_loop_messages = 0;
};

class VerbsEndpoint : public TestEndpoint {
 public:
  // Takes the link (its protection domain registers the regions) and keeps it to the end: on
  // destruction the queue pair goes first, then the memory regions, then the buffers.
  VerbsEndpoint(const VerbsPathConfig& cfg, std::unique_ptr<RcLink> link, Buffer* user = nullptr,
                size_t offset = 0);
  ~VerbsEndpoint() override;
  VerbsEndpoint(const VerbsEndpoint&) = delete;
  VerbsEndpoint& operator=(const VerbsEndpoint&) = delete;

  RcLink& link() { return *link_; }
  // Our landing region, for the connection data.
  void describe_region(ConnInfo* c) const;
  // The peer's landing region; throws Protocol when it is smaller than a message.
  void set_remote(const ConnInfo& c);

  // last: ask for a completion (the verification message, so finish() can wait for it).
  void send(bool last) override;
  void recv() override;
  void send_ack() override;
  void expect_ack() override;
  // gdr: makes the HCA's writes into GPU memory visible to CUDA copies before the data is read
  // back for verification or overwritten (cuFlushGPUDirectRDMAWrites where the device reports
  // host-initiated flush support and writes are not already ordered for it). Not done inside
  // the timed loops, which, like perftest, time the data movement only.
  void settle() override;
  // Waits for this side's last signaled write (send(true) is the last message of every test).
  void finish() override;
  bool confirms_last_write() const override { return true; }
  Buffer& user() override { return *user_; }
  size_t offset() const override { return offset_; }
  std::string describe() const override;
  const VerbsPathConfig& config() const { return cfg_; }
  // How GPU memory was registered ("dmabuf", "peermem"), or "host" for host memory.
  std::string mechanism() const;

 private:
  // Landing-slot flow control (staged, shared, pipelined).
  bool slotted() const { return cfg_.path != Path::Host && cfg_.path != Path::Gdr; }
  uint64_t remote_slot_addr();   // waits for the slot's credit; then advances sent_msgs_
  size_t local_slot_offset() const { return static_cast<size_t>(recv_msgs_ % kLandingSlots) * cfg_.size; }
  void message_taken();         // the current landing slot is copied out: credit it, advance recv_msgs_
  uint32_t next_imm();          // the next immediate that is not a credit (credits are counted)
  uint64_t sent_msgs_ = 0, recv_msgs_ = 0, credits_ = 0;
  std::deque<uint32_t> held_imms_;  // read while waiting for a credit
  enum class FlushNeed { Unknown, Yes, No };
  FlushNeed flush_ = FlushNeed::Unknown;
  void send_pipelined();
  void recv_pipelined();
  uint32_t expect_data();

  VerbsPathConfig cfg_;
  std::shared_ptr<ProtectionDomain> pd_;
  size_t offset_ = 0;
  // Declared in the order they are made; destroyed in reverse (see the constructor's comment).
  std::unique_ptr<Buffer> own_user_;
  Buffer* user_ = nullptr;
  std::unique_ptr<Buffer> bounce_;  // staged: CUDA-pinned bounce buffer
  std::unique_ptr<Buffer> host_;    // staged (pageable), shared/pipelined (pinned): landing region
  std::unique_ptr<Buffer> slots_;   // pipelined: depth * chunk pinned send slots
  std::unique_ptr<MemoryRegion> land_mr_;  // the region the peer writes into (and host/gdr send from)
  std::unique_ptr<MemoryRegion> send_mr_;  // pipelined: the send slots
  const CudaApi* api_ = nullptr;           // GPU paths: kept so no message looks CUDA up
  CUcontext ctx_ = nullptr;
  CudaStream stream_;
  std::vector<CudaEvent> events_;
  std::unique_ptr<RcLink> link_;           // last member: its QP is destroyed first
  uint64_t remote_addr_ = 0;
  uint32_t remote_rkey_ = 0;
  uint64_t last_send_seq_ = 0;
  std::vector<uint64_t> slot_seq_;
};

}  // namespace gdrlab
