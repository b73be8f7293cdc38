// Copies between host and GPU memory and between GPUs, by the copy engines (cuMemcpy*Async) or by
// the SM copy kernel (paths/sm_copy.h), one or several at once: what `gdrlab copy` and the
// p2p matrix's --read and SM options measure. Each "leg" is one copy on its own stream; the legs
// of one sample are queued back to back and the sample ends when all have completed, so two
// legs make a bidirectional sample and one leg per GPU makes host-to-all or all-to-one.
// Each sample is timed twice: on the host clock (queue the legs, wait for all: what an
// application sees) and with CUDA events recorded on each leg's stream around its copy (the
// GPU's own time: from the earliest start to the latest end of the legs one GPU runs; legs run by
// other GPUs count with their own time, as events of two GPUs do not compare).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"

namespace gdrlab {

enum class CopyEngine { CE = 0, SM = 1 };

struct CopyLeg {
  MemKind src_kind = MemKind::Device;
  int src_device = 0;  // the GPU of device memory; for host memory, the GPU whose context pins it
  MemKind dst_kind = MemKind::Device;
  int dst_device = 0;
  int exec_device = 0;  // the GPU whose stream runs the copy (and, for SM, whose SMs copy)
};

// What copy_run does to peer access between the GPUs of a leg that joins two of them.
enum class PeerMode { Auto = -1, Off = 0, On = 1 };

struct CopyRunResult {
  std::vector<double> host_s;   // one per timed sample, host clock
  std::vector<double> event_s;  // one per timed sample, CUDA events (see above)
  double bytes_per_sample = 0;  // size x legs
  int64_t checks = 0;           // destination buffers verified
  unsigned sm_blocks = 0, sm_threads = 0;  // launch shape of the SM kernel (0 for CE)
};

// `iters` timed samples after `warmup` untimed ones. check_every = 1 verifies every copy: before
// a checked sample each destination is overwritten with a byte the pattern does not start with,
// after it each must hold the source's pattern again (outside the timed window). k > 1 checks
// every k-th sample and the last. A difference throws Error(Verify) naming the leg and byte.
CopyRunResult copy_run(const std::vector<CopyLeg>& legs, size_t size, int iters, int warmup, CopyEngine engine,
                       PeerMode peer, int check_every);

// "h2d", "d2h", "d2d" (same GPU) or "p2p" (two GPUs) for a leg, for messages.
std::string leg_name(const CopyLeg& leg);

}  // namespace gdrlab
