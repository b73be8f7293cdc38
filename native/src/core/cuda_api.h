// The CUDA driver API, loaded from libcuda.so.1 with dlopen at first use.
// Only the types, enums and entry points the engine uses are declared here, so the build needs
// no CUDA toolkit (tests/engine/test_native_cuda.py checks these values against cuda.h when one exists).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gdrlab {

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;

enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
  CUDA_ERROR_NOT_SUPPORTED = 801,
};

enum : int {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
  CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  // 1 where the GPU reads pageable host memory through the CPU's page tables: the C2C-attached
  // GH200/GB200 (NVLink-C2C, with ATS)
  CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES = 100,
  CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 110,
  CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
  CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS = 117,  // CUDA 11.3+
  CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING = 118,       // CUDA 11.3+
  CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
  CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID = 134,
};

enum : int {
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,  // CUDA 9.2+
  CU_MEMORYTYPE_HOST = 1,
  CU_MEMORYTYPE_DEVICE = 2,
  CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1,
};

// cuFlushGPUDirectRDMAWrites target and scope.
enum : int {
  CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX = 0,
  CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER = 100,
  // Bits of attribute 117, and the values of attribute 118.
  CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST = 1,
  CU_GPU_DIRECT_RDMA_WRITES_ORDERING_NONE = 0,
  CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER = 100,
  CU_GPU_DIRECT_RDMA_WRITES_ORDERING_ALL_DEVICES = 200,
};

enum : unsigned {
  CU_STREAM_NON_BLOCKING = 0x1,
  CU_EVENT_DEFAULT = 0x0,
  CU_EVENT_DISABLE_TIMING = 0x2,
  CU_MEMHOSTALLOC_PORTABLE = 0x1,
  CU_MEMHOSTREGISTER_PORTABLE = 0x1,
};

