// Fitting a server's limits to this process: descriptors (RLIMIT_NOFILE) and threads (RLIMIT_NPROC,
// the cgroup's pids.max, RLIMIT_AS at one stack per session thread).
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <string>
#include <vector>

#include "wire/session.h"

namespace gdrlab {
namespace {

constexpr int kFdsPerSession = 4;           // a session's socket, and a verbs session's device files
constexpr int kFdSlack = 32;                // the interpreter's own files, the listener, logs

int open_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
    n -= 3;  // ".", ".." and the directory's own descriptor
  }
  return std::max(n, 0);
}

long status_field_kb(const char* key) {  // a "Key:   N kB" line of /proc/self/status
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.compare(0, k.size(), k) == 0) return std::atol(line.c_str() + k.size());
  return -1;
}

// pids.max - pids.current of this process's cgroup (v2), or -1 where there is none or no limit.
long cgroup_threads_left() {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line))
    if (line.compare(0, 3, "0::") == 0) path = line.substr(3);
  if (path.empty()) return -1;
  std::ifstream mx("/sys/fs/cgroup" + path + "/pids.max"), cur("/sys/fs/cgroup" + path + "/pids.current");
  std::string m;
  long c = 0;
  if (!(mx >> m) || m == "max" || !(cur >> c)) return -1;
  return std::atol(m.c_str()) - c;
}

size_t thread_stack_bytes() {
  size_t stack = 8u << 20;
  pthread_attr_t attr;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &stack);
    pthread_attr_destroy(&attr);
  }
  return stack;
}

}  // namespace

std::vector<std::string> fit_limits_to_process(ServerLimits* lim) {
  std::vector<std::string> notes;
  // Descriptors: every place of the gate and every session holds some.
  const int open_now = open_fds();
  const long need = static_cast<long>(lim->max_handshakes) + lim->max_closing +
                    static_cast<long>(kFdsPerSession) * lim->max_clients + kFdSlack + open_now;
  rlimit nf{};
  if (getrlimit(RLIMIT_NOFILE, &nf) == 0 && nf.rlim_cur != RLIM_INFINITY && static_cast<long>(nf.rlim_cur) < need) {
    rlimit raised = nf;
    raised.rlim_cur = nf.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(need)
                                                  : std::min<rlim_t>(nf.rlim_max, static_cast<rlim_t>(need));
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) nf = raised;
    const long have = static_cast<long>(nf.rlim_cur);
    if (have < need) {
      const ServerLimits before = *lim;
      long room = have - kFdSlack - open_now;
      if (room < kFdsPerSession * lim->max_clients + 32)
        lim->max_clients = static_cast<int>(std::max(1L, (room - 32) / kFdsPerSession));
      room -= static_cast<long>(kFdsPerSession) * lim->max_clients;
      lim->max_handshakes = static_cast<int>(std::clamp(room / 3, 1L, static_cast<long>(lim->max_handshakes)));
      lim->max_closing = static_cast<int>(std::clamp(room - lim->max_handshakes, 1L, static_cast<long>(lim->max_closing)));
      std::string line = "RLIMIT_NOFILE allows " + std::to_string(have) + " open files (ulimit -n; hard limit " +
                         (nf.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(nf.rlim_max)) +
                         "), " + std::to_string(open_now) + " open now: lowered";
      if (lim->max_clients != before.max_clients)
        line += " --max-clients from " + std::to_string(before.max_clients) + " to " + std::to_string(lim->max_clients) + ",";
      line += " handshake places from " + std::to_string(before.max_handshakes) + " to " +
              std::to_string(lim->max_handshakes) + ", answered sockets from " + std::to_string(before.max_closing) +
              " to " + std::to_string(lim->max_closing);
      notes.push_back(line);
    }
  }
  // Threads: one per session (handshakes need none).
  long threads_left = -1;
  std::string which;
  auto lower = [&](long v, const std::string& name) {
    if (v >= 0 && (threads_left < 0 || v < threads_left)) {
      threads_left = v;
      which = name;
    }
  };
  const long own_threads = std::max(1L, status_field_kb("Threads"));  // a count, not kB: the parser is the same
  rlimit np{};
  if (geteuid() != 0 && getrlimit(RLIMIT_NPROC, &np) == 0 && np.rlim_cur != RLIM_INFINITY)
    lower(static_cast<long>(np.rlim_cur) - own_threads, "RLIMIT_NPROC (ulimit -u; this user's other processes count too)");
  lower(cgroup_threads_left(), "the cgroup's pids.max (a container's process limit)");
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const long vm_kb = status_field_kb("VmSize");
    const long stack_kb = static_cast<long>(thread_stack_bytes() / 1024) + 64;
    if (vm_kb >= 0) lower((static_cast<long>(as.rlim_cur / 1024) - vm_kb) / stack_kb, "RLIMIT_AS (ulimit -v) at one thread stack each");
  }
  if (threads_left >= 0 && threads_left - 4 < lim->max_clients) {
    const int before = lim->max_clients;
    lim->max_clients = static_cast<int>(std::max(1L, threads_left - 4));
    notes.push_back(which + " leaves room for about " + std::to_string(std::max(0L, threads_left)) +
                    " more threads: lowered --max-clients from " + std::to_string(before) + " to " +
                    std::to_string(lim->max_clients) + " (a session thread each)");
  }
  return notes;
}

}  // namespace gdrlab
