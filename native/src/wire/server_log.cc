// The server's log and its memory of sources: log lines rate-limited per source and kind and in
// all (with summaries of what was left out), and the delays that slow token guessing.
#include <algorithm>
#include <string>
#include <vector>

#include "wire/server_clock.h"
#include "wire/session.h"

namespace gdrlab {
namespace {

using namespace server_clock;

constexpr size_t kMaxLogLines = 1000;     // between two take_log calls; more are counted, not kept
constexpr int kFailureMemoryMs = 60000;   // an address's failures are forgotten after this quiet time
constexpr int kFirstDelayMs = 50;         // after a refused token, a source's next check waits this long;
constexpr int kMaxDelayMs = 3000;         // ... doubling per failure up to this: slow guessing, never a ban
constexpr double kCheckBurst = 64;        // refused tokens of all sources together: this many at once,
constexpr double kChecksPerSecond = 16;   // ... then this many a second (sources rotating through many addresses)
constexpr size_t kMaxAddrs = 4096;        // sources remembered; past this the least recently used go
constexpr int kMaxSessionLines = 100;     // authenticated sessions' lines per interval, all sources together
constexpr int kMaxRefusalLines = 20;        // refusal log lines per interval, all addresses together
constexpr int kMaxSummaryLines = 20;        // per-source "N more ... left out" lines per interval, all sources
                                            // together; the rest are pooled into one line an interval
constexpr int kSessionLinesPerKind = 3;     // an authenticated address's lines of one kind per interval

// How a log line names a source: "client 192.0.2.7", or "clients from 127.0.0.0/8" for a range.
std::string source_label(const std::string& key) {
  return key.find('/') == std::string::npos ? "client " + key : "clients from " + key;
}

// "client 192.0.2.7: 57 more 'connected' lines left out (at most 3 a kind per address per 10 s)"
std::string left_out_line(const std::string& host, const std::string& kind, uint64_t n, int interval_ms) {
  const std::string per = interval_ms % 1000 ? std::to_string(interval_ms) + " ms" : std::to_string(interval_ms / 1000) + " s";
  return source_label(host) + ": " + std::to_string(n) + " more '" + kind + "' lines left out (at most " +
         std::to_string(kSessionLinesPerKind) + " a kind per address per " + per + ")";
}

}  // namespace

void Server::log(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (log_.size() >= kMaxLogLines) {
    ++log_dropped_;
    return;
  }
  log_.push_back(line);
}

std::vector<std::string> Server::take_log(bool final) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out(log_.begin(), log_.end());
  log_.clear();
  summaries(final, &out);
  if (log_dropped_) out.push_back(std::to_string(log_dropped_) + " more log lines dropped (log flood)");
  log_dropped_ = 0;
  return out;
}

void Server::session_log(const std::string& addr, const std::string& kind, const std::string& line) {
  std::vector<std::string> before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    AddrState& st = addr_state(addr);
    LineKind& k = st.kinds[kind];
    if (ms_since(k.since) >= limits_.log_interval_ms) {  // a new interval for this kind
      if (k.left_out)  // not summarised yet (take_log not called since): say so before the new line
        summary_line(left_out_line(rate_key(host_of(addr)), kind, k.left_out, limits_.log_interval_ms), k.left_out,
                     &before);
      k = LineKind{Clock::now(), 0, 0};
    }
    if (k.lines >= kSessionLinesPerKind) {
      ++k.left_out;
      return;
    }
    if (ms_since(session_window_) >= limits_.log_interval_ms) {
      if (session_left_out_) before.push_back(std::to_string(session_left_out_) + " more session lines left out (at most " +
                                              std::to_string(kMaxSessionLines) + " an interval from all addresses)");
      session_window_ = Clock::now();
      session_lines_ = 0;
      session_left_out_ = 0;
    }
    if (session_lines_ >= kMaxSessionLines) {
      ++session_left_out_;
      return;
    }
    ++session_lines_;
    ++k.lines;
  }
  for (const std::string& b : before) log(b);
  log(line);
}

