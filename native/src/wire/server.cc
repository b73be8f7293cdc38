// The serving side of every wire. Connections that have not authenticated are served by the
// accepting thread itself (wire/gate.h); each authenticated session gets a thread of its own,
// at most max_clients. Threads for sessions rather than an event loop because a test blocks in
// CUDA copies and in the timed loop's socket calls, which an event loop would have to move to
// threads anyway; every blocking call has a deadline. The server's log and its memory of sources
// are in server_log.cc, fitting its limits to the process in server_limits.cc.

#include <algorithm>
#include <system_error>
#include <thread>

#include "core/cuda_api.h"
#include "core/error.h"
#include "core/locked.h"
#include "wire/server_clock.h"
#include "wire/session.h"

namespace gdrlab {
namespace {

using namespace server_clock;

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

std::string describe_error(const Error& e) { return std::string(error_class_name(e.kind)) + ": " + e.what(); }

// Where a client is refused for capacity the server says "server busy"; the client retries on it.
std::vector<uint8_t> reject_frame(const std::string& why) {
  BodyWriter w;
  w.str(why);
  return encode_frame(FrameType::Reject, w.bytes());
}

const ServerLimits& checked(const ServerLimits& limits) {
  if (limits.max_clients < 1 || limits.max_handshakes < 1 || limits.max_handshakes_per_host < 1 ||
      limits.max_closing < 1 || limits.handshake_ms < 1 || limits.idle_ms < 1 || limits.device < 0 ||
      limits.log_interval_ms < 0 || limits.test_ms < 1)
    throw_invalid("server limits must be positive (max clients, handshakes, deadlines) and the device 0 or more");
  return limits;
}

GateLimits gate_limits(const ServerLimits& l, int timeout_ms) {
  GateLimits g;
  g.max_pending = l.max_handshakes;
  g.max_pending_per_host = std::min(l.max_handshakes_per_host, l.max_handshakes);
  g.handshake_ms = std::min(timeout_ms, l.handshake_ms);
  g.max_closing = l.max_closing;
  g.io_timeout_ms = timeout_ms;
  g.log_interval_ms = l.log_interval_ms;
  g.check_wait_limit_ms = std::min(timeout_ms, 8000);
  return g;
}

}  // namespace

Server::Server(const std::string& host, int port, const std::string& token, int timeout_ms,
               const ServerLimits& limits)
    : listener_(host, port), token_(token), timeout_ms_(timeout_ms), limits_(checked(limits)),
      limit_notes_(fit_limits_to_process(&limits_)), budget_(limits.max_host_bytes, limits.max_gpu_bytes),
      gate_(listener_, *this, gate_limits(limits_, timeout_ms > 0 ? timeout_ms : 1)) {
  check_session_limits(token, timeout_ms);
  if (!listener_.is_loopback() && token_.empty())
    throw Error(ErrorKind::Auth, "gdrlab", "serve", 0,
                "listening on " + host + " (not loopback) requires a token: pass --token-file or set GDRLAB_TOKEN");
}

Server::~Server() { stop(-1); }

int Server::stop(int wait_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;  // the gate's sockets close with it, after the sessions have ended
  for (Socket* s : open_) s->shutdown_both();
  cv_.notify_all();
  if (wait_ms < 0)
    cv_.wait(lock, [&] { return threads_ == 0; });
  else
    cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return threads_ == 0; });
  return threads_;
}

void Server::add_wire(FrameType request, RequestHandler handler) {
  handlers_.emplace_back(request, std::move(handler));
}

uint64_t Server::clients_served() const { return read_locked(mu_, served_); }

int Server::active_sessions() const { return read_locked(mu_, sessions_); }

int Server::session_threads() const { return read_locked(mu_, threads_); }

uint64_t Server::busy_refusals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_ + gate_.evicted();
}

bool Server::serve_one(int accept_ms, std::string* error) {
  std::unique_ptr<Socket> s = listener_.accept(accept_ms, timeout_ms_);
  if (!s) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++served_;
  }
  std::string addr = s->peer_name();
  ControlChannel wire(std::move(s));
  try {
    authenticate(wire);
    BodyWriter w;
    w.str(describe_host());
    wire.send_control(FrameType::Welcome, w.bytes());
    session_loop(wire, addr, false);
  } catch (const Error& e) {
    if (error) *error = describe_error(e);
    // Tell the client why, when the connection still works (e.g. a failed SETUP).
    if (e.kind != ErrorKind::PeerClosed && e.kind != ErrorKind::PeerTimeout) wire.send_error(e);
  } catch (const std::exception& e) {
    if (error) *error = utf8_or_replace(e.what());
  }
  return true;
}

