// Every environment variable the engine reads, in one table (NCCL's param.cc idea, gdrcopy's list
// in gdrapi.h made code). Each knob is read under our name first, then NCCL's where it has one, so
// a cluster's existing NCCL settings apply unchanged. The binding exports the table as
// gdrlab._native.KNOBS; `gdrlab doctor` prints the values in effect and a test checks the table
// against docs/cluster.md and the README.
#pragma once

#include <cstdint>

namespace gdrlab {

// X(id, our name, NCCL's name or "", default in words, what it sets)
#define GDRLAB_KNOBS(X)                                                                                           \
  X(IbDev, "GDRLAB_IB_DEV", "", "the ACTIVE HCA nearest the GPU", "HCA and optional port (mlx5_0 or mlx5_0:1)")  \
  X(IbHca, "GDRLAB_IB_HCA", "NCCL_IB_HCA", "every device", "which HCAs the default may choose from (NCCL syntax)") \
  X(IbGidIndex, "GDRLAB_IB_GID_INDEX", "NCCL_IB_GID_INDEX", "chosen", "RoCE GID index, taken as given")           \
  X(IbRoceVersionNum, "GDRLAB_IB_ROCE_VERSION_NUM", "NCCL_IB_ROCE_VERSION_NUM", "v2, else v1",                   \
    "only GIDs of that RoCE version")                                                                            \
  X(IbAddrFamily, "GDRLAB_IB_ADDR_FAMILY", "NCCL_IB_ADDR_FAMILY", "IPv4, then IPv6", "AF_INET or AF_INET6 GIDs")   \
  X(IbAddrRange, "GDRLAB_IB_ADDR_RANGE", "NCCL_IB_ADDR_RANGE", "any", "a CIDR block the GID must lie in")          \
  X(IbRoutableFlidGidIndex, "GDRLAB_IB_ROUTABLE_FLID_GID_INDEX", "NCCL_IB_ROUTABLE_FLID_GID_INDEX", "1",         \
    "GID index carrying the port's FLID on routed InfiniBand")                                                   \
  X(IbTc, "GDRLAB_IB_TC", "NCCL_IB_TC", "0", "GRH traffic class")                                                 \
  X(IbSl, "GDRLAB_IB_SL", "NCCL_IB_SL", "0", "InfiniBand service level")                                          \
  X(IbPkeyIndex, "GDRLAB_IB_PKEY_INDEX", "NCCL_IB_PKEY", "0", "index in the port's P_Key table")                  \
  X(IbPkey, "GDRLAB_IB_PKEY", "", "index 0", "a P_Key value, looked up in the port's table")                       \
  X(GdrFlushDisable, "GDRLAB_GDR_FLUSH_DISABLE", "NCCL_GDR_FLUSH_DISABLE", "0", "nonzero skips the GPU flush")    \
  X(GdrForceFlush, "GDRLAB_GDR_FORCE_FLUSH", "", "0", "1 flushes even where the platform orders writes")           \
  X(GdrReg, "GDRLAB_GDR_REG", "", "auto", "GPU memory registration: auto, dmabuf, peermem")                      \
  X(NetGdrLevel, "NCCL_NET_GDR_LEVEL", "", "PXB", "NCCL's GPUDirect RDMA distance, for the SYS warning")          \
  X(IbForkInit, "GDRLAB_IB_FORK_INIT", "", "1", "0 skips ibv_fork_init")                                          \
  X(IbRelaxedOrdering, "GDRLAB_IB_RELAXED_ORDERING", "", "1", "0 registers without PCIe relaxed ordering")        \
  X(SysfsRoot, "GDRLAB_SYSFS_ROOT", "", "/sys", "where sysfs is mounted")                                         \
  X(DevRoot, "GDRLAB_DEV_ROOT", "", "/dev", "where device files are (/dev/infiniband)")                          \
  X(IbverbsLib, "GDRLAB_IBVERBS_LIB", "", "libibverbs.so.1", "the verbs library opened at run time")             \
  X(SpinUs, "GDRLAB_SPIN_US", "", "by the socket", "microseconds a socket spins before it blocks in poll()")     \
  X(KeepPageable, "GDRLAB_KEEP_PAGEABLE", "", "1", "0 gives freed pageable message buffers back at once")        \
  X(KeepPinned, "GDRLAB_KEEP_PINNED", "", "1", "0 frees pinned staging buffers at once")                           \
  X(PatternKernels, "GDRLAB_PATTERN_KERNELS", "", "1", "0 fills and checks GPU messages through host memory")

enum class Knob : uint8_t {
#define GDRLAB_KNOB_ID(id, name, nccl, dflt, meaning) id,
  GDRLAB_KNOBS(GDRLAB_KNOB_ID)
#undef GDRLAB_KNOB_ID
      Max
};

struct KnobInfo {
  const char* name;     // ours (or NCCL's, for a knob only NCCL names)
  const char* nccl;     // NCCL's name read after ours, "" when none
  const char* fallback; // the default, in words
  const char* meaning;
};

const KnobInfo& knob_info(Knob k);

struct EnvSetting {
  const char* name = nullptr;   // the variable that was set, for messages
  const char* value = nullptr;  // null when none of them is set (or all are empty)
};

// The first of the knob's names set to a non-empty value; `name` is our name when none is.
EnvSetting knob_env(Knob k);

}  // namespace gdrlab
