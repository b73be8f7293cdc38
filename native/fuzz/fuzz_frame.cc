// libFuzzer target: the tcp wire's pure decoders (no I/O). The first input byte picks what the
// rest is fed to; every decoder must either accept the bytes or throw gdrlab::Error, never read
// out of bounds, overflow or abort. Accepted values are re-encoded and decoded again, so an
// encoder/decoder mismatch is a finding too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/vocab.h"
#include "wire/frame.h"

using namespace gdrlab;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_frame: %s\n", what);
  std::abort();
}

void header_case(const uint8_t* p, size_t n) {
  if (n < kHeaderBytes) return;
  FrameHeader h = decode_header(p);
  uint8_t again[kHeaderBytes];
  encode_header(h, again);
  if (std::memcmp(again, p, kHeaderBytes) != 0) fail("header does not round-trip");
  // The expected sequence number comes from the input too, so both matching and mismatching
  // sequences are explored.
  uint32_t expected = 0;
  if (n >= kHeaderBytes + 4) std::memcpy(&expected, p + kHeaderBytes, 4);
  try {
    validate_header(h, expected);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Protocol) fail("validate_header threw a non-protocol error");
    return;
  }
  // Accepted: every rule of frame.h must hold.
  if (h.magic != kFrameMagic || h.version != kWireVersion || h.seq != expected) fail("accepted a bad header");
  // The oracle is the protocol's documented range (frame.h: types 1..12, 12 the ucx wire's
  // UCX_CONNECT), kept apart from the enum's sentinel that the parser checks, so a sentinel moved
  // by mistake is a finding.
  if (h.type < 1 || h.type > 12) fail("accepted an unknown frame type");
  if (h.length > max_payload(h.type)) fail("accepted an over-long frame");
  if (h.type != static_cast<uint16_t>(FrameType::Data) && h.length > kMaxControlBytes) fail("control frame too long");
  (void)frame_type_name(h.type);
}

void hello_case(const uint8_t* p, size_t n) {
  try {
    Hello h = decode_hello(p, n);
    if (h.token.size() > kMaxTokenBytes) fail("accepted an over-long token");
    std::vector<uint8_t> again = encode_hello(h);
    if (again.size() != n || std::memcmp(again.data(), p, n) != 0) fail("hello does not round-trip");
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Protocol) fail("decode_hello threw a non-protocol error");
  }
}

void spec_case(const uint8_t* p, size_t n) {
  try {
    TestSpec s = decode_spec(p, n);
    std::vector<uint8_t> again = encode_spec(s);
    if (again.size() != n || std::memcmp(again.data(), p, n) != 0) fail("spec does not round-trip");
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Protocol) fail("decode_spec threw a non-protocol error");
  }
}

// A little interpreter over BodyReader: each opcode byte reads one field from the remaining input.
void reader_case(const uint8_t* p, size_t n) {
  if (n < 1) return;
  size_t nops = p[0] % 16;
  if (n < 1 + nops) return;
  const uint8_t* ops = p + 1;
  const uint8_t* body = p + 1 + nops;
  size_t body_n = n - 1 - nops;
  BodyReader r(body, body_n);
  size_t consumed = 0;
  try {
    for (size_t i = 0; i < nops; ++i) {
      switch (ops[i] % 5) {
        case 0: r.u8(); consumed += 1; break;
        case 1: r.u32(); consumed += 4; break;
        case 2: r.u64(); consumed += 8; break;
        case 3: consumed += 4 + r.str(ops[i] / 5).size(); break;
        case 4: r.done(); if (consumed != body_n) fail("done() accepted trailing bytes"); break;
      }
      if (consumed > body_n) fail("reader consumed more than the body");
    }
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Protocol) fail("BodyReader threw a non-protocol error");
  }
}

// An ERROR frame's body: the decoded kind is inside the enum and the text is valid UTF-8, so a
// peer's bytes can reach a log line or Python's str.
void error_case(const uint8_t* p, size_t n) {
  try {
    Error e = decode_error(p, n, "");
    if (!in_range<ErrorKind>(static_cast<unsigned>(e.kind))) fail("decoded an error kind past the sentinel");
    if (utf8_or_replace(e.text) != e.text) fail("peer error text is not valid UTF-8");
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Protocol) fail("decode_error threw a non-protocol error");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // Copy into an exact-size heap block so ASan catches any read one past the end.
  const size_t n = size - 1;
  uint8_t* body = static_cast<uint8_t*>(std::malloc(n ? n : 1));
  if (n) std::memcpy(body, data + 1, n);
  switch (data[0] % 5) {
    case 0: header_case(body, n); break;
    case 1: hello_case(body, n); break;
    case 2: spec_case(body, n); break;
    case 3: reader_case(body, n); break;
    case 4: error_case(body, n); break;
  }
  std::free(body);
  return 0;
}
