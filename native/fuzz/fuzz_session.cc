// libFuzzer target: a real Server and a real Client talking to fuzz input over loopback tcp.
//   first byte even: the input is what a client sends to a gdrlab::Server (token "fuzz-token");
//                    the server must end that client with an error or BYE and stay usable. The
//                    last byte's low bit picks how it is served: serve_one on this thread, or the
//                    concurrent server's handshake stage (wire/gate.h) and a session thread.
//   first byte odd:  the input is what a server answers to a gdrlab::Client that runs one small
//                    host-path test; the client must fail with gdrlab::Error or succeed.
// Neither side may crash, hang past its timeout, leak or read out of bounds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "core/error.h"
#include "tcp/tcp_session.h"
#include "verbs/session.h"
#include "wire/session.h"

using namespace gdrlab;

namespace {

constexpr int kTimeoutMs = 200;
const char kToken[] = "fuzz-token";

// Thousands of connections a second would run out of ephemeral ports (each closed connection
// sits in TIME_WAIT for a minute), so every connection comes from another 127.0.x.y address.
int connect_loopback(int port) {
  static uint32_t next_source = 0;
  for (int attempt = 0; attempt < 2000; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) std::abort();
    int big = 4 << 20;  // room for everything the server answers, so it never blocks on us
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    uint32_t n = next_source++ % 65000 + 2;
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(0x7F000000u | (1u << 16) | n);  // 127.1.x.y
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0 &&
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
      return fd;
    int err = errno;
    ::close(fd);
    // EINTR: libFuzzer's timeout alarm interrupted connect(); start over with a new socket.
    if (err != EADDRNOTAVAIL && err != EADDRINUSE && err != EINTR) {
      std::fprintf(stderr, "fuzz_session: harness cannot connect: %s\n", std::strerror(err));
      std::abort();
    }
    ::usleep(1000);
  }
  std::fprintf(stderr, "fuzz_session: harness ran out of loopback ports\n");
  std::abort();
}

void write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;  // libFuzzer's timeout alarm
    if (w <= 0) return;  // the other side gave up early: fine
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void drain(int fd) {
  char buf[65536];
  while (::recv(fd, buf, sizeof buf, 0) > 0) {
  }
}

void server_case(const uint8_t* p, size_t n) {
  static Server* server = [] {  // lives for the whole run, serving both wires as `gdrlab serve` does
    ServerLimits limits;  // a budget as `gdrlab serve` has one: refusals are fuzzed too, memory stays small
    limits.max_host_bytes = 64u << 20;
    limits.max_gpu_bytes = 64u << 20;
    auto* s = new Server("127.0.0.1", 0, kToken, kTimeoutMs, limits);
    add_tcp_wire(*s);
    add_verbs_wire(*s);
    return s;
  }();
  if (n && (p[n - 1] & 1)) {
    static Server* concurrent = [] {
      ServerLimits limits;
      limits.max_host_bytes = 64u << 20;
      limits.max_gpu_bytes = 64u << 20;
      limits.slow_guessing = false;  // thousands of refused tokens: each input is answered at once
      auto* s = new Server("127.0.0.1", 0, kToken, kTimeoutMs, limits);
      add_tcp_wire(*s);
      add_verbs_wire(*s);
      std::thread([s] {
        for (;;) s->serve_for(1000);
      }).detach();
      return s;
    }();
    int fd = connect_loopback(concurrent->port());
    write_all(fd, p, n);
    ::shutdown(fd, SHUT_WR);
    // The server answers and closes (a refused token at once: guessing is not slowed here);
    // an authenticated session ends on the input's end within its timeout.
    pollfd pfd{fd, POLLIN, 0};
    char buf[65536];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      const int pr = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
      if (pr < 0 && errno == EINTR) continue;  // libFuzzer's timeout alarm: not an answer, not a timeout
      if (pr <= 0) {
        std::fprintf(stderr, "fuzz_session: the concurrent server neither answered nor closed in 10 s\n");
        std::abort();
      }
      const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
    }
    ::close(fd);
    return;
  }
  int fd = connect_loopback(server->port());
  write_all(fd, p, n);
  ::shutdown(fd, SHUT_WR);
  std::string err;
  if (!server->serve_one(5000, &err)) {
    std::fprintf(stderr, "fuzz_session: the server did not accept a waiting client\n");
    std::abort();
  }
  ::close(fd);
}

struct FakeServer {
  int listen_fd = -1;
  int port = 0;
  FakeServer() {
    listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd, 4) != 0)
      std::abort();
    socklen_t len = sizeof a;
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
};

void client_case(const uint8_t* p, size_t n) {
  static FakeServer* fake = new FakeServer();
  // The spec the client runs comes from the input's first byte, so all three modes are explored.
  uint8_t knob = n ? p[0] : 0;
  std::thread answer([&] {
    // The client may fail before it connects (e.g. no free port): never wait for it for long.
    pollfd pfd{fake->listen_fd, POLLIN, 0};
    if (::poll(&pfd, 1, 2000) <= 0) return;
    int fd = ::accept(fake->listen_fd, nullptr, nullptr);
    if (fd < 0) return;
    write_all(fd, p, n);
    ::shutdown(fd, SHUT_WR);
    drain(fd);
    ::close(fd);
  });
  try {
    TcpClient c("127.0.0.1", fake->port, kToken, kTimeoutMs);
    TestSpec s;
    s.path = 0;
    s.mode = knob % 3;
    s.size = 1 + (knob >> 2) % 64;
    s.iters = 2;
    s.warmup = 1;
    s.window = 2;
    s.seed = 7;
    c.run(s);
    c.close();
  } catch (const Error&) {
  }
  answer.join();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("GDRLAB_SPIN_US", "0", 1);  // nothing to gain from spinning here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] % 2 == 0)
    server_case(data + 1, size - 1);
  else
    client_case(data + 1, size - 1);
  return 0;
}
