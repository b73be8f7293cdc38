#include "core/budget.h"

#include <cstdio>

#include "core/error.h"
#include "core/locked.h"

namespace gdrlab {

std::string format_bytes(uint64_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (n < 1024) return std::to_string(n) + " B";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

Reservation::~Reservation() { release(); }

Reservation::Reservation(Reservation&& o) noexcept : budget_(o.budget_), host_(o.host_), gpu_(o.gpu_) {
  o.budget_ = nullptr;
}

Reservation& Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = o.budget_;
    host_ = o.host_;
    gpu_ = o.gpu_;
    o.budget_ = nullptr;
  }
  return *this;
}

void Reservation::release() noexcept {
  if (budget_) budget_->give_back(host_, gpu_);
  budget_ = nullptr;
}

namespace {
[[noreturn]] void refuse(const char* what, uint64_t need, uint64_t max, uint64_t used, const char* flag) {
  std::string need_s = format_bytes(need), max_s = format_bytes(max);
  if (need_s == max_s) {  // rounding would hide the difference
    need_s = std::to_string(need) + " bytes";
    max_s = std::to_string(max) + " bytes";
  }
  std::string msg = std::string("refused: session needs ") + need_s + " " + what + ", server budget " + max_s +
                    " (" + flag + ")";
  if (need <= max) msg += "; other sessions hold " + format_bytes(used) + " of it now, try again later";
  throw_unavailable(msg);
}
}  // namespace

Reservation MemoryBudget::reserve(uint64_t host, uint64_t gpu) {
  std::lock_guard<std::mutex> lock(mu_);
  if (max_host_ && (host > max_host_ || host > max_host_ - host_used_))
    refuse("host memory (pinned and pageable buffers)", host, max_host_, host_used_, "--max-pinned");
  if (max_gpu_ && (gpu > max_gpu_ || gpu > max_gpu_ - gpu_used_))
    refuse("GPU memory", gpu, max_gpu_, gpu_used_, "--max-gpu-mem");
  host_used_ += host;
  gpu_used_ += gpu;
  return Reservation(this, host, gpu);
}

void MemoryBudget::give_back(uint64_t host, uint64_t gpu) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  host_used_ -= host;
  gpu_used_ -= gpu;
}

uint64_t MemoryBudget::host_in_use() const { return read_locked(mu_, host_used_); }

uint64_t MemoryBudget::gpu_in_use() const { return read_locked(mu_, gpu_used_); }

}  // namespace gdrlab
