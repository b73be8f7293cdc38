#include "core/buffer.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/knobs.h"
#include "core/pattern_gpu.h"
#include "core/vocab.h"

// Freed pageable and pinned blocks are kept for reuse, except under AddressSanitizer.
#if defined(__SANITIZE_ADDRESS__)
#define GDRLAB_KEEP_FREED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GDRLAB_KEEP_FREED 0
#endif
#endif
#ifndef GDRLAB_KEEP_FREED
#define GDRLAB_KEEP_FREED 1
#endif

namespace gdrlab {
namespace {
std::atomic<size_t> g_pinned{0};
std::atomic<size_t> g_device{0};

// Freed pageable blocks of 1 MiB and more are kept and handed to the next buffer of the same
// rounded size: a sweep allocates the same sizes test after test, and a fresh block (glibc maps
// every block over 32 MiB anew) costs a page fault per 4 KiB page when first touched, which for
// a 64 MiB host-path test was more time than its pattern fills and checks together. At most
// kKeepBlocks blocks and kKeepBytes in all are kept, the oldest given back first. A reused block
// is zeroed, as a fresh one reads, so a message that never arrived cannot find the last test's
// pattern waiting. Under AddressSanitizer nothing is kept, so a use after free stays visible.
constexpr size_t kKeepMinBytes = size_t(1) << 20;
constexpr size_t kKeepBlocks = 4;
constexpr size_t kKeepBytes = size_t(256) << 20;
struct KeptBlock {
  void* p;
  size_t bytes;
};
// Neither is ever destroyed: buffers may die during the process's exit, after static destructors.
std::mutex& keep_mutex() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::deque<KeptBlock>& kept_blocks() {
  static auto* kept = new std::deque<KeptBlock>();
  return *kept;
}

// GDRLAB_KEEP_PAGEABLE=0 keeps nothing (every block goes back to the C library at once).
bool keeping() {
  static const bool on = [] {
    const EnvSetting e = knob_env(Knob::KeepPageable);
    return GDRLAB_KEEP_FREED && !(e.value && std::strcmp(e.value, "0") == 0);
  }();
  return on;
}

void* take_kept(size_t bytes) {
  if (!keeping() || bytes < kKeepMinBytes) return nullptr;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(keep_mutex());
    auto& kept = kept_blocks();
    for (auto it = kept.begin(); it != kept.end(); ++it) {
      if (it->bytes == bytes) {
        p = it->p;
        kept.erase(it);
        break;
      }
    }
  }
  if (p) std::memset(p, 0, bytes);
  return p;
}

void give_back(void* p, size_t bytes) {
  if (!keeping() || bytes < kKeepMinBytes || bytes > kKeepBytes) {
    std::free(p);
    return;
  }
  std::vector<void*> out;
  {
    std::lock_guard<std::mutex> lock(keep_mutex());
    auto& kept = kept_blocks();
    kept.push_back({p, bytes});
    size_t total = 0;
    for (const KeptBlock& k : kept) total += k.bytes;
    while (kept.size() > kKeepBlocks || total > kKeepBytes) {
      out.push_back(kept.front().p);
      total -= kept.front().bytes;
      kept.pop_front();
    }
  }
  for (void* q : out) std::free(q);
}

// Freed pinned blocks of 1 MiB and more are kept the same way, by GPU and exact size: a GPU
// path's staging buffers (staged: a pinned bounce per side, shared: a pinned buffer per side) are
// allocated afresh by every test, and page-locking 64 MiB (cuMemHostAlloc and cuMemFreeHost) cost
// 31-48 ms on an H200 host, about a third of what a 64 MiB staged test cost besides its
// messages. Zeroed on reuse, as pageable ones; at most kKeepPinnedBlocks blocks and kKeepBytes in
// all stay page-locked, the oldest unlocked first. GDRLAB_KEEP_PINNED=0 keeps none.
constexpr size_t kKeepPinnedBlocks = 8;
struct KeptPinned {
  void* p;
  size_t bytes;
  int device;
};
std::deque<KeptPinned>& kept_pinned() {
  static auto* kept = new std::deque<KeptPinned>();
  return *kept;
}
std::atomic<size_t> g_kept_pinned{0};

bool keeping_pinned() {
  static const bool on = [] {
    const EnvSetting e = knob_env(Knob::KeepPinned);
    return GDRLAB_KEEP_FREED && !(e.value && std::strcmp(e.value, "0") == 0);
  }();
  return on;
}

void* take_kept_pinned(size_t bytes, int device) {
  if (!keeping_pinned() || bytes < kKeepMinBytes) return nullptr;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(keep_mutex());
    auto& kept = kept_pinned();
    for (auto it = kept.begin(); it != kept.end(); ++it) {
      if (it->bytes == bytes && it->device == device) {
        p = it->p;
        kept.erase(it);
        g_kept_pinned -= bytes;
        break;
      }
    }
  }
  if (p) std::memset(p, 0, bytes);
  return p;
}

