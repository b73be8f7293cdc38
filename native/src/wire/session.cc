#include "wire/session.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <random>
#include <thread>

#include "core/error.h"

namespace gdrlab {

void check_session_limits(const std::string& token, int timeout_ms) {
  if (timeout_ms <= 0) throw_invalid("timeout must be positive");
  if (token.size() > kMaxTokenBytes) throw_invalid("token longer than 256 bytes");
}

namespace {

[[noreturn]] void throw_corrupted(const TestEndpoint& ep, const char* where, int64_t offset) {
  throw Error(ErrorKind::Verify, "gdrlab", "verify", 0,
              std::string("data corrupted on the way ") + where + " over " + ep.describe() +
                  ": first differing byte at offset " + std::to_string(offset));
}

}  // namespace

bool keeps_session(ErrorKind kind) {
  return kind == ErrorKind::Verify || kind == ErrorKind::Unavailable || kind == ErrorKind::InvalidArgument;
}

namespace {

// The verification exchange that ends every test, measuring side.
void verify_client(ControlChannel& control, TestEndpoint& ep, const TestSpec& spec, RunResult* res) {
  ep.settle();  // the peer's last timed write landed in this buffer: flush it before overwriting
  ep.user().fill_pattern(spec.seed, ep.offset(), spec.size);
  ep.send(true);
  std::vector<uint8_t> verdict = control.expect(FrameType::Verdict);
  BodyReader vr(verdict.data(), verdict.size());
  int64_t bad_remote = static_cast<int64_t>(vr.u64());
  vr.done();
  ep.recv();
  ep.settle();
  ep.finish();
  if (ep.confirms_last_write()) control.expect(FrameType::Ack);
  if (bad_remote >= 0) throw_corrupted(ep, "to the peer", bad_remote);
  int64_t bad_local = ep.user().check_pattern(spec.seed + 1, ep.offset(), spec.size);
  if (bad_local >= 0) throw_corrupted(ep, "back from the peer", bad_local);
  res->verified = true;
}

// ... serving side.
void verify_server(ControlChannel& control, TestEndpoint& ep, const TestSpec& spec) {
  ep.recv();
  ep.settle();
  int64_t bad = ep.user().check_pattern(spec.seed, ep.offset(), spec.size);
  BodyWriter v;
  v.u64(static_cast<uint64_t>(bad));
  control.send_control(FrameType::Verdict, v.bytes());
  ep.user().fill_pattern(spec.seed + 1, ep.offset(), spec.size);
  ep.send(true);
  ep.finish();
  if (ep.confirms_last_write()) control.send_control(FrameType::Ack);
}

// Both ways: a thread sends every window through `out` while this one receives as many through
// `in`. samples (may be null) gets one sample per timed window; returns the bytes received.
uint64_t both_ways_loop(const TestSpec& spec, TestEndpoint& out, TestEndpoint& in, std::vector<double>* samples) {
  using Clock = std::chrono::steady_clock;
  const uint32_t total = spec.warmup + spec.iters;
  std::vector<Clock::time_point> sent(total), got(total);
  std::exception_ptr tx_error, rx_error;
  // Set when receiving fails (the peer stopped sending, or sent garbage): the sender stops at its
  // next message instead of streaming every window to a peer that only drains.
  std::atomic<bool> rx_failed{false};
  const Clock::time_point start = Clock::now();
  std::thread tx([&] {
    try {
      for (uint32_t i = 0; i < total && !rx_failed.load(std::memory_order_relaxed); ++i) {
        for (uint32_t k = 0; k < spec.window && !rx_failed.load(std::memory_order_relaxed); ++k) out.send(false);
        sent[i] = Clock::now();
      }
    } catch (...) {
      tx_error = std::current_exception();
    }
  });
  uint64_t received = 0;
  try {
    for (uint32_t i = 0; i < total; ++i) {
      for (uint32_t k = 0; k < spec.window; ++k) {
        in.recv();
        received += spec.size;
      }
      got[i] = Clock::now();
    }
  } catch (...) {
    rx_error = std::current_exception();
    rx_failed.store(true, std::memory_order_relaxed);
  }
  tx.join();  // a sender stuck on a peer that stopped reading ends at the socket's send timeout
  if (rx_error) std::rethrow_exception(rx_error);
  if (tx_error) std::rethrow_exception(tx_error);
  if (samples) {
    samples->reserve(spec.iters);
    Clock::time_point prev = start;
    for (uint32_t i = 0; i < total; ++i) {
      const Clock::time_point done = std::max(sent[i], got[i]);
      if (i >= spec.warmup) samples->push_back(std::chrono::duration<double>(done - prev).count());
      prev = done;
    }
  }
  return received;
}

}  // namespace

RunResult run_client_test(ControlChannel& control, TestEndpoint& ep, const TestSpec& spec) {
  RunResult res;
  if (static_cast<Mode>(spec.mode) == Mode::Bandwidth) res.bw_windows_in_flight = ep.windows_in_flight(spec);
  measure(spec, [&] { ep.send(false); }, [&] { ep.recv(); }, [&] { ep.expect_ack(); }, &res.samples_s,
          &res.bytes_per_sample, res.bw_windows_in_flight, &res.bw_drains);
  verify_client(control, ep, spec, &res);
  return res;
}

void run_server_test(ControlChannel& control, TestEndpoint& ep, const TestSpec& spec) {
  answer(spec, [&] { ep.send(false); }, [&] { ep.recv(); }, [&] { ep.send_ack(); });
  verify_server(control, ep, spec);
}

RunResult run_client_both_ways(ControlChannel& control, TestEndpoint& out, TestEndpoint& in, const TestSpec& spec) {
  RunResult res;
  res.bytes_received = both_ways_loop(spec, out, in, &res.samples_s);
  res.bytes_per_sample = 2.0 * static_cast<double>(spec.size) * spec.window;
  verify_client(control, out, spec, &res);
  return res;
}

void run_server_both_ways(ControlChannel& control, TestEndpoint& out, TestEndpoint& in, const TestSpec& spec) {
  both_ways_loop(spec, out, in, nullptr);
  verify_server(control, in, spec);
}

bool tokens_equal(const std::string& a, const std::string& b) {
  // Length leaks, content does not: compare every byte of the longer string.
  size_t n = std::max(a.size(), b.size());
  unsigned diff = static_cast<unsigned>(a.size() ^ b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

// ------------------------------------------------------------------------------ client side
namespace {

// A refusal for capacity ("server busy ..."), which the client waits out; any other is final.
bool is_busy(const Error& e) {
  return e.kind == ErrorKind::Unavailable && e.text.compare(0, 11, "server busy") == 0;
}

constexpr int kMinTryMs = 200;  // a retry after "server busy" is not started with less time left

std::string seconds_text(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

ClientSession::ClientSession(const std::string& host, int port, const std::string& token, int timeout_ms) {
  check_session_limits(token, timeout_ms);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + std::chrono::milliseconds(timeout_ms);
  std::minstd_rand jitter(static_cast<uint32_t>(start.time_since_epoch().count()) ^
                          static_cast<uint32_t>(reinterpret_cast<uintptr_t>(this)));
  int backoff_ms = 50;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    try {
      handshake(host, port, token, static_cast<int>(std::clamp<long long>(left, std::min(kMinTryMs, timeout_ms), timeout_ms)));
      wire_->socket().set_timeout(timeout_ms);  // a retry's shorter connect timeout is not the session's
      // From now on every frame from the server must come whole within the timeout plus its size
      // at kFloorBytesPerSecond, however the server trickles it (READY, DATA, VERDICT, ...).
      wire_->set_frame_deadlines(timeout_ms, kFloorBytesPerSecond);
      return;
    } catch (const Error& e) {
      // The server is full (handshake places or --max-clients): wait for a place, inside the
      // timeout, with a growing, jittered pause so a room of clients does not retry in step.
      if (!is_busy(e)) throw;
      // Each try gets kMinTryMs at least: one cut shorter would end in a timeout, not a place.
      const auto now = Clock::now();
      const auto last_pause = end - now - std::chrono::milliseconds(kMinTryMs);
      if (last_pause <= Clock::duration::zero()) {
        const std::string flag = e.text.find("--max-handshakes") != std::string::npos ? "--max-handshakes" : "--max-clients";
        throw Error(ErrorKind::Unavailable, "peer", "handshake", 0,
                    e.text + "; retried for " + seconds_text(now - start) +
                        " s (raise --timeout, or ask the instructor to raise " + flag + ")");
      }
      const int pause = backoff_ms / 2 + static_cast<int>(jitter() % static_cast<unsigned>(backoff_ms));
      std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(pause), last_pause));
      backoff_ms = std::min(backoff_ms * 2, 1000);
    }
  }
}

void ClientSession::handshake(const std::string& host, int port, const std::string& token, int timeout_ms) {
  wire_ = std::make_unique<ControlChannel>(Socket::connect(host, port, timeout_ms));
  // The whole answer within the timeout, however the server trickles it.
  wire_->socket().set_deadline_ms(timeout_ms);
  Hello h;
  h.token = token;
  wire_->send_control(FrameType::Hello, encode_hello(h));
  FrameHeader hdr;
  std::vector<uint8_t> body;
  try {
    hdr = wire_->recv_header();
    // Check the type before allocating: a DATA header may claim up to 1 GiB.
    if (hdr.type == static_cast<uint16_t>(FrameType::Data)) throw_protocol("expected WELCOME, got DATA");
    body.resize(hdr.length);
    if (hdr.length) wire_->recv_raw(body.data(), hdr.length);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::PeerTimeout || e.text.rfind(Socket::kDeadlineText, 0) != 0) throw;
    throw Error(ErrorKind::PeerTimeout, "tcp", "handshake", 0,
                "timed out waiting for WELCOME from the server: its answer to HELLO did not come whole within " +
                    std::to_string(timeout_ms) + " ms (" + std::to_string(wire_->socket().missing_at_deadline()) +
                    " bytes still expected); the server is overloaded or sends too slowly");
  }
  BodyReader r(body.data(), body.size());
  if (hdr.type == static_cast<uint16_t>(FrameType::Reject))
    throw Error(ErrorKind::Auth, "peer", "handshake", 0, r.text(kMaxControlBytes));
  if (hdr.type == static_cast<uint16_t>(FrameType::Error)) throw decode_error(body.data(), body.size(), "handshake");
  if (hdr.type != static_cast<uint16_t>(FrameType::Welcome))
    throw_protocol(std::string("expected WELCOME, got ") + frame_type_name(hdr.type));
  description_ = r.text(kMaxControlBytes);
  wire_->socket().clear_deadline();
}

ClientSession::~ClientSession() { close(); }

ControlChannel& ClientSession::wire() {
  if (!wire_) throw Error(ErrorKind::PeerClosed, "tcp", "", 0, "client is closed");
  return *wire_;
}

void ClientSession::close() {
  if (!wire_) return;
  std::unique_ptr<ControlChannel> w = std::move(wire_);
  try {
    w->send_control(FrameType::Bye);
  } catch (...) {
  }
}

}  // namespace gdrlab
