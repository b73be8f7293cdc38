#include "wire/channel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace gdrlab {

void ControlChannel::send_header(FrameType type, size_t n, const void* payload, size_t payload_now) {
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

void ControlChannel::send_control(FrameType type, const std::vector<uint8_t>& body) {
  send_header(type, body.size(), body.data(), body.size());
}

void ControlChannel::send_error(const Error& e) noexcept {
  try {
    send_control(FrameType::Error, encode_error(e));
  } catch (...) {
  }
}

void ControlChannel::send_data(const void* p, size_t n) { send_header(FrameType::Data, n, p, n); }

void ControlChannel::send_data_header(size_t n) { send_header(FrameType::Data, n, nullptr, 0); }

void ControlChannel::set_frame_deadlines(int base_ms, uint64_t floor_bytes_per_s) {
  frame_base_ms_ = base_ms > 0 && floor_bytes_per_s > 0 ? base_ms : 0;
  frame_floor_rate_ = floor_bytes_per_s;
  if (!frame_base_ms_) sock_->clear_deadline();
}

Socket::Clock::duration ControlChannel::time_for(uint64_t bytes) const {
  return std::chrono::milliseconds(frame_base_ms_) +
         std::chrono::microseconds(bytes * 1000000u / frame_floor_rate_);
}

FrameHeader ControlChannel::recv_header() {
  uint8_t hdr[kHeaderBytes];
  if (frame_base_ms_) {
    // A new frame: its own deadline, from now (a coarse clock read, no system call).
    frame_start_ = Socket::coarse_now();
    frame_bytes_ = 0;
    frame_got_ = 0;
    sock_->set_deadline(frame_start_ + time_for(kHeaderBytes));
    recv_in_frame(hdr, kHeaderBytes);
  } else {
    sock_->recv_all(hdr, kHeaderBytes);
  }
  FrameHeader h = decode_header(hdr);
  validate_header(h, recv_seq_);
  ++recv_seq_;
  if (frame_base_ms_) {
    frame_bytes_ = kHeaderBytes + static_cast<uint64_t>(h.length);
    waiting_for_ = frame_type_name(h.type);
    if (h.length) sock_->set_deadline(frame_start_ + time_for(frame_bytes_));
  }
  return h;
}

void ControlChannel::recv_in_frame(void* p, size_t n) {
  try {
    sock_->recv_all(p, n);
  } catch (const Error& e) {
    if (e.kind == ErrorKind::PeerTimeout && e.text.rfind(Socket::kDeadlineText, 0) == 0)
      throw_frame_timeout(frame_got_ + (n - std::min(n, sock_->missing_at_deadline())));
    throw;
  }
  frame_got_ += n;
}

void ControlChannel::throw_frame_timeout(uint64_t got) const {
  char took[32], allowed[32];
  const auto now = Socket::Clock::now();
  std::snprintf(took, sizeof took, "%.1f", std::chrono::duration<double>(now - frame_start_).count());
  const uint64_t total = frame_bytes_ ? frame_bytes_ : kHeaderBytes;
  std::snprintf(allowed, sizeof allowed, "%.1f", std::chrono::duration<double>(time_for(total)).count());
  const std::string what = frame_bytes_ ? std::to_string(got) + " of its " + std::to_string(total) + " bytes"
                                        : std::to_string(got) + " of its 16 header bytes";
  char base[32], rate[32];
  std::snprintf(base, sizeof base, "%.1f", frame_base_ms_ / 1000.0);
  std::snprintf(rate, sizeof rate, "%.0f", static_cast<double>(frame_floor_rate_) / 1e6);
  throw Error(ErrorKind::PeerTimeout, "tcp", "recv", 0,
              std::string("timed out waiting for ") + waiting_for_ + " from the server: " + what + " came in " + took +
                  " s; a message may take the timeout (" + base + " s) plus its size at " + rate + " MB/s (" +
                  allowed + " s for this one): the server is overloaded or trickling, or the link is slower than that "
                  "(raise the timeout)");
}

std::vector<uint8_t> ControlChannel::recv_body(const FrameHeader& h) {
  std::vector<uint8_t> body(h.length);
  if (h.length) recv_raw(body.data(), h.length);
  return body;
}

void ControlChannel::rethrow_peer_error(const std::vector<uint8_t>& body) {
  throw decode_error(body.data(), body.size(), "");
}

std::vector<uint8_t> ControlChannel::expect(FrameType type) {
  waiting_for_ = frame_type_name(static_cast<uint16_t>(type));
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

void ControlChannel::expect_data(size_t n) {
  waiting_for_ = "DATA";
  FrameHeader h = recv_header();
  if (h.type == static_cast<uint16_t>(FrameType::Error)) rethrow_peer_error(recv_body(h));
  if (h.type != static_cast<uint16_t>(FrameType::Data))
    throw_protocol(std::string("expected DATA, got ") + frame_type_name(h.type));
  if (h.length != n)
    throw_protocol("DATA frame of " + std::to_string(h.length) + " bytes, expected " + std::to_string(n));
}

}  // namespace gdrlab
