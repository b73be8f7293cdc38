#include "core/pattern_gpu.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/knobs.h"

namespace gdrlab {
namespace {

// Two grid-stride kernels over 8-byte words (thread i takes words i, i + grid, ...: neighbouring
// threads touch neighbouring words). x = splitmix64(seed ^ w):
//   x += 0x9E3779B97F4A7C15; x = (x ^ x >> 30) * 0xBF58476D1CE4E5B9;
//   x = (x ^ x >> 27) * 0x94D049BB133111EB; x ^= x >> 31
// gdrlab_pattern_fill stores it; gdrlab_pattern_check compares it with what the word holds and,
// at a thread's first difference, lowers the result word to that index (atom.global.min.u64:
// sm_32 and later; a thread's later words can only be larger, so it stops there). The result
// words are the module's own global array, one per check in flight, so no allocation is made
// per check. PTX ISA 6.0, target sm_50, as the SM copy's (the driver JIT-compiles for newer GPUs).
// The thread's first word (%rd4) and the grid's stride (%rd6); x = splitmix64(seed ^ w) from the
// seed in %rd3 and the word in %rd4, into %rd7 (%rd8 scratch). Each kernel spells both the same.
#define GDRLAB_PTX_GRID \
  "\tmov.u32 \t%r1, %ctaid.x;\n\tmov.u32 \t%r2, %ntid.x;\n\tmov.u32 \t%r3, %tid.x;\n"   \
  "\tmov.u32 \t%r4, %nctaid.x;\n\tmul.wide.u32 \t%rd4, %r1, %r2;\n\tcvt.u64.u32 \t%rd5, %r3;\n" \
  "\tadd.s64 \t%rd4, %rd4, %rd5;\n\tmul.wide.u32 \t%rd6, %r4, %r2;\n"
#define GDRLAB_PTX_SPLITMIX                                                                       \
  "\txor.b64 \t%rd7, %rd3, %rd4;\n\tadd.s64 \t%rd7, %rd7, 0x9E3779B97F4A7C15;\n"            \
  "\tshr.u64 \t%rd8, %rd7, 30;\n\txor.b64 \t%rd7, %rd7, %rd8;\n"                           \
  "\tmul.lo.s64 \t%rd7, %rd7, 0xBF58476D1CE4E5B9;\n\tshr.u64 \t%rd8, %rd7, 27;\n"           \
  "\txor.b64 \t%rd7, %rd7, %rd8;\n\tmul.lo.s64 \t%rd7, %rd7, 0x94D049BB133111EB;\n"          \
  "\tshr.u64 \t%rd8, %rd7, 31;\n\txor.b64 \t%rd7, %rd7, %rd8;\n"

constexpr const char kPtx[] = R"PTX(
.version 6.0
.target sm_50
.address_size 64

.visible .global .align 8 .u64 gdrlab_pattern_bad[64];

.visible .entry gdrlab_pattern_fill(
	.param .u64 p_dst,
	.param .u64 p_words,
	.param .u64 p_seed
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<5>;
	.reg .b64 	%rd<12>;

	ld.param.u64 	%rd1, [p_dst];
	ld.param.u64 	%rd2, [p_words];
	ld.param.u64 	%rd3, [p_seed];
	cvta.to.global.u64 	%rd1, %rd1;
)PTX" GDRLAB_PTX_GRID R"PTX(FILL:
	setp.ge.u64 	%p1, %rd4, %rd2;
	@%p1 bra 	FILL_DONE;
)PTX" GDRLAB_PTX_SPLITMIX R"PTX(	shl.b64 	%rd9, %rd4, 3;
	add.s64 	%rd10, %rd1, %rd9;
	st.global.u64 	[%rd10], %rd7;
	add.s64 	%rd4, %rd4, %rd6;
	bra.uni 	FILL;
FILL_DONE:
	ret;
}

.visible .entry gdrlab_pattern_check(
	.param .u64 p_src,
	.param .u64 p_words,
	.param .u64 p_seed,
	.param .u64 p_bad
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<5>;
	.reg .b64 	%rd<14>;

	ld.param.u64 	%rd1, [p_src];
	ld.param.u64 	%rd2, [p_words];
	ld.param.u64 	%rd3, [p_seed];
	ld.param.u64 	%rd11, [p_bad];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd11, %rd11;
)PTX" GDRLAB_PTX_GRID R"PTX(CHECK:
	setp.ge.u64 	%p1, %rd4, %rd2;
	@%p1 bra 	CHECK_DONE;
	shl.b64 	%rd9, %rd4, 3;
	add.s64 	%rd10, %rd1, %rd9;
	ld.global.u64 	%rd12, [%rd10];
)PTX" GDRLAB_PTX_SPLITMIX R"PTX(	setp.ne.b64 	%p2, %rd12, %rd7;
	@%p2 bra 	MISMATCH;
	add.s64 	%rd4, %rd4, %rd6;
	bra.uni 	CHECK;
MISMATCH:
	atom.global.min.u64 	%rd13, [%rd11], %rd4;
CHECK_DONE:
	ret;
}
)PTX";
#undef GDRLAB_PTX_GRID
#undef GDRLAB_PTX_SPLITMIX

constexpr unsigned kThreads = 256;
constexpr unsigned kBlocksPerSm = 8;  // 2048 resident threads per SM / 256
constexpr int kSlots = 64;            // gdrlab_pattern_bad's length: checks in flight per GPU

struct Module {
  bool tried = false;
  bool ready = false;
  CUfunction fill = nullptr;
  CUfunction check = nullptr;
  CUdeviceptr slots = 0;  // gdrlab_pattern_bad
  unsigned sms = 1;
  uint64_t busy = 0;  // bit i: slot i holds a check in flight
};

std::mutex& modules_mutex() {
  static auto* mu = new std::mutex();  // never destroyed: buffers may be checked during exit
  return *mu;
}
std::vector<Module>& modules() {
  static auto* m = new std::vector<Module>();
  return *m;
}

// The GPU's module, loaded on first use (under modules_mutex). A driver that cannot load it, or
// has no cuModuleGetGlobal, leaves it not ready: the caller goes through host memory, as before.
Module& module_locked(int device) {
  auto& all = modules();
  if (all.size() <= static_cast<size_t>(device)) all.resize(device + 1);
  Module& M = all[device];
  if (M.tried) return M;
  M.tried = true;
  const CudaApi& api = cuda();
  if (!api.cuModuleGetGlobal) return M;
  cuda_use(device);
  CUmodule mod = nullptr;
  if (api.cuModuleLoadData(&mod, kPtx) != CUDA_SUCCESS) return M;
  size_t bytes = 0;
  if (api.cuModuleGetFunction(&M.fill, mod, "gdrlab_pattern_fill") != CUDA_SUCCESS ||
      api.cuModuleGetFunction(&M.check, mod, "gdrlab_pattern_check") != CUDA_SUCCESS ||
      api.cuModuleGetGlobal(&M.slots, &bytes, mod, "gdrlab_pattern_bad") != CUDA_SUCCESS ||
      bytes < kSlots * sizeof(uint64_t))
    return M;
  CUdevice dev;
  int sms = 0;
  if (api.cuDeviceGet(&dev, device) == CUDA_SUCCESS &&
      api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS && sms > 0)
    M.sms = static_cast<unsigned>(sms);
  M.ready = true;
  return M;
}

unsigned blocks_for(const Module& M, size_t words) {
  const size_t need = (words + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(need, size_t(M.sms) * kBlocksPerSm)));
}

}  // namespace

