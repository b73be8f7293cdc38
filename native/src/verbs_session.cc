#include "verbs_session.h"

#include <cstdlib>

#include "error.h"

namespace gdrlab {
namespace {

void check_verbs_spec(const TestSpec& s) {
  verbs_path_from_code(s.path);
  check_spec_common(s, "verbs");
}

VerbsPathConfig config_of(const TestSpec& s, const VerbsSelection& sel) {
  VerbsPathConfig c;
  c.path = verbs_path_from_code(s.path);
  c.size = static_cast<size_t>(s.size);
  c.chunk = static_cast<size_t>(s.chunk ? s.chunk : 256 * 1024);
  c.depth = static_cast<int>(s.depth ? s.depth : 4);
  c.device = static_cast<int>(s.device);
  c.gpu_registration = sel.registration;
  return c;
}

LinkConfig link_config(const VerbsSelection& sel, int timeout_ms) {
  LinkConfig lc;
  lc.port = sel.port;
  lc.gid_index = sel.gid_index;
  lc.timeout_ms = timeout_ms;
  return lc;
}

int env_int(const char* name, int lo, int hi, int dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end || x < lo || x > hi)
    throw_invalid(std::string(name) + "='" + v + "' is not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return static_cast<int>(x);
}

}  // namespace

VerbsSelection verbs_selection_from_env() {
  VerbsSelection s;
  if (const char* d = std::getenv("GDRLAB_IB_DEV")) {
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
  s.gid_index = env_int("GDRLAB_IB_GID_INDEX", 0, 255, -1);
  if (const char* r = std::getenv("GDRLAB_GDR_REG")) {
    std::string v(r);
    if (v == "" || v == "auto") s.registration = GpuRegistration::Auto;
    else if (v == "dmabuf") s.registration = GpuRegistration::DmaBuf;
    else if (v == "peermem") s.registration = GpuRegistration::PeerMem;
    else throw_invalid("GDRLAB_GDR_REG='" + v + "'; valid: auto, dmabuf, peermem");
  }
  return s;
}

// ------------------------------------------------------------------------------ server side
void verbs_serve(TcpWire& wire, const std::vector<uint8_t>& body, int) {
  TestSpec spec;
  ConnInfo remote;
  decode_connect_request(body.data(), body.size(), &spec, &remote);
  std::shared_ptr<ProtectionDomain> pd;
  std::unique_ptr<RcLink> link;       // declared before ep: ep drains the link when it goes
  std::unique_ptr<VerbsEndpoint> ep;
  try {
    check_verbs_spec(spec);
    VerbsSelection sel = verbs_selection_from_env();
    require_rdma_device();
    pd = std::make_shared<ProtectionDomain>(std::make_shared<Context>(sel.device));
    link = std::make_unique<RcLink>(pd, link_config(sel, 30000));
    ep = std::make_unique<VerbsEndpoint>(config_of(spec, sel), pd, *link);
    ep->set_remote(remote);
    link->connect(remote);
  } catch (const Error& e) {
    if (e.kind == ErrorKind::Protocol) throw;
    // A test this side cannot run ends the test, not the session.
    wire.send_error(e);
    return;
  }
  ConnInfo mine = link->local_info();
  ep->describe_region(&mine);
  std::vector<uint8_t> info = encode_conn_info(mine);
  BodyWriter w;
  w.str(std::string(info.begin(), info.end()));
  w.str(ep->mechanism());
  wire.send_control(FrameType::Connect, w.bytes());

  answer(spec, [&] { ep->send(); }, [&] { ep->recv(); }, [&] { ep->send_ack(); });
  ep->recv();
  ep->flush_gpu_writes();
  int64_t bad = ep->user().check_pattern(spec.seed, 0, spec.size);
  BodyWriter v;
  v.u64(static_cast<uint64_t>(bad));
  wire.send_control(FrameType::Verdict, v.bytes());
  ep->user().fill_pattern(spec.seed + 1, 0, spec.size);
  ep->send(true);
  ep->finish();
  // Tell the client our last write has completed: only then may it destroy its queue pair
  // (a QP destroyed before its ACK went out would fail this side's write with RETRY_EXC).
  wire.send_control(FrameType::Ack);
}

// ------------------------------------------------------------------------------ client side
VerbsClient::VerbsClient(const std::string& host, int port, const std::string& token, int timeout_ms)
    : timeout_ms_(timeout_ms) {
  sel_ = verbs_selection_from_env();
  // Fail before connecting when this machine has no HCA: the reason is the useful answer.
  require_rdma_device();
  client_ = std::make_unique<Client>(host, port, token, timeout_ms);
}

void VerbsClient::close() {
  if (client_) client_->close();
  pd_.reset();
}

VerbsRunResult VerbsClient::run(const TestSpec& spec, Buffer* user, size_t offset) {
  TcpWire* w = client_ ? client_->wire() : nullptr;
  if (!w) throw Error(ErrorKind::PeerClosed, "tcp", "", 0, "client is closed");
  check_verbs_spec(spec);
  if (!pd_) pd_ = std::make_shared<ProtectionDomain>(std::make_shared<Context>(sel_.device));
  RcLink link(pd_, link_config(sel_, timeout_ms_));
  VerbsEndpoint ep(config_of(spec, sel_), pd_, link, user, offset);
  VerbsRunResult res;
  res.mechanism = ep.mechanism();
  res.device_name = link.device_name();
  res.port = link.port();
  res.link_layer = link.link_layer();
  res.gid_index = link.gid_index();
  try {
    ConnInfo mine = link.local_info();
    ep.describe_region(&mine);
    w->send_control(FrameType::Connect, encode_connect_request(spec, mine));
    std::vector<uint8_t> reply = w->expect(FrameType::Connect);
    BodyReader r(reply.data(), reply.size());
    std::string info = r.str(1024);
    res.peer_mechanism = r.str(64);
    r.done();
    ConnInfo remote = decode_conn_info(reinterpret_cast<const uint8_t*>(info.data()), info.size());
    ep.set_remote(remote);
    link.connect(remote);
    res.path_mtu = choose_path_mtu(link.active_mtu(), remote.mtu);

    measure(spec, [&] { ep.send(); }, [&] { ep.recv(); }, [&] { ep.expect_ack(); }, &res.samples_s,
            &res.bytes_per_sample);
    ep.user().fill_pattern(spec.seed, ep.offset(), spec.size);
    ep.send(true);
    std::vector<uint8_t> verdict = w->expect(FrameType::Verdict);
    BodyReader vr(verdict.data(), verdict.size());
    int64_t bad_remote = static_cast<int64_t>(vr.u64());
    vr.done();
    ep.recv();
    ep.flush_gpu_writes();
    ep.finish();
    w->expect(FrameType::Ack);  // the server's last write completed: our QP may go
    const char* pname = verbs_path_name(ep.config().path);
    if (bad_remote >= 0)
      throw Error(ErrorKind::Verify, "gdrlab", "verify", 0,
                  std::string("data corrupted on the way to the peer over path '") + pname +
                      "' (verbs wire): first differing byte at offset " + std::to_string(bad_remote));
    int64_t bad_local = ep.user().check_pattern(spec.seed + 1, ep.offset(), spec.size);
    if (bad_local >= 0)
      throw Error(ErrorKind::Verify, "gdrlab", "verify", 0,
                  std::string("data corrupted on the way back from the peer over path '") + pname +
                      "' (verbs wire): first differing byte at offset " + std::to_string(bad_local));
    res.verified = true;
    return res;
  } catch (const Error& e) {
    // After a transport failure the tcp stream position is unknown: drop the session.
    if (e.kind != ErrorKind::Verify && e.kind != ErrorKind::Unavailable && e.kind != ErrorKind::InvalidArgument)
      client_.reset();
    throw;
  }
}

}  // namespace gdrlab
