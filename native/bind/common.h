// Helpers shared by the binding files (module.cc, verbs.cc): one way to hand samples to numpy,
// to build a TestSpec, to turn engine text into Python str, and to bind a wire's client class.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/vocab.h"
#include "wire/frame.h"

namespace gdrlab_bind {

namespace nb = nanobind;
using Samples = nb::ndarray<nb::numpy, double, nb::ndim<1>>;

// Hands a sample vector to numpy without copying; the array owns it.
inline Samples samples_array(std::vector<double>&& v) {
  auto* heap = new std::vector<double>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  return Samples(heap->data(), {heap->size()}, owner);
}

// Text that may hold a peer's bytes, as str: invalid UTF-8 is replaced, never an exception.
inline nb::str text_str(const std::string& s) {
  return nb::steal<nb::str>(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
}

inline nb::bytes vec_bytes(const std::vector<uint8_t>& v) {
  return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

inline const uint8_t* bytes_ptr(const nb::bytes& b) { return reinterpret_cast<const uint8_t*>(b.c_str()); }

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

// Binds a wire's client class C: C(host, port, token, timeout_ms), server_description,
// run(path, mode, size, iters, warmup, window, chunk, depth, device, seed, buffer=None, offset=0)
// and close(). run returns as_tuple(result of C::run); long calls release the GIL.
template <class C, class AsTuple>
void bind_client(nb::module_& m, const char* name, gdrlab::Wire wire, AsTuple as_tuple) {
  using namespace nb::literals;
  nb::class_<C>(m, name)
      .def(nb::init<const std::string&, int, const std::string&, int>(), "host"_a, "port"_a, "token"_a,
           "timeout_ms"_a, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("server_description", [](const C& c) { return text_str(c.server_description()); })
      .def("run",
           [wire, as_tuple](C& c, const std::string& path, int mode, uint64_t size, uint32_t iters, uint32_t warmup,
                            uint32_t window, uint64_t chunk, uint32_t depth, uint32_t device, uint64_t seed,
                            gdrlab::Buffer* buffer, size_t offset) {
             gdrlab::TestSpec s = make_spec(static_cast<uint8_t>(gdrlab::path_from_name(path, wire)), mode, size,
                                            iters, warmup, window, chunk, depth, device, seed);
             decltype(c.run(s)) r;
             {
               nb::gil_scoped_release release;
               r = c.run(s, buffer, offset);
             }
             return as_tuple(r);
           },
           "path"_a, "mode"_a, "size"_a, "iters"_a, "warmup"_a, "window"_a, "chunk"_a, "depth"_a, "device"_a,
           "seed"_a, "buffer"_a = nb::none(), "offset"_a = 0)
      .def("close", &C::close, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace gdrlab_bind
