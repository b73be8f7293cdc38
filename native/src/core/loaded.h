// What a library opened with dlopen at first use leaves behind (libcuda: core/cuda_api.cc,
// libibverbs: verbs/api.cc): its table of entry points, or why it cannot be used. The loaders
// differ in how they open and check the library; asking them is the same for both.
#pragma once
#include <string>

#include "core/error.h"

namespace gdrlab {

template <class Api>
struct LoadedLibrary {
  Api api;
  bool ok = false;
  std::string why;

  // The table, or Error(Unavailable) saying why there is none.
  const Api& require() const {
    if (!ok) throw_unavailable(why);
    return api;
  }
  // Whether the table is there; *reason (optional) says why not.
  bool usable(std::string* reason) const {
    if (!ok && reason) *reason = why;
    return ok;
  }
};

// The table, or nullptr where the library is missing or loading it failed, even by throwing:
// for destructors and other places that must not throw. state() returns the LoadedLibrary.
template <class State>
auto table_if_loaded(State&& state) noexcept -> decltype(&state().api) {
  try {
    auto& loaded = state();
    return loaded.ok ? &loaded.api : nullptr;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace gdrlab