// Summary lines for session lines left out in intervals now over (all of them when final).
void Server::summaries(bool final, std::vector<std::string>* out) {
  for (auto& [host, st] : addrs_)
    for (auto& [kind, k] : st.kinds) {
      if (!k.left_out || (!final && ms_since(k.since) < limits_.log_interval_ms)) continue;
      summary_line(left_out_line(host, kind, k.left_out, limits_.log_interval_ms), k.left_out, out);
      k.left_out = 0;
    }
  if (session_left_out_ && (final || ms_since(session_window_) >= limits_.log_interval_ms)) {
    if (out->size() < kMaxLogLines)
      out->push_back(std::to_string(session_left_out_) + " more session lines left out (at most " +
                     std::to_string(kMaxSessionLines) + " an interval from all addresses)");
    else
      ++log_dropped_;
    session_left_out_ = 0;
  }
  // Refusals before authentication left out: counted in the address's next refusal line, or here
  // once its interval is over (a burst followed by quiet, or the stop).
  for (auto& [host, st] : addrs_) {
    if (!st.suppressed || (!final && ms_since(st.last_log) < limits_.log_interval_ms)) continue;
    summary_line(source_label(host) + ": " + std::to_string(st.suppressed) +
                     " more refused before authentication left out (one line per address per interval)",
                 st.suppressed, out);
    st.suppressed = 0;
  }
  if (pooled_sources_ && (final || ms_since(pooled_since_) >= limits_.log_interval_ms)) {
    if (out->size() < kMaxLogLines)
      out->push_back(std::to_string(pooled_lines_) + " more lines left out from " + std::to_string(pooled_sources_) +
                     " more sources (at most " + std::to_string(kMaxSummaryLines) +
                     " lines naming a source's count an interval, from all sources together)");
    else
      ++log_dropped_;
    pooled_lines_ = 0;
    pooled_sources_ = 0;
  }
}

// A line saying how many of one source's lines were left out: at most kMaxSummaryLines an interval
// from all sources together; past that its count is pooled into one line an interval (summaries),
// so sources rotating through many addresses cannot flood the log through their summaries.
void Server::summary_line(std::string line, uint64_t n, std::vector<std::string>* out) {  // mu_ held
  if (ms_since(summary_window_) >= limits_.log_interval_ms) {
    summary_window_ = Clock::now();
    summary_lines_ = 0;
  }
  if (summary_lines_ < kMaxSummaryLines) {
    ++summary_lines_;
    if (out->size() < kMaxLogLines) out->push_back(std::move(line));
    else ++log_dropped_;  // the overall cap holds for summaries too
    return;
  }
  if (!pooled_sources_) pooled_since_ = Clock::now();
  pooled_lines_ += n;
  ++pooled_sources_;
}

// Token checks (wire/gate.h): after a refused token, its source's next check waits 50 ms,
// doubling per failure up to 3 s, so a source gets one answer per delay however many connections
// it opens; and refused tokens of all sources together are answered at kChecksPerSecond after a
// burst of kCheckBurst, against a guesser rotating through many sources.
int Server::check_wait_ms(const std::string& addr, std::string* reason) {
  if (!limits_.slow_guessing) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  AddrState& st = addr_state(addr);
  const Clock::time_point now = Clock::now();
  if (st.failures && ms_since(st.last_failure) > kFailureMemoryMs) st.failures = 0;
  if (!check_refill_.time_since_epoch().count()) {
    check_tokens_ = kCheckBurst;
    check_refill_ = now;
  }
  check_tokens_ = std::min(kCheckBurst, check_tokens_ + kChecksPerSecond * std::chrono::duration<double>(now - check_refill_).count());
  check_refill_ = now;
  int wait = st.failures && st.next_check > now
                 ? static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(st.next_check - now).count()) + 1
                 : 0;
  if (wait > 0)
    *reason = std::to_string(st.failures) + " refused tokens from address " + host_of(addr) +
              " recently: its tokens are checked one at a time, " + std::to_string(std::min(kMaxDelayMs, wait)) +
              " ms apart; try again later";
  if (check_tokens_ < 1) {
    const int global = static_cast<int>((1 - check_tokens_) / kChecksPerSecond * 1000) + 1;
    if (global > wait) {
      wait = global;
      *reason = "many refused tokens from many addresses: tokens are checked at most " +
                std::to_string(static_cast<int>(kChecksPerSecond)) + " a second; try again later";
    }
  }
  return wait;
}

