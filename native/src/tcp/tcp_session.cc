#include "tcp/tcp_session.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "tcp/tcp.h"

namespace gdrlab {

RunResult TcpClient::run(const TestSpec& spec, Buffer* user, size_t offset) {
  ControlChannel& control = session_.wire();
  check_spec_common(spec, "tcp");
  // Build the local side first: a bad local buffer or a missing GPU fails before the peer works,
  // and leaves the session as it was.
  TcpEndpoint ep(path_config(spec, Wire::Tcp), control, user, offset);
  return session_.guarded([&](ControlChannel& w) {
    w.send_control(FrameType::Setup, encode_spec(spec));
    w.expect(FrameType::Ready);
    return run_client_test(w, ep, spec);
  });
}

void add_tcp_wire(Server& server) {
  server.add_wire(FrameType::Setup, [&server](ControlChannel& w, const std::vector<uint8_t>& body,
                                               const RefusalLog& refused) {
    TestSpec spec = decode_spec(body.data(), body.size());
    spec.device = static_cast<uint32_t>(server.limits().device);  // this server's GPU, whatever was asked
    Reservation held;  // declared first: the buffers are freed before their share goes back
    std::unique_ptr<TcpEndpoint> ep;
    if (!build_or_refuse(w, refused, [&] {
          check_spec_common(spec, "tcp");
          PathConfig cfg = path_config(spec, Wire::Tcp);
          check_endpoint(Wire::Tcp, &cfg, nullptr, 0);  // sizes, depth and chunk bounded first
          held = server.budget().reserve(TcpEndpoint::serving_memory(cfg));  // before a byte is allocated
          ep = std::make_unique<TcpEndpoint>(path_config(spec, Wire::Tcp), w);
        }))
      return;
    w.send_control(FrameType::Ready);
    run_server_test(w, *ep, spec);
  });
}

}  // namespace gdrlab
