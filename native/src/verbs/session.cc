#include "verbs/session.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/budget.h"
#include "core/cuda_api.h"
#include "core/error.h"
#include "core/knobs.h"

namespace gdrlab {
namespace {

// The receive queue of a test with this bandwidth window, the same on both sides: at least two
// windows (and the default 256), so a window above the default depth never meets
// receiver-not-ready NAKs (0.64 ms back-off each) and the client can stream (post the next
// window before the last one's ACK is back) without outrunning the posted receives.
int verbs_rq_depth(uint32_t window) {
  return std::max(LinkConfig{}.rq_depth, static_cast<int>(2 * std::min<uint32_t>(std::max(window, 1u), 1u << 15)));
}

// Windows the client may leave unacknowledged: what the server's receive queue holds. Every ACK
// comes after the server polled (and reposted the receives of) its whole window, so at most
// verbs_rq_depth messages are ever unacknowledged, never more than the receives posted.
uint32_t verbs_bw_windows_in_flight(uint32_t window) {
  return std::max<uint32_t>(1, static_cast<uint32_t>(verbs_rq_depth(window)) / std::max(window, 1u));
}

VerbsPathConfig config_of(const TestSpec& s, const VerbsSelection& sel, bool server) {
  VerbsPathConfig c;
  static_cast<PathConfig&>(c) = path_config(s, Wire::Verbs);
  c.gpu_registration = sel.registration;
  // The data messages the peer sends inside measure()/answer(): both directions in latency
  // ping-pong, client to server only in bandwidth mode, none in verify mode.
  const uint64_t total = static_cast<uint64_t>(s.warmup) + s.iters;
  const Mode mode = static_cast<Mode>(s.mode);
  if (mode == Mode::Latency) c.peer_loop_messages = total;
  else if (mode == Mode::Bandwidth && server) c.peer_loop_messages = total * s.window;
  if (mode == Mode::Bandwidth && !server) c.bw_windows_in_flight = verbs_bw_windows_in_flight(s.window);
  return c;
}

LinkConfig link_config(const VerbsSelection& sel, int timeout_ms, uint32_t window = 1) {
  LinkConfig lc;
  lc.rq_depth = verbs_rq_depth(window);
  lc.port = sel.port;
  lc.gid_index = sel.gid_index;
  lc.timeout_ms = timeout_ms;
  lc.service_level = sel.service_level;
  lc.traffic_class = sel.traffic_class;
  lc.pkey_index = sel.pkey_index;
  lc.pkey = sel.pkey;
  return lc;
}

// A knob's integer value (our name first, then NCCL's), `dflt` when unset.
int env_int(Knob knob, int lo, int hi, int dflt, int base = 10) {
  const EnvSetting s = knob_env(knob);
  const char* name = s.name;
  const char* v = s.value;
  if (!v) return dflt;
  char* end = nullptr;
  long x = std::strtol(v, &end, base);
  if (*end || x < lo || x > hi)
    throw_invalid(std::string(name) + "='" + v + "' is not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return static_cast<int>(x);
}


}  // namespace

VerbsSelection verbs_selection_from_env() {
  VerbsSelection s;
  if (const char* d = knob_env(Knob::IbDev).value) {
    std::string v(d);
    size_t colon = v.find(':');
    s.device = v.substr(0, colon);
    if (colon != std::string::npos) {
      std::string p = v.substr(colon + 1);
      char* end = nullptr;
      long port = std::strtol(p.c_str(), &end, 10);
      if (p.empty() || *end || port < 1 || port > 255) throw_invalid("GDRLAB_IB_DEV='" + v + "': port must be 1..255");
      s.port = static_cast<int>(port);
    }
  }
  // -1 (NCCL's own default) means "choose": the RoCE version and address knobs decide.
  s.gid_index = env_int(Knob::IbGidIndex, -1, 255, -1);
  s.traffic_class = env_int(Knob::IbTc, 0, 255, 0);
  s.service_level = env_int(Knob::IbSl, 0, 15, 0);
  s.traffic_class_set = knob_env(Knob::IbTc).value != nullptr;
  s.service_level_set = knob_env(Knob::IbSl).value != nullptr;
  // NCCL_IB_PKEY is an index into the port's P_Key table; GDRLAB_IB_PKEY is a P_Key value (0x8001).
  s.pkey_index = env_int(Knob::IbPkeyIndex, 0, 65535, 0);
  s.pkey = env_int(Knob::IbPkey, 0, 0xFFFF, -1, 0);
  if (const char* r = knob_env(Knob::GdrReg).value) {
    std::string v(r);
    if (v == "" || v == "auto") s.registration = GpuRegistration::Auto;
    else if (v == "dmabuf") s.registration = GpuRegistration::DmaBuf;
    else if (v == "peermem") s.registration = GpuRegistration::PeerMem;
    else throw_invalid("GDRLAB_GDR_REG='" + v + "'; valid: auto, dmabuf, peermem");
  }
  return s;
}

// ------------------------------------------------------------------------------ server side
namespace {

// The server's HCA per (name, GPU, filter): opened once and kept, not once per test.
std::shared_ptr<Context> server_context(const std::string& name, int gpu, bool warn) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Context>> cache;
  const EnvSetting filter = knob_env(Knob::IbHca);
  const std::string key = name + "|" + std::to_string(gpu) + "|" + (warn ? "w" : "") + "|" + filter.name + "=" +
                          (filter.value ? filter.value : "");
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto ctx = std::make_shared<Context>(name, gpu, warn);
  cache[key] = ctx;
  return ctx;
}

void serve_connect(Server& server, ControlChannel& wire, const std::vector<uint8_t>& body, const RefusalLog& refused) {
  TestSpec spec;
  ConnInfo remote;
  decode_connect_request(body.data(), body.size(), &spec, &remote);
  spec.device = static_cast<uint32_t>(server.limits().device);  // this server's GPU, whatever was asked
  // Declared before the endpoint, so the buffers are freed before their share goes back.
  Reservation held;
  std::unique_ptr<VerbsEndpoint> ep;
  bool built = build_or_refuse(wire, refused, [&] {
    check_spec_common(spec, "verbs");
    VerbsSelection sel = verbs_selection_from_env();
    VerbsPathConfig cfg = config_of(spec, sel, true);
    require_rdma_device();
    // Sizes, depth and chunk bounded first (chunk clamped to the message), then the memory
    // reserved from the server's budget before the HCA is opened or a byte allocated.
    VerbsPathConfig checked = cfg;
    check_endpoint(Wire::Verbs, &checked, nullptr, 0);
    if (path_needs_gpu(cfg.path)) cuda_context(cfg.device);  // "GPU N does not exist" before anything else
    held = server.budget().reserve(VerbsEndpoint::serving_memory(checked));
    // The HCA nearest this server's GPU for every path, host included, unless named.
    auto pd = std::make_shared<ProtectionDomain>(server_context(sel.device, cfg.device, path_needs_gpu(cfg.path)));
    // As NCCL's passive side: the client's class and level, unless this side names its own.
    if (!sel.traffic_class_set) sel.traffic_class = remote.traffic_class;
    if (!sel.service_level_set) sel.service_level = remote.service_level;
    LinkConfig lc = link_config(sel, 30000, spec.window);
    if (remote.link_layer == ibv::IBV_LINK_LAYER_ETHERNET) {  // RoCE: a GID in the client's subnet
      lc.have_peer_gid = true;
      std::memcpy(lc.peer_gid, remote.gid, 16);
    }
    ep = std::make_unique<VerbsEndpoint>(cfg, std::make_unique<RcLink>(pd, lc));
    ep->set_remote(remote);
    ep->link().connect(remote);
  });
  if (!built) return;
  ConnInfo mine = ep->link().local_info();
  ep->describe_region(&mine);
  std::vector<uint8_t> info = encode_conn_info(mine);
  BodyWriter w;
  w.str(std::string(info.begin(), info.end()));
  w.str(ep->mechanism());
  wire.send_control(FrameType::Connect, w.bytes());
  run_server_test(wire, *ep, spec);
}

}  // namespace


void add_verbs_wire(Server& server) {
  server.add_wire(FrameType::Connect, [&server](ControlChannel& wire, const std::vector<uint8_t>& body,
                                                 const RefusalLog& refused) {
    try {
      serve_connect(server, wire, body, refused);
    } catch (const Error& e) {
      // A verbs failure inside the test (a completion error, no HCA) ends the test, not the session.
      if (e.kind != ErrorKind::Unavailable && e.kind != ErrorKind::Verbs) throw;
      wire.send_error(e);
    }
  });
}

// ------------------------------------------------------------------------------ client side
VerbsClient::VerbsClient(const std::string& host, int port, const std::string& token, int timeout_ms)
    : timeout_ms_(timeout_ms) {
  sel_ = verbs_selection_from_env();
  // Fail before connecting when this machine has no HCA: the reason is the useful answer.
  require_rdma_device();
  session_ = std::make_unique<ClientSession>(host, port, token, timeout_ms);
}

void VerbsClient::close() {
  if (session_) session_->close();
  pds_.clear();
}

VerbsRunResult VerbsClient::run(const TestSpec& spec, Buffer* user, size_t offset) {
  session_->wire();  // throws PeerClosed after close() or a dropped session
  check_spec_common(spec, "verbs");
  VerbsPathConfig cfg = config_of(spec, sel_, false);
  // The HCA nearest this test's GPU (--device, host path included), unless GDRLAB_IB_DEV names one;
  // kept for the session, one per GPU.
  const bool gpu_path = path_needs_gpu(cfg.path);
  std::shared_ptr<ProtectionDomain>& pd = pds_[static_cast<int>(cfg.device) * 2 + gpu_path];
  if (!pd)
    pd = std::make_shared<ProtectionDomain>(std::make_shared<Context>(sel_.device, static_cast<int>(cfg.device), gpu_path));
  VerbsEndpoint ep(cfg, std::make_unique<RcLink>(pd, link_config(sel_, timeout_ms_, spec.window)), user, offset);
  VerbsRunResult res;
  res.mechanism = ep.mechanism();
  res.device_name = ep.link().device_name();
  res.port = ep.link().port();
  res.link_layer = ep.link().link_layer();
  res.gid_index = ep.link().gid_index();
  res.gpu_hops = ep.link().pd()->context()->gpu_hops();
  res.traffic_class = sel_.traffic_class;
  res.service_level = sel_.service_level;
  return session_->guarded([&](ControlChannel& w) {
    ConnInfo mine = ep.link().local_info();
    ep.describe_region(&mine);
    w.send_control(FrameType::Connect, encode_connect_request(spec, mine));
    std::vector<uint8_t> reply = w.expect(FrameType::Connect);
    BodyReader r(reply.data(), reply.size());
    std::string info = r.str(1024);
    res.peer_mechanism = r.text(64);
    r.done();
    ConnInfo remote = decode_conn_info(reinterpret_cast<const uint8_t*>(info.data()), info.size());
    res.peer_traffic_class = remote.traffic_class;
    res.peer_service_level = remote.service_level;
    ep.set_remote(remote);
    ep.link().connect(remote);
    res.path_mtu = choose_path_mtu(ep.link().active_mtu(), remote.mtu);
    static_cast<RunResult&>(res) = run_client_test(w, ep, spec);
    return res;
  });
}

}  // namespace gdrlab