// True when the block was kept; false: the caller frees it.
bool keep_pinned(void* p, size_t bytes, int device) {
  if (!keeping_pinned() || bytes < kKeepMinBytes || bytes > kKeepBytes) return false;
  std::vector<void*> out;
  {
    std::lock_guard<std::mutex> lock(keep_mutex());
    auto& kept = kept_pinned();
    kept.push_back({p, bytes, device});
    g_kept_pinned += bytes;
    while (kept.size() > kKeepPinnedBlocks || g_kept_pinned.load() > kKeepBytes) {
      out.push_back(kept.front().p);
      g_kept_pinned -= kept.front().bytes;
      kept.pop_front();
    }
  }
  if (const CudaApi* api = cuda_if_loaded())
    for (void* q : out) api->cuMemFreeHost(q);
  return true;
}

size_t pageable_rounded(size_t size_bytes) { return (size_bytes + 4095) & ~size_t(4095); }

inline uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Device memory is filled and checked by the GPU's own kernels (core/pattern_gpu.h) from this
// many bytes on, where the message starts 8-byte aligned; below it, or where the kernels cannot
// load, through a host scratch buffer, one slice at a time. Below 64 KiB a kernel's launch and
// wait cost about what the host copy does.
constexpr size_t kSlice = 8u << 20;
constexpr size_t kKernelMinBytes = 64u << 10;
}  // namespace

int pointer_device(uintptr_t address) {
  const CudaApi& api = cuda();
  int ordinal = -1;
  CUresult r = api.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address);
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    // The thread has no current context yet: any primary context answers for every GPU's
    // memory (unified addressing). Only then is one made current, so a caller's own is kept.
    cuda_use(0);
    r = api.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address);
  }
  if (r != CUDA_SUCCESS) return -1;
  unsigned int mtype = 0;
  r = api.cuPointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address);
  return r == CUDA_SUCCESS && mtype == CU_MEMORYTYPE_DEVICE ? ordinal : -1;
}

const char* mem_kind_name(MemKind kind) {
  static const char* const kNames[] = {"pageable", "pinned", "device"};
  static_assert(sizeof kNames / sizeof *kNames == static_cast<size_t>(MemKind::Max), "one name per memory kind");
  const auto k = static_cast<unsigned>(kind);
  return in_range<MemKind>(k) ? kNames[k] : "?";
}

size_t live_pinned_bytes() { return g_pinned.load(); }
size_t kept_pinned_bytes() { return g_kept_pinned.load(); }

void release_kept_buffers() {
  std::vector<void*> pageable, pinned;
  {
    std::lock_guard<std::mutex> lock(keep_mutex());
    for (const KeptBlock& k : kept_blocks()) pageable.push_back(k.p);
    kept_blocks().clear();
    for (const KeptPinned& k : kept_pinned()) pinned.push_back(k.p);
    kept_pinned().clear();
    g_kept_pinned = 0;
  }
  for (void* p : pageable) std::free(p);
  if (const CudaApi* api = cuda_if_loaded())
    for (void* p : pinned) api->cuMemFreeHost(p);
}
size_t live_device_bytes() { return g_device.load(); }

namespace {

// Word w of the stream is splitmix(seed ^ w); byte i is byte (i % 8) of word (i / 8). Any slice
// of a message can be produced or checked on its own, which the chunked paths rely on.
inline uint8_t pattern_byte(uint64_t seed, size_t pos) {
  return static_cast<uint8_t>(splitmix(seed ^ (pos / 8)) >> (8 * (pos % 8)));
}

}  // namespace

// The whole words of the stream run in a loop of their own (no per-word branch), the unaligned
// bytes at either end one at a time: the same bytes as byte-by-byte, about a quarter faster.
void pattern_fill_host(uint8_t* dst, size_t len, uint64_t seed, size_t start) {
  size_t i = 0;
  for (; i < len && (start + i) % 8 != 0; ++i) dst[i] = pattern_byte(seed, start + i);
  uint64_t w = (start + i) / 8;
  for (; len - i >= 8; i += 8, ++w) {
    const uint64_t v = splitmix(seed ^ w);
    std::memcpy(dst + i, &v, 8);
  }
  for (; i < len; ++i) dst[i] = pattern_byte(seed, start + i);
}

