#include "core/vocab.h"

#include "core/error.h"

namespace gdrlab {
namespace {

constexpr const char* kPathNames[] = {"host", "staged", "shared", "pipelined", "gdr"};
constexpr const char* kWireNames[] = {"tcp", "verbs"};
constexpr const char* kModeNames[] = {"lat", "bw", "verify"};  // the names of gdrlab.vocab.MODES
static_assert(sizeof kPathNames / sizeof *kPathNames == static_cast<size_t>(Path::Max), "one name per path");
static_assert(sizeof kWireNames / sizeof *kWireNames == static_cast<size_t>(Wire::Max), "one name per wire");
static_assert(sizeof kModeNames / sizeof *kModeNames == static_cast<size_t>(Mode::Max), "one name per mode");

}  // namespace

const char* path_name(Path p) { return in_range<Path>(static_cast<unsigned>(p)) ? kPathNames[static_cast<int>(p)] : "?"; }
const char* wire_name(Wire w) { return in_range<Wire>(static_cast<unsigned>(w)) ? kWireNames[static_cast<int>(w)] : "?"; }
const char* mode_name(Mode m) { return in_range<Mode>(static_cast<unsigned>(m)) ? kModeNames[static_cast<int>(m)] : "?"; }

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
