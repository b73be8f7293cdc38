#include "paths/copyrun.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "core/cuda_raii.h"
#include "core/error.h"
#include "paths/copybench.h"
#include "paths/sm_copy.h"

namespace gdrlab {
namespace {
using Clock = std::chrono::steady_clock;

// Events that record time (cuda_raii's EventKind makes them without, for ordering only).
struct TimingEventKind {
  using Handle = CUevent;
  static void create(CUcontext ctx, CUevent* e) {
    cuda_set(ctx);
    GDRLAB_CU(cuda(), cuEventCreate, e, CU_EVENT_DEFAULT);
  }
  static void destroy(CUcontext ctx, CUevent e) noexcept {
    if (const CudaApi* api = cuda_if_loaded()) {
      api->cuCtxSetCurrent(ctx);
      api->cuEventDestroy(e);
    }
  }
};
using TimingEvent = CudaOwned<TimingEventKind>;

bool is_host(MemKind k) { return k != MemKind::Device; }

// One copy of a sample. Members are released in reverse order: events, stream, then memory.
struct Leg {
  CopyLeg spec;
  std::unique_ptr<Buffer> src, dst;
  CudaStream stream;
  TimingEvent start, end;
  CUdeviceptr src_addr = 0, dst_addr = 0;  // as the executing GPU sees them (SM kernel)
  uint64_t seed = 0;
  uint8_t dirty = 0;
};

CUdeviceptr visible_address(const Buffer& b, int exec) {
  if (b.kind() == MemKind::Device) return b.device_ptr();
  CUdeviceptr p = 0;
  cuda_use(exec);
  GDRLAB_CU(cuda(), cuMemHostGetDevicePointer, &p, b.host_ptr(), 0);
  return p;
}

void check_leg(const CopyLeg& leg, int n_gpus, CopyEngine engine, PeerMode peer) {
  const std::string name = leg_name(leg);
  if (is_host(leg.src_kind) && is_host(leg.dst_kind))
    throw_invalid("a copy needs GPU memory at one end at least (source and destination are both host memory)");
  for (int d : {leg.src_device, leg.dst_device, leg.exec_device})
    if (d < 0 || d >= n_gpus)
      throw_invalid("GPU " + std::to_string(d) + " does not exist: this machine has " + std::to_string(n_gpus) +
                    " GPU(s)");
  if (engine == CopyEngine::SM && (leg.src_kind == MemKind::Pageable || leg.dst_kind == MemKind::Pageable))
    throw_invalid("the SM copy kernel cannot reach pageable host memory (the GPU has no mapping of it); "
                  "use pinned host memory with --engine sm");
  const bool two_gpus = !is_host(leg.src_kind) && !is_host(leg.dst_kind) && leg.src_device != leg.dst_device;
  if (!two_gpus) return;
  if (engine == CopyEngine::SM && peer == PeerMode::Off)
    throw_invalid("the SM copy kernel reads or writes the other GPU's memory directly: it needs peer access on");
  const int other = leg.exec_device == leg.src_device ? leg.dst_device : leg.src_device;
  if ((engine == CopyEngine::SM || peer == PeerMode::On) && !can_access_peer(leg.exec_device, other))
    throw_unavailable("GPU " + std::to_string(leg.exec_device) + " cannot access GPU " + std::to_string(other) +
                      " as a peer (cuDeviceCanAccessPeer = 0), which the " + name + " copy needs");
}

// Peer access between the leg's two GPUs: on where the hardware allows it (On, Auto) or off (Off:
// the copy engines then stage through host memory). SM legs were checked to have it.
void set_peer(const CopyLeg& leg, PeerMode peer) {
  if (is_host(leg.src_kind) || is_host(leg.dst_kind) || leg.src_device == leg.dst_device) return;
  const int a = leg.src_device, b = leg.dst_device;
  set_peer_access(a, b, peer != PeerMode::Off && can_access_peer(a, b));
  set_peer_access(b, a, peer != PeerMode::Off && can_access_peer(b, a));
}

void issue(Leg& L, size_t size, CopyEngine engine, unsigned share) {
  const CudaApi& api = cuda();
  const CopyLeg& s = L.spec;
  cuda_use(s.exec_device);
  CUstream st = L.stream.get();
  GDRLAB_CU(api, cuEventRecord, L.start.get(), st);
  if (engine == CopyEngine::SM) {
    sm_copy_launch(s.exec_device, L.dst_addr, L.src_addr, size, st, share);
  } else if (is_host(s.src_kind)) {
    GDRLAB_CU(api, cuMemcpyHtoDAsync, L.dst->device_ptr(), L.src->host_ptr(), size, st);
  } else if (is_host(s.dst_kind)) {
    GDRLAB_CU(api, cuMemcpyDtoHAsync, L.dst->host_ptr(), L.src->device_ptr(), size, st);
  } else if (s.src_device == s.dst_device) {
    GDRLAB_CU(api, cuMemcpyDtoDAsync, L.dst->device_ptr(), L.src->device_ptr(), size, st);
  } else {
    GDRLAB_CU(api, cuMemcpyPeerAsync, L.dst->device_ptr(), L.dst->context(), L.src->device_ptr(), L.src->context(),
              size, st);
  }
  cuda_use(s.exec_device);
  GDRLAB_CU(api, cuEventRecord, L.end.get(), st);
}

// Overwrites the destination with a byte the expected pattern does not start with, so a copy
// that did not happen (or stopped short) cannot pass the check that follows it.
void dirty(Leg& L, size_t size) {
  if (is_host(L.spec.dst_kind)) {
    std::memset(L.dst->host_ptr(), L.dirty, size);
    return;
  }
  const CudaApi& api = cuda();
  cuda_set(L.dst->context());
  GDRLAB_CU(api, cuMemsetD8, L.dst->device_ptr(), L.dirty, size);
  GDRLAB_CU(api, cuCtxSynchronize);
}

void verify(const Leg& L, size_t size, int leg_index, int sample) {
  int64_t bad = L.dst->check_pattern(L.seed, 0, size);
  if (bad < 0) return;
  throw Error(ErrorKind::Verify, "gdrlab", "copy", bad,
              "copy verification failed: byte " + std::to_string(bad) + " of " + std::to_string(size) +
                  " differs after the " + leg_name(L.spec) + " copy (leg " + std::to_string(leg_index) +
                  ", GPU " + std::to_string(L.spec.src_device) + " -> GPU " + std::to_string(L.spec.dst_device) +
                  ", sample " + std::to_string(sample) + ")");
}

// The sample's GPU time: from the earliest start to the latest end among the legs run by the first
// leg's GPU (events of one context compare across its streams), and each other leg's own time
// (events of different GPUs do not compare); the longest of these.
double event_span(const std::vector<std::unique_ptr<Leg>>& legs) {
  const CudaApi& api = cuda();
  const Leg& first = *legs[0];
  cuda_use(first.spec.exec_device);
  float earliest = 0, latest = 0, ms = 0;
  double other = 0;
  for (const auto& L : legs) {
    if (L->spec.exec_device == first.spec.exec_device) {
      GDRLAB_CU(api, cuEventElapsedTime, &ms, first.start.get(), L->start.get());
      earliest = std::min(earliest, ms);
      GDRLAB_CU(api, cuEventElapsedTime, &ms, first.start.get(), L->end.get());
      latest = std::max(latest, ms);
    } else {
      cuda_use(L->spec.exec_device);
      GDRLAB_CU(api, cuEventElapsedTime, &ms, L->start.get(), L->end.get());
      other = std::max(other, static_cast<double>(ms));
      cuda_use(first.spec.exec_device);
    }
  }
  return std::max(static_cast<double>(latest - earliest), other) * 1e-3;
}

}  // namespace

std::string leg_name(const CopyLeg& leg) {
  if (is_host(leg.src_kind)) return "h2d";
  if (is_host(leg.dst_kind)) return "d2h";
  return leg.src_device == leg.dst_device ? "d2d" : "p2p";
}

CopyRunResult copy_run(const std::vector<CopyLeg>& specs, size_t size, int iters, int warmup, CopyEngine engine,
                       PeerMode peer, int check_every) {
  if (specs.empty()) throw_invalid("a copy run needs at least one copy");
  if (size == 0) throw_invalid("copy size must be at least 1 byte");
  if (iters < 1) throw_invalid("iters must be at least 1");
  if (warmup < 0) throw_invalid("warmup must not be negative");
  if (check_every < 1) throw_invalid("check_every must be at least 1");
  const int n_gpus = cuda_device_count();
  for (const CopyLeg& s : specs) check_leg(s, n_gpus, engine, peer);
  for (const CopyLeg& s : specs) set_peer(s, peer);
  const CudaApi& api = cuda();
  std::vector<std::unique_ptr<Leg>> legs;
  for (size_t k = 0; k < specs.size(); ++k) {
    auto L = std::make_unique<Leg>();
    L->spec = specs[k];
    L->src = std::make_unique<Buffer>(L->spec.src_kind, size, L->spec.src_device);
    L->dst = std::make_unique<Buffer>(L->spec.dst_kind, size, L->spec.dst_device);
    CUcontext ctx = cuda_context(L->spec.exec_device);
    L->stream = CudaStream(ctx);
    L->start = TimingEvent(ctx);
    L->end = TimingEvent(ctx);
    L->seed = 0xC0B1ull * (k + 1) + size;
    L->src->fill_pattern(L->seed, 0, size);
    uint8_t first = 0;
    pattern_fill_host(&first, 1, L->seed);
    L->dirty = static_cast<uint8_t>(~first);
    if (engine == CopyEngine::SM) {
      L->src_addr = visible_address(*L->src, L->spec.exec_device);
      L->dst_addr = visible_address(*L->dst, L->spec.exec_device);
    }
    legs.push_back(std::move(L));
  }
  CopyRunResult out;
  out.bytes_per_sample = static_cast<double>(size) * legs.size();
  // The SM kernels that run at once on one GPU share its resident threads (sm_copy_launch).
  std::vector<unsigned> share(legs.size(), 1);
  for (size_t k = 0; k < legs.size(); ++k) {
    unsigned same = 0;
    for (const auto& M : legs) same += M->spec.exec_device == legs[k]->spec.exec_device;
    share[k] = same;
  }
  if (engine == CopyEngine::SM) {
    SmLaunchShape shape = sm_copy_shape(legs[0]->spec.exec_device, size, share[0]);
    out.sm_blocks = shape.blocks;
    out.sm_threads = shape.threads;
  }
  out.host_s.reserve(iters);
  out.event_s.reserve(iters);
  const int total = warmup + iters;
  for (int i = 0; i < total; ++i) {
    const bool check = (i + 1) % check_every == 0 || i + 1 == total;
    if (check)
      for (auto& L : legs) dirty(*L, size);
    auto t0 = Clock::now();
    for (size_t k = 0; k < legs.size(); ++k) issue(*legs[k], size, engine, share[k]);
    for (auto& L : legs) {
      cuda_use(L->spec.exec_device);
      GDRLAB_CU(api, cuEventSynchronize, L->end.get());
    }
    const double host = std::chrono::duration<double>(Clock::now() - t0).count();
    const double event = event_span(legs);
    if (check) {
      for (size_t k = 0; k < legs.size(); ++k) verify(*legs[k], size, static_cast<int>(k), i);
      out.checks += static_cast<int64_t>(legs.size());
    }
    if (i >= warmup) {
      out.host_s.push_back(host);
      out.event_s.push_back(event);
    }
  }
  return out;
}

}  // namespace gdrlab
