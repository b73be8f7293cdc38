// Bindings for the verbs layer: gdrlab._native.verbs. The Pythonic objects (Device ->
// ProtectionDomain -> MemoryRegion, context managers) live in gdrlab/verbs.py; this is the thin
// backend under them, plus the pure connection and QP-attribute functions for tests.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "common.h"
#include "core/buffer.h"
#include "core/error.h"
#include "verbs/api.h"
#include "verbs/hca.h"
#include "verbs/link_choice.h"
#include "verbs/qp.h"
#include "verbs/resources.h"
#include "verbs/session.h"

namespace nb = nanobind;
using gdrlab_bind::bytes_ptr;
using gdrlab_bind::samples_array;
using gdrlab_bind::text_str;
using namespace nb::literals;
using namespace gdrlab;

namespace {

#define GDRLAB_SET(f) d[#f] = info.f;

nb::dict port_dict(const PortInfo& info) {
  nb::dict d;
  d["port"] = info.port;
  GDRLAB_PORT_FIELDS(GDRLAB_SET)
  d["link_layer"] = info.link_layer == ibv::IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
  d["rate"] = info.rate;
  return d;
}

nb::dict device_dict(const DeviceInfo& info) {
  nb::dict d;
  d["name"] = info.name;
  d["fw_ver"] = info.fw_ver;
  GDRLAB_DEVICE_FIELDS(GDRLAB_SET)
  d["node_type"] = info.node_type;
  d["transport_type"] = info.transport_type;
  d["rc_unsupported"] = rc_unsupported_reason(info);
  nb::list ports;
  for (const PortInfo& p : info.ports) ports.append(port_dict(p));
  d["ports"] = ports;
  return d;
}

#undef GDRLAB_SET

nb::dict conn_dict(const ConnInfo& c) {
  nb::dict d;
#define GDRLAB_CONN_NUMBER(f) d[#f] = c.f;
#define GDRLAB_CONN_GID(f) d[#f] = nb::bytes(reinterpret_cast<const char*>(c.f), 16);
  GDRLAB_CONN_FIELDS(GDRLAB_CONN_NUMBER, GDRLAB_CONN_GID)
#undef GDRLAB_CONN_NUMBER
#undef GDRLAB_CONN_GID
  return d;
}

ConnInfo conn_from(const nb::dict& d) {
  ConnInfo c;
  c.qpn = nb::cast<uint32_t>(d["qpn"]);
  c.psn = nb::cast<uint32_t>(d["psn"]);
  c.lid = nb::cast<uint16_t>(d["lid"]);
  c.link_layer = nb::cast<uint8_t>(d["link_layer"]);
  c.mtu = nb::cast<uint8_t>(d["mtu"]);
  nb::bytes g = nb::cast<nb::bytes>(d["gid"]);
  if (g.size() != 16) throw_invalid("gid must be 16 bytes");
  std::memcpy(c.gid, g.c_str(), 16);
  c.gid_index = nb::cast<uint8_t>(d["gid_index"]);
  if (d.contains("roce_version")) c.roce_version = nb::cast<uint8_t>(d["roce_version"]);
  if (d.contains("traffic_class")) c.traffic_class = nb::cast<uint8_t>(d["traffic_class"]);
  if (d.contains("service_level")) c.service_level = nb::cast<uint8_t>(d["service_level"]);
  c.rkey = nb::cast<uint32_t>(d["rkey"]);
  c.addr = nb::cast<uint64_t>(d["addr"]);
  c.length = nb::cast<uint64_t>(d["length"]);
  return c;
}

nb::dict attrs_dict(const QpAttrs& q) {
  const ibv::ibv_qp_attr& a = q.attr;
  nb::dict d;
  d["mask"] = q.mask;
  d["qp_state"] = static_cast<int>(a.qp_state);
  d["pkey_index"] = a.pkey_index;
  d["port_num"] = a.port_num;
  d["qp_access_flags"] = a.qp_access_flags;
  d["path_mtu"] = static_cast<int>(a.path_mtu);
  d["dest_qp_num"] = a.dest_qp_num;
  d["rq_psn"] = a.rq_psn;
  d["sq_psn"] = a.sq_psn;
  d["max_dest_rd_atomic"] = a.max_dest_rd_atomic;
  d["max_rd_atomic"] = a.max_rd_atomic;
  d["min_rnr_timer"] = a.min_rnr_timer;
  d["timeout"] = a.timeout;
  d["retry_cnt"] = a.retry_cnt;
  d["rnr_retry"] = a.rnr_retry;
  nb::dict ah;
  ah["is_global"] = a.ah_attr.is_global;
  ah["dlid"] = a.ah_attr.dlid;
  ah["sl"] = a.ah_attr.sl;
  ah["src_path_bits"] = a.ah_attr.src_path_bits;
  ah["port_num"] = a.ah_attr.port_num;
  ah["dgid"] = nb::bytes(reinterpret_cast<const char*>(a.ah_attr.grh.dgid.raw), 16);
  ah["sgid_index"] = a.ah_attr.grh.sgid_index;
  ah["hop_limit"] = a.ah_attr.grh.hop_limit;
  ah["traffic_class"] = a.ah_attr.grh.traffic_class;
  ah["flow_label"] = a.ah_attr.grh.flow_label;
  d["ah_attr"] = ah;
  return d;
}

GpuRegistration registration_from(const std::string& s) {
  if (s == "auto") return GpuRegistration::Auto;
  if (s == "dmabuf") return GpuRegistration::DmaBuf;
  if (s == "peermem") return GpuRegistration::PeerMem;
  if (s == "raw") return GpuRegistration::Raw;
  throw_invalid("unknown GPU registration '" + s + "'; valid: auto, dmabuf, peermem, raw");
}

void bind_constants(nb::module_& v) {
  nb::dict c;
#define GDRLAB_C(name) c[#name] = static_cast<long long>(ibv::name);
  GDRLAB_C(IBV_MTU_256) GDRLAB_C(IBV_MTU_512) GDRLAB_C(IBV_MTU_1024) GDRLAB_C(IBV_MTU_2048) GDRLAB_C(IBV_MTU_4096)
  GDRLAB_C(IBV_QPS_RESET) GDRLAB_C(IBV_QPS_INIT) GDRLAB_C(IBV_QPS_RTR) GDRLAB_C(IBV_QPS_RTS)
  GDRLAB_C(IBV_QP_STATE) GDRLAB_C(IBV_QP_ACCESS_FLAGS) GDRLAB_C(IBV_QP_PKEY_INDEX) GDRLAB_C(IBV_QP_PORT)
  GDRLAB_C(IBV_QP_AV) GDRLAB_C(IBV_QP_PATH_MTU) GDRLAB_C(IBV_QP_TIMEOUT) GDRLAB_C(IBV_QP_RETRY_CNT)
  GDRLAB_C(IBV_QP_RNR_RETRY) GDRLAB_C(IBV_QP_RQ_PSN) GDRLAB_C(IBV_QP_MAX_QP_RD_ATOMIC) GDRLAB_C(IBV_QP_MIN_RNR_TIMER)
  GDRLAB_C(IBV_QP_SQ_PSN) GDRLAB_C(IBV_QP_MAX_DEST_RD_ATOMIC) GDRLAB_C(IBV_QP_DEST_QPN)
  GDRLAB_C(IBV_ACCESS_LOCAL_WRITE) GDRLAB_C(IBV_ACCESS_REMOTE_WRITE) GDRLAB_C(IBV_ACCESS_REMOTE_READ)
  GDRLAB_C(IBV_LINK_LAYER_INFINIBAND) GDRLAB_C(IBV_LINK_LAYER_ETHERNET) GDRLAB_C(IBV_PORT_ACTIVE)
#undef GDRLAB_C
  v.attr("CONSTANTS") = c;
  v.attr("DEFAULT_ACCESS") = kDefaultAccess;
}

// What the library and devices report before anything is opened.
void bind_probes(nb::module_& v) {
  v.def("library_name", &verbs_library_name);
  v.def("status", []() {
    VerbsStatus s;
    {
      nb::gil_scoped_release release;
      s = verbs_status();
    }
    nb::dict d;
    d["library_found"] = s.library_found;
    d["reason"] = s.reason;
    d["devices"] = s.devices;
    d["library"] = verbs_library_name();
    return d;
  });
  v.def("devices", []() {
    nb::list out;
    for (const DeviceInfo& i : verbs_devices()) out.append(device_dict(i));
    return out;
  });
  v.def("peermem_loaded", []() {
    std::string ver;
    bool ok = peermem_loaded(&ver);
    return std::make_tuple(ok, ver);
  });
  v.def("has_reg_dmabuf_mr", []() { return verbs().reg_dmabuf_mr != nullptr; });
  // What ibv_is_fork_initialized says once the engine has called ibv_fork_init (its first PD):
  // "enabled" (kernels before 5.13: registrations mark whole pages DONTFORK), "unneeded",
  // "disabled", or "unknown" (rdma-core older than 35).
  v.def("fork_protection", []() -> std::string {
    const VerbsApi& api = verbs();
    if (!api.is_fork_initialized) return "unknown";
    switch (api.is_fork_initialized()) {
      case 0: return "disabled";
      case 1: return "enabled";
      case 2: return "unneeded";
      default: return "unknown";
    }
  });
  v.def("dmabuf_probe", [](std::shared_ptr<Context> ctx) {
    int err = 0;
    bool ok;
    {
      nb::gil_scoped_release release;
      ok = dmabuf_probe(ctx, &err);
    }
    return std::make_tuple(ok, err);
  }, "context"_a);
  v.def("dmabuf_errno_means_unsupported", &dmabuf_errno_means_unsupported, "err"_a);
  v.def("hca_allowed", [](const std::string& spec, const std::string& device, int port) {
    return hca_allowed(parse_hca_filter(spec), device, port);
  }, "spec"_a, "device"_a, "port"_a);
  v.def("pci_hops", &pci_hops, "a"_a, "b"_a);
  v.def("cpu_crossing_code", [](const std::string& gpu_path, const std::string& hca_path) {
    std::string why;
    std::string code = cpu_crossing_code(gpu_path, hca_path, &why);
    return std::make_tuple(code, why);
  }, "gpu_path"_a, "hca_path"_a);
  v.def("nccl_gdr_verdict", &nccl_gdr_verdict, "code"_a);
  v.def("gpu_flush", [](int ordinal) { return std::string(gpu_flush_name(gpu_flush_for_device(ordinal))); },
        "ordinal"_a);
  v.def("verbs_hint", &verbs_hint, "call"_a, "err"_a, "gpu_memory"_a);
  // The HCA, port, GID and P_Key index a test for GPU `gpu` would use here, with the traffic class
  // and service level this process would send: what bench/rdma_pair.sh hands perftest.
  v.def("resolve_link", [](int gpu) {
    VerbsSelection sel = verbs_selection_from_env();
    LinkConfig lc;
    lc.gid_index = sel.gid_index;
    lc.pkey_index = sel.pkey_index;
    lc.pkey = sel.pkey;
    LinkChoice c;
    {
      nb::gil_scoped_release release;
      c = resolve_link(sel.device, sel.port, gpu, lc);
    }
    nb::dict d;
    d["hca"] = c.hca;
    d["port"] = c.port;
    d["link_layer"] = c.link_layer;
    d["gid_index"] = c.gid_index;
    d["pkey_index"] = c.pkey_index;
    d["traffic_class"] = sel.traffic_class;
    d["service_level"] = sel.service_level;
    d["gpu_pci_hops"] = c.gpu_hops;
    return d;
  }, "gpu"_a = -1);
}

// Device -> ProtectionDomain -> MemoryRegion, and the verbs wire's client.
void bind_objects(nb::module_& v) {
  nb::class_<Context>(v, "Context")
      .def(nb::new_([](const std::string& name, int gpu) { return std::make_shared<Context>(name, gpu); }),
           "name"_a = "", "gpu"_a = -1)
      .def_prop_ro("name", &Context::name)
      .def_prop_ro("info", [](const Context& c) { return device_dict(c.info()); })
      .def("port_attr", [](const Context& c, int port) {
            return port_dict(port_info(port, c.port_attr(port)));
          }, "port"_a)
      .def("gid", [](const Context& c, int port, int index) {
            ibv::ibv_gid g = c.gid(port, index);
            return nb::bytes(reinterpret_cast<const char*>(g.raw), 16);
          }, "port"_a, "index"_a)
      .def("active_port", &Context::active_port);

  nb::class_<ProtectionDomain>(v, "ProtectionDomain")
      .def(nb::new_([](std::shared_ptr<Context> c) { return std::make_shared<ProtectionDomain>(std::move(c)); }),
           "context"_a);

  nb::class_<MemoryRegion>(v, "MemoryRegion")
      .def_static("register_host", [](std::shared_ptr<ProtectionDomain> pd, uintptr_t addr, size_t length, int access) {
            nb::gil_scoped_release release;
            return MemoryRegion::register_host(std::move(pd), reinterpret_cast<void*>(addr), length, access);
          }, "pd"_a, "address"_a, "length"_a, "access"_a = kDefaultAccess)
      .def_static("register_device", [](std::shared_ptr<ProtectionDomain> pd, uint64_t addr, size_t length, int device,
                                        int access, const std::string& how) {
            GpuRegistration h = registration_from(how);
            nb::gil_scoped_release release;
            return MemoryRegion::register_device(std::move(pd), addr, length, device, access, h);
          }, "pd"_a, "address"_a, "length"_a, "device"_a, "access"_a = kDefaultAccess, "how"_a = "auto")
      .def_prop_ro("lkey", &MemoryRegion::lkey)
      .def_prop_ro("rkey", &MemoryRegion::rkey)
      .def_prop_ro("address", &MemoryRegion::addr)
      .def_prop_ro("length", &MemoryRegion::length)
      .def_prop_ro("mechanism", [](const MemoryRegion& r) { return std::string(mr_mechanism_name(r.mechanism())); })
      .def_prop_ro("fallback_reason", &MemoryRegion::fallback_reason)
      .def_prop_ro("reg_seconds", &MemoryRegion::reg_seconds)
      .def_prop_ro("export_seconds", &MemoryRegion::export_seconds)
      .def_prop_ro("dereg_seconds", &MemoryRegion::dereg_seconds)
      .def_prop_ro("closed", &MemoryRegion::closed)
      .def("close", &MemoryRegion::close, nb::call_guard<nb::gil_scoped_release>());

  gdrlab_bind::bind_client<VerbsClient>(v, "Client", Wire::Verbs, [](VerbsRunResult& r) {
    nb::dict info;
    info["mechanism"] = r.mechanism;
    info["peer_mechanism"] = text_str(r.peer_mechanism);
    info["device"] = r.device_name;
    info["port"] = r.port;
    info["link_layer"] = r.link_layer == ibv::IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
    info["gid_index"] = r.gid_index;
    info["path_mtu_bytes"] = r.path_mtu ? mtu_bytes(r.path_mtu) : 0;
    info["gpu_pci_hops"] = r.gpu_hops;
    info["traffic_class"] = r.traffic_class;
    info["service_level"] = r.service_level;
    info["peer_traffic_class"] = r.peer_traffic_class;
    info["peer_service_level"] = r.peer_service_level;
    if (r.bw_windows_in_flight) {  // bandwidth: streamed windows, and the ACK waits that found the pipe empty
      info["bw_windows_in_flight"] = r.bw_windows_in_flight;
      info["bw_drains"] = r.bw_drains;
    }
    return nb::make_tuple(samples_array(std::move(r.samples_s)), r.bytes_per_sample, r.verified, info);
  });
}

// Pure functions: connection data and queue-pair attribute choices.
void bind_connection(nb::module_& v) {
  v.def("encode_conn_info", [](const nb::dict& d) { return gdrlab_bind::vec_bytes(encode_conn_info(conn_from(d))); });
  v.def("decode_conn_info", [](const nb::bytes& b) { return conn_dict(decode_conn_info(bytes_ptr(b), b.size())); });
  v.def("encode_connect_request", [](const nb::bytes& spec, const nb::dict& d) {
    TestSpec s = decode_spec(bytes_ptr(spec), spec.size());
    return gdrlab_bind::vec_bytes(encode_connect_request(s, conn_from(d)));
  }, "spec"_a, "conn"_a);
  v.def("decode_connect_request", [](const nb::bytes& b) {
    TestSpec s;
    ConnInfo c;
    decode_connect_request(bytes_ptr(b), b.size(), &s, &c);
    return std::make_tuple(gdrlab_bind::vec_bytes(encode_spec(s)), conn_dict(c));
  });
  v.def("choose_path_mtu", &choose_path_mtu, "local_active_mtu"_a, "remote_active_mtu"_a);
  v.def("mtu_bytes", &mtu_bytes, "mtu"_a);
  v.def("gid_is_ipv4_mapped", [](const nb::bytes& g) {
    if (g.size() != 16) throw_invalid("a GID is 16 bytes");
    return gid_is_ipv4_mapped(bytes_ptr(g));
  });
  v.def("select_gid_index", [](const std::vector<std::tuple<int, nb::bytes, int>>& rows, const std::string& family,
                               const std::string& addr_range, const std::string& roce_version,
                               const nb::bytes& peer_gid) {
    static const std::string names[3] = {"family", "addr_range", "roce_version"};
    const GidPolicy policy = parse_gid_policy(family, addr_range, roce_version, names);
    std::vector<GidEntry> t;
    for (const auto& [index, gid, version] : rows) {
      if (gid.size() != 16) throw_invalid("a GID is 16 bytes");
      GidEntry e;
      e.index = index;
      std::memcpy(e.gid, gid.c_str(), 16);
      e.roce_version = version;
      t.push_back(e);
    }
    if (peer_gid.size() != 0 && peer_gid.size() != 16) throw_invalid("a GID is 16 bytes");
    return select_gid_index(t, policy, peer_gid.size() ? reinterpret_cast<const uint8_t*>(peer_gid.c_str()) : nullptr);
  }, "table"_a, "family"_a = "", "addr_range"_a = "", "roce_version"_a = "", "peer_gid"_a = nb::bytes(""));
  v.def("qp_init_attrs", [](int port, int access, int pkey_index) {
    return attrs_dict(qp_init_attrs(port, access, pkey_index));
  }, "port"_a, "access"_a = kDefaultAccess, "pkey_index"_a = 0);
  v.def("qp_rtr_attrs", [](int port, int link_layer, int local_mtu, int sgid_index, const nb::dict& remote,
                           int service_level, int traffic_class, bool grh_required, const nb::bytes& local_gid,
                           int local_roce_version) {
    AddressOptions o;
    o.service_level = service_level;
    o.traffic_class = traffic_class;
    o.grh_required = grh_required;
    o.local_roce_version = local_roce_version;
    if (local_gid.size() != 0 && local_gid.size() != 16) throw_invalid("local_gid is 16 bytes (or empty)");
    o.have_local_gid = local_gid.size() == 16;
    if (o.have_local_gid) std::memcpy(o.local_gid, local_gid.c_str(), 16);
    return attrs_dict(qp_rtr_attrs(port, link_layer, local_mtu, sgid_index, conn_from(remote), o));
  }, "port"_a, "link_layer"_a, "local_mtu"_a, "sgid_index"_a, "remote"_a, "service_level"_a = 0,
        "traffic_class"_a = 0, "grh_required"_a = false, "local_gid"_a = nb::bytes(""), "local_roce_version"_a = 0);
  v.def("qp_rts_attrs", [](uint32_t psn) { return attrs_dict(qp_rts_attrs(psn)); }, "sq_psn"_a);
}

}  // namespace

void bind_verbs(nb::module_& m) {
  nb::module_ v = m.def_submodule("verbs", "verbs layer (private: use gdrlab.verbs)");
  bind_constants(v);

  bind_probes(v);
  bind_objects(v);
  bind_connection(v);
}
