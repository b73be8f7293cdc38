// The tcp wire's tests on the shared session: the client runs them over PathEndpoints; the
// server answers SETUP frames. Messages move over the control connection itself.
#pragma once
#include <cstdint>
#include <string>

#include "core/buffer.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace gdrlab {

class Client {
 public:
  Client(const std::string& host, int port, const std::string& token, int timeout_ms)
      : session_(host, port, token, timeout_ms) {}
  const std::string& server_description() const { return session_.server_description(); }
  // Runs one test. user/offset: the client's buffer (nullptr: allocated for the path).
  RunResult run(const TestSpec& spec, Buffer* user = nullptr, size_t offset = 0);
  void close() { session_.close(); }

 private:
  ClientSession session_;
};

struct PathConfig;
// The host and GPU bytes one serving-side tcp endpoint of cfg allocates (the memory budget's
// request), cfg already checked (chunk clamped to the message).
void tcp_session_memory(const PathConfig& cfg, uint64_t* host, uint64_t* gpu);

// Makes `server` answer SETUP: one tcp test per request.
void add_tcp_wire(Server& server);

}  // namespace gdrlab