int64_t pattern_check_host(const uint8_t* src, size_t len, uint64_t seed, size_t start) {
  size_t i = 0;
  for (; i < len && (start + i) % 8 != 0; ++i)
    if (src[i] != pattern_byte(seed, start + i)) return static_cast<int64_t>(i);
  uint64_t w = (start + i) / 8;
  constexpr size_t kBlock = 64;  // words compared without an early exit, one test per block
  for (; len - i >= 8 * kBlock; i += 8 * kBlock, w += kBlock) {
    uint64_t diff = 0;
    for (size_t k = 0; k < kBlock; ++k) {
      uint64_t got;
      std::memcpy(&got, src + i + 8 * k, 8);
      diff |= got ^ splitmix(seed ^ (w + k));
    }
    if (diff != 0) break;  // the word-by-word loop below finds which
  }
  for (; len - i >= 8; i += 8, ++w) {
    uint64_t got;
    std::memcpy(&got, src + i, 8);
    if (got != splitmix(seed ^ w)) break;  // the byte loop below names its first differing byte
  }
  for (; i < len; ++i)
    if (src[i] != pattern_byte(seed, start + i)) return static_cast<int64_t>(i);
  return -1;
}

void pattern_fill_host(uint8_t* dst, size_t len, uint64_t seed) { pattern_fill_host(dst, len, seed, 0); }
int64_t pattern_check_host(const uint8_t* src, size_t len, uint64_t seed) {
  return pattern_check_host(src, len, seed, 0);
}

Buffer::Buffer(MemKind kind, size_t size_bytes, int device) {
  if (size_bytes == 0) throw_invalid("buffer size must be at least 1 byte");
  kind_ = kind;
  size_ = size_bytes;
  device_ = device;
  owns_ = true;
  switch (kind) {
    case MemKind::Pageable: {
      const size_t rounded = pageable_rounded(size_bytes);
      void* p = take_kept(rounded);
      if (!p) p = std::aligned_alloc(4096, rounded);
      if (!p) throw Error(ErrorKind::System, "libc", "aligned_alloc", ENOMEM, "out of host memory");
      addr_ = reinterpret_cast<uintptr_t>(p);
      break;
    }
    case MemKind::Pinned: {
      const CudaApi& api = cuda();
      ctx_ = cuda_context(device);
      cuda_set(ctx_);
      void* p = nullptr;
      p = take_kept_pinned(size_bytes, device);
      if (!p) GDRLAB_CU(api, cuMemHostAlloc, &p, size_bytes, CU_MEMHOSTALLOC_PORTABLE);
      addr_ = reinterpret_cast<uintptr_t>(p);
      g_pinned += size_bytes;
      break;
    }
    case MemKind::Device: {
      const CudaApi& api = cuda();
      ctx_ = cuda_context(device);
      cuda_set(ctx_);
      CUdeviceptr p = 0;
      GDRLAB_CU(api, cuMemAlloc, &p, size_bytes);
      addr_ = static_cast<uintptr_t>(p);
      g_device += size_bytes;
      break;
    }
    case MemKind::Max:
      throw_invalid("unknown memory kind");
  }
}

std::unique_ptr<Buffer> Buffer::wrap(MemKind kind, uintptr_t address, size_t size_bytes, int device,
                                     bool register_host) {
  if (size_bytes == 0) throw_invalid("buffer size must be at least 1 byte");
  if (address == 0) throw_invalid("buffer address is null");
  std::unique_ptr<Buffer> b(new Buffer());
  b->kind_ = kind;
  b->size_ = size_bytes;
  b->device_ = device;
  b->addr_ = address;
  b->owns_ = false;
  if (kind == MemKind::Device) {
    // The ordinal comes from the driver, never from the caller's say-so: memory on GPU 1
    // recorded as GPU 0 would be copied with the wrong context.
    const int actual = pointer_device(address);
    if (actual >= 0 && actual != device)
      throw_invalid("memory at this address is on GPU " + std::to_string(actual) +
                    " but the buffer was asked for GPU " + std::to_string(device));
  }
  if (kind == MemKind::Device || (kind == MemKind::Pinned && !register_host)) {
    // Ask the driver what the memory is, so a host array handed in as "device" is refused here
    // rather than faulting inside a copy.
    const CudaApi& api = cuda();
    b->ctx_ = cuda_context(device);
    cuda_set(b->ctx_);
    unsigned int mtype = 0;
    CUresult r = api.cuPointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address);
    unsigned want = kind == MemKind::Device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    if (r != CUDA_SUCCESS || mtype != want) {
      throw_invalid(std::string("memory at this address is not ") +
                    (kind == MemKind::Device ? "GPU memory" : "page-locked host memory") +
                    " known to CUDA");
    }
  }
  if (kind == MemKind::Pinned && register_host) {
    const CudaApi& api = cuda();
    b->ctx_ = cuda_context(device);
    cuda_set(b->ctx_);
    GDRLAB_CU(api, cuMemHostRegister, reinterpret_cast<void*>(address), size_bytes,
                                    CU_MEMHOSTREGISTER_PORTABLE);
    b->registered_ = true;
  }
  return b;
}

