// The ucx wire: `gdrlab bench --wire ucx` moves each test's messages with UCX's tagged messages
// (ucp_tag_send_nbx / ucp_tag_recv_nbx) between a UCP worker on each side; UCX chooses the
// transport (tcp, shared memory, cuda_copy, rc/dc where its build has verbs) and the protocol
// (eager, rendezvous) itself. The session is the engine's own: the tcp handshake with the token
// gates everything, and the UCX worker addresses travel over that authenticated control
// connection, so no UCX listener is ever opened:
//
//   client                                     server
//   HELLO / WELCOME (token)
//   UCX_CONNECT(spec, memory kind, worker address, UCX version) ->
//                                              worker, buffer (reserved from the budget), endpoint
//                                          <-  UCX_CONNECT(worker address, UCX version)
//   endpoint to the server's worker
//   timed loop over UCX (ACKs over tcp), verification as every wire (VERDICT over tcp)
//
// A worker and its endpoint live for one test (UCX's context is kept per process); the first
// messages of every test are warm-up, which covers UCX's wire-up.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/buffer.h"
#include "core/spec.h"
#include "wire/session.h"

namespace gdrlab {

struct UcxRunResult : RunResult {
  std::string protocol;       // UCX's description of the client's verification send (ucp_request_query), "" if none
  std::string version;        // this side's UCX
  std::string peer_version;   // the server's
  std::string tls;            // the transports this side allowed ("" : UCX's configuration)
};

class UcxClient {
 public:
  UcxClient(const std::string& host, int port, const std::string& token, int timeout_ms);
  const std::string& server_description() const { return session_->server_description(); }
  // One test: this side's buffer of kind `src`, the server's of kind `dst` (host kinds or device).
  // tls: UCX_TLS for this side's context ("" : UCX's own configuration, its environment).
  UcxRunResult run(const TestSpec& spec, MemKind src, MemKind dst, const std::string& tls);
  void close();

 private:
  std::unique_ptr<ClientSession> session_;
  int timeout_ms_;
};

// Makes `server` answer UCX_CONNECT: one ucx test per request, its buffer reserved from the
// server's budget, on the server's own GPU for device memory. A test this side cannot run (no
// UCX, a memory kind UCX cannot move here) is answered with ERROR and the session goes on.
void add_ucx_wire(Server& server);

}  // namespace gdrlab
