// The serving side of every wire. Connections that have not authenticated are served by the
// accepting thread itself (wire/gate.h); each authenticated session gets a thread of its own,
// at most max_clients. Threads for sessions rather than an event loop because a test blocks in
// CUDA copies and in the timed loop's socket calls, which an event loop would have to move to
// threads anyway; every blocking call has a deadline.
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <dirent.h>
#include <fstream>
#include <system_error>
#include <thread>

#include "core/cuda_api.h"
#include "core/error.h"
#include "wire/session.h"

namespace gdrlab {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxLogLines = 1000;     // between two take_log calls; more are counted, not kept
constexpr int kFailureMemoryMs = 60000;   // an address's failures are forgotten after this quiet time
constexpr int kFirstDelayMs = 50;         // after a refused token, a source's next check waits this long;
constexpr int kMaxDelayMs = 3000;         // ... doubling per failure up to this: slow guessing, never a ban
constexpr double kCheckBurst = 64;        // refused tokens of all sources together: this many at once,
constexpr double kChecksPerSecond = 16;   // ... then this many a second (sources rotating through many addresses)
constexpr size_t kMaxAddrs = 4096;        // sources remembered; past this the least recently used go
constexpr int kMaxSessionLines = 100;     // authenticated sessions' lines per interval, all sources together
constexpr int kMaxRefusalLines = 20;        // refusal log lines per interval, all addresses together
constexpr int kMaxSummaryLines = 20;        // per-source "N more ... left out" lines per interval, all sources
                                            // together; the rest are pooled into one line an interval
constexpr int kSessionLinesPerKind = 3;     // an authenticated address's lines of one kind per interval
constexpr int kAnswerSpacingMs = 50;        // refused tokens from one address: answers this far apart at least
constexpr int kFdsPerSession = 4;           // a session's socket, and a verbs session's device files
constexpr int kFdSlack = 32;                // the interpreter's own files, the listener, logs

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

// Saturates: a time point never set (the clock's epoch, the machine's boot) is as long ago as
// INT_MAX ms, never a wrapped negative count once the machine has been up 25 days.
int ms_since(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  return static_cast<int>(std::clamp<long long>(ms, INT_MIN, INT_MAX));
}

// How a log line names a source: "client 192.0.2.7", or "clients from 127.0.0.0/8" for a range.
std::string source_label(const std::string& key) {
  return key.find('/') == std::string::npos ? "client " + key : "clients from " + key;
}

// "client 192.0.2.7: 57 more 'connected' lines left out (at most 3 a kind per address per 10 s)"
std::string left_out_line(const std::string& host, const std::string& kind, uint64_t n, int interval_ms) {
  const std::string per = interval_ms % 1000 ? std::to_string(interval_ms) + " ms" : std::to_string(interval_ms / 1000) + " s";
  return source_label(host) + ": " + std::to_string(n) + " more '" + kind + "' lines left out (at most " +
         std::to_string(kSessionLinesPerKind) + " a kind per address per " + per + ")";
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

// ------------------------------------------------------------------------ fitting the process
int open_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
    n -= 3;  // ".", ".." and the directory's own descriptor
  }
  return std::max(n, 0);
}

long status_field_kb(const char* key) {  // a "Key:   N kB" line of /proc/self/status
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.compare(0, k.size(), k) == 0) return std::atol(line.c_str() + k.size());
  return -1;
}

// pids.max - pids.current of this process's cgroup (v2), or -1 where there is none or no limit.
long cgroup_threads_left() {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line))
    if (line.compare(0, 3, "0::") == 0) path = line.substr(3);
  if (path.empty()) return -1;
  std::ifstream mx("/sys/fs/cgroup" + path + "/pids.max"), cur("/sys/fs/cgroup" + path + "/pids.current");
  std::string m;
  long c = 0;
  if (!(mx >> m) || m == "max" || !(cur >> c)) return -1;
  return std::atol(m.c_str()) - c;
}

size_t thread_stack_bytes() {
  size_t stack = 8u << 20;
  pthread_attr_t attr;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &stack);
    pthread_attr_destroy(&attr);
  }
  return stack;
}

}  // namespace

