// What a queue pair on a port will use: its GID table, GID index and P_Key index (RcLink's
// constructor and resolve_link, which `python -m gdrlab.hw.perftest args` asks, share them).
#include "verbs/link_choice.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace gdrlab {
// The port's GID table with RoCE versions: one _ibv_query_gid_table call (rdma-core 32+), which
// reports each entry's type without sysfs (containers often cannot read gid_attrs/types); else
// one ibv_query_gid per index with the type from sysfs (0, unknown, when unreadable).
std::vector<GidEntry> gid_table(const Context& ctx, int port, int len) {
  const VerbsApi& api = verbs();
  std::vector<GidEntry> table;
  if (api.query_gid_table) {
    size_t total = 0;
    for (const PortInfo& p : ctx.info().ports) total += static_cast<size_t>(std::max(p.gid_tbl_len, 0));
    std::vector<ibv::ibv_gid_entry> raw(std::max<size_t>(total, 1));
    long n = api.query_gid_table(ctx.get(), raw.data(), raw.size(), 0, sizeof(ibv::ibv_gid_entry));
    if (n >= 0) {
      for (long i = 0; i < n; ++i) {
        const ibv::ibv_gid_entry& r = raw[static_cast<size_t>(i)];
        if (static_cast<int>(r.port_num) != port) continue;
        GidEntry e;
        e.index = static_cast<int>(r.gid_index);
        std::memcpy(e.gid, r.gid.raw, 16);
        e.roce_version = r.gid_type == ibv::IBV_GID_TYPE_ROCE_V2 ? 2 : 1;
        table.push_back(e);
      }
      return table;
    }
  }
  for (int i = 0; i < len; ++i) {
    GidEntry e;
    e.index = i;
    ibv::ibv_gid g;
    std::memset(&g, 0, sizeof g);
    if (api.query_gid(ctx.get(), static_cast<uint8_t>(port), i, &g) != 0) continue;
    std::memcpy(e.gid, g.raw, 16);
    e.roce_version = gid_roce_version(ctx.name(), port, i);
    table.push_back(e);
  }
  return table;
}

int resolve_pkey_index(const Context& ctx, int port, const LinkConfig& cfg, int table_len) {
  int index = cfg.pkey_index;
  if (cfg.pkey >= 0) {
    const VerbsApi& api = verbs();
    if (!api.get_pkey_index)
      throw_unavailable(api.library + " has no ibv_get_pkey_index (IBVERBS_1.5); set GDRLAB_IB_PKEY_INDEX instead");
    index = api.get_pkey_index(ctx.get(), static_cast<uint8_t>(port), htons(static_cast<uint16_t>(cfg.pkey)));
    if (index < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%04x", cfg.pkey);
      throw_unavailable(std::string("P_Key ") + hex + " is not in " + ctx.name() + " port " + std::to_string(port) +
                        "'s P_Key table (see /sys/class/infiniband/" + ctx.name() + "/ports/" + std::to_string(port) +
                        "/pkeys/)");
    }
  }
  if (table_len > 0 && index >= table_len)
    throw_invalid("P_Key index " + std::to_string(index) + " is past " + ctx.name() + " port " + std::to_string(port) +
                  "'s table of " + std::to_string(table_len));
  return index;
}

int choose_gid_index(const Context& ctx, int port, const LinkConfig& cfg, int gid_tbl_len, int* roce_version) {
  const std::vector<GidEntry> table = gid_table(ctx, port, gid_tbl_len);
  int index = cfg.gid_index;
  if (index < 0) {
    const GidPolicy policy = cfg.gid_policy_set ? cfg.gid_policy : gid_policy_from_env();
    index = select_gid_index(table, policy, cfg.have_peer_gid ? cfg.peer_gid : nullptr);
    if (index < 0 && !policy.text.empty()) {
      std::string listed;
      for (const GidEntry& e : table)
        if (std::any_of(e.gid, e.gid + 16, [](uint8_t b) { return b != 0; }))
          listed += (listed.empty() ? "" : ", ") + std::to_string(e.index) + " " + gid_text(e.gid) +
                    (e.roce_version ? " v" + std::to_string(e.roce_version) : " (type unknown)");
      throw_unavailable(ctx.name() + " port " + std::to_string(port) + " has no GID with " + policy.text +
                        " (its GIDs: " + (listed.empty() ? "none" : listed) + ")");
    }
  }
  if (index < 0)
    throw_unavailable(ctx.name() + " port " + std::to_string(port) +
                      " has no usable GID (no IP address on its netdev?); set GDRLAB_IB_GID_INDEX");
  if (roce_version) {
    *roce_version = 0;  // where the type is unknown
    for (const GidEntry& e : table)
      if (e.index == index) *roce_version = e.roce_version;
  }
  return index;
}

LinkChoice resolve_link(const std::string& device, int port, int gpu, const LinkConfig& cfg) {
  Context ctx(device, gpu);
  if (const std::string why = rc_unsupported_reason(ctx.info()); !why.empty()) throw_unavailable(why);
  LinkChoice c;
  c.hca = ctx.name();
  c.port = port > 0 ? port : ctx.active_port();
  c.gpu_hops = ctx.gpu_hops();
  ibv::ibv_port_attr pa = ctx.port_attr(c.port);
  c.link_layer = pa.link_layer == ibv::IBV_LINK_LAYER_ETHERNET ? 2 : 1;
  c.pkey_index = resolve_pkey_index(ctx, c.port, cfg, static_cast<int>(pa.pkey_tbl_len));
  if (c.link_layer == 2) c.gid_index = choose_gid_index(ctx, c.port, cfg, pa.gid_tbl_len, nullptr);
  return c;
}

}  // namespace gdrlab
