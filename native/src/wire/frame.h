// The tcp wire's frame header and message bodies: pure encode/decode functions with no I/O,
// so the fuzz target and the tests can drive them directly.
//
// Every frame starts with a 16-byte header, little-endian:
//   u32 magic 'GDRL' | u16 version | u16 type | u32 sequence | u32 payload length
// The receiver checks magic, version, type (against what the protocol allows next), sequence (each
// direction counts from 0) and length (<= the frame type's maximum) before reading the payload.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/spec.h"

namespace gdrlab {

constexpr uint32_t kFrameMagic = 0x4c524447u;  // "GDRL" in memory order
constexpr uint16_t kWireVersion = 1;
constexpr size_t kHeaderBytes = 16;
constexpr uint32_t kMaxControlBytes = 64u * 1024u;
constexpr uint32_t kMaxTokenBytes = 256;

enum class FrameType : uint16_t {
  None = 0,     // never sent: a header with type 0 is refused
  Hello = 1,    // client -> server: version, token
  Welcome = 2,  // server -> client: server description
  Reject = 3,   // server -> client: why the handshake failed, then close
  Setup = 4,    // client -> server: one test's parameters
  Ready = 5,    // server -> client: buffers allocated
  Error = 6,    // either way: a failure description
  Data = 7,     // a message's payload
  Ack = 8,      // server -> client: a streaming window was received
  Verdict = 9,  // server -> client: result of checking a verification message
  Bye = 10,     // client -> server: end of session
  Connect = 11, // either way: opaque connection data for another wire (verbs)
  UcxConnect = 12, // either way: a ucx test's parameters and UCX worker address (ucx/ucx_wire.h)
  Max,          // sentinel: every valid type is below it
};

const char* frame_type_name(uint16_t type);

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kWireVersion;
  uint16_t type = 0;
  uint32_t seq = 0;
  uint32_t length = 0;
};

void encode_header(const FrameHeader& h, uint8_t out[kHeaderBytes]);
FrameHeader decode_header(const uint8_t in[kHeaderBytes]);
// Throws Error(Protocol) naming the first field that is wrong.
void validate_header(const FrameHeader& h, uint32_t expected_seq);
uint32_t max_payload(uint16_t type);
// A whole frame (header with sequence `seq`, then body) as bytes, for a send that must not block
// (the server's answers before authentication).
std::vector<uint8_t> encode_frame(FrameType type, const std::vector<uint8_t>& body, uint32_t seq = 0);

constexpr size_t kMaxPeerTextChars = 2000;
// text with bytes below 0x20, 0x7f and backslash escaped (\xNN, \\); UTF-8 kept; cut at max_bytes
// (on a character boundary) with the original length noted.
std::string escape_controls(const std::string& text, size_t max_bytes);

// A tiny TLV-free byte writer/reader for control bodies; the reader throws Error(Protocol) on a
// short or over-long body instead of reading past the end.
class BodyWriter {
 public:
  void u8(uint8_t v) { buf_.push_back(v); }
  void u32(uint32_t v);
  void u64(uint64_t v);
  void str(const std::string& s);  // u32 length + bytes
  const std::vector<uint8_t>& bytes() const { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

class BodyReader {
 public:
  BodyReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  std::string str(size_t max_len);
  // A string from the peer meant for people (reasons, descriptions, error text): invalid UTF-8
  // is replaced (U+FFFD), so no peer can make Python's str conversion fail; control characters
  // (newlines, escape codes) are escaped and the text cut at kMaxPeerTextChars, so no peer can
  // forge lines or drive the terminal that prints it.
  std::string text(size_t max_len) { return escape_controls(utf8_or_replace(str(max_len)), kMaxPeerTextChars); }
  void done() const;  // throws if bytes are left over

 private:
  void need(size_t k) const;
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

// A TestSpec (core/spec.h) as the SETUP body.
std::vector<uint8_t> encode_spec(const TestSpec& s);
TestSpec decode_spec(const uint8_t* p, size_t n);

// An ERROR frame's body: u8 ErrorKind, then the text. encode_error caps the text at 4000 bytes;
// decode_error maps an unknown kind to Protocol and replaces invalid UTF-8. `during` names what
// the receiver was doing ("handshake", or "" inside a test) for the Error's call field.
std::vector<uint8_t> encode_error(const Error& e);
Error decode_error(const uint8_t* p, size_t n, const char* during);

struct Hello {
  uint32_t version = kWireVersion;
  std::string token;
};
std::vector<uint8_t> encode_hello(const Hello& h);
Hello decode_hello(const uint8_t* p, size_t n);

}  // namespace gdrlab
