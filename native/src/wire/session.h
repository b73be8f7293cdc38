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
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/timing.h"
#include "wire/frame.h"
#include "wire/socket.h"
#include "wire/tcp.h"

namespace gdrlab {

struct RunResult {
  std::vector<double> samples_s;  // one per timed iteration
  double bytes_per_sample = 0;    // bytes one sample moved one way
  bool verified = false;
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
  virtual Buffer& user() = 0;
  virtual size_t offset() const = 0;
  // "path 'staged' (tcp wire)": names the test in the verification error.
  virtual std::string describe() const = 0;
};

// Measuring side: the timed loop, then verification both ways.
RunResult run_client_test(TcpWire& control, TestEndpoint& ep, const TestSpec& spec);
// Serving side: the mirror image.
void run_server_test(TcpWire& control, TestEndpoint& ep, const TestSpec& spec);

// After an error of this kind the control stream is where it was (bad argument, missing
// hardware, corrupted data); after any other the connection is dropped.
bool keeps_session(ErrorKind kind);

// Serving side: builds a test's endpoint with build(). A test this side cannot run ends the
// test with an ERROR frame and returns false; the session goes on. A protocol error ends it.
template <class Build>
bool build_or_refuse(TcpWire& control, Build&& build) {
  try {
    build();
    return true;
  } catch (const Error& e) {
    if (e.kind == ErrorKind::Protocol) throw;
    control.send_error(e);
    return false;
  }
}

class ClientSession {
 public:
  // Connects and completes the handshake; REJECT becomes Error(Auth), an ERROR frame the
  // peer's error.
  ClientSession(const std::string& host, int port, const std::string& token, int timeout_ms);
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;
  const std::string& server_description() const { return description_; }
  // The control connection; throws PeerClosed once closed or dropped.
  TcpWire& wire();
  // Runs fn(control wire). An error that leaves the stream position unknown (protocol, timeout,
  // transport) drops the connection, so the next call fails fast instead of reading garbage.
  template <class Fn>
  auto guarded(Fn&& fn) -> decltype(fn(std::declval<TcpWire&>()));
  // Sends BYE (best effort) and closes; idempotent.
  void close();

 private:
  std::unique_ptr<TcpWire> wire_;
  std::string description_;
};

template <class Fn>
auto ClientSession::guarded(Fn&& fn) -> decltype(fn(std::declval<TcpWire&>())) {
  TcpWire& w = wire();
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

// Serves one request frame of a wire (tcp: SETUP, verbs: CONNECT) on the control connection.
using RequestHandler = std::function<void(TcpWire& control, const std::vector<uint8_t>& body)>;

class Server {
 public:
  // A non-loopback address without a token is refused: anyone could otherwise use this host's
  // GPU memory and bandwidth.
  Server(const std::string& host, int port, const std::string& token, int timeout_ms);
  // Requests of type `request` go to `handler`; a session's other frames are BYE or an error.
  void add_wire(FrameType request, RequestHandler handler);
  int port() const { return listener_.port(); }
  // Waits up to accept_ms for one client and serves it until BYE or an error. Returns false if
  // no client came; errors of that client are returned in *error (the server stays usable).
  bool serve_one(int accept_ms, std::string* error);
  uint64_t clients_served() const { return served_; }

 private:
  void handle(TcpWire& wire);

  Listener listener_;
  std::string token_;
  int timeout_ms_;
  uint64_t served_ = 0;
  std::vector<std::pair<FrameType, RequestHandler>> handlers_;
};

// Constant-time comparison for tokens.
bool tokens_equal(const std::string& a, const std::string& b);

}  // namespace gdrlab