void Server::serve_for(int ms) {
  if (serving_.exchange(true)) throw_invalid("serve_for is already running on another thread of this server");
  struct Done {
    std::atomic<bool>& f;
    ~Done() { f = false; }
  } done{serving_};
  const Clock::time_point end = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    int left = -ms_since(end);
    if (left <= 0) return;
    gate_.round(left);
  }
}

// ------------------------------------------------------------------------------ the gate's questions
Admission Server::admit(const std::string& addr, const FrameHeader& hdr, const std::vector<uint8_t>& body) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++served_;
  }
  Admission a;
  if (hdr.type == static_cast<uint16_t>(FrameType::Error)) {  // the peer gives up before saying HELLO
    refused(addr, decode_error(body.data(), body.size(), "handshake"));
    return a;  // Close: its whole frame was read
  }
  Hello h = decode_hello(body.data(), body.size());  // a malformed HELLO: the gate answers the error
  if (h.version != kWireVersion || !tokens_equal(h.token, token_)) {
    const bool version = h.version != kWireVersion;
    const std::string why = version ? "wire version mismatch" : "wrong or missing token";
    refused(addr, Error(ErrorKind::Auth, "gdrlab", "handshake", 0, "client refused: " + why));
    a.kind = Admission::Kind::Answer;
    a.frame = reject_frame(why);
    // Slow down guessing from this source (its next check waits: a growing delay, never a ban,
    // as a classroom behind one NAT shares an address).
    if (!version) note_failure(addr);
    return a;
  }
  std::unique_lock<std::mutex> lock(mu_);
  a.kind = Admission::Kind::Answer;
  if (stopping_) {
    a.frame = busy_frame("server busy: the server is stopping");
    return a;
  }
  if (sessions_ >= limits_.max_clients) {
    ++busy_;
    const std::string text = "server busy (" + std::to_string(sessions_) + " clients, --max-clients " +
                             std::to_string(limits_.max_clients) + ")";
    lock.unlock();
    session_log(addr, "refused busy", "client " + addr + ": told " + text);
    a.frame = busy_frame(text);
    return a;
  }
  ++sessions_;
  ++threads_;
  a.kind = Admission::Kind::Start;
  return a;
}

std::vector<uint8_t> Server::start(std::unique_ptr<Socket>* s, const std::string& addr) {
  Socket* raw = s->get();
  try {
    std::thread t(&Server::run_session, this, raw, addr);
    s->release();  // the thread owns it now (it may already be using it: release only forgets it)
    t.detach();
    return {};
  } catch (const std::system_error& e) {
    std::string line;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --sessions_;
      --threads_;
      ++busy_;
      cv_.notify_all();
      if (!thread_log_.time_since_epoch().count() || ms_since(thread_log_) >= limits_.log_interval_ms) {
        thread_log_ = Clock::now();
        line = "client " + addr + ": no thread could be started for its session (" + escape_text(e.what()) +
               "): told 'server busy'" +
               (thread_left_out_ ? " (" + std::to_string(thread_left_out_) + " more since the last line)" : "");
        thread_left_out_ = 0;
      } else {
        ++thread_left_out_;
      }
    }
    if (!line.empty()) log(line);
    return busy_frame("server busy: no thread for another session now (" + std::string(e.what()) + ")");
  }
}

void Server::refused(const std::string& addr, const Error& why) {
  uint64_t left_out = 0;
  if (!log_allowed(addr, &left_out)) return;
  std::string more = left_out ? " (" + std::to_string(left_out) + " more refused since the last line)" : "";
  log("client " + addr + ": refused before authentication: " + escape_text(describe_error(why), 200) + more);
}

void Server::run_session(Socket* raw, std::string addr) {
  {
    std::unique_ptr<Socket> s(raw);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) raw->shutdown_both();
      open_.insert(raw);
    }
    ControlChannel wire(std::move(s), 1);  // the gate read the HELLO
    std::string outcome;
    std::string outcome_class;  // the kind of the "ended with" line, for its rate limit
    {
      struct Leave {
        Server* s;
        ~Leave() {
          std::lock_guard<std::mutex> lock(s->mu_);
          --s->sessions_;
        }
      } leave{this};
      try {
        BodyWriter w;
        w.str(describe_host());
        wire.send_control(FrameType::Welcome, w.bytes());
        session_log(addr, "connected", "client " + addr + ": connected");
        session_loop(wire, addr, true);
        session_log(addr, "done", "client " + addr + ": done");
      } catch (const Error& e) {
        outcome = describe_error(e);
        outcome_class = error_class_name(e.kind);
        if (e.kind != ErrorKind::PeerClosed && e.kind != ErrorKind::PeerTimeout) wire.send_error(e);
      } catch (const std::exception& e) {
        outcome = e.what();
        outcome_class = "other error";
      }
    }
    if (!outcome.empty())
      session_log(addr, "ended with " + outcome_class, "client " + addr + ": ended with " + escape_text(outcome, 300));
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(raw);
  }  // the connection is closed before the server may go
  std::lock_guard<std::mutex> lock(mu_);
  --threads_;
  cv_.notify_all();
}

