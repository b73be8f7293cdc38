// One error type for the whole engine. It carries the library and call that failed, the
// library's own code and its text; bind/ translates it into gdrlab.errors classes.
#pragma once
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
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string library, std::string call, long long code, std::string text);
  ErrorKind kind;
  std::string library;
  std::string call;
  long long code;
  std::string text;
};

[[noreturn]] void throw_unavailable(const std::string& text);
[[noreturn]] void throw_invalid(const std::string& text);
[[noreturn]] void throw_protocol(const std::string& text);
// errno-carrying OS failure: text is strerror(err).
[[noreturn]] void throw_system(const std::string& call, int err);

const char* kind_name(ErrorKind kind);

}  // namespace gdrlab
