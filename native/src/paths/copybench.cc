#include "paths/copybench.h"

#include <cerrno>
#include <chrono>
#include <sys/mman.h>
#include <unistd.h>

#include "core/cuda_raii.h"
#include "core/error.h"

namespace gdrlab {
namespace {
using Clock = std::chrono::steady_clock;

void check_counts(size_t size, int iters, int warmup) {
  if (size == 0) throw_invalid("copy size must be at least 1 byte");
  if (iters < 1) throw_invalid("iters must be at least 1");
  if (warmup < 0) throw_invalid("warmup must not be negative");
}

}  // namespace

std::vector<double> copy_samples(CopyDir dir, size_t size, int iters, int warmup, MemKind host_kind, int device) {
  check_counts(size, iters, warmup);
  if (host_kind == MemKind::Device) throw_invalid("host_kind must be pageable or pinned");
  const CudaApi& api = cuda();
  Buffer dev(MemKind::Device, size, device);
  Buffer other(dir == CopyDir::D2D ? MemKind::Device : host_kind, size, device);
  CudaStream st(cuda_context(device));
  std::vector<double> out;
  out.reserve(iters);
  for (int i = 0; i < warmup + iters; ++i) {
    auto t0 = Clock::now();
    switch (dir) {
      case CopyDir::H2D: GDRLAB_CU(api, cuMemcpyHtoDAsync, dev.device_ptr(), other.host_ptr(), size, st.get()); break;
      case CopyDir::D2H: GDRLAB_CU(api, cuMemcpyDtoHAsync, other.host_ptr(), dev.device_ptr(), size, st.get()); break;
      case CopyDir::D2D: GDRLAB_CU(api, cuMemcpyDtoDAsync, other.device_ptr(), dev.device_ptr(), size, st.get()); break;
    }
    GDRLAB_CU(api, cuStreamSynchronize, st.get());
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i >= warmup) out.push_back(dt);
  }
  return out;
}

bool can_access_peer(int a, int b) {
  const CudaApi& api = cuda();
  cuda_context(a);
  cuda_context(b);
  CUdevice da, db;
  GDRLAB_CU(api, cuDeviceGet, &da, a);
  GDRLAB_CU(api, cuDeviceGet, &db, b);
  int ok = 0;
  GDRLAB_CU(api, cuDeviceCanAccessPeer, &ok, da, db);
  return ok != 0;
}

void set_peer_access(int from, int to, bool on) {
  const CudaApi& api = cuda();
  cuda_use(from);
  CUresult r = on ? api.cuCtxEnablePeerAccess(cuda_context(to), 0) : api.cuCtxDisablePeerAccess(cuda_context(to));
  if (on && r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return;
  if (!on && r == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED) return;
  cuda_check(r, on ? "cuCtxEnablePeerAccess" : "cuCtxDisablePeerAccess", __FILE__, __LINE__);
}

std::vector<double> peer_samples(int src, int dst, size_t size, int iters, int warmup, bool peer_access,
                                 bool bidirectional) {
  check_counts(size, iters, warmup);
  int n = cuda_device_count();
  if (n < 2)
    throw_unavailable("GPU-to-GPU copies need two GPUs; this machine has " + std::to_string(n));
  if (src == dst) throw_invalid("source and destination GPU are the same (" + std::to_string(src) + ")");
  if (src < 0 || dst < 0 || src >= n || dst >= n)
    throw_invalid("GPU index out of range: this machine has " + std::to_string(n) + " GPUs");
  if (peer_access && !can_access_peer(src, dst))
    throw_unavailable("GPU " + std::to_string(src) + " cannot access GPU " + std::to_string(dst) +
                      " as a peer (cuDeviceCanAccessPeer = 0: different PCIe roots, ACS or IOMMU)");
  set_peer_access(src, dst, peer_access);
  set_peer_access(dst, src, peer_access);
  const CudaApi& api = cuda();
  Buffer a(MemKind::Device, size, src), b(MemKind::Device, size, dst);
  std::unique_ptr<Buffer> a2, b2;
  if (bidirectional) {
    a2 = std::make_unique<Buffer>(MemKind::Device, size, src);
    b2 = std::make_unique<Buffer>(MemKind::Device, size, dst);
  }
  CudaStream s1(cuda_context(src)), s2(cuda_context(dst));
  CUcontext cs = cuda_context(src), cd = cuda_context(dst);
  std::vector<double> out;
  out.reserve(iters);
  for (int i = 0; i < warmup + iters; ++i) {
    auto t0 = Clock::now();
    GDRLAB_CU(api, cuMemcpyPeerAsync, b.device_ptr(), cd, a.device_ptr(), cs, size, s1.get());
    if (bidirectional) GDRLAB_CU(api, cuMemcpyPeerAsync, a2->device_ptr(), cs, b2->device_ptr(), cd, size, s2.get());
    GDRLAB_CU(api, cuStreamSynchronize, s1.get());
    if (bidirectional) GDRLAB_CU(api, cuStreamSynchronize, s2.get());
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i >= warmup) out.push_back(dt);
  }
  return out;
}

DmaBuf::~DmaBuf() { close(); }
void DmaBuf::close() {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::unique_ptr<DmaBuf> export_dmabuf(const Buffer& buf) {
  if (buf.kind() != MemKind::Device) throw_invalid("dma-buf export needs GPU memory, not host memory");
  const CudaApi& api = cuda();
  if (!api.cuMemGetHandleForAddressRange)
    throw_unavailable("this driver has no cuMemGetHandleForAddressRange (dma-buf export needs CUDA 11.7+)");
  cuda_use(buf.device());
  int fd = -1;
  // dma-buf ranges must be page aligned; cuMemAlloc returns 2 MiB aligned memory, the size is
  // rounded up to the page size here.
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t len = (buf.size() + page - 1) / page * page;
  CUresult r = api.cuMemGetHandleForAddressRange(&fd, buf.device_ptr(), len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE) {
    std::string why;
    try { cuda_check(r, "cuMemGetHandleForAddressRange", __FILE__, __LINE__); } catch (const Error& e) { why = e.what(); }
    throw_unavailable("dma-buf export refused (" + why +
                      "): needs the open GPU kernel module, Linux 5.12+ and DMA_BUF_SUPPORTED = 1");
  }
  cuda_check(r, "cuMemGetHandleForAddressRange", __FILE__, __LINE__);
  auto d = std::make_unique<DmaBuf>();
  d->fd = fd;
  off_t end = lseek(fd, 0, SEEK_END);
  d->size = end < 0 ? 0 : static_cast<size_t>(end);
  lseek(fd, 0, SEEK_SET);
  void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    d->cpu_mmap_errno = errno;
  } else {
    munmap(p, len);
  }
  return d;
}

}  // namespace gdrlab
