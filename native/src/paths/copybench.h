// Copy-engine measurements on one machine: host<->device copies (pinned or pageable host memory)
// and GPU-to-GPU copies with peer access on or off. Each sample is one copy issued on a stream
// and waited for, timed on the host clock: what an application sees, as in nvbandwidth's
// host-timed mode and the OSU/perftest latency loops.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/buffer.h"

namespace gdrlab {

enum class CopyDir { H2D = 0, D2H = 1, D2D = 2 };

std::vector<double> copy_samples(CopyDir dir, size_t size, int iters, int warmup, MemKind host_kind, int device);

// GPU src -> GPU dst with cuMemcpyPeerAsync. peer_access=true enables it both ways first (P2P
// DMA); false disables it, so the driver stages through host memory. bidirectional: both
// directions at once on two streams; each sample covers both copies.
std::vector<double> peer_samples(int src, int dst, size_t size, int iters, int warmup, bool peer_access,
                                 bool bidirectional);
bool can_access_peer(int a, int b);
// Peer access from GPU `from`'s context to GPU `to`'s memory on or off (already so is fine).
void set_peer_access(int from, int to, bool on);

// dma-buf export of GPU memory (cuMemGetHandleForAddressRange, DMA_BUF_FD): what an RDMA driver
// imports with ibv_reg_dmabuf_mr. The fd is owned by the returned object.
struct DmaBuf {
  int fd = -1;
  size_t size = 0;        // lseek(fd, 0, SEEK_END)
  int cpu_mmap_errno = 0; // 0 if the CPU could map it, else errno of mmap
  DmaBuf() = default;
  DmaBuf(const DmaBuf&) = delete;
  DmaBuf& operator=(const DmaBuf&) = delete;
  ~DmaBuf();
  void close();
};
std::unique_ptr<DmaBuf> export_dmabuf(const Buffer& device_buffer);

}  // namespace gdrlab
