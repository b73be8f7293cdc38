#include "core/knobs.h"

#include <cstdlib>

#include "core/vocab.h"

namespace gdrlab {
namespace {

constexpr KnobInfo kKnobs[] = {
#define GDRLAB_KNOB_INFO(id, name, nccl, dflt, meaning) {name, nccl, dflt, meaning},
    GDRLAB_KNOBS(GDRLAB_KNOB_INFO)
#undef GDRLAB_KNOB_INFO
};
static_assert(sizeof kKnobs / sizeof *kKnobs == static_cast<size_t>(Knob::Max), "one entry per knob");

}  // namespace

const KnobInfo& knob_info(Knob k) {
  static const KnobInfo kNone{"?", "", "", ""};
  return in_range<Knob>(static_cast<unsigned>(k)) ? kKnobs[static_cast<int>(k)] : kNone;
}

EnvSetting knob_env(Knob k) {
  const KnobInfo& info = knob_info(k);
  for (const char* n : {info.name, info.nccl}) {
    if (!*n) continue;
    const char* v = std::getenv(n);
    if (v && *v) return {n, v};
  }
  return {info.name, nullptr};
}

}  // namespace gdrlab
