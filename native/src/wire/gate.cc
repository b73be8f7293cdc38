#include "wire/gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstring>

namespace gdrlab {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kAcceptsPerRound = 64;       // then the sockets already waiting get their turn
constexpr int kAcceptPauseMs = 100;        // after accept failed (out of descriptors): try again then
constexpr size_t kDrainBytesPerRound = 16 * 1024;

int ms_until(Clock::time_point t, Clock::time_point now) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count();
  return d <= 0 ? 0 : (d > 1 << 30 ? 1 << 30 : static_cast<int>(d));
}

// Saturates: a time point never set (the clock's epoch, the machine's boot) is as long ago as
// INT_MAX ms, never a wrapped negative count once the machine has been up 25 days.
int ms_since(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  return static_cast<int>(std::clamp<long long>(ms, INT_MIN, INT_MAX));
}

std::string more(uint64_t n) { return n ? " (" + std::to_string(n) + " more since the last line)" : ""; }

}  // namespace

std::string host_of(const std::string& addr) {
  size_t colon = addr.rfind(':');
  return colon == std::string::npos ? addr : addr.substr(0, colon);
}

std::string rate_key(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    if ((ntohl(v4.s_addr) >> 24) == 127) return "127.0.0.0/8";
    return host;
  }
  if (::inet_pton(AF_INET6, host.c_str(), &v6) != 1) return host;  // a name (tests): as it is
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return "127.0.0.0/8";             // one machine, one source
  if (IN6_IS_ADDR_V4MAPPED(&v6)) {
    char buf[INET_ADDRSTRLEN];
    std::memcpy(&v4.s_addr, v6.s6_addr + 12, 4);
    return rate_key(::inet_ntop(AF_INET, &v4, buf, sizeof buf) ? std::string(buf) : host);
  }
  in6_addr prefix{};
  std::memcpy(prefix.s6_addr, v6.s6_addr, 8);
  char buf[INET6_ADDRSTRLEN];
  if (!::inet_ntop(AF_INET6, &prefix, buf, sizeof buf)) return host;
  return std::string(buf) + "/64";
}

std::vector<uint8_t> busy_frame(const std::string& text) {
  return encode_frame(FrameType::Error, encode_error(Error(ErrorKind::Unavailable, "", "", 0, text)));
}

void check_preauth_header(const FrameHeader& h) {
  validate_header(h, 0);
  if (h.type != static_cast<uint16_t>(FrameType::Hello) && h.type != static_cast<uint16_t>(FrameType::Error))
    throw_protocol(std::string("expected HELLO, got ") + frame_type_name(h.type));
  if (h.length > kMaxPreAuthBytes)
    throw_protocol(std::string("a ") + frame_type_name(h.type) + " frame of " + std::to_string(h.length) +
                   " bytes before authentication (at most " + std::to_string(kMaxPreAuthBytes) + ")");
}

Gate::Gate(Listener& listener, GateOwner& owner, const GateLimits& limits)
    : listener_(listener), owner_(owner), limits_(limits), spare_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

Gate::~Gate() {  // every socket still here closes with its list
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

bool Gate::say(Clock::time_point* last, uint64_t* left_out) {
  if (last->time_since_epoch().count() && ms_since(*last) < limits_.log_interval_ms) {
    ++*left_out;
    return false;
  }
  *last = Clock::now();
  return true;
}

void Gate::round(int wait_ms) {
  Clock::time_point now = Clock::now();
  int timeout = std::max(0, wait_ms);
  for (const Pending& p : pending_) timeout = std::min(timeout, ms_until(p.waiting ? p.check_at : p.deadline, now));
  for (const Closing& c : closing_) timeout = std::min(timeout, ms_until(c.until, now));
  const bool listen = now >= accept_pause_;
  if (!listen) timeout = std::min(timeout, ms_until(accept_pause_, now));

  std::vector<pollfd> fds;
  fds.reserve(1 + pending_.size() + closing_.size());
  fds.push_back(pollfd{listen ? listener_.fd() : -1, POLLIN, 0});
  std::vector<PendingIt> pend;
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    pend.push_back(it);
    // A connection waiting for its token check has sent all it may send before an answer.
    fds.push_back(pollfd{it->waiting ? -1 : it->sock->fd(), POLLIN, 0});
  }
  std::vector<ClosingIt> clos;
  for (auto it = closing_.begin(); it != closing_.end(); ++it) {
    clos.push_back(it);
    fds.push_back(pollfd{it->sock->fd(), POLLIN, 0});
  }
  int pr = ::poll(fds.data(), fds.size(), timeout);
  if (pr < 0) {
    if (errno != EINTR) throw_system("poll", errno);
    for (pollfd& f : fds) f.revents = 0;
  }
  now = Clock::now();
  // Closing sockets first: answering a pending connection may make room in that list, which
  // would leave these iterators dangling.
  for (size_t i = 0; i < clos.size(); ++i) service_closing(clos[i], fds[1 + pend.size() + i].revents, now);
  for (size_t i = 0; i < pend.size(); ++i) {
    if (pend[i]->waiting) {  // oldest first: the first of a source to arrive is checked first
      if (pend[i]->check_at <= now) finish_pending(pend[i]);
      continue;
    }
    const short ev = fds[1 + i].revents;
    if (ev & (POLLIN | POLLHUP | POLLERR)) {
      if (read_pending(pend[i])) continue;
    }
    if (pend[i]->deadline <= now)
      refuse(pend[i],
             Error(ErrorKind::PeerTimeout, "gdrlab", "handshake", 0,
                   "no complete HELLO within " + std::to_string(limits_.handshake_ms) + " ms"),
             true);
  }
  if (listen && (fds[0].revents & POLLIN)) accept_new();
  pending_count_ = static_cast<int>(pending_.size());
  closing_count_ = static_cast<int>(closing_.size());
}