// One list: REQ entries must resolve or the library counts as unusable; OPT entries may be
// missing (older drivers) and are checked with has() before use.
// X(member name, exported symbol, return type, parameter list)
#define GDRLAB_CUDA_SYMBOLS(REQ, OPT)                                                         \
  REQ(cuInit, "cuInit", CUresult, (unsigned))                                                 \
  REQ(cuDriverGetVersion, "cuDriverGetVersion", CUresult, (int*))                             \
  REQ(cuGetErrorName, "cuGetErrorName", CUresult, (CUresult, const char**))                   \
  REQ(cuGetErrorString, "cuGetErrorString", CUresult, (CUresult, const char**))               \
  REQ(cuDeviceGetCount, "cuDeviceGetCount", CUresult, (int*))                                 \
  REQ(cuDeviceGet, "cuDeviceGet", CUresult, (CUdevice*, int))                                 \
  REQ(cuDeviceGetName, "cuDeviceGetName", CUresult, (char*, int, CUdevice))                   \
  REQ(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult, (int*, int, CUdevice))          \
  REQ(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", CUresult, (char*, int, CUdevice))           \
  REQ(cuDeviceTotalMem, "cuDeviceTotalMem_v2", CUresult, (size_t*, CUdevice))                 \
  REQ(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult, (CUcontext*, CUdevice)) \
  REQ(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext))                              \
  REQ(cuCtxSynchronize, "cuCtxSynchronize", CUresult, ())                                     \
  REQ(cuMemGetInfo, "cuMemGetInfo_v2", CUresult, (size_t*, size_t*))                          \
  REQ(cuMemAlloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr*, size_t))                          \
  REQ(cuMemFree, "cuMemFree_v2", CUresult, (CUdeviceptr))                                     \
  REQ(cuMemHostAlloc, "cuMemHostAlloc", CUresult, (void**, size_t, unsigned))                 \
  REQ(cuMemFreeHost, "cuMemFreeHost", CUresult, (void*))                                      \
  REQ(cuMemHostRegister, "cuMemHostRegister_v2", CUresult, (void*, size_t, unsigned))         \
  REQ(cuMemHostUnregister, "cuMemHostUnregister", CUresult, (void*))                          \
  REQ(cuMemsetD8, "cuMemsetD8_v2", CUresult, (CUdeviceptr, unsigned char, size_t))            \
  REQ(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", CUresult,                                    \
      (CUdeviceptr, const void*, size_t, CUstream))                                           \
  REQ(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", CUresult,                                    \
      (void*, CUdeviceptr, size_t, CUstream))                                                 \
  REQ(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", CUresult,                                    \
      (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                           \
  REQ(cuPointerGetAttribute, "cuPointerGetAttribute", CUresult, (void*, int, CUdeviceptr))    \
  REQ(cuStreamCreate, "cuStreamCreate", CUresult, (CUstream*, unsigned))                      \
  REQ(cuStreamDestroy, "cuStreamDestroy_v2", CUresult, (CUstream))                            \
  REQ(cuStreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream))                       \
  REQ(cuEventCreate, "cuEventCreate", CUresult, (CUevent*, unsigned))                         \
  REQ(cuEventDestroy, "cuEventDestroy_v2", CUresult, (CUevent))                               \
  REQ(cuEventRecord, "cuEventRecord", CUresult, (CUevent, CUstream))                          \
  REQ(cuEventSynchronize, "cuEventSynchronize", CUresult, (CUevent))                          \
  REQ(cuEventElapsedTime, "cuEventElapsedTime", CUresult, (float*, CUevent, CUevent))         \
  REQ(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", CUresult,                    \
      (CUdeviceptr*, void*, unsigned))                                                        \
  /* The SM copy kernel: PTX text JIT-compiled by the driver for the GPU it runs on. */      \
  REQ(cuModuleLoadData, "cuModuleLoadData", CUresult, (CUmodule*, const void*))               \
  REQ(cuModuleGetFunction, "cuModuleGetFunction", CUresult, (CUfunction*, CUmodule, const char*)) \
  REQ(cuLaunchKernel, "cuLaunchKernel", CUresult,                                             \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,      \
       CUstream, void**, void**))                                                             \
  REQ(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", CUresult, (int*, CUdevice, CUdevice))   \
  REQ(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", CUresult, (CUcontext, unsigned))        \
  REQ(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess", CUresult, (CUcontext))                \
  REQ(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", CUresult,                                       \
      (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream))                     \
  /* The pattern kernels' result words (core/pattern_gpu.cc); without it, host checks. */    \
  OPT(cuModuleGetGlobal, "cuModuleGetGlobal_v2", CUresult,                                    \
      (CUdeviceptr*, size_t*, CUmodule, const char*))                                         \
  /* CUDA 11.7+: export GPU memory as a dma-buf fd for RDMA importers. */                     \
  OPT(cuMemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", CUresult,               \
      (void*, CUdeviceptr, size_t, int, unsigned long long))                                  \
  /* CUDA 11.3+: make an HCA's completed writes visible to later CUDA work on the GPU. */      \
  OPT(cuFlushGPUDirectRDMAWrites, "cuFlushGPUDirectRDMAWrites", CUresult, (int, int))

struct CudaApi {
#define GDRLAB_CUDA_MEMBER(name, sym, ret, args) ret(*name) args = nullptr;
  GDRLAB_CUDA_SYMBOLS(GDRLAB_CUDA_MEMBER, GDRLAB_CUDA_MEMBER)
#undef GDRLAB_CUDA_MEMBER
  int driver_version = 0;
};

// Loads libcuda.so.1 once and calls cuInit(0). Throws Error(Unavailable) with the reason when the
// library is missing, a required symbol is missing, or cuInit fails; the reason is kept and the
// same error is thrown on every later call. The loader's search applies (LD_LIBRARY_PATH first).
const CudaApi& cuda();
// The loaded API, or nullptr when cuda() would throw. For destructors, which must not throw.
const CudaApi* cuda_if_loaded() noexcept;
// Same probe without throwing: true if usable, else false and *why set.
bool cuda_usable(std::string* why);
// Throws Error(Cuda) naming the call and where it was made (file:line), with the driver's
// cuGetErrorName/String, when r != CUDA_SUCCESS.
void cuda_check(CUresult r, const char* call, const char* file, int line);

// GDRLAB_CU(api, cuStreamCreate, &s, flags) calls api.cuStreamCreate(&s, flags) and checks the
// result; the call's name comes from the member token, not from parsing the expression.
#define GDRLAB_CU(api, fn, ...) ::gdrlab::cuda_check((api).fn(__VA_ARGS__), #fn, __FILE__, __LINE__)

// Primary context of a device ordinal, retained once and kept for the life of the process.
// Throws Unavailable for an ordinal this machine does not have. Takes a lock: endpoints call it
// once and keep the context, so no message pays for it.
CUcontext cuda_context(int device);
// Makes `ctx` current on the calling thread (every call into CUDA may come from a new thread).
void cuda_set(CUcontext ctx);
// cuda_set(cuda_context(device)).
void cuda_use(int device);
int cuda_device_count();

}  // namespace gdrlab
