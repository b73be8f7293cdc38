#include "wire/frame.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/vocab.h"

namespace gdrlab {
namespace {
void put32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i)); }
void put16(uint8_t* p, uint16_t v) { p[0] = static_cast<uint8_t>(v); p[1] = static_cast<uint8_t>(v >> 8); }
uint32_t get32(const uint8_t* p) { uint32_t v = 0; for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i); return v; }
uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
}  // namespace

const char* frame_type_name(uint16_t type) {
  switch (static_cast<FrameType>(type)) {
    case FrameType::None: break;
    case FrameType::Max: break;
    case FrameType::Hello: return "HELLO";
    case FrameType::Welcome: return "WELCOME";
    case FrameType::Reject: return "REJECT";
    case FrameType::Setup: return "SETUP";
    case FrameType::Ready: return "READY";
    case FrameType::Error: return "ERROR";
    case FrameType::Data: return "DATA";
    case FrameType::Ack: return "ACK";
    case FrameType::Verdict: return "VERDICT";
    case FrameType::Bye: return "BYE";
    case FrameType::Connect: return "CONNECT";
    case FrameType::UcxConnect: return "UCX_CONNECT";
  }
  return "UNKNOWN";
}

void encode_header(const FrameHeader& h, uint8_t out[kHeaderBytes]) {
  put32(out, h.magic);
  put16(out + 4, h.version);
  put16(out + 6, h.type);
  put32(out + 8, h.seq);
  put32(out + 12, h.length);
}

FrameHeader decode_header(const uint8_t in[kHeaderBytes]) {
  FrameHeader h;
  h.magic = get32(in);
  h.version = get16(in + 4);
  h.type = get16(in + 6);
  h.seq = get32(in + 8);
  h.length = get32(in + 12);
  return h;
}

std::vector<uint8_t> encode_frame(FrameType type, const std::vector<uint8_t>& body, uint32_t seq) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(type);
  h.seq = seq;
  h.length = static_cast<uint32_t>(body.size());
  std::vector<uint8_t> out(kHeaderBytes + body.size());
  encode_header(h, out.data());
  std::copy(body.begin(), body.end(), out.begin() + kHeaderBytes);
  return out;
}

uint32_t max_payload(uint16_t type) {
  return type == static_cast<uint16_t>(FrameType::Data) ? kMaxDataBytes : kMaxControlBytes;
}

void validate_header(const FrameHeader& h, uint32_t expected_seq) {
  if (h.magic != kFrameMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "bad frame magic 0x%08x (expected 0x%08x)", h.magic, kFrameMagic);
    throw_protocol(buf);
  }
  if (h.version != kWireVersion)
    throw_protocol("wire version " + std::to_string(h.version) + " not supported (this side speaks " +
                   std::to_string(kWireVersion) + ")");
  if (h.type == static_cast<uint16_t>(FrameType::None) || !in_range<FrameType>(h.type)) throw_protocol("unknown frame type " + std::to_string(h.type));
  if (h.seq != expected_seq)
    throw_protocol("frame out of sequence: got " + std::to_string(h.seq) + ", expected " +
                   std::to_string(expected_seq));
  if (h.length > max_payload(h.type))
    throw_protocol(std::string(frame_type_name(h.type)) + " frame length " + std::to_string(h.length) +
                   " exceeds the maximum " + std::to_string(max_payload(h.type)));
}

void BodyWriter::u32(uint32_t v) { for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i))); }
void BodyWriter::u64(uint64_t v) { for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i))); }
void BodyWriter::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  buf_.insert(buf_.end(), s.begin(), s.end());
}

void BodyReader::need(size_t k) const {
  if (k > n_ - pos_) throw_protocol("frame body too short");
}
uint8_t BodyReader::u8() { need(1); return p_[pos_++]; }
uint32_t BodyReader::u32() { need(4); uint32_t v = get32(p_ + pos_); pos_ += 4; return v; }
uint64_t BodyReader::u64() {
  need(8);
  uint64_t v = uint64_t(get32(p_ + pos_)) | (uint64_t(get32(p_ + pos_ + 4)) << 32);
  pos_ += 8;
  return v;
}
std::string BodyReader::str(size_t max_len) {
  uint32_t n = u32();
  if (n > max_len) throw_protocol("string field of " + std::to_string(n) + " bytes exceeds " + std::to_string(max_len));
  need(n);
  std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
  pos_ += n;
  return s;
}
void BodyReader::done() const {
  if (pos_ != n_) throw_protocol("frame body has " + std::to_string(n_ - pos_) + " unexpected trailing bytes");
}

std::vector<uint8_t> encode_spec(const TestSpec& s) {
  BodyWriter w;
  w.u8(s.path); w.u8(s.mode); w.u64(s.size); w.u32(s.iters); w.u32(s.warmup); w.u32(s.window);
  w.u64(s.chunk); w.u32(s.depth); w.u32(s.device); w.u64(s.seed);
  return w.bytes();
}

TestSpec decode_spec(const uint8_t* p, size_t n) {
  BodyReader r(p, n);
  TestSpec s;
  s.path = r.u8(); s.mode = r.u8(); s.size = r.u64(); s.iters = r.u32(); s.warmup = r.u32();
  s.window = r.u32(); s.chunk = r.u64(); s.depth = r.u32(); s.device = r.u32(); s.seed = r.u64();
  r.done();
  return s;
}

std::vector<uint8_t> encode_error(const Error& e) {
  BodyWriter w;
  w.u8(static_cast<uint8_t>(e.kind));
  std::string text = e.what();
  if (text.size() > 4000) text.resize(4000);
  w.str(text);
  return w.bytes();
}

Error decode_error(const uint8_t* p, size_t n, const char* during) {
  BodyReader r(p, n);
  ErrorKind kind = error_kind_from_code(r.u8());
  std::string text = r.text(kMaxControlBytes);
  return Error(kind, "peer", during, 0, text);
}

std::vector<uint8_t> encode_hello(const Hello& h) {
  BodyWriter w;
  w.u32(h.version);
  w.str(h.token);
  return w.bytes();
}

Hello decode_hello(const uint8_t* p, size_t n) {
  BodyReader r(p, n);
  Hello h;
  h.version = r.u32();
  h.token = r.str(kMaxTokenBytes);
  r.done();
  return h;
}

std::string escape_controls(const std::string& text, size_t max_bytes) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    // Cut only before a character's first byte, never inside a UTF-8 sequence.
    if (out.size() >= max_bytes && (c & 0xC0) != 0x80) {
      out += "... (" + std::to_string(text.size()) + " bytes)";
      break;
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace gdrlab
