// The control channel both wires share: frames over a Socket with per-direction sequence numbers.
// The session core (wire/session.h) speaks HELLO, SETUP/CONNECT, READY, ACK and VERDICT over it;
// the tcp wire (tcp/) also moves its DATA frames through it, the verbs wire only its control
// frames. Every received header is validated before a byte of payload is read.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "wire/frame.h"
#include "wire/socket.h"

namespace gdrlab {

class ControlChannel {
 public:
  explicit ControlChannel(std::unique_ptr<Socket> sock) : sock_(std::move(sock)) {}
  // A connection whose first `received` frames were read elsewhere (the server reads the HELLO
  // before a session thread takes the connection over).
  ControlChannel(std::unique_ptr<Socket> sock, uint32_t received) : sock_(std::move(sock)), recv_seq_(received) {}

  void send_control(FrameType type, const std::vector<uint8_t>& body = {});
  // Sends an Error frame describing e (best effort: a broken connection is ignored).
  void send_error(const Error& e) noexcept;
  // A whole data message, header and payload in one system call.
  void send_data(const void* p, size_t n);
  // A data header whose payload follows through send_raw (chunked paths).
  void send_data_header(size_t n);
  void send_raw(const void* p, size_t n) { sock_->send_all(p, n); }

  // The measuring side: every frame it reads must arrive whole within base_ms plus its size at
  // floor_bytes_per_s, counted from when it starts reading the frame, however the peer trickles
  // (a per-call timeout alone lets one byte per timeout hold the client forever). Past that,
  // Error(PeerTimeout) names the frame, the bytes that came and the time taken. Costs no system
  // call per frame (Socket::set_deadline). 0: off (the serving side has its own deadlines).
  void set_frame_deadlines(int base_ms, uint64_t floor_bytes_per_s);

  FrameHeader recv_header();
  // Receives the next frame, which must be of type `type`; an Error frame from the peer is
  // rethrown here with the peer's kind and text, anything else is a protocol error.
  std::vector<uint8_t> expect(FrameType type);
  // Receives a Data header announcing exactly n payload bytes (the payload follows).
  void expect_data(size_t n);
  void recv_raw(void* p, size_t n) {
    if (!frame_base_ms_) return sock_->recv_all(p, n);
    recv_in_frame(p, n);
  }

  Socket& socket() { return *sock_; }

 private:
  void send_header(FrameType type, size_t n, const void* payload, size_t payload_now);
  std::vector<uint8_t> recv_body(const FrameHeader& h);
  [[noreturn]] void rethrow_peer_error(const std::vector<uint8_t>& body);
  // With frame deadlines: a receive of part of the current frame; a deadline error says which.
  void recv_in_frame(void* p, size_t n);
  [[noreturn]] void throw_frame_timeout(uint64_t got) const;
  Socket::Clock::duration time_for(uint64_t bytes) const;

  std::unique_ptr<Socket> sock_;
  uint32_t send_seq_ = 0;
  uint32_t recv_seq_ = 0;
  // Frame deadlines (set_frame_deadlines): the frame being read, for the deadline and its error.
  int frame_base_ms_ = 0;
  uint64_t frame_floor_rate_ = 0;
  Socket::Clock::time_point frame_start_{};
  const char* waiting_for_ = "a frame";  // the type expected, until its header has come
  uint64_t frame_bytes_ = 0;             // header and payload; 0 until the header has come
  uint64_t frame_got_ = 0;
};

}  // namespace gdrlab
