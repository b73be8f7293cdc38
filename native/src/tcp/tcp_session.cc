#include "tcp/tcp_session.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "tcp/tcp.h"

namespace gdrlab {

namespace {

// The spec without the both-ways flag, checked; refuses the flag on anything but bandwidth.
TestSpec plain_spec(const TestSpec& spec, bool* both_ways) {
  TestSpec plain = spec;
  *both_ways = (spec.mode & kBothWaysFlag) != 0;
  plain.mode = static_cast<uint8_t>(spec.mode & ~kBothWaysFlag);
  check_spec_common(plain, "tcp");
  if (*both_ways && static_cast<Mode>(plain.mode) != Mode::Bandwidth)
    throw_invalid("both directions at once is a bandwidth test (mode bw)");
  return plain;
}

}  // namespace

RunResult TcpClient::run(const TestSpec& spec, Buffer* user, size_t offset) {
  ControlChannel& control = session_.wire();
  bool both_ways = false;
  const TestSpec plain = plain_spec(spec, &both_ways);
  // Build the local side first: a bad local buffer or a missing GPU fails before the peer works,
  // and leaves the session as it was.
  TcpEndpoint ep(path_config(plain, Wire::Tcp), control, user, offset);
  std::unique_ptr<TcpEndpoint> in;  // both ways: where the peer's messages land
  if (both_ways) in = std::make_unique<TcpEndpoint>(path_config(plain, Wire::Tcp), control);
  return session_.guarded([&](ControlChannel& w) {
    w.send_control(FrameType::Setup, encode_spec(spec));
    w.expect(FrameType::Ready);
    return both_ways ? run_client_both_ways(w, ep, *in, plain) : run_client_test(w, ep, plain);
  });
}

void add_tcp_wire(Server& server) {
  server.add_wire(FrameType::Setup, [&server](ControlChannel& w, const std::vector<uint8_t>& body,
                                               const RefusalLog& refused) {
    TestSpec spec = decode_spec(body.data(), body.size());
    spec.device = static_cast<uint32_t>(server.limits().device);  // this server's GPU, whatever was asked
    bool both_ways = false;
    // declared first: the buffers are freed before their share goes back
    Reservation held, held_in;
    std::unique_ptr<TcpEndpoint> ep, in;
    if (!build_or_refuse(w, refused, [&] {
          spec = plain_spec(spec, &both_ways);
          PathConfig cfg = path_config(spec, Wire::Tcp);
          check_endpoint(Wire::Tcp, &cfg, nullptr, 0);  // sizes, depth and chunk bounded first
          held = server.budget().reserve(TcpEndpoint::serving_memory(cfg));  // before a byte is allocated
          if (both_ways) held_in = server.budget().reserve(TcpEndpoint::serving_memory(cfg));
          ep = std::make_unique<TcpEndpoint>(path_config(spec, Wire::Tcp), w);
          if (both_ways) in = std::make_unique<TcpEndpoint>(path_config(spec, Wire::Tcp), w);
        }))
      return;
    w.send_control(FrameType::Ready);
    if (both_ways)
      run_server_both_ways(w, *ep, *in, spec);
    else
      run_server_test(w, *ep, spec);
  });
}

}  // namespace gdrlab
