/* A stand-in libcuda.so.1 for tests on machines without a GPU: "device" memory is host memory,
 * copies are memcpy, streams and events are counted so a test can see that none leaked. One call
 * can be made to fail: GDRLAB_FAKE_CUDA_FAIL names it (the CUDA driver's entry point name without
 * a _v2 suffix), GDRLAB_FAKE_CUDA_FAIL_AFTER lets that many calls succeed first; the failure
 * returns CUDA_ERROR_OUT_OF_MEMORY (2). GDRLAB_FAKE_CUDA_DEVICES (1 to 8, default 1) sets how many
 * GPUs it reports; each has its own primary context, and fake_cuda_allocs_on(dev) counts the
 * allocations made while dev's context was current on the calling thread. The test build adds a stub returning 0 for every other
 * symbol the engine requires (tests/engine/test_native_cuda.py).
 *
 * Copies and the SM copy kernel: a "module" is the PTX text it was loaded from (its function must
 * be declared there as ".entry NAME("), a launch of it copies params {dst, src, n} with memmove.
 * The engine's pattern kernels (core/pattern_gpu.cc) are run by name here, from their definition
 * (word w is splitmix64(seed ^ w)): gdrlab_pattern_fill {dst, words, seed} writes the words,
 * gdrlab_pattern_check {src, words, seed, bad} lowers *bad to the first word that differs. They
 * are counted apart (fake_cuda_pattern_launches, not fake_cuda_launches), are not failed by
 * GDRLAB_FAKE_CUDA_FAIL=cuLaunchKernel (that aims at the copy kernel) and never corrupt;
 * GDRLAB_FAKE_CUDA_NO_PATTERN=1 makes cuModuleGetGlobal fail, so the engine checks through host
 * memory as on a driver without the kernels. A module's ".global" array is 64 words of its own.
 * Events record the host clock when cuEventRecord runs; cuEventElapsedTime refuses events made
 * with CU_EVENT_DISABLE_TIMING (CUDA_ERROR_INVALID_HANDLE), as the driver does.
 * GDRLAB_FAKE_CUDA_CORRUPT names a copy call (cuMemcpyHtoDAsync, cuMemcpyDtoHAsync,
 * cuMemcpyDtoDAsync, cuMemcpyPeerAsync, cuLaunchKernel); its call number GDRLAB_FAKE_CUDA_CORRUPT_AT
 * (from 0, default 0) among those made on a stream (not the null stream the engine's own fill and
 * check use) flips one byte in the middle of what it wrote. GDRLAB_FAKE_CUDA_NO_PEER=1 makes
 * cuDeviceCanAccessPeer answer 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
static int live_modules, launches, stream_copies, launches_on[8];
int fake_cuda_live_modules(void) { return live_modules; }
int fake_cuda_launches(void) { return launches; }
/* kernel launches made while dev's context was current: the GPU that ran them */
int fake_cuda_launches_on(int dev) { return dev >= 0 && dev < 8 ? launches_on[dev] : -1; }
int fake_cuda_stream_copies(void) { return stream_copies; }

/* The copy every copy call and the kernel launch make; `call` is the name GDRLAB_FAKE_CUDA_CORRUPT
 * may give. */
static void copy_bytes(const char* call, void* d, const void* s, size_t n, void* stream) {
  static int counted;
  memmove(d, s, n);
  if (!stream) return;
  const char* want = getenv("GDRLAB_FAKE_CUDA_CORRUPT");
  if (!want || strcmp(want, call) != 0 || n == 0) return;
  const char* at = getenv("GDRLAB_FAKE_CUDA_CORRUPT_AT");
  if (counted++ == (at ? atoi(at) : 0)) ((unsigned char*)d)[n / 2] ^= 0x5a;
}
int cuMemcpyHtoDAsync_v2(unsigned long long d, const void* s, size_t n, void* st) {
  stream_copies += st != 0;
  copy_bytes("cuMemcpyHtoDAsync", (void*)(uintptr_t)d, s, n, st);
  return 0;
}
int cuMemcpyDtoHAsync_v2(void* d, unsigned long long s, size_t n, void* st) {
  stream_copies += st != 0;
  copy_bytes("cuMemcpyDtoHAsync", d, (void*)(uintptr_t)s, n, st);
  return 0;
}
int cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void* st) {
  stream_copies += st != 0;
  copy_bytes("cuMemcpyDtoDAsync", (void*)(uintptr_t)d, (void*)(uintptr_t)s, n, st);
  return 0;
}
int cuMemcpyPeerAsync(unsigned long long d, void* dctx, unsigned long long s, void* sctx, size_t n, void* st) {
  (void)dctx; (void)sctx;
  stream_copies += st != 0;
  copy_bytes("cuMemcpyPeerAsync", (void*)(uintptr_t)d, (void*)(uintptr_t)s, n, st);
  return 0;
}
int cuMemsetD8_v2(unsigned long long d, unsigned char v, size_t n) { memset((void*)(uintptr_t)d, v, n); return 0; }
int cuMemHostGetDevicePointer_v2(unsigned long long* d, void* host, unsigned flags) {
  if (flags != 0) return 1; /* CUDA_ERROR_INVALID_VALUE: flags must be 0 */
  *d = (unsigned long long)(uintptr_t)host;
  return 0;
}
int cuDeviceCanAccessPeer(int* ok, int a, int b) {
  const char* no = getenv("GDRLAB_FAKE_CUDA_NO_PEER");
  *ok = a != b && !(no && strcmp(no, "1") == 0);
  return 0;
}

