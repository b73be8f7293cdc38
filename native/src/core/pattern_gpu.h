// The verification pattern written and checked by the GPU itself: two small kernels, PTX written by
// hand and embedded here as the SM copy's is (paths/sm_copy.h), so the build needs no CUDA
// toolkit. Before them, every device fill and check went through host memory (generate the
// pattern on the CPU, copy it over, or copy the message back and compare), four times per test:
// at 64 MiB that was most of what a test cost besides its timed iterations.
//
// Both kernels cover the whole 8-byte words of a message whose first byte is 8-byte aligned in
// device memory; the caller does the last len % 8 bytes through the host. Word w of a message is
// splitmix64(seed ^ w), the same stream as pattern_fill_host (core/buffer.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cuda_api.h"

namespace gdrlab {

// The embedded PTX text (for the tests that assemble it where a toolkit exists).
const char* pattern_gpu_ptx();

// False where the kernels cannot run on GPU `device` (the driver could not load the module) or
// GDRLAB_PATTERN_KERNELS=0; the caller then goes through host memory. Loads the module on first use.
bool pattern_gpu_ready(int device);

// Writes words [0, words) of the pattern for `seed` at `dst` (8-byte aligned) and waits for it.
void pattern_gpu_fill(int device, CUdeviceptr dst, size_t words, uint64_t seed);

// The first word in [0, words) at `src` (8-byte aligned) that differs from the pattern for `seed`,
// or -1; waits for the answer. Returns -2 when no result slot is free (more checks in flight on
// this GPU than it keeps slots for): the caller checks through host memory instead.
int64_t pattern_gpu_first_bad_word(int device, CUdeviceptr src, size_t words, uint64_t seed);

}  // namespace gdrlab
