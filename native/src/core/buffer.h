// Memory the engine moves: host pageable, host pinned (page-locked through CUDA) and device.
// A Buffer either owns its memory or wraps memory someone else owns (numpy, CuPy).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/cuda_api.h"

namespace gdrlab {

// The memory kinds of gdrlab.vocab.MEMORY_KINDS, in this order (exported as _native.MEMORY_KIND_NAMES).
enum class MemKind { Pageable = 0, Pinned = 1, Device = 2, Max };
const char* mem_kind_name(MemKind kind);

class Buffer {
 public:
  // Allocates size_bytes of the given kind (device: on GPU `device`). size_bytes must be > 0.
  Buffer(MemKind kind, size_t size_bytes, int device = 0);
  // Wraps memory owned elsewhere; the caller keeps it alive. For Pinned, register=true page-locks
  // the range with cuMemHostRegister (undone on destruction).
  static std::unique_ptr<Buffer> wrap(MemKind kind, uintptr_t address, size_t size_bytes, int device,
                                      bool register_host);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  MemKind kind() const { return kind_; }
  size_t size() const { return size_; }
  int device() const { return device_; }
  uintptr_t address() const { return addr_; }
  void* host_ptr() const { return reinterpret_cast<void*>(addr_); }
  CUdeviceptr device_ptr() const { return static_cast<CUdeviceptr>(addr_); }
  bool owns() const { return owns_; }
  // The device's primary context, kept from construction (nullptr for pageable memory that
  // CUDA never saw): endpoints make it current per message without a lookup.
  CUcontext context() const { return ctx_; }

  // Writes the verification pattern for `seed` over [offset, offset+len).
  void fill_pattern(uint64_t seed, size_t offset, size_t len);
  // Returns -1 if [offset, offset+len) holds the pattern for `seed`, else the first differing
  // offset relative to `offset`.
  int64_t check_pattern(uint64_t seed, size_t offset, size_t len) const;

 private:
  Buffer() = default;
  MemKind kind_ = MemKind::Pageable;
  size_t size_ = 0;
  int device_ = 0;
  uintptr_t addr_ = 0;
  bool owns_ = false;
  bool registered_ = false;
  CUcontext ctx_ = nullptr;
};

// The byte at position i of a message sent with `seed`. Also used on host scratch memory.
void pattern_fill_host(uint8_t* dst, size_t len, uint64_t seed);
int64_t pattern_check_host(const uint8_t* src, size_t len, uint64_t seed);

// The GPU ordinal of device memory at `address` (cuPointerGetAttribute), or -1 when CUDA does
// not know the address as device memory. Throws Unavailable without a usable CUDA driver.
int pointer_device(uintptr_t address);

// Bytes currently held in pinned / device allocations made by Buffer (leak checks).
size_t live_pinned_bytes();
size_t live_device_bytes();
// Bytes of freed pinned blocks kept page-locked for the next buffer of their size (not counted in
// live_pinned_bytes), and the call that gives every kept block, pageable and pinned, back now.
size_t kept_pinned_bytes();
void release_kept_buffers();

}  // namespace gdrlab