struct fake_module { char* text; unsigned long long globals[64]; };
struct fake_function { struct fake_module* mod; char name[64]; };
static int pattern_launches;
static unsigned grid_blocks;
/* blocks in the grid of the last copy kernel launch (cuDeviceGetAttribute is a stub here that
 * leaves its answer unwritten: the engine takes the GPU to have 1 SM) */
unsigned fake_cuda_last_grid(void) { return grid_blocks; }

int fake_cuda_pattern_launches(void) { return pattern_launches; }
static unsigned long long splitmix64(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
int cuModuleGetGlobal_v2(unsigned long long* dptr, size_t* bytes, void* mod, const char* name) {
  struct fake_module* m = mod;
  if (!m || !strstr(m->text, name) || !strstr(m->text, ".global")) return 500; /* CUDA_ERROR_NOT_FOUND */
  const char* off = getenv("GDRLAB_FAKE_CUDA_NO_PATTERN");
  if (off && strcmp(off, "1") == 0) return 500;
  *dptr = (unsigned long long)(uintptr_t)m->globals;
  *bytes = sizeof m->globals;
  return 0;
}
int cuModuleLoadData(void** mod, const void* image) {
  int r = fails("cuModuleLoadData");
  if (r) return r;
  const char* text = (const char*)image;
  if (!strstr(text, ".version") || !strstr(text, ".target") || !strstr(text, ".entry")) return 218; /* INVALID_PTX */
  struct fake_module* m = calloc(1, sizeof *m);
  m->text = strdup(text);
  *mod = m;
  ++live_modules;
  return 0;
}
int cuModuleGetFunction(void** fn, void* mod, const char* name) {
  struct fake_module* m = mod;
  char want[128];
  snprintf(want, sizeof want, ".entry %s(", name);
  if (!m || !strstr(m->text, want)) return 500; /* CUDA_ERROR_NOT_FOUND */
  struct fake_function* f = calloc(1, sizeof *f);
  f->mod = m;
  snprintf(f->name, sizeof f->name, "%s", name);
  *fn = f;
  return 0;
}
/* The engine's copy kernel: params {dst, src, n}. */
int cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** params, void** extra) {
  (void)shared; (void)extra;
  struct fake_function* f = fn;
  if (f && params && strcmp(f->name, "gdrlab_pattern_fill") == 0) {
    unsigned long long* dst = (unsigned long long*)(uintptr_t)*(unsigned long long*)params[0];
    unsigned long long words = *(unsigned long long*)params[1], seed = *(unsigned long long*)params[2];
    for (unsigned long long w = 0; w < words; ++w) dst[w] = splitmix64(seed ^ w);
    ++pattern_launches;
    return 0;
  }
  if (f && params && strcmp(f->name, "gdrlab_pattern_check") == 0) {
    const unsigned long long* src = (const unsigned long long*)(uintptr_t)*(unsigned long long*)params[0];
    unsigned long long words = *(unsigned long long*)params[1], seed = *(unsigned long long*)params[2];
    unsigned long long* bad = (unsigned long long*)(uintptr_t)*(unsigned long long*)params[3];
    for (unsigned long long w = 0; w < words; ++w)
      if (src[w] != splitmix64(seed ^ w)) {
        if (w < *bad) *bad = w;
        break;
      }
    ++pattern_launches;
    return 0;
  }
  int r = fails("cuLaunchKernel");
  if (r) return r;
  if (!fn || !params || !gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return 1;
  unsigned long long dst = *(unsigned long long*)params[0], src = *(unsigned long long*)params[1];
  unsigned long long n = *(unsigned long long*)params[2];
  ++launches;
  ++launches_on[current_dev];
  grid_blocks = gx;
  copy_bytes("cuLaunchKernel", (void*)(uintptr_t)dst, (const void*)(uintptr_t)src, (size_t)n, stream);
  return 0;
}

int cuStreamCreate(void** s, unsigned flags) {
  (void)flags;
  int r = fails("cuStreamCreate");
  if (r) return r;
  *s = malloc(1);
  ++live_streams;
  return 0;
}
int cuStreamDestroy_v2(void* s) { free(s); --live_streams; return 0; }
struct fake_event { unsigned flags; int recorded; double t; };
int cuEventCreate(void** e, unsigned flags) {
  int r = fails("cuEventCreate");
  if (r) return r;
  struct fake_event* ev = calloc(1, sizeof *ev);
  ev->flags = flags;
  *e = ev;
  ++live_events;
  return 0;
}
int cuEventRecord(void* e, void* stream) {
  (void)stream;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  struct fake_event* ev = e;
  ev->t = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  ev->recorded = 1;
  return 0;
}
int cuEventElapsedTime(float* ms, void* a, void* b) {
  struct fake_event *s = a, *e = b;
  if ((s->flags | e->flags) & 0x2) return 400; /* CUDA_ERROR_INVALID_HANDLE: made without timing */
  if (!s->recorded || !e->recorded) return 600; /* CUDA_ERROR_NOT_READY */
  *ms = (float)(e->t - s->t);
  return 0;
}
int cuEventDestroy_v2(void* e) { free(e); --live_events; return 0; }
