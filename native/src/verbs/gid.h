// Which GID a RoCE queue pair uses: the GID table's entries, NCCL's policy knobs, and the choice.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gdrlab {

struct GidEntry {
  int index = 0;
  uint8_t gid[16] = {};
  int roce_version = 0;  // 2, 1 or 0 (unknown)
};

// Which RoCE GIDs may be chosen, with NCCL's knobs (net_ib's ncclIbGetGidIndex):
//   NCCL_IB_ROCE_VERSION_NUM  1 or 2 (NCCL's default 2)
//   NCCL_IB_ADDR_FAMILY       AF_INET (IPv4-mapped GIDs, NCCL's default) or AF_INET6
//   NCCL_IB_ADDR_RANGE        a CIDR block (10.1.0.0/16, fd00::/64) the GID's address must lie in
// each read as GDRLAB_IB_<same> first. Set, a knob is a requirement: no GID meeting it is an error
// naming the table (where NCCL silently keeps index 0). Unset, the order is NCCL's default
// preference: RoCE v2 before v1, IPv4-mapped before IPv6, link-local last.
struct GidPolicy {
  int family = 0;          // 0 not set, or AF_INET / AF_INET6
  bool have_range = false;
  uint8_t range[16] = {};  // in GID form: an IPv4 block as ::ffff:a.b.c.d
  int range_bits = 0;      // prefix length in GID bits (an IPv4 /16 is 96 + 16)
  int roce_version = 0;    // 0 not set, 1 or 2
  std::string text;        // the settings, as written, for messages ("" when none)
};
// Parses the three values (empty: not set); `names` are the variables they came from, for messages.
// Throws InvalidArgument on a family other than AF_INET/AF_INET6, a version other than 1/2, or a
// range that is not address/bits (or whose family contradicts the family set).
GidPolicy parse_gid_policy(const std::string& family, const std::string& range, const std::string& version,
                           const std::string names[3]);
// From GDRLAB_IB_ADDR_FAMILY / _ADDR_RANGE / _ROCE_VERSION_NUM, else the NCCL_IB_ names.
GidPolicy gid_policy_from_env();
// True when the GID is an IPv4 address (IPv4-mapped ::ffff:a.b.c.d, or its multicast form), as
// NCCL's getGidAddrFamily.
bool gid_is_ipv4(const uint8_t gid[16]);
bool gid_in_range(const uint8_t gid[16], const GidPolicy& p);
// The index to use on a RoCE port, or -1 when no entry qualifies (empty, unconfigured, or ruled
// out by the policy). Ties go to the lower index when the type is known, to the higher when it
// is not (mlx5 lists each address as v1, then v2).
// peer_gid (16 bytes, or nullptr): among entries of the best class, the one sharing the longest
// prefix with the peer's GID wins, so a port with addresses in several subnets or VLANs pairs with
// the peer's.
int select_gid_index(const std::vector<GidEntry>& table, const GidPolicy& policy = GidPolicy(),
                     const uint8_t* peer_gid = nullptr);
bool gid_is_ipv4_mapped(const uint8_t gid[16]);
std::string gid_text(const uint8_t gid[16]);  // inet_ntop's IPv6 form
// GDRLAB_IB_ROUTABLE_FLID_GID_INDEX, else NCCL_IB_ROUTABLE_FLID_GID_INDEX, else 1 (NCCL's default):
// the GID index that carries the port's FLID on routed InfiniBand.
int routable_flid_gid_index();

}  // namespace gdrlab