Buffer::~Buffer() {
  // Destructors never throw: a failed free is ignored (the process keeps running). CUDA was
  // loaded when this memory was allocated or registered, so cuda_if_loaded() finds it.
  const CudaApi* api = cuda_if_loaded();
  if (registered_ && api) api->cuMemHostUnregister(host_ptr());
  if (!owns_) return;
  switch (kind_) {
    case MemKind::Pageable: give_back(host_ptr(), pageable_rounded(size_)); break;
    case MemKind::Pinned:
      if (api && !keep_pinned(host_ptr(), size_, device_)) api->cuMemFreeHost(host_ptr());
      g_pinned -= size_;
      break;
    case MemKind::Device:
      if (api) {
        api->cuCtxSetCurrent(ctx_);
        api->cuMemFree(device_ptr());
      }
      g_device -= size_;
      break;
    case MemKind::Max:
      break;
  }
}

static void check_range(const Buffer& b, size_t offset, size_t len) {
  if (offset > b.size() || len > b.size() - offset)
    throw_invalid("range [" + std::to_string(offset) + ", " + std::to_string(offset + len) +
                  ") exceeds the buffer's " + std::to_string(b.size()) + " bytes");
}

void Buffer::fill_pattern(uint64_t seed, size_t offset, size_t len) {
  check_range(*this, offset, len);
  if (kind_ != MemKind::Device) {
    pattern_fill_host(static_cast<uint8_t*>(host_ptr()) + offset, len, seed, 0);
    return;
  }
  const CudaApi& api = cuda();
  cuda_set(ctx_);
  const CUdeviceptr at = device_ptr() + offset;
  if (len >= kKernelMinBytes && at % 8 == 0 && pattern_gpu_ready(device_)) {
    const size_t words = len / 8, tail = len % 8;
    pattern_gpu_fill(device_, at, words, seed);
    if (tail) {  // the last bytes, past the whole words, through the host
      uint8_t t[8];
      pattern_fill_host(t, tail, seed, words * 8);
      GDRLAB_CU(api, cuMemcpyHtoDAsync, at + words * 8, t, tail, nullptr);
      GDRLAB_CU(api, cuStreamSynchronize, nullptr);
    }
    return;
  }
  std::vector<uint8_t> scratch(std::min(len, kSlice));
  for (size_t done = 0; done < len;) {
    size_t n = std::min(kSlice, len - done);
    pattern_fill_host(scratch.data(), n, seed, done);
    GDRLAB_CU(api, cuMemcpyHtoDAsync, device_ptr() + offset + done, scratch.data(), n, nullptr);
    GDRLAB_CU(api, cuStreamSynchronize, nullptr);
    done += n;
  }
}

int64_t Buffer::check_pattern(uint64_t seed, size_t offset, size_t len) const {
  check_range(*this, offset, len);
  if (kind_ != MemKind::Device)
    return pattern_check_host(static_cast<const uint8_t*>(host_ptr()) + offset, len, seed, 0);
  const CudaApi& api = cuda();
  cuda_set(ctx_);
  const CUdeviceptr at = device_ptr() + offset;
  if (len >= kKernelMinBytes && at % 8 == 0 && pattern_gpu_ready(device_)) {
    const size_t words = len / 8;
    const int64_t w = pattern_gpu_first_bad_word(device_, at, words, seed);
    if (w != -2) {  // -2: every result slot busy; the host check below answers instead
      // The GPU names the first differing word; its bytes (or the tail past the last whole word
      // when every word matched) come back to name the first differing byte.
      const size_t from = w >= 0 ? static_cast<size_t>(w) * 8 : words * 8;
      const size_t n = w >= 0 ? 8 : len % 8;
      if (n == 0) return -1;
      uint8_t t[8];
      GDRLAB_CU(api, cuMemcpyDtoHAsync, t, at + from, n, nullptr);
      GDRLAB_CU(api, cuStreamSynchronize, nullptr);
      const int64_t bad = pattern_check_host(t, n, seed, from);
      if (bad >= 0) return static_cast<int64_t>(from) + bad;
      // A word the kernel saw differ reads right now: the memory changed under the check. The
      // message is not what was sent either way; its word is the answer.
      return w >= 0 ? static_cast<int64_t>(from) : -1;
    }
  }
  std::vector<uint8_t> scratch(std::min(len, kSlice));
  for (size_t done = 0; done < len;) {
    size_t n = std::min(kSlice, len - done);
    GDRLAB_CU(api, cuMemcpyDtoHAsync, scratch.data(), device_ptr() + offset + done, n, nullptr);
    GDRLAB_CU(api, cuStreamSynchronize, nullptr);
    int64_t bad = pattern_check_host(scratch.data(), n, seed, done);
    if (bad >= 0) return static_cast<int64_t>(done) + bad;
    done += n;
  }
  return -1;
}

}  // namespace gdrlab
