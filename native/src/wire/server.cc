// The serving side of every wire: a thread per connection, bounded. Threads rather than an event
// loop because a test blocks in CUDA copies and in the timed loop's socket calls, which an event
// loop would have to move to threads anyway; the bound (max_handshakes unauthenticated plus
// max_clients authenticated) keeps their number small, and every blocking call has a deadline.
#include <system_error>
#include <algorithm>
#include <thread>

#include "core/cuda_api.h"
#include "core/error.h"
#include "wire/session.h"

namespace gdrlab {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxLogLines = 1000;     // between two take_log calls; more are counted, not kept
constexpr int kFailureMemoryMs = 60000;   // an address's failures are forgotten after this quiet time
constexpr int kFirstDelayMs = 50;         // the first refused token waits this long; doubles after
constexpr int kMaxDelayMs = 3000;         // ... up to this: slow enough against guessing, never a ban
constexpr size_t kMaxAddrs = 4096;
constexpr int kMaxRefusalLines = 20;        // refusal log lines per interval, all addresses together
constexpr int kSessionLinesPerKind = 3;     // an authenticated address's lines of one kind per interval
constexpr uint32_t kMaxPreAuthBytes = 4096;  // a HELLO or ERROR frame read before authentication

// "192.0.2.7:51234" -> "192.0.2.7" (also IPv6): refusals are counted per host, not per connection.
std::string host_of(const std::string& addr) {
  size_t colon = addr.rfind(':');
  return colon == std::string::npos ? addr : addr.substr(0, colon);
}

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

int ms_since(Clock::time_point t) {
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
}

// "client 192.0.2.7: 57 more 'connected' lines left out (at most 3 a kind per address per 10 s)"
std::string left_out_line(const std::string& host, const std::string& kind, uint64_t n, int interval_ms) {
  const std::string per = interval_ms % 1000 ? std::to_string(interval_ms) + " ms" : std::to_string(interval_ms / 1000) + " s";
  return "client " + host + ": " + std::to_string(n) + " more '" + kind + "' lines left out (at most " +
         std::to_string(kSessionLinesPerKind) + " a kind per address per " + per + ")";
}

std::string describe_error(const Error& e) { return std::string(error_class_name(e.kind)) + ": " + e.what(); }

}  // namespace

Server::Server(const std::string& host, int port, const std::string& token, int timeout_ms,
               const ServerLimits& limits)
    : listener_(host, port), token_(token), timeout_ms_(timeout_ms), limits_(limits),
      budget_(limits.max_host_bytes, limits.max_gpu_bytes) {
  check_session_limits(token, timeout_ms);
  if (limits.max_clients < 1 || limits.max_handshakes < 1 || limits.handshake_ms < 1 || limits.idle_ms < 1 ||
      limits.device < 0 || limits.log_interval_ms < 0)
    throw_invalid("server limits must be positive (max clients, handshakes, deadlines) and the device 0 or more");
  if (!listener_.is_loopback() && token_.empty())
    throw Error(ErrorKind::Auth, "gdrlab", "serve", 0,
                "listening on " + host + " (not loopback) requires a token: pass --token-file or set GDRLAB_TOKEN");
}

Server::~Server() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  for (Socket* s : open_) s->shutdown_both();
  cv_.notify_all();
  cv_.wait(lock, [&] { return threads_ == 0; });
}

void Server::add_wire(FrameType request, RequestHandler handler) {
  handlers_.emplace_back(request, std::move(handler));
}

uint64_t Server::clients_served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return served_;
}

int Server::active_sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_;
}

void Server::log(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (log_.size() >= kMaxLogLines) {
    ++log_dropped_;
    return;
  }
  log_.push_back(line);
}

std::vector<std::string> Server::take_log(bool final) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out(log_.begin(), log_.end());
  log_.clear();
  summaries(final, &out);
  if (log_dropped_) out.push_back(std::to_string(log_dropped_) + " more log lines dropped (log flood)");
  log_dropped_ = 0;
  return out;
}

void Server::session_log(const std::string& addr, const std::string& kind, const std::string& line) {
  std::vector<std::string> before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    AddrState& st = addr_state(addr);
    LineKind& k = st.kinds[kind];
    if (ms_since(k.since) >= limits_.log_interval_ms) {  // a new interval for this kind
      if (k.left_out)  // not summarised yet (take_log not called since): say so before the new line
        before.push_back(left_out_line(host_of(addr), kind, k.left_out, limits_.log_interval_ms));
      k = LineKind{Clock::now(), 0, 0};
    }
    if (k.lines >= kSessionLinesPerKind) {
      ++k.left_out;
      return;
    }
    ++k.lines;
  }
  for (const std::string& b : before) log(b);
  log(line);
}

