// The tcp wire's tests on the shared session: the client runs them over TcpEndpoints; the
// server answers SETUP frames. Messages move over the control connection itself.
#pragma once
#include <cstdint>
#include <string>

#include "core/buffer.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace gdrlab {

class TcpClient {
 public:
  TcpClient(const std::string& host, int port, const std::string& token, int timeout_ms)
      : session_(host, port, token, timeout_ms) {}
  const std::string& server_description() const { return session_.server_description(); }
  // Runs one test. user/offset: the client's buffer (nullptr: allocated for the path).
  RunResult run(const TestSpec& spec, Buffer* user = nullptr, size_t offset = 0);
  void close() { session_.close(); }

 private:
  ClientSession session_;
};

// Makes `server` answer SETUP: one tcp test per request.
void add_tcp_wire(Server& server);

}  // namespace gdrlab
