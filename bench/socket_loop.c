/* Reference for bench_engine.py: a plain C socket loop between two processes over loopback, with
 * the message pattern of `gdrlab bench --mode bw` (send WINDOW messages of SIZE bytes, then wait for
 * a one-byte acknowledgement). No framing, no verification: the ceiling for the tcp wire.
 *   cc -O2 socket_loop.c -o socket_loop && ./socket_loop SIZE REPS [WINDOW]
 * Prints {"size": N, "window": W, "gbps": [...]} */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int xfer(int fd, char* p, size_t n, int is_send) {
  while (n > 0) {
    ssize_t r = is_send ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s SIZE REPS [WINDOW]\n", argv[0]); return 2; }
  size_t size = strtoull(argv[1], NULL, 10);
  int reps = atoi(argv[2]), window = argc > 3 ? atoi(argv[3]) : 1, warm = 2, one = 1;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (bind(ls, (struct sockaddr*)&a, sizeof a) || listen(ls, 1) || getsockname(ls, (struct sockaddr*)&a, &al)) {
    perror("listen");
    return 1;
  }
  char* buf = malloc(size);
  memset(buf, 1, size);
  pid_t pid = fork();
  if (pid == 0) {
    int c = accept(ls, NULL, NULL);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (int i = 0; i < (reps + warm) * window; ++i) {
      if (xfer(c, buf, size, 0)) _exit(1);
      if ((i + 1) % window == 0 && xfer(c, "A", 1, 1)) _exit(1);
    }
    _exit(0);
  }
  int s = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(s, (struct sockaddr*)&a, sizeof a)) { perror("connect"); return 1; }
  printf("{\"size\": %zu, \"window\": %d, \"gbps\": [", size, window);
  for (int r = 0; r < reps + warm; ++r) {
    double t0 = now();
    char ack;
    for (int k = 0; k < window; ++k)
      if (xfer(s, buf, size, 1)) return 1;
    if (xfer(s, &ack, 1, 0)) return 1;
    double dt = now() - t0;
    if (r >= warm) printf("%s%.4f", r > warm ? ", " : "", size * (double)window / dt / 1e9);
  }
  printf("]}\n");
  close(s);
  waitpid(pid, NULL, 0);
  return 0;
}
