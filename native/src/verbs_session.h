// Server-side hook for the verbs wire: a CONNECT frame on a tcp session hands the session to the
// verbs layer, which exchanges connection data (LID/GID, QPN, PSN, rkey, address) over `wire` and
// runs the test over an RC queue pair. Implemented in verbs_session.cc.
#pragma once
#include <cstdint>
#include <vector>

#include "wire_tcp.h"

namespace gdrlab {

// Called by Server::handle with the body of a CONNECT frame. Throws Error on failure; an
// Error(Unavailable) is reported to the client and the tcp session continues.
void verbs_serve(TcpWire& wire, const std::vector<uint8_t>& connect_body, int device);

}  // namespace gdrlab