std::vector<std::string> fit_limits_to_process(ServerLimits* lim) {
  std::vector<std::string> notes;
  // Descriptors: every place of the gate and every session holds some.
  const int open_now = open_fds();
  const long need = static_cast<long>(lim->max_handshakes) + lim->max_closing +
                    static_cast<long>(kFdsPerSession) * lim->max_clients + kFdSlack + open_now;
  rlimit nf{};
  if (getrlimit(RLIMIT_NOFILE, &nf) == 0 && nf.rlim_cur != RLIM_INFINITY && static_cast<long>(nf.rlim_cur) < need) {
    rlimit raised = nf;
    raised.rlim_cur = nf.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(need)
                                                  : std::min<rlim_t>(nf.rlim_max, static_cast<rlim_t>(need));
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) nf = raised;
    const long have = static_cast<long>(nf.rlim_cur);
    if (have < need) {
      const ServerLimits before = *lim;
      long room = have - kFdSlack - open_now;
      if (room < kFdsPerSession * lim->max_clients + 32)
        lim->max_clients = static_cast<int>(std::max(1L, (room - 32) / kFdsPerSession));
      room -= static_cast<long>(kFdsPerSession) * lim->max_clients;
      lim->max_handshakes = static_cast<int>(std::clamp(room / 3, 1L, static_cast<long>(lim->max_handshakes)));
      lim->max_closing = static_cast<int>(std::clamp(room - lim->max_handshakes, 1L, static_cast<long>(lim->max_closing)));
      std::string line = "RLIMIT_NOFILE allows " + std::to_string(have) + " open files (ulimit -n; hard limit " +
                         (nf.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(nf.rlim_max)) +
                         "), " + std::to_string(open_now) + " open now: lowered";
      if (lim->max_clients != before.max_clients)
        line += " --max-clients from " + std::to_string(before.max_clients) + " to " + std::to_string(lim->max_clients) + ",";
      line += " handshake places from " + std::to_string(before.max_handshakes) + " to " +
              std::to_string(lim->max_handshakes) + ", answered sockets from " + std::to_string(before.max_closing) +
              " to " + std::to_string(lim->max_closing);
      notes.push_back(line);
    }
  }
  // Threads: one per session (handshakes need none).
  long threads_left = -1;
  std::string which;
  auto lower = [&](long v, const std::string& name) {
    if (v >= 0 && (threads_left < 0 || v < threads_left)) {
      threads_left = v;
      which = name;
    }
  };
  const long own_threads = std::max(1L, status_field_kb("Threads"));  // a count, not kB: the parser is the same
  rlimit np{};
  if (geteuid() != 0 && getrlimit(RLIMIT_NPROC, &np) == 0 && np.rlim_cur != RLIM_INFINITY)
    lower(static_cast<long>(np.rlim_cur) - own_threads, "RLIMIT_NPROC (ulimit -u; this user's other processes count too)");
  lower(cgroup_threads_left(), "the cgroup's pids.max (a container's process limit)");
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const long vm_kb = status_field_kb("VmSize");
    const long stack_kb = static_cast<long>(thread_stack_bytes() / 1024) + 64;
    if (vm_kb >= 0) lower((static_cast<long>(as.rlim_cur / 1024) - vm_kb) / stack_kb, "RLIMIT_AS (ulimit -v) at one thread stack each");
  }
  if (threads_left >= 0 && threads_left - 4 < lim->max_clients) {
    const int before = lim->max_clients;
    lim->max_clients = static_cast<int>(std::max(1L, threads_left - 4));
    notes.push_back(which + " leaves room for about " + std::to_string(std::max(0L, threads_left)) +
                    " more threads: lowered --max-clients from " + std::to_string(before) + " to " +
                    std::to_string(lim->max_clients) + " (a session thread each)");
  }
  return notes;
}

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

uint64_t Server::clients_served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return served_;
}

int Server::active_sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_;
}

int Server::session_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_;
}

uint64_t Server::busy_refusals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_ + gate_.evicted();
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
        summary_line(left_out_line(rate_key(host_of(addr)), kind, k.left_out, limits_.log_interval_ms), k.left_out,
                     &before);
      k = LineKind{Clock::now(), 0, 0};
    }
    if (k.lines >= kSessionLinesPerKind) {
      ++k.left_out;
      return;
    }
    if (ms_since(session_window_) >= limits_.log_interval_ms) {
      if (session_left_out_) before.push_back(std::to_string(session_left_out_) + " more session lines left out (at most " +
                                              std::to_string(kMaxSessionLines) + " an interval from all addresses)");
      session_window_ = Clock::now();
      session_lines_ = 0;
      session_left_out_ = 0;
    }
    if (session_lines_ >= kMaxSessionLines) {
      ++session_left_out_;
      return;
    }
    ++session_lines_;
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
      summary_line(left_out_line(host, kind, k.left_out, limits_.log_interval_ms), k.left_out, out);
      k.left_out = 0;
    }
  if (session_left_out_ && (final || ms_since(session_window_) >= limits_.log_interval_ms)) {
    if (out->size() < kMaxLogLines)
      out->push_back(std::to_string(session_left_out_) + " more session lines left out (at most " +
                     std::to_string(kMaxSessionLines) + " an interval from all addresses)");
    else
      ++log_dropped_;
    session_left_out_ = 0;
  }
  // Refusals before authentication left out: counted in the address's next refusal line, or here
  // once its interval is over (a burst followed by quiet, or the stop).
  for (auto& [host, st] : addrs_) {
    if (!st.suppressed || (!final && ms_since(st.last_log) < limits_.log_interval_ms)) continue;
    summary_line(source_label(host) + ": " + std::to_string(st.suppressed) +
                     " more refused before authentication left out (one line per address per interval)",
                 st.suppressed, out);
    st.suppressed = 0;
  }
  if (pooled_sources_ && (final || ms_since(pooled_since_) >= limits_.log_interval_ms)) {
    if (out->size() < kMaxLogLines)
      out->push_back(std::to_string(pooled_lines_) + " more lines left out from " + std::to_string(pooled_sources_) +
                     " more sources (at most " + std::to_string(kMaxSummaryLines) +
                     " lines naming a source's count an interval, from all sources together)");
    else
      ++log_dropped_;
    pooled_lines_ = 0;
    pooled_sources_ = 0;
  }
}