// Summary lines for session lines left out in intervals now over (all of them when final).
void Server::summaries(bool final, std::vector<std::string>* out) {
  for (auto& [host, st] : addrs_)
    for (auto& [kind, k] : st.kinds) {
      if (!k.left_out || (!final && ms_since(k.since) < limits_.log_interval_ms)) continue;
      if (out->size() < kMaxLogLines) out->push_back(left_out_line(host, kind, k.left_out, limits_.log_interval_ms));
      else ++log_dropped_;  // the overall cap holds for summaries too
      k.left_out = 0;
    }
}

// A refused token from addr: the delay before answering, doubling per failure up to a cap.
int Server::failure_delay(const std::string& addr) {
  std::lock_guard<std::mutex> lock(mu_);
  AddrState& st = addr_state(addr);
  if (st.failures && ms_since(st.last_failure) > kFailureMemoryMs) st.failures = 0;
  ++st.failures;
  st.last_failure = Clock::now();
  return std::min(kMaxDelayMs, kFirstDelayMs << std::min(st.failures - 1, 8));
}

// Whether to log a refused connection from addr now: one line per interval and address, and at
// most kMaxRefusalLines a interval from all addresses together; *suppressed: lines left out since.
bool Server::log_allowed(const std::string& addr, uint64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  AddrState& st = addr_state(addr);
  if (ms_since(refusal_window_) >= limits_.log_interval_ms) {
    refusal_window_ = Clock::now();
    refusal_lines_ = 0;
  }
  if ((st.logged && ms_since(st.last_log) < limits_.log_interval_ms) || refusal_lines_ >= kMaxRefusalLines) {
    ++st.suppressed;
    return false;
  }
  ++refusal_lines_;
  st.logged = true;
  st.last_log = Clock::now();
  *suppressed = st.suppressed;
  st.suppressed = 0;
  return true;
}

Server::AddrState& Server::addr_state(const std::string& peer) {  // mu_ held
  const std::string addr = host_of(peer);
  if (addrs_.size() >= kMaxAddrs && !addrs_.count(addr)) {
    for (auto it = addrs_.begin(); it != addrs_.end();)
      it = ms_since(it->second.last_failure) > kFailureMemoryMs ? addrs_.erase(it) : std::next(it);
    if (addrs_.size() >= kMaxAddrs) addrs_.clear();
  }
  AddrState& st = addrs_[addr];
  if (!st.seen) {
    st.seen = true;
    st.last_failure = Clock::now();
  }
  return st;
}

bool Server::serve_one(int accept_ms, std::string* error) {
  std::unique_ptr<Socket> s = listener_.accept(accept_ms, timeout_ms_);
  if (!s) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++served_;
  }
  std::string addr = s->peer_name();
  TcpWire wire(std::move(s));
  bool authed = false;
  try {
    handle(wire, addr, false, &authed);
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
  const Clock::time_point end = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    int left = -ms_since(end);
    if (left <= 0) return;
    std::unique_ptr<Socket> s;
    try {
      s = listener_.accept(left, timeout_ms_);
    } catch (const Error& e) {  // out of descriptors or memory: the listener itself is fine
      bool say;
      {
        std::lock_guard<std::mutex> lock(mu_);
        say = ms_since(last_full_log_) >= limits_.log_interval_ms;
        if (say) last_full_log_ = Clock::now();
      }
      if (say) log(std::string("accept failed, retrying: ") + escape_text(e.what()));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (!s) return;
    std::unique_lock<std::mutex> lock(mu_);
    ++served_;
    if (stopping_ || handshakes_ >= limits_.max_handshakes) {
      bool say = ms_since(last_full_log_) >= limits_.log_interval_ms;
      uint64_t left_out = full_suppressed_;
      if (say) {
        last_full_log_ = Clock::now();
        full_suppressed_ = 0;
      } else {
        ++full_suppressed_;
      }
      lock.unlock();
      std::string addr = s->peer_name();
      s.reset();  // closed at once: no thread, no memory
      if (say)
        log("client " + addr + ": closed at once, " + std::to_string(limits_.max_handshakes) +
            " connections are still authenticating (" + std::to_string(left_out) + " more since the last line)");
      continue;
    }
    ++handshakes_;
    ++threads_;
    lock.unlock();
    try {
      std::thread(&Server::run_connection, this, std::move(s)).detach();
    } catch (const std::system_error&) {
      std::lock_guard<std::mutex> relock(mu_);
      --handshakes_;
      --threads_;
      cv_.notify_all();
    }
  }
}

