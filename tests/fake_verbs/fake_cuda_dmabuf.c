/* Added to the stand-in libcuda (tests/fake_cuda) for dma-buf tests: cuMemGetHandleForAddressRange
 * hands out a real file descriptor (of /dev/null) for any range, as the driver hands out a
 * dma-buf fd; the stand-in libibverbs built with -DFAKE_IBV_WITH_DMABUF then registers the range.
 * GDRLAB_FAKE_CUDA_FLUSH_OPTIONS / _ORDERING set the two GPUDirect RDMA attributes (117, 118) the
 * engine reads before flushing; GDRLAB_FAKE_CUDA_ATTRS_UNKNOWN=1 makes the driver refuse both
 * (CUDA_ERROR_INVALID_VALUE, as drivers before CUDA 11.3 do); cuFlushGPUDirectRDMAWrites counts its
 * calls, and built with -DFAKE_CUDA_NO_FLUSH_API it is not exported at all (a pre-11.3 driver);
 * cuDeviceGetPCIBusId reports GDRLAB_FAKE_CUDA_BUS_ID; GDRLAB_FAKE_CUDA_C2C=1 makes attribute 100
 * (pageable access through the host's page tables) 1, as a GH200/GB200 on NVLink-C2C reports. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int flushes;

int fake_cuda_flushes(void) { return flushes; }

int cuMemGetHandleForAddressRange(int* fd, unsigned long long ptr, size_t size, int type, unsigned long long flags) {
  (void)ptr; (void)size; (void)type; (void)flags;
  const char* slow = getenv("GDRLAB_FAKE_CUDA_EXPORT_US"); /* an export that takes this long */
  if (slow) usleep((useconds_t)atoi(slow));
  *fd = open("/dev/null", O_RDONLY);
  return *fd < 0 ? 999 : 0;
}

#ifndef FAKE_CUDA_NO_FLUSH_API
int cuFlushGPUDirectRDMAWrites(int target, int scope) {
  (void)target; (void)scope;
  ++flushes;
  return 0;
}
#endif

int cuDeviceGetAttribute(int* v, int attr, int dev) {
  (void)dev;
  const char* e = 0;
  const char* unknown = getenv("GDRLAB_FAKE_CUDA_ATTRS_UNKNOWN");
  if ((attr == 117 || attr == 118) && unknown && strcmp(unknown, "1") == 0) return 1; /* CUDA_ERROR_INVALID_VALUE */
  if (attr == 100) { /* GDRLAB_FAKE_CUDA_C2C=1: a GH200-like GPU on NVLink-C2C */
    e = getenv("GDRLAB_FAKE_CUDA_C2C");
    *v = e ? atoi(e) : 0;
    return 0;
  }
  if (attr == 117) e = getenv("GDRLAB_FAKE_CUDA_FLUSH_OPTIONS");
  if (attr == 118) e = getenv("GDRLAB_FAKE_CUDA_ORDERING");
  *v = e ? atoi(e) : (attr == 117 ? 1 : 0);
  return 0;
}

/* GDRLAB_FAKE_CUDA_BUS_ID: the PCI address the GPU reports (default none: an empty string). */
int cuDeviceGetPCIBusId(char* out, int len, int dev) {
  (void)dev;
  const char* id = getenv("GDRLAB_FAKE_CUDA_BUS_ID");
  if (len > 0) {
    strncpy(out, id ? id : "", (size_t)len - 1);
    out[len - 1] = 0;
  }
  return 0;
}
