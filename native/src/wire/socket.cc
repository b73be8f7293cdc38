#include "wire/socket.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

namespace gdrlab {
namespace {

[[noreturn]] void throw_io(const char* call, int err, int timeout_ms) {
  if (err == EAGAIN || err == EWOULDBLOCK || err == ETIMEDOUT)
    throw Error(ErrorKind::PeerTimeout, "tcp", call, 0,
                "peer did not answer within " + std::to_string(timeout_ms) + " ms");
  if (err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED)
    throw Error(ErrorKind::PeerClosed, "tcp", call, err,
                std::string("connection to the peer was lost: ") + std::strerror(err));
  throw Error(ErrorKind::System, "tcp", call, err, std::strerror(err));
}

void set_timeouts(int fd, int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

Socket::Socket(int fd, int timeout_ms) : fd_(fd), timeout_ms_(timeout_ms), recv_armed_ms_(timeout_ms) {
  tune(fd_);
  set_timeouts(fd_, timeout_ms_);
}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

void Socket::set_timeout(int timeout_ms) {
  timeout_ms_ = timeout_ms;
  recv_armed_ms_ = timeout_ms;
  set_timeouts(fd_, timeout_ms);
}

void Socket::set_deadline_ms(int ms) { set_deadline(Clock::now() + std::chrono::milliseconds(ms)); }

void Socket::set_deadline(Clock::time_point at) {
  has_deadline_ = true;
  deadline_ = at;
}

void Socket::clear_deadline() {
  has_deadline_ = false;
  if (recv_armed_ms_ != timeout_ms_) set_recv_timeout(timeout_ms_);
}

void Socket::set_recv_timeout(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  recv_armed_ms_ = ms;
}

void Socket::throw_deadline(size_t missing) {
  missing_ = missing;
  throw Error(ErrorKind::PeerTimeout, "tcp", "recv", 0,
              std::string(kDeadlineText) + " with " + std::to_string(missing) + " bytes still expected");
}

Socket::Clock::time_point Socket::coarse_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                     std::chrono::nanoseconds(ts.tv_nsec)));
}

void Socket::arm_for_deadline(size_t missing) {
  const long long left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - coarse_now()).count();
  if (left <= 0) throw_deadline(missing);
  const int want = static_cast<int>(std::min<long long>(left, timeout_ms_));
  // Most receives start with nearly all of the time left: no system call for those.
  if (want > recv_armed_ms_ || want < recv_armed_ms_ - recv_armed_ms_ / 8 - 1) set_recv_timeout(want);
}

void Socket::shutdown_both() { ::shutdown(fd_, SHUT_RDWR); }

void Socket::set_nonblocking(bool on) {
  int fl = fcntl(fd_, F_GETFL, 0);
  fcntl(fd_, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

std::string Socket::peer_name() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return std::string(host) + ":" + serv;
}

std::unique_ptr<Socket> Socket::connect(const std::string& host, int port, int timeout_ms) {
  if (port <= 0 || port > 65535) throw_invalid("port " + std::to_string(port) + " is out of range 1-65535");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0)
    throw Error(ErrorKind::System, "tcp", "getaddrinfo", rc, "cannot resolve '" + host + "': " + gai_strerror(rc));
  int last_err = ECONNREFUSED;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) { last_err = errno; continue; }
    int fl = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      int pr;
      do { pr = poll(&pfd, 1, timeout_ms); } while (pr < 0 && errno == EINTR);
      if (pr == 0) { ::close(fd); last_err = ETIMEDOUT; continue; }
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
      r = soerr ? -1 : 0;
      errno = soerr;
    }
    if (r != 0) { last_err = errno; ::close(fd); continue; }
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    freeaddrinfo(res);
    return std::make_unique<Socket>(fd, timeout_ms);
  }
  freeaddrinfo(res);
  std::string where = host + ":" + std::to_string(port);
  if (last_err == ETIMEDOUT)
    throw Error(ErrorKind::PeerTimeout, "tcp", "connect", 0,
                "no answer from " + where + " within " + std::to_string(timeout_ms) + " ms");
  throw Error(ErrorKind::PeerClosed, "tcp", "connect", last_err,
              "cannot connect to " + where + ": " + std::strerror(last_err));
}

void Socket::send_all(const void* p, size_t n) { send_two(p, n, nullptr, 0); }

