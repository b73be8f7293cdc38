// Helpers shared by the binding files (module.cc, verbs.cc).
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <vector>

#include "frame.h"

namespace gdrlab_bind {

namespace nb = nanobind;
using Samples = nb::ndarray<nb::numpy, double, nb::ndim<1>>;

// Hands a sample vector to numpy without copying; the array owns it.
inline Samples samples_array(std::vector<double>&& v) {
  auto* heap = new std::vector<double>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  return Samples(heap->data(), {heap->size()}, owner);
}

// A TestSpec from the keyword arguments every run()/encode_spec binding takes.
inline gdrlab::TestSpec make_spec(uint8_t path_code, int mode, uint64_t size, uint32_t iters, uint32_t warmup,
                                  uint32_t window, uint64_t chunk, uint32_t depth, uint32_t device, uint64_t seed) {
  gdrlab::TestSpec s;
  s.path = path_code;
  s.mode = static_cast<uint8_t>(mode);
  s.size = size; s.iters = iters; s.warmup = warmup; s.window = window;
  s.chunk = chunk; s.depth = depth; s.device = device; s.seed = seed;
  return s;
}

}  // namespace gdrlab_bind
