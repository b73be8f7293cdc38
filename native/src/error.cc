#include "error.h"

#include <cstring>

namespace gdrlab {

static std::string compose(const std::string& library, const std::string& call, long long code,
                           const std::string& text) {
  std::string msg;
  if (!library.empty()) msg += library + ": ";
  if (!call.empty()) msg += call + " failed: ";
  msg += text;
  if (code != 0) msg += " (code " + std::to_string(code) + ")";
  return msg;
}

Error::Error(ErrorKind k, std::string lib, std::string c, long long cd, std::string t)
    : std::runtime_error(compose(lib, c, cd, t)),
      kind(k), library(std::move(lib)), call(std::move(c)), code(cd), text(std::move(t)) {}

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

const char* kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Unavailable: return "Unavailable";
    case ErrorKind::Cuda: return "CudaError";
    case ErrorKind::Verbs: return "VerbsError";
    case ErrorKind::Protocol: return "ProtocolError";
    case ErrorKind::PeerTimeout: return "PeerTimeout";
    case ErrorKind::PeerClosed: return "PeerClosed";
    case ErrorKind::Auth: return "AuthError";
    case ErrorKind::InvalidArgument: return "InvalidArgument";
    case ErrorKind::System: return "SystemError";
    case ErrorKind::Verify: return "VerifyError";
  }
  return "Error";
}

}  // namespace gdrlab
