// The server's clock, for its three files (server.cc, server_log.cc, server_limits.cc).
#pragma once
#include <algorithm>
#include <chrono>
#include <climits>

namespace gdrlab {
namespace server_clock {

using Clock = std::chrono::steady_clock;

// Saturates: a time point never set (the clock's epoch, the machine's boot) is as long ago as
// INT_MAX ms, never a wrapped negative count once the machine has been up 25 days.
inline int ms_since(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  return static_cast<int>(std::clamp<long long>(ms, INT_MIN, INT_MAX));
}

}  // namespace server_clock
}  // namespace gdrlab
