#include "core/devinfo.h"

#include "core/cuda_api.h"

namespace gdrlab {

int driver_version() { return cuda().driver_version; }

std::vector<GpuInfo> gpu_infos() {
  const CudaApi& api = cuda();
  std::vector<GpuInfo> out;
  int n = cuda_device_count();
  for (int i = 0; i < n; ++i) {
    CUdevice d;
    GDRLAB_CU(api, cuDeviceGet, &d, i);
    GpuInfo g;
    g.index = i;
    char buf[256] = {0};
    GDRLAB_CU(api, cuDeviceGetName, buf, sizeof buf - 1, d);
    g.name = buf;
    char bus[64] = {0};
    GDRLAB_CU(api, cuDeviceGetPCIBusId, bus, sizeof bus - 1, d);
    g.pci_bus_id = bus;
    GDRLAB_CU(api, cuDeviceTotalMem, &g.total_mem_bytes, d);
    auto attr = [&](int a, int fallback) {
      int v = 0;
      return api.cuDeviceGetAttribute(&v, a, d) == CUDA_SUCCESS ? v : fallback;
    };
    g.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
    g.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
    g.async_engines = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 0);
    g.gdr_supported = attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0);
    g.dmabuf_supported = attr(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 0);
    g.gdr_vmm_supported = attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0);
    g.host_numa_id = attr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, -1);
    out.push_back(g);
  }
  return out;
}

}  // namespace gdrlab
