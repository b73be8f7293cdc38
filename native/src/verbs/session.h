// The verbs wire between `gdrlab bench --wire verbs` (VerbsClient) and `gdrlab serve`.
// The tcp session stays open beside the queue pair as the out-of-band channel, as in perftest:
//
//   client                                   server
//   HELLO / WELCOME (tcp handshake, token)
//   CONNECT(spec, client ConnInfo)   ->      opens the HCA, QP to RTR/RTS, registers its region
//                                    <-      CONNECT(server ConnInfo, registration mechanism)
//   QP to RTR/RTS
//   timed loop over the QP (RDMA WRITE WITH IMM): latency ping-pong / bandwidth window + ACK
//   verification: pattern(seed) over the QP -> VERDICT over tcp; pattern(seed+1) back over the QP
//
// Which HCA is used: $GDRLAB_IB_DEV ("mlx5_0" or "mlx5_0:1"; default: among the devices
// $GDRLAB_IB_HCA allows, the ACTIVE one nearest the test's GPU, see verbs/hca.h),
// $GDRLAB_IB_GID_INDEX (RoCE; default: chosen by select_gid_index), $GDRLAB_IB_TC / $GDRLAB_IB_SL
// (traffic class and service level, default 0), $GDRLAB_IB_PKEY or $GDRLAB_IB_PKEY_INDEX, and $GDRLAB_GDR_REG
// (auto | dmabuf | peermem: how GPU memory is registered; default auto), on each side.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "verbs/path.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace gdrlab {

// Makes `server` answer CONNECT: one verbs test per request, on the server's own GPU
// (ServerLimits::device, whatever the client asks), on the HCA nearest that GPU for every path
// (host included: one NIC per run), opened once per server and kept (the distance ranking opens
// every candidate); the traffic class and SL are the client's unless set on the server; its buffers reserved from the server's memory
// budget before anything is allocated. A test this side cannot set up (or that does not fit the
// budget) is answered with an ERROR frame and the session continues.
void add_verbs_wire(Server& server);


struct VerbsRunResult : RunResult {
  std::string mechanism;         // this side's registration: host, dmabuf, peermem
  std::string peer_mechanism;    // the server's
  std::string device_name;       // HCA used on this side
  int port = 0;
  int link_layer = 0;            // 1 InfiniBand, 2 RoCE
  int gid_index = 0;
  int path_mtu = 0;              // ibv_mtu code
  int gpu_hops = -1;             // PCIe hops HCA-GPU when the HCA was chosen by distance, else -1
  int traffic_class = 0, service_level = 0;            // this side's, as sent
  int peer_traffic_class = 0, peer_service_level = 0;  // the server's (it adopts ours unless set there)
};

struct VerbsSelection {
  std::string device;
  int port = 0;
  int gid_index = -1;
  int traffic_class = 0;   // GDRLAB_IB_TC or NCCL_IB_TC
  int service_level = 0;   // GDRLAB_IB_SL or NCCL_IB_SL
  bool traffic_class_set = false, service_level_set = false;  // named by a variable on this side
  int pkey_index = 0;      // GDRLAB_IB_PKEY_INDEX or NCCL_IB_PKEY
  int pkey = -1;           // GDRLAB_IB_PKEY (a P_Key value, hex or decimal)
  GpuRegistration registration = GpuRegistration::Auto;
};
// Reads GDRLAB_IB_DEV, GDRLAB_IB_GID_INDEX, GDRLAB_IB_TC, GDRLAB_IB_SL, GDRLAB_IB_PKEY(_INDEX) (each
// GDRLAB_ name first, then NCCL's where NCCL has one) and GDRLAB_GDR_REG; throws InvalidArgument on a bad value.
VerbsSelection verbs_selection_from_env();

class VerbsClient {
 public:
  VerbsClient(const std::string& host, int port, const std::string& token, int timeout_ms);
  const std::string& server_description() const { return session_->server_description(); }
  // spec.path is a Path code the verbs wire carries.
  VerbsRunResult run(const TestSpec& spec, Buffer* user = nullptr, size_t offset = 0);
  void close();

 private:
  std::unique_ptr<ClientSession> session_;
  int timeout_ms_;
  VerbsSelection sel_;
  // One protection domain per GPU the session's tests name: each on the HCA nearest that GPU.
  std::map<int, std::shared_ptr<ProtectionDomain>> pds_;
};

}  // namespace gdrlab