const char* pattern_gpu_ptx() { return kPtx; }

bool pattern_gpu_ready(int device) {
  static const bool wanted = [] {  // GDRLAB_PATTERN_KERNELS=0: through host memory, as before them
    const EnvSetting e = knob_env(Knob::PatternKernels);
    return !(e.value && std::strcmp(e.value, "0") == 0);
  }();
  if (device < 0 || !wanted) return false;
  std::lock_guard<std::mutex> lock(modules_mutex());
  return module_locked(device).ready;
}

void pattern_gpu_fill(int device, CUdeviceptr dst, size_t words, uint64_t seed) {
  if (words == 0) return;
  CUfunction fn;
  unsigned blocks;
  {
    std::lock_guard<std::mutex> lock(modules_mutex());
    const Module& M = module_locked(device);
    if (!M.ready) throw_unavailable("the pattern kernels are not loaded on GPU " + std::to_string(device));
    fn = M.fill;
    blocks = blocks_for(M, words);
  }
  const CudaApi& api = cuda();
  cuda_use(device);
  unsigned long long n = words, s = seed;
  void* params[] = {&dst, &n, &s};
  GDRLAB_CU(api, cuLaunchKernel, fn, blocks, 1, 1, kThreads, 1, 1, 0, nullptr, params, nullptr);
  GDRLAB_CU(api, cuStreamSynchronize, nullptr);
}

int64_t pattern_gpu_first_bad_word(int device, CUdeviceptr src, size_t words, uint64_t seed) {
  if (words == 0) return -1;
  CUfunction fn;
  unsigned blocks;
  CUdeviceptr slot;
  int index = -1;
  {
    std::lock_guard<std::mutex> lock(modules_mutex());
    Module& M = module_locked(device);
    if (!M.ready) throw_unavailable("the pattern kernels are not loaded on GPU " + std::to_string(device));
    for (int i = 0; i < kSlots && index < 0; ++i)
      if (!(M.busy >> i & 1)) index = i;
    if (index < 0) return -2;
    M.busy |= uint64_t(1) << index;
    fn = M.check;
    blocks = blocks_for(M, words);
    slot = M.slots + static_cast<CUdeviceptr>(index) * sizeof(uint64_t);
  }
  struct Release {  // the slot is free again however this ends
    int device, index;
    ~Release() {
      std::lock_guard<std::mutex> lock(modules_mutex());
      modules()[device].busy &= ~(uint64_t(1) << index);
    }
  } release{device, index};
  const CudaApi& api = cuda();
  cuda_use(device);
  GDRLAB_CU(api, cuMemsetD8, slot, 0xFF, sizeof(uint64_t));  // no difference: the largest u64
  unsigned long long n = words, s = seed;
  void* params[] = {&src, &n, &s, &slot};
  GDRLAB_CU(api, cuLaunchKernel, fn, blocks, 1, 1, kThreads, 1, 1, 0, nullptr, params, nullptr);
  uint64_t first = 0;
  GDRLAB_CU(api, cuMemcpyDtoHAsync, &first, slot, sizeof first, nullptr);
  GDRLAB_CU(api, cuStreamSynchronize, nullptr);
  return first == ~uint64_t(0) ? -1 : static_cast<int64_t>(first);
}

}  // namespace gdrlab
