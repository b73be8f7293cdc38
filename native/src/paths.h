// The transfer paths of DESIGN.md over the tcp wire. A PathEndpoint owns the intermediate buffers
// one side needs to send and receive messages of one size over one path:
//   host       host buffer -> wire -> host buffer
//   staged     GPU -D2H-> pinned bounce -memcpy-> wire buffer -> wire (mirror on receive)
//   shared     GPU -D2H-> pinned wire buffer -> wire (GPUDirect 1.0: one host copy fewer)
//   pipelined  shared cut into chunks over `depth` pinned buffers, copies overlapping the wire
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "buffer.h"
#include "cuda_api.h"
#include "wire_tcp.h"

namespace gdrlab {

enum class Path : uint8_t { Host = 0, Staged = 1, Shared = 2, Pipelined = 3 };
constexpr int kPathCount = 4;

const char* path_name(Path p);
Path path_from_name(const std::string& name);  // throws InvalidArgument listing valid names
Path path_from_code(uint8_t code);             // throws Protocol for an unknown code
bool path_needs_gpu(Path p);

// Checks every wire's endpoints share, in this order: message size (1 byte to 1 GiB), a usable
// GPU for a GPU path, the pipeline's chunk and depth (chunk clamped to the message; pipelined
// only), and that a caller's buffer is of the kind the path moves and holds the message.
// `path` and `gpu_paths` (the wire's GPU paths, for the hint) name things in the error text.
void check_endpoint(const char* wire, const char* path, bool gpu, bool pipelined, size_t size, size_t* chunk,
                    int depth, const Buffer* user, size_t offset, const char* gpu_paths);

struct PathConfig {
  Path path = Path::Host;
  size_t size = 0;
  size_t chunk = 256 * 1024;
  int depth = 4;
  int device = 0;
};

class PathEndpoint {
 public:
  // user: the application's buffer (nullptr: allocate one of the path's kind). Messages live at
  // user[offset, offset+size).
  PathEndpoint(const PathConfig& cfg, Buffer* user = nullptr, size_t offset = 0);
  ~PathEndpoint();
  PathEndpoint(const PathEndpoint&) = delete;
  PathEndpoint& operator=(const PathEndpoint&) = delete;

  void send(TcpWire& wire);
  void recv(TcpWire& wire);

  Buffer& user() { return *user_; }
  size_t offset() const { return offset_; }
  const PathConfig& config() const { return cfg_; }

 private:
  void send_pipelined(TcpWire& wire);
  void recv_pipelined(TcpWire& wire);

  PathConfig cfg_;
  size_t offset_ = 0;
  std::unique_ptr<Buffer> own_user_;
  Buffer* user_ = nullptr;
  std::unique_ptr<Buffer> bounce_;  // staged: CUDA-pinned bounce buffer
  std::unique_ptr<Buffer> wire_;    // staged: the wire's pageable buffer; shared: pinned
  std::vector<std::unique_ptr<Buffer>> slots_;  // pipelined: pinned chunk buffers
  CUstream stream_ = nullptr;
  std::vector<CUevent> events_;
};

}  // namespace gdrlab
