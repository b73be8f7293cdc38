// A server's memory budget: host memory (pinned and pageable session buffers) and GPU memory,
// reserved before a session allocates and given back when its test ends. A request that does not
// fit is refused with one line naming the budget and its flag; nothing is allocated.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace gdrlab {

class MemoryBudget;

// The host and GPU bytes one serving-side endpoint allocates: what a session reserves.
struct MemoryNeed {
  uint64_t host = 0;
  uint64_t gpu = 0;
};

// What one reservation holds; returns it to the budget when destroyed.
class Reservation {
 public:
  Reservation() = default;
  Reservation(MemoryBudget* b, uint64_t host, uint64_t gpu) : budget_(b), host_(host), gpu_(gpu) {}
  ~Reservation();
  Reservation(Reservation&& o) noexcept;
  Reservation& operator=(Reservation&& o) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  void release() noexcept;
  MemoryBudget* budget_ = nullptr;
  uint64_t host_ = 0;
  uint64_t gpu_ = 0;
};

class MemoryBudget {
 public:
  // 0 for either limit: no limit of that kind.
  MemoryBudget(uint64_t max_host, uint64_t max_gpu) : max_host_(max_host), max_gpu_(max_gpu) {}
  // Reserves host and GPU bytes, or throws Error(Unavailable) naming the budget:
  // "refused: session needs 64.0 GiB pinned, server budget 4.0 GiB (--max-pinned)". A request
  // larger than the whole budget says so; one that fits the budget but not what is left now says
  // how much other sessions hold (try again later).
  Reservation reserve(uint64_t host, uint64_t gpu);
  Reservation reserve(const MemoryNeed& need) { return reserve(need.host, need.gpu); }
  uint64_t host_in_use() const;
  uint64_t gpu_in_use() const;
  uint64_t max_host() const { return max_host_; }
  uint64_t max_gpu() const { return max_gpu_; }

 private:
  friend class Reservation;
  void give_back(uint64_t host, uint64_t gpu) noexcept;
  const uint64_t max_host_;
  const uint64_t max_gpu_;
  mutable std::mutex mu_;
  uint64_t host_used_ = 0;
  uint64_t gpu_used_ = 0;
};

// "64.0 GiB", "512.0 KiB", "17 B".
std::string format_bytes(uint64_t n);

}  // namespace gdrlab
