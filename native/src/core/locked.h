// A copy of a field read while holding the mutex that guards it: the getters of the classes whose
// state a mutex guards (core/budget, wire/server).
#pragma once
#include <mutex>

namespace gdrlab {

template <class T>
T read_locked(std::mutex& mu, const T& value) {
  std::lock_guard<std::mutex> lock(mu);
  return value;
}

}  // namespace gdrlab
