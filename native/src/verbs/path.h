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

// How the gdr path makes the HCA's writes into GPU memory visible before they are read or
// overwritten (CUDA's GPUDirect RDMA ordering model, cuda.h's CUGPUDirectRDMAWritesOrdering):
//   None  the device orders inbound writes for its own consumers (attribute 118 >= OWNER), or
//         the flush is turned off (GDRLAB_GDR_FLUSH_DISABLE, else NCCL_GDR_FLUSH_DISABLE, nonzero)
//   Host  cuFlushGPUDirectRDMAWrites (CUDA 11.3+, where attribute 117 has the HOST bit)
//   Read  otherwise (older drivers, devices without the host flush): a 1-byte RDMA READ of the
//         buffer on a queue pair connected to itself, as NCCL's net_ib does (FlushReader)
enum class GpuFlush { None = 0, Host = 1, Read = 2, Max };
const char* gpu_flush_name(GpuFlush f);
// have_host_api: the driver exports cuFlushGPUDirectRDMAWrites; options and ordering: attributes
// 117 and 118 (0 where the driver does not know them).
GpuFlush choose_gpu_flush(bool have_host_api, int options, int ordering);
// GDRLAB_GDR_FLUSH_DISABLE, else NCCL_GDR_FLUSH_DISABLE: an integer, nonzero disables. Throws
// InvalidArgument naming the variable for anything else.
bool gpu_flush_disabled();
// Asks the driver about CUDA device `ordinal` and applies choose_gpu_flush.
// GDRLAB_GDR_FLUSH_DISABLE / NCCL_GDR_FLUSH_DISABLE first (None), then GDRLAB_GDR_FORCE_FLUSH=1
// (Read), then a C2C-attached GPU (Read, as NCCL forces its flush there), then the attributes.
GpuFlush gpu_flush_for_device(int ordinal);
// GDRLAB_GDR_FORCE_FLUSH=1: the RDMA-READ flush whatever the GPU reports; throws on other values.
bool gpu_flush_forced();

struct VerbsPathConfig : PathConfig {
  GpuRegistration gpu_registration = GpuRegistration::Auto;
  // Data messages the peer sends inside the timed loop (its verification message is the next):
  // a message whose slot the peer will not write again earns no credit, so no credit is in
  // flight when the peer tears down.
  uint64_t peer_loop_messages = 0;
  // Bandwidth: windows the client may post before the first is acknowledged; the peer's receive
  // queue holds that many windows (verbs_rq_depth), so streaming never meets receiver-not-ready.
  uint32_t bw_windows_in_flight = 1;
};

class VerbsEndpoint : public TestEndpoint {
 public:
  // Takes the link (its protection domain registers the regions) and keeps it to the end: on
  // destruction the queue pair goes first, then the memory regions, then the buffers.
  VerbsEndpoint(const VerbsPathConfig& cfg, std::unique_ptr<RcLink> link, Buffer* user = nullptr,
                size_t offset = 0);
  // What the constructor allocates for cfg without a user buffer (a serving side), cfg already
  // checked (chunk clamped to the message): every landing slot, the staged bounce buffer, the
  // pipelined send slots (depth x chunk), the gdr buffer in whole 2 MiB pages.
  static MemoryNeed serving_memory(const PathConfig& cfg);
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
  // back for verification or overwritten, by the mechanism GpuFlush names. Not done inside the
  // timed loops, which, like perftest, time the data movement only.
  void settle() override;
  GpuFlush gpu_flush() const { return flush_; }
  // Waits for this side's last signaled write (send(true) is the last message of every test).
  void finish() override;
  bool confirms_last_write() const override { return true; }
  uint32_t windows_in_flight(const TestSpec&) const override { return cfg_.bw_windows_in_flight; }
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
  GpuFlush flush_ = GpuFlush::None;
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
  std::unique_ptr<FlushReader> flusher_;   // gdr with GpuFlush::Read: its QP goes before the regions
  std::unique_ptr<RcLink> link_;           // last member: its QP is destroyed first
  uint64_t remote_addr_ = 0;
  uint32_t remote_rkey_ = 0;
  uint64_t last_send_seq_ = 0;
  std::vector<uint64_t> slot_seq_;
};

}  // namespace gdrlab