void Server::note_failure(const std::string& addr) {
  std::lock_guard<std::mutex> lock(mu_);
  AddrState& st = addr_state(addr);
  if (st.failures && ms_since(st.last_failure) > kFailureMemoryMs) st.failures = 0;
  ++st.failures;
  const Clock::time_point now = Clock::now();
  st.last_failure = now;
  st.next_check = now + std::chrono::milliseconds(std::min(kMaxDelayMs, kFirstDelayMs << std::min(st.failures - 1, 8)));
  check_tokens_ -= 1;
}

// Whether to log a refused connection from addr now: one line per interval and address, and at
// most kMaxRefusalLines a interval from all addresses together; *suppressed: lines left out since.
bool Server::log_allowed(const std::string& addr, uint64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  AddrState& st = addr_state(addr);
  if (ms_since(refusal_window_) >= limits_.log_interval_ms) {
    refusal_window_ = Clock::now();
    refusal_lines_ = 0;
  }
  if ((st.logged && ms_since(st.last_log) < limits_.log_interval_ms) || refusal_lines_ >= kMaxRefusalLines) {
    ++st.suppressed;
    return false;
  }
  ++refusal_lines_;
  st.logged = true;
  st.last_log = Clock::now();
  *suppressed = st.suppressed;
  st.suppressed = 0;
  return true;
}

Server::AddrState& Server::addr_state(const std::string& peer) {  // mu_ held
  const std::string addr = rate_key(host_of(peer));
  if (addrs_.size() >= kMaxAddrs && !addrs_.count(addr)) {
    // The least recently used eighth goes (its pending log counts are said first): one pass per
    // kMaxAddrs / 8 new sources, and no source's delay is reset while it is still in use.
    std::vector<Clock::time_point> used;
    used.reserve(addrs_.size());
    for (const auto& [key, st] : addrs_) used.push_back(st.last_used);
    auto cut = used.begin() + static_cast<std::ptrdiff_t>(kMaxAddrs / 8);
    std::nth_element(used.begin(), cut, used.end());
    const Clock::time_point limit = *cut;
    std::vector<std::string> said;
    for (auto it = addrs_.begin(); it != addrs_.end();) {
      if (it->second.last_used > limit) {
        ++it;
        continue;
      }
      uint64_t left = it->second.suppressed;
      for (const auto& [kind, k] : it->second.kinds) left += k.left_out;
      if (left)
        summary_line(source_label(it->first) + ": " + std::to_string(left) + " more lines left out (forgotten: " +
                         std::to_string(kMaxAddrs) + " sources remembered at most)",
                     left, &said);
      it = addrs_.erase(it);
    }
    for (std::string& line : said) {
      if (log_.size() < kMaxLogLines) log_.push_back(std::move(line));
      else ++log_dropped_;
    }
  }
  AddrState& st = addrs_[addr];
  const Clock::time_point now = Clock::now();
  if (!st.seen) {
    st.seen = true;
    st.last_failure = now;
  }
  st.last_used = now;
  return st;
}

std::string escape_text(const std::string& text, size_t max_chars) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= max_chars) {
      out += "... (" + std::to_string(text.size()) + " bytes)";
      break;
    }
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace gdrlab
