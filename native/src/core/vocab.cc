#include "core/vocab.h"

#include "core/error.h"

namespace gdrlab {
namespace {

constexpr const char* kPathNames[] = {"host", "staged", "shared", "pipelined", "gdr"};
constexpr const char* kWireNames[] = {"tcp", "verbs"};
constexpr const char* kModeNames[] = {"lat", "bw", "verify"};  // the names of gdrlab.vocab.MODES

}  // namespace

const char* path_name(Path p) { return enum_name(kPathNames, p); }
const char* wire_name(Wire w) { return enum_name(kWireNames, w); }
const char* mode_name(Mode m) { return enum_name(kModeNames, m); }

bool wire_carries(Wire wire, Path path) {
  if (!in_range<Path>(static_cast<unsigned>(path))) return false;
  return path != Path::Gdr || wire == Wire::Verbs;
}

bool path_needs_gpu(Path p) { return p != Path::Host; }

std::string wire_path_list(Wire wire, bool gpu_only) {
  std::string out;
  for (int i = 0; i < static_cast<int>(Path::Max); ++i)
    if (wire_carries(wire, static_cast<Path>(i)) && (!gpu_only || path_needs_gpu(static_cast<Path>(i)))) out += std::string(out.empty() ? "" : ", ") + kPathNames[i];
  return out;
}

Path path_from_name(const std::string& name, Wire wire) {
  for (int i = 0; i < static_cast<int>(Path::Max); ++i)
    if (name == kPathNames[i] && wire_carries(wire, static_cast<Path>(i))) return static_cast<Path>(i);
  throw_invalid("unknown path '" + name + "' for the " + wire_name(wire) + " wire; valid: " + wire_path_list(wire));
}

Path path_from_code(uint8_t code, Wire wire) {
  if (!in_range<Path>(code) || !wire_carries(wire, static_cast<Path>(code)))
    throw_protocol("unknown path code " + std::to_string(code) + " for the " + wire_name(wire) + " wire");
  return static_cast<Path>(code);
}

}  // namespace gdrlab
