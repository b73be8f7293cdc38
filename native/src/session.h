// The measuring side (Client) and the remote side (Server) of `gdrlab bench` over the tcp wire.
//
// Session:   HELLO(version, token) -> WELCOME(description) | REJECT(reason)
// Each test: SETUP(spec) -> READY | ERROR, then the timed loop, then one verification exchange:
//   latency    client sends, server receives and sends back; sample = round trip / 2
//   bandwidth  client sends `window` messages, server answers ACK; sample = window time
//   verify     client sends pattern(seed); server checks, answers VERDICT, sends pattern(seed+1);
//              client checks. A mismatch on either side raises Error(Verify) on the client.
// End:       BYE.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frame.h"
#include "paths.h"
#include "socket.h"
#include "timing.h"
#include "wire_tcp.h"

namespace gdrlab {

struct RunResult {
  std::vector<double> samples_s;  // one per timed iteration
  double bytes_per_sample = 0;    // bytes one sample moved one way
  bool verified = false;
};

class Client {
 public:
  Client(const std::string& host, int port, const std::string& token, int timeout_ms);
  ~Client();
  const std::string& server_description() const { return description_; }
  // Runs one test. user/offset: the client's buffer (nullptr: allocated for the path).
  RunResult run(const TestSpec& spec, Buffer* user = nullptr, size_t offset = 0);
  void close();
  // The open tcp session (nullptr once closed), for wires that use it as their out-of-band channel.
  TcpWire* wire() { return wire_.get(); }

 private:
  std::unique_ptr<TcpWire> wire_;
  std::string description_;
};

class Server {
 public:
  // A non-loopback address without a token is refused: anyone could otherwise use this host's
  // GPU memory and bandwidth.
  Server(const std::string& host, int port, const std::string& token, int timeout_ms);
  int port() const { return listener_.port(); }
  // Waits up to accept_ms for one client and serves it until BYE or an error. Returns false if
  // no client came; errors of that client are returned in *error (the server stays usable).
  bool serve_one(int accept_ms, std::string* error);
  uint64_t clients_served() const { return served_; }

 private:
  void handle(TcpWire& wire);
  void run_test(TcpWire& wire, const TestSpec& spec);

  Listener listener_;
  std::string token_;
  int timeout_ms_;
  uint64_t served_ = 0;
};

// Constant-time comparison for tokens.
bool tokens_equal(const std::string& a, const std::string& b);

}  // namespace gdrlab
