// The session every wire shares: the measuring side (ClientSession) and the remote side (Server)
// of `gdrlab bench`, over a tcp control connection. A wire (tcp, verbs) plugs in by giving the
// server a handler for its request frame and the client an endpoint; this file knows no wire.
//
// Session:   HELLO(version, token) -> WELCOME(description) | REJECT(reason)
// Each test: a request frame (tcp: SETUP -> READY; verbs: CONNECT -> CONNECT) or ERROR, then the
//            timed loop, then one verification exchange:
//   latency    client sends, server receives and sends back; sample = round trip / 2
//   bandwidth  client sends `window` messages, server answers ACK; sample = window time
//   verify     client sends pattern(seed); server checks, answers VERDICT, sends pattern(seed+1);
//              client checks. A mismatch on either side raises Error(Verify) on the client.
// End:       BYE.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/budget.h"
#include "core/buffer.h"
#include "core/timing.h"
#include "wire/frame.h"
#include "wire/gate.h"
#include "wire/socket.h"
#include "wire/channel.h"

namespace gdrlab {

struct RunResult {
  std::vector<double> samples_s;  // one per timed iteration
  double bytes_per_sample = 0;    // bytes one sample moved one way
  bool verified = false;
  uint32_t bw_windows_in_flight = 0;  // bandwidth: windows posted before the first is acknowledged
  uint64_t bw_drains = 0;             // bandwidth: ACK waits with nothing posted after the window
  uint64_t bytes_received = 0;        // both ways: payload bytes the peer sent this side in the timed loop
};

// One side of one test as a wire moves it: the session core drives the timed loop and the
// verification exchange through these calls.
class TestEndpoint {
 public:
  virtual ~TestEndpoint() = default;
  // One message. last: the verification message, the last this side sends in the test.
  virtual void send(bool last) = 0;
  virtual void recv() = 0;
  virtual void send_ack() = 0;
  virtual void expect_ack() = 0;
  // After the verification message arrived, before it is read (gdr: flush the HCA's writes).
  virtual void settle() {}
  // After the last send: wait until it has left this side (verbs: its completion).
  virtual void finish() {}
  // verbs: the server says over tcp that its last write completed, so the client's queue pair
  // may go (one destroyed before its ACK went out fails the server's write).
  virtual bool confirms_last_write() const { return false; }
  // Bandwidth: how many windows may be unacknowledged (measure()); 1 waits for every ACK.
  virtual uint32_t windows_in_flight(const TestSpec&) const { return 1; }
  virtual Buffer& user() = 0;
  virtual size_t offset() const = 0;
  // "path 'staged' (tcp wire)": names the test in the verification error.
  virtual std::string describe() const = 0;
};

// Measuring side: the timed loop, then verification both ways.
RunResult run_client_test(ControlChannel& control, TestEndpoint& ep, const TestSpec& spec);
// Serving side: the mirror image.
void run_server_test(ControlChannel& control, TestEndpoint& ep, const TestSpec& spec);

// Both directions at once (osu_bibw, perftest's -b): a bandwidth test whose spec.mode carries
// kBothWaysFlag. Each side sends warmup+iters windows through `out` on a thread of its own while
// it receives as many through `in`; no ACKs (the windows each side receives pace it, as in
// osu_bibw). Sample i ends when this side has both sent and received window i; bytes_per_sample
// counts both directions. Then the usual verification exchange, over `out` (client) and `in`
// (server). A server that predates the flag refuses the test ("unknown test mode").
constexpr uint8_t kBothWaysFlag = 0x80;
RunResult run_client_both_ways(ControlChannel& control, TestEndpoint& out, TestEndpoint& in, const TestSpec& spec);
void run_server_both_ways(ControlChannel& control, TestEndpoint& out, TestEndpoint& in, const TestSpec& spec);

// After an error of this kind the control stream is where it was (bad argument, missing
// hardware, corrupted data); after any other the connection is dropped.
bool keeps_session(ErrorKind kind);

// Serving side: how a request handler tells the server's log about a test it refused while the
// session goes on (over the memory budget, no such GPU, a bad spec). The server logs it as a
// session line of the client's address, kind "refused <error class>", rate-limited like the others.
using RefusalLog = std::function<void(const Error& refusal)>;

// Serving side: builds a test's endpoint with build(). A test this side cannot run ends the
// test with an ERROR frame, goes to `refused` and returns false; the session goes on. A protocol
// error ends it.
template <class Build>
bool build_or_refuse(ControlChannel& control, const RefusalLog& refused, Build&& build) {
  try {
    build();
    return true;
  } catch (const Error& e) {
    if (e.kind == ErrorKind::Protocol) throw;
    control.send_error(e);
    if (refused) refused(e);
    return false;
  }
}

class ClientSession {
 public:
  // After the handshake, every frame the client reads must arrive whole within its timeout plus
  // the frame's size at this rate (1 GiB: about 10.7 s more), however the server trickles it.
  static constexpr uint64_t kFloorBytesPerSecond = 100u * 1000u * 1000u;

