// The SM copy: a copy kernel run by the GPU's streaming multiprocessors instead of its copy
// engines (nvbandwidth's "_sm" testcases). The kernel is PTX written by hand and embedded here;
// the driver JIT-compiles it (cuModuleLoadData) the first time a GPU uses it, so the build needs no
// CUDA toolkit and one engine runs on any GPU the driver supports.
#pragma once
#include <cstddef>

#include "core/cuda_api.h"

namespace gdrlab {

// The embedded PTX text and the ISA/target its header declares (".version 6.0", "sm_50").
const char* sm_copy_ptx();
const char* sm_copy_ptx_isa();
const char* sm_copy_ptx_target();

// Queues `n` bytes from src to dst on `stream` as one launch of the copy kernel on GPU `device`
// (its primary context is made current). Both addresses must be reachable from that GPU: its own
// memory, a peer's with peer access enabled, or pinned host memory's device address.
// 16-byte loads and stores where both addresses are 16-byte aligned (the kernel copies n/16
// vectors, then the n%16 tail bytes); addresses that are not aligned are refused.
// `share`: how many copy kernels run on this GPU at once (both directions of a bidirectional copy,
// the legs of an all-to-one pattern): each launch takes 1/share of the resident threads the GPU
// holds, so the launches run side by side instead of one after the other.
void sm_copy_launch(int device, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, unsigned share = 1);

// Threads per block and blocks the launch of `n` bytes on `device` uses (for the output).
struct SmLaunchShape {
  unsigned blocks;
  unsigned threads;
};
SmLaunchShape sm_copy_shape(int device, size_t n, unsigned share = 1);

}  // namespace gdrlab
