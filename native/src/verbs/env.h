// The verbs layer's environment knobs: each is read under our name first, then NCCL's, so a
// cluster's existing NCCL settings apply unchanged (GDRLAB_IB_HCA, else NCCL_IB_HCA; ...).
#pragma once

#include <cstdlib>
#include <initializer_list>

namespace gdrlab {

struct EnvSetting {
  const char* name = nullptr;   // the variable that was set, for messages
  const char* value = nullptr;  // null when none of them is set (or all are empty)
};

// The first of `names` set to a non-empty value; `name` is the first of them when none is.
inline EnvSetting first_env(std::initializer_list<const char*> names) {
  EnvSetting s;
  for (const char* n : names) {
    if (!s.name) s.name = n;
    const char* v = std::getenv(n);
    if (v && *v) return {n, v};
  }
  return s;
}

}  // namespace gdrlab
