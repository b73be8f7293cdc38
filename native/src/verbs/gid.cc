#include "verbs/gid.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/knobs.h"

namespace gdrlab {

bool gid_is_ipv4_mapped(const uint8_t g[16]) {
  for (int i = 0; i < 10; ++i)
    if (g[i]) return false;
  return g[10] == 0xff && g[11] == 0xff;
}

bool gid_is_ipv4(const uint8_t g[16]) {
  if (gid_is_ipv4_mapped(g)) return true;
  // ff0e::ffff:a.b.c.d, the IPv4-mapped multicast form NCCL also counts as AF_INET.
  static const uint8_t mc[12] = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g, mc, 12) == 0;
}

bool gid_in_range(const uint8_t g[16], const GidPolicy& p) {
  if (!p.have_range) return true;
  const int whole = p.range_bits / 8, rest = p.range_bits % 8;
  if (std::memcmp(g, p.range, static_cast<size_t>(whole)) != 0) return false;
  if (!rest) return true;
  const uint8_t mask = static_cast<uint8_t>(0xFF << (8 - rest));
  return (g[whole] & mask) == (p.range[whole] & mask);
}

std::string gid_text(const uint8_t g[16]) {
  char buf[INET6_ADDRSTRLEN] = {};
  return inet_ntop(AF_INET6, g, buf, sizeof buf) ? std::string(buf) : std::string("?");
}

namespace {

// NCCL's configuredGid: an all-zero entry, or fe80:: with nothing after the prefix, is a slot the
// kernel has not filled.
bool gid_configured(const uint8_t g[16]) {
  const bool rest_zero = std::all_of(g + 4, g + 16, [](uint8_t b) { return b == 0; });
  const bool head_zero = std::all_of(g, g + 4, [](uint8_t b) { return b == 0; });
  const bool fe80 = g[0] == 0xfe && g[1] == 0x80 && g[2] == 0 && g[3] == 0;
  return !(rest_zero && (head_zero || fe80));
}

}  // namespace

GidPolicy parse_gid_policy(const std::string& family, const std::string& range, const std::string& version,
                           const std::string names[3]) {
  GidPolicy p;
  auto note = [&](const std::string& name, const std::string& v) {
    p.text += (p.text.empty() ? "" : ", ") + name + "=" + v;
  };
  if (!family.empty()) {
    if (family == "AF_INET") p.family = AF_INET;
    else if (family == "AF_INET6") p.family = AF_INET6;
    else throw_invalid(names[0] + "='" + family + "': valid values are AF_INET and AF_INET6");
    note(names[0], family);
  }
  if (!version.empty()) {
    if (version == "1" || version == "2") p.roce_version = version[0] - '0';
    else throw_invalid(names[2] + "='" + version + "': the RoCE version is 1 or 2");
    note(names[2], version);
  }
  if (!range.empty()) {
    const size_t slash = range.find('/');
    const std::string addr = range.substr(0, slash == std::string::npos ? range.size() : slash);
    const std::string bits = slash == std::string::npos ? "" : range.substr(slash + 1);
    const std::string bad = names[1] + "='" + range + "': ";
    char* end = nullptr;
    const long n = bits.empty() ? -1 : std::strtol(bits.c_str(), &end, 10);
    if (bits.empty() || *end || n < 0)
      throw_invalid(bad + "expected address/prefix-length, e.g. 10.1.0.0/16 or fd00:1::/64");
    uint8_t raw[16] = {};
    int fam = 0;
    if (inet_pton(AF_INET, addr.c_str(), raw) == 1) fam = AF_INET;
    else if (inet_pton(AF_INET6, addr.c_str(), raw) == 1) fam = AF_INET6;
    else throw_invalid(bad + "'" + addr + "' is neither an IPv4 nor an IPv6 address");
    if (n > (fam == AF_INET ? 32 : 128))
      throw_invalid(bad + "prefix length " + std::to_string(n) + " is too long for " +
                    (fam == AF_INET ? "IPv4 (at most 32)" : "IPv6 (at most 128)"));
    if (p.family && p.family != fam)
      throw_invalid(bad + "an " + (fam == AF_INET ? "IPv4" : "IPv6") + " range, but " + names[0] + " asks for " +
                    (p.family == AF_INET ? "AF_INET" : "AF_INET6"));
    if (fam == AF_INET) {  // ::ffff:a.b.c.d, as an IPv4 address sits in a RoCE GID
      p.range[10] = p.range[11] = 0xff;
      std::memcpy(p.range + 12, raw, 4);
      p.range_bits = 96 + static_cast<int>(n);
    } else {
      std::memcpy(p.range, raw, 16);
      p.range_bits = static_cast<int>(n);
    }
    p.have_range = true;
    note(names[1], range);
  }
  return p;
}

