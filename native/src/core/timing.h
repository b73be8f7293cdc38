// The measurement loops every wire shares: ping-pong latency (sample = round trip / 2) and
// streaming bandwidth (sample = time for `window` messages; see measure() for the ACKs). The
// wire supplies how one message is sent and received and how the ACK travels; nothing here
// allocates inside the loop.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/spec.h"
#include "core/vocab.h"

namespace gdrlab {

// Measuring side. send/recv move one message; wait_ack blocks until the peer's ACK arrives.
// Bandwidth: the peer answers every window with an ACK. windows_in_flight = 1 waits for each ACK
// before the next window, so every sample pays a drain and an ACK round trip (the tcp wire).
// windows_in_flight = N > 1 streams: the next window is posted before the last one's ACK is
// back, at most N windows unacknowledged (what the peer's receive queue holds), and the ACKs
// still owed at the end are waited for in the last sample: one sync per run, as ib_write_bw.
// drains (optional) counts the ACK waits with nothing posted after the awaited window.
template <class Send, class Recv, class WaitAck>
void measure(const TestSpec& spec, Send&& send, Recv&& recv, WaitAck&& wait_ack, std::vector<double>* samples_s,
             double* bytes_per_sample, uint32_t windows_in_flight = 1, uint64_t* drains = nullptr) {
  using Clock = std::chrono::steady_clock;
  const Mode mode = static_cast<Mode>(spec.mode);
  if (mode == Mode::Verify) return;
  const uint32_t total = spec.warmup + spec.iters;
  const bool lat = mode == Mode::Latency;
  const uint64_t ahead = windows_in_flight ? windows_in_flight : 1;
  uint64_t acked = 0;  // bandwidth: windows whose ACK has arrived
  auto ack_one = [&](uint64_t posted) {
    wait_ack();
    ++acked;
    if (drains && acked == posted) ++*drains;
  };
  samples_s->reserve(spec.iters);
  *bytes_per_sample = static_cast<double>(spec.size) * (lat ? 1 : spec.window);
  for (uint32_t i = 0; i < total; ++i) {
    auto t0 = Clock::now();
    if (lat) {
      send();
      recv();
    } else {
      while (i - acked >= ahead) ack_one(i);  // room for window i: at most `ahead` unacknowledged
      for (uint32_t k = 0; k < spec.window; ++k) send();
      if (ahead == 1 || i + 1 == total)
        while (acked < static_cast<uint64_t>(i) + 1) ack_one(i + 1);
    }
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i >= spec.warmup) samples_s->push_back(lat ? dt / 2 : dt);
  }
}

// Serving side: the mirror image of measure().
template <class Send, class Recv, class SendAck>
void answer(const TestSpec& spec, Send&& send, Recv&& recv, SendAck&& send_ack) {
  const Mode mode = static_cast<Mode>(spec.mode);
  const uint32_t total = spec.warmup + spec.iters;
  for (uint32_t i = 0; mode != Mode::Verify && i < total; ++i) {
    if (mode == Mode::Latency) {
      recv();
      send();
    } else {
      for (uint32_t k = 0; k < spec.window; ++k) recv();
      send_ack();
    }
  }
}

}  // namespace gdrlab