// A line saying how many of one source's lines were left out: at most kMaxSummaryLines an interval
// from all sources together; past that its count is pooled into one line an interval (summaries),
// so sources rotating through many addresses cannot flood the log through their summaries.
void Server::summary_line(std::string line, uint64_t n, std::vector<std::string>* out) {  // mu_ held
  if (ms_since(summary_window_) >= limits_.log_interval_ms) {
    summary_window_ = Clock::now();
    summary_lines_ = 0;
  }
  if (summary_lines_ < kMaxSummaryLines) {
    ++summary_lines_;
    if (out->size() < kMaxLogLines) out->push_back(std::move(line));
    else ++log_dropped_;  // the overall cap holds for summaries too
    return;
  }
  if (!pooled_sources_) pooled_since_ = Clock::now();
  pooled_lines_ += n;
  ++pooled_sources_;
}

// Token checks (wire/gate.h): after a refused token, its source's next check waits 50 ms,
// doubling per failure up to 3 s, so a source gets one answer per delay however many connections
// it opens; and refused tokens of all sources together are answered at kChecksPerSecond after a
// burst of kCheckBurst, against a guesser rotating through many sources.
int Server::check_wait_ms(const std::string& addr, std::string* reason) {
  if (!limits_.slow_guessing) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  AddrState& st = addr_state(addr);
  const Clock::time_point now = Clock::now();
  if (st.failures && ms_since(st.last_failure) > kFailureMemoryMs) st.failures = 0;
  if (!check_refill_.time_since_epoch().count()) {
    check_tokens_ = kCheckBurst;
    check_refill_ = now;
  }
  check_tokens_ = std::min(kCheckBurst, check_tokens_ + kChecksPerSecond * std::chrono::duration<double>(now - check_refill_).count());
  check_refill_ = now;
  int wait = st.failures && st.next_check > now
                 ? static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(st.next_check - now).count()) + 1
                 : 0;
  if (wait > 0)
    *reason = std::to_string(st.failures) + " refused tokens from address " + host_of(addr) +
              " recently: its tokens are checked one at a time, " + std::to_string(std::min(kMaxDelayMs, wait)) +
              " ms apart; try again later";
  if (check_tokens_ < 1) {
    const int global = static_cast<int>((1 - check_tokens_) / kChecksPerSecond * 1000) + 1;
    if (global > wait) {
      wait = global;
      *reason = "many refused tokens from many addresses: tokens are checked at most " +
                std::to_string(static_cast<int>(kChecksPerSecond)) + " a second; try again later";
    }
  }
  return wait;
}

void Server::note_failure(const std::string& addr) {
  std::lock_guard<std::mutex> lock(mu_);
  AddrState& st = addr_state(addr);
  if (st.failures && ms_since(st.last_failure) > kFailureMemoryMs) st.failures = 0;
  ++st.failures;
  const Clock::time_point now = Clock::now();
  st.last_failure = now;
  st.next_check = now + std::chrono::milliseconds(std::min(kMaxDelayMs, kFirstDelayMs << std::min(st.failures - 1, 8)));
  check_tokens_ -= 1;
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
  const std::string addr = rate_key(host_of(peer));
  if (addrs_.size() >= kMaxAddrs && !addrs_.count(addr)) {
    // The least recently used eighth goes (its pending log counts are said first): one pass per
    // kMaxAddrs / 8 new sources, and no source's delay is reset while it is still in use.
    std::vector<Clock::time_point> used;
    used.reserve(addrs_.size());
    for (const auto& [key, st] : addrs_) used.push_back(st.last_used);
    auto cut = used.begin() + static_cast<std::ptrdiff_t>(kMaxAddrs / 8);
    std::nth_element(used.begin(), cut, used.end());
    const Clock::time_point limit = *cut;
    std::vector<std::string> said;
    for (auto it = addrs_.begin(); it != addrs_.end();) {
      if (it->second.last_used > limit) {
        ++it;
        continue;
      }
      uint64_t left = it->second.suppressed;
      for (const auto& [kind, k] : it->second.kinds) left += k.left_out;
      if (left)
        summary_line(source_label(it->first) + ": " + std::to_string(left) + " more lines left out (forgotten: " +
                         std::to_string(kMaxAddrs) + " sources remembered at most)",
                     left, &said);
      it = addrs_.erase(it);
    }
    for (std::string& line : said) {
      if (log_.size() < kMaxLogLines) log_.push_back(std::move(line));
      else ++log_dropped_;
    }
  }
  AddrState& st = addrs_[addr];
  const Clock::time_point now = Clock::now();
  if (!st.seen) {
    st.seen = true;
    st.last_failure = now;
  }
  st.last_used = now;
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
