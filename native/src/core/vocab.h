// The engine's vocabulary, defined once: transfer paths, wires, test modes and their defaults.
// Every enum ends with a `Max` sentinel; a value read from the wire or from Python is checked
// against it (`in_range`), never against a number written by hand. The binding exports the
// name tables (gdrlab._native.PATH_NAMES, WIRE_NAMES, MODE_NAMES) so Python spells them once too.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gdrlab {

// True when `code` is a value of E: 0 <= code < E::Max.
template <class E>
constexpr bool in_range(unsigned long long code) {
  return code < static_cast<unsigned long long>(E::Max);
}

// The name of `e` from a table of one name per value of E (checked when compiled against E::Max);
// "?" for a value out of range.
template <class E, size_t N>
const char* enum_name(const char* const (&names)[N], E e) {
  static_assert(N == static_cast<size_t>(E::Max), "one name per value");
  return in_range<E>(static_cast<unsigned long long>(e)) ? names[static_cast<size_t>(e)] : "?";
}

// The transfer paths of DESIGN.md. Codes are the TestSpec's path byte on the wire.
enum class Path : uint8_t { Host = 0, Staged = 1, Shared = 2, Pipelined = 3, Gdr = 4, Max };
// The wires the engine carries itself (library wires such as UCX live in Python).
enum class Wire : uint8_t { Tcp = 0, Verbs = 1, Max };
// What one test measures. Codes are the TestSpec's mode byte on the wire.
enum class Mode : uint8_t { Latency = 0, Bandwidth = 1, Verify = 2, Max };

constexpr size_t kDefaultChunkBytes = 256 * 1024;  // pipelined: bytes per chunk
constexpr size_t kMinChunkBytes = 4096;            // pipelined: smallest chunk (or the whole message):
                                                   // each chunk costs the serving side a copy and an event
constexpr int kDefaultPipelineDepth = 4;            // pipelined: chunk buffers in flight

const char* path_name(Path p);
const char* wire_name(Wire w);
const char* mode_name(Mode m);

// Whether `wire` moves messages over `path` (gdr needs an HCA that reads GPU memory: verbs only).
bool wire_carries(Wire wire, Path path);
bool path_needs_gpu(Path p);
// The paths `wire` carries, comma separated ("host, staged, shared, pipelined"), for error text;
// gpu_only: those that move GPU memory.
std::string wire_path_list(Wire wire, bool gpu_only = false);
// Throws InvalidArgument naming the wire's valid paths when `name` is not one of them.
Path path_from_name(const std::string& name, Wire wire);
// A path code read from the wire; throws Protocol when it is not a path `wire` carries.
Path path_from_code(uint8_t code, Wire wire);

}  // namespace gdrlab
