#include "paths/sm_copy.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace gdrlab {
namespace {

// Grid-stride copy, 16 bytes per thread per step (ld/st.global.v4.u32), then the n % 16 tail
// bytes by the first n % 16 threads of the grid. PTX ISA 6.0 (CUDA 9.0) and target sm_50: the
// driver JIT-compiles PTX for a newer GPU than the target it declares, so any GPU from Maxwell on
// runs it (PTX ISA, "Target ISA notes"). Parameters: dst, src (generic addresses), n (bytes).
constexpr const char kPtx[] = R"PTX(
.version 6.0
.target sm_50
.address_size 64

.visible .entry gdrlab_copy(
	.param .u64 p_dst,
	.param .u64 p_src,
	.param .u64 p_n
)
{
	.reg .pred 	%p<3>;
	.reg .b16 	%rs<2>;
	.reg .b32 	%r<9>;
	.reg .b64 	%rd<16>;

	ld.param.u64 	%rd1, [p_dst];
	ld.param.u64 	%rd2, [p_src];
	ld.param.u64 	%rd3, [p_n];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mov.u32 	%r4, %nctaid.x;
	mul.wide.u32 	%rd4, %r1, %r2;
	cvt.u64.u32 	%rd5, %r3;
	add.s64 	%rd4, %rd4, %rd5;
	mul.wide.u32 	%rd6, %r4, %r2;
	shr.u64 	%rd7, %rd3, 4;
	mov.u64 	%rd8, %rd4;
COPY16:
	setp.ge.u64 	%p1, %rd8, %rd7;
	@%p1 bra 	TAIL;
	shl.b64 	%rd9, %rd8, 4;
	add.s64 	%rd10, %rd2, %rd9;
	ld.global.v4.u32 	{%r5, %r6, %r7, %r8}, [%rd10];
	add.s64 	%rd11, %rd1, %rd9;
	st.global.v4.u32 	[%rd11], {%r5, %r6, %r7, %r8};
	add.s64 	%rd8, %rd8, %rd6;
	bra.uni 	COPY16;
TAIL:
	shl.b64 	%rd12, %rd7, 4;
	add.s64 	%rd13, %rd12, %rd4;
	setp.ge.u64 	%p2, %rd13, %rd3;
	@%p2 bra 	DONE;
	add.s64 	%rd14, %rd2, %rd13;
	ld.global.u8 	%rs1, [%rd14];
	add.s64 	%rd15, %rd1, %rd13;
	st.global.u8 	[%rd15], %rs1;
DONE:
	ret;
}
)PTX";

constexpr unsigned kThreads = 512;
// Blocks per SM: 2048 resident threads per SM on every GPU since Maxwell / 512 per block.
constexpr unsigned kBlocksPerSm = 4;

struct Loaded {
  CUfunction fn = nullptr;
  unsigned sms = 1;
};

// One module per GPU, loaded at first use and kept for the life of the process, as the
// primary contexts are (cuda_context).
const Loaded& loaded(int device) {
  static std::mutex mu;
  static std::vector<Loaded> per_device;
  CUcontext ctx = cuda_context(device);
  std::lock_guard<std::mutex> lock(mu);
  if (per_device.size() <= static_cast<size_t>(device)) per_device.resize(device + 1);
  Loaded& L = per_device[device];
  if (L.fn) return L;
  const CudaApi& api = cuda();
  cuda_set(ctx);
  CUmodule mod = nullptr;
  CUresult r = api.cuModuleLoadData(&mod, kPtx);
  if (r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || r == CUDA_ERROR_NOT_SUPPORTED) {
    std::string why;
    try { cuda_check(r, "cuModuleLoadData", __FILE__, __LINE__); } catch (const Error& e) { why = e.what(); }
    throw_unavailable("the driver could not JIT-compile the SM copy kernel (PTX ISA 6.0, sm_50) for GPU " +
                      std::to_string(device) + ": " + why);
  }
  cuda_check(r, "cuModuleLoadData", __FILE__, __LINE__);
  GDRLAB_CU(api, cuModuleGetFunction, &L.fn, mod, "gdrlab_copy");
  CUdevice dev;
  GDRLAB_CU(api, cuDeviceGet, &dev, device);
  int sms = 0;
  GDRLAB_CU(api, cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  L.sms = sms > 0 ? static_cast<unsigned>(sms) : 1;
  return L;
}

}  // namespace

const char* sm_copy_ptx() { return kPtx; }
const char* sm_copy_ptx_isa() { return "6.0"; }
const char* sm_copy_ptx_target() { return "sm_50"; }

SmLaunchShape sm_copy_shape(int device, size_t n, unsigned share) {
  const Loaded& L = loaded(device);
  size_t vectors = std::max<size_t>(1, n / 16);
  size_t need = (vectors + kThreads - 1) / kThreads;
  // A kernel whose grid fills every SM's resident threads keeps them until its grid-stride loop
  // ends: a second kernel on the same GPU would wait for it. With `share` kernels at once, each
  // takes its share (at least one block per SM, as nvbandwidth's copy kernels launch).
  size_t most = static_cast<size_t>(L.sms) * std::max<size_t>(1, kBlocksPerSm / std::max(1u, share));
  return {static_cast<unsigned>(std::max<size_t>(1, std::min(need, most))), kThreads};
}

void sm_copy_launch(int device, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, unsigned share) {
  if ((dst | src) % 16 != 0) throw_invalid("the SM copy kernel needs 16-byte aligned addresses");
  const Loaded& L = loaded(device);
  SmLaunchShape shape = sm_copy_shape(device, n, share);
  cuda_use(device);
  unsigned long long n64 = n;
  void* params[] = {&dst, &src, &n64};
  GDRLAB_CU(cuda(), cuLaunchKernel, L.fn, shape.blocks, 1, 1, shape.threads, 1, 1, 0, stream, params, nullptr);
}

}  // namespace gdrlab
