#include "session.h"


#include "error.h"
#include "verbs_session.h"

namespace gdrlab {
namespace {

constexpr int kIdleBetweenTestsMs = 300 * 1000;

PathConfig config_of(const TestSpec& s) {
  PathConfig c;
  c.path = path_from_code(s.path);
  c.size = static_cast<size_t>(s.size);
  c.chunk = static_cast<size_t>(s.chunk ? s.chunk : 256 * 1024);
  c.depth = static_cast<int>(s.depth ? s.depth : 4);
  c.device = static_cast<int>(s.device);
  return c;
}

void check_spec(const TestSpec& s) { check_spec_common(s, "tcp"); }

std::string describe_host() {
  std::string why;
  std::string d = "gdrlab wire v" + std::to_string(kWireVersion);
  if (cuda_usable(&why)) {
    try {
      d += "; gpus=" + std::to_string(cuda_device_count());
    } catch (const Error& e) {
      d += std::string("; gpus=0 (") + e.what() + ")";
    }
  } else {
    d += "; gpus=0 (" + why + ")";
  }
  return d;
}

}  // namespace

bool tokens_equal(const std::string& a, const std::string& b) {
  // Length leaks, content does not: compare every byte of the longer string.
  size_t n = std::max(a.size(), b.size());
  unsigned diff = static_cast<unsigned>(a.size() ^ b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

Client::Client(const std::string& host, int port, const std::string& token, int timeout_ms) {
  if (timeout_ms <= 0) throw_invalid("timeout must be positive");
  if (token.size() > kMaxTokenBytes) throw_invalid("token longer than 256 bytes");
  wire_ = std::make_unique<TcpWire>(Socket::connect(host, port, timeout_ms));
  Hello h;
  h.token = token;
  wire_->send_control(FrameType::Hello, encode_hello(h));
  FrameHeader hdr = wire_->recv_header();
  std::vector<uint8_t> body(hdr.length);
  if (hdr.length) wire_->recv_raw(body.data(), hdr.length);
  BodyReader r(body.data(), body.size());
  if (hdr.type == static_cast<uint16_t>(FrameType::Reject))
    throw Error(ErrorKind::Auth, "peer", "handshake", 0, r.str(kMaxControlBytes));
  if (hdr.type == static_cast<uint16_t>(FrameType::Error)) {
    uint8_t kind = r.u8();
    std::string text = r.str(kMaxControlBytes);
    if (kind > static_cast<uint8_t>(ErrorKind::Verify)) kind = static_cast<uint8_t>(ErrorKind::Protocol);
    throw Error(static_cast<ErrorKind>(kind), "peer", "handshake", 0, text);
  }
  if (hdr.type != static_cast<uint16_t>(FrameType::Welcome))
    throw_protocol(std::string("expected WELCOME, got ") + frame_type_name(hdr.type));
  description_ = r.str(kMaxControlBytes);
}

Client::~Client() {
  try {
    close();
  } catch (...) {
  }
}

void Client::close() {
  if (!wire_) return;
  std::unique_ptr<TcpWire> w = std::move(wire_);
  try {
    w->send_control(FrameType::Bye);
  } catch (...) {
  }
}

RunResult Client::run(const TestSpec& spec, Buffer* user, size_t offset) {
  if (!wire_) throw Error(ErrorKind::PeerClosed, "tcp", "", 0, "client is closed");
  check_spec(spec);
  // Build the local side first: a bad local buffer or a missing GPU fails before the peer works.
  PathEndpoint ep(config_of(spec), user, offset);
  TcpWire& w = *wire_;
  try {
    w.send_control(FrameType::Setup, encode_spec(spec));
    w.expect(FrameType::Ready);
    RunResult res;
    measure(spec, [&] { ep.send(w); }, [&] { ep.recv(w); }, [&] { w.expect(FrameType::Ack); }, &res.samples_s,
            &res.bytes_per_sample);
    ep.user().fill_pattern(spec.seed, ep.offset(), spec.size);
    ep.send(w);
    std::vector<uint8_t> verdict = w.expect(FrameType::Verdict);
    BodyReader vr(verdict.data(), verdict.size());
    int64_t bad_remote = static_cast<int64_t>(vr.u64());
    vr.done();
    ep.recv(w);
    if (bad_remote >= 0)
      throw Error(ErrorKind::Verify, "gdrlab", "verify", 0,
                  std::string("data corrupted on the way to the peer over path '") + path_name(ep.config().path) +
                      "': first differing byte at offset " + std::to_string(bad_remote));
    int64_t bad_local = ep.user().check_pattern(spec.seed + 1, ep.offset(), spec.size);
    if (bad_local >= 0)
      throw Error(ErrorKind::Verify, "gdrlab", "verify", 0,
                  std::string("data corrupted on the way back from the peer over path '") +
                      path_name(ep.config().path) + "': first differing byte at offset " + std::to_string(bad_local));
    res.verified = true;
    return res;
  } catch (const Error& e) {
    // After a protocol, timeout or transport failure the stream position is unknown: drop the
    // connection so the next call fails fast instead of reading garbage.
    if (e.kind != ErrorKind::Verify && e.kind != ErrorKind::Unavailable && e.kind != ErrorKind::InvalidArgument)
      wire_.reset();
    throw;
  } catch (...) {
    wire_.reset();
    throw;
  }
}

Server::Server(const std::string& host, int port, const std::string& token, int timeout_ms)
    : listener_(host, port), token_(token), timeout_ms_(timeout_ms) {
  if (timeout_ms <= 0) throw_invalid("timeout must be positive");
  if (token.size() > kMaxTokenBytes) throw_invalid("token longer than 256 bytes");
  if (!listener_.is_loopback() && token_.empty())
    throw Error(ErrorKind::Auth, "gdrlab", "serve", 0,
                "listening on " + host + " (not loopback) requires a token: pass --token or set GDRLAB_TOKEN");
}

bool Server::serve_one(int accept_ms, std::string* error) {
  std::unique_ptr<Socket> s = listener_.accept(accept_ms, timeout_ms_);
  if (!s) return false;
  ++served_;
  TcpWire wire(std::move(s));
  try {
    handle(wire);
  } catch (const Error& e) {
    if (error) *error = std::string(kind_name(e.kind)) + ": " + e.what();
    // Tell the client why, when the connection still works (e.g. a failed SETUP).
    if (e.kind != ErrorKind::PeerClosed && e.kind != ErrorKind::PeerTimeout) wire.send_error(e);
  } catch (const std::exception& e) {
    if (error) *error = e.what();
  }
  return true;
}

void Server::handle(TcpWire& wire) {
  wire.socket().set_deadline_ms(timeout_ms_);
  std::vector<uint8_t> body = wire.expect(FrameType::Hello);
  Hello h = decode_hello(body.data(), body.size());
  if (h.version != kWireVersion || !tokens_equal(h.token, token_)) {
    std::string why = h.version != kWireVersion ? "wire version mismatch" : "wrong or missing token";
    BodyWriter w;
    w.str(why);
    wire.send_control(FrameType::Reject, w.bytes());
    throw Error(ErrorKind::Auth, "gdrlab", "handshake", 0, "client refused: " + why);
  }
  BodyWriter w;
  w.str(describe_host());
  wire.send_control(FrameType::Welcome, w.bytes());
  wire.socket().clear_deadline();
  for (;;) {
    // Between tests a client may sit idle (a notebook cell not yet run): wait longer for the next
    // SETUP than for a reply inside a test. Within a test the normal timeout applies again.
    wire.socket().set_timeout(std::max(timeout_ms_, kIdleBetweenTestsMs));
    FrameHeader hdr = wire.recv_header();
    wire.socket().set_timeout(timeout_ms_);
    // Check the type before allocating: a DATA header may claim up to 1 GiB.
    if (hdr.type == static_cast<uint16_t>(FrameType::Data))
      throw_protocol("unexpected DATA frame between tests");
    std::vector<uint8_t> b(hdr.length);
    if (hdr.length) wire.recv_raw(b.data(), hdr.length);
    if (hdr.type == static_cast<uint16_t>(FrameType::Bye)) return;
    if (hdr.type == static_cast<uint16_t>(FrameType::Connect)) {
      try {
        verbs_serve(wire, b, 0);
      } catch (const Error& e) {
        if (e.kind != ErrorKind::Unavailable && e.kind != ErrorKind::Verbs) throw;
        wire.send_error(e);
      }
      continue;
    }
    if (hdr.type != static_cast<uint16_t>(FrameType::Setup))
      throw_protocol(std::string("expected SETUP or BYE, got ") + frame_type_name(hdr.type));
    TestSpec spec = decode_spec(b.data(), b.size());
    run_test(wire, spec);
  }
}

void Server::run_test(TcpWire& wire, const TestSpec& spec) {
  std::unique_ptr<PathEndpoint> ep;
  try {
    check_spec(spec);
    ep = std::make_unique<PathEndpoint>(config_of(spec));
  } catch (const Error& e) {
    // A test this side cannot run ends the test, not the session.
    if (e.kind == ErrorKind::Protocol) throw;
    wire.send_error(e);
    return;
  }
  wire.send_control(FrameType::Ready);
  answer(spec, [&] { ep->send(wire); }, [&] { ep->recv(wire); }, [&] { wire.send_control(FrameType::Ack); });
  ep->recv(wire);
  int64_t bad = ep->user().check_pattern(spec.seed, 0, spec.size);
  BodyWriter v;
  v.u64(static_cast<uint64_t>(bad));
  wire.send_control(FrameType::Verdict, v.bytes());
  ep->user().fill_pattern(spec.seed + 1, 0, spec.size);
  ep->send(wire);
}

}  // namespace gdrlab
