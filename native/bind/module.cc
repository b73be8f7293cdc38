// The only file that includes nanobind: the engine itself is plain C++. Long calls release the
// GIL; every gdrlab::Error becomes the matching gdrlab.errors class.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "common.h"
#include "core/buffer.h"
#include "core/devinfo.h"
#include "core/error.h"
#include "core/knobs.h"
#include "core/pattern_gpu.h"
#include "core/vocab.h"
#include "paths/copybench.h"
#include "paths/copyrun.h"
#include "paths/sm_copy.h"
#include "tcp/tcp_session.h"
#include "ucx/ucx_wire.h"
#include "verbs/session.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace nb = nanobind;
using gdrlab_bind::make_spec;
using gdrlab_bind::samples_array;
using gdrlab_bind::text_str;
using gdrlab_bind::vec_bytes;
using namespace nb::literals;

void bind_verbs(nb::module_& m);  // bind/verbs.cc
void bind_dlpack(nb::module_& m);  // bind/dlpack.cc
void bind_ucx(nb::module_& m);  // bind/ucx.cc
using namespace gdrlab;

namespace {

MemKind kind_from(const std::string& s) {
  std::string valid;
  for (int i = 0; i < static_cast<int>(MemKind::Max); ++i) {
    if (s == mem_kind_name(static_cast<MemKind>(i))) return static_cast<MemKind>(i);
    valid += std::string(i ? ", " : "") + mem_kind_name(static_cast<MemKind>(i));
  }
  throw_invalid("unknown memory kind '" + s + "'; valid: " + valid);
}

CopyDir dir_from(const std::string& s) {
  if (s == "h2d") return CopyDir::H2D;
  if (s == "d2h") return CopyDir::D2H;
  if (s == "d2d") return CopyDir::D2D;
  throw_invalid("unknown copy direction '" + s + "'; valid: h2d, d2h, d2d");
}

nb::bytes header_bytes(uint32_t magic, uint16_t version, uint16_t type, uint32_t seq, uint32_t length) {
  FrameHeader h{magic, version, type, seq, length};
  uint8_t out[kHeaderBytes];
  encode_header(h, out);
  return nb::bytes(reinterpret_cast<const char*>(out), kHeaderBytes);
}

// The engine's name table for an enum with a Max sentinel, as a tuple in code order.
template <class E>
nb::tuple names_of(const char* (*name)(E)) {
  nb::list out;
  for (int i = 0; i < static_cast<int>(E::Max); ++i) out.append(name(static_cast<E>(i)));
  return nb::tuple(out);
}

// gdrlab.errors._from_native(class name, message, library, call, code, text); the strings are
// decoded with replacement, so text that came from a peer can never raise UnicodeDecodeError.
void set_python_error(const Error& e) {
  nb::object make = nb::module_::import_("gdrlab.errors").attr("_from_native");
  nb::object exc = make(error_class_name(e.kind), text_str(e.what()), text_str(e.library), text_str(e.call), e.code,
                        text_str(e.text));
  if (!e.where.empty()) exc.attr("where") = e.where;
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

void bind_vocabulary(nb::module_& m) {
  m.attr("PATH_NAMES") = names_of<Path>(&path_name);
  m.attr("WIRE_NAMES") = names_of<Wire>(&wire_name);
  m.attr("MODE_NAMES") = names_of<Mode>(&mode_name);
  m.attr("ERROR_CLASS_NAMES") = names_of<ErrorKind>(&error_class_name);
  m.attr("MEMORY_KIND_NAMES") = names_of<MemKind>(&mem_kind_name);
  // (name, NCCL's name or "", default in words, meaning) per environment variable the engine reads
  nb::list knobs;
  for (int i = 0; i < static_cast<int>(Knob::Max); ++i) {
    const KnobInfo& k = knob_info(static_cast<Knob>(i));
    knobs.append(nb::make_tuple(k.name, k.nccl, k.fallback, k.meaning));
  }
  m.attr("KNOBS") = nb::tuple(knobs);
  nb::dict wire_paths;
  for (int w = 0; w < static_cast<int>(Wire::Max); ++w) {
    nb::list paths;
    for (int p = 0; p < static_cast<int>(Path::Max); ++p)
      if (wire_carries(static_cast<Wire>(w), static_cast<Path>(p))) paths.append(path_name(static_cast<Path>(p)));
    wire_paths[wire_name(static_cast<Wire>(w))] = nb::tuple(paths);
  }
  m.attr("WIRE_PATHS") = wire_paths;
  m.attr("DEFAULT_CHUNK_BYTES") = kDefaultChunkBytes;
  m.attr("DEFAULT_PIPELINE_DEPTH") = kDefaultPipelineDepth;
}

// Buffers of every kind, dma-buf export, and the counters leak tests read.
void bind_memory(nb::module_& m) {
  nb::class_<Buffer>(m, "Buffer")
      .def(nb::new_([](const std::string& kind, size_t size, int device) {
             return std::make_unique<Buffer>(kind_from(kind), size, device);
           }),
           "kind"_a, "size"_a, "device"_a = 0)
      .def_static("wrap", [](const std::string& kind, uintptr_t address, size_t size, int device, bool reg) {
            return Buffer::wrap(kind_from(kind), address, size, device, reg);
          }, "kind"_a, "address"_a, "size"_a, "device"_a = 0, "register"_a = false)
      .def_prop_ro("kind", [](const Buffer& b) { return std::string(mem_kind_name(b.kind())); })
      .def_prop_ro("size", &Buffer::size)
      .def_prop_ro("device", &Buffer::device)
      .def_prop_ro("address", &Buffer::address)
      .def_prop_ro("owns", &Buffer::owns)
      .def("fill_pattern", &Buffer::fill_pattern, "seed"_a, "offset"_a, "length"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def("check_pattern", &Buffer::check_pattern, "seed"_a, "offset"_a, "length"_a,
           nb::call_guard<nb::gil_scoped_release>());

  nb::class_<DmaBuf>(m, "DmaBuf")
      .def_ro("fd", &DmaBuf::fd)
      .def_ro("size", &DmaBuf::size)
      .def_ro("cpu_mmap_errno", &DmaBuf::cpu_mmap_errno)
      .def("close", &DmaBuf::close);
  m.def("export_dmabuf", &export_dmabuf, "buffer"_a);

  m.def("live_pinned_bytes", &live_pinned_bytes);
  m.def("live_device_bytes", &live_device_bytes);
  m.def("kept_pinned_bytes", &kept_pinned_bytes,
        "Freed pinned blocks kept page-locked for the next buffer of their size (GDRLAB_KEEP_PINNED).");
  m.def("release_kept_buffers", &release_kept_buffers,
        "Gives every kept pageable and pinned block back now.");

  m.def("pattern_bytes", [](uint64_t seed, size_t n) {
    std::vector<uint8_t> v(n);
    pattern_fill_host(v.data(), n, seed);
    return vec_bytes(v);
  });
}

// The tcp wire's client and the server of every wire.
void bind_sessions(nb::module_& m) {
  gdrlab_bind::bind_client<TcpClient>(m, "Client", Wire::Tcp, [](RunResult& r) {
    return nb::make_tuple(samples_array(std::move(r.samples_s)), r.bytes_per_sample, r.verified);
  });

  // Every wire the engine carries is served: tcp tests (SETUP) and verbs tests (CONNECT).
  nb::class_<Server>(m, "Server")
      .def(nb::new_([](const std::string& host, int port, const std::string& token, int timeout_ms,
                       int max_clients, int idle_ms, int handshake_ms, int device, uint64_t max_host_bytes,
                       uint64_t max_gpu_bytes, int log_interval_ms, int max_handshakes, int max_handshakes_per_host,
                       int test_ms) {
             ServerLimits lim;
             lim.max_clients = max_clients;
             lim.max_handshakes = max_handshakes;
             lim.max_handshakes_per_host = max_handshakes_per_host;
             lim.idle_ms = idle_ms;
             lim.handshake_ms = handshake_ms;
             lim.device = device;
             lim.max_host_bytes = max_host_bytes;
             lim.max_gpu_bytes = max_gpu_bytes;
             lim.log_interval_ms = log_interval_ms;
             lim.test_ms = test_ms;
             auto s = std::make_unique<Server>(host, port, token, timeout_ms, lim);
             add_tcp_wire(*s);
             add_verbs_wire(*s);
             add_ucx_wire(*s);
             return s;
           }),
           "host"_a, "port"_a, "token"_a, "timeout_ms"_a, "max_clients"_a = 64, "idle_ms"_a = 60000,
           "handshake_ms"_a = 5000, "device"_a = 0, "max_host_bytes"_a = 0, "max_gpu_bytes"_a = 0,
           "log_interval_ms"_a = 10000, "max_handshakes"_a = ServerLimits{}.max_handshakes,
           "max_handshakes_per_host"_a = ServerLimits{}.max_handshakes_per_host, "test_ms"_a = ServerLimits{}.test_ms)
      .def_prop_ro("port", &Server::port)
      .def_prop_ro("clients_served", &Server::clients_served)
      .def_prop_ro("active_sessions", &Server::active_sessions)
      .def_prop_ro("handshakes_in_progress", &Server::handshakes_in_progress)
      .def_prop_ro("closing_connections", &Server::closing_connections)
      .def_prop_ro("session_threads", &Server::session_threads)
      .def_prop_ro("busy_refusals", &Server::busy_refusals)
      .def_prop_ro("max_clients", [](const Server& s) { return s.limits().max_clients; })
      .def_prop_ro("max_handshakes", [](const Server& s) { return s.limits().max_handshakes; })
      .def_prop_ro("limit_notes", &Server::limit_notes)
      .def("serve_one", [](Server& s, int accept_ms) {
            std::string err;
            bool came;
            {
              nb::gil_scoped_release release;
              came = s.serve_one(accept_ms, &err);
            }
            return std::make_pair(came, text_str(err));
          }, "accept_ms"_a)
      .def("serve_for", [](Server& s, int ms) {
            nb::gil_scoped_release release;
            s.serve_for(ms);
          }, "ms"_a)
      .def("take_log", &Server::take_log, "final"_a = false)
      .def("stop", [](Server& s, int wait_ms) {
            nb::gil_scoped_release release;
            return s.stop(wait_ms);
          }, "wait_ms"_a);
}

// What the CUDA driver reports, and the copy-engine measurements.
void bind_gpu(nb::module_& m) {
  m.def("copy_samples", [](const std::string& dir, size_t size, int iters, int warmup, const std::string& host_kind,
                           int device) {
        std::vector<double> v;
        {
          nb::gil_scoped_release release;
          v = copy_samples(dir_from(dir), size, iters, warmup, kind_from(host_kind), device);
        }
        return samples_array(std::move(v));
      }, "direction"_a, "size"_a, "iters"_a, "warmup"_a, "host_kind"_a, "device"_a);

  m.def("peer_samples", [](int src, int dst, size_t size, int iters, int warmup, bool peer, bool bidir) {
        std::vector<double> v;
        {
          nb::gil_scoped_release release;
          v = peer_samples(src, dst, size, iters, warmup, peer, bidir);
        }
        return samples_array(std::move(v));
      }, "src"_a, "dst"_a, "size"_a, "iters"_a, "warmup"_a, "peer_access"_a, "bidirectional"_a);
  m.def("can_access_peer", &can_access_peer, "a"_a, "b"_a);
  m.def("copy_run", [](const std::vector<std::tuple<std::string, int, std::string, int, int>>& legs, size_t size,
                       int iters, int warmup, const std::string& engine, int peer, int check_every) {
        std::vector<CopyLeg> specs;
        for (const auto& [sk, sd, dk, dd, ex] : legs) specs.push_back({kind_from(sk), sd, kind_from(dk), dd, ex});
        if (engine != "ce" && engine != "sm") throw_invalid("unknown copy engine '" + engine + "'; valid: ce, sm");
        if (peer < -1 || peer > 1) throw_invalid("peer must be -1 (auto), 0 (off) or 1 (on)");
        CopyRunResult r;
        {
          nb::gil_scoped_release release;
          r = copy_run(specs, size, iters, warmup, engine == "sm" ? CopyEngine::SM : CopyEngine::CE,
                       static_cast<PeerMode>(peer), check_every);
        }
        nb::dict d;
        d["host_s"] = samples_array(std::move(r.host_s));
        d["event_s"] = samples_array(std::move(r.event_s));
        d["bytes_per_sample"] = r.bytes_per_sample;
        d["checks"] = r.checks;
        d["sm_blocks"] = r.sm_blocks;
        d["sm_threads"] = r.sm_threads;
        return d;
      }, "legs"_a, "size"_a, "iters"_a, "warmup"_a, "engine"_a, "peer"_a, "check_every"_a);
  m.def("sm_copy_ptx", []() { return std::make_tuple(std::string(sm_copy_ptx()), std::string(sm_copy_ptx_isa()),
                                                     std::string(sm_copy_ptx_target())); });

  m.def("pattern_gpu_ptx", []() { return std::string(pattern_gpu_ptx()); });
  m.def("pattern_gpu_ready", &pattern_gpu_ready, "device"_a,
        "True where GPU `device` fills and checks the verification pattern with its own kernels "
        "(False: through host memory).");

  m.def("cuda_probe", []() {
    std::string why;
    bool ok = cuda_usable(&why);
    return std::make_tuple(ok, why, ok ? driver_version() : 0);
  });
  m.def("gpu_infos", []() {
    nb::list out;
    for (const GpuInfo& g : gpu_infos()) {
      nb::dict d;
      d["index"] = g.index;
      d["name"] = g.name;
      d["pci_bus_id"] = g.pci_bus_id;
      d["total_mem_bytes"] = g.total_mem_bytes;
      d["compute_capability"] = std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor);
      d["async_engines"] = g.async_engines;
      d["gdr_supported"] = g.gdr_supported != 0;
      d["dmabuf_supported"] = g.dmabuf_supported != 0;
      d["gdr_vmm_supported"] = g.gdr_vmm_supported != 0;
      d["host_numa_id"] = g.host_numa_id;
      out.append(d);
    }
    return out;
  });
}

// Wire internals, exposed so tests can craft good and bad frames.
void bind_wire_internals(nb::module_& m) {
  m.attr("HEADER_BYTES") = kHeaderBytes;
  m.attr("FRAME_MAGIC") = kFrameMagic;
  m.attr("WIRE_VERSION") = kWireVersion;
  m.attr("MAX_DATA_BYTES") = kMaxDataBytes;
  m.attr("MAX_CONTROL_BYTES") = kMaxControlBytes;
  m.def("rate_key", &rate_key, "host"_a);  // the source a peer's address counts as (wire/gate.h)
  m.def("encode_header", &header_bytes, "magic"_a, "version"_a, "type"_a, "seq"_a, "length"_a);
  m.def("validate_header", [](nb::bytes b, uint32_t expected_seq) {
    if (b.size() != kHeaderBytes) throw_protocol("header must be 16 bytes");
    validate_header(decode_header(reinterpret_cast<const uint8_t*>(b.c_str())), expected_seq);
  }, "header"_a, "expected_seq"_a);
  m.def("encode_hello", [](const std::string& token, uint32_t version) {
    Hello h;
    h.token = token;
    h.version = version;
    return vec_bytes(encode_hello(h));
  }, "token"_a, "version"_a = kWireVersion);
  m.def("decode_spec", [](nb::bytes b) {
    TestSpec s = decode_spec(reinterpret_cast<const uint8_t*>(b.c_str()), b.size());
    return std::make_tuple(s.path, s.mode, s.size, s.iters, s.warmup, s.window, s.chunk, s.depth, s.device, s.seed);
  });
  m.def("encode_spec", [](const std::string& path, int mode, uint64_t size, uint32_t iters, uint32_t warmup,
                          uint32_t window, uint64_t chunk, uint32_t depth, uint32_t device, uint64_t seed) {
    TestSpec s = make_spec(static_cast<uint8_t>(path_from_name(path, Wire::Tcp)), mode, size, iters, warmup, window, chunk, depth,
                           device, seed);
    return vec_bytes(encode_spec(s));
  });
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "gdrlab transfer engine (private: use gdrlab.engine)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      set_python_error(e);
    }
  });
  bind_vocabulary(m);

  bind_memory(m);
  bind_dlpack(m);
  bind_sessions(m);
  bind_gpu(m);
  bind_wire_internals(m);
  bind_verbs(m);
  bind_ucx(m);
}