  // Connects and completes the handshake; REJECT becomes Error(Auth), an ERROR frame the
  // peer's error. A server that is full ("server busy") is tried again, with backoff, until
  // timeout_ms have passed; then the error says how long it waited and what to raise.
  ClientSession(const std::string& host, int port, const std::string& token, int timeout_ms);
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;
  const std::string& server_description() const { return description_; }
  // The control connection; throws PeerClosed once closed or dropped.
  ControlChannel& wire();
  // Runs fn(control wire). An error that leaves the stream position unknown (protocol, timeout,
  // transport) drops the connection, so the next call fails fast instead of reading garbage.
  template <class Fn>
  auto guarded(Fn&& fn) -> decltype(fn(std::declval<ControlChannel&>()));
  // Sends BYE (best effort) and closes; idempotent.
  void close();

 private:
  void handshake(const std::string& host, int port, const std::string& token, int timeout_ms);
  std::unique_ptr<ControlChannel> wire_;
  std::string description_;
};

template <class Fn>
auto ClientSession::guarded(Fn&& fn) -> decltype(fn(std::declval<ControlChannel&>())) {
  ControlChannel& w = wire();
  try {
    return fn(w);
  } catch (const Error& e) {
    if (!keeps_session(e.kind)) wire_.reset();
    throw;
  } catch (...) {
    wire_.reset();
    throw;
  }
}

// Serves one request frame of a wire (tcp: SETUP, verbs: CONNECT) on the control connection;
// a test it refuses without ending the session goes to `refused` (see build_or_refuse).
using RequestHandler =
    std::function<void(ControlChannel& control, const std::vector<uint8_t>& body, const RefusalLog& refused)>;

// What a server allows; ServerLimits{} is what `gdrlab serve` uses without flags, except the
// memory budget (0: none), whose default the command line computes from the machine. The server
// lowers the counts that do not fit this process's limits (threads, descriptors) and says so in
// limit_notes().
struct ServerLimits {
  int max_clients = 64;             // authenticated sessions at once; more are told "server busy"
  int max_handshakes = 512;         // connections not yet authenticated; a new one past this
                                    // closes the oldest, telling it "server busy" (see wire/gate.h)
  int max_handshakes_per_host = 128;  // ... of them from one address
  int max_closing = 1024;           // answered connections draining before they close
  int handshake_ms = 5000;          // HELLO must arrive complete within this
  int idle_ms = 60 * 1000;          // an authenticated session idle this long between tests is closed
  int device = 0;                   // the GPU every GPU test of this server uses, whatever a client asks
  uint64_t max_host_bytes = 0;      // --max-pinned
  uint64_t max_gpu_bytes = 0;       // --max-gpu-mem
  int log_interval_ms = 10 * 1000;  // repeated refusals from one address: one log line per interval;
                                    // authenticated sessions' lines: a few of each kind per interval
  bool slow_guessing = true;        // refused tokens slow their source's next check (wire/gate.h);
                                    // only the fuzz target, which sends thousands, turns it off
  int test_ms = 600 * 1000;         // one test's control-connection traffic (SETUP to VERDICT) must
                                    // end within this: a client trickling a DATA frame cannot hold a
                                    // place and its budget for longer (--max-test-seconds)
};

// Lowers the counts in *lim that this process cannot hold (RLIMIT_NOFILE, which it first tries to
// raise to its hard limit; RLIMIT_NPROC, the cgroup's pids.max and RLIMIT_AS for session threads);
// one line per change, naming the limit.
std::vector<std::string> fit_limits_to_process(ServerLimits* lim);

class Server : private GateOwner {
 public:
  // A non-loopback address without a token is refused: anyone could otherwise use this host's
  // GPU memory and bandwidth.
  Server(const std::string& host, int port, const std::string& token, int timeout_ms,
         const ServerLimits& limits = ServerLimits{});
  // Stops: shuts down every session's connection and waits for its thread.
  ~Server();
  // Starts stopping: no session is admitted any more, every session's connection is shut down;
  // waits up to wait_ms for their threads (each writes its last log line first). Returns the
  // session threads still running. The destructor then waits for the rest.
  int stop(int wait_ms);
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Requests of type `request` go to `handler`; a session's other frames are BYE or an error.
  // Add wires before serving.
  void add_wire(FrameType request, RequestHandler handler);
  int port() const { return listener_.port(); }
  // Waits up to accept_ms for one client and serves it in this thread until BYE or an error.
  // Returns false if no client came; errors of that client are returned in *error.
  bool serve_one(int accept_ms, std::string* error);
  // Accepts clients for up to ms: handshakes on this thread (wire/gate.h), each authenticated
  // session on a thread of its own (at most max_clients); returns early never. Sessions outlive
  // the call. One thread at a time may call it.
  void serve_for(int ms);
  // Log lines since the last call, each one line of printable ASCII naming the client's address.
  // Authenticated sessions' lines ("connected", "done", "ended with <error class>", "refused
  // <error class>" for a test refused while the session goes on) are kept to a few of each kind
  // per address and interval; the lines left out are counted in one summary line
  // per kind once its interval is over, or at once with final (the server is stopping).
  std::vector<std::string> take_log(bool final = false);
  uint64_t clients_served() const;
  int active_sessions() const;
  // Observable state, for operators and for tests that wait on it instead of on time.
  int handshakes_in_progress() const { return gate_.pending(); }
  int closing_connections() const { return gate_.closing(); }
  int session_threads() const;       // session threads alive (a session's last log line is written before its thread ends)
  uint64_t busy_refusals() const;    // connections told "server busy" (evictions included)
  const ServerLimits& limits() const { return limits_; }
  const std::vector<std::string>& limit_notes() const { return limit_notes_; }
  // The memory budget every wire reserves from before allocating (verbs: reserve its buffers
  // here too). Throws Error(Unavailable) naming the flag when a request does not fit.
  MemoryBudget& budget() { return budget_; }