void Socket::send_two(const void* a, size_t na, const void* b, size_t nb) {
  iovec iov[2] = {{const_cast<void*>(a), na}, {const_cast<void*>(b), nb}};
  int idx = 0;
  int cnt = nb ? 2 : 1;
  while (idx < cnt) {
    msghdr mh{};
    mh.msg_iov = iov + idx;
    mh.msg_iovlen = cnt - idx;
    ssize_t s = ::sendmsg(fd_, &mh, MSG_NOSIGNAL);
    if (s < 0) {
      if (errno == EINTR) continue;
      throw_io("send", errno, timeout_ms_);
    }
    size_t left = static_cast<size_t>(s);
    while (idx < cnt && left >= iov[idx].iov_len) { left -= iov[idx].iov_len; ++idx; }
    if (idx < cnt) {
      iov[idx].iov_base = static_cast<char*>(iov[idx].iov_base) + left;
      iov[idx].iov_len -= left;
    }
  }
}

// Before blocking, poll the socket without sleeping for a few microseconds: waking a sleeping
// thread costs tens of microseconds on virtual machines, which would swamp a 4 us round trip.
// perftest and OSU poll for the same reason. GDRLAB_SPIN_US sets the budget (0 disables).
static int spin_budget_us() {
  static const int us = [] {
    const char* e = std::getenv("GDRLAB_SPIN_US");
    int v = e ? std::atoi(e) : 50;
    return v < 0 ? 0 : (v > 100000 ? 100000 : v);
  }();
  return us;
}

void Socket::recv_all(void* p, size_t n) {
  char* c = static_cast<char*>(p);
  const int spin_us = spin_budget_us();
  auto spin_end = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  while (n > 0) {
    ssize_t r;
    if (spin_us > 0 && std::chrono::steady_clock::now() < spin_end) {
      r = ::recv(fd_, c, n, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    } else {
      if (has_deadline_) arm_for_deadline(n);
      r = ::recv(fd_, c, n, 0);
    }
    if (r == 0)
      throw Error(ErrorKind::PeerClosed, "tcp", "recv", 0,
                  "peer closed the connection with " + std::to_string(n) + " bytes still expected");
    if (r < 0) {
      if (errno == EINTR) continue;
      // A receive timeout shortened for the deadline ran out: the deadline, not the peer's pause.
      if (has_deadline_ && (errno == EAGAIN || errno == EWOULDBLOCK) && recv_armed_ms_ < timeout_ms_)
        throw_deadline(n);
      throw_io("recv", errno, timeout_ms_);
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
}

Listener::Listener(const std::string& host, int port) : host_(host) {
  if (port < 0 || port > 65535) throw_invalid("port " + std::to_string(port) + " is out of range 0-65535");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0)
    throw Error(ErrorKind::System, "tcp", "getaddrinfo", rc, "cannot resolve '" + host + "': " + gai_strerror(rc));
  int err = 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) { err = errno; continue; }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      err = errno;
      ::close(fd);
      continue;
    }
    fd_ = fd;
    // Non-blocking: a connection that went away between poll and accept must not block accept.
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL, 0) | O_NONBLOCK);
    if (ai->ai_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
      loopback_ = (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
    } else if (ai->ai_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      loopback_ = IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr);
    }
    break;
  }
  freeaddrinfo(res);
  if (fd_ < 0) {
    std::string where = host + ":" + std::to_string(port);
    if (err == EADDRINUSE)
      throw Error(ErrorKind::System, "tcp", "bind", err, "port already in use: " + where);
    throw Error(ErrorKind::System, "tcp", "bind", err, "cannot listen on " + where + ": " + std::strerror(err));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

std::unique_ptr<Socket> Listener::accept(int wait_ms, int io_timeout_ms) {
  pollfd pfd{fd_, POLLIN, 0};
  int pr;
  do { pr = poll(&pfd, 1, wait_ms); } while (pr < 0 && errno == EINTR);
  if (pr <= 0) return nullptr;
  int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) return nullptr;
    throw_system("accept", errno);
  }
  return std::make_unique<Socket>(fd, io_timeout_ms);
}

std::unique_ptr<Socket> Listener::accept_waiting(int io_timeout_ms) {
  int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) return nullptr;
    throw_system("accept", errno);
  }
  return std::make_unique<Socket>(fd, io_timeout_ms);
}

}  // namespace gdrlab