void Gate::accept_new() {
  for (int i = 0; i < kAcceptsPerRound; ++i) {
    std::unique_ptr<Socket> s;
    try {
      s = listener_.accept_waiting(limits_.io_timeout_ms);
    } catch (const Error& e) {  // out of descriptors or memory: the listener itself is fine
      accept_pause_ = Clock::now() + std::chrono::milliseconds(kAcceptPauseMs);
      if (e.code == EMFILE || e.code == ENFILE) refuse_for_lack_of_descriptors();
      if (say(&accept_log_, &accept_left_out_)) {
        owner_.note(std::string("accept failed, retrying: ") + e.what() + more(accept_left_out_));
        accept_left_out_ = 0;
      }
      return;
    }
    if (!s) return;
    const std::string addr = s->peer_name();
    const std::string host = rate_key(host_of(addr));
    if (static_cast<int>(pending_.size()) >= limits_.max_pending) {
      evict(pending_.begin(), "server busy: all " + std::to_string(limits_.max_pending) +
                                  " handshake places taken (--max-handshakes " +
                                  std::to_string(limits_.max_pending) + ")");
    } else if (per_host_[host] >= limits_.max_pending_per_host) {
      auto oldest = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.host == host; });
      evict(oldest, "server busy: all " + std::to_string(limits_.max_pending_per_host) +
                        " handshake places of address " + host + " taken");
    }
    Pending p;
    p.sock = std::move(s);
    p.addr = addr;
    p.host = host;
    p.deadline = Clock::now() + std::chrono::milliseconds(limits_.handshake_ms);
    pending_.push_back(std::move(p));
    ++per_host_[host];
  }
}

