// What a queue pair on a port will use, chosen the same way for RcLink and for the perftest
// options bench/rdma_pair.sh hands perftest (resolve_link): the GID table with RoCE versions, the
// GID index (GDRLAB_IB_GID_INDEX, else select_gid_index under the GID policy) and the P_Key index.
#pragma once
#include <string>
#include <vector>

#include "verbs/qp.h"

namespace gdrlab {

// The port's GID table with RoCE versions: one _ibv_query_gid_table call (rdma-core 32+), else one
// ibv_query_gid per index with the type from sysfs (0, unknown, when unreadable).
std::vector<GidEntry> gid_table(const Context& ctx, int port, int len);
// cfg.pkey (a value, looked up) or cfg.pkey_index, checked against the table length.
int resolve_pkey_index(const Context& ctx, int port, const LinkConfig& cfg, int table_len);
// The GID index a RoCE port uses under cfg (its gid_index, else the policy's choice); throws
// Unavailable naming the table when none qualifies. *roce_version gets the entry's version.
int choose_gid_index(const Context& ctx, int port, const LinkConfig& cfg, int gid_tbl_len, int* roce_version);

struct LinkChoice {
  std::string hca;
  int port = 0;
  int link_layer = 0;   // 1 InfiniBand, 2 Ethernet
  int gid_index = -1;   // RoCE: the chosen index; InfiniBand: -1 (perftest's default, GID 0)
  int pkey_index = 0;
  int gpu_hops = -1;
};
// Opens `device` ("" : the HCA nearest CUDA device `gpu`, as a test would) and says which port,
// GID index and P_Key index a queue pair there would use; opens and creates nothing else.
LinkChoice resolve_link(const std::string& device, int port, int gpu, const LinkConfig& cfg);

}  // namespace gdrlab
