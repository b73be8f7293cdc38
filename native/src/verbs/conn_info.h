// What the two sides of a verbs test exchange over the control channel to connect their queue
// pairs (perftest's and NCCL's exchange): (LID, GID, QPN, PSN, MTU, rkey, address), versioned.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/spec.h"

namespace gdrlab {

constexpr uint32_t kVerbsConnMagic = 0x53425256u;  // "VRBS" in memory order
constexpr uint8_t kVerbsConnVersion = 3;  // 2: roce_version added; 3: traffic_class, service_level

struct ConnInfo {
  uint32_t qpn = 0;        // 24 bits
  uint32_t psn = 0;        // 24 bits
  uint16_t lid = 0;        // InfiniBand only
  uint8_t link_layer = 0;  // 1 InfiniBand, 2 Ethernet (RoCE)
  uint8_t mtu = 0;         // ibv_mtu of the port (active_mtu)
  uint8_t gid[16] = {};
  uint8_t gid_index = 0;   // the sender's own index (informational: the peer uses its own)
  uint8_t roce_version = 0;  // RoCE version of the sender's GID (1, 2; 0 unknown or InfiniBand)
  uint8_t traffic_class = 0;  // the sender's GRH traffic class: a passive side adopts it (as NCCL)
  uint8_t service_level = 0;  // the sender's SL (0..15), likewise
  uint32_t rkey = 0;       // the region the peer may write
  uint64_t addr = 0;
  uint64_t length = 0;
};

// ConnInfo's fields in order, for code that treats each alike (the binding's dict): X for a number,
// G for the 16-byte GID.
#define GDRLAB_CONN_FIELDS(X, G) \
  X(qpn) X(psn) X(lid) X(link_layer) X(mtu) G(gid) X(gid_index) X(roce_version) X(traffic_class) X(service_level) \
  X(rkey) X(addr) X(length)

std::vector<uint8_t> encode_conn_info(const ConnInfo& c);
// Throws Error(Protocol) on a short, long or malformed body (bad magic, version, QPN, PSN, MTU,
// link layer).
ConnInfo decode_conn_info(const uint8_t* p, size_t n);

// The client's CONNECT body: one test's parameters plus the client's connection data.
std::vector<uint8_t> encode_connect_request(const TestSpec& spec, const ConnInfo& c);
void decode_connect_request(const uint8_t* p, size_t n, TestSpec* spec, ConnInfo* c);

}  // namespace gdrlab
