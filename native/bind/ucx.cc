// Bindings for the ucx wire: gdrlab._native.ucx (private: gdrlab.transfer.ucx_wire wraps it).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "common.h"
#include "core/buffer.h"
#include "core/error.h"
#include "ucx/api.h"
#include "ucx/ucx_wire.h"

namespace nb = nanobind;
using gdrlab_bind::make_spec;
using gdrlab_bind::samples_array;
using gdrlab_bind::text_str;
using namespace nb::literals;
using namespace gdrlab;

namespace {

MemKind ucx_kind(const std::string& s) {
  for (int i = 0; i < static_cast<int>(MemKind::Max); ++i)
    if (s == mem_kind_name(static_cast<MemKind>(i))) return static_cast<MemKind>(i);
  throw_invalid("unknown memory kind '" + s + "' for the ucx wire");
}

}  // namespace

void bind_ucx(nb::module_& m) {
  nb::module_ u = m.def_submodule("ucx", "ucx wire (private: use gdrlab.transfer.ucx_wire)");
  u.def("set_library", &set_ucx_library, "path"_a,
        "libucp.so.0 to open on first use (before it; '' : the default search)");
  u.def("status", [] {
    UcxStatus st;
    {
      nb::gil_scoped_release release;
      st = ucx_status();
    }
    nb::dict d;
    d["loaded"] = st.loaded;
    d["library"] = st.library;
    d["version"] = st.version;
    d["reason"] = text_str(st.reason);
    d["module_dir"] = st.module_dir;
    d["modules"] = st.modules;
    d["has_verbs"] = st.has_verbs;
    d["has_cuda"] = st.has_cuda;
    return d;
  });
  u.def("require_transports", [](const std::string& tls) {
    nb::gil_scoped_release release;
    require_ucx_transports(tls);
  }, "tls"_a);
  nb::class_<UcxClient>(u, "Client")
      .def(nb::init<const std::string&, int, const std::string&, int>(), "host"_a, "port"_a, "token"_a,
           "timeout_ms"_a, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("server_description", [](const UcxClient& c) { return text_str(c.server_description()); })
      .def("run",
           [](UcxClient& c, const std::string& src_mem, const std::string& dst_mem, int mode, uint64_t size,
              uint32_t iters, uint32_t warmup, uint32_t window, uint32_t device, uint64_t seed, const std::string& tls) {
             TestSpec s = make_spec(static_cast<uint8_t>(Path::Host), mode, size, iters, warmup, window, 0, 0, device,
                                    seed);
             const MemKind src = ucx_kind(src_mem), dst = ucx_kind(dst_mem);
             UcxRunResult r;
             {
               nb::gil_scoped_release release;
               r = c.run(s, src, dst, tls);
             }
             nb::dict info;
             info["protocol"] = text_str(r.protocol);
             info["ucx_version"] = r.version;
             info["peer_ucx_version"] = text_str(r.peer_version);
             info["tls"] = r.tls;
             return nb::make_tuple(samples_array(std::move(r.samples_s)), r.bytes_per_sample, r.verified, info);
           },
           "src_mem"_a, "dst_mem"_a, "mode"_a, "size"_a, "iters"_a, "warmup"_a, "window"_a, "device"_a, "seed"_a,
           "tls"_a = "")
      .def("close", &UcxClient::close, nb::call_guard<nb::gil_scoped_release>());
}