// Out of descriptors: the spare one is given up for as long as it takes to tell one waiting
// connection "server busy" (it is closed at once: no descriptor to linger with).
void Gate::refuse_for_lack_of_descriptors() {
  if (spare_fd_ < 0) return;
  ::close(spare_fd_);
  spare_fd_ = -1;
  const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0) {
    const std::vector<uint8_t> f = busy_frame("server busy: the server is out of file descriptors (too many "
                                              "connections at once); try again shortly");
    (void)::send(fd, f.data(), f.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
    ++evicted_;
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void Gate::evict(PendingIt it, const std::string& why) {
  ++evicted_;
  if (say(&evict_log_, &evict_left_out_)) {
    const int age_ms = limits_.handshake_ms - ms_until(it->deadline, Clock::now());
    owner_.note(why.substr(std::strlen("server busy: ")) + ": told the oldest unauthenticated connection, from " +
                it->addr + " (" + std::to_string(age_ms) + " ms old), 'server busy'" + more(evict_left_out_));
    evict_left_out_ = 0;
  }
  std::unique_ptr<Socket> s = std::move(it->sock);
  drop_pending(it);
  add_closing(std::move(s), busy_frame(why));
}

void Gate::drop_pending(PendingIt it) {
  auto h = per_host_.find(it->host);
  if (h != per_host_.end() && --h->second <= 0) per_host_.erase(h);
  pending_.erase(it);
}

bool Gate::read_pending(PendingIt it) {
  Pending& p = *it;
  for (;;) {
    uint8_t* dst;
    size_t want;
    if (!p.have_header) {
      dst = p.hdr + p.hdr_got;
      want = kHeaderBytes - p.hdr_got;
    } else {
      dst = p.body.data() + p.body_got;
      want = p.body.size() - p.body_got;
    }
    ssize_t r = ::recv(p.sock->fd(), dst, want, MSG_DONTWAIT);
    if (r == 0) {
      const size_t expected = p.have_header ? p.body.size() - p.body_got : kHeaderBytes - p.hdr_got;
      refuse(it,
             Error(ErrorKind::PeerClosed, "tcp", "recv", 0,
                   "peer closed the connection with " + std::to_string(expected) + " bytes still expected"),
             false);
      return true;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      const int err = errno;
      refuse(it, Error(ErrorKind::PeerClosed, "tcp", "recv", err,
                       std::string("connection to the peer was lost: ") + std::strerror(err)),
             false);
      return true;
    }
    if (!p.have_header) {
      p.hdr_got += static_cast<size_t>(r);
      if (p.hdr_got < kHeaderBytes) continue;
      p.header = decode_header(p.hdr);
      try {
        check_preauth_header(p.header);
      } catch (const Error& e) {
        refuse(it, e, true);
        return true;
      }
      p.have_header = true;
      p.body.resize(p.header.length);
    } else {
      p.body_got += static_cast<size_t>(r);
    }
    if (p.have_header && p.body_got == p.body.size()) {
      finish_pending(it);
      return true;
    }
  }
}

void Gate::finish_pending(PendingIt it) {
  // The token is not looked at before the owner allows it (wire/gate.h: token checks).
  std::string reason;
  const int wait = owner_.check_wait_ms(it->addr, &reason);
  if (wait > 0) {
    const Clock::time_point now = Clock::now();
    if (!it->waiting) {
      it->waiting = true;
      it->wait_until = now + std::chrono::milliseconds(limits_.check_wait_limit_ms);
    }
    it->check_at = now + std::chrono::milliseconds(wait);
    if (it->check_at > it->wait_until) {
      ++evicted_;
      std::unique_ptr<Socket> s = std::move(it->sock);
      drop_pending(it);
      add_closing(std::move(s), busy_frame("server busy: " + reason));
    }
    return;
  }
  Admission a;
  try {
    a = owner_.admit(it->addr, it->header, it->body);
  } catch (const Error& e) {
    refuse(it, e, true);
    return;
  }
  const std::string addr = it->addr;
  std::unique_ptr<Socket> s = std::move(it->sock);
  drop_pending(it);
  switch (a.kind) {
    case Admission::Kind::Start: {
      s->set_nonblocking(false);
      std::vector<uint8_t> answer = owner_.start(&s, addr);
      if (s) add_closing(std::move(s), std::move(answer));  // no thread for it: told so
      break;
    }
    case Admission::Kind::Answer:
      add_closing(std::move(s), std::move(a.frame));
      break;
    case Admission::Kind::Close:
      break;  // its whole frame was read: closing sends a FIN, not a reset
  }
}

void Gate::refuse(PendingIt it, const Error& why, bool answer) {
  owner_.refused(it->addr, why);
  std::unique_ptr<Socket> s = std::move(it->sock);
  drop_pending(it);
  if (answer) add_closing(std::move(s), encode_frame(FrameType::Error, encode_error(why)));
}

void Gate::add_closing(std::unique_ptr<Socket> s, std::vector<uint8_t> frame) {
  if (static_cast<int>(closing_.size()) >= limits_.max_closing) {
    closing_.pop_front();  // make room: the socket answered longest ago goes first
    if (say(&closing_log_, &closing_left_out_)) {
      owner_.note("answered sockets full (" + std::to_string(limits_.max_closing) +
                  "): closed one before its peer did" + more(closing_left_out_));
      closing_left_out_ = 0;
    }
  }
  Closing c;
  c.sock = std::move(s);
  closing_.push_back(std::move(c));
  send_answer(closing_.back(), frame);
  closing_count_ = static_cast<int>(closing_.size());
}

void Gate::send_answer(Closing& c, const std::vector<uint8_t>& frame) {
  // At most a few KiB into an empty send buffer: never blocks, never signals.
  if (!frame.empty()) (void)::send(c.sock->fd(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(c.sock->fd(), SHUT_WR);  // the peer reads the answer, then end of stream
  c.until = Clock::now() + std::chrono::milliseconds(limits_.linger_ms);
}

void Gate::service_closing(ClosingIt it, short revents, Clock::time_point now) {
  Closing& c = *it;
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    uint8_t sink[4096];
    size_t drained = 0;
    while (drained < kDrainBytesPerRound) {
      ssize_t r = ::recv(c.sock->fd(), sink, sizeof sink, MSG_DONTWAIT);
      if (r > 0) {
        drained += static_cast<size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      closing_.erase(it);  // end of stream (the peer read its answer and closed) or an error
      return;
    }
  }
  if (c.until <= now) closing_.erase(it);
}

}  // namespace gdrlab
