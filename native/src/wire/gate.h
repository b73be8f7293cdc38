// The front of the concurrent server: connections that have not authenticated yet. The accepting
// thread serves all of them itself with poll(), so an unauthenticated peer costs one descriptor
// and at most a few KiB, never a thread; only an authenticated session gets a thread.
//
// - Places: at most max_pending connections read their first frame at once, and at most
//   max_pending_per_host from one address. When a new connection finds its places taken, the
//   oldest connection there (of its address, or of all) is answered "server busy" and let go:
//   an honest handshake takes milliseconds, so the oldest is almost always a slow or hostile one.
// - Answers before authentication (REJECT, ERROR, "server busy") are sent without blocking, then
//   the write side is shut and what the peer still sends is read and dropped until it closes or
//   linger_ms pass, so no reset destroys the answer on its way to the peer.
// - Token checks: after a refused token, the next HELLO from the same source (rate_key: one
//   address; all of 127.0.0.0/8; an IPv6 /64) waits here, unchecked, until the owner allows its
//   check (check_wait_ms), holding its place but no thread. A right token waits as long as a wrong
//   one: a guesser cannot tell the answer by how soon it comes, so parallel or rotating guessers
//   get no more answers than one guesser. A connection that would wait past check_wait_limit_ms is
//   told "server busy" without its token being looked at.
// - Out of descriptors: a spare descriptor is given up to accept one waiting connection and tell
//   it "server busy", so a client hears why instead of timing out.
// - At most max_closing answered sockets linger; past that the one answered longest ago is closed.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "wire/frame.h"
#include "wire/socket.h"

namespace gdrlab {

constexpr uint32_t kMaxPreAuthBytes = 4096;  // a HELLO or ERROR frame read before authentication

struct GateLimits {
  int max_pending = 512;          // connections reading their first frame at once
  int max_pending_per_host = 128; // ... from one address
  int handshake_ms = 5000;        // the first frame must arrive complete within this
  int max_closing = 1024;         // answered (or waiting to be) sockets lingering at once
  int linger_ms = 1000;           // how long an answered socket is drained before it is closed
  int io_timeout_ms = 10000;      // the sockets' per-call timeout once a session takes them
  int log_interval_ms = 10000;    // the gate's own lines (evictions, a full closing list): one per interval
  int check_wait_limit_ms = 8000; // a HELLO waits at most this long for its token check
};

// What the server decides about a connection's first frame.
struct Admission {
  enum class Kind { Start, Answer, Close } kind = Kind::Close;
  std::vector<uint8_t> frame;  // Answer: the whole frame to send
};

// The server behind the gate.
class GateOwner {
 public:
  virtual ~GateOwner() = default;
  // A complete, validated first frame (HELLO or ERROR, at most kMaxPreAuthBytes) from addr.
  virtual Admission admit(const std::string& addr, const FrameHeader& hdr, const std::vector<uint8_t>& body) = 0;
  // admit said Start: the socket (blocking again, its first frame read) is the owner's now. If
  // the owner cannot take it (no thread), it leaves *s as it is and returns the frame to answer.
  virtual std::vector<uint8_t> start(std::unique_ptr<Socket>* s, const std::string& addr) = 0;
  // A connection refused before authentication for a reason of its own (bad frame, timeout,
  // closed, the peer's ERROR): the owner logs it.
  virtual void refused(const std::string& addr, const Error& why) = 0;
  // One of the gate's own lines (already rate-limited): log it.
  virtual void note(const std::string& line) = 0;
  // How long a complete first frame from addr waits before admit() may look at it (0: now);
  // reason: why, for the "server busy" answer of a connection that cannot wait that long.
  virtual int check_wait_ms(const std::string& addr, std::string* reason) = 0;
};

// "192.0.2.7:51234" -> "192.0.2.7" (also IPv6): log lines name the host.
std::string host_of(const std::string& addr);
// The source that places, refused tokens and log limits are counted for: the host, except that
// every loopback address (127.0.0.0/8, ::1) is one source and an IPv6 address counts by its /64
// (a peer can pick any address of its own /64, or of 127/8 on this machine). An IPv4-mapped
// IPv6 address counts as its IPv4 address.
std::string rate_key(const std::string& host);

// "server busy: ..." ERROR frame before authentication (sequence 0).
std::vector<uint8_t> busy_frame(const std::string& text);
// Throws Error(Protocol) unless h may start a connection: a valid header (sequence 0) of a HELLO
// or ERROR of at most kMaxPreAuthBytes. Its body is read only after this.
void check_preauth_header(const FrameHeader& h);

class Gate {
 public:
  Gate(Listener& listener, GateOwner& owner, const GateLimits& limits);
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  // One round: waits up to wait_ms for the listener or any gate socket, then accepts, reads and
  // answers what is ready. Returns early when something happened.
  void round(int wait_ms);
  // Counts as of the last round; safe to read from any thread.
  int pending() const { return pending_count_; }
  int closing() const { return closing_count_; }
  uint64_t evicted() const { return evicted_; }
  const GateLimits& limits() const { return limits_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::unique_ptr<Socket> sock;
    std::string addr, host;
    Clock::time_point deadline;
    uint8_t hdr[kHeaderBytes] = {};
    size_t hdr_got = 0;
    bool have_header = false;
    FrameHeader header;
    std::vector<uint8_t> body;
    size_t body_got = 0;
    bool waiting = false;            // complete, waiting for its token check
    Clock::time_point check_at{};    // ... until then
    Clock::time_point wait_until{};  // ... at most until then
  };
  struct Closing {
    std::unique_ptr<Socket> sock;
    Clock::time_point until;  // answered: closed by then
  };
  using PendingIt = std::list<Pending>::iterator;
  using ClosingIt = std::list<Closing>::iterator;

  void accept_new();
  void refuse_for_lack_of_descriptors();
  void evict(PendingIt it, const std::string& why);
  // Reads what is there; true when the connection left the pending list.
  bool read_pending(PendingIt it);
  void finish_pending(PendingIt it);  // its first frame is complete
  void refuse(PendingIt it, const Error& why, bool answer);
  void drop_pending(PendingIt it);
  void add_closing(std::unique_ptr<Socket> s, std::vector<uint8_t> frame);
  void send_answer(Closing& c, const std::vector<uint8_t>& frame);
  void service_closing(ClosingIt it, short revents, Clock::time_point now);
  bool say(Clock::time_point* last, uint64_t* left_out);

  Listener& listener_;
  GateOwner& owner_;
  GateLimits limits_;
  std::list<Pending> pending_;      // oldest first
  std::map<std::string, int> per_host_;
  std::list<Closing> closing_;
  std::atomic<int> pending_count_{0}, closing_count_{0};
  std::atomic<uint64_t> evicted_{0};
  Clock::time_point accept_pause_{};  // accept failed: the listener rests until then
  int spare_fd_ = -1;                 // given up to answer "server busy" when out of descriptors
  Clock::time_point evict_log_{}, closing_log_{}, accept_log_{};
  uint64_t evict_left_out_ = 0, closing_left_out_ = 0, accept_left_out_ = 0;
};

}  // namespace gdrlab
