// What the CUDA driver says about each GPU: what doctor and the labs print.
#pragma once
#include <string>
#include <vector>

namespace gdrlab {

struct GpuInfo {
  int index = 0;
  std::string name;
  std::string pci_bus_id;
  size_t total_mem_bytes = 0;
  int cc_major = 0, cc_minor = 0;
  int async_engines = 0;
  int gdr_supported = 0;       // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
  int dmabuf_supported = 0;    // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
  int gdr_vmm_supported = 0;   // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
  int host_numa_id = -1;       // CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID (-1: unknown)
};

std::vector<GpuInfo> gpu_infos();
int driver_version();

}  // namespace gdrlab