GidPolicy gid_policy_from_env() {
  const EnvSetting set[3] = {knob_env(Knob::IbAddrFamily), knob_env(Knob::IbAddrRange),
                             knob_env(Knob::IbRoceVersionNum)};
  std::string values[3], names[3];
  for (int i = 0; i < 3; ++i) {
    names[i] = set[i].name;
    if (set[i].value) values[i] = set[i].value;
  }
  return parse_gid_policy(values[0], values[1], values[2], names);
}

int routable_flid_gid_index() {
  const EnvSetting e = knob_env(Knob::IbRoutableFlidGidIndex);
  if (!e.value) return 1;
  char* end = nullptr;
  const long v = std::strtol(e.value, &end, 10);
  if (*end || v < 0 || v > 255)
    throw_invalid(std::string(e.name) + "='" + e.value + "' is not a GID index 0..255");
  return static_cast<int>(v);
}

namespace {
int common_prefix_bits(const uint8_t a[16], const uint8_t b[16]) {
  int n = 0;
  for (int i = 0; i < 16; ++i) {
    const uint8_t x = a[i] ^ b[i];
    if (!x) {
      n += 8;
      continue;
    }
    for (int bit = 7; bit >= 0 && !(x >> bit & 1); --bit) ++n;
    break;
  }
  return n;
}
}  // namespace

int select_gid_index(const std::vector<GidEntry>& table, const GidPolicy& policy, const uint8_t* peer_gid) {
  const int want_version = policy.roce_version ? policy.roce_version : 2;  // NCCL's default is v2
  int best = -1;
  long best_score = -1;
  for (const GidEntry& e : table) {
    if (!gid_configured(e.gid)) continue;
    const bool v4 = gid_is_ipv4(e.gid);
    // A knob that is set is a requirement (an entry of unknown type passes the version test).
    if (policy.family && policy.family != (v4 ? AF_INET : AF_INET6)) continue;
    if (!gid_in_range(e.gid, policy)) continue;
    if (policy.roce_version && e.roce_version && e.roce_version != policy.roce_version) continue;
    const bool link_local = e.gid[0] == 0xfe && (e.gid[1] & 0xc0) == 0x80;
    // The wanted RoCE version first (v2 is routable UDP/IP, and v1 and v2 do not interoperate),
    // then an IPv4 address (what ARP-resolved Ethernet peers use; NCCL's default family), then a
    // global address over a link-local one.
    const int version_rank = e.roce_version == want_version ? 2 : e.roce_version ? 1 : 0;
    long score = version_rank * 4 + (v4 ? 2 : 0) + (link_local ? 0 : 1);
    // Among equals, the address sharing the longest prefix with the peer's GID (its subnet), where
    // the peer's is known: the passive side matches the active side's choice.
    score = score * 256 + (peer_gid ? common_prefix_bits(e.gid, peer_gid) : 0);
    const bool tie_wins = e.roce_version ? e.index < best : e.index > best;
    if (score > best_score || (score == best_score && tie_wins)) {
      best_score = score;
      best = e.index;
    }
  }
  return best;
}

}  // namespace gdrlab
