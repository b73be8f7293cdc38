#include "verbs_path.h"

#include <cstring>
#include <exception>

#include "error.h"
#include "frame.h"
#include "paths.h"

namespace gdrlab {

static const char* const kVerbsPathNames[kVerbsPathCount] = {"host", "staged", "shared", "pipelined", "gdr"};

const char* verbs_path_name(VerbsPath p) { return kVerbsPathNames[static_cast<int>(p)]; }

VerbsPath verbs_path_from_name(const std::string& name) {
  for (int i = 0; i < kVerbsPathCount; ++i)
    if (name == kVerbsPathNames[i]) return static_cast<VerbsPath>(i);
  throw_invalid("unknown path '" + name + "' for the verbs wire; valid: host, staged, shared, pipelined, gdr");
}

VerbsPath verbs_path_from_code(uint8_t code) {
  if (code >= kVerbsPathCount) throw_protocol("unknown verbs path code " + std::to_string(code));
  return static_cast<VerbsPath>(code);
}

VerbsEndpoint::VerbsEndpoint(const VerbsPathConfig& cfg, std::shared_ptr<ProtectionDomain> pd, RcLink& link,
                             Buffer* user, size_t offset)
    : cfg_(cfg), pd_(std::move(pd)), link_(link), offset_(offset) {
  const bool gpu = cfg_.path != VerbsPath::Host;
  const bool pipelined = cfg_.path == VerbsPath::Pipelined;
  check_endpoint("verbs", verbs_path_name(cfg_.path), gpu, pipelined, cfg_.size, &cfg_.chunk, cfg_.depth, user, offset,
                 "gdr, staged, shared or pipelined");
  if (pipelined && (cfg_.size + cfg_.chunk - 1) / cfg_.chunk > kImmIndexMask)
    throw_invalid("too many chunks per message");
  if (user) {
    user_ = user;
  } else {
    size_t alloc = cfg_.size + offset;
    // The gdr path exports its buffer as a dma-buf: a whole number of 2 MiB GPU pages keeps the
    // page-rounded export range inside this allocation even for tiny messages.
    if (cfg_.path == VerbsPath::Gdr) alloc = (alloc + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    own_user_ = std::make_unique<Buffer>(gpu ? MemKind::Device : MemKind::Pageable, alloc, cfg_.device);
    user_ = own_user_.get();
  }
  const int dev = user_->device();
  switch (cfg_.path) {
    case VerbsPath::Host:
      land_mr_ = MemoryRegion::register_host(pd_, static_cast<char*>(user_->host_ptr()) + offset_, cfg_.size);
      return;
    case VerbsPath::Gdr:
      land_mr_ = MemoryRegion::register_device(pd_, user_->device_ptr() + offset_, cfg_.size, dev, kDefaultAccess,
                                               cfg_.gpu_registration);
      return;
    case VerbsPath::Staged:
      bounce_ = std::make_unique<Buffer>(MemKind::Pinned, cfg_.size, dev);
      wire_ = std::make_unique<Buffer>(MemKind::Pageable, cfg_.size, dev);
      break;
    case VerbsPath::Shared:
      wire_ = std::make_unique<Buffer>(MemKind::Pinned, cfg_.size, dev);
      break;
    case VerbsPath::Pipelined:
      wire_ = std::make_unique<Buffer>(MemKind::Pinned, cfg_.size, dev);
      slots_ = std::make_unique<Buffer>(MemKind::Pinned, cfg_.chunk * cfg_.depth, dev);
      send_mr_ = MemoryRegion::register_host(pd_, slots_->host_ptr(), slots_->size());
      slot_seq_.assign(cfg_.depth, 0);
      break;
  }
  land_mr_ = MemoryRegion::register_host(pd_, wire_->host_ptr(), wire_->size());
  const CudaApi& api = cuda();
  cuda_use(dev);
  GDRLAB_CU(api.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  if (cfg_.path == VerbsPath::Pipelined) {
    for (int i = 0; i < cfg_.depth; ++i) {
      CUevent ev = nullptr;
      GDRLAB_CU(api.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
      events_.push_back(ev);
    }
  }
}

VerbsEndpoint::~VerbsEndpoint() {
  // On the normal path the test already waited; after a failure, waiting again for a peer that
  // is gone would only add a timeout. Deregistering stops the HCA's access either way.
  if (std::uncaught_exceptions() == 0) {
    try {
      finish();
    } catch (...) {
    }
  }
  if (stream_ || !events_.empty()) {
    const CudaApi& api = cuda();
    api.cuCtxSetCurrent(cuda_context(user_->device()));
    if (stream_) api.cuStreamSynchronize(stream_);
    for (CUevent ev : events_) api.cuEventDestroy(ev);
    if (stream_) api.cuStreamDestroy(stream_);
  }
  // Deregister before the buffers go: the HCA must stop using memory before it is freed.
  send_mr_.reset();
  land_mr_.reset();
}

void VerbsEndpoint::describe_region(ConnInfo* c) const {
  c->rkey = land_mr_->rkey();
  c->addr = land_mr_->addr();
  c->length = land_mr_->length();
}

void VerbsEndpoint::set_remote(const ConnInfo& c) {
  if (c.length < cfg_.size)
    throw_protocol("the peer's memory region (" + std::to_string(c.length) + " bytes) is smaller than a " +
                   std::to_string(cfg_.size) + "-byte message");
  remote_addr_ = c.addr;
  remote_rkey_ = c.rkey;
}

std::string VerbsEndpoint::mechanism() const {
  return cfg_.path == VerbsPath::Gdr ? mr_mechanism_name(land_mr_->mechanism()) : "host";
}

void VerbsEndpoint::finish() { link_.wait_signaled(); }

void VerbsEndpoint::flush_gpu_writes() {
  if (cfg_.path != VerbsPath::Gdr) return;
  const CudaApi& api = cuda();
  if (!api.cuFlushGPUDirectRDMAWrites) return;  // drivers before CUDA 11.3 order these writes themselves
  cuda_use(user_->device());
  GDRLAB_CU(api.cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                           CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER));
}

uint32_t VerbsEndpoint::expect_data() {
  uint32_t imm = link_.wait_imm();
  if ((imm & ~kImmIndexMask) != kImmData)
    throw_protocol("expected a data message on the verbs wire, got immediate 0x" + std::to_string(imm));
  return imm & kImmIndexMask;
}

void VerbsEndpoint::send_ack() {
  link_.write_imm(0, 0, 0, remote_addr_, remote_rkey_, kImmAck, false);
}

void VerbsEndpoint::expect_ack() {
  uint32_t imm = link_.wait_imm();
  if (imm != kImmAck) throw_protocol("expected an ACK on the verbs wire, got immediate " + std::to_string(imm));
}

void VerbsEndpoint::send(bool signal) {
  const uint32_t n = static_cast<uint32_t>(cfg_.size);
  switch (cfg_.path) {
    case VerbsPath::Host:
    case VerbsPath::Gdr:
      // Zero copy: the HCA reads the application's buffer, which the loop never rewrites.
      last_send_seq_ = link_.write_imm(land_mr_->addr(), land_mr_->lkey(), n, remote_addr_, remote_rkey_, kImmData,
                                       signal);
      return;
    case VerbsPath::Staged:
    case VerbsPath::Shared: {
      // The previous write must have left the host buffer before the next copy overwrites it.
      if (last_send_seq_) link_.wait_sent(last_send_seq_);
      const CudaApi& api = cuda();
      cuda_use(user_->device());
      void* host = cfg_.path == VerbsPath::Staged ? bounce_->host_ptr() : wire_->host_ptr();
      GDRLAB_CU(api.cuMemcpyDtoHAsync(host, user_->device_ptr() + offset_, n, stream_));
      GDRLAB_CU(api.cuStreamSynchronize(stream_));
      if (cfg_.path == VerbsPath::Staged) std::memcpy(wire_->host_ptr(), bounce_->host_ptr(), n);
      last_send_seq_ = link_.write_imm(land_mr_->addr(), land_mr_->lkey(), n, remote_addr_, remote_rkey_, kImmData, true);
      return;
    }
    case VerbsPath::Pipelined:
      send_pipelined();
      return;
  }
}

void VerbsEndpoint::recv() {
  const size_t n = cfg_.size;
  switch (cfg_.path) {
    case VerbsPath::Host:
    case VerbsPath::Gdr:
      expect_data();
      return;
    case VerbsPath::Staged:
    case VerbsPath::Shared: {
      expect_data();
      const CudaApi& api = cuda();
      cuda_use(user_->device());
      void* host = wire_->host_ptr();
      if (cfg_.path == VerbsPath::Staged) {
        std::memcpy(bounce_->host_ptr(), wire_->host_ptr(), n);
        host = bounce_->host_ptr();
      }
      GDRLAB_CU(api.cuMemcpyHtoDAsync(user_->device_ptr() + offset_, host, n, stream_));
      GDRLAB_CU(api.cuStreamSynchronize(stream_));
      return;
    }
    case VerbsPath::Pipelined:
      recv_pipelined();
      return;
  }
}

// Sender: up to `depth` device-to-host chunk copies in flight; each chunk is written to the peer
// as soon as its copy ends, and its slot is refilled once that write has completed.
void VerbsEndpoint::send_pipelined() {
  const CudaApi& api = cuda();
  cuda_use(user_->device());
  const size_t n = cfg_.size, chunk = cfg_.chunk;
  const size_t nchunks = (n + chunk - 1) / chunk;
  const size_t depth = slot_seq_.size();
  char* slots = static_cast<char*>(slots_->host_ptr());
  auto issue = [&](size_t i) {
    size_t off = i * chunk, len = std::min(chunk, n - off), s = i % depth;
    if (slot_seq_[s]) link_.wait_sent(slot_seq_[s]);
    GDRLAB_CU(api.cuMemcpyDtoHAsync(slots + s * chunk, user_->device_ptr() + offset_ + off, len, stream_));
    GDRLAB_CU(api.cuEventRecord(events_[s], stream_));
  };
  for (size_t i = 0; i < std::min(depth, nchunks); ++i) issue(i);
  for (size_t i = 0; i < nchunks; ++i) {
    size_t off = i * chunk, len = std::min(chunk, n - off), s = i % depth;
    GDRLAB_CU(api.cuEventSynchronize(events_[s]));
    slot_seq_[s] = link_.write_imm(send_mr_->addr() + s * chunk, send_mr_->lkey(), static_cast<uint32_t>(len),
                                   remote_addr_ + off, remote_rkey_, kImmData | static_cast<uint32_t>(i), true);
    if (i + depth < nchunks) issue(i + depth);
  }
}

// Receiver: chunk i has landed when its immediate arrives (RC delivers in order); its
// host-to-device copy starts at once, overlapping the chunks still on the wire.
void VerbsEndpoint::recv_pipelined() {
  const CudaApi& api = cuda();
  cuda_use(user_->device());
  const size_t n = cfg_.size, chunk = cfg_.chunk;
  const size_t nchunks = (n + chunk - 1) / chunk;
  const char* land = static_cast<const char*>(wire_->host_ptr());
  for (size_t i = 0; i < nchunks; ++i) {
    uint32_t idx = expect_data();
    if (idx != (i & kImmIndexMask))
      throw_protocol("pipelined chunk " + std::to_string(idx) + " arrived where chunk " + std::to_string(i) + " was due");
    size_t off = i * chunk, len = std::min(chunk, n - off);
    GDRLAB_CU(api.cuMemcpyHtoDAsync(user_->device_ptr() + offset_ + off, land + off, len, stream_));
  }
  GDRLAB_CU(api.cuStreamSynchronize(stream_));
}

}  // namespace gdrlab
