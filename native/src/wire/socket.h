// TCP sockets with a timeout on every blocking call. Blocking sockets with SO_RCVTIMEO and
// SO_SNDTIMEO keep the hot path at one system call per send or receive; a timeout becomes
// Error(PeerTimeout), an orderly close or reset becomes Error(PeerClosed).
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace gdrlab {

class Socket {
 public:
  explicit Socket(int fd, int timeout_ms);
  ~Socket();
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  static std::unique_ptr<Socket> connect(const std::string& host, int port, int timeout_ms);

  using Clock = std::chrono::steady_clock;
  // Now, to within a clock tick (CLOCK_MONOTONIC_COARSE, the steady clock's own base): about 5 ns
  // against about 25 for Clock::now(), for deadlines, which need milliseconds, on the hot path.
  static Clock::time_point coarse_now();

  void set_timeout(int timeout_ms);
  int timeout_ms() const { return timeout_ms_; }
  // Until cleared, every receive must finish before now + ms in total, however the peer trickles
  // its bytes (a per-call timeout alone lets one byte per timeout hold the server forever). A
  // receive past the deadline throws Error(PeerTimeout) whose text starts with kDeadlineText.
  // Setting a deadline costs no system call: the receive timeout is shortened only when a blocking
  // receive starts with less than about 7/8 of it left before the deadline (so a receive ends at
  // most timeout/8 past the deadline), and set back once a later deadline allows it.
  void set_deadline_ms(int ms);
  void set_deadline(Clock::time_point at);
  void clear_deadline();
  static constexpr const char* kDeadlineText = "deadline passed";
  // After a receive ended by its deadline: the bytes that call still expected.
  size_t missing_at_deadline() const { return missing_; }
  void send_all(const void* p, size_t n);
  // Sends a then b with one sendmsg where possible (header and payload in one segment).
  void send_two(const void* a, size_t na, const void* b, size_t nb);
  void recv_all(void* p, size_t n);
  void shutdown_both();
  // Non-blocking mode, for the server's handshake stage (its reads go through the fd with poll);
  // a session thread sets the socket back to blocking before it takes it over.
  void set_nonblocking(bool on);
  int fd() const { return fd_; }
  std::string peer_name() const;

 private:
  // Before a blocking receive under a deadline: throws if it has passed, shortens (or restores)
  // SO_RCVTIMEO when the per-call timeout would overrun it by more than the slack.
  void arm_for_deadline(size_t missing);
  [[noreturn]] void throw_deadline(size_t missing);
  void set_recv_timeout(int ms);

  int fd_;
  int timeout_ms_;
  int recv_armed_ms_;  // SO_RCVTIMEO as set now
  bool has_deadline_ = false;
  Clock::time_point deadline_{};
  size_t missing_ = 0;
};

class Listener {
 public:
  // Binds host:port (port 0 picks a free one). A port in use gives Error(System, EADDRINUSE).
  Listener(const std::string& host, int port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  int port() const { return port_; }
  const std::string& host() const { return host_; }
  bool is_loopback() const { return loopback_; }
  // Waits up to wait_ms for a connection; nullptr if none came.
  std::unique_ptr<Socket> accept(int wait_ms, int io_timeout_ms);
  // A connection already waiting, as a non-blocking socket; nullptr if none is (never waits).
  std::unique_ptr<Socket> accept_waiting(int io_timeout_ms);
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::string host_;
  bool loopback_ = false;
};

}  // namespace gdrlab
