#include "core/spec.h"

#include <string>

#include "core/error.h"
#include "core/vocab.h"

namespace gdrlab {

void check_spec_common(const TestSpec& s, const char* wire) {
  if (!in_range<Mode>(s.mode)) throw_protocol("unknown test mode " + std::to_string(s.mode));
  if (s.size == 0) throw_invalid("message size must be at least 1 byte");
  if (s.size > kMaxDataBytes)
    throw_invalid("message size " + std::to_string(s.size) + " exceeds the " + wire + " wire's maximum of 1 GiB");
  if (s.window == 0 || s.window > 4096) throw_invalid("window must be between 1 and 4096 messages");
  if (uint64_t(s.iters) + s.warmup > 10000000ull) throw_invalid("too many iterations (at most 10,000,000)");
}

}  // namespace gdrlab
