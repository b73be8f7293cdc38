// Reference for bench_engine.py: the same copies as gdrlab's copy_bench, written directly against
// the CUDA driver API (cuda.h, linked with -lcuda), so the ratio engine/raw shows the engine's
// own overhead. Prints one JSON object: median seconds per copy for each case.
//   g++ -O2 -std=c++17 raw_copy.cpp -I$CUDA_HOME/include -L$CUDA_HOME/lib64/stubs -lcuda -o raw_copy
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                              \
  do {                                                                        \
    CUresult r_ = (x);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                 \
      const char* s_ = nullptr;                                               \
      cuGetErrorString(r_, &s_);                                              \
      std::fprintf(stderr, "%s failed: %s (%d)\n", #x, s_ ? s_ : "?", r_);    \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// dir 0: H2D, 1: D2H. Each sample: cuMemcpyAsync + cuStreamSynchronize, host clock.
static double time_copy(int dir, size_t size, int iters, int warmup, void* host, CUdeviceptr dev, CUstream st) {
  std::vector<double> s;
  for (int i = 0; i < warmup + iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (dir == 0) CHECK(cuMemcpyHtoDAsync(dev, host, size, st));
    else CHECK(cuMemcpyDtoHAsync(host, dev, size, st));
    CHECK(cuStreamSynchronize(st));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) s.push_back(dt);
  }
  return median(s);
}

// Device to device on one GPU (dir 2) and both host directions at once on two streams (bidir):
// the references of bench/copy_engines.py.
static double time_d2d(size_t size, int iters, int warmup, CUdeviceptr dst, CUdeviceptr src, CUstream st) {
  std::vector<double> s;
  for (int i = 0; i < warmup + iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cuMemcpyDtoDAsync(dst, src, size, st));
    CHECK(cuStreamSynchronize(st));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) s.push_back(dt);
  }
  return median(s);
}

static double time_bidir(size_t size, int iters, int warmup, void* h_src, CUdeviceptr d_dst, CUdeviceptr d_src,
                         void* h_dst, CUstream a, CUstream b) {
  std::vector<double> s;
  for (int i = 0; i < warmup + iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cuMemcpyHtoDAsync(d_dst, h_src, size, a));
    CHECK(cuMemcpyDtoHAsync(h_dst, d_src, size, b));
    CHECK(cuStreamSynchronize(a));
    CHECK(cuStreamSynchronize(b));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) s.push_back(dt);
  }
  return median(s);
}

int main(int argc, char** argv) {
  size_t big = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (64u << 20);
  int big_iters = argc > 2 ? std::atoi(argv[2]) : 50;
  int small_iters = argc > 3 ? std::atoi(argv[3]) : 2000;
  CHECK(cuInit(0));
  CUdevice d;
  CHECK(cuDeviceGet(&d, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, d));
  CHECK(cuCtxSetCurrent(ctx));
  void* host = nullptr;
  CHECK(cuMemHostAlloc(&host, big, CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, big));
  CUstream st;
  CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  double h2d = time_copy(0, big, big_iters, 5, host, dev, st);
  double d2h = time_copy(1, big, big_iters, 5, host, dev, st);
  double d2h8 = time_copy(1, 8, small_iters, 100, host, dev, st);
  double h2d8 = time_copy(0, 8, small_iters, 100, host, dev, st);
  void* host2 = nullptr;
  CHECK(cuMemHostAlloc(&host2, big, CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr dev2;
  CHECK(cuMemAlloc(&dev2, big));
  CUstream st2;
  CHECK(cuStreamCreate(&st2, CU_STREAM_NON_BLOCKING));
  double d2d = time_d2d(big, big_iters, 5, dev2, dev, st);
  double bidir = time_bidir(big, big_iters, 5, host, dev, dev2, host2, st, st2);
  std::printf("{\"size\": %zu, \"h2d_s\": %.9g, \"d2h_s\": %.9g, \"d2h_8b_s\": %.9g, \"h2d_8b_s\": %.9g, "
              "\"d2d_s\": %.9g, \"bidir_s\": %.9g}\n", big, h2d, d2h, d2h8, h2d8, d2d, bidir);
  CHECK(cuStreamDestroy(st2));
  CHECK(cuMemFree(dev2));
  CHECK(cuMemFreeHost(host2));
  CHECK(cuStreamDestroy(st));
  CHECK(cuMemFree(dev));
  CHECK(cuMemFreeHost(host));
  CHECK(cuDevicePrimaryCtxRelease(d));
  return 0;
}
