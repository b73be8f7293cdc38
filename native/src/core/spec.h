// One test as both sides agree on it: what the client asks the server to set up, and the checks
// every wire makes of it. The tcp wire's SETUP body and the verbs wire's CONNECT body carry it
// (wire/frame.h encode_spec).
#pragma once
#include <cstdint>

namespace gdrlab {

constexpr uint32_t kMaxDataBytes = 1u << 30;  // 1 GiB: the largest message a wire carries

// What the client asks the server to set up for one test.
struct TestSpec {
  uint8_t path = 0;        // Path enum value
  uint8_t mode = 0;        // 0 latency (ping-pong), 1 bandwidth (streaming), 2 verify only
  uint64_t size = 0;       // message bytes
  uint32_t iters = 0;      // timed iterations (latency) or repetitions (bandwidth)
  uint32_t warmup = 0;
  uint32_t window = 1;     // messages per bandwidth repetition
  uint64_t chunk = 0;      // pipelined chunk bytes
  uint32_t depth = 0;      // pipelined buffers
  uint32_t device = 0;     // server-side GPU ordinal
  uint64_t seed = 0;       // verification pattern seed
};

// Wire-independent checks of a spec: mode, size (at most 1 GiB), window, iteration count.
// `wire` names the wire in the error text ("tcp", "verbs").
void check_spec_common(const TestSpec& s, const char* wire);

}  // namespace gdrlab