void Server::run_connection(std::unique_ptr<Socket> s) {
  {
    const std::string addr = s->peer_name();
    Socket* raw = s.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) raw->shutdown_both();
      open_.insert(raw);
    }
    TcpWire wire(std::move(s));
    bool authed = false;
    std::string outcome;
    std::string outcome_class;  // the kind of the "ended with" line, for its rate limit
    try {
      handle(wire, addr, true, &authed);
    } catch (const Error& e) {
      outcome = describe_error(e);
      outcome_class = error_class_name(e.kind);
      if (e.kind != ErrorKind::PeerClosed && e.kind != ErrorKind::PeerTimeout) wire.send_error(e);
    } catch (const std::exception& e) {
      outcome = e.what();
      outcome_class = "other error";
    }
    if (!authed) {
      std::lock_guard<std::mutex> lock(mu_);
      --handshakes_;
    }
    uint64_t left_out = 0;
    if (authed && !outcome.empty()) {
      session_log(addr, "ended with " + outcome_class, "client " + addr + ": ended with " + escape_text(outcome, 300));
    } else if (!authed && log_allowed(addr, &left_out)) {
      std::string more = left_out ? " (" + std::to_string(left_out) + " more refused since the last line)" : "";
      log("client " + addr + ": refused before authentication: " + escape_text(outcome, 200) + more);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_.erase(raw);
    }
  }  // the connection is closed before the server may go
  std::lock_guard<std::mutex> lock(mu_);
  --threads_;
  cv_.notify_all();
}

// ------------------------------------------------------------------------------ one connection
void Server::handle(TcpWire& wire, const std::string& addr, bool counted, bool* authed) {
  authenticate(wire, addr, counted);
  if (counted) {
    std::unique_lock<std::mutex> lock(mu_);
    --handshakes_;
    *authed = true;
    if (sessions_ >= limits_.max_clients) {
      int n = sessions_;
      lock.unlock();
      throw_unavailable("server busy (" + std::to_string(n) + " clients, --max-clients " +
                        std::to_string(limits_.max_clients) + "): try again later");
    }
    ++sessions_;
  } else {
    *authed = true;
  }
  struct Leave {
    Server* s;
    bool counted;
    ~Leave() {
      if (!counted) return;
      std::lock_guard<std::mutex> lock(s->mu_);
      --s->sessions_;
    }
  } leave{this, counted};
  BodyWriter w;
  w.str(describe_host());
  wire.send_control(FrameType::Welcome, w.bytes());
  if (counted) session_log(addr, "connected", "client " + addr + ": connected");
  session_loop(wire, addr, counted);
  if (counted) session_log(addr, "done", "client " + addr + ": done");
}

void Server::authenticate(TcpWire& wire, const std::string& addr, bool throttle) {
  // A short deadline for the whole HELLO, however the peer trickles it: an unauthenticated
  // connection holds a thread and a socket for at most this long.
  wire.socket().set_deadline_ms(std::min(timeout_ms_, limits_.handshake_ms));
  // Before authentication only a HELLO or an ERROR is read, each of a few KiB at most: no
  // unauthenticated peer makes this server allocate more (512 handshakes x 4 KiB).
  FrameHeader hdr = wire.recv_header();
  const bool hello = hdr.type == static_cast<uint16_t>(FrameType::Hello);
  if (!hello && hdr.type != static_cast<uint16_t>(FrameType::Error))
    throw_protocol(std::string("expected HELLO, got ") + frame_type_name(hdr.type));
  const uint32_t cap = kMaxPreAuthBytes;  // decode_hello then bounds the token itself
  if (hdr.length > cap)
    throw_protocol(std::string("a ") + frame_type_name(hdr.type) + " frame of " + std::to_string(hdr.length) +
                   " bytes before authentication (at most " + std::to_string(cap) + ")");
  std::vector<uint8_t> body(hdr.length);
  if (hdr.length) wire.recv_raw(body.data(), hdr.length);
  if (!hello) throw decode_error(body.data(), body.size(), "handshake");
  Hello h = decode_hello(body.data(), body.size());
  if (h.version != kWireVersion || !tokens_equal(h.token, token_)) {
    std::string why = h.version != kWireVersion ? "wire version mismatch" : "wrong or missing token";
    if (throttle && h.version == kWireVersion) {
      // Slow down guessing from this address (a growing delay on this connection, never a ban:
      // a classroom behind one NAT shares an address). serve_one's single client gets no delay:
      // it ends the serving after one attempt anyway.
      int delay = failure_delay(addr);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(delay), [&] { return stopping_; });
    }
    BodyWriter w;
    w.str(why);
    wire.send_control(FrameType::Reject, w.bytes());
    throw Error(ErrorKind::Auth, "gdrlab", "handshake", 0, "client refused: " + why);
  }
  wire.socket().clear_deadline();
}

void Server::session_loop(TcpWire& wire, const std::string& addr, bool counted) {
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
    it->second(wire, b, refused);
  }
}

std::string escape_text(const std::string& text, size_t max_chars) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= max_chars) {
      out += "... (" + std::to_string(text.size()) + " bytes)";
      break;
    }
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace gdrlab
