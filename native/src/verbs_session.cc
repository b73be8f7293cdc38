#include "verbs_session.h"

#include "error.h"

namespace gdrlab {

void verbs_serve(TcpWire&, const std::vector<uint8_t>&, int) {
  throw_unavailable("the verbs wire is not part of this build");
}

}  // namespace gdrlab
