#include "wire/tcp.h"

namespace gdrlab {

void TcpWire::send_header(FrameType type, size_t n, const void* payload, size_t payload_now) {
  if (n > max_payload(static_cast<uint16_t>(type)))
    throw_invalid(std::string(frame_type_name(static_cast<uint16_t>(type))) + " message of " +
                  std::to_string(n) + " bytes exceeds the tcp wire's maximum of " +
                  std::to_string(max_payload(static_cast<uint16_t>(type))) + " bytes");
  FrameHeader h;
  h.type = static_cast<uint16_t>(type);
  h.seq = send_seq_;
  h.length = static_cast<uint32_t>(n);
  uint8_t hdr[kHeaderBytes];
  encode_header(h, hdr);
  sock_->send_two(hdr, kHeaderBytes, payload, payload_now);
  ++send_seq_;
}

void TcpWire::send_control(FrameType type, const std::vector<uint8_t>& body) {
  send_header(type, body.size(), body.data(), body.size());
}

void TcpWire::send_error(const Error& e) noexcept {
  try {
    send_control(FrameType::Error, encode_error(e));
  } catch (...) {
  }
}

void TcpWire::send_data(const void* p, size_t n) { send_header(FrameType::Data, n, p, n); }

void TcpWire::send_data_header(size_t n) { send_header(FrameType::Data, n, nullptr, 0); }

FrameHeader TcpWire::recv_header() {
  uint8_t hdr[kHeaderBytes];
  sock_->recv_all(hdr, kHeaderBytes);
  FrameHeader h = decode_header(hdr);
  validate_header(h, recv_seq_);
  ++recv_seq_;
  return h;
}

std::vector<uint8_t> TcpWire::recv_body(const FrameHeader& h) {
  std::vector<uint8_t> body(h.length);
  if (h.length) sock_->recv_all(body.data(), h.length);
  return body;
}

void TcpWire::rethrow_peer_error(const std::vector<uint8_t>& body) {
  throw decode_error(body.data(), body.size(), "");
}

std::vector<uint8_t> TcpWire::expect(FrameType type) {
  FrameHeader h = recv_header();
  if (h.type == static_cast<uint16_t>(type)) return recv_body(h);
  if (h.type == static_cast<uint16_t>(FrameType::Error)) rethrow_peer_error(recv_body(h));
  if (h.type == static_cast<uint16_t>(FrameType::Data))
    throw_protocol(std::string("expected ") + frame_type_name(static_cast<uint16_t>(type)) +
                   ", got a DATA frame");
  recv_body(h);  // bounded by validate_header: a control frame is at most 64 KiB
  throw_protocol(std::string("expected ") + frame_type_name(static_cast<uint16_t>(type)) + ", got " +
                 frame_type_name(h.type));
}

void TcpWire::expect_data(size_t n) {
  FrameHeader h = recv_header();
  if (h.type == static_cast<uint16_t>(FrameType::Error)) rethrow_peer_error(recv_body(h));
  if (h.type != static_cast<uint16_t>(FrameType::Data))
    throw_protocol(std::string("expected DATA, got ") + frame_type_name(h.type));
  if (h.length != n)
    throw_protocol("DATA frame of " + std::to_string(h.length) + " bytes, expected " + std::to_string(n));
}

}  // namespace gdrlab