 private:
  struct AddrState;
  // GateOwner: what the gate asks about a connection's first frame.
  Admission admit(const std::string& addr, const FrameHeader& hdr, const std::vector<uint8_t>& body) override;
  std::vector<uint8_t> start(std::unique_ptr<Socket>* s, const std::string& addr) override;
  void refused(const std::string& addr, const Error& why) override;
  void note(const std::string& line) override { log(line); }
  int check_wait_ms(const std::string& addr, std::string* reason) override;
  // serve_one's client: the whole session on the calling thread.
  void authenticate(ControlChannel& wire);
  void run_session(Socket* raw, std::string addr);
  void session_loop(ControlChannel& wire, const std::string& addr, bool counted);
  void log(const std::string& line);
  // A line of an authenticated session, of a kind ("connected", "ended with Protocol"): logged
  // unless this address already logged kSessionLinesPerKind of that kind this interval.
  void session_log(const std::string& addr, const std::string& kind, const std::string& line);
  void summaries(bool final, std::vector<std::string>* out);  // mu_ held
  void summary_line(std::string line, uint64_t n, std::vector<std::string>* out);  // mu_ held
  void note_failure(const std::string& addr);  // a refused token: its source's next check waits
  bool log_allowed(const std::string& addr, uint64_t* suppressed);
  AddrState& addr_state(const std::string& addr);

  Listener listener_;
  std::string token_;
  int timeout_ms_;
  ServerLimits limits_;
  std::vector<std::string> limit_notes_;
  MemoryBudget budget_;
  Gate gate_;
  std::atomic<bool> serving_{false};
  std::vector<std::pair<FrameType, RequestHandler>> handlers_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  uint64_t served_ = 0;
  int threads_ = 0;      // session threads alive
  int sessions_ = 0;     // authenticated sessions
  uint64_t busy_ = 0;    // told "server busy" after authenticating (--max-clients, no thread)
  std::set<Socket*> open_;
  struct LineKind {  // one kind of session line from one address
    std::chrono::steady_clock::time_point since{};  // start of its current interval
    int lines = 0;                                  // logged in that interval
    uint64_t left_out = 0;                          // not logged, not yet summarised
  };
  struct AddrState {  // one source (wire/gate.h rate_key)
    bool seen = false, logged = false;
    int failures = 0;
    std::chrono::steady_clock::time_point last_failure{}, last_log{}, last_used{};
    std::chrono::steady_clock::time_point next_check{};  // its next token check, not before
    uint64_t suppressed = 0;
    std::map<std::string, LineKind> kinds;  // a few fixed names, bounded
  };
  std::map<std::string, AddrState> addrs_;
  std::chrono::steady_clock::time_point refusal_window_{};
  int refusal_lines_ = 0;
  std::chrono::steady_clock::time_point session_window_{};  // session lines of all sources together
  int session_lines_ = 0;
  uint64_t session_left_out_ = 0;
  std::chrono::steady_clock::time_point summary_window_{};  // per-source summary lines, all sources together
  int summary_lines_ = 0;
  uint64_t pooled_lines_ = 0, pooled_sources_ = 0;  // summaries past kMaxSummaryLines, said as one line
  std::chrono::steady_clock::time_point pooled_since_{};
  double check_tokens_ = 0;  // refused tokens the server may still answer at once, all sources together
  std::chrono::steady_clock::time_point check_refill_{};
  std::deque<std::string> log_;
  uint64_t log_dropped_ = 0;
  std::chrono::steady_clock::time_point thread_log_{};
  uint64_t thread_left_out_ = 0;
};

// Peer text as one printable ASCII line for a log or terminal: control characters, newlines,
// escape codes and non-ASCII bytes become \xNN; cut at max_chars with the original length noted.
std::string escape_text(const std::string& text, size_t max_chars = 200);

// Throws InvalidArgument for a non-positive timeout or an over-long token.
void check_session_limits(const std::string& token, int timeout_ms);

// Constant-time comparison for tokens.
bool tokens_equal(const std::string& a, const std::string& b);

}  // namespace gdrlab
