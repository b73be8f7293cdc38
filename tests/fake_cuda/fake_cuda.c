/* A stand-in libcuda.so.1 for tests on machines without a GPU: "device" memory is host memory,
 * copies are memcpy, streams and events are counted so a test can see that none leaked. One call
 * can be made to fail: GDRLAB_FAKE_CUDA_FAIL names it (the CUDA driver's entry point name without
 * a _v2 suffix), GDRLAB_FAKE_CUDA_FAIL_AFTER lets that many calls succeed first; the failure
 * returns CUDA_ERROR_OUT_OF_MEMORY (2). GDRLAB_FAKE_CUDA_DEVICES (1 to 8, default 1) sets how many
 * GPUs it reports; each has its own primary context, and fake_cuda_allocs_on(dev) counts the
 * allocations made while dev's context was current on the calling thread. The test build adds a stub returning 0 for every other
 * symbol the engine requires (tests/engine/test_native_cuda.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int live_streams, live_events, live_allocs;
static int ctx_storage[8];
static int allocs_on[8];
static __thread int current_dev;

static int fails(const char* call) {
  static int calls;
  const char* want = getenv("GDRLAB_FAKE_CUDA_FAIL");
  if (!want || strcmp(want, call) != 0) return 0;
  const char* after = getenv("GDRLAB_FAKE_CUDA_FAIL_AFTER");
  return calls++ >= (after ? atoi(after) : 0) ? 2 : 0;
}

int fake_cuda_live_streams(void) { return live_streams; }
int fake_cuda_live_events(void) { return live_events; }
int fake_cuda_live_allocs(void) { return live_allocs; }
int fake_cuda_allocs_on(int dev) { return dev >= 0 && dev < 8 ? allocs_on[dev] : -1; }
static int device_count(void) {
  const char* n = getenv("GDRLAB_FAKE_CUDA_DEVICES");
  int v = n ? atoi(n) : 1;
  return v < 1 ? 1 : v > 8 ? 8 : v;
}

int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDriverGetVersion(int* v) { *v = 12040; return 0; }
int cuGetErrorName(int r, const char** s) { *s = r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_UNKNOWN"; return 0; }
int cuGetErrorString(int r, const char** s) { *s = r == 2 ? "out of memory (stand-in)" : "unknown (stand-in)"; return 0; }
int cuDeviceGetCount(int* n) { *n = device_count(); return 0; }
int cuDeviceGet(int* d, int ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *d = ordinal;
  return 0;
}
int cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  if (dev < 0 || dev >= device_count()) return 101;
  *ctx = &ctx_storage[dev];
  return 0;
}
int cuCtxSetCurrent(void* ctx) {
  int r = fails("cuCtxSetCurrent");
  if (!r && ctx) current_dev = (int)((int*)ctx - ctx_storage);
  return r;
}

int cuMemAlloc_v2(unsigned long long* p, size_t n) {
  int r = fails("cuMemAlloc");
  if (r) return r;
  *p = (unsigned long long)(uintptr_t)malloc(n);
  ++live_allocs;
  ++allocs_on[current_dev];
  return 0;
}
int cuMemFree_v2(unsigned long long p) { free((void*)(uintptr_t)p); --live_allocs; return 0; }
int cuMemHostAlloc(void** p, size_t n, unsigned flags) {
  (void)flags;
  int r = fails("cuMemHostAlloc");
  if (r) return r;
  *p = malloc(n);
  ++live_allocs;
  return 0;
}
int cuMemFreeHost(void* p) { free(p); --live_allocs; return 0; }
int cuMemcpyHtoDAsync_v2(unsigned long long d, const void* s, size_t n, void* st) { (void)st; memcpy((void*)(uintptr_t)d, s, n); return 0; }
int cuMemcpyDtoHAsync_v2(void* d, unsigned long long s, size_t n, void* st) { (void)st; memcpy(d, (void*)(uintptr_t)s, n); return 0; }

int cuStreamCreate(void** s, unsigned flags) {
  (void)flags;
  int r = fails("cuStreamCreate");
  if (r) return r;
  *s = malloc(1);
  ++live_streams;
  return 0;
}
int cuStreamDestroy_v2(void* s) { free(s); --live_streams; return 0; }
int cuEventCreate(void** e, unsigned flags) {
  (void)flags;
  int r = fails("cuEventCreate");
  if (r) return r;
  *e = malloc(1);
  ++live_events;
  return 0;
}
int cuEventDestroy_v2(void* e) { free(e); --live_events; return 0; }
