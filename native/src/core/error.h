// One error type for the whole engine. It carries the library and call that failed, the
// library's own code and its text; bind/ translates it into the gdrlab.errors class that
// error_class_name() names (one table, exported as gdrlab._native.ERROR_CLASS_NAMES).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gdrlab {

enum class ErrorKind {
  Unavailable,      // the hardware or library a path needs is not here
  Cuda,             // a CUDA driver call failed
  Verbs,            // a verbs call failed (code is errno)
  Protocol,         // the peer sent something the wire protocol does not allow
  PeerTimeout,      // the peer did not answer within the timeout
  PeerClosed,       // the peer closed the connection or died
  Auth,             // handshake refused: wrong or missing token, version mismatch
  InvalidArgument,  // a caller passed a bad size, kind or option
  System,           // an OS call failed (code is errno)
  Verify,           // received data differs from the pattern that was sent
  Max,
};

class Error : public std::runtime_error {
 public:
  // where: the failing call's source file:line ("" when not known), appended to what().
  Error(ErrorKind kind, std::string library, std::string call, long long code, std::string text,
        std::string where = "");
  ErrorKind kind;
  std::string library;
  std::string call;
  long long code;
  std::string text;
  std::string where;  // source file:line of the failing call, when known (CUDA calls)
};

[[noreturn]] void throw_unavailable(const std::string& text);
[[noreturn]] void throw_invalid(const std::string& text);
[[noreturn]] void throw_protocol(const std::string& text);
// errno-carrying OS failure: text is strerror(err).
[[noreturn]] void throw_system(const std::string& call, int err);

// The gdrlab.errors class an ErrorKind becomes in Python ("SystemCallError" for System).
const char* error_class_name(ErrorKind kind);
// A kind code read from a peer; an unknown code becomes Protocol (the peer broke the protocol).
ErrorKind error_kind_from_code(uint8_t code);

// `bytes` as valid UTF-8: every invalid sequence becomes U+FFFD. Text from a peer goes through
// this before it reaches an Error, a log line or Python, which refuses invalid UTF-8.
std::string utf8_or_replace(const std::string& bytes);

}  // namespace gdrlab
