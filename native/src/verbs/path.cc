#include "verbs/path.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "core/error.h"
#include "core/knobs.h"
#include "wire/frame.h"

namespace gdrlab {

MemoryNeed VerbsEndpoint::serving_memory(const PathConfig& cfg) {
  const uint64_t n = cfg.size;
  const uint64_t landing = n * kLandingSlots;  // every landing slot the peer may write into
  constexpr uint64_t kGpuPage = 2u << 20;
  switch (cfg.path) {
    case Path::Host: return {n, 0};                                         // the registered message buffer
    case Path::Gdr: return {0, (n + kGpuPage - 1) / kGpuPage * kGpuPage};   // whole 2 MiB GPU pages
    case Path::Staged: return {2 * landing, n};                             // pinned bounce + pageable landing
    case Path::Shared: return {landing, n};                                 // pinned landing slots
    case Path::Pipelined:                                                   // pinned landing + depth send slots
      return {landing + static_cast<uint64_t>(cfg.depth) * std::min<uint64_t>(cfg.chunk, n), n};
    default: return {};
  }
}

VerbsEndpoint::VerbsEndpoint(const VerbsPathConfig& cfg, std::unique_ptr<RcLink> link, Buffer* user, size_t offset)
    : cfg_(cfg), pd_(link->pd()), offset_(offset), link_(std::move(link)) {
  // Should anything below throw, the members made so far go in reverse order of declaration:
  // the link (QP, CQ), events and stream, memory regions, then buffers.
  check_endpoint(Wire::Verbs, &cfg_, user, offset);
  const bool pipelined = cfg_.path == Path::Pipelined;
  if (pipelined && (cfg_.size + cfg_.chunk - 1) / cfg_.chunk > kImmIndexMask)
    throw_invalid("too many chunks per message");
  // The gdr path exports its buffer as a dma-buf: a whole number of 2 MiB GPU pages keeps the
  // page-rounded export range inside this allocation even for tiny messages.
  size_t alloc = cfg_.size + offset;
  if (cfg_.path == Path::Gdr) alloc = (alloc + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  user_ = message_buffer(user, cfg_, alloc, &own_user_);
  const int dev = user_->device();
  if (cfg_.path == Path::Host) {
    land_mr_ = MemoryRegion::register_host(pd_, static_cast<char*>(user_->host_ptr()) + offset_, cfg_.size);
    return;
  }
  if (cfg_.path == Path::Gdr) {
    flush_ = gpu_flush_for_device(dev);
    // The flush READ needs the region readable; only the loopback flush QP grants REMOTE_READ.
    const int access = kDefaultAccess | (flush_ == GpuFlush::Read ? ibv::IBV_ACCESS_REMOTE_READ : 0);
    land_mr_ = MemoryRegion::register_device(pd_, user_->device_ptr() + offset_, cfg_.size, dev, access,
                                             cfg_.gpu_registration);
    if (flush_ == GpuFlush::Read) flusher_ = std::make_unique<FlushReader>(pd_, *link_);
    return;
  }
  // Pipelined chunks land in one pinned region, as shared messages do; they leave from slots.
  make_staging(pipelined ? Path::Shared : cfg_.path, cfg_.size * kLandingSlots, dev, &bounce_, &host_);
  if (pipelined) {
    slots_ = std::make_unique<Buffer>(MemKind::Pinned, cfg_.chunk * cfg_.depth, dev);
    send_mr_ = MemoryRegion::register_host(pd_, slots_->host_ptr(), slots_->size());
    slot_seq_.assign(cfg_.depth, 0);
  }
  land_mr_ = MemoryRegion::register_host(pd_, host_->host_ptr(), host_->size());
  api_ = &cuda();
  ctx_ = user_->context();
  stream_ = CudaStream(ctx_);
  if (pipelined) events_ = make_events(ctx_, cfg_.depth);
}

VerbsEndpoint::~VerbsEndpoint() {
  // On the normal path the test already waited; after a failure, waiting again for a peer that
  // is gone would only add a timeout. Destroying the QP first stops the HCA's access either way.
  if (std::uncaught_exceptions() == 0) {
    try {
      finish();
    } catch (...) {
    }
  }
}

std::string VerbsEndpoint::describe() const { return std::string("path '") + path_name(cfg_.path) + "' (verbs wire)"; }

void VerbsEndpoint::describe_region(ConnInfo* c) const {
  c->rkey = land_mr_->rkey();
  c->addr = land_mr_->addr();
  c->length = land_mr_->length();
}

void VerbsEndpoint::set_remote(const ConnInfo& c) {
  const uint64_t need = cfg_.size * (slotted() ? kLandingSlots : 1);
  if (c.length < need)
    throw_protocol("the peer's memory region (" + std::to_string(c.length) + " bytes) is smaller than " +
                   std::to_string(need) + " bytes (" + (slotted() ? "two landing slots of " : "one ") +
                   std::to_string(cfg_.size) + "-byte message" + (slotted() ? "s)" : ")"));
  remote_addr_ = c.addr;
  remote_rkey_ = c.rkey;
  link_->set_drain_target(c.addr, c.rkey);
}

std::string VerbsEndpoint::mechanism() const {
  return cfg_.path == Path::Gdr ? mr_mechanism_name(land_mr_->mechanism()) : "host";
}

void VerbsEndpoint::finish() { link_->wait_signaled(); }

const char* gpu_flush_name(GpuFlush f) {
  static constexpr const char* kNames[] = {"none", "cuFlushGPUDirectRDMAWrites", "rdma-read"};
  return enum_name(kNames, f);
}

GpuFlush choose_gpu_flush(bool have_host_api, int options, int ordering) {
  // OWNER (100): writes are consumed consistently by the owning GPU, which is the only one that
  // reads these buffers; ALL_DEVICES (200) includes it.
  if (ordering >= CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER) return GpuFlush::None;
  if (have_host_api && (options & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST)) return GpuFlush::Host;
  return GpuFlush::Read;
}

bool gpu_flush_disabled() {
  const EnvSetting s = knob_env(Knob::GdrFlushDisable);
  if (!s.value) return false;
  char* end = nullptr;
  const long x = std::strtol(s.value, &end, 10);
  if (*end) throw_invalid(std::string(s.name) + "='" + s.value + "' is not an integer (0 flushes, 1 does not)");
  return x != 0;
}

bool gpu_flush_forced() {
  const char* v = knob_env(Knob::GdrForceFlush).value;
  if (!v) return false;
  if (std::string(v) != "0" && std::string(v) != "1")
    throw_invalid(std::string("GDRLAB_GDR_FORCE_FLUSH='") + v + "' is not 0 or 1");
  return std::string(v) == "1";
}

GpuFlush gpu_flush_for_device(int ordinal) {
  if (gpu_flush_disabled()) return GpuFlush::None;
  if (gpu_flush_forced()) return GpuFlush::Read;
  const CudaApi& api = cuda();
  CUdevice dev = 0;
  GDRLAB_CU(api, cuDeviceGet, &dev, ordinal);
  // C2C (GH200, GB200): NCCL forces its flush there whatever the ordering attribute says
  // (graph/paths.cc, ncclTopoNeedFlush / ncclTopoFlushC2c): the READ, as NCCL's flush.
  int c2c = 0;
  if (api.cuDeviceGetAttribute(&c2c, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, dev) ==
          CUDA_SUCCESS &&
      c2c == 1)
    return GpuFlush::Read;
  // Drivers before CUDA 11.3 do not know attributes 117 and 118 (CUDA_ERROR_INVALID_VALUE): then
  // neither the host flush nor any ordering guarantee exists, and 0 says exactly that.
  int options = 0, ordering = 0;
  if (api.cuDeviceGetAttribute(&options, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, dev) != CUDA_SUCCESS)
    options = 0;
  if (api.cuDeviceGetAttribute(&ordering, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING, dev) != CUDA_SUCCESS)
    ordering = 0;
  return choose_gpu_flush(api.cuFlushGPUDirectRDMAWrites != nullptr, options, ordering);
}

void VerbsEndpoint::settle() {
  if (cfg_.path != Path::Gdr) return;
  switch (flush_) {
    case GpuFlush::None:
      return;
    case GpuFlush::Host: {
      const CudaApi& api = cuda();
      cuda_set(user_->context());
      GDRLAB_CU(api, cuFlushGPUDirectRDMAWrites, CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
      return;
    }
    case GpuFlush::Read:
      // One byte at the start of the buffer the peer wrote, as NCCL reads data[last].
      flusher_->flush(land_mr_->addr(), land_mr_->rkey());
      return;
    case GpuFlush::Max: break;
  }
}

uint32_t VerbsEndpoint::next_imm() {
  if (!held_imms_.empty()) {
    uint32_t v = held_imms_.front();
    held_imms_.pop_front();
    return v;
  }
  for (;;) {
    uint32_t v = link_->wait_imm();
    if (v != kImmCredit) return v;
    ++credits_;
  }
}

uint64_t VerbsEndpoint::remote_slot_addr() {
  const uint64_t j = sent_msgs_++;
  // Message j reuses the slot of message j - kLandingSlots: wait until the peer has taken that one.
  while (j >= kLandingSlots && credits_ < j - kLandingSlots + 1) {
    uint32_t v = link_->wait_imm();
    if (v == kImmCredit) ++credits_;
    else held_imms_.push_back(v);
  }
  return remote_addr_ + (j % kLandingSlots) * cfg_.size;
}

void VerbsEndpoint::message_taken() {
  const uint64_t k = recv_msgs_++;
  if (k + kLandingSlots <= cfg_.peer_loop_messages)
    link_->write_imm(0, 0, 0, remote_addr_, remote_rkey_, kImmCredit, false);
}

uint32_t VerbsEndpoint::expect_data() {
  uint32_t imm = next_imm();
  if ((imm & ~kImmIndexMask) != kImmData)
  {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", imm);
    throw_protocol(std::string("expected a data message on the verbs wire, got immediate ") + hex);
  }
  return imm & kImmIndexMask;
}

void VerbsEndpoint::send_ack() {
  link_->write_imm(0, 0, 0, remote_addr_, remote_rkey_, kImmAck, false);
}

void VerbsEndpoint::expect_ack() {
  uint32_t imm = next_imm();
  if (imm != kImmAck) throw_protocol("expected an ACK on the verbs wire, got immediate " + std::to_string(imm));
}

void VerbsEndpoint::send(bool signal) {
  const uint32_t n = static_cast<uint32_t>(cfg_.size);
  switch (cfg_.path) {
    case Path::Host:
    case Path::Gdr:
      // Zero copy: the HCA reads the application's buffer, which the loop never rewrites.
      last_send_seq_ = link_->write_imm(land_mr_->addr(), land_mr_->lkey(), n, remote_addr_, remote_rkey_, kImmData,
                                       signal);
      return;
    case Path::Staged:
    case Path::Shared: {
      // The previous write must have left the host buffer before the next copy overwrites it.
      if (last_send_seq_) link_->wait_sent(last_send_seq_);
      const CudaApi& api = *api_;
      GDRLAB_CU(api, cuCtxSetCurrent, ctx_);
      void* host = cfg_.path == Path::Staged ? bounce_->host_ptr() : host_->host_ptr();
      GDRLAB_CU(api, cuMemcpyDtoHAsync, host, user_->device_ptr() + offset_, n, stream_.get());
      GDRLAB_CU(api, cuStreamSynchronize, stream_.get());
      if (cfg_.path == Path::Staged) std::memcpy(host_->host_ptr(), bounce_->host_ptr(), n);
      const uint64_t raddr = remote_slot_addr();
      last_send_seq_ = link_->write_imm(land_mr_->addr(), land_mr_->lkey(), n, raddr, remote_rkey_, kImmData, true);
      return;
    }
    case Path::Pipelined:
      send_pipelined();
      return;
    case Path::Max: break;
  }
}

void VerbsEndpoint::recv() {
  const size_t n = cfg_.size;
  switch (cfg_.path) {
    case Path::Host:
    case Path::Gdr:
      expect_data();
      return;
    case Path::Staged:
    case Path::Shared: {
      expect_data();
      const CudaApi& api = *api_;
      GDRLAB_CU(api, cuCtxSetCurrent, ctx_);
      void* host = static_cast<char*>(host_->host_ptr()) + local_slot_offset();
      if (cfg_.path == Path::Staged) {
        std::memcpy(bounce_->host_ptr(), host, n);
        host = bounce_->host_ptr();
      }
      GDRLAB_CU(api, cuMemcpyHtoDAsync, user_->device_ptr() + offset_, host, n, stream_.get());
      GDRLAB_CU(api, cuStreamSynchronize, stream_.get());
      message_taken();
      return;
    }
    case Path::Pipelined:
      recv_pipelined();
      return;
    case Path::Max: break;
  }
}

// Sender: each chunk is written to the peer as soon as its copy ends; a slot is refilled once its
// write has completed.
void VerbsEndpoint::send_pipelined() {
  GDRLAB_CU(*api_, cuCtxSetCurrent, ctx_);
  const size_t chunk = cfg_.chunk;
  char* slots = static_cast<char*>(slots_->host_ptr());
  const uint64_t base = remote_slot_addr();
  pipeline_send(
      *api_, stream_.get(), events_, user_->device_ptr() + offset_, cfg_.size, chunk,
      [&](size_t s) { return slots + s * chunk; },
      [&](size_t s) {
        if (slot_seq_[s]) link_->wait_sent(slot_seq_[s]);
      },
      [] {},
      [&](size_t i, size_t s, size_t off, size_t len) {
        slot_seq_[s] = link_->write_imm(send_mr_->addr() + s * chunk, send_mr_->lkey(), static_cast<uint32_t>(len),
                                        base + off, remote_rkey_, kImmData | static_cast<uint32_t>(i), true);
      });
}

// Receiver: chunk i has landed when its immediate arrives (RC delivers in order); its
// host-to-device copy starts at once, overlapping the chunks still on the wire.
void VerbsEndpoint::recv_pipelined() {
  const CudaApi& api = *api_;
  GDRLAB_CU(api, cuCtxSetCurrent, ctx_);
  const size_t n = cfg_.size, chunk = cfg_.chunk;
  const size_t nchunks = (n + chunk - 1) / chunk;
  const char* land = static_cast<const char*>(host_->host_ptr()) + local_slot_offset();
  for (size_t i = 0; i < nchunks; ++i) {
    uint32_t idx = expect_data();
    if (idx != (i & kImmIndexMask))
      throw_protocol("pipelined chunk " + std::to_string(idx) + " arrived where chunk " + std::to_string(i) + " was due");
    size_t off = i * chunk, len = std::min(chunk, n - off);
    GDRLAB_CU(api, cuMemcpyHtoDAsync, user_->device_ptr() + offset_ + off, land + off, len, stream_.get());
  }
  GDRLAB_CU(api, cuStreamSynchronize, stream_.get());
  message_taken();
}

}  // namespace gdrlab