// serve_one's single client: it ends the serving after one attempt anyway, so no delay.
void Server::authenticate(ControlChannel& wire) {
  // A short deadline for the whole HELLO, however the peer trickles it.
  const int hello_ms = std::min(timeout_ms_, limits_.handshake_ms);
  wire.socket().set_deadline_ms(hello_ms);
  FrameHeader hdr;
  std::vector<uint8_t> body;
  try {
    hdr = wire.recv_header();
    check_preauth_header(hdr);
    body.resize(hdr.length);
    if (hdr.length) wire.recv_raw(body.data(), hdr.length);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::PeerTimeout || e.text.rfind(Socket::kDeadlineText, 0) != 0) throw;
    throw Error(ErrorKind::PeerTimeout, "gdrlab", "handshake", 0,
                "no complete HELLO within " + std::to_string(hello_ms) + " ms");
  }
  if (hdr.type != static_cast<uint16_t>(FrameType::Hello)) throw decode_error(body.data(), body.size(), "handshake");
  Hello h = decode_hello(body.data(), body.size());
  if (h.version != kWireVersion || !tokens_equal(h.token, token_)) {
    std::string why = h.version != kWireVersion ? "wire version mismatch" : "wrong or missing token";
    BodyWriter w;
    w.str(why);
    wire.send_control(FrameType::Reject, w.bytes());
    throw Error(ErrorKind::Auth, "gdrlab", "handshake", 0, "client refused: " + why);
  }
  wire.socket().clear_deadline();
}

void Server::session_loop(ControlChannel& wire, const std::string& addr, bool counted) {
  // A test refused while the session goes on: one line, limited like the session's others (a
  // client retrying a request over --max-pinned in a loop logs a few lines and a count). As for
  // its "connected" and "done", serve_one's single client logs none.
  const RefusalLog refused = [&](const Error& e) {
    if (!counted) return;
    const std::string kind = std::string("refused ") + error_class_name(e.kind);
    session_log(addr, kind, "client " + addr + ": refused " + escape_text(describe_error(e), 300));
  };
  for (;;) {
    // Between tests a client may sit idle (a notebook cell not yet run), up to the idle timeout;
    // within a test the normal timeout applies again.
    wire.socket().set_timeout(limits_.idle_ms);
    FrameHeader hdr;
    try {
      hdr = wire.recv_header();
    } catch (const Error& e) {
      if (e.kind != ErrorKind::PeerTimeout) throw;
      Error idle(ErrorKind::PeerClosed, "gdrlab", "serve", 0,
                 "the server closed this session after " + std::to_string(limits_.idle_ms / 1000) +
                     " s without a request (--idle-timeout); connect again");
      wire.send_error(idle);
      throw idle;
    }
    wire.socket().set_timeout(timeout_ms_);
    // Check the type before allocating: a DATA header may claim up to 1 GiB.
    if (hdr.type == static_cast<uint16_t>(FrameType::Data)) throw_protocol("unexpected DATA frame between tests");
    std::vector<uint8_t> b(hdr.length);
    if (hdr.length) wire.recv_raw(b.data(), hdr.length);
    if (hdr.type == static_cast<uint16_t>(FrameType::Bye)) return;
    auto it = std::find_if(handlers_.begin(), handlers_.end(),
                           [&](const auto& entry) { return static_cast<uint16_t>(entry.first) == hdr.type; });
    if (it == handlers_.end()) throw_protocol(std::string("expected SETUP or BYE, got ") + frame_type_name(hdr.type));
    // One test holds a place and its budget for test_ms at most, however its peer trickles.
    const Clock::time_point test_end = Clock::now() + std::chrono::milliseconds(limits_.test_ms);
    wire.socket().set_deadline_ms(limits_.test_ms);
    try {
      it->second(wire, b, refused);
    } catch (const Error& e) {
      wire.socket().clear_deadline();
      if (e.kind == ErrorKind::PeerTimeout &&
          (Clock::now() >= test_end || e.text.rfind(Socket::kDeadlineText, 0) == 0))
        throw Error(ErrorKind::PeerTimeout, "gdrlab", "serve", 0,
                    "the test ran past the server's limit of " + std::to_string(limits_.test_ms / 1000) +
                        " s a test (--max-test-seconds); the session is closed");
      throw;
    }
    wire.socket().clear_deadline();
  }
}

}  // namespace gdrlab
