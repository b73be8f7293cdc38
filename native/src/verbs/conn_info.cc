#include "verbs/conn_info.h"

#include <string>

#include "core/error.h"
#include "verbs/abi.h"
#include "wire/frame.h"

namespace gdrlab {

std::vector<uint8_t> encode_conn_info(const ConnInfo& c) {
  BodyWriter w;
  w.u32(kVerbsConnMagic);
  w.u8(kVerbsConnVersion);
  w.u32(c.qpn);
  w.u32(c.psn);
  w.u32(c.lid);
  w.u8(c.link_layer);
  w.u8(c.mtu);
  for (uint8_t b : c.gid) w.u8(b);
  w.u8(c.gid_index);
  w.u8(c.roce_version);
  w.u8(c.traffic_class);
  w.u8(c.service_level);
  w.u32(c.rkey);
  w.u64(c.addr);
  w.u64(c.length);
  return w.bytes();
}

static ConnInfo read_conn_info(BodyReader& r) {
  if (r.u32() != kVerbsConnMagic) throw_protocol("verbs connection data: bad magic");
  uint8_t ver = r.u8();
  if (ver != kVerbsConnVersion)
    throw_protocol("verbs connection data version " + std::to_string(ver) + ", expected " +
                   std::to_string(kVerbsConnVersion));
  ConnInfo c;
  c.qpn = r.u32();
  c.psn = r.u32();
  uint32_t lid = r.u32();
  c.link_layer = r.u8();
  c.mtu = r.u8();
  for (uint8_t& b : c.gid) b = r.u8();
  c.gid_index = r.u8();
  c.roce_version = r.u8();
  c.traffic_class = r.u8();
  c.service_level = r.u8();
  c.rkey = r.u32();
  c.addr = r.u64();
  c.length = r.u64();
  if (c.qpn == 0 || c.qpn > 0xFFFFFFu) throw_protocol("verbs connection data: QPN " + std::to_string(c.qpn) + " is not a 24-bit QP number");
  if (c.psn > 0xFFFFFFu) throw_protocol("verbs connection data: PSN " + std::to_string(c.psn) + " exceeds 24 bits");
  if (lid > 0xFFFFu) throw_protocol("verbs connection data: LID " + std::to_string(lid) + " exceeds 16 bits");
  c.lid = static_cast<uint16_t>(lid);
  if (c.link_layer != ibv::IBV_LINK_LAYER_INFINIBAND && c.link_layer != ibv::IBV_LINK_LAYER_ETHERNET)
    throw_protocol("verbs connection data: unknown link layer " + std::to_string(c.link_layer));
  if (c.mtu < ibv::IBV_MTU_256 || c.mtu > ibv::IBV_MTU_4096)
    throw_protocol("verbs connection data: MTU code " + std::to_string(c.mtu) + " is not 1..5");
  if (c.service_level > 15)
    throw_protocol("verbs connection data: service level " + std::to_string(c.service_level) + " is not 0..15");
  if (c.roce_version > 2) throw_protocol("verbs connection data: RoCE version " + std::to_string(c.roce_version) + " is not 0..2");
  return c;
}

ConnInfo decode_conn_info(const uint8_t* p, size_t n) {
  BodyReader r(p, n);
  ConnInfo c = read_conn_info(r);
  r.done();
  return c;
}

std::vector<uint8_t> encode_connect_request(const TestSpec& spec, const ConnInfo& c) {
  std::vector<uint8_t> s = encode_spec(spec);
  std::vector<uint8_t> i = encode_conn_info(c);
  BodyWriter w;
  w.str(std::string(s.begin(), s.end()));
  w.str(std::string(i.begin(), i.end()));
  return w.bytes();
}

void decode_connect_request(const uint8_t* p, size_t n, TestSpec* spec, ConnInfo* c) {
  BodyReader r(p, n);
  std::string s = r.str(1024);
  std::string i = r.str(1024);
  r.done();
  *spec = decode_spec(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  *c = decode_conn_info(reinterpret_cast<const uint8_t*>(i.data()), i.size());
}

}  // namespace gdrlab
