#include "core/error.h"

#include <cstring>

#include "core/vocab.h"

namespace gdrlab {
namespace {

std::string compose(const std::string& library, const std::string& call, long long code, const std::string& text,
                    const std::string& where) {
  std::string msg;
  if (!library.empty()) msg += library + ": ";
  if (!call.empty()) msg += call + " failed: ";
  msg += text;
  if (code != 0) msg += " (code " + std::to_string(code) + ")";
  if (!where.empty()) msg += " at " + where;
  return msg;
}

// Indexed by ErrorKind: the gdrlab.errors class each kind becomes.
constexpr const char* kErrorClassNames[] = {
    "Unavailable", "CudaError",   "VerbsError",      "ProtocolError",   "PeerTimeout",
    "PeerClosed",  "AuthError",   "InvalidArgument", "SystemCallError", "VerifyError",
};
static_assert(sizeof kErrorClassNames / sizeof *kErrorClassNames == static_cast<size_t>(ErrorKind::Max),
              "one Python class per error kind");

// Length of the valid UTF-8 sequence at p[0..n), or 0 when it is not one (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF).
size_t utf8_sequence(const unsigned char* p, size_t n) {
  unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) { len = 3; lo = 0xA0; }
  else if (c == 0xED) { len = 3; hi = 0x9F; }
  else if (c >= 0xE1 && c <= 0xEF) len = 3;
  else if (c == 0xF0) { len = 4; lo = 0x90; }
  else if (c == 0xF4) { len = 4; hi = 0x8F; }
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else return 0;
  if (n < len || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return len;
}

}  // namespace

Error::Error(ErrorKind k, std::string lib, std::string c, long long cd, std::string t, std::string w)
    : std::runtime_error(compose(lib, c, cd, t, w)),
      kind(k), library(std::move(lib)), call(std::move(c)), code(cd), text(std::move(t)), where(std::move(w)) {}

void throw_unavailable(const std::string& text) {
  throw Error(ErrorKind::Unavailable, "", "", 0, text);
}
void throw_invalid(const std::string& text) {
  throw Error(ErrorKind::InvalidArgument, "", "", 0, text);
}
void throw_protocol(const std::string& text) {
  throw Error(ErrorKind::Protocol, "gdrlab-wire", "", 0, text);
}
void throw_system(const std::string& call, int err) {
  throw Error(ErrorKind::System, "libc", call, err, std::strerror(err));
}

const char* error_class_name(ErrorKind kind) {
  return in_range<ErrorKind>(static_cast<unsigned>(kind)) ? kErrorClassNames[static_cast<int>(kind)] : "GdrlabError";
}

ErrorKind error_kind_from_code(uint8_t code) {
  return in_range<ErrorKind>(code) ? static_cast<ErrorKind>(code) : ErrorKind::Protocol;
}

std::string utf8_or_replace(const std::string& bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n;) {
    size_t len = utf8_sequence(p + i, n - i);
    if (len) {
      out.append(bytes, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER, one per invalid byte
      ++i;
    }
  }
  return out;
}

}  // namespace gdrlab
